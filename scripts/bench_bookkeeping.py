"""What the engine core's bookkeeping costs per step on the host: metrics, the flight recorder, the token events.

The serving engine core (roseinfer/serve/engine_core.py) is driven as `_loop` drives it, with a model runner that
computes nothing (it hands out KV blocks as the real one does, so rollovers happen, and returns a token at once):
what is left of a step is the scheduler, the engine's postprocess and the core's bookkeeping, on a real Engine and
a real EngineCore whose events are pickled through a real pipe to a reader process. The workload: --streams
requests of --tokens tokens each, continuous (a finished request is replaced by a new one at once), their lengths
staggered at the start so that about streams/tokens of them finish in every step, as in a server that has run a
while.

    PYTHONPATH=. python scripts/bench_bookkeeping.py          # 64 x 256: the four configurations, then the pieces
    PYTHONPATH=. python scripts/bench_bookkeeping.py --tokens 512 --only pieces
    PYTHONPATH=. python scripts/bench_bookkeeping.py --metrics-ab /tmp/base --rounds 11   # metrics.py, before/after

Both parts measure CPU time, not wall time (the box is shared): the process' CPU time for whole steps (the loop's
thread and the outbox thread that pickles), the replaying thread's for the pieces.
1. The four configurations (metrics and recorder on/off: `roseinfer serve` vs `--no-metrics
   --flight-recorder-steps 0`, the "off" server of bench_serve.py's pairs), interleaved round by round: CPU
   microseconds of a whole step, median over --rounds; "- off" is the median of the rounds' differences to "off";
   Python's collections during the round (gc.callbacks) beside them.
2. The pieces, metrics and recorder on: a real run records the arguments of each piece's calls, then each piece is
   replayed alone on those arguments (median of --repeats replays), microseconds a call times calls a step. A timer
   around each call would cost as much as the cheap pieces themselves (~0.3-2 µs a call here).
Before/after on one machine: run it with PYTHONPATH pointing at each checkout (`git archive REV roseinfer | tar -x
-C DIR`), from a folder outside both (so the current folder does not shadow PYTHONPATH).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from pathlib import Path

from instant_engine_core import Bench

from roseinfer import tracing

CONFIGS = {
    "on": (True, 4096),  # roseinfer serve's default
    "metrics only": (True, 0),
    "recorder only": (False, 4096),
    "off": (False, 0),  # --no-metrics --flight-recorder-steps 0 (bench_serve.py's "off" server)
}


def configurations(args) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    names = ["off"] + [c for c in (args.configs or ",".join(CONFIGS)).split(",") if c and c != "off"]
    unknown = [c for c in names if c not in CONFIGS]
    if unknown:
        raise SystemExit(f"bench_bookkeeping: no configuration {unknown[0]!r} (one of: {', '.join(CONFIGS)})")
    benches = {name: Bench(*CONFIGS[name], args.streams, args.tokens) for name in names}
    for bench in benches.values():
        bench.run(args.warmup)  # the recorder's ring full, the requests staggered
    times: dict[str, list[float]] = {name: [] for name in benches}
    gc_us: dict[str, list[float]] = {name: [] for name in benches}
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]  # no configuration always first
        for name in order:
            gct = GcTimer()
            times[name].append(benches[name].run(args.steps))
            gct.close()
            gc_us[name].append(gct.ns / args.steps / 1e3)
    for bench in benches.values():
        bench.close()
    return times, gc_us


class Recorder:
    """Records the arguments of some calls during a real run (they are replayed, timed, afterwards): no timer
    around each call, whose own cost would be as large as the cheap pieces."""

    def __init__(self) -> None:
        self.args: dict[str, list[tuple]] = {}
        self._wrapped: list[tuple[object, str, object]] = []

    def capture(self, obj: object, name: str, label: str) -> None:
        method = getattr(obj, name)
        self._wrapped.append((obj, name, vars(obj).get(name)))
        calls = self.args.setdefault(label, [])

        def captured(*args, **kwargs):
            calls.append((args, kwargs))
            return method(*args, **kwargs)

        setattr(obj, name, captured)

    def restore(self) -> None:
        """The methods as they were (a replay must not capture its own calls)."""
        for obj, name, own in reversed(self._wrapped):
            if own is None:
                delattr(obj, name)
            else:
                setattr(obj, name, own)


class GcTimer:
    """Python's collections during a run, through gc.callbacks."""

    def __init__(self) -> None:
        self.ns, self.collections, self._start = 0, 0, 0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.thread_time_ns()
        else:
            self.ns += time.thread_time_ns() - self._start
            self.collections += 1

    def close(self) -> None:
        gc.callbacks.remove(self._on_gc)


