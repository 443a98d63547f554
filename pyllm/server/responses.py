"""Every JSON shape the completion endpoints answer, each built by ONE function that the streaming and the
non-streaming paths both call (llama-server's server-task.cpp to_json_* functions)."""
from __future__ import annotations

from ..generation import logprob


def prob_entry(model, tok: int, pr, post_sampling: bool) -> dict:
    """One completion_probabilities item: the token and its top-n (probabilities with post_sampling_probs)."""
    def info(tid):
        b = model.token_to_piece(tid, True)
        return b.decode("utf-8", "replace"), list(b)

    t, b = info(tok)
    p = pr["p"] if pr else 1.0
    top = pr["top"] if pr else []
    if post_sampling:
        return {"id": tok, "token": t, "bytes": b, "prob": p,
                "top_probs": [{"id": i, "token": info(i)[0], "bytes": info(i)[1], "prob": q} for i, q in top]}
    return {"id": tok, "token": t, "bytes": b, "logprob": logprob(p),
            "top_logprobs": [{"id": i, "token": info(i)[0], "bytes": info(i)[1], "logprob": logprob(q)}
                             for i, q in top]}


def finish_reason(stop_type: str) -> str:
    return "stop" if stop_type in ("eos", "word") else "length"


def usage(fins) -> dict:
    """The OpenAI usage object of finished tasks (their summaries)."""
    ct = sum(f["n_decoded"] for f in fins)
    pt = sum(f["n_prompt"] for f in fins)
    cached = sum(f["n_cached"] for f in fins)
    return {"completion_tokens": ct, "prompt_tokens": pt, "total_tokens": ct + pt,
            "prompt_tokens_details": {"cached_tokens": cached}}


class Shapes:
    """One request's response builders: id, created, model name and the request's settings are fixed per request.
    Each shape has ONE builder; the streaming and the non-streaming paths both call it."""

    def __init__(self, req: dict, gen_settings: dict, model_name: str, build_info: str, id_: str, created: int,
                 include_usage: bool, detok):
        self.req = req
        self.gen = gen_settings
        self.model = model_name
        self.build_info = build_info
        self.id = id_
        self.created = created
        self.include_usage = include_usage
        self._detok = detok       # token ids -> prompt text (the native shape's "prompt")

    # ---------------------------------------------------------------- /completion (native)
    def native_partial(self, task, ev) -> dict:
        """A streamed /completion chunk (to_json_partial)."""
        d = {"index": task.index, "content": ev.text, "tokens": ev.tokens, "stop": False, "id_slot": task.slot,
             "tokens_predicted": ev.data.get("n_decoded", 0), "tokens_evaluated": len(task.prompt)}
        if self.req["n_probs"] > 0:
            d["completion_probabilities"] = ev.probs
        if "timings" in ev.data:
            d["timings"] = ev.data["timings"]
        return d

    def native_final(self, task, fin: dict, content: str, probs: list, stream: bool) -> dict:
        """The final /completion object (to_json_final): the whole answer, or the stream's last chunk."""
        req = self.req
        d = {"index": task.index, "content": content,
             "tokens": fin["tokens"] if (req["return_tokens"] and not stream) else [],
             "id_slot": fin["id_slot"], "stop": True, "model": self.model,
             "tokens_predicted": fin["n_decoded"], "tokens_evaluated": fin["n_prompt"],
             "generation_settings": self.gen, "prompt": self._detok(task.prompt),
             "has_new_line": fin["has_new_line"], "truncated": fin["truncated"], "stop_type": fin["stop_type"],
             "stopping_word": fin["stopping_word"],
             "tokens_cached": max(0, fin["n_prompt"] + fin["n_decoded"] - 1), "timings": fin["timings"]}
        if req["n_probs"] > 0 and not stream:
            d["completion_probabilities"] = probs
        if req["response_fields"] and not stream:
            d = _project(d, req["response_fields"])
        return d

    # ---------------------------------------------------------------- /v1/completions and /v1/chat/completions
    def _logprobs(self, probs):
        return {"content": probs} if self.req["n_probs"] > 0 and probs is not None else None

    def completion_choice(self, index: int, text: str, probs, finish) -> dict:
        return {"text": text, "index": index, "logprobs": self._logprobs(probs), "finish_reason": finish}

    def chat_choice(self, index: int, message: dict, probs, finish) -> dict:
        """message: pyllm.chat_output.ChatOutput.message() (content, reasoning_content?, tool_calls?)."""
        c = {"finish_reason": finish, "index": index, "message": message}
        if self.req["n_probs"] > 0:
            c["logprobs"] = {"content": probs}
        return c

    def oai(self, obj: str, choices: list, usage_=None, timings=None, verbose=None) -> dict:
        """A text_completion (whole or chunk) or chat.completion object, key order as llama-server."""
        d = {"choices": choices, "created": self.created, "model": self.model, "system_fingerprint": self.build_info,
             "object": obj}
        if usage_ is not None:
            d["usage"] = usage_
        d["id"] = self.id
        if verbose is not None and self.req["verbose"]:  # llama-server's `verbose`: the native final JSON too
            d["__verbose"] = verbose
        if timings is not None:
            d["timings"] = timings
        return d

    def chat_chunk(self, index: int, delta: dict, finish=None, probs=None, timings=None, verbose=None) -> dict:
        """A chat.completion.chunk with one choice (verbose: the native final JSON, on the final result's first
        chunk when the request has `verbose`)."""
        choice = {"finish_reason": finish, "index": index, "delta": delta}
        if probs is not None and self.req["n_probs"] > 0:
            choice["logprobs"] = {"content": probs}
        d = {"choices": [choice], "created": self.created, "id": self.id, "model": self.model,
             "system_fingerprint": self.build_info, "object": "chat.completion.chunk"}
        if timings is not None:
            d["timings"] = timings
        if verbose is not None and self.req["verbose"]:
            d["__verbose"] = verbose
        return d

    def chat_usage_chunk(self, fins, timings) -> dict:
        """The last chunk of a chat stream with stream_options.include_usage."""
        return {"choices": [], "created": self.created, "id": self.id, "model": self.model,
                "system_fingerprint": self.build_info, "object": "chat.completion.chunk", "usage": usage(fins),
                "timings": timings}


def _project(d: dict, fields: list) -> dict:
    """response_fields: only the named (a/b paths) fields."""
    proj = {}
    for f in fields:
        cur = d
        ok = True
        for part in f.split("/"):
            if isinstance(cur, dict) and part in cur:
                cur = cur[part]
            else:
                ok = False
                break
        if ok:
            proj[f] = cur
    return proj
