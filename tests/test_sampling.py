"""Sampler chain (csrc/sampling) against numpy re-implementations of llama.cpp's samplers; the request-dict
parsing into its params (pyllm/sampling.py)."""
import math

import numpy as np
import pytest

from pyllm import _core, sampling

V = 64


def Sampler(params: dict, n_vocab: int):
    return _core.Sampler(sampling.sampler_params(params), n_vocab)


def logits_(seed=0, n=V, scale=2.0):
    return (np.random.default_rng(seed).normal(size=n) * scale).astype(np.float32)


def run(logits, **params):
    s = Sampler(params, len(logits))
    tok = s.sample(np.asarray(logits, np.float32))
    return s, tok, s.candidates()


def softmax(x):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


def desc_order(l):
    # (logit desc, id asc), the chain's total order
    return sorted(range(len(l)), key=lambda i: (-float(l[i]), i))


# ---------------------------------------------------------------------------------------------
# params

def test_defaults_match_llamacpp():
    d = sampling.defaults()
    assert d["seed"] == 4294967295
    assert d["top_k"] == 40 and d["repeat_last_n"] == 64 and d["min_keep"] == 0 and d["n_probs"] == 0
    for k, v in dict(temperature=0.8, top_p=0.95, min_p=0.05, typical_p=1.0, xtc_probability=0.0,
                     xtc_threshold=0.1, top_n_sigma=-1.0, repeat_penalty=1.0, frequency_penalty=0.0,
                     presence_penalty=0.0, dynatemp_range=0.0, dynatemp_exponent=1.0).items():
        assert d[k] == pytest.approx(v), k
    assert d["samplers"] == ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc",
                             "temperature"]
    assert d["ignore_eos"] is False and d["logit_bias"] == []


def settings(d: dict) -> dict:
    return sampling.settings(sampling.sampler_params(d))


def test_params_from_dict_names_and_aliases():
    p = settings({"temperature": 0.5, "typical_p": 0.9, "repeat_last_n": 8, "seed": -1,
                              "samplers": ["Top-K", "nucleus", "temp", "bogus"], "logprobs": 3,
                              "dry_base": 0.5, "prompt": "ignored", "top_k": None})
    assert p["temperature"] == pytest.approx(0.5) and p["typical_p"] == pytest.approx(0.9)
    assert p["repeat_last_n"] == 8 and p["seed"] == 4294967295 and p["n_probs"] == 3
    assert p["samplers"] == ["top_k", "top_p", "temperature"]
    assert p["dry_base"] == pytest.approx(1.75)  # < 1 -> default
    assert p["top_k"] == 40
    assert settings({"samplers": "kpmt"})["samplers"] == ["top_k", "top_p", "min_p", "temperature"]
    assert settings({"seed": 42})["seed"] == 42


def test_logit_bias_forms_and_settings_round_trip():
    ban = float("-inf")
    want = [(5, -1.5), (7, ban), (9, 2.0)]
    assert sampling.logit_bias({"5": -1.5, 7: False, "9": 2, "11": True}) == want  # true: no bias
    assert sampling.logit_bias([[5, -1.5], [7, False], [9, 2.0], [1, "x"]]) == want
    assert sampling.logit_bias([{"token": 5, "bias": -1.5}, {"token": 7, "bias": None}, {"token": 9, "bias": 2}]) == want
    d = settings({"temperature": 0.25, "top_k": 7, "seed": 3, "logit_bias": {"5": -1.5, "7": False},
                  "samplers": ["top_k", "temp"], "dry_sequence_breakers": ["\n"], "n_probs": 2})
    assert d["logit_bias"] == [{"token": 5, "bias": -1.5}, {"token": 7, "bias": None}]  # bans shown as null
    assert settings(d) == d  # generation_settings read back the same
    assert list(d) == list(sampling.defaults())


@pytest.mark.parametrize("params,msg", [
    ({"temperature": "hot"}, "'temperature' must be a number"),
    ({"top_k": [1]}, "'top_k' must be a number"),
    ({"top_k": 2 ** 40}, "'top_k' must be a 32-bit integer"),
    ({"repeat_last_n": float("nan")}, "'repeat_last_n' must be a 32-bit integer"),
    ({"seed": float("inf")}, "'seed' must be a finite number"),
    ({"ignore_eos": "yes"}, "'ignore_eos' must be a boolean"),
    ({"samplers": [1, 2]}, "'samplers' must be a list of strings"),
    ({"dry_sequence_breakers": "ab"}, "'dry_sequence_breakers' must be a list of strings"),
    ({"logit_bias": 3}, "logit_bias must be a list"),
    ({"logit_bias": {1.5: 1.0}}, "token must be an int"),
])
def test_bad_params_name_the_field(params, msg):
    with pytest.raises(ValueError, match=msg):
        sampling.sampler_params(params)


