#!/usr/bin/env python3
"""Write random-weight ``qwen35`` / ``qwen35moe`` GGUF files (with the MTP/nextn block) in llama.cpp's layout.

The file has the keys, key types, tensor names, ggml ``ne`` shapes and tensor order that llama.cpp's
``convert_hf_to_gguf.py`` (vendor tree ``0c1e570``, ``conversion/qwen.py``) writes for a Qwen3.5/3.6 checkpoint,
so that it can stand in for a real model in loader, shape and speed tests.

Usage::

    python tools/make_tiny_gguf.py --arch qwen35 out.gguf                       # 4 layers + 1 MTP, q8_0
    python tools/make_tiny_gguf.py --arch qwen35moe out.gguf --fused --type q4_0
    python tools/make_tiny_gguf.py --arch qwen35 --preset 27b-shaped /work/peer/q27-4l.gguf

Layout rules (checked against the shipped files in shared/models by tests/test_make_tiny_gguf.py):

* ``<arch>.block_count`` = trunk layers + MTP layers, ``nextn_predict_layers`` = MTP layers (key omitted with
  ``--no-mtp``), ``attention.recurrent_layers`` is written from the layer pattern (layer i is full attention when
  ``(i+1) % full_attention_interval == 0``) and padded with ``False`` for the MTP layers.
* Key order is the converter's (``general.file_type`` sits after ``attention.value_length``); tensor order is the
  converter's for a single-file HF checkpoint: the HF names (``lm_head``, ``model.layers.N.*``, ``mtp.*``) sorted as
  strings, experts merged at their last expert tensor (down, gate, up), fused ``attn_qkv`` at ``v_proj`` and fused
  ``ffn_gate_up_exps`` right after ``ffn_down_exps``. ``--order quantize`` gives llama-quantize's order instead
  (globals, then ``blk.N`` by N, names sorted inside a block, ``general.quantization_version`` and
  ``general.file_type`` moved to the end of the keys), which is what the shipped quantized files have.
* Types: 1-D tensors, ``ssm_conv1d``, ``ffn_gate_inp`` and ``ffn_gate_inp_shexp`` stay F32 (as the converter and
  llama-quantize keep them); every other matrix gets ``--type``. When a row length is not a multiple of the
  block size the type falls back as llama-quantize's ``tensor_type_fallback`` does (Q2_K/Q3_K->Q4_0,
  Q4_K->Q5_0, Q5_K->Q5_1, Q6_K->Q8_0, then F16 if that still does not fit).
  ``general.file_type`` is the matching LLAMA_FTYPE; for the pure K types the ``_S`` value is used
  (q3_k -> MOSTLY_Q3_K_S, q4_k -> MOSTLY_Q4_K_S, q5_k -> MOSTLY_Q5_K_S) since no tensor is bumped up as in ``_M``.
* ``--mix`` instead of ``--type``: the per-tensor types of an Unsloth UD file. ``ud-q4_k_xl``, ``ud-q5_k_xl``,
  ``ud-q6_k_xl``, ``ud-q8_k_xl``: rules in tools/tiny_gguf_mixes.py; ``ud-iq2_xxs``, ``ud-iq2_m``, ``ud-q2_k_xl``,
  ``ud-iq3_xxs``, ``ud-iq3_s``, ``ud-q3_k_xl``: LOWBIT_MIXES there too, with the sources they follow.
* Quantization is pyllm's C++ quantizers (``pyllm._core.quantize_fast``: the reference quantizers' bytes, Q4_K/Q5_K
  faster); tensors are written in parallel (``-j``, default: all CPUs) straight to their offsets
  (tools/tiny_gguf_write.py). Without a built pyllm, the non-K types use gguf-py's quantizers, which give the same
  bytes; K-quants, the low-bit types (iq1_s..iq4_xs, mxfp4) and --mix need pyllm.

Weights (seeded per tensor name, so the output is identical for a given seed and set of options, whatever the
chunking): as shared/models/README.md's qwen35moe recipe.  ``token_embd`` N(0,1); input projections
N(0, 1/fan_in); projections that write the residual stream (``attn_output``, ``ssm_out``, ``ffn_down*``) gain 0.2;
``output`` scaled so logits have std ~6; router (``ffn_gate_inp``) scaled so router logits have std ~3; norms
1+N(0,0.1) (the converter's +1 is baked in; ``ssm_norm`` too); ``ssm_a`` = -exp(log U(0.1,4)); ``ssm_dt.bias``
N(0,0.5); ``ssm_conv1d`` N(0, 1/d_conv); ``nextn.eh_proj`` = [3I + N(0,(0.5/sqrt(2n))^2) | N(0,(0.1/sqrt(2n))^2)]
(embedding half first), so MTP drafts agree with the trunk sometimes.

Tokenizer: the ``tokenizer.*`` keys are copied from shared/models/qwen35-tiny-mtp-Q8_0.gguf (8192-token byte-level
BPE, ``gpt2`` model, ``qwen35`` pre-tokenizer, ChatML template; ``<|endoftext|>`` 8189 bos/pad, ``<|im_start|>``
8190, ``<|im_end|>`` 8191 eos).
* ``--vocab`` > 8192: the 8192 tokens keep their ids; extra NORMAL tokens are appended, each the concatenation of two
  existing normal tokens ``a`` + ``b`` that is not yet in the vocab, and the merge ``"a b"`` is appended after the
  existing merges. Every token is thus a byte-level string reachable by BPE merges, so the file stays a valid gpt2
  BPE vocab (tokenizing ordinary text mostly gives the same ids as the 8192 vocab, since new merges have the lowest
  rank). The shipped specials stay at 8189..8191, so they are not the last ids.
* ``--vocab`` < 8192 (at least 512): the first vocab-3 tokens are kept, the 3 specials are renumbered to the last
  3 ids, and merges whose parts or result fell out are dropped.
* ``--tokenizer-from FILE`` takes the tokenizer keys from another GGUF.

Presets (``--preset``), reduced depth (``--n-layer`` default 4, plus ``--mtp-layers`` default 1):
* ``27b-shaped`` (Qwen3.6-27B widths, from shared/docs/llamacpp-mtp.md 1.2 and the HF config): n_embd 5120, 24 heads,
  4 KV heads, head_dim 256, n_ff 17408, rope dim 64 (partial_rotary_factor 0.25), rope sections [11,11,10,0]
  (converter default), freq_base 1e7, eps 1e-6, context 262144, SSM: 16 key heads, 48 value heads, state (= head
  dim) 128, conv 4, vocab 248320, full_attention_interval 4.
* ``35b-a3b-shaped`` (Qwen3.6-35B-A3B widths): n_embd 2048, 16 heads, 2 KV heads, head_dim 256, 256 experts, 8 used,
  expert ff 512, shared ff 512, SSM 16 key heads / 32 value heads, state 128, conv 4, vocab 248320; rope dim 64,
  sections [11,11,10,0], freq_base 1e7, context 262144 and interval 4 are ASSUMED to be the same as the 27B (the
  doc does not list them for 35B-A3B). Only ``--arch qwen35moe`` makes sense with it (the preset sets the arch).
* ``tiny``: the defaults (n_embd 256, 4 heads, 2 KV, head_dim 64, n_ff 768, SSM 2/4 heads state 64, 8 experts top-2,
  expert/shared ff 256, vocab 8192), which match the shipped tiny files; rope dim = head_dim/4, sections [3,3,2,0]
  (what those files have).

Large files are written streaming: each worker holds one tensor's row chunk of about 16M values at a time, so
memory stays at a few hundred MB per worker whatever the model size (a 64-layer 27B-shaped Q4_K file, ~16 GB,
takes minutes).
"""
from __future__ import annotations

