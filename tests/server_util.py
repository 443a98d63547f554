"""Start pyllm-server as a subprocess and talk HTTP to it.

By default the server runs the REAL core on the shipped default model (models/*.gguf, picked by the server itself
when no -m is given); PYLLM_TEST_MODEL=/path/model.gguf overrides it. Server(..., fake=True) runs the fake core
(tests/fake_core.py, through tests/fake_server.py) for the few tests that need deterministic fake behaviour."""
import concurrent.futures as cf
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_model_path() -> str:
    ggufs = sorted((ROOT / "models").glob("*.gguf"))
    assert ggufs, "the shipped default model models/*.gguf is missing"
    return str(ggufs[0])


def fake_model_path() -> str:
    p = Path(tempfile.gettempdir()) / "pyllm-fake-model.gguf"
    if not p.exists():
        p.write_bytes(b"GGUF")
    return str(p)


class Server:
    def __init__(self, *args, env=None, wait=True, timeout=60, fake=False):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        model = os.environ.get("PYLLM_TEST_MODEL")
        e = dict(os.environ)
        entry = ["-m", "pyllm.server"]
        if fake:
            entry = [str(ROOT / "tests" / "fake_server.py")]
            model = fake_model_path()
        e.update(env or {})
        argv = [sys.executable, *entry, "--host", "127.0.0.1", "--port", str(self.port)]
        if "-m" not in args and model:  # no -m: the server serves the shipped default model
            argv += ["-m", model]
        argv += [str(a) for a in args]
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=e, stdout=self.log, stderr=subprocess.STDOUT)
        if wait:
            self.wait_ready(timeout)

    def wait_ready(self, timeout=60):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError(self.output())

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()

    def post(self, path, json=None, **kw):
        return httpx.post(self.url + path, json=json, timeout=kw.pop("timeout", 60), **kw)

    def rss_kb(self) -> int:
        """VmRSS of the server process (kB)."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def get(self, path, **kw):
        return httpx.get(self.url + path, timeout=kw.pop("timeout", 60), **kw)

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.stop()


# the Qwen3.5 chat template the agent tests (tools, reasoning, /v1/responses, request fields) run with
QWEN35_TEMPLATE = Path(__file__).parent / "data" / "templates" / "qwen3.5.jinja"


def agent_server() -> Server:
    """The server those tests share: 2 slots, the Qwen3.5 template through jinja, deepseek reasoning format."""
    return Server("-c", "4096", "-np", "2", "--jinja", "--chat-template-file", str(QWEN35_TEMPLATE),
                  "--reasoning-format", "deepseek")


def concurrently(fn, args: list) -> list:
    """fn(a) for every a of args, all at once (one thread each); the results in args' order."""
    with cf.ThreadPoolExecutor(len(args)) as ex:
        return list(ex.map(fn, args))


def sse_events(resp):
    """Parse an SSE httpx streaming response into a list of JSON objects (and "[DONE]")."""
    import json
    out = []
    for line in resp.iter_lines():
        if line.startswith("data: "):
            d = line[6:]
            out.append(d if d == "[DONE]" else json.loads(d))
    return out
