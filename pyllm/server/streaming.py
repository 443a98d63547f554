"""Server-sent events exactly as llama-server writes them."""
from __future__ import annotations

import json


def dumps(obj) -> str:
    # nlohmann::json::dump(): compact, UTF-8 kept, -inf/nan -> null
    return json.dumps(_finite(obj), ensure_ascii=False, separators=(",", ":"))


def _finite(o):
    if isinstance(o, float):
        return o if o == o and o not in (float("inf"), float("-inf")) else None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o


def sse(obj) -> bytes:
    return ("data: " + dumps(obj) + "\n\n").encode("utf-8")


DONE = b"data: [DONE]\n\n"
PING = b":\n\n"
SSE_HEADERS = {"X-Accel-Buffering": "no", "Cache-Control": "no-cache"}
