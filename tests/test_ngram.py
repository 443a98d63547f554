"""The ngram drafters (--spec-type ngram-simple / ngram-map-k / ngram-map-k4v / ngram-mod / ngram-cache) and their
combinations with draft-mtp: output identical to plain decoding (greedy and seeded sampling, one and several
sequences, the core and the server), drafts actually made on text that repeats its context, statistics per
drafter, the lookup-cache files (-lcs / -lcd) and the errors for bad settings."""
import re
import struct

import httpx
import pytest

from helpers_core import generate, get_model, greedy_params, new_context, run_seqs
from server_util import Server, concurrently

from pyllm import _core
from pyllm.bench.prompts import AGENT_SNIPPET, TASKS, edit_prompt
from conftest import SHARED_MODELS

NGRAM = ["ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"]
TYPES = NGRAM + ["draft-mtp,ngram-mod", "ngram-simple,ngram-map-k4v,ngram-cache,draft-mtp"]
SAMPLED = {"temperature": 0.8, "seed": 1234, "ignore_eos": True}
TINY = str(SHARED_MODELS / "qwen35-tiny-mtp-Q8_0.gguf")

# the bench's agent snippet without its imports (text whose continuation repeats its context)
CODE = AGENT_SNIPPET[AGENT_SNIPPET.index("def load_orders"):]
# text whose continuation (by the tiny trained model) repeats its own context
REPEAT = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n" * 6


def small():
    """Short n-grams so that the tiny model's few hundred tokens give drafts for every type."""
    g = _core.SpecNgramParams()
    for m in (g.simple, g.map_k, g.map_k4v):
        m.size_n, m.size_m = 3, 10
    g.mod_n_match, g.mod_n_min, g.mod_n_max = 4, 2, 16
    return g


@pytest.fixture(scope="module")
def trained():
    return get_model("qwen35-Q8_0", load_mtp=True)


@pytest.fixture(scope="module")
def ids(trained):
    return trained.tokenize(REPEAT, True, True)


_plain = {}


def plain(m, ids, params, key):
    if key not in _plain:
        _plain[key] = generate(m, ids, params, n_ctx=1024)["tokens"]
    return _plain[key]


@pytest.mark.parametrize("spec", TYPES)
@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "seeded"])
def test_lossless_one_sequence(trained, ids, spec, sampled):
    params = dict(SAMPLED, n_predict=48) if sampled else greedy_params(48)
    want = plain(trained, ids, params, ("one", sampled))
    c = new_context(trained, 1024, spec_type=spec, n_max=3, ngram=small())
    r = run_seqs(c, trained, {0: (ids, params)})[0]
    assert r["tokens"] == want, spec
    st = r["stats"]
    assert [d["type"] for d in st["drafters"]] == list(c.drafters)
    assert sum(d["n_draft"] for d in st["drafters"]) == st["n_draft"]
    assert sum(d["n_draft_accepted"] for d in st["drafters"]) == st["n_draft_accepted"]
    assert sum(d["n_drafts"] for d in st["drafters"]) == st["n_verif_steps"]
    assert len(st["n_accepted_per_pos"]) == c.n_draft_max and sum(st["n_accepted_per_pos"]) == st["n_draft_accepted"]
    if not sampled:  # greedy on a text that repeats itself: the drafts are made and accepted
        assert st["n_draft"] > 0 and st["n_draft_accepted"] > 0, st


@pytest.mark.parametrize("spec", TYPES)
@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "seeded"])
def test_lossless_several_sequences(trained, ids, spec, sampled):
    """Three sequences stepped together (ngram-mod's table is shared by them) give each its plain output."""
    prompts = [ids, ids[5:], trained.tokenize(CODE * 2, True, True)]
    jobs = {}
    for i, p in enumerate(prompts):
        params = dict(SAMPLED, seed=1234 + i, n_predict=32) if sampled else greedy_params(32)
        jobs[i] = (p, params)
    c = new_context(trained, 3 * 1024, n_seq=3, n_batch=64, n_ubatch=32, spec_type=spec, n_max=3, ngram=small())
    res = run_seqs(c, trained, jobs)
    for i, (p, params) in jobs.items():
        assert res[i]["tokens"] == plain(trained, p, params, ("many", i, sampled)), (spec, i)
    assert sum(res[i]["stats"]["n_draft"] for i in res) > 0