import argparse
import math
import os
import struct
import sys
import time
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as QT
    from gguf.constants import GGML_QUANT_SIZES, GGUFValueType as VT, LlamaFileType as FT
except ImportError as e:  # pragma: no cover
    raise SystemExit(f"make_tiny_gguf.py needs the gguf package (gguf-py): {e}")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_gguf_kv as kvw  # noqa: E402
import tiny_gguf_mixes as mixes  # noqa: E402
import tiny_gguf_write as tgw  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# the tokenizer is copied from the trained model's file: shared/ next to the checkout (PYLLM_SHARED overrides), else
# the copy the package ships in models/ (--tokenizer-from picks another file)
DEFAULT_TOKENIZER = Path(os.environ.get("PYLLM_SHARED", REPO.parent / "shared")) / "models" / "qwen35-tiny-mtp-Q8_0.gguf"
if not DEFAULT_TOKENIZER.exists():
    DEFAULT_TOKENIZER = REPO / "models" / "qwen35-tiny-mtp-Q8_0.gguf"

TYPES = {
    "f32": QT.F32, "f16": QT.F16, "bf16": QT.BF16, "q8_0": QT.Q8_0, "q4_0": QT.Q4_0, "q4_1": QT.Q4_1,
    "q5_0": QT.Q5_0, "q5_1": QT.Q5_1, "q2_k": QT.Q2_K, "q3_k": QT.Q3_K, "q4_k": QT.Q4_K, "q5_k": QT.Q5_K,
    "q6_k": QT.Q6_K,
}
FILE_TYPES = {
    "f32": FT.ALL_F32, "f16": FT.MOSTLY_F16, "bf16": FT.MOSTLY_BF16, "q8_0": FT.MOSTLY_Q8_0, "q4_0": FT.MOSTLY_Q4_0,
    "q4_1": FT.MOSTLY_Q4_1, "q5_0": FT.MOSTLY_Q5_0, "q5_1": FT.MOSTLY_Q5_1, "q2_k": FT.MOSTLY_Q2_K,
    "q3_k": FT.MOSTLY_Q3_K_S, "q4_k": FT.MOSTLY_Q4_K_S, "q5_k": FT.MOSTLY_Q5_K_S, "q6_k": FT.MOSTLY_Q6_K,
}
K_QUANTS = tgw.K_QUANTS
# llama-quantize's tensor_type_fallback (src/llama-quant.cpp)
FALLBACK = {QT.Q2_K: QT.Q4_0, QT.Q3_K: QT.Q4_0, QT.Q4_K: QT.Q5_0, QT.Q5_K: QT.Q5_1, QT.Q6_K: QT.Q8_0}

