"""`pyllm bench`: llama-bench's measurements on pyllm's core, optionally interleaved with llama-bench itself.

Measurement (as tools/llama-bench/llama-bench.cpp does it): one Context per test with n_ctx = n_prompt + n_gen +
n_depth; a warm-up (the whole prompt for pp, one decode step for tg), then -r samples, each on a cleared
context: the -d depth prompt (untimed), then the timed part. pp: n_prompt tokens (BOS first when the model adds
one, the rest random ids) in -b batches, each evaluated in -ub ubatches (one forward each, as llama_decode
splits a batch); tg: n_gen single-token steps from the current position, the first token BOS (when the model
adds one) or random, then random ids. Tokens are drawn before the clock starts; the clock (perf_counter_ns)
spans the native eval calls of one sample. t/s = (n_prompt + n_gen) / sample time.

Differences from llama.cpp that remain: each ubatch's eval computes the logits of its last row (llama.cpp
computes them only for the last token of a -b batch), and each decode step's logits are copied into a numpy
array (~n_vocab * 4 bytes).

Weight bytes per token (pyllm's addition): every tensor a forward pass reads, i.e. all but token_embd (a row
gather) unless the model has no output.weight (tied embeddings: token_embd is then the output matrix), and but
the MTP block (blk.i for i >= block_count - nextn_predict_layers, and any *.nextn.* tensor; pyllm bench runs
the plain model). Expert tensors (*_exps) count n_expert_used / n_expert of their bytes per decoded token; a
ubatch of n tokens is assumed to touch n_expert * (1 - (1 - used/n_expert)^n) distinct experts (uniform
routing). A pp test spreads each ubatch's weight reads over its tokens. GB/s = bytes per token * t/s.
With --bw, the read bandwidth is measured for each -t (a multithreaded read of a buffer of max(1 GiB,
4 x the last-level cache), best of 5 passes in each of four read patterns: one stream or four side by side,
with and without software prefetch, as the decode kernels read), and each row shows GB/s as a share of it and
t_excess_us = 1e6 / t/s - bytes per token / bandwidth: the time per token that reading the weights at the
measured bandwidth does not explain (compute-bound kernels, KV/state traffic, per-op dispatch and
synchronisation, Python).

Dispatches per token (pyllm's addition): the thread-pool dispatches (one wake-up of the workers and one barrier
each) of a sample's forwards, per token, averaged over the samples; 0 at -t 1, where every op runs on the calling
thread. dispatch_us_per_token: the time per token the calling thread spent in those dispatches waiting for the
workers after its own share (their wake-up, uneven shares, and on a machine where other processes hold the
cores, scheduler time slices), measured inside the timed samples.
"""
from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

from .llama_bench_args import BenchParams, Instance, instances, llama_bench_argv
from .llama_bench_output import make_printer

FTYPE_NAMES = {0: "all F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K - Medium",
               11: "Q3_K - Small", 12: "Q3_K - Medium", 13: "Q3_K - Large", 14: "Q4_K - Small", 15: "Q4_K - Medium",
               16: "Q5_K - Small", 17: "Q5_K - Medium", 18: "Q6_K", 19: "IQ2_XXS - 2.0625 bpw",
               20: "IQ2_XS - 2.3125 bpw", 21: "Q2_K - Small", 22: "IQ3_XS - 3.3 bpw", 23: "IQ3_XXS - 3.0625 bpw",
               24: "IQ1_S - 1.5625 bpw", 25: "IQ4_NL - 4.5 bpw", 26: "IQ3_S - 3.4375 bpw",
               27: "IQ3_S mix - 3.66 bpw", 28: "IQ2_S - 2.5 bpw", 29: "IQ2_M - 2.7 bpw", 30: "IQ4_XS - 4.25 bpw",
               31: "IQ1_M - 1.75 bpw", 32: "BF16", 36: "TQ1_0 - 1.69 bpw ternary", 37: "TQ2_0 - 2.06 bpw ternary",
               38: "MXFP4 MoE", 39: "NVFP4", 40: "Q1_0", 41: "Q2_0"}


class BenchError(RuntimeError):
    """A user-facing failure: printed as one line, exit 1."""


def _core():
    from pyllm import _core
    return _core


def cpu_info() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _build() -> str:
    import pyllm
    return f"pyllm {pyllm.__version__}"


