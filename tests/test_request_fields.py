"""Every request field of llama-server's completion and chat routes (pyllm.server.schemas.FIELD_TABLE) sent with a
non-default value over real HTTP on the shipped model: an honoured ("ok") field changes the output or its shape,
a refused one answers 400 naming it, one llama-server also ignores ("same") is accepted. The walk covers the
whole table: a field added to it without a case here fails the test."""
import json

import httpx
import pytest

from pyllm.server.schemas import FIELD_TABLE
from server_util import QWEN35_TEMPLATE, Server, agent_server

NATIVE = {"prompt": "Once upon a time there was", "n_predict": 12, "temperature": 1.0, "seed": 42}
CHAT = {"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 12, "temperature": 1.0,
        "seed": 42}
GREEDY = {"temperature": 0.0, "n_predict": 32}
TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add numbers", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["a"],
          "additionalProperties": False}
NO_THINK = {"enable_thinking": False}
VOLATILE = {"timings", "generation_settings", "id", "created", "tokens_cached", "id_slot", "prompt_tokens_details",
            "system_fingerprint", "__verbose"}

# field -> (route, value, base additions, check); check: "differs" (the output/shape differs from the same request
# without the field), "400", "200" (accepted: llama-server ignores it too), or a predicate on the response
N, C, O, A = "/completion", "/v1/chat/completions", "/v1/completions", "/apply-template"
PREFILL = [{"role": "user", "content": "Tell me a story."}, {"role": "assistant", "content": "Once upon a"}]


def _progress_ok(evs, empty):
    """prompt_progress chunks: first 0% of the new part (processed == cache), one after each prompt batch (the
    prefill also stops at context checkpoints: message starts), the last 100%, then the tokens."""
    pp = [e for e in evs if "prompt_progress" in e]
    assert len(pp) >= 2 and all(empty(e) for e in pp), pp
    a, b = pp[0]["prompt_progress"], pp[-1]["prompt_progress"]
    assert a["processed"] == a["cache"] < a["total"] == b["total"] == b["processed"] and b["time_ms"] >= 0
    done = [e["prompt_progress"]["processed"] for e in pp]
    assert done == sorted(set(done))
    assert evs.index(pp[-1]) == len(pp) - 1  # all before the first token
    return True


def _probs_top(r):
    return len(r["completion_probabilities"][0]["top_logprobs"])


