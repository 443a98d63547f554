"""Reasoning (thinking) output as llama-server handles it: `<think>...</think>` split into
`reasoning_content` and `content`, incrementally for streams, with --reasoning-format semantics,
--reasoning / --chat-template-kwargs / chat_template_kwargs / reasoning_effort resolved into the
template's `enable_thinking`, and --reasoning-budget as a token-level state machine.

--reasoning-format (llama.cpp common_reasoning_format):
  none             no extraction: the think text stays in `content` as generated
  auto, deepseek   extracted into `reasoning_content` (stream: `delta.reasoning_content`)
  deepseek-legacy  extracted in non-stream responses; a stream keeps it inline in `content`
                   between the think tags (llama-server's reasoning_in_content)
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from .detok import partial_stop_len

REASONING_FORMATS = ("none", "auto", "deepseek", "deepseek-legacy")
REASONING_MODES = ("on", "off", "auto")  # -rea / --reasoning
THINK_START = "<think>"
THINK_END = "</think>"


def parse_reasoning_format(name) -> str:
    if name not in REASONING_FORMATS:
        raise ValueError(f"Unknown reasoning format: {name} (expected one of {', '.join(REASONING_FORMATS)})")
    return name


def parse_template_kwargs(text: str | None) -> dict:
    """--chat-template-kwargs: a JSON object (llama.cpp rejects anything else)."""
    if not text:
        return {}
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--chat-template-kwargs is not valid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ValueError("--chat-template-kwargs must be a JSON object")
    return obj


@dataclass
class ThinkingSettings:
    enable_thinking: bool
    template_kwargs: dict  # what the template gets besides messages/tools (enable_thinking included)


def resolve_thinking(server_kwargs: dict | None = None, request_kwargs=None, reasoning_mode: str = "auto",
                     reasoning_effort=None, template_supports_thinking: bool = True) -> ThinkingSettings:
    """llama-server's order: --reasoning on/off/auto gives the default (auto = on when the
    template can think), --chat-template-kwargs then the request's chat_template_kwargs override
    it through `enable_thinking`, and reasoning_effort "none" turns it off (any other effort is
    passed to the template as `reasoning_effort`)."""
    if reasoning_mode not in REASONING_MODES:
        raise ValueError(f"invalid --reasoning value: {reasoning_mode} (expected on, off or auto)")
    if request_kwargs is not None and not isinstance(request_kwargs, dict):
        raise ValueError("'chat_template_kwargs' must be an object")
    enable = reasoning_mode == "on" or (reasoning_mode == "auto" and template_supports_thinking)
    kwargs = dict(server_kwargs or {})
    kwargs.update(request_kwargs or {})
    if "enable_thinking" in kwargs:
        v = kwargs["enable_thinking"]
        if not isinstance(v, bool):
            raise ValueError(f'invalid type for "enable_thinking" (expected boolean, got {type(v).__name__})')
        enable = v
    if reasoning_effort is not None:
        if not isinstance(reasoning_effort, str):
            raise ValueError("'reasoning_effort' must be a string")
        if reasoning_effort == "none":
            enable = False
            kwargs.pop("reasoning_effort", None)
        elif reasoning_effort:
            kwargs["reasoning_effort"] = reasoning_effort
    kwargs["enable_thinking"] = enable
    return ThinkingSettings(enable, kwargs)


def thinking_open_at_end(generation_prompt: str, start: str = THINK_START, end: str = THINK_END) -> bool:
    """True when the template's generation prompt leaves a think block open (Qwen3.5/3.6 end
    theirs with '<think>\\n'): the model's first tokens are then reasoning."""
    i = generation_prompt.rfind(start)
    return i >= 0 and generation_prompt.find(end, i) < 0


def _partial_suffix(text: str, tags) -> int:
    """Length of the longest suffix of text that is a proper prefix of one of tags."""
    return max((partial_stop_len(text, t) for t in tags), default=0)


