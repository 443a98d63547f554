"""The two ways to measure: in-process on pyllm's core, and over HTTP against a llama-server API
(a running server, or one started per n_max from a command line)."""
from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from typing import Optional

from .stats import Run, draft_cap, is_auto, tps


class BenchError(RuntimeError):
    """A user-facing failure: main() prints str(e) as one line and exits 1."""


# ------------------------------------------------------------------------------------------
# in-process

class InProcess:
    """pyllm in this process: one Model, one Generator per setting (spec params are per context). The Generators
    are kept (`gens`), so pyllm-bench can alternate the settings repetition by repetition: all of them then see
    the same machine load, and `auto` keeps what it learned, as on a server."""

    def __init__(self, model_path: str, n_threads: int, spec_type: str, n_ctx: int = 0, n_batch: int = 2048,
                 n_ubatch: int = 512, n_min: int = 0, p_min: float = 0.0, name: str = "pyllm",
                 ngram: Optional[dict] = None, draft_path: str = "", draft_threads: int = 0,
                 spec_opts: Optional[dict] = None, ctx_opts: Optional[dict] = None):
        from ..generation import uses_mtp
        from ..model import Model
        self.ngram = ngram
        self.draft, self.draft_threads = None, draft_threads
        # the rest of the flags' Generator arguments: spec_opts for the speculative settings only (the cheap draft
        # head, --spec-accept), ctx_opts for every setting (the KV cache types)
        self.spec_opts, self.ctx_opts = dict(spec_opts or {}), dict(ctx_opts or {})
        self.name = name
        self.spec_type = spec_type
        self.n_threads = n_threads
        self.n_ctx = n_ctx
        self.n_batch, self.n_ubatch, self.n_min, self.p_min = n_batch, n_ubatch, n_min, p_min
        try:
            self.model = Model(model_path, load_mtp=uses_mtp(spec_type))
            if draft_path and "draft-simple" in spec_type.split(","):
                self.draft = Model(draft_path)
        except (ValueError, OSError, RuntimeError) as e:
            raise BenchError(f"error: failed to load model '{model_path}': {e}")
        self.gen = None
        self.gens: dict = {}  # setting key -> Generator

    @property
    def file_has_mtp(self) -> bool:
        return self.model.file_has_mtp

    @property
    def chat_template(self) -> Optional[str]:
        return self.model.chat_template

    def tokenize(self, text: str) -> list:
        # as llama-server's /completion does for a string prompt: add BOS if the model wants one, parse specials
        return self.model.tokenize(text, True, True)

    def setup(self, n_max: int, synth_len: float = -1.0, synth_rates=()):
        from ..generation import Generator
        spec = self.spec_type if n_max > 0 else "none"
        key = (spec, n_max, synth_len, tuple(synth_rates))
        if key in self.gens:
            self.gen = self.gens[key]
            return
        self.gen = None
        self._evict()
        try:
            self.gen = Generator(self.model, self.n_ctx, 1, n_batch=self.n_batch, n_ubatch=self.n_ubatch,
                                 n_threads=self.n_threads, spec_type=spec, n_max=max(draft_cap(n_max), 1),
                                 n_min=self.n_min, p_min=self.p_min, synth_len=synth_len if n_max > 0 else -1.0,
                                 synth_rates=list(synth_rates) if n_max > 0 else [], ngram=self.ngram,
                                 draft_model=self.draft if n_max > 0 else None, draft_threads=self.draft_threads,
                                 n_max_auto=is_auto(n_max), **(self.spec_opts if n_max > 0 else {}), **self.ctx_opts)
        except (ValueError, RuntimeError) as e:
            raise BenchError(f"error: failed to create a context (n_max={n_max}): {e}")
        self.gens[key] = self.gen

    def _evict(self):
        """Before a new context: drop the oldest kept ones while they hold more than a quarter of the memory
        still available (a full-depth 27B-shaped context holds ~1 GB of recurrent planes; those settings then
        get a fresh context each repetition, the old order's cost, instead of running out of memory)."""
        from ..generation import available_mib
        avail = available_mib()
        while self.gens and avail is not None and \
                sum(g.ctx.memory_bytes for g in self.gens.values()) > avail * 2**20 / 4:
            del self.gens[next(iter(self.gens))]

    def run(self, ids: list, n_predict: int, task: str, n_max: int, rep: int) -> Run:
        from ..generation import Request
        req = Request(prompt=list(ids), sampling={"temperature": 0.0, "ignore_eos": True}, n_predict=n_predict,
                      cache_prompt=False)
        fin = None
        try:
            for ev in self.gen.run(req):
                if ev.kind == "done":
                    fin = ev.data
        except (ValueError, RuntimeError) as e:
            raise BenchError(f"error: generation failed ({task}, n_max={n_max}, {len(ids)} prompt tokens, "
                             f"n_ctx {self.gen.n_ctx}): {e}")
        st, toks = fin["stats"], fin["tokens"]
        per_pos = list(st.get("n_accepted_per_pos") or [])
        return Run(engine=self.name, task=task, n_max=n_max, rep=rep,
                   n_prompt=st["n_prompt"], t_prompt_ms=st["t_prompt_ms"], n_gen=st["n_gen"], t_gen_ms=st["t_gen_ms"],
                   gen_tps=tps(st["n_gen"] - 1, st["t_gen_ms"]), prompt_tps=tps(st["n_prompt"], st["t_prompt_ms"]),
                   n_draft=st.get("n_draft", 0), n_draft_accepted=st.get("n_draft_accepted", 0),
                   n_verif_steps=st.get("n_verif_steps", 0) if n_max > 0 else None,
                   accepted_per_pos=(per_pos[:draft_cap(n_max)] if self.spec_type == "draft-mtp" else per_pos)
                   if n_max > 0 else None,
                   tokens=toks, drafters=_drafters(st) if n_max > 0 and self.spec_type != "draft-mtp" else None)

    def close(self):
        self.gen = None
        self.gens.clear()


