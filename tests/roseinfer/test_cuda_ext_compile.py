"""The CUDA C++ kernels compile as torch builds them, every instantiation the launchers use, where nvcc is (a
developer's machine; a CI machine without one skips): with torch's own nvcc flags beside the build's
(`torch.utils.cpp_extension.COMMON_NVCC_FLAGS`, no implicit half conversions among them), and `ROSEINFER_KERNEL_ONLY`
for the kernels alone (no torch headers, no CUDA torch needed). A kernel that only a GPU machine's build would refuse
cost a device call (docs/BENCHMARKS.md, session 31)."""

import re
import shutil
import subprocess

import pytest

from roseinfer import cuda_ext
from roseinfer.cuda_ext import fused_attn, fused_mlp, paged_attn

NVCC = shutil.which("nvcc")


def _nvcc_release() -> tuple[int, int] | None:
    if NVCC is None:
        return None
    out = subprocess.run([NVCC, "--version"], capture_output=True, text=True, timeout=60).stdout
    found = re.search(r"release (\d+)\.(\d+)", out)
    return (int(found[1]), int(found[2])) if found else None


RELEASE = _nvcc_release()

BUILDS = [
    (fused_mlp.NAME, ()),
    (fused_mlp.NAME, (fused_mlp.DELAY_DEFINE,)),
    (fused_attn.NAME, ()),
    (fused_attn.NAME, (fused_attn.DELAY_DEFINE,)),
    (paged_attn.NAME, ()),
    (paged_attn.NAME, (paged_attn.PROBE_SKIP_WAIT_DEFINE,)),
]


@pytest.mark.skipif(NVCC is None, reason="no nvcc on this machine")
@pytest.mark.skipif(
    NVCC is not None and (RELEASE or (0, 0)) < (12, 4), reason=f"nvcc {RELEASE}: no __maxnreg__ before 12.4"
)
@pytest.mark.parametrize(("name", "defines"), BUILDS)
def test_the_kernels_compile_with_torchs_flags(tmp_path, name, defines):
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    flags = [f for f in cuda_ext.build_flags("sm_90a", defines) if f != "-lineinfo"]
    cmd = [NVCC, "-std=c++17", *flags, *COMMON_NVCC_FLAGS, "-DROSEINFER_KERNEL_ONLY", "-Xptxas", "-v", "-c",
           str(cuda_ext.sources(name)[0]), "-o", str(tmp_path / f"{name}.o")]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / f"{name}.o").stat().st_size > 0
    # Every instantiation within its 128 registers without spilling (a spill would cost more than the overlap the
    # cap buys: docs/BENCHMARKS.md, session 31): ptxas' account of each.
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", proc.stderr)
    assert len(spills) == 6, proc.stderr[-3000:]  # each file's six instantiations
    assert all(s == ("0", "0") for s in spills), proc.stderr[-3000:]


def _cutlass_flags(arch: str) -> list[str]:
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    from roseinfer.cuda_ext import cutlass_gemm

    source, why = cutlass_gemm.cutlass_source()
    if source is None:
        pytest.skip(why)
    # torch's flags first, then the build's (its -U of torch's no-half defines must come after them, as in a build)
    flags = [f for f in cuda_ext.build_flags(arch, (), cutlass_gemm.build_flags(source)) if f != "-lineinfo"]
    return [
        *COMMON_NVCC_FLAGS,
        *flags,
        "-DROSEINFER_KERNEL_ONLY",
        "-c",
        str(cuda_ext.sources(cutlass_gemm.NAME)[0]),
    ]


@pytest.mark.skipif(NVCC is None, reason="no nvcc on this machine")
def test_the_cutlass_gemm_compiles_for_hopper_with_its_pipeline_whole(tmp_path):
    # about 90 s on two cores; where the nvidia-cutlass wheel is installed (`pip install --no-deps`)
    cmd = [NVCC, *_cutlass_flags("sm_90a"), "-Xptxas", "-v", "-o", str(tmp_path / "cutlass_gemm.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # with CUTLASS's device asserts on, ptxas serialised the wgmma pipeline (warning C7510): NDEBUG keeps it whole
    assert "C7510" not in proc.stderr, proc.stderr[-3000:]
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", proc.stderr)
    assert spills and all(s == ("0", "0") for s in spills), proc.stderr[-3000:]


@pytest.mark.skipif(NVCC is None, reason="no nvcc on this machine")
def test_the_cutlass_gemm_refuses_to_build_for_another_gpu(tmp_path):
    # built for a later GPU the example's kernel would be an empty stub that returns success: the build fails instead
    cmd = [NVCC, *_cutlass_flags("sm_100a"), "-o", str(tmp_path / "cutlass_gemm.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode != 0 and "sm_90a only" in proc.stderr, proc.stderr[-3000:]
