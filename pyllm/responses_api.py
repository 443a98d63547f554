"""OpenAI's Responses API as llama-server serves it (/v1/responses): the body converted to a chat request (input
items -> messages, instructions -> a system message, function tools, max_output_tokens, reasoning.effort), and
the chat output (content / reasoning / tool calls, pyllm.chat_output) shaped back as a `response` object or its
SSE events (response.created ... response.completed, no [DONE])."""
from __future__ import annotations

import json
import random
import string
import time


class ResponsesError(ValueError):
    """A bad Responses request (the server answers 400 with the message)."""


def _rid(prefix: str) -> str:
    return prefix + "".join(random.choices(string.ascii_letters + string.digits, k=32))


def _input_parts(content) -> list:
    parts = []
    for p in content:
        t = p.get("type", "") if isinstance(p, dict) else ""
        if t == "input_text":
            if "text" not in p:
                raise ResponsesError("'Input text' requires 'text'")
            parts.append({"type": "text", "text": p["text"]})
        elif t == "input_image":
            if "image_url" not in p:
                raise ResponsesError("'image_url' is required")
            parts.append({"type": "image_url", "image_url": {"url": p["image_url"]}})
        elif t == "input_file":
            raise ResponsesError("'input_file' is not supported")
        else:
            raise ResponsesError("'type' must be one of 'input_text', 'input_image', or 'input_file'")
    return parts


def _output_parts(content) -> list:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    parts = []
    for p in content if isinstance(content, list) else []:
        t = p.get("type", "") if isinstance(p, dict) else ""
        if t in ("output_text", "input_text"):
            if not isinstance(p.get("text"), str):
                raise ResponsesError("'Output text' requires 'text'")
            parts.append({"type": "text", "text": p["text"]})
        elif t == "refusal":
            if not isinstance(p.get("refusal"), str):
                raise ResponsesError("'Refusal' requires 'refusal'")
            parts.append({"type": "text", "text": p["refusal"]})
        else:
            raise ResponsesError("'type' must be one of 'output_text' or 'refusal'")
    return parts