@dataclass
class ReasoningSplitter:
    """Incremental <think> splitter. feed(text) -> [(kind, text)] with kind 'reasoning' or
    'content'; finish() flushes. A tag cut across deltas is held back, never emitted half.

    A think block is recognised at the start of the output (after whitespace), or from the first
    token when `forced_open` (the prompt opened it). `content_ends` are tags that also end the
    reasoning but belong to the content (Qwen3.5 may go straight to `<tool_call>`). Whitespace
    right after the opening tag, before the closing tag and at the start of the following content
    is dropped, as llama.cpp's parsers do. `inline` keeps everything in content (tags included):
    deepseek-legacy streams."""
    forced_open: bool = False
    start: str = THINK_START
    ends: tuple = (THINK_END,)
    content_ends: tuple = ()
    inline: bool = False
    _state: str = field(default="", init=False)  # start | think | content
    _buf: str = field(default="", init=False)
    _ws: str = field(default="", init=False)     # held whitespace of the reasoning
    _lead: bool = field(default=True, init=False)  # at the start of reasoning/content: drop whitespace

    def __post_init__(self):
        self._state = "think" if self.forced_open else "start"
        self._prefix_tag = self.forced_open and self.inline

    def feed(self, text: str) -> list:
        out: list = []
        self._buf += text
        if self._prefix_tag:
            self._prefix_tag = False
            out.append(("content", self.start))
        while True:
            if self._state == "start":
                s = self._buf.lstrip()
                if s.startswith(self.start):
                    if self.inline:
                        out.append(("content", self._buf[: len(self._buf) - len(s)] + self.start))
                    self._buf = s[len(self.start):]
                    self._state = "think"
                    continue
                if self.start.startswith(s):
                    return out  # maybe the tag, still arriving
                self._state = "content"
                self._lead = False
                continue
            if self._state == "think":
                hit = self._find_end()
                if hit is None:
                    keep = _partial_suffix(self._buf, self.ends + self.content_ends)
                    self._emit_reasoning(self._buf[: len(self._buf) - keep], out)
                    self._buf = self._buf[len(self._buf) - keep:]
                    return out
                i, tag, to_content = hit
                self._emit_reasoning(self._buf[:i], out)
                if self.inline:
                    out.append(("content", self._ws + tag if not to_content else self._ws))
                self._ws = ""
                self._buf = self._buf[i:] if to_content else self._buf[i + len(tag):]
                self._state = "content"
                self._lead = not self.inline
                continue
            # content
            if self._lead:
                s = self._buf.lstrip()
                if not s:
                    self._buf = ""
                    return out
                self._buf = s
                self._lead = False
            if self._buf:
                out.append(("content", self._buf))
            self._buf = ""
            return out

    def finish(self) -> list:
        out = []
        if self._state == "start":
            if self._buf:
                out.append(("content", self._buf))
        elif self._state == "think":
            self._emit_reasoning(self._buf, out)  # unterminated (e.g. max_tokens): still reasoning
        elif self._buf and not self._lead:
            out.append(("content", self._buf))
        self._buf = ""
        return out

    def _find_end(self):
        best = None
        for tags, to_content in ((self.ends, False), (self.content_ends, True)):
            for tag in tags:
                i = self._buf.find(tag)
                if i >= 0 and (best is None or i < best[0]):
                    best = (i, tag, to_content)
        return best

    def _emit_reasoning(self, text: str, out: list):
        kind = "content" if self.inline else "reasoning"
        if self._lead and not self.inline:
            text = text.lstrip()
            if not text:
                return
            self._lead = False
        if not text:
            return
        body = text.rstrip()
        tail = text[len(body):]
        if body:
            out.append((kind, self._ws + body))
            self._ws = tail
        else:
            self._ws += tail


def split_reasoning(text: str, forced_open: bool = False, **kw) -> tuple[str, str]:
    """Non-stream: (reasoning_content, content) of a whole output."""
    sp = ReasoningSplitter(forced_open=forced_open, **kw)
    parts = sp.feed(text) + sp.finish()
    return ("".join(t for k, t in parts if k == "reasoning"), "".join(t for k, t in parts if k == "content"))


class ReasoningBudget:
    """--reasoning-budget N / reasoning_budget_tokens: after N tokens inside the think block the
    end is forced: the budget message (if any) and the end tag are emitted as forced tokens, as
    llama.cpp's reasoning-budget sampler does. N = -1 is unlimited; N = 0 ends the block at once.

    Used per generated token: `forced()` returns the token id the sampler must produce next (or
    None: free choice); `accept(token)` advances the state. The server turns `forced()` into a
    one-token allowed mask (the same hook grammars use), so MTP drafts are checked the same way.
    `tokenize(text) -> ids` is the model's tokenizer without specials parsing off (the end tag may
    be a special token)."""

    def __init__(self, budget: int, tokenize, forced_open: bool, start_ids=None, end_text: str = THINK_END,
                 message: str = ""):
        if budget < -1:
            raise ValueError(f"reasoning budget must be >= -1, got {budget}")
        self.budget = budget
        self.inside = forced_open
        self.start_ids = list(start_ids or tokenize(THINK_START))
        self.end_ids = list(tokenize((message or "") + "\n" + end_text)) if message else list(tokenize(end_text))
        self._end_plain = list(tokenize(end_text))
        self.used = 0
        self._forcing: list[int] = []
        self._recent: list[int] = []
        self.done = budget < 0

    def forced(self):
        if self.done or not self.inside:
            return None
        if not self._forcing and self.used >= self.budget:
            self._forcing = list(self.end_ids)
        return self._forcing[0] if self._forcing else None

    def accept(self, token: int):
        if self.done:
            return
        self._recent = (self._recent + [token])[-max(len(self.start_ids), len(self._end_plain), 1):]
        if not self.inside:
            if self._recent[-len(self.start_ids):] == self.start_ids:
                self.inside = True
            return
        if self._forcing:
            self._forcing.pop(0)
            if not self._forcing:
                self.inside, self.done = False, True
            return
        if self._recent[-len(self._end_plain):] == self._end_plain:
            self.inside, self.done = False, True  # the model closed it itself
            return
        self.used += 1
