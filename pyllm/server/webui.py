"""The web UI at `/` (llama-server's --ui / --no-ui / --path): the static files of pyllm/server/webui/, or of the
--path folder instead. Like llama-server's UI assets they are public (no API key) and served while the model
loads; the page itself asks for the key when the API answers 401. With --no-ui, `/` is a 404 and `/sw.js` is a
service worker that unregisters itself (so a browser that cached another UI's worker drops it)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, Response
from starlette.exceptions import HTTPException

from .streaming import dumps

UI_DIR = Path(__file__).with_name("webui")
SW_UNREGISTER = ("self.addEventListener('install', () => self.skipWaiting());\n"
                 "self.addEventListener('activate', () => self.registration.unregister());\n")

router = APIRouter()


def ui_dir(params) -> Optional[Path]:
    if not params.webui:
        return None
    return Path(params.static_path).resolve() if params.static_path else UI_DIR


def ui_file(params, path: str) -> Optional[Path]:
    """The file a GET of `path` (the API prefix removed) serves; None when `path` is not a UI file.
    Never a file outside the UI folder (`..`, symlinks out of it)."""
    d = ui_dir(params)
    if d is None:
        return None
    rel = path.lstrip("/")
    if rel == "" or rel.endswith("/"):
        rel += "index.html"
    try:
        f = (d / rel).resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    if f != d and d not in f.parents:
        return None
    return f if f.is_file() else None


def is_public(params, method: str, path: str) -> bool:
    """Whether the gate lets this request through without an API key and before the model is loaded."""
    if method not in ("GET", "HEAD"):
        return False
    if not params.webui:
        return path == "/sw.js"
    return ui_file(params, path) is not None


@router.get("/bench-tasks.json")
async def bench_tasks():
    """pyllm-bench's built-in task prompts (one place: pyllm.bench.prompts), for the UI's n-max page."""
    from ..bench.prompts import TASKS
    return Response(dumps(dict(TASKS)), media_type="application/json; charset=utf-8")


@router.get("/{path:path}")
async def static(request: Request, path: str):
    params = request.app.state.server.params
    if not params.webui and path == "sw.js":
        return Response(SW_UNREGISTER, media_type="application/javascript")
    f = ui_file(params, "/" + path)
    if f is None:
        raise HTTPException(404)  # answered like any unknown route
    # no-cache: a browser revalidates, so a new pyllm version's UI is picked up at the next load
    return FileResponse(f, headers={"Cache-Control": "no-cache"})
