"""Speculative decoding with the MTP (nextn) layer (spec_type="draft-mtp"): it must never change the output, its
draft counts match upstream llama.cpp's, its log line has llama.cpp's format, and its recurrent memory is bounded."""
import re

import numpy as np
import pytest

from conftest import ROOT
from helpers_core import new_context, generate, get_model, greedy_params, load_fixture, run_seqs, seq_params

from pyllm import _core

N_MAX = list(range(1, 8))
Q8_FX = "qwen35-tiny-mtp-Q8_0.llamacpp.json"
SAMPLED = {"temperature": 0.8, "seed": 1234, "ignore_eos": True}  # top_k 40, top_p 0.95, min_p 0.05: defaults


@pytest.fixture(scope="module")
def trained():
    return get_model("qwen35-Q8_0", load_mtp=True)


@pytest.fixture(scope="module")
def prompts(trained):
    return [trained.tokenize(c["prompt"], True, True) for c in load_fixture(Q8_FX)["complete"]]


_cache = {}


def cached(tag, fn):
    if tag not in _cache:
        _cache[tag] = fn()
    return _cache[tag]


def spec(m, ids, params, n_max, n_ctx=512):
    """One sequence with draft-mtp; the result also holds the context's acceptance_line."""
    c = new_context(m, n_ctx, spec_type="draft-mtp", n_max=n_max)
    r = run_seqs(c, m, {0: (ids, params)})[0]
    r["line"] = c.acceptance_line(0)
    return r


def check_stats(r, n_predict, n_max):
    st = r["stats"]
    assert r["stop"] == "limit" and len(r["tokens"]) == n_predict and st["n_gen"] == n_predict
    assert 0 <= st["n_draft_accepted"] <= st["n_draft"] <= n_max * st["n_verif_steps"]
    assert st["n_verif_steps"] <= n_predict
    per_pos = st["n_accepted_per_pos"]
    assert len(per_pos) == n_max and sum(per_pos) == st["n_draft_accepted"]
    assert all(a >= b for a, b in zip(per_pos, per_pos[1:])), per_pos  # accepting position i needs i-1


def upstream_acceptance_line(n_accepted, n_draft, n_verif_steps):
    """llama.cpp server_slot::print_timings: draft_ratio is a float, mean_acc_len a double."""
    ratio = float(np.float32(n_accepted) / np.float32(n_draft))
    mean_len = 1.0 + n_accepted / n_verif_steps if n_verif_steps > 0 else 1.0
    return "draft acceptance = %0.5f (%5d accepted / %5d generated), mean len = %5.2f" % (
        ratio, n_accepted, n_draft, mean_len)


# --------------------------------------------------------------------------------------------------------------
# trained qwen35 Q8_0: greedy output, draft counts against upstream, log line


@pytest.mark.parametrize("n_max", N_MAX)
def test_greedy_spec_equals_plain_trained(trained, prompts, n_max):
    for i, ids in enumerate(prompts):
        plain = cached(("q8", i), lambda: generate(trained, ids, greedy_params(32)))
        r = cached(("q8", i, n_max), lambda: spec(trained, ids, greedy_params(32), n_max))
        assert r["tokens"] == plain["tokens"], f"prompt {i}, n_max {n_max}"
        check_stats(r, 32, n_max)
        assert r["stats"]["n_draft"] > 0


@pytest.mark.parametrize("n_max", N_MAX)
def test_draft_counts_match_upstream(trained, prompts, n_max):
    fx = load_fixture(f"qwen35-tiny-mtp-Q8_0.mtp{n_max}.llamacpp.json")
    assert fx["server_args"][-1] == str(n_max)
    compared = []
    for i, (ids, comp) in enumerate(zip(prompts, fx["complete"])):
        r = cached(("q8", i, n_max), lambda: spec(trained, ids, greedy_params(32), n_max))
        if r["tokens"] != comp["tokens"]:
            continue  # a near-tie upstream (see test_golden): the runs are not comparable
        ours = (r["stats"]["n_draft_accepted"], r["stats"]["n_draft"])
        theirs = (comp["draft_n_accepted"], comp["draft_n"])
        compared.append((i, ours, theirs))
        for a, b in zip(ours, theirs):
            assert abs(a - b) <= 0.02 * b, f"prompt {i}, n_max {n_max}: ours (accepted, drafted) {ours}, upstream {theirs}"
    print(f"n_max {n_max}: (prompt, ours, upstream) {compared}")
    assert len(compared) >= 2  # prompts 0 and 1 reproduce upstream's tokens


