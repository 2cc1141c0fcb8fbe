"""Finding and driving Nsight Systems: `nsys profile`, the .qdstrm importer, `nsys export --type sqlite`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from roseprof.drivers.base import Launch, find_tool
from roseprof.drivers.nsys.agents import CAPTURE_ENV, stop_left_agents, wait_for_agents
from roseprof.drivers.nsys.own_output import (
    NSYS_LOG,
    agent_refused,
    is_agent_lost,
    is_nsys_line,
    nsys_message,
)
from roseprof.drivers.nsys.report import read_header, version_key
from roseprof.drivers.nsys.windows import last_report, repeats, serves_windows, streams_folder
from roseprof.errors import CaptureFailed, RoseprofError, one_line
from roseprof.model import Trace
from roseprof.workload.roseinfer import DECODE_STEP, NVTX_ENV, STEP_LOG_ENV, WINDOW_RANGE, default_command

# Where nsys usually lives, newest first within each pattern. The last ones are the copy that ships inside
# Nsight Compute (see shared/gpu/README.md): it works once its importer folder and libdw are in place.
NSYS_CANDIDATES = (
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/usr/local/cuda/bin/nsys",
    "/usr/local/cuda-*/bin/nsys",
    "/usr/lib/nsight-systems/bin/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
    "/usr/local/cuda/nsight-compute-*/host/target-linux-x64/nsys",
)


AGENT_SETTLE_S = 10.0  # the longest a capture waits for an earlier capture's agents to finish (agents.py)


def find_nsys() -> str | None:
    return find_tool("NSYS", "nsys", NSYS_CANDIDATES)


def nsys_version(nsys: str) -> str:
    try:
        out = subprocess.run([nsys, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return out.strip().replace("NVIDIA Nsight Systems version ", "")


def find_importer(nsys: str) -> Path | None:
    """QdstrmImporter, where nsys itself looks for it: host-linux-x64 beside its (resolved) target folder."""
    target = Path(os.path.realpath(nsys)).parent
    for base in (target.parent, target.parent.parent):
        for name in ("host-linux-x64", "host-linux-desktop-glibc_2_11_3-x64"):
            cand = base / name / "QdstrmImporter"
            if cand.is_file() and os.access(cand, os.X_OK):
                return cand
    return None


def importer_problem(nsys: str) -> str:
    importer = find_importer(nsys)
    target = Path(os.path.realpath(nsys)).parent
    if importer is None:
        return (
            f"its importer is missing: nsys looks for {target.parent}/host-linux-x64/QdstrmImporter "
            "(on Debian run scripts/install-nsys.sh; on the GPU machine source shared/gpu/nsys-on-gpu.sh)"
        )
    try:
        ldd = subprocess.run(["ldd", str(importer)], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        ldd = ""
    missing = [line.split()[0] for line in ldd.splitlines() if "not found" in line]
    if missing:
        return f"its importer {importer} lacks libraries: {', '.join(missing)} (e.g. libssh-4, libdw1)"
    return f"its importer {importer} failed"


# nsys 2022.4 writes a quote in its output path as `&"` and then fails to rename its own file (FATAL ERROR ...
# RenameOutputFile); paths of letters, digits and ./_+- are safe.
PLAIN_PATH = re.compile(r"[\w./+-]+")


@contextmanager
def plain_output_path(out_base: Path):
    """`out_base`, or where a traces folder's path holds characters nsys mangles (quotes, spaces), a folder of
    a plain name under $TMPDIR whose files are moved to `out_base`'s folder afterwards (on every path out)."""
    if PLAIN_PATH.fullmatch(str(out_base)):
        yield out_base
        return
    tmp = Path(tempfile.mkdtemp(prefix="roseprof-nsys-"))
    if not PLAIN_PATH.fullmatch(str(tmp)):  # $TMPDIR itself is not plain: nothing better to offer
        shutil.rmtree(tmp, ignore_errors=True)
        yield out_base
        return
    try:
        yield tmp / out_base.name
    finally:
        for f in tmp.iterdir():
            shutil.move(str(f), str(out_base.parent / f.name))
        shutil.rmtree(tmp, ignore_errors=True)


