"""Damaged stored runs that `diff` compared in silence (issue 23): each is now named as damaged, with its file, in
one line (exit 2), both ways round; `show` and `ls` still never traceback on them."""

import json
import shutil

import pytest

from tests.helpers import one_line_error, run_cli
from tests.roseprof.test_store_damage import good_store, run_folder  # noqa: F401  (the module fixture)


def _edit_json(path, change):
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


def _huge_p50(summary):
    summary["regions"][0]["p50_ns"] = 1e308
    return summary


DAMAGE = {
    "an empty summary": ("summary.json", lambda r: (r / "summary.json").write_text("{}")),
    "a p50 of 1e308": ("summary.json", lambda r: _edit_json(r / "summary.json", _huge_p50)),
    "no steps.json": ("steps.json", lambda r: (r / "steps.json").unlink()),
    "no ranges.npz": ("ranges.npz", lambda r: (r / "ranges.npz").unlink()),
    "a manifest naming another tool": (
        "manifest.json",
        lambda r: _edit_json(r / "manifest.json", lambda m: {**m, "tool": {**m["tool"], "name": "torch"}}),
    ),
}


@pytest.mark.parametrize("case", DAMAGE)
def test_diff_names_the_damaged_run_and_file(good_store, tmp_path, case):  # noqa: F811
    file, damage = DAMAGE[case]
    traces = tmp_path / "t"
    shutil.copytree(good_store, traces)
    victim = run_folder(traces, "b")
    damage(victim)
    for args in (["a", victim.name], [victim.name, "a"]):
        code, out, err = run_cli("diff", *args, "--traces-dir", traces, "--dashboards-dir", tmp_path / "d")
        line = one_line_error(code, out, err)
        assert victim.name in line and file in line and "damaged" in line, line
    for args in (["ls"], ["show", victim.name], ["show", victim.name, "--json"]):
        code, out, err = run_cli(*args, "--traces-dir", traces, "--dashboards-dir", tmp_path / "d")
        assert code in (0, 2) and "Traceback" not in err and "internal error" not in err, err
