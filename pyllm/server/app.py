"""llama-server's HTTP API (single-model mode) on FastAPI. See docs/llama-server-api.md."""
from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Optional

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import __version__
from ..args import Params
from ..chat import apply_chat_template, normalize_messages, resolve_chat_template
from ..generation import Event
from ..log import log
from .engine import Engine, Task
from . import metrics as metrics_mod
from . import slots as slots_mod
from .schemas import (ApiError, core_params, defaults_from_cli, gen_id, invalid, parse_common, parse_json_body,
                      task_params_json)
from .streaming import DONE, PING, SSE_HEADERS, dumps, sse

BUILD_INFO = f"b{__version__.replace('.', '')}-pyllm"
MAX_BODY = 256 * 1024 * 1024
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
        self.load_error: Optional[str] = None
        self.media_marker = "<__media_" + "".join(random.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=32)) + "__>"

    def load(self):
        eng = Engine(self.params, core=self.core)
        eng.load()
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
        extra = [(b"server", b"llama.cpp")]
        allow = None
        if p.cors_origins == "*":
            allow = origin if (origin and p.cors_credentials) else "*"
        elif p.cors_origins == "localhost":
            if origin:
                from urllib.parse import urlparse
                host = urlparse(origin).hostname or ""
                if host in ("localhost", "127.0.0.1", "::1"):
                    allow = origin
        else:
            allow = p.cors_origins
        if allow:
            extra.append((b"access-control-allow-origin", allow.encode("latin-1")))

        async def send2(msg):
            if msg["type"] == "http.response.start":
                hs = [h for h in msg.get("headers", []) if h[0].lower() != b"server"]
                msg["headers"] = hs + extra
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
        return await self.app(scope, receive, send2)