MTP3_FIXTURES = {
    "qwen35-F16": "qwen35-tiny-mtp-F16.mtp3.llamacpp.json",
    "qwen35-Q4_K_M": "qwen35-tiny-mtp-Q4_K_M.mtp3.llamacpp.json",
    "moe-Q8_0": "tiny-qwen35moe-mtp-random-Q8_0.mtp3.llamacpp.json",
    "moe-fused-Q4_K_M": "tiny-qwen35moe-mtp-random-fused-Q4_K_M.mtp3.llamacpp.json",
}
# Same tokens as upstream's draft-mtp run but different draft counts: our MTP drafts differ from upstream's at some
# step (strict xfail: remove the entry when it passes).
MTP3_XFAIL = {}
MTP3_CASES = [(k, i) for k, f in MTP3_FIXTURES.items() for i in range(len(load_fixture(f)["complete"]))]


def _mtp3_param(c):
    marks = [pytest.mark.xfail(reason="numerics: " + MTP3_XFAIL[c], strict=True)] if c in MTP3_XFAIL else []
    return pytest.param(*c, id=f"{c[0]}-p{c[1]}", marks=marks)


@pytest.mark.parametrize("key,idx", [_mtp3_param(c) for c in MTP3_CASES])
def test_draft_counts_match_upstream_mtp3(key, idx):
    """The other shipped files against upstream's n_max 3 runs (where upstream's speculative tokens are ours)."""
    comp = load_fixture(MTP3_FIXTURES[key])["complete"][idx]
    m = get_model(key, load_mtp=True)
    r = spec(m, m.tokenize(comp["prompt"], True, True), greedy_params(32), 3)
    if r["tokens"] != comp["tokens"]:
        # upstream's own speculative run departs from its plain run at a near-tie (Q4_K_M p1, step 30, gap 0.0016),
        # or ours departs from upstream's plain run at one (test_golden)
        pytest.skip("tokens differ from upstream's draft-mtp run; counts are not comparable")
    ours = (r["stats"]["n_draft_accepted"], r["stats"]["n_draft"])
    theirs = (comp["draft_n_accepted"], comp["draft_n"])
    assert all(abs(a - b) <= 0.02 * b for a, b in zip(ours, theirs)), f"ours {ours}, upstream {theirs}"


@pytest.mark.parametrize("n_max", N_MAX)
def test_acceptance_line(trained, prompts, n_max):
    ids = prompts[0]
    r = cached(("q8", 0, n_max), lambda: spec(trained, ids, greedy_params(32), n_max))
    st, line = r["stats"], r["line"]
    assert re.fullmatch(r"draft acceptance = \d\.\d{5} \( *\d+ accepted / *\d+ generated\), mean len = [ \d]{2}\.\d\d",
                        line), line
    assert line == upstream_acceptance_line(st["n_draft_accepted"], st["n_draft"], st["n_verif_steps"])
    m = re.search(r"\( *(\d+) accepted / *(\d+) generated", line)
    assert (int(m[1]), int(m[2])) == (st["n_draft_accepted"], st["n_draft"])


def test_greedy_spec_equals_plain_128_tokens(trained):
    ids = trained.tokenize("def retry_with_backoff(", True, True)
    plain = generate(trained, ids, greedy_params(128))
    r = spec(trained, ids, greedy_params(128), 3)
    assert r["tokens"] == plain["tokens"]
    check_stats(r, 128, 3)
    assert r["stats"]["n_draft_accepted"] > 20


def test_spec_probs_equal_plain(trained, prompts):
    """n_probs under speculation: the verification rows give the same probabilities as plain decoding."""
    prm = greedy_params(32, n_probs=5)
    plain = generate(trained, prompts[0], prm)
    r = spec(trained, prompts[0], prm, 3)
    assert r["tokens"] == plain["tokens"]
    for a, b in zip(plain["probs"], r["probs"]):
        assert a["id"] == b["id"] and a["p"] == pytest.approx(b["p"], abs=1e-6)
        assert [t for t, _ in a["top"]] == [t for t, _ in b["top"]]
        assert [p for _, p in a["top"]] == pytest.approx([p for _, p in b["top"]], abs=1e-6)


