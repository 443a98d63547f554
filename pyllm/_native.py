"""The one import of the C++ core (pyllm._core). A source checkout without a built core gets one clear line
saying what to run, instead of Python's "cannot import name '_core' from partially initialized module"."""
from __future__ import annotations

import importlib
import importlib.util

BUILD_HINT = ("pyllm's C++ core (pyllm._core) is not built: run `pip install -e .` in the pyllm checkout "
              "(or `tools/dev_build.sh` for an incremental developer build)")


class CoreNotBuiltError(ImportError):
    """pyllm._core cannot be found: the package was imported from a source tree that was never built."""


def _load():
    try:
        found = importlib.util.find_spec(__package__ + "._core") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise CoreNotBuiltError(BUILD_HINT) from None
    try:
        return importlib.import_module(__package__ + "._core")
    except ImportError as e:  # built, but it does not load (stale build, missing symbol): say which and what to run
        raise ImportError(f"pyllm's C++ core (pyllm._core) failed to load: {e}; rebuild it with `pip install -e .`") \
            from e


core = _load()
