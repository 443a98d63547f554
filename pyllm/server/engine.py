"""Async-safe wrapper around the C++ core: ONE worker thread owns the `_core.Context`.

The asyncio side submits `Task`s and reads `Event`s from a per-task asyncio.Queue; the worker
thread assigns tasks to slots (= core sequences), calls `ctx.step()` (GIL released in the core)
while any sequence is active, and turns emitted tokens into text (UTF-8 safe, stop strings held
back), probabilities, timings and metrics. The event loop never computes.
"""
from __future__ import annotations

import asyncio
import codecs
import collections
import importlib.util
import itertools
import math
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .args import Params

from .chat import BUILTIN_TEMPLATES, apply_chat_template as _apply_chat_template, resolve_chat_template

CHATML_TEMPLATE = BUILTIN_TEMPLATES["chatml"]


def apply_chat_template(template, messages, add_generation_prompt=True, bos_token="", eos_token="", tools=None,
                        **extra) -> str:
    """Render `template` (a built-in name or jinja source) with pyllm.chat."""
    return _apply_chat_template(resolve_chat_template(template), messages,
                                add_generation_prompt=add_generation_prompt, bos_token=bos_token,
                                eos_token=eos_token, tools=tools, **extra)


def load_core(name: Optional[str] = None):
    """The core module: pyllm._core, or the test fake when PYLLM_FAKE_CORE is set (test-only switch)."""
    fake = os.environ.get("PYLLM_FAKE_CORE") if name is None else name
    if fake:
        path = Path(fake) if fake not in ("1", "true") else Path(__file__).resolve().parents[1] / "tests" / "fake_core.py"
        spec = importlib.util.spec_from_file_location("pyllm_fake_core", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["pyllm_fake_core"] = mod
        spec.loader.exec_module(mod)
        return mod
    from . import _core
    return _core


# ------------------------------------------------------------------------------------------

@dataclass
class Event:
    kind: str                 # "begin" | "token" | "done" | "error"
    text: str = ""
    tokens: list = field(default_factory=list)
    probs: list = field(default_factory=list)   # completion_probabilities items for this chunk
    data: dict = field(default_factory=dict)



def make_context(core, model, p, n_ctx: int, n_seq: int, n_threads: int, spec: str):
    """The core Context for parsed llama.cpp flags: the one place flags become core parameters."""
    return core.Context(model, n_ctx, n_seq, n_batch=p.n_batch, n_ubatch=p.n_ubatch, n_threads=n_threads,
                        spec_type=spec, n_max=p.spec_draft_n_max, n_min=p.spec_draft_n_min,
                        p_min=p.spec_draft_p_min, synth_len=float(p.spec_synth_len),  # -1 = unset, as upstream
                        synth_rates=[float(x) for x in p.spec_synth_rates])

class EngineError(Exception):
    def __init__(self, message, code=500, type_="server_error", extra=None):
        super().__init__(message)
        self.code = code
        self.type = type_
        self.extra = extra or {}


_task_ids = itertools.count(0)


@dataclass
class Task:
    prompt: list                          # token ids
    params: dict                          # sampling params for the core (llama-server names)
    n_predict: int = -1
    stop: list = field(default_factory=list)
    n_probs: int = 0
    post_sampling_probs: bool = False
    id_slot: int = -1
    cache_prompt: bool = True
    stream: bool = False
    index: int = 0                        # position in a multi-prompt / n>1 request
    params_json: Optional[dict] = None    # task_params JSON shown by /slots
    timings_per_token: bool = False       # partial results carry timings (llama-server's timings_per_token)
    id: int = field(default_factory=lambda: next(_task_ids))
    # filled in by the engine
    queue: Optional[asyncio.Queue] = None
    loop: Optional[asyncio.AbstractEventLoop] = None
    cancelled: bool = False
    slot: int = -1


class _Running:
    """Per-slot generation state, touched only by the worker thread."""

    def __init__(self, task: Task, model):
        self.task = task
        self.model = model
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.text = ""               # generated text (decoded), stop string removed at the end
        self.n_sent = 0              # chars of self.text already delivered
        self.tokens: list = []
        self.n_decoded = 0
        self.probs_pending: list = []  # probs of tokens whose text is not delivered yet
        self.toks_pending: list = []   # ids of tokens whose text is not delivered yet
        self.stop_type = "none"
        self.stopping_word = ""
        self.has_new_line = False
        self.truncated = False
        self.done = False
        self.n_cached = 0
        self.t_first = None
        self.max_stop = max((len(s) for s in task.stop), default=0)


def _partial_stop(text: str, stop: str) -> int:
    """Length of the longest suffix of text that is a proper prefix of stop."""
    for n in range(min(len(stop) - 1, len(text)), 0, -1):
        if text.endswith(stop[:n]):
            return n
    return 0


def _logprob(p: float) -> float:
    return math.log(p) if p > 0 else float("-inf")


class Engine:
    def __init__(self, params: Params, core=None):
        self.params = params
        self.core = core if core is not None else load_core()
        self.model = None
        self.ctx = None
        self.loaded = False
        self.n_slots = max(1, params.n_parallel)
        self._cond = threading.Condition()
        self._pending: collections.deque = collections.deque()
        self._running: dict = {}            # slot -> _Running
        self._slot_tokens = [[] for _ in range(self.n_slots)]   # what each slot's KV holds (for LCP choice)
        self._slot_last_used = [0.0] * self.n_slots
        self._slot_info = [None] * self.n_slots                # last task summary per slot (for /slots)
        self._stop = False
        self._thread: Optional[threading.Thread] = None
        self.t_start = time.time()
        self.n_ctx = 0
        self.n_ctx_slot = 0
        m = self._metrics_zero()
        self.metrics = m
        self._bucket = {"n_prompt": 0, "t_prompt": 0.0, "n_pred": 0, "t_pred": 0.0}

    @staticmethod
    def _metrics_zero():
        return {"prompt_tokens_total": 0, "prompt_tokens_cached_total": 0, "prompt_seconds_total": 0.0,
                "tokens_predicted_total": 0, "tokens_predicted_seconds_total": 0.0, "n_decode_total": 0,
                "n_busy_slots_total": 0, "n_tokens_max": 0, "spec_decode_num_draft_tokens_total": 0,
                "spec_decode_num_accepted_tokens_total": 0, "spec_decode_num_drafts_total": 0,
                "accepted_per_pos": [], "spec_seen": False}

    # ---------------------------------------------------------------- lifecycle
    def load(self):
        p = self.params
        spec = p.spec_type if p.speculative else "none"
        n_threads = p.n_threads if p.n_threads > 0 else max(1, min(os.cpu_count() or 1, 4))
        self.model = self.core.Model(p.model, load_mtp=(spec == "draft-mtp"))
        n_ctx = p.n_ctx if p.n_ctx > 0 else int(getattr(self.model, "n_ctx_train", 4096) or 4096)
        self.n_ctx = n_ctx
        self.ctx = make_context(self.core, self.model, p, n_ctx, self.n_slots, n_threads, spec)
        self.n_ctx_slot = int(getattr(self.ctx, "n_ctx_seq", n_ctx // self.n_slots))
        self.spec = spec
        self.loaded = True
        self._thread = threading.Thread(target=self._worker, name="pyllm-engine", daemon=True)
        self._thread.start()

    def close(self):
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)

    # ---------------------------------------------------------------- asyncio side
    def submit(self, task: Task, queue: Optional[asyncio.Queue] = None) -> asyncio.Queue:
        task.loop = asyncio.get_running_loop()
        task.queue = queue if queue is not None else asyncio.Queue()
        with self._cond:
            self._pending.append(task)
            self._cond.notify_all()
        return task.queue

    def cancel(self, task: Task):
        with self._cond:
            task.cancelled = True
            self._cond.notify_all()

    def _emit(self, task: Task, ev: Event):
        if task.loop is not None and not task.cancelled:
            ev.data.setdefault("index", task.index)
            try:
                task.loop.call_soon_threadsafe(task.queue.put_nowait, ev)
            except RuntimeError:  # loop closed
                task.cancelled = True

    # ---------------------------------------------------------------- worker thread
    def _pick_slot(self, task: Task, busy: set) -> int:
        if task.id_slot is not None and task.id_slot >= 0:
            return task.id_slot if task.id_slot not in busy else -1
        best, best_lcp = -1, -1
        for s in range(self.n_slots):
            if s in busy:
                continue
            held = self._slot_tokens[s]
            n = 0
            lim = min(len(held), len(task.prompt))
            while n < lim and held[n] == task.prompt[n]:
                n += 1
            if n > best_lcp or (n == best_lcp and self._slot_last_used[s] < self._slot_last_used[best]):
                best, best_lcp = s, n
        return best

    def _assign(self):
        """Under the lock: drop cancelled tasks, start queued tasks on free slots (FIFO)."""
        for slot, run in list(self._running.items()):
            if run.task.cancelled:
                try:
                    self.ctx.seq_end(slot)
                except Exception:
                    pass
                self._finish_slot(slot, run, deliver=False)
        if not self._pending:
            return
        busy = set(self._running)
        keep = collections.deque()
        while self._pending:
            task = self._pending.popleft()
            if task.cancelled:
                continue
            slot = self._pick_slot(task, busy)
            if slot < 0:
                keep.append(task)
                continue
            params = dict(task.params)
            params["n_predict"] = task.n_predict
            params["n_probs"] = task.n_probs
            params["cache_prompt"] = task.cache_prompt
            try:
                if not task.cache_prompt:  # the core always reuses the common prefix: drop it first
                    self.ctx.seq_clear(slot)
                    self._slot_tokens[slot] = []
                n_cached = self.ctx.seq_begin(self.model, slot, task.prompt, params)
            except (ValueError, IndexError) as e:
                self._emit(task, Event("error", data={"code": 400, "type": "invalid_request_error", "message": str(e)}))
                continue
            except Exception as e:  # pragma: no cover
                self._emit(task, Event("error", data={"code": 500, "type": "server_error", "message": str(e)}))
                continue
            task.slot = slot
            run = _Running(task, self.model)
            run.n_cached = int(n_cached)
            run.t_begin = time.perf_counter()
            self._running[slot] = run
            busy.add(slot)
            self._slot_tokens[slot] = list(task.prompt)
            self._slot_last_used[slot] = time.time()
            self._slot_info[slot] = {"id_task": task.id, "n_prompt_tokens": len(task.prompt),
                                     "n_prompt_tokens_cache": run.n_cached,
                                     "n_prompt_tokens_processed": len(task.prompt) - run.n_cached,
                                     "params": task.params_json or task.params, "n_predict": task.n_predict}
            self._emit(task, Event("begin", data={"id_slot": slot, "n_cached": run.n_cached}))
        self._pending = keep

    def _worker(self):
        while True:
            with self._cond:
                self._assign()
                while not self._stop and not self._running:
                    self._cond.wait()
                    self._assign()
                if self._stop:
                    return
                n_busy = len(self._running)
            try:
                results = self.ctx.step()
            except Exception as e:  # a failed decode ends every running task with an error
                with self._cond:
                    for slot, run in list(self._running.items()):
                        try:
                            self.ctx.seq_end(slot)
                        except Exception:
                            pass
                        self._emit(run.task, Event("error", data={"code": 500, "type": "server_error",
                                                                  "message": str(e)}))
                        del self._running[slot]
                continue
            try:
                g = self.ctx.global_stats()
            except Exception:
                g = None
            with self._cond:
                self.metrics["n_decode_total"] += 1
                self.metrics["n_busy_slots_total"] += n_busy
                if g is not None:
                    self._apply_global_stats(g)
                for r in results:
                    slot = r["seq"]
                    run = self._running.get(slot)
                    if run is None:
                        continue
                    if run.task.cancelled:
                        try:
                            self.ctx.seq_end(slot)
                        except Exception:
                            pass
                        self._finish_slot(slot, run, deliver=False)
                        continue
                    self._on_result(slot, run, r)

    def _apply_global_stats(self, g: dict):
        """llamacpp:spec_decode_* counters come from the core's global statistics."""
        m = self.metrics
        m["spec_decode_num_draft_tokens_total"] = int(g.get("n_draft", 0) or 0)
        m["spec_decode_num_accepted_tokens_total"] = int(g.get("n_draft_accepted", 0) or 0)
        m["spec_decode_num_drafts_total"] = int(g.get("n_drafts", 0) or 0)
        if self.spec != "none":
            m["accepted_per_pos"] = [int(v) for v in (g.get("n_accepted_per_pos") or [])]
            m["spec_seen"] = True

    def _on_result(self, slot: int, run: _Running, r: dict):
        task = run.task
        model = self.model
        toks = r.get("tokens") or []
        probs = r.get("probs") or [None] * len(toks)
        new_text = ""
        stop_now = False
        run.toks_pending.extend(toks)
        if toks and run.t_first is None:
            run.t_first = time.perf_counter()
        for i, tok in enumerate(toks):
            run.tokens.append(tok)
            self._slot_tokens[slot].append(tok)
            run.n_decoded += 1
            piece = b"" if model.is_eog(tok) else model.token_to_piece(tok, False)
            s = run.decoder.decode(piece)
            run.text += s
            new_text += s
            if task.n_probs > 0:
                run.probs_pending.append(self._prob_entry(tok, probs[i] if i < len(probs) else None, task))
            # stop strings: search the freshly extended tail
            if task.stop:
                pos = self._find_stop(run, len(s) + len(piece))
                if pos is not None:
                    stop_now = True
                    break
        done = bool(r.get("done")) or stop_now
        if stop_now:
            try:
                self.ctx.seq_end(slot)
            except Exception:
                pass
        elif done:
            run.text += run.decoder.decode(b"", final=True)
            reason = r.get("stop")
            if reason == "eos":
                run.stop_type = "eos"
            else:
                run.stop_type = "limit"
                if reason == "ctx":
                    run.truncated = True
        # what can be sent now: hold back a partial stop-string at the end
        end = len(run.text)
        if not done and task.stop:
            hold = max(_partial_stop(run.text, s) for s in task.stop)
            end = max(run.n_sent, end - hold)
        chunk = run.text[run.n_sent:end]
        if "\n" in chunk:
            run.has_new_line = True
        if chunk:
            pr = []
            if task.n_probs > 0:
                pr, run.probs_pending = run.probs_pending, []
            run.n_sent = end
            sent_toks, run.toks_pending = run.toks_pending, []
            data = {"n_decoded": run.n_decoded}
            if task.timings_per_token:
                try:
                    st = dict(self.ctx.seq_stats(slot))
                except Exception:
                    st = {}
                if run.t_first is not None and not float(st.get("t_gen_ms", 0) or 0):
                    st["t_gen_ms"] = (time.perf_counter() - run.t_first) * 1e3
                data["timings"] = self._timings(run, st)
            self._emit(task, Event("token", text=chunk, tokens=sent_toks, probs=pr, data=data))
        if done:
            self._finish_slot(slot, run, deliver=True)

    def _find_stop(self, run: _Running, tail: int) -> Optional[int]:
        text = run.text
        start = max(0, len(text) - run.max_stop - tail)
        best = None
        for s in run.task.stop:
            if not s:
                continue
            pos = text.find(s, start)
            if pos >= 0 and (best is None or pos < best[0]):
                best = (pos, s)
        if best is None:
            return None
        pos, s = best
        run.text = text[:pos]
        run.n_sent = min(run.n_sent, pos)
        run.stop_type = "word"
        run.stopping_word = s
        return pos

    def _prob_entry(self, tok: int, pr: Optional[dict], task: Task) -> dict:
        model = self.model

        def tok_info(tid):
            b = model.token_to_piece(tid, True)
            return b.decode("utf-8", "replace"), list(b)

        t, b = tok_info(tok)
        if task.post_sampling_probs:
            p = pr["p"] if pr else 1.0
            top = [{"id": i, "token": tok_info(i)[0], "bytes": tok_info(i)[1], "prob": q}
                   for i, q in (pr["top"] if pr else [])]
            return {"id": tok, "token": t, "bytes": b, "prob": p, "top_probs": top}
        p = pr["p"] if pr else 1.0
        top = [{"id": i, "token": tok_info(i)[0], "bytes": tok_info(i)[1], "logprob": _logprob(q)}
               for i, q in (pr["top"] if pr else [])]
        return {"id": tok, "token": t, "bytes": b, "logprob": _logprob(p), "top_logprobs": top}

    def _finish_slot(self, slot: int, run: _Running, deliver: bool):
        self._running.pop(slot, None)
        self._slot_last_used[slot] = time.time()
        try:
            st = self.ctx.seq_stats(slot)
        except Exception:
            st = {}
        timings = self._timings(run, st)
        info = self._slot_info[slot] or {}
        info["n_decoded"] = run.n_decoded
        # metrics (aggregated when a slot finishes, as llama-server's metrics_on_prediction)
        m = self.metrics
        m["prompt_tokens_total"] += timings["prompt_n"]
        m["prompt_tokens_cached_total"] += timings["cache_n"]
        m["prompt_seconds_total"] += timings["prompt_ms"] / 1e3
        m["tokens_predicted_total"] += run.n_decoded
        m["tokens_predicted_seconds_total"] += timings["predicted_ms"] / 1e3
        m["n_tokens_max"] = max(m["n_tokens_max"], len(self._slot_tokens[slot]))
        self._bucket["n_prompt"] += timings["prompt_n"]
        self._bucket["t_prompt"] += timings["prompt_ms"]
        if run.n_decoded > 1:
            self._bucket["n_pred"] += run.n_decoded - 1
            self._bucket["t_pred"] += timings["predicted_ms"]
        t = timings
        log(f"id {slot:2d} | task {run.task.id} | \n"
            f"prompt eval time = {t['prompt_ms']:10.2f} ms / {t['prompt_n']:5d} tokens "
            f"({t['prompt_per_token_ms']:8.2f} ms per token, {t['prompt_per_second']:8.2f} tokens per second)\n"
            f"       eval time = {t['predicted_ms']:10.2f} ms / {t['predicted_n']:5d} tokens "
            f"({t['predicted_per_token_ms']:8.2f} ms per token, {t['predicted_per_second']:8.2f} tokens per second)\n"
            f"      total time = {t['prompt_ms'] + t['predicted_ms']:10.2f} ms / {t['prompt_n'] + t['predicted_n']:5d} tokens",
            "slot", "print_timing")
        if self.spec != "none" and int(st.get("n_verif_steps", 0) or 0) > 0:
            m["spec_seen"] = True
            try:
                line = self.ctx.acceptance_line(slot)
            except Exception:
                line = ""
            if line:
                log(f"id {slot:2d} | task {run.task.id} | {line}", "slot", "print_timing")
        if not deliver:
            return
        final = {
            "id_slot": slot, "text": run.text, "tokens": list(run.tokens), "n_decoded": run.n_decoded,
            "n_prompt": len(run.task.prompt), "n_cached": timings["cache_n"], "stop_type": run.stop_type,
            "stopping_word": run.stopping_word, "has_new_line": run.has_new_line or "\n" in run.text,
            "truncated": run.truncated, "timings": timings,
            "probs_tail": [] if run.stop_type == "word" else list(run.probs_pending),
        }
        self._emit(run.task, Event("done", data=final))

    def _timings(self, run: _Running, st: dict) -> dict:
        n_prompt_total = len(run.task.prompt)
        cache_n = int(st.get("n_cached", run.n_cached))
        prompt_n = max(0, int(st.get("n_prompt", n_prompt_total)) - cache_n)
        prompt_ms = float(st.get("t_prompt_ms", 0.0) or 0.0)
        n = run.n_decoded
        pred_ms = float(st.get("t_gen_ms", 0.0) or 0.0)
        if n > 0:
            pred_ms = max(pred_ms, 1e-3)
        t = {
            "cache_n": cache_n,
            "prompt_n": prompt_n,
            "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n > 0 else 0.0,
            "prompt_per_second": 1e3 / prompt_ms * prompt_n if prompt_ms > 0 else 0.0,
            "predicted_n": n,
            "predicted_ms": pred_ms,
            "predicted_per_token_ms": pred_ms / (n - 1) if n > 1 else 0.0,
            "predicted_per_second": 1e3 / pred_ms * (n - 1) if n > 1 and pred_ms > 0 else 0.0,
        }
        n_draft = int(st.get("n_draft", 0) or 0)
        if n_draft > 0 or (self.spec != "none" and int(st.get("n_verif_steps", 0) or 0) > 0):
            t["draft_n"] = n_draft
            t["draft_n_accepted"] = int(st.get("n_draft_accepted", 0) or 0)
        return t

    # ---------------------------------------------------------------- introspection (any thread)
    def slots_json(self) -> list:
        out = []
        with self._cond:
            for s in range(self.n_slots):
                run = self._running.get(s)
                d = {"id": s, "n_ctx": self.n_ctx_slot, "speculative": self.spec != "none",
                     "is_processing": run is not None}
                info = self._slot_info[s]
                if info is not None:
                    n_pred = info.get("n_predict", -1)
                    if run is not None:
                        n_dec = run.n_decoded
                        n_remain = -1 if n_pred < 0 else max(0, n_pred - n_dec)
                        has_next = True
                        nl = run.has_new_line
                    else:
                        n_dec, n_remain, has_next, nl = 0, -1, False, False
                    d.update({"id_task": info["id_task"], "n_prompt_tokens": info["n_prompt_tokens"],
                              "n_prompt_tokens_processed": info["n_prompt_tokens_processed"],
                              "n_prompt_tokens_cache": info["n_prompt_tokens_cache"],
                              "params": info["params"],
                              "next_token": [{"has_next_token": has_next, "has_new_line": nl,
                                              "n_remain": n_remain, "n_decoded": n_dec}]})
                out.append(d)
        return out

    def n_processing(self) -> int:
        with self._cond:
            return len(self._running)

    def n_deferred(self) -> int:
        with self._cond:
            return len(self._pending)

    def metrics_snapshot(self, reset_bucket=True) -> dict:
        with self._cond:
            m = dict(self.metrics)
            m["accepted_per_pos"] = list(self.metrics["accepted_per_pos"])
            b = dict(self._bucket)
            if reset_bucket:
                self._bucket = {"n_prompt": 0, "t_prompt": 0.0, "n_pred": 0, "t_pred": 0.0}
            m["requests_processing"] = len(self._running)
            m["requests_deferred"] = len(self._pending)
        m["prompt_tokens_seconds"] = 1e3 / b["t_prompt"] * b["n_prompt"] if b["t_prompt"] > 0 else 0.0
        m["predicted_tokens_seconds"] = 1e3 / b["t_pred"] * b["n_pred"] if b["t_pred"] > 0 else 0.0
        m["n_busy_slots_per_decode"] = (m["n_busy_slots_total"] / m["n_decode_total"]) if m["n_decode_total"] else 0.0
        return m


# ------------------------------------------------------------------------------------------
# logging in llama-server's shape: "M.SS.mmm.uuu L srv  %12s: msg" on stderr

_T0 = time.monotonic()
_LOG_ENABLED = True
_LOG_VERBOSITY = 3


def configure_log(disable=False, verbosity=3):
    global _LOG_ENABLED, _LOG_VERBOSITY
    _LOG_ENABLED = not disable
    _LOG_VERBOSITY = verbosity


def log(msg: str, tag: str = "srv", func: str = "", level: str = "I"):
    if not _LOG_ENABLED:
        return
    if level == "D" and _LOG_VERBOSITY < 4:
        return
    t = time.monotonic() - _T0
    us = int(t * 1e6)
    ts = f"{us // 60_000_000}.{(us // 1_000_000) % 60:02d}.{(us // 1000) % 1000:03d}.{us % 1000:03d}"
    if func:
        line = f"{ts} {level} {tag}  {func[-12:]:>12}: {msg}"
    else:
        line = f"{ts} {level} {tag} {msg}"
    try:
        print(line, file=sys.stderr, flush=True)
    except Exception:
        pass
