"""Per-request speculative settings over real HTTP (pyllm-server with draft-mtp on the shipped default model):
`speculative.n_max` / `n_min` / `p_min` / `type` on /completion, /v1/completions and /v1/chat/completions give the
output plain decoding gives, change the drafting they say (timings.draft_n), are refused with a 400 naming the field
when the server cannot honour them, and /slots and /props show what each request and the server really use."""
import openai
import pytest

from server_util import Server

GREEDY = {"temperature": 0.0, "seed": 42}
SEEDED = {"temperature": 0.8, "seed": 7}
PROMPT = "def fibonacci(n):"
CHAT = [{"role": "user", "content": "Write a haiku about the sea."}]


@pytest.fixture(scope="module")
def spec():
    s = Server("-c", "2048", "-np", "2", "--spec-type", "draft-mtp", "--spec-draft-n-max", "5")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def plain():
    s = Server("-c", "2048", "-np", "2")
    yield s
    s.stop()


def completion(srv, **kw):
    r = srv.post("/completion", {"prompt": PROMPT, "n_predict": 24, **kw})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("sampling", [GREEDY, SEEDED], ids=["greedy", "seeded"])
@pytest.mark.parametrize("fields", [{"speculative.n_max": 0}, {"speculative.n_max": 1}, {"speculative.n_max": 5},
                                    {"speculative.type": "none"}, {"speculative.type": "draft-mtp"},
                                    {"speculative.p_min": 0.9}, {"speculative.n_min": 3, "speculative.n_max": 4}],
                         ids=lambda f: ",".join(f"{k[12:]}={v}" for k, v in f.items()))
def test_completion_fields_equal_plain(spec, plain, sampling, fields):
    ref = completion(plain, **sampling)
    out = completion(spec, **sampling, **fields)
    assert out["content"] == ref["content"]
    t = out["timings"]
    off = fields.get("speculative.n_max") == 0 or fields.get("speculative.type") == "none"
    if off:
        assert t.get("draft_n", 0) == 0
    elif "speculative.p_min" not in fields:  # p_min 0.9 may stop every draft
        assert t["draft_n"] > 0
    n = fields.get("speculative.n_max")
    if n:  # never more than n drafts per verification step (24 tokens need at least 24 / (n + 1) steps)
        assert t.get("draft_n", 0) <= n * t["predicted_n"]
    gs = out["generation_settings"]
    assert gs["speculative.types"] == ("none" if off else "none,draft-mtp")
    assert gs["speculative.n_max"] == (0 if off else n if n is not None else 5)


def test_openai_routes(spec, plain):
    for srv_kind in ("chat", "completions"):
        outs = []
        for srv, extra in ((plain, {}), (spec, {"speculative.n_max": 2}), (spec, {"speculative.type": "none"})):
            c = openai.OpenAI(base_url=srv.url + "/v1", api_key="x")
            if srv_kind == "chat":
                r = c.chat.completions.create(model="m", messages=CHAT, max_tokens=20, temperature=0, seed=42,
                                              extra_body=extra)
                outs.append(r.choices[0].message.content)
            else:
                r = c.completions.create(model="m", prompt=PROMPT, max_tokens=20, temperature=0, seed=42,
                                         extra_body=extra)
                outs.append(r.choices[0].text)
        assert outs[0] == outs[1] == outs[2], srv_kind


def test_slots_and_props_show_real_settings(spec):
    p = spec.get("/props").json()
    dgs = p["default_generation_settings"]["params"]
    assert (dgs["speculative.types"], dgs["speculative.n_max"], dgs["speculative.n_min"], dgs["speculative.p_min"]) == \
        ("none,draft-mtp", 5, 0, 0.0)
    assert p["speculative"]["type"] == "draft-mtp" and p["speculative"]["n_max"] == 5
    completion(spec, id_slot=0, **GREEDY, **{"speculative.n_max": 0})
    completion(spec, id_slot=1, **GREEDY, **{"speculative.n_max": 2, "speculative.p_min": 0.25})
    slots = {s["id"]: s["params"] for s in spec.get("/slots").json()}
    assert (slots[0]["speculative.types"], slots[0]["speculative.n_max"]) == ("none", 0)
    assert (slots[1]["speculative.types"], slots[1]["speculative.n_max"], slots[1]["speculative.p_min"]) == \
        ("none,draft-mtp", 2, 0.25)


