"""CPU and wall time of each phase of `roseprof diff A B`, in one process, in the order the CLI runs them (imports,
the store, loading each run's samples, the comparison, the diff dashboard, the terminal table): where a diff of two
large runs spends its time (docs/BENCHMARKS.md, issue 43).

    PYTHONPATH=. python scripts/diff_phases.py TRACES_DIR RUN_A RUN_B DASHBOARD.html
"""

from phase_clock import lines, mark  # first: its clock starts before the imports it times

# isort: split

import sys

import click  # noqa: E402
import numpy  # noqa: E402, F401
import plotly.graph_objects  # noqa: E402, F401
import rich.console  # noqa: E402, F401

mark("imports: numpy, click, rich, plotly")
from pathlib import Path  # noqa: E402

import roseprof.cli  # noqa: E402, F401
from roseprof.api import compare, diff_runs, open_store  # noqa: E402
from roseprof.render.console import make_console  # noqa: E402
from roseprof.render.diff_dashboard import DiffDashboard  # noqa: E402
from roseprof.render.terminal_diff import TerminalDiff  # noqa: E402

mark("imports: roseprof")


def main(traces: str, a: str, b: str, dashboard: str) -> None:
    load = compare.load_samples

    def timed_load(run):
        out = load(run)
        mark(f"load {run.id}")
        return out

    compare.load_samples = timed_load
    store = open_store(Path(traces))
    mark("open the store")
    view = diff_runs(store, [a], [b], None, None, False)
    mark("compare (metrics, intervals, verdict)")
    DiffDashboard().render(view, Path(dashboard))
    mark("diff dashboard")
    TerminalDiff(make_console(), 25).render(view)
    mark("terminal table")
    for line in lines(44, 3):
        click.echo(line, err=True)


if __name__ == "__main__":
    main(*sys.argv[1:5])
