"""Sampling settings: the one place request dicts (llama-server names) become the core's typed structs.

    sp = sampler_params({"temperature": 0.7, "top_k": 20, "logit_bias": {"15043": -1.5}})  # _core.SamplerParams
    s = _core.Sampler(sp, n_vocab)
    seq = seq_params(request_dict, model.eog_ids)                                          # _core.SeqParams
    ctx.seq_begin(model._m, 0, prompt, seq)
    settings(sp)                       # back to llama-server names (generation_settings, /props)

Names and semantics follow llama-server's request fields (server-schema.cpp): unknown keys are ignored (a
whole request dict can be passed), None means "the default", the defaults are the core's (llama.cpp's
common_params_sampling). logit_bias must already hold token ids: text keys are resolved by the caller, who has
the tokenizer (pyllm/server/schemas.py does, for the server). What the sampler chain itself rejects (DRY,
adaptive-p, mirostat > 2) is checked by the core when the Sampler is built.
"""
from __future__ import annotations

import math
import re
from array import array

UINT32_MAX = 0xFFFFFFFF
INT32 = (-2 ** 31, 2 ** 31 - 1)

# llama-server name -> SamplerParams field, and whether it is an integer
_FIELDS = {
    "temperature": ("temp", False), "dynatemp_range": ("dynatemp_range", False),
    "dynatemp_exponent": ("dynatemp_exponent", False), "top_k": ("top_k", True), "top_p": ("top_p", False),
    "min_p": ("min_p", False), "typical_p": ("typ_p", False), "xtc_probability": ("xtc_probability", False),
    "xtc_threshold": ("xtc_threshold", False), "top_n_sigma": ("top_n_sigma", False),
    "repeat_last_n": ("penalty_last_n", True), "repeat_penalty": ("penalty_repeat", False),
    "frequency_penalty": ("penalty_freq", False), "presence_penalty": ("penalty_present", False),
    "dry_multiplier": ("dry_multiplier", False), "dry_allowed_length": ("dry_allowed_length", True),
    "dry_penalty_last_n": ("dry_penalty_last_n", True), "mirostat": ("mirostat", True),
    "mirostat_tau": ("mirostat_tau", False), "mirostat_eta": ("mirostat_eta", False),
    "adaptive_target": ("adaptive_target", False), "adaptive_decay": ("adaptive_decay", False),
    "min_keep": ("min_keep", True),
}


def _core(core):
    if core is None:
        from ._native import core
    return core


def _given(d: dict, key: str):
    v = d.get(key)
    return v is not None, v


def _number(v, key: str) -> float:
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, (int, float)):
        return float(v)
    raise ValueError(f"sampling param '{key}' must be a number")


def _int32(v, key: str) -> int:
    x = _number(v, key)
    if not math.isfinite(x) or not INT32[0] <= int(x) <= INT32[1]:
        raise ValueError(f"sampling param '{key}' must be a 32-bit integer, got {v!r}")
    return int(x)  # truncates toward zero, as a C cast


def _f32(x: float) -> float:
    return array("f", [x])[0]


def _bias(v):
    """A bias value -> float (-inf = ban), or None to skip the entry: a number, false = ban; null (the
    generation_settings form of a ban) bans too; true is no bias."""
    if v is None or v is False:
        return -math.inf
    if v is True or not isinstance(v, (int, float)):
        return None
    return float(v)


def _token(k) -> int:
    if isinstance(k, int) and not isinstance(k, bool):
        return k
    if isinstance(k, str):
        if re.fullmatch(r"\s*[+-]?[0-9]+", k):
            return int(k)
        raise ValueError(f"logit_bias: text key '{k}' must be tokenized to token ids before building the sampler")
    raise ValueError("logit_bias: token must be an int or a numeric string")