def test_seq_params():
    sp = sampling.seq_params({"n_predict": 5, "n_probs": 2, "seed": 7, "ignore_eos": True, "temperature": 0},
                             eog_ids=[2, 9])
    assert (sp.n_predict, sp.n_probs, sp.seed, sp.ignore_eos) == (5, 2, 7, True)
    assert sp.sampler.temp == 0 and sp.sampler.logit_bias_eog == [(2, float("-inf")), (9, float("-inf"))]
    sp = sampling.seq_params({"seed": -1}, eog_ids=[2])
    assert sp.seed == sampling.UINT32_MAX and not sp.ignore_eos and sp.sampler.logit_bias_eog == []
    with pytest.raises(ValueError, match="'n_predict' must be an integer"):
        sampling.seq_params({"n_predict": 1.5})


def test_unimplemented_samplers_raise_clearly():
    Sampler({"dry_multiplier": 0.0}, V)  # default: off, fine
    with pytest.raises(ValueError, match="DRY"):
        Sampler({"dry_multiplier": 0.8}, V)
    with pytest.raises(ValueError, match="adaptive_p"):
        Sampler({"samplers": ["adaptive_p"]}, V)
    with pytest.raises(ValueError, match="text key"):
        Sampler({"logit_bias": {"hello": 1.0}}, V)
    s = Sampler({}, V)
    with pytest.raises(ValueError, match="n_vocab"):
        s.sample(np.zeros(V + 1, np.float32))


# ---------------------------------------------------------------------------------------------
# single steps

def test_greedy_is_argmax():
    for seed in range(5):
        l = logits_(seed)
        for params in ({"temperature": 0}, {"temperature": 0, "samplers": ["temperature"]},
                       {"temperature": -1, "top_k": 0, "top_p": 1.0, "min_p": 0.0}):
            assert run(l, **params)[1] == int(np.argmax(l))


def test_greedy_ties_lowest_id():
    l = np.zeros(V, np.float32)
    l[[7, 3, 50]] = 5.0
    for params in ({"temperature": 0}, {"temperature": 0, "samplers": ["temperature"]}):
        for seed in range(10):
            assert run(l, seed=seed, **params)[1] == 3


def test_top_k():
    l = logits_(1)
    _, tok, c = run(l, samplers=["top_k"], top_k=7)
    assert [t[0] for t in c] == desc_order(l)[:7]
    assert tok in [t[0] for t in c]
    assert np.allclose([t[2] for t in c], softmax([l[t[0]] for t in c]), atol=1e-6)


def test_top_p():
    for p in (0.3, 0.8, 0.95):
        l = logits_(2)
        order = desc_order(l)
        probs = softmax(l)[order]
        keep = int(np.argmax(np.cumsum(probs) >= p)) + 1
        _, _, c = run(l, samplers=["top_p"], top_p=p)
        assert [t[0] for t in c] == order[:keep]


def test_top_p_large_vocab_lazy_sort():
    l = logits_(3, n=5000, scale=1.0)  # flat: p is reached far beyond the first sorted head
    order = desc_order(l)
    keep = int(np.argmax(np.cumsum(softmax(l)[order]) >= 0.9)) + 1
    assert keep > 256
    _, _, c = run(l, samplers=["top_p"], top_p=0.9)
    assert [t[0] for t in c] == order[:keep]


def test_min_p_unsorted_keeps_vocab_order():
    l = logits_(4)
    thr = l.max() + math.log(0.1)
    _, _, c = run(l, samplers=["min_p"], min_p=0.1)
    assert [t[0] for t in c] == [i for i in range(V) if l[i] >= np.float32(thr)]


def test_min_p_after_top_k_sorted():
    l = logits_(5)
    _, _, c = run(l, samplers=["top_k", "min_p"], top_k=20, min_p=0.2)
    order = desc_order(l)[:20]
    thr = l[order[0]] + math.log(0.2)
    assert [t[0] for t in c] == [i for i in order if l[i] >= np.float32(thr)]


def test_typical():
    l = logits_(6)
    p = 0.5
    order = desc_order(l)
    probs = softmax(l)[order]
    ent = -(probs * np.log(probs)).sum()
    score = np.abs(-np.log(probs) - ent)
    idx = sorted(range(V), key=lambda i: (score[i], i))
    cum = np.cumsum(probs[idx])
    keep = int(np.argmax(cum > p)) + 1
    _, _, c = run(l, samplers=["typ_p"], typical_p=p)
    assert [t[0] for t in c] == [order[i] for i in idx[:keep]]