@pytest.mark.parametrize("fields,msg", [
    ({"speculative.n_max": 6}, "Value must be between 0 <= value <= 5 on this server"),
    ({"speculative.n_max": -1}, "Value must be between 0 <= value <= 2147483647"),
    ({"speculative.n_max": "3"}, "type must be number"),
    ({"speculative.p_min": 1.5}, "Value must be between 0.000000 <= value <= 1.000000"),
    ({"speculative.type": "ngram-simple"}, "'ngram-simple': it is not available on this server"),
    ({"speculative.type": 1}, "type must be string"),
    ({"speculative.ngram_size_n": 3}, "is not supported by pyllm"),
])
@pytest.mark.parametrize("route", ["/completion", "/v1/chat/completions"])
def test_bad_fields_400(spec, fields, msg, route):
    body = {"prompt": PROMPT} if route == "/completion" else {"messages": CHAT}
    r = spec.post(route, {**body, "n_predict": 4, **fields})
    assert r.status_code == 400, r.text
    m = r.json()["error"]["message"]
    assert next(iter(fields)) in m and msg in m, m


def test_plain_server_refuses_drafting(plain):
    r = plain.post("/completion", {"prompt": PROMPT, "n_predict": 4, "speculative.n_max": 2})
    assert r.status_code == 400 and "speculative decoding is off on this server" in r.json()["error"]["message"]
    for ok in ({"speculative.n_max": 0}, {"speculative.type": "none"}):
        assert plain.post("/completion", {"prompt": PROMPT, "n_predict": 4, **ok}).status_code == 200


def test_server_cheap_head_and_auto(plain):
    """pyllm-server --spec-draft-n-max auto --spec-draft-head-type q4_0 --spec-draft-vocab 4096: the output is plain
    decoding's, the head's memory is logged, /props says what runs, and a request may still fix its n_max."""
    with Server("-c", "2048", "-np", "2", "--spec-type", "draft-mtp", "--spec-draft-n-max", "auto:4",
                "--spec-draft-head-type", "q4_0", "--spec-draft-vocab", "4096") as s:
        sp = s.get("/props").json()["speculative"]
        assert (sp["n_max"], sp["n_max_auto"], sp["draft_head_type"], sp["draft_vocab"]) == (4, True, "q4_0", 4096)
        assert sp["draft_head"].startswith("draft head: q4_0 rows") and "MiB extra memory" in sp["draft_head"]
        for sampling in (GREEDY, SEEDED):
            ref = completion(plain, **sampling)
            out = completion(s, **sampling)
            assert out["content"] == ref["content"]
            assert out["generation_settings"]["speculative.n_max_auto"] is True
            fixed = completion(s, **sampling, **{"speculative.n_max": 2})
            assert fixed["content"] == ref["content"] and fixed["timings"]["draft_n"] > 0
            assert fixed["generation_settings"]["speculative.n_max_auto"] is False
        assert "draft head: q4_0 rows" in s.output()


def test_server_with_ngram_and_mtp():
    """--spec-type draft-mtp,ngram-simple: the core knows the longest draft (the ngram size m) and checks
    speculative.n_max itself; a request cannot pick one drafter; n_max 0 and type none turn drafting off."""
    with Server("-c", "2048", "-np", "1", "--spec-type", "draft-mtp,ngram-simple", "--spec-draft-n-max", "3",
                "--spec-ngram-simple-size-m", "8") as s:
        ref = completion(s, **GREEDY, **{"speculative.type": "none"})
        assert ref["timings"].get("draft_n", 0) == 0
        for f in ({"speculative.n_max": 6}, {"speculative.n_max": 0}, {}):
            assert completion(s, **GREEDY, **f)["content"] == ref["content"]
        r = s.post("/completion", {"prompt": PROMPT, "n_predict": 4, "speculative.n_max": 9})
        assert r.status_code == 400 and "speculative.n_max 9 exceeds the server's longest draft 8" in r.json()["error"]["message"]
        r = s.post("/completion", {"prompt": PROMPT, "n_predict": 4, "speculative.type": "ngram-simple"})
        assert r.status_code == 400 and "cannot pick one of the server's drafters" in r.json()["error"]["message"]