# ------------------------------------------------------------------------------------------
# weight bytes


class WeightModel:
    """Bytes a forward pass over n tokens reads from the weights (see the module docstring)."""

    def __init__(self, gguf_file):
        meta = gguf_file.metadata()
        arch = meta.get("general.architecture", "")
        n_block = int(meta.get(f"{arch}.block_count", 0) or 0)
        n_nextn = int(meta.get(f"{arch}.nextn_predict_layers", 0) or 0)
        self.n_expert = int(meta.get(f"{arch}.expert_count", 0) or 0)
        self.n_expert_used = int(meta.get(f"{arch}.expert_used_count", 0) or 0)
        tensors = gguf_file.tensors()
        names = {t["name"] for t in tensors}
        tied = "output.weight" not in names
        self.dense = 0
        self.experts = 0
        for t in tensors:
            name = t["name"]
            if name == "token_embd.weight" and not tied:
                continue
            if ".nextn." in name:
                continue
            parts = name.split(".")
            if parts[0] == "blk" and len(parts) > 1 and parts[1].isdigit() and n_nextn > 0 \
                    and int(parts[1]) >= n_block - n_nextn:
                continue
            if "_exps" in name and self.n_expert > 0:
                self.experts += t["nbytes"]
            else:
                self.dense += t["nbytes"]

    def forward_bytes(self, n_tokens: int) -> float:
        if not self.experts or self.n_expert <= 0:
            return float(self.dense + self.experts)
        used = min(self.n_expert_used, self.n_expert) / self.n_expert
        touched = 1.0 - (1.0 - used) ** n_tokens
        return self.dense + self.experts * touched

    def per_token(self, inst: Instance) -> float:
        """Average weight bytes per timed token of a test."""
        total = 0.0
        for n in prompt_chunks(inst.n_prompt, inst.n_batch, inst.n_ubatch):
            total += self.forward_bytes(n)
        total += inst.n_gen * self.forward_bytes(1)
        n_tok = inst.n_prompt + inst.n_gen
        return total / n_tok if n_tok else 0.0


def prompt_chunks(n_prompt: int, n_batch: int, n_ubatch: int) -> List[int]:
    """Forward sizes of a prompt: -b batches split into -ub ubatches (the Context clamps ubatch to batch)."""
    ub = min(n_ubatch, n_batch)
    out = []
    done = 0
    while done < n_prompt:
        nb = min(n_batch, n_prompt - done)
        for k in range(0, nb, ub):
            out.append(min(ub, nb - k))
        done += nb
    return out


# ------------------------------------------------------------------------------------------
# read bandwidth


def llc_bytes() -> int:
    best = 0
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for idx in base.glob("index*"):
        try:
            s = (idx / "size").read_text().strip()
            kind = (idx / "type").read_text().strip()
        except OSError:
            continue
        if kind == "Instruction":
            continue
        mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(s[-1:], 1)
        try:
            best = max(best, int(s.rstrip("KMG")) * mult)
        except ValueError:
            pass
    return best


def bw_buffer_bytes() -> int:
    return max(1 << 30, 4 * llc_bytes())


def read_bandwidth(n_threads: int, nbytes: int, passes: int = 5) -> float:
    """Bytes/s: the best of `passes` multithreaded reads of an nbytes buffer (pyllm._core.read_bandwidth)."""
    core = _core()
    try:
        return float(core.read_bandwidth(n_threads, nbytes, passes))
    except (ValueError, RuntimeError, MemoryError) as e:
        raise BenchError(f"error: --bw: read-bandwidth probe failed ({nbytes} bytes, -t {n_threads}): {e}")


# ------------------------------------------------------------------------------------------
# pyllm measurement


