"""The completion endpoints: /completion (llama-server's native shape), /v1/completions and /v1/chat/completions,
streamed (SSE) or not. A request becomes one Task per prompt and per n; the engine's events become responses
through the builders in responses.py (one per shape, shared by both paths)."""
from __future__ import annotations

import asyncio
import time
from typing import Optional

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from ..chat_request import RequestError
from ..generation import Event
from ..toolcalls import event_to_delta
from ..toolcalls import finish_reason as chat_finish_reason
from .engine import Task
from .prompts import chat_turn, check_ctx, check_ids, constraint, split_prompts, tokenize_mixed
from .responses import Shapes, finish_reason, usage
from .schemas import ApiError, check_fields, core_params, gen_id, invalid, parse_common, task_params_json
from .state import BUILD_INFO, JSONResp, body_json, server
from .streaming import DONE, PING, SSE_HEADERS, sse

router = APIRouter()


@router.post("/completion")
@router.post("/completions")
async def completion(request: Request):
    return await run_completion(request, "native")


@router.post("/v1/completions")
async def v1_completions(request: Request):
    return await run_completion(request, "oai")


@router.post("/chat/completions")
@router.post("/v1/chat/completions")
async def chat_completions(request: Request):
    return await run_completion(request, "chat")


async def run_completion(request: Request, kind: str):
    st = server(request)
    params, e = st.params, st.engine
    model = e.model
    body = await body_json(request)
    if not isinstance(body, dict):
        raise invalid("request body must be a JSON object")
    check_fields(body, kind)
    vocab = lambda s: model.tokenize(s, False, False)  # noqa: E731  (logit_bias text keys)
    if kind == "chat":
        if body.get("top_logprobs") is not None and not body.get("logprobs"):
            raise invalid("top_logprobs requires logprobs to be set to true")
        lp = body.get("logprobs")
        body = dict(body)
        body.pop("logprobs", None)
        if lp:
            tl = body.get("top_logprobs")
            body["n_probs"] = 20 if tl is None else tl
        req = parse_common(body, params, e.n_slots, vocab)
        turn = await asyncio.to_thread(chat_turn, st.chat, body)
        prompts = [await asyncio.to_thread(tokenize_mixed, model, turn.prompt, True, True)]
    else:
        if "logprobs" in body and "n_probs" not in body and body["logprobs"] is not None:
            lp = body["logprobs"]
            body = dict(body)
            body["n_probs"] = lp if not isinstance(lp, bool) else (1 if lp else 0)
        req = parse_common(body, params, e.n_slots, vocab)
        turn = None
        if "prompt" not in body or body["prompt"] is None:
            raise invalid("\"prompt\" must be provided")
        prompts = [await asyncio.to_thread(tokenize_mixed, model, rp, True, True) for rp in split_prompts(body["prompt"])]
    for pt in prompts:
        check_ids(model, pt)
        check_ctx(pt, e.n_ctx_slot)
    gen_settings = task_params_json(req, False, params.spec_types_str, [t for t in (model.eos, model.eot) if t >= 0])
    slot_params = task_params_json(req, True, params.spec_types_str)
    tasks = []
    outs = []  # chat: one ChatOutput (reasoning / tool-call split) per choice
    for pt in prompts:
        for j in range(req["n_cmpl"]):
            # each choice follows its own grammar state; compiled off the event loop
            con = await asyncio.to_thread(_constraint, model, turn, body)
            if turn is not None:
                outs.append(turn.output(req["stream"]))
            # choice j samples with seed+j (llama-server's child tasks); without a seed each task draws its own
            cpj = core_params(req)
            if j > 0 and req["seed"] != 4294967295:
                cpj["seed"] = (req["seed"] + j) & 0xFFFFFFFF
            tasks.append(Task(prompt=pt, params=cpj, n_predict=req["n_predict"], stop=list(req["stop"]),
                              n_probs=req["n_probs"], post_sampling_probs=req["post_sampling_probs"],
                              id_slot=req["id_slot"], cache_prompt=req["cache_prompt"], stream=req["stream"],
                              index=len(tasks), params_json=slot_params,
                              timings_per_token=bool(req.get("timings_per_token")), constraint=con,
                              return_progress=bool(req["stream"] and req["return_progress"])))
    queue: asyncio.Queue = asyncio.Queue()
    for t in tasks:
        e.submit(t, queue)
    so = body.get("stream_options")
    shapes = Shapes(req, gen_settings, st.model_name, BUILD_INFO, gen_id(), int(time.time()),
                    bool(so.get("include_usage")) if isinstance(so, dict) else False,
                    lambda ids: model.detokenize(ids, True).decode("utf-8", "replace"))
    try:
        if req["stream"]:
            # wait for the first result: an error before streaming is a normal JSON error
            first = await queue.get()
            if first.kind == "error":
                raise ApiError(first.data["message"], first.data["code"], first.data["type"])
            return StreamingResponse(stream_gen(e, kind, tasks, queue, first, shapes, request, outs),
                                     media_type="text/event-stream", headers=SSE_HEADERS)
        return await collect(e, kind, tasks, queue, shapes, request, outs)
    except BaseException:
        for t in tasks:
            e.cancel(t)
        raise


