"""`roseprof export` keeps every event of the raw trace that a timeline shows: each CPU operator, Python frame,
runtime/driver call and GPU op of a torch.profiler trace, counted against the raw file; and a CUDA-graph-replayed
kernel carries the region it was captured in."""

import collections
import fcntl
import gzip
import json
import os
import subprocess
import sys

import pytest

from tests.helpers import DATA, roseprof

TORCH = [
    DATA / "torch" / "h100-torch2.11-matmul-trace.json",
    DATA / "torch" / "AMD-AGI__TraceLens__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    DATA / "torch" / "pytorch__kineto__worker0.1623143089861.pt.trace.json.gz",
    DATA / "torch" / "facebookresearch__HolisticTraceAnalysis__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
]
GPU_OPS = {"kernel": "kernel", "Kernel": "kernel", "gpu_memcpy": "gpu_memcpy", "Memcpy": "gpu_memcpy",
           "gpu_memset": "gpu_memset", "Memset": "gpu_memset"}  # fmt: skip
CALLS = ("cuda_runtime", "cuda_driver", "Runtime")


def events(path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def import_and_export(tmp_path, path, *extra) -> list[dict]:
    opts = ["--traces-dir", tmp_path / "traces", "--dashboards-dir", tmp_path / "dash"]
    proc = roseprof("import", path, "--name", "x", *extra, *opts)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "export.json"
    proc = roseprof("export", "x", "-o", out, *opts)
    assert proc.returncode == 0, proc.stderr
    return events(out)


@pytest.mark.parametrize("path", TORCH, ids=lambda p: p.name[:40])
def test_torch_export_keeps_every_cpu_op_call_and_gpu_op(tmp_path, path):
    raw = collections.Counter(e.get("cat") for e in events(path) if e.get("ph") == "X")
    out = collections.Counter(e.get("cat") for e in import_and_export(tmp_path, path) if e.get("ph") == "X")
    # Kineto 2021 wrote annotations and operators alike as `Operator`: scopes are regions, the rest CPU ops.
    assert out["cpu_op"] + out["user_annotation"] == raw["cpu_op"] + raw["Operator"] + raw["user_annotation"]
    assert out["cpu_op"] >= raw["cpu_op"]
    assert out["python_function"] == raw["python_function"]
    assert out["cuda_runtime"] + out["cuda_driver"] == sum(raw[c] for c in CALLS)
    for cat in ("kernel", "gpu_memcpy", "gpu_memset"):
        assert out[cat] == sum(n for c, n in raw.items() if GPU_OPS.get(c) == cat), cat
    assert sum(raw[c] for c in ("cpu_op", "Operator", "python_function")) > 0  # the test counts something


def test_graph_replayed_kernels_name_their_capture_region(tmp_path):
    sqlite = DATA / "nsys" / "h100-nsys2025.3-roseinfer-graphs.sqlite"
    log = DATA / "nsys" / "h100-nsys2025.3-roseinfer-graphs.steplog.jsonl"
    kernels = [e for e in import_and_export(tmp_path, sqlite, "--steplog", log) if e.get("cat") == "kernel"]
    captured = collections.Counter(e["args"].get("capture_region") for e in kernels)
    # 7,313 of the 8,382 kernels were replayed from graph nodes captured in the model's parts
    assert sum(n for region, n in captured.items() if region) == 7313
    assert captured["roseinfer.layer.attention"] > 0 and captured["roseinfer.layer.mlp"] > 0
    replayed = [e for e in kernels if e["args"].get("capture_region")]
    assert {e["args"]["region"] for e in replayed} <= {"roseinfer.model.forward"}  # launched by the replay


def test_export_to_a_folder_is_one_line_and_leaves_no_part_file(tmp_path):
    """`-o` names the file to write: a folder given instead is refused in one line naming it (it said
    "Is a directory: FOLDER.part" and left FOLDER.part, the whole export, beside the folder)."""
    opts = ["--traces-dir", tmp_path / "traces", "--dashboards-dir", tmp_path / "dash"]
    proc = roseprof("import", DATA / "nsys" / "cpu-nsys2022.4-nvtx.sqlite", "--name", "x", *opts)
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "out"
    folder.mkdir()
    proc = roseprof("export", "x", "-o", folder, *opts)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("roseprof: error: ") and f"{folder} is a folder" in line and ".part" not in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dash", "out", "traces"]
    assert not list(folder.iterdir())


def test_an_export_that_fails_leaves_no_part_file(tmp_path):
    """The writer's own guard, beneath the verb's: a rename that fails (here onto a folder) removes OUT.part."""
    from roseprof.export.load_chrome import write_load_chrome

    folder = tmp_path / "out.json"
    folder.mkdir()
    with pytest.raises(OSError):
        write_load_chrome([], None, "run", folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_export_to_a_stream_writes_the_trace_there_and_nothing_else(tmp_path):
    """`-o /dev/fd/1` (a pipe to jq or gzip), or a link to one: the trace is written into it as it is, never as
    NAME.part renamed over it (that replaced a link, or /dev/stdout itself, with a file), and stdout holds the
    trace alone (not the path after it)."""
    opts = ["--traces-dir", tmp_path / "traces", "--dashboards-dir", tmp_path / "dash"]
    proc = roseprof("import", DATA / "nsys" / "cpu-nsys2022.4-nvtx.sqlite", "--name", "x", *opts)
    assert proc.returncode == 0, proc.stderr
    proc = roseprof("export", "x", "-o", "/dev/fd/1", *opts)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["traceEvents"]
    link = tmp_path / "null.json"
    link.symlink_to("/dev/null")
    proc = roseprof("export", "x", "-o", link, *opts)
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    assert not list(tmp_path.glob("*.part"))


def test_export_to_stdout_redirected_to_a_file_writes_where_the_shell_left_it(tmp_path):
    """`{ echo HEADER; roseprof export RUN -o /dev/stdout; echo FOOTER; } > f.json`: the trace goes through stdout's
    own descriptor, after the shell's HEADER and before its FOOTER; reopened (O_TRUNC) it wiped HEADER and FOOTER
    overwrote it, and renamed over (as root) it replaced /dev/stdout. A link of the test's own through
    /proc/self/fd/1 stands in for /dev/stdout, and a link to that link for a chain of them."""
    opts = ["--traces-dir", tmp_path / "traces", "--dashboards-dir", tmp_path / "dash"]
    proc = roseprof("import", DATA / "nsys" / "cpu-nsys2022.4-nvtx.sqlite", "--name", "x", *opts)
    assert proc.returncode == 0, proc.stderr
    link = tmp_path / "mystdout"
    link.symlink_to("/proc/self/fd/1")
    chain = tmp_path / "chain"
    chain.symlink_to(link)
    for target in (link, chain, "-"):
        redirected = tmp_path / "f.json"
        with open(redirected, "wb") as out:
            out.write(b"HEADER\n")
            out.flush()
            proc = subprocess.run(
                [sys.executable, "-m", "roseprof", "export", "x", "-o", str(target), *map(str, opts)],
                stdout=out, stderr=subprocess.PIPE, text=True, timeout=600,
            )  # fmt: skip
            out.write(b"\nFOOTER\n")
        assert proc.returncode == 0, proc.stderr
        text = redirected.read_text()
        assert text.startswith("HEADER\n") and text.endswith("\nFOOTER\n"), text[:200]
        body = text[len("HEADER\n") : -len("\nFOOTER\n")]
        assert json.loads(body)["traceEvents"]  # the trace alone between them: no path after it
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1" and chain.is_symlink()
    assert not list(tmp_path.glob("*.part"))


def test_export_to_stdout_piped_into_head_ends_quietly_with_exit_0(tmp_path):
    """`roseprof export RUN -o - | head -c 100`: the export writes stdout's descriptor itself (not through the CLI's
    stdout), and its reader leaving is no failure."""
    opts = ["--traces-dir", tmp_path / "traces", "--dashboards-dir", tmp_path / "dash"]
    proc = roseprof("import", DATA / "nsys" / "cpu-nsys2022.4-nvtx.sqlite", "--name", "x", *opts)
    assert proc.returncode == 0, proc.stderr
    read, write = os.pipe()
    fcntl.fcntl(write, 1031, 4096)  # F_SETPIPE_SZ: less than the trace
    proc = subprocess.Popen(
        [sys.executable, "-m", "roseprof", "export", "x", "-o", "-", *map(str, opts)],
        stdout=write, stderr=subprocess.PIPE,
    )  # fmt: skip
    os.close(write)
    with os.fdopen(read, "rb") as head:
        assert head.read(100).startswith(b"{")
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert err == ""


def test_export_to_a_loop_of_links_is_one_line(tmp_path):
    opts = ["--traces-dir", tmp_path / "traces", "--dashboards-dir", tmp_path / "dash"]
    proc = roseprof("import", DATA / "nsys" / "cpu-nsys2022.4-nvtx.sqlite", "--name", "x", *opts)
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    proc = roseprof("export", "x", "-o", tmp_path / "a", *opts)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "a loop of links" in proc.stderr, (
        proc.stderr
    )
    assert (tmp_path / "a").is_symlink() and not list(tmp_path.glob("*.part"))


def test_export_to_a_link_to_a_file_replaces_the_target_and_keeps_the_link(tmp_path):
    """A link to a regular file: the export is whole or absent in the target (part file beside it, renamed over
    it), the link stays a link, and stdout names the path the user gave."""
    opts = ["--traces-dir", tmp_path / "traces", "--dashboards-dir", tmp_path / "dash"]
    proc = roseprof("import", DATA / "nsys" / "cpu-nsys2022.4-nvtx.sqlite", "--name", "x", *opts)
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "target.json"
    target.write_text("old")
    link = tmp_path / "lnk.json"
    link.symlink_to(target)
    proc = roseprof("export", "x", "-o", link, *opts)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(link)
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert json.loads(target.read_text())["traceEvents"]
    assert not list(tmp_path.rglob("*.part"))
