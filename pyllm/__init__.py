"""pyllm: a llama.cpp-compatible GGUF inference runtime with MTP speculative decoding.

    from pyllm import Llama
    llm = Llama(model_path="model.gguf", spec_type="draft-mtp", spec_draft_n_max=3)
    print(llm("def f(", max_tokens=32)["choices"][0]["text"])

`Llama` follows llama-cpp-python's `Llama` (names, arguments, return shapes); see its docstrings.
"""
from ._native import core as _core  # the C++ core; a missing build fails here with one line saying what to run

GGUFError = _core.GGUFError
GGUFFile = _core.GGUFFile

from .llama import Llama  # noqa: E402  (needs the core)

__all__ = ["Llama", "GGUFError", "GGUFFile"]
__version__ = "0.1.0"
