import subprocess
import sys

import pytest

from pyllm.args import ArgError, Params, check_supported, noop_notice, parse_args, SPEC_TYPES


def P(argv, tool="server", env=None):
    return parse_args(argv, tool, env=env or {})


def test_defaults():
    p = P([])
    assert p.n_parallel == 4 and p.kv_unified  # -np auto
    assert p.port == 8080 and p.hostname == "127.0.0.1"
    assert p.spec_types == ["none"] and p.spec_draft_n_max == 3 and p.spec_draft_n_min == 0
    assert p.spec_draft_p_min == 0.0 and p.spec_draft_p_split == pytest.approx(0.10)
    assert p.spec_draft_type_k == "f16" and p.use_jinja and p.endpoint_slots and not p.endpoint_metrics
    assert P([], "generate").n_parallel == 1


def test_aliases():
    p = P(["-m", "a.gguf", "-c", "512", "-n", "7", "-t", "3", "-tb", "4", "-b", "32", "-ub", "16", "--parallel", "2",
           "--host", "0.0.0.0", "--port", "9", "-a", "b,a", "--temp", "0.5", "--top-k", "5", "--top-p", "0.5",
           "--min-p", "0.1", "--typical", "0.9", "--repeat-penalty", "1.1", "--repeat-last-n", "32",
           "--presence-penalty", "0.2", "--frequency-penalty", "0.3", "-s", "42", "--ignore-eos", "--metrics",
           "--no-slots", "--props", "--no-warmup", "-lv", "4", "-ctk", "q8_0", "-ctv", "q8_0", "-nocb", "-to", "5",
           "--threads-http", "3", "--no-jinja", "--api-key", "k1,k2"])
    assert (p.model, p.n_ctx, p.n_predict, p.n_threads, p.n_threads_batch, p.n_batch, p.n_ubatch, p.n_parallel) == \
        ("a.gguf", 512, 7, 3, 4, 32, 16, 2)
    assert p.hostname == "0.0.0.0" and p.port == 9 and p.model_alias == ["b", "a"]
    assert p.temperature == 0.5 and p.top_k == 5 and p.seed == 42 and p.ignore_eos
    assert p.endpoint_metrics and not p.endpoint_slots and p.endpoint_props and not p.warmup
    assert p.verbosity == 4 and p.cache_type_k == "q8_0" and not p.cont_batching and p.timeout == 5
    assert not p.use_jinja and p.api_keys == ["k1", "k2"]


def test_repack_flag():
    """--repack / -nr / --no-repack / LLAMA_ARG_REPACK reach Params.repack (the load's 16-row groups), on by default."""
    assert P(["-m", "a.gguf"]).repack
    assert not P(["-m", "a.gguf", "-nr"]).repack and not P(["-m", "a.gguf", "--no-repack"]).repack
    assert P(["-m", "a.gguf", "--no-repack", "--repack"]).repack
    assert not P(["-m", "a.gguf"], env={"LLAMA_ARG_REPACK": "0"}).repack


def test_underscore_and_last_wins():
    p = P(["--spec_draft_n_max", "5", "-c", "1", "-c", "2"])
    assert p.spec_draft_n_max == 5 and p.n_ctx == 2


def test_env_and_flag_precedence():
    env = {"LLAMA_ARG_CTX_SIZE": "1024", "LLAMA_ARG_PORT": "1234", "LLAMA_ARG_ENDPOINT_METRICS": "1",
           "LLAMA_ARG_JINJA": "false", "LLAMA_API_KEY": "envkey"}
    p = P(["--port", "99"], env=env)
    assert p.n_ctx == 1024 and p.port == 99 and p.endpoint_metrics and not p.use_jinja and p.api_keys == ["envkey"]


