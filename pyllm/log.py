"""Logging in llama-server's shape: "M.SS.mmm.uuu L tag  %12s: msg" on stderr (server and CLI tools)."""
from __future__ import annotations

import sys
import time

_T0 = time.monotonic()
_LOG_ENABLED = True
_LOG_VERBOSITY = 3


def configure_log(disable=False, verbosity=3):
    global _LOG_ENABLED, _LOG_VERBOSITY
    _LOG_ENABLED = not disable
    _LOG_VERBOSITY = verbosity


def log(msg: str, tag: str = "srv", func: str = "", level: str = "I"):
    if not _LOG_ENABLED:
        return
    if level == "D" and _LOG_VERBOSITY < 4:
        return
    t = time.monotonic() - _T0
    us = int(t * 1e6)
    ts = f"{us // 60_000_000}.{(us // 1_000_000) % 60:02d}.{(us // 1000) % 1000:03d}.{us % 1000:03d}"
    if func:
        line = f"{ts} {level} {tag}  {func[-12:]:>12}: {msg}"
    else:
        line = f"{ts} {level} {tag} {msg}"
    try:
        print(line, file=sys.stderr, flush=True)
    except Exception:
        pass
