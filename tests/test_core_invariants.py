"""Invariants of pyllm._core that hold whatever upstream does: batching, chunking, multi-sequence, fused tensor
layouts and KV rollback must not change the numbers; bad inputs and bad files give clear errors; memory use is
bounded by the file plus the context's memory."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT
from helpers_core import (MODELS, new_context, generate, get_model, greedy_params, model_path, rewrite_gguf, run_seqs,
                          seq_params)

from pyllm import _core

TEXT = ("def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n"
        "The quick brown fox jumps over the lazy dog.")
REL_TOL = 1e-3  # max |a - b| relative to the logit scale (max |a|)

PREFILL_MODELS = ["qwen35-Q8_0", "moe-Q8_0", "smollm2", "gemma3"]
# fewer tokens for the 135M/270M models to keep the file fast on 2 cores
N_PROMPT = {"qwen35-Q8_0": 20, "moe-Q8_0": 20, "smollm2": 12, "gemma3": 12}
N_GEN = {"qwen35-Q8_0": 10, "moe-Q8_0": 10, "smollm2": 4, "gemma3": 4}


def prompt_ids(m, n):
    ids = m.tokenize(TEXT, True, False)
    assert len(ids) >= n
    return ids[:n]


def assert_logits_close(a, b, what, tol=REL_TOL):
    assert a.shape == b.shape, (what, a.shape, b.shape)
    assert np.isfinite(a).all() and np.isfinite(b).all(), what
    scale = np.abs(a).max(axis=-1, keepdims=True)
    rel = float((np.abs(a - b) / scale).max())
    assert rel <= tol, f"{what}: max |diff| / logit scale = {rel:.3g} > {tol}"
    assert (a.argmax(-1) == b.argmax(-1)).all(), what


# --------------------------------------------------------------------------------------------------------------
# batching and chunking


@pytest.mark.parametrize("key", PREFILL_MODELS)
def test_prefill_batch_equals_token_by_token(key):
    m = get_model(key)
    ids = prompt_ids(m, N_PROMPT[key])
    batch = new_context(m, 128).eval(0, ids, True)
    assert batch.shape == (len(ids), m.n_vocab)
    c = new_context(m, 128)
    single = np.concatenate([c.eval(0, [t], False) for t in ids])
    assert c.seq_pos(0) == len(ids)
    # every row, not only the next-token logits
    assert_logits_close(batch, single, f"{key}: one batch vs token by token")


@pytest.mark.parametrize("key", PREFILL_MODELS)
def test_prefill_chunked_equals_one_ubatch(key):
    m = get_model(key)
    ids = prompt_ids(m, N_PROMPT[key])
    ref = new_context(m, 128, n_ubatch=512).eval(0, ids, True)
    chunked = new_context(m, 128, n_batch=2048, n_ubatch=4).eval(0, ids, True)
    assert_logits_close(ref, chunked, f"{key}: n_ubatch 4 vs 512")
    # two eval calls (the second appends at the sequence's position)
    c = new_context(m, 128)
    c.eval(0, ids[:7], False)
    assert c.seq_pos(0) == 7
    tail = c.eval(0, ids[7:], True)
    assert_logits_close(ref[7:], tail, f"{key}: split eval")


@pytest.mark.parametrize("key", ["qwen35-Q8_0", "smollm2"])
def test_generation_with_small_batches_equals_default(key):
    m = get_model(key)
    ids = prompt_ids(m, N_PROMPT[key])
    n = N_GEN[key]
    ref = generate(m, ids, greedy_params(n))
    small = generate(m, ids, greedy_params(n), n_batch=4, n_ubatch=4)
    assert small["tokens"] == ref["tokens"]
    assert small["stats"]["n_prompt"] == len(ids) and small["stats"]["n_gen"] == n


@pytest.mark.parametrize("key", list(MODELS))
def test_thread_count_invariance(key):
    """Bit-identical logits for 1, 2 and 3 threads (the other tests run with helpers_core.THREADS)."""
    m = get_model(key)
    ids = prompt_ids(m, 10)
    ref = _core.Context(m, 64, n_threads=1).eval(0, ids, True)
    for n in (2, 3):
        assert_logits_close(ref, _core.Context(m, 64, n_threads=n).eval(0, ids, True), f"{key}: {n} threads", tol=0)
    # decode steps: hundreds of back-to-back dispatches, with workers that start late or are descheduled
    ctxs = {n: _core.Context(m, 64, n_threads=n) for n in (1, 3)}
    for n, cx in ctxs.items():
        cx.eval(0, ids[:4], False)
    for i, t in enumerate(ids[4:]):
        ref = ctxs[1].eval(0, [t], True)
        assert_logits_close(ref, ctxs[3].eval(0, [t], True), f"{key}: decode step {i}, 3 threads", tol=0)


# --------------------------------------------------------------------------------------------------------------
# several sequences


@pytest.mark.parametrize("key", ["qwen35-Q8_0", "moe-Q8_0", "smollm2"])
def test_two_sequences_together_equal_alone(key):
    m = get_model(key)
    p0 = m.tokenize("def fibonacci(n):", True, True)
    p1 = m.tokenize("Once upon a time, in a land far away, there lived", True, True)
    n = N_GEN[key]
    jobs = {0: (p0, greedy_params(2 * n)), 1: (p1, greedy_params(n))}
    alone = {s: generate(m, ids, prm)["tokens"] for s, (ids, prm) in jobs.items()}
    together = run_seqs(new_context(m, 512, n_seq=2), m, jobs)
    for s in jobs:
        assert together[s]["tokens"] == alone[s], f"seq {s}"
        assert together[s]["stop"] == "limit"


def test_two_sequences_sampled_together_equal_alone():
    m = get_model("qwen35-Q8_0")
    p0 = m.tokenize("def retry_with_backoff(", True, True)
    p1 = m.tokenize("The following module provides a simple way to", True, True)
    prm = {"temperature": 0.8, "seed": 1234, "n_predict": 16, "ignore_eos": True}
    jobs = {0: (p0, dict(prm)), 1: (p1, dict(prm, seed=99))}
    alone = {s: generate(m, ids, p)["tokens"] for s, (ids, p) in jobs.items()}
    together = run_seqs(new_context(m, 512, n_seq=2), m, jobs)
    for s in jobs:
        assert together[s]["tokens"] == alone[s], f"seq {s}"


@pytest.mark.parametrize("key", ["qwen35-Q8_0", "smollm2"])
def test_prompt_cache_reuse(key):
    """seq_begin reuses the longest common prefix it holds; the output must not change."""
    m = get_model(key)
    ids = m.tokenize("def fibonacci(n):", True, True)
    c = new_context(m, 256)
    n = N_GEN[key]
    first = run_seqs(c, m, {0: (ids, greedy_params(n))})[0]
    # same prompt again: KV models reuse all but the last prompt token; recurrent state cannot go back, so 0
    again = run_seqs(c, m, {0: (ids, greedy_params(n))})[0]
    assert again["tokens"] == first["tokens"]
    expect_cached = 0 if m.arch.startswith("qwen35") else len(ids) - 1
    assert again["stats"]["n_cached"] == expect_cached
    # continuation: prompt + generated extends exactly what the sequence holds, so it is reused everywhere
    ext = ids + again["tokens"]
    cont = run_seqs(c, m, {0: (ext, greedy_params(n))})[0]
    assert cont["stats"]["n_cached"] == len(ext) - 1
    assert cont["tokens"] == generate(m, ext, greedy_params(n))["tokens"]


# --------------------------------------------------------------------------------------------------------------
# fused tensor layouts


def _fuse(ts):
    """Unfused qwen35moe tensors -> fused layout with the same data: attn_qkv = [attn_q | attn_k | attn_v] rows
    (attn_q already holds [q | gate] per head), ffn_gate_up_exps = [gate | up] per expert. Quantized rows are
    independent blocks, so concatenating rows is exact."""
    by = {n: d for n, d, _ in ts}
    out = []
    for n, d, qt in ts:
        if n.endswith(".attn_q.weight"):
            b = n[: -len("attn_q.weight")]
            out.append((b + "attn_qkv.weight", np.concatenate([d, by[b + "attn_k.weight"], by[b + "attn_v.weight"]], 0), qt))
        elif n.endswith(".ffn_gate_exps.weight"):
            b = n[: -len("ffn_gate_exps.weight")]
            out.append((b + "ffn_gate_up_exps.weight", np.concatenate([d, by[b + "ffn_up_exps.weight"]], axis=-2), qt))
        elif not n.endswith((".attn_k.weight", ".attn_v.weight", ".ffn_up_exps.weight")):
            out.append((n, d, qt))
    return out


def _logits(path, ids):
    return new_context(_core.Model(str(path)), 128).eval(0, ids, True)


IDS = list(range(100, 140))


def test_fused_layout_equals_unfused(tiny_gguf, tmp_path):
    """The unfused file's tensors re-packed in the fused layout give the same logits (tests the core's fused paths
    with identical weights)."""
    unfused = tiny_gguf("--arch", "qwen35moe", "--seed", "7")
    fused = rewrite_gguf(unfused, tmp_path / "refused.gguf", tensor_fn=_fuse)
    names = [t["name"] for t in _core.GGUFFile(str(fused)).tensors()] if hasattr(_core, "GGUFFile") else None
    if names is not None:
        assert "blk.3.attn_qkv.weight" in names and "blk.0.ffn_gate_up_exps.weight" in names
        assert "blk.3.attn_q.weight" not in names and "blk.0.ffn_up_exps.weight" not in names
    assert_logits_close(_logits(unfused, IDS), _logits(fused, IDS), "fused vs unfused (same weights)", tol=1e-5)


def test_make_tiny_fused_equals_unfused_same_seed(tiny_gguf):
    unfused = tiny_gguf("--arch", "qwen35moe", "--seed", "7")
    fused = tiny_gguf("--arch", "qwen35moe", "--seed", "7", "--fused")
    assert_logits_close(_logits(unfused, IDS), _logits(fused, IDS), "make_tiny_gguf fused vs unfused", tol=1e-5)


# --------------------------------------------------------------------------------------------------------------
# rollback


@pytest.mark.parametrize("key", ["smollm2", "gemma3"])
def test_kv_rollback_reproduces_logits(key):
    m = get_model(key)
    ids = prompt_ids(m, 10)
    c = new_context(m, 128)
    c.eval(0, ids[:6], False)
    first = c.eval(0, ids[6:], True)
    c.seq_rm(0, 6)
    assert c.seq_pos(0) == 6
    assert_logits_close(first, c.eval(0, ids[6:], True), f"{key}: re-eval after seq_rm", tol=0)
    # roll back further, continue with other tokens, then return to the original ones
    c.seq_rm(0, 3)
    c.eval(0, [ids[5], ids[4], ids[3]], False)
    c.seq_rm(0, 3)
    assert_logits_close(first, c.eval(0, ids[3:], True)[3:], f"{key}: re-eval after a detour", tol=0)
    assert c.seq_pos(0) == len(ids)


def test_recurrent_rollback():
    """Recurrent state (qwen35) rolls back to 0 (reset) and to its current head; any other position is refused
    with a clear error that leaves the sequence unchanged."""
    m = get_model("qwen35-Q8_0")
    ids = prompt_ids(m, 16)
    c = new_context(m, 128)
    c.eval(0, ids[:6], False)
    first = c.eval(0, ids[6:], True)
    with pytest.raises(RuntimeError, match="cannot roll back the recurrent state"):
        c.seq_rm(0, 6)
    assert c.seq_pos(0) == len(ids)
    c.seq_rm(0, len(ids))  # no-op
    nxt = c.eval(0, [ids[0]], False)
    ref = new_context(m, 128).eval(0, ids + [ids[0]], False)
    assert_logits_close(ref, nxt, "eval after a refused seq_rm", tol=0)
    c.seq_rm(0, 0)
    assert c.seq_pos(0) == 0
    c.eval(0, ids[:6], False)
    assert_logits_close(first, c.eval(0, ids[6:], True), "re-eval after seq_rm(0)", tol=0)
    c.seq_clear(0)
    assert c.seq_pos(0) == 0


# --------------------------------------------------------------------------------------------------------------
# errors


@pytest.mark.parametrize("key", ["qwen35-Q8_0", "smollm2"])
def test_seq_rm_negative_p0_clears(key):
    """llama.cpp's seq_rm treats p0 < 0 as 0 (drop everything)."""
    m = get_model(key)
    ids = m.tokenize("def fibonacci(n):", True, True)
    ref = generate(m, ids, greedy_params(4))["tokens"]
    c = new_context(m, 256)
    run_seqs(c, m, {0: (ids, greedy_params(4))})
    try:
        c.seq_rm(0, -1)
    finally:
        # whatever seq_rm did, the context must stay consistent
        assert c.seq_pos(0) in (0, len(ids) + 3)
        again = run_seqs(c, m, {0: (ids, greedy_params(4))})[0]
        assert again["tokens"] == ref, f"stale prefix reuse: n_cached {again['stats']['n_cached']}"
    assert c.seq_pos(0) == len(ids) + 3


