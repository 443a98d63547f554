"""A chat request -> what generation needs, in ONE place for the server (/v1/chat/completions,
/v1/messages) and `Llama.create_chat_completion`:

    setup = ChatSetup(template_src, use_jinja=..., ...)      # per model: caps and tool format, once
    turn = setup.prepare(body)                               # RequestError(field, msg) -> HTTP 400
    turn.prompt                                              # text to tokenize (specials parsed)
    Request(..., constraint=turn.constraint(model))          # grammar / tool-call grammar / budget
    out = turn.output(stream)                                # ChatOutput: reasoning + tool-call split

Order (llama-server's oaicompat_chat_params_parse): response_format/json_schema/grammar, tools and
tool_choice, thinking (server kwargs < request chat_template_kwargs < reasoning_effort), the
reasoning format, messages adapted to the template's caps, rendering, then the constraint.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .chat import normalize_messages, prepare_messages, render_chat, template_caps
from .chat_output import ChatOutput
from .reasoning import ReasoningBudget, parse_reasoning_format, parse_template_kwargs, resolve_thinking, \
    thinking_open_at_end
from .structured import GrammarError, GrammarMatcher, TokenConstraint, after_thinking, request_grammar
from .toolcalls import ToolFormat, ToolPlan, detect_format, generic_system_prompt, plan_tools
from .toolcalls.grammar import tool_call_grammar


class RequestError(ValueError):
    """A bad chat request; `field` names the request field (the server answers 400 with the message)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


# the chat fields this module implements (besides the sampling fields every completion route takes)
CHAT_FIELDS = ("messages", "tools", "tool_choice", "parallel_tool_calls", "response_format", "json_schema",
               "grammar", "chat_template_kwargs", "reasoning_format", "reasoning_effort", "add_generation_prompt",
               "reasoning_budget_tokens", "thinking_budget_tokens", "reasoning_budget_message",
               "continue_final_message")


@dataclass
class ChatTurn:
    prompt: str
    generation_prompt: str
    fmt: ToolFormat
    plan: ToolPlan
    reasoning_format: str
    thinking_open: bool
    grammar: str | None = None        # the request's grammar / schema (llguidance), before the think wrapper
    schema: dict | None = None
    budget: int = -1
    budget_message: str = ""
    tools: list = field(default_factory=list)

    def output(self, stream: bool) -> ChatOutput:
        return ChatOutput(self.fmt, self.plan if self.plan.parse else None, self.reasoning_format,
                          self.generation_prompt, stream, self.tools or None)

    def constraint(self, model) -> TokenConstraint | None:
        """The sequence's constraint (None: free decoding). `model`: pyllm.model.Model."""
        budget = None
        if self.budget >= 0 and self.thinking_open:
            budget = ReasoningBudget(self.budget, lambda s: model.tokenize(s, False, True), True,
                                     message=self.budget_message)
        matcher = None
        if self.plan.constrain or self.grammar is not None:
            gtok = model.guidance()
            if self.plan.constrain:
                g, fld = tool_call_grammar(self.fmt, self.plan, gtok.lit, self.thinking_open), "tools"
            else:
                g, fld = after_thinking(self.grammar, self.thinking_open, gtok.lit), "grammar"
            try:
                matcher = GrammarMatcher(gtok, g, fld)
            except GrammarError as e:
                raise RequestError(e.field, str(e)) from None
        if matcher is None and budget is None:
            return None
        return TokenConstraint(model.n_vocab, matcher, budget)


