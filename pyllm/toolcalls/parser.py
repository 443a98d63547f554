"""Model output -> content + OpenAI tool calls, incrementally.

ToolCallParser.feed(delta) returns events; finish() flushes at the end of generation:
  ("content", text)
  ("tool_call", index, id, name, arguments_fragment)   id/name are set on a call's first event only

Content never contains call markup: text that could still become a trigger is held back until it
is resolved. A call's `arguments` is the concatenation of its fragments, so a stream and a
non-stream response (parse_tool_calls: the same parser run over the whole text) always agree.
Qwen XML parameter values are typed by the tool's JSON schema (a string parameter streams as it
is generated; other types are emitted once complete, as JSON). A call still open at the end is
closed (streams cannot take text back); parse_tool_calls returns such unfinished markup as content.
"""
from __future__ import annotations

import json
import re
import secrets
import string

from .formats import ToolFormat
from ..detok import partial_stop_len

_ALNUM = string.ascii_letters + string.digits


def gen_call_id(n: int = 32) -> str:
    return "".join(secrets.choice(_ALNUM) for _ in range(n))


def _partial_suffix(text: str, tags) -> int:
    """Length of the longest suffix of text that is a proper prefix of one of tags."""
    return max((partial_stop_len(text, t) for t in tags), default=0)


def _param_types(tools, fn_name: str, param: str) -> set | None:
    """JSON types the schema allows for a parameter (None: no schema for it)."""
    for t in tools or ():
        f = t.get("function", {})
        if f.get("name") == fn_name:
            s = ((f.get("parameters") or {}).get("properties") or {}).get(param)
            if not isinstance(s, dict):
                return None
            types = set()
            for sub in [s] + list(s.get("anyOf", [])) + list(s.get("oneOf", [])):
                t_ = sub.get("type")
                types.update(t_ if isinstance(t_, list) else [t_] if t_ else [])
                if "enum" in sub or "const" in sub:
                    vals = sub.get("enum", [sub.get("const")])
                    types.update({"string" if isinstance(v, str) else "other" for v in vals})
            return types or None
    return None


def typed_value(raw: str, types: set | None):
    """An XML parameter's text as the JSON value its schema asks for (strings stay strings)."""
    if types is None or types == {"string"}:
        return raw
    try:
        v = json.loads(raw)
    except ValueError:
        return raw
    kind = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object",
            type(None): "null"}[type(v)]
    if kind in types or (kind == "integer" and "number" in types) or "other" in types:
        return v
    return raw


class _JsonScan:
    """Incremental scan of one JSON object {"name": .., "arguments"|"parameters": .., "id": ..}:
    finds the name, streams the raw text of the arguments value, reports the end of the object."""

    ARG_KEYS = ("arguments", "parameters")

    def __init__(self):
        self.text = ""
        self.pos = 0
        self.depth = 0
        self.in_str = self.esc = False
        self.key = None          # top-level key whose value is being read
        self.key_buf = None      # chars of a top-level key string being read
        self.str_buf = None      # chars of a top-level string value (name, id)
        self.expect_key = True
        self.name = self.id = None
        self.args_start = self.args_end = None
        self.args_is_str = False
        self.done = False

    def feed(self, s: str) -> None:
        self.text += s
        t = self.text
        while self.pos < len(t) and not self.done:
            c = t[self.pos]
            if self.in_str:
                if self.esc:
                    self.esc = False
                elif c == "\\":
                    self.esc = True
                elif c == '"':
                    self.in_str = False
                    if self.key_buf is not None:
                        self.key = json.loads(t[self.key_buf:self.pos + 1])
                        self.key_buf = None
                    elif self.str_buf is not None:
                        val = json.loads(t[self.str_buf:self.pos + 1])
                        if self.key == "name":
                            self.name = val
                        elif self.key == "id":
                            self.id = val
                        elif self.key in self.ARG_KEYS:
                            self.args_end = self.pos + 1
                        self.str_buf = None
            elif c == '"':
                self.in_str = True
                if self.depth == 1 and self.expect_key:
                    self.key_buf = self.pos
                elif self.depth == 1:
                    self.str_buf = self.pos
                    if self.key in self.ARG_KEYS and self.args_start is None:
                        self.args_start, self.args_is_str = self.pos, True
            elif c in "{[":
                if self.depth == 1 and not self.expect_key and self.key in self.ARG_KEYS \
                        and self.args_start is None:
                    self.args_start = self.pos
                self.depth += 1
            elif c in "}]":
                self.depth -= 1
                if self.depth == 1 and self.args_start is not None and self.args_end is None \
                        and self.key in self.ARG_KEYS:
                    self.args_end = self.pos + 1
                if self.depth == 0:
                    self.done = True
            elif self.depth == 1 and c == ":":
                self.expect_key = False
            elif self.depth == 1 and c == ",":
                self.expect_key, self.key = True, None
            self.pos += 1

    def rest(self) -> str:
        return self.text[self.pos:]

    def args_text(self) -> str:
        """The arguments' raw text seen so far ('' before it starts)."""
        if self.args_start is None:
            return ""
        return self.text[self.args_start:self.args_end if self.args_end is not None else self.pos]


