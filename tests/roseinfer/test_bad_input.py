"""Bad input: one clear error each, in the API (an exception) and on the command line (one line, exit 2)."""

import json
import subprocess
import sys

import pytest

from roseinfer import LLM, SamplingParams
from tests.helpers import engine_command


@pytest.fixture(scope="module")
def llm():
    return LLM("gpt2-tiny")


def test_empty_prompt(llm):
    with pytest.raises(ValueError, match="prompt is empty"):
        llm.generate([[]], SamplingParams(max_new_tokens=2))


def test_prompt_beyond_positions(llm):
    with pytest.raises(ValueError, match="exceeds the model's 1024 positions"):
        llm.generate([[1] * 1000], SamplingParams(max_new_tokens=100))


def test_max_new_tokens_below_one():
    with pytest.raises(ValueError, match="max_new_tokens must be"):
        SamplingParams(max_new_tokens=0)


@pytest.mark.parametrize("option", ["max_batch_size", "prefill_max_batch_size"])
def test_batch_sizes_below_one(option):
    with pytest.raises(ValueError, match=f"{option} must be"):
        LLM("gpt2-tiny", **{option: 0})


def test_paged_attention_needs_a_power_of_two_block_size():
    with pytest.raises(ValueError, match="power-of-two block_size .*got 96"):
        LLM("gpt2-tiny", paged_attn=True, block_size=96)
    LLM("gpt2-tiny", block_size=96)  # the torch attention takes any block size


def test_unknown_model():
    with pytest.raises(ValueError, match="unknown model 'gpt3'"):
        LLM("gpt3")


def test_unknown_engine_option():
    with pytest.raises(TypeError, match="unknown engine option"):
        LLM("gpt2-tiny", batch=3)


def test_checkpoint_that_is_not_gpt2(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ValueError, match="only GPT-2 checkpoints"):
        LLM(str(tmp_path))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no config.json"):
        LLM(str(empty))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--hf-model-id", "nope"], "unknown model 'nope'"),
        (["--max-batch-size", "0"], "--max-batch-size must be >= 1"),
        (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
        (["--prompt-repeats", "1,x"], "--prompt-repeats must be"),
        (["--max-new-tokens", "2000"], "exceeds the model's 1024 positions"),
        (["--prompt", ""], "prompt is empty"),
        (["--paged-attn", "--block-size", "48"], "needs a power-of-two block_size (--block-size), got 48"),
    ],
)
def test_benchmark_cli_bad_input(args, message):
    cmd = [
        sys.executable,
        "-m",
        "roseinfer.benchmark_streaming",
        "--num-requests",
        "2",
        "--warmup-runs",
        "0",
        "--repeat-runs",
        "1",
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len([line for line in proc.stderr.splitlines() if "error" in line]) == 1


def test_benchmark_runs_and_reports(tmp_path):
    out = tmp_path / "r.json"
    cmd = engine_command("roseinfer.benchmark_scheduler", 4, "--json", str(out))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for label in ("TTFT", "TPOT", "ITL", "throughput decode", "latency"):
        assert label in proc.stdout
    result = json.loads(out.read_text())
    assert result["runs"][0]["completion_tokens"] == 4 * 70


def test_gpu_only_options_fail_clearly_on_cpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError, match="paged_attn .* needs a CUDA device"):
        LLM("gpt2-tiny", paged_attn=True)
    with pytest.raises(ValueError, match="cuda_graph .* needs a CUDA device"):
        LLM("gpt2-tiny", cuda_graph=True)


def test_cuda_graph_refuses_the_earlier_append_designs():
    for switch in ("batched_kv_append", "batched_rollover"):
        with pytest.raises(ValueError, match="cuda_graph .* cannot be combined"):
            LLM("gpt2-tiny", cuda_graph=True, **{switch: False})


def test_ctrl_c_in_a_benchmark_is_one_line_and_exit_130(tmp_path):
    """Ctrl-C (or the one SIGINT a capture forwards) in the middle of the built-in benchmark: a line saying so and
    exit 130, not the engine's 50-line KeyboardInterrupt traceback under the user's `roseprof nsys`."""
    import os
    import signal
    import time

    log = tmp_path / "steps.jsonl"
    env = {
        **os.environ,
        "ROSEINFER_STEP_LOG": str(log),  # opened once the engine is built: the run is under way
        # a run of half a minute at least (70 decode steps of 0.5 s), to be interrupted: at 50 ms a step a run under
        # `pytest -n 2` once finished before the SIGINT, whose sender had waited its turn for a core
        "ROSEINFER_TEST_SLEEP_REGION": "roseinfer.decode_step:500",
    }
    proc = subprocess.Popen(
        engine_command(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    deadline = time.monotonic() + 300  # a bound on a busy machine, not a measurement
    while not log.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert log.exists() and proc.poll() is None, (
        proc.stderr.read() if proc.poll() is not None else "no step log"
    )
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines() == ["benchmark_streaming: interrupted"], err