def logit_bias(lb) -> list:
    """[(token id, bias)] from the OAI form {"15043": -1.5}, [[token, bias], ...] pairs or generation_settings'
    [{"token": t, "bias": b}]; entries whose bias is not a number / false / null are skipped."""
    out = []
    if isinstance(lb, dict):
        for k, v in lb.items():
            b = _bias(v)
            if b is not None:
                out.append((_token(k), b))
    elif isinstance(lb, (list, tuple)):
        for el in lb:
            if isinstance(el, dict):
                if "token" in el:
                    b = _bias(el.get("bias"))
                    if b is not None:
                        out.append((_token(el["token"]), b))
            elif isinstance(el, (list, tuple)) and len(el) == 2:
                b = _bias(el[1])
                if b is not None:
                    out.append((_token(el[0]), b))
    elif lb is not None:
        raise ValueError("logit_bias must be a list of [token, bias] pairs or a {token: bias} object")
    return out


def _strings(v, key: str) -> list:
    if isinstance(v, str) or not isinstance(v, (list, tuple)) or not all(isinstance(s, str) for s in v):
        raise ValueError(f"sampling param '{key}' must be a list of strings")
    return list(v)


def sampler_params(d: dict, core=None):
    """A request dict (llama-server names) -> core.SamplerParams; ValueError naming a bad field."""
    core = _core(core)
    p = core.SamplerParams()
    for key, (field, is_int) in _FIELDS.items():
        ok, v = _given(d, key)
        if ok:
            setattr(p, field, _int32(v, key) if is_int else _number(v, key))
    ok, v = _given(d, "dry_base")
    if ok and _f32(_number(v, "dry_base")) >= 1.0:  # < 1 -> default, as llama-server does
        p.dry_base = _number(v, "dry_base")
    ok, v = _given(d, "dry_sequence_breakers")
    if ok:
        p.dry_sequence_breakers = _strings(v, "dry_sequence_breakers")
    ok, v = _given(d, "seed")
    if ok:
        s = _number(v, "seed")
        if not math.isfinite(s):
            raise ValueError(f"sampling param 'seed' must be a finite number, got {v!r}")
        p.seed = UINT32_MAX if s < 0 else int(s) & UINT32_MAX  # -1: a random seed
    if _given(d, "n_probs")[0]:
        p.n_probs = _int32(d["n_probs"], "n_probs")
    else:
        ok, v = _given(d, "logprobs")
        if ok and not isinstance(v, bool):  # /completion's alias; chat's bool is not a count
            p.n_probs = _int32(v, "logprobs")
    ok, v = _given(d, "ignore_eos")
    if ok:
        if not isinstance(v, bool):
            raise ValueError("sampling param 'ignore_eos' must be a boolean")
        p.ignore_eos = v
    ok, v = _given(d, "logit_bias")
    if ok:
        p.logit_bias = logit_bias(v)
    # the EOG ids ignore_eos bans: a list of ids (eog_tokens), or generation_settings' bias entries
    eog = []
    ok, v = _given(d, "eog_tokens")
    if ok:
        eog += [(int(t), -math.inf) for t in v if isinstance(t, int)]
    ok, v = _given(d, "logit_bias_eog")
    if ok:
        ids = [(int(t), -math.inf) for t in v if isinstance(t, int)]
        eog += ids if ids or eog else logit_bias(v)
    if eog:
        p.logit_bias_eog = eog
    ok, v = _given(d, "samplers")
    if ok:
        p.samplers = (core.sampler_types_from_chars(v) if isinstance(v, str)
                      else core.sampler_types_from_names(_strings(v, "samplers")))
    return p


def _count(d: dict, key: str, default: int) -> int:
    v = d.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"'{key}' must be an integer, got {v!r}")
    return v


SPEC_TYPES_OFF = ("none",)