def test_defaults_and_mtp_combination(trained, ids):
    """llama.cpp's default settings (n-gram 12 / m-gram 48, ngram-mod 24/48/64): long drafts, lossless; the MTP
    layer drafts only the steps the ngram drafters leave without a draft."""
    long_ids = trained.tokenize(REPEAT * 2, True, True)
    want = generate(trained, long_ids, greedy_params(64), n_ctx=2048)["tokens"]
    for spec in NGRAM + ["draft-mtp,ngram-mod"]:
        c = new_context(trained, 2048, spec_type=spec, n_max=3)
        assert c.n_draft_max == {"ngram-cache": 8, "ngram-mod": 64, "draft-mtp,ngram-mod": 64}.get(spec, 48)
        r = run_seqs(c, trained, {0: (long_ids, greedy_params(64))})[0]
        assert r["tokens"] == want, spec
    st = r["stats"]
    mod, mtp = st["drafters"]
    assert (mod["type"], mtp["type"]) == ("ngram-mod", "draft-mtp")  # llama.cpp's priority: ngram first
    assert mtp["n_drafts"] > 0 and all(d["n_draft"] <= 3 * d["n_drafts"] for d in [mtp])
    lines = c.drafter_lines(0)
    assert len(lines) == 2 and re.match(r"statistics +ngram-mod: #gen drafts = +\d+, #acc drafts = +\d+, "
                                        r"#gen tokens = +\d+, #acc tokens = +\d+, #mean acc len = \d+\.\d\d$", lines[0])


def test_mtp_alone_unchanged(trained, ids):
    """draft-mtp through the drafter chain: the same drafts and statistics shape as before (per position n_max)."""
    c = new_context(trained, 1024, spec_type="draft-mtp", n_max=3)
    assert c.drafters == ["draft-mtp"] and c.n_draft_max == 3
    r = run_seqs(c, trained, {0: (ids, greedy_params(32))})[0]
    assert r["tokens"] == plain(trained, ids, greedy_params(32), ("mtp", 32))
    assert len(r["stats"]["n_accepted_per_pos"]) == 3
    c0 = new_context(trained, 1024, spec_type="draft-mtp,ngram-mod", n_max=0)  # MTP off, ngram-mod on
    assert c0.drafters == ["ngram-mod"]


def test_cached_prefix_and_new_history(trained, ids):
    """A second request on a sequence (a shared prefix, then a different one) keeps the drafters consistent."""
    c = new_context(trained, 1024, spec_type="ngram-map-k4v,ngram-cache,ngram-mod,draft-mtp", n_max=3, ngram=small())
    other = trained.tokenize(CODE.replace("orders", "items") * 3, True, True)
    for p in (ids, ids[:-10] + other[:30], other, ids):
        r = run_seqs(c, trained, {0: (p, greedy_params(24))})[0]
        assert r["tokens"] == generate(trained, p, greedy_params(24), n_ctx=1024)["tokens"]


# ------------------------------------------------------------------------------------------------ ngram-cache files

def write_cache(path, entries):
    """llama.cpp's lookup-cache format: [4 x int32 n-gram (-1 padded)][int32 n][n x (token, count)]."""
    with open(path, "wb") as f:
        for gram, followers in entries:
            f.write(struct.pack("<4i", *(list(gram) + [-1] * (4 - len(gram)))))
            f.write(struct.pack("<i", len(followers)))
            for tok, cnt in followers:
                f.write(struct.pack("<2i", tok, cnt))


def test_lookup_cache_static(trained, ids, tmp_path):
    # a static cache of the text's own 2-grams: the drafts follow it
    counts = {}
    for a, b, t in zip(ids, ids[1:], ids[2:]):
        counts.setdefault((a, b), {}).setdefault(t, 0)
        counts[(a, b)][t] += 1
    path = tmp_path / "static.bin"
    write_cache(path, [(g, list(f.items())) for g, f in counts.items()])
    g = _core.SpecNgramParams()
    g.lookup_cache_static = g.lookup_cache_dynamic = str(path)
    c = new_context(trained, 1024, spec_type="ngram-cache", ngram=g)
    r = run_seqs(c, trained, {0: (ids[:40], greedy_params(40))})[0]
    assert r["tokens"] == generate(trained, ids[:40], greedy_params(40), n_ctx=1024)["tokens"]
    assert r["stats"]["n_draft"] > 0


