"""pyllm.Llama against llama-cpp-python's API: the response shapes field by field (the key sets of its
llama_cpp/llama_types.py TypedDicts, 0.3.36), stream and chat included; the same text as pyllm-server and
`pyllm generate` for the same greedy request; MTP output == plain output; unsupported arguments raise."""
import subprocess
import sys
import threading
import time
import warnings

import pytest

from pyllm import Llama
from server_util import ROOT, Server, default_model_path

MODEL = default_model_path()
PROMPT = "def fibonacci(n):"
MSGS = [{"role": "system", "content": "You write Python."}, {"role": "user", "content": "Sort a list."}]

# llama_types.py 0.3.36: Required / NotRequired keys of the TypedDicts a call returns
CREATE_COMPLETION = {"id", "object", "created", "model", "choices"}, {"usage"}
COMPLETION_CHOICE = {"text", "index", "logprobs", "finish_reason"}
COMPLETION_LOGPROBS = {"text_offset", "token_logprobs", "tokens", "top_logprobs"}
COMPLETION_USAGE = {"prompt_tokens", "completion_tokens", "total_tokens"}
CREATE_CHAT_COMPLETION = {"id", "object", "created", "model", "choices", "usage"}
CHAT_CHOICE = {"index", "message", "logprobs", "finish_reason"}
CHAT_MESSAGE = {"content", "role"}, {"tool_calls", "function_call"}
CHAT_LOGPROBS = {"content", "refusal"}
CHAT_LOGPROB_TOKEN = {"token", "logprob", "bytes", "top_logprobs"}
CHAT_TOP_LOGPROB = {"token", "logprob", "bytes"}
CHAT_CHUNK = {"id", "model", "object", "created", "choices"}
CHAT_CHUNK_CHOICE = {"index", "delta", "finish_reason"}, {"logprobs"}
CHAT_DELTA = set(), {"content", "function_call", "tool_calls", "role"}


def keys_ok(d, required, optional=frozenset()):
    assert isinstance(d, dict)
    assert required <= set(d) <= required | set(optional), (sorted(d), sorted(required), sorted(optional))


@pytest.fixture(scope="module")
def llm():
    m = Llama(model_path=MODEL, n_ctx=2048, verbose=False)
    yield m
    m.close()


@pytest.fixture(scope="module")
def mtp():
    m = Llama(model_path=MODEL, n_ctx=2048, verbose=False, spec_type="draft-mtp", spec_draft_n_max=3)
    yield m
    m.close()


