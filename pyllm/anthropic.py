"""The Anthropic Messages API (/v1/messages, /v1/messages/count_tokens) as pure functions over the
OpenAI-style chat request the server already serves, the way llama-server converts it
(server_chat_convert_anthropic_to_oai), with the unsupported parts refused by name.

  messages_to_chat(body)            Messages request -> chat request (raises AnthropicError -> 400)
  message_response(result, ...)     a finished generation -> the Message object
  AnthropicStream                   internal deltas -> the SSE event sequence
  sse(event, data)                  one SSE frame

Internal deltas (what the chat pipeline produces): ("reasoning", text), ("content", text),
("tool_call", index, id, name, arguments_fragment) with id/name on a call's first delta.
"""
from __future__ import annotations

import json
import secrets
import string

_ALNUM = string.ascii_letters + string.digits
REQUEST_FIELDS = {"model", "messages", "system", "max_tokens", "stop_sequences", "temperature", "top_p", "top_k",
                  "tools", "tool_choice", "stream", "thinking", "metadata", "chat_template_kwargs"}
DEFAULT_MAX_TOKENS = 4096  # llama-server's value when max_tokens is missing


class AnthropicError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(f"'{field}': {message}" if field else message)
        self.field = field


def new_message_id() -> str:
    return "msg_" + "".join(secrets.choice(_ALNUM) for _ in range(24))


def _text_of(blocks, field: str, allow=("text",)) -> str:
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise AnthropicError(field, "must be a string or an array of content blocks")
    texts = []
    for i, b in enumerate(blocks):
        t = b.get("type") if isinstance(b, dict) else None
        if t == "image" or t == "document":
            raise AnthropicError(f"{field}[{i}]", f"{t} content is not supported (this server has no multimodal input)")
        if t not in allow:
            raise AnthropicError(f"{field}[{i}]", f"unsupported content block type {t!r} here")
        if not isinstance(b.get("text"), str):
            raise AnthropicError(f"{field}[{i}].text", "must be a string")
        texts.append(b["text"])
    return "".join(texts)


def _convert_message(i: int, m) -> list:
    f = f"messages[{i}]"
    if not isinstance(m, dict):
        raise AnthropicError(f, "must be an object")
    role = m.get("role")
    if role not in ("user", "assistant"):
        raise AnthropicError(f"{f}.role", f"must be 'user' or 'assistant', got {role!r}")
    content = m.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise AnthropicError(f"{f}.content", "must be a string or an array of content blocks")
    texts, calls, results, thinking = [], [], [], []
    for j, b in enumerate(content):
        bf = f"{f}.content[{j}]"
        t = b.get("type") if isinstance(b, dict) else None
        if t == "text":
            if not isinstance(b.get("text"), str):
                raise AnthropicError(f"{bf}.text", "must be a string")
            texts.append(b["text"])
        elif t in ("image", "document"):
            raise AnthropicError(bf, f"{t} content is not supported (this server has no multimodal input)")
        elif t == "thinking" and role == "assistant":
            thinking.append(b.get("thinking") or "")
        elif t == "redacted_thinking" and role == "assistant":
            continue  # opaque to a local model: nothing to render
        elif t == "tool_use" and role == "assistant":
            if not isinstance(b.get("name"), str) or not isinstance(b.get("id"), str):
                raise AnthropicError(bf, "tool_use needs string 'id' and 'name'")
            inp = b.get("input", {})
            if not isinstance(inp, dict):
                raise AnthropicError(f"{bf}.input", "must be an object")
            calls.append({"id": b["id"], "type": "function",
                          "function": {"name": b["name"], "arguments": json.dumps(inp, ensure_ascii=False)}})
        elif t == "tool_result" and role == "user":
            if not isinstance(b.get("tool_use_id"), str):
                raise AnthropicError(f"{bf}.tool_use_id", "must be a string")
            rc = b.get("content", "")
            text = "" if rc is None else _text_of(rc, f"{bf}.content")
            if b.get("is_error"):
                text = "Error: " + text
            results.append({"role": "tool", "tool_call_id": b["tool_use_id"], "content": text})
        else:
            raise AnthropicError(bf, f"unsupported content block type {t!r} in a {role} message")
    out = list(results)  # tool results answer the previous assistant turn: they come first
    if texts or calls or thinking:
        msg = {"role": role, "content": "\n".join(texts) if len(texts) > 1 else (texts[0] if texts else "")}
        if calls:
            msg["tool_calls"] = calls
        if thinking:
            msg["reasoning_content"] = "".join(thinking)
        out.append(msg)
    return out


def _convert_tools(tools) -> list:
    if not isinstance(tools, list):
        raise AnthropicError("tools", "must be an array")
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict):
            raise AnthropicError(f"tools[{i}]", "must be an object")
        if t.get("type") not in (None, "custom"):
            raise AnthropicError(f"tools[{i}].type", f"server tool {t.get('type')!r} is not supported")
        if not isinstance(t.get("name"), str) or not t["name"]:
            raise AnthropicError(f"tools[{i}].name", "must be a non-empty string")
        schema = t.get("input_schema", {"type": "object"})
        if not isinstance(schema, dict):
            raise AnthropicError(f"tools[{i}].input_schema", "must be a JSON schema object")
        fn = {"name": t["name"], "parameters": schema}
        if t.get("description") is not None:
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out


