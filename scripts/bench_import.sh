#!/usr/bin/env bash
# `roseprof import` against `nsys stats` (NVTX, kernel and NVTX-kernel summaries) on one large nsys export, side by
# side, ROUNDS times (alternating, so that a busy machine slows both alike); wall time and peak memory of each (GNU
# time), then the ratios: nsys stats' wall over roseprof's, per round and of the medians, and the peak RSS of each.
# The import writes its dashboard too (the default), as a user's does.
#
#   scripts/bench_import.sh [copies] [nvtx-threads]      # defaults: 36 5 (1.0M kernels, 194 MB, issue 43)
#
# PYTHON: the interpreter (default .venv/bin/python); ROUNDS (default 2); BASE: another checkout whose
# `roseprof import` runs beside in each round (e.g. a `git archive` of main), its ratio printed too; BIG: an
# existing export to use instead of building one. Then `show`, `diff` (the first two imports) and `open` (its
# dashboard fresh, then stale) of the stored 1M-kernel run, timed against the 2 s each of issue 43.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
PY=$(realpath -s "${PYTHON:-.venv/bin/python}")
ROUNDS=${ROUNDS:-2}
copies=${1:-36}
threads=${2:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
big=${BIG:-$work/big.sqlite}
if [ -z "${BIG:-}" ]; then
    "$PY" scripts/make_big_nsys_sqlite.py tests/data/nsys/h100-nsys2025.3-roseinfer-decode.sqlite "$big" \
        --copies "$copies" --nvtx-threads "$threads"
fi
cp "$big" "$work/stats.sqlite"
nsys=$(PYTHONPATH=$REPO "$PY" -c "from roseprof.drivers.nsys.capture import find_nsys; print(find_nsys())")
"$nsys" --version
# Report names of nsys 2022.4; 2023+ calls them nvtx_sum, cuda_gpu_kern_sum, nvtx_kern_sum.
reports=nvtxsum,gpukernsum,nvtxkernsum
"$nsys" --version | grep -q "2022" || reports=nvtx_sum,cuda_gpu_kern_sum,nvtx_kern_sum
# Each checkout's bytecode compiled first, as scripts/setup.sh does for a user's install (and pip for a wheel's):
# where the interpreter writes none (PYTHONDONTWRITEBYTECODE), every command compiles every module it imports,
# 0.3 to 0.5 s of each `diff` (docs/BENCHMARKS.md, session 27).
"$PY" -m compileall -q roseprof > /dev/null
if [ -n "${BASE:-}" ]; then (cd "$BASE" && "$PY" -m compileall -q roseprof > /dev/null); fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"

# timed TAG CMD...: runs CMD under GNU time, appends "TAG wall_s rss_kb" to $work/times
timed() {
    local tag=$1
    shift
    /usr/bin/time -o "$work/time" -f "%e %M" "$@" >/dev/null 2>"$work/err" || {
        cat "$work/err" >&2
        exit 1
    }
    read -r wall rss <"$work/time"
    echo "$tag $wall $rss" >>"$work/times"
    printf '%-26s %7.2f s wall  %9d KB peak RSS\n' "$tag" "$wall" "$rss"
}

# Each import adds a run to $work/t (kept for show/diff/open below); BASE's go to a store of their own.
import_repo() {
    timed "roseprof import" env PYTHONPATH="$REPO" "$PY" -m roseprof import "$big" \
        --traces-dir "$work/t" --dashboards-dir "$work/d"
}
import_base() {
    if [ -n "${BASE:-}" ]; then
        rm -rf "$work/tb" "$work/db"
        # from inside BASE: `python -m` puts the working folder before PYTHONPATH
        (cd "$BASE" && timed "roseprof import (BASE)" env PYTHONPATH="$BASE" "$PY" -m roseprof import "$big" \
            --traces-dir "$work/tb" --dashboards-dir "$work/db")
    fi
}

for round in $(seq "$ROUNDS"); do
    echo "round $round"
    timed "nsys stats" "$nsys" stats -q --force-overwrite true -r "$reports" -f csv -o "$work/oracle" \
        --force-export=false "$work/stats.sqlite"
    # The import right after nsys stats ran up to 0.5 s slower than the one after it (issue 43): with BASE, the
    # two take turns to go first, so that neither gains by its place.
    if [ -n "${BASE:-}" ] && [ $((round % 2)) = 0 ]; then import_base; import_repo; else import_repo; import_base; fi
done
# The stored run's views: they read the run folder's tables, never the export. No display here: `open`
# renders the dashboard where it is missing or stale and prints its path.
mapfile -t runs < <(ls "$work/t")
rp=(env PYTHONPATH="$REPO" COLUMNS=80 DISPLAY= BROWSER=true "$PY" -m roseprof)
dirs=(--traces-dir "$work/t" --dashboards-dir "$work/d")
timed "show" "${rp[@]}" show "${runs[0]}" --traces-dir "$work/t"
if [ "${#runs[@]}" -ge 2 ]; then
    timed "diff" "${rp[@]}" diff "${runs[0]}" "${runs[1]}" "${dirs[@]}"
fi
timed "open" "${rp[@]}" open "${runs[0]}" "${dirs[@]}"
touch -d @0 "$work/d/${runs[0]}.html"
timed "open (stale dashboard)" "${rp[@]}" open "${runs[0]}" "${dirs[@]}"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" - "$work/times" <<'EOF'
import statistics, sys
rows = [line.rsplit(" ", 2) for line in open(sys.argv[1]).read().splitlines()]
by = {}
for tag, wall, rss in rows:
    by.setdefault(tag, []).append((float(wall), int(rss)))
nsys = by.pop("nsys stats")
views = {tag: by.pop(tag) for tag in ("show", "diff", "open", "open (stale dashboard)") if tag in by}
for tag, runs in by.items():
    per_round = ", ".join(f"{a[0] / b[0]:.1f}x" for a, b in zip(nsys, runs))
    med = statistics.median(w for w, _ in nsys) / statistics.median(w for w, _ in runs)
    rss = max(r for _, r in runs) / max(r for _, r in nsys)
    print(f"{tag}: nsys stats' wall / its wall = {per_round} (medians: {med:.1f}x); "
          f"its peak RSS / nsys stats' = {rss:.2f}")
for tag, runs in views.items():
    wall = runs[0][0]
    print(f"{tag} of the stored run: {wall:.2f} s ({'within' if wall < 2 else 'over'} the 2 s of issue 43)")
EOF
