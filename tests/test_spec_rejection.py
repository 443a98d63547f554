"""--spec-accept rejection (csrc/speculative/accept.h): at temperature > 0 the MTP drafts are sampled from the
request's drafting chain over the MTP head and kept with probability min(1, p_target/p_draft), the correction
drawn from norm(max(0, p_target - p_draft)). The output then equals plain sampling in distribution (not token for
token): checked with a chi-square test over many seeds at fixed positions, with fixed seeds so it is not flaky,
and shown able to fail (it tells temperature 1.0 from 0.85). Greedy and mirostat fall back to the default exact
match, so they stay equal to plain decoding token for token."""
import collections
import math

import numpy as np
import pytest

from helpers_core import generate, get_model, greedy_params, load_fixture, new_context, run_seqs

from pyllm import _core, sampling

K = 32     # sequences decoded together
N = 1024   # runs per distribution


@pytest.fixture(scope="module")
def q8():
    return get_model("qwen35-Q8_0", load_mtp=True)


# ------------------------------------------------------------------------------------------------ chi-square

def chi2_sf(x: float, k: int) -> float:
    """P(X >= x) for X ~ chi-square with k degrees of freedom (the regularized upper incomplete gamma)."""
    a, z = k / 2.0, x / 2.0
    if z <= 0:
        return 1.0
    if z < a + 1:  # series for the lower one
        term = s = 1.0 / a
        n = a
        while abs(term) > 1e-15 * abs(s):
            n += 1
            term *= z / n
            s += term
        return 1.0 - s * math.exp(-z + a * math.log(z) - math.lgamma(a))
    b, c, d = z + 1 - a, 1e300, 1.0 / (z + 1 - a)  # continued fraction for the upper one
    h = d
    for i in range(1, 10000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = 1.0 / d if abs(d) > 1e-300 else 1e300
        c = b + an / c if abs(c) > 1e-300 else b + an / 1e-300
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return h * math.exp(-z + a * math.log(z) - math.lgamma(a))


def test_chi2_sf_known_values():
    assert chi2_sf(3.841458820694124, 1) == pytest.approx(0.05, rel=1e-6)
    assert chi2_sf(18.307038053275146, 10) == pytest.approx(0.05, rel=1e-6)
    assert chi2_sf(124.34211340400407, 100) == pytest.approx(0.05, rel=1e-6)


def two_sample_p(a: list, b: list, min_count: int = 10) -> float:
    """Chi-square homogeneity test of two samples of tokens (cells seen < min_count times pooled into one)."""
    ca, cb = collections.Counter(a), collections.Counter(b)
    cells, rest = [], [0, 0]
    for t in set(ca) | set(cb):
        if ca[t] + cb[t] >= min_count:
            cells.append((ca[t], cb[t]))
        else:
            rest[0] += ca[t]; rest[1] += cb[t]
    if sum(rest) > 0:
        cells.append(tuple(rest))
    na, nb = len(a), len(b)
    stat = 0.0
    for x, y in cells:
        n = x + y
        ea, eb = n * na / (na + nb), n * nb / (na + nb)
        stat += (x - ea) ** 2 / ea + (y - eb) ** 2 / eb
    return chi2_sf(stat, len(cells) - 1)


def samples(m, ids, prm, seed0=0, **ctx_kw) -> list:
    """N runs of prompt ids at seeds seed0.. seed0+N-1 -> their generated tokens (distinct seeds: independent samples)."""
    c = new_context(m, 64 * K, n_seq=K, **ctx_kw)
    out = []
    for b in range(0, N, K):
        r = run_seqs(c, m, {i: (ids, dict(prm, seed=seed0 + b + i)) for i in range(K)})
        out += [r[i]["tokens"] for i in range(K)]
    g = c.global_stats()
    samples.drafted = (g["n_draft"], g["n_draft_accepted"])
    return out


CASES = {
    "t1.0": {"temperature": 1.0},                                                        # default top-k / top-p / min-p
    "t0.7-full-vocab-penalties": {"temperature": 0.7, "top_k": 0, "top_p": 1.0, "min_p": 0.0,
                                  "repeat_penalty": 1.5, "presence_penalty": 0.5},
}


@pytest.mark.parametrize("case", list(CASES))
def test_rejection_matches_plain_in_distribution(q8, case):
    """At the positions the verification decides (tokens 2, 3 and 4: the first and second draft of a step and
    the bonus or correction after them), the
    token distribution over N seeds equals plain sampling's (other seeds: independent samples) within sampling
    error, p > 0.001 (fixed seeds: the same numbers every run). Drafts were made and most were accepted."""
    ids = q8.tokenize("The little dog", True, True)
    prm = dict(CASES[case], n_predict=4, ignore_eos=True)
    plain = samples(q8, ids, prm, seed0=10**6)
    rej = samples(q8, ids, prm, spec_type="draft-mtp", n_max=3, accept="rejection")
    n_draft, n_acc = samples.drafted
    assert n_draft >= N * 2 and n_acc > n_draft / 3  # two drafts a run (n_predict 4), many of them accepted
    for pos in (0, 1, 2, 3):
        p = two_sample_p([r[pos] for r in plain], [r[pos] for r in rej])
        assert p > 1e-3, (case, pos, p)
    # the test can fail: the same statistic tells temperature 1.0 from 0.7
    if case == "t1.0":
        cooler = samples(q8, ids, dict(prm, temperature=0.7), seed0=2 * 10**6)
        assert max(two_sample_p([r[pos] for r in plain], [r[pos] for r in cooler]) for pos in (1, 2, 3)) < 1e-3


def acceptance(m, ids, accept, temp, **kw):
    nd = na = 0
    for seed in range(3):
        c = new_context(m, 1024, spec_type="draft-mtp", n_max=3, accept=accept, **kw)
        st = run_seqs(c, m, {0: (ids, {"temperature": temp, "seed": seed, "n_predict": 96, "ignore_eos": True})})[0]["stats"]
        nd += st["n_draft"]; na += st["n_draft_accepted"]
    return na / nd


def test_rejection_accepts_more_at_temperature(q8):
    """The point of the option: sampled drafts against the target distribution keep more drafts than exact match
    (measured on this model: 0.32 -> 0.51 at temperature 0.7, 0.28 -> 0.42 at 1.0)."""
    ids = q8.tokenize(load_fixture("qwen35-tiny-mtp-Q8_0.llamacpp.json")["complete"][0]["prompt"], True, True)
    for temp in (0.7, 1.0):
        assert acceptance(q8, ids, "rejection", temp) > acceptance(q8, ids, "match", temp) + 0.05, temp


@pytest.mark.parametrize("n_max", range(1, 8))
def test_greedy_and_mirostat_stay_exact(q8, n_max):
    """Without a distribution to sample (greedy, mirostat) a sequence is drafted greedily and verified by exact
    match: the output is plain decoding's, token for token, for every n_max."""
    ids = q8.tokenize("Once upon a time", True, True)
    for prm in (greedy_params(24), {"temperature": 0.8, "mirostat": 2, "seed": 5, "n_predict": 24, "ignore_eos": True}):
        want = generate(q8, ids, prm)["tokens"]
        r = generate(q8, ids, prm, spec_type="draft-mtp", n_max=n_max, accept="rejection")
        assert r["tokens"] == want, (n_max, prm)
        assert r["stats"]["n_draft_accepted"] > 0


def test_reproducible_for_a_seed_and_with_other_drafters(q8):
    """A fixed seed gives the same output twice; the cheap draft head (reduced vocabulary: the chain runs over the
    token ids with the other rows at -inf) and an ngram drafter (point-mass drafts) work in this mode."""
    ids = q8.tokenize("Once upon a time", True, True)
    prm = {"temperature": 0.9, "seed": 11, "n_predict": 48, "ignore_eos": True}
    a = generate(q8, ids, prm, spec_type="draft-mtp", n_max=4, accept="rejection")
    b = generate(q8, ids, prm, spec_type="draft-mtp", n_max=4, accept="rejection")
    assert a["tokens"] == b["tokens"] and len(a["tokens"]) == 48
    for kw in ({"draft_vocab": 2048}, {"draft_head_type": "q4_0"}, {"spec_type": "draft-mtp,ngram-simple"}):
        r = generate(q8, ids, prm, **dict({"spec_type": "draft-mtp", "n_max": 4, "accept": "rejection"}, **kw))
        assert len(r["tokens"]) == 48 and r["stats"]["n_draft_accepted"] > 0, kw


def test_bad_accept_value_raises(q8):
    with pytest.raises(ValueError, match="--spec-accept must be 'match' or 'rejection', got 'maybe'"):
        new_context(q8, 256, spec_type="draft-mtp", accept="maybe")
    with pytest.raises(ValueError, match="--spec-accept"):
        _core.check_spec_params("draft-mtp", accept="")


# ------------------------------------------------------------------------------- the sampler's distributions

def test_sampler_distribution_is_the_chain_without_the_draw():
    """Sampler.distribution: the candidates sample() would draw from with their probabilities, and no RNG draw
    (the next sample() is the one a fresh sampler makes); greedy and mirostat have none."""
    V = 200
    lg = (np.random.default_rng(3).normal(size=V) * 2).astype(np.float32)
    prm = {"temperature": 0.8, "top_k": 20, "top_p": 0.9, "seed": 9}
    s, fresh = (_core.Sampler(sampling.sampler_params(prm), V) for _ in range(2))
    d = dict(s.distribution(lg))
    assert s.has_distribution and 0 < len(d) <= 20 and sum(d.values()) == pytest.approx(1.0, abs=1e-5)
    assert s.sample(lg) == fresh.sample(lg)
    assert {t: p for t, _, p in s.candidates() if p > 0} == pytest.approx(d, abs=1e-6)
    for bad in ({"temperature": 0}, {"temperature": 0.8, "mirostat": 1}):
        g = _core.Sampler(sampling.sampler_params(bad), V)
        assert not g.has_distribution
        with pytest.raises(RuntimeError, match="no distribution"):
            g.distribution(lg)


def test_draft_params_drop_history_and_coin():
    """The drafting chain is the request's without penalties and XTC (no history, no coin), the rest unchanged."""
    p = sampling.sampler_params({"temperature": 0.7, "top_k": 12, "repeat_penalty": 1.3, "xtc_probability": 0.5})
    d = _core.Sampler.draft_params(p)
    names = [_core.sampler_type_name(t) for t in d.samplers]
    assert "penalties" not in names and "xtc" not in names and "top_k" in names and "temperature" in names
    assert (d.top_k, d.temp, d.penalty_last_n, d.xtc_probability) == (12, pytest.approx(0.7), 0, 0.0)
