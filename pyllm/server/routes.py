"""The endpoints around generation: health, props, models, tokenize / detokenize, apply-template, slots, metrics,
slot save / restore / erase (server/slot_files.py), and the llama-server endpoints pyllm answers with a clear 501
(embeddings, rerank, infill)."""
from __future__ import annotations

import asyncio
from typing import Optional

from fastapi import APIRouter, Request
from fastapi.responses import Response

from . import metrics as metrics_mod
from . import slot_files
from . import slots as slots_mod
from . import spec_request
from .prompts import chat_turn, check_ids, tokenize_mixed
from .schemas import ApiError, defaults_from_cli, invalid, task_params_json
from .state import BUILD_INFO, JSONResp, body_json, server

router = APIRouter()

_CAPS = ("supports_string_content", "supports_typed_content", "supports_tools", "supports_tool_calls",
         "supports_parallel_tool_calls", "supports_system_role", "supports_preserve_reasoning",
         "supports_reasoning_effort", "supports_object_arguments")


@router.get("/health")
@router.get("/v1/health")
async def health():
    return JSONResp({"status": "ok"})


def props_json(st) -> dict:
    e, params = st.engine, st.params
    m = e.model
    d = defaults_from_cli(params)
    d["n_predict"] = -1
    d["speculative"] = spec_request.parse({}, params)  # the real settings (llama-server shows "none" here by a bug)
    caps = {k: bool(st.chat.caps.get(k)) for k in _CAPS}  # llama-server's keys
    return {
        "default_generation_settings": {"params": task_params_json(d, True, params.spec_types_str),
                                        "n_ctx": e.n_ctx_slot},
        "total_slots": e.n_slots,
        "model_alias": st.model_name,
        "model_ftype": m.ftype,
        "model_path": params.model,
        "modalities": {"vision": False, "video": False, "audio": False},
        "media_marker": st.media_marker,
        "endpoint_slots": params.endpoint_slots, "endpoint_props": params.endpoint_props,
        "endpoint_metrics": params.endpoint_metrics,
        "ui": params.webui, "ui_settings": {},
        # pyllm's addition: the server's speculative settings (the defaults of the per-request speculative.* fields;
        # the UI's n-max page reads them)
        "speculative": {"type": e.spec, "n_max": params.spec_draft_n_max if e.spec != "none" else 0,
                        "n_min": params.spec_draft_n_min, "p_min": params.spec_draft_p_min,
                        "n_max_auto": bool(e.spec != "none" and params.spec_draft_n_max_auto),
                        "draft_head_type": params.spec_draft_head_type or None,
                        "draft_vocab": params.spec_draft_vocab, "draft_head": e.gen.draft_head_info if e.gen else "",
                        "accept": params.spec_accept},
        "chat_template": st.chat.template,
        "chat_template_caps": caps,
        "bos_token": m.special_text(m.bos),
        "eos_token": m.special_text(m.eos),
        "build_info": BUILD_INFO,
        "is_sleeping": False,
        "cors_proxy_enabled": False,
    }


@router.get("/props")
async def get_props(request: Request):
    return JSONResp(props_json(server(request)))


@router.post("/props")
async def post_props(request: Request):
    if not server(request).params.endpoint_props:
        raise ApiError("This server does not support changing global properties. Start it with `--props`",
                       501, "not_supported_error")
    await body_json(request)
    return JSONResp({"success": True})


@router.get("/models")
@router.get("/v1/models")
async def models(request: Request):
    st = server(request)
    e, params = st.engine, st.params
    m = e.model
    name = st.model_name
    return JSONResp({
        "models": [{"name": name, "model": name, "modified_at": "", "size": "", "digest": "", "type": "model",
                    "description": "", "tags": [""], "capabilities": ["completion"], "parameters": "",
                    "details": {"parent_model": "", "format": "gguf", "family": "", "families": [""],
                                "parameter_size": "", "quantization_level": ""}}],
        "object": "list",
        "data": [{"id": name, "aliases": list(params.model_alias), "tags": list(params.tags), "object": "model",
                  "created": int(st.created), "owned_by": "llamacpp",
                  "meta": {"vocab_type": m.vocab_type, "n_vocab": m.n_vocab,
                           "n_ctx": e.n_ctx_slot, "n_ctx_train": m.n_ctx_train, "n_embd": m.n_embd,
                           "n_params": m.n_params, "size": m.size_bytes, "ftype": m.ftype}}],
    })


@router.post("/tokenize")
async def tokenize(request: Request):
    model = server(request).engine.model
    body = await body_json(request)
    if not isinstance(body, dict):
        raise invalid("request body must be a JSON object")
    if "content" not in body:
        return JSONResp({"tokens": []})
    add_special = bool(body.get("add_special", False))
    parse_special = bool(body.get("parse_special", True))
    toks = await asyncio.to_thread(tokenize_mixed, model, body["content"], add_special, parse_special)
    if body.get("with_pieces", False):
        out = []
        for t in toks:
            b = model.token_to_piece(t, True)
            try:
                piece = b.decode("utf-8")
            except UnicodeDecodeError:
                piece = list(b)
            out.append({"id": t, "piece": piece})
        return JSONResp({"tokens": out})
    return JSONResp({"tokens": toks})


