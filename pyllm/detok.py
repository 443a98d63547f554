"""Incremental, UTF-8 safe detokenization for streaming.

A token's piece is raw bytes and may end inside a UTF-8 character (byte-fallback tokens such as
Gemma's <0xF0><0x9F><0x99><0x82>, or byte-level BPE pieces that split an emoji). The detokenizer
buffers such a tail and only ever returns whole characters; ``flush()`` returns what is left at the
end of the stream (an incomplete character becomes U+FFFD).

    detok = IncrementalDetokenizer(tokenizer)
    for tok in generated:
        text = detok.feed(tok)       # "" while a character is still incomplete
    text = detok.flush()

Pieces are concatenated as llama-server streams them (token_to_piece per token, no
clean-up-tokenization-spaces pass).
"""
from __future__ import annotations

from typing import Iterable, Union

__all__ = ["IncrementalDetokenizer", "complete_utf8_prefix_len"]


def _seq_len(lead: int) -> int:
    """Length of the UTF-8 sequence a lead byte announces; 0 for a continuation byte, 1 if invalid."""
    if lead < 0x80:
        return 1
    if lead < 0xC0:
        return 0
    if lead < 0xE0:
        return 2
    if lead < 0xF0:
        return 3
    if lead < 0xF8:
        return 4
    return 1


def complete_utf8_prefix_len(buf: Union[bytes, bytearray]) -> int:
    """Length of the longest prefix of ``buf`` that does not end inside a UTF-8 character.

    Only a possibly-valid incomplete sequence at the very end is held back; invalid bytes count as
    complete (they decode to U+FFFD) so a broken stream never stalls.
    """
    n = len(buf)
    # the start of the last sequence is at most 3 bytes back
    for back in range(1, min(4, n) + 1):
        i = n - back
        need = _seq_len(buf[i])
        if need == 0:
            continue  # continuation byte: keep looking for its lead
        if need > back:
            # incomplete only if every byte after the lead is a continuation byte
            if all(0x80 <= b < 0xC0 for b in buf[i + 1:]):
                return i
        return n
    return n


class IncrementalDetokenizer:
    """Turns a stream of token ids (or raw piece bytes) into text, never splitting a character.

    ``tokenizer`` is a ``pyllm._core.Tokenizer`` (anything with ``token_to_piece(id, special)
    -> bytes``). ``special=True`` renders control tokens (e.g. ``<|im_end|>``) as their text.
    """

    def __init__(self, tokenizer, special: bool = False):
        self._tok = tokenizer
        self._special = special
        self._pending = bytearray()
        self._text_parts: list[str] = []

    @property
    def pending(self) -> bytes:
        """Bytes held back because they end inside a character."""
        return bytes(self._pending)

    @property
    def text(self) -> str:
        """All text returned so far."""
        return "".join(self._text_parts)

    def feed(self, ids: Union[int, Iterable[int]]) -> str:
        """Add one token id or several; return the newly completed text (may be "")."""
        if isinstance(ids, int):
            self._pending += self._tok.token_to_piece(ids, self._special)
        else:
            for i in ids:
                self._pending += self._tok.token_to_piece(int(i), self._special)
        return self._emit()

    def feed_bytes(self, data: Union[bytes, bytearray]) -> str:
        """Add raw piece bytes; return the newly completed text (may be "")."""
        self._pending += data
        return self._emit()

    def flush(self) -> str:
        """End of stream: return everything left (an incomplete character becomes U+FFFD)."""
        out = self._pending.decode("utf-8", errors="replace")
        self._pending.clear()
        if out:
            self._text_parts.append(out)
        return out

    def reset(self) -> None:
        self._pending.clear()
        self._text_parts.clear()

    def _emit(self) -> str:
        k = complete_utf8_prefix_len(self._pending)
        if k == 0:
            return ""
        out = self._pending[:k].decode("utf-8", errors="replace")
        del self._pending[:k]
        self._text_parts.append(out)
        return out
