"""CPU and wall time of each phase of `roseprof import FILE` (dashboard included), in one process, as the CLI runs
it: Python's imports, copying the file into the run, reading it, the analyses, writing the tables, the dashboard.
No profiler: cProfile's cost per call inflates whatever makes many small calls (the JSON encoder, plotly) several
times over (docs/BENCHMARKS.md, issue 43).

    PYTHONPATH=. python scripts/import_phases.py FILE TRACES_DIR DASHBOARDS_DIR
"""

from phase_clock import lines, mark  # first: its clock starts before the imports it times

# isort: split

import functools
import sys

import click  # noqa: E402

import roseprof.cli  # noqa: E402
from roseprof import api  # noqa: E402
from roseprof.api import intake  # noqa: E402
from roseprof.capture import pipeline  # noqa: E402
from roseprof.drivers.nsys import reader  # noqa: E402
from roseprof.run import tables  # noqa: E402

mark("imports (before the command)")


def timed(module, name: str, what: str) -> None:
    """Wraps module.name: the time since the last mark is charged to 'other', its own time to `what`."""
    inner = getattr(module, name)

    @functools.wraps(inner)
    def wrapper(*args, **kw):
        mark("other (CLI, store, lazy imports)")
        out = inner(*args, **kw)
        mark(what)
        return out

    setattr(module, name, wrapper)


def main(path: str, traces: str, dashboards: str) -> None:
    timed(pipeline, "_copy", "copy the file into raw/")
    timed(reader, "read_nsys_sqlite", "read the export")
    timed(intake, "analyse_trace", "analyses")
    timed(tables, "write_trace", "write the trace's tables")
    timed(tables, "write_analysis", "write summary and analysis tables")
    timed(api, "ensure_dashboard", "the run's dashboard")
    argv = ["import", path, "--traces-dir", traces, "--dashboards-dir", dashboards]
    try:
        roseprof.cli.cli.main(argv, standalone_mode=False)
    finally:
        mark("other (CLI, store, lazy imports)")
        for line in lines(40, 2):
            click.echo(line, err=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
