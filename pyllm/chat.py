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
