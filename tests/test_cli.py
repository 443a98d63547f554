"""`pyllm` command line: generate (real core, shipped default model), inspect, bench, error handling."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pyllm.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "def fibonacci(n):"
TIMING = re.compile(r"prompt eval: (\d+) tokens, [\d.]+ tok/s \| generation: (\d+) tokens, [\d.]+ tok/s")
ACCEPT = re.compile(r"draft acceptance = \d\.\d{5} \( *\d+ accepted / *\d+ generated\), mean len = +\d+\.\d\d")


def pyllm(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "pyllm.cli.main", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def plain():
    r = pyllm("generate", "-p", PROMPT, "-n", 24, "--temp", 0, "-c", 1024)
    assert r.returncode == 0, r.stderr
    return r


def test_generate_default_model(plain):
    assert plain.stdout.startswith(PROMPT) and len(plain.stdout) > len(PROMPT) + 5
    m = TIMING.search(plain.stderr)
    assert m, plain.stderr
    assert int(m.group(1)) > 0 and int(m.group(2)) == 24
    assert "draft acceptance" not in plain.stderr
    assert "Traceback" not in plain.stderr


def test_generate_draft_mtp_same_text_and_acceptance_line(plain):
    r = pyllm("generate", "-p", PROMPT, "-n", 24, "--temp", 0, "-c", 1024, "--spec-type", "draft-mtp",
              "--spec-draft-n-max", 3)
    assert r.returncode == 0, r.stderr
    assert r.stdout == plain.stdout  # greedy: speculative decoding never changes the output
    assert TIMING.search(r.stderr) and ACCEPT.search(r.stderr), r.stderr


def test_generate_no_display_prompt_and_sampling_flags(plain):
    r = pyllm("generate", "-p", PROMPT, "-n", 24, "--temp", 0, "-c", 1024, "--no-display-prompt")
    assert r.returncode == 0 and PROMPT + r.stdout == plain.stdout
    r = pyllm("generate", "-p", PROMPT, "-n", 8, "--temp", 0.7, "--top-k", 20, "--top-p", 0.9, "--min-p", 0.05,
              "--seed", 7, "-t", 1, "-c", 512)
    assert r.returncode == 0, r.stderr
    r2 = pyllm("generate", "-p", PROMPT, "-n", 8, "--temp", 0.7, "--top-k", 20, "--top-p", 0.9, "--min-p", 0.05,
               "--seed", 7, "-t", 1, "-c", 512)
    assert r2.stdout == r.stdout  # fixed seed: reproducible
    assert TIMING.search(r.stderr).group(2) == "8"


@pytest.mark.parametrize("args,msg", [
    (["--bogus"], "error: invalid argument: --bogus"),
    (["-n", "abc"], 'error while handling argument "-n"'),
    (["-p"], 'error while handling argument "-p": expected value for argument'),
    (["--spec-type", "bogus"], "unknown speculative decoding type: bogus"),
    (["--spec-type", "draft-eagle3"], "not supported by pyllm"),
])
def test_bad_flags_exit_1(args, msg):
    r = pyllm("generate", *args)
    assert r.returncode == 1 and msg in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""


def test_missing_model(tmp_path):
    r = pyllm("generate", "-m", tmp_path / "nope.gguf", "-p", "hi")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "error: failed to load model" in r.stderr and "nope.gguf" in r.stderr


@pytest.mark.parametrize("content", [b"GGUF\x03\x00\x00\x00junk", b"not a gguf file at all" * 10,
                                     b"GGUF" + b"\xff" * 200], ids=["truncated", "bad-magic", "garbage"])
def test_corrupt_model(tmp_path, content):
    f = tmp_path / "bad.gguf"
    f.write_bytes(content)
    r = pyllm("generate", "-m", f, "-p", "hi")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "error: failed to load model" in r.stderr and "bad.gguf" in r.stderr


def test_inspect_dispatch():
    r = pyllm("inspect", ROOT / "models" / "qwen35-tiny-mtp-Q8_0.gguf", "--no-tensors")
    assert r.returncode == 0 and "GGUF file:" in r.stdout and "qwen35" in r.stdout


def test_bench_dispatch_and_usage(capsys):
    # `pyllm pyllm-bench` is the n-max sweep, `pyllm bench` llama-bench's interface
    assert main(["pyllm-bench", "-m", "/nonexistent/x.gguf", "--spec-draft-n-max", "1"]) == 1
    assert "x.gguf" in capsys.readouterr().err
    assert main(["bench", "-m", "/nonexistent/y.gguf", "-p", "8", "-n", "0"]) == 1
    assert "failed to load model '/nonexistent/y.gguf'" in capsys.readouterr().err
    assert main(["bench", "--spec-draft-n-max", "1"]) == 1  # a pyllm-bench flag is unknown to llama-bench's
    assert "--spec-draft-n-max" in capsys.readouterr().err
    assert main([]) == 1
    out = (main(["--help"]), capsys.readouterr().out)
    assert out[0] == 0 and "generate" in out[1] and "\n  bench " in out[1] and "\n  pyllm-bench " in out[1]
    assert main(["frobnicate"]) == 1 and "unknown command" in capsys.readouterr().err
    assert main(["generate", "--bogus"]) == 1
