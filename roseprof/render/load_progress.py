"""A load's live figures on stderr: one line rewritten in place on a terminal, nothing when piped."""

from __future__ import annotations

import sys


class LoadProgress:
    def __init__(self, stream=None, planned: int | None = None) -> None:
        self.stream = stream or sys.stderr
        self.planned = planned
        self.on = bool(getattr(self.stream, "isatty", lambda: False)())
        self.width = 0

    def callback(self):
        """What the load calls with its live figures: this display on a terminal, None when piped (the load then
        computes no live figures at all: nothing it does not need runs on its event loop while it measures)."""
        return self if self.on else None

    def __call__(self, live: dict) -> None:
        if not self.on:
            return
        ms = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
        of = f"/{self.planned}" if self.planned else ""
        line = (
            f"load {live['elapsed_s']:5.1f}s  sent {live['sent']}{of}  done {live['done']}  "
            f"in flight {live['in_flight']}  {live['rate']:.1f} req/s  "
            f"TTFT p50 {ms(live['ttft_p50_ms'])} p99 {ms(live['ttft_p99_ms'])} ms"
            + (f"  errors {live['errors']}" if live["errors"] else "")
        )[:79]
        self.stream.write("\r" + line.ljust(self.width))
        self.stream.flush()
        self.width = len(line)

    def finish(self) -> None:
        if self.on and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
