"""Quantized KV caches (-ctk / -ctv bf16 | q8_0 | q4_0, and the MTP layer's -ctkd / -ctvd): the memory they
take, batch invariance (a row's logits do not depend on its batch), MTP output == plain output, and the prompt
cache's states refusing a context of other cache types."""
import numpy as np
import pytest

from conftest import SHARED_MODELS, smollm2_path

from pyllm import _core
from pyllm.generation import Generator, Request
from pyllm.model import Model

QWEN = str(SHARED_MODELS / "qwen35-tiny-mtp-Q8_0.gguf")
TYPES = [("q8_0", "q8_0"), ("q4_0", "q4_0"), ("bf16", "bf16"), ("q8_0", "f16"), ("f16", "q4_0")]
TEXT = "The quick brown fox jumps over the lazy dog while the cat sleeps on the warm windowsill. "


def ctx(m, tk, tv, n_ctx=256, **kw):
    c = _core.Context(m, n_ctx, n_threads=1, **kw)
    c.set_cache_types(tk, tv, tk, tv)
    return c


def test_q8_0_halves_the_kv_memory():
    m = _core.Model(str(smollm2_path()), load_mtp=False)  # attention only: memory is all KV
    f16 = ctx(m, "f16", "f16", 1024).memory_bytes
    assert ctx(m, "q8_0", "q8_0", 1024).memory_bytes * 64 == f16 * 34  # 34-byte blocks of 32 values
    assert ctx(m, "q4_0", "q4_0", 1024).memory_bytes * 64 == f16 * 18
    assert ctx(m, "bf16", "bf16", 1024).memory_bytes == f16


@pytest.mark.parametrize("tk,tv", TYPES)
@pytest.mark.parametrize("path", ["qwen", "smollm2"])
def test_batch_invariance(tk, tv, path):
    m = _core.Model(QWEN if path == "qwen" else str(smollm2_path()), load_mtp=False)
    ids = list(m.tokenize(TEXT, True, False))[:16]
    batch = ctx(m, tk, tv).eval(0, ids, True)
    c = ctx(m, tk, tv)
    single = np.concatenate([c.eval(0, [t], False) for t in ids])
    assert np.array_equal(batch, single), f"{tk}/{tv}: one batch vs token by token"
    ref = ctx(m, "f16", "f16").eval(0, ids, True)
    assert not np.array_equal(ref, batch) or (tk, tv) == ("bf16", "bf16")  # the cache type is in effect
    assert (ref.argmax(-1) == batch.argmax(-1)).mean() >= (0.5 if "q4_0" in (tk, tv) else 0.8)  # close to f16


@pytest.mark.parametrize("tk,tv", TYPES[:3])
def test_mtp_output_equals_plain_output(tk, tv):
    m = Model(QWEN, load_mtp=True)
    p = m.tokenize(TEXT * 2)
    outs = []
    for spec in ("none", "draft-mtp"):
        g = Generator(m, n_ctx=512, n_threads=1, spec_type=spec, cache_type_k=tk, cache_type_v=tv,
                      draft_type_k=tk, draft_type_v=tv)
        fin = [ev.data for ev in g.run(Request(prompt=p, sampling={"temperature": 0}, n_predict=24)) if ev.kind == "done"]
        outs.append(fin[0]["tokens"])
        if spec != "none":
            assert fin[0]["stats"]["n_draft_accepted"] > 0
    assert outs[0] == outs[1]


def test_cache_type_errors_and_states():
    m = Model(QWEN, load_mtp=False)
    with pytest.raises(ValueError, match="not supported"):
        _core.Context(m._m, 256, n_threads=1).set_cache_types("q5_1", "f16", "f16", "f16")
    with pytest.raises(ValueError, match="unknown cache type"):
        _core.Context(m._m, 256, n_threads=1).set_cache_types("q9", "f16", "f16", "f16")
    g = Generator(m, n_ctx=256, n_threads=1, cache_type_k="q8_0", cache_type_v="q8_0")
    list(g.run(Request(prompt=m.tokenize(TEXT), sampling={"temperature": 0}, n_predict=4)))
    with pytest.raises(ValueError, match="before any sequence"):
        g.ctx.set_cache_types("f16", "f16", "f16", "f16")
    st = g.state_get(0)
    with pytest.raises(ValueError, match="cache types"):
        Generator(m, n_ctx=256, n_threads=1).state_set(0, st)
    g2 = Generator(m, n_ctx=256, n_threads=1, cache_type_k="q8_0", cache_type_v="q8_0")
    g2.state_set(0, st)
    r = [ev.data for ev in g2.run(Request(prompt=m.tokenize(TEXT), sampling={"temperature": 0}, n_predict=4))
         if ev.kind == "done"][0]
    assert r["n_cached"] == len(m.tokenize(TEXT)) - 1


def test_llama_type_k_type_v():
    from pyllm import Llama
    a = Llama(QWEN, n_ctx=256, n_threads=1, verbose=False, type_k=8, type_v=8)  # GGML_TYPE_Q8_0
    b = Llama(QWEN, n_ctx=256, n_threads=1, verbose=False, spec_type="draft-mtp", type_k=8, type_v=8)
    ta = a(TEXT, max_tokens=12, temperature=0)["choices"][0]["text"]
    assert ta == b(TEXT, max_tokens=12, temperature=0)["choices"][0]["text"]
    assert a._gen.cache_types == ("q8_0", "q8_0", "q8_0", "q8_0")