def replay_ns(call, calls: list[tuple], repeats: int) -> float:
    """Median over `repeats` of the ns one call takes, replaying the captured arguments in order."""
    times = []
    clock = time.thread_time_ns  # CPU time of this thread: a shared box's waits for a core left out
    for _ in range(repeats):
        t0 = clock()
        for args, kwargs in calls:
            call(*args, **kwargs)
        times.append((clock() - t0) / max(len(calls), 1))
    return statistics.median(times)


def pieces(args) -> list[tuple[str, float, float, float]]:
    """(piece, calls a step, µs a call, µs a step) for each piece of the bookkeeping, metrics and recorder on."""
    import pickle

    from roseinfer.flight_recorder import FlightRecorder
    from roseinfer.serve.metrics import ServerMetrics
    from roseinfer.steplog import request_record

    bench = Bench(True, 4096, args.streams, args.tokens)
    bench.run(args.warmup)
    core, engine, rec = bench.core, bench.engine, Recorder()
    rec.capture(core.metrics, "step_done", "step_done")
    rec.capture(core.metrics, "request_finished", "request_finished")
    rec.capture(engine.flight, "step", "recorder.step")
    rec.capture(engine, "_log_request", "log_request")
    rec.capture(engine, "_log_decode_step", "log_decode_step")
    rec.capture(engine, "on_token", "on_token")
    rec.capture(core.out, "put", "put")
    step_ends: list[int] = []  # where each step's on_token calls end
    owners: dict = {}  # every sequence's (key, index), kept for the replays
    publish = core._publish

    def keep_emitted(start_ns, finished):
        step_ends.append(len(rec.args["on_token"]))
        owners.update(core._owner)
        return publish(start_ns, finished)

    core._publish = keep_emitted
    steps = args.steps
    bench.run(steps)
    bench.close()
    rec.restore()
    core._publish = publish
    a, r = rec.args, args.repeats
    per_step = lambda label: len(a[label]) / steps  # noqa: E731
    rows = []

    def row(piece: str, calls_per_step: float, ns_per_call: float) -> None:
        rows.append((piece, calls_per_step, ns_per_call / 1e3, calls_per_step * ns_per_call / 1e3))

    metrics = ServerMetrics()
    row("metrics.step_done", per_step("step_done"), replay_ns(metrics.step_done, a["step_done"], r))
    row(
        "metrics.request_finished (per finish)",
        per_step("request_finished"),
        replay_ns(metrics.request_finished, a["request_finished"], r),
    )
    flight = FlightRecorder(4096)
    for call_args, call_kwargs in a["recorder.step"][:4097]:  # full: each step also drops the oldest
        flight.step(*call_args, **call_kwargs)
    row(
        "recorder.step (the ring's tuple)",
        per_step("recorder.step"),
        replay_ns(flight.step, a["recorder.step"], r),
    )
    row(
        "request record into the ring (per finish)",
        per_step("log_request"),
        replay_ns(lambda seq: flight.write(request_record(seq)), a["log_request"], r),
    )
    flight.close()
    # the engine's step record and counters, with the recorder (the engine's own) and without (steplog None)
    on_ns = replay_ns(engine._log_decode_step, a["log_decode_step"], r)
    engine.steplog = None
    off_ns = replay_ns(engine._log_decode_step, a["log_decode_step"], r)
    row("engine._log_decode_step, recorder on (incl. ring)", per_step("log_decode_step"), on_ns)
    row("engine._log_decode_step, recorder off", per_step("log_decode_step"), off_ns)
    # the per-token hook and the step event's token tuples (before: _on_token, then _tokens; after: _on_token),
    # metrics on and off
    on_token, core._owner = a["on_token"], owners
    bounds = list(zip([0] + step_ends[:-1], step_ends))
    for metrics_on in (True, False):
        core.metrics = ServerMetrics() if metrics_on else None

        def token_path() -> None:
            for start, end in bounds:
                core._emitted, core._step_tokens, core._sent, core._prefilled = [], [], 0, []
                for call_args, _ in on_token[start:end]:
                    core._on_token(*call_args)
                if hasattr(core, "_tokens"):  # the code before this session
                    core._tokens(0)

        state = "on" if metrics_on else "off"
        per_step_ns = replay_ns(token_path, [((), {})], r) / max(len(bounds), 1)
        row(
            f"token path: _on_token x {len(on_token) / steps:.0f}, event tuples; metrics {state}",
            1.0,
            per_step_ns,
        )
    row("outbox.put", per_step("put"), replay_ns(_Put().put, a["put"], r))
    row(
        "pickling the events (outbox thread)",
        per_step("put"),
        replay_ns(lambda e: pickle.dumps([e], protocol=pickle.HIGHEST_PROTOCOL), a["put"], r),
    )
    return rows


