"""Formatting nanosecond figures for people (terminal tables and dashboards alike)."""

from roseprof.model import spelled_region


def ms(ns) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.3f}"


def us(ns) -> str:
    return "-" if ns is None else f"{ns / 1e3:,.1f}"


def region_name(r: dict) -> str:
    """A summary region (name and domain apart) as every table spells a region (model.spelled_region)."""
    return spelled_region(r["name"], r.get("domain"))


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


STEADY_HEADERS = (
    "region",
    "host µs mean",
    "host µs p50",
    "GPU µs mean",
    "GPU µs p50",
    "own CPU mean",
    "own CPU p5",
)


def steady_table(steady: dict, regions: list[dict], whole: str) -> tuple[list[str], list[list[str]]]:
    """The steady state's per-step table (terminal and run dashboard): the whole step (`whole`: its label), then
    each region; host and GPU time, and each region's own thread CPU time (mean and p5: what a CPU diff judges it
    by) where the run has it. A column no row has a figure in is left out (a CPU run's GPU columns, a run
    captured without CPU times)."""

    def us_or_dash(v) -> str:
        return "-" if not v else us(v)  # a region that never ran in a step: "-"

    st = steady["step"]
    keys = ("host_mean_ns", "host_p50_ns", "gpu_mean_ns", "gpu_p50_ns")
    step_cpu = (st.get("cpu_mean_ns"), st.get("cpu_p5_ns"))
    rows = [[whole, *(us_or_dash(st[k]) for k in keys), *(us_or_dash(v) for v in step_cpu)]]
    for r in regions:
        cpu = (r.get("cpu_own_mean_ns"), r.get("cpu_own_p5_ns"))
        rows.append([r["name"], *(us_or_dash(r[k]) for k in keys), *(us_or_dash(v) for v in cpu)])
    keep = [i for i in range(len(STEADY_HEADERS)) if i < 3 or any(row[i] != "-" for row in rows)]
    return [STEADY_HEADERS[i] for i in keep], [[row[i] for i in keep] for row in rows]
