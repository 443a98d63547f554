"""Tool calling building blocks: format detection, the (streaming) parser, tool_choice plans,
template capabilities and rendering. No model needed."""
import json
import os
import random
from pathlib import Path

import pytest

from pyllm.chat import prepare_messages, render_chat, template_caps
from pyllm.toolcalls import (ToolCallParser, detect_format, event_to_delta, finish_reason, get_format,
                             parse_tool_calls, plan_tools, typed_value)

DATA = Path(__file__).parent / "data" / "templates"
QWEN35 = (DATA / "qwen3.5.jinja").read_text()
PEER = Path("/work/peer/llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
        "opts": {"type": "object"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["city"]}}}
NOARGS = {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, NOARGS]

QWEN_CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis \"FR\"\nline2\n</parameter>\n"
             "<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n"
             "<parameter=opts>\n{\"a\": [1, 2]}\n</parameter>\n</function>\n</tool_call>")
QWEN_ARGS = {"city": "Paris \"FR\"\nline2", "days": 3, "metric": True, "opts": {"a": [1, 2]}}


def stream(fmt, text, tools=TOOLS, chunks=None):
    """Feed text in random-size chunks; returns (events, parser)."""
    p = ToolCallParser(fmt, tools)
    rnd = random.Random(len(text))
    ev, i = [], 0
    while i < len(text):
        n = chunks or rnd.randint(1, 7)
        ev += p.feed(text[i:i + n])
        i += n
    return ev + p.finish(), p


def collect(ev):
    content = "".join(e[1] for e in ev if e[0] == "content")
    calls = {}
    for e in ev:
        if e[0] == "tool_call":
            c = calls.setdefault(e[1], {"id": None, "name": None, "arguments": ""})
            if e[2] is not None:
                c["id"], c["name"] = e[2], e[3]
            c["arguments"] += e[4]
    return content, [calls[i] for i in sorted(calls)]


# ---- detection ----------------------------------------------------------------------------------
def test_detect_synthetic_markers():
    assert detect_format("{{ '<tool_call>\\n<function=' }}<parameter=").name == "qwen3-xml"
    assert detect_format("[TOOL_CALLS] [ARGS]").name == "mistral-args"
    assert detect_format("[TOOL_CALLS]").name == "mistral"
    assert detect_format("<tool_call>{{ tools }}").name == "hermes"
    assert detect_format("<|start_header_id|>ipython<|end_header_id|>").name == "llama3"
    assert detect_format("{{ messages }}").name == "generic"
    assert detect_format(QWEN35).name == "qwen3-xml" and detect_format(QWEN35).thinking
    with pytest.raises(ValueError, match="unknown tool-call format"):
        get_format("bogus")


@pytest.mark.skipif(not PEER.is_dir(), reason="llama.cpp template collection not present")
@pytest.mark.parametrize("name,fmt", [
    ("Qwen3.5-4B", "qwen3-xml"), ("Qwen3-Coder", "qwen3-xml"), ("Qwen-Qwen2.5-7B-Instruct", "hermes"),
    ("Qwen-Qwen3-0.6B", "hermes"), ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "hermes"),
    ("meta-llama-Llama-3.1-8B-Instruct", "llama3"), ("meta-llama-Llama-3.2-3B-Instruct", "llama3"),
    ("mistralai-Mistral-Nemo-Instruct-2407", "mistral"), ("mistralai-Ministral-3-14B-Reasoning-2512", "mistral-args"),
    ("google-gemma-2-2b-it", "generic")])
def test_detect_real_templates(name, fmt):
    src = (PEER / f"{name}.jinja").read_text()
    assert detect_format(src).name == fmt
    caps = template_caps(src)
    assert caps["supports_tools"] == (fmt != "generic")


