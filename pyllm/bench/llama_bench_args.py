"""`pyllm bench` command line: llama-bench's flags, defaults, list/range syntax and test expansion
(tools/llama-bench/llama-bench.cpp of the vendored llama.cpp), for the flags that mean something on pyllm.

Every numeric test flag takes comma lists and ranges and may be repeated (values accumulate): `-t 1,2`,
`-p 32,512`, `-p 16-64+16` (16,32,48,64), `-p 1-256*4` (1,4,16,64,256). `-m` takes comma lists too.
llama-bench flags pyllm has no equivalent for (GPU offload, NUMA, CPU masks, ...) are refused with a message
naming the flag, as are unknown flags: a flag is never accepted and silently ignored.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from ..flags import KV_CACHE_TYPES

OUTPUT_FORMATS = ("none", "csv", "json", "jsonl", "md", "sql")
# llama-bench's ggml_type_from_name for -ctk/-ctv
KV_TYPES = ("f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")
# the ones pyllm's KV cache holds (csrc/memory/memory.h)
PYLLM_KV_TYPES = KV_CACHE_TYPES

DEFAULTS = dict(n_prompt=[512], n_gen=[128], n_pg=[], n_depth=[0], n_batch=[2048], n_ubatch=[512],
                type_k=["f16"], type_v=["f16"], reps=5, delay=0, output="md", output_err="none")

# llama-bench flags (with a value unless listed in _NO_VALUE) that pyllm cannot honour
UNSUPPORTED = {
    "-ngl": "GPU offload", "--n-gpu-layers": "GPU offload", "-ncmoe": "GPU offload", "--n-cpu-moe": "GPU offload",
    "-sm": "multi-GPU split", "--split-mode": "multi-GPU split", "-mg": "multi-GPU", "--main-gpu": "multi-GPU",
    "-ts": "multi-GPU split", "--tensor-split": "multi-GPU split", "-dev": "devices", "--device": "devices",
    "-ot": "buffer overrides", "--override-tensor": "buffer overrides", "-nkvo": "KV offload",
    "--no-kv-offload": "KV offload", "-nopo": "op offload", "--no-op-offload": "op offload",
    "--no-host": "host buffers", "-fa": "flash-attention choice",
    "--flash-attn": "flash-attention choice", "-embd": "embeddings mode", "--embeddings": "embeddings mode",
    "-C": "CPU masks", "--cpu-mask": "CPU masks", "--cpu-strict": "CPU masks", "--poll": "thread polling level",
    "--numa": "NUMA modes", "--prio": "thread priorities", "-lm": "load modes", "--load-mode": "load modes",
    "-lzm": "lazy loading", "--lazy-mode": "lazy loading", "-fitt": "device fitting", "--fit-target": "device fitting",
    "-fitc": "device fitting", "--fit-ctx": "device fitting", "-rpc": "RPC", "--rpc": "RPC",
    "-hf": "downloads", "-hfr": "downloads", "--hf-repo": "downloads", "-hff": "downloads", "--hf-file": "downloads",
    "-hft": "downloads", "--hf-token": "downloads", "--offline": "downloads", "--list-devices": "devices",
}

USAGE = """usage: pyllm bench [options]

llama-bench's interface on pyllm's core (CPU). Each test runs a warm-up, then -r repetitions;
pp = one prompt of N random tokens on an empty context (in -b batches of -ub ubatches), tg = N single-token
decode steps from an empty context, pp+tg = both in one sample.

options:
  -h, --help
  -r, --repetitions <n>                 number of times to repeat each test (default: 5)
  --delay <0...N> (seconds)             delay before each test (default: 0)
  -o, --output <csv|json|jsonl|md|sql>  output format printed to stdout (default: md)
  -oe, --output-err <csv|json|jsonl|md|sql>  output format printed to stderr (default: none)
  -v, --verbose                         verbose output (model loading, llama-bench command lines)
  --progress                            print test progress indicators
  --no-warmup                           skip warmup runs before benchmarking

