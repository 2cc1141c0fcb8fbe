"""The `roseprof` command line: click verbs that parse options and call the library; nothing else lives here.

common.py holds the group and what every verb shares, capture.py the capture verbs (nsys, ncu, torch), runs.py
the verbs on stored runs and files (import, ls, show, open, export, diff, baseline).
"""

from __future__ import annotations

import signal
import sys
from contextlib import contextmanager

import click

from roseprof.cli import capture, live, load, runs  # noqa: F401  (registers the verbs on the group)
from roseprof.cli.common import ReaderMayLeave, cli, os_error
from roseprof.errors import RoseprofError, one_line
from roseprof.render.safe_text import plain


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


@contextmanager
def _termination_is_an_interrupt():
    """SIGTERM and SIGHUP (a CI job's timeout, a closed terminal) end roseprof as Ctrl-C does: through its
    clean-up paths, so an import or a capture stopped that way removes its `.tmp-` folder. A capture's tool
    runner installs its own handlers (forwarding the signal to the profiler) while the profiler runs."""
    previous = {}
    for s in (signal.SIGTERM, signal.SIGHUP):
        try:
            if signal.getsignal(s) == signal.SIG_DFL:
                previous[s] = signal.signal(s, _interrupt)
        except ValueError:  # not the main thread: leave signals alone
            pass
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def main() -> None:
    if sys.stdout is not None and not isinstance(sys.stdout, ReaderMayLeave):
        sys.stdout = ReaderMayLeave(sys.stdout)
    try:
        with _termination_is_an_interrupt():
            cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("roseprof: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except RoseprofError as e:
        click.echo(f"roseprof: error: {plain(one_line(str(e)))}", err=True)
        sys.exit(e.exit_code)
    except OSError as e:  # a full disk or a folder we may not write, wherever it surfaced: one line
        click.echo(f"roseprof: error: {plain(one_line(os_error(e)))}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("roseprof: interrupted", err=True)
        sys.exit(130)
    finally:  # what stdout still holds, now: at the interpreter's exit a broken pipe would print and exit 120
        if sys.stdout is not None:
            try:
                sys.stdout.flush()
            except OSError as e:  # a full disk under `> FILE`: one line
                click.echo(f"roseprof: error: {plain(one_line(os_error(e)))}", err=True)
                sys.exit(2)


if __name__ == "__main__":
    main()
