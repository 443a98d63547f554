"""A pure-Python stand-in for pyllm._core (Model + Context), with the same API.

Byte-level vocabulary: 0 = <unk>, 1 = <s> (BOS), 2 = </s> (EOS), 3..258 = bytes 0..255.
Generation is deterministic: next = (prev * 31 + 7) % n_vocab. With spec_type="draft-mtp" a step
emits 1..n_max+1 tokens and keeps draft statistics. Env PYLLM_FAKE_STEP_MS adds a delay per step.
The settings structs (SamplerParams, SeqParams) and the spec-param validation are the real core's.
"""
from __future__ import annotations

import os
import threading
import time

from pyllm import _core as _real

# the real core's settings structs and validation (plain data and checks; no model needed)
SamplerParams, SeqParams, check_spec_params = _real.SamplerParams, _real.SeqParams, _real.check_spec_params
SpecNgramParams = _real.SpecNgramParams
sampler_types_from_names, sampler_types_from_chars = _real.sampler_types_from_names, _real.sampler_types_from_chars
sampler_type_name = _real.sampler_type_name


class GGUFError(ValueError):
    pass


N_VOCAB = 259
BOS, EOS = 1, 2
SPECIALS = {0: b"<unk>", 1: b"<s>", 2: b"</s>"}

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


class Model:
    def __init__(self, path: str, load_mtp: bool = False, mmap: int = -1, repack: bool = True):
        if not os.path.exists(path):
            raise ValueError(f"failed to open GGUF file '{path}': No such file or directory")
        with open(path, "rb") as f:
            head = f.read(4)
        if head and head != b"GGUF" and not path.endswith(".gguf"):
            raise GGUFError(f"'{path}': not a GGUF file (bad magic)")
        self.path = path
        self.arch = "fake"
        self.n_vocab = N_VOCAB
        self.n_ctx_train = 4096
        self.n_embd = 64
        self.n_layer = 2
        self.has_mtp = True
        self.desc = "fake 1M F32"
        self.size_bytes = 1234
        self.n_params = 1000000
        self.bos = BOS
        self.eos = EOS
        self.eot = -1
        self.add_bos = True
        self.chat_template = CHATML

    def is_eog(self, id: int) -> bool:
        return id == EOS

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list:
        out = [BOS] if (add_special and self.add_bos) else []
        if parse_special:
            i = 0
            while i < len(text):
                for tid, piece in SPECIALS.items():
                    p = piece.decode()
                    if text.startswith(p, i):
                        out.append(tid)
                        i += len(p)
                        break
                else:
                    out.extend(b + 3 for b in text[i].encode("utf-8"))
                    i += 1
        else:
            out.extend(b + 3 for b in text.encode("utf-8"))
        return out

    def token_to_piece(self, id: int, special: bool = True) -> bytes:
        if id < 0 or id >= N_VOCAB:
            raise ValueError(f"token id {id} out of range [0, {N_VOCAB})")
        if id in SPECIALS:
            return SPECIALS[id] if special else b""
        return bytes([id - 3])

    def detokenize(self, ids: list, special: bool = False) -> str:
        return b"".join(self.token_to_piece(i, special) for i in ids).decode("utf-8", "replace")

    def metadata(self) -> dict:
        return {"general.architecture": "fake", "general.name": "fake",
                "tokenizer.chat_template": self.chat_template}


class _Seq:
    def __init__(self):
        self.tokens: list = []       # what the KV holds
        self.active = False
        self.pending: list = []      # prompt tokens still to evaluate
        self.params = SeqParams()
        self.n_gen = 0
        self.stats = {}


class SeqState:
    """The stand-in's saved sequence: its tokens (file format: a JSON line of header, then the tokens)."""

    def __init__(self, tokens: list):
        self.tokens = tokens
        self.n_tokens = len(tokens)
        self.nbytes = 4 * len(tokens) + 64
        self.has_mtp = False
        self.checkpoints = []

    def write(self, path: str, header: str):
        import json
        with open(path + ".tmp", "w") as f:
            f.write(header.replace("\n", " ") + "\n" + json.dumps(self.tokens))
        os.replace(path + ".tmp", path)

    @staticmethod
    def read(path: str):
        import json
        with open(path) as f:
            header, body = f.read().split("\n", 1)
        return SeqState(json.loads(body)), header.encode()