class PyllmRunner:
    def __init__(self, verbose: bool = False):
        self.verbose = verbose
        self.path: Optional[str] = None
        self.use_mmap: Optional[int] = None
        self.repack = 1
        self.model = None
        self.info: Dict = {}
        self.weights: Optional[WeightModel] = None
        self.rng = random.Random(1)  # llama-bench's std::rand() is unseeded: a fixed sequence as well
        self.last_dispatches = (0, 0)  # the last sample's thread-pool dispatches and wait ns

    def load(self, path: str, use_mmap: Optional[int] = None, repack: int = 1):
        if (path, use_mmap, repack) == (self.path, self.use_mmap, self.repack):
            return
        core = _core()
        self.model = None
        if not os.path.isfile(path):
            raise BenchError(f"error: failed to load model '{path}': no such file")
        t0 = time.perf_counter()
        try:
            self.model = core.Model(path, load_mtp=False, mmap=-1 if use_mmap is None else use_mmap, repack=bool(repack))
            gf = core.GGUFFile(path)
        except (ValueError, OSError, RuntimeError) as e:
            raise BenchError(f"error: failed to load model '{path}': {e}")
        if self.verbose:
            print(f"pyllm bench: loaded {path} in {time.perf_counter() - t0:.2f} s", file=sys.stderr)
        ftype = gf.get("general.file_type")
        desc = self.model.desc + (f" {FTYPE_NAMES.get(int(ftype), 'unknown')}" if ftype is not None else "")
        tok = self.model.tokenizer
        self.info = {"model_filename": path, "model_type": desc, "model_size": int(self.model.size_bytes),
                     "model_n_params": int(self.model.n_params)}
        self.bos = tok.bos if tok.add_bos and tok.bos >= 0 else None
        self.n_vocab = int(self.model.n_vocab)
        self.weights = WeightModel(gf)
        self.info["use_mmap"] = not bool(getattr(self.model, "weights_copied", False))
        self.path, self.use_mmap, self.repack = path, use_mmap, repack

    def context(self, inst: Instance):
        n_ctx = max(8, inst.n_prompt + inst.n_gen + inst.n_depth)
        try:
            c = _core().Context(self.model, n_ctx, n_seq=1, n_batch=inst.n_batch, n_ubatch=inst.n_ubatch,
                                n_threads=inst.n_threads, spec_type="none")
            if (inst.type_k, inst.type_v) != ("f16", "f16"):
                c.set_cache_types(inst.type_k, inst.type_v, "f16", "f16")
            return c
        except (ValueError, RuntimeError) as e:
            raise BenchError(f"error: failed to create context with model '{inst.model}': {e}")

    def _tokens(self, n: int, first_bos: bool) -> List[int]:
        toks = [self.rng.randrange(self.n_vocab) for _ in range(n)]
        if n and first_bos and self.bos is not None:
            toks[0] = self.bos
        return toks

    def _prompt_batches(self, n_prompt: int, n_batch: int, n_ubatch: int) -> List[List[int]]:
        toks = self._tokens(n_prompt, True)
        out, pos = [], 0
        for n in prompt_chunks(n_prompt, n_batch, n_ubatch):
            out.append(toks[pos:pos + n])
            pos += n
        return out

    def _eval_all(self, ctx, batches: List[List[int]], what: str):
        try:
            for b in batches:
                ctx.eval(0, b, False)
        except (ValueError, RuntimeError) as e:
            raise BenchError(f"error: failed to decode {what} batch: {e}")

    def sample(self, ctx, inst: Instance) -> int:
        """One timed repetition on a cleared context; returns nanoseconds."""
        ctx.seq_clear(0)
        if inst.n_depth > 0:
            self._eval_all(ctx, self._prompt_batches(inst.n_depth, inst.n_batch, inst.n_ubatch), "depth")
        pp = self._prompt_batches(inst.n_prompt, inst.n_batch, inst.n_ubatch) if inst.n_prompt else []
        tg = [[t] for t in self._tokens(inst.n_gen, True)]
        d0, w0 = ctx.n_dispatches(), ctx.dispatch_wait_ns()
        t0 = time.perf_counter_ns()
        self._eval_all(ctx, pp, "prompt")
        self._eval_all(ctx, tg, "generation")
        t = time.perf_counter_ns() - t0
        self.last_dispatches = (ctx.n_dispatches() - d0, ctx.dispatch_wait_ns() - w0)
        return t

    def warmup(self, ctx, inst: Instance):
        ctx.seq_clear(0)
        if inst.n_prompt > 0:
            self._eval_all(ctx, self._prompt_batches(inst.n_prompt, inst.n_batch, inst.n_ubatch), "warmup prompt")
        if inst.n_gen > 0:
            self._eval_all(ctx, [self._tokens(1, True)], "warmup generation")
        # the group kernels' read modes (cpu/prefetch_tune.h) are chosen by timing their products in each mode in
        # turn, per weight type and thread count, for one token and for batches of 2-8: settle the ones this test
        # runs here (a short prompt's batches, else one-token decodes), or its repetitions would run in the modes
        # being timed
        short = 1 < inst.n_prompt <= 8
        t0 = time.perf_counter()
        for _ in range(64):
            if _core().x16_prefetch(inst.n_threads) != "measuring" or time.perf_counter() - t0 > 30:
                break
            ctx.seq_clear(0)
            if short:
                self._eval_all(ctx, self._prompt_batches(inst.n_prompt, inst.n_batch, inst.n_ubatch), "warmup prompt")
            if inst.n_gen > 0 or not short:  # at position 0 (the context may hold 8 tokens)
                self._eval_all(ctx, [self._tokens(1, True)], "warmup decode")
        ctx.seq_clear(0)