class ChatSetup:
    """A model's chat settings: the template, its caps (/props chat_template_caps) and tool format,
    and the server-wide defaults (--jinja, --chat-template-kwargs, --reasoning-format, --reasoning,
    --reasoning-budget[-message])."""

    def __init__(self, template: str, *, bos_token: str = "", eos_token: str = "", use_jinja: bool = True,
                 template_kwargs=None, reasoning_format: str = "auto", reasoning_mode: str = "auto",
                 reasoning_budget: int = -1, reasoning_budget_message: str = "", prefill_assistant: bool = True):
        self.template = template
        self.caps = template_caps(template)
        self.fmt = detect_format(template)
        self.bos_token, self.eos_token = bos_token, eos_token
        self.use_jinja = use_jinja
        self.kwargs = template_kwargs if isinstance(template_kwargs, dict) else parse_template_kwargs(template_kwargs)
        self.reasoning_format = parse_reasoning_format(reasoning_format)
        self.reasoning_mode = reasoning_mode
        self.budget, self.budget_message = reasoning_budget, reasoning_budget_message
        self.prefill_assistant = prefill_assistant  # --prefill-assistant: a trailing assistant message is continued

    def prepare(self, body: dict) -> ChatTurn:
        try:
            return self._prepare(body)
        except GrammarError as e:
            raise RequestError(e.field, str(e)) from None

    def _prepare(self, body: dict) -> ChatTurn:
        grammar, schema = request_grammar(body)
        tools = body.get("tools")
        if tools and not self.use_jinja:
            raise RequestError("tools", "tools param requires --jinja flag")
        tc = body.get("tool_choice")
        if tc is not None and tc != "auto" and not self.use_jinja:
            raise RequestError("tool_choice", "tool_choice param requires --jinja flag")
        try:
            plan = plan_tools(tools, tc, body.get("parallel_tool_calls"),
                              self.caps["supports_parallel_tool_calls"], has_grammar=grammar is not None)
        except ValueError as e:
            raise RequestError("tools", str(e)) from None
        try:
            th = resolve_thinking(self.kwargs, body.get("chat_template_kwargs"), self.reasoning_mode,
                                  body.get("reasoning_effort"), self.caps["supports_thinking"])
        except ValueError as e:
            raise RequestError("chat_template_kwargs", str(e)) from None
        rfmt = body.get("reasoning_format", self.reasoning_format)
        try:
            parse_reasoning_format(rfmt)
        except ValueError as e:
            raise RequestError("reasoning_format", str(e)) from None
        agp = body.get("add_generation_prompt", True)
        if not isinstance(agp, bool):
            raise RequestError("add_generation_prompt", "Field 'add_generation_prompt': type must be boolean")
        cont = self._continuation(body, agp)
        if cont:
            agp = False
        budget, bmsg = self.budget, self.budget_message
        for name in ("reasoning_budget_tokens", "thinking_budget_tokens"):
            v = body.get(name)
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, int) or v < -1:
                    raise RequestError(name, f"'{name}' must be an integer >= -1")
                budget = v
        if body.get("reasoning_budget_message") is not None:
            bmsg = body["reasoning_budget_message"]
            if not isinstance(bmsg, str):
                raise RequestError("reasoning_budget_message", "'reasoning_budget_message' must be a string")
        extra = ""
        if plan.parse and self.fmt.name == "generic" and not self.caps["supports_tools"]:
            extra = generic_system_prompt(plan.tools, plan.parallel)
        try:
            msgs = prepare_messages(normalize_messages(body.get("messages")), self.caps, extra)
        except ValueError as e:
            raise RequestError("messages", str(e)) from None
        if cont and not _text(msgs[-1].get("content")):
            msgs, agp = msgs[:-1], True  # continuing an empty assistant message = starting it
            cont = False
        try:
            prompt, gen = render_chat(self.template, msgs, tools=plan.tools or None, add_generation_prompt=agp,
                                      bos_token=self.bos_token, eos_token=self.eos_token,
                                      template_kwargs=th.template_kwargs)
        except ValueError as e:
            raise RequestError("messages", f"failed to apply chat template: {e}") from None
        if cont:
            prompt = _continue_final(prompt, msgs[-1])
        return ChatTurn(prompt, gen, self.fmt, plan, rfmt, thinking_open_at_end(gen), grammar, schema, budget, bmsg,
                        plan.tools)

    def _continuation(self, body: dict, agp: bool) -> bool:
        """llama-server's rules: continue_final_message, or (--prefill-assistant) a trailing assistant message."""
        cfm = body.get("continue_final_message")
        if cfm is not None and not isinstance(cfm, bool):
            raise RequestError("continue_final_message", "Field 'continue_final_message': type must be boolean")
        msgs = body.get("messages") if isinstance(body.get("messages"), list) else []
        last = msgs[-1] if msgs and isinstance(msgs[-1], dict) else {}
        cont = bool(cfm)
        if not cont and self.prefill_assistant and last.get("role") == "assistant":
            if len(msgs) >= 2 and isinstance(msgs[-2], dict) and msgs[-2].get("role") == "assistant":
                raise RequestError("messages", "Cannot have 2 or more assistant messages at the end of the list.")
            cont, agp = True, False
        if cont and agp:
            raise RequestError("continue_final_message",
                               "Cannot set both add_generation_prompt and continue_final_message to true.")
        if cont and last.get("role") == "assistant" and last.get("tool_calls"):
            raise RequestError("continue_final_message",
                               "Cannot continue an assistant message that contains tool calls.")
        if cont and last.get("role") != "assistant":
            raise RequestError("continue_final_message", "continue_final_message needs a final assistant message")
        return cont


def _text(content) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return content or ""


def _continue_final(prompt: str, final: dict) -> str:
    """The rendered conversation cut right after the final assistant message's text (what the template appends
    after it, end-of-turn tokens, goes), so generation continues that message (as HF transformers does)."""
    text = _text(final.get("content")).strip()
    i = prompt.rfind(text)
    if i < 0:
        raise RequestError("messages", "continue_final_message: the template does not render the final assistant "
                                       "message's text verbatim")
    return prompt[:i + len(text)]