def _convert_tool_choice(tc, chat: dict):
    if not isinstance(tc, dict):
        raise AnthropicError("tool_choice", "must be an object")
    t = tc.get("type")
    if t == "auto":
        chat["tool_choice"] = "auto"
    elif t == "any":
        chat["tool_choice"] = "required"
    elif t == "none":
        chat["tool_choice"] = "none"
    elif t == "tool":
        if not isinstance(tc.get("name"), str):
            raise AnthropicError("tool_choice.name", "must be a string")
        chat["tool_choice"] = {"type": "function", "function": {"name": tc["name"]}}
    else:
        raise AnthropicError("tool_choice.type", f"must be auto, any, tool or none, got {t!r}")
    if "disable_parallel_tool_use" in tc:
        if not isinstance(tc["disable_parallel_tool_use"], bool):
            raise AnthropicError("tool_choice.disable_parallel_tool_use", "must be a boolean")
        chat["parallel_tool_calls"] = not tc["disable_parallel_tool_use"]


def messages_to_chat(body, count_tokens: bool = False) -> dict:
    """A Messages request body -> the equivalent chat-completions body."""
    if not isinstance(body, dict):
        raise AnthropicError("", "request body must be a JSON object")
    unknown = sorted(set(body) - REQUEST_FIELDS)
    if unknown:
        raise AnthropicError(unknown[0], "unsupported field" + (f" (also: {', '.join(unknown[1:])})"
                                                                if len(unknown) > 1 else ""))
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise AnthropicError("messages", "is required and must be a non-empty array")
    chat: dict = {"messages": []}
    if body.get("system") is not None:
        chat["messages"].append({"role": "system", "content": _text_of(body["system"], "system")})
    for i, m in enumerate(msgs):
        chat["messages"].extend(_convert_message(i, m))
    if not count_tokens:
        mt = body.get("max_tokens", DEFAULT_MAX_TOKENS)
        if not isinstance(mt, int) or isinstance(mt, bool) or mt < 1:
            raise AnthropicError("max_tokens", f"must be an integer >= 1, got {mt!r}")
        chat["max_tokens"] = mt
    if "stop_sequences" in body:
        ss = body["stop_sequences"]
        if not isinstance(ss, list) or not all(isinstance(s, str) for s in ss):
            raise AnthropicError("stop_sequences", "must be an array of strings")
        chat["stop"] = ss
    for k, lo, hi in (("temperature", 0.0, 2.0), ("top_p", 0.0, 1.0)):
        if body.get(k) is not None:
            v = body[k]
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not lo <= v <= hi:
                raise AnthropicError(k, f"must be a number in [{lo}, {hi}], got {v!r}")
            chat[k] = v
    if body.get("top_k") is not None:
        if not isinstance(body["top_k"], int) or isinstance(body["top_k"], bool) or body["top_k"] < 0:
            raise AnthropicError("top_k", "must be an integer >= 0")
        chat["top_k"] = body["top_k"]
    if body.get("tools") is not None:
        chat["tools"] = _convert_tools(body["tools"])
    if body.get("tool_choice") is not None:
        _convert_tool_choice(body["tool_choice"], chat)
    if "stream" in body and not count_tokens:
        if not isinstance(body["stream"], bool):
            raise AnthropicError("stream", "must be a boolean")
        chat["stream"] = body["stream"]
    kwargs = dict(body.get("chat_template_kwargs") or {})
    th = body.get("thinking")
    if th is not None:
        if not isinstance(th, dict) or th.get("type") not in ("enabled", "disabled", "adaptive"):
            raise AnthropicError("thinking.type", "must be 'enabled', 'disabled' or 'adaptive'")
        kwargs["enable_thinking"] = th["type"] != "disabled"
        if th["type"] == "enabled":
            bt = th.get("budget_tokens")
            if not isinstance(bt, int) or isinstance(bt, bool) or bt < 1:
                raise AnthropicError("thinking.budget_tokens", f"must be an integer >= 1, got {bt!r}")
            if not count_tokens and bt >= chat["max_tokens"]:
                raise AnthropicError("thinking.budget_tokens", "must be less than max_tokens")
            chat["thinking_budget_tokens"] = bt
    if kwargs:
        chat["chat_template_kwargs"] = kwargs
    md = body.get("metadata")
    if md is not None:
        if not isinstance(md, dict) or set(md) - {"user_id"}:
            raise AnthropicError("metadata", "only 'user_id' is accepted")
        # informational, as in llama-server (__metadata_user_id): kept for logs, no effect on output
        chat["__metadata_user_id"] = md.get("user_id")
    return chat


def stop_reason(stop: str, n_calls: int) -> str:
    if stop == "limit":
        return "max_tokens"
    if stop == "word":
        return "stop_sequence"
    return "tool_use" if n_calls else "end_turn"


