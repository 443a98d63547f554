"""Issue 10's speculative options in the core, each lossless (draft-mtp output == plain output, greedy and at a fixed
seed, n_max 1..7): per-request speculative.n_max / n_min / p_min (SeqParams.spec_*), the cheap draft head
(--spec-draft-head-type: a lower-bit copy of the MTP head; --spec-draft-vocab: the N lowest ids + the EOG ids) and
the adaptive draft length (--spec-draft-n-max auto). Bad settings raise naming the setting."""
import pytest

from helpers_core import generate, get_model, greedy_params, load_fixture, new_context, run_seqs

from pyllm import _core

N_MAX = list(range(1, 8))
SAMPLED = {"temperature": 0.8, "seed": 1234, "ignore_eos": True}
HEADS = [{"draft_head_type": "q4_0"}, {"draft_head_type": "iq4_xs"}, {"draft_vocab": 2048},
         {"draft_vocab": 1024, "draft_head_type": "q4_0"}]
HEAD_IDS = ["q4_0", "iq4_xs", "vocab2048", "vocab1024+q4_0"]


@pytest.fixture(scope="module")
def q8():
    return get_model("qwen35-Q8_0", load_mtp=True)


@pytest.fixture(scope="module")
def f16():
    return get_model("qwen35-F16", load_mtp=True)


@pytest.fixture(scope="module")
def prompts(q8):
    return [q8.tokenize(c["prompt"], True, True) for c in load_fixture("qwen35-tiny-mtp-Q8_0.llamacpp.json")["complete"]]


_plain = {}


def plain(m, i, ids, prm):
    k = (id(m), i, tuple(sorted(prm.items())))
    if k not in _plain:
        _plain[k] = generate(m, ids, prm)["tokens"]
    return _plain[k]


def spec_run(m, ids, prm, n_ctx=512, **kw):
    c = new_context(m, n_ctx, spec_type="draft-mtp", **kw)
    return run_seqs(c, m, {0: (ids, prm)})[0], c


# ------------------------------------------------------------------------------------------- per-request settings

@pytest.mark.parametrize("n_max", [0] + N_MAX)
def test_request_n_max_equals_plain(q8, prompts, n_max):
    """A context drafting up to 7; each request brings its own speculative.n_max (0 = off), greedy and seeded."""
    for i, ids in enumerate(prompts[:2]):
        for prm in (greedy_params(32), dict(SAMPLED, n_predict=24)):
            r, _ = spec_run(q8, ids, dict(prm, **{"speculative.n_max": n_max}), n_max=7)
            assert r["tokens"] == plain(q8, i, ids, prm), (i, n_max, prm)
            st = r["stats"]
            assert st["n_draft"] <= n_max * max(1, st["n_verif_steps"])
            assert (st["n_draft"] == 0) == (n_max == 0)


def test_request_type_none_and_limits(q8, prompts):
    ids = prompts[0]
    ref = plain(q8, 0, ids, greedy_params(32))
    r, _ = spec_run(q8, ids, dict(greedy_params(32), **{"speculative.type": "none"}), n_max=3)
    assert r["tokens"] == ref and r["stats"]["n_draft"] == 0
    # p_min 0.99 drafts less than the context's p_min 0; n_min above n_max is clamped to n_max (as llama.cpp did)
    lo, _ = spec_run(q8, ids, greedy_params(32), n_max=5)
    hi, _ = spec_run(q8, ids, dict(greedy_params(32), **{"speculative.p_min": 0.99}), n_max=5)
    assert lo["tokens"] == hi["tokens"] == ref and hi["stats"]["n_draft"] < lo["stats"]["n_draft"]
    nm, _ = spec_run(q8, ids, dict(greedy_params(32), **{"speculative.n_min": 9, "speculative.n_max": 2}), n_max=5)
    assert nm["tokens"] == ref and nm["stats"]["n_draft"] > 0
    # a request's settings do not leak into the next request on the same sequence
    c = new_context(q8, 512, spec_type="draft-mtp", n_max=3)
    run_seqs(c, q8, {0: (ids, dict(greedy_params(16), **{"speculative.n_max": 0}))})
    again = run_seqs(c, q8, {0: (prompts[1], greedy_params(16))})[0]
    assert again["stats"]["n_draft"] > 0


