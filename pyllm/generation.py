"""The one generation loop over the core: requests begin on sequences of one Context, step() advances all of
them in one batched decode, and each sequence's new tokens become text (UTF-8 safe, stop strings applied),
probabilities, timings and a final summary.

Every caller drives this class: the server's scheduler (pyllm/server/engine.py: many sequences, one worker
thread), `pyllm generate`, pyllm-bench's in-process runner and `pyllm.Llama` (one sequence, through `run`).

    gen = Generator(Model(path, load_mtp=True), n_ctx=4096, spec_type="draft-mtp", n_max=3)
    for ev in gen.run(Request(prompt=gen.model.tokenize("def f("), sampling={"temperature": 0}, n_predict=32)):
        print(ev.text, end="")        # "token" events, then one "done" event with ev.data = the summary

step() releases the GIL inside the core for the whole decode; this module only does the per-token bookkeeping.
"""
from __future__ import annotations

import math
import os
import time
import weakref
from dataclasses import dataclass, field
from typing import Iterator, Optional

from .detok import TextStream
from .flags import KV_CACHE_TYPES
from .model import Model
from .sampling import seq_params


def default_threads() -> int:
    """Threads when none are given: the cores, at most 4 (past that the small models stop scaling)."""
    return max(1, min(os.cpu_count() or 1, 4))


def available_mib() -> Optional[int]:
    """MemAvailable (Linux's /proc/meminfo) in MiB, None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


@dataclass
class Request:
    """One generation: prompt token ids and how to sample and stop."""
    prompt: list
    sampling: dict = field(default_factory=dict)  # sampler params, llama-server names (temperature, top_k, ...)
    n_predict: int = -1                  # -1: until end-of-generation or the context is full
    stop: list = field(default_factory=list)      # stop strings (cut from the text)
    n_probs: int = 0                     # top-n probabilities per token (softmax of the raw logits)
    cache_prompt: bool = True            # reuse the common prefix the sequence holds
    timings_per_token: bool = False      # token events carry running timings
    special: bool = False                # render control tokens (<|im_end|>, EOS) as text
    progress: bool = False               # "progress" events between prompt batches (llama-server's return_progress)
    # constrained decoding (pyllm.structured.TokenConstraint: grammar / forced tokens): its mask is set on
    # the core's sequence before each step; drafts are cut where it refuses them (_draft_check)
    constraint: object = None


@dataclass
class Event:
    """What a sequence produced: "token" (text / tokens / probs of one step) or "done" (data = summary)."""
    kind: str                 # "begin" | "progress" (data: processed, total) | "token" | "done" | "error"
    text: str = ""
    tokens: list = field(default_factory=list)
    probs: list = field(default_factory=list)     # raw (token id, {"p": p, "top": [(id, p)]} or None) per token
    data: dict = field(default_factory=dict)
    seq: int = -1


class _Seq:
    """A running request's state."""

    def __init__(self, req: Request, model: Model, n_cached: int):
        self.req = req
        self.stream = TextStream(model, req.stop, req.special)
        self.tokens: list = []
        self.probs_pending: list = []  # probs of tokens whose text is not delivered yet
        self.toks_pending: list = []   # ids of tokens whose text is not delivered yet
        self.stop_type = "none"
        self.has_new_line = False
        self.truncated = False
        self.n_cached = n_cached
        self.n_processed = n_cached    # prompt tokens the sequence holds (what the last progress event said)
        self.t_first: Optional[float] = None


def kv_cache_types(p) -> dict:
    """The KV cache types of parsed flags; a type the core does not hold stays f16 (args warns about it)."""
    pick = lambda t: t if t in KV_CACHE_TYPES else "f16"
    return {"cache_type_k": pick(p.cache_type_k), "cache_type_v": pick(p.cache_type_v),
            "draft_type_k": pick(p.spec_draft_type_k), "draft_type_v": pick(p.spec_draft_type_v)}


# tokens that open a chat message in the templates pyllm knows (ChatML, Gemma, Llama 3)
_TURN_START_TOKENS = ("<|im_start|>", "<start_of_turn>", "<|start_header_id|>")


