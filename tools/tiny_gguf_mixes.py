"""Per-tensor type mixes for make_tiny_gguf.py --mix: Unsloth-like "UD" (Dynamic 2.0) files.

The rules follow shared/docs/quants-and-models.md §1.2-1.3 (observed Unsloth Qwen3.5/3.6 tensor types):

* UD-Q4_K_XL (35B-A3B dump): routed experts gate/up Q4_K, down Q5_K "(Q6_K in some layers)"; attn_qkv, attn_gate,
  ssm_out, the shared expert and lm_head Q8_0; "everything else Q8_0" (the Qwen3.8 UD-Q4_K_XL row). Which down
  layers get Q6_K is Unsloth's calibration choice; here they are the layers llama-quantize's Q4_K_M gives more
  bits (use_more_bits: the first and last eighth of the trunk and every third layer between).
  Dense (qwen35) files get the same rules with ffn_gate/ffn_up/ffn_down in the experts' place.
* UD-Q5_K_XL: "Q5_K/Q6_K plus Q8_0": gate/up Q5_K, down Q6_K, the rest Q8_0.
* UD-Q6_K_XL: "Q6_K plus Q8_0": gate/up/down Q6_K, the rest Q8_0.
* UD-Q8_K_XL (not confirmed for Qwen3.6; "Q8_0 plus BF16 for the most sensitive tensors"): every matrix Q8_0
  except BF16 for the projections that write the residual stream from attention and the SSM (attn_output,
  ssm_out), which §1.1 names as the sensitive ones. An assumption, said so here.
* In every UD mix: the router (ffn_gate_inp) is BF16, as in the UD-Q4_K_M dump (the converter wrote it in BF16);
  token_embd is Q8_0 (UD-Q4_K_M dump); the MTP block's matrices (nextn.eh_proj, its attention and dense FFN) are
  Q8_0 ("shared Q8_0"); its routed experts follow the trunk's expert rule (UD-Q4_K_M dump). 1-D tensors,
  ssm_conv1d and ffn_gate_inp_shexp stay F32 as llama-quantize keeps them.

general.file_type is the llama.cpp ftype Unsloth's files of that name declare (Q4_K_M, Q5_K_M, Q6_K, Q8_0).
Row lengths that are not a multiple of a type's block fall back as for --type (make_tiny_gguf._pick_type).
The IQ / Q2_K / Q3_K UD mixes (LOWBIT_MIXES, issue 15) follow at the end, as (regex, type name) rules.
"""
from __future__ import annotations

import re

from gguf import GGMLQuantizationType as QT
from gguf.constants import LlamaFileType as FT

# mix -> (expert/dense gate+up, down, down in the use_more_bits layers, everything else, residual writers)
_RULES = {
    "ud-q4_k_xl": dict(gate_up=QT.Q4_K, down=QT.Q5_K, down_more=QT.Q6_K, other=QT.Q8_0, resid=QT.Q8_0,
                       file_type=FT.MOSTLY_Q4_K_M),
    "ud-q5_k_xl": dict(gate_up=QT.Q5_K, down=QT.Q6_K, down_more=QT.Q6_K, other=QT.Q8_0, resid=QT.Q8_0,
                       file_type=FT.MOSTLY_Q5_K_M),
    "ud-q6_k_xl": dict(gate_up=QT.Q6_K, down=QT.Q6_K, down_more=QT.Q6_K, other=QT.Q8_0, resid=QT.Q8_0,
                       file_type=FT.MOSTLY_Q6_K),
    "ud-q8_k_xl": dict(gate_up=QT.Q8_0, down=QT.Q8_0, down_more=QT.Q8_0, other=QT.Q8_0, resid=QT.BF16,
                       file_type=FT.MOSTLY_Q8_0),
}
MIXES = tuple(_RULES)

_GATE_UP = ("ffn_gate_exps", "ffn_up_exps", "ffn_gate_up_exps", "ffn_gate.", "ffn_up.")
_DOWN = ("ffn_down_exps", "ffn_down.")


def use_more_bits(i_layer: int, n_layer: int) -> bool:
    """llama-quantize's rule for the layers Q4_K_M / Q5_K_M give a higher type (src/llama-quant.cpp)."""
    return i_layer < n_layer // 8 or i_layer >= 7 * n_layer // 8 or (i_layer - n_layer // 8) % 3 == 2


def file_type(mix: str) -> FT:
    return _RULES[mix]["file_type"]


