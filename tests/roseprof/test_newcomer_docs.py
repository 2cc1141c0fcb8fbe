"""Issue 45, item 9: a README a newcomer reads to the end, whose test command is what CI runs, and the details it
no longer holds kept in the docs it points to (the map, every engine switch)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readme_is_short_and_has_the_walk():
    assert len(README.splitlines()) <= 200
    for step in (
        "roseprof nsys",
        "roseprof show",
        "roseprof diff",
        "roseprof open",
        "roseinfer serve",
        "curl ",
    ):
        assert step in README, step
    assert "-- --no-batched-kv-append" in README  # the demo's A/B switch, as one flag
    # What takes the disk (item 7): the venv, a run, a dashboard and the one plotly.js beside them.
    assert re.search(r"`\.venv` takes about \d+(\.\d+)? GB", README)
    assert "plotly-<version>.min.js" in README and "MB" in README


def test_the_readme_test_command_is_what_ci_runs():
    ci = [
        line
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line and not line.startswith(("#", "set ", "cd "))
    ]
    assert ci == ["make test"]
    assert "make test" in README and "make demo" in README
    make = (ROOT / "Makefile").read_text()
    test = re.search(r"^test:\n\tbash scripts/setup.sh\n\t(\.venv/bin/python -m pytest[^\n]*)$", make, re.M)
    assert test and f"`{test.group(1)}`" in README  # the README says what it runs, options and all


def test_every_doc_the_readme_names_exists():
    for doc in set(re.findall(r"docs/[A-Z]+\.md", README)):
        assert (ROOT / doc).is_file(), doc


def test_the_map_and_the_switches_moved_to_the_docs():
    from roseinfer.bench.options import build_parser

    architecture = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    for path in ("roseinfer/", "block_manager.py", "roseprof/", "drivers/", "analysis/"):
        assert path in architecture, path
    engine = (ROOT / "docs" / "ENGINE.md").read_text(encoding="utf-8")
    flags = [o for a in build_parser("benchmark_streaming", "", "online")._actions for o in a.option_strings]
    switches = [f for f in flags if f.startswith("--no-")]
    assert switches and all(f in engine for f in switches), [f for f in switches if f not in engine]
    assert "ROSELLM_TRITON_KV_APPEND" in engine
