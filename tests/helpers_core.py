"""Shared helpers for the pyllm._core tests (test_golden, test_core_invariants, test_mtp).

Fixture rules (see shared/models/README.md):
* ``complete`` entries hold upstream llama-server's greedy ``tokens`` (n_predict 32, ignore_eos) and per-step
  ``top_logprobs`` ([[id, logprob] x 5]). When a generated token ends inside an incomplete UTF-8 sequence, upstream
  merges its probability entry into the next one, so ``top_logprobs`` can have fewer steps than ``tokens``:
  steps are aligned to tokens by matching each step's top-1 id to the greedy token.
* A greedy divergence from upstream is accepted only at a step where upstream's own top-1/top-2 log-prob gap is
  below NEAR_TIE (a near-tie that any rounding difference may flip); tokens after it are not compared.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
from pathlib import Path

import numpy as np

from conftest import FIXTURES, ROOT, SHARED_MODELS, gemma3_path, smollm2_path

from pyllm import _core
from pyllm import sampling

NEAR_TIE = 0.02

# Threads for the bulk of the tests. Results are bit-identical for any thread count (checked by
# test_core_invariants.py::test_thread_count_invariance, which also runs 2 and 3 threads), and on a shared 2-core box
# one thread is several times faster than two, so 1 is the default here; PYLLM_TEST_THREADS=2 runs everything threaded.
THREADS = int(os.environ.get("PYLLM_TEST_THREADS", "1"))

# model key -> (path getter, plain fixture file)
MODELS = {
    "qwen35-F16": (lambda: SHARED_MODELS / "qwen35-tiny-mtp-F16.gguf", "qwen35-tiny-mtp-F16.llamacpp.json"),
    "qwen35-Q8_0": (lambda: SHARED_MODELS / "qwen35-tiny-mtp-Q8_0.gguf", "qwen35-tiny-mtp-Q8_0.llamacpp.json"),
    "qwen35-Q4_K_M": (lambda: SHARED_MODELS / "qwen35-tiny-mtp-Q4_K_M.gguf", "qwen35-tiny-mtp-Q4_K_M.llamacpp.json"),
    "moe-Q8_0": (lambda: SHARED_MODELS / "tiny-qwen35moe-mtp-random-Q8_0.gguf",
                 "tiny-qwen35moe-mtp-random-Q8_0.llamacpp.json"),
    "moe-fused-Q4_K_M": (lambda: SHARED_MODELS / "tiny-qwen35moe-mtp-random-fused-Q4_K_M.gguf",
                         "tiny-qwen35moe-mtp-random-fused-Q4_K_M.llamacpp.json"),
    "qwen35-IQ1_S": (lambda: SHARED_MODELS / "qwen35-tiny-mtp-IQ1_S.gguf", "qwen35-tiny-mtp-IQ1_S.llamacpp.json"),
    "qwen35-IQ1_M": (lambda: SHARED_MODELS / "qwen35-tiny-mtp-IQ1_M.gguf", "qwen35-tiny-mtp-IQ1_M.llamacpp.json"),
    "qwen35-IQ2_XXS": (lambda: SHARED_MODELS / "qwen35-tiny-mtp-IQ2_XXS.gguf", "qwen35-tiny-mtp-IQ2_XXS.llamacpp.json"),
    "qwen35-IQ2_XS": (lambda: SHARED_MODELS / "qwen35-tiny-mtp-IQ2_XS.gguf", "qwen35-tiny-mtp-IQ2_XS.llamacpp.json"),
    "qwen35-IQ2_M": (lambda: SHARED_MODELS / "qwen35-tiny-mtp-IQ2_M.gguf", "qwen35-tiny-mtp-IQ2_M.llamacpp.json"),
    "qwen35-IQ3_XXS": (lambda: SHARED_MODELS / "qwen35-tiny-mtp-IQ3_XXS.gguf", "qwen35-tiny-mtp-IQ3_XXS.llamacpp.json"),
    "qwen35-IQ3_M": (lambda: SHARED_MODELS / "qwen35-tiny-mtp-IQ3_M.gguf", "qwen35-tiny-mtp-IQ3_M.llamacpp.json"),
    "qwen35-Q2_K": (lambda: SHARED_MODELS / "qwen35-tiny-mtp-Q2_K.gguf", "qwen35-tiny-mtp-Q2_K.llamacpp.json"),
    "moe-MXFP4_MOE": (lambda: SHARED_MODELS / "tiny-qwen35moe-mtp-random-MXFP4_MOE.gguf",
                      "tiny-qwen35moe-mtp-random-MXFP4_MOE.llamacpp.json"),
    "smollm2": (smollm2_path, "smollm2-135m-instruct-q4_1.llamacpp.json"),
    "gemma3": (gemma3_path, "gemma3-270m-q4_k_m.llamacpp.json"),
}

_model_cache: dict = {}


def model_path(key: str) -> Path:
    p = MODELS[key][0]()
    if p is None or not Path(p).exists():
        import pytest
        pytest.fail(f"model {key} is not available (run tools/get_test_models.sh)")
    return Path(p)


def get_model(key_or_path, load_mtp: bool = False):
    """Loads (and caches for the session) a model by MODELS key or path."""
    path = model_path(key_or_path) if key_or_path in MODELS else Path(key_or_path)
    k = (str(path), load_mtp)
    if k not in _model_cache:
        _model_cache[k] = _core.Model(str(path), load_mtp=load_mtp)
    return _model_cache[k]


def load_fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


# --------------------------------------------------------------------------------------------------------------
# generation


def greedy_params(n_predict: int, **kw) -> dict:
    p = {"temperature": 0, "seed": 42, "n_predict": n_predict, "ignore_eos": True}
    p.update(kw)
    return p


def seq_params(model, params: dict):
    """A request-style dict -> the core's SeqParams (pyllm.sampling, as pyllm.generation does)."""
    return sampling.seq_params(params, model.eog_ids, _core)