def _constraint(model, turn, body):
    if turn is None:
        return constraint(model, body)
    try:
        return turn.constraint(model)
    except RequestError as err:
        raise invalid(str(err))


async def collect(e, kind: str, tasks, queue, shapes: Shapes, request: Request, outs=()):
    n = len(tasks)
    texts = [""] * n
    probs = [[] for _ in range(n)]
    fins = [None] * n
    remaining = n
    last_check = time.monotonic()
    while remaining:
        ev = None
        try:
            ev = await asyncio.wait_for(queue.get(), timeout=0.5)
        except asyncio.TimeoutError:
            pass
        # the client may go away while tokens keep arriving: look at the connection twice a second
        if ev is None or time.monotonic() - last_check >= 0.5:
            last_check = time.monotonic()
            if await request.is_disconnected():
                for t in tasks:
                    e.cancel(t)
                return Response(status_code=499)
        if ev is None:
            continue
        i = ev.data.get("index", 0)
        if ev.kind == "token":
            texts[i] += ev.text
            probs[i] += ev.probs
        elif ev.kind == "done":
            fins[i] = ev.data
            probs[i] += ev.data.get("probs_tail", [])
            remaining -= 1
        elif ev.kind == "error":
            for t in tasks:
                e.cancel(t)
            raise ApiError(ev.data["message"], ev.data["code"], ev.data["type"])
    if kind == "native":
        out = [shapes.native_final(t, fins[k], texts[k], probs[k], False) for k, t in enumerate(tasks)]
        return JSONResp(out[0] if len(out) == 1 else out)
    timings = fins[-1]["timings"] if fins else {}
    verbose = shapes.native_final(tasks[0], fins[0], texts[0], probs[0], False) if shapes.req["verbose"] else None
    if kind == "oai":
        choices = [shapes.completion_choice(k, texts[k], probs[k], finish_reason(fins[k]["stop_type"]))
                   for k in range(n)]
        return JSONResp(shapes.oai("text_completion", choices, usage(fins), timings, verbose))
    choices = []
    for k in range(n):
        out = outs[k]
        out.feed(texts[k])
        out.finish()
        msg = out.message()
        reason = chat_finish_reason(fins[k]["stop_type"], len(msg.get("tool_calls") or ()))
        choices.append(shapes.chat_choice(k, msg, probs[k], reason))
    return JSONResp(shapes.oai("chat.completion", choices, usage(fins), timings, verbose))