def _turn_start_ids(model: Model) -> frozenset:
    ids = set()
    for name in _TURN_START_TOKENS:
        try:
            t = model.tokenize(name, add_special=False, parse_special=True)
        except Exception:
            continue
        if len(t) == 1:
            ids.add(t[0])
    return frozenset(ids)


def logprob(p: float) -> float:
    """log(p), -inf for 0 (JSON writers turn it into null)."""
    return math.log(p) if p > 0 else float("-inf")


def ngram_params(core, settings: Optional[dict]):
    """The core's SpecNgramParams from a dict of its fields (pyllm.args.Params.spec_ngram(); the nested
    simple / map_k / map_k4v take dicts of size_n, size_m, min_hits). Unknown names raise ValueError."""
    ng = core.SpecNgramParams()
    for k, v in (settings or {}).items():
        if not hasattr(ng, k):
            raise ValueError(f"unknown ngram setting {k!r}")
        if isinstance(v, dict):
            sub = getattr(ng, k)
            for f, x in v.items():
                if not hasattr(sub, f):
                    raise ValueError(f"unknown ngram setting {k}.{f}")
                setattr(sub, f, int(x))
            setattr(ng, k, sub)
        else:
            setattr(ng, k, v)
    return ng


def _draft_check(gen_ref):
    """The core's draft check (Context.set_draft_check): a constrained sequence's draft, cut before an
    end-of-generation token (the target samples it itself) -> (k, the masks after each kept token).
    Holds the Generator weakly: the Context it is set on belongs to it."""
    def check(seq: int, draft: list):
        gen = gen_ref()
        run = gen._seqs.get(seq) if gen is not None else None
        if run is None or run.req.constraint is None:
            return 0, None
        for i, t in enumerate(draft):
            if t in gen._eog:
                draft = draft[:i]
                break
        return run.req.constraint.draft_masks(draft)
    return check


def uses_mtp(spec_type: str) -> bool:
    """Whether a spec type list ("draft-mtp,ngram-mod") needs the file's MTP layer loaded."""
    return "draft-mtp" in spec_type.split(",")


