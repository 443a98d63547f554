"""Chat templates: tokenizer.chat_template rendered with jinja2 the way HF transformers and
llama.cpp's --jinja mode do (sandboxed, trim_blocks/lstrip_blocks, loopcontrols, raise_exception,
strftime_now, HF's tojson), plus the built-in names llama-server accepts for --chat-template."""
from __future__ import annotations

import datetime as _dt
import json
from functools import lru_cache
from typing import Any

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

CHAT_TEMPLATE_KEY = "tokenizer.chat_template"

# Built-in templates selectable by name (--chat-template NAME). Each renders exactly what
# llama.cpp's llm_chat_apply_template produces for that name. THE list of names lives here.
BUILTIN_TEMPLATES: dict[str, str] = {
    "chatml": (
        "{%- for message in messages -%}"
        "{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"
    ),
    # no system support: a system message is put in the turn followed by a newline
    "llama2": (
        "{{- '[INST] ' -}}{%- set ns = namespace(inside=true) -%}"
        "{%- for message in messages -%}"
        "{%- if not ns.inside -%}{{- '[INST] ' -}}{%- set ns.inside = true -%}{%- endif -%}"
        "{%- if message.role == 'system' -%}{{- message.content + '\n' -}}"
        "{%- elif message.role == 'user' -%}{{- message.content + ' [/INST]' -}}"
        "{%- else -%}{{- message.content + '</s>' -}}{%- set ns.inside = false -%}{%- endif -%}"
        "{%- endfor -%}"
    ),
    "llama3": (
        "{%- for message in messages -%}"
        "{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\n\n' + message.content | trim + '<|eot_id|>' -}}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}{%- endif -%}"
    ),
    # system text is merged into the next user turn; assistant is called "model"
    "gemma": (
        "{%- set ns = namespace(system='') -%}"
        "{%- for message in messages -%}"
        "{%- if message.role == 'system' -%}{%- set ns.system = ns.system + message.content | trim -%}"
        "{%- else -%}"
        "{%- set role = 'model' if message.role == 'assistant' else message.role -%}"
        "{{- '<start_of_turn>' + role + '\n' -}}"
        "{%- if ns.system and role != 'model' -%}{{- ns.system + '\n\n' -}}{%- set ns.system = '' -%}{%- endif -%}"
        "{{- message.content | trim + '<end_of_turn>\n' -}}"
        "{%- endif -%}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\n' -}}{%- endif -%}"
    ),
    "phi3": (
        "{%- for message in messages -%}"
        "{{- '<|' + message.role + '|>\n' + message.content + '<|end|>\n' -}}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%}"
    ),
    "mistral-v7": (
        "{%- for message in messages -%}"
        "{%- if message.role == 'system' -%}{{- '[SYSTEM_PROMPT] ' + message.content + '[/SYSTEM_PROMPT]' -}}"
        "{%- elif message.role == 'user' -%}{{- '[INST] ' + message.content + '[/INST]' -}}"
        "{%- else -%}{{- ' ' + message.content + '</s>' -}}{%- endif -%}"
        "{%- endfor -%}"
    ),
    "zephyr": (
        "{%- for message in messages -%}"
        "{{- '<|' + message.role + '|>\n' + message.content + '<|endoftext|>\n' -}}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%}"
    ),
}
DEFAULT_TEMPLATE_NAME = "chatml"  # llama.cpp's fallback when a model has no template


def builtin_template_names() -> list[str]:
    return sorted(BUILTIN_TEMPLATES)


def template_from_gguf(metadata: Any) -> str | None:
    """tokenizer.chat_template from GGUF metadata (a dict, or anything with .get like GGUFFile)."""
    tmpl = metadata.get(CHAT_TEMPLATE_KEY) if metadata is not None else None
    return tmpl if isinstance(tmpl, str) and tmpl else None


def resolve_chat_template(name_or_source: str | None = None, metadata: Any = None) -> str:
    """The template llama-server would use: --chat-template NAME (built-in) or a jinja source;
    else the model's tokenizer.chat_template; else ChatML."""
    if name_or_source:
        return BUILTIN_TEMPLATES.get(name_or_source, name_or_source)
    return template_from_gguf(metadata) or BUILTIN_TEMPLATES[DEFAULT_TEMPLATE_NAME]


def _raise_exception(message: str):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # HF transformers' tojson: unlike jinja's builtin, no HTML escaping and no key sorting
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return _dt.datetime.now().strftime(fmt)