def _messages(items) -> list:
    msgs: list = []
    for item in items:
        if not isinstance(item, dict):
            raise ResponsesError("Cannot determine type of 'item'")
        prev_asst = msgs[-1] if msgs and msgs[-1]["role"] == "assistant" else None
        role, typ = item.get("role"), item.get("type")
        content = item.get("content")
        if role in ("user", "system", "developer") and isinstance(content, (str, list)):
            parts = _input_parts([{"type": "input_text", "text": content}] if isinstance(content, str) else content)
            msgs.append({"role": "system" if role == "developer" else role, "content": parts})
        elif role == "assistant" and (typ == "message" or isinstance(content, str)):
            parts = _output_parts(content)
            if prev_asst is not None:
                prev_asst["content"] = list(prev_asst.get("content") or []) + parts
            else:
                msgs.append({"role": "assistant", "content": parts})
        elif typ == "function_call" and all(isinstance(item.get(k), str) for k in ("arguments", "call_id", "name")):
            call = {"type": "function", "id": item["call_id"],
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            if prev_asst is not None:
                prev_asst.setdefault("tool_calls", []).append(call)
            else:
                msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif typ == "function_call_output" and isinstance(item.get("call_id"), str) and \
                isinstance(item.get("output"), (str, list)):
            out = item["output"]
            if isinstance(out, list):
                out = _input_parts(out)
            msgs.append({"role": "tool", "tool_call_id": item["call_id"], "content": out})
        elif typ == "reasoning" and isinstance(item.get("summary"), list):
            c = item.get("content")
            if not isinstance(c, list) or not c or not isinstance(c[0], dict) or not isinstance(c[0].get("text"), str):
                raise ResponsesError("item['content'] must be a non-empty array of {text}")
            if prev_asst is not None:
                prev_asst["reasoning_content"] = c[0]["text"]
            else:
                msgs.append({"role": "assistant", "content": None, "reasoning_content": c[0]["text"]})
        else:
            raise ResponsesError("Cannot determine type of 'item'")
    return msgs


def responses_to_chat(body) -> dict:
    """A /v1/responses body -> a /v1/chat/completions body (the other fields pass through, as llama-server)."""
    if not isinstance(body, dict):
        raise ResponsesError("request body must be a JSON object")
    if "input" not in body:
        raise ResponsesError("'input' is required")
    if body.get("previous_response_id"):
        raise ResponsesError("pyllm does not support 'previous_response_id'")
    chat = {k: v for k, v in body.items() if k not in ("input", "instructions", "tools", "max_output_tokens",
                                                       "reasoning")}
    msgs = []
    if "instructions" in body:
        msgs.append({"role": "system", "content": body["instructions"] or ""})
    inp = body["input"]
    if isinstance(inp, str):
        msgs.append({"role": "user", "content": inp})
    elif isinstance(inp, list):
        msgs += _messages(inp)
    else:
        raise ResponsesError("'input' must be a string or array of objects")
    chat["messages"] = msgs
    if "tools" in body:
        if not isinstance(body["tools"], list):
            raise ResponsesError("'tools' must be an array of objects")
        tools = []
        for t in body["tools"]:
            if not isinstance(t, dict) or t.get("type") != "function":
                continue  # no chat equivalent (llama-server skips them with a warning)
            fn = {k: v for k, v in t.items() if k != "type"}
            fn.setdefault("strict", True)
            tools.append({"type": "function", "function": fn})
        if tools:
            chat["tools"] = tools
    if "max_output_tokens" in body:
        chat["max_tokens"] = body["max_output_tokens"]
    r = body.get("reasoning")
    if isinstance(r, dict) and "effort" in r:
        chat["reasoning_effort"] = r["effort"]
    return chat


def _usage(n_prompt: int, n_cached: int, n_gen: int) -> dict:
    return {"input_tokens": n_prompt, "output_tokens": n_gen, "total_tokens": n_prompt + n_gen,
            "input_tokens_details": {"cached_tokens": n_cached}}


def _call_item(call: dict, status: str = "completed") -> dict:
    cid = call["id"]
    return {"id": "fc_" + cid, "type": "function_call", "status": status, "arguments": call["function"]["arguments"],
            "call_id": cid, "name": call["function"]["name"]}


def _reasoning_item(rid: str, text: str) -> dict:
    return {"id": rid, "summary": [], "type": "reasoning", "content": [{"text": text, "type": "reasoning_text"}],
            "encrypted_content": "", "status": "completed"}


def _text_part(text: str) -> dict:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def _message_item(mid: str, text: str) -> dict:
    return {"content": [_text_part(text)], "id": mid, "role": "assistant", "status": "completed", "type": "message"}


def output_items(content: str, reasoning: str, tool_calls, rid: str, mid: str) -> list:
    out = []
    if reasoning:
        out.append(_reasoning_item(rid, reasoning))
    if content:
        out.append(_message_item(mid, content))
    out += [_call_item(c) for c in tool_calls or ()]
    return out


def response_object(*, resp_id: str, model: str, content: str, reasoning: str, tool_calls, n_prompt: int,
                    n_cached: int, n_gen: int) -> dict:
    t = int(time.time())
    return {"completed_at": t, "created_at": t, "id": resp_id, "model": model, "object": "response",
            "output": output_items(content, reasoning, tool_calls, _rid("rs_"), _rid("msg_")),
            "status": "completed", "usage": _usage(n_prompt, n_cached, n_gen)}


class ResponsesStream:
    """ChatOutput deltas -> [(event, data)]: response.created / in_progress, an output item per part as it
    starts (reasoning, message, function_call) with its deltas, the .done events and response.completed."""

    def __init__(self, *, model: str, resp_id: str | None = None):
        self.id = resp_id or _rid("resp_")
        self.model = model
        self.rid, self.mid = _rid("rs_"), _rid("msg_")
        self._started = set()
        self._calls: dict = {}  # tool-call index -> {"id", "function": {"name", "arguments"}}

    def _stub(self) -> dict:
        return {"id": self.id, "object": "response", "status": "in_progress"}

    def start(self) -> list:
        return [("response.created", {"type": "response.created", "response": self._stub()}),
                ("response.in_progress", {"type": "response.in_progress", "response": self._stub()})]

    def feed(self, ev) -> list:
        out = []
        kind = ev[0]
        if kind == "reasoning" and ev[1]:
            if "r" not in self._started:
                self._started.add("r")
                item = {**_reasoning_item(self.rid, ""), "content": [], "status": "in_progress"}
                out.append(("response.output_item.added", {"type": "response.output_item.added", "item": item}))
            out.append(("response.reasoning_text.delta", {"type": "response.reasoning_text.delta", "delta": ev[1],
                                                          "item_id": self.rid}))
        elif kind == "content" and ev[1]:
            if "c" not in self._started:
                self._started.add("c")
                item = {"content": [], "id": self.mid, "role": "assistant", "status": "in_progress", "type": "message"}
                out.append(("response.output_item.added", {"type": "response.output_item.added", "item": item}))
                out.append(("response.content_part.added", {"type": "response.content_part.added",
                                                            "item_id": self.mid,
                                                            "part": {"type": "output_text", "text": ""}}))
            out.append(("response.output_text.delta", {"type": "response.output_text.delta", "item_id": self.mid,
                                                       "delta": ev[1]}))
        elif kind == "tool_call":
            _, idx, cid, name, frag = ev
            if idx not in self._calls:
                self._calls[idx] = {"id": cid, "function": {"name": name, "arguments": ""}}
                item = _call_item(self._calls[idx], "in_progress")
                out.append(("response.output_item.added", {"type": "response.output_item.added", "item": item}))
            if frag:
                self._calls[idx]["function"]["arguments"] += frag
                out.append(("response.function_call_arguments.delta", {
                    "type": "response.function_call_arguments.delta", "delta": frag,
                    "item_id": "fc_" + self._calls[idx]["id"]}))
        return out

    def finish(self, *, content: str, reasoning: str, tool_calls, n_prompt: int, n_cached: int, n_gen: int,
               timings=None) -> list:
        out, output = [], []
        if reasoning:
            item = _reasoning_item(self.rid, reasoning)
            item.pop("status")
            out.append(("response.output_item.done", {"type": "response.output_item.done", "item": item}))
            output.append(item)
        if content:
            out.append(("response.output_text.done", {"type": "response.output_text.done", "item_id": self.mid,
                                                      "text": content}))
            out.append(("response.content_part.done", {"type": "response.content_part.done", "item_id": self.mid,
                                                       "part": _text_part(content)}))
            item = _message_item(self.mid, content)
            out.append(("response.output_item.done", {"type": "response.output_item.done", "item": item}))
            output.append(item)
        for c in tool_calls or ():
            item = _call_item(c)
            out.append(("response.output_item.done", {"type": "response.output_item.done", "item": item}))
            output.append(item)
        resp = {"id": self.id, "object": "response", "created_at": int(time.time()), "status": "completed",
                "model": self.model, "output": output, "usage": _usage(n_prompt, n_cached, n_gen)}
        done = {"type": "response.completed", "response": resp}
        if timings is not None:
            done["timings"] = timings
        out.append(("response.completed", done))
        return out

    def error(self, message: str) -> list:
        return [("error", {"type": "error", "error": {"type": "server_error", "message": message}})]


def sse(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"
