"""Lark grammars (llguidance) that make the model's tool calls valid, per format.

tool_choice "auto" -> lazy: free text until the trigger (<tool_call>, [TOOL_CALLS], ...), then the
call is constrained (llama.cpp's lazy grammar). "required"/named -> constrained from the first
token: only calls (after the think block when the prompt opened one). parallel_tool_calls=false
allows one call. Argument values follow the tool's JSON schema (%json); Qwen XML string
parameters are free text up to the closing tag.
"""
from __future__ import annotations

import json
import re

from ..structured import THINK_SPACE
from .choice import ToolPlan
from .formats import ToolFormat, call_schema, generic_schema

_ANY = r"/(.|\n)*/"
# compact JSON in the layout the templates show ({"a": 1, "b": 2})
_COMPACT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def _json(schema: dict) -> str:
    s = dict(schema)
    s["x-guidance"] = {**_COMPACT, **s.get("x-guidance", {})}
    return "%json " + json.dumps(s, ensure_ascii=False)


def _rule_name(s: str) -> str:
    return re.sub(r"[^a-z0-9_]", "_", s.lower())


def _params(fn: dict) -> tuple[list, list]:
    p = fn.get("parameters") or {}
    props = p.get("properties") or {}
    req = [k for k in p.get("required", []) if k in props]
    opt = [k for k in props if k not in req]
    return [(k, props[k]) for k in req], [(k, props[k]) for k in opt]


def _xml_string(schema: dict):
    """Raw-text value (Qwen XML writes strings unquoted) for a string schema: a Lark expression,
    "" for free text (a lazy lexeme up to the closing tag), None when the schema is not a string."""
    vals = schema.get("enum", [schema["const"]] if "const" in schema else None)
    if vals is not None:
        return "(" + " | ".join(json.dumps(v, ensure_ascii=False) for v in vals) + ")" \
            if vals and all(isinstance(v, str) for v in vals) else None
    if schema.get("type") != "string":
        return None
    no_close = r"~/(.|\n)*\n<\/parameter>(.|\n)*/"
    if "pattern" in schema:
        pat = schema["pattern"].removeprefix("^").removesuffix("$").replace("/", "\\/")
        return f"/{pat}/"
    if "minLength" in schema or "maxLength" in schema:
        lo, hi = int(schema.get("minLength", 0)), schema.get("maxLength")
        rep = f"{{{lo},{int(hi)}}}" if hi is not None else f"{{{lo},}}"
        return f"/(.|\n){rep}/ & {no_close}"
    return ""


def _qwen_xml(plan: ToolPlan, lines: list) -> str:
    """Body after '<tool_call>': \\n<function=NAME>\\n(<parameter=P>\\nV\\n</parameter>\\n)*</function>\\n</tool_call>"""
    alts = []
    for ti, t in enumerate(plan.allowed):
        fn = t["function"]
        base = f"t{ti}_{_rule_name(fn['name'])}"
        req, opt = _params(fn)
        parts = []
        for pi, (pname, ps) in enumerate(req + opt):
            r = f"{base}_p{pi}"
            head = json.dumps(f"<parameter={pname}>\n")
            xs = _xml_string(ps)
            if xs is not None:  # one lazy lexeme: the value ends at the first closing tag
                lexeme = "TEXT" if xs == "" else f"{r.upper()}_S"
                lines.append(f"{r}: {head} {r}_v")
                lines.append(f"{r}_v[lazy]: {lexeme} \"\\n</parameter>\\n\"")
                if xs:
                    lines.append(f"{lexeme}: {xs}")
            else:
                lines.append(f"{r}: {head} {_json(ps)} \"\\n</parameter>\\n\"")
            parts.append(r if pi < len(req) else f"{r}?")
        head = json.dumps(f"\n<function={fn['name']}>\n")
        lines.append(f"{base}: {head} {' '.join(parts)} \"</function>\\n</tool_call>\"")
        alts.append(base)
    lines.append("call_body: " + " | ".join(alts))
    return '"<tool_call>"'


def _hermes(plan: ToolPlan, lines: list) -> str:
    lines.append(f"call_body: \"\\n\" {_json(call_schema(plan.allowed))} \"\\n</tool_call>\"")
    return '"<tool_call>"'


def tool_call_grammar(fmt: ToolFormat, plan: ToolPlan, lit=json.dumps, thinking_open: bool = False) -> str | None:
    """The Lark grammar for a plan (None when nothing is constrained). `lit(text)` spells a
    marker: GuidanceTokenizer.lit gives <[id]> for markers that are special tokens of the vocab.
    `thinking_open`: the prompt opened a think block, which the model closes first."""
    if not plan.constrain:
        return None
    lines = ["%llguidance {}"]
    think = "think WS " if thinking_open else ""
    many = plan.parallel
    if fmt.name == "generic":
        lines.insert(1, f"start: {think}{_json(generic_schema(plan.allowed, plan.parallel))}")
    elif fmt.name in ("qwen3-xml", "hermes"):
        trig = (_qwen_xml if fmt.name == "qwen3-xml" else _hermes)(plan, lines)
        trig = lit("<tool_call>") if lit("<tool_call>") != json.dumps("<tool_call>") else trig
        sep = '"\\n"' if fmt.name == "qwen3-xml" else '"\\n"'
        more = f" ({sep} {trig} call_body)*" if many else ""
        if plan.lazy and trig.startswith('"'):
            lines.insert(1, f"start: NOCALL | call_trig call_body{more}")
            lines.append(f"call_trig[lazy]: TEXT {trig}")
            lines.append(f"NOCALL: {_ANY} & ~/(.|\\n)*{re.escape(json.loads(trig))}(.|\\n)*/")
        elif plan.lazy:  # the trigger is a special token: text cannot contain it
            lines.insert(1, f"start: TEXT | TEXT {trig} call_body{more}")
        else:
            lines.insert(1, f"start: {think}{trig} call_body{more}")
    elif fmt.name == "llama3":
        call = _json(call_schema(plan.allowed, "parameters"))
        more = f' ("; " {call})*' if many else ""
        if plan.lazy:
            lines.insert(1, f"start: NOJSON | {call}{more}")
            lines.append(f"NOJSON: {_ANY} & ~/[ \\t\\n]*\\{{(.|\\n)*/")
        else:
            lines.insert(1, f"start: {think}{call}{more}")
    elif fmt.name == "mistral":
        arr = {"type": "array", "items": call_schema(plan.allowed, with_id=True), "minItems": 1}
        if not many:
            arr["maxItems"] = 1
        trig = lit("[TOOL_CALLS]")
        pre = "TEXT " if plan.lazy else think
        lines.insert(1, f"start: {'TEXT | ' if plan.lazy else ''}{pre}{trig} {_json(arr)}")
    elif fmt.name == "mistral-args":
        trig, args = lit("[TOOL_CALLS]"), lit("[ARGS]")
        alts = [f"{json.dumps(t['function']['name'])} {args} "
                f"{_json(t['function'].get('parameters') or {'type': 'object'})}" for t in plan.allowed]
        lines.append("call_body: " + " | ".join(alts))
        more = f" ({trig} call_body)*" if many else ""
        pre = "TEXT " if plan.lazy else think
        lines.insert(1, f"start: {'TEXT | ' if plan.lazy else ''}{pre}{trig} call_body{more}")
    else:
        raise ValueError(f"no tool-call grammar for format {fmt.name}")
    lines.append("TEXT: " + _ANY)
    lines.append("WS: " + THINK_SPACE)
    if thinking_open:
        lines.append(f'think[lazy]: TEXT {lit("</think>")}')
    return "\n".join(lines) + "\n"
