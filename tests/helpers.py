"""Running the CLI as a user would: a subprocess with real files."""

import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from roseprof.capture import stall

DATA = Path(__file__).parent / "data"
# Benchmark outputs (roseinfer's --json files, kernel stamps): fixtures of the scripts that read them, not traces.
BENCH_DATA = DATA / "bench"


def trace_folder_files() -> list[Path]:
    """Every file under tests/data but the benchmark outputs: what the tests that take each trace fixture pick from
    (by suffix: oracles, programs and notes sit beside the traces)."""
    return sorted(p for p in DATA.rglob("*") if p.is_file() and BENCH_DATA not in p.parents)


def made_once(tmp_path_factory, name: str, make) -> Path:
    """A folder that `make(folder)` fills, made once a test session. `make test` runs the suite on pytest-xdist's
    workers, each a session of its own: the first worker to ask makes the folder (under the run's shared temporary
    root, beside the workers' own) and the others wait on its lock and read the same one, so a capture that several
    modules read is made once, not once a worker. A make that fails fails its own test, and every later asker at once
    with its error."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:  # one process: its own temporary folder
        root = tmp_path_factory.mktemp(name)
        make(root)
        return root
    import pytest
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp().parent / name  # shared by this run's workers (pytest-N/)
    made, failed = root.with_name(name + ".made"), root.with_name(name + ".failed")
    with FileLock(str(root.with_name(name + ".lock"))):
        # another worker's make failed: its error, at once, rather than the same minutes again
        if failed.exists():
            pytest.fail(f"{name}: made by another worker, which failed: {failed.read_text()}", pytrace=False)
        if not made.exists():
            if root.exists():
                shutil.rmtree(root)
            root.mkdir()
            try:
                make(root)
            except BaseException as e:
                failed.write_text(f"{type(e).__name__}: {e}"[:2000])
                raise
            made.touch()
    return root


def save_checkpoint(path, n_head: int, n_embd: int) -> str:
    """A small GPT-2 checkpoint saved by Hugging Face itself (2 layers, 512 tokens), with weights wide enough that
    greedy argmax has clear winners: GPT-2's 0.02 init gives near-ties that fp32 summation order (another
    device's, or a tensor-parallel all-reduce's) can flip."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=512,
        n_positions=512,
        n_embd=n_embd,
        n_layer=2,
        n_head=n_head,
        bos_token_id=511,
        eos_token_id=511,
    )
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.15)
    model.save_pretrained(path)
    return str(path)


def benchmark_config(*flags: str):
    """The EngineConfig an engine benchmark's command line gives (a CPU run of the tiny model, plus `flags`),
    parsed by the benchmarks' own options, as a user's flags reach the engine."""
    from roseinfer.bench.options import build_parser, engine_config, parse

    parser = build_parser("benchmark_scheduler", "", default_mode="offline")
    return engine_config(parse(parser, ["--device", "cpu", "--hf-model-id", "gpt2-tiny", *flags]))


def engine_command(
    module: str = "roseinfer.benchmark_streaming", requests: int = 4, *extra: str, new_tokens: int = 70
) -> list[str]:
    """A short CPU run of an engine benchmark as a user types it: 70 new tokens a request (past one 64-token KV
    block, so some steps roll over), one measured run, no warm-up. A test whose behaviour does not depend on
    rollovers may ask for fewer `new_tokens` (a run of tensor-parallel ranks on 2 cores is mostly decode)."""
    return [
        sys.executable, "-m", module, "--num-requests", str(requests), "--max-new-tokens", str(new_tokens),
        "--warmup-runs", "0", "--repeat-runs", "1", "--no-stop-on-eos", *extra,
    ]  # fmt: skip


# A line that may be wider than the terminal: a filesystem path (a file to open, a folder to copy), printed whole
# so that it can be copied: alone on its line, absolute or relative from ./, ../ or ~/; or after its label
# (`run folder: traces/...`, as the user named the folder). A URL, or any other word with a slash in it, is not one.
# Every other line of roseprof's fits.
PATH_LINE = re.compile(r"^\s*(((run folder|dashboard|imported from): )(?!\S*://)\S*/\S*|(/|\.{1,2}/|~/)\S*)$")


def assert_fits(out: str, width: int, paths: tuple[str, ...] = ()) -> None:
    """Every line of `out` fits `width` columns, but a path's line (PATH_LINE; or one of `paths`, which may hold
    spaces, alone on its line or after its label)."""

    def a_path(line: str) -> bool:
        words = line.strip()
        return bool(PATH_LINE.match(line)) or any(words == p or words.endswith(f": {p}") for p in paths)

    too_wide = [line for line in out.splitlines() if len(line.rstrip()) > width and not a_path(line)]
    assert not too_wide, too_wide


def unwrapped(text: str) -> str:
    """`text` as one line of words: where to look for a sentence roseprof wrapped at 80 columns (a capture's error,
    its status messages on stderr)."""
    return " ".join(text.split())


# A capture with nsys takes this machine's nsys lock (roseprof/capture/lock.py), so it may wait behind another test's
# capture, and that one may sit in Nsight Systems 2022.4's exit for as long as test_ranks_capture.py allows it (1,800
# s; 19 minutes in session 61's CI, where a test waiting behind it timed out at 600 s and another waited 538 s): such
# a call allows as long. Other calls, and calls that pass their own timeout, keep theirs. (Since session 62 roseprof
# wakes such a program after 20 s asleep, capture/stall.py; the timeout stays for a stall that its rule misses.)
NSYS_CAPTURE_TIMEOUT = 1800