@lru_cache(maxsize=32)
def _compile(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(template)


def _flatten_content(content):
    """[{type:text,text}, ...] -> the texts joined by newlines (llama.cpp's typed-content join)."""
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                texts.append(part.get("text", ""))
            elif isinstance(part, str):
                texts.append(part)
        return "\n".join(texts)
    return content


def apply_chat_template(template: str, messages: list[dict], add_generation_prompt: bool = True,
                        bos_token: str = "", eos_token: str = "", tools=None, **extra) -> str:
    """Render a chat template. Raises ValueError on a syntax error or a template that raises."""
    if template in BUILTIN_TEMPLATES:
        template = BUILTIN_TEMPLATES[template]
    msgs = []
    for m in messages:
        m = dict(m)
        if "content" in m:
            m["content"] = _flatten_content(m["content"])
        msgs.append(m)
    ctx = dict(extra)
    ctx.update(messages=msgs, add_generation_prompt=add_generation_prompt, bos_token=bos_token,
               eos_token=eos_token)
    if tools is not None:
        ctx["tools"] = tools
    try:
        return _compile(template).render(**ctx)
    except jinja2.exceptions.TemplateSyntaxError as e:
        raise ValueError(f"chat template syntax error (line {e.lineno}): {e.message}") from e
    except (jinja2.exceptions.TemplateError, TypeError, KeyError, AttributeError, IndexError) as e:
        raise ValueError(f"chat template error: {e}") from e


def normalize_messages(messages) -> list:
    """OpenAI chat messages -> what templates render: content parts joined, None content as "".
    ValueError (llama-server's messages) for a malformed list; image/audio parts are not supported."""
    if not isinstance(messages, list):
        raise ValueError("'messages' is required and must be an array")
    norm = []
    for m in messages:
        if not isinstance(m, dict) or "role" not in m:
            raise ValueError("Missing 'role' in message")
        role = m["role"]
        if "content" not in m and role != "assistant" and not m.get("tool_calls"):
            raise ValueError("Missing 'content' (ref: https://github.com/ggml-org/llama.cpp/issues/8367)")
        c = m.get("content")
        if isinstance(c, list):
            parts = []
            for part in c:
                if isinstance(part, dict) and part.get("type") == "text":
                    parts.append(str(part.get("text", "")))
                else:
                    raise ValueError("unsupported content part type (pyllm has no multimodal support)")
            c = "\n".join(parts)
        elif c is None:
            c = ""
        elif not isinstance(c, str):
            raise ValueError("Invalid 'content' type")
        mm = dict(m)
        mm["content"] = c
        norm.append(mm)
    return norm


# ---- tools, tool calls and reasoning in templates (llama-server --jinja) ----------------------
# What a template can render is probed by rendering small conversations and looking for a marker
# in the output, as llama.cpp's jinja caps do; messages are then adapted to it (the workarounds
# of common/chat.cpp: developer -> system, system merged into the first user turn, null content
# -> "", tool-call arguments as objects, and polyfills for templates without tool support).

_NEEDLE = "needle_7c1f"


def _probe(template: str, messages, **ctx) -> str:
    try:
        return apply_chat_template(template, messages, add_generation_prompt=False, **ctx)
    except ValueError:
        return ""


def _tool_call_msg(args, name="tool_" + _NEEDLE, n=1):
    calls = [{"id": f"call{i:05d}", "type": "function", "function": {"name": f"{name}{i or ''}", "arguments": args}}
             for i in range(n)]
    return {"role": "assistant", "content": "", "tool_calls": calls}


@lru_cache(maxsize=32)
def template_caps(template: str) -> dict:
    """llama-server's chat_template_caps (/props) for a jinja source."""
    user = {"role": "user", "content": "Hey"}
    tools = [{"type": "function", "function": {"name": "tool_" + _NEEDLE, "description": "d",
                                               "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}}]
    caps = {}
    caps["supports_string_content"] = _NEEDLE in _probe(template, [{"role": "user", "content": _NEEDLE}])
    caps["supports_typed_content"] = caps["supports_string_content"]  # typed parts are joined to a string
    caps["supports_system_role"] = _NEEDLE in _probe(template, [{"role": "system", "content": _NEEDLE}, user])
    caps["supports_tools"] = _NEEDLE in _probe(template, [user], tools=tools)
    as_str = _probe(template, [user, _tool_call_msg(json.dumps({"arg_" + _NEEDLE: "x"}))], tools=tools)
    as_obj = _probe(template, [user, _tool_call_msg({"arg_" + _NEEDLE: "x"})], tools=tools)
    caps["supports_tool_calls"] = ("tool_" + _NEEDLE) in as_str or ("tool_" + _NEEDLE) in as_obj
    caps["supports_object_arguments"] = ("arg_" + _NEEDLE) in as_obj and ("arg_" + _NEEDLE + '"') not in as_str \
        and '\\"arg_' not in as_obj
    args = {"a": "x"} if caps["supports_object_arguments"] else json.dumps({"a": "x"})
    two = _probe(template, [user, _tool_call_msg(args, n=2)], tools=tools)
    caps["supports_parallel_tool_calls"] = caps["supports_tool_calls"] and "tool_" + _NEEDLE + "1" in two
    resp = [user, _tool_call_msg(args), {"role": "tool", "tool_call_id": "call00000", "content": "resp_" + _NEEDLE}]
    caps["supports_tool_responses"] = ("resp_" + _NEEDLE) in _probe(template, resp, tools=tools)
    caps["supports_preserve_reasoning"] = _NEEDLE in _probe(
        template, [user, {"role": "assistant", "content": "ok", "reasoning_content": _NEEDLE}])
    caps["supports_reasoning_effort"] = "reasoning_effort" in template
    caps["supports_thinking"] = "<think>" in template or "enable_thinking" in template
    return caps


def _polyfill_tools(messages: list, caps: dict) -> list:
    """Templates that cannot show tool calls/results get them as JSON text (llama.cpp's generic)."""
    out = []
    for m in messages:
        if m.get("role") == "assistant" and m.get("tool_calls") and not caps["supports_tool_calls"]:
            calls = []
            for c in m["tool_calls"]:
                fn = c.get("function", c)
                a = fn.get("arguments")
                if isinstance(a, str):
                    try:
                        a = json.loads(a)
                    except ValueError:
                        pass
                calls.append({"name": fn.get("name"), "arguments": a, **({"id": c["id"]} if "id" in c else {})})
            m = {"role": "assistant", "content": json.dumps({"tool_calls": calls}, ensure_ascii=False, indent=2)}
        elif m.get("role") == "tool" and not caps["supports_tool_responses"]:
            m = {"role": "user", "content": json.dumps({"tool_response": {
                "tool": m.get("name", ""), "tool_call_id": m.get("tool_call_id", ""),
                "content": _flatten_content(m.get("content"))}}, ensure_ascii=False, indent=2)}
        out.append(m)
    return out


def prepare_messages(messages: list, caps: dict, system_extra: str = "") -> list:
    """OpenAI messages -> what this template can render (see the comment above)."""
    if not isinstance(messages, list):
        raise ValueError("Expected 'messages' to be an array")
    msgs = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ValueError(f"'messages[{i}]' must be an object with a 'role'")
        m = dict(m)
        if m["role"] == "developer":
            m["role"] = "system"
        if m["role"] != "assistant" and "content" not in m:
            raise ValueError("All non-assistant messages must contain 'content'")
        if m["role"] == "assistant" and "content" not in m and "tool_calls" not in m:
            raise ValueError("Assistant message must contain either 'content' or 'tool_calls'!")
        if m.get("content") is None:
            m["content"] = ""
        if m.get("tool_calls"):
            if not isinstance(m["tool_calls"], list):
                raise ValueError(f"'messages[{i}].tool_calls' must be an array")
            calls = []
            for c in m["tool_calls"]:
                fn = c.get("function") if isinstance(c, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise ValueError(f"'messages[{i}].tool_calls' entries need function.name")
                a = fn.get("arguments", {})
                if caps.get("supports_object_arguments") and isinstance(a, str):
                    try:
                        a = json.loads(a) if a.strip() else {}
                    except ValueError:
                        raise ValueError(f"'messages[{i}].tool_calls': arguments is not valid JSON") from None
                calls.append({**c, "function": {**fn, "arguments": a}})
            m["tool_calls"] = calls
        msgs.append(m)
    if system_extra:
        if msgs and msgs[0]["role"] == "system":
            msgs[0] = {**msgs[0], "content": _flatten_content(msgs[0]["content"]) + "\n\n" + system_extra}
        else:
            msgs.insert(0, {"role": "system", "content": system_extra})
    msgs = _polyfill_tools(msgs, caps)
    if not caps.get("supports_system_role", True) and msgs and msgs[0]["role"] == "system":
        sys_text = _flatten_content(msgs.pop(0)["content"])
        if msgs and msgs[0]["role"] == "user":
            msgs[0] = {**msgs[0], "content": sys_text + "\n\n" + _flatten_content(msgs[0]["content"])}
        else:
            msgs.insert(0, {"role": "user", "content": sys_text})
    return msgs


def render_chat(template: str, messages: list, tools=None, add_generation_prompt: bool = True,
                bos_token: str = "", eos_token: str = "", template_kwargs: dict | None = None) -> tuple[str, str]:
    """(prompt, generation_prompt): the rendered conversation, and the part add_generation_prompt
    appended (the reasoning parser starts from it: '<think>\\n' there means thinking is open).
    `messages` must come from prepare_messages; tools are passed only when non-empty."""
    if template in BUILTIN_TEMPLATES:
        template = BUILTIN_TEMPLATES[template]
    kw = dict(template_kwargs or {})
    ctx = dict(bos_token=bos_token, eos_token=eos_token, tools=tools or None, **kw)
    prompt = apply_chat_template(template, messages, add_generation_prompt=add_generation_prompt, **ctx)
    if not add_generation_prompt:
        return prompt, ""
    bare = apply_chat_template(template, messages, add_generation_prompt=False, **ctx)
    n = 0
    while n < min(len(bare), len(prompt)) and bare[n] == prompt[n]:
        n += 1
    return prompt, prompt[n:]
