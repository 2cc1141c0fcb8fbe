"""roseinfer: a small, fast GPT-2 inference engine with a paged KV cache and continuous batching."""

from roseinfer.config import BUILTIN_MODELS, EngineConfig, ModelConfig
from roseinfer.llm import LLM, RequestOutput
from roseinfer.sequence import SamplingParams

__all__ = ["LLM", "SamplingParams", "RequestOutput", "EngineConfig", "ModelConfig", "BUILTIN_MODELS"]