@pytest.mark.parametrize("content,msg", [
    (None, "failed to open lookup cache"),
    (struct.pack("<4i", 1, 2, -1, -1), "truncated record"),
    (struct.pack("<4ii", 1, 2, -1, -1, 0), "a record with 0 tokens"),
    (struct.pack("<4ii2i", 1, 2, -1, -1, 1, 10**8, 1), "outside the model's vocabulary"),
    (struct.pack("<4ii2i", 1, 2, -1, -1, 1, 5, 0), "a count of 0"),
])
def test_lookup_cache_errors(trained, tmp_path, content, msg):
    path = tmp_path / "c.bin"
    if content is not None:
        path.write_bytes(content)
    g = _core.SpecNgramParams()
    g.lookup_cache_static = str(path)
    with pytest.raises(ValueError, match=f"--lookup-cache-static: .*{msg}"):
        new_context(trained, 256, spec_type="ngram-cache", ngram=g)


@pytest.mark.parametrize("field,value,msg", [
    ("mod_n_match", 0, "--spec-ngram-mod-n-match: ngram size N must be between 1 and 1024"),
    ("mod_n_max", 2000, "--spec-ngram-mod-n-max: ngram n-max must be between 0 and 1024"),
    ("mod_n_min", -1, "--spec-ngram-mod-n-min: ngram n-min must be between 0 and 1024"),
])
def test_bad_settings(trained, field, value, msg):
    g = _core.SpecNgramParams()
    setattr(g, field, value)
    with pytest.raises(ValueError, match=msg):
        new_context(trained, 256, spec_type="ngram-mod", ngram=g)
    m = _core.SpecNgramParams()
    m.map_k4v.min_hits = 0
    with pytest.raises(ValueError, match="--spec-ngram-map-k4v-min-hits: ngram min hits must be at least 1"):
        _core.check_spec_params("ngram-map-k4v", ngram=m)


# ------------------------------------------------------------------------------------------------ flags

def test_flags():
    from pyllm.args import ArgError, check_supported, parse_args
    p = parse_args(["--spec-type", "draft-mtp,ngram-mod", "--spec-ngram-mod-n-match", "20",
                    "--spec-ngram-map-k4v-size-n", "6", "--spec-ngram-simple-size-m", "9"], "server")
    check_supported(p)
    assert p.spec_type == "draft-mtp,ngram-mod" and p.speculative
    ng = p.spec_ngram()
    assert ng["mod_n_match"] == 20 and ng["map_k4v"]["size_n"] == 6 and ng["simple"]["size_m"] == 9
    d = parse_args(["--spec-default"], "server")
    assert d.spec_type == "ngram-mod" and (d.spec_ngram_mod_n_match, d.spec_ngram_mod_n_min,
                                           d.spec_ngram_mod_n_max) == (24, 48, 64)
    assert parse_args(["--spec-type", "draft-mtp,ngram-simple", "--spec-draft-n-max", "0"], "server").speculative
    assert not parse_args(["--spec-type", "draft-mtp", "--spec-draft-n-max", "0"], "server").speculative
    with pytest.raises(ArgError, match="--spec-ngram-mod-n-max: ngram n-max must be between 0 and 1024"):
        parse_args(["--spec-type", "ngram-mod", "--spec-ngram-mod-n-max", "5000"], "server")
    with pytest.raises(ArgError, match="--lookup-cache-static: failed to open lookup cache"):
        check_supported(parse_args(["--spec-type", "ngram-cache", "-lcs", "/nonexistent/x.bin"], "server"))
    with pytest.raises(ArgError, match="not supported by pyllm"):
        check_supported(parse_args(["--spec-type", "ngram-mod,draft-eagle3"], "server"))