# ---- low-bit types and the UD low-bit mixes (issue 15). Quantized through pyllm._core.quantize: the C++
# reference quantizers (csrc/ggml/quants_iq_quantize.cpp, our own weighted grid search without imatrix, so the bytes
# differ from llama-quantize's; MXFP4 is gguf-py's quantizer, byte for byte).
LOWBIT_TYPES = {
    "iq1_s": QT.IQ1_S, "iq1_m": QT.IQ1_M, "iq2_xxs": QT.IQ2_XXS, "iq2_xs": QT.IQ2_XS, "iq2_s": QT.IQ2_S,
    "iq3_xxs": QT.IQ3_XXS, "iq3_s": QT.IQ3_S, "iq4_nl": QT.IQ4_NL, "iq4_xs": QT.IQ4_XS, "mxfp4": QT.MXFP4,
}
LOWBIT_FILE_TYPES = {
    "iq1_s": FT.MOSTLY_IQ1_S, "iq1_m": FT.MOSTLY_IQ1_M, "iq2_xxs": FT.MOSTLY_IQ2_XXS, "iq2_xs": FT.MOSTLY_IQ2_XS,
    "iq2_s": FT.MOSTLY_IQ2_S, "iq3_xxs": FT.MOSTLY_IQ3_XXS, "iq3_s": FT.MOSTLY_IQ3_S, "iq4_nl": FT.MOSTLY_IQ4_NL,
    "iq4_xs": FT.MOSTLY_IQ4_XS, "mxfp4": FT.MOSTLY_MXFP4_MOE,
}
LOWBIT_FALLBACK = {t: QT.IQ4_NL for t in (QT.IQ1_S, QT.IQ1_M, QT.IQ2_XXS, QT.IQ2_XS, QT.IQ2_S, QT.IQ3_XXS,
                                          QT.IQ3_S, QT.IQ4_XS)}
TYPES.update(LOWBIT_TYPES)
FILE_TYPES.update(LOWBIT_FILE_TYPES)
FALLBACK.update(LOWBIT_FALLBACK)
CORE_QUANTS = K_QUANTS | set(LOWBIT_TYPES.values())

LOWBIT_MIXES = mixes.LOWBIT_MIXES
LOWBIT_MIX_FILE_TYPES = mixes.LOWBIT_MIX_FILE_TYPES


def lowbit_mix_type(mix: str, name: str) -> QT:
    """The type --mix MIX gives tensor `name` (before the block-size fallback)."""
    return TYPES[mixes.lowbit_mix_type_name(mix, name)]


ALL_MIXES = tuple(mixes.MIXES) + tuple(sorted(LOWBIT_MIXES))


def _file_type(cfg) -> FT:
    if cfg.mix in mixes.MIXES:
        return mixes.file_type(cfg.mix)
    return FILE_TYPES[LOWBIT_MIX_FILE_TYPES[cfg.mix] if cfg.mix else cfg.type]

ALIGNMENT = 32
CHUNK_VALUES = 1 << 24


@dataclass
class Config:
    arch: str = "qwen35"
    n_embd: int = 256
    n_layer: int = 4
    full_attn_interval: int = 4
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 64
    n_ff: int = 768
    ssm_d_state: int = 64
    ssm_n_k_heads: int = 2
    ssm_n_v_heads: int = 4
    ssm_d_conv: int = 4
    n_expert: int = 8
    n_expert_used: int = 2
    n_ff_exp: int = 256
    n_ff_shexp: int = 256
    vocab: int = 8192
    mtp_layers: int = 1
    fused: bool = False
    type: str = "q8_0"
    seed: int = 0
    rope_dim: int | None = None          # default head_dim // 4 (partial_rotary_factor 0.25)
    rope_sections: list[int] | None = None  # default [3,3,2,0] scaled to rope_dim/2 pairs
    rope_freq_base: float = 1e7
    rms_eps: float = 1e-6
    context_length: int = 262144
    name: str | None = None
    order: str = "converter"
    tokenizer_from: str | None = None
    mix: str | None = None               # --mix: per-tensor types (tiny_gguf_mixes.MIXES or LOWBIT_MIXES)
    threads: int = 0                     # writer threads (0: all CPUs)

    @property
    def moe(self) -> bool:
        return self.arch == "qwen35moe"

    @property
    def n_rot(self) -> int:
        return self.rope_dim if self.rope_dim is not None else self.head_dim // 4

    @property
    def sections(self) -> list[int]:
        if self.rope_sections is not None:
            return list(self.rope_sections)
        # Qwen's mrope_section [t, h, w] over n_rot/2 rotary pairs in the proportions 3:3:2 (tiny files: [3,3,2]),
        # the converter's default [11,11,10] for n_rot 64.
        pairs = self.n_rot // 2
        if pairs == 32:
            return [11, 11, 10, 0]
        t = round(pairs * 3 / 8)
        return [t, t, pairs - 2 * t, 0]

    def is_recurrent(self, il: int) -> bool:
        return il < self.n_layer and (il + 1) % self.full_attn_interval != 0


