#!/usr/bin/env bash
# Set up everything the project needs on a fresh machine, idempotently:
#   a virtual environment in .venv with roseinfer/roseprof installed (editable) and the dev tools,
#   Nsight Systems for CPU captures (scripts/install-nsys.sh),
#   Nsight Compute's ncu for importing .ncu-rep reports (scripts/install-ncu.sh),
#   Debian's Chromium for the dashboard browser tests (scripts/install-chromium.sh),
#   Debian's Prometheus (prometheus, promtool) for the server's metrics tests (scripts/install-prometheus.sh),
#   and binutils' c++filt, which demangles the kernel names torch.profiler leaves mangled (roseprof/drivers/demangle.py).
# Usage: scripts/setup.sh [--no-nsys] [--no-ncu] [--no-browser] [--no-prometheus]
set -euo pipefail
cd "$(dirname "$0")/.."

want_nsys=1
want_ncu=1
want_browser=1
want_prometheus=1
for arg in "$@"; do
  case "$arg" in
    --no-nsys) want_nsys=0 ;;
    --no-ncu) want_ncu=0 ;;
    --no-browser) want_browser=0 ;;
    --no-prometheus) want_prometheus=0 ;;
    *) echo "setup: unknown option $arg" >&2; exit 2 ;;
  esac
done

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# torch first, pinned: on these machines a CPU build of 2.13.0 installs from local disk; an unpinned torch
# would pull a multi-GB CUDA build.
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
fi
.venv/bin/python -m pip install -q -e ".[dev]"
# The project's own bytecode, written once here: this machine, like CI's, may set PYTHONDONTWRITEBYTECODE, and then
# every `roseprof` or `roseinfer` process compiles the package again (the load tests' 54 processes: 60.6 -> 49.9 s of
# CPU; docs/BENCHMARKS.md session 25). Python checks each .pyc against its source, so an edit is never run stale.
.venv/bin/python -m compileall -q roseprof roseinfer scripts > /dev/null

if ! command -v c++filt >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends binutils >/dev/null
  else
    echo "setup: no c++filt and no apt-get; install binutils (torch runs then keep some kernel names mangled)" >&2
  fi
fi
if [ "$want_nsys" = 1 ]; then
  bash scripts/install-nsys.sh
fi
if [ "$want_ncu" = 1 ]; then
  bash scripts/install-ncu.sh
fi
if [ "$want_browser" = 1 ]; then
  bash scripts/install-chromium.sh
fi
if [ "$want_prometheus" = 1 ]; then
  bash scripts/install-prometheus.sh
fi
echo "setup: done ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