def run_seqs(ctx, model, jobs: dict) -> dict:
    """jobs: {seq: (prompt_ids, params)}; begins all, steps them together until done.
    Returns {seq: {"tokens": [...], "probs": [...] or None, "stop": ..., "stats": seq_stats}}."""
    res = {}
    for seq, (ids, params) in jobs.items():
        ctx.seq_begin(model, seq, list(ids), seq_params(model, params))
        res[seq] = {"tokens": [], "probs": [], "stop": None, "done": False}
    n_steps = 0
    while ctx.n_active():
        n_steps += 1
        assert n_steps < 100000, "step() does not finish"
        for o in ctx.step():
            r = res[o["seq"]]
            assert not r["done"], f"output for seq {o['seq']} after done"
            r["tokens"] += list(o["tokens"])
            if o["probs"] is not None:
                r["probs"] += list(o["probs"])
            if o["done"]:
                r["done"] = True
                r["stop"] = o["stop"]
    for seq, r in res.items():
        assert r["done"], f"seq {seq} never reported done"
        r["stats"] = ctx.seq_stats(seq)
    return res


def new_context(model, n_ctx: int, **kw):
    """_core.Context with n_threads defaulting to THREADS."""
    kw.setdefault("n_threads", THREADS)
    return _core.Context(model, n_ctx, **kw)


def generate(model, ids, params: dict, n_ctx: int = 512, **ctx_kw) -> dict:
    """One sequence in a fresh Context; returns run_seqs' entry."""
    ctx = new_context(model, n_ctx, **ctx_kw)
    return run_seqs(ctx, model, {0: (ids, params)})[0]


# --------------------------------------------------------------------------------------------------------------
# fixture comparison


def align_steps(tokens: list, top_logprobs: list) -> list:
    """Maps upstream's top_logprobs steps to token indices: returns a list, per token, of its step
    ([[id, logprob] ...]) or None where upstream merged that token's entry into a later one."""
    out = [None] * len(tokens)
    j = 0
    for i, t in enumerate(tokens):
        if j < len(top_logprobs) and top_logprobs[j] and top_logprobs[j][0][0] == t:
            out[i] = top_logprobs[j]
            j += 1
    assert j == len([s for s in top_logprobs if s]), \
        f"could not align upstream top_logprobs to tokens ({j} of {len(top_logprobs)} steps placed)"
    return out


