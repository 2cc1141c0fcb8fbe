"""Finding and driving Nsight Compute: `ncu` on a command, then `ncu --import R --csv --page raw|details`.

Messages ncu prints that roseprof acts on, as ncu 2022.3 (Debian's nsight-compute) prints them (its binary's own
strings, and runs of it on this CPU machine):
    ==WARNING== No kernels were profiled.                          (exit 0, no report written)
    ==ERROR== The application returned an error code (3).          (ncu exits with the application's code)
    ==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters ...
    ==ERROR== '/x' does not exist or is not an executable. ...     (exit 255)
    ==ERROR== Failed to load report file 'R.ncu-rep'.              (--import of a file it cannot read, exit 1)
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from roseprof.drivers.base import Launch, find_tool
from roseprof.drivers.ncu import report_file
from roseprof.drivers.ncu.options import NcuOptions
from roseprof.errors import CaptureFailed, RoseprofError
from roseprof.kernel_names import base_name, name_pattern
from roseprof.model import KERNEL, Trace
from roseprof.workload.roseinfer import NVTX_ENV

# Where ncu usually lives, newest first within each pattern (Debian's package puts it on PATH as /usr/bin/ncu).
NCU_CANDIDATES = (
    "/opt/nvidia/nsight-compute/*/ncu",
    "/usr/local/cuda/bin/ncu",
    "/usr/local/cuda-*/bin/ncu",
    "/usr/local/cuda/nsight-compute-*/ncu",
    "/usr/bin/ncu",
    "/usr/lib/nsight-compute/ncu",
)
NO_KERNELS = "No kernels were profiled"
# ncu's own lines (==PROF==, ==WARNING==, ==ERROR==, ==INFO==): kept in raw/ncu.log and out of the terminal; what
# roseprof acts on in them it says itself, in one line.
NCU_OWN_LINE = re.compile(rb"^==[A-Z]+==")
REPORT = "report"  # raw/report.ncu-rep, raw/report.raw.csv, raw/report.details.csv
PERMISSION_HINT = (
    "ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM): run as root, or load the nvidia module "
    "with NVreg_RestrictProfilingToAdminUsers=0 (https://developer.nvidia.com/ERR_NVGPUCTRPERM); in a container, "
    "start it with --cap-add SYS_ADMIN"
)


def find_ncu() -> str | None:
    return find_tool("NCU", "ncu", NCU_CANDIDATES)


def filter_modes(ncu: str) -> set[str]:
    """The launch filter modes this ncu has (its --help lists them: 2022.3 global and per-gpu,
    tests/data/ncu/cpu-ncu2022.3-help.txt; 2025.3 per-launch-config too, h200-ncu2025.3-help.txt)."""
    try:
        out = subprocess.run([ncu, "--help"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return set()
    at = out.find("--filter-mode")
    # the option's own lines: up to the next option
    end = out.find("\n  --", at + 1) if at >= 0 else -1
    return (
        set(re.findall(r"^\s+([a-z][a-z-]+)\s*(?:\(default\))?\s*:", out[at:end], re.M)) if at >= 0 else set()
    )


def ncu_version(ncu: str) -> str:
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    m = re.search(r"Version (\S+)", out)
    return m.group(1) if m else "?"


def export_pages(ncu: str, rep: Path, label: str) -> tuple[Path, Path]:
    """The report's raw and details pages as CSV beside it (base units: no rounding to a scaled unit)."""
    out = []
    for page in ("raw", "details"):
        path = rep.with_name(f"{rep.name.removesuffix('.ncu-rep')}.{page}.csv")
        with open(path, "wb") as fh:
            proc = subprocess.run(
                [ncu, "--import", str(rep), "--csv", "--page", page, "--print-units", "base"],
                stdout=fh,
                stderr=subprocess.PIPE,
                timeout=3600,
            )
        if proc.returncode != 0:
            text = (proc.stderr.decode(errors="replace") + path.read_text(errors="replace")).strip()
            raise RoseprofError(_import_failure(ncu, rep, label, text))
        out.append(path)
    return out[0], out[1]


