"""Speculative decoding under a grammar: drafts of a constrained sequence (json_schema, GBNF, the reasoning
budget's forced tokens) are cut at the first token the constraint refuses, each verification row is sampled
under its own mask, and the output equals plain decoding token for token (greedy and seeded), with drafts
actually accepted. Also the draft check's contract at the core (bad answers and errors are clean errors)."""
import gc
import json
import weakref

import numpy as np
import pytest

jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("llguidance")

from conftest import SHARED_MODELS  # noqa: E402

from pyllm.generation import Generator, Request  # noqa: E402
from pyllm.model import Model  # noqa: E402
from pyllm.reasoning import ReasoningBudget  # noqa: E402
from pyllm.structured import GrammarMatcher, TokenConstraint, request_grammar  # noqa: E402

QWEN = SHARED_MODELS / "qwen35-tiny-mtp-Q8_0.gguf"
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "kind": {"enum": ["module", "class", "function"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3}},
    "required": ["name", "age", "kind", "tags"], "additionalProperties": False}
GBNF = r'''root ::= "def " name "(" args "):\n    return " name "\n"
name ::= [a-z_] [a-z_0-9]{0,11}
args ::= name ( ", " name ){0,2}'''
PROMPT = 'def parse(data):\n    """Return the record as JSON."""\n    return '
SAMPLINGS = [{"temperature": 0}, {"temperature": 0.8, "seed": 7}]


@pytest.fixture(scope="module")
def model():
    return Model(str(QWEN), load_mtp=True)


def constraint(model, body):
    g, _ = request_grammar(body)
    return TokenConstraint(model.n_vocab, GrammarMatcher(model.guidance(), g))


def generate(model, con, sampling, spec="none", n_max=3, prompt=PROMPT, n_predict=80, accept="match"):
    gen = Generator(model, n_ctx=512, spec_type=spec, n_max=n_max, accept=accept)
    req = Request(prompt=model.tokenize(prompt), sampling=dict(sampling), n_predict=n_predict, constraint=con)
    fin = [ev.data for ev in gen.run(req) if ev.kind == "done"][0]
    return fin["tokens"], fin["text"], fin["stats"]


def grammar_accepts(model, body, tokens) -> bool:
    """Whether a fresh matcher takes every token and is then complete (EOS allowed)."""
    g, _ = request_grammar(body)
    m = GrammarMatcher(model.guidance(), g)
    body_toks = [t for t in tokens if t not in model.eog_ids]
    if m.validate_draft(body_toks) != len(body_toks):
        return False
    for t in body_toks:
        m.commit(t)
    return m.is_accepting()


@pytest.mark.parametrize("sampling", SAMPLINGS, ids=["greedy", "seeded"])
@pytest.mark.parametrize("kind", ["json_schema", "gbnf"])
def test_mtp_under_grammar_equals_plain(model, kind, sampling):
    body = {"json_schema": SCHEMA} if kind == "json_schema" else {"grammar": GBNF}
    plain, text, st = generate(model, constraint(model, body), sampling)
    assert st.get("n_draft", 0) == 0
    if kind == "json_schema":
        jsonschema.validate(json.loads(text), SCHEMA)
    assert grammar_accepts(model, body, plain)
    accepted = 0
    for n_max in (1, 2, 3):
        toks, out, st = generate(model, constraint(model, body), sampling, "draft-mtp", n_max)
        assert toks == plain and out == text, (n_max, out, text)
        assert st["n_draft"] <= n_max * st["n_verif_steps"]
        accepted += st["n_draft_accepted"]
    assert accepted > 0  # drafts were made under the grammar and some survived


def test_rejection_mode_keeps_the_match_rule_under_a_grammar(model):
    """--spec-accept rejection applies to unconstrained sequences; a constrained one is sampled under its masks
    with the match rule, so its seeded output is the plain one."""
    body = {"json_schema": SCHEMA}
    plain, text, _ = generate(model, constraint(model, body), SAMPLINGS[1])
    toks, out, st = generate(model, constraint(model, body), SAMPLINGS[1], "draft-mtp", 3, accept="rejection")
    assert toks == plain and st["n_draft"] > 0
    jsonschema.validate(json.loads(out), SCHEMA)


