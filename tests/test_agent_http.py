"""The agent API end to end over real HTTP on the shipped qwen35 model with the real Qwen3.5 chat template
(--jinja --chat-template-file): tool calls (auto/none/required/named, stream and not), role tool results,
reasoning_content, structured output (grammar, json_schema, response_format) on every route, the Anthropic
Messages API through the official client, and the same through Llama.create_chat_completion. The tiny model's
text is noise, so every assertion is about what the constraint or the parser guarantees."""
import json

import anthropic
import httpx
import jsonschema
import openai
import pytest

from server_util import QWEN35_TEMPLATE, agent_server, default_model_path, sse_events

NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string", "enum": ["Paris", "Rome"]},
                                          "days": {"type": "integer", "minimum": 1, "maximum": 30}},
                                          "required": ["city", "days"]}}},
    {"type": "function", "function": {"name": "add", "description": "Add numbers",
                                      "parameters": {"type": "object", "properties": {
                                          "a": {"type": "integer", "minimum": 0, "maximum": 99},
                                          "b": {"type": "integer", "minimum": 0, "maximum": 99}},
                                          "required": ["a", "b"]}}},
]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 150},
                                           "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
          "required": ["name", "age", "tags"], "additionalProperties": False}
MSGS = [{"role": "user", "content": "What is the weather in Paris for 3 days?"}]
GREEDY = {"temperature": 0.0, "seed": 1}


@pytest.fixture(scope="module")
def srv():
    s = agent_server()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def oai(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0)


def check_call(call, names=("get_weather", "add")):
    assert call.type == "function" and call.id and call.function.name in names
    args = json.loads(call.function.arguments)
    params = next(t for t in TOOLS if t["function"]["name"] == call.function.name)["function"]["parameters"]
    jsonschema.validate(args, params)
    return args


def test_props_caps(srv):
    caps = srv.get("/props").json()["chat_template_caps"]
    assert caps["supports_tools"] and caps["supports_tool_calls"] and caps["supports_system_role"]


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "add"}}])
def test_tool_call_constrained(oai, choice):
    r = oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, tool_choice=choice, max_tokens=200,
                                    parallel_tool_calls=False, extra_body=NO_THINK, **GREEDY)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls", ch
    assert ch.message.tool_calls and not ch.message.content
    for c in ch.message.tool_calls:
        check_call(c, ("add",) if isinstance(choice, dict) else ("get_weather", "add"))


def test_tool_call_stream_equals_non_stream(oai):
    kw = dict(model="m", messages=MSGS, tools=TOOLS, tool_choice="required", max_tokens=200, extra_body=NO_THINK,
              parallel_tool_calls=False, **GREEDY)
    whole = oai.chat.completions.create(**kw).choices[0].message.tool_calls
    calls, reason = {}, None
    for chunk in oai.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        for tc in d.tool_calls or []:
            c = calls.setdefault(tc.index, {"name": "", "arguments": "", "id": None})
            if tc.id:
                c["id"] = tc.id
            if tc.function and tc.function.name:
                c["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                c["arguments"] += tc.function.arguments
        reason = chunk.choices[0].finish_reason or reason
    assert reason == "tool_calls" and len(calls) == 1 == len(whole)
    assert calls[0]["name"] == whole[0].function.name
    assert json.loads(calls[0]["arguments"]) == json.loads(whole[0].function.arguments)


def test_tool_choice_none_and_tool_results(oai, srv):
    r = oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, tool_choice="none", max_tokens=8,
                                    extra_body=NO_THINK, **GREEDY)
    assert not r.choices[0].message.tool_calls and r.choices[0].finish_reason in ("stop", "length")
    msgs = MSGS + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call1", "type": "function", "function": {"name": "get_weather",
                                                          "arguments": '{"city": "Paris", "days": 3}'}}]},
        {"role": "tool", "tool_call_id": "call1", "content": "sunny_7c1f"}]
    prompt = srv.post("/apply-template", {"messages": msgs, "tools": TOOLS}).json()["prompt"]
    assert "sunny_7c1f" in prompt and "<function=get_weather>" in prompt and "<tool_response>" in prompt
    r = oai.chat.completions.create(model="m", messages=msgs, tools=TOOLS, max_tokens=8, extra_body=NO_THINK,
                                    **GREEDY)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_reasoning_split(srv, oai):
    # the budget forces </think> after 4 tokens: reasoning_content, then the content
    body = {"messages": MSGS, "max_tokens": 24, "thinking_budget_tokens": 4, **GREEDY}
    r = srv.post("/v1/chat/completions", body).json()
    msg = r["choices"][0]["message"]
    assert msg.get("reasoning_content"), msg
    assert "<think>" not in (msg["content"] or "") and "</think>" not in (msg["content"] or "")
    with httpx.stream("POST", srv.url + "/v1/chat/completions", json={**body, "stream": True}, timeout=60) as resp:
        ev = [e for e in sse_events(resp) if e != "[DONE]"]
    rs = "".join(e["choices"][0]["delta"].get("reasoning_content") or "" for e in ev if e["choices"])
    ct = "".join(e["choices"][0]["delta"].get("content") or "" for e in ev if e["choices"])
    assert rs == msg["reasoning_content"] and ct == (msg["content"] or "")
    # reasoning_format none: the think text stays in content
    r2 = srv.post("/v1/chat/completions", {**body, "reasoning_format": "none"}).json()["choices"][0]["message"]
    assert "reasoning_content" not in r2 and "</think>" in r2["content"]


