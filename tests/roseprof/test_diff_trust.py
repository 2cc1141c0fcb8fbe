"""Issue 21: a diff that names the regression. The noise floor (and --min-effect), zero-width intervals, the
ranking by own time, and which runs a side may pool; on real captures (tests/data) imported into a tmp store."""

import copy
import json

import numpy as np
import pytest

from roseprof import api
from roseprof.analysis.diff import compare, floor_for
from roseprof.analysis.noise_floor import GPU_ONE_RUN_FLOORS, NoiseFloor, family
from roseprof.analysis.verdict import verdict, word
from roseprof.run.store import RunStore
from tests.helpers import DATA, assert_one_line_error, roseprof
from tests.roseprof.test_diff_stats import run_data

DECODE = DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.sqlite"
DECODE_LOG = DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.steplog.jsonl"
MATMUL_NSYS = DATA / "nsys" / "h100-nsys2025.3-matmul-nvtx.sqlite"
MATMUL_TORCH = DATA / "torch" / "h100-torch2.11-matmul-trace.json"
KV = "roseinfer.kv.append_token"
SIDES = {"id": "a", "name": "before", "runs": ["a"]}, {"id": "b", "name": "after", "runs": ["b"]}
# The ranking and the machine-speed tests below change one capture by known factors and judge it against the GPU
# group floors: they test which region is named, not the floors (one run a side's own: test below).
GROUP_FLOOR = NoiseFloor("gpu")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The H100 decode capture imported twice (`gpu-a`, `gpu-b`), and the matmul program captured by nsys and by
    torch.profiler imported under one name (`mixed`) and alone (`matmul`)."""
    root = tmp_path_factory.mktemp("trust")
    imports = [
        (DECODE, DECODE_LOG, "gpu-a"),
        (DECODE, DECODE_LOG, "gpu-b"),
        (MATMUL_NSYS, None, "mixed"),
        (MATMUL_TORCH, None, "mixed"),
        (MATMUL_NSYS, None, "matmul"),
    ]
    for path, log, name in imports:
        args = ["--steplog", log] if log else []
        proc = roseprof("import", path, *args, "--name", name, *dirs(root))
        assert proc.returncode == 0, proc.stderr
    return root


def dirs(root):
    return ["--traces-dir", root / "traces", "--dashboards-dir", root / "dashboards"]


@pytest.fixture(scope="module")
def decode(store):
    """The decode capture's samples, as diff compares them."""
    (run,) = api.resolve_side(RunStore(store / "traces"), ["gpu-a"], latest=False)
    return api.load_run(run)


def by_name(metrics):
    return {m["name"]: m for m in metrics}


def test_the_floor_hides_a_small_change_and_min_effect_overrides_it(decode):
    after = copy.deepcopy(decode)
    after.step_dur = decode.step_dur * 1.03  # every decode step 3% longer
    m = by_name(compare(decode, after))["steps.p50_ns"]
    # The within-run interval excludes 0 (the GPU's steps are steady), but +3% is inside the GPU floor.
    assert m["excludes_zero"] and m["ci_low_pct"] > 0 and not m["significant"]
    assert m["floor_pct"] > 3 and family("steps.p50_ns") == "step time"
    assert word(m) == ("no clear change", f"inside the ±{m['floor_pct']:g}% noise floor")
    # --min-effect 0.5 replaces the floor: now the change is called.
    m = by_name(compare(decode, after, floor=NoiseFloor("gpu", min_effect_pct=0.5)))["steps.p50_ns"]
    assert m["significant"] and m["floor_pct"] == 0.5 and word(m)[0] == "slower"


