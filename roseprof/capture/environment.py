"""What the manifest records about the machine a run was captured on."""

from __future__ import annotations

import os
import platform
import socket
import sys

from roseprof.workload.roseinfer import ENV_KEYS as ENGINE_ENV_KEYS

ENV_KEYS = ENGINE_ENV_KEYS + ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def gpus() -> list[dict]:
    """GPUs through NVML (nvidia-ml-py), when present; [] on CPU-only machines."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver, no library: simply no GPUs to report
        return []
    out = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            out.append(
                {
                    "index": i,
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "memory_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
                    "driver": str(pynvml.nvmlSystemGetDriverVersion()),
                }
            )
    finally:
        pynvml.nvmlShutdown()
    return out


def describe(env: dict[str, str] | None = None) -> dict:
    env = env if env is not None else dict(os.environ)
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu": {"model": cpu_model(), "count": os.cpu_count()},
        "gpus": gpus(),
        "env": {k: env[k] for k in ENV_KEYS if k in env},
    }
