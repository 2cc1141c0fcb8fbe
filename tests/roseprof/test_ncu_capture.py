"""`roseprof ncu` as a user runs it, on CPU: a test double of the ncu binary (tests/roseprof/fake_ncu/ncu) prints
Nsight Compute's real messages and, for --import, real CSV exports; what roseprof parses is always a real file."""

import json
import sys
from pathlib import Path

import pytest

from tests.helpers import assert_one_line_error, roseprof

HERE = Path(__file__).parent
FAKE = HERE / "fake_ncu" / "ncu"
DATA = HERE.parent / "data"
PROGRAM = [sys.executable, "-c", "import os; print('program ran, NVTX', os.environ.get('ROSEINFER_NVTX'))"]


def env(tmp_path, mode="ok", **extra):
    return {
        "NCU": str(FAKE),
        "FAKE_NCU_MODE": mode,
        "FAKE_NCU_ARGS": str(tmp_path / "args.jsonl"),
        "FAKE_NCU_RAW": str(DATA / "ncu" / "tn-raw.csv"),
        "FAKE_NCU_DETAILS": str(DATA / "ncu" / "tn-details.csv"),
        **extra,
    }


def dirs(tmp_path):
    return ["--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d"]


def runs(tmp_path):
    root = tmp_path / "t"
    return sorted(p for p in root.iterdir() if not p.name.startswith(".")) if root.is_dir() else []


def ncu_argv(tmp_path):
    """The argv of the profiling call (not --version or --import)."""
    calls = [json.loads(line) for line in (tmp_path / "args.jsonl").read_text().splitlines()]
    return next(c for c in calls if c not in (["--version"], ["--help"]) and "--import" not in c)