def test_top_n_sigma():
    l = logits_(7)
    n = 1.0
    cut = l.max() - n * l.std()
    _, tok, c = run(l, samplers=["top_n_sigma"], top_n_sigma=n)
    alive = {t[0] for t in c if t[2] > 0}
    assert alive == {i for i in range(V) if l[i] >= cut}
    assert tok in alive


def test_temperature_probs():
    l = logits_(8)
    for t in (0.5, 1.7):
        _, _, c = run(l, samplers=["temperature"], temperature=t)
        assert [x[0] for x in c] == list(range(V))  # unsorted: vocab order kept
        assert np.allclose([x[2] for x in c], softmax(l / t), atol=1e-6)


def test_dynatemp_range_within_bounds():
    l = logits_(9)
    _, _, c = run(l, samplers=["temperature"], temperature=1.0, dynatemp_range=0.5)
    order = desc_order(l)
    probs = softmax(l)[order]
    ent = -(probs * np.log(probs)).sum() / math.log(V)
    t = 0.5 + 1.0 * ent  # min_t + (max_t - min_t) * ent^1
    got = {x[0]: x[2] for x in c}
    assert np.allclose([got[i] for i in order], softmax(l[order] / t), atol=1e-5)


def test_xtc_removes_top_choices():
    l = np.full(V, -5.0, np.float32)
    l[[10, 20, 30]] = [3.0, 2.8, 2.6]
    probs = softmax(l)
    assert (probs[[10, 20, 30]] >= 0.1).all()
    _, tok, c = run(l, samplers=["xtc"], xtc_probability=1.0, xtc_threshold=0.1)
    ids = [t[0] for t in c]
    assert 10 not in ids and 20 not in ids and 30 in ids and len(ids) == V - 2
    # threshold > 0.5 disables XTC
    _, _, c = run(l, samplers=["xtc"], xtc_probability=1.0, xtc_threshold=0.6)
    assert len(c) == V


def test_penalties():
    l = logits_(10)
    l[5], l[9] = 1.5, -1.5
    hist = [5, 9, 5, 11, 5]
    s = Sampler({"samplers": ["penalties"], "repeat_penalty": 1.3, "frequency_penalty": 0.2,
                       "presence_penalty": 0.5, "repeat_last_n": 4}, V)
    for t in hist:
        s.accept(t)
    assert s.history == hist[-4:]
    s.sample(l)
    got = {t[0]: t[1] for t in s.candidates()}
    exp = l.astype(np.float32).copy()
    counts = {}
    for t in hist[-4:]:
        counts[t] = counts.get(t, 0) + 1
    for t, n in counts.items():
        x = exp[t]
        x = x * np.float32(1.3) if x <= 0 else x / np.float32(1.3)
        exp[t] = x - (n * np.float32(0.2) + np.float32(0.5))
    assert np.allclose([got[i] for i in range(V)], exp, atol=1e-6)
    # after top_k reorders, the by-candidate path gives the same logits
    s2 = Sampler({"samplers": ["top_k", "penalties"], "top_k": V, "repeat_penalty": 1.3,
                        "frequency_penalty": 0.2, "presence_penalty": 0.5, "repeat_last_n": 4}, V)
    for t in hist:
        s2.accept(t)
    s2.sample(l)
    got2 = {t[0]: t[1] for t in s2.candidates()}
    assert np.allclose([got2[i] for i in range(V)], exp, atol=1e-6)
    s.reset()
    assert s.history == []


def test_logit_bias_forms():
    l = logits_(11)
    low = int(np.argmin(l))
    for lb in ([[low, 100.0]], {str(low): 100.0}, [{"token": low, "bias": 100}]):
        assert run(l, logit_bias=lb, seed=1)[1] == low
    top = int(np.argmax(l))
    for lb in ([[top, False]], {top: False}):
        for seed in range(5):
            assert run(l, logit_bias=lb, temperature=0, seed=seed)[1] != top
    # ignore_eos bans the EOG ids the engine passes in
    assert run(l, temperature=0, ignore_eos=True, eog_tokens=[top])[1] != top
    assert run(l, temperature=0, ignore_eos=False, eog_tokens=[top])[1] == top
    gs = sampling.settings(Sampler({"ignore_eos": True, "eog_tokens": [top]}, V).params)["logit_bias"]
    assert gs == [{"token": top, "bias": None}]


# ---------------------------------------------------------------------------------------------
# dist and RNG

def _canonical_double(raw):
    """libstdc++ generate_canonical<double, 53>(mt19937): two 32-bit draws, low word first."""
    r = (int(raw[0]) + int(raw[1]) * 2**32) / 2.0**64
    return r if r < 1.0 else math.nextafter(1.0, 0.0)