def test_bad_sequence_ids():
    m = get_model("qwen35-Q8_0")
    c = new_context(m, 64, n_seq=2)
    with pytest.raises(IndexError):
        c.seq_begin(m, 2, [1, 2, 3], seq_params(m, greedy_params(2)))
    with pytest.raises(IndexError):
        c.seq_begin(m, -1, [1, 2, 3], seq_params(m, greedy_params(2)))
    with pytest.raises(IndexError):
        c.eval(2, [1, 2], False)
    with pytest.raises(IndexError):
        c.seq_stats(5)
    with pytest.raises(IndexError):
        c.seq_rm(2, 0)
    assert c.step() == [] and c.n_active() == 0
    with pytest.raises(ValueError, match="n_seq"):
        new_context(m, 64, n_seq=0)
    with pytest.raises(ValueError, match="too small"):
        new_context(m, 4)




def test_prompt_longer_than_context():
    m = get_model("qwen35-Q8_0")
    c = new_context(m, 64)
    with pytest.raises(ValueError, match="exceeds the available context size"):
        c.seq_begin(m, 0, list(range(10, 110)), seq_params(m, greedy_params(4)))
    assert c.n_active() == 0
    with pytest.raises(ValueError, match="out of range"):
        c.seq_begin(m, 0, [1, 2, m.n_vocab], seq_params(m, greedy_params(4)))
    with pytest.raises(ValueError, match="empty prompt"):
        c.seq_begin(m, 0, [], seq_params(m, greedy_params(4)))
    with pytest.raises(ValueError, match="context"):
        c.eval(0, list(range(10, 80)), False)
    # the context still works
    assert len(run_seqs(c, m, {0: (list(range(10, 20)), greedy_params(4))})[0]["tokens"]) == 4


