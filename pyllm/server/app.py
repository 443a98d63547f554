"""llama-server's HTTP API (single-model mode) on FastAPI. See docs/llama-server-api.md.

create_app wires the pieces: state.py (ServerState, the ASGI gate, JSON responses), routes.py (health, props,
models, tokenize, slots, metrics, ...), completions.py (/completion, /v1/completions, /v1/chat/completions),
messages.py (/v1/messages), oai_responses.py (/v1/responses) with the response shapes of responses.py, and
webui.py (the static web UI at /, registered last). The routes reach the model through pyllm's Python API only."""
from __future__ import annotations

from typing import Optional

from fastapi import FastAPI
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..args import Params
from . import completions, messages, oai_responses, routes, webui
from .schemas import ApiError
from .state import Gate, ServerState, error_response


def create_app(params: Params, core=None, state: Optional[ServerState] = None):
    """-> (asgi_app, state). The model is loaded by state.load() (the caller decides when).
    core: a stand-in for pyllm's C++ core (tests); None = the real one."""
    st = state or ServerState(params, core)
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    app.state.server = st

    @app.exception_handler(ApiError)
    async def _api_err(request, exc: ApiError):
        return error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_err(request, exc):
        if exc.status_code in (404, 405):
            return error_response(ApiError("File Not Found", 404, "not_found_error"), middleware=True)
        return error_response(ApiError(str(exc.detail), exc.status_code, "server_error"))

    @app.exception_handler(Exception)
    async def _any_err(request, exc):
        return error_response(ApiError(str(exc), 500, "server_error"))

    app.include_router(routes.router, prefix=params.api_prefix or "")
    app.include_router(completions.router, prefix=params.api_prefix or "")
    app.include_router(messages.router, prefix=params.api_prefix or "")
    app.include_router(oai_responses.router, prefix=params.api_prefix or "")
    app.include_router(webui.router, prefix=params.api_prefix or "")  # last: its catch-all GET serves files
    return Gate(app, st), st