# ---- parser: full and streaming agree, no markup in content ------------------------------------
@pytest.mark.parametrize("chunks", [1, 3, None])
def test_qwen_xml_typed_and_streamed(chunks):
    fmt = get_format("qwen3-xml", QWEN35)
    text = "Let me check.\n\n" + QWEN_CALL
    content, calls = parse_tool_calls(text, fmt, TOOLS)
    assert content == "Let me check.\n\n"
    assert len(calls) == 1 and calls[0]["function"]["name"] == "get_weather"
    assert json.loads(calls[0]["function"]["arguments"]) == QWEN_ARGS
    assert calls[0]["type"] == "function" and len(calls[0]["id"]) == 32
    ev, _ = stream(fmt, text, chunks=chunks)
    s_content, s_calls = collect(ev)
    assert s_content == content
    assert json.loads(s_calls[0]["arguments"]) == QWEN_ARGS
    assert "<" not in s_content  # no partial markup leaked
    # the name comes before any argument fragment, and the first delta carries id + type
    deltas = [event_to_delta(e) for e in ev if e[0] == "tool_call"]
    first = deltas[0]["tool_calls"][0]
    assert first["id"] and first["type"] == "function" and first["function"]["name"] == "get_weather"
    assert all("id" not in d["tool_calls"][0] for d in deltas[1:])


def test_qwen_xml_string_param_streams_before_close():
    p = ToolCallParser(get_format("qwen3-xml"), TOOLS)
    ev = p.feed("<tool_call>\n<function=get_weather>\n<parameter=city>\nPar")
    args = "".join(e[4] for e in ev if e[0] == "tool_call")
    assert args == '{"city": "Par'  # string values stream while generated
    ev = p.feed("is\n</parameter>\n<parameter=days>\n1")
    args += "".join(e[4] for e in ev if e[0] == "tool_call")
    assert args == '{"city": "Paris", "days": '  # typed values wait for their closing tag


def test_qwen_xml_untyped_and_mistyped_values_stay_strings():
    assert typed_value("3", {"string"}) == "3"
    assert typed_value("3", {"integer"}) == 3
    assert typed_value("abc", {"integer"}) == "abc"  # not what the schema says: left as text
    assert typed_value("1.5", {"number"}) == 1.5
    assert typed_value("null", {"string", "null"}) is None
    _, calls = parse_tool_calls("<tool_call>\n<function=other>\n<parameter=x>\n5\n</parameter>\n</function>\n"
                                "</tool_call>", get_format("qwen3-xml"), TOOLS)
    assert json.loads(calls[0]["function"]["arguments"]) == {"x": "5"}  # unknown tool: no schema, string


def test_qwen_xml_parallel_and_no_params():
    fmt = get_format("qwen3-xml")
    text = QWEN_CALL + "\n" + "<tool_call>\n<function=now>\n</function>\n</tool_call>"
    content, calls = parse_tool_calls(text, fmt, TOOLS)
    assert content == "" and [c["function"]["name"] for c in calls] == ["get_weather", "now"]
    assert calls[1]["function"]["arguments"] == "{}"
    assert calls[0]["id"] != calls[1]["id"]
    ev, _ = stream(fmt, text)
    assert [e[1] for e in ev if e[0] == "tool_call" and e[2]] == [0, 1]


def test_unfinished_call_is_content_in_full_parse_and_closed_in_stream():
    fmt = get_format("qwen3-xml")
    text = "ok <tool_call>\n<function=get_weather>\n<parameter=city>\nPar"
    assert parse_tool_calls(text, fmt, TOOLS) == (text, [])
    ev, p = stream(fmt, text)
    content, calls = collect(ev)
    assert content == "ok " and json.loads(calls[0]["arguments"]) == {"city": "Par"}  # closed, still JSON
    assert not p.calls[0]["done"]


def test_text_that_only_looks_like_a_trigger_is_content():
    fmt = get_format("qwen3-xml")
    for text in ["a < b and <tool", "x <tool_c", "<tool_cal> y"]:
        assert parse_tool_calls(text, fmt, TOOLS) == (text, [])
        ev, _ = stream(fmt, text, chunks=1)
        assert collect(ev)[0] == text