def spec_request(d: dict) -> dict:
    """The per-request speculative settings of a request dict, llama-server's names (`speculative.n_max`,
    `speculative.n_min`, `speculative.p_min`, and `speculative.type`: "none" turns drafting off for the request)
    -> {"n_max", "n_min", "p_min"} with -1 for "the context's". ValueError naming a bad field; that n_max fits
    the context's is checked by the core (Context.seq_begin)."""
    out = {"n_max": -1, "n_min": -1, "p_min": -1.0}
    for key, name in (("n_max", "speculative.n_max"), ("n_min", "speculative.n_min")):
        v = d.get(name)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or not 0 <= v <= INT32[1]:
                raise ValueError(f"'{name}' must be an integer >= 0, got {v!r}")
            out[key] = int(v)
    v = d.get("speculative.p_min")
    if v is not None:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
            raise ValueError(f"'speculative.p_min' must be a number within [0, 1], got {v!r}")
        out["p_min"] = float(v)
    t = d.get("speculative.type")
    if t is not None:
        if not isinstance(t, str):
            raise ValueError(f"'speculative.type' must be a string, got {t!r}")
        if t in SPEC_TYPES_OFF:
            out["n_max"] = 0
    return out


def seq_params(d: dict, eog_ids=(), core=None):
    """A request dict -> core.SeqParams for Context.seq_begin: the sampler's settings plus n_predict, n_probs,
    the seed of the synthetic acceptance and the per-request speculative settings (spec_request); ignore_eos
    bans eog_ids (the model's) in the chain, as llama.cpp does."""
    core = _core(core)
    ignore_eos = d.get("ignore_eos") is True
    sp = core.SeqParams()
    sp.sampler = sampler_params(dict(d, eog_tokens=list(eog_ids)) if ignore_eos else d, core)
    sp.ignore_eos = ignore_eos
    sp.n_predict = _count(d, "n_predict", -1)
    sp.n_probs = _count(d, "n_probs", 0)
    if d.get("seed") is not None:  # the sampler validated it; -1 stays "random" (UINT32_MAX)
        sp.seed = int(d["seed"]) & UINT32_MAX
    spec = spec_request(d)
    sp.spec_n_max, sp.spec_n_min, sp.spec_p_min = spec["n_max"], spec["n_min"], spec["p_min"]
    return sp


def settings(p, core=None) -> dict:
    """core.SamplerParams -> llama-server names (generation_settings order; bans shown as null)."""
    core = _core(core)
    d = {"seed": p.seed, "temperature": p.temp, "dynatemp_range": p.dynatemp_range,
         "dynatemp_exponent": p.dynatemp_exponent, "top_k": p.top_k, "top_p": p.top_p, "min_p": p.min_p,
         "top_n_sigma": p.top_n_sigma, "xtc_probability": p.xtc_probability, "xtc_threshold": p.xtc_threshold,
         "typical_p": p.typ_p, "repeat_last_n": p.penalty_last_n, "repeat_penalty": p.penalty_repeat,
         "presence_penalty": p.penalty_present, "frequency_penalty": p.penalty_freq,
         "dry_multiplier": p.dry_multiplier, "dry_base": p.dry_base, "dry_allowed_length": p.dry_allowed_length,
         "dry_penalty_last_n": p.dry_penalty_last_n, "dry_sequence_breakers": p.dry_sequence_breakers,
         "mirostat": p.mirostat, "mirostat_tau": p.mirostat_tau, "mirostat_eta": p.mirostat_eta,
         "adaptive_target": p.adaptive_target, "adaptive_decay": p.adaptive_decay, "ignore_eos": p.ignore_eos,
         "n_probs": p.n_probs, "min_keep": p.min_keep}
    lb = p.logit_bias + (p.logit_bias_eog if p.ignore_eos else [])
    d["logit_bias"] = [{"token": t, "bias": None if b == -math.inf else b} for t, b in lb]
    d["samplers"] = [core.sampler_type_name(t) for t in p.samplers]
    return d


def defaults(core=None) -> dict:
    """llama.cpp's default sampling settings, with llama-server names."""
    return settings(_core(core).SamplerParams(), core)
