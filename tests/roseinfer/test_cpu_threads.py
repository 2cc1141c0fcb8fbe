"""The CPU engine chooses its intra-op threads (roseinfer/cpu_threads.py): the option, then OMP_NUM_THREADS, then
1 thread for small models and half the usable cores for wider ones."""

from __future__ import annotations

import pytest
import torch

from roseinfer import LLM, SamplingParams, benchmark_streaming, cpu_threads
from roseinfer.config import EngineConfig


def test_the_option_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert cpu_threads.choose(128, 2) == (2, "cpu_threads option")


def test_omp_num_threads_is_the_users_choice(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert cpu_threads.choose(1600, None)[0] == 3


def test_small_models_run_single_threaded_and_wide_ones_on_half_the_cores(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cpu_threads, "usable_cores", lambda: 16)
    assert cpu_threads.choose(128, None)[0] == 1
    assert cpu_threads.choose(768, None)[0] == 1
    assert cpu_threads.choose(1024, None)[0] == 8
    monkeypatch.setattr(cpu_threads, "usable_cores", lambda: 1)
    assert cpu_threads.choose(1600, None)[0] == 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2"])
def test_a_bad_thread_count_is_refused(bad):
    with pytest.raises(ValueError, match="cpu_threads"):
        EngineConfig(cpu_threads=bad)


@pytest.fixture
def suite_threads():
    """The engine sets torch's threads for its whole process: the suite's own count is put back after the test."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_engine_sets_torch_threads_for_its_process(suite_threads):
    llm = LLM("gpt2-tiny", cpu_threads=2)
    assert torch.get_num_threads() == 2
    assert llm.engine.runner.cpu_threads == (2, "cpu_threads option")


def test_results_do_not_depend_on_the_thread_count(suite_threads):
    params = SamplingParams(max_new_tokens=8, temperature=0.0)
    one = LLM("gpt2-tiny", cpu_threads=1).generate([[1, 2, 3, 4]], params)[0].token_ids
    two = LLM("gpt2-tiny", cpu_threads=2).generate([[1, 2, 3, 4]], params)[0].token_ids
    assert one == two and len(one) == 8


def test_the_benchmark_says_how_many_threads_it_used(capsys, suite_threads):
    argv = ["--hf-model-id", "gpt2-tiny", "--device", "cpu", "--num-requests", "2", "--max-new-tokens", "4"]
    assert (
        benchmark_streaming.main([*argv, "--warmup-runs", "0", "--repeat-runs", "1", "--cpu-threads", "1"])
        == 0
    )
    assert "cpu threads: 1 (cpu_threads option)" in capsys.readouterr().out


def test_the_benchmark_refuses_zero_threads(capsys):
    with pytest.raises(SystemExit) as e:
        benchmark_streaming.main(["--device", "cpu", "--cpu-threads", "0"])
    assert e.value.code == 2 and "--cpu-threads must be >= 1" in capsys.readouterr().err
