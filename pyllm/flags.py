"""The flag table of every pyllm command: llama.cpp's names, environment variables, help text and value handlers
(common/arg.cpp). pyllm.args parses a command line against it into Params."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:  # the handlers fill in pyllm.args.Params
    from .args import Params

TOOLS = ("server", "generate", "bench")

SPEC_TYPES = (
    "none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark",
    "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache",
)
# what pyllm implements (the core's csrc/speculative/spec_params.cpp holds the same list, in priority order)
SUPPORTED_SPEC_TYPES = ("none", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache", "draft-simple",
                        "draft-mtp")
CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
KV_CACHE_TYPES = ("f16", "bf16", "q8_0", "q4_0")  # the ones the core's attention holds (others: warned, f16)


class ArgError(ValueError):
    """A command line / environment error; str() is the full message llama.cpp would print."""


@dataclass
class Opt:
    names: tuple
    kind: str                     # int | float | str | flag | bool (pos/neg names) | custom | ignore | removed
    dest: Optional[str] = None
    env: Optional[str] = None
    neg: tuple = ()               # negative names for kind == "bool"
    value: bool = True            # whether a value follows (custom / ignore / removed)
    fn: Optional[Callable] = None
    help: str = ""
    tools: Optional[tuple] = None  # None = every tool
    const: object = True          # for kind == "flag"


def _truthy(v: str) -> bool:
    return v in ("true", "1", "on", "enabled")


def _falsey(v: str) -> bool:
    return v in ("false", "0", "off", "disabled")


def _stoi(s: str) -> int:
    s2 = s.strip()
    # std::stoi accepts a leading number followed by junk; be strict-but-compatible on the number part
    i = 0
    if i < len(s2) and s2[i] in "+-":
        i += 1
    j = i
    while j < len(s2) and s2[j].isdigit():
        j += 1
    if j == i:
        raise ValueError("stoi")
    return int(s2[:j])


def _stof(s: str) -> float:
    try:
        return float(s.strip())
    except ValueError:
        # std::stof also accepts a numeric prefix
        m = re.match(r"\s*[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|inf|nan)", s, re.I)
        if not m:
            raise ValueError("stof")
        return float(m.group(0))


def _spec_type(p: Params, v: str):
    names = v.split(",")
    types = []
    for n in names:
        if n not in SPEC_TYPES:
            raise ArgError(f"unknown speculative decoding type: {n}")
        types.append(n)
    if "none" in types:
        types = ["none"]
    p.spec_types.extend(types)


def _spec_default(p: Params):
    """--spec-default: llama.cpp's default speculative config, ngram-mod with n_match 24, n_min 48, n_max 64."""
    p.spec_types.append("ngram-mod")
    p.spec_ngram_mod_n_match, p.spec_ngram_mod_n_min, p.spec_ngram_mod_n_max = 24, 48, 64


AUTO_N_MAX_CAP = 7  # `--spec-draft-n-max auto`: the longest draft the adaptive length may choose


def _spec_n_max(p: Params, v: str):
    """--spec-draft-n-max N, or `auto` / `auto:CAP`: the draft length chosen per sequence and step (0..CAP,
    default 7) from its running acceptance and the measured step costs (csrc/speculative/adaptive.h)."""
    s = v.strip().lower()
    if s == "auto" or s.startswith("auto:"):
        cap = AUTO_N_MAX_CAP
        if s != "auto":
            try:
                cap = _stoi(s[5:])
            except ValueError:
                raise ArgError("invalid value: --spec-draft-n-max auto:CAP needs an integer CAP")
        p.spec_draft_n_max, p.spec_draft_n_max_auto = cap, True
        return
    try:
        p.spec_draft_n_max, p.spec_draft_n_max_auto = _stoi(v), False
    except ValueError:
        raise ArgError("stoi")


def _spec_accept(p: Params, v: str):
    """--spec-accept match|rejection: how drafts are verified at temperature > 0 (csrc/speculative/accept.h)."""
    s = v.strip().lower()
    if s not in ("match", "rejection"):
        raise ArgError(f"invalid value: --spec-accept must be 'match' or 'rejection', got '{v}'")
    p.spec_accept = s


