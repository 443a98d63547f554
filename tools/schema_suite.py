#!/usr/bin/env python3
"""Structured output over many generated JSON schemas and GBNF grammars: every output must validate (the
`jsonschema` package; each GBNF grammar has an equivalent Python regex the output must fully match), and with
speculative decoding the output must equal plain decoding token for token.

    python tools/schema_suite.py                        # the 50 schemas + 10 grammars on SmolLM2 and qwen35-tiny
    python tools/schema_suite.py -m MODEL.gguf --spec draft-mtp -n 20

schemas(n, seed) is deterministic and varied: objects (nested up to depth 2), arrays with item bounds, enums,
consts, integers and numbers with bounds, booleans, nulls, required / optional properties, strings with
length bounds and patterns, anyOf. Everything is small enough for a short output to complete: numbers are bounded and
multiples of a step (llguidance, unlike llama.cpp's json-schema-to-grammar, caps no digit count, and small
models otherwise repeat digits until max_tokens). The test suite
runs a slice of it (tests/test_schema_suite.py); this tool runs it whole.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

WORDS = ["id", "name", "kind", "size", "tags", "city", "ok", "score", "owner", "items", "level", "code", "note",
         "count", "mode", "path", "unit", "user", "flag", "rank"]
PATTERNS = ["^[a-z]{2,5}$", "^[A-Z][0-9]{2}$", "^(yes|no)$", "^[0-9]{3}-[0-9]{2}$", "^[a-f0-9]{4}$"]

# (GBNF grammar, the regex every output must fully match)
GRAMMARS = [
    ('root ::= "yes" | "no"', r"yes|no"),
    ('root ::= [0-9]{1,3} "." [0-9]{2}', r"[0-9]{1,3}\.[0-9]{2}"),
    ('root ::= "def " [a-z_]{1,10} "(" [a-z]{0,6} "):"', r"def [a-z_]{1,10}\([a-z]{0,6}\):"),
    ('root ::= item (", " item){0,3}\nitem ::= "red" | "green" | "blue"', r"(red|green|blue)(, (red|green|blue)){0,3}"),
    ('root ::= "[" [0-9] ("," [0-9]){0,4} "]"', r"\[[0-9](,[0-9]){0,4}\]"),
    ('root ::= [A-Z] [a-z]{1,8} " " [A-Z] [a-z]{1,8}', r"[A-Z][a-z]{1,8} [A-Z][a-z]{1,8}"),
    ('root ::= "x = " num "\\n"\nnum ::= "-"? [1-9] [0-9]{0,3}', r"x = -?[1-9][0-9]{0,3}\n"),
    ('root ::= "<" tag ">" [a-z ]{0,12} "</" tag ">"\ntag ::= "b" | "i"', r"<(b|i)>[a-z ]{0,12}</(b|i)>"),
    ('root ::= ("ab" | "cd"){2,5}', r"(ab|cd){2,5}"),
    ('root ::= [a-z]{3} "@" [a-z]{2,6} ".com"', r"[a-z]{3}@[a-z]{2,6}\.com"),
]


def _leaf(r: random.Random) -> dict:
    k = r.randrange(11)
    if k == 0:
        s = {"type": "string", "maxLength": r.randint(1, 8)}
        if r.random() < 0.5:
            s["minLength"] = r.randint(0, s["maxLength"])
        return s
    if k == 1:
        return {"type": "string", "pattern": r.choice(PATTERNS)} if r.random() < 0.8 else {"type": "string", "format": "date"}
    if k == 2:
        lo = r.randint(-50, 50)
        return {"type": "integer", "minimum": lo, "maximum": lo + r.randint(0, 200)}
    if k == 3:
        return {"type": "integer", "exclusiveMinimum": 0, "maximum": r.choice([9, 99, 999])} if r.random() < 0.5 \
            else {"type": "integer", "multipleOf": r.choice([2, 5, 10]), "minimum": 0, "maximum": 100}
    if k == 4:
        return {"type": "number", "minimum": 0, "maximum": r.choice([1, 10, 100]), "multipleOf": r.choice([0.5, 0.25])}
    if k == 5:
        return {"type": "boolean"}
    if k == 6:
        return {"enum": r.sample(["a", "b", "low", "high", "on", "off", 1, 2, None, True], r.randint(2, 4))}
    if k == 7:
        return {"const": r.choice(["v1", 42, False])}
    if k == 8:
        return {"type": "null"}
    if k == 9:
        return {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "string", "maxLength": 4}]}
    return {"type": ["string", "null"], "maxLength": 5}


def _array(r: random.Random, depth: int) -> dict:
    lo = r.randint(0, 2)
    return {"type": "array", "items": _value(r, depth + 1), "minItems": lo, "maxItems": lo + r.randint(0, 2)}


def _object(r: random.Random, depth: int) -> dict:
    names = r.sample(WORDS, r.randint(1, 4 if depth == 0 else 2))
    props = {n: _value(r, depth + 1) for n in names}
    req = [n for n in names if r.random() < 0.7]
    s = {"type": "object", "properties": props, "additionalProperties": False}
    if req:
        s["required"] = req
    return s


def _value(r: random.Random, depth: int) -> dict:
    if depth >= 2:
        return _leaf(r)
    x = r.random()
    return _object(r, depth) if x < 0.25 else _array(r, depth) if x < 0.45 else _leaf(r)


def schemas(n: int = 50, seed: int = 0) -> list:
    """n varied JSON schemas: objects at the top (a few arrays / leaves), nested up to depth 2."""
    r = random.Random(seed)
    out, seen = [], set()
    while len(out) < n:
        i = len(out)
        s = _object(r, 0) if i % 5 else _array(r, 0) if i % 10 else _leaf(r)
        if json.dumps(s) not in seen:  # all different
            seen.add(json.dumps(s))
            out.append(s)
    return out


def check_output(text: str, schema=None, regex=None):
    """None if `text` is a valid output, else why not."""
    if schema is not None:
        import jsonschema
        try:
            jsonschema.validate(json.loads(text), schema)
        except (ValueError, jsonschema.ValidationError) as e:
            return f"{type(e).__name__}: {str(e).splitlines()[0]}"
        return None
    return None if re.fullmatch(regex, text) else f"does not match /{regex}/"


def run_one(llm, schema=None, grammar=None, max_tokens=160, seed=None, temperature=0.0):
    """One constrained chat completion: (content, finish_reason, completion tokens)."""
    kw = {"response_format": {"type": "json_schema", "json_schema": {"schema": schema}}} if schema is not None \
        else {"grammar": grammar}
    r = llm.create_chat_completion([{"role": "user", "content": "Answer in the requested format."}],
                                   max_tokens=max_tokens, temperature=temperature, seed=seed, **kw)
    c = r["choices"][0]
    return c["message"]["content"] or "", c["finish_reason"], r["usage"]["completion_tokens"]


def main(argv=None) -> int:
    from pyllm import Llama
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from conftest import SHARED_MODELS, smollm2_path
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", help="GGUF file (repeatable; default SmolLM2 and qwen35-tiny)")
    ap.add_argument("--spec", default="", help="spec type compared with plain (default: draft-mtp where the file has MTP)")
    ap.add_argument("-n", type=int, default=50, help="schemas (default 50)")
    ap.add_argument("--max-tokens", type=int, default=160)
    args = ap.parse_args(argv)
    models = args.model or [str(smollm2_path()), str(SHARED_MODELS / "qwen35-tiny-mtp-Q8_0.gguf")]
    cases = [("schema", s, None, None) for s in schemas(args.n)] + [("gbnf", None, g, rx) for g, rx in GRAMMARS]
    bad = 0
    for path in models:
        plain = Llama(path, n_ctx=1024, verbose=False)
        spec = args.spec or ("draft-mtp" if "mtp" in os.path.basename(path) else "ngram-mod")
        fast = Llama(path, n_ctx=1024, verbose=False, spec_type=spec, spec_draft_n_max=3)
        t0, n_tok, n_ok, n_same = time.perf_counter(), 0, 0, 0
        for i, (kind, schema, grammar, rx) in enumerate(cases):
            text, fin, nt = run_one(plain, schema, grammar, args.max_tokens)
            why = check_output(text, schema, rx) if fin == "stop" else f"finish_reason {fin}"
            text2 = run_one(fast, schema, grammar, args.max_tokens)[0]
            n_tok += nt
            n_ok += why is None
            n_same += text2 == text
            if why is not None or text2 != text:
                bad += 1
                print(f"  {kind} {i}: {why or ''} {'' if text2 == text else '(' + spec + ' differs)'}\n"
                      f"    {json.dumps(schema) if schema else grammar}\n    -> {text!r}")
        dt = time.perf_counter() - t0
        print(f"{os.path.basename(path)}: {n_ok}/{len(cases)} valid, {n_same}/{len(cases)} identical under {spec}, "
              f"{n_tok} tokens, {dt:.1f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