def test_sequences_with_different_settings_together(q8, prompts):
    """Three sequences in one context with n_max 0, 2 and 7: one verification batch of mixed lengths."""
    c = new_context(q8, 3 * 512, n_seq=3, spec_type="draft-mtp", n_max=7)
    jobs = {i: (prompts[i], dict(greedy_params(24), **{"speculative.n_max": n})) for i, n in enumerate((0, 2, 7))}
    out = run_seqs(c, q8, jobs)
    for i in range(3):
        assert out[i]["tokens"] == plain(q8, i, prompts[i], greedy_params(24))
    assert out[0]["stats"]["n_draft"] == 0 and out[1]["stats"]["n_draft"] <= 2 * out[1]["stats"]["n_verif_steps"]


@pytest.mark.parametrize("prm,ctx_kw,msg", [
    ({"speculative.n_max": 4}, {"spec_type": "draft-mtp", "n_max": 3}, "speculative.n_max 4 exceeds the server's longest draft 3"),
    ({"speculative.n_max": 1}, {}, "speculative.n_max: speculative decoding is off"),
    ({"speculative.n_max": -1}, {}, "'speculative.n_max' must be an integer >= 0"),
    ({"speculative.n_max": 1.5}, {}, "'speculative.n_max' must be an integer >= 0"),
    ({"speculative.p_min": 2}, {}, "'speculative.p_min' must be a number within"),
    ({"speculative.type": 3}, {}, "'speculative.type' must be a string"),
])
def test_request_settings_errors(q8, prompts, prm, ctx_kw, msg):
    c = new_context(q8, 512, **ctx_kw)
    with pytest.raises(ValueError, match=msg):
        run_seqs(c, q8, {0: (prompts[0], dict(greedy_params(4), **prm))})
    r = run_seqs(c, q8, {0: (prompts[0], greedy_params(4))})[0]  # the context is still usable
    assert len(r["tokens"]) == 4


def test_request_n_max_zero_on_plain_context(q8, prompts):
    c = new_context(q8, 512)
    r = run_seqs(c, q8, {0: (prompts[0], dict(greedy_params(8), **{"speculative.n_max": 0, "speculative.type": "none"}))})[0]
    assert r["tokens"] == plain(q8, 0, prompts[0], greedy_params(8))[:8] or len(r["tokens"]) == 8


# ------------------------------------------------------------------------------------------- cheap draft head

@pytest.mark.parametrize("kw", HEADS, ids=HEAD_IDS)
@pytest.mark.parametrize("n_max", N_MAX)
def test_draft_head_equals_plain(q8, f16, prompts, kw, n_max):
    for m in (q8, f16):
        for prm in (greedy_params(32), dict(SAMPLED, n_predict=24)):
            r, c = spec_run(m, prompts[1], prm, n_max=n_max, **kw)
            assert r["tokens"] == plain(m, 1, prompts[1], prm), (kw, n_max, prm)
            assert r["stats"]["n_draft"] > 0
            assert c.draft_head_info.startswith("draft head: ")


