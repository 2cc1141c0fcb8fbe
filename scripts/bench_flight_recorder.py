"""The flight recorder's cost per decode step on the host (CPU): what the engine adds to a step when the recorder
is on and the step log off (roseinfer serve's default): one tuple, the ring's append (and, once full, dropping
the oldest step with its prefills and requests), a request record now and then; and what a dump of the full ring
costs (made between two steps, when /debug/steps asks).

    python scripts/bench_flight_recorder.py --batch-sizes 1,16,64,256 --steps 4096

Median of --repeats timings of --iters steps each, in microseconds per step.
"""

import argparse
import statistics
import time
from types import SimpleNamespace

from roseinfer.flight_recorder import FlightRecorder
from roseinfer.steplog import request_record


def per_step_us(batch_size: int, capacity: int, iters: int, finish_every: int) -> float:
    recorder = FlightRecorder(capacity)
    batch = [SimpleNamespace(id=i) for i in range(batch_size)]
    seq = SimpleNamespace(
        id=1, arrival_ns=0, prompt_ids=[0] * 16, output_ids=[0] * 64, token_ns=[0] * 64, token_step=[0] * 64,
        preemptions=0, request_id="cmpl-x", finish_reason="length",
    )  # fmt: skip
    for _ in range(capacity + 1):  # full: every step also drops the oldest
        recorder.step(0, 1, batch_size, 0, 0, batch, launched=True, bucket=None)
    t0 = time.perf_counter_ns()
    for i in range(iters):
        # what Engine._log_decode_step does with a sink on
        recorder.step(i, i + 1, len(batch), 0, 0, batch, launched=True, bucket=None)
        if i % finish_every == 0:  # a request finishing now and then (Engine._log_request)
            recorder.write(request_record(seq))
    step_us = (time.perf_counter_ns() - t0) / iters / 1e3
    t0 = time.perf_counter_ns()
    recorder.dump()
    return step_us, (time.perf_counter_ns() - t0) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-sizes", default="1,16,64,256")
    ap.add_argument("--steps", type=int, default=4096, help="the recorder's capacity")
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--finish-every", type=int, default=2, help="a request record every this many steps")
    args = ap.parse_args()
    for b in (int(x) for x in args.batch_sizes.split(",")):
        runs, dumps = zip(
            *(per_step_us(b, args.steps, args.iters, args.finish_every) for _ in range(args.repeats))
        )
        print(
            f"batch {b:4d}: {statistics.median(runs):6.2f} us/step (min {min(runs):.2f}, max {max(runs):.2f}); "
            f"a dump of {args.steps} steps {statistics.median(dumps):.1f} ms"
        )


if __name__ == "__main__":
    main()
