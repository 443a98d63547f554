"""One llama.cpp-compatible command line parser for every pyllm command.

`parse_args(argv, tool)` mirrors `common_params_parse` (common/arg.cpp): LLAMA_ARG_* environment
variables are applied first, command line flags override them (with a warning), `--long_name` is
normalised to `--long-name`, repeating a flag keeps the last value (except `--spec-type`, which
accumulates), an unknown flag is `error: invalid argument: X`, removed flags fail hard.

`main_parse(argv, tool)` wraps it for console entry points: prints the error to stderr and exits 1.
The flag table itself (names, environment variables, handlers) is pyllm/flags.py.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .flags import (CACHE_TYPES, KV_CACHE_TYPES, OPTIONS, SPEC_TYPES, SUPPORTED_SPEC_TYPES, TOOLS, ArgError, Opt,  # noqa: F401 (API)
                    _api_key, _falsey, _spec_type, _stof, _stoi, _truthy)

DEFAULT_SAMPLERS = ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"]


@dataclass
class Params:
    # model
    model: str = ""
    model_alias: list = field(default_factory=list)   # -a a,b,c
    tags: list = field(default_factory=list)
    hf_repo: str = ""
    hf_file: str = ""
    offline: bool = False
    # context / batching
    n_ctx: int = 0
    n_predict: int = -1
    n_batch: int = 2048
    n_ubatch: int = 512
    n_keep: int = 0
    n_parallel: int = -1
    kv_unified: bool = False
    cont_batching: bool = True
    context_shift: bool = False
    cache_prompt: bool = True
    cache_reuse: int = 0
    cache_ram_mib: int = 8192
    cache_idle_slots: bool = True
    n_ctx_checkpoints: int = 32
    checkpoint_min_step: int = 8192
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    flash_attn: str = "auto"
    n_gpu_layers: str = "auto"
    load_mode: str = "auto"
    repack: bool = True  # --repack / --no-repack: 16-row weight groups at load (csrc/ggml/repack.h)
    use_mmap: Optional[bool] = None  # --mmap / --no-mmap; None: read in when it fits easily (pyllm.model.Model)
    use_mlock: bool = False
    warmup: bool = True
    swa_full: bool = False
    # threads
    n_threads: int = -1
    n_threads_batch: int = -1
    n_threads_http: int = -1
    # server
    hostname: str = "127.0.0.1"
    port: int = 8080
    api_keys: list = field(default_factory=list)
    api_prefix: str = ""
    timeout: int = 3600
    sse_ping_interval: int = 30
    cors_origins: str = "*"
    cors_methods: str = "GET, POST, DELETE, OPTIONS"
    cors_headers: str = "*"
    cors_credentials: bool = True
    webui: bool = True
    static_path: str = ""              # --path: serve this folder at / instead of the built-in UI
    endpoint_metrics: bool = False
    endpoint_slots: bool = True
    endpoint_props: bool = False
    slot_save_path: str = ""
    sleep_idle_seconds: int = -1
    embedding: bool = False
    reranking: bool = False
    # chat
    use_jinja: bool = True
    chat_template: str = ""
    chat_template_file: str = ""
    chat_template_kwargs: str = ""
    reasoning_format: str = "auto"
    reasoning: str = "auto"
    reasoning_budget: int = -1
    reasoning_budget_message: str = ""
    prefill_assistant: bool = True
    # prompt (generate / bench)
    prompt: str = ""
    prompt_file: str = ""
    system_prompt: str = ""
    antiprompt: list = field(default_factory=list)   # -r
    escape: bool = True
    special: bool = False
    conversation: str = "auto"
    interactive: bool = False
    display_prompt: bool = True
    # sampling (common_params_sampling)
    seed: int = -1
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    top_n_sigma: float = -1.0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    repeat_last_n: int = 64
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = -1
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    min_keep: int = 0
    n_probs: int = 0
    ignore_eos: bool = False
    samplers: list = field(default_factory=lambda: list(DEFAULT_SAMPLERS))
    logit_bias: list = field(default_factory=list)
    grammar: str = ""
    json_schema: str = ""
    # speculative
    spec_types: list = field(default_factory=lambda: ["none"])
    spec_draft_n_max: int = 3
    spec_draft_n_max_auto: bool = False  # --spec-draft-n-max auto (spec_draft_n_max is then the cap)
    spec_draft_head_type: str = ""       # --spec-draft-head-type: "" = the model's MTP head
    spec_draft_vocab: int = 0            # --spec-draft-vocab: 0 = the whole vocabulary
    spec_accept: str = "match"           # --spec-accept: match | rejection
    spec_draft_n_min: int = 0
    spec_draft_p_min: float = 0.0
    spec_draft_p_split: float = 0.10
    spec_draft_type_k: str = "f16"
    spec_draft_type_v: str = "f16"
    spec_draft_model: str = ""
    spec_draft_threads: int = -1  # draft-simple's threads (-td); -1: as --threads
    spec_draft_backend_sampling: bool = True
    spec_synth_len: float = -1.0
    spec_synth_rates: list = field(default_factory=list)
    spec_ngram_mod_n_match: int = 24
    spec_ngram_mod_n_min: int = 48
    spec_ngram_mod_n_max: int = 64
    spec_ngram_simple_size_n: int = 12
    spec_ngram_simple_size_m: int = 48
    spec_ngram_simple_min_hits: int = 1
    spec_ngram_map_k_size_n: int = 12
    spec_ngram_map_k_size_m: int = 48
    spec_ngram_map_k_min_hits: int = 1
    spec_ngram_map_k4v_size_n: int = 12
    spec_ngram_map_k4v_size_m: int = 48
    spec_ngram_map_k4v_min_hits: int = 1
    lookup_cache_static: str = ""
    lookup_cache_dynamic: str = ""
    # logging
    verbosity: int = 3
    log_disable: bool = False
    log_file: str = ""
    verbose: bool = False
    # bench
    n_repetitions: int = 5
    n_gen_bench: list = field(default_factory=list)
    # bookkeeping
    ignored: list = field(default_factory=list)      # GPU / no-op flags seen, reported once
    unimplemented: list = field(default_factory=list)  # accepted flags pyllm does not implement yet (warned)
    usage: bool = False
    version: bool = False

    # ---- derived ----
    @property
    def spec_type(self) -> str:
        """The effective speculative types as the core takes them: "none", or a comma list in the order given
        (e.g. "draft-mtp,ngram-mod"; the core applies llama.cpp's priority order)."""
        if "none" in self.spec_types[1:]:
            return "none"
        types = list(dict.fromkeys(t for t in self.spec_types if t != "none"))
        return ",".join(types) if types else "none"

    @property
    def spec_types_str(self) -> str:
        return ",".join(self.spec_types)

    @property
    def speculative(self) -> bool:
        """Whether any drafter drafts: an ngram type, or a draft model (draft-mtp, draft-simple) with
        --spec-draft-n-max > 0."""
        types = [] if self.spec_type == "none" else self.spec_type.split(",")
        models = ("draft-mtp", "draft-simple")
        return any(t not in models for t in types) or (any(t in models for t in types) and self.spec_draft_n_max > 0)

    def spec_ngram(self) -> dict:
        """The ngram drafters' settings (--spec-ngram-*, -lcs/-lcd) in the core's SpecNgramParams layout."""
        maps = {k: {f: getattr(self, f"spec_ngram_{k}_{f}") for f in ("size_n", "size_m", "min_hits")}
                for k in ("simple", "map_k", "map_k4v")}
        return dict(maps, mod_n_match=self.spec_ngram_mod_n_match, mod_n_min=self.spec_ngram_mod_n_min,
                    mod_n_max=self.spec_ngram_mod_n_max, lookup_cache_static=self.lookup_cache_static,
                    lookup_cache_dynamic=self.lookup_cache_dynamic)


_GPU_NOTE_FLAGS = {"--flash-attn", "--n-gpu-layers"}


def _build_index(tool: str) -> dict:
    idx = {}
    for opt in OPTIONS:
        if opt.tools is not None and tool not in opt.tools:
            continue
        for n in opt.names:
            idx.setdefault(n, (opt, True))
        for n in opt.neg:
            idx.setdefault(n, (opt, False))
    return idx


def _apply(p: Params, opt: Opt, positive: bool, val: Optional[str], name: str):
    k = opt.kind
    if k == "flag":
        setattr(p, opt.dest, opt.const)
    elif k == "bool":
        setattr(p, opt.dest, positive)
    elif k == "int":
        try:
            setattr(p, opt.dest, _stoi(val))
        except ValueError:
            raise ArgError("stoi")
    elif k == "float":
        try:
            setattr(p, opt.dest, _stof(val))
        except ValueError:
            raise ArgError("stof")
    elif k == "str":
        setattr(p, opt.dest, val)
    elif k in ("custom", "removed"):
        if opt.value:
            opt.fn(p, val)
        else:
            opt.fn(p)
    elif k == "ignore":
        long = next((n for n in opt.names if n.startswith("--")), opt.names[0])
        if long not in p.ignored:
            p.ignored.append(long)


def _takes_value(opt: Opt) -> bool:
    if opt.kind in ("flag", "bool"):
        return False
    if opt.kind in ("custom", "ignore", "removed"):
        return opt.value
    return True


def parse_args(argv: list, tool: str = "server", env: Optional[dict] = None) -> Params:
    """Parse llama.cpp-style flags (argv excludes the program name). Raises ArgError."""
    if tool not in TOOLS:
        raise ValueError(f"unknown tool {tool!r}")
    env = os.environ if env is None else env
    p = Params()
    if tool == "server":
        p.use_jinja = True
    idx = _build_index(tool)
    seen_opts = set()

    # 1. environment
    env_set = set()
    for opt in OPTIONS:
        if opt.env is None or (opt.tools is not None and tool not in opt.tools):
            continue
        if opt.env not in env:
            continue
        value = env[opt.env]
        if id(opt) in seen_opts:
            continue
        seen_opts.add(id(opt))
        try:
            if not _takes_value(opt):
                if _truthy(value):
                    _apply(p, opt, True, None, opt.names[0])
                elif _falsey(value) and opt.kind == "bool":
                    _apply(p, opt, False, None, opt.names[0])
            else:
                _apply(p, opt, True, value, opt.names[0])
        except ArgError as e:
            raise ArgError(f'error while handling environment variable "{opt.env}": {e}\n\n')
        env_set.add(id(opt))

    # 2. command line
    seen = set()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            arg = arg.replace("_", "-")
        if arg not in idx:
            raise ArgError(f"error: invalid argument: {arg}")
        opt, positive = idx[arg]
        if arg in seen and arg != "--spec-type":
            _warn(f"DEPRECATED: argument '{arg}' specified multiple times, use comma-separated values instead "
                  f"(only last value will be used)")
        seen.add(arg)
        if id(opt) in env_set:
            print(f"warn: {opt.env} environment variable is set, but will be overwritten by command line "
                  f"argument {arg}", file=sys.stderr)
            if opt.dest == "spec_types" or opt.fn is _spec_type:
                p.spec_types = ["none"]
            if opt.fn is _api_key:
                p.api_keys = []
            env_set.discard(id(opt))
        val = None
        if _takes_value(opt):
            if i + 1 >= len(argv):
                raise ArgError(f'error while handling argument "{arg}": expected value for argument\n\n'
                               f"usage:\n{_opt_usage(opt)}\n\nto show complete usage, run with -h")
            val = argv[i + 1]
            i += 1
        try:
            _apply(p, opt, positive, val, arg)
        except ArgError as e:
            raise ArgError(f'error while handling argument "{arg}": {e}\n\n'
                           f"usage:\n{_opt_usage(opt)}\n\nto show complete usage, run with -h")
        i += 1

    if p.usage or p.version:
        return p
    _postprocess(p, tool)
    return p


def _check_spec(p: Params):
    """The draft settings and the synthetic acceptance (--spec-synth-len / --spec-synth-rates) through the core's
    one validation (csrc/speculative/spec_params.cpp), here so a bad command line fails before any model loads.
    It is run as if drafting were on: which types pyllm supports is check_supported's concern."""
    from ._native import core
    from .generation import ngram_params
    # draft-simple's model is checked when it loads (check_supported, the core)
    types = [t for t in p.spec_type.split(",") if t in SUPPORTED_SPEC_TYPES and t not in ("none", "draft-simple")]
    types = types or ["draft-mtp"]
    try:
        core.check_spec_params(",".join(types), p.spec_draft_n_max, p.spec_draft_n_min, p.spec_draft_p_min,
                               float(p.spec_synth_len), [float(r) for r in p.spec_synth_rates],
                               ngram_params(core, p.spec_ngram()), n_max_auto=p.spec_draft_n_max_auto,
                               draft_head_type=p.spec_draft_head_type, draft_vocab=p.spec_draft_vocab,
                               accept=p.spec_accept)
    except ValueError as e:
        raise ArgError(f"error: {e}") from None


def _postprocess(p: Params, tool: str):
    # spec list semantics: a list containing none anywhere after the default => {none}
    if "none" in p.spec_types[1:]:
        p.spec_types = ["none"]
    _check_spec(p)
    # accepted for compatibility, not implemented: warned about by noop_notice, never silently dropped
    for on, name in ((p.use_mlock, "--mlock"), (p.cache_reuse > 0, "--cache-reuse"),
                     (p.context_shift, "--context-shift"), (p.conversation == "on", "--conversation"),
                     (p.cache_type_k not in KV_CACHE_TYPES, "--cache-type-k"), (p.cache_type_v not in KV_CACHE_TYPES, "--cache-type-v"),
                     (p.spec_draft_type_k not in KV_CACHE_TYPES, "--spec-draft-type-k"),
                     (p.spec_draft_type_v not in KV_CACHE_TYPES, "--spec-draft-type-v")):
        if on and name not in p.unimplemented:
            p.unimplemented.append(name)
    _spec_notes(p)
    if p.n_parallel == 0:
        raise ArgError("error: invalid value for --parallel: 0")
    if tool == "server" and p.n_parallel < 0:
        p.n_parallel = 4
        p.kv_unified = True
    elif p.n_parallel < 0:
        p.n_parallel = 1


def _spec_notes(p: Params):
    """Speculative flags that are accepted but do nothing where they are given, said once (as llama.cpp they take
    no effect: min-hits is only read by ngram-map-k4v, the lookup caches only by ngram-cache)."""
    types = p.spec_type.split(",")
    for k in ("simple", "map_k"):
        if getattr(p, f"spec_ngram_{k}_min_hits") != 1:
            _warn(f"--spec-ngram-{k.replace('_', '-')}-min-hits has no effect (only ngram-map-k4v counts hits, "
                  f"as in llama.cpp)")
    for path, flag in ((p.lookup_cache_static, "--lookup-cache-static"), (p.lookup_cache_dynamic, "--lookup-cache-dynamic")):
        if path and "ngram-cache" not in types:
            _warn(f"{flag} is only used by --spec-type ngram-cache: ignored")


def check_supported(p: Params):
    """Startup check shared by server and CLI: raise ArgError for features pyllm does not implement."""
    for t in p.spec_types:
        if t not in SUPPORTED_SPEC_TYPES:
            raise ArgError(f"error: speculative type {t} is not supported by pyllm "
                           f"(supported: {', '.join(SUPPORTED_SPEC_TYPES)})")
    if p.static_path and not os.path.isdir(p.static_path):
        raise ArgError(f"error: --path '{p.static_path}' is not a directory")
    if p.slot_save_path and not os.path.isdir(p.slot_save_path):
        raise ArgError(f"error: --slot-save-path '{p.slot_save_path}' is not a directory")
    types = p.spec_type.split(",")
    if p.spec_draft_model and "draft-simple" not in types:
        raise ArgError("error: --spec-draft-model needs --spec-type draft-simple (pyllm's draft-mtp uses the target's "
                       "own MTP layer, not one from a separate file)")
    if "draft-simple" in types and not p.spec_draft_model:
        raise ArgError("error: --spec-type draft-simple needs a draft model (--spec-draft-model FILE)")
    if p.spec_draft_model and not os.path.isfile(p.spec_draft_model):
        raise ArgError(f"error: --spec-draft-model: failed to open '{p.spec_draft_model}'")
    for path, flag in ((p.lookup_cache_static, "--lookup-cache-static"), (p.lookup_cache_dynamic, "--lookup-cache-dynamic")):
        if path and not os.path.isfile(path):
            raise ArgError(f"error: {flag}: failed to open lookup cache '{path}'")
    _check_chat_template(p)


def _check_chat_template(p: Params):
    """--chat-template: a built-in name or a jinja source that renders one user message, as llama-server checks
    (common_chat_verify_template); anything else (an unknown name) stops the start."""
    t = p.chat_template
    if not t or p.chat_template_file:
        return
    from .chat import BUILTIN_TEMPLATES, apply_chat_template
    if t in BUILTIN_TEMPLATES:
        return
    looks_like_name = "{{" not in t and "{%" not in t
    ok = not looks_like_name
    if ok:
        try:
            apply_chat_template(t, [{"role": "user", "content": "test"}])
        except Exception:  # jinja2 syntax / render errors
            ok = False
    if not ok:
        raise ArgError(f"error: the supplied chat template is not supported: {t}\n"
                       f"note: built-in templates: {', '.join(sorted(BUILTIN_TEMPLATES))}")


def noop_notice(p: Params) -> Optional[str]:
    """The startup warning naming every accepted flag pyllm ignores (None: there is none)."""
    lines = []
    if p.ignored:
        lines.append(f"pyllm runs on CPU: ignoring GPU/device/tuning options: {', '.join(dict.fromkeys(p.ignored))}")
    if p.unimplemented:
        lines.append(f"pyllm does not implement these yet: ignoring options: {', '.join(p.unimplemented)}")
    draft_opts = [n for n, on in (("--spec-draft-head-type", bool(p.spec_draft_head_type)),
                                  ("--spec-draft-vocab", p.spec_draft_vocab > 0),
                                  ("--spec-accept", p.spec_accept != "match")) if on]
    if draft_opts and not p.speculative:
        lines.append(f"speculative decoding is off (--spec-type {p.spec_types_str}, --spec-draft-n-max "
                     f"{p.spec_draft_n_max}): ignoring {', '.join(draft_opts)}")
    if p.embedding:
        lines.append("pyllm does not implement embeddings: ignoring --embeddings "
                     "(/embedding and /v1/embeddings answer 501)")
    return "\n".join(lines) or None


def default_model() -> Optional[str]:
    """The shipped default model: models/ of a source checkout (editable install), then the copy
    installed inside the package (pip install .), then $PYLLM_DEFAULT_MODEL."""
    import pyllm
    pkg = Path(pyllm.__file__).resolve().parent
    for d in (pkg.parent / "models", pkg / "models"):
        if d.is_dir():
            ggufs = sorted(d.glob("*.gguf"))
            if ggufs:
                return str(ggufs[0])
    envp = os.environ.get("PYLLM_DEFAULT_MODEL")
    if envp:
        return envp
    return None


def resolve_model(p: Params) -> str:
    if p.model:
        return p.model
    m = default_model()
    if not m:
        raise ArgError("error: no model given (-m FNAME) and no default model found: put a .gguf file in "
                       "the models/ folder of the pyllm checkout or set PYLLM_DEFAULT_MODEL")
    p.model = m
    return m


def _opt_usage(opt: Opt) -> str:
    names = ", ".join(opt.names + opt.neg)
    v = " VALUE" if _takes_value(opt) else ""
    env = f"\n(env: {opt.env})" if opt.env else ""
    return f"{names}{v}    {opt.help}{env}"


def usage(tool: str) -> str:
    lines = [f"usage: pyllm{'-' + tool if tool != 'generate' else ''} [options]", ""]
    for opt in OPTIONS:
        if opt.tools is not None and tool not in opt.tools:
            continue
        if opt.kind == "removed":
            continue
        names = ", ".join(opt.names + opt.neg)
        v = " N" if opt.kind in ("int", "float") else (" VALUE" if _takes_value(opt) else "")
        h = opt.help or ("(no-op on CPU)" if opt.kind == "ignore" else "")
        env = f" (env: {opt.env})" if opt.env else ""
        lines.append(f"{names + v:<52} {h}{env}")
    return "\n".join(lines) + "\n"


def _warn(msg: str):
    print(msg, file=sys.stderr)


def main_parse(argv: list, tool: str) -> Params:
    """Entry-point helper: parse or print the llama.cpp-style error and exit 1 (usage: exit 0)."""
    try:
        p = parse_args(argv, tool)
    except ArgError as e:
        print(str(e).rstrip("\n"), file=sys.stderr)
        sys.exit(1)
    if p.usage:
        sys.stdout.write(usage(tool))
        sys.exit(0)
    if p.version:
        from pyllm import __version__
        print(f"version: {__version__} (pyllm)", file=sys.stderr)
        sys.exit(0)
    return p
