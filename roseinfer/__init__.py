"""roseinfer: a small, fast GPT-2 inference engine with a paged KV cache and continuous batching.

The public names load lazily (PEP 562), so that `import roseinfer.names` (what roseprof reads runs by) does not
import torch: only touching `roseinfer.LLM` and the rest imports the engine.
"""

from __future__ import annotations

import importlib

_PUBLIC = {
    "LLM": "roseinfer.llm",
    "RequestOutput": "roseinfer.llm",
    "SamplingParams": "roseinfer.sequence",
    "EngineConfig": "roseinfer.config",
    "ModelConfig": "roseinfer.config",
    "BUILTIN_MODELS": "roseinfer.config",
}

__all__ = ["LLM", "SamplingParams", "RequestOutput", "EngineConfig", "ModelConfig", "BUILTIN_MODELS"]


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'roseinfer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once loaded, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
