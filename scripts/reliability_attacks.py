"""The full-size attacks of issue 23, run as a user runs roseprof (a subprocess each), with wall time, peak memory
and what was said. The test suite runs small versions of each (tests/roseprof/test_endless_reads.py,
test_hostile_kineto.py, test_hostile_ncu.py); this script runs the sizes the robustness run used.

    PYTHONPATH=. OMP_NUM_THREADS=1 python scripts/reliability_attacks.py [WORKDIR]

Every input is built from a real fixture in tests/data. Prints one line per attack:
    attack | exit | wall s | peak MB | .tmp- left | first stderr line (or the run's kernel count)
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# `roseprof` in a child that reports its own peak RSS, as the tests measure it (run with PYTHONPATH=.).
from tests.roseprof.peak_memory import CHILD

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
NSYS_FIXTURES = [
    DATA / "nsys" / "cpu-nsys2022.4-nvtx.sqlite",
    DATA / "nsys" / "h100-nsys2025.3-matmul-nvtx.sqlite",
    DATA / "nsys" / "public" / "NVIDIA__Fuser__report2.sqlite",
    DATA / "nsys" / "public" / "hpcgroup__pipit__saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
]
H100_KINETO = DATA / "torch" / "h100-torch2.11-matmul-trace.json"
DETAILS = DATA / "ncu" / "brycelelbach__nsightful__copy_blocked.csv"
RAW = DATA / "ncu" / "tn-raw.csv"
TIMEOUT_S = 300


def roseprof(work: Path, *args: str) -> dict:
    """Run `roseprof ARGS` with the store in `work`; its exit code, wall time, peak RSS and stderr."""
    traces = work / "t"
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, *args, "--traces-dir", str(traces), "--dashboards-dir", str(work / "d")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        err += f"\nKILLED after {TIMEOUT_S} s"
    wall = time.monotonic() - t0
    err, _, peak = err.rpartition("PEAK ")
    left = [p.name for p in traces.iterdir() if p.name.startswith(".tmp-")] if traces.exists() else []
    return {"code": proc.returncode, "wall_s": wall, "peak_mb": int(peak or 0) / 1e6, "tmp_left": left,
            "out": out, "err": err}  # fmt: skip


def report(name: str, r: dict, note: str = "") -> None:
    first = next((line for line in r["err"].splitlines() if line.strip()), "") or note
    print(
        f"{name} | {r['code']} | {r['wall_s']:.1f} | {r['peak_mb']:.0f} | {len(r['tmp_left'])} | {first[:160]}"
    )
    sys.stdout.flush()


def endless_views(work: Path) -> None:
    for src in NSYS_FIXTURES:
        path = work / f"endless-{src.name}"
        shutil.copyfile(src, path)
        conn = sqlite3.connect(path)
        conn.execute("DROP TABLE StringIds")
        conn.execute("CREATE VIEW StringIds AS WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) "
                     "SELECT x AS id, 'a' AS value FROM n")  # fmt: skip
        conn.commit()
        conn.close()
        report(f"nsys endless view ({src.stem[:30]})", roseprof(work / path.stem, "import", str(path)))


def kineto_with_name(path: Path, name_bytes: int) -> None:
    """The H100 trace with its first kernel's name `name_bytes` long, gzipped, streamed to disk."""
    text = H100_KINETO.read_text()
    i = text.index('"cat": "kernel"')
    j = text.index('"name": "', i) + len('"name": "')
    with gzip.open(path, "wb", compresslevel=1) as fh:
        fh.write(text[:j].encode())
        block = b"n" * (16 << 20)
        for _ in range(name_bytes // len(block)):
            fh.write(block)
        fh.write(b"n" * (name_bytes % len(block)))
        fh.write(text[j:].encode())


def huge_names(work: Path) -> None:
    for size in (8 << 20, 128 << 20, 1 << 30):
        path = work / f"name-{size >> 20}MB.json.gz"
        kineto_with_name(path, size)
        r = roseprof(work / path.stem, "import", str(path))
        report(f"kineto {size >> 20} MB name ({path.stat().st_size / 1e6:.1f} MB gz)", r, "stored")
        runs = (
            [p for p in (work / path.stem / "t").iterdir() if not p.name.startswith(".")]
            if r["code"] == 0
            else []
        )
        for extra in ([], ["--json"]):
            if runs:
                report(
                    f"  show {' '.join(extra)}",
                    roseprof(work / path.stem, "show", runs[0].name, *extra),
                    "shown",
                )


def deep_and_double(work: Path) -> None:
    text = H100_KINETO.read_text().rstrip()
    deep = "[" * 100_000 + "]" * 100_000
    k = text.index('"args": {', text.index('"cat": "kernel"')) + len('"args": {')
    cases = {
        "deep array in args": text[:k] + f'"deep": {deep}, ' + text[k:],
        "deep object in args": text[:k]
        + '"deep": '
        + '{"a":' * 100_000
        + "1"
        + "}" * 100_000
        + ", "
        + text[k:],
        "deep array in header": text[:-1] + f', "deep": {deep}}}',
        "two traceEvents arrays": text[:-1] + ', "traceEvents": []}',
    }
    for name, content in cases.items():
        path = work / f"{name.replace(' ', '-')}.json"
        path.write_text(content)
        report(f"kineto {name}", roseprof(work / path.stem, "import", str(path)))


def ncu_scale(work: Path) -> None:
    rows = list(csv.reader(io.StringIO(DETAILS.read_text())))
    header, body = rows[0], rows[1:]
    ids = len({r[0] for r in body})  # launches in the export; each copy renumbers them after the last
    path = work / "details-1M.csv"
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh, quoting=csv.QUOTE_ALL, lineterminator="\n")
        out.writerow(header)
        n, k = 0, 0
        while n < 1_000_000:
            for r in body:
                out.writerow([str(int(r[0]) + k * ids), *r[1:]])
            n, k = n + len(body), k + 1
    r = roseprof(work / "d1m", "import", str(path))
    report(f"ncu details {n:,} rows ({path.stat().st_size / 1e6:.0f} MB)", r, _kernels(work / "d1m"))
    raw = list(csv.reader(io.StringIO(RAW.read_text())))
    header, units, body = raw[0], raw[1], raw[2:]
    extra, last = 2240 - len(header), len(header) - 1
    path = work / "raw-5000x2240.csv"
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh, quoting=csv.QUOTE_ALL, lineterminator="\n")
        out.writerow(header + [f"{header[last]}.copy{j}" for j in range(extra)])
        out.writerow(units + [units[last]] * extra)
        for k in range(5000):
            r = body[k % len(body)]
            out.writerow([str(k), *r[1:], *[r[last]] * extra])
    r = roseprof(work / "raw", "import", str(path))
    report(f"ncu raw 5,000 x 2,240 ({path.stat().st_size / 1e6:.0f} MB)", r, _kernels(work / "raw"))


def _kernels(work: Path) -> str:
    runs = [p for p in (work / "t").iterdir() if not p.name.startswith(".")] if (work / "t").exists() else []
    if not runs:
        return ""
    return f"stored: {json.loads((runs[0] / 'summary.json').read_text())['gpu_ops']['kernels']:,} kernels"


def main() -> None:
    work = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="roseprof-attacks-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    print("attack | exit | wall s | peak MB | .tmp- left | said")
    for attack in (endless_views, deep_and_double, huge_names, ncu_scale):
        attack(work)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
