"""Token ids to text as they arrive, and stop strings.

A byte-level tokenizer may end a step in the middle of a UTF-8 character: the decoder holds such a tail back
(its chunk's text is then empty) until the next tokens complete it. Text that could be the start of a stop string
is held back too, so a client never sees part of a stop string.
"""

from __future__ import annotations

# A UTF-8 character is at most 4 bytes: a tail still broken after this many tokens past the last text sent is
# not a character the next token completes (a token that is not text, or invalid bytes), and is sent as it is.
MAX_HELD_TOKENS = 4


class IncrementalText:
    """The text of one choice, decoded a chunk at a time (the same approach as vLLM's detokenizer: decode from a
    few tokens back so a token's text is read in its context, and emit only what grew)."""

    def __init__(self, tokenizer, stops: list[str]) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.prefix_offset = 0
        self.read_offset = 0
        self.stops = stops
        self.held = ""  # text decoded but not yet sent: it may start a stop string
        self.stopped = False  # a stop string was found: nothing more is sent

    def _decode_new(self, final: bool) -> str:
        decode = self.tokenizer.decode
        prefix = decode(self.ids[self.prefix_offset : self.read_offset])
        full = decode(self.ids[self.prefix_offset :])
        broken = full.endswith("\ufffd") and len(self.ids) - self.read_offset < MAX_HELD_TOKENS
        if broken and not final:
            return ""  # the next token may complete the character
        # Move the window on even when the new tokens gave no text (ids a byte-level tokenizer has no bytes for,
        # as a random-weight model emits): otherwise it grows by every such token, and every chunk decodes all of
        # them again (0.4 ms a chunk after a few hundred tokens: the server's HTTP side then could not keep up).
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        return full[len(prefix) :] if len(full) > len(prefix) else ""

    def push(self, token_ids: list[int], final: bool = False) -> str:
        """Add tokens; returns the text that may be sent now (final: the choice ended, flush everything)."""
        if self.stopped:
            return ""
        self.ids.extend(token_ids)
        text = self.held + self._decode_new(final)
        if not self.stops:
            self.held = ""
            return text
        for stop in self.stops:
            at = text.find(stop)
            if at >= 0:
                self.stopped, self.held = True, ""
                return text[:at]
        if final:
            self.held = ""
            return text
        # Hold back the longest tail that is a proper prefix of a stop string.
        keep = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(text)), keep, -1):
                if text.endswith(stop[:n]):
                    keep = n
                    break
        self.held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]
