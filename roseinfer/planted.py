"""Tests only: the slowdowns planted in a region, which tracing's regions apply when entered
(ROSEINFER_TEST_SLEEP_REGION, ROSEINFER_TEST_BUSY_REGION, ROSEINFER_TEST_SLOW_EVERY, ROSEINFER_TEST_SLEEP_RANK;
read into tracing.STATE by tracing.configure). They slow a region and turn no region clock on: a slowed engine is
a plain engine (tracing.STATE.clocks)."""

from __future__ import annotations

import sys
import time

_thread_time_ns = time.thread_time_ns


def burn(ns: int) -> None:
    """Tests only (ROSEINFER_TEST_BUSY_REGION): spend `ns` of this thread's CPU time. The injected sleep costs
    no CPU, so a diff that judges regions by their CPU time (a run with the step log's CPU times) cannot see it;
    this is the planted slowdown such a diff must find."""
    end = _thread_time_ns() + ns
    while _thread_time_ns() < end:
        pass


def slowed_entry(state) -> bool:
    """Tests only: whether this entry into the slowed region is slowed (ROSEINFER_TEST_SLOW_EVERY: its every Nth).
    `state`: tracing.STATE."""
    if state.slow_every is None:
        return True
    state.slow_entries += 1
    return state.slow_entries % state.slow_every == 0


def sleeps_on_this_rank(state) -> bool:
    """Tests only: whether this process is the rank ROSEINFER_TEST_SLEEP_RANK names. Asked when the region is
    entered, not when tracing is configured: a worker imports tracing before it joins the process group. The
    group is looked up without importing roseinfer.distributed (which imports tracing); no group: rank 0."""
    if state.sleep_rank is None:
        return True
    dist = sys.modules.get("roseinfer.distributed")
    group = dist.current() if dist is not None else None
    return (group.rank if group is not None else 0) == state.sleep_rank
