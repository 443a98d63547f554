"""csrc/speculative: the MTP drafter computes every MTP row once (the first drafting row is the first catch-up row;
rejected rows are never caught up), eval keeps the MTP memory in step, and the speculative settings have one
validation (_core.check_spec_params, also run by Context)."""
import math

import pytest

from helpers_core import generate, get_model, greedy_params, new_context, run_seqs

from pyllm import _core

PROMPTS = ["def retry_with_backoff(", "The capital of France is"]


@pytest.fixture(scope="module")
def trained():
    return get_model("qwen35-Q8_0", load_mtp=True)


def spec_run(m, ids, params, n_max, **kw):
    c = new_context(m, 512, spec_type="draft-mtp", n_max=n_max, **kw)
    r = run_seqs(c, m, {0: (ids, params)})[0]
    return r, c.global_stats()


@pytest.mark.parametrize("n_max", [1, 3, 5])
@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
def test_mtp_rows_computed_once(trained, n_max, sampled):
    """MTP rows evaluated = prompt rows + one per drafted token + one per kept verification row not already held.
    Per drafted step the catch-up covers the accepted drafts only: the row of `last` was computed by the first
    drafting depth (same token, position and target h) and is kept; recomputing it, or catching up rejected rows,
    would add n_verif_steps or more rows. The output is plain decoding's. The kept rows wait for the next draft's
    first forward (MtpDrafter::Run::defer); the last step's are computed when the state is taken (seq_state_get)."""
    ids = trained.tokenize(PROMPTS[0], True, True)
    prm = ({"temperature": 0.8, "seed": 7, "n_predict": 48, "ignore_eos": True} if sampled else greedy_params(48))
    c = new_context(trained, 512, spec_type="draft-mtp", n_max=n_max)
    r = run_seqs(c, trained, {0: (ids, prm)})[0]
    assert r["tokens"] == generate(trained, ids, prm)["tokens"]
    before = c.global_stats()["n_mtp_rows"]
    c.seq_state_get(0)
    g = c.global_stats()
    assert g["n_mtp_rows"] > before  # the last step's kept rows: computed now, not before
    st = r["stats"]
    assert st["n_draft"] > 0 and st["n_verif_steps"] > 0
    gen_steps = g["n_decode_calls"] - 1  # the prompt is one ubatch
    undrafted = gen_steps - st["n_verif_steps"]  # steps with no room to draft (n_predict): only `last` is caught up
    assert g["n_mtp_rows"] == len(ids) + st["n_draft"] + st["n_draft_accepted"] + undrafted, (g, st)


def test_three_sequences_rows_bounded(trained):
    """Several sequences drafting together: never more MTP rows than the one-sequence rule allows for each."""
    jobs = {i: (trained.tokenize(p, True, True), greedy_params(n)) for i, (p, n) in enumerate(zip(PROMPTS * 2, [24, 16, 8]))}
    c = new_context(trained, 3 * 512, n_seq=3, spec_type="draft-mtp", n_max=3)
    res = run_seqs(c, trained, jobs)
    for i in jobs:
        c.seq_state_get(i)  # computes each sequence's last kept rows (deferred to a next draft)
    g = c.global_stats()
    n_prompt = sum(len(ids) for ids, _ in jobs.values())
    n_gen = sum(prm["n_predict"] for _, prm in jobs.values())
    # per sequence and step: n_draft drafting rows, at most accepted + 1 catch-up rows; steps <= tokens generated
    assert g["n_mtp_rows"] <= n_prompt + g["n_draft"] + g["n_draft_accepted"] + n_gen
    assert g["n_mtp_rows"] >= n_prompt + g["n_draft"] + g["n_draft_accepted"]
    for i, (ids, prm) in jobs.items():
        assert res[i]["tokens"] == generate(trained, ids, prm)["tokens"], f"seq {i}"


