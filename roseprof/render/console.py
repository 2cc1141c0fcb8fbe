"""The terminal's console and the tables that fit it (80 columns and up), which every terminal renderer prints:
`show`'s and `ls`'s (terminal.py), `diff`'s (terminal_diff.py).

Columns with nothing in them are dropped (GPU columns of a CPU run), long names are shortened in the middle by the
caller's rule so their distinguishing tail survives, and columns marked whole (run ids: users copy them) are never
cut.
"""

from __future__ import annotations

import os

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from roseprof.render.safe_text import plain

MIN_NAME = 24  # a shortened name keeps at least this many characters (room for a last component)


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """The reader left (`roseprof diff A B | head`): rich's own answer is exit 1, which is what diff's gate
        says. Under the CLI, stdout is roseprof/cli/common.py's ReaderMayLeave, which never raises it: the verb
        ends with its own code."""
        self.quiet = True
        raise BrokenPipeError


def make_console() -> Console:
    """A console for summaries: COLUMNS when set (a terminal or a pipe alike), else the terminal's width; output
    piped into `head` or `less` from a terminal gets that terminal's width (COLUMNS is a shell variable that
    bash does not export); with no terminal at all (a log, a CI job) 160 columns, so names stay whole."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return _Console(width=max(int(columns), 40))
    console = _Console()
    if console.is_terminal:
        return console
    for fd in (2, 0):  # stdout is a pipe; stderr or stdin may still be the user's terminal
        try:
            return _Console(width=max(os.get_terminal_size(fd).columns, 40))
        except (OSError, ValueError):
            continue
    return _Console(width=160)


def _empty(cells) -> bool:
    return all(c in ("-", "") for c in cells)


def fit_table(
    console: Console,
    title: str | None,
    headers: list[str],
    rows: list[list[str]],
    shrink: dict[int, callable] | None = None,
    keep: set[int] = frozenset({0}),
    optional: tuple[int, ...] = (),
    whole: set[int] = frozenset(),
    min_width: dict[int, int] | None = None,
    cut_last: set[int] = frozenset(),
) -> Table:
    """A table of `rows` that fits the console. `shrink` maps a column to fit(text, width) used to narrow it;
    columns whose cells are all empty are dropped (except those in `keep`); `optional` columns are dropped, in
    order, while the shrinkable ones would otherwise go below MIN_NAME (or their `min_width`); `whole` columns
    are never cut (run ids); `cut_last` columns (shrinkable) stay whole while any other optional column is left to
    drop (`ls`'s run names, which `diff` and `baseline` take)."""
    floor_of = {i: (min_width or {}).get(i, MIN_NAME) for i in range(len(headers))}
    shrink = shrink or {}
    rows = [
        [plain(c) for c in r] for r in rows
    ]  # names from traces: no control characters reach the terminal
    cols = [i for i in range(len(headers)) if i in keep or not _empty(r[i] for r in rows)]

    def build(cols: list[int], widths: dict[int, int], edge: bool = True) -> Table:
        t = Table(
            title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
            show_edge=edge, show_header=any(headers[i] for i in cols),  # a panel of facts has no headers to show
        )  # fmt: skip
        for i in cols:
            left = i in shrink or i == 0
            width = max([len(headers[i])] + [len(r[i]) for r in rows]) if i in whole else None
            t.add_column(headers[i], justify="left" if left else "right", no_wrap=True, min_width=width)
        for r in rows:
            # Text, not markup: kernel names hold brackets ("[lambda(int) (instance 1)]") rich would eat.
            t.add_row(*(Text(shrink[i](r[i], widths[i]) if i in widths else r[i]) for i in cols))
        return t

    def natural(cols: list[int]) -> int:
        return Measurement.get(console, console.options.update(width=10**5), build(cols, {})).maximum

    while True:
        excess = natural(cols) - console.width
        if excess <= 0:
            return build(cols, {})
        dropping = [i for i in optional if i in cols]
        others = [i for i in dropping if i not in cut_last]  # while these can go, cut_last columns keep whole
        targets = [i for i in cols if i in shrink and (i not in cut_last or not others)]
        room = {i: max(len(r[i]) for r in rows) if rows else 0 for i in targets}
        give = sum(max(0, w - floor_of[i]) for i, w in room.items())
        if give >= excess or not dropping:
            enough = give >= excess  # else nothing is left to drop: names give more
            widths, left = {}, excess
            for i in sorted(targets, key=lambda i: -room[i]):  # take from the widest first
                floor = floor_of[i] if enough else min(floor_of[i], MIN_NAME) // 2
                cut = min(left, max(0, room[i] - floor))
                widths[i] = room[i] - cut
                left -= cut
            # Still too wide with every name at its floor (whole figures that fill 80 columns): the table's blank
            # edges go (a column each side) before rich would cut the last column's words.
            return build(cols, widths, edge=left <= 0)
        cols.remove(dropping[0])
