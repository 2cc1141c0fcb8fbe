"""What `bash scripts/gpu_check.sh variants` measured: each kernel variant's batch-1 TPOT per round and its fused
kernels' phases (issue 50).

    python scripts/variant_summary.py DIR

DIR holds the stage's files: `b1-NAME-ROUND.json` (roseinfer.benchmark_streaming --json: a round's TPOT is the
median of its runs' TPOT p50s, and the HBM floor's fraction likewise), `stamps-NAME.jsonl` (a stamped run's kernel
stamps, roseinfer/cuda_ext/stamps.py: per kernel, the p50 over launches of each phase, in µs, and of each launch's
time after its PDL wait, phases 1 to the end; the latter is not the sum of the phases' p50s; and each handoff
between two stamped kernels of the PDL chain, which no phase covers: from the last block's end stamp of one launch
to the last block of the next past its wait, over the pairs whose next launch started before the one before ended)
and `variants.txt`
(the names in the order VARIANTS gave them; without it, by name). A file that does not parse is named on stderr,
with exit 1.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from roseinfer.names import KERNEL_STAMPS_VERSION  # noqa: E402

B1_FILE = re.compile(r"b1-(?P<name>.+)-(?P<round>\d+)\.json$")
STAMPS_FILE = re.compile(r"stamps-(?P<name>.+)\.jsonl$")


def _number(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{value!r} is not a number")
    return float(value)


def b1_round(path: Path) -> dict:
    """One b1 file -> {tpot_ms, lo, hi, floor}: the median, least and most of its runs' TPOT p50s (ms), and the
    median of their fractions of the HBM floor (None without a floor, as on CPU)."""
    try:
        doc = json.loads(path.read_text())
        tpots = [_number(run["tpot_ms"]["50"]) for run in doc["runs"]]
        floor = [_number(f) for f in (doc.get("hbm_floor") or {}).get("fraction_of_floor") or []]
        if not tpots:
            raise ValueError("no runs")
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a benchmark_streaming --json file ({e})") from None
    return {
        "tpot_ms": statistics.median(tpots),
        "lo": min(tpots),
        "hi": max(tpots),
        "floor": statistics.median(floor) if floor else None,
    }


def rounds(folder: Path) -> dict[str, list[tuple[int, dict]]]:
    """{variant: [(round, b1_round), ...]} from the b1 files, rounds in order."""
    out: dict[str, list[tuple[int, dict]]] = {}
    for path in folder.glob("b1-*.json"):
        m = B1_FILE.match(path.name)
        if m is not None:
            out.setdefault(m["name"], []).append((int(m["round"]), b1_round(path)))
    return {name: sorted(rs, key=lambda r: r[0]) for name, rs in out.items()}


def phases(path: Path) -> dict[str, dict]:
    """{kernel: {launches, regions, p50_us: [phase...], after_wait_us}} from one stamps file, and under the key
    None the handoffs: {(kernel, next kernel): {pairs, p50_us}}."""
    per: dict[str, list[list[int]]] = {}
    launches_in_order: list[tuple[str, list[int]]] = []
    regions: dict[str, list[str]] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            if rec["v"] != KERNEL_STAMPS_VERSION:
                raise ValueError(f"version {rec['v']!r}, not {KERNEL_STAMPS_VERSION}")
            kernel, names = rec["kernel"], rec["regions"]
            b = rec["bounds_ns"]  # ints: as floats, %globaltimer's ~1.8e18 ns would keep 256 ns steps
            if not isinstance(b, list) or any(isinstance(t, bool) or not isinstance(t, int) for t in b):
                raise TypeError("bounds_ns must be integer ns")
            if not isinstance(kernel, str) or len(names) != len(b) - 1 or len(b) < 3:
                raise ValueError("kernel, regions and bounds_ns disagree")
            if regions.setdefault(kernel, names) != names:
                raise ValueError(f"{kernel}'s regions differ from its first line's")
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}:{number}: not a kernel stamps line ({e})") from None
        per.setdefault(kernel, []).append([b[k + 1] - b[k] for k in range(len(b) - 1)] + [b[-1] - b[1]])
        launches_in_order.append((kernel, b))
    if not per:
        raise ValueError(f"{path}: no launches (a stamped run killed before its first step?)")
    out = {}
    for kernel, launches in per.items():
        cols = list(zip(*launches))
        out[kernel] = {
            "launches": len(launches),
            "regions": regions[kernel],
            "p50_us": [statistics.median(c) / 1e3 for c in cols[:-1]],
            "after_wait_us": statistics.median(cols[-1]) / 1e3,
        }
    out[None] = handoffs(launches_in_order)
    return out


def handoffs(launches: list[tuple[str, list[int]]]) -> dict[tuple[str, str], dict]:
    """{(kernel, next kernel): {pairs, p50_us}}: the launches in the order they started on the GPU (a file's lines
    are in each kernel's launch order, not interleaved), each with the one after it where that one started before it
    ended (a dependent launch of the PDL chain; not across a kernel that has no stamps, nor an eager step's plain
    launches): the next kernel's last block past its wait (bounds[1]) less this launch's end (its last bound)."""
    ordered = sorted(launches, key=lambda kb: kb[1][0])
    gaps: dict[tuple[str, str], list[int]] = {}
    for (kernel, b), (nxt, nb) in zip(ordered, ordered[1:]):
        if nb[0] < b[-1]:
            gaps.setdefault((kernel, nxt), []).append(nb[1] - b[-1])
    return {pair: {"pairs": len(g), "p50_us": statistics.median(g) / 1e3} for pair, g in gaps.items()}


def order(folder: Path, names) -> list[str]:
    """names in the order of DIR/variants.txt (the stage's VARIANTS), the rest by name after them."""
    listed = folder / "variants.txt"
    given = listed.read_text().split() if listed.is_file() else []
    return [n for n in given if n in names] + sorted(set(names) - set(given))


def report(folder: Path) -> str:
    stamps = {STAMPS_FILE.match(p.name)["name"]: p for p in folder.glob("stamps-*.jsonl")}
    by_variant = rounds(folder)
    if not by_variant and not stamps:
        raise ValueError(f"{folder}: no b1-NAME-ROUND.json or stamps-NAME.jsonl (the variants stage's files)")
    lines = []
    for name in order(folder, by_variant):
        for number, r in by_variant[name]:
            floor = f", floor {r['floor']:.1%}" if r["floor"] is not None else ""
            lines.append(
                f"{name:12s} round {number}: TPOT p50 {r['tpot_ms']:.4f} ms (runs {r['lo']:.4f}-{r['hi']:.4f}){floor}"
            )
        median = statistics.median(r["tpot_ms"] for _, r in by_variant[name])
        lines.append(f"{name:12s} median of rounds {median:.4f} ms")
    for name in order(folder, stamps):
        lines.append(f"{name} (stamped run):")
        found = phases(stamps[name])
        chain = found.pop(None)
        for kernel, k in found.items():
            short = " / ".join(r.rsplit(".", 1)[-1] for r in k["regions"])
            values = " / ".join(f"{v:.2f}" for v in k["p50_us"])
            lines.append(f"  {kernel}, {k['launches']} launches, p50 µs: {short} = {values}")
            lines.append(f"    after the wait {k['after_wait_us']:.2f} (p50 of each launch's sum)")
        for (kernel, nxt), h in chain.items():
            lines.append(f"  handoff {kernel} -> {nxt}: p50 {h['p50_us']:.2f} µs ({h['pairs']} PDL pairs)")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python scripts/variant_summary.py DIR (the variants stage's folder)", file=sys.stderr)
        return 2
    try:
        print(report(Path(argv[0])))
    except (OSError, ValueError, UnicodeDecodeError) as e:
        print(f"variant_summary: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