def test_one_run_a_side_has_its_own_floors_groups_theirs_and_min_effect_replaces_both(decode):
    # Every decode step 20% longer: beyond the GPU group floor for step time (10%), inside one run a side's (30%:
    # two single runs of the same code moved the step time by up to 26% on the H100).
    after = copy.deepcopy(decode)
    after.step_dur = decode.step_dur * 1.2
    one = by_name(compare(decode, after))["steps.p50_ns"]
    assert one["floor_pct"] == GPU_ONE_RUN_FLOORS["step time"] == 30
    assert one["excludes_zero"] and not one["significant"] and word(one)[0] == "no clear change"
    assert floor_for(decode, after).one_run and "one run a side" in floor_for(decode, after).describe()
    # The same runs as groups (each run twice: no drift between runs) keep the group floors: a change.
    groups = by_name(compare([decode, decode], [after, after]))["steps.p50_ns"]
    assert groups["floor_pct"] == 10 and groups["significant"] and word(groups)[0] == "slower"
    # --min-effect replaces both.
    for a, b in ((decode, after), ([decode, decode], [after, after])):
        floor = floor_for(a, b, 25.0)
        assert floor.pct("steps.p50_ns") == floor.pct("regions.x.self_ns") == 25.0


def test_a_zero_width_interval_is_never_a_change():
    # Every step of a run takes the same time: each resample gives the same +100%, an interval of zero width.
    m = by_name(compare(run_data([1e6] * 20), run_data([2e6] * 20), floor=NoiseFloor("cpu", 0.0)))
    p50 = m["steps.p50_ns"]
    assert p50["ci_low_pct"] == p50["ci_high_pct"] == pytest.approx(100)
    assert p50["zero_width"] and not p50["significant"]
    assert word(p50) == ("no clear change", "the resampling saw no variation (an interval of zero width)")


def test_the_region_whose_own_time_grew_is_named_first(decode):
    after = copy.deepcopy(decode)
    per_step, outside = decode.step_self[KV]
    after.step_self[KV] = (per_step * 2.0, outside)  # the KV append's own time doubles, nothing else moves
    v = verdict(compare(decode, after, floor=GROUP_FLOOR), *SIDES)
    assert v["regions"][0]["label"] == KV and v["regions"][0]["own_time"]
    assert v["moved_most"]["label"] == KV and v["moved_most"]["word"] == "slower"
    # A region that only encloses it is not listed: its own time did not move.
    assert "roseinfer.model.forward" not in [r["label"] for r in v["regions"]]


def test_machine_speed_is_taken_out_of_where_the_time_moved(decode):
    # A busy machine: every region of the after run 1.6x slower, the KV append 1.6 x 1.5x. The regions table
    # names only the KV append, +50% at the before side's speed; the step time is not normalised.
    after = copy.deepcopy(decode)
    slower = {n: 2.4 if n == KV else 1.6 for n in decode.step_self}
    after.step_self = {n: (v * slower[n], o * slower[n]) for n, (v, o) in decode.step_self.items()}
    metrics = by_name(compare(decode, after, floor=GROUP_FLOOR))
    assert metrics[f"regions.{KV}.self_ns"]["delta_pct"] == pytest.approx(50, abs=1)
    assert metrics[f"regions.{KV}.self_ns"]["speed_normalised"]
    assert abs(metrics["regions.roseinfer.model.forward.self_ns"]["delta_pct"]) < 1
    assert [r["label"] for r in verdict(list(metrics.values()), *SIDES)["regions"]] == [KV]