def test_capture_reads_the_report_and_leaves_clocks_alone(tmp_path):
    proc = roseprof(
        "ncu",
        *dirs(tmp_path),
        "--name",
        "kv",
        "--kernel",
        "vectorized|reduce",
        "--nvtx-include",
        "roseinfer.kv.append_token/",
        "--",
        *PROGRAM,
        env=env(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    assert "program ran, NVTX 1" in proc.stderr  # the engine's NVTX switch is on for the profiled program
    argv = ncu_argv(tmp_path)
    joined = " ".join(argv)
    assert "--clock-control none" in joined and "--nvtx " in joined and "--target-processes all" in joined
    assert "--nvtx-include roseinfer.kv.append_token/" in joined
    assert "--kernel-name regex:vectorized|reduce" in joined
    assert "--launch-count 100" in joined and "--set full" in joined
    (run,) = runs(tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["tool"]["name"] == "ncu"
    assert manifest["tool"]["version"] == "2025.3.1.0" and manifest["tool"]["schema"] == "raw+details"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["ncu"]["rules"] and summary["ncu"]["devices"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert {k["region"] for k in summary["kernels"]} == {"roseinfer.kv.append_token"}
    assert (run / "raw" / "report.ncu-rep").is_file() and (run / "raw" / "ncu.log").is_file()
    assert (tmp_path / "d" / f"{run.name}.html").is_file()


def test_metrics_always_include_the_duration_and_no_default_set(tmp_path):
    proc = roseprof(
        "ncu", *dirs(tmp_path), "--metrics", "dram__bytes_read.sum", "--", *PROGRAM, env=env(tmp_path)
    )
    assert proc.returncode == 0, proc.stderr
    argv = ncu_argv(tmp_path)
    assert argv[argv.index("--metrics") + 1] == "dram__bytes_read.sum,gpu__time_duration.sum"
    assert "--set" not in argv


def test_ncu_missing_is_one_line(tmp_path):
    proc = roseprof("ncu", *dirs(tmp_path), "--", *PROGRAM, env={"NCU": str(tmp_path / "no-ncu")})
    assert_one_line_error(proc, 2, "ncu not found")
    assert runs(tmp_path) == []


def test_no_kernel_matched(tmp_path):
    proc = roseprof(
        "ncu", *dirs(tmp_path), "--kernel", "nothing", "--", *PROGRAM, env=env(tmp_path, "nomatch")
    )
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("roseprof: error: no kernel matched the filter (--kernel-name regex:nothing)")
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "t").exists()  # no run, no half-written folder, no traces folder it made


def test_no_kernel_matched_names_the_kernels_ncu_listed(tmp_path):
    proc = roseprof(
        "ncu", *dirs(tmp_path), "--kernel", "x", "--", *PROGRAM, env=env(tmp_path, "nomatch_listed")
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .endswith("kernels that ran: paged_decode_kernel, kv_append_kernel")
    )


def test_counter_permission_refused_says_what_to_do(tmp_path):
    proc = roseprof("ncu", *dirs(tmp_path), "--", *PROGRAM, env=env(tmp_path, "perm"))
    assert proc.returncode == 3
    last = proc.stderr.strip().splitlines()[-1]
    assert (
        "ERR_NVGPUCTRPERM" in last and "NVreg_RestrictProfilingToAdminUsers=0" in last and "SYS_ADMIN" in last
    )
    (run,) = runs(tmp_path)
    assert json.loads((run / "manifest.json").read_text())["status"] == "failed"


def test_program_failure_keeps_the_run(tmp_path):
    failing = [sys.executable, "-c", "import sys; sys.exit(3)"]
    proc = roseprof("ncu", *dirs(tmp_path), "--", *failing, env=env(tmp_path))
    assert proc.returncode == 1, proc.stderr
    (run,) = runs(tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["command_exit_code"] == 3


def top_kernels(summary: dict, n: int) -> tuple[list[str], dict[str, int], dict[str, int]]:
    """(the run's n kernels of most GPU time, each kernel's time, its launches), over the regions it ran in: what
    --from ranks by."""
    totals: dict[str, int] = {}
    counts: dict[str, int] = {}
    for k in summary["kernels"]:
        totals[k["name"]] = totals.get(k["name"], 0) + k["total_ns"]
        counts[k["name"]] = counts.get(k["name"], 0) + k["count"]
    return sorted(totals, key=lambda name: -totals[name])[:n], totals, counts


@pytest.fixture
def nsys_run(tmp_path):
    sqlite = DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.sqlite"
    proc = roseprof("import", sqlite, "--name", "before", *dirs(tmp_path))
    assert proc.returncode == 0, proc.stderr
    (run,) = runs(tmp_path)
    return run


def test_from_profiles_the_top_kernels_of_an_nsys_run(tmp_path, nsys_run):
    summary = json.loads((nsys_run / "summary.json").read_text())
    proc = roseprof(
        "ncu", *dirs(tmp_path), "--from", "before", "--top", "3", "--", *PROGRAM, env=env(tmp_path)
    )
    assert proc.returncode == 0, proc.stderr
    argv = ncu_argv(tmp_path)
    regex = argv[argv.index("--kernel-name") + 1]
    assert argv[argv.index("--kernel-name-base") + 1] == "demangled"
    top, totals, _ = top_kernels(summary, 3)
    import re

    pattern = re.compile(regex.removeprefix("regex:"))
    assert all(pattern.fullmatch(name) for name in top)
    assert not any(pattern.fullmatch(name) for name in set(totals) - set(top))
    # 5 launches of each of their launch configurations (the fake stands for ncu 2025.3, which counts so)
    assert argv[argv.index("--launch-count") + 1] == "5" and "per-launch-config" in argv
    new = [r for r in runs(tmp_path) if r != nsys_run]
    assert json.loads((new[0] / "manifest.json").read_text())["ncu"]["from_run"] == nsys_run.name


def test_from_an_imported_run_needs_a_command(tmp_path, nsys_run):
    proc = roseprof("ncu", *dirs(tmp_path), "--from", "before", env=env(tmp_path))
    assert_one_line_error(proc, 2, "has no command (it was imported): give the command after --")


def test_import_of_an_ncu_rep_goes_through_ncu(tmp_path):
    rep = tmp_path / "kv.ncu-rep"
    rep.write_bytes(
        b"NVR\x00"
    )  # what the test double wrote as its report: only its --import output is parsed
    proc = roseprof("import", rep, *dirs(tmp_path), env=env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    (run,) = runs(tmp_path)
    assert json.loads((run / "manifest.json").read_text())["tool"]["schema"] == "raw+details"
    proc = roseprof("import", rep, *dirs(tmp_path), env=env(tmp_path, "badreport"))
    assert_one_line_error(proc, 2, f"{rep}")


def test_ncu_runs_diff_per_kernel_and_metric(tmp_path):
    for path, name in ((DATA / "ncu" / "tn-details.csv", "a"), (DATA / "ncu" / "tn-raw.csv", "b")):
        assert roseprof("import", path, "--name", name, *dirs(tmp_path)).returncode == 0
    proc = roseprof("diff", "a", "b", "--json", *dirs(tmp_path))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    names = {m["name"] for m in result["metrics"]}
    assert not any(n.startswith("kernels.") for n in names)
    reduce_kernel = next(
        k["name"]
        for k in json.loads(next((tmp_path / "t").glob("*-b-*/summary.json")).read_text())["kernels"]
        if "reduce" in k["name"]
    )
    assert f"ncu.{reduce_kernel}.duration_ns" in names and f"ncu.{reduce_kernel}.sm_throughput_pct" in names
    assert "launches" in result["method"]
    public = DATA / "ncu" / "brycelelbach__nsightful__copy_blocked.csv"
    assert roseprof("import", public, "--name", "c", *dirs(tmp_path)).returncode == 0
    result = json.loads(roseprof("diff", "b", "c", "--json", *dirs(tmp_path)).stdout)
    assert [n for n, _ in result["kernels"]["new"]][0].startswith("copy_blocked")
    assert len(result["kernels"]["vanished"]) == 2


def test_the_default_ncu_command_is_a_valid_engine_benchmark():
    from roseinfer.bench.common import build_parser, engine_config, parse
    from roseprof.workload.roseinfer import ncu_default_command

    cmd = ncu_default_command()
    assert cmd[:2] == ["env", "ROSELLM_TRITON_KV_APPEND_MIN_BATCH=1"]  # the Triton KV append at batch 8
    module = cmd.index("-m") + 1
    assert cmd[module] == "roseinfer.benchmark_streaming"
    args = parse(build_parser("x", "x", "online"), cmd[module + 1 :])
    cfg = engine_config(args)
    # Eager decode (NVTX ranges enclose each kernel), the paged-attention kernel, a few steps.
    assert cfg.paged_attn and not cfg.cuda_graph and args.device == "cuda"
    assert args.num_requests * args.max_new_tokens <= 256


def test_kernels_listed_in_real_ncu_2025_output():
    from roseprof.drivers.ncu.capture import kernels_listed

    log = (DATA / "ncu" / "h100-ncu2025.3-nomatch.log").read_text()
    assert kernels_listed(log) == ["reduce_kernel", "vectorized_elementwise_kernel"]


TORCH_RUN = (
    DATA / "torch" / "h200-torch2.11-roseinfer-cutlass.json.gz"
)  # the engine's CUTLASS GEMMs, under torch
NAMES = DATA / "ncu" / "h200-ncu2025.3-roseinfer-names"  # ncu 2025.3's export of the same command's launches


@pytest.fixture
def torch_run(tmp_path):
    proc = roseprof("import", TORCH_RUN, "--name", "torchrun", *dirs(tmp_path))
    assert proc.returncode == 0, proc.stderr
    (run,) = runs(tmp_path)
    return run


def names_export(tmp_path) -> dict[str, str]:
    """The fake ncu's --import pages: ncu's own export of the torch run's command (600 launches, 17 kernels)."""
    import lzma

    out = {}
    for page, var in (("raw", "FAKE_NCU_RAW"), ("details", "FAKE_NCU_DETAILS")):
        path = tmp_path / f"names-{page}.csv"
        path.write_bytes(lzma.open(f"{NAMES}-{page}.csv.xz").read())
        out[var] = str(path)
    return out


def test_from_a_torch_run_profiles_its_kernels_as_ncu_spells_them_five_launches_a_configuration(
    tmp_path, torch_run
):
    import csv
    import re

    proc = roseprof(
        "ncu", *dirs(tmp_path), "--from", "torchrun", "--top", "6", "--", *PROGRAM,
        env=env(tmp_path, **names_export(tmp_path), COLUMNS="80"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "profiled no launch" not in proc.stdout  # every chosen kernel is in ncu's report
    argv = ncu_argv(tmp_path)
    # ncu 2025.3 counts launches per launch configuration (tests/data/ncu/h200-ncu2025.3-help.txt): 5 of each
    assert argv[argv.index("--launch-count") + 1] == "5"
    assert argv[argv.index("--filter-mode") + 1] == "per-launch-config"
    # torch spells the kernels GNU's way (and named the CUTLASS GEMMs only mangled); ncu's own spelling of all 17
    # kernels its report holds: the pattern takes exactly the six torch's run chose
    pattern = re.compile(argv[argv.index("--kernel-name") + 1].removeprefix("regex:"))
    rows = csv.DictReader(open(names_export(tmp_path)["FAKE_NCU_RAW"]))
    spelt = {r["Kernel Name"] for r in rows if r["ID"].isdigit()}
    assert len(spelt) == 17 and len({n for n in spelt if pattern.match(n)}) == 6


def test_from_with_an_ncu_that_counts_launches_only_together(tmp_path, torch_run):
    help_2022 = DATA / "ncu" / "cpu-ncu2022.3-help.txt"  # global and per-gpu only
    proc = roseprof(
        "ncu", *dirs(tmp_path), "--from", "torchrun", "--top", "6", "--", *PROGRAM,
        env=env(tmp_path, **names_export(tmp_path), FAKE_NCU_HELP=str(help_2022)),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    argv = ncu_argv(tmp_path)
    assert "--filter-mode" not in argv
    # 5 of each chosen kernel's launches in the torch run's window, at most: all of them together
    top, _, counts = top_kernels(json.loads((torch_run / "summary.json").read_text()), 6)
    assert int(argv[argv.index("--launch-count") + 1]) == sum(min(counts[n], 5) for n in top)


def test_from_names_the_chosen_kernels_ncu_profiled_no_launch_of(tmp_path, torch_run):
    # the report the fake hands back holds other kernels (tn-raw.csv: torch's elementwise and reduce kernels)
    proc = roseprof(
        "ncu", *dirs(tmp_path), "--from", "torchrun", "--top", "6", "--", *PROGRAM,
        env=env(tmp_path, COLUMNS="80"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stdout.split())
    assert "warning: ncu profiled no launch of 6 of the 6 kernels --from" in said
    assert "cutlass::device_kernel (3 instantiations)" in said and "paged_attn_kernel" in said
    warning = proc.stdout[proc.stdout.index("warning: ncu profiled") : proc.stdout.index("run folder:")]
    assert all(len(line) <= 80 for line in warning.splitlines())  # wrapped at the terminal's width


def test_the_engine_stamps_no_kernel_under_ncu(tmp_path):
    # a stamped build of a fused kernel is not the engine's: ncu must measure the one that runs unprofiled
    program = [sys.executable, "-c", "import os; print('stamps', os.environ.get('ROSEINFER_KERNEL_STAMPS'))"]
    proc = roseprof(
        "ncu", *dirs(tmp_path), "--kernel", "vectorized", "--", *program,
        env=env(tmp_path, ROSEINFER_KERNEL_STAMPS=str(tmp_path / "from-the-caller.jsonl")),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "stamps None" in proc.stderr


def test_from_a_torch_run_stored_with_mangled_names(tmp_path):
    import csv
    import re

    # imported where c++filt is missing: the run keeps the GEMMs' names as Kineto left them
    proc = roseprof("import", TORCH_RUN, "--name", "old", *dirs(tmp_path), env={"PATH": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(runs(tmp_path)[0].joinpath("summary.json").read_text())
    assert sum(k["name"].startswith("_ZN7cutlass") for k in summary["kernels"]) >= 3
    proc = roseprof(
        "ncu", *dirs(tmp_path), "--from", "old", "--top", "6", "--", *PROGRAM,
        env=env(tmp_path, **names_export(tmp_path)),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "profiled no launch" not in proc.stdout
    argv = ncu_argv(tmp_path)
    pattern = re.compile(argv[argv.index("--kernel-name") + 1].removeprefix("regex:"))
    rows = csv.DictReader(open(names_export(tmp_path)["FAKE_NCU_RAW"]))
    assert len({r["Kernel Name"] for r in rows if r["ID"].isdigit() and pattern.match(r["Kernel Name"])}) == 6