# ------------------------------------------------------------------------------------------
# llama-bench (--vs)


class LlamaBench:
    def __init__(self, path: str, no_warmup: bool, verbose: bool):
        p = Path(path)
        if not p.exists():
            raise BenchError(f"error: --vs: llama-bench binary not found: {path}")
        if not p.is_file() or not os.access(p, os.X_OK):
            raise BenchError(f"error: --vs: {path} is not an executable file")
        self.path = str(p)
        self.no_warmup = no_warmup
        self.verbose = verbose

    def sample(self, inst: Instance) -> dict:
        """Runs llama-bench once for `inst` (-r 1 -o json); returns its one result object."""
        argv = [self.path, *llama_bench_argv(inst)] + (["--no-warmup"] if self.no_warmup else [])
        if self.verbose:
            print("pyllm bench: " + " ".join(argv), file=sys.stderr)
        try:
            r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        except OSError as e:
            raise BenchError(f"error: --vs: cannot run {self.path}: {e.strerror or e}")
        if r.returncode != 0:
            tail = " | ".join([ln for ln in (r.stderr or r.stdout).splitlines() if ln.strip()][-4:])
            raise BenchError(f"error: --vs: {self.path} exited with code {r.returncode} on {inst.name} "
                             f"({' '.join(argv[1:])}): {tail or '(no output)'}")
        try:
            res = json.loads(r.stdout)
        except ValueError as e:
            raise BenchError(f"error: --vs: {self.path} did not print llama-bench JSON for {inst.name}: {e}: "
                             f"{r.stdout[:200]!r}")
        if not isinstance(res, list) or len(res) != 1 or not isinstance(res[0], dict):
            raise BenchError(f"error: --vs: expected one llama-bench result for {inst.name}, got "
                             f"{len(res) if isinstance(res, list) else type(res).__name__}")
        obj = res[0]
        for k, want in (("n_prompt", inst.n_prompt), ("n_gen", inst.n_gen)):
            if obj.get(k) != want:
                raise BenchError(f"error: --vs: llama-bench ran {k}={obj.get(k)} for {inst.name}")
        if not obj.get("samples_ns"):
            raise BenchError(f"error: --vs: llama-bench result for {inst.name} has no samples_ns")
        return obj


# ------------------------------------------------------------------------------------------
# statistics and the run


def avg(v: List[float]) -> float:
    return sum(v) / len(v) if v else 0.0


def stdev(v: List[float]) -> float:
    """llama-bench's sample standard deviation (0 for fewer than 2 values)."""
    if len(v) <= 1:
        return 0.0
    m = avg(v)
    return math.sqrt(max(0.0, sum((x - m) ** 2 for x in v) / (len(v) - 1)))


def timing_fields(samples_ns: List[int], n_tokens: int, prefix: str = "") -> dict:
    ts = [1e9 * n_tokens / t for t in samples_ns]
    return {prefix + "avg_ns": int(avg(samples_ns)), prefix + "stddev_ns": int(stdev(samples_ns)),
            prefix + "avg_ts": avg(ts), prefix + "stddev_ts": stdev(ts),
            prefix + "samples_ns": list(samples_ns), prefix + "samples_ts": ts}