def profile_argv(
    nsys: str,
    cmd: list[str],
    out_base: Path,
    trace: str,
    capture_range: str,
    nvtx_capture: str | None,
    capture_range_end: str | None = None,
) -> list[str]:
    """`nsys profile`'s command line around `cmd`, writing `out_base`.nsys-rep (a range that repeats:
    `out_base`.<k>.nsys-rep, one per range)."""  # fmt: skip
    argv = [
        nsys,
        "profile",
        f"--trace={trace}",
        "--sample=none",  # CPU sampling fails on these machines and is not needed for ranges
        "--cpuctxsw=none",
        f"--output={out_base}",
        "--force-overwrite=true",
    ]
    if "cuda" in trace.split(","):
        # Every kernel of a CUDA graph replay as its own record (the default may trace a graph as one block),
        # so the per-region kernel tables work for `--cuda-graph` engines too.
        argv.append("--cuda-graph-trace=node")
    if capture_range != "none":
        argv.append(f"--capture-range={capture_range}")
        if capture_range == "nvtx":
            argv.append(f"--nvtx-capture={nvtx_capture or default_nvtx_capture(capture_range_end)}")
        if capture_range_end is not None:
            argv.append(f"--capture-range-end={capture_range_end}")
        elif capture_range == "nvtx":
            argv.append("--capture-range-end=none")
    return argv + cmd  # nsys 2022.4 takes no "--": the application starts at the first non-option


def default_nvtx_capture(capture_range_end: str | None) -> str:
    """The range that starts recording: a server's capture window where ranges repeat, else the first decode step."""
    return WINDOW_RANGE if repeats(capture_range_end) else DECODE_STEP


def finish_report(nsys: str, out_base: Path) -> Path:
    """The .nsys-rep of a capture, running the importer on a leftover .qdstrm when nsys could not."""
    rep = out_base.with_suffix(".nsys-rep")
    if rep.is_file():
        return rep
    qdstrm = out_base.with_suffix(".qdstrm")
    if not qdstrm.is_file():
        said = nsys_message(out_base.parent / NSYS_LOG)
        raise CaptureFailed(
            f"nsys wrote no report{f': {said}' if said else ''} (see raw/nsys.log in the run folder)"
        )
    importer = find_importer(nsys)
    if importer is not None:
        proc = subprocess.run(
            [str(importer), "-i", str(qdstrm)], capture_output=True, text=True, timeout=3600
        )
        if proc.returncode == 0 and rep.is_file():
            return rep
    raise CaptureFailed(f"nsys left only {qdstrm.name}: {importer_problem(nsys)}")


def export_sqlite(nsys: str, rep: Path, out: Path, label: str | None = None) -> Path:
    """`nsys export --type sqlite`; errors name `label` (the user's file) when given."""
    label = label or rep.name
    try:
        proc = subprocess.run(
            [nsys, "export", "--type=sqlite", "--force-overwrite=true", f"--output={out}", str(rep)],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=3600,
        )
    except subprocess.TimeoutExpired:
        raise RoseprofError(f"{label}: nsys export did not finish within an hour") from None
    except OSError as e:
        raise RoseprofError(f"{label}: cannot run {nsys} to export it ({e.strerror})") from None
    if proc.returncode != 0 or not out.is_file():
        raise RoseprofError(_export_problem(nsys, rep, label, (proc.stderr or "") + (proc.stdout or "")))
    return out


# What nsys 2022.4 says when a report is newer than it can read (2024.6: "Version number is invalid:
# 2024@6@2..."; 2025.3: "Version not supported: 36398880"; others: a protobuf parse error).
NEWER_REPORT = ("Version not supported", "Version number is invalid", "ProtobufParseException")


def _export_problem(nsys: str, rep: Path, label: str, text: str) -> str:
    installed = nsys_version(nsys)
    header = read_header(rep)
    written = header.product_version if header else None
    newer = bool(written) and version_key(written) > version_key(installed)
    if newer or any(marker in text for marker in NEWER_REPORT):
        if written:
            by = f"Nsight Systems {written}"
        else:
            by = f"a newer Nsight Systems (report format {header.format if header else '?'})"
        return (
            f"{label}: written by {by}, newer than the installed nsys {installed} can read: export it to SQLite "
            f"with that nsys or newer (nsys export --type sqlite {Path(label).name}) and import the .sqlite"
        )
    if header is None:
        return f"{label}: not an Nsight Systems report (it does not start with the report header)"
    lines = [line for line in text.splitlines() if line.strip()]
    return f"{label}: nsys export failed ({one_line(lines[-1] if lines else 'no output', 200)})"


