"""/v1/responses as llama-server serves it: the body converted to chat (unit tests of the conversion), the
`response` object and its SSE events through the official openai client, function calls, input_tokens."""
import json

import httpx
import openai
import pytest

from pyllm.responses_api import ResponsesError, responses_to_chat
from server_util import agent_server

TOOLS = [{"type": "function", "name": "add", "description": "Add numbers", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99},
                                     "b": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["a", "b"]}}]


def test_conversion():
    c = responses_to_chat({"input": "Hi", "instructions": "Be brief", "max_output_tokens": 5,
                           "reasoning": {"effort": "none"}, "temperature": 0.5, "tools": TOOLS + [{"type": "web"}]})
    assert c["messages"] == [{"role": "system", "content": "Be brief"}, {"role": "user", "content": "Hi"}]
    assert c["max_tokens"] == 5 and c["reasoning_effort"] == "none" and c["temperature"] == 0.5
    assert c["tools"] == [{"type": "function", "function": {**{k: v for k, v in TOOLS[0].items() if k != "type"},
                                                           "strict": True}}]
    assert "input" not in c and "max_output_tokens" not in c and "reasoning" not in c
    items = [{"role": "user", "content": [{"type": "input_text", "text": "2+3?"}]},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me add."}]},
             {"type": "function_call", "call_id": "c1", "name": "add", "arguments": "{\"a\":2,\"b\":3}"},
             {"type": "function_call_output", "call_id": "c1", "output": "5"}]
    m = responses_to_chat({"input": items})["messages"]
    assert [x["role"] for x in m] == ["user", "assistant", "tool"]
    assert m[1]["content"] == [{"type": "text", "text": "Let me add."}]
    assert m[1]["tool_calls"][0]["function"] == {"name": "add", "arguments": "{\"a\":2,\"b\":3}"}
    assert m[2] == {"role": "tool", "tool_call_id": "c1", "content": "5"}
    for bad, msg in [({}, "'input' is required"), ({"input": 3}, "string or array"),
                     ({"input": [{"foo": 1}]}, "Cannot determine type"),
                     ({"input": "x", "previous_response_id": "r1"}, "previous_response_id"),
                     ({"input": [{"role": "user", "content": [{"type": "input_file"}]}]}, "input_file")]:
        with pytest.raises(ResponsesError, match=msg):
            responses_to_chat(bad)


@pytest.fixture(scope="module")
def srv():
    s = agent_server()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def oai(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0)


def test_response_object(srv, oai):
    r = oai.responses.create(model="m", input="Tell me a story.", max_output_tokens=24, temperature=0.0)
    assert r.object == "response" and r.status == "completed" and r.id.startswith("resp_")
    assert r.usage.output_tokens == 24 and r.usage.input_tokens > 0
    kinds = [o.type for o in r.output]
    assert kinds and set(kinds) <= {"reasoning", "message"}
    # the same request on chat: the same text
    c = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell me a story."}],
                                          "max_tokens": 24, "temperature": 0.0}).json()["choices"][0]["message"]
    if "reasoning" in kinds:
        assert r.output[0].content[0].text == c["reasoning_content"]
    if "message" in kinds:
        assert r.output[-1].content[0].text == c["content"]


def test_stream_events(oai):
    evs = list(oai.responses.create(model="m", input="Tell me a story.", max_output_tokens=16, temperature=0.0,
                                    stream=True))
    types = [e.type for e in evs]
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
    assert "response.output_item.added" in types and "response.output_item.done" in types
    deltas = "".join(e.delta for e in evs if e.type in ("response.output_text.delta",
                                                         "response.reasoning_text.delta"))
    done = evs[-1].response
    assert done.usage.output_tokens == 16
    texts = "".join(p.text for o in done.output for p in (o.content or []))
    assert deltas.replace("\n", "") and texts.replace("\n", "").strip() in deltas.replace("\n", "")


def test_function_call(oai):
    r = oai.responses.create(model="m", input="Add 2 and 3.", tools=TOOLS, tool_choice="required",
                             max_output_tokens=128, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and calls[0].name == "add" and calls[0].call_id
    json.loads(calls[0].arguments)


def test_input_tokens_and_errors(srv):
    n = srv.post("/v1/responses/input_tokens", {"input": "Hello there"}).json()["input_tokens"]
    c = srv.post("/apply-template", {"messages": [{"role": "user", "content": "Hello there"}]}).json()["prompt"]
    assert n == len(srv.post("/tokenize", {"content": c, "add_special": True}).json()["tokens"])
    r = srv.post("/v1/responses", {"input": [{"bogus": 1}]})
    assert r.status_code == 400 and "Cannot determine type" in r.json()["error"]["message"]
    r = srv.post("/v1/responses", {"input": "x", "n_indent": 2})
    assert r.status_code == 400 and "n_indent" in r.json()["error"]["message"]
    assert httpx.get(srv.url + "/health").status_code == 200


def test_messages_refuses_unimplemented_fields(srv):
    r = srv.post("/v1/messages", {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}],
                                  "n_indent": 2})
    assert r.status_code == 400 and "n_indent" in r.json()["error"]["message"]
    r = srv.post("/v1/messages", {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}],
                                  "metadata": {"user_id": "u"}})
    assert r.status_code == 200
