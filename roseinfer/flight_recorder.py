"""The flight recorder: the step log's records of the last N decode steps, kept in memory by a serving engine
(`roseinfer serve --flight-recorder-steps N`, `GET /debug/steps`), so that a slow request can be explained after
the fact without a profiler having been on.

It is a second sink for the records the engine already writes (steplog.StepRecords): the same dicts, in the
order written, in one deque; no JSON on the engine loop (a dump serialises). The ring is bounded by steps: when
a step beyond N arrives, the oldest step goes, with the records written before it (its prefills, preemptions,
requests finished, Python's collections). The per-step cost is a tuple and a deque append or two: a step's record (its ids) is made only by a dump
(scripts/bench_flight_recorder.py).
"""

from __future__ import annotations

import collections
import os
import time
from typing import Any

from roseinfer.names import STEPLOG_VERSION
from roseinfer.steplog import GcWatch, StepRecords, request_record, step_record


class FlightRecorder(StepRecords):
    def __init__(self, steps: int, meta: dict[str, Any] | None = None) -> None:
        if steps < 1:
            raise ValueError(f"a flight recorder keeps at least one step, got {steps}")
        self.capacity = steps
        self.records: collections.deque[dict[str, Any]] = collections.deque()
        self.steps = 0  # step records in `records`
        self._gc = GcWatch()  # collections, into the ring at the next step
        self.meta = {
            "type": "meta",
            "version": STEPLOG_VERSION,
            "clock": "monotonic_ns",
            "pid": os.getpid(),
            "flight_recorder_steps": steps,
            **(meta or {}),
        }

    def write(self, record: dict[str, Any]) -> None:
        self.records.append(record)

    def step(self, *args: Any, **extra: Any) -> None:
        if self._gc.pending:
            self.records.extend(self._gc.take())
        # A tuple, made a record only by a dump; the batch list is the scheduler's own for this step (never
        # changed after), its ids read then.
        self.records.append((self.step_index, args, extra))
        self.step_index += 1
        self.steps += 1
        if self.steps > self.capacity:
            records = self.records
            while type(records.popleft()) is not tuple:
                pass
            self.steps -= 1

    def dump(self, last: int | None = None, running=()) -> list[dict[str, Any]]:
        """The meta record, then the records of the last `last` steps (all kept: None) in the order written, then a
        request record for each of `running` (sequences not finished: what they emitted so far, so a reader can
        name every request of the steps). Called between steps (the engine core's queries), never during one."""
        self.records.extend(self._gc.take())
        records = list(self.records)  # steps still tuples: only the ones sent become records
        take = self.steps if last is None else max(0, min(last, self.steps))
        start = len(records)
        seen = 0
        while seen < take and start > 0:  # back to the `take`-th step from the end
            start -= 1
            seen += type(records[start]) is tuple
        if take == 0:
            start = len(records)
        # the records written after the step before the first one taken belong to the first (its prefills)
        while start > 0 and type(records[start - 1]) is not tuple and take > 0:
            start -= 1
        window = [r if type(r) is not tuple else step_record(r[0], *r[1], **r[2]) for r in records[start:]]
        real, mono = time.time_ns(), time.monotonic_ns()
        meta = {**self.meta, "realtime_ns": real, "monotonic_ns": mono, "steps_kept": take}
        out = [meta] + window
        out += [running_request(seq) for seq in running]
        return out

    def close(self) -> None:
        self._gc.close()


def running_request(seq) -> dict[str, Any]:
    """A request record (steplog's shape) of a sequence still in the engine, `finish_reason` null; its lists
    copied (the engine goes on appending while the reply is sent)."""
    record = request_record(seq)
    return {**record, "token_ns": list(seq.token_ns), "token_step": list(seq.token_step)}