def _usage(n_prompt: int, n_cached: int, n_gen: int) -> dict:
    return {"input_tokens": max(0, n_prompt - n_cached), "output_tokens": n_gen,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": n_cached}


def _input_of(arguments: str) -> dict:
    try:
        v = json.loads(arguments) if arguments else {}
    except ValueError:
        return {}
    return v if isinstance(v, dict) else {}


def message_response(*, model: str, content: str, reasoning: str = "", tool_calls=(), stop: str = "eos",
                     stopping_word: str = "", n_prompt: int = 0, n_cached: int = 0, n_gen: int = 0,
                     msg_id: str | None = None) -> dict:
    """The Message for a finished generation (tool_calls in OpenAI form)."""
    blocks = []
    if reasoning:
        blocks.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    if content:
        blocks.append({"type": "text", "text": content})
    for c in tool_calls:
        fn = c["function"]
        blocks.append({"type": "tool_use", "id": c["id"], "name": fn["name"], "input": _input_of(fn["arguments"])})
    return {"id": msg_id or new_message_id(), "type": "message", "role": "assistant", "content": blocks,
            "model": model, "stop_reason": stop_reason(stop, len(tool_calls)),
            "stop_sequence": stopping_word if stop == "word" and stopping_word else None,
            "usage": _usage(n_prompt, n_cached, n_gen)}


def count_tokens_response(n_prompt: int) -> dict:
    return {"input_tokens": n_prompt}


def sse(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


class AnthropicStream:
    """Internal deltas -> [(event, data)]: message_start and ping first, one content block open at a
    time (thinking, text, tool_use in the order they come), message_delta + message_stop last."""

    def __init__(self, *, model: str, n_prompt: int = 0, n_cached: int = 0, msg_id: str | None = None):
        self.id = msg_id or new_message_id()
        self.model, self.n_prompt, self.n_cached = model, n_prompt, n_cached
        self._index = -1
        self._open = None  # ("thinking" | "text" | "tool", tool index)
        self._n_calls = 0

    def start(self) -> list:
        msg = {"id": self.id, "type": "message", "role": "assistant", "content": [], "model": self.model,
               "stop_reason": None, "stop_sequence": None, "usage": _usage(self.n_prompt, self.n_cached, 0)}
        return [("message_start", {"type": "message_start", "message": msg}), ("ping", {"type": "ping"})]

    def _close(self, out: list):
        if self._open is None:
            return
        if self._open[0] == "thinking":
            out.append(("content_block_delta", {"type": "content_block_delta", "index": self._index,
                                                "delta": {"type": "signature_delta", "signature": ""}}))
        out.append(("content_block_stop", {"type": "content_block_stop", "index": self._index}))
        self._open = None

    def _begin(self, key, block, out: list):
        self._close(out)
        self._index += 1
        self._open = key
        out.append(("content_block_start", {"type": "content_block_start", "index": self._index,
                                            "content_block": block}))

    def _delta(self, delta: dict, out: list):
        out.append(("content_block_delta", {"type": "content_block_delta", "index": self._index, "delta": delta}))

    def feed(self, ev) -> list:
        out: list = []
        kind = ev[0]
        if kind == "reasoning" and ev[1]:
            if self._open != ("thinking", None):
                self._begin(("thinking", None), {"type": "thinking", "thinking": "", "signature": ""}, out)
            self._delta({"type": "thinking_delta", "thinking": ev[1]}, out)
        elif kind == "content" and ev[1]:
            if self._open != ("text", None):
                self._begin(("text", None), {"type": "text", "text": ""}, out)
            self._delta({"type": "text_delta", "text": ev[1]}, out)
        elif kind == "tool_call":
            _, idx, cid, name, frag = ev
            if self._open != ("tool", idx):
                self._begin(("tool", idx), {"type": "tool_use", "id": cid, "name": name, "input": {}}, out)
                self._n_calls += 1
            if frag:
                self._delta({"type": "input_json_delta", "partial_json": frag}, out)
        return out

    def finish(self, stop: str, n_gen: int, stopping_word: str = "") -> list:
        out: list = []
        self._close(out)
        out.append(("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": stop_reason(stop, self._n_calls),
                                                "stop_sequence": stopping_word if stop == "word" and stopping_word
                                                else None},
                                      "usage": {"output_tokens": n_gen}}))
        out.append(("message_stop", {"type": "message_stop"}))
        return out

    def error(self, message: str, kind: str = "api_error") -> list:
        """An error after the stream started (llama-server sends `event: error`)."""
        return [("error", {"type": "error", "error": {"type": kind, "message": message}})]


def stream_events(deltas, *, model: str, stop: str, n_gen: int, stopping_word: str = "", n_prompt: int = 0,
                  n_cached: int = 0, msg_id: str | None = None):
    """Generator form over a finished or live iterable of deltas (stop/n_gen known at the end:
    pass callables to read them late)."""
    st = AnthropicStream(model=model, n_prompt=n_prompt, n_cached=n_cached, msg_id=msg_id)
    yield from st.start()
    for ev in deltas:
        yield from st.feed(ev)
    yield from st.finish(stop() if callable(stop) else stop, n_gen() if callable(n_gen) else n_gen,
                         stopping_word() if callable(stopping_word) else stopping_word)
