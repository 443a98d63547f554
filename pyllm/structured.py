"""Constrained decoding through llguidance (the engine llama.cpp can be built with): request
`grammar` (GBNF or Lark), `json_schema`, `response_format`, and the tool-call grammars, compiled
into llguidance grammars; a per-model tokenizer view; and a per-request matcher that gives the
allowed-token bitmask for the next token and follows the tokens actually generated.

Bitmask layout (llguidance's): int32 words, bit (id % 32) of word (id // 32) set = allowed; what
Sampler.sample(logits, allowed=mask) takes.
"""
from __future__ import annotations

import copy
import json

import numpy as np

try:
    import llguidance as llg
except ImportError:  # pragma: no cover - a dependency; kept importable for a clear error later
    llg = None

ATTR_CONTROL = 1 << 3
ATTR_USER_DEFINED = 1 << 4
_ANY = r"/(.|\n)*/"
# the whitespace between a think block and the constrained output, bounded as llama.cpp's `space` rule is
# (| " " | "\n"{1,2} [ \t]{0,20}): unbounded, a small model can emit blanks until max_tokens
THINK_SPACE = r"/( |\n\n?[ \t]{0,20})?/"


class GrammarError(ValueError):
    """Bad grammar / schema / response_format. `field` names the request field (HTTP 400)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"'{field}': {message}")
        self.field = field


def _need_llg():
    if llg is None:
        raise RuntimeError("structured output needs the llguidance package (pip install llguidance)")


def _validate(grammar: str, field: str) -> str:
    _need_llg()
    err = llg.LLMatcher.validate_grammar(grammar)
    if err:
        raise GrammarError(field, f"invalid grammar: {err.strip()}")
    return grammar


def _schema_grammar(schema, field: str) -> str:
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise GrammarError(field, f"not valid JSON: {e}") from None
    if isinstance(schema, bool):
        schema = {} if schema else {"not": {}}
    if not isinstance(schema, dict):
        raise GrammarError(field, "a JSON schema must be an object")
    if not schema:
        schema = {"type": "object"}  # llama-server: an empty schema means any object
    _need_llg()
    # whitespace between JSON tokens bounded to one optional space: unbounded whitespace lets a model
    # wander off in newlines until max_tokens (llama.cpp's json-schema-to-grammar bounds it too)
    schema = {**schema, "x-guidance": {"whitespace_pattern": r" ?", **schema.get("x-guidance", {})}}
    try:
        g = llg.LLMatcher.grammar_from_json_schema(json.dumps(schema))
    except ValueError as e:
        raise GrammarError(field, f"invalid JSON schema: {e}") from None
    return _validate(g, field)


def gbnf_grammar(text: str, field: str = "grammar") -> str:
    """GBNF (llama.cpp) or Lark text -> llguidance grammar (validated)."""
    if not isinstance(text, str) or not text.strip():
        raise GrammarError(field, "must be a non-empty string")
    _need_llg()
    try:
        g = llg.grammar_from("gbnf", text)
    except ValueError as e:
        raise GrammarError(field, str(e)) from None
    return _validate(g, field)


def request_grammar(body: dict) -> tuple[str | None, dict | None]:
    """The constraint a completion/chat request asks for: (llguidance grammar or None, the JSON
    schema when it is one). Follows llama-server: `grammar` and `json_schema` exclude each other,
    `response_format` {type: text | json_object [schema] | json_schema {json_schema: {schema,
    strict}}} sets the schema; any other type is an error."""
    grammar, schema = body.get("grammar"), body.get("json_schema")
    if grammar is not None and schema is not None:
        raise GrammarError("grammar", "Cannot use both json_schema and grammar")
    field = "json_schema"
    rf = body.get("response_format")
    if rf is not None:
        if not isinstance(rf, dict):
            raise GrammarError("response_format", "must be an object")
        t = rf.get("type", "text")
        if t == "json_object":
            if "schema" in rf or schema is None:
                schema, field = rf.get("schema") or {}, "response_format.schema"
        elif t == "json_schema":
            js = rf.get("json_schema")
            if not isinstance(js, dict):
                raise GrammarError("response_format.json_schema", "must be an object with a 'schema'")
            if "strict" in js and not isinstance(js["strict"], bool):
                raise GrammarError("response_format.json_schema.strict", "must be a boolean")
            schema, field = js.get("schema") or {}, "response_format.json_schema.schema"
        elif t != "text":
            raise GrammarError("response_format", 'type must be one of "text", "json_object" or "json_schema", '
                                                  f"but got: {t}")
    if schema is not None:
        g = _schema_grammar(schema, field)
        return g, (schema if isinstance(schema, dict) else None)
    if grammar is not None:
        return gbnf_grammar(grammar), None
    return None, None


def after_thinking(grammar: str, forced_open: bool, lit=json.dumps) -> str:
    """A grammar that first lets the model finish its open think block (the prompt ended with
    '<think>\\n'), then applies `grammar`: JSON output of a thinking model, as llama.cpp allows.
    `lit` spells the end tag (GuidanceTokenizer.lit: the special token when the vocab has one)."""
    if not forced_open:
        return grammar
    _need_llg()
    main = "%llguidance {}\nstart: think WS @inner\nthink[lazy]: TEXT " + lit("</think>") + "\nTEXT: " + _ANY + \
           "\nWS: " + THINK_SPACE + "\n"
    return json.dumps({"grammars": [{"name": "main", "lark_grammar": main}, {"name": "inner", **_as_obj(grammar)}]})


def _as_obj(grammar: str) -> dict:
    try:
        obj = json.loads(grammar)
    except ValueError:
        return {"lark_grammar": grammar}
    g = obj["grammars"]
    if len(g) != 1:
        raise GrammarError("grammar", "nested multi-part grammars are not supported here")
    return {k: v for k, v in g[0].items() if k != "name"}


class GuidanceTokenizer:
    """llguidance's view of a model vocabulary, built once per model (~0.1-1 s for big vocabs).
    Control tokens (and user-defined ones spelled <...>) are special: grammars name them as
    <[id]> and text rules never produce them, as llguidance's llama.cpp glue does."""

    def __init__(self, tokenizer, n_vocab: int | None = None):
        _need_llg()
        self.tok = tokenizer
        n = tokenizer.n_vocab
        self.n_vocab = n_vocab or n
        pieces, special = [], []
        for i in range(n):
            p = tokenizer.token_to_piece(i, True)
            a = tokenizer.token_attr(i)
            if a & ATTR_CONTROL or (a & ATTR_USER_DEFINED and p.startswith(b"<") and p.endswith(b">")):
                p = b"\xff" + p
                special.append(i)
            pieces.append(p)
        self.special = {pieces[i][1:].decode("utf-8", "replace"): i for i in special}

        class _Wrapped:  # holds the tokenizer itself, not self: no cycle through the Rust object
            eos_token_id = tokenizer.eos
            bos_token_id = tokenizer.bos if tokenizer.bos >= 0 else None
            tokens = pieces
            special_token_ids = special
            _tok = tokenizer

            def __call__(self, s):
                if isinstance(s, bytes):
                    s = s.decode("utf-8", "replace")
                return list(self._tok.tokenize(s, False, False))

        eos = sorted(set(tokenizer.eog_ids) | ({tokenizer.eos} if tokenizer.eos >= 0 else set()))
        self.ll = llg.LLTokenizer(llg.TokenizerWrapper(_Wrapped()), n_vocab=self.n_vocab, eos_token=eos)
        self.n_words = (self.n_vocab + 31) // 32

    def special_id(self, text: str):
        """Token id of a special token spelled `text` (e.g. '[TOOL_CALLS]'), or None."""
        return self.special.get(text)

    def lit(self, text: str) -> str:
        """A Lark literal for text: the special token when it is one, else the quoted string."""
        i = self.special_id(text)
        return f"<[{i}]>" if i is not None else json.dumps(text)


