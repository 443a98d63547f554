"""The host-RAM prompt cache (llama-server's --cache-ram MiB, --cache-idle-slots): when a slot is about to lose
what it holds to another conversation, its state (the core's SeqState: tokens, KV, recurrent state, context
checkpoints, the MTP layer's memory) is kept here, least recently used first out, bounded in bytes; a new prompt
that this cache covers further than its slot does gets that state loaded back into the slot first.

On hybrid models a common prefix is recoverable only where a state exists (the end of what was held, or a
context checkpoint), so entries and slots are compared by the prefix they can actually give back.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..log import log

__all__ = ["PromptCache", "common_prefix", "recoverable"]


def common_prefix(a, b) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def recoverable(n_held: int, checkpoints, lcp: int, n_prompt: int, recurrent: bool) -> int:
    """The prompt tokens a state holding n_held tokens (with context checkpoints at `checkpoints` positions) gives
    back for a prompt of n_prompt tokens sharing lcp of them: the last prompt token is always evaluated."""
    n = min(lcp, n_prompt - 1)
    if not recurrent or n >= n_held:
        return max(0, min(n, n_held))
    return max([p for p in checkpoints if p <= n], default=0)


@dataclass
class _Entry:
    tokens: list
    state: object
    nbytes: int


class PromptCache:
    def __init__(self, limit_mib: int, recurrent: bool):
        self.limit = None if limit_mib < 0 else limit_mib * 1024 * 1024
        self.recurrent = recurrent
        self._entries: list = []  # oldest first

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def covers(self, tokens: list) -> bool:
        """Whether an entry already holds `tokens` (or more after them)."""
        return any(len(e.tokens) >= len(tokens) and common_prefix(e.tokens, tokens) == len(tokens)
                   for e in self._entries)

    def save(self, state) -> bool:
        """Keep `state` (a SeqState); entries it extends are dropped, the oldest go when over the limit."""
        tokens = list(state.tokens)
        if not tokens or self.covers(tokens):
            return False
        nb = int(state.nbytes)
        if self.limit is not None and nb > self.limit:
            log(f"prompt cache: a state of {nb / 2**20:.3f} MiB exceeds the limit of {self.limit / 2**20:.3f} MiB, "
                "not cached", "srv", "prompt_save", "W")
            return False
        self._entries = [e for e in self._entries if common_prefix(e.tokens, tokens) < len(e.tokens)]
        while self.limit is not None and self._entries and self.nbytes + nb > self.limit:
            old = self._entries.pop(0)
            log(f"prompt cache: removing the oldest entry ({len(old.tokens)} tokens, {old.nbytes / 2**20:.3f} MiB)",
                "srv", "prompt_save")
        self._entries.append(_Entry(tokens, state, nb))
        log(f"prompt cache: saved {len(tokens)} tokens ({nb / 2**20:.3f} MiB); {len(self._entries)} entries, "
            f"{self.nbytes / 2**20:.3f} MiB" + (f" of {self.limit / 2**20:.0f} MiB" if self.limit else ""),
            "srv", "prompt_save")
        return True

    def take(self, prompt: list, slot_gives: int) -> Optional[object]:
        """The state (removed from the cache) that gives back more of `prompt` than `slot_gives` tokens, else None."""
        best, best_n = -1, slot_gives
        for i, e in enumerate(self._entries):
            lcp = common_prefix(e.tokens, prompt)
            n = recoverable(len(e.tokens), [p for p, _ in e.state.checkpoints], lcp, len(prompt), self.recurrent)
            if n > best_n:
                best, best_n = i, n
        if best < 0:
            return None
        e = self._entries.pop(best)
        log(f"prompt cache: loading an entry of {len(e.tokens)} tokens that gives back {best_n} of {len(prompt)}",
            "srv", "prompt_load")
        return e.state
