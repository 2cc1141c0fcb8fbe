"""What a capture is doing, on stderr with rich, for a person at a terminal; silent when stderr is not one (logs,
pipes, tests), so scripted output stays what it was.

capture/pipeline.py calls `progress(stage, message)`; this presents it: one line per stage with the time the last
one took, and a spinner while roseprof itself works (exporting, analysing, rendering). No spinner during the
capture: the command's own output passes through to the terminal then, and a live display would garble it.
"""

from __future__ import annotations

import shlex
import time

from rich.console import Console
from rich.markup import escape

from roseprof.render import commands

CAPTURE = "capture"
NOTES = ("parse",)  # stages that report a result rather than start work: a line, no spinner
TAG = "[bold cyan]roseprof[/]"


class CaptureProgress:
    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.enabled = self.console.is_terminal
        self._status = None
        self._stage: tuple[str, str] | None = None
        self._since = self._start = time.monotonic()

    def __call__(self, stage: str, message: str) -> None:
        if not self.enabled:
            return
        if stage in NOTES:
            self._say(f"  {escape(message)}")
            return
        self._end_stage()
        self._stage, self._since = (stage, message), time.monotonic()
        if stage == CAPTURE:
            shown = commands.command(message, max(40, self.console.width - 10))
            self._say(f"{TAG} {escape(shown)}")
            self._say("[dim]the command's own output follows[/]")
        else:
            self._status = self.console.status(escape(message), spinner="dots")
            self._status.start()

    def _say(self, markup: str) -> None:
        if self._status is not None:
            self._status.console.print(markup, highlight=False)  # printed above the spinner
        else:
            self.console.print(markup, highlight=False)

    def _end_stage(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
        if self._stage is not None:
            stage, message = self._stage
            took = time.monotonic() - self._since
            done = "captured" if stage == CAPTURE else escape(message)
            self.console.print(f"{TAG} [green]✓[/] {done} [dim]({took:.1f} s)[/]", highlight=False)
            self._stage = None

    def pause(self) -> None:
        """End the current stage (stop its spinner) before the caller prints to the terminal."""
        if self.enabled:
            self._end_stage()

    def finish(self) -> None:
        """The last stage is over: say how long it all took."""
        if not self.enabled:
            return
        self.pause()
        total = time.monotonic() - self._start
        self.console.print(f"{TAG} done in {total:.1f} s", highlight=False)


def print_next(console: Console, run_id: str, previous_id: str | None, prog: str = "roseprof") -> None:
    """What to do with a finished run: open it, and compare it with the previous run of the same name. `prog`: how
    the user types roseprof (`.venv/bin/roseprof` where it is not on PATH), so each line can be pasted."""
    # The new run is the after side: what it is compared with (the previous run of its name) comes first.
    before, after = previous_id or "<earlier run>", run_id
    print_command(console, "next: ", [prog, "open", run_id])
    print_command(console, "      ", [prog, "diff", before, after])


def print_next_group(console: Console, name: str, repeat: int, prog: str = "roseprof") -> None:
    """What to do with a finished series of `repeat` runs of one name: compare them, as a group, with another."""
    print_command(console, "next: ", [prog, "diff", shlex.quote(name), "<other name>"])
    console.print(f"      (compares the {repeat} runs as a group)", markup=False, highlight=False)


def print_command(console: Console, lead: str, words: list[str]) -> None:
    """A command to paste, after `lead`: on one line where it fits the console, else continued over lines with ` \\`
    (commands.pasteable); never folded by rich, which would break it where a shell would not join it again."""
    for line in commands.pasteable(words, console.width, lead):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
