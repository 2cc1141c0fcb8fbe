"""The Python API's edge cases (issue 17): a checkpoint path that does not exist, an empty prompt list."""

import pytest

from roseinfer import BUILTIN_MODELS, LLM, SamplingParams


@pytest.mark.parametrize(
    "path", ["./no-such-ckpt", "ckpts/gpt2-missing", "~/no-such-ckpt-xyz", "/no/such/folder"]
)
def test_missing_checkpoint_folder_says_no_such_folder(path):
    with pytest.raises(ValueError, match=f"^no such folder: {path}"):
        LLM(path)


def test_a_file_is_not_a_checkpoint_folder(tmp_path):
    f = tmp_path / "model.bin"
    f.write_bytes(b"")
    with pytest.raises(ValueError, match="not a folder"):
        LLM(str(f))


def test_bare_unknown_name_lists_the_builtin_names():
    with pytest.raises(ValueError, match="unknown model 'gpt3'") as e:
        LLM("gpt3")
    assert all(name in str(e.value) for name in BUILTIN_MODELS)


def test_benchmark_cli_says_no_such_folder(capsys):
    from roseinfer import benchmark_streaming

    assert benchmark_streaming.main(["--device", "cpu", "--hf-model-id", "./no-such-ckpt"]) == 2
    assert "no such folder: ./no-such-ckpt" in capsys.readouterr().err


def test_generate_of_no_prompts_returns_an_empty_list():
    llm = LLM("gpt2-tiny")
    assert llm.generate([]) == []
    assert llm.generate([], SamplingParams(max_new_tokens=2)) == []
    assert not llm.engine.has_unfinished()
    # The engine still serves the next call.
    (out,) = llm.generate([[1, 2, 3]], SamplingParams(max_new_tokens=2, ignore_eos=True))
    assert len(out.token_ids) == 2
