# Sourced by the GPU machine's scripts (run from the repo root): the Python packages that travel as wheels in
# .whl (plotly, nvtx, msgspec; the machine has no internet) installed into /tmp/site, and PYTHONPATH set to them
# and the repo. Without .whl, PYTHONPATH is the repo alone. scripts/gpu_fetch_wheels.sh fills .whl (here, not there).
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