async def stream_gen(e, kind: str, tasks, queue, first: Event, shapes: Shapes, request: Request, outs=()):
    n = len(tasks)
    fins = [None] * n
    started = [False] * n
    remaining = n
    ping = shapes.req["sse_ping_interval"]
    pending: Optional[Event] = first
    progress = shapes.req["return_progress"]  # prompt_progress chunks {total, cache, processed, time_ms}
    verbose = shapes.req["verbose"]
    t_begin, n_cache, prompt_done = [time.monotonic()] * n, [0] * n, [False] * n
    try:
        while remaining:
            if pending is not None:
                ev, pending = pending, None
            else:
                try:
                    ev = await asyncio.wait_for(queue.get(), timeout=ping if ping > 0 else None)
                except asyncio.TimeoutError:
                    yield PING
                    continue
            i = ev.data.get("index", 0)
            t = tasks[i]
            if ev.kind == "begin":
                t_begin[i], n_cache[i] = time.monotonic(), ev.data.get("n_cached", 0)
                if progress:  # prompt processing starts: processed = the cached part
                    yield sse(_progress(kind, shapes, t, i, n_cache[i], n_cache[i], 0))
                continue
            if ev.kind == "progress":  # between prompt batches (llama-server: after each one)
                yield sse(_progress(kind, shapes, t, i, ev.data["processed"], n_cache[i],
                                    int((time.monotonic() - t_begin[i]) * 1000)))
                continue
            if progress and ev.kind == "token" and not prompt_done[i]:  # the prompt is in: 100%
                prompt_done[i] = True
                yield sse(_progress(kind, shapes, t, i, len(t.prompt), n_cache[i],
                                    int((time.monotonic() - t_begin[i]) * 1000)))
            if ev.kind == "error":
                yield sse({"error": {"code": ev.data["code"], "message": ev.data["message"], "type": ev.data["type"]}})
                return
            if kind == "chat" and not started[i]:
                started[i] = True
                yield sse(shapes.chat_chunk(i, {"role": "assistant", "content": None}))
            timings = ev.data.get("timings")
            if ev.kind == "token":
                if kind == "native":
                    yield sse(shapes.native_partial(t, ev))
                elif kind == "oai":  # verbose: every chunk carries its native form, as llama-server's
                    yield sse(shapes.oai("text_completion", [shapes.completion_choice(i, ev.text, ev.probs, None)],
                                         timings=timings, verbose=shapes.native_partial(t, ev) if verbose else None))
                else:
                    deltas = [event_to_delta(d) for d in outs[i].feed(ev.text)]
                    if not deltas and (ev.probs or timings):
                        deltas = [{}]  # text held back (a tag cut across tokens): the probs still go out
                    for k, delta in enumerate(deltas):
                        first_one = k == 0
                        yield sse(shapes.chat_chunk(i, delta, probs=ev.probs if first_one else None,
                                                    timings=timings if first_one else None))
                continue
            if ev.kind == "done":
                fins[i] = ev.data
                remaining -= 1
                last = remaining == 0
                reason = finish_reason(ev.data["stop_type"])
                native = shapes.native_final(t, ev.data, "", [], True)
                if kind == "native":
                    yield sse(native)
                elif kind == "oai":
                    yield sse(shapes.oai("text_completion", [shapes.completion_choice(i, "", None, reason)],
                                         usage([ev.data]), timings, native))
                else:  # verbose: the native final JSON on the final result's first chunk
                    for d in outs[i].finish():
                        yield sse(shapes.chat_chunk(i, event_to_delta(d), verbose=native))
                        native = None
                    reason = chat_finish_reason(ev.data["stop_type"], len(outs[i].tool_calls))
                    with_usage = last and shapes.include_usage
                    yield sse(shapes.chat_chunk(i, {}, reason, timings=None if with_usage else timings,
                                                verbose=native))
                    if with_usage:
                        yield sse(shapes.chat_usage_chunk([f for f in fins if f], timings))
        if kind != "native":
            yield DONE
    finally:
        for t in tasks:
            e.cancel(t)


def _progress(kind: str, shapes: Shapes, t, i: int, processed: int, cache: int, time_ms: int) -> dict:
    """A prompt_progress chunk (llama-server's is_progress partial result) in the route's shape."""
    pp = {"total": len(t.prompt), "cache": cache, "processed": processed, "time_ms": time_ms}
    native = {"index": t.index, "content": "", "tokens": [], "stop": False, "id_slot": t.slot,
              "tokens_predicted": 0, "tokens_evaluated": len(t.prompt)}
    if kind == "native":
        d = native
    elif kind == "oai":
        d = shapes.oai("text_completion", [shapes.completion_choice(i, "", None, None)],
                       verbose={**native, "prompt_progress": pp})
    else:
        d = shapes.chat_chunk(i, {"role": "assistant", "content": None})
    d["prompt_progress"] = pp
    return d
