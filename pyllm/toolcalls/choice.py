"""`tools`, `tool_choice` and `parallel_tool_calls` of a chat request -> what the server does:
which tools the template is shown, whether the output is parsed for calls, and how decoding is
constrained (llama.cpp: a lazy grammar that starts at the call trigger for "auto", a grammar from
the first token for "required"; a named function is "required" over that one tool, as OpenAI
defines it). Errors are ValueError naming the field (the server answers 400)."""
from __future__ import annotations

from dataclasses import dataclass, field

TOOL_CHOICES = ("auto", "none", "required")


def validate_tools(tools) -> list:
    """OpenAI `tools`: [{type: function, function: {name, description?, parameters?}}]."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ValueError("'tools' must be an array")
    seen = set()
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or t.get("type", "function") != "function" or not isinstance(
                t.get("function"), dict):
            raise ValueError(f"'tools[{i}]' must be {{\"type\": \"function\", \"function\": {{...}}}}")
        fn = t["function"]
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"'tools[{i}].function.name' must be a non-empty string")
        if name in seen:
            raise ValueError(f"'tools': duplicate function name {name!r}")
        seen.add(name)
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise ValueError(f"'tools[{i}].function.parameters' must be a JSON schema object")
    return tools


@dataclass
class ToolPlan:
    mode: str                    # auto | none | required
    tools: list                  # tools the template renders (all of them, also for "none")
    allowed: list = field(default_factory=list)  # tools a call may use (one when named)
    parallel: bool = True
    parse: bool = False          # parse the output for calls
    constrain: bool = False      # apply the tool-call grammar
    lazy: bool = False           # ...only from a trigger on (auto)
    named: bool = False          # tool_choice named one function

    @property
    def forced_name(self):
        return self.allowed[0]["function"]["name"] if self.named else None


def plan_tools(tools, tool_choice=None, parallel_tool_calls=None, supports_parallel: bool = True,
               has_grammar: bool = False) -> ToolPlan:
    """tool_choice: "auto" (default) | "none" | "required" | {"type": "function", "function": {"name": N}}.
    parallel_tool_calls defaults to what the template supports (llama-server). A request `grammar`
    together with tools (choice not "none") is refused, as llama-server does."""
    tools = validate_tools(tools)
    named = False
    if tool_choice is None:
        mode = "auto"
    elif isinstance(tool_choice, str):
        if tool_choice not in TOOL_CHOICES:
            raise ValueError(f"Invalid tool_choice: {tool_choice} (expected auto, none, required or a function)")
        mode = tool_choice
    elif isinstance(tool_choice, dict):
        fn = tool_choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if tool_choice.get("type") != "function" or not isinstance(name, str):
            raise ValueError("'tool_choice' object must be {\"type\": \"function\", \"function\": {\"name\": ...}}")
        mode, named = "required", True
    else:
        raise ValueError("'tool_choice' must be a string or an object")
    if parallel_tool_calls is not None and not isinstance(parallel_tool_calls, bool):
        raise ValueError("'parallel_tool_calls' must be a boolean")
    parallel = supports_parallel if parallel_tool_calls is None else parallel_tool_calls
    if not tools:
        if mode == "required":
            raise ValueError("'tool_choice' requires 'tools'" if not named else
                             f"'tool_choice' names function {name!r} but no 'tools' were given")
        return ToolPlan("none", [], parallel=parallel)
    allowed = tools
    if named:
        allowed = [t for t in tools if t["function"]["name"] == name]
        if not allowed:
            raise ValueError(f"'tool_choice' names function {name!r}, which is not in 'tools'")
    if mode != "none" and has_grammar:
        raise ValueError("Cannot use custom grammar constraints with tools.")
    return ToolPlan(mode, tools, allowed, parallel, parse=mode != "none", constrain=mode != "none",
                    lazy=mode == "auto", named=named)


def finish_reason(stop: str, n_calls: int) -> str:
    """OpenAI finish_reason: tool_calls when the reply ended (eos/stop word) with calls."""
    if stop in ("eos", "word") and n_calls:
        return "tool_calls"
    return "length" if stop == "limit" else "stop"