def test_draft_mtp_without_mtp_layer(tiny_gguf):
    m = _core.Model(str(tiny_gguf("--arch", "qwen35", "--no-mtp")), load_mtp=True)
    assert not m.file_has_mtp and not m.has_mtp
    with pytest.raises(ValueError, match="MTP"):
        new_context(m, 128, spec_type="draft-mtp", n_max=3)
    new_context(m, 128)  # plain is fine
    # a file with MTP loaded without it
    m2 = get_model("qwen35-Q8_0", load_mtp=False)
    assert m2.file_has_mtp and not m2.has_mtp
    with pytest.raises(ValueError, match="MTP.*load_mtp"):
        new_context(m2, 128, spec_type="draft-mtp", n_max=3)
    with pytest.raises(ValueError, match="not supported"):
        new_context(m2, 128, spec_type="draft-eagle3")


@pytest.fixture(scope="module")
def base_tiny(tiny_gguf):
    return tiny_gguf("--arch", "qwen35", "--n-layer", "4")


def test_unknown_arch(base_tiny, tmp_path):
    bad = rewrite_gguf(base_tiny, tmp_path / "arch.gguf", arch="qwen99")
    with pytest.raises(_core.ModelError, match="unknown model architecture 'qwen99'"):
        _core.Model(str(bad))