# ------------------------------------------------------------------------------------------
# HTTP (llama-server API)

def http_json(url: str, body: Optional[dict] = None, timeout: float = 3600.0):
    """GET (body None) or POST JSON; returns (status, parsed json or text). Raises OSError/URLError when
    the server cannot be reached."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {},
                                 method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        raw = e.read()
        status = e.code
    try:
        return status, json.loads(raw.decode("utf-8", "replace"))
    except ValueError:
        return status, raw.decode("utf-8", "replace")


def _why(e: BaseException) -> str:
    r = getattr(e, "reason", None)
    return str(r if r is not None else e)


class HTTPEngine:
    """One server with llama-server's /completion API."""

    def __init__(self, url: str, name: str = "server"):
        self.url = url.rstrip("/")
        self.name = name
        self._props = None

    def check(self, wait_s: float = 5.0):
        """Raise BenchError when the server is not reachable / not ready within wait_s (503 = loading)."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                status, body = http_json(self.url + "/health", timeout=5)
            except (OSError, urllib.error.URLError) as e:
                raise BenchError(f"error: server {self.url} not reachable: {_why(e)}")
            if status == 200:
                return
            if time.monotonic() > deadline:
                raise BenchError(f"error: server {self.url} not ready: /health returned HTTP {status}")
            time.sleep(0.2)

    def props(self) -> dict:
        if self._props is None:
            try:
                status, body = http_json(self.url + "/props", timeout=10)
                self._props = body if status == 200 and isinstance(body, dict) else {}
            except (OSError, urllib.error.URLError):
                self._props = {}
        return self._props

    def run(self, prompt: str, n_predict: int, task: str, n_max: int, rep: int) -> Run:
        body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "top_k": 1, "cache_prompt": False,
                "return_tokens": True, "ignore_eos": True, "stream": False}
        try:
            status, res = http_json(self.url + "/completion", body)
        except (OSError, urllib.error.URLError) as e:
            raise BenchError(f"error: server {self.url} not reachable: {_why(e)}")
        if status != 200 or not isinstance(res, dict):
            msg = res.get("error", res) if isinstance(res, dict) else res
            if isinstance(msg, dict):
                msg = msg.get("message", msg)
            raise BenchError(f"error: server {self.url} /completion returned HTTP {status}: {str(msg)[:300]}")
        t = res.get("timings") or {}
        if "predicted_per_second" not in t:
            raise BenchError(f"error: server {self.url} /completion response has no timings.predicted_per_second")
        n_gen = int(t.get("predicted_n", 0) or 0)
        toks = res.get("tokens")
        return Run(engine=self.name, task=task, n_max=n_max, rep=rep,
                   n_prompt=int(t.get("prompt_n", 0) or 0), t_prompt_ms=float(t.get("prompt_ms", 0.0) or 0.0),
                   n_gen=n_gen, t_gen_ms=float(t.get("predicted_ms", 0.0) or 0.0),
                   gen_tps=float(t.get("predicted_per_second") or 0.0),
                   prompt_tps=float(t.get("prompt_per_second") or 0.0),
                   n_draft=int(t.get("draft_n", 0) or 0), n_draft_accepted=int(t.get("draft_n_accepted", 0) or 0),
                   tokens=list(toks) if isinstance(toks, list) and toks else None, text=res.get("content"),
                   drafters={k: [int(v.get("draft_n", 0)), int(v.get("draft_n_accepted", 0))]
                             for k, v in (t.get("drafters") or {}).items()} or None)

    def close(self):
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cmd_flag(argv: list, names) -> Optional[str]:
    """The last value of one of the flags `names` in a command line (e.g. -m in a server command)."""
    val = None
    for i, a in enumerate(argv[:-1]):
        if a in names:
            val = argv[i + 1]
    return val


def _drafters(st: dict) -> dict:
    """type -> [drafted, accepted] from the core's per-drafter statistics."""
    return {d["type"]: [int(d["n_draft"]), int(d["n_draft_accepted"])] for d in st.get("drafters") or []}


