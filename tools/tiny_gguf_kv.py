"""make_tiny_gguf.py's metadata helpers: the tokenizer copied (and resized) from a real GGUF, and the packing
of GGUF key/value entries (own minimal writer: exact key types)."""
from __future__ import annotations

import struct
from pathlib import Path

import gguf
import numpy as np
from gguf import GGUFValueType as VT


# --------------------------------------------------------------------------------------------------------------
# tokenizer


def load_tokenizer(path: Path) -> list[tuple[str, VT, object, VT | None]]:
    r = gguf.GGUFReader(str(path))
    out = []
    for k, f in r.fields.items():
        if not k.startswith("tokenizer."):
            continue
        vt = VT(f.types[0])
        sub = VT(f.types[1]) if vt == VT.ARRAY else None
        out.append((k, vt, f.contents(), sub))
    return out


def fit_vocab(tok: list, vocab: int) -> list:
    d = {k: [vt, v, sub] for k, vt, v, sub in tok}
    tokens, ttypes = list(d["tokenizer.ggml.tokens"][1]), list(d["tokenizer.ggml.token_type"][1])
    merges = list(d.get("tokenizer.ggml.merges", [None, []])[1])
    n0 = len(tokens)
    if vocab > n0:
        have = set(tokens)
        normal = [t for t, ty in zip(tokens, ttypes) if ty == gguf.TokenType.NORMAL]
        need = vocab - n0
        new_toks, new_merges = [], []
        for a in normal:
            for b in normal:
                c = a + b
                if c in have:
                    continue
                have.add(c)
                new_toks.append(c)
                new_merges.append(f"{a} {b}")
                if len(new_toks) == need:
                    break
            if len(new_toks) == need:
                break
        if len(new_toks) < need:
            raise ValueError(f"cannot build {vocab} tokens")
        tokens += new_toks
        ttypes += [int(gguf.TokenType.NORMAL)] * need
        merges += new_merges
    elif vocab < n0:
        if vocab < 512:
            raise ValueError("--vocab must be at least 512")
        special_ids = [i for i, ty in enumerate(ttypes) if ty != gguf.TokenType.NORMAL]
        keep = [i for i in range(n0) if i not in special_ids][: vocab - len(special_ids)] + special_ids
        remap = {old: new for new, old in enumerate(keep)}
        tokens = [tokens[i] for i in keep]
        ttypes = [ttypes[i] for i in keep]
        have = set(tokens)
        merges = [m for m in merges if (lambda p: len(p) == 2 and p[0] in have and p[1] in have
                                        and p[0] + p[1] in have)(m.split(" "))]
        for k in list(d):
            if k.endswith("_token_id"):
                d[k][1] = remap.get(int(d[k][1]), 0)
    d["tokenizer.ggml.tokens"][1] = tokens
    d["tokenizer.ggml.token_type"][1] = ttypes
    if "tokenizer.ggml.merges" in d:
        d["tokenizer.ggml.merges"][1] = merges
    return [(k, v[0], v[1], v[2]) for k, v in d.items()]


# --------------------------------------------------------------------------------------------------------------
# GGUF writing (own minimal writer: exact key types, streamed tensor data)

_SCALAR = {VT.UINT8: "<B", VT.INT8: "<b", VT.UINT16: "<H", VT.INT16: "<h", VT.UINT32: "<I", VT.INT32: "<i",
           VT.FLOAT32: "<f", VT.BOOL: "<?", VT.UINT64: "<Q", VT.INT64: "<q", VT.FLOAT64: "<d"}


def pack_str(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def pack_value(vt: VT, v, sub: VT | None = None) -> bytes:
    if vt == VT.STRING:
        return pack_str(v)
    if vt == VT.ARRAY:
        head = struct.pack("<IQ", int(sub), len(v))
        if sub == VT.STRING:
            return head + b"".join(pack_str(x) for x in v)
        dt = np.dtype(_SCALAR[sub])
        return head + np.asarray(v).astype(dt).tobytes()
    return struct.pack(_SCALAR[vt], v)