class _Put:
    """Outbox.put's work without a thread to wake (the lock, the deque, the notify)."""

    def __init__(self) -> None:
        import collections
        import threading

        self._pending = collections.deque()
        self._ready = threading.Condition()

    def put(self, event) -> None:
        with self._ready:
            self._pending.append(event)
            self._ready.notify()
        if len(self._pending) > 1024:
            self._pending.clear()


def metrics_ab(base: str, rounds: int) -> None:
    """The metrics' two calls, this checkout's metrics.py against BASE's, loaded side by side in one process and
    interleaved: the ratio that the replays above are too noisy to give on a shared box."""
    import importlib.util
    from types import SimpleNamespace

    def load(path: Path, name: str):
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    here = Path(__file__).resolve().parent.parent / "roseinfer" / "serve" / "metrics.py"
    sides = {"before": load(Path(base) / "roseinfer" / "serve" / "metrics.py", "metrics_before"),
             "after": load(here, "metrics_after")}  # fmt: skip
    t0 = 10**12
    requests = [
        SimpleNamespace(
            finish_reason="length", arrival_ns=t0 - 2_000_000, request_id=f"cmpl-{k}",
            token_ns=[t0 + 600_000 * i + (i * 7919 + k * 31) % 300_000 for i in range(512)],
        )
        for k in range(50)
    ]  # fmt: skip
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for side, module in sides.items():
            m = module.ServerMetrics()
            t = time.thread_time_ns()
            for i in range(5120):
                m.step_done(0.0006 + (i % 7) * 1e-5, 64, [], 64, True)
            times.setdefault(("step_done", side), []).append((time.thread_time_ns() - t) / 5120 / 1e3)
            t = time.thread_time_ns()
            for seq in requests:
                m.request_finished(seq, t0 - 1_000_000)
            times.setdefault(("request_finished, 512 tokens", side), []).append(
                (time.thread_time_ns() - t) / len(requests) / 1e3
            )
    print(f"\nmetrics.py before ({base}) / after, interleaved, {rounds} rounds: µs a call, median (min)")
    for call in ("step_done", "request_finished, 512 tokens"):
        b, a = times[(call, "before")], times[(call, "after")]
        print(
            f"  {call:30s} {statistics.median(b):7.2f} ({min(b):.2f}) -> {statistics.median(a):7.2f} ({min(a):.2f})"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", type=int, default=64, help="requests running together")
    p.add_argument("--tokens", type=int, default=256, help="tokens each request generates")
    p.add_argument("--steps", type=int, default=2000, help="steps a configuration runs in one round")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--warmup", type=int, default=5000, help="steps before timing (the recorder's ring fills)")
    p.add_argument("--repeats", type=int, default=7, help="replays of each piece's captured calls")
    p.add_argument("--only", choices=["configs", "pieces"], default=None)
    p.add_argument(
        "--configs",
        default=None,
        help="comma-separated configurations to compare with 'off' (default: all four)",
    )
    p.add_argument(
        "--metrics-ab",
        metavar="BASE",
        default=None,
        help="only this: metrics.py of BASE (a checkout's root) against this one's, in one process, interleaved",
    )
    args = p.parse_args()
    if args.metrics_ab:
        metrics_ab(args.metrics_ab, args.rounds)
        return
    tracing.configure(nvtx=False, record_function=False)
    print(
        f"{args.streams} streams x {args.tokens} tokens, continuous; {args.rounds} rounds x {args.steps} steps"
    )
    if args.only != "pieces":
        times, gc_us = configurations(args)
        print(
            f"\nCPU µs a step (median of {args.rounds} rounds; '- off': the median of the rounds' differences)"
        )
        print(f"{'configuration':16s} {'µs/step':>9s} {'min-max':>17s} {'- off':>8s} {'gc µs/step':>11s}")
        for name, ts in times.items():
            deltas = [a - b for a, b in zip(ts, times["off"])]
            print(
                f"{name:16s} {statistics.median(ts):9.2f} {min(ts):8.2f}-{max(ts):<8.2f} "
                f"{statistics.median(deltas):8.2f} {statistics.median(gc_us[name]):11.2f}"
            )
    if args.only != "configs":
        rows = pieces(args)
        print(f"\npieces, metrics and recorder on, each replayed alone (median of {args.repeats} replays)")
        print(f"{'piece':52s} {'calls/step':>10s} {'µs/call':>9s} {'µs/step':>9s}")
        for piece, calls, us_call, us_step in rows:
            print(f"{piece:52s} {calls:10.3f} {us_call:9.2f} {us_step:9.2f}")


if __name__ == "__main__":
    main()
