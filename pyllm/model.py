"""A loaded GGUF model as the rest of pyllm sees it: tokenizer, special tokens, metadata, sizes.

The server, `pyllm generate`, pyllm-bench and `Llama` use this class; only it (and pyllm.generation) hold the
core's objects. `core` lets tests inject a stand-in with the same API (tests/fake_core.py).
"""
from __future__ import annotations

import threading
from typing import Optional


class Model:
    """The weights and vocabulary of one GGUF file, loaded once by the core. mmap: True maps the file (page
    cache), False reads it into anonymous memory (faster to stream in decode), None (default) reads it in
    when it takes at most half of the available memory, else maps it."""

    def __init__(self, path: str, load_mtp: bool = False, core=None, mmap: Optional[bool] = None, repack: bool = True):
        if core is None:
            from ._native import core
        self.core = core
        self.path = str(path)
        # ValueError / GGUFError with the file's name
        self._m = core.Model(self.path, load_mtp=load_mtp, mmap=-1 if mmap is None else int(bool(mmap)), repack=repack)
        m = self._m
        # load-time 16-row groups (--repack): matrices, bytes, bytes copied out of a mapped file
        self.n_grouped: int = int(getattr(m, "n_grouped", 0))
        self.grouped_bytes: int = int(getattr(m, "grouped_bytes", 0))
        self.grouped_copied_bytes: int = int(getattr(m, "grouped_copied_bytes", 0))
        self.arch: str = m.arch
        self.n_vocab: int = int(m.n_vocab)
        self.n_embd: int = int(m.n_embd)
        self.n_layer: int = int(m.n_layer)
        self.n_ctx_train: int = int(m.n_ctx_train or 0)
        self.n_params: int = int(m.n_params)
        self.size_bytes: int = int(m.size_bytes)
        self.weights_copied: bool = bool(getattr(m, "weights_copied", False))  # in anonymous memory, not mapped
        self.desc: str = m.desc
        self.ftype: str = getattr(m, "ftype", None) or m.desc
        self.has_mtp: bool = bool(m.has_mtp)
        self.recurrent: bool = bool(getattr(m, "recurrent", False))  # a prefix is recoverable only at saved states
        self.file_has_mtp: bool = bool(getattr(m, "file_has_mtp", m.has_mtp))
        self.bos: int = int(m.bos)
        self.eos: int = int(m.eos)
        self.eot: int = int(getattr(m, "eot", -1))
        self.add_bos: bool = bool(m.add_bos)
        self.vocab_type: int = int(getattr(m, "vocab_type", 2) or 2)
        self.eog_ids: list = list(getattr(m, "eog_ids", None) or [t for t in (self.eos, self.eot) if t >= 0])
        self.chat_template: Optional[str] = getattr(m, "chat_template", None)
        # bound once: the per-token hot path of pyllm.generation
        self.token_to_piece = m.token_to_piece
        self.is_eog = m.is_eog
        self._guidance = None
        self._guidance_lock = threading.Lock()

    def repack_desc(self) -> str:
        """The load's weight conversion as one log line (--repack)."""
        if not self.n_grouped:
            return ("weights in the file's layout (no matrix put into 16-row groups: --no-repack, a SIMD level without group "
                    "kernels (AVX-512: Q4_K, IQ4_NL, Q8_0; AVX2: Q4_K, Q4_0, Q4_1), or no such matrix with rows in 16s)")
        mib = 2 ** 20
        where = (f"{self.grouped_copied_bytes / mib:.2f} MiB of them copied out of the mapped file into anonymous memory"
                 if self.grouped_copied_bytes else "converted in place")
        return (f"repacked {self.n_grouped} matrices ({self.grouped_bytes / mib:.2f} MiB) into 16-row groups, {where} "
                f"(--no-repack keeps the file's layout)")

    def guidance(self):
        """llguidance's view of this vocabulary (pyllm.structured.GuidanceTokenizer), built on the first
        constrained request and kept (it walks the whole vocabulary once)."""
        with self._guidance_lock:
            if self._guidance is None:
                from .structured import GuidanceTokenizer
                self._guidance = GuidanceTokenizer(self._m.tokenizer, n_vocab=self.n_vocab)
            return self._guidance

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list:
        """Token ids of `text` (add_special: BOS when the model wants one; parse_special: `<|im_end|>` etc.
        become their control tokens)."""
        return list(self._m.tokenize(text, add_special, parse_special))

    def piece_text(self, token: int, special: bool = True) -> str:
        """The text of one token (invalid UTF-8 replaced)."""
        return self._m.token_to_piece(token, special).decode("utf-8", "replace")

    def detokenize(self, tokens, special: bool = True) -> bytes:
        """The bytes of the pieces of `tokens`, concatenated as llama-server streams them."""
        p = self._m.token_to_piece
        return b"".join(p(t, special) for t in tokens)

    def check_tokens(self, tokens) -> None:
        """ValueError naming the first id that is not a token of this vocabulary."""
        nv = self.n_vocab
        for t in tokens:
            if not isinstance(t, int) or isinstance(t, bool) or t < 0 or t >= nv:
                raise ValueError(f"invalid token id: {t}")

    def metadata(self) -> dict:
        """The GGUF key/value pairs."""
        return dict(self._m.metadata())

    def special_text(self, token: int) -> str:
        """A special token's text ("" when the model has none): for chat templates' bos_token / eos_token."""
        return self.piece_text(token, True) if token >= 0 else ""
