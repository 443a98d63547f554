"""Request validation and JSON shapes, following llama-server's server-schema.cpp / server-task.cpp."""
from __future__ import annotations

import json
import math
import random
import string

from ..args import Params
from . import spec_request

INT32_MAX = 2147483647
DRY_BREAKERS = ("\n", ":", "\"", "*")
UINT32_MAX = 4294967295


class ApiError(Exception):
    """An error answered as llama-server does: {"error": {"code", "message", "type", ...extra}}."""

    def __init__(self, message: str, code: int = 400, type_: str = "invalid_request_error", extra=None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.type = type_
        self.extra = extra or {}

    def body(self) -> dict:
        e = {"code": self.code, "message": self.message, "type": self.type}
        e.update(self.extra)
        return {"error": e}


def invalid(msg):
    return ApiError(msg, 400, "invalid_request_error")


def parse_json_body(raw: bytes):
    if not raw.strip():
        raw = b"{}"
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        # nlohmann throws parse_error -> ex_wrapper answers 500
        raise ApiError(f"[json.exception.parse_error.101] parse error: {e}", 500, "server_error")


def _jtype(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _get_num(name, v, integer):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise invalid(f"Field '{name}': [json.exception.type_error.302] type must be number, but is {_jtype(v)}")
    if integer:
        if isinstance(v, float):
            if not math.isfinite(v):
                raise invalid(f"Field '{name}': value out of range")
            v = int(v)
        return v
    return float(v)


def _to_string(v, integer):
    return str(v) if integer else f"{v:f}"


def _first(body: dict, names):
    for n in names:
        if n in body and body[n] is not None:
            return n, body[n]
    return None, None


# name(s), dest, integer, (min, max), hard
NUM_FIELDS = [
    (("n_predict", "max_completion_tokens", "max_tokens"), "n_predict", True, (-1, INT32_MAX), True),
    (("n_keep",), "n_keep", True, (-1, INT32_MAX), True),
    (("n_discard",), "n_discard", True, (0, INT32_MAX), True),
    (("n_indent",), "n_indent", True, (0, INT32_MAX), True),
    (("n_cache_reuse",), "n_cache_reuse", True, (0, INT32_MAX), True),
    (("sse_ping_interval",), "sse_ping_interval", True, (-1, INT32_MAX), True),
    (("t_max_predict_ms",), "t_max_predict_ms", True, (-1, 2**63 - 1), True),
    (("top_k",), "top_k", True, (0, INT32_MAX), False),
    (("top_p",), "top_p", False, (0.0, 1.0), False),
    (("min_p",), "min_p", False, (0.0, 1.0), False),
    (("top_n_sigma",), "top_n_sigma", False, None, False),
    (("xtc_probability",), "xtc_probability", False, (0.0, 1.0), False),
    (("xtc_threshold",), "xtc_threshold", False, (0.0, 1.0), False),
    (("typical_p",), "typical_p", False, None, False),
    (("temperature",), "temperature", False, (0.0, math.inf), False),
    (("dynatemp_range",), "dynatemp_range", False, None, False),
    (("dynatemp_exponent",), "dynatemp_exponent", False, None, False),
    (("repeat_last_n",), "repeat_last_n", True, (0, INT32_MAX), True),
    (("repeat_penalty",), "repeat_penalty", False, None, False),
    (("frequency_penalty",), "frequency_penalty", False, None, False),
    (("presence_penalty",), "presence_penalty", False, None, False),
    (("dry_multiplier",), "dry_multiplier", False, None, False),
    (("dry_base",), "dry_base", False, None, False),
    (("dry_allowed_length",), "dry_allowed_length", True, (0, INT32_MAX), True),
    (("dry_penalty_last_n",), "dry_penalty_last_n", True, (0, INT32_MAX), True),
    (("mirostat",), "mirostat", True, (0, 2), False),
    (("mirostat_tau",), "mirostat_tau", False, None, False),
    (("mirostat_eta",), "mirostat_eta", False, None, False),
    (("adaptive_target",), "adaptive_target", False, (-3.4e38, 1.0), False),
    (("adaptive_decay",), "adaptive_decay", False, (0.0, 0.99), True),
    (("min_keep",), "min_keep", True, (0, INT32_MAX), True),
]
BOOL_FIELDS = ["stream", "cache_prompt", "ignore_eos", "post_sampling_probs", "return_tokens", "return_progress",
               "timings_per_token", "backend_sampling", "verbose"]


# Every request field llama-server reads on /completion, /v1/completions and /v1/chat/completions
# (server-schema.cpp and oaicompat_{completion,chat}_params_parse) and what pyllm does with it:
#   "ok"      honoured: parse_common above, core_params (the C++ sampler), prompts.py / chat_request.py (chat and
#             structured output), responses.py (shapes);
#   "refuse"  pyllm does not implement it: a value other than llama-server's default answers 400 naming the field;
#   "same"    llama-server ignores it as well in the setup pyllm has (the reason next to it), so it is accepted.
# Keys in no row are unknown to llama-server too: both servers ignore them (llama-server reads fixed names and never
# rejects extra keys), so OpenAI clients' `user`, `store`, `metadata`... keep working.
FIELD_TABLE = {
    **{n: "ok" for names, *_ in NUM_FIELDS for n in names if n not in ("n_indent", "n_cache_reuse",
                                                                         "t_max_predict_ms", "n_keep", "n_discard",
                                                                         "adaptive_target", "adaptive_decay")},
    **{b: "ok" for b in BOOL_FIELDS if b != "backend_sampling"},
    "prompt": "ok", "stream_options": "ok", "n_cmpl": "ok", "n": "ok", "seed": "ok", "n_probs": "ok",
    "logprobs": "ok", "top_logprobs": "ok", "stop": "ok", "logit_bias": "ok", "samplers": "ok",
    "id_slot": "ok", "response_fields": "ok", "grammar": "ok", "json_schema": "ok",
    "response_format": "ok", "messages": "ok", "tools": "ok", "tool_choice": "ok", "parallel_tool_calls": "ok",
    "chat_template_kwargs": "ok", "reasoning_format": "ok", "reasoning_effort": "ok", "add_generation_prompt": "ok",
    "reasoning_budget_tokens": "ok", "thinking_budget_tokens": "ok", "reasoning_budget_message": "ok",
    # the core has no DRY sampler: dry_multiplier > 0 is refused; the other dry_* fields only act through it, so
    # (as in llama-server with dry_multiplier 0) they change nothing and are accepted
    "dry_multiplier": "refuse", **{f"dry_{k}": "same" for k in ("base", "allowed_length", "penalty_last_n",
                                                                  "sequence_breakers")},
    "continue_final_message": "ok",
    "n_indent": "refuse", "n_cache_reuse": "refuse", "t_max_predict_ms": "refuse", "t_max_prompt_ms": "refuse",
    "lora": "refuse", "echo": "refuse", "best_of": "refuse", "suffix": "refuse",
    "grammar_lazy": "refuse", "grammar_triggers": "refuse", "preserved_tokens": "refuse", "reasoning_control": "refuse",
    # chat internals: on chat llama-server overwrites them from the template (so ignores the client's value); on the
    # completion routes pyllm refuses them (it has no raw chat parser there)
    "chat_format": "refuse", "chat_parser": "refuse", "generation_prompt": "refuse", "parse_tool_calls": "refuse",
    "message_delimiters": "refuse", "reasoning_budget_start_tag": "refuse", "reasoning_budget_end_tags": "refuse",
    # only read by the adaptive-p sampler, which acts only when `samplers` lists it; pyllm's core refuses that
    # sampler (400 naming it), so without it llama-server ignores these too (they are still range-checked above)
    "adaptive_target": "same", "adaptive_decay": "same",
    # n_keep / n_discard only steer context shifting, off by default in llama-server; pyllm has none (--context-shift
    # is warned about and ignored), so llama-server would ignore them too
    "n_keep": "same", "n_discard": "same",
    # `speculative.*` request fields are compiled out of llama-server; pyllm honours the draft ones (spec_request.py)
    # and refuses the n-gram ones (it has no n-gram drafter; llama-server's old defaults are accepted)
    **{f"speculative.{k}": "ok" for k in ("n_max", "n_min", "p_min", "type")},
    **{f"speculative.{k}": "refuse" for k in ("ngram_size_n", "ngram_size_m", "ngram_min_hits")},
    # where the sampler chain runs (backend graph or CPU): the tokens do not depend on it; pyllm samples on the CPU
    "backend_sampling": "same",
    # single-model mode: llama-server ignores the requested model name (responses carry the server's)
    "model": "same",
}
CHAT_INTERNALS = ("chat_format", "chat_parser", "generation_prompt", "parse_tool_calls", "message_delimiters",
                  "reasoning_budget_start_tag", "reasoning_budget_end_tags", "grammar_lazy", "grammar_triggers",
                  "preserved_tokens")
CHAT_ONLY = ("messages", "tools", "tool_choice", "parallel_tool_calls", "response_format", "chat_template_kwargs",
             "reasoning_effort", "add_generation_prompt", "reasoning_budget_tokens", "thinking_budget_tokens",
             "reasoning_budget_message", "reasoning_format", "top_logprobs", "continue_final_message")
# llama-server's defaults for the refused fields: these values are accepted (they change nothing)
_REFUSED_DEFAULT = {"dry_multiplier": (0, 0.0),
                    "n_indent": (0,), "n_cache_reuse": (0,), "t_max_predict_ms": (-1, 0), "t_max_prompt_ms": (-1, 0),
                    "lora": ([],), "echo": (False,), "grammar_lazy": (False,), "grammar_triggers": ([],),
                    "preserved_tokens": ([],), "reasoning_control": (False,),
                    "speculative.ngram_size_n": (12,), "speculative.ngram_size_m": (48,),
                    "speculative.ngram_min_hits": (1,)}


def check_fields(body: dict, kind: str):
    """400 for a field pyllm does not implement (FIELD_TABLE "refuse") sent with a non-default value.
    kind: "native" | "oai" | "chat"."""
    for name, v in body.items():
        if v is None or FIELD_TABLE.get(name) != "refuse":
            continue
        if kind == "chat" and name in CHAT_INTERNALS:
            continue  # llama-server overwrites these from the chat template
        if name in ("best_of", "suffix"):
            if kind == "oai":
                raise invalid(f"Unsupported param: {name}")
            continue  # unknown to the native and chat routes
        if name == "echo" and v is True:
            raise invalid("Field 'echo': Only no echo is supported")
        if any(v == d and isinstance(v, bool) == isinstance(d, bool) for d in _REFUSED_DEFAULT.get(name, ())):
            continue  # the default value (0 and 0.0 alike; never true for 1)
        raise invalid(f"Field '{name}' is not supported by pyllm")
    if kind != "chat":
        for name in ("reasoning_format", "reasoning_budget_tokens", "thinking_budget_tokens",
                     "reasoning_budget_message"):
            if body.get(name) is not None:
                raise invalid(f"Field '{name}' is only supported on /v1/chat/completions by pyllm")


def defaults_from_cli(p: Params) -> dict:
    return {
        "n_predict": -1, "n_keep": p.n_keep, "n_discard": 0, "n_indent": 0, "n_cache_reuse": 0,
        "sse_ping_interval": p.sse_ping_interval, "t_max_predict_ms": -1,
        "seed": p.seed if p.seed >= 0 else UINT32_MAX, "temperature": p.temperature, "dynatemp_range": p.dynatemp_range,
        "dynatemp_exponent": p.dynatemp_exponent, "top_k": p.top_k, "top_p": p.top_p, "min_p": p.min_p,
        "top_n_sigma": p.top_n_sigma, "xtc_probability": p.xtc_probability, "xtc_threshold": p.xtc_threshold,
        "typical_p": p.typical_p, "repeat_last_n": p.repeat_last_n, "repeat_penalty": p.repeat_penalty,
        "presence_penalty": p.presence_penalty, "frequency_penalty": p.frequency_penalty,
        "dry_multiplier": p.dry_multiplier, "dry_base": p.dry_base, "dry_allowed_length": p.dry_allowed_length,
        "dry_penalty_last_n": p.dry_penalty_last_n if p.dry_penalty_last_n >= 0 else 64,
        "mirostat": p.mirostat, "mirostat_tau": p.mirostat_tau, "mirostat_eta": p.mirostat_eta,
        "adaptive_target": -1.0, "adaptive_decay": 0.9, "min_keep": p.min_keep, "n_probs": p.n_probs,
        "stream": False, "cache_prompt": p.cache_prompt, "ignore_eos": p.ignore_eos, "post_sampling_probs": False,
        "return_tokens": False, "return_progress": False, "timings_per_token": False, "backend_sampling": False,
        "verbose": p.verbose or p.verbosity > 9, "stop": list(p.antiprompt), "logit_bias": [], "id_slot": -1, "n_cmpl": 1,
        "samplers": list(p.samplers), "response_fields": [], "dry_sequence_breakers": list(DRY_BREAKERS),
    }


def parse_common(body: dict, p: Params, n_parallel: int, vocab=None) -> dict:
    """Validate the §1.5 fields; returns the effective request params (llama-server names)."""
    if not isinstance(body, dict):
        raise invalid("request body must be a JSON object")
    out = defaults_from_cli(p)
    for names, dest, integer, lim, hard in NUM_FIELDS:
        n, v = _first(body, names)
        if n is None:
            continue
        v = _get_num(n, v, integer)
        if lim is not None:
            lo, hi = lim
            if hard:
                if v < lo or v > hi:
                    raise invalid(f"Field '{n}': Value must be between {_to_string(lo, integer)} <= value <= "
                                  f"{_to_string(hi, integer)}, but got {_to_string(v, integer)}")
            else:
                v = max(lo, min(hi, v))
        if dest == "dry_base" and v < 1.0:
            v = p.dry_base
        out[dest] = v
    # n_predict: CLI -n is the default; a request value != -1 replaces it
    if out["n_predict"] == -1:
        out["n_predict"] = p.n_predict
    n, v = _first(body, ("n_cmpl", "n"))
    if n is not None:
        v = _get_num(n, v, True)
        if v < 1 or v > n_parallel:
            raise invalid(f"Field '{n}': Value must be between 1 <= value <= {n_parallel}, but got {v}")
        out["n_cmpl"] = v
    if "seed" in body and body["seed"] is not None:
        v = _get_num("seed", body["seed"], True)
        out["seed"] = UINT32_MAX if v < 0 else v & 0xFFFFFFFF
    n, v = _first(body, ("n_probs",))
    if n is not None:
        out["n_probs"] = max(0, _get_num(n, v, True))
    for b in BOOL_FIELDS:
        if b in body and body[b] is not None:
            if not isinstance(body[b], bool):
                raise invalid(f"Field '{b}': [json.exception.type_error.302] type must be boolean, but is "
                              f"{_jtype(body[b])}")
            out[b] = body[b]
    if "stop" in body and body["stop"] is not None:
        s = body["stop"]
        if isinstance(s, str):
            s = [s]
        if not isinstance(s, list) or not all(isinstance(x, str) for x in s):
            raise invalid("Field 'stop': [json.exception.type_error.302] type must be string, but is "
                          f"{_jtype(s if not isinstance(s, list) else next(x for x in s if not isinstance(x, str)))}")
        if s:
            out["stop"] = [x for x in s if x]
    if "id_slot" in body and body["id_slot"] is not None:
        v = _get_num("id_slot", body["id_slot"], True)
        if v >= n_parallel:
            raise invalid("Invalid slot ID")
        out["id_slot"] = v
    if "logit_bias" in body and body["logit_bias"] is not None:
        out["logit_bias"] = _parse_logit_bias(body["logit_bias"], vocab)
    if "response_fields" in body and isinstance(body["response_fields"], list):
        out["response_fields"] = [x for x in body["response_fields"] if isinstance(x, str)]
    if "samplers" in body and body["samplers"] is not None:
        s = body["samplers"]
        if isinstance(s, str):
            out["samplers"] = s  # a string of sampler chars ("kpt"): the core maps them
        elif isinstance(s, list) and all(isinstance(x, str) for x in s):
            out["samplers"] = list(s)
        else:
            raise invalid("Field 'samplers': must be an array of sampler names or a string of sampler chars")
    if "dry_sequence_breakers" in body and body["dry_sequence_breakers"] is not None:
        s = body["dry_sequence_breakers"]
        if not isinstance(s, list) or not s or not all(isinstance(x, str) for x in s):
            raise invalid("Error: dry_sequence_breakers must be a non-empty array of strings")
        out["dry_sequence_breakers"] = list(s)
    out["speculative"] = spec_request.parse(body, p)
    return out


def _parse_logit_bias(lb, vocab):
    """-> list of (token_id, bias|None); text keys need vocab (a callable text -> ids)."""
    out = []

    def add(key, bias):
        if bias is False:
            bias = None  # -inf
        elif isinstance(bias, bool) or not isinstance(bias, (int, float)):
            return
        else:
            bias = float(bias)
        if isinstance(key, int) and not isinstance(key, bool):
            out.append((key, bias))
        elif isinstance(key, str):
            if key.lstrip("-").isdigit():
                out.append((int(key), bias))
            elif vocab is not None:
                for t in vocab(key):
                    out.append((t, bias))

    if isinstance(lb, dict):
        for k, v in lb.items():
            add(k, v)
    elif isinstance(lb, list):
        for el in lb:
            if isinstance(el, list) and len(el) == 2:
                add(el[0], el[1])
    else:
        raise invalid("Field 'logit_bias': logit_bias must be an array or object")
    return out


def core_params(req: dict) -> dict:
    """The sampling dict handed to ctx.seq_begin (llama-server names)."""
    keys = ("temperature", "top_k", "top_p", "min_p", "typical_p", "repeat_penalty", "repeat_last_n",
            "presence_penalty", "frequency_penalty", "seed", "n_probs", "ignore_eos", "min_keep",
            "dynatemp_range", "dynatemp_exponent", "top_n_sigma", "xtc_probability", "xtc_threshold",
            "mirostat", "mirostat_tau", "mirostat_eta", "dry_multiplier", "dry_base", "dry_allowed_length",
            "dry_penalty_last_n", "dry_sequence_breakers", "adaptive_target", "adaptive_decay", "samplers")
    d = {k: req[k] for k in keys if k in req}
    if req["seed"] == UINT32_MAX:
        d["seed"] = random.getrandbits(32)
    d["logit_bias"] = [(t, b if b is not None else float("-inf")) for t, b in req.get("logit_bias", [])]
    d.update(req.get("speculative", {}).get("given", {}))  # per-request speculative.* (sampling.spec_request)
    return d


def task_params_json(req: dict, only_metrics=True, spec_types="none", eog_ids=()) -> dict:
    """task_params::to_json, key order as llama-server."""
    d = {
        "seed": req["seed"], "temperature": req["temperature"], "dynatemp_range": req["dynatemp_range"],
        "dynatemp_exponent": req["dynatemp_exponent"], "top_k": req["top_k"], "top_p": req["top_p"],
        "min_p": req["min_p"], "top_n_sigma": req["top_n_sigma"], "xtc_probability": req["xtc_probability"],
        "xtc_threshold": req["xtc_threshold"], "typical_p": req["typical_p"], "repeat_last_n": req["repeat_last_n"],
        "repeat_penalty": req["repeat_penalty"], "presence_penalty": req["presence_penalty"],
        "frequency_penalty": req["frequency_penalty"], "dry_multiplier": req["dry_multiplier"],
        "dry_base": req["dry_base"], "dry_allowed_length": req["dry_allowed_length"],
        "dry_penalty_last_n": req["dry_penalty_last_n"], "mirostat": req["mirostat"],
        "mirostat_tau": req["mirostat_tau"], "mirostat_eta": req["mirostat_eta"],
        "adaptive_target": req["adaptive_target"], "adaptive_decay": req["adaptive_decay"],
        "max_tokens": req["n_predict"], "n_predict": req["n_predict"], "n_keep": req["n_keep"],
        "n_discard": req["n_discard"], "ignore_eos": req["ignore_eos"], "stream": req["stream"],
        "n_probs": req["n_probs"], "min_keep": req["min_keep"], "chat_format": "Content-only",
        "reasoning_format": "none", "reasoning_in_content": False, "generation_prompt": "",
        "samplers": req["samplers"], "speculative.types": spec_types,
        **(req["speculative"]["shown"] if "speculative" in req else {}),
        "timings_per_token": req["timings_per_token"], "post_sampling_probs": req["post_sampling_probs"],
        "backend_sampling": req["backend_sampling"], "lora": [],
    }
    if not only_metrics:
        items = list(d.items())
        lb = [{"bias": b, "token": t} for t, b in req.get("logit_bias", [])]
        if req["ignore_eos"]:
            lb += [{"bias": None, "token": t} for t in eog_ids]
        extra = {"dry_sequence_breakers": list(req.get("dry_sequence_breakers", DRY_BREAKERS)), "stop": req["stop"],
                 "logit_bias": lb,
                 "grammar": "", "grammar_lazy": False, "grammar_triggers": [], "preserved_tokens": []}
        d = dict(items[:-1])
        d.update(extra)
        d["lora"] = []
    return d


def gen_id(prefix="chatcmpl-") -> str:
    return prefix + "".join(random.choices(string.ascii_letters + string.digits, k=32))