def test_flags_without_effect_warn(capsys):
    from pyllm.args import parse_args
    parse_args(["--spec-ngram-simple-min-hits", "3", "-lcs", "x.bin"], "server")
    err = capsys.readouterr().err
    assert "--spec-ngram-simple-min-hits has no effect" in err and "--lookup-cache-static is only used by" in err


# ------------------------------------------------------------------------------------------------ bench

def test_bench_edit_task(tmp_path, capsys):
    from pyllm.cli.bench import main
    assert "```" in TASKS["edit"] and "docstring" in TASKS["edit"]
    f = tmp_path / "mod.py"
    f.write_text(CODE)
    out = tmp_path / "r.json"
    rc = main(["-m", TINY, "--spec-type", "draft-mtp,ngram-mod", "--spec-ngram-mod-n-match", "4",
               "--spec-ngram-mod-n-min", "2", "--spec-draft-n-max", "3", "-n", "24", "-r", "1", "--no-chat",
               "--edit-file", str(f), "--json", str(out), "--no-progress", "-t", "1"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "edit-mod" in text and "ngram-mod " in text and "draft-mtp " in text
    import json
    data = json.loads(out.read_text())
    sets = [s for s in data["settings"] if s["n_max"] == 3]
    assert sets and sets[0]["same_as_baseline"] is True and set(sets[0]["drafters"]) == {"ngram-mod", "draft-mtp"}
    assert edit_prompt("x", "a.py").startswith("Edit the file `a.py`")


def test_bench_spec_flags_forward_ngram():
    from pyllm.bench.runners import ngram_argv, spec_flags
    argv = ["-m", "x", "--spec-ngram-mod-n-match", "20", "-lcs", "s.bin", "--spec-default", "-n", "5"]
    assert spec_flags("ngram-mod", 3, ngram=ngram_argv(argv)) == [
        "--spec-type", "ngram-mod", "--spec-draft-n-max", "3", "--spec-ngram-mod-n-match", "20", "-lcs", "s.bin",
        "--spec-default"]


# ------------------------------------------------------------------------------------------------ server

@pytest.fixture(scope="module")
def servers():
    base = Server("-m", TINY, "-c", "4096", "-np", "2", "--metrics", "--no-jinja")
    spec = Server("-m", TINY, "-c", "4096", "-np", "2", "--metrics", "--no-jinja", "--spec-type", "draft-mtp,ngram-mod",
                  "--spec-ngram-mod-n-match", "4", "--spec-ngram-mod-n-min", "2", "--spec-ngram-mod-n-max", "16")
    yield base, spec
    base.stop()
    spec.stop()


def _complete(s, prompt, **kw):
    r = s.post("/completion", {"prompt": prompt, "n_predict": 32, "cache_prompt": False, **kw})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("sampling", [{"temperature": 0.0}, {"temperature": 0.8, "seed": 77}], ids=["greedy", "seeded"])
def test_server_concurrent_lossless(servers, sampling):
    base, spec = servers
    prompts = [REPEAT, CODE * 2 + "def load_orders"]
    want = [_complete(base, p, **sampling)["content"] for p in prompts]
    got = concurrently(lambda p: _complete(spec, p, **sampling), prompts)
    assert [g["content"] for g in got] == want
    t = got[0]["timings"]
    assert t["draft_n"] == sum(d["draft_n"] for d in t["drafters"].values())
    assert set(t["drafters"]) == {"ngram-mod", "draft-mtp"}


def test_server_metrics_and_log(servers):
    _, spec = servers
    _complete(spec, REPEAT)
    m = httpx.get(spec.url + "/metrics").text
    assert re.search(r'llamacpp:spec_decode_num_draft_tokens_per_type_total\{type="ngram-mod"\} \d+', m)
    assert re.search(r'llamacpp:spec_decode_num_accepted_tokens_per_type_total\{type="draft-mtp"\} \d+', m)
    log = spec.output()
    assert "draft acceptance = " in log and re.search(r"statistics +ngram-mod: #gen drafts", log)


# ------------------------------------------------------------------------------------------------ other entry points

@pytest.mark.parametrize("key", ["smollm2", "gemma3"])
def test_lossless_attention_only_models(key):
    """Models without recurrent layers (KV rollback only): the ngram drafters are lossless there too."""
    m = get_model(key)
    ids = m.tokenize(REPEAT, True, True)
    want = generate(m, ids, greedy_params(32), n_ctx=1024)["tokens"]
    c = new_context(m, 1024, spec_type="ngram-simple,ngram-mod,ngram-cache", ngram=small())
    r = run_seqs(c, m, {0: (ids, greedy_params(32))})[0]
    assert r["tokens"] == want


def test_llama_api():
    from pyllm import Llama
    plain_out = Llama(model_path=TINY, n_ctx=1024, verbose=False)(REPEAT, max_tokens=24, temperature=0.0)
    llm = Llama(model_path=TINY, n_ctx=1024, verbose=False, spec_type="draft-mtp,ngram-mod",
                spec_ngram={"mod_n_match": 4, "mod_n_min": 2, "simple": {"size_n": 3}})
    out = llm(REPEAT, max_tokens=24, temperature=0.0)
    assert out["choices"][0]["text"] == plain_out["choices"][0]["text"]
    with pytest.raises(ValueError, match="unknown ngram setting"):
        Llama(model_path=TINY, verbose=False, spec_type="ngram-mod", spec_ngram={"bogus": 1})


# ------------------------------------------------------------------------------------------------ long drafts

@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "seeded"])
def test_drafts_longer_than_the_planes_replay(trained, sampled):
    """With fewer recurrent planes than a draft has rows, a partly accepted long draft is rolled back through the
    checkpoint and a replay of the kept rows: still the plain output, on one and on several sequences."""
    prompts = [trained.tokenize(REPEAT * 2, True, True), trained.tokenize(CODE * 3, True, True)]
    jobs = {i: (p, dict(SAMPLED, seed=5 + i, n_predict=64) if sampled else greedy_params(64))
            for i, p in enumerate(prompts)}
    replayed = 0
    for spec in ("ngram-simple", "ngram-mod", "draft-mtp,ngram-mod", "ngram-map-k4v,ngram-cache"):
        c = new_context(trained, 2 * 2048, n_seq=2, spec_type=spec, n_max=3, ngram=small(), max_planes=3)
        assert c.n_planes == (4 if "draft-mtp" in spec else 3)  # never fewer than MTP's n_max + 1
        res = run_seqs(c, trained, jobs)
        for i, (p, params) in jobs.items():
            assert res[i]["tokens"] == plain(trained, p, params, ("long", i, sampled)), (spec, i)
        replayed += c.global_stats()["n_replay_rows"]
    assert replayed > 0