class ToolCallParser:
    def __init__(self, fmt: ToolFormat, tools=None):
        self.fmt = fmt
        self.tools = tools or []
        self.calls: list[dict] = []   # {"id", "name", "arguments", "done"}
        self._buf = ""
        self._mode = "start" if fmt.name in ("llama3", "generic") else "text"
        self._sub = None              # state of the call being parsed
        self._emitted_content = False
        self._emitted_after_call = False

    # ---- public -------------------------------------------------------------------------------
    def feed(self, text: str) -> list:
        self._buf += text
        out: list = []
        while self._step(out, final=False):
            pass
        return out

    def finish(self) -> list:
        out: list = []
        while self._step(out, final=True):
            pass
        if self._mode == "call":
            self._close_call(out)  # unterminated call (max_tokens): close what we have
        elif self._buf:
            self._content(self._buf, out)
        self._buf = ""
        return out

    # ---- helpers ------------------------------------------------------------------------------
    def _content(self, s: str, out: list):
        if s:
            out.append(("content", s))
            self._emitted_content = True
            self._emitted_after_call = bool(self.calls)

    def _open_call(self, name: str, out: list, call_id: str | None = None):
        call = {"id": call_id or gen_call_id(self.fmt.id_len), "name": name, "arguments": "", "done": False}
        self._emitted_after_call = False
        self.calls.append(call)
        out.append(("tool_call", len(self.calls) - 1, call["id"], name, ""))

    def _args(self, frag: str, out: list):
        if frag:
            c = self.calls[-1]
            c["arguments"] += frag
            out.append(("tool_call", len(self.calls) - 1, None, None, frag))

    def _close_call(self, out: list, ok: bool = False):
        if self._sub and self._sub.get("kind") == "xml" and self.calls and not self.calls[-1]["done"]:
            st = self._sub
            if st.get("val_open"):
                self._args('"', out)
            if st.get("opened_args"):
                self._args("}", out)
        if self.calls and not self.calls[-1]["done"]:
            self.calls[-1]["done"] = ok
            self.calls[-1]["closed"] = True
        self._sub, self._mode = None, "text"

    # ---- the state machine --------------------------------------------------------------------
    def _step(self, out: list, final: bool) -> bool:
        """Consume what can be consumed; True if progress was made and another step may help."""
        if self._mode == "start":
            return self._step_start(out, final)
        if self._mode == "text":
            return self._step_text(out, final)
        kind = self._sub["kind"]
        return {"xml": self._step_xml, "json": self._step_json, "mistral_args": self._step_mistral_args,
                "python": self._step_python}[kind](out, final)

    def _step_start(self, out, final) -> bool:
        s = self._buf.lstrip()
        if self.fmt.name == "generic":
            if not final:
                return False  # the whole reply is one JSON value: parse it at the end
            self._buf = ""
            self._parse_generic(s, out)
            return False
        # llama3: a call is a JSON object at the very start of the reply
        m = re.match(r'\{\s*"(name|type)"', s)
        if m:
            self._buf = s
            self._begin_json(out, wrapper=None)
            return True
        if not final and (not s or re.fullmatch(r'\{\s*("(n(a(m(e)?)?)?|t(y(p(e)?)?)?)?)?', s)):
            return False
        self._mode = "text"
        return True

    def _step_text(self, out, final) -> bool:
        if self.calls and not self._emitted_after_call:
            s = self._buf.lstrip()  # whitespace between or after calls is not content
            if not s:
                self._buf = ""
                return False
            self._buf = s
        trig = self.fmt.triggers
        best = None
        for tg in trig:
            i = self._buf.find(tg)
            if i >= 0 and (best is None or i < best[0]):
                best = (i, tg)
        if best is None:
            keep = 0 if final else _partial_suffix(self._buf, trig)
            self._content(self._buf[:len(self._buf) - keep], out)
            self._buf = self._buf[len(self._buf) - keep:]
            return False
        i, tg = best
        self._content(self._buf[:i], out)
        self._buf = self._buf[i + len(tg):]
        self._mode = "call"
        name = self.fmt.name
        if name == "qwen3-xml":
            self._sub = {"kind": "xml", "state": "fn"}
        elif name == "hermes":
            self._sub = {"kind": "json", "wrapper": "</tool_call>", "state": "open"}
        elif name == "mistral":
            self._sub = {"kind": "json", "wrapper": "array", "state": "open"}
        elif name == "mistral-args":
            self._sub = {"kind": "mistral_args", "state": "name"}
        elif name == "llama3":
            self._sub = {"kind": "python"}
        return True

    # Qwen XML ----------------------------------------------------------------------------------
    def _step_xml(self, out, final) -> bool:
        st, b = self._sub, self._buf
        if st["state"] == "fn":
            s = b.lstrip()
            if s.startswith("<function="):
                j = s.find(">")
                if j < 0:
                    return self._wait_or_fail(out, final)
                self._open_call(s[len("<function="):j].strip(), out)
                self._buf, st["state"], st["n"] = s[j + 1:], "params", 0
                return True
            return self._wait_or_fail(out, final, "<function=".startswith(s))
        if st["state"] == "params":
            s = b.lstrip()
            if s.startswith("</function>"):
                self._args("{}" if not st["n"] else "}", out)
                self._buf, st["state"] = s[len("</function>"):], "close"
                return True
            if s.startswith("<parameter="):
                j = s.find(">")
                if j < 0:
                    return self._wait_or_fail(out, final)
                pname = s[len("<parameter="):j].strip()
                st["types"] = _param_types(self.tools, self.calls[-1]["name"], pname)
                st["stream_str"] = st["types"] is None or st["types"] == {"string"}
                self._args(("{" if not st["n"] else ", ") + json.dumps(pname, ensure_ascii=False) + ": ", out)
                st["opened_args"] = True
                st["n"] += 1
                self._buf, st["state"], st["lead"], st["val"] = s[j + 1:], "value", True, ""
                return True
            ok = "</function>".startswith(s) or "<parameter=".startswith(s)
            return self._wait_or_fail(out, final, ok)
        if st["state"] == "value":
            if st["lead"]:
                if not b:
                    return False
                if b[0] == "\n":
                    b = b[1:]
                st["lead"] = False
                if st["stream_str"]:
                    self._args('"', out)
                    st["val_open"] = True
            end = "</parameter>"
            i = b.find(end)
            if i < 0:
                keep = _partial_suffix(b, ("\n" + end,)) if not final else 0
                if b.endswith("\n") and not final:
                    keep = max(keep, 1)
                chunk, self._buf = b[:len(b) - keep], b[len(b) - keep:]
                if st["stream_str"]:
                    self._args(json.dumps(chunk, ensure_ascii=False)[1:-1], out)
                else:
                    st["val"] += chunk
                return False
            chunk = b[:i]
            if chunk.endswith("\n"):
                chunk = chunk[:-1]
            if st["stream_str"]:
                self._args(json.dumps(chunk, ensure_ascii=False)[1:-1] + '"', out)
                st["val_open"] = False
            else:
                v = typed_value(st["val"] + chunk, st["types"])
                self._args(json.dumps(v, ensure_ascii=False), out)
            self._buf, st["state"] = b[i + len(end):], "params"
            return True
        # close: </tool_call>
        s = b.lstrip()
        if s.startswith("</tool_call>"):
            self.calls[-1]["done"] = True
            self._buf = s[len("</tool_call>"):]
            self._sub, self._mode = None, "text"
            return True
        if not final and "</tool_call>".startswith(s):
            return False
        self.calls[-1]["done"] = True  # tolerate a missing </tool_call>
        self._sub, self._mode = None, "text"
        return True

    def _wait_or_fail(self, out, final, maybe: bool = True) -> bool:
        if maybe and not final:
            return False
        self._close_call(out)  # malformed: close the call, the rest is content
        return True

    # JSON objects (hermes, mistral array, llama3) -----------------------------------------------
    def _begin_json(self, out, wrapper):
        self._mode = "call"
        self._sub = {"kind": "json", "wrapper": wrapper, "state": "obj", "scan": _JsonScan(), "sent": 0,
                     "opened": False}

    def _step_json(self, out, final) -> bool:
        st = self._sub
        if st["state"] == "open":
            s = self._buf.lstrip()
            if not s:
                return self._wait_or_fail(out, final)
            if st["wrapper"] == "array":
                if s[0] != "[":
                    return self._wait_or_fail(out, final, False)
                s = s[1:]
                st["wrapper"] = "array-item"
            self._buf = s
            st.update(state="obj", scan=_JsonScan(), sent=0, opened=False)
            return True
        if st["state"] == "obj":
            s = self._buf.lstrip() if st["scan"].pos == 0 else self._buf
            if st["scan"].pos == 0:
                if not s:
                    return self._wait_or_fail(out, final)
                if s[0] != "{":
                    return self._wait_or_fail(out, final, False)
            sc = st["scan"]
            sc.feed(s)
            self._buf = ""
            if sc.name is not None and not st["opened"]:
                self._open_call(sc.name, out, sc.id if isinstance(sc.id, str) else None)
                st["opened"] = True
            if st["opened"] and not sc.args_is_str:
                a = sc.args_text()
                self._args(a[st["sent"]:], out)
                st["sent"] = len(a)
            if not sc.done:
                if final:
                    self._close_call(out)
                return False
            if not st["opened"]:  # an object without a name: not a call
                self._content(sc.text, out)
                self._sub, self._mode = None, "text"
                return True
            if sc.args_is_str:
                self._args(json.loads(sc.args_text()), out)
            elif sc.args_start is None:
                self._args("{}", out)
            self.calls[-1]["done"] = True
            self._buf = sc.rest()
            st["state"] = "after"
            return True
        # after an object: the wrapper's closing / separator
        s = self._buf.lstrip()
        w = st["wrapper"]
        if w == "</tool_call>":
            if s.startswith(w):
                self._buf = s[len(w):]
            elif not final and w.startswith(s):
                return False
        elif w == "array-item":
            if s.startswith(","):
                self._buf = s[1:]
                st.update(state="obj", scan=_JsonScan(), sent=0, opened=False)
                return True
            if s.startswith("]"):
                self._buf = s[1:]
            elif not s and not final:
                return False
        else:  # llama3: more calls may follow, separated by ';' or whitespace
            s2 = s.lstrip(";").lstrip()
            if not final and not s2:
                return False
            if s2.startswith("{"):
                self._buf = s2
                self._begin_json(out, None)
                return True
        self._sub, self._mode = None, "text"
        return True

    # [TOOL_CALLS]name[CALL_ID]id[ARGS]{...} ----------------------------------------------------
    def _step_mistral_args(self, out, final) -> bool:
        st, b = self._sub, self._buf
        if st["state"] == "name":
            j = b.find("[ARGS]")
            if j < 0:
                return self._wait_or_fail(out, final)
            head = b[:j]
            name, _, cid = head.partition("[CALL_ID]")
            self._open_call(name.strip(), out, cid.strip() or None)
            self._buf = b[j + len("[ARGS]"):]
            st.update(state="args", scan=_JsonScan(), sent=0)
            return True
        # args: a bare JSON object; reuse the scanner by wrapping it as {"arguments": ...}
        sc = st["scan"]
        if sc.pos == 0:
            sc.feed('{"name":"","arguments":')
        sc.feed(b)
        self._buf = ""
        a = sc.args_text()
        self._args(a[st["sent"]:], out)
        st["sent"] = len(a)
        if sc.args_end is None:
            if final:
                self._close_call(out)
            return False
        self.calls[-1]["done"] = True
        self._buf = sc.text[sc.args_end:]
        self._sub, self._mode = None, "text"
        return True

    # <|python_tag|> (Llama 3.1): a JSON call or a built-in `tool.call(k="v", ...)` ---------------
    def _step_python(self, out, final) -> bool:
        s = self._buf.lstrip()
        if s.startswith("{"):
            self._buf = s
            self._begin_json(out, None)
            return True
        if not final:
            return False
        m = re.fullmatch(r"\s*([\w.]+?)(?:\.call)?\((.*)\)\s*", self._buf, re.S)
        if not m:
            self._close_call(out)
            self._content(self._buf, out)
            self._buf = ""
            return False
        args = {}
        for k, v in re.findall(r'(\w+)\s*=\s*("(?:[^"\\]|\\.)*"|[^,]+)', m.group(2)):
            try:
                args[k] = json.loads(v)
            except ValueError:
                args[k] = v.strip()
        self._open_call(m.group(1), out)
        self._args(json.dumps(args, ensure_ascii=False), out)
        self.calls[-1]["done"] = True
        self._buf, self._sub, self._mode = "", None, "text"
        return False

    # generic: {"tool_calls": [...]} | {"tool_call": {...}} | {"response": "..."} ---------------
    def _parse_generic(self, s: str, out):
        try:
            obj = json.loads(s)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("response"), str):
            self._content(obj["response"], out)
            return
        calls = None
        if isinstance(obj, dict):
            calls = obj.get("tool_calls") if isinstance(obj.get("tool_calls"), list) else (
                [obj["tool_call"]] if isinstance(obj.get("tool_call"), dict) else None)
        if not calls or not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls):
            self._content(s, out)
            return
        for c in calls:
            self._open_call(c["name"], out, c.get("id") if isinstance(c.get("id"), str) else None)
            args = c.get("arguments", c.get("parameters", {}))
            self._args(args if isinstance(args, str) else json.dumps(args, ensure_ascii=False), out)
            self.calls[-1]["done"] = True