def step_gap(step) -> float | None:
    """Upstream's top-1 minus top-2 log-prob at one step (None if unknown)."""
    if not step or len(step) < 2:
        return None
    return step[0][1] - step[1][1]


def first_divergence(ours: list, theirs: list) -> int | None:
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return i
    if len(ours) != len(theirs):
        return min(len(ours), len(theirs))
    return None


def check_greedy_vs_upstream(ours: list, comp: dict, near_tie: float = NEAR_TIE) -> int:
    """Asserts our greedy ids reproduce upstream's, except for a divergence at a near-tie step of upstream's.
    Returns how many steps are comparable (conditioned on the same prefix): all, or up to and including the
    divergence step."""
    theirs = comp["tokens"]
    assert len(ours) == len(theirs), (len(ours), len(theirs))
    steps = align_steps(theirs, comp["top_logprobs"])
    i = first_divergence(ours, theirs)
    if i is None:
        return len(theirs)
    gap = step_gap(steps[i])
    assert gap is not None and gap < near_tie, (
        f"greedy output diverges from upstream at step {i}: ours {ours[i]} vs upstream {theirs[i]}; upstream's "
        f"top-2 gap there is {gap} (a divergence is only accepted where it is < {near_tie})\n"
        f"ours     {ours}\nupstream {theirs}")
    return i + 1


def max_logprob_diff(our_probs: list, comp: dict, n_steps: int) -> tuple[float, int]:
    """Max |our logprob - upstream logprob| over upstream's top-5 ids at the first n_steps tokens (the steps upstream
    kept). our_probs must come from n_probs >= 10, so that an id in upstream's top-5 that our numerics push to rank
    6+ still has a value; one missing from our list counts as an infinite difference.
    Returns (max diff, number of values compared)."""
    steps = align_steps(comp["tokens"], comp["top_logprobs"])
    worst, n = 0.0, 0
    for i in range(n_steps):
        st = steps[i]
        if st is None:
            continue
        ours = {tid: math.log(p) if p > 0 else -math.inf for tid, p in our_probs[i]["top"]}
        for tid, lp in st:
            worst = max(worst, abs(ours[tid] - lp) if tid in ours else math.inf)
            n += 1
    return worst, n


# --------------------------------------------------------------------------------------------------------------
# GGUF files for tests


def _load_make_tiny():
    if "make_tiny_gguf" in sys.modules:
        return sys.modules["make_tiny_gguf"]
    spec = importlib.util.spec_from_file_location("make_tiny_gguf", ROOT / "tools" / "make_tiny_gguf.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_tiny_gguf"] = mod
    spec.loader.exec_module(mod)
    return mod


def make_tiny(out: Path, *args) -> Path:
    """tools/make_tiny_gguf.py OUT ARGS... (in-process)."""
    mtg = _load_make_tiny()
    assert mtg.main([str(out), *map(str, args)]) == 0
    return Path(out)


def rewrite_gguf(src, dst, arch: str | None = None, drop_keys=(), tensor_fn=None) -> Path:
    """Copies a GGUF with gguf-py, optionally changing general.architecture, dropping keys, and transforming the
    tensor list: tensor_fn(list of (name, data ndarray, ggml type)) -> new list. Quantized data are uint8
    [rows, row bytes] arrays (gguf-py's reader layout)."""
    import gguf
    r = gguf.GGUFReader(str(src))
    src_arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(str(dst), arch or src_arch)
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture" or k in drop_keys:
            continue
        vt = gguf.GGUFValueType(f.types[0])
        if vt == gguf.GGUFValueType.ARRAY:
            w.add_key_value(k, f.contents(), vt, sub_type=gguf.GGUFValueType(f.types[-1]))
        else:
            w.add_key_value(k, f.contents(), vt)
    ts = [(t.name, np.array(t.data), gguf.GGMLQuantizationType(t.tensor_type)) for t in r.tensors]
    if tensor_fn is not None:
        ts = tensor_fn(ts)
    for name, data, qt in ts:
        if qt in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            w.add_tensor(name, data, raw_dtype=qt)
        else:
            w.add_tensor(name, data.view(np.uint8), raw_shape=data.shape, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(dst)


def vm_rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")
