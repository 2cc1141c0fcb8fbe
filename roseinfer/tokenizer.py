"""Text <-> token ids. A checkpoint's own tokenizer when it ships one; UTF-8 bytes otherwise.

Built-in models have random weights and no vocabulary files can be downloaded, so for them (and for
checkpoint folders without tokenizer files) text maps to its UTF-8 bytes, ids 0..255: enough to drive
the engine with real-looking prompts of the right lengths.
"""

from __future__ import annotations

import os


class ByteTokenizer:
    name = "bytes"

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


class HFTokenizer:
    def __init__(self, path: str) -> None:
        from transformers import AutoTokenizer

        self._tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.name = f"hf:{path}"

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text))

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids)


_TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer_config.json")


def load_tokenizer(model: str):
    if os.path.isdir(model) and any(os.path.isfile(os.path.join(model, f)) for f in _TOKENIZER_FILES):
        return HFTokenizer(model)
    return ByteTokenizer()