test parameters:
  -m, --model <filename>                (default: pyllm's shipped model)
  -p, --n-prompt <n>                    (default: 512)
  -n, --n-gen <n>                       (default: 128)
  -pg <pp,tg>                           (default: none)
  -d, --n-depth <n>                     (default: 0)
  -b, --batch-size <n>                  (default: 2048)
  -ub, --ubatch-size <n>                (default: 512)
  -ctk, --cache-type-k <t>              (default: f16; pyllm: f16, bf16, q8_0, q4_0)
  -ctv, --cache-type-v <t>              (default: f16)
  -t, --threads <n>                     (default: physical cores: {threads})
  -mmp, --mmap <0|1>                    (default: pyllm reads the file into memory when it takes at most half
                                        of the available memory, else maps it; llama-bench maps it)
  --repack <0|1>                        (default: 1; pyllm: matrices into 16-row groups at load, Q4_K, IQ4_NL
                                        and Q8_0 on AVX-512 CPUs, Q4_K, Q4_0 and Q4_1 on AVX2 ones; llama.cpp:
                                        its CPU weight repacking)

pyllm additions:
  --vs PATH                             also run llama-bench (PATH) on the same file and flags, interleaved
                                        repetition by repetition (llama-bench -r 1 -o json), with the ratio
                                        pyllm/llama.cpp beside each row
  --bw                                  measure the machine's read bandwidth (multithreaded read of a buffer
                                        much larger than the last-level cache) for each -t, and show decode
                                        GB/s as a share of it (json/csv also get t_excess_us: the time per
                                        token that reading the weights at that bandwidth does not explain)

Columns beyond llama-bench's: the weight bytes one token reads (decode: every weight tensor but token_embd,
unless it is also the output matrix, and the MTP layer; MoE: only n_expert_used of n_expert experts;
prompt: weights read once per ubatch, shared by its tokens) and the GB/s that implies at the measured t/s;
dispatch/tok: the thread-pool dispatches per token (0 at -t 1) and, in brackets, the time per token the calling
thread waited in them for the workers (json/csv: dispatches_per_token, dispatch_us_per_token).

Multiple values can be given for each parameter by separating them with ','
or by specifying the parameter multiple times. Ranges can be given as
'first-last' or 'first-last+step' or 'first-last*mult'.
"""


class BenchArgError(ValueError):
    """Bad command line: the message is printed as is and the command exits 1."""


_RANGE = re.compile(r"(\d+)(?:-(\d+)(?:([+*])(\d+))?)?(?:,|$)")


def parse_int_range(s: str) -> List[int]:
    """llama-bench's parse_int_range: comma-separated `first[-last[(+|*)step]]` items."""
    if not s:
        raise BenchArgError("invalid range format: ''")
    out: List[int] = []
    pos = 0
    while pos < len(s):
        m = _RANGE.match(s, pos)
        if not m:
            raise BenchArgError(f"invalid range format: '{s}'")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        op = m.group(3) or "+"
        step = int(m.group(4)) if m.group(4) is not None else 1
        i = first
        while i <= last:
            out.append(i)
            nxt = i + step if op == "+" else i * step
            if nxt <= i:
                raise BenchArgError(f"invalid range: '{s}' (the step does not advance)")
            i = nxt
        pos = m.end()
    return out


