"""Finding and driving Nsight Systems: `nsys profile`, the .qdstrm importer, `nsys export --type sqlite`."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
from pathlib import Path

from roseprof.errors import CaptureFailed, RoseprofError
from roseprof.model import Trace
from roseprof.workload.roseinfer import DECODE_STEP, NVTX_ENV

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


def find_nsys() -> str | None:
    env = os.environ.get("NSYS")
    if env:
        return env if os.access(env, os.X_OK) else None
    on_path = shutil.which("nsys")
    if on_path:
        return on_path
    for pattern in NSYS_CANDIDATES:
        for path in sorted(glob.glob(pattern), reverse=True):
            if os.access(path, os.X_OK):
                return path
    return None


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


def profile(
    nsys: str,
    cmd: list[str],
    out_base: Path,
    trace: str,
    capture_range: str,
    nvtx_capture: str | None,
    env: dict[str, str],
    log_path: Path,
) -> tuple[int, bool]:
    """Run `nsys profile`; returns (exit code, interrupted). The command's output goes to the terminal and log."""
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
            argv.append(f"--nvtx-capture={nvtx_capture or DECODE_STEP}")
            argv.append("--capture-range-end=none")
    argv += cmd  # nsys 2022.4 takes no "--": the application starts at the first non-option
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except OSError as e:
            raise CaptureFailed(f"cannot run {nsys}: {e.strerror}") from None
        interrupted = False
        try:
            assert proc.stdout is not None
            for chunk in iter(lambda: proc.stdout.read1(65536), b""):
                log.write(chunk)
                os.write(2, chunk)
            rc = proc.wait()
        except KeyboardInterrupt:
            # Ctrl-C reached nsys too (same process group); let it finish writing what it has.
            interrupted = True
            try:
                proc.send_signal(signal.SIGINT)
                rc = proc.wait(timeout=120)
            except (subprocess.TimeoutExpired, KeyboardInterrupt):
                proc.kill()
                rc = proc.wait()
            if proc.stdout is not None:
                log.write(proc.stdout.read() or b"")
    return rc, interrupted


def finish_report(nsys: str, out_base: Path) -> Path:
    """The .nsys-rep of a capture, running the importer on a leftover .qdstrm when nsys could not."""
    rep = out_base.with_suffix(".nsys-rep")
    if rep.is_file():
        return rep
    qdstrm = out_base.with_suffix(".qdstrm")
    if not qdstrm.is_file():
        raise CaptureFailed("nsys wrote no report (see raw/nsys.log in the run folder)")
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
    proc = subprocess.run(
        [nsys, "export", "--type=sqlite", "--force-overwrite=true", f"--output={out}", str(rep)],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if proc.returncode != 0 or not out.is_file():
        text = (proc.stderr or proc.stdout).strip()
        if "Version not supported" in text:
            raise RoseprofError(
                f"{label} was written by a newer Nsight Systems than this nsys ({nsys_version(nsys)}) can read: "
                "export it where it was made (nsys export --type sqlite) and import the .sqlite"
            )
        last = text.splitlines()[-1:] or ["no output"]
        raise RoseprofError(f"nsys export failed on {label}: {last[0]}")
    return out


class NsysCapture:
    """`roseprof nsys`: what the tool-neutral capture pipeline needs from Nsight Systems."""

    tool = "nsys"

    def __init__(
        self, trace: str | None, capture_range: str, nvtx_capture: str | None, has_gpu: bool
    ) -> None:
        nsys = find_nsys()
        if nsys is None:
            raise RoseprofError("nsys not found: set NSYS, put it on PATH, or run scripts/install-nsys.sh")
        self.nsys = nsys
        self.trace = trace or ("cuda,nvtx,osrt" if has_gpu else "nvtx,osrt")
        self.capture_range = capture_range
        self.nvtx_capture = nvtx_capture

    def engine_env(self) -> dict[str, str]:
        return {NVTX_ENV: "1"}

    def describe(self) -> dict:
        return {
            "path": self.nsys,
            "version": nsys_version(self.nsys),
            "trace": self.trace,
            "capture_range": self.capture_range,
        }

    def run(self, cmd: list[str], env: dict[str, str], raw: Path) -> tuple[int, bool]:
        return profile(
            self.nsys,
            cmd,
            raw / "trace",
            self.trace,
            self.capture_range,
            self.nvtx_capture,
            env,
            raw / "nsys.log",
        )

    def collect(self, raw: Path) -> Trace:
        from roseprof.drivers.nsys.reader import read_nsys_sqlite

        rep = finish_report(self.nsys, raw / "trace")
        sqlite_path = export_sqlite(self.nsys, rep, raw / "trace.sqlite")
        return read_nsys_sqlite(str(sqlite_path))
