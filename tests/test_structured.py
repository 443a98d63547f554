"""Structured output through llguidance: request grammars and their errors, the tokenizer view,
tool-call grammars, the Sampler's allowed-mask hook, and constrained decoding with real models
(a Python decode loop over Context.eval: the engine hook comes with the server wiring)."""
import json
from pathlib import Path

import numpy as np
import pytest

jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("llguidance")

from pyllm import _core  # noqa: E402
from pyllm.sampling import sampler_params  # noqa: E402
from pyllm.chat import prepare_messages, render_chat, template_caps  # noqa: E402
from pyllm.reasoning import split_reasoning, thinking_open_at_end  # noqa: E402
from pyllm.structured import (GrammarError, GrammarMatcher, GuidanceTokenizer, TokenConstraint,  # noqa: E402
                              after_thinking, gbnf_grammar, mask_to_bool, request_grammar)
from pyllm.toolcalls import ToolCallParser, detect_format, get_format, parse_tool_calls, plan_tools  # noqa: E402
from pyllm.toolcalls.grammar import tool_call_grammar  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
QWEN = ROOT / "models" / "qwen35-tiny-mtp-Q8_0.gguf"
QWEN35_TEMPLATE = (Path(__file__).parent / "data" / "templates" / "qwen3.5.jinja").read_text()
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                     "days": {"type": "integer", "minimum": 1, "maximum": 7},
                                     "unit": {"enum": ["c", "f"]}, "code": {"type": "string", "pattern": "^[A-Z]{2}$"}},
    "required": ["city", "days"]}}}
NOW = {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, NOW]


@pytest.fixture(scope="module")
def qwen():
    return _core.Model(str(QWEN))


@pytest.fixture(scope="module")
def gtok(qwen):
    return GuidanceTokenizer(qwen.tokenizer)


def accepts(gtok, tok, grammar, text):
    m = GrammarMatcher(gtok, grammar)
    ids = list(tok.tokenize(text, False, False))
    return m.validate_draft(ids) == len(ids)


# ---- request fields -> grammars, and their errors ---------------------------------------------
@pytest.mark.parametrize("body,field", [
    ({"grammar": 'root ::= ( "a" '}, "grammar"),
    ({"grammar": "start: foo"}, "grammar"),
    ({"grammar": ""}, "grammar"),
    ({"json_schema": {"type": "bogus"}}, "json_schema"),
    ({"json_schema": "{not json"}, "json_schema"),
    ({"json_schema": [1]}, "json_schema"),
    ({"grammar": 'root ::= "a"', "json_schema": {}}, "grammar"),
    ({"response_format": {"type": "bogus"}}, "response_format"),
    ({"response_format": "json"}, "response_format"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": 5}}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}, "strict": "yes"}}},
     "response_format.json_schema.strict"),
])
def test_request_grammar_errors_name_the_field(body, field):
    with pytest.raises(GrammarError) as e:
        request_grammar(body)
    assert e.value.field == field and f"'{field}'" in str(e.value)


def test_request_grammar_kinds(gtok, qwen):
    tok = qwen.tokenizer
    assert request_grammar({}) == (None, None)
    assert request_grammar({"response_format": {"type": "text"}}) == (None, None)
    g, _ = request_grammar({"grammar": 'root ::= "yes" | "no"'})
    assert accepts(gtok, tok, g, "yes") and not accepts(gtok, tok, g, "maybe")
    for body in ({"json_schema": {}}, {"response_format": {"type": "json_object"}}):
        g, _ = request_grammar(body)
        assert accepts(gtok, tok, g, '{"x": [1, "a"]}') and not accepts(gtok, tok, g, "[1]")
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    g, s = request_grammar({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema,
                                                                                       "strict": True}}})
    assert s == schema and accepts(gtok, tok, g, '{"n": 3}') and not accepts(gtok, tok, g, '{"n": "3"}')
    g, _ = request_grammar({"response_format": {"type": "json_object", "schema": schema}})
    assert not accepts(gtok, tok, g, '{"m": 3}')
    assert accepts(gtok, tok, gbnf_grammar('start: "a"+'), "aaa")  # Lark is accepted as well