def _import_failure(ncu: str, rep: Path, label: str, text: str) -> str:
    """ncu's refusal of a report, in one line naming the user's file (ncu names the run's temporary copy), and,
    where the report says which Nsight Compute wrote it, that version beside this ncu's."""
    info = report_file.describe(rep)
    if info is None:
        return f"{label}: not an Nsight Compute report (no NVR header)"
    for spelled in {str(rep), str(rep.resolve()), str(rep.absolute())}:
        text = text.replace(spelled, label)
    mine = ncu_version(ncu)
    writer = next((v for p, v in info["versions"].items() if "compute" in p.lower()), None)
    writer = writer or next(iter(info["versions"].values()), None)
    if writer and _newer(writer, mine):
        return (
            f"{label} was written by Nsight Compute {writer} (report format {info['format']}); this ncu ({mine}) "
            f"cannot read it: use ncu {writer} or newer (set NCU), or export it where it was made "
            "(ncu --import R --csv --page raw > R.csv) and import the CSV"
        )
    last = [line for line in text.splitlines() if line.strip()][-1:] or ["no output"]
    wrote = f" (written by Nsight Compute {writer}; this ncu is {mine})" if writer else ""
    return f"ncu --import failed on {label}{wrote}: {last[0].removeprefix('==ERROR== ')}"


def _newer(a: str, b: str) -> bool:
    def key(v: str) -> tuple:
        return tuple(int(x) for x in re.findall(r"\d+", v)[:4])

    return b == "?" or key(a) > key(b)


def read_report(path: Path, raw: Path, label: str) -> Trace:
    from roseprof.drivers.ncu.pages import read_page
    from roseprof.drivers.ncu.reader import build_trace, used

    ncu = find_ncu()
    if ncu is None:
        raise RoseprofError(
            f"{label}: importing an .ncu-rep needs ncu to export it: set NCU or put ncu on PATH (Debian: "
            "scripts/install-ncu.sh), or export it with `ncu --import R --csv --page raw` and import the CSV"
        )
    raw_csv, details_csv = export_pages(ncu, path, label)
    version = _writer_version(path) or "?"
    pages = read_page(raw_csv, label, keep=used), read_page(details_csv, label, keep=used)
    return build_trace(*pages, label, version)


def _writer_version(rep: Path) -> str | None:
    info = report_file.describe(rep) or {}
    versions = info.get("versions") or {}
    return next((v for p, v in versions.items() if "compute" in p.lower()), None) or next(
        iter(versions.values()), None
    )


def kernels_listed(log: str) -> list[str]:
    """Kernel names ncu lists after "No kernels were profiled", where it lists any: the lines under a line that
    names kernels and ends with ':', indented or numbered ("Available Kernels:" then "1. name" in ncu 2025.3,
    tests/data/ncu/h100-ncu2025.3-nomatch.log; ncu 2022.3 lists none)."""
    lines = log.splitlines()
    start = next((i for i, line in enumerate(lines) if NO_KERNELS in line), None)
    names: list[str] = []
    listing = False
    for line in lines[start + 1 :] if start is not None else []:
        body = re.sub(r"^==\w+==\s?", "", line)
        if not body.strip():
            continue
        if body.rstrip().endswith(":") and "kernel" in body.lower():
            listing = True
        elif listing and (body[:1] in (" ", "\t") or re.match(r"\d+[.)]\s", body)):
            names.append(re.sub(r"^\s*(\d+[.)]\s*)?", "", body).strip())
        else:
            listing = False
    return names


