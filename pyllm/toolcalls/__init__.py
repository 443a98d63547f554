"""Tool calling as llama-server --jinja does it: the format a chat template uses, the parser from
model output to OpenAI tool_calls (streaming and not), and tool_choice semantics."""
from .choice import ToolPlan, finish_reason, plan_tools, validate_tools
from .formats import FORMATS, ToolFormat, detect_format, generic_schema, generic_system_prompt, get_format
from .parser import ToolCallParser, event_to_delta, gen_call_id, parse_tool_calls, to_openai, typed_value

__all__ = ["ToolPlan", "finish_reason", "plan_tools", "validate_tools", "FORMATS", "ToolFormat", "detect_format",
           "generic_schema", "generic_system_prompt", "get_format", "ToolCallParser", "event_to_delta",
           "gen_call_id", "parse_tool_calls", "to_openai", "typed_value"]
