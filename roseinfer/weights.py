"""Building a GPT2 module: from a built-in name (random weights, seeded) or a Hugging Face checkpoint folder."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from roseinfer.config import BUILTIN_MODELS, ModelConfig, resolve_model_config
from roseinfer.model import GPT2

if TYPE_CHECKING:
    from roseinfer.distributed import TPGroup


def hf_key_map(n_layer: int) -> list[tuple[str, str, bool]]:
    """(Hugging Face GPT2LMHeadModel key, our key, transposed?) for every weight. HF's Conv1D stores [in, out]."""
    keys = [(f"transformer.{k}", k, False) for k in ("wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias")]
    conv = {"attn.c_attn": "c_attn", "attn.c_proj": "attn_proj", "mlp.c_fc": "c_fc", "mlp.c_proj": "mlp_proj"}
    for i in range(n_layer):
        for ln in ("ln_1", "ln_2"):
            keys += [(f"transformer.h.{i}.{ln}.{p}", f"h.{i}.{ln}.{p}", False) for p in ("weight", "bias")]
        for hf_name, ours in conv.items():
            keys.append((f"transformer.h.{i}.{hf_name}.weight", f"h.{i}.{ours}.weight", True))
            keys.append((f"transformer.h.{i}.{hf_name}.bias", f"h.{i}.{ours}.bias", False))
    return keys


def _load_hf_state(model: str, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Weights of a GPT2LMHeadModel checkpoint, renamed to our modules."""
    from transformers import GPT2LMHeadModel

    hf = GPT2LMHeadModel.from_pretrained(model, local_files_only=True, torch_dtype=torch.float32)
    src = hf.state_dict()
    return {
        ours: src[theirs].t().contiguous() if t else src[theirs]
        for theirs, ours, t in hf_key_map(cfg.n_layer)
    }


def build_model(
    model: str, device: str | torch.device, dtype: torch.dtype, seed: int, tp: TPGroup | None = None
) -> tuple[GPT2, ModelConfig]:
    """The model on `device`; with a tensor-parallel group, this rank's shard (`roseinfer.sharding`), cut from the
    same full weights on every rank (the same checkpoint, or the same seed)."""
    cfg = resolve_model_config(model)
    with torch.device("meta"):
        net = GPT2(cfg)
    net = net.to_empty(device="cpu")
    if model in BUILTIN_MODELS:
        net.init_random(seed)
    else:
        net.load_state_dict(_load_hf_state(model, cfg))
    if tp is not None:
        from roseinfer.sharding import shard_gpt2

        shard_gpt2(net, tp)
    net = net.to(device=device, dtype=dtype).eval()
    if torch.device(device).type == "cuda":
        net.pad_lm_head()
    return net, cfg
