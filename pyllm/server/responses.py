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
