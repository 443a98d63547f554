"""pyllm-bench: generation throughput and MTP draft acceptance across --spec-draft-n-max values.

    pyllm-bench -m FILE --spec-type draft-mtp --spec-draft-n-max 1-7 [--tasks code,translate,story,agent,edit]
                [--edit-file F] [--spec-type ngram-mod | draft-mtp,ngram-mod | any type or comma list]
                [--prompt-file F ...] [-p PROMPT] [-n 256] [-r 3] [-t THREADS] [--no-chat]
                [--json F] [--csv F] [--plot F.png] [--spec-synth-len L | --spec-synth-rates P0,P1,...]

Every sweep runs the baseline (no speculation) and each n_max on the same prompts (greedy, EOS ignored, a
warm-up generation before each setting, -r repetitions). Engines:

* in-process (default with -m): pyllm's core in this process;
* `--server URL`: a running server with llama-server's API (POST /completion, `timings`). A running server
  has one fixed configuration: label it with a single `--spec-draft-n-max N` (0 = a baseline server);
* `--server-cmd "CMD"` (repeatable): the command is started once per setting on 127.0.0.1 with a free port,
  with `--host 127.0.0.1 --port P [--spec-type T --spec-draft-n-max N [--spec-synth-*]]` appended (nothing
  for the baseline), waited for (/health 200), measured and terminated. `--engine-name NAME` (repeatable)
  labels the server commands in order (default: llama.cpp / pyllm-server / the program name). Add
  `--in-process` to measure the in-process engine ("pyllm") in the same command, e.g.

      pyllm-bench -m F.gguf --in-process --spec-draft-n-max 1-7 -t 2 \\
          --server-cmd "llama-server -m F.gguf -t 2 -c 4096 -np 1" --engine-name llama.cpp \\
          --server-cmd "pyllm-server -m F.gguf -t 2 -c 4096 -np 1" --engine-name pyllm-server

The other flags are llama.cpp's and go through pyllm.args.parse_args(argv, "bench"): -m, -n, -r, -t, -c, -b,
-ub, -p, --spec-type, --spec-draft-n-min, --spec-draft-p-min, --spec-synth-len, --spec-synth-rates,
--no-warmup, ... The bench-only flags (range-valued --spec-draft-n-max, --tasks, --prompt-file/-f, --no-chat,
--server, --server-cmd, --engine-name, --in-process, --json, --csv, --plot, --no-progress,
--server-timeout) are parsed here. With --spec-synth-rates, give the rates for the largest n_max; each
setting uses the first n_max of them (and --spec-synth-len is clamped to n_max + 1).

Output: a Markdown table on stdout (progress on stderr). Timings are llama-server's: prompt tok/s =
n_prompt / t_prompt, generation tok/s = (n_gen - 1) / t_gen. Measurements on a shared machine are noisy:
use -r 3 or more and look at min..max.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

BENCH_USAGE = """usage: pyllm-bench -m FILE [--spec-type draft-mtp] [--spec-draft-n-max 1-7] [options]