def test_draft_head_rows_memory_and_info(q8):
    V = q8.n_vocab
    c = new_context(q8, 256, spec_type="draft-mtp", n_max=3, draft_head_type="q4_0")
    assert c.draft_head_bytes == V * (q8.n_embd // 32) * 18  # q4_0: 18 bytes per 32 values
    assert "q4_0 rows of 'output.weight' (q8_0)" in c.draft_head_info and "MiB extra memory" in c.draft_head_info
    # the reduced vocabulary is a view of the mmap (no copy) plus the EOG rows beyond it
    c = new_context(q8, 256, spec_type="draft-mtp", n_max=3, draft_vocab=1000)
    n_eog = len([t for t in set(q8.eog_ids) if t >= 1000])
    assert f"{1000 + n_eog} of {V} ids (1000 lowest + {n_eog} end-of-generation)" in c.draft_head_info
    assert c.draft_head_bytes == n_eog * (q8.n_embd // 32) * 34
    # the options off: the model's own head, nothing extra
    c = new_context(q8, 256, spec_type="draft-mtp", n_max=3)
    assert c.draft_head_info == "" and c.draft_head_bytes == 0


def test_draft_head_keeps_acceptance(f16, q8, prompts):
    """The lower-bit copy stays within 2 points of the full head's acceptance on the trained model (n_max 3)."""
    def rate(m, **kw):
        nd = na = 0
        for ids in prompts:
            r, _ = spec_run(m, ids, greedy_params(64), n_ctx=1024, n_max=3, **kw)
            nd += r["stats"]["n_draft"]; na += r["stats"]["n_draft_accepted"]
        return na / nd
    for m in (f16, q8):
        full = rate(m)
        assert rate(m, draft_head_type="q4_0") >= full - 0.02
        assert rate(m, draft_head_type="q8_0") >= full - 0.02


@pytest.mark.parametrize("kw,msg", [
    ({"draft_head_type": "q9_9"}, "--spec-draft-head-type: unknown type 'q9_9'"),
    ({"draft_head_type": "q4_K"}, "n_embd 256 is not a multiple|"),
    ({"draft_vocab": -3}, "--spec-draft-vocab must be >= 0"),
])
def test_draft_head_errors(q8, kw, msg):
    if kw.get("draft_head_type") == "q4_K":  # n_embd 256 is one super-block: q4_K works here
        c = new_context(q8, 256, spec_type="draft-mtp", n_max=2, **kw)
        assert "q4_K rows" in c.draft_head_info
        return
    with pytest.raises(ValueError, match=msg):
        new_context(q8, 256, spec_type="draft-mtp", n_max=2, **kw)
    with pytest.raises(ValueError, match=msg):
        _core.check_spec_params("draft-mtp", 2, **kw)


# ------------------------------------------------------------------------------------------- adaptive draft length

@pytest.mark.parametrize("cap", [1, 3, 7])
def test_auto_equals_plain(q8, prompts, cap):
    for i, ids in enumerate(prompts):
        for prm in (greedy_params(32), dict(SAMPLED, n_predict=24)):
            r, c = spec_run(q8, ids, prm, n_max=cap, n_max_auto=True)
            assert r["tokens"] == plain(q8, i, ids, prm)
            assert r["stats"]["n_draft"] <= cap * r["stats"]["n_verif_steps"]
    k = c.draft_costs
    # measured numbers (a busy machine may put the speculative line's base or slope at 0, never both)
    assert k["plain_ms"] > 0 and k["draft_ms"] > 0 and k["verify_base_ms"] >= 0 and k["verify_row_ms"] >= 0
    assert k["verify_base_ms"] + k["verify_row_ms"] > 0
    assert k["overhead_ms"] >= 0


def test_auto_with_head_options_and_request_override(q8, prompts):
    ids = prompts[2]
    r, _ = spec_run(q8, ids, greedy_params(32), n_max=5, n_max_auto=True, draft_head_type="q4_0", draft_vocab=2048)
    assert r["tokens"] == plain(q8, 2, ids, greedy_params(32))
    # a request's speculative.n_max fixes the length: n_max 1 drafts exactly one token per step
    r, _ = spec_run(q8, ids, dict(greedy_params(32), **{"speculative.n_max": 1}), n_max=5, n_max_auto=True)
    assert r["tokens"] == plain(q8, 2, ids, greedy_params(32))
    assert r["stats"]["n_draft"] == r["stats"]["n_verif_steps"]


def test_auto_stops_drafting_when_nothing_is_accepted(q8, prompts):
    """Synthetic acceptance 0 (benchmark mode): the adaptive length learns that drafts never survive and drafts only
    on its probe steps (4 one-token steps after 32, 64, 128, ... steps once at k = 0), i.e. plain decoding."""
    r, _ = spec_run(q8, prompts[0], greedy_params(96), n_max=3, n_max_auto=True, synth_rates=[0.0, 0.0, 0.0])
    st = r["stats"]
    assert st["n_draft_accepted"] == 0 and st["n_draft"] <= 96 // 8 + 6, st


def timed(x, plain_ms, n=1):
    """Until 3 plain and 3 speculative steps were timed, every other step is one: time them (plain steps of n
    sequences at plain_ms, speculative ones of 1 sequence at what the start-up line predicts)."""
    for _ in range(3):
        x.observe_step(n, n, plain_ms)
    k = x.costs
    for rows in (2, 3, 2):
        x.observe_step(rows, 1, k["verify_base_ms"] + k["verify_row_ms"] * rows)
    return x


def test_auto_policy_choices():
    """The policy alone (csrc/speculative/adaptive.h): with a costly base forward and cheap rows it drafts long when
    drafts survive, nothing when they do not (but for its probe steps), and nothing when rows cost as much as a
    whole forward (a compute-bound target: on the tiny test models an extra verification row costs nearly a whole 1-row forward,
    so there auto rightly stays near 0)."""
    a = timed(_core.AdaptiveDraftLength(1, 7, verify_base_ms=10.0, verify_row_ms=0.5, draft_ms=1.0), 10.5)
    P = a.probe_every
    for _ in range(80):
        a.observe_accept(0, a.choose(0), 7)  # everything accepted
    ks = [a.choose(0) for _ in range(2 * P)]
    assert ks.count(7) == 2 * P - 2 and ks.count(6) == 2  # at the cap the probes go one shorter
    assert all(r > 0.9 for r in a.rates(0))
    b = timed(_core.AdaptiveDraftLength(2, 7, 10.0, 0.5, 1.0), 10.5)
    ks = []
    for _ in range(2400):
        k = b.choose(0)
        ks.append(k)
        b.observe_accept(0, k, 0)  # nothing accepted
    # at k = 0: probes of probe_burst 1-token steps, the wait doubling from idle_probe up to idle_probe_max
    # from here on it decodes plain (before, single drafts while the request's mean of its outcomes, which starts
    # from the context's rate, still says drafting may pay)
    first0 = next(i for i in range(len(ks)) if not any(ks[i:i + b.idle_probe]))
    probes = [i for i in range(first0, len(ks)) if ks[i] > 0 and ks[i - 1] == 0]  # each burst's first step
    assert all(ks[i:i + b.probe_burst] == [1] * b.probe_burst and ks[i + b.probe_burst] == 0 for i in probes[:-1])
    gaps = [q - p - (b.probe_burst - 1) for p, q in zip(probes, probes[1:])]  # the k = 0 steps between bursts
    assert gaps == sorted(gaps) and gaps[0] >= b.idle_probe and gaps[-1] == b.idle_probe_max, gaps

    c = timed(_core.AdaptiveDraftLength(1, 7, 0.1, 5.0, 1.0), 5.1)  # a row costs 50x the base: plain pays most
    assert [c.choose(0) for _ in range(P - 1)] == [0] * (P - 1)
    # several sequences share the per-forward costs: the same rates pay for longer drafts at n = 4
    d = timed(_core.AdaptiveDraftLength(4, 7, 2.0, 1.0, 3.0), 3.0)
    assert d.choose(0, 1) <= d.choose(1, 4)
    # the running cost fit follows what the steps measure: speculative steps (rows -> ms), plain steps on their own
    e = _core.AdaptiveDraftLength(1, 3, 1.0, 1.0, 1.0)
    for i in range(60):
        e.observe_step(2 + i % 3, 1, 4.0 + 2.0 * (2 + i % 3))
        e.observe_step(1, 1, 3.0)
        e.observe_draft(2, 6.0)
    k = e.costs
    assert abs(k["verify_base_ms"] - 4.0) < 0.3 and abs(k["verify_row_ms"] - 2.0) < 0.2 and abs(k["draft_ms"] - 3.0) < 0.1
    assert abs(k["plain_ms"] - 3.0) < 0.01
    with pytest.raises(IndexError):
        e.choose(5)


def _drive(a, n_steps, accepted, verify_ms, draft_ms=None):
    """Steps one sequence (0) of the policy `a` n_steps times with synthetic timings: a drafted step of k tokens
    accepts accepted(step) and costs base + row * (k + 1) ms (verify_ms = (base, row)), plus draft_ms * k for
    the drafts when given; a plain step costs 1 ms. Returns the chosen draft lengths."""
    chosen = []
    for step in range(n_steps):
        k = a.choose(0)
        chosen.append(k)
        if k:
            a.observe_accept(0, k, accepted(step))
            a.observe_step(k + 1, 1, verify_ms[0] + verify_ms[1] * (k + 1))
            if draft_ms is not None:
                a.observe_draft(k, draft_ms * k)
        else:
            a.observe_step(1, 1, 1.0)
    return chosen


def test_auto_policy_small_model_stays_plain():
    """A small model (the tiny test models): a speculative step has fixed costs (recurrent snapshots, the MTP
    forwards) as large as a plain step, so one accepted draft in two does not pay. The plain step is measured on its
    own, so the policy sees that (a line through the speculative steps' costs put plain decoding at their base,
    about 3x too high, and kept drafting), and it probes ever more rarely: at most ~1 probe (probe_burst drafts) per
    idle_probe_max steps in the long run."""
    a = _core.AdaptiveDraftLength(1, 3, verify_base_ms=3.0, verify_row_ms=0.3, draft_ms=1.0, plain_ms=1.0)
    # the first draft accepted half the time
    drafted = _drive(a, 3000, lambda step: 1 if step % 2 else 0, verify_ms=(3.0, 0.3), draft_ms=1.0)
    assert sum(1 for k in drafted[1000:] if k) <= (2000 // a.idle_probe_max + 1) * a.probe_burst, drafted[1000:].count(1)
    assert sum(1 for k in drafted if k) <= 12 * a.probe_burst


def test_auto_policy_measures_plain_steps_first():
    """A start-up plain-step time far too high (a busy machine) would make drafting look good even when nothing is
    accepted, and a sequence that always drafts never times a plain step: so until 3 plain steps were timed every
    other step is one, and the policy then stops drafting."""
    a = _core.AdaptiveDraftLength(1, 3, verify_base_ms=2.0, verify_row_ms=0.1, draft_ms=0.5, plain_ms=50.0)
    ks = _drive(a, 64, lambda step: 0, verify_ms=(2.0, 0.1))
    assert ks[:6].count(0) >= 3 and a.costs["plain_ms"] < 15 and ks[-24:] == [0] * 24, ks


def test_auto_policy_plain_cost_per_sequence_count():
    """A plain step of n sequences is n rows: on a bandwidth-bound target it costs well over a 1-row step (the
    27B-shaped 64-layer file: 545 ms for 1 row, ~1050 ms for 8). Taking the 1-row time for it made 8 sequences stay
    plain where drafting paid; P(n) is timed per n, and an n not timed yet is the nearest timed one plus a
    verification row's cost per row between them."""
    a = timed(_core.AdaptiveDraftLength(8, 3, verify_base_ms=700.0, verify_row_ms=47.0, draft_ms=60.0, plain_ms=545.0),
              545.0)
    for _ in range(40):
        for seq in range(8):
            a.observe_accept(seq, 3, 3)  # everything accepted
    # P(8) = 545 + 7 * 47 = 874 ms -> 8 / 874 tokens per ms plain, against 4 * 8 / (700 + 32 * 47 + 3 * 60) at k = 3
    # (with P(1) = 545 for it, plain's 8 / 545 beat that and the policy chose 0)
    assert a.choose(0, 8) == 3
    for _ in range(3):
        a.observe_step(8, 8, 300.0)  # timed: plain steps of 8 are cheap after all
    assert a.costs["plain_ms"] == 545.0
    assert [a.choose(2, 8) for _ in range(3)] == [0, 0, 0]


def test_auto_policy_probe_catch_up_and_loop_overhead():
    """Every step pays the caller's loop between steps (O, shared like the base forward): on a small model O is a
    tenth of a plain step and decides whether drafting pays. A draft whose first forward caught up more than one
    step's rows per sequence (the first after a stretch at k = 0) is the probe's cost, not a drafting forward's:
    taken as D it once made a model whose drafts paid stop drafting."""
    a = timed(_core.AdaptiveDraftLength(1, 3, verify_base_ms=1.0, verify_row_ms=0.2, draft_ms=0.3, plain_ms=1.0), 1.0)
    # rates 0.6: k = 1 gives 1.6 tokens in 1 + 0.4 + 0.3 ms, below plain's 1 per ms (k = 2, 3 lower still)
    assert a.choose(0) == 0
    a.observe_draft(1, 30.0, seqs=1, caught_up=40)  # a probe after 40 steps at k = 0
    assert a.costs["draft_ms"] == 0.3
    a.observe_draft(2, 0.8, seqs=2, caught_up=4)  # two forwards of a drafting step of two sequences
    assert abs(a.costs["draft_ms"] - 0.4) < 1e-9
    a.observe_gap(1, 50.0)  # a pause, not the loop: at most a plain step
    assert a.costs["overhead_ms"] == 1.0
    # with O = 1 ms a step: k = 2 gives 1.96 tokens in 2 + 0.6 + 0.8 ms against plain's 1 in 2 ms
    assert a.choose(0) == 2


def test_auto_policy_idle_sequence_follows_the_context():
    """A sequence that a run of rejections took to k = 0 learns nothing of its own while it does not draft: beside
    other sequences its rates drift back to the context's (which fixed-length sequences teach too), alone to the mean
    of its request's outcomes, so it drafts again long before its first idle probe (idle_probe steps): beside others,
    and alone after a short run. Alone after a long run, that mean says the same and it waits for the probe."""
    a = timed(_core.AdaptiveDraftLength(2, 3, 10.0, 0.5, 1.0, 10.5), 10.5, n=2)
    for _ in range(30):
        a.observe_accept(1, 3, 3, own=False)  # a fixed-length neighbour: every draft accepted
    assert a.rates(1) == [0.6, 0.6, 0.6]  # not its own: only the context's rates learnt
    for _ in range(20):
        a.observe_accept(0, 3, 0)  # sequence 0's own drafts all rejected
    ks = [a.choose(0, 2) for _ in range(a.idle_probe - 2)]
    assert ks[0] == 0 and any(ks), ks  # none of these steps is a probe
    # alone: 10 accepted drafts then 25 rejections take its running first rate to 0.83 * 0.92^25 = 0.10, below
    # break-even (k = 1 pays above (11 + 1) / 10.5 - 1 = 0.14), the request's mean to (10 + 8 * 0.6) / (35 + 8) =
    # 0.34, above it (8: the context's rate at the start counts as 8 outcomes)
    b = timed(_core.AdaptiveDraftLength(1, 3, 10.0, 0.5, 1.0, 10.5), 10.5)
    for _ in range(10):
        b.observe_accept(0, 1, 1)
    for _ in range(25):
        b.observe_accept(0, 3, 0)
    ks = [b.choose(0) for _ in range(b.idle_probe - 2)]
    assert ks[0] == 0 and any(ks), ks
    # 40 rejections and nothing accepted: the request's mean too ((8 * 0.6) / 48 = 0.10) says drafting does not pay
    c = timed(_core.AdaptiveDraftLength(1, 3, 10.0, 0.5, 1.0, 10.5), 10.5)
    for _ in range(40):
        c.observe_accept(0, 3, 0)
    assert [c.choose(0) for _ in range(c.idle_probe - 2)] == [0] * (c.idle_probe - 2)


def test_auto_policy_batch_probes():
    """Beside other sequences the probes are the batch's. P(n) is timed only in a step where nobody drafts, so every
    batch_plain-th drafting step is plain for every sequence (per-sequence probes never made one: a P(4) timed in a
    slow moment stayed, and held 4 sequences of the 12M model drafting below plain). At k = 0 the sequences probe
    together (one speculative step of 2n rows, the point k = 1 is decided on), in bursts of probe_burst steps, the
    wait doubling from idle_probe to idle_probe_max as a lone sequence's does."""
    n = 4
    a = timed(_core.AdaptiveDraftLength(n, 3, 10.0, 0.5, 1.0, 10.5), 10.5, n=n)
    for seq in range(n):
        for _ in range(40):
            a.observe_accept(seq, 3, 3)  # everything accepted: drafting pays
    plain = []
    for step in range(3 * (a.batch_plain + 1)):
        ks = [a.choose(s, n) for s in range(n)]
        assert len(set(ks)) == 1, (step, ks)  # same rates, same step counts: one choice
        if ks[0] == 0:
            plain.append(step)
        a.observe_step(sum(k + 1 for k in ks), n, 12.0 if ks[0] else 20.0)
    assert plain == [a.batch_plain, 2 * a.batch_plain + 1, 3 * a.batch_plain + 2], plain

    b = timed(_core.AdaptiveDraftLength(n, 3, 10.0, 0.5, 1.0, 10.5), 10.5, n=n)
    for seq in range(n):
        for _ in range(40):
            b.observe_accept(seq, 3, 0)  # nothing accepted: plain wins
    steps = []
    for _ in range(3000):
        ks = [b.choose(s, n) for s in range(n)]
        assert ks in ([0] * n, [1] * n), ks  # the idle sequences probe in the same steps
        for s in range(n):
            b.observe_accept(s, ks[s], 0)
        b.observe_step(sum(k + 1 for k in ks), n, 12.0 if ks[0] else 10.5)
        steps.append(ks[0])
    probes = [i for i in range(1, len(steps)) if steps[i] and not steps[i - 1]]  # each burst's first step
    assert all(steps[i:i + b.probe_burst] == [1] * b.probe_burst and steps[i + b.probe_burst] == 0 for i in probes[:-1])
    gaps = [q - p - b.probe_burst for p, q in zip(probes, probes[1:])]  # the plain steps between bursts
    assert gaps == sorted(gaps) and gaps[0] >= b.idle_probe and gaps[-1] == b.idle_probe_max, gaps


def test_auto_policy_idle_probe_wait_spans_requests():
    """The wait before a k = 0 probe counts down across requests: a countdown restarted by each request never
    reached a wait of 512 steps in requests of 128 tokens, so auto never drafted again (the bench's tasks)."""
    a = timed(_core.AdaptiveDraftLength(1, 3, 10.0, 0.5, 1.0, 10.5), 10.5)
    for _ in range(40):
        a.observe_accept(0, 3, 0)  # nothing accepted: plain decoding wins
    drafted = 0
    for _ in range(2 * a.idle_probe_max // 20):  # requests of 20 tokens
        a.begin(0)
        drafted += sum(1 for _ in range(20) if a.choose(0))
    assert drafted >= a.probe_burst, drafted


def test_auto_policy_catch_up_cost_and_outliers():
    """A stretch at k = 0 defers one MTP row a step, computed by the next probe's first draft: that draft times C,
    which k = 0 pays per step (on the 12M model 5% of a plain step). A timing over 1.5x the current value counts as
    1.5x (a stalled step on a busy machine)."""
    a = timed(_core.AdaptiveDraftLength(1, 3, verify_base_ms=1.0, verify_row_ms=0.2, draft_ms=0.3, plain_ms=1.0), 1.0)
    a.observe_draft(1, 0.3, seqs=1, caught_up=2)  # D timed
    a.observe_draft(1, 8.3, seqs=1, caught_up=40)  # 40 rows caught up by a one-forward draft
    assert abs(a.costs["catch_up_row_ms"] - 8.0 / 40) < 1e-9 and a.costs["draft_ms"] == 0.3
    a.observe_step(2, 1, 100.0)  # the probe's step is not timed as V
    assert abs(a.costs["verify_base_ms"] - 1.0) < 1e-9
    a.observe_step(1, 1, 100.0)  # a stall: counts as 1.5 ms
    assert abs(a.costs["plain_ms"] - (1.0 + 0.5 / 4)) < 1e-9  # its 4th timing: weight 1/4


def test_auto_state_save_holds_the_deferred_catch_up(q8, prompts):
    """An auto sequence's MTP rows wait for its next draft; a saved state (save_state, slot files, the prompt
    cache) computes them first, so it loads into another context (it failed: "the state's MTP memory holds 44
    positions, the target 48") and generation from it stays lossless."""
    c = new_context(q8, 1024, spec_type="draft-mtp", n_max=3, n_max_auto=True)
    a = run_seqs(c, q8, {0: (prompts[0], greedy_params(24))})[0]
    st = c.seq_state_get(0)
    longer = prompts[0] + a["tokens"]
    for n_max_auto in (True, False):
        d = new_context(q8, 1024, spec_type="draft-mtp", n_max=3, n_max_auto=n_max_auto)
        d.seq_state_set(0, st)
        r = run_seqs(d, q8, {0: (longer, greedy_params(16))})[0]
        assert r["stats"]["n_cached"] == len(longer) - 1
        assert r["tokens"] == generate(q8, longer, greedy_params(16))["tokens"]


def test_deferred_rows_are_bounded(q8, prompts):
    """A sequence that does not draft (auto at k = 0 between its ever rarer probes) defers its MTP rows; at
    MtpDrafter::kMaxBacklog rows they are computed, so it never holds more hidden states than that (1500 tokens:
    the last probes are ~500 steps apart)."""
    c = new_context(q8, 4096, spec_type="draft-mtp", n_max=3, n_max_auto=True, synth_rates=[0.0, 0.0, 0.0])
    run_seqs(c, q8, {0: (prompts[0], greedy_params(1500))})
    before = c.global_stats()["n_mtp_rows"]
    c.seq_state_get(0)  # computes what is still deferred
    assert 0 < c.global_stats()["n_mtp_rows"] - before <= 256


def test_auto_needs_a_cap(q8):
    with pytest.raises(ValueError, match="--spec-draft-n-max auto needs a cap >= 1"):
        _core.check_spec_params("draft-mtp", 0, n_max_auto=True)


def test_auto_deferred_catch_up_with_prefix_reuse(q8, prompts):
    """auto sequences defer their MTP catch-up to their next draft: reusing a cached prefix, cutting it, switching
    the same sequence to a fixed n_max (whose catch-up runs at once, after the backlog) all stay lossless."""
    c = new_context(q8, 1024, spec_type="draft-mtp", n_max=3, n_max_auto=True)
    a = run_seqs(c, q8, {0: (prompts[0], greedy_params(24))})[0]
    assert a["tokens"] == plain(q8, 0, prompts[0], greedy_params(24))
    longer = prompts[0] + a["tokens"]
    for prm in (greedy_params(16), dict(greedy_params(16), **{"speculative.n_max": 2}), greedy_params(16)):
        r = run_seqs(c, q8, {0: (longer, prm)})[0]
        assert r["stats"]["n_cached"] == len(longer) - 1
        assert r["tokens"] == generate(q8, longer, greedy_params(16))["tokens"]
        longer = longer + r["tokens"]
    short = prompts[0][:3] + prompts[1]  # a cut inside what the sequence holds
    r = run_seqs(c, q8, {0: (short, greedy_params(16))})[0]
    assert r["tokens"] == generate(q8, short, greedy_params(16))["tokens"]
    # every MTP row is still computed at most once: no more rows than positions the target kept plus drafted
    g = c.global_stats()
    assert g["n_mtp_rows"] <= g["n_prompt_tokens"] + g["n_gen_tokens"] + g["n_draft"]
