# Sourced by the GPU machine's scripts (run from the repo root): the Python packages that travel as wheels in
# .whl (plotly, nvtx, msgspec, nvidia-cutlass; the machine has no internet) installed into .gpu_site, and
# PYTHONPATH set to them and the repo. Without .whl, PYTHONPATH is the repo alone. scripts/gpu_fetch_wheels.sh
# fills .whl (here, not there).
# .gpu_site is a git-ignored folder of the tree, installed once per set of wheels: the device keeps such folders
# between the calls of a warm machine, and reinstalled headers (CUTLASS's, newer than the build) had ninja rebuild
# cutlass_gemm, about 2 minutes, in every call (session 63).
if ls .whl/*.whl >/dev/null 2>&1; then
  _site=$PWD/.gpu_site
  _wheels=$(cat .whl/*.whl | sha1sum | cut -c1-12)
  if [ "$(cat "$_site/.wheels" 2>/dev/null)" != "$_wheels" ]; then
    rm -rf "$_site"
    if ! python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$_site" .whl/*.whl; then
      echo "gpu_wheels.sh: pip could not install .whl/*.whl into $_site" >&2
      rm -rf "$_site"
      return 1
    fi
    echo "$_wheels" > "$_site/.wheels"
  fi
  export PYTHONPATH=$_site:$PWD
else
  export PYTHONPATH=$PWD
fi
