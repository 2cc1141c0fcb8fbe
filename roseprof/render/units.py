"""Formatting nanosecond figures for people (terminal tables and dashboards alike)."""


def ms(ns) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.3f}"


def us(ns) -> str:
    return "-" if ns is None else f"{ns / 1e3:,.1f}"


def region_name(r: dict) -> str:
    """A summary region (name and domain apart) as every table spells a region: `domain:name` outside the default
    domain (model.spelled_range_names)."""
    return f"{r['domain']}:{r['name']}" if r.get("domain") else r["name"]


def region_cells(r: dict) -> list[str]:
    """One summary region as the cells every region table shows: name (with its domain), count, total and self
    ms, p50 and p99 µs, GPU projection and kernel ms."""
    return [
        region_name(r),
        f"{r['count']:,}",
        ms(r["total_ns"]),
        ms(r["self_ns"]),
        us(r["p50_ns"]),
        us(r["p99_ns"]),
        ms(r["gpu_proj_ns"]),
        ms(r["gpu_kernel_ns"]),
    ]