class NcuCapture:
    """`roseprof ncu`: what the tool-neutral capture pipeline needs from Nsight Compute."""

    tool = "ncu"
    kernel_stamps = False  # ncu measures each launch: of the engine's own kernels, not a stamped build
    injection_library = None

    def __init__(self, options: NcuOptions, has_gpu: bool = True) -> None:
        ncu = find_ncu()
        if ncu is None:
            raise RoseprofError(
                "ncu not found: set NCU, put Nsight Compute's ncu on PATH, or install it (Debian: scripts/install-ncu.sh)"
            )
        self.ncu = ncu
        self.options = options
        self.per_launch_config = bool(options.launches_per_config) and "per-launch-config" in filter_modes(
            ncu
        )

    def engine_env(self) -> dict[str, str]:
        return {NVTX_ENV: "1"}

    def describe(self) -> dict:
        out = {
            "path": self.ncu,
            "version": ncu_version(self.ncu),
            "options": self.options.argv(self.per_launch_config),
        }
        if self.options.from_run:
            out["from_run"] = self.options.from_run
        return out

    @contextmanager
    def launch(self, cmd: list[str], env: dict[str, str], raw: Path) -> Iterator[Launch]:
        argv = [
            self.ncu,
            *self.options.argv(self.per_launch_config),
            "--export",
            str(raw / REPORT),
            "--force-overwrite",
            *cmd,
        ]
        # ncu interleaves its ==PROF== lines with the program's output: one stream, on roseprof's stderr.
        yield Launch(argv, env, raw / "ncu.log", one_stream=True)

    def own_line(self, line: bytes) -> bool:
        return bool(NCU_OWN_LINE.match(line))

    def held_line(self, line: bytes) -> bool:
        return False

    def settle(self) -> None:
        return None  # nothing of an earlier capture outlives it

    def refused(self, launch: Launch) -> str | None:
        return None

    def check(self, result, raw: Path) -> None:
        """What ncu's log says went wrong: counters refused, a program that does not exist, ncu's own failure,
        or filters that matched no kernel."""
        rc = result.returncode
        log = (raw / "ncu.log").read_text(errors="replace")
        if "ERR_NVGPUCTRPERM" in log:
            raise CaptureFailed(PERMISSION_HINT)
        if result.interrupted:
            return
        missing = re.search(r"==ERROR== ('.*' does not exist or is not an executable)", log)
        if missing:
            raise RoseprofError(missing.group(1))
        if rc != 0 and "The application returned an error code" not in log:
            errors = [line for line in log.splitlines() if line.startswith("==ERROR==")] or log.splitlines()[
                -1:
            ]
            last = (errors or ["no output"])[-1].removeprefix("==ERROR== ")
            raise CaptureFailed(f"ncu failed (exit {rc}): {last}")
        report = raw / f"{REPORT}.ncu-rep"
        if rc == 0 and not report.is_file() and NO_KERNELS in log:
            ran = kernels_listed(log)
            listed = ""
            if ran:
                more = f" (and {len(ran) - 10} more)" if len(ran) > 10 else ""
                listed = f"; kernels that ran: {', '.join(ran[:10])}{more}"
            if self.options.filters() == "no filter":
                raise RoseprofError(
                    f"ncu profiled no kernel: the command launched none on a GPU ncu can profile{listed}"
                )
            raise RoseprofError(
                f"no kernel matched the filter ({self.options.filters()}): ncu profiled none{listed}"
            )

    def collect(self, raw: Path) -> Trace:
        from roseprof.drivers.ncu.pages import read_page
        from roseprof.drivers.ncu.reader import build_trace, used

        rep = raw / f"{REPORT}.ncu-rep"
        if not rep.is_file():
            raise RoseprofError("ncu wrote no report (see raw/ncu.log in the run folder)")
        raw_csv, details_csv = export_pages(self.ncu, rep, str(rep))
        label = str(rep)
        trace = build_trace(
            read_page(raw_csv, label, keep=used),
            read_page(details_csv, label, keep=used),
            label,
            ncu_version(self.ncu),
        )
        trace.warnings.extend(self._unprofiled(trace))
        return trace

    def _unprofiled(self, trace: Trace) -> list[str]:
        """With --from: the chosen kernels ncu profiled no launch of (a kernel the earlier run saw launched only
        after ncu's launch count ran out, or not in this run of the command), named in a warning."""
        if not self.options.from_kernels:
            return []
        profiled = [trace.names[i] for i in np.unique(trace.ops.name[trace.ops.kind == KERNEL]).tolist()]
        missed = [
            n for n in self.options.from_kernels if not any(map(re.compile(name_pattern(n)).match, profiled))
        ]
        if not missed:
            return []
        bases = Counter(base_name(n) for n in missed)
        shown = ", ".join(b + (f" ({c} instantiations)" if c > 1 else "") for b, c in bases.items())
        return [
            f"ncu profiled no launch of {len(missed)} of the {len(self.options.from_kernels)} kernels --from "
            f"{self.options.from_run} chose: {shown}"
        ]