class Generator:
    """A model and one core Context of n_seq sequences (the KV / recurrent memory, batched decoding, MTP)."""

    def __init__(self, model: Model, n_ctx: int = 0, n_seq: int = 1, n_batch: int = 2048, n_ubatch: int = 512,
                 n_threads: int = 0, spec_type: str = "none", n_max: int = 3, n_min: int = 0, p_min: float = 0.0,
                 synth_len: float = -1.0, synth_rates=(), ngram: Optional[dict] = None,
                 draft_model: Optional[Model] = None, draft_threads: int = 0, n_max_auto: bool = False,
                 draft_head_type: str = "", draft_vocab: int = 0, accept: str = "match", ctx_checkpoints: int = 32,
                 checkpoint_min_step: int = 8192, cache_type_k: str = "f16", cache_type_v: str = "f16",
                 draft_type_k: str = "f16", draft_type_v: str = "f16"):
        self.model = model
        self.n_ctx = n_ctx if n_ctx > 0 else (model.n_ctx_train or 4096)  # 0: the model's training context
        self.n_threads = n_threads if n_threads > 0 else default_threads()
        self.spec = spec_type
        # -1 = unset, as upstream; the core validates every spec parameter (one place)
        self.ctx = model.core.Context(model._m, self.n_ctx, n_seq, n_batch=n_batch, n_ubatch=n_ubatch,
                                      n_threads=self.n_threads, spec_type=spec_type, n_max=n_max, n_min=n_min,
                                      p_min=p_min, synth_len=float(synth_len),
                                      synth_rates=[float(x) for x in synth_rates],
                                      ngram=ngram_params(model.core, ngram),
                                      draft_model=draft_model._m if draft_model is not None else None,
                                      draft_threads=draft_threads if draft_threads > 0 else self.n_threads,
                                      n_max_auto=n_max_auto, draft_head_type=draft_head_type or "",
                                      draft_vocab=int(draft_vocab), accept=accept)
        self.draft_model = draft_model  # draft-simple's model (-md), kept alive with the context
        self.n_max, self.n_max_auto, self.accept = n_max, n_max_auto, accept
        # the cheap draft head (csrc/speculative/draft_head.h): its rows, type and extra memory, once
        self.draft_head_info = str(getattr(self.ctx, "draft_head_info", "") or "")
        if self.draft_head_info:
            from .log import log
            log(self.draft_head_info, "srv", "load_model")
        # context checkpoints (llama.cpp's --ctx-checkpoints / --checkpoint-min-step): the core keeps
        # recurrent-state copies so a prompt sharing a prefix reuses it on hybrid models too
        self.ctx.set_checkpoints(max(0, int(ctx_checkpoints)), int(checkpoint_min_step))
        self.cache_types = (cache_type_k, cache_type_v, draft_type_k, draft_type_v)
        if any(t != "f16" for t in self.cache_types):  # quantized KV (-ctk / -ctv, the MTP layer's -ctkd / -ctvd)
            self.ctx.set_cache_types(*self.cache_types)
        self._turn_ids = _turn_start_ids(model)
        self.n_seq = n_seq
        self.n_ctx_seq = int(getattr(self.ctx, "n_ctx_seq", self.n_ctx // n_seq))
        self.held = [[] for _ in range(n_seq)]   # the tokens each sequence's memory holds (prompt + generated)
        self._seqs: dict = {}                    # seq -> _Seq while running
        self._eog = frozenset(model.eog_ids)
        if self.spec != "none":  # drafts of constrained sequences are checked against their grammar
            self.ctx.set_draft_check(_draft_check(weakref.ref(self)))

    @classmethod
    def from_params(cls, model: Model, p, n_seq: int) -> "Generator":
        """The Generator for parsed llama.cpp flags (pyllm.args.Params): the one place flags become core params
        (it loads draft-simple's --spec-draft-model)."""
        draft = None
        if p.speculative and "draft-simple" in p.spec_type.split(",") and p.spec_draft_model:
            draft = Model(p.spec_draft_model, core=model.core, mmap=p.use_mmap, repack=p.repack)
        return cls(model, p.n_ctx, n_seq, n_batch=p.n_batch, n_ubatch=p.n_ubatch, n_threads=p.n_threads,
                   spec_type=p.spec_type if p.speculative else "none", n_max=p.spec_draft_n_max,
                   n_min=p.spec_draft_n_min, p_min=p.spec_draft_p_min, synth_len=p.spec_synth_len,
                   synth_rates=p.spec_synth_rates, ngram=p.spec_ngram(), draft_model=draft,
                   draft_threads=p.spec_draft_threads, n_max_auto=p.spec_draft_n_max_auto,
                   draft_head_type=p.spec_draft_head_type, draft_vocab=p.spec_draft_vocab, accept=p.spec_accept,
                   ctx_checkpoints=p.n_ctx_checkpoints, checkpoint_min_step=p.checkpoint_min_step,
                   **kv_cache_types(p))

    # ---------------------------------------------------------------- sequences
    def begin(self, seq: int, req: Request) -> int:
        """Start `req` on sequence `seq`; returns how many prompt tokens were reused from what it held.
        ValueError / IndexError for a bad prompt (empty, too long, invalid ids) or bad sampling params."""
        params = seq_params(dict(req.sampling, n_predict=req.n_predict, n_probs=req.n_probs), self.model.eog_ids,
                            self.model.core)
        if not req.cache_prompt:  # the core always reuses the common prefix: drop it first
            self.ctx.seq_clear(seq)
            self.held[seq] = []
        n_cached = int(self.ctx.seq_begin(self.model._m, seq, req.prompt, params))
        if self._turn_ids:  # message starts: where a later prompt of the same conversation may diverge
            self.ctx.seq_set_checkpoint_hints(seq, [i for i, t in enumerate(req.prompt) if t in self._turn_ids and i > 0])
        self._seqs[seq] = _Seq(req, self.model, n_cached)
        self.held[seq] = list(req.prompt)
        if req.constraint is not None:
            try:
                self._constrain(seq, req.constraint)
            except Exception:
                self.cancel(seq)
                raise
        return n_cached

    def _constrain(self, seq: int, c) -> None:
        """The next token's mask onto the core's sequence (an empty mask lifts the constraint)."""
        mask = c.next_mask()
        if mask is None:
            import numpy as np
            mask = np.zeros(0, dtype=np.int32)
        self.ctx.seq_set_allowed(seq, mask)

    def running(self, seq: int) -> bool:
        return seq in self._seqs

    def progress(self, seq: int) -> Optional[tuple]:
        """(tokens generated, whether a newline was delivered) of a running sequence, else None."""
        run = self._seqs.get(seq)
        return (len(run.tokens), run.has_new_line) if run is not None else None

    @property
    def n_running(self) -> int:
        return len(self._seqs)

    def cancel(self, seq: int) -> Optional[dict]:
        """Stop a running sequence now; returns its summary (as a "done" event's data), None if not running."""
        run = self._seqs.get(seq)
        if run is None:
            return None
        try:
            self.ctx.seq_end(seq)
        except Exception:
            pass
        run.stream.close()
        return self._finish(seq, run)

    def clear(self, seq: int) -> None:
        """Forget what the sequence holds (its next request evaluates the whole prompt)."""
        self.cancel(seq)
        self.ctx.seq_clear(seq)
        self.held[seq] = []

    # ---------------------------------------------------------------- prompt cache
    def state_get(self, seq: int):
        """A copy of everything idle `seq` holds (the core's SeqState: tokens, KV, recurrent state,
        context checkpoints, the MTP layer's memory)."""
        return self.ctx.seq_state_get(seq)

    def state_set(self, seq: int, state) -> None:
        """Put a SeqState back on idle `seq` (ValueError when it does not fit this model / context)."""
        self.ctx.seq_state_set(seq, state)
        self.held[seq] = list(state.tokens)

    def checkpoints(self, seq: int) -> list:
        """(position, bytes) of the context checkpoints `seq` holds."""
        return list(self.ctx.seq_checkpoints(seq))

    # ---------------------------------------------------------------- the loop
    def step(self) -> list:
        """One batched decode of every running sequence -> its events ("token" then maybe "done").
        A failing decode ends every running sequence and raises."""
        try:
            results = self.ctx.step()
        except Exception:
            for seq in list(self._seqs):
                try:
                    self.ctx.seq_end(seq)
                except Exception:
                    pass
            self._seqs.clear()
            raise
        events = []
        for r in results:
            seq = r["seq"]
            run = self._seqs.get(seq)
            if run is not None:
                self._on_result(seq, run, r, events)
        for seq, run in self._seqs.items():
            if run.req.progress and not run.tokens:  # still in its prompt (the first token ends that part)
                pos = self.ctx.seq_pos(seq)
                if pos != run.n_processed:
                    run.n_processed = pos
                    events.append(Event("progress", data={"processed": pos, "total": len(run.req.prompt)}, seq=seq))
        return events

    def run(self, req: Request, seq: int = 0) -> Iterator[Event]:
        """Begin `req` on `seq` and step until it is done: its "token" events, then its "done" event.
        Closing the iterator early (break) cancels the sequence."""
        self.begin(seq, req)
        try:
            while seq in self._seqs:
                for ev in self.step():
                    if ev.seq == seq:
                        yield ev
        finally:
            self.cancel(seq)

    def global_stats(self) -> Optional[dict]:
        try:
            return self.ctx.global_stats()
        except Exception:
            return None

    def seq_stats(self, seq: int) -> dict:
        try:
            return dict(self.ctx.seq_stats(seq))
        except Exception:
            return {}

    def acceptance_line(self, seq: int) -> str:
        """llama.cpp's `draft acceptance = ...` line for the sequence's last request."""
        try:
            return self.ctx.acceptance_line(seq)
        except Exception:
            return ""

    @property
    def per_drafter(self) -> bool:
        """Whether statistics per drafter are reported (timings, log, /metrics): some drafter other than draft-mtp
        is configured (with draft-mtp alone the totals are its statistics, in llama-server's exact shapes)."""
        return self.spec != "none" and self.spec != "draft-mtp"

    def drafter_lines(self, seq: int) -> list:
        """llama.cpp's `statistics <type>: ...` line per drafter for the sequence's last request."""
        try:
            return list(self.ctx.drafter_lines(seq))
        except Exception:
            return []

    # ---------------------------------------------------------------- per sequence
    def _on_result(self, seq: int, run: _Seq, r: dict, events: list):
        req = run.req
        toks = r.get("tokens") or []
        probs = r.get("probs") or [None] * len(toks)
        stop_now = False
        run.toks_pending.extend(toks)
        if toks and run.t_first is None:
            run.t_first = time.perf_counter()
        held = self.held[seq]
        con = req.constraint
        for i, tok in enumerate(toks):
            run.tokens.append(tok)
            held.append(tok)
            if con is not None:
                con.commit(tok)
            if req.n_probs > 0:
                run.probs_pending.append((tok, probs[i] if i < len(probs) else None))
            if run.stream.push(tok):
                run.stop_type = "word"
                stop_now = True
                break
        done = bool(r.get("done")) or stop_now
        if con is not None and not done:
            self._constrain(seq, con)
        if stop_now:
            try:
                self.ctx.seq_end(seq)
            except Exception:
                pass
        elif done:
            run.stream.close()
            reason = r.get("stop")
            if reason == "eos":
                run.stop_type = "eos"
            else:
                run.stop_type = "limit"
                run.truncated = reason == "ctx"
        chunk = run.stream.take(final=done)
        if chunk:
            if "\n" in chunk:
                run.has_new_line = True
            pr, run.probs_pending = (run.probs_pending, []) if req.n_probs > 0 else ([], run.probs_pending)
            sent, run.toks_pending = run.toks_pending, []
            data = {"n_decoded": len(run.tokens)}
            if req.timings_per_token:
                st = self.seq_stats(seq)
                if run.t_first is not None and not float(st.get("t_gen_ms", 0) or 0):
                    st["t_gen_ms"] = (time.perf_counter() - run.t_first) * 1e3
                data["timings"] = self._timings(run, st)
            events.append(Event("token", text=chunk, tokens=sent, probs=pr, data=data, seq=seq))
        if done:
            events.append(Event("done", data=self._finish(seq, run), seq=seq))

    def _finish(self, seq: int, run: _Seq) -> dict:
        """The summary of a finished (or cancelled) sequence."""
        self._seqs.pop(seq, None)
        st = self.seq_stats(seq)
        line = self.acceptance_line(seq) if self.spec != "none" else ""
        return {
            "seq": seq, "text": run.stream.text, "tokens": list(run.tokens), "n_decoded": len(run.tokens),
            "n_prompt": len(run.req.prompt), "n_cached": int(st.get("n_cached", run.n_cached)),
            "stop_type": run.stop_type, "stopping_word": run.stream.stopping_word,
            "has_new_line": run.has_new_line or "\n" in run.stream.text, "truncated": run.truncated,
            "timings": self._timings(run, st), "stats": st, "acceptance_line": line,
            "drafter_lines": self.drafter_lines(seq) if self.per_drafter else [],
            "n_held": len(self.held[seq]),
            "probs_tail": [] if run.stop_type == "word" else list(run.probs_pending),
        }

    def _timings(self, run: _Seq, st: dict) -> dict:
        """llama-server's timings object from the core's per-sequence statistics."""
        cache_n = int(st.get("n_cached", run.n_cached))
        prompt_n = max(0, int(st.get("n_prompt", len(run.req.prompt))) - cache_n)
        prompt_ms = float(st.get("t_prompt_ms", 0.0) or 0.0)
        n = len(run.tokens)
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
            if self.per_drafter:  # pyllm's addition: which drafter made how many of them
                t["drafters"] = {d["type"]: {"draft_n": int(d["n_draft"]), "draft_n_accepted": int(d["n_draft_accepted"]),
                                             "drafts": int(d["n_drafts"])} for d in st.get("drafters") or []}
        return t
