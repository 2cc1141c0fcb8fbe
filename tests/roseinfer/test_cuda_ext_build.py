"""The CUDA C++ toolchain (`roseinfer.cuda_ext`), on every machine: no build where there is no CUDA, an old GPU or
no nvcc, and why; the cache key; the build lock and the staged sources (torch's build step replaced by a recording
fake), so that a build killed midway, a second load or a second checkout neither hangs nor rebuilds. The kernels
themselves: test_cuda_ext.py, test_cuda_attn.py, test_cuda_ext_compile.py."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from roseinfer import cuda_ext


def test_cpu_machine_builds_nothing_and_says_why(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine builds")
    code = (
        "import sys, torch; from roseinfer import cuda_ext\n"
        "assert cuda_ext.load('fused_mlp') is None\n"
        "print(cuda_ext.why_not_built('fused_mlp'))\n"
    )
    env = {"ROSEINFER_CUDA_EXT_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**env, **_pythonpath()}
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "not built: no CUDA"
    assert r.stderr == ""  # no build, so no build line
    assert not (tmp_path / "cache").exists()


def test_a_gpu_older_than_hopper_builds_nothing_and_says_why(tmp_path):
    # griddepcontrol does not assemble below sm_90 (ptxas: "requires .target sm_90 or higher"): on an A100 the
    # fused MLP is not built at all, rather than a failing nvcc run on every process's first call.
    code = (
        "import torch; from roseinfer import cuda_ext; from roseinfer.cuda_ext import fused_mlp\n"
        "torch.cuda.is_available = lambda: True\n"
        "torch.cuda.get_device_capability = lambda device=None: (8, 0)\n"
        "assert fused_mlp.load() is None\n"
        "print(cuda_ext.why_not_built('fused_mlp'))\n"
    )
    env = {
        "ROSEINFER_CUDA_EXT_CACHE": str(tmp_path / "cache"),
        "PATH": "/usr/bin:/bin",
        "CUDA_HOME": str(tmp_path / "no-cuda"),
    }  # a regression finds no nvcc: no build on CI
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**env, **_pythonpath()}
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "not built: needs sm_90, this GPU is sm_80"
    assert not (tmp_path / "cache").exists()


def _pythonpath():
    import os

    return {"PYTHONPATH": os.environ.get("PYTHONPATH", str(Path(__file__).parents[2]))}


def test_cache_key_follows_sources_arch_torch_and_flags(tmp_path, monkeypatch):
    key = cuda_ext.cache_key("fused_mlp", "sm_90a", "2.11.0+cu130")
    assert key.startswith("fused_mlp-sm_90a-torch2.11.0_cu130-")
    assert cuda_ext.cache_key("fused_mlp", "sm_90a", "2.11.0+cu130") == key
    assert cuda_ext.cache_key("fused_mlp", "sm_100a", "2.11.0+cu130") != key
    assert cuda_ext.cache_key("fused_mlp", "sm_90a", "2.12.0+cu130") != key
    assert cuda_ext.cache_key("fused_mlp", "sm_90a", "2.11.0+cu130", ("-DX",)) != key
    # the kernel's bytes, and the headers every kernel may include (common*.cuh)
    assert {p.name for p in cuda_ext.sources("fused_mlp")} == {
        "fused_mlp.cu",
        "common.cuh",
        "common_check.cuh",
        "common_mbarrier.cuh",
    }
    for path in cuda_ext.sources("fused_mlp"):
        (tmp_path / path.name).write_text(path.read_text())
    monkeypatch.setattr(cuda_ext, "SOURCES", tmp_path)
    assert cuda_ext.cache_key("fused_mlp", "sm_90a", "2.11.0+cu130") == key
    (tmp_path / "common.cuh").write_text("// another header\n")
    assert cuda_ext.cache_key("fused_mlp", "sm_90a", "2.11.0+cu130") != key
    (tmp_path / "common.cuh").write_text((Path(cuda_ext.__file__).parent / "common.cuh").read_text())
    assert cuda_ext.cache_key("fused_mlp", "sm_90a", "2.11.0+cu130") == key
    (tmp_path / "fused_mlp.cu").write_text((tmp_path / "fused_mlp.cu").read_text() + "\n// edited\n")
    assert cuda_ext.cache_key("fused_mlp", "sm_90a", "2.11.0+cu130") != key


@pytest.fixture
def fake_build(tmp_path, monkeypatch):
    """cuda_ext.load on a pretended Hopper with nvcc, whose torch build step is a recording fake: the calls'
    keyword arguments, each checked for a stale torch lock at the moment of the build."""
    import torch.utils.cpp_extension as cpp

    calls = []

    def fake_load(**kw):  # builds where no module is built yet, as ninja would
        folder = Path(kw["build_directory"])
        calls.append({**kw, "torch_lock_there": (folder / "lock").exists()})
        built = folder / f"{kw['name']}.so"
        if not built.exists():
            built.write_bytes(b"")
        return object()

    cuda_home = tmp_path / "cuda"
    (cuda_home / "bin").mkdir(parents=True)
    (cuda_home / "bin" / "nvcc").write_text("")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(cpp, "CUDA_HOME", str(cuda_home))
    monkeypatch.delenv("PYTORCH_NVCC", raising=False)
    monkeypatch.setattr(cpp, "load", fake_load)
    monkeypatch.setenv("ROSEINFER_CUDA_EXT_CACHE", str(tmp_path / "cache"))
    cuda_ext.load.cache_clear()
    yield calls
    cuda_ext.load.cache_clear()
    cuda_ext._WHY_NOT.pop("fused_mlp", None)


def _build_folder() -> Path:
    """The folder fake_build's cuda_ext.load("fused_mlp") builds in, made."""
    folder = cuda_ext.build_folder(
        "fused_mlp", "sm_90a", cuda_ext.build_flags("sm_90a"), cuda_ext.nvcc_command()
    )
    folder.mkdir(parents=True)
    return folder


