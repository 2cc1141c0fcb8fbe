"""Groups of runs in `roseprof diff` (names, --vs, --latest), named baselines, and `roseprof nsys --repeat`."""

import json
import shutil
import sys

import pytest

from tests.helpers import DATA, assert_one_line_error, roseprof

DECODE = DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.sqlite"
DECODE_LOG = DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.steplog.jsonl"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Three imports named `before` and two named `after` of one real capture (so nothing changed)."""
    root = tmp_path_factory.mktemp("groups")
    for name in ("before", "before", "before", "after", "after"):
        proc = roseprof("import", DECODE, "--steplog", DECODE_LOG, "--name", name, *dirs(root))
        assert proc.returncode == 0, proc.stderr
    return root


def dirs(root):
    return ["--traces-dir", root / "traces", "--dashboards-dir", root / "dashboards"]


def ids(root, name):
    runs = json.loads(roseprof("ls", "--json", "--traces-dir", root / "traces").stdout)
    return [r["id"] for r in runs if r["name"] == name]


def diff_json(root, *args):
    proc = roseprof("diff", *args, "--json", *dirs(root))
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def test_a_name_is_the_group_of_its_complete_runs(store):
    out = diff_json(store, "before", "after")
    assert out["a"]["runs"] == ids(store, "before") and out["b"]["runs"] == ids(store, "after")
    assert out["method"].startswith("hierarchical bootstrap over groups of runs (3 before, 2 after)")
    assert not any(m["significant"] for m in out["metrics"])  # the same capture five times


def test_latest_keeps_one_run_a_side(store):
    out = diff_json(store, "--latest", "before", "after")
    assert out["a"]["runs"] == ids(store, "before")[-1:] and out["b"]["runs"] == ids(store, "after")[-1:]
    assert "one run a side" in out["method"]


def test_explicit_lists_with_vs(store):
    a, b = ids(store, "before"), ids(store, "after")
    out = diff_json(store, a[0], a[1], "--vs", b[0], "--top", "5")
    assert out["a"]["runs"] == a[:2] and out["b"]["runs"] == b[:1]
    proc = roseprof("diff", a[0], "--vs", b[0], b[1], *dirs(store))
    assert proc.returncode == 0, proc.stderr
    assert "after is a group of 2 runs" in proc.stdout


def test_a_side_of_two_names_says_both(store):
    # before: a run named `before` and one named `after` (one capture, so they pool); it was labelled by its latest
    # run's name alone
    a, b = ids(store, "before"), ids(store, "after")
    out = diff_json(store, a[0], b[0], "--vs", a[1])
    assert out["a"]["names"] == ["before", "after"] and out["b"]["names"] == ["before"]
    proc = roseprof("diff", a[0], b[0], "--vs", a[1], *dirs(store))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith("before is a group of 2 runs named before and after:")


def test_baselines(store, tmp_path):
    proc = roseprof("baseline", "set", "main", "before", *dirs(store))
    assert proc.returncode == 0 and "3 run(s)" in proc.stdout, proc.stderr
    listed = json.loads(roseprof("baseline", "ls", "--json", *dirs(store)).stdout)
    assert listed["main"]["runs"] == ids(store, "before")
    assert "main" in roseprof("baseline", "ls", *dirs(store)).stdout
    # a baseline's name where a run is asked for: the one line says how a baseline is named
    assert_one_line_error(
        roseprof("diff", "main", "after", *dirs(store)),
        2,
        "'main' is a baseline: roseprof diff --baseline main RUN",
    )
    out = diff_json(store, "--baseline", "main", "after")
    assert out["a"]["runs"] == ids(store, "before") and out["b"]["runs"] == ids(store, "after")
    assert_one_line_error(
        roseprof("diff", "--baseline", "nope", "after", *dirs(store)), 2, "no baseline 'nope'"
    )
    # A baseline whose runs were deleted: one clear line.
    copy = tmp_path / "copy"
    shutil.copytree(store / "traces", copy / "traces")
    shutil.rmtree(copy / "traces" / ids(store, "before")[0])
    proc = roseprof("diff", "--baseline", "main", "after", *dirs(copy))
    assert_one_line_error(proc, 2, "baseline 'main' refers to 1 of its 3 runs that no longer exist")
    assert_one_line_error(roseprof("baseline", "set", "bad name", "after", *dirs(store)), 2, "baseline name")


