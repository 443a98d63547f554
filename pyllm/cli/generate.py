"""`pyllm generate`: one prompt in, generated text streamed to stdout (llama-completion style).

    pyllm generate [-m FILE] -p PROMPT [-n N] [-c CTX] [-t THREADS] [--temp T --top-k K --top-p P --min-p P --seed S]
                   [--spec-type draft-mtp --spec-draft-n-max N]

Flags are parsed by pyllm.args (llama.cpp names and messages). The prompt is echoed first (as llama.cpp does;
--no-display-prompt turns that off), then the generated text is written as it is produced. At the end a timing line
goes to stderr, and with --spec-type draft-mtp llama.cpp's `draft acceptance = ...` line.
"""
from __future__ import annotations

import os
import sys
import time

from ..args import ArgError, Params, check_supported, noop_notice, parse_args, resolve_model, usage

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b", "f": "\f",
            "v": "\v", "0": "\0"}


def process_escapes(s: str) -> str:
    """llama.cpp's string_process_escapes for the common escapes (\\n, \\t, \\\\, \\xHH, ...)."""
    out = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n in _ESCAPES:
                out.append(_ESCAPES[n])
                i += 2
                continue
            h = s[i + 2:i + 4]
            if n == "x" and len(h) == 2 and all(ch in "0123456789abcdefABCDEF" for ch in h):
                out.append(chr(int(s[i + 2:i + 4], 16)))
                i += 4
                continue
        out.append(c)
        i += 1
    return "".join(out)


def sampling_dict(p: Params) -> dict:
    return {
        "temperature": p.temperature, "top_k": p.top_k, "top_p": p.top_p, "min_p": p.min_p,
        "typical_p": p.typical_p, "top_n_sigma": p.top_n_sigma, "xtc_probability": p.xtc_probability,
        "xtc_threshold": p.xtc_threshold, "repeat_last_n": p.repeat_last_n, "repeat_penalty": p.repeat_penalty,
        "presence_penalty": p.presence_penalty, "frequency_penalty": p.frequency_penalty,
        "dry_multiplier": p.dry_multiplier, "dry_base": p.dry_base, "dry_allowed_length": p.dry_allowed_length,
        "dry_penalty_last_n": p.dry_penalty_last_n, "dynatemp_range": p.dynatemp_range,
        "dynatemp_exponent": p.dynatemp_exponent, "mirostat": p.mirostat, "mirostat_tau": p.mirostat_tau,
        "mirostat_eta": p.mirostat_eta, "min_keep": p.min_keep, "ignore_eos": p.ignore_eos,
        "seed": p.seed if p.seed >= 0 else -1,
    }


def _err(msg: str) -> int:
    print(msg.rstrip("\n"), file=sys.stderr)
    return 1


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        p = parse_args(argv, "generate")
    except ArgError as e:
        return _err(str(e))
    if p.usage:
        sys.stdout.write(usage("generate"))
        return 0
    if p.version:
        from .. import __version__
        print(f"version: {__version__} (pyllm)", file=sys.stderr)
        return 0
    try:
        check_supported(p)
        resolve_model(p)
    except ArgError as e:
        return _err(str(e))
    if not os.path.isfile(p.model):
        return _err(f"error: failed to load model '{p.model}': file not found")
    note = noop_notice(p)
    if note:
        print(note, file=sys.stderr)

    from ..generation import Generator, Request, uses_mtp
    from ..model import Model

    spec = p.spec_type if p.speculative else "none"
    try:
        model = Model(p.model, load_mtp=uses_mtp(spec), mmap=p.use_mmap, repack=p.repack)
    except (ValueError, OSError, RuntimeError) as e:
        return _err(f"error: failed to load model '{p.model}': {e}")

    text = process_escapes(p.prompt) if p.escape else p.prompt
    try:
        prompt = model.tokenize(text, True, True)
    except (ValueError, RuntimeError) as e:
        return _err(f"error: failed to tokenize the prompt: {e}")
    if not prompt:  # llama.cpp starts from BOS when the prompt is empty
        prompt = [model.bos if model.bos >= 0 else 0]

    n_ctx = p.n_ctx if p.n_ctx > 0 else int(model.n_ctx_train or 4096)  # -c 0: from the model, as llama.cpp
    if len(prompt) >= n_ctx:
        return _err(f"error: prompt is too long ({len(prompt)} tokens, max {n_ctx - 1})")
    try:
        gen = Generator.from_params(model, p, 1)
    except (ValueError, RuntimeError) as e:
        return _err(f"error: failed to create the context: {e}")

    req = Request(prompt=prompt, sampling=sampling_dict(p), n_predict=p.n_predict, special=p.special)
    out = sys.stdout
    fin = None
    try:
        if p.display_prompt:
            out.write(text)
            out.flush()
        t0 = time.perf_counter()
        for ev in gen.run(req):
            if ev.kind == "done":
                fin = ev.data
            elif ev.text:
                out.write(ev.text)
                out.flush()
        out.write("\n")
        out.flush()
        t_total = time.perf_counter() - t0
    except KeyboardInterrupt:  # the text of the last step is lost with the step; what was delivered stays
        out.write("\n")
        out.flush()
        t_total = time.perf_counter() - t0
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (ValueError, RuntimeError) as e:
        return _err(f"error: generation failed: {e}")

    st = fin["stats"] if fin is not None else gen.seq_stats(0)
    n_p = max(0, int(st["n_prompt"]) - int(st["n_cached"]))
    n_g = int(st["n_gen"])
    tp = float(st["t_prompt_ms"])
    tg = float(st["t_gen_ms"])
    pps = 1e3 * n_p / tp if tp > 0 else 0.0
    gps = 1e3 * n_g / tg if tg > 0 else 0.0
    print(f"prompt eval: {n_p} tokens, {pps:.2f} tok/s | generation: {n_g} tokens, {gps:.2f} tok/s "
          f"| total: {t_total:.3f} s", file=sys.stderr)
    if spec != "none":
        print(fin["acceptance_line"] if fin is not None else gen.acceptance_line(0), file=sys.stderr)
        for line in (fin or {}).get("drafter_lines") or []:  # per drafter, with several (or an ngram one)
            print(line, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