def test_a_build_killed_midway_leaves_no_lock_that_hangs_the_next(fake_build, capsys):
    # torch creates `lock` in the build folder around every load and waits while it exists; a build killed by a
    # signal (a timeout) left it there, and every later process waited forever (an H200 machine, session 36)
    folder = _build_folder()
    with subprocess.Popen(  # holds the build lock, as a build under way does, with torch's lock beside it
        [sys.executable, "-c",
         "import sys; from pathlib import Path; from roseinfer import cuda_ext\n"
         "folder = Path(sys.argv[1])\n"
         "with cuda_ext.build_lock(folder, 'fused_mlp'):\n"
         "    (folder / 'lock').write_text('')\n"
         "    print('held', flush=True)\n"
         "    sys.stdin.read()\n",
         str(folder)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**_pythonpath(), "PATH": "/usr/bin:/bin"},
    ) as holder:  # fmt: skip
        try:
            assert holder.stdout.readline().strip() == "held"
        finally:
            holder.kill()  # SIGKILL: no finally of the holder's runs
            holder.wait(60)
    assert (folder / "lock").exists()
    assert cuda_ext.load("fused_mlp") is not None
    assert [c["torch_lock_there"] for c in fake_build] == [False]
    assert Path(fake_build[0]["build_directory"]) == folder
    assert "built fused_mlp for sm_90a" in capsys.readouterr().err