def test_eval_keeps_mtp_memory_in_step(trained):
    """eval on a speculative context also fills the MTP memory and pending hidden state, so a generation reusing
    the evaluated prefix drafts exactly as a fresh one."""
    ids = trained.tokenize(PROMPTS[1], True, True)
    c = new_context(trained, 512, spec_type="draft-mtp", n_max=3)
    c.eval(0, ids[:-1], False)
    r = run_seqs(c, trained, {0: (ids, greedy_params(24))})[0]
    assert r["stats"]["n_cached"] == len(ids) - 1
    fresh, _ = spec_run(trained, ids, greedy_params(24), 3)
    assert r["tokens"] == fresh["tokens"]
    assert (r["stats"]["n_draft"], r["stats"]["n_draft_accepted"]) == \
        (fresh["stats"]["n_draft"], fresh["stats"]["n_draft_accepted"])


BAD = [
    ({"spec_type": "draft-eagle3"}, "speculative type 'draft-eagle3' is not supported by pyllm"),
    ({"n_max": -1}, "--spec-draft-n-max must be >= 0, got -1"),
    ({"n_min": -2}, "--spec-draft-n-min must be >= 0, got -2"),
    ({"p_min": 1.5}, r"--spec-draft-p-min must be within \[0, 1\]"),
    ({"p_min": float("nan")}, r"--spec-draft-p-min must be within \[0, 1\]"),
    ({"synth_len": 2.0, "synth_rates": [0.5, 0.2, 0.1]}, "synthetic acceptance length and rates are mutually exclusive"),
    ({"spec_type": "none", "synth_len": 2.0}, "synthetic acceptance requires at least one speculative token"),
    ({"n_max": 0, "synth_rates": [0.5]}, "synthetic acceptance requires at least one speculative token"),
    ({"synth_rates": [0.5, 0.2]}, "synthetic acceptance rates must contain 3 values, got 2"),
    ({"synth_rates": [1.5, 0.2, 0.1]}, r"synthetic acceptance rates must be finite and within \[0, 1\]"),
    ({"synth_rates": [0.5, float("inf"), 0.1]}, r"synthetic acceptance rates must be finite and within \[0, 1\]"),
    ({"synth_rates": [0.5, 0.6, 0.1]}, "synthetic acceptance rates must be monotonically non-increasing"),
    ({"synth_len": 0.5}, r"synthetic acceptance length must be finite and within \[1, 4\]"),
    ({"synth_len": 4.5}, r"synthetic acceptance length must be finite and within \[1, 4\]"),
    ({"synth_len": -0.5}, r"synthetic acceptance length must be finite and within \[1, 4\]"),  # only -1 means unset
    ({"synth_len": float("nan")}, r"synthetic acceptance length must be finite and within \[1, 4\]"),
]


@pytest.mark.parametrize("kw,msg", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_spec_params(trained, kw, msg):
    args = dict({"spec_type": "draft-mtp", "n_max": 3}, **kw)
    with pytest.raises(ValueError, match=msg):
        _core.check_spec_params(**args)
    with pytest.raises(ValueError, match=msg):  # the Context runs the same check
        new_context(trained, 128, **args)


def test_synth_probs():
    assert _core.check_spec_params("draft-mtp", 3) == []
    assert _core.check_spec_params("none", 3) == []
    assert _core.check_spec_params("draft-mtp", 3, synth_rates=[0.9, 0.45, 0.09]) == pytest.approx([0.9, 0.5, 0.2])
    assert _core.check_spec_params("draft-mtp", 3, synth_rates=[0.5, 0.0, 0.0]) == [0.5, 0.0, 0.0]
    assert _core.check_spec_params("draft-mtp", 3, synth_len=4.0) == [1.0, 1.0, 1.0]
    assert _core.check_spec_params("draft-mtp", 3, synth_len=1.0) == [0.0, 0.0, 0.0]
    # a length: geometric rates q, q^2, q^3 (constant conditional probability q) with mean length 1 + sum = L
    q = _core.check_spec_params("draft-mtp", 3, synth_len=2.5)
    assert q[0] == q[1] == q[2] and 1 + q[0] + q[0] ** 2 + q[0] ** 3 == pytest.approx(2.5, abs=1e-6)
    assert not any(math.isnan(x) for x in q)