def check_completion(r, logprobs=False):
    keys_ok(r, *CREATE_COMPLETION)
    assert r["object"] == "text_completion" and r["id"].startswith("cmpl-") and isinstance(r["created"], int)
    assert r["model"] == MODEL
    (c,) = r["choices"]
    keys_ok(c, COMPLETION_CHOICE)
    assert c["index"] == 0 and isinstance(c["text"], str) and c["finish_reason"] in ("stop", "length")
    keys_ok(r["usage"], COMPLETION_USAGE)
    u = r["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    if logprobs:
        lp = c["logprobs"]
        keys_ok(lp, COMPLETION_LOGPROBS)
        assert len(lp["tokens"]) == len(lp["text_offset"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"])
        assert "".join(lp["tokens"]) == c["text"]
    else:
        assert c["logprobs"] is None


def test_completion_shape_and_greedy(llm):
    r = llm(PROMPT, max_tokens=24, temperature=0)
    check_completion(r)
    assert r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 24
    assert r["usage"]["prompt_tokens"] == len(llm.tokenize(PROMPT.encode(), special=True))
    assert llm.create_completion(PROMPT, max_tokens=24, temperature=0)["choices"][0]["text"] == r["choices"][0]["text"]


def test_completion_stream_shape_and_text(llm):
    full = llm(PROMPT, max_tokens=24, temperature=0)
    chunks = list(llm(PROMPT, max_tokens=24, temperature=0, stream=True))
    for c in chunks:
        keys_ok(c, CREATE_COMPLETION[0])  # stream chunks: no usage
        assert c["object"] == "text_completion" and c["id"] == chunks[0]["id"]
        keys_ok(c["choices"][0], COMPLETION_CHOICE)
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and chunks[-1]["choices"][0]["text"] == ""
    assert "".join(c["choices"][0]["text"] for c in chunks) == full["choices"][0]["text"]


def test_completion_logprobs(llm):
    r = llm(PROMPT, max_tokens=8, temperature=0, logprobs=3)
    check_completion(r, logprobs=True)
    lp = r["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == 8 and lp["text_offset"][0] == len(PROMPT)
    for tok, top, l in zip(lp["tokens"], lp["top_logprobs"], lp["token_logprobs"]):
        assert top[tok] == l <= 0 and 1 <= len(top) <= 4
        assert l == max(top.values())  # greedy: the chosen token is the most likely one
    chunks = list(llm(PROMPT, max_tokens=8, temperature=0, logprobs=3, stream=True))
    toks = [t for c in chunks if c["choices"][0]["logprobs"] for t in c["choices"][0]["logprobs"]["tokens"]]
    assert toks == lp["tokens"]


def test_chat_shape_and_stream(llm):
    r = llm.create_chat_completion(MSGS, max_tokens=20, temperature=0)
    keys_ok(r, CREATE_CHAT_COMPLETION)
    assert r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-")
    (c,) = r["choices"]
    keys_ok(c, CHAT_CHOICE)
    keys_ok(c["message"], *CHAT_MESSAGE)
    assert c["message"]["role"] == "assistant" and c["logprobs"] is None and c["finish_reason"] in ("stop", "length")
    keys_ok(r["usage"], COMPLETION_USAGE)
    chunks = list(llm.create_chat_completion(MSGS, max_tokens=20, temperature=0, stream=True))
    for ch in chunks:
        keys_ok(ch, CHAT_CHUNK)
        assert ch["object"] == "chat.completion.chunk" and ch["id"] == chunks[0]["id"]
        keys_ok(ch["choices"][0], *CHAT_CHUNK_CHOICE)
        keys_ok(ch["choices"][0]["delta"], *CHAT_DELTA)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert chunks[-1]["choices"][0]["delta"] == {} and chunks[-1]["choices"][0]["finish_reason"] == c["finish_reason"]
    assert "".join(ch["choices"][0]["delta"].get("content", "") for ch in chunks) == c["message"]["content"]


def test_chat_logprobs(llm):
    r = llm.create_chat_completion(MSGS, max_tokens=6, temperature=0, logprobs=True, top_logprobs=2)
    lp = r["choices"][0]["logprobs"]
    keys_ok(lp, CHAT_LOGPROBS)
    assert len(lp["content"]) == 6
    for e in lp["content"]:
        keys_ok(e, CHAT_LOGPROB_TOKEN)
        assert len(e["top_logprobs"]) == 2 and e["top_logprobs"][0]["token"] == e["token"]
        for t in e["top_logprobs"]:
            keys_ok(t, CHAT_TOP_LOGPROB)
    with pytest.raises(ValueError, match="top_logprobs requires logprobs"):
        llm.create_chat_completion(MSGS, top_logprobs=2)


def test_same_output_as_server_and_cli(llm):
    ours = llm(PROMPT, max_tokens=32, temperature=0)["choices"][0]["text"]
    chat = llm.create_chat_completion(MSGS, max_tokens=24, temperature=0)["choices"][0]["message"]["content"]
    with Server("-c", "2048", "-np", "1", "-m", MODEL) as srv:
        r = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 32, "temperature": 0}).json()
        assert r["choices"][0]["text"] == ours
        r = srv.post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 24, "temperature": 0}).json()
        assert r["choices"][0]["message"]["content"] == chat
    cli = subprocess.run([sys.executable, "-m", "pyllm.cli.main", "generate", "-m", MODEL, "-p", PROMPT, "-n", "32",
                          "--temp", "0", "-c", "2048", "--no-display-prompt"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout == ours + "\n"


def test_draft_mtp_equals_plain_and_reports_stats(llm, mtp):
    assert mtp.last_spec_stats is None
    for prompt in (PROMPT, "The capital of France is"):
        plain = llm(prompt, max_tokens=48, temperature=0)["choices"][0]["text"]
        assert mtp(prompt, max_tokens=48, temperature=0)["choices"][0]["text"] == plain
        s = mtp.last_spec_stats
        assert s["spec_type"] == "draft-mtp" and s["n_verif_steps"] > 0 and 0 < s["n_draft"]
        assert 0 <= s["n_draft_accepted"] <= s["n_draft"] and len(s["n_accepted_per_pos"]) == 3
        assert sum(s["n_accepted_per_pos"]) == s["n_draft_accepted"] and "draft acceptance" in s["acceptance_line"]
    stream = "".join(c["choices"][0]["text"] for c in mtp(PROMPT, max_tokens=48, temperature=0, stream=True))
    assert stream == llm(PROMPT, max_tokens=48, temperature=0)["choices"][0]["text"]
    chat = llm.create_chat_completion(MSGS, max_tokens=32, temperature=0)["choices"][0]["message"]["content"]
    assert mtp.create_chat_completion(MSGS, max_tokens=32, temperature=0)["choices"][0]["message"]["content"] == chat
    assert llm.last_spec_stats["n_draft"] == 0


def test_readme_example():
    llm = Llama(model_path=MODEL, spec_type="draft-mtp", spec_draft_n_max=3, verbose=False)
    assert len(llm("def f(", max_tokens=32)["choices"][0]["text"]) > 0


def test_vocabulary_and_state(llm):
    ids = llm.tokenize(b"hello world")
    assert llm.detokenize(ids) == b"hello world" and all(isinstance(i, int) for i in ids)
    assert llm.tokenize("<|im_end|>".encode(), add_bos=False, special=True) != llm.tokenize(b"<|im_end|>", False)
    assert llm.n_ctx() == 2048 and llm.n_vocab() > 1000 and llm.token_eos() >= 0
    assert isinstance(llm.token_bos(), int) and isinstance(llm.token_nl(), int)
    assert llm.metadata["general.architecture"] == "qwen35"
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in llm.metadata.items())
    with pytest.raises(ValueError, match="invalid token id"):
        llm.detokenize([llm.n_vocab()])
    a = llm(PROMPT, max_tokens=12, temperature=0)["choices"][0]["text"]
    llm.reset()
    assert llm(PROMPT, max_tokens=12, temperature=0)["choices"][0]["text"] == a
    toks = []
    for t in llm.generate(llm.tokenize(PROMPT.encode(), special=True), temp=0):
        toks.append(t)
        if len(toks) == 12:
            break
    assert llm.detokenize(toks).decode() == a
    # a stream left unfinished does not block the next call
    it = llm(PROMPT, max_tokens=30, temperature=0, stream=True)
    next(it)
    assert llm(PROMPT, max_tokens=12, temperature=0)["choices"][0]["text"] == a


def test_sampling_params(llm):
    kw = dict(max_tokens=16, temperature=0.9, top_p=0.9, top_k=20, min_p=0.02, typical_p=0.95, repeat_penalty=1.1,
              presence_penalty=0.1, frequency_penalty=0.1, seed=5)
    a = llm(PROMPT, **kw)["choices"][0]["text"]
    assert llm(PROMPT, **kw)["choices"][0]["text"] == a  # fixed seed: reproducible
    r = llm(PROMPT, max_tokens=40, temperature=0, stop=["\n"])
    assert "\n" not in r["choices"][0]["text"] and r["choices"][0]["finish_reason"] == "stop"
    full = llm(PROMPT, max_tokens=40, temperature=0)["choices"][0]["text"]
    assert full.startswith(r["choices"][0]["text"] + "\n")
    e = llm(PROMPT, max_tokens=8, temperature=0, echo=True)["choices"][0]["text"]
    assert e == PROMPT + llm(PROMPT, max_tokens=8, temperature=0)["choices"][0]["text"]
    first = llm.tokenize(full[:3].encode(), add_bos=False)[0]
    banned = llm(PROMPT, max_tokens=4, temperature=0, logit_bias={first: -100.0})["choices"][0]["text"]
    assert not banned.startswith(full[:3])
    ids = llm.tokenize(PROMPT.encode(), special=True)
    assert llm(ids, max_tokens=8, temperature=0)["choices"][0]["text"] == e[len(PROMPT):]  # token-id prompt


@pytest.mark.parametrize("kwargs,exc,name", [
    ({"lora_path": "x.bin"}, ValueError, "lora_path"), ({"embedding": True}, ValueError, "embedding"),
    ({"draft_model": object()}, ValueError, "draft_model"), ({"type_k": 8}, ValueError, "type_k"),
    ({"bogus_arg": 1}, TypeError, "bogus_arg"), ({"chat_format": "nope"}, ValueError, "chat_format"),
    ({"spec_type": "draft-eagle3"}, ValueError, "spec_type")])
def test_unsupported_constructor_args(kwargs, exc, name):
    with pytest.raises(exc, match=name):
        Llama(model_path=MODEL, verbose=False, **kwargs)


def test_gpu_args_warn():
    with pytest.warns(RuntimeWarning, match="n_gpu_layers=-1"):
        Llama(model_path=MODEL, n_gpu_layers=-1, verbose=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Llama(model_path=MODEL, n_gpu_layers=0, use_mmap=True, verbose=False)  # defaults: silent


@pytest.mark.parametrize("call,exc,name", [
    (lambda l: l(PROMPT, suffix="x"), ValueError, "suffix"),
    (lambda l: l(PROMPT, tfs_z=0.5), ValueError, "tfs_z"),
    (lambda l: l(PROMPT, stopping_criteria=[len]), ValueError, "stopping_criteria"),
    (lambda l: l(PROMPT, logits_processor=[len]), ValueError, "logits_processor"),
    (lambda l: l(PROMPT, grammar=object()), TypeError, "grammar"),
    (lambda l: l(PROMPT, grammar="root ::= nope"), ValueError, "grammar"),
    (lambda l: l(PROMPT, echo=True, logprobs=2), ValueError, "echo"),
    (lambda l: l(PROMPT, logprobs=True), ValueError, "logprobs"),
    (lambda l: l(PROMPT, stop=[1]), ValueError, "stop"),
    (lambda l: l(" x1" * 3000), ValueError, "exceed context window"),
    (lambda l: l([10 ** 9]), ValueError, "invalid token id"),
    (lambda l: l.create_chat_completion(MSGS, tools=[{"type": "function"}]), ValueError, "tools"),
    (lambda l: l.create_chat_completion(MSGS, tool_choice="required"), ValueError, "tool_choice"),
    (lambda l: l.create_chat_completion(MSGS, functions=[{}]), NotImplementedError, "functions"),
    (lambda l: l.create_chat_completion(MSGS, response_format={"type": "bogus"}), ValueError, "response_format"),
    (lambda l: l.create_chat_completion([{"content": "x"}]), ValueError, "role"),
    (lambda l: l.generate([1, 2], penalize_nl=False), ValueError, "penalize_nl"),
])
def test_unsupported_call_args(llm, call, exc, name):
    with pytest.raises(exc, match=name):
        r = call(llm)
        if not isinstance(r, dict):
            next(iter(r))


def test_generation_releases_the_gil(llm):
    """The core decodes with the GIL released: another Python thread keeps running during a long prefill."""
    prompt = llm.tokenize((PROMPT + " return fibonacci(n - 1) + fibonacci(n - 2)\n" * 40).encode())[:1500]
    gaps, done = [], threading.Event()

    def ticker():
        last = time.perf_counter()
        while not done.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    llm.reset()
    th = threading.Thread(target=ticker)
    th.start()
    t0 = time.perf_counter()
    try:
        llm(prompt, max_tokens=4, temperature=0)
    finally:
        done.set()
        th.join()
    total = time.perf_counter() - t0
    assert len(gaps) > 10 and max(gaps) < 0.5 * total, (max(gaps), total)