class Context:
    def __init__(self, model: Model, n_ctx: int, n_seq: int, n_batch: int = 2048, n_ubatch: int = 512,
                 n_threads: int = 2, spec_type: str = "none", n_max: int = 3, n_min: int = 0, p_min: float = 0.0,
                 synth_len: float = -1.0, synth_rates: list = (), ngram=None, draft_model=None, draft_threads=0,
                 n_max_auto: bool = False, draft_head_type: str = "", draft_vocab: int = 0, accept: str = "match"):
        if n_seq < 1:
            raise ValueError("n_seq must be >= 1")
        check_spec_params(spec_type, n_max, n_min, p_min, float(synth_len), list(synth_rates),
                          ngram if ngram is not None else SpecNgramParams(), n_max_auto, draft_head_type, draft_vocab,
                          accept)
        self.draft_head_info = ""
        self.model = model
        self.n_ctx = n_ctx
        self.n_seq = n_seq
        self.n_ctx_seq = n_ctx // n_seq
        self.n_batch = n_batch
        self.spec_type = spec_type
        self.n_max = n_max
        self.seqs = [_Seq() for _ in range(n_seq)]
        self.delay = float(os.environ.get("PYLLM_FAKE_STEP_MS", "1")) / 1000.0
        self._lock = threading.Lock()
        self._g = {"n_prompt_tokens": 0, "n_gen_tokens": 0, "n_decode_calls": 0, "n_draft": 0,
                   "n_draft_accepted": 0, "n_drafts": 0, "n_accepted_per_pos": [0] * max(n_max, 0)}

    def _check(self, seq):
        if seq < 0 or seq >= self.n_seq:
            raise ValueError(f"invalid seq id {seq}")

    def seq_begin(self, model: Model, seq: int, prompt: list, params=None) -> int:
        # params: a SeqParams (pyllm.sampling.seq_params); the sampler settings are not used (fixed sequence)
        self._check(seq)
        if len(prompt) >= self.n_ctx_seq:
            raise ValueError(f"prompt of {len(prompt)} tokens does not fit the context of {self.n_ctx_seq}")
        if not prompt:
            raise ValueError("empty prompt")
        for t in prompt:
            if t < 0 or t >= N_VOCAB:
                raise ValueError(f"invalid token id {t}")
        s = self.seqs[seq]
        n = 0
        while n < len(s.tokens) and n < len(prompt) and s.tokens[n] == prompt[n]:
            n += 1
        n = min(n, len(prompt) - 1)
        s.tokens = list(prompt[:n])
        s.pending = list(prompt[n:])
        s.active = True
        s.params = params if params is not None else SeqParams()
        s.n_gen = 0
        s.t_start = time.perf_counter()
        s.t_prompt_done = None
        s.t_last = None
        self._g["n_prompt_tokens"] += len(prompt) - n
        s.stats = {"n_prompt": len(prompt), "n_cached": n, "t_prompt_ms": 0.0, "n_gen": 0, "t_gen_ms": 0.0,
                   "n_draft": 0, "n_draft_accepted": 0, "n_verif_steps": 0,
                   "n_accepted_per_pos": [0] * max(self.n_max, 0) if self.spec_type != "none" else []}
        return n

    def _next(self, prev):
        return (prev * 31 + 7) % N_VOCAB

    def _probs(self, tok, n):
        top = [(tok, 0.5)] + [((tok + k) % N_VOCAB, 0.5 / (2 ** k)) for k in range(1, n)]
        return {"id": tok, "p": 0.5, "top": top[:n]}

    def step(self) -> list:
        out = []
        if self.delay:
            time.sleep(self.delay)
        for i, s in enumerate(self.seqs):
            if not s.active:
                continue
            res = {"seq": i, "tokens": [], "probs": None, "done": False, "stop": None}
            n_predict = s.params.n_predict
            n_probs = s.params.n_probs
            if s.pending:
                chunk = s.pending[: self.n_batch]
                s.pending = s.pending[self.n_batch:]
                s.tokens.extend(chunk)
                if s.pending:
                    out.append(res)
                    continue
                now = time.perf_counter()
                s.t_prompt_done = now
                s.stats["t_prompt_ms"] = (now - s.t_start) * 1e3
                if n_predict == 0:
                    res["done"], res["stop"] = True, "limit"
                    s.active = False
                    out.append(res)
                    continue
                n_emit = 1
            else:
                n_emit = 1
                if self.spec_type != "none" and self.n_max > 0:
                    acc = (s.n_gen + len(s.tokens)) % (self.n_max + 1)
                    s.stats["n_draft"] += self.n_max
                    s.stats["n_draft_accepted"] += acc
                    s.stats["n_verif_steps"] += 1
                    self._g["n_draft"] += self.n_max
                    self._g["n_draft_accepted"] += acc
                    self._g["n_drafts"] += 1
                    for k in range(acc):
                        s.stats["n_accepted_per_pos"][k] += 1
                        self._g["n_accepted_per_pos"][k] += 1
                    n_emit = 1 + acc
            toks, probs = [], []
            for _ in range(n_emit):
                t = self._next(s.tokens[-1])
                if s.params.ignore_eos and t == EOS:
                    t = 3 + ord("!")
                toks.append(t)
                probs.append(self._probs(t, n_probs) if n_probs > 0 else None)
                s.tokens.append(t)
                s.n_gen += 1
                self._g["n_gen_tokens"] += 1
                if t == EOS:
                    res["done"], res["stop"] = True, "eos"
                    break
                if n_predict >= 0 and s.n_gen >= n_predict:
                    res["done"], res["stop"] = True, "limit"
                    break
                if len(s.tokens) >= self.n_ctx_seq:
                    res["done"], res["stop"] = True, "ctx"
                    break
            s.t_last = time.perf_counter()
            s.stats["n_gen"] = s.n_gen
            s.stats["t_gen_ms"] = max((s.t_last - s.t_prompt_done) * 1e3, 1e-3)
            res["tokens"] = toks
            res["probs"] = probs if n_probs > 0 else None
            if res["done"]:
                s.active = False
            out.append(res)
        return out

    def seq_end(self, seq: int):
        self._check(seq)
        s = self.seqs[seq]
        s.active = False
        s.pending = []

    def seq_clear(self, seq: int):
        self.seq_end(seq)
        self.seqs[seq].tokens = []

    def set_draft_check(self, fn):
        self.draft_check = fn  # the fake core has no constrained decoding: kept, never called

    # the prompt cache: checkpoints are the real core's concern (no recurrent state here); a state is the tokens
    def set_checkpoints(self, n_max: int, min_step: int):
        if n_max < 0 or min_step < 0:
            raise ValueError("checkpoint settings must be >= 0")

    def seq_set_checkpoint_hints(self, seq: int, positions: list):
        self._check(seq)

    memory_bytes = 0

    def seq_pos(self, seq: int) -> int:
        self._check(seq)
        return len(self.seqs[seq].tokens)

    def seq_checkpoints(self, seq: int) -> list:
        self._check(seq)
        return []

    def seq_state_get(self, seq: int):
        self._check(seq)
        if self.seqs[seq].active:
            raise ValueError(f"sequence {seq} is busy")
        return SeqState(list(self.seqs[seq].tokens))

    def seq_state_set(self, seq: int, state):
        self._check(seq)
        if self.seqs[seq].active:
            raise ValueError(f"sequence {seq} is busy")
        if len(state.tokens) >= self.n_ctx_seq:
            raise ValueError("the saved state does not fit the context")
        self.seqs[seq].tokens = list(state.tokens)

    def acceptance_line(self, seq: int) -> str:
        st = self.seqs[seq].stats
        gen, acc, nv = st.get("n_draft", 0), st.get("n_draft_accepted", 0), st.get("n_verif_steps", 0)
        rate = acc / gen if gen else 0.0
        mean = 1.0 + acc / nv if nv else 0.0
        return f"draft acceptance = {rate:0.5f} ({acc:5d} accepted / {gen:5d} generated), mean len = {mean:5.2f}"

    def global_stats(self) -> dict:
        return dict(self._g, n_accepted_per_pos=list(self._g["n_accepted_per_pos"]))

    def seq_stats(self, seq: int) -> dict:
        self._check(seq)
        return dict(self.seqs[seq].stats, n_accepted_per_pos=list(self.seqs[seq].stats.get("n_accepted_per_pos", [])))

    def n_active(self) -> int:
        return sum(1 for s in self.seqs if s.active)


def install():
    """Make `pyllm._core`-like attributes available: returns a module-like namespace."""
    import types
    m = types.SimpleNamespace(Model=Model, Context=Context, SeqState=SeqState, GGUFError=GGUFError, SamplerParams=SamplerParams,
                              SeqParams=SeqParams, check_spec_params=check_spec_params, SpecNgramParams=SpecNgramParams,
                              sampler_types_from_names=sampler_types_from_names,
                              sampler_types_from_chars=sampler_types_from_chars, sampler_type_name=sampler_type_name)
    return m