class GrammarMatcher:
    """One request's grammar state. compute_mask() -> int32 bitmask of the tokens allowed next;
    commit(token) after a token is chosen; is_accepting() (EOS allowed), is_stopped() (only EOS
    left). validate_draft(ids) -> how many leading draft tokens the grammar accepts; try_commit and
    rollback: TokenConstraint.draft_masks' lookahead."""

    def __init__(self, gtok: GuidanceTokenizer, grammar: str, field: str = "grammar"):
        _need_llg()
        self.gtok = gtok
        self.m = llg.LLMatcher(gtok.ll, grammar, log_level=0)
        if self.m.is_error():
            raise GrammarError(field, f"invalid grammar: {self.m.get_error()}")
        self._mask = np.zeros(gtok.n_words, dtype=np.int32)

    def compute_mask(self, out: np.ndarray | None = None) -> np.ndarray:
        dst = self._mask if out is None else out
        self.m.unsafe_compute_mask_ptr(dst.ctypes.data, dst.nbytes)  # drops the GIL
        self._check()
        return dst

    def allowed(self, token: int) -> bool:
        return bool((int(self._mask[token >> 5]) >> (token & 31)) & 1)

    def allowed_next(self, token: int) -> bool:
        """Whether the grammar accepts `token` now (without consuming it)."""
        return self.m.validate_tokens([int(token)]) == 1

    def commit(self, token: int) -> None:
        if not self.m.consume_token(int(token)):
            raise RuntimeError(f"grammar rejected token {token}: {self.m.get_error()}")

    def try_commit(self, token: int) -> bool:
        """Consume `token` if the grammar takes it (a draft's lookahead, undone with rollback)."""
        return bool(self.m.consume_token(int(token)))

    def validate_draft(self, tokens) -> int:
        return self.m.validate_tokens([int(t) for t in tokens])

    def rollback(self, n: int) -> None:
        if n and not self.m.rollback(n):
            raise RuntimeError(f"grammar rollback failed: {self.m.get_error()}")

    def is_accepting(self) -> bool:
        return self.m.is_accepting()

    def is_stopped(self) -> bool:
        return self.m.is_stopped()

    def forced_bytes(self) -> bytes:
        return self.m.compute_ff_bytes()

    def _check(self):
        if self.m.is_error():
            raise RuntimeError(f"grammar error: {self.m.get_error()}")