def test_missing_tensor(base_tiny, tmp_path):
    bad = rewrite_gguf(base_tiny, tmp_path / "missing.gguf",
                       tensor_fn=lambda ts: [t for t in ts if t[0] != "blk.1.ssm_out.weight"])
    with pytest.raises(_core.ModelError, match="missing tensor 'blk.1.ssm_out.weight'"):
        _core.Model(str(bad))


def test_misshaped_tensor(base_tiny, tmp_path):
    # blk.0.ffn_up.weight is {256, 768}; keep 512 rows
    def cut(ts):
        return [(n, d[:512] if n == "blk.0.ffn_up.weight" else d, q) for n, d, q in ts]
    bad = rewrite_gguf(base_tiny, tmp_path / "shape.gguf", tensor_fn=cut)
    with pytest.raises(_core.ModelError) as ei:
        _core.Model(str(bad))
    msg = str(ei.value)
    assert "blk.0.ffn_up.weight" in msg and "[256, 512]" in msg and "expected [256, 768]" in msg, msg


def test_truncated_file(base_tiny, tmp_path):
    data = base_tiny.read_bytes()
    bad = tmp_path / "trunc.gguf"
    bad.write_bytes(data[: len(data) - 4096])
    with pytest.raises(_core.GGUFError):
        _core.Model(str(bad))
    bad.write_bytes(b"GGUF" + data[4:64])
    with pytest.raises(_core.GGUFError):
        _core.Model(str(bad))


