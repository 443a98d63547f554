"""pyllm-server over real HTTP (subprocess), on the REAL core with the shipped default model (models/*.gguf; the
server picks it itself when no -m is given). PYLLM_TEST_MODEL=/path/model.gguf runs the same tests on another model:
expectations are derived from the server itself (greedy runs compared with each other), never hard-coded text."""
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
PROMPT = "def fibonacci(n):"


@pytest.fixture(scope="module")
def srv():
    s = Server("-c", "2048", "-np", "4", "--metrics", "--no-jinja")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def spec():
    """MTP speculative decoding on 4 slots."""
    s = Server("-c", "2048", "-np", "4", "--metrics", "--spec-type", "draft-mtp", "--spec-draft-n-max", "3")
    yield s
    s.stop()


def complete(srv, prompt=PROMPT, n=16, **kw):
    r = srv.post("/completion", {"prompt": prompt, "n_predict": n, **GREEDY, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def stream_native(srv, body, path="/completion"):
    with httpx.stream("POST", srv.url + path, json={**body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        return sse_events(r)


def metric(text, name):
    for line in text.splitlines():
        if line.startswith("llamacpp:" + name + " "):
            return float(line.split()[-1])
    raise KeyError(name)


def wait_idle(s, timeout=10.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if not any(x["is_processing"] for x in s.get("/slots").json()):
            return True
        time.sleep(0.05)
    return False


def test_real_core_is_used(srv):
    p = srv.get("/props").json()
    assert p["model_path"].endswith(".gguf") and "pyllm-fake" not in p["model_path"]
    assert "fake" not in p["model_ftype"]
    assert "model loaded" in srv.output() and "models/" in p["model_path"]


def test_health_props_models_slots(srv):
    r = srv.get("/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    assert r.headers["server"] == "llama.cpp"
    p = srv.get("/props").json()
    assert p["total_slots"] == 4
    dgs = p["default_generation_settings"]
    assert dgs["n_ctx"] == 512 and isinstance(dgs["params"], dict)
    assert dgs["params"]["speculative.types"] == "none" and dgs["params"]["n_predict"] == -1
    assert ".gguf" in p["model_path"] and p["build_info"].startswith("b") and p["is_sleeping"] is False
    for k in ("model_alias", "modalities", "chat_template", "bos_token", "eos_token", "endpoint_slots",
              "endpoint_metrics", "chat_template_caps", "media_marker", "model_ftype"):
        assert k in p
    assert "<|im_start|>" in p["chat_template"]  # the model's own ChatML template
    assert p["eos_token"] == "<|im_end|>"
    m = srv.get("/v1/models").json()
    assert m["object"] == "list" and m["data"][0]["owned_by"] == "llamacpp"
    meta = m["data"][0]["meta"]
    assert meta["n_ctx"] == 512 and meta["n_vocab"] > 0 and meta["n_params"] > 0 and meta["size"] > 0
    assert srv.get("/models").json() == m
    s = srv.get("/slots").json()
    assert [x["id"] for x in s] == [0, 1, 2, 3]
    assert all({"id", "n_ctx", "speculative", "is_processing"} <= set(x) for x in s)
    assert all(x["n_ctx"] == 512 and x["speculative"] is False for x in s)
    complete(srv, n=2, id_slot=1)
    x = srv.get("/slots").json()[1]
    assert {"id_task", "n_prompt_tokens", "params", "next_token"} <= set(x)
    assert x["next_token"][0]["has_next_token"] is False and x["params"]["n_predict"] == 2
    assert srv.post("/props", {}).status_code == 501
    r = srv.get("/nope")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"


def test_native_stream_equals_nonstream(srv):
    a = complete(srv, n=24)
    assert 0 < a["tokens_predicted"] <= 24 and a["stop"] is True and a["stop_type"] in ("eos", "limit")
    t = a["timings"]
    assert t["predicted_n"] == a["tokens_predicted"] and "draft_n" not in t
    assert t["prompt_n"] + t["cache_n"] == a["tokens_evaluated"]
    if t["predicted_n"] > 1:
        assert t["predicted_per_second"] == pytest.approx(1e3 / t["predicted_ms"] * (t["predicted_n"] - 1))
    ev = stream_native(srv, {"prompt": PROMPT, "n_predict": 24, **GREEDY})
    assert "[DONE]" not in ev
    assert ev[-1]["stop"] is True and ev[-1]["content"] == "" and "timings" in ev[-1]
    assert all(e["stop"] is False for e in ev[:-1]) and len(ev) > 2
    assert "".join(e["content"] for e in ev[:-1]) == a["content"]
    assert ev[-1]["tokens_predicted"] == a["tokens_predicted"]


def test_return_tokens_and_probs(srv):
    a = complete(srv, n=8, return_tokens=True, n_probs=3)
    assert len(a["tokens"]) == a["tokens_predicted"]
    cp = a["completion_probabilities"]
    assert len(cp) == a["tokens_predicted"]
    assert all({"id", "token", "bytes", "logprob", "top_logprobs"} <= set(c) for c in cp)
    assert all(len(c["top_logprobs"]) == 3 for c in cp)
    # greedy: the chosen token is the most likely one
    assert all(c["id"] == c["top_logprobs"][0]["id"] and c["logprob"] <= 0 for c in cp)
    assert [c["id"] for c in cp] == a["tokens"]
    b = complete(srv, n=8, n_probs=2, post_sampling_probs=True)
    assert "prob" in b["completion_probabilities"][0] and "top_probs" in b["completion_probabilities"][0]
    ev = stream_native(srv, {"prompt": "hello", "n_predict": 6, "n_probs": 2, **GREEDY})
    assert any(e.get("completion_probabilities") for e in ev[:-1])


def test_stop_strings_no_leak(srv):
    base = complete(srv, n=32, ignore_eos=True)["content"]
    assert len(base) >= 6, base
    stop = base[3:6]
    cut = base[: base.index(stop)]
    a = complete(srv, n=32, ignore_eos=True, stop=[stop])
    assert a["content"] == cut and a["stop_type"] == "word" and a["stopping_word"] == stop
    ev = stream_native(srv, {"prompt": PROMPT, "n_predict": 32, "ignore_eos": True, "stop": [stop], **GREEDY})
    assert "".join(e["content"] for e in ev[:-1]) == cut
    assert ev[-1]["stop_type"] == "word"


def test_every_completion_route_httpx(srv):
    """Non-stream and stream on every completion route give the same text."""
    msgs = [{"role": "user", "content": "Write a function"}]
    for path in ("/completion", "/completions"):
        a = srv.post(path, {"prompt": PROMPT, "n_predict": 8, **GREEDY}).json()
        ev = stream_native(srv, {"prompt": PROMPT, "n_predict": 8, **GREEDY}, path)
        assert "".join(e["content"] for e in ev[:-1]) == a["content"]
    a = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 8, **GREEDY}).json()
    assert a["object"] == "text_completion" and a["usage"]["completion_tokens"] <= 8
    ev = stream_native(srv, {"prompt": PROMPT, "max_tokens": 8, **GREEDY}, "/v1/completions")
    assert ev[-1] == "[DONE]"
    assert "".join(e["choices"][0]["text"] for e in ev[:-1]) == a["choices"][0]["text"]
    for path in ("/chat/completions", "/v1/chat/completions"):
        a = srv.post(path, {"messages": msgs, "max_tokens": 8, **GREEDY}).json()
        assert a["object"] == "chat.completion" and a["choices"][0]["message"]["content"]
        ev = stream_native(srv, {"messages": msgs, "max_tokens": 8, **GREEDY}, path)
        assert ev[-1] == "[DONE]" and "timings" in ev[-2]
        text = "".join(e["choices"][0]["delta"].get("content") or "" for e in ev[:-1])
        assert text == a["choices"][0]["message"]["content"]


def test_timings_per_token(srv):
    ev = stream_native(srv, {"prompt": PROMPT, "n_predict": 6, "timings_per_token": True, **GREEDY})
    assert all("timings" in e for e in ev) and ev[-2]["timings"]["predicted_n"] == ev[-2]["tokens_predicted"]
    ev = stream_native(srv, {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4,
                             "timings_per_token": True, **GREEDY}, "/v1/chat/completions")
    assert all("timings" in e for e in ev[1:-1])


def test_unimplemented_endpoints_are_clear(srv):
    for path, msg in (("/embedding", "--embeddings"), ("/v1/embeddings", "--embeddings"),
                      ("/rerank", "--reranking"), ("/infill", "Infill is not supported")):
        r = srv.post(path, {"content": "x", "input_prefix": "a", "input_suffix": "b"})
        assert r.status_code == 501 and r.json()["error"]["type"] == "not_supported_error"
        assert msg in r.json()["error"]["message"]
    assert srv.get("/lora-adapters").json() == []
    assert srv.post("/lora-adapters", [{"id": 0, "scale": 1.0}]).status_code == 400


def test_openai_client_routes(srv):
    c = openai.OpenAI(base_url=srv.url + "/v1", api_key="dummy")
    r = c.completions.create(model="x", prompt="Once upon a time", max_tokens=12, temperature=0, seed=1)
    assert r.object == "text_completion" and r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 12 and r.choices[0].text
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
    assert [m.id for m in c.models.list().data]


def test_tokenize_detokenize(srv):
    for text in ("Hello world, ça va?", "def f(x):\n    return x * 2\n", "emoji 😀 and 中文"):
        toks = srv.post("/tokenize", {"content": text}).json()["tokens"]
        assert toks and all(isinstance(t, int) for t in toks)
        assert srv.post("/detokenize", {"tokens": toks}).json()["content"] == text
    text = "Hello world, ça va?"
    toks = srv.post("/tokenize", {"content": text}).json()["tokens"]
    with_bos = srv.post("/tokenize", {"content": text, "add_special": True}).json()["tokens"]
    assert len(with_bos) >= len(toks)
    wp = srv.post("/tokenize", {"content": text, "with_pieces": True}).json()["tokens"]
    assert [x["id"] for x in wp] == toks and all("piece" in x for x in wp)
    # special tokens are parsed by default
    sp = srv.post("/tokenize", {"content": "<|im_start|>"}).json()["tokens"]
    assert len(sp) == 1
    assert srv.post("/detokenize", {"tokens": sp}).json()["content"] == "<|im_start|>"
    assert srv.post("/tokenize", {}).json() == {"tokens": []}
    assert srv.post("/detokenize", {"tokens": [10 ** 9]}).status_code == 400
    r = srv.post("/apply-template", {"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200 and r.json()["prompt"] == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_metrics_move(srv):
    r = srv.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert "Process-Start-Time-Unix" in r.headers
    before = {n: metric(r.text, n) for n in ("tokens_predicted_total", "prompt_tokens_total", "n_decode_total",
                                             "prompt_seconds_total", "tokens_predicted_seconds_total")}
    complete(srv, prompt="metrics " + str(random.random()), n=5)
    t = srv.get("/metrics").text
    for n, v in before.items():
        assert metric(t, n) > v, n
    assert metric(t, "spec_decode_num_draft_tokens_total") == 0
    for n in ("spec_decode_num_accepted_tokens_total", "spec_decode_num_drafts_total", "requests_processing",
              "requests_deferred", "n_busy_slots_per_decode", "predicted_tokens_seconds", "prompt_tokens_seconds",
              "n_tokens_max", "prompt_tokens_cached_total"):
        metric(t, n)


def test_id_slot_and_cache(srv):
    a = complete(srv, prompt="slot pin test prompt", n=4, id_slot=2, return_tokens=True)
    assert a["id_slot"] == 2
    p = srv.post("/tokenize", {"content": "slot pin test prompt"}).json()["tokens"]
    # continuing the conversation reuses the slot's KV / recurrent state
    b = complete(srv, prompt=p + a["tokens"], n=4, id_slot=2, return_tokens=True)
    assert b["id_slot"] == 2 and b["timings"]["cache_n"] > 0
    assert b["timings"]["cache_n"] + b["timings"]["prompt_n"] == len(p) + len(a["tokens"])
    # cache_prompt=false: nothing reused, same greedy output as a cached run
    nxt = p + a["tokens"] + b["tokens"]
    c = complete(srv, prompt=nxt, n=4, id_slot=2, cache_prompt=False)
    assert c["timings"]["cache_n"] == 0 and c["timings"]["prompt_n"] == len(nxt)
    complete(srv, prompt=p + a["tokens"], n=4, id_slot=3)
    d = complete(srv, prompt=nxt, n=4, id_slot=3)
    assert d["content"] == c["content"]
    r = srv.post("/completion", {"prompt": "x", "id_slot": 99})
    assert r.status_code == 400


def test_bad_inputs_keep_server_healthy(srv):
    # malformed JSON: llama-server's answer (nlohmann parse_error -> 500 server_error), a clear message
    r = httpx.post(srv.url + "/completion", content=b"{not json", timeout=10)
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    assert "parse error" in r.json()["error"]["message"]
    r = httpx.post(srv.url + "/completion", content=b"\xff\xfe garbage", timeout=10)
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    r = srv.post("/completion", {"prompt": "x", "n_predict": -5})
    assert r.status_code == 400 and "Value must be between -1" in r.json()["error"]["message"]
    for bad in ({"temperature": "hot"}, {"stream": "yes"}, {"n_predict": "ten"}, {"top_k": [1]},
                {"stop": 5}, {"prompt": {"x": 1}}, {"prompt": 3.5}, {"prompt": [True]}, {"prompt": []}):
        r = srv.post("/completion", {"prompt": "x", **bad})
        assert 400 <= r.status_code < 500, (bad, r.text)
        assert r.json()["error"]["type"] == "invalid_request_error", (bad, r.text)
    r = srv.post("/completion", {"prompt": [1, 2, 10 ** 9]})
    assert r.status_code == 400
    r = srv.post("/completion", {"n_predict": 3})
    assert r.status_code == 400
    r = srv.post("/completion", [1, 2])
    assert r.status_code == 400
    r = srv.post("/v1/chat/completions", {"messages": "nope"})
    assert r.status_code == 400
    r = srv.post("/v1/chat/completions", {"messages": [{"content": "no role"}]})
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
    assert wait_idle(srv)


def test_cors(srv):
    r = httpx.options(srv.url + "/completion", headers={"Origin": "http://example.com"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://example.com"
    assert "POST" in r.headers["access-control-allow-methods"]
    r = srv.get("/health", headers={"Origin": "http://a.b"})
    assert r.headers["access-control-allow-origin"] == "http://a.b"


def test_api_key_off(srv):
    # no --api-key: any (or no) credentials are accepted
    assert srv.get("/props").status_code == 200
    assert srv.get("/props", headers={"Authorization": "Bearer whatever"}).status_code == 200
    c = openai.OpenAI(base_url=srv.url + "/v1", api_key="anything")
    assert c.completions.create(model="x", prompt="hi", max_tokens=2).choices


# ---------------------------------------------------------------- speculative (MTP) server

def test_speculative_timings_log_metrics(spec, srv):
    slots = spec.get("/slots").json()
    assert len(slots) == 4 and all(x["speculative"] is True for x in slots)
    # the real settings (llama-server shows "none" here, its issue 28119)
    dgs = spec.get("/props").json()["default_generation_settings"]["params"]
    assert dgs["speculative.types"] == "none,draft-mtp"
    assert (dgs["speculative.n_max"], dgs["speculative.n_min"], dgs["speculative.n_max_auto"]) == (3, 0, False)
    m0 = spec.get("/metrics").text
    a = complete(spec, n=24)
    t = a["timings"]
    assert t["draft_n"] > 0 and 0 <= t["draft_n_accepted"] <= t["draft_n"]
    # greedy speculative output equals plain greedy output
    assert a["content"] == complete(srv, n=24)["content"]
    ev = stream_native(spec, {"prompt": PROMPT, "n_predict": 24, **GREEDY})
    assert "".join(e["content"] for e in ev[:-1]) == a["content"]
    ft = ev[-1]["timings"]
    assert ft["draft_n"] > 0 and "draft_n_accepted" in ft
    for path in ("/v1/chat/completions",):
        evc = stream_native(spec, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 12, **GREEDY},
                            path)
        assert evc[-1] == "[DONE]" and "draft_n" in evc[-2]["timings"]
    x = [s for s in spec.get("/slots").json() if "params" in s]
    assert x and all(s["params"]["speculative.types"] == "none,draft-mtp" for s in x)
    m1 = spec.get("/metrics").text
    for n in ("spec_decode_num_draft_tokens_total", "spec_decode_num_drafts_total"):
        assert metric(m1, n) > metric(m0, n)
    assert metric(m1, "spec_decode_num_accepted_tokens_total") >= metric(m0, "spec_decode_num_accepted_tokens_total")
    assert 'spec_decode_num_accepted_tokens_per_pos_total{position="0"}' in m1
    time.sleep(0.1)
    out = spec.output()
    assert "draft acceptance = " in out and "accepted /" in out and "mean len =" in out


def test_concurrent_streams_equal_alone(spec):
    """8 simultaneous streams on -np 4 with MTP: all complete, each equals the same request run alone."""
    prompts = [f"Story number {i}:" for i in range(4)] + ["import os", "class Foo:", "def main():", "# TODO"]
    body = lambda p: {"prompt": p, "n_predict": 16, "cache_prompt": False, **GREEDY}
    alone = {p: complete(spec, **body(p))["content"] for p in prompts}

    def run(p):
        ev = stream_native(spec, body(p))
        assert ev[-1]["stop"] is True and ev[-1]["timings"]["draft_n"] > 0
        return "".join(e["content"] for e in ev[:-1])
    with cf.ThreadPoolExecutor(8) as ex:
        got = dict(zip(prompts, ex.map(run, prompts)))
    assert got == alone
    assert wait_idle(spec)


def test_load_mixed_rss(spec):
    """100 requests, 8 concurrent, mixed stream/non-stream/chat: no errors, slots idle, RSS near its start."""
    for i in range(8):  # warm up every code path before the RSS baseline
        complete(spec, prompt=f"warm {i}", n=4)
        stream_native(spec, {"prompt": f"warm {i}", "n_predict": 4, **GREEDY})
    rss0 = spec.rss_kb()
    t0 = time.time()

    def one(i):
        b = {"prompt": f"load test {i % 5}", "n_predict": 4 + i % 8, **GREEDY}
        if i % 4 == 1:
            return "".join(e["content"] for e in stream_native(spec, b)[:-1])
        if i % 4 == 3:
            r = spec.post("/v1/chat/completions", {"messages": [{"role": "user", "content": b["prompt"]}],
                                                   "max_tokens": b["n_predict"], **GREEDY})
            assert r.status_code == 200, r.text
            return r.json()["choices"][0]["message"]["content"]
        return complete(spec, **b)["content"]
    with cf.ThreadPoolExecutor(8) as ex:
        res = list(ex.map(one, range(100)))
    assert len(res) == 100 and time.time() - t0 < 120
    assert wait_idle(spec)
    slots = spec.get("/slots").json()
    assert not any(s["is_processing"] for s in slots)
    assert all(s["next_token"][0]["n_remain"] == -1 for s in slots if "next_token" in s)
    m = spec.get("/metrics").text
    assert metric(m, "requests_processing") == 0 and metric(m, "requests_deferred") == 0
    rss1 = spec.rss_kb()
    print(f"RSS before {rss0} kB after {rss1} kB, load {time.time() - t0:.1f} s")
    assert rss1 - rss0 < 50 * 1024, (rss0, rss1)
    assert spec.get("/health").status_code == 200


# ---------------------------------------------------------------- own servers

def test_disconnect_frees_slot():
    with Server("-c", "8192", "-np", "1", "--slots") as s:
        with httpx.stream("POST", s.url + "/completion", timeout=30, json={
                "prompt": "go on forever", "n_predict": 4000, "ignore_eos": True, "stream": True}) as r:
            n = 0
            for line in r.iter_lines():
                if line.startswith("data: "):
                    n += 1
                if n >= 3:
                    break
        assert wait_idle(s, 10)
        # a non-streaming request whose client goes away also frees its slot
        try:
            httpx.post(s.url + "/completion", json={"prompt": "x", "n_predict": 4000, "ignore_eos": True},
                       timeout=0.5)
        except httpx.TimeoutException:
            pass
        assert wait_idle(s, 10)
        r = s.post("/completion", {"prompt": "after", "n_predict": 3}, timeout=20)
        assert r.status_code == 200 and r.json()["tokens_predicted"] == 3
        assert s.get("/health").status_code == 200


def test_api_key():
    with Server("--api-key", "secret", "-np", "1", "-c", "512") as s:
        assert s.get("/health").status_code == 200
        assert s.get("/v1/health").status_code == 200
        r = s.get("/props")
        assert r.status_code == 401
        assert r.json() == {"error": {"message": "Invalid API Key", "type": "authentication_error", "code": 401}}
        assert s.post("/completion", {"prompt": "hi", "n_predict": 2}).status_code == 401
        assert s.get("/props", headers={"Authorization": "Bearer secret"}).status_code == 200
        assert s.get("/props", headers={"X-Api-Key": "secret"}).status_code == 200
        assert s.get("/props", headers={"Authorization": "Bearer wrong"}).status_code == 401
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="secret")
        assert c.completions.create(model="x", prompt="hi", max_tokens=2).choices
        # a streamed chat with the key runs to its end (3 sampled tokens may all be think markup, which is
        # neither content nor reasoning, so the test checks the finish, not the text)
        chunks = [ch for ch in c.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "hi"}], max_tokens=3, stream=True) if ch.choices]
        assert chunks and chunks[-1].choices[0].finish_reason in ("length", "stop")
        bad = openai.OpenAI(base_url=s.url + "/v1", api_key="nope", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.completions.create(model="x", prompt="hi", max_tokens=2)


def test_endpoints_disabled():
    with Server("--no-slots", "-np", "1", "-c", "512") as s:
        assert s.get("/slots").status_code == 501
        r = s.get("/metrics")
        assert r.status_code == 501 and r.json()["error"]["type"] == "not_supported_error"
        assert s.post("/slots/0?action=save", {"filename": "x"}).status_code == 501


@pytest.mark.parametrize("args,msg", [(["--spec-type", "bogus"], "unknown speculative decoding type"),
                                      (["--spec-type", "draft-dflash"], "not supported by pyllm"),
                                      (["--foo"], "error: invalid argument: --foo")])
def test_startup_errors(args, msg):
    s = Server(*args, wait=False)
    try:
        rc = s.proc.wait(60)
        assert rc == 1 and msg in s.output()
        assert "Traceback" not in s.output()
    finally:
        s.stop()


def test_missing_and_corrupt_model_fail(tmp_path):
    bad = tmp_path / "corrupt.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 60)
    for path in ("/nonexistent/model.gguf", str(bad)):
        s = Server("-m", path, wait=False)
        try:
            assert s.proc.wait(60) == 1
            out = s.output()
            assert "exiting due to model loading error" in out and path in out and "Traceback" not in out
        finally:
            s.stop()
