"""pyllm-server over real HTTP (subprocess). Model-agnostic: expectations are derived from the server itself,
so the same tests run against the real core with PYLLM_TEST_MODEL=/path/model.gguf."""
import concurrent.futures as cf
import json
import random
import threading
import time

import httpx
import openai
import pytest

from server_util import Server, sse_events

GREEDY = {"temperature": 0.0, "seed": 42}


@pytest.fixture(scope="module")
def srv():
    s = Server("-c", "2048", "-np", "4", "--metrics", "--no-jinja")
    yield s
    s.stop()


def complete(srv, prompt="I believe the meaning of life is", n=16, **kw):
    r = srv.post("/completion", {"prompt": prompt, "n_predict": n, **GREEDY, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def stream_native(srv, body):
    with httpx.stream("POST", srv.url + "/completion", json={**body, "stream": True}, timeout=60) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        return sse_events(r)


def test_health_props_models_slots(srv):
    r = srv.get("/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    assert r.headers["server"] == "llama.cpp"
    p = srv.get("/props").json()
    assert p["total_slots"] == 4
    assert p["default_generation_settings"]["n_ctx"] == 512
    assert ".gguf" in p["model_path"] and p["build_info"].startswith("b") and p["is_sleeping"] is False
    assert p["default_generation_settings"]["params"]["speculative.types"] == "none"
    for k in ("model_alias", "modalities", "chat_template", "bos_token", "eos_token", "endpoint_slots"):
        assert k in p
    m = srv.get("/v1/models").json()
    assert m["object"] == "list" and m["data"][0]["owned_by"] == "llamacpp"
    assert m["data"][0]["meta"]["n_ctx"] == 512
    assert srv.get("/models").json() == m
    s = srv.get("/slots").json()
    assert len(s) == 4 and all({"id", "n_ctx", "speculative", "is_processing"} <= set(x) for x in s)
    assert srv.post("/props", {}).status_code == 501
    r = srv.get("/nope")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"


def test_native_stream_equals_nonstream(srv):
    a = complete(srv, n=24)
    assert a["tokens_predicted"] <= 24 and a["stop"] is True and a["stop_type"] in ("eos", "limit")
    t = a["timings"]
    assert t["predicted_n"] == a["tokens_predicted"] and "draft_n" not in t
    if t["predicted_n"] > 1:
        assert t["predicted_per_second"] == pytest.approx(1e3 / t["predicted_ms"] * (t["predicted_n"] - 1))
    ev = stream_native(srv, {"prompt": "I believe the meaning of life is", "n_predict": 24, **GREEDY})
    assert "[DONE]" not in ev
    assert ev[-1]["stop"] is True and ev[-1]["content"] == "" and "timings" in ev[-1]
    assert all(e["stop"] is False for e in ev[:-1])
    assert "".join(e["content"] for e in ev[:-1]) == a["content"]
    assert ev[-1]["tokens_predicted"] == a["tokens_predicted"]


def test_return_tokens_and_probs(srv):
    a = complete(srv, n=8, return_tokens=True, n_probs=3)
    assert len(a["tokens"]) == a["tokens_predicted"]
    cp = a["completion_probabilities"]
    assert len(cp) == a["tokens_predicted"]
    assert all({"id", "token", "bytes", "logprob", "top_logprobs"} <= set(c) for c in cp)
    assert all(len(c["top_logprobs"]) <= 3 for c in cp)
    b = complete(srv, n=8, n_probs=2, post_sampling_probs=True)
    assert "prob" in b["completion_probabilities"][0] and "top_probs" in b["completion_probabilities"][0]
    ev = stream_native(srv, {"prompt": "hello", "n_predict": 6, "n_probs": 2, **GREEDY})
    assert any(e.get("completion_probabilities") for e in ev[:-1])


def test_stop_strings_no_leak(srv):
    base = complete(srv, n=32, ignore_eos=True)["content"]
    if len(base) < 6:
        pytest.skip("model output too short to pick a stop string")
    stop = base[3:6]
    cut = base[: base.index(stop)]
    a = complete(srv, n=32, ignore_eos=True, stop=[stop])
    assert a["content"] == cut and a["stop_type"] == "word" and a["stopping_word"] == stop
    ev = stream_native(srv, {"prompt": "I believe the meaning of life is", "n_predict": 32, "ignore_eos": True,
                             "stop": [stop], **GREEDY})
    assert "".join(e["content"] for e in ev[:-1]) == cut
    assert ev[-1]["stop_type"] == "word"


def test_openai_client_routes(srv):
    c = openai.OpenAI(base_url=srv.url + "/v1", api_key="dummy")
    r = c.completions.create(model="x", prompt="Once upon a time", max_tokens=12, temperature=0, seed=1)
    assert r.object == "text_completion" and r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 12
    text = "".join(ch.choices[0].text for ch in c.completions.create(
        model="x", prompt="Once upon a time", max_tokens=12, temperature=0, seed=1, stream=True))
    assert text == r.choices[0].text
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}]
    r = c.chat.completions.create(model="x", messages=msgs, max_tokens=10, temperature=0)
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    chunks = list(c.chat.completions.create(model="x", messages=msgs, max_tokens=10, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == r.usage.completion_tokens
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == r.choices[0].message.content
    assert len({ch.id for ch in chunks}) == 1
    r = c.chat.completions.create(model="x", messages=msgs, max_tokens=4, temperature=0, logprobs=True, top_logprobs=2)
    assert r.choices[0].logprobs.content


def test_oai_raw_stream_done_and_timings(srv):
    with httpx.stream("POST", srv.url + "/v1/chat/completions", timeout=60, json={
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": True}) as r:
        ev = sse_events(r)
    assert ev[-1] == "[DONE]" and "timings" in ev[-2]
    with httpx.stream("POST", srv.url + "/v1/completions", timeout=60,
                      json={"prompt": "hi", "max_tokens": 5, "stream": True}) as r:
        ev = sse_events(r)
    assert ev[-1] == "[DONE]" and ev[-2]["choices"][0]["finish_reason"] in ("stop", "length")


def test_tokenize_detokenize(srv):
    text = "Hello world, ça va?"
    toks = srv.post("/tokenize", {"content": text}).json()["tokens"]
    assert toks and all(isinstance(t, int) for t in toks)
    assert srv.post("/detokenize", {"tokens": toks}).json()["content"].strip() == text
    with_bos = srv.post("/tokenize", {"content": text, "add_special": True}).json()["tokens"]
    assert len(with_bos) >= len(toks)
    wp = srv.post("/tokenize", {"content": text, "with_pieces": True}).json()["tokens"]
    assert [x["id"] for x in wp] == toks and all("piece" in x for x in wp)
    assert srv.post("/tokenize", {}).json() == {"tokens": []}
    r = srv.post("/apply-template", {"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200 and "hi" in r.json()["prompt"]


def test_metrics_move(srv):
    def val(text, name):
        for line in text.splitlines():
            if line.startswith("llamacpp:" + name + " "):
                return float(line.split()[-1])
        raise KeyError(name)
    r = srv.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert "Process-Start-Time-Unix" in r.headers
    before = val(r.text, "tokens_predicted_total")
    complete(srv, prompt="metrics " + str(random.random()), n=5)
    t = srv.get("/metrics").text
    assert val(t, "tokens_predicted_total") > before
    assert val(t, "n_decode_total") > 0 and val(t, "prompt_tokens_total") > 0
    for n in ("spec_decode_num_draft_tokens_total", "requests_processing", "requests_deferred",
              "n_busy_slots_per_decode", "predicted_tokens_seconds", "prompt_tokens_seconds"):
        val(t, n)


def test_id_slot_and_cache(srv):
    a = complete(srv, prompt="slot pin test prompt", n=4, id_slot=2)
    assert a["id_slot"] == 2
    b = complete(srv, prompt="slot pin test prompt", n=4, id_slot=2)
    assert b["timings"]["cache_n"] > 0 and b["content"] == a["content"]
    c = complete(srv, prompt="slot pin test prompt", n=4, id_slot=2, cache_prompt=False)
    assert c["timings"]["cache_n"] == 0
    r = srv.post("/completion", {"prompt": "x", "id_slot": 99})
    assert r.status_code == 400


def test_bad_inputs_keep_server_healthy(srv):
    r = httpx.post(srv.url + "/completion", content=b"{not json", timeout=10)
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    r = srv.post("/completion", {"prompt": "x", "n_predict": -5})
    assert r.status_code == 400 and "Value must be between -1" in r.json()["error"]["message"]
    r = srv.post("/completion", {"prompt": "x", "temperature": "hot"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = srv.post("/completion", {"prompt": "x", "stream": "yes"})
    assert r.status_code == 400
    r = srv.post("/completion", {"n_predict": 3})
    assert r.status_code == 400
    r = srv.post("/v1/chat/completions", {"messages": "nope"})
    assert r.status_code == 400
    long = "hello " * 2000
    r = srv.post("/completion", {"prompt": long, "n_predict": 2})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "exceed_context_size_error" and err["n_ctx"] == 512 and err["n_prompt_tokens"] >= 512
    r = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": long}], "stream": True})
    assert r.status_code == 400 and r.json()["error"]["type"] == "exceed_context_size_error"
    assert srv.get("/health").status_code == 200
    assert complete(srv, n=2)["stop"] is True


def test_cors(srv):
    r = httpx.options(srv.url + "/completion", headers={"Origin": "http://example.com"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://example.com"
    assert "POST" in r.headers["access-control-allow-methods"]
    r = srv.get("/health", headers={"Origin": "http://a.b"})
    assert r.headers["access-control-allow-origin"] == "http://a.b"


def test_concurrent_streams_equal_alone(srv):
    prompts = [f"Story number {i}:" for i in range(8)]
    body = lambda p: {"prompt": p, "n_predict": 16, "cache_prompt": False, **GREEDY}
    alone = {p: complete(srv, **body(p))["content"] for p in prompts}

    def run(p):
        return "".join(e["content"] for e in stream_native(srv, body(p))[:-1])
    with cf.ThreadPoolExecutor(8) as ex:
        got = dict(zip(prompts, ex.map(run, prompts)))
    assert got == alone


def test_load_mixed(srv):
    t0 = time.time()

    def one(i):
        b = {"prompt": f"load test {i % 5}", "n_predict": 8 + i % 8, **GREEDY}
        if i % 2:
            return "".join(e["content"] for e in stream_native(srv, b)[:-1])
        return complete(srv, **b)["content"]
    with cf.ThreadPoolExecutor(8) as ex:
        res = list(ex.map(one, range(100)))
    assert len(res) == 100 and time.time() - t0 < 60
    for _ in range(50):
        if not any(s["is_processing"] for s in srv.get("/slots").json()):
            break
        time.sleep(0.1)
    slots = srv.get("/slots").json()
    assert not any(s["is_processing"] for s in slots)
    assert all(s["next_token"][0]["n_remain"] == -1 for s in slots if "next_token" in s)


def test_disconnect_frees_slot():
    with Server("-c", "8192", "-np", "1", "--slots", env={"PYLLM_FAKE_STEP_MS": "5"}) as s:
        with httpx.stream("POST", s.url + "/completion", timeout=30, json={
                "prompt": "go on forever", "n_predict": 4000, "ignore_eos": True, "stream": True}) as r:
            n = 0
            for line in r.iter_lines():
                if line.startswith("data: "):
                    n += 1
                if n >= 3:
                    break
        for _ in range(100):
            if not s.get("/slots").json()[0]["is_processing"]:
                break
            time.sleep(0.05)
        assert not s.get("/slots").json()[0]["is_processing"]
        r = s.post("/completion", {"prompt": "after", "n_predict": 3}, timeout=20)
        assert r.status_code == 200


def test_api_key():
    with Server("--api-key", "secret", "-np", "1", "-c", "512") as s:
        assert s.get("/health").status_code == 200
        assert s.get("/v1/health").status_code == 200
        r = s.get("/props")
        assert r.status_code == 401
        assert r.json() == {"error": {"message": "Invalid API Key", "type": "authentication_error", "code": 401}}
        assert s.get("/props", headers={"Authorization": "Bearer secret"}).status_code == 200
        assert s.get("/props", headers={"X-Api-Key": "secret"}).status_code == 200
        assert s.get("/props", headers={"Authorization": "Bearer wrong"}).status_code == 401
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="secret")
        assert c.completions.create(model="x", prompt="hi", max_tokens=2).choices
        bad = openai.OpenAI(base_url=s.url + "/v1", api_key="nope", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.completions.create(model="x", prompt="hi", max_tokens=2)


def test_endpoints_disabled():
    with Server("--no-slots", "-np", "1", "-c", "512") as s:
        assert s.get("/slots").status_code == 501
        r = s.get("/metrics")
        assert r.status_code == 501 and r.json()["error"]["type"] == "not_supported_error"
        assert s.post("/slots/0?action=save", {"filename": "x"}).status_code == 501


def test_speculative_server():
    with Server("--spec-type", "draft-mtp", "--spec-draft-n-max", "3", "-np", "2", "-c", "1024", "--metrics") as s:
        a = s.post("/completion", {"prompt": "Speculate about", "n_predict": 20, **GREEDY}).json()
        t = a["timings"]
        assert t.get("draft_n", 0) >= 0
        slots = s.get("/slots").json()
        assert slots[0]["speculative"] is True
        assert any(x.get("params", {}).get("speculative.types") == "none,draft-mtp" for x in slots)
        assert s.get("/props").json()["default_generation_settings"]["params"]["speculative.types"] == "none"
        if "draft_n" in t:
            m = s.get("/metrics").text
            assert "spec_decode_num_accepted_tokens_per_pos_total" in m
    with Server("-np", "2", "-c", "1024") as s:
        b = s.post("/completion", {"prompt": "Speculate about", "n_predict": 20, **GREEDY}).json()
    assert a["content"] == b["content"]


@pytest.mark.parametrize("args,msg", [(["--spec-type", "bogus"], "unknown speculative decoding type"),
                                      (["--spec-type", "ngram-mod"], "not supported by pyllm"),
                                      (["--foo"], "error: invalid argument: --foo")])
def test_startup_errors(args, msg):
    s = Server(*args, wait=False)
    try:
        rc = s.proc.wait(60)
        assert rc == 1 and msg in s.output()
    finally:
        s.stop()


def test_missing_model_fails():
    s = Server("-m", "/nonexistent/model.gguf", wait=False)
    try:
        assert s.proc.wait(60) == 1
        assert "exiting due to model loading error" in s.output()
    finally:
        s.stop()
