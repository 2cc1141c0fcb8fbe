#!/usr/bin/env bash
# The README's own A/B, N fresh pairs (issue 44): the demo as `make demo` captures it (roseprof nsys's built-in
# command) against the same with FLAG, R runs a side, and a same-code pair beside each; then how often the diff's
# first lines say "slower" and name REGION, and how often the same-code pairs stay quiet (no faster/slower word in
# the first lines, the gate at 10% passes).
#
#   bash scripts/ab_pairs.sh OUT N [FLAG] [R] [REGION] [BURNERS]
#   bash scripts/ab_pairs.sh /tmp/ab 10                                   # --no-batched-kv-append, 3 runs a side
#   bash scripts/ab_pairs.sh /tmp/ab-roll 10 --no-batched-rollover 3 roseinfer.kv.append_token   # named at rollover steps
#   bash scripts/ab_pairs.sh /tmp/ab-busy 10 --no-batched-kv-append 3 roseinfer.kv.append_token 2   # 2 CPU burners
#
# Every capture goes to OUT/traces (run names ab<i>-base, ab<i>-flag, ab<i>-same), every diff's terminal text (80
# columns) and --json to OUT/diffs, the counts to OUT/summary.txt. BURNERS CPU-bound processes run beside the
# captures (started and stopped here). REDIFF=1: no capture, the stored pairs of OUT diffed again with this code;
# CAPTURE_ONLY=1: the captures alone (diff them later with REDIFF=1), e.g. while the diff's code is still changing;
# JSON=0: no --json diffs (the counts read the terminal text alone; each group diff is a minute of CPU on 2 cores).
set -euo pipefail
OUT=$(realpath -m "${1:?usage: ab_pairs.sh OUT N [FLAG] [R] [REGION] [BURNERS]}")
N=${2:?how many pairs}
FLAG=${3:---no-batched-kv-append}
R=${4:-3}
REGION=${5:-roseinfer.kv.append_token}
BURNERS=${6:-0}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=/work/main/.venv/bin/python
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
# `python -m` puts the working folder first on sys.path: run from ROOT, or another checkout's roseprof is diffed
cd "$ROOT"
mkdir -p "$OUT/diffs"
DIRS=(--traces-dir "$OUT/traces" --dashboards-dir "$OUT/dashboards")

pids=()
cleanup() { for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
[ -n "${REDIFF:-}" ] && BURNERS=0
for _ in $(seq 1 "$BURNERS"); do
  "$PY" -c "while True: pass" &
  pids+=($!)
done

capture() {  # name [flag]
  [ -n "${REDIFF:-}" ] && return 0
  "$PY" -m roseprof nsys --repeat "$R" --name "$1" "${DIRS[@]}" ${2:+-- "$2"} >/dev/null 2>&1
}

for i in $(seq 1 "$N"); do
  echo "pair $i/$N  $(date -u +%H:%M:%S)  load $(cut -d' ' -f1-3 /proc/loadavg)"
  capture "ab$i-base"
  capture "ab$i-flag" "$FLAG"
  capture "ab$i-same"
  [ -n "${CAPTURE_ONLY:-}" ] && continue
  for other in flag same; do
    base="$OUT/diffs/ab$i-$other"
    COLUMNS=80 "$PY" -m roseprof diff "ab$i-base" "ab$i-$other" "${DIRS[@]}" --fail-on-regression 10 \
      >"$base.txt" 2>&1 && echo 0 >"$base.rc" || echo $? >"$base.rc"
    [ "${JSON:-1}" = 0 ] || "$PY" -m roseprof diff "ab$i-base" "ab$i-$other" "${DIRS[@]}" --json >"$base.json" 2>/dev/null || true
    # the same captures, one run a side (each name's latest run): more runs must never say less
    COLUMNS=80 "$PY" -m roseprof diff "ab$i-base" "ab$i-$other" "${DIRS[@]}" --latest >"$base.latest.txt" 2>&1 || true
  done
done

[ -n "${CAPTURE_ONLY:-}" ] && exit 0
"$PY" - "$OUT" "$N" "$REGION" <<'EOF' | tee "$OUT/summary.txt"
import re, sys
from pathlib import Path

out, n, region = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]


def first_lines(path):
    """The diff's answer: its first lines from the answer sentence (after the sides and the one-run note, whose
    own text says "a faster/slower word") to the first table."""
    lines = path.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(("after is slower", "after is faster", "no clear change"))), 0)
    end = next(
        (i for i, line in enumerate(lines) if i > start and (not line.strip() or line.split()[0] == "figure")),
        len(lines),
    )
    return " ".join(lines[start:end])


named = quiet = gated = named_one = less = machines = 0
for i in range(1, n + 1):
    ab, same = first_lines(out / f"diffs/ab{i}-flag.txt"), first_lines(out / f"diffs/ab{i}-same.txt")
    one = first_lines(out / f"diffs/ab{i}-flag.latest.txt")
    hit = "slower" in ab and region in ab
    hit_one = "slower" in one and region in one
    named_one += hit_one
    less += hit_one and not hit
    # wall-clock figures a slower machine explains are worded so, not as the code's (issue 44): counted apart
    machine = "the machine was slower" in same
    calm = not re.search(r"\b(faster|slower)\b", re.sub(r"(faster|slower)\s+\(the machine, not the code\)|the machine was slower", "", same))
    machines += machine
    rc = (out / f"diffs/ab{i}-same.rc").read_text().strip()
    named += hit
    quiet += calm
    gated += rc == "0"
    said = " (the machine was slower, said)" if machine else ""
    print(f"pair {i}: A/B {'named' if hit else 'NOT named'}; same code {'quiet' if calm else 'WORDED'}{said}, gate rc {rc}")
print(f"A/B: 'slower' and {region} in the first lines in {named} of {n}")
print(f"A/B, one run a side (--latest, the same captures): named in {named_one} of {n}; the group less decisive in {less}")
print(f"same code: no faster/slower word in {quiet} of {n} (a slower machine said in {machines}); gate at 10% passed in {gated} of {n}")
EOF
