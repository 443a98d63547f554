"""pyllm: a llama.cpp-compatible GGUF inference runtime with MTP speculative decoding."""
from . import _core
from ._core import GGUFError, GGUFFile

__all__ = ["GGUFError", "GGUFFile", "_core"]
__version__ = "0.1.0"
