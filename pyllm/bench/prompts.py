"""Built-in benchmark prompts (one per task kind) and loading of user prompts (--prompt-file)."""
from __future__ import annotations

import json
from pathlib import Path

AGENT_SNIPPET = '''\
import json
from collections import defaultdict

def load_orders(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]

def totals_by_customer(orders, min_total=0.0):
    totals = defaultdict(float)
    for o in orders:
        if o.get("status") == "cancelled":
            continue
        totals[o["customer"]] += o["qty"] * o["price"]
    return {c: round(t, 2) for c, t in sorted(totals.items()) if t >= min_total}
'''

TASKS: dict = {
    "code": (
        "Write a single self-contained HTML file with a full-window <canvas> that shows an animation of "
        "200 particles drifting across the screen. Each particle bounces off the edges, and particles that "
        "are closer than 100 pixels are connected by a line whose opacity fades with distance. Use "
        "requestAnimationFrame, resize the canvas when the window is resized, and let a mouse click add 20 "
        "new particles at the cursor. Put all JavaScript and CSS inline and comment each part briefly."
    ),
    "translate": (
        "Translate the following paragraph from English into German. Keep the meaning, the tone and the "
        "technical terms accurate, and output only the translation.\n\n"
        "When the old bridge over the river was finally closed for repairs, the small town on the other bank "
        "discovered how much it had depended on it. The bakery lost half of its morning customers, the "
        "children had to take a bus that went twenty kilometres around the valley, and the doctor started "
        "holding consultations in the back room of the post office twice a week. Engineers said the work "
        "would take three months; it took almost a year. Yet when the bridge reopened, people noticed that "
        "something had changed: neighbours who had never spoken before now greeted each other by name, and "
        "the market square, empty for years, was full again on Saturday mornings."
    ),
    "story": (
        "Напиши рассказ примерно на 500 слов о смотрителе маяка на маленьком северном острове. Однажды "
        "штормовой ночью он принимает по старому радиоприёмнику сигнал бедствия от корабля, который, судя по "
        "названию, затонул здесь ровно сто лет назад. Пиши живым языком, с диалогами, деталями быта и "
        "неожиданной, но светлой концовкой."
    ),
    "agent": (
        "You are an autonomous coding agent working in a repository. Task: port the Python module "
        "`orders.py` below to Rust as a library crate. Requirements: keep the same behaviour (skip cancelled "
        "orders, round totals to 2 decimals, sort by customer, filter by min_total), use serde_json to parse "
        "the JSON lines, return a Result with a custom error type instead of raising, and add unit tests "
        "that cover an empty file, a cancelled order and the min_total filter. First write a short plan as a "
        "numbered list, then give Cargo.toml and src/lib.rs in full.\n\n"
        "```python\n" + AGENT_SNIPPET + "```"
    ),
}
EDIT_INSTRUCTION = (
    "Edit the file `{name}` below: add a one-line docstring to every function that has none and rename the "
    "variable `totals` to `sums` everywhere. Change nothing else. Output the complete edited file in one code "
    "block and nothing after it.\n\n"
)


def edit_prompt(text: str, name: str = "orders.py") -> str:
    """The edit task: the model rewrites a given file with small changes, so its answer repeats long spans of its
    context (what prompt-lookup drafters, the ngram family, are for)."""
    return EDIT_INSTRUCTION.format(name=name) + "```\n" + text + ("" if text.endswith("\n") else "\n") + "```"


# the edit task's built-in file: the agent snippet twice over (a module of some length), see --edit-file
TASKS["edit"] = edit_prompt(AGENT_SNIPPET + "\n\n" + AGENT_SNIPPET.replace("load_orders", "load_returns")
                            .replace("totals_by_customer", "returns_by_customer"))
TASK_NAMES = tuple(TASKS)


def load_edit_file(path: str) -> list:
    """--edit-file F: the edit task on the given file. Returns [("edit-<stem>", prompt)]."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PromptError(f"error: failed to open edit file '{path}': {getattr(e, 'strerror', None) or e}")
    if not text.strip():
        raise PromptError(f"error: edit file '{path}' is empty")
    return [(f"edit-{p.stem or 'file'}", edit_prompt(text, p.name))]


class PromptError(ValueError):
    pass


def parse_tasks(spec: str) -> list:
    """'code,story' -> ['code', 'story']; 'all' -> every built-in task."""
    names = [t.strip() for t in spec.split(",") if t.strip()]
    if not names:
        raise PromptError("error: --tasks needs at least one task name")
    if names == ["all"]:
        return list(TASK_NAMES)
    for n in names:
        if n not in TASKS:
            raise PromptError(f"error: unknown task '{n}' (built-in tasks: {', '.join(TASK_NAMES)})")
    return list(dict.fromkeys(names))


def load_prompt_file(path: str) -> list:
    """A prompt file: a JSON list (of strings or {"name", "prompt"} objects) or one plain-text prompt.
    Returns [(name, prompt)]."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise PromptError(f"error: failed to open prompt file '{path}': {e.strerror or e}")
    stem = p.stem or "prompt"
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            items = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise PromptError(f"error: prompt file '{path}' is not a valid JSON list: {e}")
        out = []
        for i, it in enumerate(items):
            if isinstance(it, str):
                out.append((f"{stem}-{i + 1}" if len(items) > 1 else stem, it))
            elif isinstance(it, dict) and isinstance(it.get("prompt"), str):
                out.append((str(it.get("name") or f"{stem}-{i + 1}"), it["prompt"]))
            else:
                raise PromptError(f"error: prompt file '{path}': item {i} must be a string or "
                                  f'{{"name": ..., "prompt": ...}}')
        if not out:
            raise PromptError(f"error: prompt file '{path}' has no prompts")
        return out
    if not stripped:
        raise PromptError(f"error: prompt file '{path}' is empty")
    return [(stem, text[:-1] if text.endswith("\n") else text)]


def render_prompt(text: str, template, use_chat: bool) -> str:
    """The prompt the model sees: the user message through the chat template (add_generation_prompt), or raw."""
    if not use_chat or not template:
        return text
    from pyllm.chat import apply_chat_template
    return apply_chat_template(template, [{"role": "user", "content": text}], add_generation_prompt=True)