def trace_apis(nsys: str) -> set[str]:
    """The APIs this nsys traces, as `nsys profile --help` lists them under --trace ("Possible values are 'cuda',
    'nvtx', ... or 'none'."); empty where the help does not read so."""
    try:
        out = subprocess.run(
            [nsys, "profile", "--help"], capture_output=True, text=True, errors="replace", timeout=10
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return set()
    m = re.search(r"--trace=\s*Possible values are (.*?)\.\s*$", out, re.S | re.M)
    return set(re.findall(r"'([a-z0-9][a-z0-9-]*)'", m.group(1))) if m else set()


def check_trace(nsys: str, trace: str) -> None:
    """--trace's APIs against what this nsys takes, before any run folder exists: nsys itself would fail after
    the run had started, as if the program had."""
    apis = trace_apis(nsys)
    unknown = [a for a in trace.split(",") if a and a not in apis]  # nsys takes `nvtx,osrt,` as `nvtx,osrt`
    if apis and unknown:
        raise RoseprofError(
            f"--trace {trace!r}: this nsys traces no {', '.join(map(repr, unknown))} (it takes "
            f"{', '.join(sorted(apis))}; comma-separated, no spaces)"
        )


@dataclass(frozen=True)
class NsysOptions:
    """`roseprof nsys`'s options."""

    tool: ClassVar[str] = "nsys"

    trace: str | None = None  # nsys --trace (None: cuda,nvtx,osrt with a GPU, nvtx,osrt without)
    # nsys --capture-range: which part of the program nsys records (not the CUDA-graph capture ranges)
    capture_range: str = "none"
    nvtx_capture: str | None = None  # with capture_range "nvtx": the range that starts recording
    # nsys --capture-range-end (None: nsys' default, `none` with an NVTX range); repeat[:N]: every range recorded
    # as a report of its own (a server's capture windows: drivers/nsys/windows.py)
    capture_range_end: str | None = None

    def default_command(self) -> list[str]:
        """What runs when no command is given: the engine's benchmark sized for the machine."""
        return default_command()

    def resolve(self, cmd: list[str] | None, source) -> tuple[NsysOptions, list[str] | None]:
        """These options and the command as they run (nothing here is taken from another run)."""
        return self, cmd


class NsysCapture:
    """`roseprof nsys`: what the tool-neutral capture pipeline needs from Nsight Systems."""

    tool = "nsys"
    kernel_stamps = True
    injection_library = "libToolsInjection"  # 2022.4 can leave a program asleep in exit() (capture/stall.py)

    def __init__(self, options: NsysOptions, has_gpu: bool) -> None:
        nsys = find_nsys()
        if nsys is None:
            raise RoseprofError("nsys not found: set NSYS, put it on PATH, or run scripts/install-nsys.sh")
        self.nsys = nsys
        if options.trace is not None:
            check_trace(nsys, options.trace)
        self.trace = options.trace or ("cuda,nvtx,osrt" if has_gpu else "nvtx,osrt")
        self.capture_range = options.capture_range
        self.nvtx_capture = options.nvtx_capture
        self.capture_range_end = options.capture_range_end
        self.windows = serves_windows(self.capture_range, self.capture_range_end, self.nvtx_capture)

    def engine_env(self) -> dict[str, str]:
        # A server's windows turn its regions' NVTX on for their steps only (nothing emitted between windows).
        return {} if self.windows else {NVTX_ENV: "1"}

    def describe(self) -> dict:
        return {
            "path": self.nsys,
            "version": nsys_version(self.nsys),
            "trace": self.trace,
            "capture_range": self.capture_range,
            **({"capture_range_end": self.capture_range_end} if self.capture_range_end else {}),
        }

    @contextmanager
    def launch(self, cmd: list[str], env: dict[str, str], raw: Path) -> Iterator[Launch]:
        """`nsys profile` writing raw/trace.nsys-rep (staged under a plain path where the traces folder's is not);
        the program's output goes to the terminal, nsys' own lines only to raw/nsys.log."""
        with plain_output_path(raw / "trace") as out_base, ExitStack() as stack:
            argv = profile_argv(self.nsys, cmd, out_base, self.trace, self.capture_range, self.nvtx_capture,
                                self.capture_range_end)  # fmt: skip
            if self.windows:  # nsys' streams where the server finds each window's (drivers/nsys/windows.py)
                env = stack.enter_context(streams_folder(env))
                # and no step log for the server's whole life (a file that grows with every step, a cost outside
                # the windows): each window's steps come from its flight recorder
                env.pop(STEP_LOG_ENV, None)
            # a start that fails on its agent leaves that agent running: it carries this capture's marker, and
            # `refused` stops it (agents.py)
            env = {**env, CAPTURE_ENV: str(raw)}
            yield Launch(argv, env, raw / NSYS_LOG)

    def own_line(self, line: bytes) -> bool:
        return is_nsys_line(line)

    def settle(self) -> None:
        # an earlier capture's agent still finishing its exit (a few seconds after nsys'): this start could fail
        # on its semaphore. Bounded: an agent of a capture under another lock file (a test's) may live on.
        wait_for_agents(CAPTURE_ENV, AGENT_SETTLE_S)

    def held_line(self, line: bytes) -> bool:
        """nsys' lines where it lost its agent: the whole output of a start it failed (then roseprof's restart
        line quotes them: they reached the terminal above it in a clean-clone CI run, session 38), shown where
        the program prints after them (then they may be the program's own)."""
        return is_agent_lost(line)

    def refused(self, launch: Launch) -> str | None:
        out_base = Path(next(a for a in launch.argv if a.startswith("--output=")).removeprefix("--output="))
        if not agent_refused(launch.log, out_base):
            return None
        # nsys has exited and its agent lost it: the agent would idle on, re-parented to init (a healthy agent
        # finishes its own exit after nsys', and is left to it: killed then, it left its session files in /tmp)
        stop_left_agents(CAPTURE_ENV, launch.env[CAPTURE_ENV])
        said = nsys_message(launch.log)  # its exception dump stays in the log (NSYS_OWN_LINE)
        return (
            "nsys failed on its own agent and wrote no report (another nsys running on this machine outside "
            "roseprof, or its connection to the agent lost)" + (f': nsys said "{said}"' if said else "")
        )

    def check(self, result, raw: Path) -> None:
        return None  # nsys' failures show in its report (collect)

    def collect(self, raw: Path) -> Trace:
        from roseprof.drivers.nsys.reader import read_nsys_sqlite

        try:
            if repeats(self.capture_range_end):  # a report per range: the run is the last one's
                rep = last_report(raw / "trace")
            else:
                rep = finish_report(self.nsys, raw / "trace")
            sqlite_path = export_sqlite(self.nsys, rep, raw / "trace.sqlite")
            return read_nsys_sqlite(str(sqlite_path))
        except RoseprofError as e:
            full = disk_full(raw, raw / NSYS_LOG)
            if full:  # the cause, instead of its symptom (an empty export, nsys' exception text)
                raise CaptureFailed(
                    f"{full}; nsys could not write its report ({one_line(str(e), 160)})"
                ) from None
            raise


# Below this much free space nsys' report or its SQLite export may not fit: a failure then is said to be the
# disk's, not reported as an empty or unreadable file.
LOW_DISK_BYTES = 64 << 20
DISK_FULL_SAID = (b"No space left on device", b"ENOSPC", b"Disk quota exceeded")


def disk_full(raw: Path, log: Path) -> str | None:
    """ "the disk holding <traces folder> is full (N KiB free)" when it is nearly so or nsys said so, else None."""
    try:
        st = os.statvfs(raw)
        said = log.is_file() and any(m in log.read_bytes()[-(1 << 20) :] for m in DISK_FULL_SAID)
    except OSError:
        return None
    free = st.f_bavail * st.f_frsize
    if free >= LOW_DISK_BYTES and not said:
        return None
    return f"the disk holding {raw.parent.parent} is full ({free // 1024} KiB free)"
