"""One chat task, for the protocol routes that answer one choice through a ChatOutput (/v1/messages,
/v1/responses): its submission (render, tokenize, check, constrain), the non-stream collection and the SSE
stream. Each route brings its own protocol (an event builder with start / feed / finish / error, and its SSE
encoder)."""
from __future__ import annotations

import asyncio
from typing import Callable, Iterable, Optional

from ..chat_request import RequestError
from .engine import Task
from .prompts import chat_turn, check_ctx, check_ids, tokenize_mixed
from .schemas import ApiError, core_params, invalid, task_params_json


async def submit_chat_turn(st, chat: dict, req: dict):
    """Render and tokenize a chat request (off the event loop), check it, build its constraint and submit it.
    Returns (prompt ids, the turn's ChatOutput, task, event queue)."""
    e, model = st.engine, st.engine.model
    turn = await asyncio.to_thread(chat_turn, st.chat, chat)
    prompt = await asyncio.to_thread(tokenize_mixed, model, turn.prompt, True, True)
    check_ids(model, prompt)
    check_ctx(prompt, e.n_ctx_slot)
    try:
        con = await asyncio.to_thread(turn.constraint, model)
    except RequestError as err:
        raise invalid(str(err))
    task = Task(prompt=prompt, params=core_params(req), n_predict=req["n_predict"], stop=list(req["stop"]),
                id_slot=req["id_slot"], cache_prompt=req["cache_prompt"], stream=req["stream"],
                params_json=task_params_json(req, True, st.params.spec_types_str), constraint=con)
    out = turn.output(req["stream"])
    queue: asyncio.Queue = asyncio.Queue()
    e.submit(task, queue)
    return prompt, out, task, queue


def _raise(ev) -> None:
    raise ApiError(ev.data["message"], ev.data["code"], ev.data["type"])


async def first_event(queue):
    """The task's first event; an error event becomes the ApiError it carries (answered before any SSE)."""
    ev = await queue.get()
    if ev.kind == "error":
        _raise(ev)
    return ev


async def collect_one(e, task, queue, request) -> Optional[tuple]:
    """(text, summary) of a finished task, or None when the client left (the task is then cancelled)."""
    text, fin = "", None
    while fin is None:
        ev = await queue.get()
        if ev.kind == "token":
            text += ev.text
        elif ev.kind == "done":
            fin = ev.data
        elif ev.kind == "error":
            _raise(ev)
        if fin is None and await request.is_disconnected():
            e.cancel(task)
            return None
    return text, fin


async def stream_events(e, task, queue, first, out, proto, encode: Callable[[str, dict], str],
                        finish: Callable[[dict], Iterable]):
    """SSE bytes: proto.start(), every ChatOutput delta through proto.feed, then finish(summary) (the
    protocol's closing events) or proto.error(message); the task is cancelled when the stream ends early."""
    ev = first
    try:
        for name, data in proto.start():
            yield encode(name, data).encode()
        while True:
            if ev.kind in ("token", "done"):
                for d in (out.feed(ev.text) if ev.kind == "token" else out.finish()):
                    for name, data in proto.feed(d):
                        yield encode(name, data).encode()
                if ev.kind == "done":
                    for name, data in finish(ev.data):
                        yield encode(name, data).encode()
                    return
            elif ev.kind == "error":
                for name, data in proto.error(ev.data["message"]):
                    yield encode(name, data).encode()
                return
            ev = await queue.get()
    finally:
        e.cancel(task)
