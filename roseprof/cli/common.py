"""What every verb shares: the click group, the store options, exit codes, and showing a run's dashboard."""

from __future__ import annotations

import math
import os
import select
import shlex
import shutil
import sys
from pathlib import Path

import click

from roseprof.errors import RoseprofError, one_line
from roseprof.render.safe_text import plain
from roseprof.run.store import damage_is_one_line

EXIT_CODES = "Exit codes: 0 ok; 2 bad input or usage (one line on stderr); 130 interrupted."
CAPTURE_EXIT_CODES = (
    "Exit codes: 0 ok; 1 the profiled command failed (the run is kept with what it recorded); 2 bad input or usage, "
    "or the program recorded nothing to analyse (nothing stored); 3 the profiler failed (the run keeps its log in "
    "raw/); 130 interrupted (the run keeps what was captured)."
)


def store_options(f):
    f = click.option(
        "--dashboards-dir",
        envvar="ROSEPROF_DASHBOARDS_DIR",
        default="dashboards",
        show_default=True,
        type=click.Path(file_okay=False),
        help="where HTML dashboards go (env ROSEPROF_DASHBOARDS_DIR)",
    )(f)
    f = click.option(
        "--traces-dir",
        envvar="ROSEPROF_TRACES_DIR",
        default="traces",
        show_default=True,
        type=click.Path(file_okay=False),
        help="where runs are stored (env ROSEPROF_TRACES_DIR)",
    )(f)
    return f


class ReaderMayLeave:
    """roseprof's stdout (main() installs it): when the reader of a piped stdout leaves (`roseprof diff A B | head`),
    the rest of the output goes to /dev/null instead of raising BrokenPipeError, so the verb goes on to its own
    ending: its exit code (0; diff's gate 1; a failed capture's 1) and its lines on stderr. Raised instead, the
    broken pipe ended every verb alike, which hid a fired gate behind exit 0 (or click's exit 1 behind a pass)."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self.left = False

    def write(self, text):
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._reader_left()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._reader_left()

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def _reader_left(self) -> None:
        self.left = True
        _to_devnull(
            self._stream.fileno()
        )  # what the stream still holds, and all that follows, is written there

    def __getattr__(self, name):
        return getattr(self._stream, name)


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError as e:
            if (
                _stdout_gone()
            ):  # stdout's reader left while the verb wrote to it directly (`export -o - | head`)
                _to_devnull(1)
                return None
            # another pipe the verb writes, e.g. `-o FIFO`
            where = f": {e.filename}" if e.filename else ""
            raise RoseprofError(
                f"the reader of a pipe roseprof was writing left before the end{where}"
            ) from e


def _stdout_gone() -> bool:
    """Whether stdout's reader left: a pipe whose reader closed it polls as an error."""
    try:
        poll = select.poll()
        poll.register(1, select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (OSError, ValueError):
        return False


def _to_devnull(fd: int) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


@click.group(cls=_Group, epilog=CAPTURE_EXIT_CODES)
@click.version_option(package_name="roseinfer", prog_name="roseprof")
def cli() -> None:
    """Capture, parse and compare profiles of roseinfer (or any command)."""


def open_store(traces_dir):
    """The traces folder (the library's: its runs are checked against what each analysis section stores)."""
    from roseprof.api import open_store

    return open_store(traces_dir)


def show_dashboard(run, dashboards_dir, open_browser: bool, progress=None) -> None:
    from roseprof.api import ensure_dashboard
    from roseprof.render.system_browser import open_in_browser

    if progress is not None:
        progress("render", "rendering the dashboard")
    try:
        with damage_is_one_line(run):
            try:
                path = ensure_dashboard(run, dashboards_dir)
            except OSError as e:
                raise RoseprofError(f"dashboard not written to {dashboards_dir} ({os_error(e)})") from None
            except ImportError as e:  # plotly, imported only to render a page: the run is stored all the same
                click.echo(
                    f"dashboard: not rendered ({e.name} is not installed; `roseprof open {run.id}` renders it "
                    "later)",
                    err=True,
                )
                return
    finally:
        if progress is not None:
            progress.finish()
    click.echo(f"dashboard: {path}")
    if open_browser:
        open_in_browser(path)


def invocation() -> str:
    """How the user can type roseprof in the next command we print: `roseprof` where that is on PATH (and is this
    one), else this installation's script as a path to paste (`.venv/bin/roseprof` from the checkout), else
    `python -m roseprof` with this interpreter."""
    here = (
        Path(sys.argv[0])
        if Path(sys.argv[0]).name == "roseprof"
        else Path(sys.executable).parent / "roseprof"
    )
    on_path = shutil.which("roseprof")
    if on_path and (not here.is_file() or os.path.samefile(on_path, here)):
        return "roseprof"
    if not (here.is_file() and os.access(here, os.X_OK)):
        return f"{shlex.quote(sys.executable)} -m roseprof"
    try:
        shown = str(here.absolute().relative_to(Path.cwd()))
        shown = shown if os.sep in shown else f".{os.sep}{shown}"
    except ValueError:
        shown = str(here.absolute())
    return shlex.quote(shown)


def after_storing(run, present) -> None:
    """Printing or rendering a run that is already stored: a failure is one warning line, and the run and the
    exit code stay what the capture or import made them (the run's data is whole; `roseprof show` and
    `roseprof open` present it again)."""
    try:
        present()
    except BrokenPipeError:
        raise
    except (RoseprofError, OSError) as e:
        warn(
            f"{one_line(str(e) if isinstance(e, RoseprofError) else os_error(e))}; the run {run.id} is stored"
        )
    except Exception as e:  # a bug in a renderer must not turn a stored run into a crash
        warn(
            f"internal error while presenting the run ({type(e).__name__}: {one_line(str(e), 200)}); "
            f"the run {run.id} is stored"
        )


def warn(line: str) -> None:
    click.echo(f"roseprof: warning: {plain(line)}", err=True)


def os_error(e: OSError) -> str:
    return f"{e.strerror or type(e).__name__}" + (f": {e.filename}" if e.filename else "")


def finite(ctx, param, value):
    """A click callback: NaN or infinity is no percentage."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite percentage", param=param)
    return value


def print_run(console, run, summary=None) -> None:
    """A stored run in the terminal (`show`, and after a capture or import): the summary's views, then the panels
    of analysis sections that have no built-in view. `summary`: the run's, where the caller has read it."""
    from roseprof.api import run_view
    from roseprof.render.terminal import TerminalRenderer

    TerminalRenderer(console).render(run_view(run) if summary is None else run_view(run, summary))
