"""The server's scheduler: ONE worker thread owns the Generator (pyllm.generation) and its slots.

The asyncio side submits `Task`s and reads `Event`s from a per-task asyncio.Queue; the worker thread assigns
tasks to slots (= the Generator's sequences, the free one holding the longest common prefix first), calls
`Generator.step()` (GIL released in the core) while any slot is busy, and delivers the events: probabilities in
llama-server's shape, metrics, the slot timing log. The event loop never computes.
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

from ..args import Params
from ..generation import Event, Generator, Request, available_mib, uses_mtp
from ..log import log
from ..model import Model
from . import slot_files
from .metrics import Metrics
from .prompt_cache import PromptCache, common_prefix, recoverable
from .responses import prob_entry

__all__ = ["Engine", "Event", "Task"]

_task_ids = itertools.count(0)


def cache_ram_limit(requested_mib: int, available: Optional[int]) -> int:
    """The prompt cache's budget: --cache-ram, but at most half the memory available after the model's load (the
    weights are in anonymous memory here, read in or grouped: with llama-server's default 8 GiB cache, a 16 GB
    model serving 8 MTP clients was killed for memory on a 24 GB machine)."""
    if available is None or requested_mib < 0:  # -1: no limit, as asked
        return requested_mib
    return min(requested_mib, max(1, available // 2))


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
    return_progress: bool = False         # "progress" events between prompt batches (streamed prompt_progress)
    constraint: object = None             # pyllm.structured.TokenConstraint (grammar / schema / tool calls)
    id: int = field(default_factory=lambda: next(_task_ids))
    # filled in by the engine
    queue: Optional[asyncio.Queue] = None
    loop: Optional[asyncio.AbstractEventLoop] = None
    cancelled: bool = False
    slot: int = -1

    def request(self) -> Request:
        return Request(prompt=self.prompt, sampling=self.params, n_predict=self.n_predict, stop=list(self.stop),
                       n_probs=self.n_probs, cache_prompt=self.cache_prompt, timings_per_token=self.timings_per_token,
                       constraint=self.constraint, progress=self.return_progress)


class Engine:
    def __init__(self, params: Params, core=None):
        self.params = params
        self.core = core                      # None: pyllm's C++ core (tests pass a stand-in)
        self.model: Optional[Model] = None
        self.gen: Optional[Generator] = None
        self.loaded = False
        self.n_slots = max(1, params.n_parallel)
        self._cond = threading.Condition()
        self._pending: collections.deque = collections.deque()
        self._running: dict = {}            # slot -> Task
        self._slot_last_used = [0.0] * self.n_slots
        self._slot_info = [None] * self.n_slots                # last task summary per slot (for /slots)
        self._stop = False
        self._draining = False                # shutting down: running tasks end now, new ones are refused
        self._thread: Optional[threading.Thread] = None
        self.t_start = time.time()
        self.n_ctx = 0
        self.n_ctx_slot = 0
        self.spec = "none"
        self.metrics = Metrics(False)
        self.prompt_cache: Optional[PromptCache] = None  # --cache-ram (llama-server's host-memory prompt cache)
        self._actions: collections.deque = collections.deque()  # slot save / restore / erase, run while idle
        self._ready: list = []                                  # ... whose slot is idle, to run now

    # ---------------------------------------------------------------- lifecycle
    def load(self):
        p = self.params
        self.spec = p.spec_type if p.speculative else "none"
        self.model = Model(p.model, load_mtp=uses_mtp(self.spec), core=self.core, mmap=p.use_mmap, repack=p.repack)
        log(f"model weights: {self.model.size_bytes / 2**20:.2f} MiB, "
            + ("read into memory (--mmap maps the file instead)" if self.model.weights_copied
               else "memory-mapped from the file"), "srv", "load_model")
        log(self.model.repack_desc(), "srv", "load_model")
        self.gen = Generator.from_params(self.model, p, self.n_slots)
        self.n_ctx = self.gen.n_ctx
        self.n_ctx_slot = self.gen.n_ctx_seq
        self.metrics = Metrics(self.spec != "none", per_drafter=self.gen.per_drafter)
        if p.cache_ram_mib != 0:
            avail = available_mib()
            limit = cache_ram_limit(p.cache_ram_mib, avail)
            if limit != p.cache_ram_mib:
                log(f"--cache-ram {p.cache_ram_mib} MiB: the machine has {avail} MiB available after the load, "
                    f"limiting the prompt cache to {limit} MiB (half of it)", "srv", "load_model", "W")
            self.prompt_cache = PromptCache(limit, self.model.recurrent)
            log(f"prompt cache is enabled, size limit: "
                f"{'no limit' if limit < 0 else f'{limit} MiB'}", "srv", "load_model")
        elif p.cache_idle_slots:
            log("--cache-idle-slots requires --cache-ram, disabling", "srv", "load_model", "W")
        tk, tv, dk, dv = self.gen.cache_types
        log(f"memory: {self.gen.ctx.memory_bytes / 2**20:.2f} MiB for {self.n_slots} slots "
            f"({self.gen.ctx.memory_bytes / self.n_slots / 2**20:.2f} MiB per slot), KV cache K {tk}, V {tv}"
            + (f", MTP layer K {dk}, V {dv}" if "draft-mtp" in self.spec.split(",") else ""), "srv", "load_model")
        if p.n_ctx_checkpoints > 0 and self.model.recurrent:
            log(f"context checkpoints enabled, max = {p.n_ctx_checkpoints}, min spacing = {p.checkpoint_min_step}",
                "srv", "load_model")
        self.loaded = True
        self._thread = threading.Thread(target=self._worker, name="pyllm-engine", daemon=True)
        self._thread.start()

    def close(self):
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def drain(self):
        """Shutdown (SIGINT/SIGTERM): every running task ends with its normal final event (stop_type "limit"),
        queued and later tasks get a 503; done by the worker between two steps. Any thread."""
        with self._cond:
            self._draining = True
            self._cond.notify_all()

    # ---------------------------------------------------------------- asyncio side
    def submit(self, task: Task, queue: Optional[asyncio.Queue] = None) -> asyncio.Queue:
        task.loop = asyncio.get_running_loop()
        task.queue = queue if queue is not None else asyncio.Queue()
        with self._cond:
            self._pending.append(task)
            self._cond.notify_all()
        return task.queue

    def slot_action(self, action: str, slot: int, filename: Optional[str] = None) -> "concurrent.futures.Future":
        """save / restore / erase on `slot`, run by the worker once the slot is idle (llama-server defers too).
        The future's result is the response JSON; SlotFileError for a bad request."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._cond:
            self._actions.append((action, slot, filename, fut))
            self._cond.notify_all()
        return fut

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
            held = self.gen.held[s]
            n = 0
            lim = min(len(held), len(task.prompt))
            while n < lim and held[n] == task.prompt[n]:
                n += 1
            if n > best_lcp or (n == best_lcp and self._slot_last_used[s] < self._slot_last_used[best]):
                best, best_lcp = s, n
        return best

    def _drain_now(self):
        """Under the lock, in the worker: end running tasks with a final event, refuse queued ones."""
        for slot, task in list(self._running.items()):
            fin = self.gen.cancel(slot)
            if fin is None:
                self._running.pop(slot, None)
                continue
            if task.cancelled:
                self._finished(task, fin)
                continue
            fin["stop_type"] = "limit"
            self._deliver(task, Event("done", data=fin, seq=slot))
        for a in list(self._actions) + self._ready:
            a[3].set_exception(RuntimeError("the server is shutting down"))
        self._actions.clear()
        self._ready = []
        while self._pending:
            task = self._pending.popleft()
            self._emit(task, Event("error", data={"code": 503, "type": "unavailable_error",
                                                  "message": "the server is shutting down"}))

    def _assign(self):
        """Under the lock: drop cancelled tasks, start queued tasks on free slots (FIFO)."""
        if self._draining:
            return self._drain_now()
        for slot, task in list(self._running.items()):
            if task.cancelled:
                self._end(slot, task)
        self._take_actions()
        if not self._pending:
            return
        busy = set(self._running) | {a[1] for a in self._ready}  # a slot action goes before later tasks
        launched = False
        keep = collections.deque()
        while self._pending:
            task = self._pending.popleft()
            if task.cancelled:
                continue
            slot = self._pick_slot(task, busy)
            if slot < 0:
                keep.append(task)
                continue
            try:
                try:
                    self._cache_update(slot, task.prompt, load=task.cache_prompt)
                except Exception as e:  # the cache is an optimization: the task runs without it
                    log(f"prompt cache: update failed for slot {slot}: {e}", "srv", "prompt_save", "W")
                n_cached = self.gen.begin(slot, task.request())
            except (ValueError, IndexError) as e:
                self._emit(task, Event("error", data={"code": 400, "type": "invalid_request_error", "message": str(e)}))
                continue
            except Exception as e:  # pragma: no cover
                self._emit(task, Event("error", data={"code": 500, "type": "server_error", "message": str(e)}))
                continue
            task.slot = slot
            launched = True
            self._running[slot] = task
            busy.add(slot)
            self._slot_last_used[slot] = time.time()
            self._slot_info[slot] = {"id_task": task.id, "n_prompt_tokens": len(task.prompt),
                                     "n_prompt_tokens_cache": n_cached,
                                     "n_prompt_tokens_processed": len(task.prompt) - n_cached,
                                     "params": task.params_json or task.params, "n_predict": task.n_predict}
            self._emit(task, Event("begin", data={"id_slot": slot, "n_cached": n_cached}))
        self._pending = keep
        if self.prompt_cache is not None and self.params.cache_idle_slots and launched:
            for s in range(self.n_slots):  # idle slots: a copy in the cache (their memory stays where it is)
                if s not in self._running and self.gen.held[s] and not self.prompt_cache.covers(self.gen.held[s]):
                    self.prompt_cache.save(self.gen.state_get(s))

    # ---------------------------------------------------------------- prompt cache and slot files (worker)
    def _cache_update(self, slot: int, prompt: list, load: bool = True):
        """Before `prompt` starts on `slot`: keep what the slot would lose in the RAM cache, and (unless the request
        has cache_prompt off) load the cached state that gives back more of the prompt than the slot does."""
        pc = self.prompt_cache
        if pc is None:
            return
        held = self.gen.held[slot]
        lcp = common_prefix(held, prompt) if load else 0
        gives = recoverable(len(held), [p for p, _ in self.gen.checkpoints(slot)], lcp, len(prompt), pc.recurrent)
        if held and lcp < len(held):
            pc.save(self.gen.state_get(slot))
        st = pc.take(prompt, gives) if load else None
        if st is not None:
            try:
                self.gen.state_set(slot, st)
            except ValueError as e:
                log(f"prompt cache: could not load an entry: {e}", "srv", "prompt_load", "W")

    def _take_actions(self):
        """Under the lock: slot actions whose slot is idle move to _ready (run by the worker without the lock:
        a large state's file must not block the event loop's submit())."""
        keep = collections.deque()
        while self._actions:
            a = self._actions.popleft()
            (keep if a[1] in self._running else self._ready).append(a)
        self._actions = keep

    def _run_actions(self, ready: list):
        """Worker thread, lock not held; no task can start on these slots meanwhile (only this thread starts them)."""
        for action, slot, filename, fut in ready:
            try:
                if action == "save":
                    res = slot_files.save(self.gen, slot, self.params.slot_save_path, filename)
                elif action == "restore":
                    res = slot_files.restore(self.gen, slot, self.params.slot_save_path, filename)
                    self._slot_last_used[slot] = time.time()
                else:
                    res = slot_files.erase(self.gen, slot)
                fut.set_result(res)
            except Exception as e:
                fut.set_exception(e)

    def _worker(self):
        while True:
            with self._cond:
                self._assign()
                while not self._stop and not self._running and not self._ready:
                    self._cond.wait()
                    self._assign()
                if self._stop:
                    return
                ready, self._ready = self._ready, []
                n_busy = len(self._running)
            if ready:
                self._run_actions(ready)
                continue
            try:
                events = self.gen.step()
            except Exception as e:  # a failed decode ends every running task with an error
                with self._cond:
                    for slot, task in list(self._running.items()):
                        self._emit(task, Event("error", data={"code": 500, "type": "server_error", "message": str(e)}))
                        del self._running[slot]
                continue
            g = self.gen.global_stats()
            with self._cond:
                self.metrics.on_decode(n_busy, g)
                for ev in events:
                    task = self._running.get(ev.seq)
                    if task is None:
                        continue
                    if task.cancelled:
                        if ev.kind == "done":
                            self._finished(task, ev.data)
                        elif self.gen.running(ev.seq):  # else its "done" event follows in this list
                            self._end(ev.seq, task)
                        continue
                    self._deliver(task, ev)

    def _deliver(self, task: Task, ev: Event):
        if ev.kind == "progress":
            self._emit(task, ev)
            return
        if ev.kind == "token":
            ev.probs = [prob_entry(self.model, tok, pr, task.post_sampling_probs) for tok, pr in ev.probs]
            self._emit(task, ev)
            return
        fin = ev.data
        fin["id_slot"] = task.slot
        fin["probs_tail"] = [prob_entry(self.model, tok, pr, task.post_sampling_probs) for tok, pr in fin["probs_tail"]]
        self._finished(task, fin)
        self._emit(task, ev)

    def _end(self, slot: int, task: Task):
        """A cancelled task: stop its sequence; it counts in the metrics and the log, nothing is delivered."""
        fin = self.gen.cancel(slot)
        if fin is not None:
            self._finished(task, fin)
        else:
            self._running.pop(slot, None)

    def _finished(self, task: Task, fin: dict):
        slot = task.slot
        self._running.pop(slot, None)
        self._slot_last_used[slot] = time.time()
        self.metrics.on_finish(fin)
        t = fin["timings"]
        log(f"id {slot:2d} | task {task.id} | \n"
            f"prompt eval time = {t['prompt_ms']:10.2f} ms / {t['prompt_n']:5d} tokens "
            f"({t['prompt_per_token_ms']:8.2f} ms per token, {t['prompt_per_second']:8.2f} tokens per second)\n"
            f"       eval time = {t['predicted_ms']:10.2f} ms / {t['predicted_n']:5d} tokens "
            f"({t['predicted_per_token_ms']:8.2f} ms per token, {t['predicted_per_second']:8.2f} tokens per second)\n"
            f"      total time = {t['prompt_ms'] + t['predicted_ms']:10.2f} ms / {t['prompt_n'] + t['predicted_n']:5d} tokens",
            "slot", "print_timing")
        ckpts = self.gen.checkpoints(slot)
        if ckpts:
            restored = int(fin["stats"].get("ckpt_restored", -1) or -1)
            log(f"id {slot:2d} | task {task.id} | context checkpoints: {len(ckpts)} of {self.params.n_ctx_checkpoints} "
                f"at {[p for p, _ in ckpts]}, {sum(b for _, b in ckpts) / 2**20:.3f} MiB"
                + (f"; restored the one at {restored}" if restored > 0 else ""), "slot", "print_timing")
        if self.spec != "none" and int(fin["stats"].get("n_verif_steps", 0) or 0) > 0 and fin["acceptance_line"]:
            log(f"id {slot:2d} | task {task.id} | {fin['acceptance_line']}", "slot", "print_timing")
            for line in fin.get("drafter_lines") or []:  # per drafter when several (or an ngram one) are set
                log(f"id {slot:2d} | task {task.id} | {line}", "slot", "print_timing")

    # ---------------------------------------------------------------- introspection (any thread)
    def slots_json(self) -> list:
        out = []
        with self._cond:
            for s in range(self.n_slots):
                task = self._running.get(s)
                d = {"id": s, "n_ctx": self.n_ctx_slot, "speculative": self.spec != "none",
                     "is_processing": task is not None}
                info = self._slot_info[s]
                if info is not None:
                    n_pred = info.get("n_predict", -1)
                    prog = self.gen.progress(s) if task is not None else None
                    if prog is not None:
                        n_dec, nl = prog
                        n_remain = -1 if n_pred < 0 else max(0, n_pred - n_dec)
                        has_next = True
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
            return self.metrics.snapshot(reset_bucket, len(self._running), len(self._pending))