def test_waits_for_a_core_do_not_hide_the_region_that_grew(decode):
    # A shared CPU: the process waits for a core at random moments, and whichever region runs then absorbs the
    # wait. Five regions of a 7.5 ms CPU step, 300 steps a run; in a random 30% of the after run's steps each
    # region waits 5 ms, and the KV append also grew 1.5x. The mean own time per step of every region grows by
    # ~1.5 ms; in the steps no wait landed in (p5) only the KV append's.
    rng = np.random.default_rng(7)
    own_us = {
        KV: 400,
        "roseinfer.lm_head": 3700,
        "roseinfer.layer.attention": 1500,
        "roseinfer.layer.mlp": 400,
    }
    own_us["roseinfer.argmax"] = 430
    before, after = run_data([7.5e6] * 300), run_data([7.5e6] * 300)
    for name, us in own_us.items():
        base = us * 1e3 * rng.lognormal(0, 0.05, size=(2, 300))  # [2 runs, S] ns
        waits = np.where(rng.random(300) < 0.3, 5e6, 0.0)  # [S] ns
        for run, own in ((before, base[0]), (after, base[1] * (1.5 if name == KV else 1.0) + waits)):
            run.step_self[name] = (own, 0.0)
            run.region_durations[name] = own  # one instance a step
            run.step_regions[name] = own
    metrics = compare(before, after, floor=NoiseFloor("cpu"))
    by = by_name(metrics)
    # The mean would have named regions that only waited.
    assert [n for n in own_us if n != KV and by[f"regions.{n}.self_ns"]["significant"]]
    assert by[f"regions.{KV}.self_p5_ns"]["delta_pct"] == pytest.approx(50, abs=10)
    v = verdict(metrics, *SIDES)
    assert [r["label"] for r in v["regions"]] == [KV] and v["regions"][0]["own_stat"] == "p5 of the steps"
    # A GPU diff judges the mean (its host regions are microseconds of launch and waiting): no p5 metric there.
    gpu = compare(decode, copy.deepcopy(decode), floor=GROUP_FLOOR)
    assert any(m["name"].endswith(".self_ns") for m in gpu)
    assert not any(m["name"].endswith(".self_p5_ns") for m in gpu)


def test_a_name_mixing_tools_is_refused_in_one_line(store):
    proc = roseprof("diff", "mixed", "matmul", *dirs(store))
    assert_one_line_error(proc, 2, "before (mixed) would pool runs of different tools")
    assert "nsys (" in proc.stderr and "torch (" in proc.stderr and "--pool-mixed" in proc.stderr
    # Pooled on request, and the header says so.
    proc = roseprof("diff", "mixed", "matmul", "--pool-mixed", *dirs(store))
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith("before is a group of 2 runs named mixed") and "pooled with --pool-mixed" in first


def test_a_run_against_itself_exits_2(store):
    for args in (["gpu-a", "gpu-a"], ["--latest", "gpu-a", "gpu-a"]):
        assert_one_line_error(roseprof("diff", *args, *dirs(store)), 2, "before and after are the same run")
    runs = json.loads(roseprof("ls", "--json", "--traces-dir", store / "traces").stdout)
    a = [r["id"] for r in runs if r["name"] == "gpu-a"][0]
    b = [r["id"] for r in runs if r["name"] == "gpu-b"][0]
    assert_one_line_error(roseprof("diff", a, b, "--vs", a, *dirs(store)), 2, f"run {a} on both sides")


def test_one_run_a_side_says_so_first_and_two_imports_of_one_capture_show_no_change(store):
    proc = roseprof("diff", "gpu-a", "gpu-b", *dirs(store))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("before  ") and lines[1].startswith("after   ")
    assert lines[2].startswith("one run a side: the intervals see only the variation inside each run")
    # The same capture twice: no change, and no verdict word anywhere after the note (which quotes how often one
    # run a side says faster or slower), though the two sides' resamples differ.
    head = next(
        (i for i, line in enumerate(lines) if line.startswith("no clear change between before and after")),
        None,
    )
    assert head is not None, proc.stdout
    assert not any(w in "\n".join(lines[head:]) for w in (" faster", " slower"))
    out = json.loads(roseprof("diff", "gpu-a", "gpu-b", "--json", *dirs(store)).stdout)
    assert out["verdict"]["one_run_a_side"] and out["verdict"]["regions"] == []
    assert not any(m["significant"] for m in out["metrics"])


def test_default_run_names_say_the_tool():
    assert api.default_name("torch", None) == "torch-demo"
    assert api.default_name("nsys", None) == "nsys-demo"
    assert api.default_name("ncu", ["/usr/bin/python3", "x.py"]) == "ncu-python3"
    assert np.unique([api.default_name(t, None) for t in ("nsys", "torch", "ncu")]).size == 3
