"""The load's progress reports (load/runner._report), which `roseprof live` opens its window on: timed on the
event loop the load runs, here without a server."""

import asyncio

from roseprof.load import runner
from roseprof.load.client import Record


def test_the_first_answer_with_requests_in_flight_is_reported_at_once(monkeypatch):
    """`roseprof live` opens its window on a report with a TTFT and requests in flight (load/runner._report): one
    comes as soon as there is one, not only on the period's ticks, so a load shorter than the period still opens
    one; and not in the gap between a closed loop's first requests ending and the next ones sent (a CI run's load
    opened no window so). The period here is an hour: every report before it is an early one."""
    monkeypatch.setattr(runner, "REPORT_S", 3600.0)
    state, reports = runner.LoadState(start=0.0), []

    async def polls(n: int) -> None:
        for _ in range(n):
            await asyncio.sleep(runner.FIRST_POLL_S)

    async def load() -> None:
        task = asyncio.create_task(runner._report(state, reports.append))
        first = Record(0, 8, 4, sent=0.0)
        state.records.append(first)
        state.active = 1
        await polls(20)  # in flight, nothing answered yet: no report
        first.times, first.end = [0.01, 0.02], 0.02
        state.active, state.answered = 0, 1
        await polls(20)  # answered, none in flight (the closed loop's gap): no report
        assert reports == []
        state.records.append(Record(1, 8, 4, sent=0.03))
        state.active = 1
        for _ in range(1000):  # at most 10 s of polls on a busy machine
            if reports:
                break
            await polls(1)
        await polls(20)  # and only once
        task.cancel()

    asyncio.run(load())
    assert len(reports) == 1 and reports[0]["in_flight"] == 1 and reports[0]["ttft_p50_ms"] is not None, (
        reports
    )
