"""Request prompts -> token ids: llama-server's prompt forms (text, token ids, mixed, several prompts), the context
check and the chat template, all through pyllm's Model (never the core)."""
from __future__ import annotations

import json

from ..args import Params
from ..chat import apply_chat_template, normalize_messages, resolve_chat_template
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


def render_chat(params: Params, model: Model, body: dict) -> str:
    """The prompt text of a chat request (/v1/chat/completions, /apply-template)."""
    try:
        norm = normalize_messages(body.get("messages"))
    except ValueError as e:
        raise invalid(str(e))
    tools = body.get("tools")
    if tools and not params.use_jinja:
        raise invalid("tools param requires --jinja flag")
    agp = body.get("add_generation_prompt", True)
    if not isinstance(agp, bool):
        raise invalid("Field 'add_generation_prompt': type must be boolean")
    kwargs = {}
    if params.chat_template_kwargs:
        try:
            kwargs.update(json.loads(params.chat_template_kwargs))
        except ValueError:
            pass
    if isinstance(body.get("chat_template_kwargs"), dict):
        kwargs.update(body["chat_template_kwargs"])
    try:
        return apply_chat_template(chat_template_src(params, model), norm, add_generation_prompt=agp,
                                   bos_token=model.special_text(model.bos), eos_token=model.special_text(model.eos),
                                   tools=tools, **kwargs)
    except ApiError:
        raise
    except Exception as e:
        raise ApiError(f"failed to apply chat template: {e}", 500, "server_error")
