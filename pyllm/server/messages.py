"""Anthropic's Messages API as llama-server serves it: /v1/messages (a Message, or its SSE events) and
/v1/messages/count_tokens. The body is converted to a chat request (pyllm.anthropic.messages_to_chat) and
takes the chat path: the same template rendering, constraint and ChatOutput split as /v1/chat/completions."""
from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from ..anthropic import AnthropicError, AnthropicStream, count_tokens_response, message_response, messages_to_chat
from ..anthropic import sse as anthropic_sse
from .chat_events import collect_one, first_event, stream_events, submit_chat_turn
from .prompts import chat_turn, tokenize_mixed
from .schemas import check_fields, invalid, parse_common
from .state import JSONResp, body_json, server
from .streaming import SSE_HEADERS

router = APIRouter()


async def _chat_body(request: Request, count_tokens: bool) -> dict:
    body = await body_json(request)
    try:
        chat = messages_to_chat(body, count_tokens)
    except AnthropicError as e:
        raise invalid(str(e))
    check_fields(chat, "chat")  # a field pyllm does not implement: 400 naming it, as on chat
    return chat


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request):
    st = server(request)
    chat = await _chat_body(request, True)
    turn = await asyncio.to_thread(chat_turn, st.chat, chat)
    ids = await asyncio.to_thread(tokenize_mixed, st.engine.model, turn.prompt, True, True)
    return JSONResp(count_tokens_response(len(ids)))


@router.post("/v1/messages")
async def messages(request: Request):
    st = server(request)
    e, model = st.engine, st.engine.model
    chat = await _chat_body(request, False)
    req = parse_common(chat, st.params, e.n_slots, lambda s: model.tokenize(s, False, False))
    prompt, out, task, queue = await submit_chat_turn(st, chat, req)
    try:
        if req["stream"]:
            first = await first_event(queue)
            proto = AnthropicStream(model=st.model_name, n_prompt=len(prompt))
            closing = lambda f: proto.finish(f["stop_type"], f["n_decoded"], f["stopping_word"])  # noqa: E731
            return StreamingResponse(stream_events(e, task, queue, first, out, proto, anthropic_sse, closing),
                                     media_type="text/event-stream", headers=SSE_HEADERS)
        got = await collect_one(e, task, queue, request)
        if got is None:
            return Response(status_code=499)
        text, fin = got
        out.feed(text)
        out.finish()
        return JSONResp(message_response(model=st.model_name, content=out.content, reasoning=out.reasoning,
                                         tool_calls=out.tool_calls, stop=fin["stop_type"],
                                         stopping_word=fin["stopping_word"], n_prompt=fin["n_prompt"],
                                         n_cached=fin["n_cached"], n_gen=fin["n_decoded"]))
    except BaseException:
        e.cancel(task)
        raise

