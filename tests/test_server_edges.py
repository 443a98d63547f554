"""The server's edges over real processes: a port already in use (exit 1, one clear line), a bounded request body
(413, the server keeps serving), SIGINT/SIGTERM with a stream in flight (the stream ends with its final event, the
process exits within seconds)."""
import json
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from server_util import ROOT, Server, free_port


def test_port_in_use_exits_1_with_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        t0 = time.time()
        p = subprocess.run([sys.executable, "-m", "pyllm.server", "--host", "127.0.0.1", "--port", str(port)],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stderr
    assert time.time() - t0 < 30
    err = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(err) == 1, p.stderr
    assert "couldn't bind HTTP server socket" in err[0] and str(port) in err[0] and "in use" in err[0]
    assert "leak" not in p.stderr + p.stdout and "Traceback" not in p.stderr


@pytest.fixture(scope="module")
def srv():
    s = Server("-c", "2048", "-np", "2", "--metrics")
    yield s
    s.stop()


def _head(port, path):
    with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
        c.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nOrigin: http://example.com\r\nConnection: close\r\n\r\n"
                  .encode())
        out = b""
        while b"\r\n\r\n" not in out:
            out += c.recv(65536)
    return out.split(b"\r\n\r\n")[0].decode().split("\r\n")[1:]


def test_header_names_spelled_as_llama_server(srv):
    """uvicorn/starlette lowercase header names; llama-server (cpp-httplib) sends them capitalized."""
    names = [h.split(":")[0] for h in _head(srv.port, "/health")]
    assert "Server" in names and "Content-Type" in names and "Content-Length" in names
    assert "Access-Control-Allow-Origin" in names
    assert all(n[0].isupper() for n in names), names
    hs = _head(srv.port, "/metrics")
    start = [h for h in hs if h.startswith("Process-Start-Time-Unix: ")]
    assert start and abs(int(start[0].split(": ")[1]) - time.time()) < 3600
    assert "Server: llama.cpp" in hs


def _raw(port, head: bytes, body: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
        c.sendall(head)
        try:
            c.sendall(body)
        except OSError:
            pass  # the server may answer and close before reading all of it
        out = b""
        while True:
            try:
                d = c.recv(65536)
            except OSError:
                break
            if not d:
                break
            out += d
            if b"\r\n\r\n" in out and b"}" in out:
                break
        return out


def test_body_too_large_413_keeps_serving(srv):
    from pyllm.server.state import MAX_BODY
    # a Content-Length above the bound: refused before the body is read
    head = (f"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {MAX_BODY + 1}\r\n\r\n").encode()
    t0 = time.time()
    out = _raw(srv.port, head, b"{" + b" " * (1 << 20))
    assert out.startswith(b"HTTP/1.1 413"), out[:200]
    assert b"Request body too large" in out and time.time() - t0 < 10
    # a chunked body (no Content-Length) is counted as it arrives
    chunk = b"x" * (1 << 20)

    def gen():
        yield b'{"prompt": "'
        for _ in range(MAX_BODY // len(chunk) + 2):
            yield chunk
        yield b'"}'
    try:
        r = httpx.post(srv.url + "/completion", content=gen(), timeout=60)
        assert r.status_code == 413 and "too large" in r.json()["error"]["message"]
    except httpx.TransportError:
        pass  # the server answered 413 and closed while the client still sent
    assert srv.get("/health").status_code == 200
    r = srv.post("/completion", {"prompt": "Hello", "n_predict": 4})
    assert r.status_code == 200 and r.json()["tokens_predicted"] == 4


@pytest.mark.parametrize("sig,route", [(signal.SIGTERM, "/v1/chat/completions"), (signal.SIGINT, "/completion")])
def test_signal_ends_streams_and_exits(sig, route):
    s = Server("-c", "8192", "-np", "2")
    try:
        body = {"stream": True, "n_predict": 6000, "ignore_eos": True, "temperature": 0.0}
        if route == "/completion":
            body["prompt"] = "Once upon a time"
        else:
            body["messages"] = [{"role": "user", "content": "Tell me a long story."}]
        events, got_some, err = [], threading.Event(), []

        def reader():
            try:
                with httpx.stream("POST", s.url + route, json=body, timeout=60) as r:
                    for ln in r.iter_lines():
                        if ln.startswith("data: "):
                            events.append(ln[6:])
                            if len(events) >= 5:
                                got_some.set()
            except Exception as e:  # noqa: BLE001
                err.append(e)
            got_some.set()
        th = threading.Thread(target=reader)
        th.start()
        assert got_some.wait(60) and not err, err
        t0 = time.time()
        s.proc.send_signal(sig)
        th.join(15)
        assert not th.is_alive() and not err, err
        rc = s.proc.wait(15)
        assert time.time() - t0 < 10, "the server took too long to exit"
        assert rc == 0, s.output()
        if route == "/completion":
            last = json.loads(events[-1])
            assert last["stop"] is True and last["stop_type"] == "limit" and last["tokens_predicted"] < 6000
        else:
            assert events[-1] == "[DONE]"
            last = json.loads(events[-2])
            assert last["choices"][0]["finish_reason"] == "length"
        with pytest.raises(httpx.TransportError):
            httpx.get(s.url + "/health", timeout=2)
        assert "leak" not in s.output()
    finally:
        s.stop()


def test_several_hosts_and_unix_socket(tmp_path):
    """--host takes comma-separated addresses (and paths ending in .sock), as llama-server."""
    sock = str(tmp_path / "pyllm.sock")
    s = Server("--host", f"127.0.0.1, 127.0.0.2,{sock}", "-c", "1024", "-np", "1")
    try:
        for h in ("127.0.0.1", "127.0.0.2"):
            assert httpx.get(f"http://{h}:{s.port}/health", timeout=5).status_code == 200
        with httpx.Client(transport=httpx.HTTPTransport(uds=sock)) as c:
            r = c.post("http://x/completion", json={"prompt": "Hi", "n_predict": 2}, timeout=30)
            assert r.status_code == 200 and r.json()["tokens_predicted"] == 2
        out = s.output()
        assert f"listening on http://127.0.0.2:{s.port}" in out and f"listening on unix://{sock}" in out
    finally:
        s.stop()
    assert not (tmp_path / "pyllm.sock").exists()  # removed at exit
    p = subprocess.run([sys.executable, "-m", "pyllm.server", "--host", " , ", "--port", str(free_port())],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "--host requires at least one address" in p.stderr
