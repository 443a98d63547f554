"""Request prompts -> token ids: llama-server's prompt forms (text, token ids, mixed, several prompts), the context
check and the chat template, all through pyllm's Model (never the core)."""
from __future__ import annotations

from ..args import Params
from ..chat import resolve_chat_template
from ..chat_request import ChatSetup, ChatTurn, RequestError
from ..structured import GrammarError, GrammarMatcher, TokenConstraint, request_grammar
from ..model import Model
from .schemas import ApiError, invalid


def tokenize_mixed(model: Model, content, add_special: bool, parse_special: bool) -> list:
    if isinstance(content, str):
        return model.tokenize(content, add_special, parse_special)
    if isinstance(content, list):
        out = []
        for i, el in enumerate(content):
            if isinstance(el, str):
                out += model.tokenize(el, add_special and i == 0, parse_special)
            elif isinstance(el, int) and not isinstance(el, bool):
                out.append(el)
            else:
                raise invalid("\"prompt\" elements must be strings or token ids")
        return out
    raise invalid("\"prompt\" must be a string or an array of strings / token ids")


def split_prompts(prompt) -> list:
    """A request's "prompt" -> the list of prompts it holds (token ids / mixed lists are one prompt)."""
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, dict):
        if "prompt_string" in prompt:
            return [prompt["prompt_string"]]
        raise invalid("\"prompt\" must be a string or an array")
    if isinstance(prompt, list):
        if not prompt:
            raise invalid("\"prompt\" must not be empty")
        if all((isinstance(x, int) and not isinstance(x, bool)) or isinstance(x, str) for x in prompt) and \
                any(isinstance(x, int) and not isinstance(x, bool) for x in prompt):
            return [prompt]  # token ids / mixed = one prompt
        return [x["prompt_string"] if isinstance(x, dict) and "prompt_string" in x else x for x in prompt]
    raise invalid("\"prompt\" must be a string or an array")


def check_ids(model: Model, ids):
    try:
        model.check_tokens(ids)
    except ValueError as e:
        raise invalid(str(e))


def check_ctx(tokens, n_ctx: int):
    if not tokens:
        raise invalid("empty prompt")
    if len(tokens) >= n_ctx:
        raise ApiError(f"request ({len(tokens)} tokens) exceeds the available context size ({n_ctx} tokens), "
                       "try increasing it", 400, "exceed_context_size_error",
                       {"n_prompt_tokens": len(tokens), "n_ctx": n_ctx})


def chat_template_src(params: Params, model: Model) -> str:
    """--chat-template (a built-in name or jinja), --chat-template-file, else the GGUF's template, else ChatML."""
    t = params.chat_template
    if not t and params.chat_template_file:
        try:
            with open(params.chat_template_file, encoding="utf-8") as f:
                t = f.read()
        except OSError as e:
            raise ApiError(f"failed to read chat template file: {e}", 500, "server_error")
    return resolve_chat_template(t or None, {"tokenizer.chat_template": model.chat_template})


def chat_setup(params: Params, model: Model) -> ChatSetup:
    """The model's chat settings from the flags (built once per server, see ServerState.chat)."""
    return ChatSetup(chat_template_src(params, model), bos_token=model.special_text(model.bos),
                     eos_token=model.special_text(model.eos), use_jinja=params.use_jinja,
                     template_kwargs=params.chat_template_kwargs, reasoning_format=params.reasoning_format,
                     reasoning_mode=params.reasoning, reasoning_budget=params.reasoning_budget,
                     reasoning_budget_message=params.reasoning_budget_message or "",
                     prefill_assistant=params.prefill_assistant)


def chat_turn(setup: ChatSetup, body: dict) -> ChatTurn:
    """A chat request rendered (/v1/chat/completions, /v1/messages, /apply-template); 400 naming the field."""
    try:
        return setup.prepare(body)
    except RequestError as e:
        raise invalid(str(e))


def constraint(model: Model, body: dict):
    """/completion and /v1/completions: the request's grammar / json_schema / response_format as a
    TokenConstraint (None when it asks for none); 400 naming the field when it is invalid."""
    try:
        g, _ = request_grammar(body)
        if g is None:
            return None
        return TokenConstraint(model.n_vocab, GrammarMatcher(model.guidance(), g))
    except GrammarError as e:
        raise invalid(str(e))