def test_after_thinking(gtok, qwen):
    g, _ = request_grammar({"json_schema": {"type": "object", "properties": {"a": {"type": "integer"}},
                                            "required": ["a"]}})
    g2 = after_thinking(g, True)
    assert accepts(gtok, qwen.tokenizer, g2, 'hmm, an object\n</think>\n{"a": 5}')
    assert not accepts(gtok, qwen.tokenizer, g2, 'hmm\n</think>\nnot json')
    assert after_thinking(g, False) == g


# ---- the tokenizer view and the matcher --------------------------------------------------------
def test_guidance_tokenizer_specials_and_masks(gtok, qwen):
    tok = qwen.tokenizer
    assert gtok.n_vocab == qwen.n_vocab and gtok.n_words == (qwen.n_vocab + 31) // 32
    assert gtok.special_id("<|im_end|>") == tok.text_to_token("<|im_end|>")
    assert gtok.lit("<|im_end|>") == f"<[{tok.eos}]>" and gtok.lit("<tool_call>") == '"<tool_call>"'
    m = GrammarMatcher(gtok, gbnf_grammar('root ::= "yes"'))
    allowed = mask_to_bool(m.compute_mask(), gtok.n_vocab)
    assert 0 < allowed.sum() < 20 and not allowed[tok.eos]  # only ways to start "yes"
    for t in tok.tokenize("yes", False, False):
        assert m.allowed(t)
        m.commit(t)
        m.compute_mask()
    assert m.is_accepting() and m.is_stopped() and m.allowed(tok.eos)  # now only EOS
    with pytest.raises(RuntimeError, match="rejected"):
        m.commit(tok.tokenize("x", False, False)[0])


def test_draft_masks_and_validation(gtok, qwen):
    tok = qwen.tokenizer
    m = GrammarMatcher(gtok, gbnf_grammar('root ::= "hello world"'))
    good = list(tok.tokenize("hello world", False, False))
    bad = good[:1] + list(tok.tokenize(" nope", False, False))
    assert m.validate_draft(good) == len(good) and m.validate_draft(bad) == 1
    con = TokenConstraint(qwen.n_vocab, m)
    assert mask_to_bool(con.next_mask(), gtok.n_vocab)[good[0]]
    k, masks = con.draft_masks(bad)  # the drafts' lookahead (tests/test_structured_spec.py: under MTP)
    assert k == 1 and masks.shape == (1, gtok.n_words)
    assert mask_to_bool(masks[0], gtok.n_vocab)[good[1]] and not mask_to_bool(masks[0], gtok.n_vocab)[bad[1]]
    assert m.validate_draft(good) == len(good)  # state unchanged by the lookahead


QCALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
         "</parameter>\n</function>\n</tool_call>")