# the bench's flags that configure the drafters (ngram tables, the draft model of draft-simple): passed on to the
# server commands as given, for the speculative settings only (the baseline runs without a draft model)
NGRAM_FLAGS_WITH_VALUE = ("-lcs", "--lookup-cache-static", "-lcd", "--lookup-cache-dynamic",
                          "-md", "--spec-draft-model", "--model-draft", "-td", "--threads-draft", "--spec-draft-threads")


def ngram_argv(argv: list) -> list:
    """The --spec-ngram-* / -lcs / -lcd / -md / -td (with their values) and --spec-default flags of a bench command
    line."""
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        k = a.replace("_", "-") if a.startswith("--") else a
        if (k.startswith("--spec-ngram-") or k in NGRAM_FLAGS_WITH_VALUE) and i + 1 < len(argv):
            out += [a, argv[i + 1]]
            i += 1
        elif k == "--spec-default":
            out.append(a)
        i += 1
    return out


def spec_flags(spec_type: str, n_max: int, synth_len: float = -1.0, synth_rates=(), ngram=()) -> list:
    if n_max <= 0:
        return []
    from .stats import n_max_flag
    f = ["--spec-type", spec_type, "--spec-draft-n-max", n_max_flag(n_max)] + list(ngram)
    if synth_len != -1.0:
        f += ["--spec-synth-len", repr(float(synth_len))]
    if synth_rates:
        f += ["--spec-synth-rates", ",".join(repr(float(r)) for r in synth_rates)]
    return f


class ServerProcess(HTTPEngine):
    """A server started from a command line, once per setting, on 127.0.0.1 and a free port."""

    def __init__(self, cmd: str, name: str, startup_timeout: float = 600.0):
        super().__init__("http://127.0.0.1:0", name)
        self.cmd = cmd
        self.argv = shlex.split(cmd)
        if not self.argv:
            raise BenchError("error: empty --server-cmd")
        self.startup_timeout = startup_timeout
        self.proc = None
        self.log = None

    def start(self, extra: list, what: str):
        self.stop()
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self._props = None
        argv = self.argv + ["--host", "127.0.0.1", "--port", str(port)] + list(extra)
        if self.log is not None:
            self.log.close()
        self.log = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        except OSError as e:
            raise BenchError(f"error: cannot start server command for {self.name} ({what}): {argv[0]}: "
                             f"{e.strerror or e}")
        deadline = time.monotonic() + self.startup_timeout
        while True:
            rc = self.proc.poll()
            if rc is not None:
                tail = self.tail()
                self.stop()
                raise BenchError(f"error: server command for {self.name} exited with code {rc} before it was ready "
                                 f"({what}; flags: {' '.join(extra) or 'none'}): {tail}")
            try:
                status, _ = http_json(self.url + "/health", timeout=2)
                if status == 200:
                    return
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                tail = self.tail()
                self.stop()
                raise BenchError(f"error: server command for {self.name} not ready after {self.startup_timeout:.0f} s "
                                 f"({what}): {tail}")
            time.sleep(0.1)

    def tail(self, n: int = 4) -> str:
        if self.log is None:
            return ""
        try:
            self.log.seek(0)
            lines = [ln.strip() for ln in self.log.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        return " | ".join(lines[-n:]) if lines else "(no output)"

    def stop(self):
        p, self.proc = self.proc, None
        if p is not None and p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def close(self):
        self.stop()
        if self.log is not None:
            self.log.close()
            self.log = None


def default_engine_name(cmd: str) -> str:
    argv = shlex.split(cmd)
    if not argv:
        return "server"
    exe = os.path.basename(argv[0])
    if exe.startswith("python") and "-m" in argv:
        mod = cmd_flag(argv[:3], ("-m",)) or ""
        if mod.startswith("pyllm"):
            return "pyllm-server"
    if "llama-server" in exe:
        return "llama.cpp"
    return exe
