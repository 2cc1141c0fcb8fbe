"""A command run through a launcher (`taskset -c 0`, `nice -n 5`, `env A=1`, `timeout 60`) is the program it
launches: `roseprof diff` compares a pinned capture with a plain one (it refused them as `before ran taskset`), and
the options apart are the program's. Commands as a user types them; the diff's refusal itself is run through the
CLI in test_diff_decision.py and test_diff_machine_sides.py."""

import pytest

from roseprof.command_line import command_items

ENGINE = ["python", "-m", "roseinfer.benchmark_streaming", "--num-requests", "16", "--no-batched-kv-append"]


@pytest.mark.parametrize(
    "launcher",
    [
        ["taskset", "-c", "0"],
        ["taskset", "0x3"],
        ["/usr/bin/taskset", "-c", "0-3,5"],
        ["nice", "-n", "5"],
        ["env", "OMP_NUM_THREADS=1"],
        ["timeout", "60s"],
        ["numactl", "--cpunodebind=0", "--membind=0"],
        ["chrt", "-f", "10"],
        ["taskset", "-c", "0", "nice", "-n", "19", "env", "A=1"],  # a chain
    ],
)
def test_a_launcher_in_front_is_looked_through(launcher):
    assert command_items(launcher + ENGINE) == command_items(ENGINE)
    assert command_items(launcher + ENGINE)[0] == "benchmark_streaming"


def test_a_launcher_alone_or_a_program_of_that_name_stays_the_program():
    assert command_items(["time"])[0] == "time"  # nothing after it: the launcher is the program
    assert command_items(["python", "nice.py", "-v"]) == ("nice.py", ["-v"])  # a script, not the launcher
    assert command_items(["./run.sh", "taskset"]) == ("run.sh", ["taskset"])