@router.post("/detokenize")
async def detokenize(request: Request):
    model = server(request).engine.model
    body = await body_json(request)
    toks = body.get("tokens", []) if isinstance(body, dict) else []
    if not isinstance(toks, list):
        raise invalid("'tokens' must be an array")
    check_ids(model, toks)
    return JSONResp({"content": model.detokenize(toks, True).decode("utf-8", "replace")})


@router.post("/apply-template")
async def apply_template(request: Request):
    st = server(request)
    body = await body_json(request)
    if not isinstance(body, dict):
        raise invalid("request body must be a JSON object")
    return JSONResp({"prompt": chat_turn(st.chat, body).prompt})


def _raise_slot_action(params):
    if not params.slot_save_path:
        raise ApiError("This server does not support slots action. Start it with `--slot-save-path`", 501,
                       "not_supported_error")
    raise invalid("slot actions are POST /slots/{id_slot}?action=save|restore|erase")


@router.get("/slots")
async def get_slots(request: Request):
    st = server(request)
    if not st.params.endpoint_slots:
        raise ApiError("This server does not support slots endpoint. Start it with `--slots`", 501,
                       "not_supported_error")
    if request.query_params.get("action") is not None:
        _raise_slot_action(st.params)
    if request.query_params.get("fail_on_no_slot") and not slots_mod.has_idle_slot(st.engine):
        raise ApiError("no slot available", 503, "unavailable_error")
    return JSONResp(slots_mod.slots_json(st.engine, st.params.spec_types_str))


@router.post("/slots/{id_slot}")
@router.post("/slots")
async def post_slots(request: Request, id_slot: Optional[str] = None):
    st = server(request)
    if not st.params.slot_save_path:
        _raise_slot_action(st.params)
    try:
        sid = int(id_slot if id_slot is not None else "x")
    except ValueError:
        raise invalid("Invalid slot ID")
    if sid < 0 or sid >= st.engine.n_slots:
        raise invalid("Invalid slot ID")
    action = request.query_params.get("action")
    if action not in ("save", "restore", "erase"):
        raise invalid("Invalid action")
    filename = None
    if action != "erase":
        body = await body_json(request)
        filename = body.get("filename") if isinstance(body, dict) else None
        try:
            slot_files.validate_filename(filename)
        except slot_files.SlotFileError as e:
            raise invalid(str(e))
    try:
        res = await asyncio.wrap_future(st.engine.slot_action(action, sid, filename))
    except slot_files.SlotFileError as e:
        raise invalid(str(e))
    except OSError as e:
        raise ApiError(f"Unable to save slot: {e}", 500, "server_error")
    return JSONResp(res)


@router.get("/metrics")
async def get_metrics(request: Request):
    st = server(request)
    if not st.params.endpoint_metrics:
        raise ApiError("This server does not support metrics endpoint. Start it with `--metrics`", 501,
                       "not_supported_error")
    m = st.engine.metrics_snapshot(reset_bucket=True)
    return Response(metrics_mod.render(m), media_type="text/plain; version=0.0.4",
                    headers={"Process-Start-Time-Unix": str(int(st.engine.t_start))})


# ------------------------------------------------------------------ endpoints pyllm does not implement
@router.post("/embedding")
@router.post("/embeddings")
@router.post("/v1/embeddings")
async def embeddings(request: Request):
    if not server(request).params.embedding:
        raise ApiError("This server does not support embeddings. Start it with `--embeddings`", 501,
                       "not_supported_error")
    raise ApiError("embeddings are not supported by pyllm", 501, "not_supported_error")


@router.post("/rerank")
@router.post("/reranking")
@router.post("/v1/rerank")
@router.post("/v1/reranking")
async def rerank(request: Request):
    if not server(request).params.reranking:
        raise ApiError("This server does not support reranking. Start it with `--reranking`", 501,
                       "not_supported_error")
    raise ApiError("reranking is not supported by pyllm", 501, "not_supported_error")


@router.post("/infill")
async def infill():
    raise ApiError("Infill is not supported by pyllm", 501, "not_supported_error")


@router.get("/lora-adapters")
async def lora_list():
    return JSONResp([])


@router.post("/lora-adapters")
async def lora_set(request: Request):
    body = await body_json(request)
    if not isinstance(body, list):
        raise invalid("Request body must be an array")
    for el in body:
        if not isinstance(el, dict) or not isinstance(el.get("id"), int) or isinstance(el.get("id"), bool):
            raise invalid("Invalid adapter id")
        raise invalid("Invalid adapter id")  # pyllm loads no LoRA adapters
    return JSONResp({"success": True})