def parse_tool_calls(text: str, fmt: ToolFormat, tools=None) -> tuple[str, list]:
    """Non-stream: (content, [OpenAI tool_call objects]). Unfinished call markup stays content."""
    p = ToolCallParser(fmt, tools)
    events = p.feed(text) + p.finish()
    content = "".join(e[1] for e in events if e[0] == "content")
    calls = [c for c in p.calls if c["done"]]
    if len(calls) < len(p.calls):  # a call cut short: give the whole text back as content
        return text, []
    return content, [to_openai(c) for c in calls]


def to_openai(call: dict) -> dict:
    return {"type": "function", "function": {"name": call["name"], "arguments": call["arguments"]},
            "id": call["id"]}


def event_to_delta(ev) -> dict:
    """One parser event as an OpenAI chat.completion.chunk `delta`."""
    if ev[0] == "content":
        return {"content": ev[1]}
    if ev[0] == "reasoning":
        return {"reasoning_content": ev[1]}
    _, idx, cid, name, args = ev
    tc: dict = {"index": idx}
    if cid is not None:
        tc["id"], tc["type"] = cid, "function"
    fn = {}
    if name is not None:
        fn["name"] = name
    if args or name is not None:
        fn["arguments"] = args
    tc["function"] = fn
    return {"tool_calls": [tc]}
