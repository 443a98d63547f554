"""Which tool-call syntax a chat template teaches its model, detected from the template source
the way llama.cpp's common/chat.cpp picks a format (most specific markers first).

  qwen3-xml    Qwen3-Coder / Qwen3.5 / Qwen3.6: <tool_call>\\n<function=NAME>\\n<parameter=P>\\nV\\n</parameter>\\n</function>\\n</tool_call>
  mistral-args Ministral 3 / Devstral 2512: [TOOL_CALLS]NAME[ARGS]{...}
  mistral      Mistral Nemo / Small: [TOOL_CALLS][{"name": .., "arguments": {..}, "id": ..}, ...]
  hermes       Hermes 2 Pro / Qwen2.5 / Qwen3: <tool_call>\\n{"name": .., "arguments": {..}}\\n</tool_call>
  llama3       Llama 3.1-3.3: the whole reply is {"name": .., "parameters": {..}} (or <|python_tag|>...)
  generic      templates without tool syntax: the reply is JSON {"tool_calls": [...]} or {"response": ".."},
               the tools are described in a system message we add (llama.cpp's generic format)
"""
from __future__ import annotations

import json
from dataclasses import dataclass

FORMATS = ("qwen3-xml", "mistral-args", "mistral", "hermes", "llama3", "generic")


@dataclass(frozen=True)
class ToolFormat:
    name: str
    triggers: tuple  # text that opens a call inside running text (lazy-grammar triggers too)
    thinking: bool   # the template has <think> blocks
    id_len: int = 32  # length of generated call ids (Mistral templates insist on 9)


def detect_format(template: str) -> ToolFormat:
    src = template or ""
    thinking = "<think>" in src
    if "<tool_call>" in src and "<function=" in src and "<parameter=" in src:
        return ToolFormat("qwen3-xml", ("<tool_call>",), thinking)
    if "[TOOL_CALLS]" in src and "[ARGS]" in src:
        return ToolFormat("mistral-args", ("[TOOL_CALLS]",), thinking, id_len=9)
    if "[TOOL_CALLS]" in src:
        return ToolFormat("mistral", ("[TOOL_CALLS]",), thinking, id_len=9)
    if "<tool_call>" in src:
        return ToolFormat("hermes", ("<tool_call>",), thinking)
    if "<|python_tag|>" in src or "<|start_header_id|>ipython" in src or (
            "<|start_header_id|>" in src and "parameters" in src and "tools" in src):
        return ToolFormat("llama3", ("<|python_tag|>",), thinking)
    return ToolFormat("generic", (), thinking)


def get_format(name: str, template: str = "") -> ToolFormat:
    """A format by name (tests, --chat-format style overrides); thinking/triggers as detected."""
    if name not in FORMATS:
        raise ValueError(f"unknown tool-call format {name!r} (expected one of {', '.join(FORMATS)})")
    base = {"qwen3-xml": ("<tool_call>",), "mistral-args": ("[TOOL_CALLS]",), "mistral": ("[TOOL_CALLS]",),
            "hermes": ("<tool_call>",), "llama3": ("<|python_tag|>",), "generic": ()}[name]
    return ToolFormat(name, base, "<think>" in (template or ""), 9 if name.startswith("mistral") else 32)


def generic_system_prompt(tools: list, parallel: bool) -> str:
    """The instruction llama.cpp's generic format adds for templates that cannot show tools."""
    schema = generic_schema(tools, parallel)
    return ("Respond in JSON format, either with `tool_call` (a request to call tools) or with `response` "
            "reply to the user's request\n\n" + "You can call any of the following tools to satisfy the "
            "user's requests: " + json.dumps([t["function"] for t in tools], indent=2, ensure_ascii=False)
            + "\n\nThe JSON must match this schema: " + json.dumps(schema, ensure_ascii=False))


def _call_schema(tool: dict, args_key: str = "arguments", with_id: bool = False) -> dict:
    fn = tool["function"]
    props = {"name": {"type": "string", "const": fn["name"]}, args_key: fn.get("parameters") or {"type": "object"}}
    req = ["name", args_key]
    if with_id:
        props["id"] = {"type": "string", "pattern": "^[a-zA-Z0-9]{9}$"}
        req.append("id")
    return {"type": "object", "properties": props, "required": req, "additionalProperties": False}


def call_schema(tools: list, args_key: str = "arguments", with_id: bool = False) -> dict:
    """JSON schema of one call object {"name": .., args_key: ..} over the given tools."""
    alts = [_call_schema(t, args_key, with_id) for t in tools]
    return alts[0] if len(alts) == 1 else {"anyOf": alts}


def generic_schema(tools: list, parallel: bool) -> dict:
    one = call_schema(tools)
    calls = ({"type": "object", "properties": {"tool_calls": {"type": "array", "items": one, "minItems": 1}},
              "required": ["tool_calls"], "additionalProperties": False} if parallel else
             {"type": "object", "properties": {"tool_call": one}, "required": ["tool_call"],
              "additionalProperties": False})
    resp = {"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"],
            "additionalProperties": False}
    return {"anyOf": [calls, resp]}