@pytest.mark.parametrize("fmt,choice,parallel,text,ok", [
    ("qwen3-xml", "auto", True, "Sure. " + QCALL, True),
    ("qwen3-xml", "auto", True, "no call at all", True),
    ("qwen3-xml", "auto", True, "Sure. <tool_call>\ngarbage", False),
    ("qwen3-xml", "auto", False, QCALL + "\n" + QCALL, False),
    ("qwen3-xml", "auto", True, QCALL + "\n" + QCALL, True),
    ("qwen3-xml", "required", True, QCALL, True),
    ("qwen3-xml", "required", True, "text first " + QCALL, False),
    ("qwen3-xml", "required", True, QCALL.replace("3", "x"), False),        # days must be an integer
    ("qwen3-xml", "required", True, QCALL.replace("3", "9"), False),        # ... <= 7
    ("qwen3-xml", "required", True, QCALL.replace("Paris", "P" * 25), False),  # maxLength 24
    ("qwen3-xml", "required", True, QCALL.replace("</parameter>\n</function>",
                                                  "</parameter>\n<parameter=unit>\nf\n</parameter>\n</function>"), True),
    ("qwen3-xml", "required", True, QCALL.replace("</parameter>\n</function>",
                                                  "</parameter>\n<parameter=unit>\nk\n</parameter>\n</function>"), False),
    ("qwen3-xml", "required", True, QCALL.replace("</parameter>\n</function>",
                                                  "</parameter>\n<parameter=code>\nFR\n</parameter>\n</function>"), True),
    ("qwen3-xml", "required", True, QCALL.replace("</parameter>\n</function>",
                                                  "</parameter>\n<parameter=code>\nfr\n</parameter>\n</function>"), False),
    ("qwen3-xml", {"type": "function", "function": {"name": "now"}}, True,
     "<tool_call>\n<function=now>\n</function>\n</tool_call>", True),
    ("qwen3-xml", {"type": "function", "function": {"name": "now"}}, True, QCALL, False),
    ("hermes", "required", True,
     '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>', True),
    ("hermes", "required", True, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "P"}}\n</tool_call>',
     False),
    ("llama3", "auto", True, '{"name": "now", "parameters": {}}', True),
    ("llama3", "auto", True, "Hi there", True),
    ("llama3", "auto", True, '{"name": "nope", "parameters": {}}', False),
    ("mistral", "required", True, '[TOOL_CALLS][{"name": "now", "arguments": {}, "id": "abc123def"}]', True),
    ("mistral-args", "auto", True, 'hi [TOOL_CALLS]now[ARGS]{}', True),
    ("generic", "auto", True, '{"response": "hi"}', True),
    ("generic", "auto", True, '{"tool_calls": [{"name": "now", "arguments": {}}]}', True),
    ("generic", "auto", True, 'plain', False),
])
def test_tool_call_grammars(gtok, qwen, fmt, choice, parallel, text, ok):
    plan = plan_tools(TOOLS, choice, parallel)
    g = tool_call_grammar(get_format(fmt), plan, gtok.lit)
    assert accepts(gtok, qwen.tokenizer, g, text) == ok
    if ok:
        _, calls = parse_tool_calls(text, get_format(fmt), TOOLS)
        for c in calls:
            json.loads(c["function"]["arguments"])


def test_tool_call_grammar_after_open_think(gtok, qwen):
    g = tool_call_grammar(get_format("qwen3-xml"), plan_tools(TOOLS, "required"), gtok.lit, thinking_open=True)
    assert accepts(gtok, qwen.tokenizer, g, "I need the weather.\n</think>\n\n" + QCALL)
    assert tool_call_grammar(get_format("qwen3-xml"), plan_tools(TOOLS, "none"), gtok.lit) is None