def _synth_len(p: Params, v: str):
    try:
        x = float(v.strip())
    except ValueError:
        raise ArgError("invalid value")
    if x == -1.0:
        raise ArgError("invalid value")
    p.spec_synth_len = x


def _synth_rates(p: Params, v: str):
    rates = []
    for raw in v.split(","):
        try:
            rates.append(float(raw.strip()))
        except ValueError:
            raise ArgError("invalid value")
    p.spec_synth_rates = rates


def _api_key(p: Params, v: str):
    p.api_keys.extend(k for k in v.split(",") if k)


def _api_key_file(p: Params, v: str):
    try:
        with open(v, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line:
                    p.api_keys.append(line)
    except OSError:
        raise ArgError(f"failed to open file '{v}'")


def _prompt_file(p: Params, v: str):
    try:
        p.prompt = Path(v).read_text(encoding="utf-8")
        if p.prompt.endswith("\n"):
            p.prompt = p.prompt[:-1]
    except OSError:
        raise ArgError(f"error: failed to open file '{v}'\n")
    p.prompt_file = v


def _chat_template_file(p: Params, v: str):
    try:
        p.chat_template = Path(v).read_text(encoding="utf-8")
    except OSError:
        raise ArgError(f"error: failed to open file '{v}'\n")
    p.chat_template_file = v


def _reasoning_format(p: Params, v: str):
    from pyllm.reasoning import REASONING_FORMATS
    if v not in REASONING_FORMATS:
        raise ArgError(f"unknown reasoning format: {v} (expected one of {', '.join(REASONING_FORMATS)})")
    p.reasoning_format = v


def _reasoning_mode(p: Params, v: str):
    if v not in ("on", "off", "auto"):
        raise ArgError(f"unknown value for --reasoning: '{v}' (expected on, off or auto)")
    p.reasoning = v


def _reasoning_budget(p: Params, v: str):
    try:
        n = int(v)
    except ValueError:
        raise ArgError("invalid value")
    if n < -1:
        raise ArgError("invalid value: --reasoning-budget must be -1 (unlimited) or >= 0")
    p.reasoning_budget = n


def _template_kwargs(p: Params, v: str):
    from pyllm.reasoning import parse_template_kwargs
    try:
        parse_template_kwargs(v)
    except ValueError as e:
        raise ArgError(str(e))
    p.chat_template_kwargs = v


def _cache_type(dest):
    def fn(p: Params, v: str):
        if v not in CACHE_TYPES:
            raise ArgError(f"Unsupported cache type: {v}")
        setattr(p, dest, v)
    return fn


def _checkpoint_min_step(p: Params, v: str):
    n = _stoi(v)
    if n < 0:
        raise ArgError("checkpoint-min-step must be non-negative")
    p.checkpoint_min_step = n


def _removed(msg):
    def fn(p, v):
        raise ArgError("the argument has been removed. " + msg)
    return fn


def _alias(p: Params, v: str):
    p.model_alias = [a for a in v.split(",") if a]


def _samplers(p: Params, v: str):
    p.samplers = [s for s in v.split(";" if ";" in v else ",") if s]


def _mlock(p: Params, v=None):
    p.use_mlock = True


def _no_mmap(p: Params, v=None):
    p.use_mmap = False


def _mmap(p: Params, v=None):
    p.use_mmap = True


def _n_gen_bench(p: Params, v: str):
    p.n_gen_bench = [_stoi(x) for x in v.split(",") if x]


def _verbose(p: Params, v=None):
    p.verbose = True
    p.verbosity = 5


def _fa(p: Params, v: str):
    if v not in ("on", "off", "auto", "enabled", "disabled", "1", "0", "true", "false"):
        raise ArgError(f"unknown value for --flash-attn: '{v}'\n")
    p.flash_attn = v
    p.ignored.append("--flash-attn")


def _ngl(p: Params, v: str):
    if v not in ("auto", "all"):
        _stoi(v)
    p.n_gpu_layers = v
    p.ignored.append("--n-gpu-layers")


def _temp(p: Params, v: str):
    p.temperature = _stof(v)


def _logit_bias(p: Params, v: str):
    m = re.match(r"\s*(\d+)\s*([+-]\s*[\d.]+)\s*$", v)
    if not m:
        raise ArgError("invalid input format")
    p.logit_bias.append((int(m.group(1)), float(m.group(2).replace(" ", ""))))


def _reverse_prompt(p: Params, v: str):
    p.antiprompt.append(v)


S = ("server",)
G = ("generate",)
B = ("bench",)
GS = ("server", "generate")
GB = ("generate", "bench")

OPTIONS: list = [
    Opt(("-h", "--help", "--usage"), "flag", "usage", help="print usage and exit"),
    Opt(("--version",), "flag", "version", help="show version and build info"),
    # model
    Opt(("-m", "--model"), "str", "model", env="LLAMA_ARG_MODEL", help="model path (default: first models/*.gguf)"),
    Opt(("-a", "--alias"), "custom", env="LLAMA_ARG_ALIAS", fn=_alias, tools=S, help="model name alias(es), comma-separated"),
    Opt(("--tags",), "custom", env="LLAMA_ARG_TAGS", fn=lambda p, v: setattr(p, "tags", v.split(",")), tools=S),
    Opt(("-hf", "-hfr", "--hf-repo"), "str", "hf_repo", env="LLAMA_ARG_HF_REPO"),
    Opt(("-hff", "--hf-file"), "str", "hf_file", env="LLAMA_ARG_HF_FILE"),
    Opt(("--offline",), "flag", "offline", env="LLAMA_ARG_OFFLINE"),
    # context
    Opt(("-c", "--ctx-size"), "int", "n_ctx", env="LLAMA_ARG_CTX_SIZE", help="total context size (0 = from model)"),
    Opt(("-n", "--predict", "--n-predict"), "int", "n_predict", env="LLAMA_ARG_N_PREDICT", help="tokens to predict (-1 = infinity)"),
    Opt(("-b", "--batch-size"), "int", "n_batch", env="LLAMA_ARG_BATCH"),
    Opt(("-ub", "--ubatch-size"), "int", "n_ubatch", env="LLAMA_ARG_UBATCH"),
    Opt(("--keep",), "int", "n_keep"),
    Opt(("-np", "--parallel"), "int", "n_parallel", env="LLAMA_ARG_N_PARALLEL", help="number of server slots (-1 = auto: 4)"),
    Opt(("-kvu", "--kv-unified"), "bool", "kv_unified", env="LLAMA_ARG_KV_UNIFIED", neg=("-no-kvu", "--no-kv-unified")),
    Opt(("-cb", "--cont-batching"), "bool", "cont_batching", env="LLAMA_ARG_CONT_BATCHING", neg=("-nocb", "--no-cont-batching")),
    Opt(("--context-shift",), "bool", "context_shift", env="LLAMA_ARG_CONTEXT_SHIFT", neg=("--no-context-shift",)),
    Opt(("--cache-prompt",), "bool", "cache_prompt", env="LLAMA_ARG_CACHE_PROMPT", neg=("--no-cache-prompt",)),
    Opt(("--cache-reuse",), "int", "cache_reuse", env="LLAMA_ARG_CACHE_REUSE"),
    Opt(("-cram", "--cache-ram"), "int", "cache_ram_mib", env="LLAMA_ARG_CACHE_RAM"),
    Opt(("-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"), "int", "n_ctx_checkpoints", env="LLAMA_ARG_CTX_CHECKPOINTS",
        help="max number of context checkpoints (recurrent-state copies) per slot (default: 32)"),
    Opt(("-cms", "--checkpoint-min-step"), "custom", env="LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT", fn=_checkpoint_min_step,
        tools=GS, help="minimum spacing between context checkpoints in tokens (default: 8192, 0 = no minimum)"),
    Opt(("--cache-idle-slots",), "bool", "cache_idle_slots", env="LLAMA_ARG_CACHE_IDLE_SLOTS", neg=("--no-cache-idle-slots",),
        tools=S, help="save idle slots to the prompt cache on a new task (default: enabled, requires --cache-ram)"),
    Opt(("-ctk", "--cache-type-k"), "custom", env="LLAMA_ARG_CACHE_TYPE_K", fn=_cache_type("cache_type_k")),
    Opt(("-ctv", "--cache-type-v"), "custom", env="LLAMA_ARG_CACHE_TYPE_V", fn=_cache_type("cache_type_v")),
    Opt(("--swa-full",), "flag", "swa_full", env="LLAMA_ARG_SWA_FULL"),
    Opt(("--warmup",), "bool", "warmup", neg=("--no-warmup",)),
    Opt(("--mlock",), "custom", value=False, fn=_mlock, help="(legacy) lock the model in memory"),
    Opt(("--mmap",), "custom", value=False, fn=_mmap, help="memory-map the model (default: read it into memory when it takes at most half of the available memory, else map it)"),
    Opt(("--no-mmap",), "custom", value=False, fn=_no_mmap, help="read the model into memory (anonymous, huge pages) instead of mapping it"),
    Opt(("-lm", "--load-mode"), "str", "load_mode", env="LLAMA_ARG_LOAD_MODE"),
    # threads
    Opt(("-t", "--threads"), "int", "n_threads", env="LLAMA_ARG_THREADS"),
    Opt(("-tb", "--threads-batch"), "int", "n_threads_batch"),
    Opt(("--threads-http",), "int", "n_threads_http", env="LLAMA_ARG_THREADS_HTTP", tools=S),
    # server
    Opt(("--host",), "str", "hostname", env="LLAMA_ARG_HOST", tools=S),
    Opt(("--port",), "int", "port", env="LLAMA_ARG_PORT", tools=S),
    Opt(("--api-key",), "custom", env="LLAMA_API_KEY", fn=_api_key, tools=S),
    Opt(("--api-key-file",), "custom", env="LLAMA_ARG_API_KEY_FILE", fn=_api_key_file, tools=S),
    Opt(("--api-prefix",), "str", "api_prefix", env="LLAMA_ARG_API_PREFIX", tools=S),
    Opt(("-to", "--timeout"), "int", "timeout", env="LLAMA_ARG_TIMEOUT", tools=S),
    Opt(("--sse-ping-interval",), "int", "sse_ping_interval", env="LLAMA_ARG_SSE_PING_INTERVAL", tools=S),
    Opt(("--cors-origins",), "str", "cors_origins", env="LLAMA_ARG_CORS_ORIGINS", tools=S),
    Opt(("--cors-methods",), "str", "cors_methods", env="LLAMA_ARG_CORS_METHODS", tools=S),
    Opt(("--cors-headers",), "str", "cors_headers", env="LLAMA_ARG_CORS_HEADERS", tools=S),
    Opt(("--cors-credentials",), "bool", "cors_credentials", env="LLAMA_ARG_CORS_CREDENTIALS", neg=("--no-cors-credentials",), tools=S),
    Opt(("--path",), "str", "static_path", env="LLAMA_ARG_STATIC_PATH", tools=S,
        help="serve static files from this folder at / instead of the built-in web UI"),
    Opt(("--ui", "--webui"), "bool", "webui", env="LLAMA_ARG_UI", neg=("--no-ui", "--no-webui"), tools=S),
    Opt(("--metrics",), "flag", "endpoint_metrics", env="LLAMA_ARG_ENDPOINT_METRICS", tools=S),
    Opt(("--slots",), "bool", "endpoint_slots", env="LLAMA_ARG_ENDPOINT_SLOTS", neg=("--no-slots",), tools=S),
    Opt(("--props",), "flag", "endpoint_props", env="LLAMA_ARG_ENDPOINT_PROPS", tools=S),
    Opt(("--slot-save-path",), "str", "slot_save_path", tools=S),
    Opt(("--sleep-idle-seconds",), "int", "sleep_idle_seconds", tools=S),
    Opt(("--embedding", "--embeddings"), "flag", "embedding", env="LLAMA_ARG_EMBEDDINGS", tools=S),
    Opt(("--rerank", "--reranking"), "flag", "reranking", env="LLAMA_ARG_RERANKING", tools=S),
    # chat
    Opt(("--jinja",), "bool", "use_jinja", env="LLAMA_ARG_JINJA", neg=("--no-jinja",)),
    Opt(("--chat-template",), "str", "chat_template", env="LLAMA_ARG_CHAT_TEMPLATE"),
    Opt(("--chat-template-file",), "custom", env="LLAMA_ARG_CHAT_TEMPLATE_FILE", fn=_chat_template_file),
    Opt(("--chat-template-kwargs",), "custom", env="LLAMA_ARG_CHAT_TEMPLATE_KWARGS", fn=_template_kwargs),
    Opt(("--reasoning-format",), "custom", env="LLAMA_ARG_THINK", fn=_reasoning_format),
    Opt(("-rea", "--reasoning"), "custom", env="LLAMA_ARG_REASONING", fn=_reasoning_mode),
    Opt(("--reasoning-budget",), "custom", env="LLAMA_ARG_THINK_BUDGET", fn=_reasoning_budget),
    Opt(("--reasoning-budget-message",), "str", "reasoning_budget_message", env="LLAMA_ARG_THINK_BUDGET_MESSAGE"),
    Opt(("--prefill-assistant",), "bool", "prefill_assistant", neg=("--no-prefill-assistant",), tools=S),
    # prompt
    Opt(("-p", "--prompt"), "str", "prompt", tools=GB),
    Opt(("-f", "--file"), "custom", fn=_prompt_file, tools=GB),
    Opt(("-sys", "--system-prompt"), "str", "system_prompt", tools=G),
    Opt(("-r", "--reverse-prompt"), "custom", fn=_reverse_prompt, tools=GS),
    Opt(("-e", "--escape"), "bool", "escape", neg=("--no-escape",)),
    Opt(("-sp", "--special"), "flag", "special"),
    Opt(("-cnv", "--conversation"), "custom", value=False, fn=lambda p, v=None: setattr(p, "conversation", "on"), tools=G),
    Opt(("-no-cnv", "--no-conversation"), "custom", value=False, fn=lambda p, v=None: setattr(p, "conversation", "off"), tools=G),
    Opt(("-i", "--interactive"), "flag", "interactive", tools=G),
    Opt(("--no-display-prompt",), "flag", "display_prompt", const=False, tools=G),
    # sampling
    Opt(("-s", "--seed"), "int", "seed"),
    Opt(("--temp", "--temperature"), "custom", env="LLAMA_ARG_TEMPERATURE", fn=_temp),
    Opt(("--top-k",), "int", "top_k", env="LLAMA_ARG_TOP_K"),
    Opt(("--top-p",), "float", "top_p", env="LLAMA_ARG_TOP_P"),
    Opt(("--min-p",), "float", "min_p", env="LLAMA_ARG_MIN_P"),
    Opt(("--typical", "--typical-p"), "float", "typical_p"),
    Opt(("--top-nsigma", "--top-n-sigma"), "float", "top_n_sigma"),
    Opt(("--xtc-probability",), "float", "xtc_probability"),
    Opt(("--xtc-threshold",), "float", "xtc_threshold"),
    Opt(("--repeat-last-n",), "int", "repeat_last_n"),
    Opt(("--repeat-penalty",), "float", "repeat_penalty", env="LLAMA_ARG_REPEAT_PENALTY"),
    Opt(("--presence-penalty",), "float", "presence_penalty", env="LLAMA_ARG_PRESENCE_PENALTY"),
    Opt(("--frequency-penalty",), "float", "frequency_penalty", env="LLAMA_ARG_FREQUENCY_PENALTY"),
    Opt(("--dry-multiplier",), "float", "dry_multiplier"),
    Opt(("--dry-base",), "float", "dry_base"),
    Opt(("--dry-allowed-length",), "int", "dry_allowed_length"),
    Opt(("--dry-penalty-last-n",), "int", "dry_penalty_last_n"),
    Opt(("--dynatemp-range",), "float", "dynatemp_range"),
    Opt(("--dynatemp-exp",), "float", "dynatemp_exponent"),
    Opt(("--mirostat",), "int", "mirostat"),
    Opt(("--mirostat-lr",), "float", "mirostat_eta"),
    Opt(("--mirostat-ent",), "float", "mirostat_tau"),
    Opt(("--min-keep",), "int", "min_keep"),
    Opt(("--n-probs",), "int", "n_probs"),
    Opt(("--ignore-eos",), "flag", "ignore_eos"),
    Opt(("--samplers", "--sampler-seq", "--sampling-seq"), "custom", fn=_samplers),
    Opt(("-l", "--logit-bias"), "custom", fn=_logit_bias),
    Opt(("--grammar",), "str", "grammar"),
    Opt(("-j", "--json-schema"), "str", "json_schema"),
    # speculative
    Opt(("--spec-type",), "custom", env="LLAMA_ARG_SPEC_TYPE", fn=_spec_type,
        help="comma-separated speculative types: " + ",".join(SPEC_TYPES) + " (pyllm supports " + ", ".join(SUPPORTED_SPEC_TYPES) + ")"),
    Opt(("--spec-draft-n-max",), "custom", env="LLAMA_ARG_SPEC_DRAFT_N_MAX", fn=_spec_n_max,
        help="draft length N, or auto / auto:CAP (pyllm: chosen per sequence from acceptance and measured costs, "
             f"CAP default {AUTO_N_MAX_CAP})"),
    Opt(("--spec-draft-n-min",), "int", "spec_draft_n_min", env="LLAMA_ARG_SPEC_DRAFT_N_MIN"),
    Opt(("--spec-draft-p-min", "--draft-p-min"), "float", "spec_draft_p_min", env="LLAMA_ARG_SPEC_DRAFT_P_MIN"),
    # pyllm's cheap draft head (csrc/speculative/draft_head.h); drafting only, the target verifies with its own head
    Opt(("--spec-draft-head-type",), "str", "spec_draft_head_type", env="PYLLM_ARG_SPEC_DRAFT_HEAD_TYPE",
        help="draft with a copy of the MTP output matrix in this type (e.g. q4_0, iq4_xs, q8_0), made at load"),
    Opt(("--spec-draft-vocab",), "int", "spec_draft_vocab", env="PYLLM_ARG_SPEC_DRAFT_VOCAB",
        help="draft over the N lowest token ids (BPE merge order) plus the end-of-generation ids; 0 = all"),
    # pyllm's opt-in speculative sampling (csrc/speculative/accept.h); llama.cpp's open PR 27694 has no flag for it
    Opt(("--spec-accept",), "custom", env="PYLLM_ARG_SPEC_ACCEPT", fn=_spec_accept,
        help="match (default: llama.cpp's, a draft is kept when it equals the token the target samples; output == "
             "plain sampling with the same seed) or rejection (drafts sampled from the MTP head and kept with "
             "probability min(1, p_target/p_draft): output == plain sampling in distribution, more drafts "
             "accepted at temperature > 0)"),
    Opt(("--spec-draft-p-split", "--draft-p-split"), "float", "spec_draft_p_split", env="LLAMA_ARG_SPEC_DRAFT_P_SPLIT"),
    Opt(("--spec-draft-type-k", "-ctkd", "--cache-type-k-draft"), "custom", env="LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K", fn=_cache_type("spec_draft_type_k")),
    Opt(("--spec-draft-type-v", "-ctvd", "--cache-type-v-draft"), "custom", env="LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V", fn=_cache_type("spec_draft_type_v")),
    Opt(("--spec-draft-model", "-md", "--model-draft"), "str", "spec_draft_model", env="LLAMA_ARG_SPEC_DRAFT_MODEL"),
    Opt(("--spec-draft-backend-sampling",), "bool", "spec_draft_backend_sampling", env="LLAMA_ARG_SPEC_DRAFT_BACKEND_SAMPLING",
        neg=("--no-spec-draft-backend-sampling",)),
    Opt(("--spec-synth-len",), "custom", env="LLAMA_ARG_SPEC_SYNTH_LEN", fn=_synth_len, tools=GS + B),
    Opt(("--spec-synth-rates",), "custom", env="LLAMA_ARG_SPEC_SYNTH_RATES", fn=_synth_rates, tools=GS + B),
    Opt(("--spec-draft-threads", "-td", "--threads-draft"), "int", "spec_draft_threads"),
    Opt(("--spec-draft-threads-batch", "-tbd", "--threads-batch-draft"), "ignore"),
    Opt(("--spec-draft-cpu-mask", "-Cd", "--cpu-mask-draft"), "ignore"),
    Opt(("--spec-draft-cpu-range", "-Crd", "--cpu-range-draft"), "ignore"),
    Opt(("--spec-draft-cpu-strict", "--cpu-strict-draft"), "ignore"),
    Opt(("--spec-draft-prio", "--prio-draft"), "ignore"),
    Opt(("--spec-draft-poll", "--poll-draft"), "ignore"),
    Opt(("--spec-draft-cpu-mask-batch", "-Cbd", "--cpu-mask-batch-draft"), "ignore"),
    Opt(("--spec-draft-cpu-strict-batch", "--cpu-strict-batch-draft"), "ignore"),
    Opt(("--spec-draft-prio-batch", "--prio-batch-draft"), "ignore"),
    Opt(("--spec-draft-poll-batch", "--poll-batch-draft"), "ignore"),
    Opt(("--spec-draft-hf", "-hfd", "-hfrd", "--hf-repo-draft"), "ignore"),
    Opt(("--spec-draft-ngl", "-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft"), "ignore", env="LLAMA_ARG_N_GPU_LAYERS_DRAFT"),
    Opt(("--spec-draft-device", "-devd", "--device-draft"), "ignore"),
    Opt(("--spec-draft-override-tensor", "-otd", "--override-tensor-draft"), "ignore"),
    Opt(("--spec-draft-cpu-moe", "-cmoed", "--cpu-moe-draft"), "ignore", value=False, env="LLAMA_ARG_SPEC_DRAFT_CPU_MOE"),
    Opt(("--spec-draft-n-cpu-moe", "--spec-draft-ncmoe", "-ncmoed", "--n-cpu-moe-draft"), "ignore", env="LLAMA_ARG_SPEC_DRAFT_N_CPU_MOE"),
    # the ngram drafters (validated by the core's check_spec_params, with upstream's ranges)
    Opt(("--spec-ngram-mod-n-min",), "int", "spec_ngram_mod_n_min"),
    Opt(("--spec-ngram-mod-n-max",), "int", "spec_ngram_mod_n_max"),
    Opt(("--spec-ngram-mod-n-match",), "int", "spec_ngram_mod_n_match"),
    *[Opt((f"--spec-ngram-{k}-{f}",), "int", f"spec_ngram_{k.replace('-', '_')}_{f.replace('-', '_')}")
      for k in ("simple", "map-k", "map-k4v") for f in ("size-n", "size-m", "min-hits")],
    Opt(("-lcs", "--lookup-cache-static"), "str", "lookup_cache_static"),
    Opt(("-lcd", "--lookup-cache-dynamic"), "str", "lookup_cache_dynamic"),
    Opt(("--spec-default",), "custom", value=False, fn=lambda p, v=None: _spec_default(p), tools=GS),
    # removed
    Opt(("--draft", "--draft-n", "--draft-max"), "removed", env="LLAMA_ARG_DRAFT_MAX",
        fn=_removed("use --spec-draft-n-max or --spec-ngram-mod-n-max")),
    Opt(("--draft-min", "--draft-n-min"), "removed", env="LLAMA_ARG_DRAFT_MIN",
        fn=_removed("use --spec-draft-n-min or --spec-ngram-mod-n-min")),
    Opt(("--spec-ngram-size-n",), "removed", fn=_removed("use the respective --spec-ngram-*-size-n")),
    Opt(("--spec-ngram-size-m",), "removed", fn=_removed("use the respective --spec-ngram-*-size-m")),
    Opt(("--spec-ngram-min-hits",), "removed", fn=_removed("use the respective --spec-ngram-*-min-hits")),
    # GPU / device (accepted, no-ops on CPU)
    Opt(("-ngl", "--gpu-layers", "--n-gpu-layers"), "custom", env="LLAMA_ARG_N_GPU_LAYERS", fn=_ngl),
    Opt(("-fa", "--flash-attn"), "custom", env="LLAMA_ARG_FLASH_ATTN", fn=_fa),
    Opt(("-fit", "--fit"), "ignore", env="LLAMA_ARG_FIT"),
    Opt(("-fitt", "--fit-target"), "ignore", env="LLAMA_ARG_FIT_TARGET"),
    Opt(("-fitc", "--fit-ctx"), "ignore", env="LLAMA_ARG_FIT_CTX"),
    Opt(("-dev", "--device"), "ignore", env="LLAMA_ARG_DEVICE"),
    Opt(("--list-devices",), "ignore", value=False),
    Opt(("-sm", "--split-mode"), "ignore", env="LLAMA_ARG_SPLIT_MODE"),
    Opt(("-mg", "--main-gpu"), "ignore", env="LLAMA_ARG_MAIN_GPU"),
    Opt(("-ts", "--tensor-split"), "ignore", env="LLAMA_ARG_TENSOR_SPLIT"),
    Opt(("-ot", "--override-tensor"), "ignore", env="LLAMA_ARG_OVERRIDE_TENSOR"),
    Opt(("-cmoe", "--cpu-moe"), "ignore", value=False, env="LLAMA_ARG_CPU_MOE"),
    Opt(("-ncmoe", "--n-cpu-moe"), "ignore", env="LLAMA_ARG_N_CPU_MOE"),
    Opt(("-kvo", "--kv-offload"), "ignore", value=False, neg=("-nkvo", "--no-kv-offload"), env="LLAMA_ARG_KV_OFFLOAD"),
    Opt(("--op-offload",), "ignore", value=False, neg=("--no-op-offload",)),
    Opt(("--repack",), "bool", "repack", env="LLAMA_ARG_REPACK", neg=("-nr", "--no-repack"),
        help="matrices into 16-row groups at load: Q4_K, IQ4_NL and Q8_0 on AVX-512 CPUs, Q4_K, Q4_0 and Q4_1 on AVX2 ones (default: on; --no-repack keeps the file's layout)"),
    Opt(("--no-host",), "ignore", value=False, env="LLAMA_ARG_NO_HOST"),
    Opt(("-bs", "--backend-sampling"), "ignore", value=False, env="LLAMA_ARG_BACKEND_SAMPLING"),
    Opt(("--numa",), "ignore", env="LLAMA_ARG_NUMA"),
    Opt(("-C", "--cpu-mask"), "ignore"), Opt(("-Cr", "--cpu-range"), "ignore"),
    Opt(("--cpu-strict",), "ignore"), Opt(("--prio",), "ignore"), Opt(("--poll",), "ignore"),
    Opt(("-Cb", "--cpu-mask-batch"), "ignore"), Opt(("-Crb", "--cpu-range-batch"), "ignore"),
    Opt(("--cpu-strict-batch",), "ignore"), Opt(("--prio-batch",), "ignore"), Opt(("--poll-batch",), "ignore"),
    Opt(("-dt", "--defrag-thold"), "ignore", env="LLAMA_ARG_DEFRAG_THOLD"),
    Opt(("--perf",), "ignore", value=False, neg=("--no-perf",), env="LLAMA_ARG_PERF"),
    Opt(("--check-tensors",), "ignore", value=False),
    Opt(("-sps", "--slot-prompt-similarity"), "ignore", tools=S),
    Opt(("--no-mmproj", "--no-mmproj-auto"), "ignore", value=False, tools=S),
    Opt(("--skip-chat-parsing",), "ignore", value=False, neg=("--no-skip-chat-parsing",)),
    # logging
    Opt(("-lv", "--verbosity", "--log-verbosity"), "int", "verbosity", env="LLAMA_ARG_LOG_VERBOSITY"),
    Opt(("-v", "--verbose", "--log-verbose"), "custom", value=False, fn=_verbose),
    Opt(("--log-disable",), "flag", "log_disable"),
    Opt(("--log-file",), "str", "log_file", env="LLAMA_ARG_LOG_FILE"),
    Opt(("--log-colors",), "ignore", env="LLAMA_ARG_LOG_COLORS"),
    Opt(("--log-prefix",), "ignore", value=False, neg=("--no-log-prefix",), env="LLAMA_ARG_LOG_PREFIX"),
    Opt(("--log-timestamps",), "ignore", value=False, neg=("--no-log-timestamps",), env="LLAMA_ARG_LOG_TIMESTAMPS"),
    # bench
    Opt(("-r", "--repetitions"), "int", "n_repetitions", tools=B),
    Opt(("-ng", "--n-gen"), "custom", fn=_n_gen_bench, tools=B),
]