PRESETS = {
    "tiny": {},
    "27b-shaped": dict(arch="qwen35", n_embd=5120, n_head=24, n_head_kv=4, head_dim=256, n_ff=17408, rope_dim=64,
                       rope_sections=[11, 11, 10, 0], ssm_n_k_heads=16, ssm_n_v_heads=48, ssm_d_state=128,
                       ssm_d_conv=4, vocab=248320, full_attn_interval=4),
    "35b-a3b-shaped": dict(arch="qwen35moe", n_embd=2048, n_head=16, n_head_kv=2, head_dim=256, n_expert=256,
                           n_expert_used=8, n_ff_exp=512, n_ff_shexp=512, rope_dim=64, rope_sections=[11, 11, 10, 0],
                           ssm_n_k_heads=16, ssm_n_v_heads=32, ssm_d_state=128, ssm_d_conv=4, vocab=248320,
                           full_attn_interval=4),
}


# --------------------------------------------------------------------------------------------------------------
# tensor plan


@dataclass
class TSpec:
    name: str
    ne: tuple[int, ...]          # ggml order (ne0 = row length)
    init: str                    # see _init_chunk
    hf_key: str                  # HF name at which the converter emits it
    sub: int = 0                 # tie-break for tensors emitted at the same HF name
    keep_f32: bool = False
    gain: float = 1.0
    ggml_type: QT = QT.F32
    nbytes: int = 0
    # fused tensors are drawn from the unfused tensors' own random streams, (name, rows) per part,
    # repeated per expert, so --fused holds exactly the weights of the unfused file with the same seed
    parts: tuple = ()

    @property
    def n_rows(self) -> int:
        return int(np.prod(self.ne[1:])) if len(self.ne) > 1 else 1


