"""SLO-triggered capture (`roseinfer serve --capture-on itl=2ms,ttft=500ms,e2e=5s --capture-dir DIR`): when a
request breaches a limit, the flight recorder's steps around the breach (`--capture-steps-before` steps before the
breach's step, `--capture-steps-after` after it) are written, with the requests of those steps, as one step-log
file in DIR. `roseprof import DIR` makes each file a run (the engine writes records; only roseprof makes runs).

What is checked, on the engine core's loop (only when --capture-on is given; off, the core never calls here):
  itl   each token's gap to the request's previous token (a prefill's token after a preemption included)
  ttft  a request's first token, from its arrival
  e2e   a request's last token, from its arrival (when it finishes)
The ITL check is per step, not per token: a step's decode tokens are all emitted at one time, and every running
request's previous token came with the previous step's decode tokens or, later, from a prefill. So a decode token
can only breach when the gap between two steps' decode emissions does (then each token of the step is checked), or
when its previous token was a prefill's (those requests are checked one by one at their next decode token). The
loop pays one comparison a step and a few for each prefill (scripts/bench_slo_capture.py: the per-token check
cost ~0.5 us a token on a busy 2-core box, 35 us a step at batch 64).

Rate limit: at most one capture per `--capture-interval` seconds (default 10). Breaches while a capture is open
(waiting for its steps after) join it, as its meta record's `breaches` (the first MAX_LISTED; `breach_count` counts
all); breaches during the interval after a capture are counted and said by the next capture (`skipped_before`), so
a server that breaches on every step writes one file per interval, never a file per token.

Files: `slo-<unix ms>-<n>.jsonl`, written by a thread of their own (the loop only turns the recorder's last steps
into records, ~1 ms for a hundred steps of 64 requests) to `.slo-<...>.tmp` in the same folder and renamed
(os.replace): a reader never sees a half-written file. The meta record's `slo_capture` says why it was written.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import re
import threading
import time

import msgspec

METRICS = ("itl", "ttft", "e2e")
UNITS_NS = {"us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
MAX_LISTED = 64  # breaches listed in one capture's meta record (all are counted)
_LIMIT = re.compile(r"^\s*(itl|ttft|e2e)\s*=\s*([0-9]*\.?[0-9]+)\s*(us|ms|s)\s*$")


def parse_capture_on(text: str) -> dict[str, int]:
    """`itl=2ms,ttft=500ms,e2e=5s` -> {"itl": 2_000_000, ...} (ns); ValueError with the reason in one line."""
    limits: dict[str, int] = {}
    for part in text.split(","):
        m = _LIMIT.match(part)
        if m is None:
            raise ValueError(
                f"--capture-on: {part.strip()!r} is not METRIC=NUMBER UNIT (METRIC: {', '.join(METRICS)}; "
                f"UNIT: us, ms, s), e.g. itl=2ms,ttft=500ms"
            )
        metric, value, unit = m.groups()
        if metric in limits:
            raise ValueError(f"--capture-on: {metric} is given twice")
        ns = int(float(value) * UNITS_NS[unit])
        if ns <= 0:
            raise ValueError(f"--capture-on: {metric} must be above 0, got {part.strip()!r}")
        limits[metric] = ns
    return limits


@dataclasses.dataclass(frozen=True)
class CaptureSpec:
    """What the server's command line asked for (it crosses to the engine core's process, pickled)."""

    limits_ns: dict[str, int]
    folder: str
    before: int = 64  # steps kept before the breach's step
    after: int = 16  # steps kept after it
    interval_s: float = 10.0  # at most one capture per this many seconds


@dataclasses.dataclass
class _Open:
    """A capture waiting for its steps after the first breach."""

    first_step: int  # the recorder's index of the first step kept
    until_step: int  # written once the recorder has written this step
    breaches: list[dict]
    count: int
    skipped_before: int


class SloCapture:
    """The engine core's side: `on_prefill_token` per token a prefill emitted, `on_finish` per request finished,
    `after_step` after each engine step (with its tokens), `idle` when the engine has nothing left to run (a capture open then is written with the
    steps there are), `close` when the core stops."""

    def __init__(self, spec: CaptureSpec) -> None:
        self.spec = spec
        self.itl = spec.limits_ns.get("itl")
        self.ttft = spec.limits_ns.get("ttft")
        self.e2e = spec.limits_ns.get("e2e")
        self._pending: list[dict] = []  # breaches since the last after_step
        self._last_decode_ns = 0  # when the last step's decode tokens were emitted (0: none yet)
        self._after_prefill: dict[
            int, object
        ] = {}  # sequence id -> sequence whose last token was a prefill's
        self._open: _Open | None = None
        self._next_allowed_ns = 0
        self._skipped = 0  # breaches in the interval since the last capture
        self._written = 0
        self._files: queue.Queue = queue.Queue()
        self._writer = threading.Thread(target=self._write_files, name="roseinfer-slo-capture", daemon=True)
        self._writer.start()

    # -- checks (the loop) ---------------------------------------------------------------------------------------
    def on_prefill_token(self, seq) -> None:
        """A token a prefill emitted (the request's first, or its first after a preemption)."""
        token_ns = seq.token_ns
        if len(token_ns) == 1:
            if self.ttft is not None and token_ns[0] - seq.arrival_ns > self.ttft:
                self._breach("ttft", seq, token_ns[0] - seq.arrival_ns, self.ttft)
        elif self.itl is not None and token_ns[-1] - token_ns[-2] > self.itl:
            self._breach("itl", seq, token_ns[-1] - token_ns[-2], self.itl)
        if self.itl is not None:
            self._after_prefill[seq.id] = seq

    def _check_itl(self, emitted: list) -> None:
        """The step's tokens: (sequence, token, step) as the core collected them, its prefills' first and its decode
        tokens last (Engine.step: prefill, then decode), all of these emitted at one time."""
        if not emitted or emitted[-1][2] < 0:
            return  # no decode token in this step
        decode_ns = emitted[-1][0].token_ns[-1]
        limit = self.itl
        if self._last_decode_ns and decode_ns - self._last_decode_ns > limit:
            for seq, _, step in emitted:  # the step gap breached: which of its tokens did
                t = seq.token_ns
                if step >= 0 and len(t) > 1 and t[-1] - t[-2] > limit:
                    self._breach("itl", seq, t[-1] - t[-2], limit)
            self._after_prefill = {
                k: s for k, s in self._after_prefill.items() if s.token_ns[-1] != decode_ns
            }
        elif self._after_prefill:
            for key, seq in list(self._after_prefill.items()):
                t = seq.token_ns
                if t[-1] == decode_ns:  # its first decode token since the prefill: checked once
                    if t[-1] - t[-2] > limit:
                        self._breach("itl", seq, t[-1] - t[-2], limit)
                    del self._after_prefill[key]
                elif seq.finish_reason is not None:
                    del self._after_prefill[key]  # finished or aborted before a decode token
        self._last_decode_ns = decode_ns

    def on_finish(self, seq) -> None:
        if self.e2e is not None and seq.token_ns and seq.token_ns[-1] - seq.arrival_ns > self.e2e:
            self._breach("e2e", seq, seq.token_ns[-1] - seq.arrival_ns, self.e2e)

    def _breach(self, metric: str, seq, value_ns: int, limit_ns: int) -> None:
        self._pending.append(
            {
                "metric": metric,
                "value_ns": int(value_ns),
                "limit_ns": limit_ns,
                "request_id": seq.request_id,
                "request": seq.id,  # the engine's sequence id, as step and prefill records list it
                "token": len(seq.token_ns) - 1,  # the token's index in the request's whole output
                "step": seq.token_step[-1]
                if seq.token_step
                else -1,  # its decode step (-1: a prefill's token)
                "t_ns": seq.token_ns[-1] if seq.token_ns else 0,
            }
        )

    def after_step(self, flight, running, emitted: list) -> None:
        """The step's ITL check (`emitted`: its tokens, (sequence, token, step)); open a capture for new breaches
        (rate limit permitting), write one whose steps after have run. `running`: a function giving the sequences
        still in the engine (their request records go in the file)."""
        if self.itl is not None:
            self._check_itl(emitted)
        if self._pending:
            pending, self._pending = self._pending, []
            self._take(pending, flight)
        if self._open is not None and flight.step_index > self._open.until_step:
            self._write(flight, running)

    def idle(self, flight, running) -> None:
        if self._pending:
            pending, self._pending = self._pending, []
            self._take(pending, flight)
        if self._open is not None:
            self._write(flight, running)

    def _take(self, breaches: list[dict], flight) -> None:
        if self._open is not None:
            self._open.breaches += breaches[: MAX_LISTED - len(self._open.breaches)]
            self._open.count += len(breaches)
            return
        if time.monotonic_ns() < self._next_allowed_ns:
            self._skipped += len(breaches)
            return
        # The anchor: the breach's decode step, or (a prefill's token, an e2e) the step being written now.
        anchor = max(min((b["step"] for b in breaches if b["step"] >= 0), default=flight.step_index - 1), 0)
        self._open = _Open(
            first_step=max(0, anchor - self.spec.before),
            until_step=anchor + self.spec.after,
            breaches=breaches[:MAX_LISTED],
            count=len(breaches),
            skipped_before=self._skipped,
        )
        self._skipped = 0

    def _write(self, flight, running) -> None:
        if flight.steps == 0:
            return  # no decode step yet (a first request's slow prefill): kept open until there is one
        capture, self._open = self._open, None
        self._next_allowed_ns = time.monotonic_ns() + int(self.spec.interval_s * 1e9)
        records = flight.dump(max(1, flight.step_index - capture.first_step), running())
        records[0]["slo_capture"] = {
            "limits_ns": dict(self.spec.limits_ns),
            "breaches": capture.breaches,
            "breach_count": capture.count,
            "skipped_before": capture.skipped_before,
            "steps_before": self.spec.before,
            "steps_after": self.spec.after,
            "interval_s": self.spec.interval_s,
        }
        self._written += 1
        self._files.put((f"slo-{time.time_ns() // 1_000_000}-{self._written}", records))

    # -- files (the writer thread) -------------------------------------------------------------------------------
    def _write_files(self) -> None:
        encode = msgspec.json.Encoder().encode
        while True:
            item = self._files.get()
            if item is None:
                return
            name, records = item
            tmp = os.path.join(self.spec.folder, f".{name}.tmp")
            try:
                with open(tmp, "wb") as fh:
                    fh.write(b"\n".join(encode(r) for r in records) + b"\n")
                os.replace(tmp, os.path.join(self.spec.folder, name + ".jsonl"))
            except OSError as e:  # a full disk or a folder removed: said, and the server goes on serving
                print(f"roseinfer serve: SLO capture {name} not written: {e}", flush=True)
                try:
                    os.unlink(tmp)
                except OSError:
                    pass

    def close(self, timeout_s: float = 10.0) -> None:
        """Write what is queued (a capture still open is written with the steps there are first: `idle`)."""
        self._files.put(None)
        self._writer.join(timeout_s)


def check_folder(folder: str) -> str | None:
    """The capture folder made (if missing) and writable, or the reason it is not, in one line."""
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        return f"--capture-dir {folder}: cannot be made ({e.strerror})"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"--capture-dir {folder}: is not writable"
    return None


def add_arguments(p) -> None:
    """The serve command's options for this (roseinfer/serve/cli.py)."""
    g = p.add_argument_group("SLO-triggered capture")
    g.add_argument(
        "--capture-on",
        default=None,
        metavar="LIMITS",
        help="write the flight recorder's steps around any request past a limit: itl=2ms,ttft=500ms,e2e=5s",
    )
    g.add_argument("--capture-dir", default=None, metavar="DIR", help="where --capture-on writes its files")
    g.add_argument(
        "--capture-steps-before", type=int, default=64, metavar="N", help="steps kept before a breach"
    )
    g.add_argument(
        "--capture-steps-after", type=int, default=16, metavar="N", help="steps kept after a breach"
    )
    g.add_argument(
        "--capture-interval", type=float, default=10.0, metavar="S", help="at most one capture per S seconds"
    )


def spec_of(args) -> CaptureSpec | None:
    """The parsed options as a CaptureSpec (None: --capture-on not given); ValueError: one line saying why not."""
    if args.capture_on is None:
        if args.capture_dir is not None:
            raise ValueError("--capture-dir needs --capture-on (e.g. --capture-on itl=2ms)")
        return None
    limits = parse_capture_on(args.capture_on)
    if args.capture_dir is None:
        raise ValueError("--capture-on needs --capture-dir DIR (where the captures are written)")
    before, after = args.capture_steps_before, args.capture_steps_after
    if before < 0 or after < 0:
        raise ValueError("--capture-steps-before and --capture-steps-after must be >= 0")
    if not args.capture_interval >= 0:
        raise ValueError(f"--capture-interval must be >= 0, got {args.capture_interval}")
    if args.flight_recorder_steps < before + after + 1:
        raise ValueError(
            f"--capture-on keeps {before + after + 1} steps (--capture-steps-before/after) but the flight recorder "
            f"keeps {args.flight_recorder_steps} (--flight-recorder-steps)"
        )
    why = check_folder(args.capture_dir)
    if why is not None:
        raise ValueError(why)
    return CaptureSpec(limits, os.path.abspath(args.capture_dir), before, after, args.capture_interval)