CASES = {
    "prompt": (N, "The capital of France is", {}, "differs"),
    "n_predict": (N, 3, {}, "differs"), "max_completion_tokens": (C, 3, {}, "differs"),
    "max_tokens": (O, 3, {"prompt": NATIVE["prompt"]}, "differs"),
    "n_cmpl": (N, 2, {}, lambda r: isinstance(r, list) and len(r) == 2),
    "n": (C, 2, {}, lambda r: len(r["choices"]) == 2),
    "temperature": (N, 0.0, {}, "differs"), "top_k": (N, 1, {}, "differs"), "top_p": (N, 0.05, {}, "differs"),
    "min_p": (N, 0.9, {}, "differs"), "top_n_sigma": (N, 0.1, {}, "differs"),
    "typical_p": (N, 0.1, {}, "differs"),
    "xtc_probability": (N, 1.0, {"xtc_threshold": 0.01}, "differs"),
    "xtc_threshold": (N, 0.01, {"xtc_probability": 1.0}, "differs"),
    "dynatemp_range": (N, 0.99, {"temperature": 1.0}, "differs"),
    "dynatemp_exponent": (N, 0.05, {"dynatemp_range": 0.99}, "differs"),
    "repeat_penalty": (N, 3.0, GREEDY, "differs"),
    "repeat_last_n": (N, 1, {**GREEDY, "repeat_penalty": 3.0}, "differs"),
    "frequency_penalty": (N, 3.0, GREEDY, "differs"), "presence_penalty": (N, 3.0, GREEDY, "differs"),
    "dry_multiplier": (N, 0.5, {}, "400"),  # the core has no DRY sampler
    "dry_base": (N, 5.0, {}, "200"), "dry_allowed_length": (N, 1, {}, "200"), "dry_penalty_last_n": (N, 2, {}, "200"),
    "dry_sequence_breakers": (N, ["e"], {}, "200"),
    "mirostat": (N, 2, {}, "differs"),
    "mirostat_tau": (N, 0.5, {"mirostat": 2}, "differs"), "mirostat_eta": (N, 1.0, {"mirostat": 1}, "differs"),
    "adaptive_target": (N, 0.5, {}, "200"), "adaptive_decay": (N, 0.5, {}, "200"),
    "min_keep": (N, 64, {"min_p": 0.99}, "differs"),
    "seed": (N, 7, {}, "differs"),
    "n_probs": (N, 2, {}, lambda r: _probs_top(r) == 2),
    "logprobs": (N, 3, {}, lambda r: _probs_top(r) == 3),
    "top_logprobs": (C, 2, {"logprobs": True}, lambda r: len(r["choices"][0]["logprobs"]["content"][0]
                                                              ["top_logprobs"]) == 2),
    "post_sampling_probs": (N, True, {"n_probs": 2}, lambda r: "top_probs" in r["completion_probabilities"][0]),
    "stop": (N, lambda ref: ref["content"][3:6], {}, lambda r: r["stop_type"] == "word"),
    "ignore_eos": (N, True, {"logit_bias": "EOS", "n_predict": 4}, lambda r: r["tokens_predicted"] == 4),
    "logit_bias": (N, [[11, 30.0]], {}, "differs"),
    "samplers": (N, ["temperature"], {"min_p": 0.9}, "differs"),
    "cache_prompt": (N, False, {}, lambda r: r["timings"]["cache_n"] == 0),
    "id_slot": (N, lambda ref: 1 - ref["id_slot"], {}, lambda r: r["id_slot"] in (0, 1)),
    "return_tokens": (N, True, {}, lambda r: len(r["tokens"]) == r["tokens_predicted"] > 0),
    "timings_per_token": (N, True, {"stream": True}, lambda r: "timings" in r[0]),
    "stream": (N, True, {}, lambda r: isinstance(r, list) and r[-1]["stop"] is True),
    "stream_options": (C, {"include_usage": True}, {"stream": True}, lambda r: r[-1]["choices"] == [] and
                       r[-1]["usage"]["completion_tokens"] > 0),
    "sse_ping_interval": (N, -5, {}, "400"),  # honoured (the stream's keep-alive); here: its range check
    "response_fields": (N, ["content"], {}, lambda r: list(r) == ["content"]),
    "grammar": (N, 'root ::= "yes" | "no"', {}, lambda r: r["content"] in ("yes", "no")),
    "json_schema": (N, SCHEMA, {"n_predict": 64},
                    lambda r: isinstance(json.loads(r["content"])["a"], int)),
    "response_format": (C, {"type": "json_schema", "json_schema": {"schema": SCHEMA}},
                        {"max_tokens": 64, "chat_template_kwargs": {"enable_thinking": False}},
                        lambda r: isinstance(json.loads(r["choices"][0]["message"]["content"]), dict)),
    "messages": (C, [{"role": "user", "content": "What is 2+2?"}], {}, "differs"),
    "tools": (C, TOOLS, {}, "differs"),  # rendered into the prompt
    "tool_choice": (C, "required", {"tools": TOOLS, "max_tokens": 64, "chat_template_kwargs": NO_THINK},
                    lambda r: r["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "add"),
    "parallel_tool_calls": (C, False, {"tools": TOOLS, "tool_choice": "required", "max_tokens": 64,
                                       "chat_template_kwargs": NO_THINK},
                            lambda r: len(r["choices"][0]["message"]["tool_calls"]) == 1),
    "chat_template_kwargs": (C, {"enable_thinking": False}, {}, "differs"),
    "reasoning_format": (C, "none", {}, lambda r: "reasoning_content" not in r["choices"][0]["message"]),
    "reasoning_effort": (C, "none", {}, "differs"),
    "add_generation_prompt": (C, False, {}, "differs"),
    "reasoning_budget_tokens": (C, 0, {"max_tokens": 24}, "differs"),
    "thinking_budget_tokens": (C, 0, {"max_tokens": 24}, "differs"),
    "reasoning_budget_message": (C, " Done thinking.", {"max_tokens": 24, "reasoning_budget_tokens": 0}, "differs"),
    # refused (not implemented): 400 naming the field
    "return_progress": (N, True, {"stream": True}, lambda r: _progress_ok(r, lambda e: e["content"] == "")),
    "verbose": (C, True, {}, lambda r: r["__verbose"]["prompt"].endswith("<|im_start|>assistant\n<think>\n") and
                r["__verbose"]["tokens_predicted"] == r["usage"]["completion_tokens"]),
    "continue_final_message": (A, True, {"messages": PREFILL, "add_generation_prompt": False},
                               lambda r: r["prompt"].endswith("Once upon a")),  # more: test_assistant_prefill
    "n_indent": (N, 2, {}, "400"), "n_cache_reuse": (N, 16, {}, "400"), "t_max_predict_ms": (N, 50, {}, "400"),
    "t_max_prompt_ms": (N, 50, {}, "400"), "lora": (N, [{"id": 0, "scale": 1.0}], {}, "400"),
    "echo": (O, True, {"prompt": "x"}, "400"), "best_of": (O, 2, {"prompt": "x"}, "400"),
    "suffix": (O, "end", {"prompt": "x"}, "400"),
    "grammar_lazy": (N, True, {}, "400"), "grammar_triggers": (N, [{"type": 0, "value": "x"}], {}, "400"),
    "preserved_tokens": (N, ["<tool_call>"], {}, "400"), "reasoning_control": (C, True, {}, "400"),
    "chat_format": (N, 1, {}, "400"), "chat_parser": (N, "x", {}, "400"), "generation_prompt": (N, "x", {}, "400"),
    "parse_tool_calls": (N, True, {}, "400"), "message_delimiters": (N, {"a": 1}, {}, "400"),
    "reasoning_budget_start_tag": (N, "<think>", {}, "400"), "reasoning_budget_end_tags": (N, ["</think>"], {}, "400"),
    # accepted: llama-server ignores them too (see the table's comments)
    "n_keep": (N, 4, {}, "200"), "n_discard": (N, 4, {}, "200"), "backend_sampling": (N, True, {}, "200"),
    "model": (C, "some-other-model", {}, "200"),
    # speculative.*: honoured per request (tests/test_spec_request.py drives them on an MTP server); this server does
    # not draft, so a draft length or another type is refused, n_min / p_min bound nothing; no n-gram drafter
    "speculative.n_min": (N, 1, {}, "200"), "speculative.p_min": (N, 0.5, {}, "200"),
    **{f"speculative.{k}": (N, v, {}, "400") for k, v in (("n_max", 2), ("type", "ngram-simple"), ("ngram_size_n", 3),
                                                          ("ngram_size_m", 2), ("ngram_min_hits", 2))},
}


@pytest.fixture(scope="module")
def srv():
    s = agent_server()
    yield s
    s.stop()


def _sig(x):
    if isinstance(x, dict):
        return {k: _sig(v) for k, v in x.items() if k not in VOLATILE}
    if isinstance(x, list):
        return [_sig(v) for v in x]
    return x


def send(srv, route, body):
    if body.get("stream"):
        with httpx.stream("POST", srv.url + route, json=body, timeout=60) as r:
            if r.status_code != 200:
                r.read()
                return r.status_code, r.json()
            evs = [json.loads(ln[6:]) for ln in r.iter_lines() if ln.startswith("data: ") and ln != "data: [DONE]"]
            return 200, evs
    r = srv.post(route, body)
    return r.status_code, r.json()


def test_table_is_walked():
    assert set(CASES) == set(FIELD_TABLE), set(CASES) ^ set(FIELD_TABLE)


@pytest.mark.parametrize("name", sorted(CASES))
def test_field(srv, name):
    route, value, extra, check = CASES[name]
    base = dict(CHAT if route in (C, A) else NATIVE)
    if route == O:
        base.pop("n_predict")
    base.update(extra)
    if route == C and "n_predict" in base:
        base["max_tokens"] = base.pop("n_predict")
    if base.get("logit_bias") == "EOS":
        eos = srv.get("/props").json()["eos_token"]
        base["logit_bias"] = [[srv.post("/tokenize", {"content": eos, "parse_special": True}).json()["tokens"][0],
                               100.0]]
    if name in base and name not in ("prompt", "messages"):
        del base[name]
    rc, ref = send(srv, route, base)
    assert rc == 200, ref
    if name == "cache_prompt":  # continue the slot's sequence: cached unless cache_prompt is false
        p = srv.post("/tokenize", {"content": base["prompt"]}).json()["tokens"]
        a = srv.post(route, {**base, "id_slot": 0, "return_tokens": True}).json()
        base = {**base, "prompt": p + a["tokens"], "id_slot": 0}
        rc, ref = send(srv, route, base)
        assert ref["timings"]["cache_n"] > 0
        srv.post(route, {**base, "prompt": p, "id_slot": 0})
    body = {**base, name: value(ref) if callable(value) else value}
    rc, out = send(srv, route, body)
    if check == "400":
        assert rc == 400 and name in out["error"]["message"], (rc, out)
        assert srv.get("/health").status_code == 200
        return
    assert rc == 200, out
    if check == "differs":
        assert _sig(out) != _sig(ref), f"{name}={value!r} changed nothing"
    elif check != "200":
        assert check(out), out


def test_unknown_fields_ignored_as_llama_server(srv):
    """llama-server reads fixed names and ignores other keys (OpenAI clients send user, store, metadata, ...)."""
    ref = srv.post("/completion", {**NATIVE, "temperature": 0.0}).json()
    out = srv.post("/completion", {**NATIVE, "temperature": 0.0, "user": "u1", "store": False,
                                   "metadata": {"a": "b"}, "no_such_field": 1})
    assert out.status_code == 200 and out.json()["content"] == ref["content"]
    assert srv.post(C, {**CHAT, "user": "u1", "service_tier": "auto"}).status_code == 200


def test_adaptive_p_sampler_refused(srv):
    r = srv.post("/completion", {**NATIVE, "samplers": ["top_k", "adaptive_p"]})
    assert r.status_code == 400 and "adaptive_p" in r.json()["error"]["message"]
    r = srv.post("/completion", {**NATIVE, "samplers": 5})
    assert r.status_code == 400 and "samplers" in r.json()["error"]["message"]
    r = srv.post("/completion", {**NATIVE, "dry_sequence_breakers": []})
    assert r.status_code == 400 and "dry_sequence_breakers" in r.json()["error"]["message"]


@pytest.mark.parametrize("route", [C, O])
def test_return_progress_shapes(srv, route):
    body = dict(CHAT if route == C else {**NATIVE, "max_tokens": NATIVE["n_predict"]})
    body.pop("n_predict", None)
    rc, evs = send(srv, route, {**body, "stream": True, "return_progress": True})
    assert rc == 200
    if route == C:
        assert _progress_ok(evs, lambda e: e["choices"][0]["delta"] == {"role": "assistant", "content": None})
    else:
        assert _progress_ok(evs, lambda e: e["choices"][0]["text"] == "")


def test_return_progress_between_batches():
    """A prompt longer than a batch (-b 16): a prompt_progress chunk after each batch, as llama-server sends them,
    processed rising from the cached part to the whole prompt; a prompt that shares a prefix starts at its cache."""
    prompt = " ".join(f"word{i}" for i in range(40))
    with Server("-c", "1024", "-np", "1", "-b", "16", "-ub", "16") as s:
        for route, body in ((N, {"prompt": prompt, "n_predict": 2}),
                            (C, {"messages": [{"role": "user", "content": prompt}], "max_tokens": 2}),
                            (N, {"prompt": prompt + " and more words at the end", "n_predict": 2})):
            rc, evs = send(s, route, {**body, "stream": True, "return_progress": True, "temperature": 0.0})
            assert rc == 200
            pp = [e["prompt_progress"] for e in evs if "prompt_progress" in e]
            first_token = next(i for i, e in enumerate(evs) if "prompt_progress" not in e)
            assert first_token == len(pp)  # all before the first token
            done = [p["processed"] for p in pp]
            total, cache = pp[0]["total"], pp[0]["cache"]
            assert done[0] == cache and done[-1] == total and done == sorted(set(done)), pp
            assert len(pp) >= 2 + (total - cache - 1) // 16, done  # 0%, one per batch (or checkpoint), the last
            assert all(0 < b - a <= 16 for a, b in zip(done, done[1:])) and all(p["total"] == total for p in pp)
            assert [p["time_ms"] for p in pp] == sorted(p["time_ms"] for p in pp)
        assert cache > 0  # the third prompt reused the first one's prefix
        rc, evs = send(s, N, {"prompt": prompt, "n_predict": 2, "stream": True, "cache_prompt": False})
        assert rc == 200 and not any("prompt_progress" in e for e in evs)  # only when asked


def test_verbose_in_streams(srv):
    """`verbose` as llama-server: a /v1/completions stream carries each chunk's native form (the final one's is the
    native final JSON, with the prompt); a chat stream carries the native final JSON on its final result's first
    chunk; without `verbose` nothing."""
    rc, evs = send(srv, O, {"prompt": NATIVE["prompt"], "max_tokens": 4, "stream": True, "verbose": True})
    evs = [e for e in evs if e != "[DONE]"]
    assert rc == 200 and all("__verbose" in e for e in evs)
    assert [e["__verbose"]["content"] for e in evs[:-1]] == [e["choices"][0]["text"] for e in evs[:-1]]
    assert evs[-1]["__verbose"]["stop"] is True and evs[-1]["__verbose"]["prompt"].endswith(NATIVE["prompt"])
    rc, evs = send(srv, C, {**CHAT, "max_tokens": 4, "stream": True, "verbose": True})
    evs = [e for e in evs if e != "[DONE]"]
    tagged = [k for k, e in enumerate(evs) if "__verbose" in e]
    assert rc == 200 and len(tagged) == 1 and evs[tagged[0]]["__verbose"]["stop"] is True
    assert evs[tagged[0]]["__verbose"]["tokens_predicted"] == 4 and tagged[0] >= len(evs) - 2
    rc, evs = send(srv, C, {**CHAT, "max_tokens": 4, "stream": True})
    assert not any("__verbose" in e for e in evs if e != "[DONE]")


@pytest.mark.parametrize("flags", [("-v",), ("-lv", "10")])
def test_verbose_default_from_the_log_verbosity(flags):
    """llama-server: requests default to verbose when the log verbosity is above 9 (-v sets it to infinity)."""
    with Server("-c", "256", "-np", "1", *flags, fake=True) as s:
        r = s.post(O, {"prompt": "hello", "max_tokens": 2}).json()
        assert r["__verbose"]["stop"] is True
        assert "__verbose" not in s.post(O, {"prompt": "hello", "max_tokens": 2, "verbose": False}).json()
    with Server("-c", "256", "-np", "1", "-lv", "9", fake=True) as s:
        assert "__verbose" not in s.post(O, {"prompt": "hello", "max_tokens": 2}).json()


def test_assistant_prefill(srv):
    """A trailing assistant message is continued (--prefill-assistant, the default), as continue_final_message."""
    r = srv.post(A, {"messages": PREFILL}).json()
    assert r["prompt"].endswith("Once upon a")
    r = srv.post(C, {"messages": PREFILL, "max_tokens": 4, "temperature": 0.0})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
    for body, field, msg in [
            ({"messages": PREFILL + [PREFILL[1]]}, "messages", "2 or more assistant messages"),
            ({"messages": PREFILL, "continue_final_message": True}, "continue_final_message",
             "Cannot set both add_generation_prompt and continue_final_message"),
            ({"messages": PREFILL[:1], "continue_final_message": True, "add_generation_prompt": False},
             "continue_final_message", "final assistant message"),
            ({"messages": [PREFILL[0], {**PREFILL[1], "tool_calls": [{"type": "function", "id": "1", "function": {
                "name": "add", "arguments": "{}"}}]}]}, "continue_final_message", "contains tool calls")]:
        r = srv.post(C, body)
        assert r.status_code == 400 and msg in r.json()["error"]["message"], (body, r.text)


def test_no_prefill_assistant_flag():
    with Server("-c", "1024", "-np", "1", "--jinja", "--chat-template-file", str(QWEN35_TEMPLATE),
                "--no-prefill-assistant") as s:
        p = s.post(A, {"messages": PREFILL}).json()["prompt"]
        assert not p.endswith("Once upon a") and p.endswith("<|im_start|>assistant\n<think>\n")
        p = s.post(A, {"messages": PREFILL, "continue_final_message": True, "add_generation_prompt": False}).json()
        assert p["prompt"].endswith("Once upon a")