# ---- the Sampler hook --------------------------------------------------------------------------
def test_sampler_allowed_mask(qwen):
    n = qwen.n_vocab
    rng = np.random.default_rng(0)
    logits = rng.normal(size=n).astype(np.float32)
    mask = np.zeros((n + 31) // 32, dtype=np.int32)
    allowed = [5, 77, 4000]
    for t in allowed:
        mask[t >> 5] |= np.int32(1 << (t & 31)) if (t & 31) != 31 else np.int32(-2**31)
    for seed in range(20):
        s = _core.Sampler(sampler_params({"temperature": 1.5, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": seed}), n)
        assert s.sample(logits, allowed=mask) in allowed
    g = _core.Sampler(sampler_params({"temperature": 0.0}), n)
    assert g.sample(logits, allowed=mask) == max(allowed, key=lambda t: logits[t])  # greedy = masked argmax
    assert g.sample(logits) == int(np.argmax(logits))  # no mask: unchanged
    with pytest.raises(RuntimeError, match="excludes every token"):
        g.sample(logits, allowed=np.zeros_like(mask))
    with pytest.raises(ValueError, match="words"):
        g.sample(logits, allowed=mask[:-1])


# ---- constrained decoding with the real models -------------------------------------------------
def generate(model, prompt: str, grammar: str, n_max=120, seed=1, temp=0.8):
    """Plain decode loop with the grammar mask: the engine-free version of what the server will do."""
    tok = model.tokenizer
    gt = GuidanceTokenizer(tok)
    m = GrammarMatcher(gt, grammar)
    ctx = _core.Context(model, n_ctx=1024)
    s = _core.Sampler(sampler_params({"temperature": temp, "seed": seed}), model.n_vocab)
    ids = list(tok.tokenize(prompt, tok.add_bos, True))
    logits = ctx.eval(0, ids)[-1]
    out = []
    for _ in range(n_max):
        t = s.sample(np.ascontiguousarray(logits), allowed=m.compute_mask())
        s.accept(t)
        if model.is_eog(t):
            break
        m.commit(t)
        out.append(t)
        logits = ctx.eval(0, [t])[-1]
    return tok.detokenize(out, True), m


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_qwen35_template_constrained_tool_call_end_to_end(qwen, choice, seed):
    """The shipped qwen35 model, prompted through the real Qwen3.5 template with tools, must
    produce a parseable call that satisfies the schema, stream and non-stream alike."""
    caps = template_caps(QWEN35_TEMPLATE)
    fmt = detect_format(QWEN35_TEMPLATE)
    plan = plan_tools(TOOLS, choice, False)
    msgs = prepare_messages([{"role": "user", "content": "What is the weather in Paris for 3 days?"}], caps)
    prompt, gen = render_chat(QWEN35_TEMPLATE, msgs, tools=plan.tools, template_kwargs={"enable_thinking": False})
    assert not thinking_open_at_end(gen)
    g = tool_call_grammar(fmt, plan, GuidanceTokenizer(qwen.tokenizer).lit)
    text, m = generate(qwen, prompt, g, n_max=200, seed=seed)
    assert m.is_accepting(), text
    content, calls = parse_tool_calls(text, fmt, TOOLS)
    assert content == "" and len(calls) == 1, text
    tool = {t["function"]["name"]: t for t in plan.allowed}[calls[0]["function"]["name"]]
    jsonschema.validate(json.loads(calls[0]["function"]["arguments"]), tool["function"]["parameters"])
    p = ToolCallParser(fmt, TOOLS)
    ev = []
    for ch in text:
        ev += p.feed(ch)
    ev += p.finish()
    assert "".join(e[4] for e in ev if e[0] == "tool_call") == calls[0]["function"]["arguments"]


def test_grammar_forced_reasoning_split_end_to_end(qwen):
    """A grammar makes the model emit <think>..</think>..; the splitter separates them."""
    g = gbnf_grammar('root ::= "<think>" [a-z ]{3,20} "</think>" [a-z ]{1,20}')
    text, m = generate(qwen, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", g, n_max=60)
    assert m.is_accepting() and text.startswith("<think>")
    r, c = split_reasoning(text)
    assert r == text[7:text.index("</think>")].strip() and c == text.split("</think>")[1].lstrip()


@pytest.mark.parametrize("i", range(5))
def test_smollm2_json_schema_output_validates(smollm2, i):
    schemas = [
        {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
         "required": ["name", "age"], "additionalProperties": False},
        {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 4},
        {"type": "object", "properties": {"ok": {"type": "boolean"}, "tags": {"type": "array", "maxItems": 3,
                                                                              "items": {"enum": ["a", "b"]}}},
         "required": ["ok", "tags"]},
        {"type": "string", "pattern": "^[A-Z][a-z]{2,5}$"},
        {"anyOf": [{"type": "integer", "minimum": 10, "maximum": 99}, {"type": "null"}]},
    ]
    model = smollm2_model(smollm2)
    g, schema = request_grammar({"json_schema": schemas[i]})
    text, m = generate(model, "<|im_start|>user\nGive me JSON.<|im_end|>\n<|im_start|>assistant\n", g,
                       n_max=80, seed=i)
    assert m.is_accepting(), text
    jsonschema.validate(json.loads(text), schemas[i])


_MODELS = {}


def smollm2_model(path):
    if path not in _MODELS:
        _MODELS[path] = _core.Model(str(path))
    return _MODELS[path]
