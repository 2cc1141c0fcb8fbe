#!/usr/bin/env bash
# Fill .whl (git-ignored) with the wheels the GPU machine lacks (it has no internet; the device README says how
# they travel: `carry: [".whl"]`, then `source scripts/gpu_wheels.sh` there): roseprof's readers and renderers
# (plotly, msgspec, nvtx, the ADBC SQLite driver) and the server's stack with the `openai` client its tests use.
# Each at the version installed in this machine's .venv, so the GPU tests run what CI runs; for the GPU machine's
# Python (3.12, manylinux x86_64). Run from the repo root after scripts/setup.sh:
#   bash scripts/gpu_fetch_wheels.sh        # then: du -sh .whl (it counts towards the 64 MiB a call)
set -euo pipefail
py=.venv/bin/python
names=(plotly narwhals msgspec nvtx adbc-driver-sqlite adbc-driver-manager
  fastapi starlette uvicorn httptools pydantic pydantic-core annotated-types typing-inspection typing-extensions
  annotated-doc opentelemetry-api anyio openai httpx2 httpcore2 jiter sniffio truststore idna h11)
mkdir -p .whl
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
for name in "${names[@]}"; do
  version=$("$py" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_31_x86_64 \
    --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64 -d .whl "$name==$version"
done
# the CUTLASS headers the engine's GEMM at 33 to 64 rows builds from (roseinfer/cuda_ext/cutlass_gemm.py), pinned
"$py" -m pip download -q --no-deps -d .whl nvidia-cutlass==4.2.0.0
du -sh .whl