# --------------------------------------------------------------------------------------------------------------
# memory

RSS_SCRIPT = r"""
import json, sys
from pyllm import _core
def rss():
    for l in open('/proc/self/status'):
        if l.startswith('VmRSS:'):
            return int(l.split()[1]) * 1024
m = _core.Model(sys.argv[1], load_mtp=True)
c = _core.Context(m, 2048)
c.eval(0, list(range(10, 26)), False)  # touches every weight
print(json.dumps({"rss": rss(), "kv": c.memory_bytes}))
"""


@pytest.mark.parametrize("key", ["qwen35-Q8_0", "moe-fused-Q4_K_M", "smollm2", "gemma3"])
def test_rss_after_load(key):
    path = model_path(key)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", RSS_SCRIPT, str(path)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    size = path.stat().st_size
    limit = size + r["kv"] + 100 * 2**20
    print(f"{key}: RSS {r['rss'] / 2**20:.1f} MiB, file {size / 2**20:.1f} MiB, KV {r['kv'] / 2**20:.1f} MiB")
    assert r["kv"] > 0
    assert r["rss"] <= limit, f"RSS {r['rss']} > file {size} + KV {r['kv']} + 100 MiB"


@pytest.mark.parametrize("name", ["qwen35-Q4_K_M", "moe-fused-Q4_K_M", "gemma3", "qwen35-Q8_0", "moe-Q8_0", "smollm2"])
def test_repack_changes_no_bits(name):
    """--repack (Q4_K and Q8_0 matrices in 16-row groups at load at avx512/amx, Q4_K, Q4_0 and Q4_1 at avx2) == --no-repack, bit for bit: prompt,
    a verification-sized batch and decode steps give the same logits (embedding rows of a grouped token_embd,
    a fused gate_up expert matrix sliced at its middle, tied heads), and the load says what it converted."""
    from conftest import gemma3_path, smollm2_path
    path = {"gemma3": gemma3_path, "smollm2": smollm2_path}.get(name, lambda: model_path(name))()
    if path is None or not os.path.exists(str(path)):
        pytest.skip(f"{name} is not installed")
    grouped = _core.Model(str(path))
    plain = _core.Model(str(path), repack=False)
    assert plain.n_grouped == 0 and plain.grouped_bytes == 0
    lv = _core.simd_level()
    # the levels' group kernels (SmolLM2: Q4_1, grouped at avx2 only)
    groups = lv == "avx2" if name == "smollm2" else lv in ("avx512", "amx") or (lv == "avx2" and "Q8_0" not in name)
    if groups:
        assert grouped.n_grouped > 0 and grouped.grouped_bytes > 0
        # read into memory (small file): converted in place, no copy
        assert grouped.grouped_copied_bytes == (0 if grouped.weights_copied else grouped.grouped_bytes)
    outs = []
    for m in (grouped, plain):
        ctx = new_context(m, 128)
        o = [ctx.eval(0, IDS[:20], True), ctx.eval(0, IDS[20:25], True)]
        o += [ctx.eval(0, [IDS[25 + i]], True) for i in range(3)]
        outs.append(o)
    for a, b in zip(*outs):
        assert np.array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32))
    mapped = _core.Model(str(path), mmap=1)  # a mapped file: the groups are a copy in anonymous memory
    if groups:
        assert mapped.grouped_copied_bytes == mapped.grouped_bytes > 0
    ctx = new_context(mapped, 128)
    assert np.array_equal(np.asarray(ctx.eval(0, IDS[:20], True)).view(np.uint32), np.asarray(outs[1][0]).view(np.uint32))


def _huge_page_hinted_bytes():
    """Bytes of this process's mappings flagged MADV_HUGEPAGE ("hg" in /proc/self/smaps' VmFlags)."""
    total, size = 0, 0
    with open("/proc/self/smaps") as f:
        for line in f:
            if line.startswith("Size:"):
                size = int(line.split()[1]) * 1024
            elif line.startswith("VmFlags:") and "hg" in line.split()[1:]:
                total += size
    return total


