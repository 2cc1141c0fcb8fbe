"""Formatting nanosecond figures for people (terminal tables and dashboards alike)."""


def ms(ns) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.3f}"


def us(ns) -> str:
    return "-" if ns is None else f"{ns / 1e3:,.1f}"