@pytest.mark.parametrize("text,names,content", [
    ('I will. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "opts": {"k": "}"}}}\n</tool_call>',
     ["get_weather"], "I will. "),
    ('<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>\n<tool_call>\n{"arguments": {"city": "X"}, '
     '"name": "get_weather"}\n</tool_call>', ["now", "get_weather"], ""),
])
def test_hermes(text, names, content):
    fmt = get_format("hermes")
    c, calls = parse_tool_calls(text, fmt)
    assert c == content and [x["function"]["name"] for x in calls] == names
    for x in calls:
        json.loads(x["function"]["arguments"])
    ev, _ = stream(fmt, text)
    sc, scalls = collect(ev)
    assert sc == content and [x["arguments"] for x in scalls] == [x["function"]["arguments"] for x in calls]


def test_llama3_json_and_python_tag():
    fmt = get_format("llama3")
    c, calls = parse_tool_calls('{"name": "get_weather", "parameters": {"city": "Rome"}}', fmt)
    assert c == "" and json.loads(calls[0]["function"]["arguments"]) == {"city": "Rome"}
    c, calls = parse_tool_calls('{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": 1}}', fmt)
    assert [x["function"]["name"] for x in calls] == ["a", "b"]
    assert parse_tool_calls('Hello {"name": "x"}', fmt) == ('Hello {"name": "x"}', [])  # only at the start
    assert parse_tool_calls('{"key": 1}', fmt) == ('{"key": 1}', [])  # JSON that is not a call
    _, calls = parse_tool_calls('<|python_tag|>brave_search.call(query="x y", n=2)', fmt)
    assert calls[0]["function"]["name"] == "brave_search"
    assert json.loads(calls[0]["function"]["arguments"]) == {"query": "x y", "n": 2}
    ev, _ = stream(fmt, '{"name": "get_weather", "parameters": {"city": "Rome"}}', chunks=1)
    assert collect(ev)[0] == ""


def test_mistral_formats():
    c, calls = parse_tool_calls('[TOOL_CALLS][{"name": "now", "arguments": {}, "id": "abc123def"}, '
                                '{"name": "get_weather", "arguments": {"city": "Oslo"}}]', get_format("mistral"))
    assert c == "" and calls[0]["id"] == "abc123def" and len(calls[1]["id"]) == 9
    c, calls = parse_tool_calls('Sure[TOOL_CALLS]get_weather[ARGS]{"city": {"n": "O"}}[TOOL_CALLS]now[ARGS]{}',
                                get_format("mistral-args"))
    assert c == "Sure" and [x["function"]["arguments"] for x in calls] == ['{"city": {"n": "O"}}', "{}"]


def test_generic():
    fmt = get_format("generic")
    _, calls = parse_tool_calls('{"tool_calls": [{"name": "now", "arguments": {}}]}', fmt)
    assert calls[0]["function"]["name"] == "now"
    _, calls = parse_tool_calls('{"tool_call": {"name": "get_weather", "arguments": {"city": "A"}}}', fmt)
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "A"}
    assert parse_tool_calls('{"response": "hi there"}', fmt) == ("hi there", [])
    assert parse_tool_calls("plain text", fmt) == ("plain text", [])


# ---- tool_choice / parallel_tool_calls ---------------------------------------------------------
def test_plan_modes():
    p = plan_tools(TOOLS)
    assert (p.mode, p.parse, p.constrain, p.lazy, p.parallel) == ("auto", True, True, True, True)
    p = plan_tools(TOOLS, "none")
    assert (p.parse, p.constrain) == (False, False) and p.tools == TOOLS  # still rendered
    p = plan_tools(TOOLS, "required", parallel_tool_calls=False)
    assert (p.constrain, p.lazy, p.parallel) == (True, False, False)
    p = plan_tools(TOOLS, {"type": "function", "function": {"name": "now"}})
    assert p.mode == "required" and [t["function"]["name"] for t in p.allowed] == ["now"] and p.forced_name == "now"
    assert plan_tools(TOOLS, supports_parallel=False).parallel is False
    assert plan_tools(None).mode == "none"


