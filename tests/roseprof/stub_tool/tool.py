#!/usr/bin/env python3
"""A stand-in for a profiler in the capture contract test (tests/roseprof/test_capture_contract.py): run as
`tool.py nsys ARGS` or `tool.py ncu ARGS`, it prints lines of the tool's own, runs the program as its child, and on
one SIGINT stops the program and still writes its report, as the real tools do. What roseprof then reads is a
real file: nsys' export copies tests/data/nsys/cpu-nsys2022.4-nvtx.sqlite; ncu's import is tests/roseprof/fake_ncu.
"""

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "data"
tool, args = sys.argv[1], sys.argv[2:]


def run_program(cmd: list[str]) -> int:
    child = subprocess.Popen(cmd)
    signal.signal(signal.SIGINT, lambda *_: child.send_signal(signal.SIGINT))
    return child.wait()


if tool == "ncu":
    if args == ["--version"] or "--import" in args:
        os.execv(sys.executable, [sys.executable, str(HERE.parent / "fake_ncu" / "ncu"), *args])
    flags = {"--nvtx", "--force-overwrite"}
    i, export = 0, None
    while i < len(args) and args[i].startswith("-"):
        export = args[i + 1] if args[i] == "--export" else export
        i += 1 if args[i] in flags else 2
    print("==PROF== Connected to process", flush=True)
    rc = run_program(args[i:])
    print('==PROF== Profiling "vectorized_elementwise_kernel" - 0: 0%....50%....100% - 38 passes', flush=True)
    Path(f"{export}.ncu-rep").write_bytes(b"NVR\x00")
    sys.exit(rc)

# nsys
if args == ["--version"]:
    print("NVIDIA Nsight Systems version 2022.4.2.1-stub")
elif args[0] == "export":
    out = next(a for a in args if a.startswith("--output=")).removeprefix("--output=")
    shutil.copyfile(DATA / "nsys" / "cpu-nsys2022.4-nvtx.sqlite", out)
elif args[0] == "profile":
    i = 1
    while args[i].startswith("-"):
        i += 1
    base = next(a for a in args if a.startswith("--output=")).removeprefix("--output=")
    print("Collecting data...", flush=True)
    rc = run_program(args[i:])
    Path(f"{base}.nsys-rep").write_bytes(b"stub report")
    print(f"Generating '{base}.qdstrm'", flush=True)
    print(f"Generated:\n    {base}.nsys-rep", flush=True)
    sys.exit(rc)
