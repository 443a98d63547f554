"""--spec-type draft-simple with a same-vocabulary draft model (-md): the trained model's Q4_K_M file drafting for its
F16 file. Output identical to plain decoding (greedy and seeded, one and several sequences, core and server), drafts
accepted, the vocabulary check's clear error, the flags."""

import pytest

from helpers_core import generate, get_model, greedy_params, new_context, run_seqs
from server_util import Server, concurrently

from conftest import SHARED_MODELS

F16 = str(SHARED_MODELS / "qwen35-tiny-mtp-F16.gguf")
Q4 = str(SHARED_MODELS / "qwen35-tiny-mtp-Q4_K_M.gguf")
SAMPLED = {"temperature": 0.8, "seed": 99, "ignore_eos": True}
PROMPTS = ["def fibonacci(n):\n", "The capital of France is", "import numpy as np\n\nclass Matrix:\n"]


@pytest.fixture(scope="module")
def target():
    return get_model("qwen35-F16")


@pytest.fixture(scope="module")
def draft():
    return get_model("qwen35-Q4_K_M")


@pytest.mark.parametrize("spec", ["draft-simple", "draft-simple,ngram-mod"])
@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "seeded"])
def test_lossless(target, draft, spec, sampled):
    ids = target.tokenize(PROMPTS[0], True, True)
    params = dict(SAMPLED, n_predict=40) if sampled else greedy_params(40)
    want = generate(target, ids, params, n_ctx=512)["tokens"]
    for n_max in (1, 4):
        c = new_context(target, 512, spec_type=spec, n_max=n_max, draft_model=draft)
        r = run_seqs(c, target, {0: (ids, params)})[0]
        assert r["tokens"] == want, (spec, n_max)
        st = r["stats"]
        d = {x["type"]: x for x in st["drafters"]}["draft-simple"]
        assert d["n_draft"] > 0 and d["n_draft"] <= n_max * d["n_drafts"]
        if not sampled:
            assert d["n_draft_accepted"] > 0.5 * d["n_draft"], d  # Q4_K_M of the same weights agrees mostly


def test_several_sequences_and_reuse(target, draft):
    jobs = {i: (target.tokenize(p, True, True), dict(SAMPLED, seed=7 + i, n_predict=24) if i == 1 else greedy_params(24))
            for i, p in enumerate(PROMPTS)}
    c = new_context(target, 3 * 512, n_seq=3, spec_type="draft-simple", n_max=3, draft_model=draft)
    for _ in range(2):  # the second round reuses each sequence's memory (the draft model's too)
        res = run_seqs(c, target, jobs)
        for i, (ids, params) in jobs.items():
            assert res[i]["tokens"] == generate(target, ids, params, n_ctx=512)["tokens"], i
    # a shorter, different prompt on a sequence that held a longer history
    ids = target.tokenize("The capital of Italy is", True, True)
    r = run_seqs(c, target, {1: (ids, greedy_params(16))})[1]
    assert r["tokens"] == generate(target, ids, greedy_params(16), n_ctx=512)["tokens"]


def test_vocab_mismatch_and_settings(target):
    other = get_model("smollm2")
    with pytest.raises(ValueError, match="--spec-draft-model '.*': its vocabulary does not match the target's"):
        new_context(target, 256, spec_type="draft-simple", n_max=3, draft_model=other)
    with pytest.raises(ValueError, match="draft-simple needs a draft model"):
        new_context(target, 256, spec_type="draft-simple", n_max=3)
    with pytest.raises(ValueError, match="--spec-draft-model needs --spec-type draft-simple"):
        new_context(target, 256, spec_type="draft-mtp", n_max=3, draft_model=other)


def test_flags():
    from pyllm.args import ArgError, check_supported, parse_args
    p = parse_args(["--spec-type", "draft-simple", "-md", Q4, "-td", "2"], "server")
    check_supported(p)
    assert p.spec_draft_threads == 2 and p.speculative
    with pytest.raises(ArgError, match="--spec-draft-model needs --spec-type draft-simple"):
        check_supported(parse_args(["-md", Q4], "server"))
    with pytest.raises(ArgError, match="draft-simple needs a draft model"):
        check_supported(parse_args(["--spec-type", "draft-simple"], "server"))
    with pytest.raises(ArgError, match="--spec-draft-model: failed to open"):
        check_supported(parse_args(["--spec-type", "draft-simple", "-md", "/nonexistent.gguf"], "server"))


def test_server(tmp_path):
    prompts = PROMPTS[:2]
    with Server("-m", F16, "-c", "2048", "-np", "2", "--no-jinja") as base:
        want = [base.post("/completion", {"prompt": p, "n_predict": 24, "temperature": 0}).json()["content"]
                for p in prompts]
    with Server("-m", F16, "-c", "2048", "-np", "2", "--no-jinja", "--spec-type", "draft-simple", "-md", Q4,
                "--spec-draft-n-max", "4", "-td", "1") as s:
        got = concurrently(lambda p: s.post("/completion", {"prompt": p, "n_predict": 24, "temperature": 0}).json(),
                           prompts)
        assert [g["content"] for g in got] == want
        assert got[0]["timings"]["draft_n"] > 0 and "draft-simple" in got[0]["timings"]["drafters"]