def create_app(params: Params, core=None, state: Optional[ServerState] = None):
    """-> (asgi_app, state). The model is loaded by state.load() (the caller decides when)."""
    st = state or ServerState(params, core)
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    app.state.server = st
    r = APIRouter()

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

    def eng() -> Engine:
        return st.engine

    async def body_json(request: Request):
        raw = await request.body()
        if len(raw) > MAX_BODY:
            raise ApiError("Request body too large", 413, "invalid_request_error")
        return parse_json_body(raw)

    def piece_str(tid: int) -> str:
        return eng().model.token_to_piece(tid, True).decode("utf-8", "replace")

    def tokens_to_str(ids) -> str:
        m = eng().model
        return b"".join(m.token_to_piece(t, True) for t in ids).decode("utf-8", "replace")

    def check_ids(ids):
        nv = eng().model.n_vocab
        for t in ids:
            if not isinstance(t, int) or isinstance(t, bool) or t < 0 or t >= nv:
                raise invalid(f"invalid token id: {t}")

    def tokenize_mixed(content, add_special: bool, parse_special: bool) -> list:
        m = eng().model
        if isinstance(content, str):
            return list(m.tokenize(content, add_special, parse_special))
        if isinstance(content, list):
            out = []
            for i, el in enumerate(content):
                if isinstance(el, str):
                    out += list(m.tokenize(el, add_special and i == 0, parse_special))
                elif isinstance(el, int) and not isinstance(el, bool):
                    out.append(el)
                else:
                    raise invalid("\"prompt\" elements must be strings or token ids")
            return out
        raise invalid("\"prompt\" must be a string or an array of strings / token ids")

    def split_prompts(prompt) -> list:
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

    def check_ctx(tokens):
        if not tokens:
            raise invalid("empty prompt")
        n_ctx = eng().n_ctx_slot
        if len(tokens) >= n_ctx:
            raise ApiError(f"request ({len(tokens)} tokens) exceeds the available context size ({n_ctx} tokens), "
                           "try increasing it", 400, "exceed_context_size_error",
                           {"n_prompt_tokens": len(tokens), "n_ctx": n_ctx})

    def chat_template_src() -> str:
        t = params.chat_template
        if not t and params.chat_template_file:
            try:
                with open(params.chat_template_file, encoding="utf-8") as f:
                    t = f.read()
            except OSError as e:
                raise ApiError(f"failed to read chat template file: {e}", 500, "server_error")
        return resolve_chat_template(t or None, {"tokenizer.chat_template": getattr(eng().model, "chat_template", None)})

    def render_chat(body: dict) -> str:
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
        m = eng().model
        bos = m.token_to_piece(m.bos, True).decode("utf-8", "replace") if m.bos >= 0 else ""
        eos = m.token_to_piece(m.eos, True).decode("utf-8", "replace") if m.eos >= 0 else ""
        try:
            return apply_chat_template(chat_template_src(), norm, add_generation_prompt=agp, bos_token=bos,
                                       eos_token=eos, tools=tools, **kwargs)
        except ApiError:
            raise
        except Exception as e:
            raise ApiError(f"failed to apply chat template: {e}", 500, "server_error")

    # ------------------------------------------------------------------ routes
    @r.get("/health")
    @r.get("/v1/health")
    async def health():
        return JSONResp({"status": "ok"})

    def props_json() -> dict:
        e = eng()
        m = e.model
        d = defaults_from_cli(params)
        d["n_predict"] = -1
        caps = {k: False for k in ("supports_string_content", "supports_typed_content", "supports_tools",
                                   "supports_tool_calls", "supports_parallel_tool_calls", "supports_system_role",
                                   "supports_preserve_reasoning", "supports_reasoning_effort",
                                   "supports_object_arguments")}
        caps["supports_string_content"] = True
        caps["supports_system_role"] = True
        return {
            "default_generation_settings": {"params": task_params_json(d, True, "none"), "n_ctx": e.n_ctx_slot},
            "total_slots": e.n_slots,
            "model_alias": st.model_name,
            "model_ftype": getattr(m, "ftype", None) or getattr(m, "desc", ""),
            "model_path": params.model,
            "modalities": {"vision": False, "video": False, "audio": False},
            "media_marker": st.media_marker,
            "endpoint_slots": params.endpoint_slots, "endpoint_props": params.endpoint_props,
            "endpoint_metrics": params.endpoint_metrics,
            "ui": False, "ui_settings": {},
            "chat_template": chat_template_src(),
            "chat_template_caps": caps,
            "bos_token": piece_str(m.bos) if m.bos >= 0 else "",
            "eos_token": piece_str(m.eos) if m.eos >= 0 else "",
            "build_info": BUILD_INFO,
            "is_sleeping": False,
            "cors_proxy_enabled": False,
        }

    @r.get("/props")
    async def get_props():
        return JSONResp(props_json())

    @r.post("/props")
    async def post_props(request: Request):
        if not params.endpoint_props:
            raise ApiError("This server does not support changing global properties. Start it with `--props`",
                           501, "not_supported_error")
        await body_json(request)
        return JSONResp({"success": True})

    @r.get("/models")
    @r.get("/v1/models")
    async def models():
        e = eng()
        m = e.model
        name = st.model_name
        return JSONResp({
            "models": [{"name": name, "model": name, "modified_at": "", "size": "", "digest": "", "type": "model",
                        "description": "", "tags": [""], "capabilities": ["completion"], "parameters": "",
                        "details": {"parent_model": "", "format": "gguf", "family": "", "families": [""],
                                    "parameter_size": "", "quantization_level": ""}}],
            "object": "list",
            "data": [{"id": name, "aliases": list(params.model_alias), "tags": list(params.tags), "object": "model",
                      "created": int(st_created), "owned_by": "llamacpp",
                      "meta": {"vocab_type": int(getattr(m, "vocab_type", 2) or 2), "n_vocab": m.n_vocab,
                               "n_ctx": e.n_ctx_slot, "n_ctx_train": m.n_ctx_train, "n_embd": m.n_embd,
                               "n_params": m.n_params, "size": m.size_bytes,
                               "ftype": getattr(m, "ftype", None) or getattr(m, "desc", "")}}],
        })

    st_created = time.time()

    @r.post("/tokenize")
    async def tokenize(request: Request):
        body = await body_json(request)
        if not isinstance(body, dict):
            raise invalid("request body must be a JSON object")
        if "content" not in body:
            return JSONResp({"tokens": []})
        add_special = bool(body.get("add_special", False))
        parse_special = bool(body.get("parse_special", True))
        toks = await asyncio.to_thread(tokenize_mixed, body["content"], add_special, parse_special)
        if body.get("with_pieces", False):
            out = []
            for t in toks:
                b = eng().model.token_to_piece(t, True)
                try:
                    piece = b.decode("utf-8")
                except UnicodeDecodeError:
                    piece = list(b)
                out.append({"id": t, "piece": piece})
            return JSONResp({"tokens": out})
        return JSONResp({"tokens": toks})

    @r.post("/detokenize")
    async def detokenize(request: Request):
        body = await body_json(request)
        toks = body.get("tokens", []) if isinstance(body, dict) else []
        if not isinstance(toks, list):
            raise invalid("'tokens' must be an array")
        check_ids(toks)
        return JSONResp({"content": tokens_to_str(toks)})

    @r.post("/apply-template")
    async def apply_template(request: Request):
        body = await body_json(request)
        if not isinstance(body, dict):
            raise invalid("request body must be a JSON object")
        return JSONResp({"prompt": render_chat(body)})

    @r.get("/slots")
    async def get_slots(request: Request):
        if not params.endpoint_slots:
            raise ApiError("This server does not support slots endpoint. Start it with `--slots`", 501,
                           "not_supported_error")
        action = request.query_params.get("action")
        if action is not None:
            raise_slot_action()
        if request.query_params.get("fail_on_no_slot") and not slots_mod.has_idle_slot(eng()):
            raise ApiError("no slot available", 503, "unavailable_error")
        return JSONResp(slots_mod.slots_json(eng(), params.spec_types_str))

    def raise_slot_action():
        if not params.slot_save_path:
            raise ApiError("This server does not support slots action. Start it with `--slot-save-path`", 501,
                           "not_supported_error")
        raise ApiError("slot save/restore/erase is not supported by pyllm", 501, "not_supported_error")

    @r.post("/slots/{id_slot}")
    @r.post("/slots")
    async def post_slots(request: Request, id_slot: Optional[str] = None):
        if not params.slot_save_path:
            raise_slot_action()
        try:
            sid = int(id_slot if id_slot is not None else "x")
        except ValueError:
            raise invalid("Invalid slot ID")
        if sid < 0 or sid >= eng().n_slots:
            raise invalid("Invalid slot ID")
        if request.query_params.get("action") not in ("save", "restore", "erase"):
            raise invalid("Invalid action")
        raise_slot_action()

    @r.get("/metrics")
    async def get_metrics():
        if not params.endpoint_metrics:
            raise ApiError("This server does not support metrics endpoint. Start it with `--metrics`", 501,
                           "not_supported_error")
        m = eng().metrics_snapshot(reset_bucket=True)
        return Response(metrics_mod.render(m), media_type="text/plain; version=0.0.4",
                        headers={"Process-Start-Time-Unix": str(int(eng().t_start))})

    # ------------------------------------------------------------------ completions
    async def run_completion(request: Request, kind: str):
        body = await body_json(request)
        if not isinstance(body, dict):
            raise invalid("request body must be a JSON object")
        e = eng()
        vocab = lambda s: e.model.tokenize(s, False, False)
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
            prompt_text = await asyncio.to_thread(render_chat, body)
            prompts = [await asyncio.to_thread(tokenize_mixed, prompt_text, True, True)]
        else:
            if "logprobs" in body and "n_probs" not in body and body["logprobs"] is not None:
                lp = body["logprobs"]
                body = dict(body)
                body["n_probs"] = lp if not isinstance(lp, bool) else (1 if lp else 0)
            req = parse_common(body, params, e.n_slots, vocab)
            if "prompt" not in body or body["prompt"] is None:
                raise invalid("\"prompt\" must be provided")
            raw_prompts = split_prompts(body["prompt"])
            prompts = []
            for rp in raw_prompts:
                prompts.append(await asyncio.to_thread(tokenize_mixed, rp, True, True))
        for pt in prompts:
            check_ids(pt)
            check_ctx(pt)
        eog = [t for t in (e.model.eos, getattr(e.model, "eot", -1)) if t is not None and t >= 0]
        gen_settings = task_params_json(req, False, params.spec_types_str, eog)
        slot_params = task_params_json(req, True, params.spec_types_str)
        cp = core_params(req)
        tasks = []
        for i, pt in enumerate(prompts):
            for j in range(req["n_cmpl"]):
                cpj = dict(cp)
                if j > 0 and req["seed"] != 4294967295:
                    cpj["seed"] = (req["seed"] + j) & 0xFFFFFFFF
                tasks.append(Task(prompt=pt, params=cpj, n_predict=req["n_predict"], stop=list(req["stop"]),
                                  n_probs=req["n_probs"], post_sampling_probs=req["post_sampling_probs"],
                                  id_slot=req["id_slot"], cache_prompt=req["cache_prompt"], stream=req["stream"],
                                  index=len(tasks), params_json=slot_params,
                                  timings_per_token=bool(req.get("timings_per_token"))))
        queue: asyncio.Queue = asyncio.Queue()
        for t in tasks:
            e.submit(t, queue)
        ctx = {"kind": kind, "req": req, "gen": gen_settings, "id": gen_id(), "created": int(time.time()),
               "include_usage": bool((body.get("stream_options") or {}).get("include_usage")) if isinstance(
                   body.get("stream_options"), dict) else False}
        try:
            if req["stream"]:
                # wait for the first result: an error before streaming is a normal JSON error
                first = await queue.get()
                if first.kind == "error":
                    raise ApiError(first.data["message"], first.data["code"], first.data["type"])
                return StreamingResponse(stream_gen(tasks, queue, first, ctx, request),
                                         media_type="text/event-stream", headers=SSE_HEADERS)
            return await collect(tasks, queue, ctx, request)
        except BaseException:
            for t in tasks:
                e.cancel(t)
            raise

    def finish_reason(stop_type: str) -> str:
        return "stop" if stop_type in ("eos", "word") else "length"

    def native_final(task: Task, fin: dict, content: str, probs: list, ctx: dict, stream: bool) -> dict:
        req = ctx["req"]
        d = {"index": task.index, "content": content,
             "tokens": fin["tokens"] if (req["return_tokens"] and not stream) else [],
             "id_slot": fin["id_slot"], "stop": True, "model": st.model_name,
             "tokens_predicted": fin["n_decoded"], "tokens_evaluated": fin["n_prompt"],
             "generation_settings": ctx["gen"], "prompt": tokens_to_str(task.prompt),
             "has_new_line": fin["has_new_line"], "truncated": fin["truncated"], "stop_type": fin["stop_type"],
             "stopping_word": fin["stopping_word"],
             "tokens_cached": max(0, fin["n_prompt"] + fin["n_decoded"] - 1), "timings": fin["timings"]}
        if req["n_probs"] > 0 and not stream:
            d["completion_probabilities"] = probs
        if req["response_fields"] and not stream:
            proj = {}
            for f in req["response_fields"]:
                cur = d
                ok = True
                for part in f.split("/"):
                    if isinstance(cur, dict) and part in cur:
                        cur = cur[part]
                    else:
                        ok = False
                        break
                if ok:
                    proj[f] = cur
            d = proj
        return d

    def usage(fin_list) -> dict:
        ct = sum(f["n_decoded"] for f in fin_list)
        pt = sum(f["n_prompt"] for f in fin_list)
        cached = sum(f["n_cached"] for f in fin_list)
        return {"completion_tokens": ct, "prompt_tokens": pt, "total_tokens": ct + pt,
                "prompt_tokens_details": {"cached_tokens": cached}}

    def oai_base(ctx, obj):
        return {"created": ctx["created"], "model": st.model_name, "system_fingerprint": BUILD_INFO,
                "object": obj, "id": ctx["id"]}

    async def collect(tasks, queue, ctx, request: Request):
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
                        eng().cancel(t)
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
                    eng().cancel(t)
                raise ApiError(ev.data["message"], ev.data["code"], ev.data["type"])
        kind = ctx["kind"]
        if kind == "native":
            out = [native_final(t, fins[k], texts[k], probs[k], ctx, False) for k, t in enumerate(tasks)]
            return JSONResp(out[0] if len(out) == 1 else out)
        timings = fins[-1]["timings"] if fins else {}
        if kind == "oai":
            choices = [{"text": texts[k], "index": k,
                        "logprobs": {"content": probs[k]} if ctx["req"]["n_probs"] > 0 else None,
                        "finish_reason": finish_reason(fins[k]["stop_type"])} for k in range(n)]
            d = {"choices": choices}
            d.update(oai_base(ctx, "text_completion"))
            d["usage"] = usage(fins)
            d["id"] = ctx["id"]
            d = {"choices": choices, "created": ctx["created"], "model": st.model_name,
                 "system_fingerprint": BUILD_INFO, "object": "text_completion", "usage": usage(fins),
                 "id": ctx["id"], "timings": timings}
            return JSONResp(d)
        choices = []
        for k in range(n):
            c = {"finish_reason": finish_reason(fins[k]["stop_type"]), "index": k,
                 "message": {"role": "assistant", "content": texts[k]}}
            if ctx["req"]["n_probs"] > 0:
                c["logprobs"] = {"content": probs[k]}
            choices.append(c)
        d = {"choices": choices, "created": ctx["created"], "model": st.model_name,
             "system_fingerprint": BUILD_INFO, "object": "chat.completion", "usage": usage(fins),
             "id": ctx["id"], "timings": timings}
        return JSONResp(d)

    async def stream_gen(tasks, queue, first: Event, ctx, request: Request):
        kind = ctx["kind"]
        req = ctx["req"]
        n = len(tasks)
        fins = [None] * n
        texts = [""] * n
        started = [False] * n
        remaining = n
        ping = req["sse_ping_interval"]
        pending: Optional[Event] = first
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
                    continue
                if ev.kind == "error":
                    yield sse({"error": {"code": ev.data["code"], "message": ev.data["message"],
                                         "type": ev.data["type"]}})
                    return
                if ev.kind == "token":
                    texts[i] += ev.text
                    if kind == "native":
                        d = {"index": t.index, "content": ev.text, "tokens": ev.tokens, "stop": False,
                             "id_slot": t.slot, "tokens_predicted": ev.data.get("n_decoded", 0),
                             "tokens_evaluated": len(t.prompt)}
                        if req["n_probs"] > 0:
                            d["completion_probabilities"] = ev.probs
                        if "timings" in ev.data:
                            d["timings"] = ev.data["timings"]
                        yield sse(d)
                    elif kind == "oai":
                        d = {"choices": [{"text": ev.text, "index": i,
                                          "logprobs": {"content": ev.probs} if req["n_probs"] > 0 else None,
                                          "finish_reason": None}]}
                        d.update(oai_base(ctx, "text_completion"))
                        if "timings" in ev.data:
                            d["timings"] = ev.data["timings"]
                        yield sse(d)
                    else:
                        if not started[i]:
                            started[i] = True
                            yield sse(chat_chunk(ctx, i, {"role": "assistant", "content": None}))
                        c = chat_chunk(ctx, i, {"content": ev.text})
                        if req["n_probs"] > 0:
                            c["choices"][0]["logprobs"] = {"content": ev.probs}
                        if "timings" in ev.data:
                            c["timings"] = ev.data["timings"]
                        yield sse(c)
                    continue
                if ev.kind == "done":
                    fins[i] = ev.data
                    remaining -= 1
                    last = remaining == 0
                    if kind == "native":
                        yield sse(native_final(t, ev.data, "", [], ctx, True))
                    elif kind == "oai":
                        d = {"choices": [{"text": "", "index": i, "logprobs": None,
                                          "finish_reason": finish_reason(ev.data["stop_type"])}],
                             "created": ctx["created"], "model": st.model_name, "system_fingerprint": BUILD_INFO,
                             "object": "text_completion", "usage": usage([ev.data]), "id": ctx["id"],
                             "timings": ev.data["timings"]}
                        yield sse(d)
                    else:
                        if not started[i]:
                            started[i] = True
                            yield sse(chat_chunk(ctx, i, {"role": "assistant", "content": None}))
                        c = chat_chunk(ctx, i, {}, finish_reason(ev.data["stop_type"]))
                        if not (last and ctx["include_usage"]):
                            c["timings"] = ev.data["timings"]
                        yield sse(c)
                        if last and ctx["include_usage"]:
                            u = {"choices": [], "created": ctx["created"], "id": ctx["id"], "model": st.model_name,
                                 "system_fingerprint": BUILD_INFO, "object": "chat.completion.chunk",
                                 "usage": usage([f for f in fins if f]), "timings": ev.data["timings"]}
                            yield sse(u)
            if kind != "native":
                yield DONE
        finally:
            for t in tasks:
                eng().cancel(t)

    def chat_chunk(ctx, i, delta, finish=None) -> dict:
        return {"choices": [{"finish_reason": finish, "index": i, "delta": delta}], "created": ctx["created"],
                "id": ctx["id"], "model": st.model_name, "system_fingerprint": BUILD_INFO,
                "object": "chat.completion.chunk"}

    # ------------------------------------------------------------------ endpoints pyllm does not implement
    @r.post("/embedding")
    @r.post("/embeddings")
    @r.post("/v1/embeddings")
    async def embeddings():
        if not params.embedding:
            raise ApiError("This server does not support embeddings. Start it with `--embeddings`", 501,
                           "not_supported_error")
        raise ApiError("embeddings are not supported by pyllm", 501, "not_supported_error")

    @r.post("/rerank")
    @r.post("/reranking")
    @r.post("/v1/rerank")
    @r.post("/v1/reranking")
    async def rerank():
        if not params.reranking:
            raise ApiError("This server does not support reranking. Start it with `--reranking`", 501,
                           "not_supported_error")
        raise ApiError("reranking is not supported by pyllm", 501, "not_supported_error")

    @r.post("/infill")
    async def infill():
        raise ApiError("Infill is not supported by pyllm", 501, "not_supported_error")

    @r.get("/lora-adapters")
    async def lora_list():
        return JSONResp([])

    @r.post("/lora-adapters")
    async def lora_set(request: Request):
        body = await body_json(request)
        if not isinstance(body, list):
            raise invalid("Request body must be an array")
        for el in body:
            if not isinstance(el, dict) or not isinstance(el.get("id"), int) or isinstance(el.get("id"), bool):
                raise invalid("Invalid adapter id")
            raise invalid("Invalid adapter id")  # pyllm loads no LoRA adapters
        return JSONResp({"success": True})

    @r.post("/completion")
    @r.post("/completions")
    async def completion(request: Request):
        return await run_completion(request, "native")

    @r.post("/v1/completions")
    async def v1_completions(request: Request):
        return await run_completion(request, "oai")

    @r.post("/chat/completions")
    @r.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await run_completion(request, "chat")

    app.include_router(r, prefix=params.api_prefix or "")
    return Gate(app, st), st
