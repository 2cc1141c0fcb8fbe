"""What `bash scripts/gpu_check.sh variants` measured: each kernel variant's batch-1 TPOT per round and its fused
kernels' phases (issue 50).

    python scripts/variant_summary.py DIR

DIR holds the stage's files: `b1-NAME-ROUND.json` (roseinfer.benchmark_streaming --json: a round's TPOT is the
median of its runs' TPOT p50s, and the HBM floor's fraction likewise) and `stamps-NAME.jsonl` (a stamped run's
kernel stamps, roseinfer/cuda_ext/stamps.py: per kernel, the p50 over launches of each phase, in µs, and of the
time after the PDL wait, phases 1 to the end). Variants print in the order they first ran (the file names carry
no order, so by each one's first round). A file that does not parse is named on stderr and exit is 1.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

B1_FILE = re.compile(r"b1-(?P<name>.+)-(?P<round>\d+)\.json$")
STAMPS_FILE = re.compile(r"stamps-(?P<name>.+)\.jsonl$")


def rounds(folder: Path) -> dict[str, list[dict]]:
    """{variant: [{round, tpot_ms, lo, hi, floor}, ...]} from the b1 files, rounds in order."""
    out: dict[str, list[dict]] = {}
    for path in sorted(folder.glob("b1-*.json")):
        m = B1_FILE.match(path.name)
        if m is None:
            continue
        try:
            doc = json.loads(path.read_text())
            tpots = [run["tpot_ms"]["50"] for run in doc["runs"]]
            floor = doc.get("hbm_floor", {}).get("fraction_of_floor") or []
            if not tpots:
                raise ValueError("no runs")
        except (ValueError, KeyError, TypeError, AttributeError) as e:  # json.JSONDecodeError is a ValueError
            raise ValueError(f"{path}: not a benchmark_streaming --json file ({e!r})") from None
        out.setdefault(m["name"], []).append(
            {
                "round": int(m["round"]),
                "tpot_ms": statistics.median(tpots),
                "lo": min(tpots),
                "hi": max(tpots),
                "floor": statistics.median(floor) if floor else None,
                "mtime": path.stat().st_mtime,
            }
        )
    for rs in out.values():
        rs.sort(key=lambda r: r["round"])
    return dict(sorted(out.items(), key=lambda kv: min(r["mtime"] for r in kv[1])))


def phases(path: Path) -> dict[str, dict]:
    """{kernel: {launches, regions, p50_us: [phase...], after_wait_us}} from one stamps file."""
    per: dict[str, list[list[int]]] = {}
    regions: dict[str, list[str]] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            b = rec["bounds_ns"]
            durations = [b[k + 1] - b[k] for k in range(len(b) - 1)] + [b[-1] - b[1]]
            if len(rec["regions"]) != len(b) - 1:
                raise ValueError("regions and bounds_ns disagree")
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise ValueError(f"{path}:{number}: not a kernel stamps line ({e!r})") from None
        per.setdefault(rec["kernel"], []).append(durations)
        regions.setdefault(rec["kernel"], rec["regions"])
    out = {}
    for kernel, launches in per.items():
        cols = list(zip(*launches))
        out[kernel] = {
            "launches": len(launches),
            "regions": regions[kernel],
            "p50_us": [statistics.median(c) / 1e3 for c in cols[:-1]],
            "after_wait_us": statistics.median(cols[-1]) / 1e3,
        }
    return out


def report(folder: Path) -> str:
    if not any(folder.glob("b1-*.json")) and not any(folder.glob("stamps-*.jsonl")):
        raise ValueError(f"{folder}: no b1-NAME-ROUND.json or stamps-NAME.jsonl (the variants stage's files)")
    lines = []
    for name, rs in rounds(folder).items():
        for r in rs:
            floor = f", floor {r['floor']:.1%}" if r["floor"] is not None else ""
            lines.append(
                f"{name:12s} round {r['round']}: TPOT p50 {r['tpot_ms']:.4f} ms "
                f"(runs {r['lo']:.4f}-{r['hi']:.4f}){floor}"
            )
        lines.append(f"{name:12s} median of rounds {statistics.median(r['tpot_ms'] for r in rs):.4f} ms")
    for path in sorted(folder.glob("stamps-*.jsonl")):
        m = STAMPS_FILE.match(path.name)
        lines.append(f"{m['name']} (stamped run):")
        for kernel, k in phases(path).items():
            short = " / ".join(r.rsplit(".", 1)[-1] for r in k["regions"])
            values = " / ".join(f"{v:.2f}" for v in k["p50_us"])
            lines.append(f"  {kernel}, {k['launches']} launches, p50 µs: {short} = {values}")
            lines.append(f"    after the wait {k['after_wait_us']:.2f}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python scripts/variant_summary.py DIR (the variants stage's folder)", file=sys.stderr)
        return 2
    try:
        print(report(Path(argv[0])))
    except (OSError, ValueError) as e:
        print(f"variant_summary: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
