#!/usr/bin/env bash
# `roseprof show`, `diff` and `open` of two stored runs (e.g. two imports of the 1M-kernel export of issue 43),
# this checkout's code and BASE's (e.g. a `git archive` of main) alternately, ROUNDS times: wall and CPU time
# (user + sys) and peak RSS of each command (GNU time), the load average before and after. Both sides read the same
# run folders (stored by either), each side its pages in a dashboards folder of its own. Last, the
# medians of each command on each side and how many rounds this checkout's took less CPU.
#
#   TRACES=/tmp/speed43/t A=RUN_A B=RUN_B BASE=/tmp/speed43/base [ROUNDS=3] bash scripts/bench_views.sh
#
# `open` is timed twice: with the run's page current (nothing to render), then with it made stale (rendered again).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
PY=$(realpath -s "${PYTHON:-.venv/bin/python}")
ROUNDS=${ROUNDS:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for side in BASE branch; do  # each side's page of A rendered once, so that the first `open` finds it current
    code=$REPO
    [ "$side" = BASE ] && code=$BASE
    (cd "$code" && env PYTHONPATH="$code" DISPLAY= BROWSER=true "$PY" -m roseprof open "$A" --traces-dir "$TRACES" \
        --dashboards-dir "$work/d-$side" >/dev/null)
done
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
for round in $(seq "$ROUNDS"); do
    for side in BASE branch; do
        code=$REPO
        [ "$side" = BASE ] && code=$BASE
        dash=$work/d-$side
        rp=(env PYTHONPATH="$code" COLUMNS=80 DISPLAY= BROWSER=true "$PY" -m roseprof)
        dirs=(--traces-dir "$TRACES" --dashboards-dir "$dash")
        # from inside the checkout: `python -m` puts the working folder before PYTHONPATH
        for cmd in "show $A" "diff $A $B" "open $A" "open-stale $A"; do
            verb=${cmd%% *}
            if [ "$verb" = open-stale ]; then
                touch -d @0 "$dash/$A.html"
                verb=open
            fi
            (cd "$code" && /usr/bin/time -o "$work/time" -f "%e %U %S %M" "${rp[@]}" "$verb" ${cmd#* } "${dirs[@]}" \
                >/dev/null 2>"$work/err") || { [ "$verb" = diff ] || { cat "$work/err" >&2; exit 1; }; }
            read -r wall user sys rss <"$work/time"
            cpu=$(echo "$user + $sys" | bc)
            echo "$side ${cmd%% *} $wall $cpu" >>"$work/times"
            printf 'round %s  %-6s  %-10s %6.2f s wall  %5.2f s CPU  %7d KB\n' "$round" "$side" "${cmd%% *}" \
                "$wall" "$cpu" "$rss"
        done
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
# Medians of the rounds, and in how many rounds this checkout's command took less CPU than BASE's beside it.
"$PY" - "$work/times" <<'PY'
import statistics, sys
by = {}
for line in open(sys.argv[1]):
    side, cmd, wall, cpu = line.split()
    by.setdefault((cmd, side), []).append((float(wall), float(cpu)))
for cmd in dict.fromkeys(cmd for cmd, _ in by):
    base, branch = by[(cmd, "BASE")], by[(cmd, "branch")]
    med = [(statistics.median(w for w, _ in r), statistics.median(c for _, c in r)) for r in (base, branch)]
    fewer = sum(b[1] < a[1] for a, b in zip(base, branch))
    print(f"{cmd}: BASE {med[0][1]:.2f} s CPU, {med[0][0]:.2f} s wall; this checkout {med[1][1]:.2f} s CPU, "
          f"{med[1][0]:.2f} s wall (CPU, BASE / this: {med[0][1] / med[1][1]:.2f}x; less in {fewer} of {len(base)} rounds; "
          f"{'within' if med[1][0] < 2 else 'over'} the 2 s of issue 43)")
PY