@pytest.mark.parametrize("route", ["/completion", "/v1/completions"])
def test_completion_json_schema_and_grammar(srv, route):
    r = srv.post(route, {"prompt": "Person:", "json_schema": SCHEMA, "n_predict": 120, **GREEDY})
    assert r.status_code == 200, r.text
    text = r.json()["content"] if route == "/completion" else r.json()["choices"][0]["text"]
    jsonschema.validate(json.loads(text), SCHEMA)
    g = 'root ::= "yes" | "no" | ("maybe " [0-9]{1,3})'
    r = srv.post(route, {"prompt": "Answer:", "grammar": g, "n_predict": 20, **GREEDY})
    text = r.json()["content"] if route == "/completion" else r.json()["choices"][0]["text"]
    import re
    assert re.fullmatch(r"yes|no|maybe [0-9]{1,3}", text), text


def test_chat_response_format(oai, srv):
    for rf in ({"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}},
               {"type": "json_object", "schema": SCHEMA}):
        r = oai.chat.completions.create(model="m", messages=MSGS, response_format=rf, max_tokens=150,
                                        extra_body=NO_THINK, **GREEDY)
        v = json.loads(r.choices[0].message.content)
        jsonschema.validate(v, SCHEMA)


@pytest.mark.parametrize("stream", [False, True])
def test_schema_after_open_thinking(srv, stream):
    # thinking open: the grammar lets the model finish its think block first (the budget closes it), then a
    # bounded blank (llama.cpp's `space`: unbounded, the tiny model emitted blanks until max_tokens) and the JSON
    body = {"messages": MSGS, "json_schema": SCHEMA, "max_tokens": 150, "thinking_budget_tokens": 3, **GREEDY}
    if stream:
        evs = [e for e in sse_events(srv.post("/v1/chat/completions", {**body, "stream": True}))
               if e != "[DONE]" and e.get("choices")]
        content = "".join(e["choices"][0]["delta"].get("content") or "" for e in evs)
        reasoning = "".join(e["choices"][0]["delta"].get("reasoning_content") or "" for e in evs)
        reason = [e["choices"][0]["finish_reason"] for e in evs if e["choices"][0]["finish_reason"]]
    else:
        ch = srv.post("/v1/chat/completions", body).json()["choices"][0]
        content, reasoning, reason = ch["message"]["content"], ch["message"].get("reasoning_content"), [ch["finish_reason"]]
    jsonschema.validate(json.loads(content), SCHEMA)
    assert reasoning and "</think>" not in content and reason == ["stop"]


@pytest.mark.parametrize("body,field", [
    ({"grammar": "root ::= nope"}, "grammar"),
    ({"json_schema": {"type": "bogus"}}, "json_schema"),
    ({"response_format": {"type": "bogus"}}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": 5}}}}, "response_format"),
    ({"grammar": "root ::= \"a\"", "json_schema": {}}, "grammar"),
    ({"tool_choice": "sometimes", "tools": TOOLS}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": TOOLS}, "nope"),
    ({"reasoning_format": "weird"}, "reasoning format"),
    ({"chat_template_kwargs": {"enable_thinking": "yes"}}, "enable_thinking"),
])
def test_bad_constraints_400(srv, body, field):
    r = srv.post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 4, **body})
    assert r.status_code == 400, r.text
    assert field in r.json()["error"]["message"], r.text
    if "tools" not in body and "reasoning_format" not in body and "chat_template_kwargs" not in body:
        r = srv.post("/completion", {"prompt": "x", "n_predict": 4, **body})
        assert r.status_code == 400 and field in r.json()["error"]["message"], r.text


def test_anthropic_messages(srv):
    c = anthropic.Anthropic(base_url=srv.url, api_key="x", max_retries=0)
    m = c.messages.create(model="m", max_tokens=12, messages=MSGS, thinking={"type": "enabled", "budget_tokens": 3},
                          extra_body={"temperature": 0.0})
    kinds = [b.type for b in m.content]
    assert kinds[0] == "thinking" and m.usage.output_tokens > 0 and m.stop_reason in ("end_turn", "max_tokens")
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in TOOLS]
    m = c.messages.create(model="m", max_tokens=200, messages=MSGS, tools=tools,
                          tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}, thinking={"type": "disabled"}, extra_body={"temperature": 0.0})
    uses = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use" and uses and uses[0].name == "get_weather"
    jsonschema.validate(uses[0].input, TOOLS[0]["function"]["parameters"])
    with c.messages.stream(model="m", max_tokens=200, messages=MSGS, tools=tools,
                           tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}, thinking={"type": "disabled"}, extra_body={"temperature": 0.0}) as s:
        final = s.get_final_message()
    su = [b for b in final.content if b.type == "tool_use"]
    assert su and su[0].input == uses[0].input and final.stop_reason == "tool_use"
    n = c.messages.count_tokens(model="m", messages=MSGS)
    assert n.input_tokens > 5
    r = srv.post("/v1/messages", {"model": "m", "max_tokens": 5, "messages": MSGS, "bogus_field": 1})
    assert r.status_code == 400 and "bogus_field" in r.text