def tensor_type(mix: str, name: str, n_layer: int, keep_f32: bool) -> QT:
    """The mix's type for tensor `name` (before the block-size fallback). n_layer: trunk layers (MTP excluded)."""
    r = _RULES[mix]
    base = name.split(".")[-2] if "." in name else name
    if name.endswith("ffn_gate_inp.weight"):
        return QT.BF16
    if keep_f32:
        return QT.F32
    parts = name.split(".")
    il = int(parts[1]) if parts[0] == "blk" and parts[1].isdigit() else -1
    mtp = il >= n_layer
    expert = "_exps." in name
    if any(k in name for k in _GATE_UP) and (expert or not mtp):
        return r["gate_up"]
    if any(k in name for k in _DOWN) and (expert or not mtp):
        return r["down_more"] if (not mtp and use_more_bits(il, n_layer)) else r["down"]
    if base in ("attn_output", "ssm_out") and not mtp:
        return r["resid"]
    return r["other"]


# --mix NAME: per-tensor types as in Unsloth's UD files (shared/docs/quants-and-models.md 1.1-1.3): (regex on the
# tensor name, type) pairs, first match wins, then the mix's default. Every UD file keeps the MTP block's
# nextn.eh_proj at Q8_0 and ssm_alpha/ssm_beta at Q8_0 (S4, S6, S11); attn_* and ssm_out stay at higher precision
# (S2). Observed rows: UD-IQ2_XXS dense hybrid (S6) verbatim; UD-IQ2_M experts Q2_K/Q3_K, shexp Q5_K (S7);
# gate/up experts tolerate ~3 bit (iq3_xxs), down is more sensitive (S2). Tensors the notes do not list
# (token_embd, output, full-attention q/k/v/output) get Q4_K/Q6_K, as llama-quantize's low-bit mixes do.
_UD_COMMON = [(r"nextn\.eh_proj", "q8_0"), (r"ssm_(alpha|beta)", "q8_0"), (r"^output\.", "q6_k"),
              (r"^token_embd\.", "q4_k")]
LOWBIT_MIXES = {
    "ud-iq2_xxs": _UD_COMMON + [(r"attn_gate", "iq3_xxs"), (r"ffn_down", "iq3_s"), (r"ssm_out", "q4_k"),
                                (r"attn_(q|k|v|output)\.", "q4_k"), (r"", "iq2_xxs")],
    "ud-iq2_m": _UD_COMMON + [(r"ffn_(gate|up)_exps", "q2_k"), (r"ffn_down_exps", "q3_k"), (r"_shexp", "q5_k"),
                              (r"attn_gate", "iq3_s"), (r"ffn_down", "iq3_s"), (r"ssm_out", "q4_k"),
                              (r"attn_(q|k|v|output)\.", "q4_k"), (r"", "iq2_s")],
    "ud-q2_k_xl": _UD_COMMON + [(r"ffn_(gate|up)(_exps)?\.", "q2_k"), (r"ffn_down", "q3_k"), (r"ssm_out", "q4_k"),
                                (r"attn_", "q4_k"), (r"", "q2_k")],
    "ud-iq3_xxs": _UD_COMMON + [(r"ffn_(gate|up)(_exps)?\.", "iq3_xxs"), (r"ffn_down", "iq3_s"), (r"ssm_out", "q5_k"),
                                (r"attn_", "q5_k"), (r"", "iq3_xxs")],
    "ud-iq3_s": _UD_COMMON + [(r"ffn_(gate|up)(_exps)?\.", "iq3_s"), (r"ffn_down", "iq4_nl"), (r"ssm_out", "q5_k"),
                              (r"attn_", "q5_k"), (r"", "iq3_s")],
    "ud-q3_k_xl": _UD_COMMON + [(r"ffn_(gate|up)(_exps)?\.", "q3_k"), (r"ffn_down", "q4_k"), (r"ssm_out", "q5_k"),
                                (r"attn_", "q5_k"), (r"", "q3_k")],
}
LOWBIT_MIX_FILE_TYPES = {"ud-iq2_xxs": "iq2_xxs", "ud-iq2_m": "iq2_s", "ud-q2_k_xl": "q2_k", "ud-iq3_xxs": "iq3_xxs",
                         "ud-iq3_s": "iq3_s", "ud-q3_k_xl": "q3_k"}


def lowbit_mix_type_name(mix: str, name: str) -> str:
    """The type name (make_tiny_gguf's --type names) --mix MIX gives tensor `name`, before the block-size fallback."""
    for pat, t in LOWBIT_MIXES[mix]:
        if re.search(pat, name):
            return t
    raise AssertionError("every mix ends with a catch-all")