def _tensor_plan(cfg: Config) -> list[TSpec]:
    n, D, H, Hkv = cfg.n_embd, cfg.head_dim, cfg.n_head, cfg.n_head_kv
    dk = dv = cfg.ssm_d_state
    key_dim, value_dim = dk * cfg.ssm_n_k_heads, dv * cfg.ssm_n_v_heads
    conv_dim = 2 * key_dim + value_dim
    Hv = cfg.ssm_n_v_heads
    specs: list[TSpec] = []

    def add(name, ne, init, hf_key, sub=0, keep_f32=False, gain=1.0):
        specs.append(TSpec(name, tuple(int(x) for x in ne), init, hf_key, sub, keep_f32 or len(ne) == 1, gain))

    add("output.weight", (n, cfg.vocab), "normal", "lm_head.weight", gain=6.0)
    add("token_embd.weight", (n, cfg.vocab), "embed", "model.embed_tokens.weight")
    add("output_norm.weight", (n,), "norm", "model.norm.weight")

    n_all = cfg.n_layer + cfg.mtp_layers
    for il in range(n_all):
        mtp = il >= cfg.n_layer
        P = f"mtp.layers.{il - cfg.n_layer}" if mtp else f"model.layers.{il}"
        b = f"blk.{il}."
        add(b + "attn_norm.weight", (n,), "norm", P + ".input_layernorm.weight")
        add(b + "post_attention_norm.weight", (n,), "norm", P + ".post_attention_layernorm.weight")
        if cfg.is_recurrent(il):
            A = P + ".linear_attn."
            add(b + "ssm_a", (Hv,), "ssm_a", A + "A_log")
            add(b + "ssm_conv1d.weight", (cfg.ssm_d_conv, conv_dim), "conv", A + "conv1d.weight", keep_f32=True)
            add(b + "ssm_dt.bias", (Hv,), "ssm_dt", A + "dt_bias")
            add(b + "ssm_alpha.weight", (n, Hv), "normal", A + "in_proj_a.weight")
            add(b + "ssm_beta.weight", (n, Hv), "normal", A + "in_proj_b.weight")
            add(b + "attn_qkv.weight", (n, conv_dim), "normal", A + "in_proj_qkv.weight")
            add(b + "attn_gate.weight", (n, value_dim), "normal", A + "in_proj_z.weight")
            add(b + "ssm_norm.weight", (dv,), "norm", A + "norm.weight")
            add(b + "ssm_out.weight", (value_dim, n), "normal", A + "out_proj.weight", gain=0.2)
        else:
            S = P + ".self_attn."
            add(b + "attn_k_norm.weight", (D,), "norm", S + "k_norm.weight")
            add(b + "attn_output.weight", (D * H, n), "normal", S + "o_proj.weight", gain=0.2)
            add(b + "attn_q_norm.weight", (D,), "norm", S + "q_norm.weight")
            if cfg.fused:
                add(b + "attn_qkv.weight", (n, 2 * D * H + 2 * D * Hkv), "normal", S + "v_proj.weight")
                specs[-1].parts = ((b + "attn_q.weight", 2 * D * H), (b + "attn_k.weight", D * Hkv),
                                   (b + "attn_v.weight", D * Hkv))
            else:
                add(b + "attn_k.weight", (n, D * Hkv), "normal", S + "k_proj.weight")
                add(b + "attn_q.weight", (n, 2 * D * H), "normal", S + "q_proj.weight")
                add(b + "attn_v.weight", (n, D * Hkv), "normal", S + "v_proj.weight")
        M = P + ".mlp."
        if cfg.moe:
            E, fe, fs = cfg.n_expert, cfg.n_ff_exp, cfg.n_ff_shexp
            last = max((str(e) for e in range(E)))  # experts are merged when the last one (in name order) arrives
            at = f"{M}experts.{last}.up_proj.weight"
            add(b + "ffn_down_exps.weight", (fe, n, E), "normal", at, sub=0, gain=0.2)
            if cfg.fused:
                add(b + "ffn_gate_up_exps.weight", (n, 2 * fe, E), "normal", at, sub=1)
                specs[-1].parts = ((b + "ffn_gate_exps.weight", fe), (b + "ffn_up_exps.weight", fe))
            else:
                add(b + "ffn_gate_exps.weight", (n, fe, E), "normal", at, sub=1)
                add(b + "ffn_up_exps.weight", (n, fe, E), "normal", at, sub=2)
            add(b + "ffn_gate_inp.weight", (n, E), "normal", M + "gate.weight", keep_f32=True, gain=3.0)
            add(b + "ffn_down_shexp.weight", (fs, n), "normal", M + "shared_expert.down_proj.weight", gain=0.2)
            add(b + "ffn_gate_shexp.weight", (n, fs), "normal", M + "shared_expert.gate_proj.weight")
            add(b + "ffn_up_shexp.weight", (n, fs), "normal", M + "shared_expert.up_proj.weight")
            add(b + "ffn_gate_inp_shexp.weight", (n,), "normal", M + "shared_expert_gate.weight", keep_f32=True)
        else:
            add(b + "ffn_down.weight", (cfg.n_ff, n), "normal", M + "down_proj.weight", gain=0.2)
            add(b + "ffn_gate.weight", (n, cfg.n_ff), "normal", M + "gate_proj.weight")
            add(b + "ffn_up.weight", (n, cfg.n_ff), "normal", M + "up_proj.weight")
        if mtp:
            j = il - cfg.n_layer
            # the converter renames mtp.fc etc. only for the first MTP layer's worth of globals; with several MTP
            # layers (not used by Qwen3.5) the same names would repeat, so they are per layer here
            pre = "mtp." if cfg.mtp_layers == 1 else f"mtp.{j}."
            add(b + "nextn.eh_proj.weight", (2 * n, n), "eh_proj", pre + "fc.weight")
            add(b + "nextn.shared_head_norm.weight", (n,), "norm", pre + "norm.weight")
            add(b + "nextn.enorm.weight", (n,), "norm", pre + "pre_fc_norm_embedding.weight")
            add(b + "nextn.hnorm.weight", (n,), "norm", pre + "pre_fc_norm_hidden.weight")

    if cfg.order == "converter":
        specs.sort(key=lambda s: (s.hf_key, s.sub))
    elif cfg.order == "quantize":
        def qkey(s):
            parts = s.name.split(".")
            return (int(parts[1]) if parts[0] == "blk" else -1, s.name)
        specs.sort(key=qkey)
    else:
        raise ValueError(f"unknown order {cfg.order!r}")

    target = TYPES[cfg.type]
    for s in specs:
        if cfg.mix in mixes.MIXES:
            t = mixes.tensor_type(cfg.mix, s.name, cfg.n_layer, s.keep_f32)
            s.ggml_type = t if t == QT.F32 else _pick_type(t, s.ne[0])
        else:
            if cfg.mix is not None and not s.keep_f32:
                target = lowbit_mix_type(cfg.mix, s.name)
            s.ggml_type = QT.F32 if (s.keep_f32 or cfg.type == "f32") else _pick_type(target, s.ne[0])
        bs, ts = GGML_QUANT_SIZES[s.ggml_type]
        s.nbytes = int(np.prod(s.ne)) // bs * ts
    return specs


