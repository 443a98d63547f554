"""The server's shared state (the loaded engine, model naming), the JSON response class and the pure-ASGI gate
(Server header, CORS, loading 503, API key, body size) in front of the routes."""
from __future__ import annotations

import random
import time
from email.utils import formatdate
from typing import Optional

from fastapi import Request
from fastapi.responses import Response

from .. import __version__
from ..args import Params
from ..log import log
from . import webui
from .engine import Engine
from .schemas import ApiError, parse_json_body
from .streaming import dumps

BUILD_INFO = f"b{__version__.replace('.', '')}-pyllm"
# the largest request body read (413 above it, before reading it when Content-Length says so): far above any real
# prompt (a 256k-token context is ~1 MB of text), low enough that a stray upload cannot stall the server
MAX_BODY = 32 * 1024 * 1024
PUBLIC_PATHS = {"/health", "/v1/health"}


class JSONResp(Response):
    media_type = "application/json; charset=utf-8"

    def render(self, content) -> bytes:
        return dumps(content).encode("utf-8")


def error_response(e: ApiError, middleware=False) -> JSONResp:
    if middleware:  # middleware errors use key order message, type, code
        return JSONResp({"error": {"message": e.message, "type": e.type, "code": e.code}}, status_code=e.code)
    return JSONResp(e.body(), status_code=e.code)


class ServerState:
    def __init__(self, params: Params, core=None):
        self.params = params
        self.core = core
        self.engine: Optional[Engine] = None
        self.chat = None  # pyllm.chat_request.ChatSetup of the loaded model
        self.load_error: Optional[str] = None
        self.created = time.time()  # /v1/models "created"
        self.media_marker = "<__media_" + "".join(random.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=32)) + "__>"

    def load(self):
        from .prompts import chat_setup
        eng = Engine(self.params, core=self.core)
        eng.load()
        self.chat = chat_setup(self.params, eng.model)  # template caps and tool format, once
        self.engine = eng

    @property
    def ready(self) -> bool:
        return self.engine is not None and self.engine.loaded

    # model naming (§1.10)
    @property
    def model_name(self) -> str:
        if self.params.model_alias:
            return sorted(self.params.model_alias)[0]
        return self.params.hf_repo or self.params.model


def _spell(name: bytes) -> bytes:
    """A header name as llama-server (cpp-httplib) spells it: Content-Type, Process-Start-Time-Unix (starlette
    lowercases names; h11 sends them as given, and some clients compare them case-sensitively)."""
    return b"-".join(w[:1].upper() + w[1:] for w in name.split(b"-"))


def _is_localhost(origin: str) -> bool:
    from urllib.parse import urlparse
    try:
        return (urlparse(origin).hostname or "") in ("localhost", "127.0.0.1", "::1")
    except ValueError:
        return False


class Gate:
    """Pure-ASGI middleware: Server header, CORS, loading 503, API key, body size (order as llama-server)."""

    def __init__(self, app, state: ServerState):
        self.app = app
        self.state = state

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        p = self.state.params
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        origin = headers.get("origin")
        extra = [(b"Server", b"llama.cpp")]
        # llama-server's CORS (section 1): with credentials, "*" echoes the request's Origin (empty without one);
        # "localhost" echoes only a localhost origin; anything else is sent as given
        allow = None
        if p.cors_origins == "*" and p.cors_credentials:
            allow = origin or ""
        elif p.cors_origins == "localhost":
            if origin and _is_localhost(origin):
                allow = origin
            elif origin:
                log(f"(CORS) skip non-localhost origin: {origin}", "srv", "operator()", "W")
        else:
            allow = p.cors_origins
        if allow is not None:
            extra.append((b"Access-Control-Allow-Origin", allow.encode("latin-1")))

        async def send2(msg):
            if msg["type"] == "http.response.start":
                hs = [(_spell(k), v) for k, v in msg.get("headers", []) if k.lower() != b"server"]
                msg["headers"] = hs + extra + [(b"Date", formatdate(usegmt=True).encode())]
            await send(msg)

        method = scope["method"]
        if method == "OPTIONS":
            resp = Response(b"", status_code=200, media_type="text/html", headers={
                "Access-Control-Allow-Credentials": "true" if p.cors_credentials else "false",
                "Access-Control-Allow-Methods": p.cors_methods,
                "Access-Control-Allow-Headers": p.cors_headers})
            return await resp(scope, receive, send2)
        path = scope["path"]
        if p.api_prefix and path.startswith(p.api_prefix):
            path = path[len(p.api_prefix):] or "/"
        if webui.is_public(p, method, path):  # UI files: no key, served while the model loads
            return await self.app(scope, receive, send2)
        if not self.state.ready:
            e = ApiError("Loading model", 503, "unavailable_error")
            return await error_response(e, middleware=True)(scope, receive, send2)
        if p.api_keys and path not in PUBLIC_PATHS:
            key = headers.get("authorization")
            if key is not None:
                if key.startswith("Bearer "):
                    key = key[7:]
            else:
                key = headers.get("x-api-key")
            if key not in p.api_keys:
                e = ApiError("Invalid API Key", 401, "authentication_error")
                return await error_response(e, middleware=True)(scope, receive, send2)
        cl = headers.get("content-length")
        if cl is not None and cl.isdigit() and int(cl) > MAX_BODY:
            e = ApiError("Request body too large", 413, "invalid_request_error")
            return await error_response(e)(scope, receive, send2)
        seen = 0

        async def receive2():  # a chunked body has no Content-Length: count as it arrives
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > MAX_BODY:
                    raise ApiError("Request body too large", 413, "invalid_request_error")
            return msg
        return await self.app(scope, receive2, send2)


def server(request: Request) -> ServerState:
    """The ServerState of the app serving `request` (routes reach the engine through it)."""
    return request.app.state.server


def engine(request: Request) -> Engine:
    return request.app.state.server.engine


async def body_json(request: Request):
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise ApiError("Request body too large", 413, "invalid_request_error")
    return parse_json_body(raw)
