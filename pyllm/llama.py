"""`pyllm.Llama`: llama-cpp-python's `Llama` (same names, arguments and return shapes) on pyllm, with MTP.

    from pyllm import Llama
    llm = Llama(model_path="models/qwen35-tiny-mtp-Q8_0.gguf", spec_type="draft-mtp", spec_draft_n_max=3)
    out = llm("def f(", max_tokens=32, temperature=0)          # {"choices": [{"text": ...}], "usage": ...}
    for chunk in llm.create_chat_completion([{"role": "user", "content": "hi"}], stream=True): ...
    llm.last_spec_stats                                          # drafted / accepted tokens of that call

Speculative decoding is lossless: spec_type="draft-mtp" gives the output plain decoding gives, faster.
An argument llama-cpp-python has and pyllm does not implement raises (TypeError / ValueError /
NotImplementedError naming it); GPU and memory-mapping options warn that pyllm runs on the CPU.
"""
from __future__ import annotations

import sys
import warnings
from typing import Iterator, List, Optional, Union

from .chat import BUILTIN_TEMPLATES, resolve_chat_template
from .chat_request import ChatSetup, RequestError
from .flags import SUPPORTED_SPEC_TYPES
from .generation import Generator, Request, default_threads, uses_mtp
from .structured import GrammarError, GrammarMatcher, TokenConstraint, request_grammar
from .toolcalls import event_to_delta
from .toolcalls import finish_reason as chat_finish_reason
from .llama_format import Shapes, chat_logprobs, completion_logprobs, finish_reason, usage
from .model import Model

LLAMA_DEFAULT_SEED = 0xFFFFFFFF

# llama-cpp-python's chat_format names -> pyllm's built-in templates (None: the GGUF's own template)
CHAT_FORMATS = {"chatml": "chatml", "llama-2": "llama2", "llama-3": "llama3", "gemma": "gemma", "zephyr": "zephyr",
                "phi3": "phi3", "mistral-v7": "mistral-v7", **{k: k for k in BUILTIN_TEMPLATES}}

# Llama() arguments of llama-cpp-python that pyllm has no use for on the CPU: a non-default value warns
_CPU_NOOPS = {"n_gpu_layers": 0, "split_mode": 1, "main_gpu": 0, "tensor_split": None, "offload_kqv": True,
              "flash_attn": False, "op_offload": None, "use_mlock": False, "numa": False,
              "no_perf": False, "swa_full": None}
# ... and those that would change what the model computes: a non-default value raises ValueError
_UNSUPPORTED = {"vocab_only": False, "kv_overrides": None, "rope_scaling_type": -1, "pooling_type": -1,
                "attention_type": -1, "rope_freq_base": 0.0, "rope_freq_scale": 0.0, "yarn_ext_factor": -1.0,
                "yarn_attn_factor": 1.0, "yarn_beta_fast": 32.0, "yarn_beta_slow": 1.0, "yarn_orig_ctx": 0,
                "logits_all": False, "embedding": False, "lora_base": None, "lora_scale": 1.0, "lora_path": None,
                "chat_handler": None, "draft_model": None, "tokenizer": None,
                "spm_infill": False}


_KV_TYPE_IDS = {1: "f16", 30: "bf16", 8: "q8_0", 2: "q4_0"}  # GGML type ids (llama-cpp-python's type_k / type_v)


def _kv_type(name: str, value) -> str:
    if value is None:
        return "f16"
    if value not in _KV_TYPE_IDS:
        raise ValueError(f"Llama: {name}={value!r} is not supported by pyllm (GGML type ids: "
                         + ", ".join(f"{i} = {n}" for i, n in _KV_TYPE_IDS.items()) + ")")
    return _KV_TYPE_IDS[value]


def _check_unsupported(where: str, **given):
    """Sampling / call arguments pyllm does not implement: anything but the default raises, naming it."""
    for name, (value, default) in given.items():
        if value != default:
            raise ValueError(f"{where}: {name}={value!r} is not supported by pyllm")