bench options:
  --spec-draft-n-max RANGE   n_max values: 1-7, 1,3,5, 0 (baseline only), auto / auto:CAP (the adaptive draft
                             length, e.g. 1-7,auto); the baseline always runs (default 1-7)
  --tasks LIST               built-in prompts: code,translate,story,agent,edit or all (default: all, unless prompts
                             given); edit asks to rewrite a file with small changes (the answer repeats the context)
  --edit-file F              the edit task on file F (repeatable; task name edit-<stem>)
  --prompt-file F, -f F      a prompt file: plain text (one prompt) or a JSON list of strings / {"name","prompt"};
                             repeatable
  -p PROMPT                  one prompt (task name "prompt")
  --no-chat                  send the raw prompt (default: the model's chat template with add_generation_prompt)
  -n N                       tokens to generate per run (default 256)
  -r N                       repetitions per setting and task (default 3)
  -t N                       threads (in-process engine)
  --no-warmup                skip the warm-up generation before each setting
  --server URL               measure a running llama-server-API server (one setting)
  --server-cmd CMD           start CMD once per setting (repeatable, one engine each)
  --engine-name NAME         label of the matching --server-cmd (repeatable, in order)
  --in-process               with --server/--server-cmd: also measure pyllm in-process (needs -m)
  --server-timeout S         seconds to wait for a started server's /health (default 600)
  --json F / --csv F         write the statistics (and raw runs in JSON)
  --plot F.png               tokens/s per n_max and task, baseline dashed, one series per engine
  --no-progress              no progress bar on stderr
  --spec-synth-len L / --spec-synth-rates P0,...   synthetic acceptance (passed to the core / server commands)
  other llama.cpp flags: -c, -b, -ub, --spec-type, --spec-draft-n-min, --spec-draft-p-min, ...
"""

# bench-only flags: name -> (dest, takes value, repeatable)
_FLAGS = {
    "--spec-draft-n-max": ("n_max", True, False),
    "--tasks": ("tasks", True, False),
    "--edit-file": ("edit_files", True, True),
    "--prompt-file": ("prompt_files", True, True),
    "-f": ("prompt_files", True, True),
    "--file": ("prompt_files", True, True),
    "--no-chat": ("no_chat", False, False),
    "--server": ("server", True, False),
    "--server-cmd": ("server_cmds", True, True),
    "--engine-name": ("engine_names", True, True),
    "--in-process": ("in_process", False, False),
    "--server-timeout": ("server_timeout", True, False),
    "--json": ("json", True, False),
    "--csv": ("csv", True, False),
    "--plot": ("plot", True, False),
    "--no-progress": ("no_progress", False, False),
}


class UsageError(Exception):
    pass


def split_argv(argv: list):
    """Take the bench-only flags out of argv; the rest is for pyllm.args.parse_args."""
    opts = {"n_max": None, "tasks": None, "prompt_files": [], "edit_files": [], "no_chat": False, "server": None, "server_cmds": [],
            "engine_names": [], "in_process": False, "server_timeout": "600", "json": None, "csv": None,
            "plot": None, "no_progress": False}
    rest = []
    i = 0
    while i < len(argv):
        a = argv[i]
        key = a.replace("_", "-") if a.startswith("--") else a
        if key in _FLAGS:
            dest, val, rep = _FLAGS[key]
            if val:
                if i + 1 >= len(argv):
                    raise UsageError(f'error while handling argument "{a}": expected value for argument')
                v = argv[i + 1]
                i += 1
            else:
                v = True
            if rep:
                opts[dest].append(v)
            else:
                opts[dest] = v
        else:
            rest.append(a)
        i += 1
    return opts, rest


class Progress:
    """A one-line progress bar on stderr (plain lines when stderr is not a terminal)."""

    def __init__(self, total: int, enabled: bool = True, stream=None):
        self.total = max(total, 1)
        self.done = 0
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.t0 = time.monotonic()

    def note(self, msg: str):
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r\033[K")
        self.stream.write(msg + "\n")
        self.stream.flush()

    def step(self, label: str):
        self.done += 1
        if not self.enabled:
            return
        frac = self.done / self.total
        el = time.monotonic() - self.t0
        eta = el / frac - el if frac > 0 else 0
        width = 24
        bar = "#" * int(frac * width) + "." * (width - int(frac * width))
        line = f"[{bar}] {self.done}/{self.total} {label} (elapsed {el:.0f}s, eta {eta:.0f}s)"
        if self.tty:
            self.stream.write("\r\033[K" + line)
            if self.done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def gguf_info(path: str) -> dict:
    """name, chat template and whether the file has MTP (nextn) layers, from the GGUF header only."""
    from pyllm import GGUFFile
    g = GGUFFile(path)
    arch = g.get("general.architecture") or ""
    return {"name": g.get("general.name") or Path(path).stem, "chat_template": g.get("tokenizer.chat_template"),
            "has_mtp": int(g.get(f"{arch}.nextn_predict_layers") or 0) > 0}


def _prompts(opts, p) -> list:
    from pyllm.bench.prompts import TASKS, TASK_NAMES, load_edit_file, load_prompt_file, parse_tasks
    out = []
    user = bool(opts["prompt_files"] or opts["edit_files"] or p.prompt)
    if opts["tasks"]:
        out += [(t, TASKS[t]) for t in parse_tasks(opts["tasks"])]
    elif not user:
        out += [(t, TASKS[t]) for t in TASK_NAMES]
    if p.prompt:
        out.append(("prompt", p.prompt))
    for f in opts["prompt_files"]:
        out += load_prompt_file(f)
    for f in opts["edit_files"]:
        out += load_edit_file(f)
    # unique names
    seen, res = {}, []
    for name, text in out:
        k = seen.get(name, 0)
        seen[name] = k + 1
        res.append((name if k == 0 else f"{name}-{k + 1}", text))
    return res


def run_bench(argv: list) -> int:
    from pyllm.args import ArgError, check_supported, parse_args
    from pyllm.bench import output
    from pyllm.bench.prompts import render_prompt
    from pyllm.bench.runners import (BenchError, HTTPEngine, InProcess, ServerProcess, cmd_flag,
                                     default_engine_name, ngram_argv, spec_flags)
    from pyllm.generation import kv_cache_types, uses_mtp
    from pyllm.bench.stats import draft_cap, n_max_flag, parse_range, summarize

    if any(a in ("-h", "--help", "--usage") for a in argv):
        sys.stdout.write(BENCH_USAGE)
        return 0
    opts, rest = split_argv(argv)
    env = dict(os.environ)
    rng = opts["n_max"] if opts["n_max"] is not None else env.pop("LLAMA_ARG_SPEC_DRAFT_N_MAX", None)
    env.pop("LLAMA_ARG_SPEC_DRAFT_N_MAX", None)
    explicit_n = rng is not None
    n_values = parse_range(rng if rng is not None else "1-7")
    flags = {a.replace("_", "-") if a.startswith("--") else a for a in rest}
    explicit_spec = "--spec-type" in flags or "LLAMA_ARG_SPEC_TYPE" in env
    max_n = max((draft_cap(n) for n in n_values), default=0)
    try:
        p = parse_args(rest + ["--spec-draft-n-max", str(max_n)], "bench", env=env)
    except ArgError as e:
        if "synthetic acceptance" in str(e):
            raise ArgError(f"{str(e).strip()} (give them for the largest --spec-draft-n-max, {max_n}: "
                           f"each setting uses the first n_max of them)")
        raise

    spec_type = p.spec_type if explicit_spec else "draft-mtp"
    if spec_type == "none":
        n_values = []
    n_predict = p.n_predict if p.n_predict > 0 else 256
    reps = p.n_repetitions if ("-r" in flags or "--repetitions" in flags) else 3
    if reps < 1:
        raise UsageError("error: -r must be >= 1")
    if opts["plot"]:
        from pyllm.bench.output import require_matplotlib
        require_matplotlib()  # before the measurements, not after them
    threads = p.n_threads if p.n_threads > 0 else (os.cpu_count() or 1)
    if p.n_threads <= 0 and opts["server_cmds"] and not opts["in_process"]:
        import shlex
        from pyllm.bench.runners import cmd_flag as _cf
        t = _cf(shlex.split(opts["server_cmds"][0]), ("-t", "--threads"))
        threads = int(t) if t and t.isdigit() else threads
    try:
        server_timeout = float(opts["server_timeout"])
    except ValueError:
        raise UsageError(f"error: bad --server-timeout '{opts['server_timeout']}'")
    prompts = _prompts(opts, p)
    use_chat = not opts["no_chat"]

    server_cmds = opts["server_cmds"]
    names = list(opts["engine_names"])
    if len(names) > len(server_cmds) + (1 if opts["server"] else 0):
        raise UsageError("error: more --engine-name than --server-cmd/--server")
    in_process = not (server_cmds or opts["server"]) or opts["in_process"]
    if in_process and not p.model:
        from pyllm.args import resolve_model
        resolve_model(p)
    if opts["server"] and not server_cmds and explicit_n and len(n_values) > 1:
        raise UsageError("error: --server URL measures one running server (one setting); give a single "
                         "--spec-draft-n-max N (0 = baseline server) or use --server-cmd to sweep")

    def synth_for(n: int):
        n = draft_cap(n)
        sl = p.spec_synth_len
        if sl != -1.0:
            sl = min(sl, n + 1.0)
        return sl, list(p.spec_synth_rates[:n])

    def n_label(n: int) -> str:
        return "baseline" if n == 0 else f"n_max={n_max_flag(n)}"

    # model info for titles, chat templates and the MTP check
    model_path = p.model or None
    if not model_path:
        for c in server_cmds:
            import shlex
            mp = cmd_flag(shlex.split(c), ("-m", "--model"))
            if mp:
                model_path = mp
                break
    info = {}
    if model_path and os.path.isfile(model_path):
        try:
            info = gguf_info(model_path)
        except (ValueError, OSError) as e:
            raise BenchError(f"error: failed to read model '{model_path}': {e}")
    model_name = Path(model_path).name if model_path else (opts["server"] or "server")

    engines = []
    runs = []
    failure = None
    try:
        if in_process:
            try:
                check_supported(p)
            except ArgError as e:
                raise BenchError(str(e).strip())
            eng = InProcess(p.model, threads, spec_type, n_ctx=0, n_batch=p.n_batch, n_ubatch=p.n_ubatch,
                            n_min=p.spec_draft_n_min, p_min=p.spec_draft_p_min, name="pyllm", ngram=p.spec_ngram(),
                            draft_path=p.spec_draft_model, draft_threads=max(0, p.spec_draft_threads),
                            spec_opts={"draft_head_type": p.spec_draft_head_type, "draft_vocab": p.spec_draft_vocab,
                                       "accept": p.spec_accept}, ctx_opts=kv_cache_types(p))
            if n_values and uses_mtp(spec_type) and not eng.file_has_mtp:
                raise BenchError(f"error: {p.model} has no MTP layers: --spec-type draft-mtp needs a model with "
                                 f"nextn/MTP layers (use --spec-draft-n-max 0 for the baseline only)")
            engines.append(eng)
        elif n_values and uses_mtp(spec_type) and info and not info["has_mtp"]:
            raise BenchError(f"error: {model_path} has no MTP layers: --spec-type draft-mtp needs a model with "
                             f"nextn/MTP layers (use --spec-draft-n-max 0 for the baseline only)")
        used = {e.name for e in engines}

        def unique(name):
            k, cand = 1, name
            while cand in used:
                k += 1
                cand = f"{name}-{k}"
            used.add(cand)
            return cand

        for i, c in enumerate(server_cmds):
            engines.append(ServerProcess(c, unique(names[i] if i < len(names) else default_engine_name(c)),
                                         startup_timeout=server_timeout))
        if opts["server"]:
            k = len(server_cmds)
            eng = HTTPEngine(opts["server"], unique(names[k] if k < len(names) else "server"))
            eng.check()
            engines.append(eng)

        # prompts per engine (same text for every engine that has the same template)
        def prompt_texts(eng):
            tmpl = None
            if use_chat:
                if isinstance(eng, InProcess):
                    tmpl = eng.chat_template
                elif info:
                    tmpl = info.get("chat_template")
                elif isinstance(eng, HTTPEngine) and not isinstance(eng, ServerProcess):
                    tmpl = eng.props().get("chat_template")
            try:
                return [(name, render_prompt(text, tmpl, use_chat)) for name, text in prompts]
            except ValueError as e:
                raise BenchError(f"error: chat template: {e} (use --no-chat)")

        if isinstance(engines[0], InProcess) and in_process:
            eng = engines[0]
            toks = [eng.tokenize(t) for _, t in prompt_texts(eng)]
            eng.n_ctx = p.n_ctx if p.n_ctx > 0 else ((max(len(t) for t in toks) + n_predict + max_n + 64 + 255)
                                                    // 256 * 256)

        # a running server has one fixed setting: labelled with the single n_max given, else "server" (-1)
        server_label = (n_values[0] if len(n_values) == 1 else 0 if not n_values else -1) if explicit_n else -1
        settings_per_engine = [[server_label] if (isinstance(e, HTTPEngine) and not isinstance(e, ServerProcess))
                               else [0] + n_values for e in engines]
        total = sum(len(s) for s in settings_per_engine) * reps * len(prompts)
        prog = Progress(total, enabled=not opts["no_progress"])
        prog.note(f"pyllm-bench: {model_name}, {len(engines)} engine(s), n_max {[0] + n_values}, "
                  f"{len(prompts)} prompt(s), n_predict {n_predict}, {reps} repetition(s), threads {threads}")
        try:
            for eng, ns in zip(engines, settings_per_engine):
                texts = prompt_texts(eng)
                if isinstance(eng, InProcess):
                    inputs = [(name, eng.tokenize(t)) for name, t in texts]
                else:
                    inputs = texts
                def measure(n, rep):
                    for name, inp in inputs:
                        r = eng.run(inp, n_predict, name, n, rep)
                        runs.append(r)
                        prog.step(f"{eng.name} {n_label(n)} {name} r{rep + 1}: {r.gen_tps:.1f} tok/s")

                if isinstance(eng, InProcess):
                    # every setting keeps its context: they alternate repetition by repetition, so all see the
                    # same machine load (a drift on a shared machine would otherwise favour one n_max)
                    for n in ns:
                        eng.setup(n, *synth_for(n))
                        if p.warmup:
                            eng.run(inputs[0][1], min(n_predict, 32), "warmup", n, -1)
                    for rep in range(reps):
                        for n in ns:
                            eng.setup(n, *synth_for(n))
                            measure(n, rep)
                    continue
                for n in ns:  # a server per setting: one after the other
                    if isinstance(eng, ServerProcess):
                        prog.note(f"{eng.name}: starting server ({n_label(n)})")
                        eng.start(spec_flags(spec_type, n, *synth_for(n), ngram_argv(rest)), n_label(n))
                    if p.warmup:
                        eng.run(inputs[0][1], min(n_predict, 32), "warmup", n, -1)
                    for rep in range(reps):
                        measure(n, rep)
                    if n > 0 and all(r.n_draft == 0 for r in runs if r.engine == eng.name and r.n_max == n):
                        prog.note(f"warning: {eng.name} reported no drafted tokens for {n_label(n)} "
                                  f"(does it support --spec-type {spec_type}?)")
                    if isinstance(eng, ServerProcess):
                        eng.stop()
        except BenchError as e:       # keep what was measured: print/write it, then fail
            if not runs:
                raise
            failure = e
            prog.note(f"stopped by an error (below): reporting the {len(runs)} run(s) measured so far")
    finally:
        for e in engines:
            e.close()

    settings = summarize(runs)
    if p.spec_synth_len != -1.0 or p.spec_synth_rates:
        for s in settings:
            if s.n_max != 0:
                s.synthetic, s.same_as_baseline = True, None
    meta = {"tool": "pyllm-bench", "model": model_path, "model_name": model_name, "threads": threads,
            "n_predict": n_predict, "repetitions": reps, "spec_type": spec_type, "n_max": [0] + n_values,
            "chat": use_chat, "engines": [e.name for e in engines],
            "server_cmds": {e.name: e.cmd for e in engines if isinstance(e, ServerProcess)},
            "prompts": {name: text for name, text in prompts},
            "synth_len": p.spec_synth_len if p.spec_synth_len != -1.0 else None,
            "synth_rates": p.spec_synth_rates or None,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "note": "timings on a shared machine are noisy"}
    sys.stdout.write(output.markdown(settings, meta))
    sys.stdout.flush()
    try:
        if opts["json"]:
            output.write_json(opts["json"], settings, meta)
        if opts["csv"]:
            output.write_csv(opts["csv"], settings)
        if opts["plot"]:
            title = (f"{model_name}: generation tokens/s vs --spec-draft-n-max\n"
                     f"{' vs '.join(e.name for e in engines)}, {threads} thread{'s' if threads != 1 else ''}, {spec_type}, "
                     f"n_predict {n_predict}, {reps} repetition(s)")
            output.plot(opts["plot"], settings, title)
    except OSError as e:
        raise BenchError(f"error: cannot write output: {e}")
    if failure is not None:
        raise failure
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    from pyllm.args import ArgError
    from pyllm.bench.prompts import PromptError
    from pyllm.bench.runners import BenchError
    from pyllm.bench.stats import RangeError
    try:
        return run_bench(argv)
    except (ArgError, BenchError, PromptError, RangeError, UsageError) as e:
        msg = (str(e).strip().splitlines() or ["failed"])[0]
        print(msg if msg.startswith("error") else f"error: {msg}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