@pytest.mark.parametrize("args,msg", [
    (dict(tools=TOOLS, tool_choice="sometimes"), "Invalid tool_choice"),
    (dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}), "not in 'tools'"),
    (dict(tools=TOOLS, tool_choice={"type": "function"}), "tool_choice"),
    (dict(tools=None, tool_choice="required"), "requires 'tools'"),
    (dict(tools={"a": 1}), "'tools' must be an array"),
    (dict(tools=[{"type": "function", "function": {}}]), r"tools\[0\].function.name"),
    (dict(tools=[WEATHER, WEATHER]), "duplicate"),
    (dict(tools=TOOLS, parallel_tool_calls="yes"), "parallel_tool_calls"),
    (dict(tools=TOOLS, has_grammar=True), "grammar"),
])
def test_plan_errors(args, msg):
    with pytest.raises(ValueError, match=msg):
        plan_tools(**args)


def test_finish_reason():
    assert finish_reason("eos", 1) == "tool_calls" and finish_reason("eos", 0) == "stop"
    assert finish_reason("limit", 1) == "length" and finish_reason("word", 0) == "stop"


# ---- templates: caps, message preparation, rendering -------------------------------------------
def test_qwen35_caps_and_tool_rendering():
    caps = template_caps(QWEN35)
    for k in ("supports_tools", "supports_tool_calls", "supports_tool_responses", "supports_object_arguments",
              "supports_parallel_tool_calls", "supports_system_role"):
        assert caps[k], k
    msgs = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 2}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    prompt, gen = render_chat(QWEN35, prepare_messages(msgs, caps), tools=TOOLS,
                              template_kwargs={"enable_thinking": True})
    assert '"name": "get_weather"' in prompt  # tools shown in the system turn
    assert "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n" in prompt
    assert "<tool_response>\nsunny\n</tool_response>" in prompt
    assert gen == "<|im_start|>assistant\n<think>\n"
    # the rendered call is exactly what the parser reads back
    i = prompt.rindex("<tool_call>")  # the system turn shows an example call first
    _, calls = parse_tool_calls(prompt[i:prompt.rindex("</tool_call>") + 12], detect_format(QWEN35), TOOLS)
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris", "days": 2}
    _, gen = render_chat(QWEN35, prepare_messages(msgs[:1], caps), template_kwargs={"enable_thinking": False})
    assert gen.endswith("<think>\n\n</think>\n\n")


def test_prepare_messages_workarounds_and_errors():
    caps = {"supports_system_role": False, "supports_tool_calls": False, "supports_tool_responses": False}
    out = prepare_messages([{"role": "developer", "content": "be brief"}, {"role": "user", "content": "hi"},
                            {"role": "assistant", "tool_calls": [{"id": "x", "function": {"name": "f",
                                                                                          "arguments": '{"a": 1}'}}]},
                            {"role": "tool", "tool_call_id": "x", "content": "42"}], caps)
    assert out[0] == {"role": "user", "content": "be brief\n\nhi"}
    assert json.loads(out[1]["content"]) == {"tool_calls": [{"name": "f", "arguments": {"a": 1}, "id": "x"}]}
    assert out[2]["role"] == "user" and json.loads(out[2]["content"])["tool_response"]["content"] == "42"
    with pytest.raises(ValueError, match="must contain 'content'"):
        prepare_messages([{"role": "user"}], {})
    with pytest.raises(ValueError, match="either 'content' or 'tool_calls'"):
        prepare_messages([{"role": "assistant"}], {})
    with pytest.raises(ValueError, match="not valid JSON"):
        prepare_messages([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{x"}}]}],
                         {"supports_object_arguments": True})
