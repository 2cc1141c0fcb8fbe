"""Token ids to text as they arrive (roseinfer/serve/text.py), on the byte tokenizer: each id < 256 is one byte."""

from __future__ import annotations

from roseinfer.serve.text import IncrementalText
from roseinfer.tokenizer import ByteTokenizer


def _ids(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def test_a_character_split_across_tokens_is_held_until_complete():
    t = IncrementalText(ByteTokenizer(), [])
    euro = _ids("€")  # 3 bytes, 3 tokens
    assert t.push(_ids("a")) == "a"
    assert t.push(euro[:1]) == ""
    assert t.push(euro[1:2]) == ""
    assert t.push(euro[2:] + _ids("b")) == "€b"


def test_a_stop_string_is_never_sent_in_part():
    t = IncrementalText(ByteTokenizer(), ["STOP"])
    assert t.push(_ids("hello ST")) == "hello "
    assert t.push(_ids("OP and more")) == ""
    assert t.stopped


def test_tokens_without_text_do_not_grow_what_each_chunk_decodes():
    # A random-weight model emits ids the byte tokenizer has no bytes for: they give no text, and the window the
    # decoder reads must stay a few tokens (it once grew by each, and every chunk decoded all of them again).
    decoded: list[int] = []

    class Counting(ByteTokenizer):
        def decode(self, ids):
            decoded.append(len(ids))
            return super().decode(ids)

    t = IncrementalText(Counting(), [])
    for i in range(500):
        assert t.push([300 + i % 7]) == ""
    assert max(decoded) <= 2
    assert t.push(_ids("ok"), final=True) == "ok"


def test_invalid_bytes_are_sent_as_replacement_once_no_token_can_complete_them():
    t = IncrementalText(ByteTokenizer(), [])
    bad = [0xFF] * 6  # never valid UTF-8
    out = "".join(t.push([b]) for b in bad) + t.push(_ids("z"), final=True)
    assert out.endswith("z") and "\ufffd" in out