def test_copied_groups_ask_for_huge_pages():
    """The 16-row groups copied out of a mapped file (a file too big to read into memory) are asked for huge
    pages, as a file read into memory is: with THP in madvise mode (Debian's default) they were 4 KiB pages,
    which the kernels stream slower (AnonHugePages 0 kB for the 15 GB of a full-depth 27B-shaped Q4_K load)."""
    if not os.path.exists("/proc/self/smaps") or not os.path.isdir("/sys/kernel/mm/transparent_hugepage"):
        pytest.skip("no /proc/self/smaps or no transparent huge pages on this kernel")
    before = _huge_page_hinted_bytes()
    m = _core.Model(str(model_path("qwen35-Q4_K_M")), mmap=1)
    if m.grouped_copied_bytes == 0:
        pytest.skip(f"no group kernels at the {_core.simd_level()} level: nothing is copied")
    assert _huge_page_hinted_bytes() - before >= m.grouped_copied_bytes


def test_draft_head_copy_asks_for_huge_pages():
    """The cheap draft head's converted rows (--spec-draft-head-type) are streamed by every draft step, as the
    model's weights are: they are asked for huge pages too (a std::vector gave them 4 KiB pages)."""
    if not os.path.exists("/proc/self/smaps") or not os.path.isdir("/sys/kernel/mm/transparent_hugepage"):
        pytest.skip("no /proc/self/smaps or no transparent huge pages on this kernel")
    m = get_model("qwen35-Q8_0", load_mtp=True)
    before = _huge_page_hinted_bytes()
    c = new_context(m, 256, spec_type="draft-mtp", n_max=3, draft_head_type="q4_0")
    assert c.draft_head_bytes > 0
    assert _huge_page_hinted_bytes() - before >= c.draft_head_bytes


@pytest.mark.parametrize("arch", ["qwen35", "qwen35moe"])
@pytest.mark.parametrize("qtype", ["q4_0", "q4_1"])
def test_grouped_q4_0_q4_1_model_equals_rows(tiny_gguf, arch, qtype):
    """Q4_0 / Q4_1 matrices in 16-row groups (a load at avx2) keep the GGUF rows' arithmetic: a prompt in one batch,
    in pieces of 1, 7 and the rest, and token by token give --no-repack's logits bit for bit (the MoE model's
    experts, gathered per batch, included)."""
    path = tiny_gguf("--arch", arch, "--type", qtype)
    m = _core.Model(str(path))
    if _core.simd_level() == "avx2":
        assert m.n_grouped > 0
    ids = [(7 * i + 3) % 200 + 10 for i in range(80)]
    want = np.asarray(new_context(_core.Model(str(path), repack=False), 128).eval(0, ids, True))[-1]
    one = new_context(m, 128).eval(0, ids, True)
    ctx = new_context(m, 128)
    parts = [ctx.eval(0, ids[:1], True), ctx.eval(0, ids[1:8], True), ctx.eval(0, ids[8:], True)]
    ctx = new_context(m, 128)
    steps = [ctx.eval(0, [i], True) for i in ids]
    for got in (one, parts[-1], steps[-1]):
        assert np.array_equal(np.asarray(got)[-1].view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("arch", ["qwen35", "qwen35moe"])
def test_grouped_iq4_nl_model_batch_invariant(tiny_gguf, arch):
    """IQ4_NL matrices in 16-row groups (llama.cpp's repacked-IQ4_NL arithmetic, so --no-repack differs in the
    last bits): a prompt evaluated in one batch (AMX tiles from 64 tokens), in pieces of 1, 7 and the rest, and
    token by token give the same logits bit for bit, and (dense model) they are --no-repack's within float
    rounding. (The random MoE model's top-k routing turns last-bit differences into different experts.)"""
    path = tiny_gguf("--arch", arch, "--type", "iq4_nl")
    m = _core.Model(str(path))
    if _core.simd_level() in ("avx512", "amx"):
        assert m.n_grouped > 0
    ids = [(7 * i + 3) % 200 + 10 for i in range(80)]
    one = new_context(m, 128).eval(0, ids, True)
    ctx = new_context(m, 128)
    parts = [ctx.eval(0, ids[:1], True), ctx.eval(0, ids[1:8], True), ctx.eval(0, ids[8:], True)]
    ctx = new_context(m, 128)
    steps = [ctx.eval(0, [i], True) for i in ids]
    for got in (parts[-1], steps[-1]):
        assert np.array_equal(np.asarray(got)[-1].view(np.uint32), np.asarray(one)[-1].view(np.uint32))
    if arch == "qwen35moe":
        return
    plain = new_context(_core.Model(str(path), repack=False), 128).eval(0, ids, True)
    a, b = np.asarray(one)[-1], np.asarray(plain)[-1]
    assert np.allclose(a, b, rtol=1e-3, atol=1e-3 * np.abs(b).max())