def test_planes_auto(trained):
    """The tiny model's recurrent state is small: every row of ngram-mod's 64-token drafts gets a plane; MTP alone
    keeps n_max + 1 planes."""
    assert new_context(trained, 512, spec_type="ngram-mod").n_planes == 65
    assert new_context(trained, 512, spec_type="draft-mtp", n_max=3).n_planes == 4
    assert new_context(trained, 512, spec_type="draft-mtp", n_max=3, max_planes=2).n_planes == 4
    assert new_context(trained, 512).n_planes == 1


# ------------------------------------------------------------------------------------------------ drafter semantics
# One drafter on hand-made histories, the drafts llama.cpp's code gives for them (common/ngram-map.cpp,
# ngram-mod.cpp, ngram-cache.cpp, speculative.cpp).

def params(**kw):
    g = _core.SpecNgramParams()
    for k, v in kw.items():
        if k in ("simple", "map_k", "map_k4v"):
            sub = getattr(g, k)
            sub.size_n, sub.size_m, sub.min_hits = v
            setattr(g, k, sub)
        else:
            setattr(g, k, v)
    return g


def test_ngram_simple_semantics():
    d = _core.NgramDrafter("ngram-simple", params(simple=(2, 3, 1)))
    assert d.n_max == 3
    assert d.draft(0, [7, 1, 2, 3, 4, 5, 6, 8, 8, 1], 2) == [3, 4, 5]          # key [1, 2] found at 1
    assert d.draft(0, [7, 1, 2, 3, 4, 1, 2, 9, 9, 9, 8, 1], 2) == [9, 9, 9]    # the most recent occurrence
    assert d.draft(0, [5, 5, 5, 5, 5, 5, 5, 1, 2, 6, 1], 2) == [6, 1]          # what follows, up to the end
    assert d.draft(0, [5, 5, 5, 5, 5, 5, 5, 5, 1, 2, 1], 2) == []              # shorter than the key: none
    assert d.draft(0, [1, 2, 3, 1, 2, 3], 1) == []                             # history too short (<= n+m+1)
    assert d.draft(0, [7, 1, 2, 3, 4, 5, 6, 8, 8, 1], 9) == []                 # no match


