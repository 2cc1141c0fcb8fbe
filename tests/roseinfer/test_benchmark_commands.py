"""The benchmark command lines people publish run as given: on CPU at small sizes (in-process), and on a GPU as
published (subprocesses, marked gpu)."""

import json
import os
import shlex
import subprocess
import sys

import pytest

from roseinfer import benchmark_scheduler, benchmark_streaming

# As published (issue 15), environment prefix included.
PUBLISHED = [
    'python -m roseinfer.benchmark_scheduler --hf-model-id gpt2 --device cuda --prompt "Hello" --num-requests 64 '
    "--max-new-tokens 512 --mode online --max-batch-size 64 --no-stop-on-eos --no-prefix-cache --pretok "
    "--warmup-runs 1 --repeat-runs 3 --paged-attn",
    'python -m roseinfer.benchmark_scheduler --hf-model-id gpt2 --device cuda --prompt "Hello" --num-requests 256 '
    "--max-new-tokens 64 --mode online --max-batch-size 256 --no-stop-on-eos --no-prefix-cache --pretok "
    "--warmup-runs 1 --repeat-runs 3 --paged-attn --cuda-graph",
    "HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 python -m roseinfer.benchmark_streaming --hf-model-id gpt2 "
    "--device cuda --prompt 'Hello' --prompt-repeats '1,4' --pretok --tokenize-workers 0 --num-requests 128 "
    "--max-new-tokens 128 --submit-interval-ms 0 --max-batch-size 128 --prefill-max-batch-size 128 "
    "--prefill-admission-policy fifo --paged-attn --no-prefix-cache --no-stop-on-eos --warmup-runs 1 --repeat-runs 3",
    "HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 python -m roseinfer.benchmark_streaming --hf-model-id gpt2 "
    "--device cuda --prompt 'Hello' --pretok --tokenize-workers 0 --num-requests 256 --max-new-tokens 256 "
    "--submit-interval-ms 0 --max-batch-size 16 --prefill-max-batch-size 16 --prefill-admission-policy fifo "
    "--paged-attn --no-prefix-cache --no-stop-on-eos --warmup-runs 1 --repeat-runs 1",
]
MAINS = {
    "roseinfer.benchmark_scheduler": benchmark_scheduler.main,
    "roseinfer.benchmark_streaming": benchmark_streaming.main,
}
# CPU-sized values; --paged-attn and --cuda-graph need CUDA (refused on CPU, see below) and are left out.
CPU_VALUES = {
    "--device": "cpu",
    "--hf-model-id": "gpt2-tiny",
    "--num-requests": "4",
    "--max-new-tokens": "8",
    "--max-batch-size": "4",
    "--prefill-max-batch-size": "4",
    "--warmup-runs": "1",
    "--repeat-runs": "1",
}
GPU_ONLY_FLAGS = ("--paged-attn", "--cuda-graph")


def split(command: str) -> tuple[dict[str, str], str, list[str]]:
    """(environment prefix, module, argv) of a published command line."""
    words = shlex.split(command)
    env = {}
    while "=" in words[0]:
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    assert words[:2] == ["python", "-m"], words
    return env, words[2], words[3:]


def cpu_sized(argv: list[str]) -> list[str]:
    out = []
    it = iter(argv)
    for word in it:
        if word in GPU_ONLY_FLAGS:
            continue
        out.append(word)
        if word in CPU_VALUES:
            next(it)
            out.append(CPU_VALUES[word])
    return out


@pytest.mark.parametrize("command", PUBLISHED, ids=["sched-a", "sched-b-graph", "stream-c", "stream-batch16"])
def test_published_command_runs_on_cpu(command, monkeypatch, capsys):
    env, module, argv = split(command)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert MAINS[module](cpu_sized(argv)) == 0
    out = capsys.readouterr().out
    assert "model=gpt2-tiny device=cpu" in out and "TTFT" in out and "throughput decode" in out


def test_tokenize_workers_zero_tokenises_inline(tmp_path):
    # 0 tokenises in the calling thread (issue 15), 2 through a pool: the same prompts come out either way.
    base = ["--device", "cpu", "--num-requests", "3", "--max-new-tokens", "2", "--warmup-runs", "0"]
    base += ["--repeat-runs", "1", "--prompt-repeats", "1,4"]
    prompt_tokens = []
    for workers in ("0", "2"):
        path = tmp_path / f"w{workers}.json"
        assert benchmark_streaming.main([*base, "--tokenize-workers", workers, "--json", str(path)]) == 0
        prompt_tokens.append(json.loads(path.read_text())["runs"][0]["prompt_tokens"])
    assert prompt_tokens[0] == prompt_tokens[1] > 0


@pytest.mark.parametrize("flag", GPU_ONLY_FLAGS)
def test_gpu_only_flags_are_refused_on_cpu_with_a_clear_message(flag):
    proc = subprocess.run(
        [sys.executable, "-m", "roseinfer.benchmark_scheduler", "--device", "cpu", "--num-requests", "1",
         "--max-new-tokens", "1", "--warmup-runs", "0", "--repeat-runs", "1", flag],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert f"({flag}) needs a CUDA device" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_negative_tokenize_workers_is_refused():
    with pytest.raises(SystemExit) as e:
        benchmark_streaming.main(["--device", "cpu", "--tokenize-workers", "-1"])
    assert e.value.code == 2


@pytest.mark.gpu
@pytest.mark.parametrize("command", PUBLISHED, ids=["sched-a", "sched-b-graph", "stream-c", "stream-batch16"])
def test_published_command_runs_on_gpu(command):
    env, module, argv = split(command)
    proc = subprocess.run(
        [sys.executable, "-m", module, *argv],
        capture_output=True, text=True, timeout=900, env={**os.environ, **env},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "TTFT" in proc.stdout
