"""The response shapes of llama-cpp-python's `Llama` (llama_cpp/llama_types.py), each built by ONE function that
the streaming and non-streaming paths both call: completion, completion chunk, chat completion, chat chunk,
usage and the two logprobs forms."""
from __future__ import annotations

import time
import uuid
from typing import Optional

from .generation import logprob


class Shapes:
    """Builds one call's responses: the id, created time and model name are fixed per call."""

    def __init__(self, model_name: str, chat: bool):
        base = f"cmpl-{uuid.uuid4()}"
        self.id = "chat" + base if chat else base  # llama-cpp-python: "chatcmpl-..." for chat
        self.created = int(time.time())
        self.model = model_name

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    # ------------------------------------------------------------ text completion
    def completion(self, text: str, logprobs: Optional[dict], finish_reason: Optional[str],
                   usage: Optional[dict] = None) -> dict:
        """CreateCompletionResponse (usage given) or one CreateCompletionStreamResponse chunk (usage None)."""
        d = self._head("text_completion")
        d["choices"] = [{"text": text, "index": 0, "logprobs": logprobs, "finish_reason": finish_reason}]
        if usage is not None:
            d["usage"] = usage
        return d

    # ------------------------------------------------------------ chat
    def chat_completion(self, content: str, logprobs: Optional[dict], finish_reason: Optional[str],
                        usage: dict) -> dict:
        """CreateChatCompletionResponse."""
        d = self._head("chat.completion")
        d["choices"] = [{"index": 0, "message": {"role": "assistant", "content": content}, "logprobs": logprobs,
                         "finish_reason": finish_reason}]
        d["usage"] = usage
        return d

    def chat_chunk(self, delta: dict, logprobs: Optional[dict], finish_reason: Optional[str]) -> dict:
        """CreateChatCompletionStreamResponse: delta {"role"} first, then {"content"}, then {} with the reason."""
        d = self._head("chat.completion.chunk")
        d["choices"] = [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}]
        return d


def usage(n_prompt: int, n_completion: int) -> dict:
    """CompletionUsage."""
    return {"prompt_tokens": n_prompt, "completion_tokens": n_completion, "total_tokens": n_prompt + n_completion}


def finish_reason(stop_type: str) -> str:
    return "stop" if stop_type in ("eos", "word") else "length"


def _piece(model, tok: int) -> str:
    return model.token_to_piece(tok, False).decode("utf-8", "ignore")


def completion_logprobs(model, probs: list, n_top: int, text_offset: int) -> dict:
    """CompletionLogprobs for (token, {"p", "top"}) pairs; text_offset = where the first token's text starts."""
    out = {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
    off = text_offset
    for tok, pr in probs:
        s = _piece(model, tok)
        lp = logprob(pr["p"]) if pr else 0.0
        top = {_piece(model, i): logprob(q) for i, q in (pr["top"] if pr else [])[:n_top]}
        top[s] = lp  # llama-cpp-python: the sampled token is always in its top_logprobs
        out["tokens"].append(s)
        out["text_offset"].append(off)
        out["token_logprobs"].append(lp)
        out["top_logprobs"].append(top)
        off += len(s)
    return out


def chat_logprobs(model, probs: list, n_top: int) -> dict:
    """ChatCompletionLogprobs (OpenAI's shape, bytes filled in)."""
    def entry(tok, p):
        b = model.token_to_piece(tok, False)
        return {"token": b.decode("utf-8", "ignore"), "logprob": logprob(p), "bytes": list(b)}

    content = []
    for tok, pr in probs:
        e = entry(tok, pr["p"] if pr else 1.0)
        e["top_logprobs"] = [entry(i, q) for i, q in (pr["top"] if pr else [])[:n_top]]
        content.append(e)
    return {"content": content, "refusal": None}
