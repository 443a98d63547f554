"""ChatOutput: reasoning split + tool-call parsing composed, as the server will run them."""
import json
from pathlib import Path

import pytest

from pyllm.chat_output import ChatOutput
from pyllm.toolcalls import detect_format, event_to_delta, get_format, plan_tools

QWEN35 = (Path(__file__).parent / "data" / "templates" / "qwen3.5.jinja").read_text()
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"n": {"type": "integer"}}}}}]
GEN = "<|im_start|>assistant\n<think>\n"
CALL = "<tool_call>\n<function=f>\n<parameter=n>\n4\n</parameter>\n</function>\n</tool_call>"


def run(out, text, step=3):
    ev = []
    for i in range(0, len(text), step):
        ev += out.feed(text[i:i + step])
    return ev + out.finish()


@pytest.mark.parametrize("step", [1, 4, 100])
def test_qwen35_thinking_content_and_call(step):
    out = ChatOutput(detect_format(QWEN35), plan_tools(TOOLS), "auto", GEN, stream=True)
    ev = run(out, "The user wants f.\n</think>\n\nCalling.\n\n" + CALL, step)
    msg = out.message()
    assert msg["reasoning_content"] == "The user wants f." and msg["content"] == "Calling.\n\n"
    assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"n": 4}
    deltas = [event_to_delta(e) for e in ev]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "The user wants f."
    assert "".join(d.get("content", "") for d in deltas) == "Calling.\n\n"


def test_call_straight_from_thinking_and_none_format():
    out = ChatOutput(detect_format(QWEN35), plan_tools(TOOLS), "auto", GEN)
    run(out, "short\n" + CALL)
    m = out.message()
    assert m["reasoning_content"] == "short" and m["content"] is None and len(m["tool_calls"]) == 1
    out = ChatOutput(detect_format(QWEN35), None, "none", GEN)
    run(out, "r\n</think>\n\nx")
    assert out.message() == {"role": "assistant", "content": "r\n</think>\n\nx"}


def test_legacy_stream_inline_and_no_tools():
    out = ChatOutput(get_format("hermes", "<think>"), None, "deepseek-legacy", "", stream=True)
    ev = run(out, "<think>a</think>b")
    assert [e[0] for e in ev] == ["content"] * len(ev) and out.message()["content"] == "<think>a</think>b"
    out = ChatOutput(get_format("hermes", "<think>"), None, "deepseek-legacy", "", stream=False)
    run(out, "<think>a</think>b")
    assert out.message() == {"role": "assistant", "content": "b", "reasoning_content": "a"}
    out = ChatOutput(get_format("hermes", "<think>"), plan_tools(TOOLS, "none"), "auto", "")
    run(out, "<tool_call>\n{}")  # tool_choice none: not parsed
    assert out.message()["content"] == "<tool_call>\n{}"
    with pytest.raises(ValueError):
        ChatOutput(get_format("hermes"), None, "r1")