def mask_to_bool(mask: np.ndarray, n_vocab: int) -> np.ndarray:
    """int32 bitmask -> bool[n_vocab] (tests, debugging)."""
    bits = np.unpackbits(mask.view(np.uint8), bitorder="little")
    return bits[:n_vocab].astype(bool)


class TokenConstraint:
    """What one sequence's next token may be: the grammar's mask, or the reasoning budget's forced
    token (as a one-token mask) while it forces the end of the think block. The generation loop
    sets next_mask() on the core's sequence before each step and commit()s each token produced;
    draft_masks() checks a speculative draft against both (MTP and the other drafters)."""

    def __init__(self, n_vocab: int, matcher: GrammarMatcher | None = None, budget=None):
        self.matcher, self.budget = matcher, budget
        self.n_words = (n_vocab + 31) // 32
        self._one = np.zeros(self.n_words, dtype=np.int32)
        self._last = None  # what next_mask() returned last: the mask of the next token

    def next_mask(self) -> np.ndarray | None:
        """The mask for the next token, None when nothing constrains it any more."""
        self._last = self._mask(None, self._one)
        return self._last

    def _mask(self, out, one):
        forced = self.budget.forced() if self.budget is not None else None
        if forced is not None and (self.matcher is None or self.matcher.allowed_next(forced)):
            one = one if out is None else out
            one[:] = 0
            one.view(np.uint32)[forced >> 5] = 1 << (forced & 31)
            return one
        if self.matcher is not None:
            return self.matcher.compute_mask(out)
        if self.budget is not None and not self.budget.done:
            return np.full(self.n_words, -1, dtype=np.int32) if out is None else _fill(out)  # the budget may force later
        return None

    def draft_masks(self, draft) -> tuple[int, np.ndarray]:
        """(k, masks [k, n_words]): how many leading tokens of a draft the constraint accepts -- each
        must be allowed by the mask before it, starting from next_mask()'s -- and the mask after each
        kept token (what plain decoding would compute there). The state is put back afterwards."""
        rows = np.zeros((len(draft), self.n_words), dtype=np.int32)
        cur, k = self._last, 0
        if cur is None:
            return 0, rows[:0]
        saved = copy.deepcopy(self.budget) if self.budget is not None else None
        try:
            for t in draft:
                t = int(t)
                if not (int(cur[t >> 5]) >> (t & 31)) & 1:
                    break
                if self.matcher is not None and not self.matcher.try_commit(t):
                    break
                if self.budget is not None:
                    self.budget.accept(t)
                cur = self._mask(rows[k], None)
                if cur is None:  # unconstrained from here: every token allowed
                    cur = _fill(rows[k])
                k += 1
        finally:
            if self.matcher is not None:
                self.matcher.rollback(k)
            if saved is not None:  # in place: the budget may be shared
                self.budget.__dict__.update(saved.__dict__)
        return k, rows[:k]

    def commit(self, token: int) -> None:
        if self.budget is not None:
            self.budget.accept(token)
        if self.matcher is not None:
            self.matcher.commit(token)


def _fill(row: np.ndarray) -> np.ndarray:
    row[:] = -1
    return row