def _pick_type(target: QT, ncols: int) -> QT:
    bs = GGML_QUANT_SIZES[target][0]
    if ncols % bs == 0:
        return target
    t = FALLBACK.get(target, target)
    return t if ncols % GGML_QUANT_SIZES[t][0] == 0 else QT.F16


# --------------------------------------------------------------------------------------------------------------
# weights


def _rng(cfg: Config, name: str) -> np.random.Generator:
    return np.random.default_rng([cfg.seed & 0xFFFFFFFF, zlib.crc32(name.encode())])


def _init_chunk(cfg: Config, s: TSpec, rng: np.random.Generator, r0: int, nr: int) -> np.ndarray:
    ncol = s.ne[0]
    shape = (nr, ncol)
    if s.init == "normal":
        fan_in = ncol
        scale = s.gain / math.sqrt(fan_in)
        x = rng.standard_normal(shape, dtype=np.float32)
        x *= np.float32(scale)  # in place: the same float32 products, one allocation less
        return x
    if s.init == "embed":
        return rng.standard_normal(shape, dtype=np.float32)
    if s.init == "norm":
        return 1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
    if s.init == "ssm_a":
        return -rng.uniform(0.1, 4.0, shape).astype(np.float32)  # -exp(log U(0.1, 4))
    if s.init == "ssm_dt":
        return (0.5 * rng.standard_normal(shape)).astype(np.float32)
    if s.init == "conv":
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(1.0 / math.sqrt(ncol))
    if s.init == "eh_proj":
        n = ncol // 2
        out = rng.standard_normal(shape, dtype=np.float32)
        out[:, :n] *= np.float32(0.5 / math.sqrt(ncol))
        out[:, n:] *= np.float32(0.1 / math.sqrt(ncol))
        rows = np.arange(r0, r0 + nr)
        out[rows - r0, rows] += 3.0
        return out
    raise ValueError(s.init)


_core_quantize = tgw.core_quantize
# "core": pyllm's C++ quantizers; "gguf": gguf-py's where it has them (the reference, same bytes; for tests)
QUANT_BACKEND = "core"


# --------------------------------------------------------------------------------------------------------------
# metadata (tokenizer copy and KV packing: tiny_gguf_kv.py)

