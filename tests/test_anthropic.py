"""Anthropic Messages API conversion, checked against the official `anthropic` client's types."""
import json

import pytest

anthropic = pytest.importorskip("anthropic")
from anthropic.lib.streaming._messages import accumulate_event  # noqa: E402
from anthropic.types import Message, RawMessageStreamEvent  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402

from pyllm.anthropic import (AnthropicError, AnthropicStream, count_tokens_response, message_response,  # noqa: E402
                             messages_to_chat, sse, stream_events)

EVENTS = TypeAdapter(RawMessageStreamEvent)
TOOL = {"name": "get_weather", "description": "w", "input_schema": {"type": "object", "properties": {
    "city": {"type": "string"}}, "required": ["city"]}}


def test_request_conversion():
    chat = messages_to_chat({
        "model": "m", "max_tokens": 100, "system": [{"type": "text", "text": "Be brief."}],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "use the tool", "signature": ""},
                                              {"type": "text", "text": "Checking."},
                                              {"type": "tool_use", "id": "tu_1", "name": "get_weather",
                                               "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1",
                                          "content": [{"type": "text", "text": "sunny"}]},
                                         {"type": "text", "text": "And tomorrow?"}]}],
        "stop_sequences": ["END"], "temperature": 0.5, "top_p": 0.9, "top_k": 20, "stream": True,
        "tools": [TOOL], "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        "thinking": {"type": "enabled", "budget_tokens": 50}, "metadata": {"user_id": "u"}})
    assert chat["messages"][0] == {"role": "system", "content": "Be brief."}
    a = chat["messages"][2]
    assert a["role"] == "assistant" and a["content"] == "Checking." and a["reasoning_content"] == "use the tool"
    assert a["tool_calls"][0]["id"] == "tu_1" and json.loads(a["tool_calls"][0]["function"]["arguments"]) == {
        "city": "Paris"}
    assert chat["messages"][3] == {"role": "tool", "tool_call_id": "tu_1", "content": "sunny"}
    assert chat["messages"][4] == {"role": "user", "content": "And tomorrow?"}
    assert chat["stop"] == ["END"] and chat["max_tokens"] == 100 and chat["stream"] is True
    assert (chat["temperature"], chat["top_p"], chat["top_k"]) == (0.5, 0.9, 20)
    assert chat["tools"] == [{"type": "function", "function": {"name": "get_weather", "description": "w",
                                                               "parameters": TOOL["input_schema"]}}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert chat["parallel_tool_calls"] is False
    assert chat["chat_template_kwargs"] == {"enable_thinking": True} and chat["thinking_budget_tokens"] == 50
    assert messages_to_chat({"messages": [{"role": "user", "content": "x"}]})["max_tokens"] == 4096
    assert messages_to_chat({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "any"}})[
        "tool_choice"] == "required"
    off = messages_to_chat({"messages": [{"role": "user", "content": "x"}], "thinking": {"type": "disabled"}})
    assert off["chat_template_kwargs"] == {"enable_thinking": False}


@pytest.mark.parametrize("body,field", [
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": "x"}], "service_tier": "auto"}, "service_tier"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": 3}, "temperature"),
    ({"messages": [{"role": "user", "content": "x"}], "stop_sequences": "x"}, "stop_sequences"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web_search_20250305", "name": "w"}]},
     "tools[0].type"),
    ({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "maybe"}}, "tool_choice.type"),
    ({"messages": [{"role": "user", "content": "x"}], "thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 10,
      "thinking": {"type": "enabled", "budget_tokens": 10}}, "thinking.budget_tokens"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "b"}]}]},
     "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": "x"}], "metadata": {"foo": 1}}, "metadata"),
])
def test_request_errors_name_the_field(body, field):
    with pytest.raises(AnthropicError) as e:
        messages_to_chat(body)
    assert e.value.field == field and field in str(e.value)


def test_count_tokens_request_needs_no_max_tokens():
    chat = messages_to_chat({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, count_tokens=True)
    assert "max_tokens" not in chat
    assert count_tokens_response(12) == {"input_tokens": 12}


def test_message_response_validates_with_client_types():
    calls = [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "X"}'}}]
    r = message_response(model="m", content="Sure.", reasoning="think", tool_calls=calls, stop="eos",
                         n_prompt=10, n_cached=4, n_gen=7)
    m = Message.model_validate(r)
    assert [b.type for b in m.content] == ["thinking", "text", "tool_use"]
    assert m.stop_reason == "tool_use" and m.content[2].input == {"city": "X"}
    assert m.usage.input_tokens == 6 and m.usage.cache_read_input_tokens == 4 and m.usage.output_tokens == 7
    assert m.id.startswith("msg_")
    assert message_response(model="m", content="x", stop="limit")["stop_reason"] == "max_tokens"
    r = message_response(model="m", content="x", stop="word", stopping_word="END")
    assert (r["stop_reason"], r["stop_sequence"]) == ("stop_sequence", "END")
    assert message_response(model="m", content="x")["stop_reason"] == "end_turn"


def test_stream_accumulates_to_the_same_message():
    deltas = [("reasoning", "Let me "), ("reasoning", "think."), ("content", "Calling "), ("content", "now."),
              ("tool_call", 0, "call_a", "get_weather", ""), ("tool_call", 0, None, None, '{"city": '),
              ("tool_call", 0, None, None, '"Paris"}'), ("tool_call", 1, "call_b", "now", "{}")]
    events = list(stream_events(iter(deltas), model="m", stop="eos", n_gen=9, n_prompt=5, msg_id="msg_x"))
    names = [e for e, _ in events]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
    snap, bufs = None, {}
    for name, data in events:
        assert data["type"] == name
        if name == "ping":
            continue
        snap = accumulate_event(event=EVENTS.validate_python(data), current_snapshot=snap, json_bufs=bufs)
    assert [b.type for b in snap.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert snap.content[0].thinking == "Let me think." and snap.content[1].text == "Calling now."
    assert snap.content[2].input == {"city": "Paris"} and snap.content[3].input == {}
    assert snap.stop_reason == "tool_use" and snap.usage.output_tokens == 9
    # block indices are sequential; each block is closed before the next opens
    opened = [d["index"] for e, d in events if e == "content_block_start"]
    closed = [d["index"] for e, d in events if e == "content_block_stop"]
    assert opened == closed == [0, 1, 2, 3]
    assert sse("ping", {"type": "ping"}) == 'event: ping\ndata: {"type": "ping"}\n\n'


def test_stream_error_event_and_stop_sequence():
    st = AnthropicStream(model="m")
    ev = st.start() + st.feed(("content", "a")) + st.finish("word", 1, "END")
    assert ev[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}
    assert st.error("boom")[0] == ("error", {"type": "error", "error": {"type": "api_error", "message": "boom"}})