class Llama:
    """A GGUF model ready to generate, with llama-cpp-python's API.

    Args:
        model_path: the .gguf file.
        n_ctx: context size in tokens (0: the model's training context). Default 512, as llama-cpp-python.
        n_batch, n_ubatch: prompt tokens per logical / physical batch.
        n_threads: CPU threads (None: the cores, at most 4).
        seed: sampling seed used when a call gives none (default: a random seed per call).
        chat_format: a built-in template name ("chatml", "llama-2", "llama-3", "gemma", "zephyr", "phi3",
            "mistral-v7"); None uses the GGUF's tokenizer.chat_template (ChatML when it has none).
        last_n_tokens_size: how many recent tokens the repeat / presence / frequency penalties look at.
        verbose: print a timing line to stderr after each call.
        spec_type: "none", "draft-mtp" (Multi-Token-Prediction speculative decoding with the file's MTP layer),
            an ngram drafter ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache") or a
            comma list of them ("draft-mtp,ngram-mod"), as llama.cpp's --spec-type.
        spec_draft_n_max, spec_draft_n_min, spec_draft_p_min: draft length bounds and minimum draft probability
            (llama.cpp's --spec-draft-n-max / -n-min / -p-min); spec_draft_n_max="auto" (or "auto:CAP") chooses the
            length per step from the running acceptance and the measured costs (cap 7).
        spec_draft_head_type, spec_draft_vocab: the cheap draft head (--spec-draft-head-type / --spec-draft-vocab):
            draft with a lower-bit copy of the output matrix (e.g. "q4_0") and / or over the N lowest token ids;
            the output is unchanged (the target verifies with its own head).
        spec_accept: "match" (llama.cpp's: output == plain sampling with the same seed) or "rejection"
            (--spec-accept rejection: sampled drafts kept with probability min(1, p_target/p_draft); output ==
            plain sampling in distribution, more drafts accepted at temperature > 0).
        spec_ngram: the ngram drafters' settings as a dict of SpecNgramParams fields (e.g. {"mod_n_match": 24,
            "simple": {"size_n": 12}, "lookup_cache_static": path}); llama.cpp's --spec-ngram-* defaults otherwise.
    Raises ValueError (a bad file, an unsupported argument, a model without MTP layers for draft-mtp) and
    TypeError for an argument llama-cpp-python does not have either.
    """

    def __init__(self, model_path: str, *, n_ctx: int = 512, n_batch: int = 512, n_ubatch: int = 512,
                 n_threads: Optional[int] = None, n_threads_batch: Optional[int] = None,
                 seed: int = LLAMA_DEFAULT_SEED, chat_format: Optional[str] = None, last_n_tokens_size: int = 64,
                 verbose: bool = True, spec_type: str = "none", spec_draft_n_max: Union[int, str] = 3,
                 spec_draft_n_min: int = 0, spec_draft_p_min: float = 0.0, spec_ngram: Optional[dict] = None,
                 spec_draft_head_type: str = "", spec_draft_vocab: int = 0, spec_accept: str = "match",
                 type_k: Optional[int] = None, type_v: Optional[int] = None, use_mmap: Optional[bool] = None,
                 **kwargs):
        for name, value in kwargs.items():
            if name in _CPU_NOOPS:
                if value != _CPU_NOOPS[name]:
                    warnings.warn(f"pyllm runs on the CPU: ignoring {name}={value!r}", RuntimeWarning, stacklevel=2)
            elif name in _UNSUPPORTED:
                if value != _UNSUPPORTED[name]:
                    hint = " (use spec_type='draft-mtp')" if name == "draft_model" else ""
                    raise ValueError(f"Llama: {name}={value!r} is not supported by pyllm{hint}")
            else:
                raise TypeError(f"Llama() got an unexpected keyword argument '{name}'")
        if n_threads_batch is not None and n_threads_batch != n_threads:
            warnings.warn("pyllm uses one thread count for prompt and generation: ignoring n_threads_batch="
                          f"{n_threads_batch}", RuntimeWarning, stacklevel=2)
        if chat_format is not None and chat_format not in CHAT_FORMATS:
            raise ValueError(f"Llama: chat_format {chat_format!r} is not supported by pyllm "
                             f"(supported: {', '.join(sorted(CHAT_FORMATS))}; None = the GGUF's template)")
        bad = [t for t in spec_type.split(",") if t not in SUPPORTED_SPEC_TYPES]
        if bad:
            raise ValueError(f"Llama: spec_type {bad[0]!r} is not supported by pyllm "
                             f"(supported: {', '.join(SUPPORTED_SPEC_TYPES)})")
        self.model_path = model_path
        self.verbose = verbose
        self.chat_format = chat_format
        self.last_n_tokens_size = last_n_tokens_size
        self.spec_type = spec_type
        self._seed = seed
        n_max_auto = isinstance(spec_draft_n_max, str)
        if n_max_auto:  # the command line's parser: "auto" / "auto:CAP"
            from .args import Params
            from .flags import _spec_n_max
            pa = Params()
            try:
                _spec_n_max(pa, spec_draft_n_max)
            except Exception:
                raise ValueError(f"Llama: spec_draft_n_max {spec_draft_n_max!r} must be an int, 'auto' or 'auto:CAP'")
            if not pa.spec_draft_n_max_auto:
                raise ValueError(f"Llama: spec_draft_n_max {spec_draft_n_max!r} must be an int, 'auto' or 'auto:CAP'")
            spec_draft_n_max = pa.spec_draft_n_max
        self._model = Model(model_path, load_mtp=uses_mtp(spec_type), mmap=use_mmap)
        tk, tv = _kv_type("type_k", type_k), _kv_type("type_v", type_v)
        self._gen = Generator(self._model, n_ctx, 1, n_batch=n_batch, n_ubatch=n_ubatch,
                              n_threads=n_threads or default_threads(), spec_type=spec_type, n_max=spec_draft_n_max,
                              n_min=spec_draft_n_min, p_min=spec_draft_p_min, ngram=spec_ngram, n_max_auto=n_max_auto,
                              draft_head_type=spec_draft_head_type, draft_vocab=spec_draft_vocab,
                              accept=spec_accept, cache_type_k=tk,
                              cache_type_v=tv, draft_type_k=tk, draft_type_v=tv)
        self._chat_template = resolve_chat_template(CHAT_FORMATS.get(chat_format) if chat_format else None,
                                                    {"tokenizer.chat_template": self._model.chat_template})
        m = self._model
        # the server's chat path (pyllm.chat_request): tools, reasoning split, structured output
        self._chat = ChatSetup(self._chat_template, bos_token=m.special_text(m.bos), eos_token=m.special_text(m.eos))
        self.metadata = {k: _meta_str(v) for k, v in self._model.metadata().items() if not isinstance(v, list)}
        self._active = None           # the running call's event iterator (a new call closes it)
        self.last_spec_stats: Optional[dict] = None
        self.last_timings: Optional[dict] = None

    # ------------------------------------------------------------------ model / vocabulary
    def n_ctx(self) -> int:
        """Context size in tokens."""
        return self._gen.n_ctx

    def n_vocab(self) -> int:
        return self._model.n_vocab

    def n_embd(self) -> int:
        return self._model.n_embd

    def token_bos(self) -> int:
        return self._model.bos

    def token_eos(self) -> int:
        return self._model.eos

    def token_nl(self) -> int:
        ids = self._model.tokenize("\n", False, False)
        return ids[-1] if ids else -1

    def tokenize(self, text: Union[bytes, str], add_bos: bool = True, special: bool = False) -> List[int]:
        """Token ids of UTF-8 `text`. add_bos: add BOS when the model wants one; special: parse control tokens."""
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8", "replace")
        return self._model.tokenize(text, add_bos, special)

    def detokenize(self, tokens: List[int], prev_tokens: Optional[List[int]] = None, special: bool = False) -> bytes:
        """The bytes of `tokens` (prev_tokens is accepted for llama-cpp-python compatibility: pieces do not
        depend on what precedes them here)."""
        self._model.check_tokens(tokens)
        return self._model.detokenize(tokens, special)

    def reset(self):
        """Forget the evaluated tokens: the next call evaluates its whole prompt."""
        self._close_active()
        self._gen.clear(0)

    def save_state(self) -> "LlamaState":
        """llama-cpp-python's save_state: a copy of everything the context holds (the evaluated tokens, KV,
        recurrent state, context checkpoints, the MTP layer's memory); load_state puts it back, and a call whose
        prompt extends those tokens evaluates only the rest."""
        self._close_active()
        return LlamaState(self._gen.state_get(0), self._seed)

    def load_state(self, state: "LlamaState") -> None:
        """Put a save_state() copy back (ValueError when it comes from another model or context shape)."""
        if not isinstance(state, LlamaState):
            raise TypeError(f"load_state expects a LlamaState from save_state(), got {type(state).__name__}")
        self._close_active()
        self._gen.state_set(0, state._state)

    def close(self):
        self._close_active()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ generation
    def generate(self, tokens: List[int], top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
                 typical_p: float = 1.0, temp: float = 0.80, repeat_penalty: float = 1.0, reset: bool = True,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0, tfs_z: float = 1.0,
                 mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                 penalize_nl: bool = True, logits_processor=None, stopping_criteria=None,
                 grammar=None) -> Iterator[int]:
        """Yield generated token ids for the prompt `tokens`, up to and including an end-of-generation token (or
        until the context is full). `reset` makes no difference to the output: the common prefix with what was
        evaluated before is always reused."""
        _check_unsupported("generate", tfs_z=(tfs_z, 1.0), penalize_nl=(penalize_nl, True),
                           logits_processor=(logits_processor, None), stopping_criteria=(stopping_criteria, None))
        sampling = self._sampling(temp, top_p, top_k, min_p, typical_p, repeat_penalty, presence_penalty,
                                  frequency_penalty, None, mirostat_mode, mirostat_tau, mirostat_eta, None)
        req = self._request(list(tokens), sampling, -1, [], 0)
        req.constraint = self._grammar("generate", {"grammar": _grammar_text(grammar)})
        return self._tokens(req)

    def _tokens(self, req: Request) -> Iterator[int]:
        n = 0
        for ev in self._events(req):
            toks = ev.data["tokens"][n:] if ev.kind == "done" else ev.tokens
            n += len(toks)
            yield from toks

    def create_completion(self, prompt: Union[str, List[int]], suffix: Optional[str] = None,
                          max_tokens: Optional[int] = 16, temperature: float = 0.8, top_p: float = 0.95,
                          min_p: float = 0.05, typical_p: float = 1.0, logprobs: Optional[int] = None,
                          echo: bool = False, stop: Optional[Union[str, List[str]]] = None,
                          frequency_penalty: float = 0.0, presence_penalty: float = 0.0, repeat_penalty: float = 1.0,
                          top_k: int = 40, stream: bool = False, seed: Optional[int] = None, tfs_z: float = 1.0,
                          mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                          model: Optional[str] = None, stopping_criteria=None, logits_processor=None, grammar=None,
                          logit_bias: Optional[dict] = None):
        """Complete `prompt` (text, or token ids). Returns a CreateCompletionResponse dict
        {id, object: "text_completion", created, model, choices: [{text, index, logprobs, finish_reason}], usage},
        or with stream=True an iterator of chunks of that shape without usage (the last one carries the
        finish_reason). max_tokens None or <= 0: until end-of-generation or a full context. logprobs=N: the N most
        likely tokens per position (CompletionLogprobs). echo: the prompt is prepended to the text."""
        _check_unsupported("create_completion", suffix=(suffix, None), tfs_z=(tfs_z, 1.0),
                           stopping_criteria=(stopping_criteria, None), logits_processor=(logits_processor, None))
        con = self._grammar("create_completion", {"grammar": _grammar_text(grammar)})
        if echo and logprobs is not None:
            raise ValueError("create_completion: echo=True with logprobs is not supported by pyllm "
                             "(the prompt's logprobs are not computed)")
        if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int) or logprobs < 0):
            raise ValueError(f"create_completion: logprobs must be a non-negative int, got {logprobs!r}")
        toks = self._prompt_tokens(prompt)
        prompt_text = prompt if isinstance(prompt, str) else self._model.detokenize(toks, False).decode("utf-8", "replace")
        sampling = self._sampling(temperature, top_p, top_k, min_p, typical_p, repeat_penalty, presence_penalty,
                                  frequency_penalty, seed, mirostat_mode, mirostat_tau, mirostat_eta, logit_bias)
        n_top = -1 if logprobs is None else logprobs
        req = self._request(toks, sampling, max_tokens, stop, max(n_top, 1) if n_top >= 0 else 0)
        req.constraint = con
        shapes = Shapes(model or self.model_path, chat=False)
        echo_text = prompt_text if echo else ""
        it = self._completion_chunks(req, shapes, n_top, echo_text, len(prompt_text))
        return it if stream else _collect_completion(it, shapes, echo_text, len(toks))

    def __call__(self, prompt: Union[str, List[int]], *args, **kwargs):
        """create_completion(prompt, ...)."""
        return self.create_completion(prompt, *args, **kwargs)

    def create_chat_completion(self, messages: List[dict], functions=None, function_call=None, tools=None,
                               tool_choice=None, temperature: float = 0.2, top_p: float = 0.95, top_k: int = 40,
                               min_p: float = 0.05, typical_p: float = 1.0, stream: bool = False,
                               stop: Optional[Union[str, List[str]]] = None, seed: Optional[int] = None,
                               response_format=None, max_tokens: Optional[int] = None,
                               presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                               repeat_penalty: float = 1.0, tfs_z: float = 1.0, mirostat_mode: int = 0,
                               mirostat_tau: float = 5.0, mirostat_eta: float = 0.1, model: Optional[str] = None,
                               logits_processor=None, grammar=None, logit_bias: Optional[dict] = None,
                               logprobs: Optional[bool] = None, top_logprobs: Optional[int] = None):
        """Answer a list of chat messages, rendered with the model's chat template (see chat_format).
        Returns a CreateChatCompletionResponse dict {id, object: "chat.completion", created, model,
        choices: [{index, message: {role, content}, logprobs, finish_reason}], usage}, or with stream=True an
        iterator of "chat.completion.chunk" dicts whose choices carry a delta: {"role": "assistant"} first, then
        {"content": ...}, then {} with the finish_reason. logprobs=True (+ top_logprobs=N): OpenAI's logprobs."""
        for name, value in (("functions", functions), ("function_call", function_call)):
            if value is not None:
                raise NotImplementedError(f"create_chat_completion: {name} (the legacy form) is not supported by "
                                          "pyllm: use tools / tool_choice")
        _check_unsupported("create_chat_completion", tfs_z=(tfs_z, 1.0), logits_processor=(logits_processor, None))
        if top_logprobs is not None and not logprobs:
            raise ValueError("create_chat_completion: top_logprobs requires logprobs=True")
        n_top = (top_logprobs or 0) if logprobs else -1
        body = {k: v for k, v in (("messages", messages), ("tools", tools), ("tool_choice", tool_choice),
                                  ("response_format", response_format), ("grammar", _grammar_text(grammar)))
                if v is not None}
        if tools:
            body["parallel_tool_calls"] = False  # llama-cpp-python answers with one call
        try:
            turn = self._chat.prepare(body)
            con = turn.constraint(self._model)
        except RequestError as e:
            raise ValueError(f"create_chat_completion: {e}") from None
        toks = self._prompt_tokens(turn.prompt)
        sampling = self._sampling(temperature, top_p, top_k, min_p, typical_p, repeat_penalty, presence_penalty,
                                  frequency_penalty, seed, mirostat_mode, mirostat_tau, mirostat_eta, logit_bias)
        req = self._request(toks, sampling, max_tokens, stop, max(n_top, 1) if n_top >= 0 else 0)
        req.constraint = con
        shapes = Shapes(model or self.model_path, chat=True)
        it = self._chat_chunks(req, shapes, n_top, turn.output(stream))
        return it if stream else _collect_chat(it, shapes, len(toks))

    def apply_chat_template(self, messages: List[dict], add_generation_prompt: bool = True) -> str:
        """The prompt text create_chat_completion generates from (ValueError for malformed messages)."""
        try:
            return self._chat.prepare({"messages": messages, "add_generation_prompt": add_generation_prompt}).prompt
        except RequestError as e:
            raise ValueError(str(e)) from None

    # ------------------------------------------------------------------ internals
    def _prompt_tokens(self, prompt) -> list:
        if isinstance(prompt, str):
            toks = self._model.tokenize(prompt, True, True) if prompt else []
        elif isinstance(prompt, (list, tuple)):
            toks = list(prompt)
            self._model.check_tokens(toks)
        else:
            raise TypeError(f"prompt must be a str or a list of token ids, got {type(prompt).__name__}")
        if not toks:  # as llama.cpp: an empty prompt starts from BOS
            if self._model.bos < 0:
                raise ValueError("empty prompt and the model has no BOS token")
            toks = [self._model.bos]
        if len(toks) >= self._gen.n_ctx:
            raise ValueError(f"Requested tokens ({len(toks)}) exceed context window of {self._gen.n_ctx}")
        return toks

    def _sampling(self, temperature, top_p, top_k, min_p, typical_p, repeat_penalty, presence_penalty,
                  frequency_penalty, seed, mirostat_mode, mirostat_tau, mirostat_eta, logit_bias) -> dict:
        if seed is None:
            seed = self._seed
        d = {"temperature": temperature, "top_p": top_p, "top_k": top_k, "min_p": min_p, "typical_p": typical_p,
             "repeat_penalty": repeat_penalty, "repeat_last_n": self.last_n_tokens_size,
             "presence_penalty": presence_penalty, "frequency_penalty": frequency_penalty,
             "mirostat": mirostat_mode, "mirostat_tau": mirostat_tau, "mirostat_eta": mirostat_eta,
             "seed": -1 if seed is None or seed < 0 or seed == LLAMA_DEFAULT_SEED else int(seed)}
        if logit_bias:
            if not isinstance(logit_bias, dict):
                raise ValueError("logit_bias must be a dict {token_id: bias}")
            d["logit_bias"] = [(int(k), float(v)) for k, v in logit_bias.items()]
            self._model.check_tokens([t for t, _ in d["logit_bias"]])
        return d

    def _request(self, toks, sampling, max_tokens, stop, n_probs) -> Request:
        if isinstance(stop, str):
            stop = [stop]
        if stop is not None and (not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) for s in stop)):
            raise ValueError("stop must be a string or a list of strings")
        n_predict = -1 if max_tokens is None or max_tokens <= 0 else int(max_tokens)
        return Request(prompt=toks, sampling=sampling, n_predict=n_predict, stop=list(stop or []), n_probs=n_probs)

    def _close_active(self):
        it, self._active = self._active, None
        if it is not None:
            it.close()

    def _events(self, req: Request):
        """The Generator's events for req on the one sequence; records the call's statistics at the end."""
        self._close_active()
        it = self._gen.run(req)
        self._active = it
        try:
            for ev in it:
                if ev.kind == "done":
                    self._on_done(ev.data)
                yield ev
        finally:
            it.close()
            if self._active is it:
                self._active = None

    def _on_done(self, fin: dict):
        st = fin["stats"]
        n_draft, n_acc = int(st.get("n_draft", 0) or 0), int(st.get("n_draft_accepted", 0) or 0)
        self.last_timings = fin["timings"]
        self.last_spec_stats = {
            "spec_type": self.spec_type, "n_draft": n_draft, "n_draft_accepted": n_acc,
            "n_verif_steps": int(st.get("n_verif_steps", 0) or 0),
            "acceptance_rate": n_acc / n_draft if n_draft else 0.0,
            "n_accepted_per_pos": [int(v) for v in (st.get("n_accepted_per_pos") or [])],
            "acceptance_line": fin["acceptance_line"],
        }
        if self.verbose:
            t = fin["timings"]
            print(f"pyllm: prompt eval: {t['prompt_n']} tokens, {t['prompt_per_second']:.2f} tok/s | generation: "
                  f"{t['predicted_n']} tokens, {t['predicted_per_second']:.2f} tok/s", file=sys.stderr)
            if fin["acceptance_line"]:
                print(f"pyllm: {fin['acceptance_line']}", file=sys.stderr)

    def _visible(self, probs: list) -> list:
        """Token probabilities without the end-of-generation token (it is not part of the text)."""
        return [(t, p) for t, p in probs if not self._model.is_eog(t)]

    def _pieces(self, req, fin: dict):
        """(text, visible probabilities) per event of the request; the final event's data is put into `fin`,
        and its text is a last piece only when it carries probabilities."""
        for ev in self._events(req):
            probs = self._visible(ev.probs if ev.kind == "token" else ev.data["probs_tail"])
            if ev.kind == "done":
                fin.update(ev.data)
                if not probs:
                    return
            yield ev.text, probs

    def _completion_chunks(self, req, shapes: Shapes, n_top: int, echo_text: str, prompt_chars: int):
        offset = prompt_chars
        if echo_text:
            yield shapes.completion(echo_text, None, None)
        fin = {}
        for text, probs in self._pieces(req, fin):
            lp = completion_logprobs(self._model, probs, n_top, offset) if n_top >= 0 else None
            offset += len(text)
            yield shapes.completion(text, lp, None)
        if fin:
            yield _Final(shapes.completion("", None, finish_reason(fin["stop_type"])), fin)

    def _grammar(self, where: str, body: dict):
        """A completion's grammar as the sequence's TokenConstraint (None without one)."""
        try:
            g, _ = request_grammar(body)
            return None if g is None else TokenConstraint(self._model.n_vocab, GrammarMatcher(self._model.guidance(), g))
        except GrammarError as e:
            raise ValueError(f"{where}: {e}") from None

    def _chat_chunks(self, req, shapes: Shapes, n_top: int, out):
        """Chunks of the reply: `out` (ChatOutput) splits reasoning_content and tool_calls from the text."""
        yield shapes.chat_chunk({"role": "assistant"}, None, None)
        fin = {}
        for text, probs in self._pieces(req, fin):
            lp = chat_logprobs(self._model, probs, n_top) if n_top >= 0 else None
            deltas = [event_to_delta(d) for d in out.feed(text)] or ([{}] if lp else [])
            for k, delta in enumerate(deltas):
                yield shapes.chat_chunk(delta, lp if k == 0 else None, None)
        for d in out.finish():
            yield shapes.chat_chunk(event_to_delta(d), None, None)
        if fin:
            reason = chat_finish_reason(fin["stop_type"], len(out.tool_calls))
            yield _Final(shapes.chat_chunk({}, None, reason), fin, out.message())


