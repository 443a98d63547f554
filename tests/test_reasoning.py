"""Reasoning split (<think>), --reasoning-format semantics, enable_thinking resolution, budget."""
import random

import pytest

from pyllm.reasoning import (ReasoningBudget, ReasoningSplitter, parse_reasoning_format, parse_template_kwargs,
                             resolve_thinking, split_reasoning, thinking_open_at_end)


def run(text, chunk=None, **kw):
    sp = ReasoningSplitter(**kw)
    rnd = random.Random(len(text))
    out, i = [], 0
    while i < len(text):
        n = chunk or rnd.randint(1, 5)
        out += sp.feed(text[i:i + n])
        i += n
    out += sp.finish()
    return ("".join(t for k, t in out if k == "reasoning"), "".join(t for k, t in out if k == "content"), out)


@pytest.mark.parametrize("chunk", [1, 2, None, 1000])
def test_split_at_start_and_streamed(chunk):
    text = "<think>\nI should greet.\n</think>\n\nHello!"
    r, c, _ = run(text, chunk)
    assert (r, c) == ("I should greet.", "Hello!")
    assert split_reasoning(text) == (r, c)


@pytest.mark.parametrize("chunk", [1, 3, None])
def test_forced_open_think_block(chunk):
    # Qwen3.5/3.6: the generation prompt ends with '<think>\n', the model starts inside the block
    r, c, _ = run("The user wants x.\n\nSo y.\n</think>\n\nAnswer: y", chunk, forced_open=True)
    assert (r, c) == ("The user wants x.\n\nSo y.", "Answer: y")


def test_no_think_block_is_all_content():
    assert split_reasoning("  Just an answer <think> not at start") == ("", "  Just an answer <think> not at start")
    assert split_reasoning("<thi") == ("", "<thi")  # a tag prefix that never completes


def test_unterminated_reasoning_stays_reasoning():
    assert split_reasoning("<think>still thinking", ) == ("still thinking", "")


def test_tags_never_leak_half():
    _, _, out = run("<think>ab</think>cd", 1)
    for kind, t in out:
        assert "<" not in t and ">" not in t, out


def test_content_end_tag_goes_to_content():
    r, c, _ = run("hmm\n<tool_call>\n<function=f>", 1, forced_open=True, content_ends=("<tool_call>",))
    assert r == "hmm" and c == "<tool_call>\n<function=f>"


def test_deepseek_legacy_stream_keeps_reasoning_inline():
    _, c, out = run("x\n</think>\n\ny", 1, forced_open=True, inline=True)
    assert all(k == "content" for k, _ in out)
    assert c == "<think>x\n</think>\n\ny"
    _, c, _ = run("<think>x</think>y", 2, inline=True)
    assert c == "<think>x</think>y"


def test_formats_and_kwargs():
    for f in ("none", "auto", "deepseek", "deepseek-legacy"):
        assert parse_reasoning_format(f) == f
    with pytest.raises(ValueError, match="Unknown reasoning format"):
        parse_reasoning_format("r1")
    assert parse_template_kwargs('{"enable_thinking": false}') == {"enable_thinking": False}
    assert parse_template_kwargs("") == {}
    for bad in ("{", "[1]"):
        with pytest.raises(ValueError, match="chat-template-kwargs"):
            parse_template_kwargs(bad)


def test_resolve_thinking_precedence():
    assert resolve_thinking().enable_thinking is True
    assert resolve_thinking(template_supports_thinking=False).enable_thinking is False
    assert resolve_thinking(reasoning_mode="off").enable_thinking is False
    s = resolve_thinking({"enable_thinking": False}, None)
    assert s.enable_thinking is False and s.template_kwargs == {"enable_thinking": False}
    assert resolve_thinking({"enable_thinking": False}, {"enable_thinking": True}).enable_thinking is True
    s = resolve_thinking(None, None, reasoning_effort="none")
    assert s.enable_thinking is False and "reasoning_effort" not in s.template_kwargs
    assert resolve_thinking(None, None, reasoning_effort="high").template_kwargs["reasoning_effort"] == "high"
    with pytest.raises(ValueError, match="expected boolean"):
        resolve_thinking(None, {"enable_thinking": "false"})
    with pytest.raises(ValueError, match="chat_template_kwargs"):
        resolve_thinking(None, "x")
    with pytest.raises(ValueError, match="--reasoning"):
        resolve_thinking(reasoning_mode="maybe")


def test_thinking_open_at_end():
    assert thinking_open_at_end("<|im_start|>assistant\n<think>\n")
    assert not thinking_open_at_end("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not thinking_open_at_end("<|im_start|>assistant\n")


def _toy_tokenize(text):  # one id per character; '</think>' is one token (as in Qwen vocabs)
    ids, i = [], 0
    while i < len(text):
        if text.startswith("</think>", i):
            ids.append(1000)
            i += 8
        elif text.startswith("<think>", i):
            ids.append(1001)
            i += 7
        else:
            ids.append(ord(text[i]))
            i += 1
    return ids


def test_budget_forces_the_end_after_n_tokens():
    b = ReasoningBudget(3, _toy_tokenize, forced_open=True)
    seq = []
    for t in [ord("a"), ord("b"), ord("c")]:
        assert b.forced() is None
        b.accept(t)
        seq.append(t)
    assert b.forced() == 1000  # the end tag is forced now
    b.accept(1000)
    assert b.forced() is None and b.done


def test_budget_message_zero_unlimited_and_model_closing():
    b = ReasoningBudget(0, _toy_tokenize, forced_open=True, message="ok")
    forced = []
    while b.forced() is not None:
        forced.append(b.forced())
        b.accept(forced[-1])
    assert forced == _toy_tokenize("ok\n</think>")
    b = ReasoningBudget(-1, _toy_tokenize, forced_open=True)
    assert b.forced() is None and b.done
    b = ReasoningBudget(5, _toy_tokenize, forced_open=True)
    b.accept(ord("x"))
    b.accept(1000)  # the model closed the block itself
    assert b.done and b.forced() is None
    b = ReasoningBudget(1, _toy_tokenize, forced_open=False)  # block not open yet
    assert b.forced() is None
    b.accept(1001)
    b.accept(ord("x"))
    assert b.forced() == 1000
    with pytest.raises(ValueError):
        ReasoningBudget(-2, _toy_tokenize, True)


def test_reasoning_flags():
    from pyllm.args import ArgError, parse_args
    p = parse_args(["--reasoning-format", "deepseek", "-rea", "off", "--reasoning-budget", "0",
                    "--chat-template-kwargs", '{"enable_thinking": false}', "--reasoning-budget-message", "enough"],
                   env={})
    assert (p.reasoning_format, p.reasoning, p.reasoning_budget, p.reasoning_budget_message) == (
        "deepseek", "off", 0, "enough")
    assert parse_template_kwargs(p.chat_template_kwargs) == {"enable_thinking": False}
    assert parse_args([], env={"LLAMA_ARG_THINK": "none"}).reasoning_format == "none"
    for bad, msg in ((["--reasoning-format", "r1"], "unknown reasoning format"), (["-rea", "maybe"], "--reasoning"),
                     (["--reasoning-budget", "-5"], "reasoning-budget"), (["--chat-template-kwargs", "[1]"], "JSON object")):
        with pytest.raises(ArgError, match=msg):
            parse_args(bad, env={})