def roseprof(*args, env=None, timeout=None, cwd=None):
    if timeout is None:
        timeout = NSYS_CAPTURE_TIMEOUT if "nsys" in map(str, args) else 600
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "roseprof", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=cwd,
    )


# The one line a capture writes, piped or not, while another capture of the same tool on this machine holds the tool
# (capture/lock.py): a suite that runs beside someone else's capture sees it, and it is not the test's business.
WAITING = "roseprof: waiting for another "
# ... and the line a capture writes when nsys lost its own agent and left nothing, before it starts it again
# (capture/tool.py, drivers/nsys/own_output.py's agent_refused): about one capture in several hundred on a busy box.
# The capture that follows is the one the test is about. (Session 37's clean-clone CI beside two CPU burners: a
# failed capture's stderr held this line, and before it nsys' exception dump, which now stays in nsys' log.)
RESTARTED = "; starting it again ("
# ... and the line a capture writes when it woke a program that nsys 2022.4 left asleep in its exit (capture/stall.py):
# the stall hit 2 of 4 clean-clone CI runs' four-rank captures in session 61.
WOKE = stall.WOKE


def stderr_lines(proc) -> list[str]:
    """The non-blank lines of a finished command's stderr, less roseprof's messages about the machine rather than
    the command: the capture lock's waiting message and a refused tool's restart, each with the indented lines
    below it (capture/process.py's say wraps a message at the terminal's width and puts its details on lines of their own)."""
    messages: list[list[str]] = []
    for line in proc.stderr.splitlines():
        if not line.strip():
            continue
        if messages and line.startswith("  ") and _said(messages[-1][0]):
            messages[-1].append(line)
        else:
            messages.append([line])
    return [line for m in messages if not _about_the_machine(" ".join(s.strip() for s in m)) for line in m]


def _about_the_machine(message: str) -> bool:
    return message.startswith(WAITING) or (
        message.startswith("roseprof: ") and (RESTARTED in message or WOKE in message)
    )


def _said(line: str) -> bool:
    """A status message of roseprof's own (say), which may go on over indented lines and may be about the machine
    (stderr_lines leaves those out, with their lines). An error or a warning is never about the machine: its lines
    (a capture's error goes on over indented lines, cli/capture.py's _failure) stay, each as it is."""
    return line.startswith("roseprof: ") and not line.startswith(("roseprof: error:", "roseprof: warning:"))


def assert_one_line_error(proc, code, text):
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = stderr_lines(proc)
    assert len(lines) == 1, proc.stderr
    assert text in lines[0], lines[0]


def run_cli(*args, env=None):
    """`roseprof ARGS` in this process (fast; for the many-case suites): (exit code, stdout, stderr).

    Goes through `roseprof.cli.main`, the same error handling as the console script. An exception escaping
    it (a traceback for a user) is re-raised, so the calling test fails on it."""
    import contextlib
    import io

    from roseprof.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved_argv, saved_env = sys.argv, dict(os.environ)
    sys.argv = ["roseprof", *map(str, args)]
    os.environ.update(env or {})
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)
    return code, out.getvalue(), err.getvalue()


def one_line_error(code, out, err, expected_code=2, naming=None):
    """An in-process result is one error line on stderr (naming `naming` when given) and the expected code."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == expected_code, (code, out[-2000:], err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("roseprof: error: "), err
    if naming is not None:
        assert str(naming) in lines[0], lines[0]
    return lines[0]


# The folder where `packed` unpacks a fixture kept as `X.xz`, one per test process (tests/conftest.py makes it)
UNPACKED_DIR = "TESTS_UNPACKED_DIR"


def packed(path) -> str:
    """A fixture file of tests/data as a test reads it: the file itself, or where only `PATH.xz` is kept (a large
    export, compressed so that the tree fits what travels to the GPU machine), its copy unpacked once a process into
    the test session's temporary folder."""
    return str(path) if Path(path).exists() else _unpacked_once(str(path))


@functools.cache
def _unpacked_once(path: str) -> str:
    return unpacked(path + ".xz", os.environ[UNPACKED_DIR])


def unpacked(xz_path, folder) -> str:
    """A fixture kept xz-compressed in tests/data (`X.sqlite.xz`) unpacked into `folder` as `X.sqlite`, with its
    step logs (`X.steplog*.jsonl`) beside it: the path of the unpacked file."""
    import lzma
    import shutil
    from pathlib import Path

    xz_path, folder = Path(xz_path), Path(folder)
    out = folder / xz_path.name.removesuffix(".xz")
    with lzma.open(xz_path) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    base = out.name.removesuffix(".sqlite")
    for log in xz_path.parent.glob(base + ".steplog*.jsonl"):
        shutil.copy(log, folder / log.name)
    return str(out)


def exact_split(c: int, device, seed: int = 0):
    """(parts, whole): a float32 split sum [SPLIT_ROWS, c] (`roseinfer.kernels.split_sum`) and the [1, c] it stands for,
    every value a multiple of 2^-10 below 2^6 in size, so that the rows add up to the same float in any order and
    a reader's sum must equal `whole` exactly."""
    import torch

    from roseinfer.kernels.split_sum import SPLIT_ROWS

    g = torch.Generator().manual_seed(seed)
    parts = (torch.randn(SPLIT_ROWS, c, generator=g) * 128).round().clamp(-4096, 4096) / 1024  # [rows, c]
    return parts.to(device), parts.sum(0, keepdim=True).to(device)  # exact: integers times 2^-10