class LlamaState:
    """What Llama.save_state() returns (llama-cpp-python's LlamaState fields that apply: input_ids, n_tokens,
    llama_state_size, seed); the state itself is the core's opaque SeqState."""

    def __init__(self, state, seed):
        self._state = state
        self.input_ids = list(state.tokens)
        self.n_tokens = int(state.n_tokens)
        self.llama_state_size = int(state.nbytes)
        self.seed = seed


class _Final(dict):
    """The last chunk of a stream (a plain dict to the caller) carrying the summary for the non-stream path."""

    def __init__(self, chunk: dict, fin: dict, message: Optional[dict] = None):
        super().__init__(chunk)
        self.fin = fin
        self.message = message  # chat: the assembled assistant message


def _n_completion(fin: dict) -> int:
    """Generated tokens without the end-of-generation token (llama-cpp-python's completion_tokens)."""
    return fin["n_decoded"] - (1 if fin["stop_type"] == "eos" else 0)


def _collect_completion(chunks, shapes: Shapes, echo_text: str, n_prompt: int) -> dict:
    text, lp, fin, reason = [], None, {}, None
    for c in chunks:
        ch = c["choices"][0]
        text.append(ch["text"])
        if ch["logprobs"] is not None:
            if lp is None:
                lp = {k: [] for k in ch["logprobs"]}
            for k, v in ch["logprobs"].items():
                lp[k] += v
        if isinstance(c, _Final):
            fin, reason = c.fin, ch["finish_reason"]
    return shapes.completion("".join(text), lp, reason, usage(n_prompt, _n_completion(fin) if fin else 0))


def _collect_chat(chunks, shapes: Shapes, n_prompt: int) -> dict:
    lp, fin, reason, msg = None, {}, None, None
    for c in chunks:
        ch = c["choices"][0]
        if ch["logprobs"] is not None:
            lp = lp or {"content": [], "refusal": None}
            lp["content"] += ch["logprobs"]["content"]
        if isinstance(c, _Final):
            fin, reason, msg = c.fin, ch["finish_reason"], c.message
    return shapes.chat_completion(msg or {"role": "assistant", "content": ""}, lp, reason,
                                  usage(n_prompt, _n_completion(fin) if fin else 0))


def _grammar_text(grammar):
    """grammar=: GBNF text, or an object holding it (llama-cpp-python's LlamaGrammar keeps it in _grammar)."""
    if grammar is None or isinstance(grammar, str):
        return grammar
    for attr in ("_grammar", "grammar"):
        if isinstance(getattr(grammar, attr, None), str):
            return getattr(grammar, attr)
    raise TypeError(f"grammar must be GBNF text, got {type(grammar).__name__}")


def _meta_str(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return v if isinstance(v, str) else str(v)