def test_dist_matches_mt19937_reimplementation():
    seed, t = 1234, 0.7
    l = logits_(12)
    s = Sampler({"seed": seed, "samplers": ["temperature"], "temperature": t}, V)
    rs = np.random.RandomState(seed)  # legacy seeding == std::mt19937(seed)
    for step in range(50):
        x = (l / np.float32(t)).astype(np.float32)
        p = np.exp((x - x.max()).astype(np.float32)).astype(np.float64)
        target = p.sum() * _canonical_double(rs._bit_generator.random_raw(2))
        exp = int(np.argmax(np.cumsum(p) >= target))
        assert s.sample(l) == exp, step
        s.accept(exp)


def test_seeded_reproducible_and_reset():
    l = [logits_(i) for i in range(30)]
    a = Sampler({"seed": 7, "top_k": 0, "top_p": 0.99, "min_p": 0.0}, V)
    b = Sampler({"seed": 7, "top_k": 0, "top_p": 0.99, "min_p": 0.0}, V)
    ta = [a.sample(x) for x in l]
    tb = [b.sample(x) for x in l]
    assert ta == tb
    a.reset()
    assert [a.sample(x) for x in l] == ta
    c = Sampler({"seed": 8, "top_k": 0, "top_p": 0.99, "min_p": 0.0}, V)
    assert [c.sample(x) for x in l] != ta
    r = Sampler({"seed": -1}, V)  # a random seed is drawn
    assert isinstance(r.seed, int) and 0 <= r.sample(l[0]) < V


@pytest.mark.parametrize("mode", [1, 2])
def test_mirostat_runs_and_is_reproducible(mode):
    l = [logits_(200 + i) for i in range(20)]
    a = Sampler({"seed": 11, "mirostat": mode}, V)
    b = Sampler({"seed": 11, "mirostat": mode}, V)
    ta = [a.sample(x) for x in l]
    assert ta == [b.sample(x) for x in l]
    assert all(0 <= t < V for t in ta)
    with pytest.raises(ValueError, match="mirostat"):
        Sampler({"mirostat": 3}, V)


def test_dist_frequencies():
    l = np.array([2.0, 1.0, 0.0, -1.0], np.float32)
    s = Sampler({"seed": 3, "samplers": []}, 4)
    n = 4000
    counts = np.bincount([s.sample(l) for _ in range(n)], minlength=4) / n
    assert np.allclose(counts, softmax(l), atol=0.03)


# ---------------------------------------------------------------------------------------------
# probabilities for n_probs

def test_top_probs_raw_softmax():
    l = logits_(13)
    s = Sampler({}, V)
    top = s.top_probs(l, 5)
    ref = softmax(l)
    assert [t for t, _ in top] == desc_order(l)[:5]
    assert np.allclose([p for _, p in top], ref[desc_order(l)[:5]], atol=1e-6)
    assert sum(p for _, p in s.top_probs(l, V)) == pytest.approx(1.0, abs=1e-5)
    assert s.token_prob(l, 17) == pytest.approx(ref[17], abs=1e-7)
    top2, p17 = _core.top_probs(l, 3, 17)
    assert top2 == top[:3] and p17 == pytest.approx(ref[17], abs=1e-7)


def test_post_sampling_probs():
    l = logits_(14)
    s = Sampler({"seed": 5, "top_k": 10, "temperature": 0.9, "min_p": 0.0}, V)
    tok = s.sample(l)
    post = s.post_sampling_probs(V)
    assert len(post) <= 10 and sum(p for _, p in post) == pytest.approx(1.0, abs=1e-5)
    assert [p for _, p in post] == sorted((p for _, p in post), reverse=True)
    assert dict(post)[tok] == pytest.approx(s.selected_prob)
    # greedy: one token with p 1, the masked zeros are dropped
    g = Sampler({"temperature": 0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}, V)
    gt = g.sample(l)
    assert g.post_sampling_probs(5) == [(gt, 1.0)] and g.selected_prob == 1.0


def test_speculative_replay_same_calls():
    # verify path: sample+accept per verified position == plain decoding with the same seed
    rows = [logits_(100 + i) for i in range(12)]
    p = {"seed": 99, "repeat_penalty": 1.1}
    plain = Sampler(p, V)
    out = []
    for r in rows:
        t = plain.sample(r)
        plain.accept(t)
        out.append(t)
    spec = Sampler(p, V)
    got = []
    for i in range(0, len(rows), 4):  # verify in chunks of 4 positions
        for r in rows[i:i + 4]:
            t = spec.sample(r)
            spec.accept(t)
            got.append(t)
    assert got == out


def test_large_vocab_fast():
    import time
    n = 248_000
    l = logits_(15, n=n, scale=4.0)
    s = Sampler({"seed": 1}, n)
    s.sample(l)
    t0 = time.perf_counter()
    for _ in range(20):
        s.accept(s.sample(l))
    assert (time.perf_counter() - t0) / 20 < 0.05