def test_ngram_map_semantics():
    h = [7, 1, 2, 3, 4, 9, 9, 9, 1]      # (position 0 is never a match, as upstream)
    k = _core.NgramDrafter("ngram-map-k", params(map_k=(2, 2, 1)))
    k.begin(0, h)
    assert k.draft(0, h, 2) == [3, 4]
    k.accept(0, 1)                        # one token accepted: that key drafts one token next time
    assert k.draft(0, h, 2) == [3]
    k.accept(0, 0)                        # rejected outright: the key drafts nothing more (upstream's rule)
    assert k.draft(0, h, 2) == []
    k.begin(0, h, 0)                      # a new history (n_same 0): the statistics of the old one are dropped
    assert k.draft(0, h, 2) == [3, 4]
    k.accept(0, 0)
    k.begin(0, h, len(h))                 # the same history continued: they are kept
    assert k.draft(0, h, 2) == []
    v = _core.NgramDrafter("ngram-map-k4v", params(map_k4v=(2, 2, 2)))
    v.begin(0, h)
    assert v.draft(0, h, 2) == []         # the key was hit once: min_hits 2
    assert v.draft(0, h, 2) == [3, 4]
    # two different m-grams after the key, neither twice as frequent as the other: no draft
    h2 = [7, 1, 2, 3, 4, 1, 2, 5, 6, 7, 7, 7, 1]
    w = _core.NgramDrafter("ngram-map-k4v", params(map_k4v=(2, 2, 1)))
    w.begin(0, h2)
    assert w.draft(0, h2, 2) == []


def test_ngram_mod_semantics():
    d = _core.NgramDrafter("ngram-mod", params(mod_n_match=2, mod_n_min=2, mod_n_max=4))
    prompt = [1, 2, 3, 4, 1, 2, 3]
    d.begin(0, prompt)
    assert d.draft(0, prompt, 4) == [1, 2, 3, 4]    # (3,4)->1, (4,1)->2, (1,2)->3, (2,3)->4: n_max
    d2 = _core.NgramDrafter("ngram-mod", params(mod_n_match=2, mod_n_min=3, mod_n_max=8))
    d2.begin(0, [5, 6, 7, 8])
    assert d2.draft(0, [9, 5], 6) == []              # 7, 8, then nothing: shorter than n_min 3
    d3 = _core.NgramDrafter("ngram-mod", params(mod_n_match=2, mod_n_min=2, mod_n_max=8))
    d3.begin(0, [5, 6, 7, 8])
    assert d3.draft(0, [9, 5], 6) == [7, 8]
    # the table is shared by the sequences: seq 1 drafts from seq 0's prompt
    d4 = _core.NgramDrafter("ngram-mod", params(mod_n_match=2, mod_n_min=1, mod_n_max=2), n_seq=2)
    d4.begin(0, [5, 6, 7, 8])
    assert d4.draft(1, [9, 5], 6) == [7, 8]


def test_ngram_cache_semantics():
    d = _core.NgramDrafter("ngram-cache")
    assert d.n_max == 8
    # the longest n-gram with a dominant follower, extended by its own drafts, 8 tokens at most
    assert d.draft(0, [1, 2, 3, 1, 2, 3, 1, 2], 3) == [1, 2, 3, 1, 2, 3, 1, 2]
    assert _core.NgramDrafter("ngram-cache").draft(0, [4, 5], 6) == []  # nothing seen: no draft
    with pytest.raises(IndexError):
        d.draft(1, [4, 5], 6)