def test_llama_create_chat_completion():
    from pyllm import Llama
    llm = Llama(default_model_path(), n_ctx=2048, verbose=False, chat_format=None)
    # the Qwen3.5 template, as --chat-template-file, thinking off (the tiny model would think forever)
    llm._chat = type(llm._chat)(QWEN35_TEMPLATE.read_text(), template_kwargs={"enable_thinking": False})
    one = {"type": "function", "function": {"name": "add"}}
    r = llm.create_chat_completion(MSGS, tools=TOOLS, tool_choice=one, max_tokens=200, temperature=0.0)
    ch = r["choices"][0]
    assert ch["finish_reason"] == "tool_calls"
    for c in ch["message"]["tool_calls"]:
        jsonschema.validate(json.loads(c["function"]["arguments"]),
                            next(t for t in TOOLS if t["function"]["name"] == c["function"]["name"])["function"][
                                "parameters"])
    r = llm.create_chat_completion(MSGS, response_format={"type": "json_schema", "json_schema": {"schema": SCHEMA}},
                                   max_tokens=150, temperature=0.0)
    jsonschema.validate(json.loads(r["choices"][0]["message"]["content"]), SCHEMA)
    chunks = list(llm.create_chat_completion(MSGS, tools=TOOLS, tool_choice=one, max_tokens=200,
                                             temperature=0.0, stream=True))
    args = "".join(tc["function"].get("arguments", "") for c in chunks
                   for tc in (c["choices"][0]["delta"].get("tool_calls") or []))
    assert json.loads(args) == json.loads(ch["message"]["tool_calls"][0]["function"]["arguments"]) or \
        len(ch["message"]["tool_calls"]) > 1
    with pytest.raises(ValueError, match="grammar"):
        llm.create_completion("x", grammar="root ::= nope", max_tokens=2)
    out = llm.create_completion("x", grammar='root ::= "ab" "c"?', max_tokens=5, temperature=0.0)
    assert out["choices"][0]["text"] in ("ab", "abc")
