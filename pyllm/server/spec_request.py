"""Per-request speculative settings: llama-server's request fields `speculative.n_max`, `speculative.n_min`,
`speculative.p_min` and `speculative.type` (compiled out of llama-server today; pyllm honours them), validated
against what the server was started with, and shown truthfully in generation_settings / /slots / /props.

  speculative.n_max   0..the server's --spec-draft-n-max (that cap sized the recurrent state); 0 = no drafting.
                      Given, it fixes the length for the request even when the server's is `auto`.
  speculative.n_min   >= 0, clamped to n_max (as llama.cpp clamped it when the fields were live)
  speculative.p_min   0..1
  speculative.type    "none" turns drafting off for the request; the server's own type is accepted (no change);
                      any other type answers 400 (a request cannot start a drafter the server did not load, nor
                      pick one of several)
The n-gram fields (speculative.ngram_*) only steer drafters pyllm does not have: schemas.FIELD_TABLE refuses them.
"""
from __future__ import annotations

INT32_MAX = 2147483647
FIELDS = ("speculative.n_max", "speculative.n_min", "speculative.p_min", "speculative.type")


def _invalid(msg):
    from .schemas import invalid
    return invalid(msg)


def parse(body: dict, p) -> dict:
    """The request's speculative fields -> {"given": the fields to hand the core, "shown": the effective settings,
    llama-server names}. p: the server's Params. ApiError (400) naming a bad field."""
    from .schemas import _get_num, _jtype, _to_string
    on = p.speculative
    types = [] if p.spec_type == "none" else p.spec_type.split(",")
    # the longest draft: --spec-draft-n-max for the draft models; with an ngram drafter in the list the core knows
    # it (its sizes) and checks it itself (Context.seq_begin: a 400 naming the field all the same)
    models_only = all(t in ("draft-mtp", "draft-simple") for t in types)
    cap = (p.spec_draft_n_max if models_only else None) if on else 0
    given = {}
    for name, integer, lo, hi in (("speculative.n_max", True, 0, INT32_MAX), ("speculative.n_min", True, 0, INT32_MAX),
                                  ("speculative.p_min", False, 0.0, 1.0)):
        v = body.get(name)
        if v is None:
            continue
        v = _get_num(name, v, integer)
        if v < lo or v > hi:
            raise _invalid(f"Field '{name}': Value must be between {_to_string(lo, integer)} <= value <= "
                           f"{_to_string(hi, integer)}, but got {_to_string(v, integer)}")
        given[name] = v
    t = body.get("speculative.type")
    if t is not None:
        if not isinstance(t, str):
            raise _invalid(f"Field 'speculative.type': [json.exception.type_error.302] type must be string, but is "
                           f"{_jtype(t)}")
        if t != "none" and not (on and t == p.spec_type):
            why = ("pyllm cannot pick one of the server's drafters per request" if on and t in types else
                   "it is not available on this server")
            raise _invalid(f"Field 'speculative.type': '{t}': {why} (started with --spec-type {p.spec_types_str}); "
                           f"'none' turns drafting off for a request, '{p.spec_type}' keeps the server's")
        given["speculative.type"] = t
    n = given.get("speculative.n_max")
    if n is not None and cap is not None and n > cap:
        raise _invalid(f"Field 'speculative.n_max': speculative decoding is off on this server (--spec-type "
                       f"{p.spec_types_str}), only 0 is accepted" if not on else
                       f"Field 'speculative.n_max': Value must be between 0 <= value <= {cap} on this server (its "
                       f"--spec-draft-n-max sizes the recurrent state), but got {n}")
    off = not on or given.get("speculative.type") == "none" or n == 0
    n_max = 0 if off else (n if n is not None else p.spec_draft_n_max)
    shown = {"speculative.types": "none" if off and on else p.spec_types_str,
             "speculative.n_max": n_max,
             "speculative.n_min": min(n_max, int(given.get("speculative.n_min", p.spec_draft_n_min))),
             "speculative.p_min": float(given.get("speculative.p_min", p.spec_draft_p_min)),
             "speculative.n_max_auto": bool(not off and n is None and p.spec_draft_n_max_auto)}
    return {"given": given, "shown": shown}


def server_settings(p) -> dict:
    """The server's own speculative settings (/props), the same names."""
    return parse({}, p)["shown"]
