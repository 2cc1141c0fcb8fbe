#!/usr/bin/env bash
# Dump every output a pure refactor must keep byte-identical, for every fixture under tests/data/: `show` (80
# columns, piped), `show --json`, the stored summary.json, the run dashboards, `export --format chrome`, and
# `diff` / `diff --json` of a few pairs. Run it at two commits and compare the folders:
#
#   git worktree add /tmp/base <commit>
#   (cd /tmp/base && bash /path/to/scripts/refactor_outputs.sh /tmp/out-base)
#   bash scripts/refactor_outputs.sh /tmp/out-head
#   diff -r /tmp/out-base /tmp/out-head
#
# Run ids, timestamps and the temporary folder's path are masked (they differ between any two imports); nothing
# else is. PYTHON names the interpreter (default: python3); the checkout the script is run from is imported.
set -uo pipefail
OUT=$(realpath -m "${1:?usage: refactor_outputs.sh OUT_DIR}")
PY=${PYTHON:-python3}
REPO=$(pwd)
WORK=$(mktemp -d /tmp/refactor-outputs.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# The fixtures are imported from a copy in the temporary folder: a path the views print has the same length from
# any checkout, so it wraps at the same place in both outputs.
D=$WORK/data
cp -r "$REPO/tests/data" "$D"
# One string hash seed: a diff lists new and vanished kernels of equal time in the order of a set of their names.
export PYTHONHASHSEED=0 PYTHONPATH=$REPO ROSEPROF_TRACES_DIR=$WORK/t ROSEPROF_DASHBOARDS_DIR=$WORK/d COLUMNS=80
rm -rf "$OUT" && mkdir -p "$OUT"

rp() { "$PY" -m roseprof "$@"; }

# Masks what differs between any two imports of one file: run ids (<date>-<time>-<name>-<hex>), ISO times, the
# temporary folder, the checkout's path.
mask() {
    sed -E -e "s#$WORK#<tmp>#g" -e "s#$REPO#<repo>#g" \
        -e 's#[0-9]{8}T[0-9]{6}Z-[A-Za-z0-9._-]*-[0-9a-f]{4}#<run-id>#g' \
        -e 's#[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.]+( ?UTC|Z|[+-][0-9:]+)?#<time>#g'
}

# name, then the import's arguments
imp() {
    local name=$1
    shift
    { rp import "$@" --name "$name" 2>&1; echo "exit $?"; } | mask >"$OUT/import-$name.txt" || true
}

imp nvtx-cpu "$D/nsys/cpu-nsys2022.4-nvtx.sqlite"
imp nvtx-cpu2 "$D/nsys/cpu-nsys2022.4-nvtx.sqlite"
imp matmul "$D/nsys/h100-nsys2025.3-matmul-nvtx.sqlite" --step-range roseinfer.model.forward
imp matmul-rep "$D/nsys/h100-nsys2025.3-matmul-nvtx.nsys-rep"
# Fixtures kept xz-compressed (tests.helpers.unpacked) are unpacked beside their step logs first.
for f in "$D"/nsys/*.sqlite.xz; do
    [ -e "$f" ] && xz -d "$f"
done
# Every engine capture: the .sqlite beside its rank 0 step log (the other ranks' logs are found beside it).
for log in "$D"/nsys/*.steplog.jsonl; do
    base=$(basename "$log" .steplog.jsonl)
    case $base in *.steplog.rank*) continue ;; esac
    [ -e "$D/nsys/$base.sqlite" ] && imp "$base" "$D/nsys/$base.sqlite" --steplog "$log"
done
imp hf-graph "$D/nsys/h100-nsys2025.3-hf-graph.sqlite" --step-range hf.step
for f in "$D"/nsys/public/*.sqlite "$D"/nsys/public/*.qdrep; do
    imp "pub-$(basename "$f" | cut -c1-24)" "$f"
done
imp torch-graphs "$D/torch/h100-torch2.11-roseinfer-graphs.json.gz" \
    --steplog "$D/torch/h100-torch2.11-roseinfer-graphs.steplog.jsonl"
imp torch-matmul "$D/torch/h100-torch2.11-matmul-trace.json"
imp torch-hf-graph "$D/torch/h100-torch2.11-hf-graph.json.gz"
imp torch-tracelens "$D/torch/AMD-AGI__TraceLens__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
imp torch-hta "$D/torch/facebookresearch__HolisticTraceAnalysis__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
imp torch-kineto "$D/torch/pytorch__kineto__worker0.1623143089861.pt.trace.json.gz"
for tp in "$D"/torch/*-tp[0-9]*/; do
    tp=$(basename "$tp")
    imp "$tp" "$D/torch/$tp" --steplog "$D/torch/$tp/steplog.jsonl"
done
for f in "$D"/ncu/*.csv; do
    imp "ncu-$(basename "$f" .csv | cut -c1-24)" "$f"
done

# Per stored run: its views, its stored files, its dashboard and its Chrome export.
for run in "$WORK"/t/*/; do
    run=${run%/}
    id=$(basename "$run")
    [ -f "$run/manifest.json" ] || continue
    name=$(sed -E 's#^[0-9]{8}T[0-9]{6}Z-(.*)-[0-9a-f]{4}$#\1#' <<<"$id")
    n=$name
    [ -e "$OUT/run-$n" ] && n=$name-2
    mkdir -p "$OUT/run-$n"
    { rp show "$id" 2>&1 | cat; echo "exit ${PIPESTATUS[0]}"; } | mask >"$OUT/run-$n/show.txt"
    { rp show "$id" --json 2>&1; echo "exit $?"; } | mask >"$OUT/run-$n/show.json"
    for f in "$run"/*.json "$run"/*.jsonl; do
        [ -f "$f" ] && [ "$(basename "$f")" != manifest.json ] && mask <"$f" >"$OUT/run-$n/stored-$(basename "$f")"
    done
    for f in "$run"/*.npz; do
        [ -f "$f" ] && sha256sum <"$f" >"$OUT/run-$n/stored-$(basename "$f").sha256"
    done
    [ -f "$WORK/d/$id.html" ] && mask <"$WORK/d/$id.html" >"$OUT/run-$n/dashboard.html"
    { rp export "$id" --format chrome -o "$WORK/chrome.json" 2>&1; echo "exit $?"; } | mask >"$OUT/run-$n/export.txt"
    [ -f "$WORK/chrome.json" ] && mask <"$WORK/chrome.json" >"$OUT/run-$n/chrome.json" && rm "$WORK/chrome.json"
done

# Diffs: same code (one run and a name of two), engine pairs, ranks, torch, ncu against ncu.
dif() {
    local tag=$1
    shift
    { rp diff "$@" 2>&1 | cat; echo "exit ${PIPESTATUS[0]}"; } | mask >"$OUT/diff-$tag.txt"
    { rp diff "$@" --json 2>&1; echo "exit $?"; } | mask >"$OUT/diff-$tag.json"
    for f in "$WORK"/d/*.html; do
        case $(basename "$f") in
        diff-* | *-vs-*) mask <"$f" >"$OUT/diff-$tag.$(basename "$f" | mask).html" && rm "$f" ;;
        esac
    done
}
dif nvtx nvtx-cpu nvtx-cpu2
dif graphs-pdl h100-nsys2025.3-roseinfer-graphs h100-nsys2025.3-roseinfer-pdl
dif decode-graphs h100-nsys2025.3-roseinfer-decode h100-nsys2025.3-roseinfer-graphs
dif tp2-slow cpu-nsys2022.4-roseinfer-tp2 cpu-nsys2022.4-roseinfer-tp2-slowrank1
dif torch-tp2 cpu-torch2.13-roseinfer-tp2 h200x2-torch2.11-roseinfer-tp2 --pool-mixed
dif ncu ncu-tn-raw ncu-h100-ncu2025.3-roseinfer
dif matmul matmul matmul-rep
if [ -e "$D/nsys/h200x4-nsys2025.3-roseinfer-tp4.sqlite" ]; then
    dif tp4-slow h200x4-nsys2025.3-roseinfer-tp4 h200x4-nsys2025.3-roseinfer-tp4-slowrank2
fi
ls "$WORK/d" | mask >"$OUT/dashboards-left.txt"
echo "outputs in $OUT ($(find "$OUT" -type f | wc -l) files)"