def make_row(inst: Instance, info: dict, samples_ns: List[int], bytes_per_tok: float, bw: Optional[float],
             vs_objs: Optional[List[dict]], test_time: str, dispatches: Optional[List[tuple]] = None) -> dict:
    n_tok = inst.n_prompt + inst.n_gen
    row = {"build_commit": _build(), "build_number": 0, "cpu_info": cpu_info(), "gpu_info": "", "backends": "CPU",
           **info, "n_batch": inst.n_batch, "n_ubatch": inst.n_ubatch, "n_threads": inst.n_threads,
           "type_k": inst.type_k, "type_v": inst.type_v, "n_gpu_layers": 0, "repack": bool(inst.repack), "n_prompt": inst.n_prompt,
           "n_gen": inst.n_gen, "n_depth": inst.n_depth, "test_time": test_time}
    row.update(timing_fields(samples_ns, n_tok))
    row["test"] = inst.name
    row["weight_bytes_per_token"] = int(round(bytes_per_tok))
    row["weight_gbps"] = bytes_per_tok * row["avg_ts"] / 1e9
    if dispatches and n_tok:
        row["dispatches_per_token"] = avg([d for d, _ in dispatches]) / n_tok
        row["dispatch_us_per_token"] = avg([w for _, w in dispatches]) / n_tok / 1e3
    if bw:
        row["read_bw_gbps"] = bw / 1e9
        row["read_bw_share"] = row["weight_gbps"] / row["read_bw_gbps"]
        row["t_excess_us"] = 1e6 / row["avg_ts"] - 1e6 * bytes_per_tok / bw
    if vs_objs:
        row["llamacpp_model_type"] = str(vs_objs[0].get("model_type", ""))
        row.update(timing_fields([int(o["samples_ns"][0]) for o in vs_objs], n_tok, "llamacpp_"))
        row["ratio"] = row["avg_ts"] / row["llamacpp_avg_ts"] if row["llamacpp_avg_ts"] else None
    return row


def run(params: BenchParams, out=None, err=None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    if not params.model:
        from pyllm.args import default_model
        m = default_model()
        if not m:
            raise BenchError("error: no model given (-m FILE) and no default model found")
        params.model = [m]
    insts = instances(params)
    vs = LlamaBench(params.vs, params.no_warmup, params.verbose) if params.vs else None
    bws: Dict[int, float] = {}
    notes: List[str] = []
    if params.bw:
        nbytes = bw_buffer_bytes()
        for nt in dict.fromkeys(params.n_threads):
            bws[nt] = read_bandwidth(nt, nbytes)
            notes.append(f"read bandwidth: {bws[nt] / 1e9:.2f} GB/s with -t {nt} (best of 5 reads x 7 patterns of "
                         f"{nbytes / 1024 ** 3:.2f} GiB; last-level cache {llc_bytes() / 1024 ** 2:.0f} MiB)")
    printers = [p for p in (make_printer(params.output, out, _build()), make_printer(params.output_err, err, _build()))
                if p is not None]
    for p in printers:
        p.header(params, notes)
    runner = PyllmRunner(params.verbose)

    def progress(i, msg):
        if params.progress:
            print(f"pyllm bench: benchmark {i}/{len(insts)}: {msg}", file=err, flush=True)

    for i, inst in enumerate(insts, 1):
        progress(i, "starting")
        runner.load(inst.model, inst.use_mmap, inst.repack)
        ctx = runner.context(inst)
        test_time = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if params.delay:
            time.sleep(params.delay)
        if not params.no_warmup:
            progress(i, "warmup run")
            runner.warmup(ctx, inst)
        samples, vs_objs, dispatches = [], [], []
        for r in range(params.reps):
            progress(i, f"pyllm run {r + 1}/{params.reps}")
            samples.append(runner.sample(ctx, inst))
            dispatches.append(runner.last_dispatches)
            if vs is not None:
                progress(i, f"llama-bench run {r + 1}/{params.reps}")
                vs_objs.append(vs.sample(inst))
        del ctx
        row = make_row(inst, runner.info, samples, runner.weights.per_token(inst), bws.get(inst.n_threads),
                       vs_objs or None, test_time, dispatches)
        for p in printers:
            p.row(row)
    from pyllm import _core
    for p in printers:  # what the decode products measured (cpu/prefetch_tune.h), now that they ran
        p.build = f"{_build()}, group-kernel prefetch: {_core.x16_prefetch()}"
        p.footer()
    return 0
