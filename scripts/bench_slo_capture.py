"""SLO-triggered capture's cost on the engine core's loop (CPU): the checks it adds to every step when
`roseinfer serve --capture-on itl=...,ttft=...,e2e=...` is on (no breach: the step gap's comparison, a prefill's
token now and then), and what a capture costs the loop when one is written (turning the flight recorder's last
before + after + 1 steps into records; the JSON and the file are the writer thread's), beside the writer's own time.

    python scripts/bench_slo_capture.py --batch-sizes 1,16,64,256

Median of --repeats timings of --iters steps each, in microseconds per step.
"""

import argparse
import statistics
import tempfile
import time
from types import SimpleNamespace

from roseinfer.flight_recorder import FlightRecorder
from roseinfer.serve.slo_capture import CaptureSpec, SloCapture, parse_capture_on


def _seqs(batch_size: int) -> list:
    return [
        SimpleNamespace(id=i, request_id=f"cmpl-{i:032x}", arrival_ns=0, prompt_ids=[0] * 16, output_ids=[0] * 64,
                        token_ns=list(range(0, 64_000, 1000)), token_step=list(range(64)), preemptions=0,
                        finish_reason=None)
        for i in range(batch_size)
    ]  # fmt: skip


def checks_us(batch_size: int, iters: int, folder: str) -> float:
    """Per step: after_step with the step's tokens, no breach (the common case), and one prefill token in 16
    steps."""
    capture = SloCapture(CaptureSpec(parse_capture_on("itl=2ms,ttft=500ms,e2e=5s"), folder))
    flight = FlightRecorder(16)
    seqs = _seqs(batch_size)
    running = lambda: seqs  # noqa: E731
    emitted = [(seq, 0, 63) for seq in seqs]
    t0 = time.perf_counter_ns()
    for i in range(iters):
        if i % 16 == 0:
            capture.on_prefill_token(seqs[0])
        capture.after_step(flight, running, emitted)
    took = (time.perf_counter_ns() - t0) / iters / 1e3
    capture.close()
    return took


def recorder_us(batch_size: int, iters: int) -> float:
    """Beside it, for scale on a machine of any speed: the flight recorder's own cost per step (a full ring)."""
    flight = FlightRecorder(4096)
    seqs = _seqs(batch_size)
    for i in range(4097):
        flight.step(i, i + 1, batch_size, 0, 0, seqs, launched=True, bucket=None)
    t0 = time.perf_counter_ns()
    for i in range(iters):
        flight.step(i, i + 1, batch_size, 0, 0, seqs, launched=True, bucket=None)
    return (time.perf_counter_ns() - t0) / iters / 1e3


def capture_ms(batch_size: int, before: int, after: int, folder: str) -> tuple[float, float]:
    """(the loop's part of one capture, the writer thread's part), ms: a full recorder of 4096 steps."""
    capture = SloCapture(CaptureSpec({"itl": 1}, folder, before, after, interval_s=0))
    flight = FlightRecorder(4096)
    seqs = _seqs(batch_size)
    for i in range(4096):
        flight.step(i, i + 1, batch_size, 0, 0, seqs, launched=True, bucket=None)
    seqs[0].token_step[-1] = flight.step_index - 1
    capture.on_prefill_token(seqs[0])  # a breach (1 ns) at the last step
    capture.after_step(flight, lambda: seqs, [])
    for i in range(after):
        flight.step(i, i + 1, batch_size, 0, 0, seqs, launched=True, bucket=None)
    t0 = time.perf_counter_ns()
    capture.after_step(flight, lambda: seqs, [])  # written now
    loop = (time.perf_counter_ns() - t0) / 1e6
    t0 = time.perf_counter_ns()
    capture.close()  # waits for the writer
    return loop, (time.perf_counter_ns() - t0) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-sizes", default="1,16,64,256")
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--before", type=int, default=64)
    ap.add_argument("--after", type=int, default=16)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for b in (int(x) for x in args.batch_sizes.split(",")):
            checks, recorder = [], []
            for _ in range(args.repeats):  # interleaved, so a busy machine slows both alike
                checks.append(checks_us(b, args.iters, folder))
                recorder.append(recorder_us(b, args.iters))
            loop, writer = zip(*(capture_ms(b, args.before, args.after, folder) for _ in range(args.repeats)))
            print(
                f"batch {b:4d}: checks {statistics.median(checks):6.2f} us/step (min {min(checks):.2f}, max "
                f"{max(checks):.2f}; the flight recorder's step beside it {statistics.median(recorder):.2f}); a capture of {args.before + args.after + 1} steps: the loop "
                f"{statistics.median(loop):.2f} ms, the writer thread {statistics.median(writer):.2f} ms"
            )


if __name__ == "__main__":
    main()