def _size_label(cfg: Config, specs: list[TSpec]) -> str:
    total = sum(int(np.prod(s.ne)) for s in specs)
    if not cfg.moe:
        return gguf.size_label(total, 0, 0, 0)
    exp = sum(int(np.prod(s.ne)) for s in specs if "_exps." in s.name)
    return gguf.size_label(total, total - exp, exp // cfg.n_expert, cfg.n_expert)


def build_kv(cfg: Config, specs: list[TSpec]) -> list[tuple[str, VT, object, VT | None]]:
    a = cfg.arch
    n_all = cfg.n_layer + cfg.mtp_layers
    default_name = {"qwen35": "Tiny Qwen35 Random", "qwen35moe": "Tiny Qwen35Moe Random"}[a]
    kv: list = [
        ("general.architecture", VT.STRING, a, None),
        ("general.type", VT.STRING, "model", None),
        ("general.name", VT.STRING, cfg.name or default_name, None),
        ("general.size_label", VT.STRING, _size_label(cfg, specs), None),
        (f"{a}.block_count", VT.UINT32, n_all, None),
        (f"{a}.context_length", VT.UINT32, cfg.context_length, None),
        (f"{a}.embedding_length", VT.UINT32, cfg.n_embd, None),
    ]
    if not cfg.moe:
        kv.append((f"{a}.feed_forward_length", VT.UINT32, cfg.n_ff, None))
    kv += [
        (f"{a}.attention.head_count", VT.UINT32, cfg.n_head, None),
        (f"{a}.attention.head_count_kv", VT.UINT32, cfg.n_head_kv, None),
        (f"{a}.rope.dimension_sections", VT.ARRAY, cfg.sections, VT.INT32),
        (f"{a}.rope.freq_base", VT.FLOAT32, cfg.rope_freq_base, None),
        (f"{a}.attention.layer_norm_rms_epsilon", VT.FLOAT32, cfg.rms_eps, None),
    ]
    if cfg.moe:
        kv += [(f"{a}.expert_count", VT.UINT32, cfg.n_expert, None),
               (f"{a}.expert_used_count", VT.UINT32, cfg.n_expert_used, None)]
    kv += [
        (f"{a}.attention.key_length", VT.UINT32, cfg.head_dim, None),
        (f"{a}.attention.value_length", VT.UINT32, cfg.head_dim, None),
        ("general.file_type", VT.UINT32, int(_file_type(cfg)), None),
    ]
    if cfg.moe:
        kv += [(f"{a}.expert_feed_forward_length", VT.UINT32, cfg.n_ff_exp, None),
               (f"{a}.expert_shared_feed_forward_length", VT.UINT32, cfg.n_ff_shexp, None)]
    if cfg.mtp_layers > 0:
        kv.append((f"{a}.nextn_predict_layers", VT.UINT32, cfg.mtp_layers, None))
    kv += [
        (f"{a}.ssm.conv_kernel", VT.UINT32, cfg.ssm_d_conv, None),
        (f"{a}.ssm.state_size", VT.UINT32, cfg.ssm_d_state, None),
        (f"{a}.ssm.group_count", VT.UINT32, cfg.ssm_n_k_heads, None),
        (f"{a}.ssm.time_step_rank", VT.UINT32, cfg.ssm_n_v_heads, None),
        (f"{a}.ssm.inner_size", VT.UINT32, cfg.ssm_d_state * cfg.ssm_n_v_heads, None),
        (f"{a}.attention.recurrent_layers", VT.ARRAY, [cfg.is_recurrent(i) for i in range(n_all)], VT.BOOL),
        (f"{a}.full_attention_interval", VT.UINT32, cfg.full_attn_interval, None),
        (f"{a}.rope.dimension_count", VT.UINT32, cfg.n_rot, None),
        ("general.quantization_version", VT.UINT32, gguf.GGML_QUANT_VERSION, None),
    ]
    tok = kvw.load_tokenizer(Path(cfg.tokenizer_from) if cfg.tokenizer_from else DEFAULT_TOKENIZER)
    kv += kvw.fit_vocab(tok, cfg.vocab)
    if cfg.order == "quantize":  # llama-quantize re-adds these two at the end
        tail = {k: e for e in kv for k in [e[0]] if k in ("general.quantization_version", "general.file_type")}
        kv = [e for e in kv if e[0] not in tail] + [tail["general.quantization_version"], tail["general.file_type"]]
    return kv


def _check(cfg: Config) -> None:
    if cfg.arch not in ("qwen35", "qwen35moe"):
        raise ValueError(f"unknown arch {cfg.arch!r}")
    if cfg.n_head % cfg.n_head_kv or cfg.ssm_n_v_heads % cfg.ssm_n_k_heads:
        raise ValueError("n_head must be a multiple of n_head_kv and ssm_n_v_heads of ssm_n_k_heads")
    if cfg.n_layer < 1 or cfg.mtp_layers < 0 or cfg.full_attn_interval < 1:
        raise ValueError("bad layer counts")
    if cfg.n_rot > cfg.head_dim or cfg.n_rot % 2:
        raise ValueError("rope dim must be even and <= head_dim")
    if sum(cfg.sections) * 2 != cfg.n_rot:
        print(f"warning: rope sections {cfg.sections} do not cover n_rot {cfg.n_rot}", file=sys.stderr)
    if cfg.type not in TYPES:
        raise ValueError(f"unknown type {cfg.type!r}")
    if cfg.mix is not None and cfg.mix not in ALL_MIXES:
        raise ValueError(f"unknown mix {cfg.mix!r} (known: {', '.join(ALL_MIXES)})")
    if (TYPES[cfg.type] in CORE_QUANTS or cfg.mix is not None) and _core_quantize() is None:
        raise RuntimeError(("K-quant" if TYPES[cfg.type] in K_QUANTS and cfg.mix is None else cfg.mix or cfg.type)
                           + " output needs pyllm._core.quantize")


def _chunks(cfg: Config, s: TSpec):
    """A tensor's float32 values in file order, in chunks of about CHUNK_VALUES values."""
    step = max(1, CHUNK_VALUES // s.ne[0])
    # (rng, rows) runs in file order: one run for a plain tensor; for a fused one, its parts'
    # streams interleaved per group (expert)
    if s.parts:
        rngs = [_rng(cfg, pn) for pn, _ in s.parts]
        groups = s.n_rows // sum(pr for _, pr in s.parts)
        runs = [(rg, pr) for _ in range(groups) for rg, (_, pr) in zip(rngs, s.parts)]
    else:
        runs = [(_rng(cfg, s.name), s.n_rows)]
    for rng, rows in runs:
        for r0 in range(0, rows, step):
            yield _init_chunk(cfg, s, rng, r0, min(step, rows - r0))


def write_gguf(cfg: Config, out: str | os.PathLike, verbose: bool = False) -> dict:
    """Write the file; returns {"path", "bytes", "n_tensors", "n_params", "seconds"}."""
    _check(cfg)
    t0 = time.time()
    specs = _tensor_plan(cfg)
    kv = build_kv(cfg, specs)
    out = Path(out)
    tmp = out.with_name(out.name + ".part")
    offsets, off = [], 0
    for s in specs:
        offsets.append(off)
        off += s.nbytes
        off += (-off) % ALIGNMENT
    with open(tmp, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(specs), len(kv)))
        for k, vt, v, sub in kv:
            f.write(kvw.pack_str(k) + struct.pack("<I", int(vt)) + kvw.pack_value(vt, v, sub))
        for s, o in zip(specs, offsets):
            f.write(kvw.pack_str(s.name) + struct.pack("<I", len(s.ne)) + b"".join(struct.pack("<Q", d) for d in s.ne)
                    + struct.pack("<IQ", int(s.ggml_type), o))
        f.write(b"\0" * ((-f.tell()) % ALIGNMENT))
        base = f.tell()
        size = base + off
        f.truncate(size)  # alignment padding between tensors reads as zeros
        jobs = [(i, base + o, sp.nbytes, sp.ggml_type, sp.name, (lambda sp=sp: _chunks(cfg, sp)))
                for i, (sp, o) in enumerate(zip(specs, offsets))]
        progress = tgw.stderr_progress if verbose else None
        try:
            tgw.write_jobs(f.fileno(), jobs, cfg.threads or tgw.default_threads(), QUANT_BACKEND, progress)
        except BaseException:
            f.close()
            tmp.unlink(missing_ok=True)
            raise
    os.replace(tmp, out)
    return {"path": str(out), "bytes": size, "n_tensors": len(specs),
            "n_params": sum(int(np.prod(s.ne)) for s in specs), "seconds": time.time() - t0}


def parse_args(argv: list[str] | None = None) -> tuple[Config, str, bool]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--arch", choices=["qwen35", "qwen35moe"], default=None)
    p.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    d = Config()
    for fld in ("n_embd", "n_layer", "full_attn_interval", "n_head", "n_head_kv", "head_dim", "n_ff", "ssm_d_state",
                "ssm_n_k_heads", "ssm_n_v_heads", "ssm_d_conv", "n_expert", "n_expert_used", "n_ff_exp",
                "n_ff_shexp", "vocab", "mtp_layers", "seed", "context_length", "rope_dim"):
        p.add_argument("--" + fld.replace("_", "-"), dest=fld, type=int, default=None,
                       help=f"default {getattr(d, fld)} (or the preset's)")
    p.add_argument("--rope-sections", type=lambda s: [int(x) for x in s.split(",")], default=None,
                   help="4 comma-separated ints (default [3,3,2,0]-like, [11,11,10,0] for rope dim 64)")
    p.add_argument("--rope-freq-base", type=float, default=None)
    p.add_argument("--no-mtp", action="store_true", help="no MTP layer (same as --mtp-layers 0)")
    p.add_argument("--fused", action="store_true", help="fused attn_qkv in full-attention layers, ffn_gate_up_exps")
    p.add_argument("--type", choices=sorted(TYPES), default=None, help="matrix type (default q8_0)")
    p.add_argument("--mix", choices=ALL_MIXES, default=None,
                   help="per-tensor types of an Unsloth UD file instead of --type (see the module docstring)")
    p.add_argument("-j", "--threads", type=int, default=None, help="writer threads (default: all CPUs)")
    p.add_argument("--order", choices=["converter", "quantize"], default="converter")
    p.add_argument("--name", default=None, help="general.name")
    p.add_argument("--tokenizer-from", default=None, help="GGUF to copy tokenizer.* from")
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args(argv)
    if a.mix and a.type:
        p.error("--mix and --type are exclusive (a mix sets every tensor's type)")
    if a.threads is not None and a.threads < 1:
        p.error("--threads must be >= 1")
    preset = dict(PRESETS[a.preset])
    if a.arch is not None:
        if a.preset == "35b-a3b-shaped" and a.arch != "qwen35moe":
            p.error("--preset 35b-a3b-shaped is a qwen35moe preset")
        preset["arch"] = a.arch
    cfg = replace(Config(), **preset)
    for k, v in vars(a).items():
        if k in ("out", "arch", "preset", "no_mtp", "fused", "verbose") or v is None:
            continue
        setattr(cfg, k, v)
    cfg.fused = a.fused
    if a.no_mtp:
        cfg.mtp_layers = 0
    return cfg, a.out, a.verbose


def main(argv: list[str] | None = None) -> int:
    cfg, out, verbose = parse_args(argv)
    try:
        info = write_gguf(cfg, out, verbose=verbose)
    except (ValueError, RuntimeError) as e:
        print(f"make_tiny_gguf: {e}", file=sys.stderr)
        return 1
    print(f"wrote {info['path']}: {info['bytes']} bytes, {info['n_tensors']} tensors, {info['n_params']} params, "
          f"{info['seconds']:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