@pytest.mark.parametrize(
    "args,message",
    [
        (["before"], "diff needs two sides"),
        (["a", "b", "c"], "diff needs two sides"),
        (["--baseline", "main", "x", "--vs", "y"], "not both"),
        (["before", "--vs", "nope"], "no run 'nope'"),
    ],
)
def test_diff_usage_is_one_line(store, args, message):
    assert_one_line_error(roseprof("diff", *args, *dirs(store)), 2, message)


@pytest.mark.nsys
def test_nsys_repeat_stores_a_group_and_stops_at_a_failure(tmp_path):
    program = "import nvtx\nfor _ in range(5):\n    with nvtx.annotate('work'):\n        sum(range(10000))\n"
    proc = roseprof(
        "nsys", "--repeat", "2", "--name", "rep", *dirs(tmp_path), "--", sys.executable, "-c", program
    )
    assert proc.returncode == 0, proc.stderr
    assert "run 1/2:" in proc.stdout and "run 2/2:" in proc.stdout
    runs = json.loads(roseprof("ls", "--json", "--traces-dir", tmp_path / "traces").stdout)
    assert [r["name"] for r in runs] == ["rep", "rep"] and all(r["status"] == "complete" for r in runs)
    assert [r["repeat"] for r in runs] == [{"index": 1, "of": 2}, {"index": 2, "of": 2}]
    failing = [sys.executable, "-c", "import sys; sys.exit(3)"]
    proc = roseprof("nsys", "--repeat", "3", "--name", "bad", *dirs(tmp_path), "--", *failing)
    assert proc.returncode == 1 and "stopped after run 1 of 3" in proc.stderr
    runs = json.loads(roseprof("ls", "--json", "--traces-dir", tmp_path / "traces").stdout)
    assert [r["status"] for r in runs if r["name"] == "bad"] == ["failed"]


@pytest.mark.nsys
def test_a_name_mixing_commands_is_refused_naming_the_arguments(tmp_path):
    """Issue 21: one name, two commands (the same program with an argument apart): not one group."""
    program = (
        "import nvtx, sys\nfor _ in range(8):\n    with nvtx.annotate('work'):\n        sum(range(10000))\n"
    )
    for extra in ([], ["--fast"]):
        proc = roseprof("nsys", "--name", "mix", *dirs(tmp_path), "--", sys.executable, "-c", program, *extra)
        assert proc.returncode == 0, proc.stderr
    proc = roseprof("nsys", "--name", "other", *dirs(tmp_path), "--", sys.executable, "-c", program)
    assert proc.returncode == 0, proc.stderr
    refused = roseprof("diff", "mix", "other", *dirs(tmp_path))
    assert_one_line_error(refused, 2, "before (mix) would pool runs of different commands")
    assert "--fast" in refused.stderr and "(none)" in refused.stderr
    pooled = roseprof("diff", "mix", "other", "--pool-mixed", *dirs(tmp_path))
    assert pooled.returncode == 0, pooled.stderr
    # the first line names the options apart (issue 44), the next the side pooled with --pool-mixed
    first, second = pooled.stdout.splitlines()[:2]
    assert (
        first == "options apart: before --fast (one program)"
        and "pooled with --pool-mixed: commands" in second
    )


def test_a_refusal_names_an_option_apart_with_its_value():
    """Two loads whose --output-len differ: the refusal says `--output-len 64` and `--output-len 64-256`, not the
    bare values."""
    from types import SimpleNamespace

    from roseprof.run.alike import mixes

    def run(rid, *args):
        command = ["roseprof", "load", "http://127.0.0.1:8000", "--seed", "0", *args]
        return SimpleNamespace(id=rid, manifest={"tool": {"name": "load"}, "command": command})

    said = mixes([run("a", "--requests", "64", "--output-len", "64"), run("b", "--output-len", "64-256")])
    assert (
        said
        == "commands (arguments only some runs have: a: --requests 64 --output-len 64; b: --output-len 64-256)"
    )


def test_a_refusal_names_a_launchers_arguments_apart_word_by_word():
    """`taskset -c 0` against `-c 1`: the program's options agree, so the words apart are named."""
    from types import SimpleNamespace

    from roseprof.run.alike import mixes

    def run(rid, cpu):
        return SimpleNamespace(
            id=rid, manifest={"tool": {"name": "nsys"}, "command": ["taskset", "-c", cpu, "x.py"]}
        )

    assert mixes([run("a", "0"), run("b", "1")]) == "commands (arguments only some runs have: a: 0; b: 1)"
