"""Accepted flags pyllm does not implement warn at startup (never silently dropped); --chat-template checked as
llama-server checks it; --embeddings says embeddings are not implemented; n > 1 without a seed samples each choice
independently."""
import subprocess
import sys

import pytest

from pyllm.args import ArgError, check_supported, noop_notice, parse_args
from server_util import ROOT, Server, free_port

UNIMPLEMENTED = [(["--mlock"], "--mlock"), (["--cache-reuse", "256"], "--cache-reuse"),
                 (["--context-shift"], "--context-shift"), (["-ctk", "q5_1"], "--cache-type-k"),
                 (["-ctv", "iq4_nl"], "--cache-type-v")]


@pytest.mark.parametrize("argv,name", UNIMPLEMENTED)
def test_unimplemented_flag_warns(argv, name):
    note = noop_notice(parse_args(argv, "server"))
    assert note and "ignoring" in note and name in note
    assert noop_notice(parse_args([], "server")) is None
    # the default value of each is accepted without a warning
    assert noop_notice(parse_args(["--cache-reuse", "0", "--no-context-shift", "-ctk", "f16"], "server")) is None


def test_conversation_flag_warns():
    note = noop_notice(parse_args(["-cnv"], "generate"))
    assert note and "ignoring" in note and "--conversation" in note
    assert noop_notice(parse_args(["-no-cnv"], "generate")) is None


def test_cli_prints_the_warning():
    p = subprocess.run([sys.executable, "-m", "pyllm.cli.main", "generate", "-cnv", "--mlock", "-p", "Hi", "-n", "2"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "ignoring options: --mlock, --conversation" in p.stderr


@pytest.mark.parametrize("value,ok", [("chatml", True), ("llama3", True), ("no-such-template", False),
                                      ("{{ broken", False),
                                      ("{% for m in messages %}{{ m.content }}{% endfor %}", True)])
def test_chat_template_checked(value, ok):
    p = parse_args(["--chat-template", value], "server")
    if ok:
        check_supported(p)
    else:
        with pytest.raises(ArgError, match="the supplied chat template is not supported"):
            check_supported(p)


def test_server_unknown_chat_template_exits_1():
    p = subprocess.run([sys.executable, "-m", "pyllm.server", "--port", str(free_port()),
                        "--chat-template", "no-such-template"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert "error: the supplied chat template is not supported: no-such-template" in p.stderr


@pytest.fixture(scope="module")
def srv():
    s = Server("-c", "2048", "-np", "4", "--mlock", "--no-mmap", "--context-shift", "--cache-reuse", "64",
               "-ctk", "q5_1", "--embeddings")
    yield s
    s.stop()


def test_server_warns_and_embeddings_say_not_implemented(srv):
    out = srv.output()
    assert "ignoring options: --mlock, --cache-reuse, --context-shift, --cache-type-k" in out
    assert "model weights: " in out and "read into memory" in out  # --no-mmap
    assert "pyllm does not implement embeddings" in out
    for path in ("/embedding", "/v1/embeddings"):
        r = srv.post(path, {"input": "hello"})
        assert r.status_code == 501 and "not supported by pyllm" in r.json()["error"]["message"]
    # --cache-reuse is ignored: requests still work (their n_cache_reuse default is 0)
    assert srv.post("/completion", {"prompt": "Hi", "n_predict": 2}).status_code == 200


def _choices(srv, **kw):
    body = {"prompt": "Once upon a time", "n_predict": 16, "temperature": 1.5, "top_k": 0, "top_p": 1.0,
            "min_p": 0.0, "n": 4, **kw}
    r = srv.post("/v1/completions", body)
    assert r.status_code == 200, r.text
    return [c["text"] for c in sorted(r.json()["choices"], key=lambda c: c["index"])]


def test_n_without_seed_samples_independently(srv):
    texts = _choices(srv)
    assert len(set(texts)) > 1, texts
    # with a seed: choice j uses seed + j, reproducibly
    a, b = _choices(srv, seed=11), _choices(srv, seed=11)
    assert a == b and len(set(a)) > 1
    assert _choices(srv, seed=12, n=1)[0] == a[1]
