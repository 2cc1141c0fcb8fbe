"""Triton kernels for the CUDA fast path. Each one sits beside the plain-torch reference it is tested against.

Triton is imported lazily: on CPU-only machines (and CI) nothing here is loaded.
"""


def triton_available() -> bool:
    try:
        import torch
        import triton  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available()
