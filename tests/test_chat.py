"""Chat templates (pyllm/chat.py): real GGUF templates, built-ins, HF helpers."""
import json

import pytest

import pyllm
from pyllm.chat import (BUILTIN_TEMPLATES, apply_chat_template, builtin_template_names,
                        resolve_chat_template, template_from_gguf)

from conftest import SHARED_MODELS, gemma3_path, smollm2_path

QWEN = SHARED_MODELS / "qwen35-tiny-mtp-Q8_0.gguf"

CONV = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "How are you?"},
]


def gguf_template(path):
    if path is None or not path.exists():
        pytest.skip(f"model not available: {path}")
    return template_from_gguf(pyllm.GGUFFile(str(path)))


# ---------------------------------------------------------------------------------------------
# real templates


def test_qwen35_tiny_template():
    t = gguf_template(QWEN)
    body = ("<|im_start|>system\nYou are helpful.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\nHow are you?<|im_end|>\n")
    assert apply_chat_template(t, CONV) == body + "<|im_start|>assistant\n"
    assert apply_chat_template(t, CONV, add_generation_prompt=False) == body


def test_smollm2_template_default_system():
    t = gguf_template(smollm2_path())
    sys_default = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                   "<|im_end|>\n")
    # no system message: the template inserts its own
    msgs = [{"role": "user", "content": "Hi"}]
    assert apply_chat_template(t, msgs) == sys_default + "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert apply_chat_template(t, msgs, add_generation_prompt=False) == sys_default + "<|im_start|>user\nHi<|im_end|>\n"
    # with a system message: used as is
    out = apply_chat_template(t, CONV[:3], add_generation_prompt=False)
    assert out == ("<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                   "<|im_start|>assistant\nHello!<|im_end|>\n")


def test_gemma3_270m_has_no_template_falls_back_to_chatml():
    p = gemma3_path()
    if p is None:
        pytest.skip("gemma3 not installed")
    meta = pyllm.GGUFFile(str(p))
    assert template_from_gguf(meta) is None  # this GGUF ships no tokenizer.chat_template
    t = resolve_chat_template(None, meta)
    assert t == BUILTIN_TEMPLATES["chatml"]
    assert apply_chat_template(t, CONV[:2]) == (
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    # --chat-template gemma: llama.cpp's built-in gemma format
    g = resolve_chat_template("gemma", meta)
    assert apply_chat_template(g, CONV) == (
        "<start_of_turn>user\nYou are helpful.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nHow are you?<end_of_turn>\n"
        "<start_of_turn>model\n")
    assert apply_chat_template(g, CONV[:3], add_generation_prompt=False) == (
        "<start_of_turn>user\nYou are helpful.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n")


def test_template_from_dict_metadata():
    assert template_from_gguf({"tokenizer.chat_template": "x"}) == "x"
    assert template_from_gguf({}) is None
    assert resolve_chat_template(None, {}) == BUILTIN_TEMPLATES["chatml"]
    assert resolve_chat_template("{{ 'custom' }}", {"tokenizer.chat_template": "x"}) == "{{ 'custom' }}"


# ---------------------------------------------------------------------------------------------
# built-ins (expected strings follow llama.cpp's llm_chat_apply_template)


def test_builtin_names():
    for name in ("chatml", "llama2", "llama3", "gemma", "phi3", "mistral-v7", "zephyr"):
        assert name in builtin_template_names()


@pytest.mark.parametrize("name,expected", [
    ("chatml", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
               "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n"
               "<|im_start|>assistant\n"),
    ("llama2", "[INST] You are helpful.\nHi [/INST]Hello!</s>[INST] How are you? [/INST]"),
    ("llama3", "<|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>"
               "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
               "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
               "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>"
               "<|start_header_id|>assistant<|end_header_id|>\n\n"),
    ("phi3", "<|system|>\nYou are helpful.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n"
             "<|user|>\nHow are you?<|end|>\n<|assistant|>\n"),
    ("mistral-v7", "[SYSTEM_PROMPT] You are helpful.[/SYSTEM_PROMPT][INST] Hi[/INST] Hello!</s>"
                   "[INST] How are you?[/INST]"),
    ("zephyr", "<|system|>\nYou are helpful.<|endoftext|>\n<|user|>\nHi<|endoftext|>\n"
               "<|assistant|>\nHello!<|endoftext|>\n<|user|>\nHow are you?<|endoftext|>\n<|assistant|>\n"),
])
def test_builtin_render(name, expected):
    assert apply_chat_template(name, CONV) == expected


# ---------------------------------------------------------------------------------------------
# helpers and errors


def test_typed_content_parts_flattened():
    t = BUILTIN_TEMPLATES["chatml"]
    msgs = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert apply_chat_template(t, msgs, add_generation_prompt=False) == "<|im_start|>user\na\nb<|im_end|>\n"


def test_raise_exception_is_value_error():
    t = "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be user') }}{% endif %}ok"
    assert apply_chat_template(t, [{"role": "user", "content": "x"}]) == "ok"
    with pytest.raises(ValueError, match="first message must be user"):
        apply_chat_template(t, [{"role": "system", "content": "x"}])
    with pytest.raises(ValueError, match="syntax"):
        apply_chat_template("{% for %}", [])


def test_tojson_hf_semantics_and_tools():
    t = "{{ tools | tojson }}|{{ tools | tojson(indent=2) }}|{{ {'b': 1, 'a': '<é>'} | tojson }}"
    tools = [{"name": "f", "description": "ü & <x>"}]
    a, b, c = apply_chat_template(t, [], tools=tools).split("|")
    assert a == json.dumps(tools, ensure_ascii=False)
    assert b == json.dumps(tools, ensure_ascii=False, indent=2)
    assert c == '{"b": 1, "a": "<é>"}'  # no key sorting, no HTML escaping


def test_helpers_and_extra_kwargs():
    t = "{{ bos_token }}{{ strftime_now('%Y') | length }}{% for i in range(5) %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}{{ enable_thinking }}"
    assert apply_chat_template(t, [], bos_token="<s>", enable_thinking=False) == "<s>401False"


def test_trim_and_lstrip_blocks():
    t = "{% for m in messages %}\n  {% if true %}\n{{ m.content }}\n  {% endif %}\n{% endfor %}"
    assert apply_chat_template(t, [{"role": "user", "content": "x"}, {"role": "user", "content": "y"}]) == "x\ny\n"


def test_sandboxed():
    with pytest.raises(ValueError):
        apply_chat_template("{{ messages.__class__.__mro__ }}", [])