@pytest.mark.parametrize("n_predict", [1, 2, 3, 5])
def test_spec_short_n_predict(trained, prompts, n_predict):
    """Drafts never run past n_predict."""
    r = spec(trained, prompts[1], greedy_params(n_predict), 3)
    assert r["tokens"] == generate(trained, prompts[1], greedy_params(n_predict))["tokens"]
    check_stats(r, n_predict, 3)
    assert r["stats"]["n_draft"] <= max(0, n_predict - 2) * 3


@pytest.mark.parametrize("n_max", [1, 3, 7])
def test_spec_at_context_limit(trained, prompts, n_max):
    """Drafts never run past the context: generation without n_predict stops at the context size like plain."""
    prm = greedy_params(-1)
    plain = cached(("q8ctx",), lambda: generate(trained, prompts[1], prm, n_ctx=48))
    assert plain["stop"] == "ctx"
    r = spec(trained, prompts[1], prm, n_max, n_ctx=48)
    assert r["stop"] == "ctx" and r["tokens"] == plain["tokens"]


def test_spec_prompt_reuse(trained, prompts):
    """seq_begin on a speculative context: the same prompt again starts over (recurrent state) with the same drafts;
    a prompt that extends what the sequence holds reuses it, with the MTP hidden state carried over exactly."""
    ids = prompts[0]
    c = new_context(trained, 512, spec_type="draft-mtp", n_max=3)
    first = run_seqs(c, trained, {0: (ids, greedy_params(16))})[0]
    again = run_seqs(c, trained, {0: (ids, greedy_params(16))})[0]
    assert again["stats"]["n_cached"] == 0
    assert again["tokens"] == first["tokens"]
    assert (again["stats"]["n_draft"], again["stats"]["n_draft_accepted"]) == \
        (first["stats"]["n_draft"], first["stats"]["n_draft_accepted"])
    ext = ids + again["tokens"]
    cont = run_seqs(c, trained, {0: (ext, greedy_params(16))})[0]
    assert cont["stats"]["n_cached"] == len(ext) - 1
    fresh = spec(trained, ext, greedy_params(16), 3)
    assert cont["tokens"] == fresh["tokens"] == generate(trained, ext, greedy_params(16))["tokens"]
    assert (cont["stats"]["n_draft"], cont["stats"]["n_draft_accepted"]) == \
        (fresh["stats"]["n_draft"], fresh["stats"]["n_draft_accepted"])


@pytest.mark.parametrize("kw", [{"p_min": 0.3}, {"p_min": 0.99}, {"n_min": 2}], ids=["p_min0.3", "p_min0.99", "n_min2"])
def test_spec_draft_limits(trained, prompts, kw):
    ids = prompts[0]
    c = new_context(trained, 512, spec_type="draft-mtp", n_max=5, **kw)
    r = run_seqs(c, trained, {0: (ids, greedy_params(32))})[0]
    plain = cached(("q8", 0), lambda: generate(trained, ids, greedy_params(32)))
    assert r["tokens"] == plain["tokens"]
    check_stats(r, 32, 5)
    if kw.get("p_min") == 0.99:
        assert r["stats"]["n_draft"] < 32


def test_staggered_sequences_with_long_prompt(trained, prompts):
    """Sequences begin while others generate; one prompt needs several n_batch chunks."""
    long = trained.tokenize((ROOT / "tools" / "make_tiny_gguf.py").read_text()[:600], True, False)
    assert len(long) > 100  # 2+ chunks of n_batch 64
    jobs = [(prompts[0], greedy_params(24)), (long, greedy_params(12)), (prompts[2], greedy_params(8))]
    c = new_context(trained, 3 * 512, n_seq=3, n_batch=64, n_ubatch=32, spec_type="draft-mtp", n_max=3)
    out = {i: [] for i in range(3)}
    for i, (ids, prm) in enumerate(jobs):
        c.seq_begin(trained, i, ids, seq_params(trained, prm))
        for _ in range(3):
            for o in c.step():
                out[o["seq"]] += o["tokens"]
    while c.n_active():
        for o in c.step():
            out[o["seq"]] += o["tokens"]
    for i, (ids, prm) in enumerate(jobs):
        assert out[i] == generate(trained, ids, prm)["tokens"], f"seq {i}"


# --------------------------------------------------------------------------------------------------------------
# sampling