def physical_cores() -> int:
    """What llama-bench defaults -t to: physical cores (one per SMT sibling group) this process may use."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
    groups = set()
    for c in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list") as f:
                groups.add(f.read().strip())
        except OSError:
            groups.add(str(c))
    return max(1, len(groups))


@dataclass
class BenchParams:
    model: List[str] = field(default_factory=list)
    n_prompt: List[int] = field(default_factory=list)
    n_gen: List[int] = field(default_factory=list)
    n_pg: List[Tuple[int, int]] = field(default_factory=list)
    n_depth: List[int] = field(default_factory=list)
    n_batch: List[int] = field(default_factory=list)
    n_ubatch: List[int] = field(default_factory=list)
    type_k: List[str] = field(default_factory=list)
    type_v: List[str] = field(default_factory=list)
    n_threads: List[int] = field(default_factory=list)
    use_mmap: List[int] = field(default_factory=list)  # empty: each side's default
    repack: List[int] = field(default_factory=list)  # empty: [1]
    reps: int = 5
    delay: int = 0
    output: str = "md"
    output_err: str = "none"
    verbose: bool = False
    progress: bool = False
    no_warmup: bool = False
    vs: Optional[str] = None
    bw: bool = False
    help: bool = False

    def is_default(self, name: str) -> bool:
        return getattr(self, name) == DEFAULTS[name]


@dataclass
class Instance:
    """One test: llama-bench's cmd_params_instance restricted to what pyllm varies."""
    model: str
    n_prompt: int
    n_gen: int
    n_depth: int
    n_batch: int
    n_ubatch: int
    type_k: str
    type_v: str
    n_threads: int
    use_mmap: Optional[int] = None  # -mmp (None: each side's default)
    repack: int = 1  # --repack

    @property
    def name(self) -> str:
        if self.n_prompt > 0 and self.n_gen == 0:
            s = f"pp{self.n_prompt}"
        elif self.n_gen > 0 and self.n_prompt == 0:
            s = f"tg{self.n_gen}"
        else:
            s = f"pp{self.n_prompt}+tg{self.n_gen}"
        return s + (f" @ d{self.n_depth}" if self.n_depth > 0 else "")


def _int(flag: str, v: str) -> int:
    try:
        return int(v)
    except ValueError:
        raise BenchArgError(f"error: invalid value for {flag}: '{v}' (expected an integer)")


def _kv_types(flag: str, v: str) -> List[str]:
    out = []
    for t in v.split(","):
        if t not in KV_TYPES:
            raise BenchArgError(f"error: invalid parameter for argument: {flag} ('{t}'; llama-bench takes "
                                f"{', '.join(KV_TYPES)})")
        if t not in PYLLM_KV_TYPES:
            raise BenchArgError(f"error: {flag} {t}: pyllm's KV cache holds {', '.join(PYLLM_KV_TYPES)}")
        out.append(t)
    return out


def parse_args(argv: List[str]) -> BenchParams:
    p = BenchParams()
    lists = {"-p": "n_prompt", "--n-prompt": "n_prompt", "-n": "n_gen", "--n-gen": "n_gen",
             "-d": "n_depth", "--n-depth": "n_depth", "-b": "n_batch", "--batch-size": "n_batch",
             "-ub": "n_ubatch", "--ubatch-size": "n_ubatch", "-t": "n_threads", "--threads": "n_threads"}
    i = 0
    while i < len(argv):
        raw = argv[i]
        arg = raw.replace("_", "-") if raw.startswith("--") else raw  # llama-bench accepts --n_prompt too
        i += 1

        def value() -> str:
            nonlocal i
            if i >= len(argv):
                raise BenchArgError(f"error: invalid parameter for argument: {raw} (missing value)")
            i += 1
            return argv[i - 1]

        if arg in ("-h", "--help"):
            p.help = True
        elif arg in ("-m", "--model"):
            p.model += [m for m in value().split(",") if m]
        elif arg in lists:
            v = value()
            try:
                getattr(p, lists[arg]).extend(parse_int_range(v))
            except BenchArgError as e:
                raise BenchArgError(f"error: {e} (for {raw})")
        elif arg in ("-mmp", "--mmap"):
            for v in value().split(","):
                if v not in ("0", "1"):
                    raise BenchArgError(f"error: invalid parameter for argument: {raw} '{v}' (0 or 1)")
                p.use_mmap.append(int(v))
        elif arg == "--repack":
            for v in value().split(","):
                if v not in ("0", "1"):
                    raise BenchArgError(f"error: invalid parameter for argument: {raw} '{v}' (0 or 1)")
                p.repack.append(int(v))
        elif arg == "-pg":
            v = value()
            parts = v.split(",")
            if len(parts) != 2:
                raise BenchArgError(f"error: invalid parameter for argument: -pg '{v}' (expected PP,TG)")
            p.n_pg.append((_int("-pg", parts[0]), _int("-pg", parts[1])))
        elif arg in ("-ctk", "--cache-type-k"):
            p.type_k += _kv_types(raw, value())
        elif arg in ("-ctv", "--cache-type-v"):
            p.type_v += _kv_types(raw, value())
        elif arg in ("-r", "--repetitions"):
            p.reps = _int(raw, value())
        elif arg == "--delay":
            p.delay = _int(raw, value())
        elif arg in ("-o", "--output", "-oe", "--output-err"):
            v = value()
            if v not in OUTPUT_FORMATS:
                raise BenchArgError(f"error: invalid parameter for argument: {raw} '{v}' "
                                    f"(one of {', '.join(OUTPUT_FORMATS)})")
            if arg in ("-o", "--output"):
                p.output = v
            else:
                p.output_err = v
        elif arg in ("-v", "--verbose"):
            p.verbose = True
        elif arg == "--progress":
            p.progress = True
        elif arg == "--no-warmup":
            p.no_warmup = True
        elif arg == "--vs":
            p.vs = value()
        elif arg == "--bw":
            p.bw = True
        elif arg in UNSUPPORTED:
            raise BenchArgError(f"error: {raw}: pyllm bench runs on pyllm's CPU core and has no {UNSUPPORTED[arg]}; "
                                f"this llama-bench flag is not supported")
        elif arg == "--version":
            raise BenchArgError("error: --version: use `pyllm --help` / pip show pyllm")
        else:
            raise BenchArgError(f"error: invalid parameter for argument: {raw} (unknown flag; see pyllm bench -h)")
    if p.help:
        return p
    if p.reps < 1:
        raise BenchArgError(f"error: -r must be at least 1, got {p.reps}")
    if p.delay < 0:
        raise BenchArgError(f"error: --delay must be >= 0, got {p.delay}")
    for name, default in DEFAULTS.items():
        if isinstance(default, list) and not getattr(p, name):
            setattr(p, name, list(default))
    if not p.n_threads:
        p.n_threads = [physical_cores()]
    for name in ("n_batch", "n_ubatch", "n_threads"):
        bad = [v for v in getattr(p, name) if v < 1]
        if bad:
            raise BenchArgError(f"error: {name} must be >= 1, got {bad[0]}")
    for a, b in p.n_pg:
        if a < 0 or b < 0:
            raise BenchArgError(f"error: -pg values must be >= 0, got {a},{b}")
    return p