def test_ngram_drafts_under_grammar_equal_plain(model):
    """The other drafters share the path: ngram drafts of a repetitive constrained output."""
    body = {"json_schema": {"type": "array", "items": {"enum": ["alpha", "beta"]}, "minItems": 12, "maxItems": 12}}
    plain, text, _ = generate(model, constraint(model, body), {"temperature": 0}, n_predict=120)
    assert len(json.loads(text)) == 12
    for spec in ("ngram-map-k", "ngram-mod,draft-mtp"):
        toks, _, st = generate(model, constraint(model, body), {"temperature": 0}, spec, 3, n_predict=120)
        assert toks == plain and st["drafters"][0]["n_draft_accepted"] > 0, spec


def test_budget_forced_tokens_under_mtp(model):
    """The reasoning budget alone (no grammar) constrains too: its forced end of the think block under MTP."""
    tok = lambda s: model.tokenize(s, False, True)
    def con():
        return TokenConstraint(model.n_vocab, None, ReasoningBudget(6, tok, True, message="enough"))
    for sampling in SAMPLINGS:
        plain, text, _ = generate(model, con(), sampling, n_predict=40)
        assert "enough\n</think>" in model.detokenize(plain).decode()
        for n_max in (1, 3):
            assert generate(model, con(), sampling, "draft-mtp", n_max, n_predict=40)[0] == plain


def test_draft_masks_cut_and_restore(model):
    """TokenConstraint.draft_masks: the rows are the masks plain decoding computes after each kept token, the
    draft is cut at the first refused token, and the constraint's state is as before."""
    body = {"json_schema": SCHEMA}
    con = constraint(model, body)
    good = model.tokenize('{"name": "ab", "age": 3', False)
    row0 = con.next_mask().copy()
    k, rows = con.draft_masks(good + model.tokenize("}", False))  # "}" before the required keys: refused
    assert k == len(good) and rows.shape == (k, con.n_words)
    assert np.array_equal(con.next_mask(), row0)  # state put back
    ref = constraint(model, body)
    ref.next_mask()
    for i, t in enumerate(good):
        ref.commit(t)
        assert np.array_equal(ref.next_mask(), rows[i]), i
    assert con.draft_masks(model.tokenize("]", False)) [0] == 0


def test_draft_masks_restore_budget(model):
    tok = lambda s: model.tokenize(s, False, True)
    budget = ReasoningBudget(2, tok, True)
    con = TokenConstraint(model.n_vocab, None, budget)
    con.next_mask()
    before = dict(budget.__dict__)
    k, rows = con.draft_masks(model.tokenize("a b c d", False))
    assert k == 2 and budget.__dict__ == before  # two free tokens, then the forced end refuses the third
    assert bin(int(rows[1].view(np.uint32).sum())).count("1") == 1  # one token allowed: the forced one


def test_generator_with_draft_check_is_collected(model):
    gen = Generator(model, n_ctx=64, spec_type="draft-mtp", n_max=2)
    ref = weakref.ref(gen)
    del gen
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("check,msg", [
    (lambda seq, d: (len(d) + 1, None), "draft check"),
    (lambda seq, d: "nope", "draft check: must return"),
    (lambda seq, d: 1 / 0, "ZeroDivisionError"),
    (lambda seq, d: (1, np.zeros(3, dtype=np.int32)), "mask words"),
])
def test_bad_draft_check_is_a_clean_error(model, check, msg):
    gen = Generator(model, n_ctx=128, spec_type="draft-mtp", n_max=2)
    gen.ctx.set_draft_check(check)
    req = Request(prompt=model.tokenize(PROMPT), sampling={"temperature": 0}, n_predict=8,
                  constraint=TokenConstraint(model.n_vocab, None, ReasoningBudget(100, lambda s: [1], True)))
    with pytest.raises(RuntimeError, match=msg):
        list(gen.run(req))
    gen.ctx.set_draft_check(None)  # no check: constrained sequences are simply not drafted
    plain = generate(model, constraint(model, {"grammar": GBNF}), {"temperature": 0})[0]
    req = Request(prompt=model.tokenize(PROMPT), sampling={"temperature": 0}, n_predict=80,
                  constraint=constraint(model, {"grammar": GBNF}))
    fin = list(gen.run(req))[-1].data
    assert fin["tokens"] == plain and fin["stats"]["n_draft"] == 0