@pytest.mark.parametrize("n_max", [1, 3, 7])
def test_sampled_spec_equals_plain(trained, prompts, n_max):
    """temperature 0.8 with a fixed seed: the target samples every position once, in order, so the RNG stream and
    the output are those of plain decoding."""
    ids = prompts[1]
    prm = dict(SAMPLED, n_predict=24)
    plain = cached(("q8s", 1), lambda: generate(trained, ids, prm))
    r = spec(trained, ids, prm, n_max)
    assert r["tokens"] == plain["tokens"]
    check_stats(r, 24, n_max)


SAMPLER_CONFIGS = [
    {"repeat_penalty": 1.3, "repeat_last_n": 64},
    {"presence_penalty": 0.5, "frequency_penalty": 0.5},
    {"mirostat": 2},
    {"mirostat": 1},
    {"temperature": 1.0, "xtc_probability": 0.5, "xtc_threshold": 0.1},
    {"typical_p": 0.9},
    {"dynatemp_range": 0.5},
    {"temperature": 1.5, "top_k": 0, "top_p": 1.0, "min_p": 0.0},
    {"temperature": 0, "repeat_penalty": 1.5},
]


@pytest.mark.parametrize("cfg", SAMPLER_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_sampler_chains_spec_equals_plain(trained, prompts, cfg):
    """Stateful samplers (penalty history, mirostat's mu) see exactly the accepted tokens, in order."""
    prm = dict(SAMPLED, n_predict=16, seed=5, **cfg)
    assert spec(trained, prompts[0], prm, 3)["tokens"] == generate(trained, prompts[0], prm)["tokens"]


# --------------------------------------------------------------------------------------------------------------
# concurrent sequences


@pytest.mark.parametrize("n_max,n_threads", [(3, 2), (7, 1)])
def test_three_sequences_together(trained, prompts, n_max, n_threads):
    # n_threads 2 (the rest of the file runs helpers_core.THREADS): threaded batched verification over 3 sequences
    c = new_context(trained, 1536, n_seq=3, spec_type="draft-mtp", n_max=n_max, n_threads=n_threads)
    res = run_seqs(c, trained, {i: (ids, greedy_params(32)) for i, ids in enumerate(prompts)})
    for i, ids in enumerate(prompts):
        plain = cached(("q8", i), lambda: generate(trained, ids, greedy_params(32)))
        assert res[i]["tokens"] == plain["tokens"], f"seq {i}"
        check_stats(res[i], 32, n_max)
        # the drafts of one sequence do not depend on its neighbours
        alone = cached(("q8", i, n_max), lambda: spec(trained, ids, greedy_params(32), n_max))
        for k in ("n_draft", "n_draft_accepted", "n_verif_steps"):
            assert res[i]["stats"][k] == alone["stats"][k], (i, k)


def test_three_sequences_sampled_together(trained, prompts):
    prm = [dict(SAMPLED, n_predict=16, seed=s) for s in (1, 2, 3)]
    c = new_context(trained, 1536, n_seq=3, spec_type="draft-mtp", n_max=3)
    res = run_seqs(c, trained, {i: (ids, prm[i]) for i, ids in enumerate(prompts)})
    for i, ids in enumerate(prompts):
        assert res[i]["tokens"] == generate(trained, ids, prm[i])["tokens"], f"seq {i}"


# --------------------------------------------------------------------------------------------------------------
# llama-quantize's low-bit files (IQ1-IQ3, Q2_K, MXFP4 experts): draft-mtp never changes the greedy output

LOWBIT = ["qwen35-IQ1_S", "qwen35-IQ1_M", "qwen35-IQ2_XXS", "qwen35-IQ2_XS", "qwen35-IQ2_M", "qwen35-IQ3_XXS",
          "qwen35-IQ3_M", "qwen35-Q2_K", "moe-MXFP4_MOE"]


@pytest.mark.parametrize("key", LOWBIT)
def test_greedy_spec_equals_plain_lowbit(key):
    from helpers_core import MODELS
    m = get_model(key, load_mtp=True)
    accepted = 0
    for i, comp in enumerate(load_fixture(MODELS[key][1])["complete"]):
        ids = m.tokenize(comp["prompt"], True, True)
        plain = generate(m, ids, greedy_params(32))
        for n_max in (1, 3, 7):
            r = spec(m, ids, greedy_params(32), n_max)
            assert r["tokens"] == plain["tokens"], f"{key} prompt {i}, n_max {n_max}"
            check_stats(r, 32, n_max)
            accepted += r["stats"]["n_draft_accepted"]
    assert accepted > 0  # the verify + rollback path ran with accepted drafts too


# make_tiny_gguf random qwen35 / qwen35moe files

TINY_PROMPTS = [[220, 4807, 4811, 376, 197, 83, 2135, 198, 1429, 1397], [6125, 368, 11, 5967, 1378]]
N_TINY = 20


@pytest.fixture(scope="module", params=["qwen35", "qwen35moe"])
def tiny(request, tiny_gguf):
    return _core.Model(str(tiny_gguf("--arch", request.param, "--seed", "11")), load_mtp=True)


@pytest.mark.parametrize("n_max", N_MAX)
def test_greedy_spec_equals_plain_tiny(tiny, n_max):
    ids = TINY_PROMPTS[0]
    plain = cached((tiny.arch, 0), lambda: generate(tiny, ids, greedy_params(N_TINY)))
    r = spec(tiny, ids, greedy_params(N_TINY), n_max)
    assert r["tokens"] == plain["tokens"], f"{tiny.arch} n_max {n_max}"
    check_stats(r, N_TINY, n_max)
    _cache.setdefault((tiny.arch, "accepted"), []).append(r["stats"]["n_draft_accepted"])


def test_tiny_drafts_are_sometimes_accepted(tiny):
    """The verify + rollback path above was exercised with both accepted and rejected drafts."""
    acc = _cache.get((tiny.arch, "accepted"))
    if acc is None:
        pytest.skip("needs test_greedy_spec_equals_plain_tiny")
    assert sum(acc) > 0


def test_sampled_spec_equals_plain_tiny(tiny):
    prm = dict(SAMPLED, n_predict=N_TINY)
    ids = TINY_PROMPTS[1]
    assert spec(tiny, ids, prm, 3)["tokens"] == generate(tiny, ids, prm)["tokens"]


def test_three_sequences_together_tiny(tiny):
    jobs = {0: (TINY_PROMPTS[0], greedy_params(N_TINY)), 1: (TINY_PROMPTS[1], greedy_params(12)),
            2: ([8190, 882, 198, 3923], greedy_params(8))}
    c = new_context(tiny, 1536, n_seq=3, spec_type="draft-mtp", n_max=3)
    res = run_seqs(c, tiny, jobs)
    for i, (ids, prm) in jobs.items():
        plain = cached((tiny.arch, 0), lambda: generate(tiny, ids, prm)) if i == 0 else generate(tiny, ids, prm)
        assert res[i]["tokens"] == plain["tokens"], f"{tiny.arch} seq {i}"


# --------------------------------------------------------------------------------------------------------------
# memory


@pytest.mark.parametrize("n_ctx", [256, 4096])
def test_recurrent_memory_bound(trained, n_ctx):
    md = trained.metadata()
    a = trained.arch
    rec = md[f"{a}.attention.recurrent_layers"]
    n_nextn = md[f"{a}.nextn_predict_layers"]
    n_trunk = len(rec) - n_nextn
    n_attn = sum(1 for r in rec[:n_trunk] if not r)
    kv_tok = 2 * md[f"{a}.attention.head_count_kv"] * md[f"{a}.attention.key_length"] * 2  # K + V, f16
    kv_trunk = n_attn * n_ctx * kv_tok
    kv_mtp = n_nextn * n_ctx * kv_tok  # the MTP layer's own KV
    d_state, inner = md[f"{a}.ssm.state_size"], md[f"{a}.ssm.inner_size"]
    conv_dim = 2 * md[f"{a}.ssm.group_count"] * d_state + inner
    rs = (n_trunk - n_attn) * ((md[f"{a}.ssm.conv_kernel"] - 1) * conv_dim + inner * d_state) * 4
    plain = new_context(trained, n_ctx).memory_bytes
    assert plain == kv_trunk + rs
    for k in N_MAX:
        mem = new_context(trained, n_ctx, spec_type="draft-mtp", n_max=k).memory_bytes
        assert mem - kv_mtp <= (k + 1) * plain, (k, mem, plain)
        # one recurrent plane per verified row, nothing else grows
        assert mem == kv_trunk + (k + 1) * rs + kv_mtp, (k, mem)