def instances(p: BenchParams) -> List[Instance]:
    """llama-bench's get_cmd_params_instances order: model, n_batch, n_ubatch, type_k, type_v, threads, depth, then
    the pp tests, the tg tests and the pp+tg pairs (zeros skipped)."""
    out = []
    for m in p.model:
        for nb in p.n_batch:
            for nub in p.n_ubatch:
                for tk in p.type_k:
                    for tv in p.type_v:
                        for nt in p.n_threads:
                          for mm in p.use_mmap or [None]:
                           for rp in p.repack or [1]:
                            for nd in p.n_depth:
                                base = dict(model=m, n_depth=nd, n_batch=nb, n_ubatch=nub, type_k=tk, type_v=tv,
                                            n_threads=nt, use_mmap=mm, repack=rp)
                                out += [Instance(n_prompt=n, n_gen=0, **base) for n in p.n_prompt if n != 0]
                                out += [Instance(n_prompt=0, n_gen=n, **base) for n in p.n_gen if n != 0]
                                out += [Instance(n_prompt=a, n_gen=b, **base) for a, b in p.n_pg
                                        if not (a == 0 and b == 0)]
    return out


def llama_bench_argv(inst: Instance) -> List[str]:
    """The llama-bench flags that run exactly `inst`, once (-r 1), as JSON."""
    if inst.n_prompt > 0 and inst.n_gen > 0:
        tests = ["-p", "0", "-n", "0", "-pg", f"{inst.n_prompt},{inst.n_gen}"]
    else:
        tests = ["-p", str(inst.n_prompt), "-n", str(inst.n_gen)]
    return ["-m", inst.model, *tests, "-d", str(inst.n_depth), "-b", str(inst.n_batch), "-ub", str(inst.n_ubatch),
            "-ctk", inst.type_k, "-ctv", inst.type_v, "-t", str(inst.n_threads), "--repack", str(inst.repack), "-r", "1",
            "-o", "json"] + (["-mmp", str(inst.use_mmap)] if inst.use_mmap is not None else [])
