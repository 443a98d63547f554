"""OpenAI's Responses API as llama-server serves it: /v1/responses (a `response` object, or its SSE events) and
/v1/responses/input_tokens. The body is converted to a chat request (pyllm.responses_api.responses_to_chat) and
takes the chat path: the same fields, template rendering, constraint and ChatOutput split as /v1/chat/completions."""
from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from ..responses_api import ResponsesError, ResponsesStream, response_object, responses_to_chat, sse
from .chat_events import collect_one, first_event, stream_events, submit_chat_turn
from .prompts import chat_turn, tokenize_mixed
from .schemas import check_fields, gen_id, invalid, parse_common
from .state import JSONResp, body_json, server
from .streaming import SSE_HEADERS

router = APIRouter()


async def _chat_body(request: Request) -> dict:
    body = await body_json(request)
    try:
        chat = responses_to_chat(body)
    except ResponsesError as e:
        raise invalid(str(e))
    check_fields(chat, "chat")
    return chat


@router.post("/responses/input_tokens")
@router.post("/v1/responses/input_tokens")
async def input_tokens(request: Request):
    st = server(request)
    turn = await asyncio.to_thread(chat_turn, st.chat, await _chat_body(request))
    ids = await asyncio.to_thread(tokenize_mixed, st.engine.model, turn.prompt, True, True)
    return JSONResp({"input_tokens": len(ids)})


@router.post("/responses")
@router.post("/v1/responses")
async def responses(request: Request):
    st = server(request)
    e, model = st.engine, st.engine.model
    chat = await _chat_body(request)
    req = parse_common(chat, st.params, e.n_slots, lambda s: model.tokenize(s, False, False))
    if req["n_cmpl"] != 1:
        raise invalid("Field 'n': the Responses API returns one output")
    prompt, out, task, queue = await submit_chat_turn(st, chat, req)
    resp_id = gen_id("resp_")
    try:
        if req["stream"]:
            first = await first_event(queue)
            proto = ResponsesStream(model=st.model_name, resp_id=resp_id)
            return StreamingResponse(stream_events(e, task, queue, first, out, proto, sse, lambda f: proto.finish(
                content=out.content, reasoning=out.reasoning, tool_calls=out.tool_calls, n_prompt=f["n_prompt"],
                n_cached=f["n_cached"], n_gen=f["n_decoded"], timings=f.get("timings"))),
                                     media_type="text/event-stream", headers=SSE_HEADERS)
        got = await collect_one(e, task, queue, request)
        if got is None:
            return Response(status_code=499)
        text, fin = got
        out.feed(text)
        out.finish()
        return JSONResp(response_object(resp_id=resp_id, model=st.model_name, content=out.content,
                                        reasoning=out.reasoning, tool_calls=out.tool_calls, n_prompt=fin["n_prompt"],
                                        n_cached=fin["n_cached"], n_gen=fin["n_decoded"]))
    except BaseException:
        e.cancel(task)
        raise