def test_checkouts_of_the_same_sources_share_one_build(fake_build, tmp_path, monkeypatch, capsys):
    # ninja rebuilds when a source's path changes: the build compiles copies inside its own folder, so two
    # checkouts of the same sources (two worktrees, say) reuse one build instead of rebuilding it for each other
    staged = {}
    for checkout in ("a", "b"):
        src = tmp_path / checkout
        src.mkdir()
        for path in cuda_ext.sources("fused_mlp"):
            (src / path.name).write_bytes(path.read_bytes())
        monkeypatch.setattr(cuda_ext, "SOURCES", src)
        cuda_ext.load.cache_clear()
        assert cuda_ext.load("fused_mlp") is not None
        built_line = "built fused_mlp for sm_90a" in capsys.readouterr().err
        assert built_line == (checkout == "a")  # the second checkout's load found it built
        copies = (Path(fake_build[-1]["build_directory"]) / "src").iterdir()
        staged[checkout] = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in copies}
    a, b = fake_build
    assert a["build_directory"] == b["build_directory"]
    assert a["sources"] == b["sources"] == [str(Path(a["build_directory"]) / "src" / "fused_mlp.cu")]
    # the kernel and every header it includes beside it, left as they were by the second load (ninja goes by mtime)
    assert staged["a"] == staged["b"]
    assert {n: data for n, (data, _) in staged["a"].items()} == {
        p.name: p.read_bytes() for p in cuda_ext.sources("fused_mlp")
    }


def test_a_first_build_says_so_before_it_starts_and_a_built_one_says_nothing(fake_build, capsys):
    # a first build is a minute or two of silence otherwise (a server's start looked hung)
    assert cuda_ext.load("fused_mlp") is not None
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == (
        "roseinfer.cuda_ext: building fused_mlp for sm_90a (a first build takes a minute or two; later processes "
        "reuse it)"
    )
    assert lines[1].startswith("roseinfer.cuda_ext: built fused_mlp for sm_90a in ") and len(lines) == 2
    cuda_ext.load.cache_clear()  # the next process: found built, nothing said
    assert cuda_ext.load("fused_mlp") is not None
    assert capsys.readouterr().err == ""
    assert len(fake_build) == 2


def test_a_second_load_waits_for_the_first_ones_build_and_names_it(fake_build, capsys, monkeypatch):
    # one build a folder at a time: a load while another holds the folder's build lock waits for it, and says
    # who holds it
    import fcntl
    import os
    import threading

    folder = _build_folder()
    monkeypatch.setattr(cuda_ext, "WAIT_NOTICE_S", 0.0)
    holding, release, blocked = threading.Event(), threading.Event(), threading.Event()
    flock = fcntl.flock

    def watched_flock(f, op):
        if op == fcntl.LOCK_EX:  # a blocking wait (the first try is LOCK_NB)
            blocked.set()
        return flock(f, op)

    monkeypatch.setattr(fcntl, "flock", watched_flock)

    def other_build():
        with cuda_ext.build_lock(folder, "fused_mlp"):
            holding.set()
            release.wait(60)

    loaded = []
    other = threading.Thread(target=other_build, daemon=True)
    waiter = threading.Thread(target=lambda: loaded.append(cuda_ext.load("fused_mlp")), daemon=True)
    try:
        other.start()
        assert holding.wait(60)
        waiter.start()
        assert blocked.wait(60)  # the waiter is in its blocking wait for the lock
        assert fake_build == [] and loaded == []  # and has built nothing
    finally:
        release.set()
        other.join(60)
        waiter.join(60)
    assert len(fake_build) == 1 and loaded[0] is not None
    err = capsys.readouterr().err
    assert f"waiting for another build of fused_mlp in {folder} (pid {os.getpid()}: " in err


def test_a_cache_folder_that_cannot_be_made_falls_back_and_says_where(fake_build, tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("ROSEINFER_CUDA_EXT_CACHE", str(blocker / "cache"))
    assert cuda_ext.load("fused_mlp") is None
    assert fake_build == []
    assert cuda_ext.why_not_built("fused_mlp").startswith(f"not built: {blocker / 'cache'}")


def test_a_filesystem_without_flock_still_builds(fake_build, monkeypatch):
    # NFS without its lock daemon answers flock with ENOLCK: the build goes on under torch's own lock alone
    import errno
    import fcntl

    def no_flock(f, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    assert cuda_ext.load("fused_mlp") is not None
    assert len(fake_build) == 1


def test_unknown_source_is_an_error():
    with pytest.raises(FileNotFoundError, match="no CUDA source"):
        cuda_ext.sources("no_such_kernel")
