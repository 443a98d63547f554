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
clean-up-tokenization-spaces pass). ``TextStream`` adds stop strings on top: the text a generation may
deliver so far, a partial stop string held back, the text cut where a stop string starts.
"""
from __future__ import annotations

from typing import Iterable, Union

__all__ = ["IncrementalDetokenizer", "TextStream", "complete_utf8_prefix_len", "partial_stop_len"]


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


def partial_stop_len(text: str, stop: str) -> int:
    """Length of the longest suffix of text that is a proper prefix of stop."""
    for n in range(min(len(stop) - 1, len(text)), 0, -1):
        if text.endswith(stop[:n]):
            return n
    return 0


class TextStream:
    """One generation's text: tokens in, deliverable text out, stop strings applied (llama-server's rules).

    ``push(tok)`` decodes a generated token (end-of-generation tokens add no text unless ``special``) and returns
    True when the text now contains a stop string: ``text`` is then cut where it starts and ``stopping_word``
    names it. ``take(final)`` returns the text not delivered yet; before the end it holds back a tail that could
    still become a stop string. ``close()`` flushes an incomplete character at the end of the stream.
    """

    def __init__(self, tokenizer, stop=(), special: bool = False):
        self._tok = tokenizer
        self._special = special
        self._detok = IncrementalDetokenizer(tokenizer, special)
        self.stop = [s for s in stop if s]
        self._max_stop = max((len(s) for s in self.stop), default=0)
        self.text = ""
        self.n_sent = 0              # chars of text already delivered
        self.stopping_word = ""

    def push(self, tok: int) -> bool:
        """Add one generated token; True when a stop string is complete (the text is cut before it)."""
        piece = b"" if (not self._special and self._tok.is_eog(tok)) else self._tok.token_to_piece(tok, self._special)
        s = self._detok.feed_bytes(piece)
        self.text += s
        return bool(self.stop) and self._find_stop(len(s) + len(piece))

    def close(self) -> None:
        """End of the stream (not at a stop string): an incomplete character becomes U+FFFD."""
        self.text += self._detok.flush()

    def take(self, final: bool) -> str:
        """The text that can be delivered now; before the end a partial stop string at the tail is held back."""
        end = len(self.text)
        if not final and self.stop:
            hold = max(partial_stop_len(self.text, s) for s in self.stop)
            end = max(self.n_sent, end - hold)
        chunk = self.text[self.n_sent:end]
        self.n_sent = max(self.n_sent, end)
        return chunk

    def _find_stop(self, tail: int) -> bool:
        text = self.text
        start = max(0, len(text) - self._max_stop - tail)
        best = None
        for s in self.stop:
            pos = text.find(s, start)
            if pos >= 0 and (best is None or pos < best[0]):
                best = (pos, s)
        if best is None:
            return False
        pos, s = best
        self.text = text[:pos]
        self.n_sent = min(self.n_sent, pos)
        self.stopping_word = s
        return True
