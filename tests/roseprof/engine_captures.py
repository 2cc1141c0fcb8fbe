"""The engine's CPU captures under nsys that several diff test modules read (test_diff.py, test_diff_decision.py,
test_diff_machine_sides.py).

A capture costs ~10-20 s on the 2-core CI box, most of it nsys starting and exporting and the engine importing
torch, not the workload: the ones every module needs are captured once a session (conftest.py's `engine_captures`)
and each module copies them into a store of its own, so what one module adds or writes never reaches another."""

import shutil
import sys

from tests.helpers import assert_fits, roseprof

# Equal prompts (16 bytes) so all 16 requests cross a 64-token block boundary in the same step; two benchmark runs
# (a warm-up and a measured one) of 69 decode steps each, so the step log marks two run starts.
WORKLOAD = [
    sys.executable,
    "-m",
    "roseinfer.benchmark_streaming",
    "--hf-model-id",
    "gpt2-tiny",
    "--num-requests",
    "16",
    "--max-batch-size",
    "16",
    "--prefill-max-batch-size",
    "16",
    "--max-new-tokens",
    "70",
    "--prompt",
    "abcdefghijklmnop",
    "--warmup-runs",
    "1",
    "--repeat-runs",
    "1",
    "--no-stop-on-eos",
]
# A real change whose size does not depend on how busy the machine is: every KV append (4 layers a step) sleeps
# 15 ms, +60 ms a step. One run a side is judged against the one-run floors (step time 110%, ITL 115%: two single
# runs of the same code moved that much on the busy 2-core machine), so the sleep must stay well beyond them under
# load: +60 ms is +800% of a quiet 7 ms step and still +200% of a 30 ms busy one (5 ms a sleep, +20 ms a step, was
# within reach of the floor once steps passed 18 ms). How much the engine's own designs gain is measured in
# benchmarks, not asserted here: two captures' timings race on a shared machine. The 15 ms are CPU time spent in a
# busy loop (ROSEINFER_TEST_BUSY_REGION), not a sleep: the runs carry each region's CPU time (step log version 3)
# and the diff judges regions by it, which a sleep does not touch.
SLOW = {"ROSEINFER_TEST_BUSY_REGION": "roseinfer.kv.append_token:15"}
CAPTURES = {"default": {}, "slow-append": SLOW}
# 8-token KV blocks: every request rolls over every 8 tokens, ~18-20 rollover steps a run (WORKLOAD's 64: 2). The
# same capture serves test_diff_decision.py and test_diff_machine_sides.py (conftest.py's `small_blocks_capture`).
SMALL_BLOCKS = [*WORKLOAD, "--block-size", "8"]
# A program that is not the engine, with nothing in common with it (NVTX ranges of its own, no decode steps).
OTHER = "import nvtx, time\nfor _ in range(10):\n    with nvtx.annotate('unrelated.work'):\n        time.sleep(0.001)\n"


def dirs(root) -> list:
    return ["--traces-dir", root / "traces", "--dashboards-dir", root / "dashboards"]


def capture(root, name, *cmd, env=None):
    """`roseprof nsys --name NAME -- CMD` into the store under `root`, as a user runs it."""
    return roseprof("nsys", "--name", name, *dirs(root), "--", *cmd, env=env)


def capture_all(root) -> None:
    """CAPTURES of WORKLOAD into the store under `root`, each checked as a user would see it; OTHER as "other"."""
    for name, env in CAPTURES.items():
        proc = capture(root, name, *WORKLOAD, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        # Not a terminal: no progress on stderr; what to do next on stdout (`roseprof open`, or where roseprof is
        # not on PATH, the path to paste).
        assert "roseprof ✓" not in proc.stderr and "next: " in proc.stdout
        # At 80 columns (conftest.py) every line fits: the benchmark's report, the run's summary, what to do next.
        # (stderr holds the program's own warnings, which are not roseprof's to fit.)
        assert_fits(proc.stdout, 80)
    proc = capture(root, "other", sys.executable, "-c", OTHER)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def capture_small_blocks(root) -> None:
    """SMALL_BLOCKS as "small-blocks" into the store under `root`."""
    proc = capture(root, "small-blocks", *SMALL_BLOCKS)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def copy_store(shared, root):
    """A module's own store under `root`: a copy of the session's captures (their traces and dashboards)."""
    shutil.copytree(shared, root, dirs_exist_ok=True)
    return root
