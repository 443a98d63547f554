"""Generated text of a chat turn -> the assistant message, incrementally: the reasoning split
first, then tool calls in the content. One object per choice; the server feeds it the detokenized
deltas (after stop-string handling) and forwards what comes out:

    out = ChatOutput(fmt, plan, reasoning_format="auto", generation_prompt=gen, stream=True, tools=tools)
    for text in deltas: for d in out.feed(text): send(event_to_delta(d))
    for d in out.finish(): send(...)
    out.message() -> {"role": "assistant", "content", "reasoning_content"?, "tool_calls"?}

Deltas are ("reasoning", text), ("content", text), ("tool_call", index, id, name, fragment): the
OpenAI chunk via pyllm.toolcalls.event_to_delta, the Anthropic events via AnthropicStream.feed.
"""
from __future__ import annotations

from .reasoning import THINK_END, THINK_START, ReasoningSplitter, parse_reasoning_format, thinking_open_at_end
from .toolcalls import ToolCallParser, ToolFormat, ToolPlan, to_openai


class ChatOutput:
    def __init__(self, fmt: ToolFormat, plan: ToolPlan | None = None, reasoning_format: str = "auto",
                 generation_prompt: str = "", stream: bool = False, tools=None):
        parse_reasoning_format(reasoning_format)
        self.plan = plan
        self._split = None
        if reasoning_format != "none" and (fmt.thinking or THINK_START in generation_prompt):
            self._split = ReasoningSplitter(
                forced_open=thinking_open_at_end(generation_prompt), start=THINK_START, ends=(THINK_END,),
                content_ends=fmt.triggers if fmt.name == "qwen3-xml" else (),
                inline=stream and reasoning_format == "deepseek-legacy")
        self._tools = ToolCallParser(fmt, tools if tools is not None else (plan.tools if plan else None)) \
            if plan is not None and plan.parse else None
        self.reasoning = ""
        self.content = ""

    def _route(self, parts: list, final: bool) -> list:
        out = []
        for kind, text in parts:
            if kind == "reasoning":
                self.reasoning += text
                out.append(("reasoning", text))
            elif self._tools is None:
                self.content += text
                out.append(("content", text))
            else:
                out += self._tools.feed(text)
        if final and self._tools is not None:
            out += self._tools.finish()
        if self._tools is not None:
            for d in out:
                if d[0] == "content":
                    self.content += d[1]
        return out

    def feed(self, text: str) -> list:
        parts = self._split.feed(text) if self._split else [("content", text)]
        return self._route(parts, final=False)

    def finish(self) -> list:
        parts = self._split.finish() if self._split else []
        return self._route(parts, final=True)

    @property
    def tool_calls(self) -> list:
        return [to_openai(c) for c in self._tools.calls] if self._tools else []

    def message(self) -> dict:
        """The non-stream `message` (after finish())."""
        msg = {"role": "assistant", "content": self.content}
        if self.reasoning:
            msg["reasoning_content"] = self.reasoning
        calls = self.tool_calls
        if calls:
            msg["tool_calls"] = calls
            if not self.content:
                msg["content"] = None  # OpenAI: content null next to tool_calls
        return msg