def test_spec_type():
    assert P(["--spec-type", "draft-mtp"]).spec_types == ["none", "draft-mtp"]
    assert P(["--spec-type", "draft-mtp"]).spec_type == "draft-mtp"
    assert P(["--spec-type", "draft-mtp,none"]).spec_types == ["none"]
    assert P(["--spec-type", "draft-mtp", "--spec-type", "ngram-mod"]).spec_types == ["none", "draft-mtp", "ngram-mod"]
    assert P(["--spec-type", "draft-mtp"], env={"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}).spec_types == ["none", "draft-mtp"]
    for t in SPEC_TYPES:
        P(["--spec-type", t])
    with pytest.raises(ArgError):
        P(["--spec-type", "bogus"])
    p = P(["--spec-type", "draft-eagle3"])
    with pytest.raises(ArgError, match="speculative type draft-eagle3 is not supported by pyllm"):
        check_supported(p)
    check_supported(P(["--spec-type", "ngram-mod,draft-mtp"]))
    check_supported(P(["--spec-type", "draft-mtp"]))
    p = P(["--spec-type", "draft-mtp", "--spec-draft-n-max", "0"])
    assert not p.speculative
    p = P(["--spec-draft-p-min", "0.5", "--draft-p-split", "0.2", "-ctkd", "q8_0", "--cache-type-v-draft", "q8_0",
           "--spec-draft-n-min", "1"])
    assert p.spec_draft_p_min == 0.5 and p.spec_draft_p_split == 0.2 and p.spec_draft_type_k == "q8_0"
    assert p.spec_draft_type_v == "q8_0" and p.spec_draft_n_min == 1


def test_synth():
    assert P(["--spec-synth-len", "2.5"]).spec_synth_len == 2.5
    assert P(["--spec-synth-rates", "0.9,0.5,0.1"]).spec_synth_rates == [0.9, 0.5, 0.1]
    with pytest.raises(ArgError, match="mutually exclusive"):
        P(["--spec-synth-len", "2", "--spec-synth-rates", "0.9,0.5,0.1"])
    with pytest.raises(ArgError, match=r"within \[0, 1\]"):
        P(["--spec-synth-rates", "1.5,0.5,0.1"])
    with pytest.raises(ArgError):
        P(["--spec-synth-rates", "x"])
    # the core's one check (csrc/speculative/spec_params.cpp), before any model loads
    with pytest.raises(ArgError, match=r"^error: synthetic acceptance length must be finite and within \[1, 4\]"):
        P(["--spec-synth-len", "4.5"])
    with pytest.raises(ArgError, match="monotonically non-increasing"):
        P(["--spec-synth-rates", "0.5,0.6,0.1"])
    with pytest.raises(ArgError, match="must contain 2 values, got 3"):
        P(["--spec-draft-n-max", "2", "--spec-synth-rates", "0.9,0.5,0.1"])
    with pytest.raises(ArgError, match=r"^error: --spec-draft-n-max must be >= 0, got -1"):
        P(["--spec-draft-n-max", "-1"])
    with pytest.raises(ArgError, match=r"--spec-draft-p-min must be within \[0, 1\]"):
        P(["--spec-draft-p-min", "1.5"])


@pytest.mark.parametrize("argv", [["--draft", "3"], ["--draft-n", "3"], ["--draft-max", "3"], ["--draft-min", "1"],
                                  ["--draft-n-min", "1"], ["--spec-ngram-size-n", "1"], ["--spec-ngram-size-m", "1"],
                                  ["--spec-ngram-min-hits", "1"]])
def test_removed(argv):
    with pytest.raises(ArgError, match="the argument has been removed"):
        P(argv)


def test_removed_env():
    with pytest.raises(ArgError, match="removed"):
        P([], env={"LLAMA_ARG_DRAFT_MAX": "3"})


def test_gpu_noops():
    p = P(["-ngl", "99", "-fa", "on", "-fit", "off", "-fitt", "1024", "-dev", "none", "-sm", "none", "-mg", "0",
           "-ts", "1,1", "-ot", "x=CPU", "-cmoe", "-ncmoe", "2", "--spec-draft-ngl", "9"])
    msg = noop_notice(p)
    assert msg and "--n-gpu-layers" in msg and "--fit" in msg
    assert noop_notice(P([])) is None


def test_unknown_and_missing_value():
    with pytest.raises(ArgError, match="error: invalid argument: --foo"):
        P(["--foo"])
    with pytest.raises(ArgError, match="expected value"):
        P(["--port"])
    with pytest.raises(ArgError):
        P(["--port", "abc"])


def test_cli_exit_codes():
    r = subprocess.run([sys.executable, "-m", "pyllm.server", "--foo"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "error: invalid argument: --foo" in r.stderr
    r = subprocess.run([sys.executable, "-m", "pyllm.server", "-h"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--spec-type" in r.stdout


def test_tools_differ():
    P(["-p", "hi", "-f", __file__], "generate")
    with pytest.raises(ArgError):
        P(["-p", "hi"], "server")
    assert P(["-r", "3"], "bench").n_repetitions == 3


def test_prompt_cache_flags():
    p = P([])
    assert p.n_ctx_checkpoints == 32 and p.checkpoint_min_step == 8192 and p.cache_ram_mib == 8192 and p.cache_idle_slots
    p = P(["-ctxcp", "4", "-cms", "256", "-cram", "-1", "--no-cache-idle-slots"])
    assert (p.n_ctx_checkpoints, p.checkpoint_min_step, p.cache_ram_mib, p.cache_idle_slots) == (4, 256, -1, False)
    p = P([], env={"LLAMA_ARG_CTX_CHECKPOINTS": "2", "LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT": "0"})
    assert (p.n_ctx_checkpoints, p.checkpoint_min_step) == (2, 0)
    assert P(["--swa-checkpoints", "3"], "generate").n_ctx_checkpoints == 3
    with pytest.raises(ArgError, match="non-negative"):
        P(["--checkpoint-min-step", "-1"])
    assert noop_notice(P(["-ctxcp", "4", "--cache-idle-slots"])) is None  # implemented: no "ignoring" notice
    # quantized KV caches: f16, bf16, q8_0, q4_0 are implemented; other types are reported, never silently accepted
    p = P(["-ctk", "q8_0", "-ctv", "q4_0", "-ctkd", "bf16", "-ctvd", "q8_0"])
    assert p.unimplemented == [] and (p.cache_type_k, p.cache_type_v) == ("q8_0", "q4_0")
    p = P(["-ctk", "q5_1", "-ctvd", "iq4_nl"])
    assert p.unimplemented == ["--cache-type-k", "--spec-draft-type-v"] and "--cache-type-k" in noop_notice(p)


def test_spec_issue10_flags():
    """--spec-draft-n-max auto / auto:CAP (the adaptive draft length), --spec-draft-head-type, --spec-draft-vocab."""
    p = P(["--spec-type", "draft-mtp", "--spec-draft-n-max", "auto"])
    assert (p.spec_draft_n_max, p.spec_draft_n_max_auto, p.speculative) == (7, True, True)
    p = P(["--spec-draft-n-max", "AUTO:4"])
    assert (p.spec_draft_n_max, p.spec_draft_n_max_auto) == (4, True)
    p = P(["--spec-draft-n-max", "auto", "--spec-draft-n-max", "2"])  # the last one wins, as for any flag
    assert (p.spec_draft_n_max, p.spec_draft_n_max_auto) == (2, False)
    assert P([], env={"LLAMA_ARG_SPEC_DRAFT_N_MAX": "auto"}).spec_draft_n_max_auto
    with pytest.raises(ArgError, match="auto:CAP needs an integer CAP"):
        P(["--spec-draft-n-max", "auto:x"])
    with pytest.raises(ArgError, match="--spec-draft-n-max auto needs a cap >= 1, got 0"):
        P(["--spec-draft-n-max", "auto:0"])
    with pytest.raises(ArgError):
        P(["--spec-draft-n-max", "often"])
    p = P(["--spec-draft-head-type", "q4_0", "--spec-draft-vocab", "32768"])
    assert (p.spec_draft_head_type, p.spec_draft_vocab) == ("q4_0", 32768)
    with pytest.raises(ArgError, match="--spec-draft-head-type: unknown type 'q5_9'"):
        P(["--spec-draft-head-type", "q5_9"])
    with pytest.raises(ArgError, match="--spec-draft-vocab must be >= 0, got -2"):
        P(["--spec-draft-vocab", "-2"])
    # the synthetic rates of an auto setting are for its cap
    with pytest.raises(ArgError, match="must contain 7 values, got 3"):
        P(["--spec-draft-n-max", "auto", "--spec-synth-rates", "0.9,0.5,0.1"])
    # --spec-accept (speculative sampling, opt-in): match (default) | rejection
    assert P([]).spec_accept == "match"
    assert P(["--spec-type", "draft-mtp", "--spec-accept", "Rejection"]).spec_accept == "rejection"
    assert P([], env={"PYLLM_ARG_SPEC_ACCEPT": "rejection"}).spec_accept == "rejection"
    with pytest.raises(ArgError, match="--spec-accept must be 'match' or 'rejection', got 'sometimes'"):
        P(["--spec-accept", "sometimes"])


def test_draft_head_flags_without_speculation_warn():
    from pyllm.args import noop_notice
    assert "ignoring --spec-draft-head-type, --spec-draft-vocab" in noop_notice(
        P(["--spec-draft-head-type", "q4_0", "--spec-draft-vocab", "100"]))
    assert noop_notice(P(["--spec-type", "draft-mtp", "--spec-draft-head-type", "q4_0"])) is None
    assert "ignoring --spec-accept" in noop_notice(P(["--spec-accept", "rejection"]))
    assert noop_notice(P(["--spec-type", "draft-mtp", "--spec-accept", "rejection"])) is None
