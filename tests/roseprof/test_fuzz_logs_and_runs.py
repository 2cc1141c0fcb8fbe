"""The fuzz suite (test_fuzz.py's property and store) on step logs and stored runs: a damaged step log is read
with warnings or refused in one line; a damaged stored run is listed, shown, opened and diffed without a
traceback (a damaged one refused in one line naming its file)."""

from __future__ import annotations

import json
import random
import shutil

from hypothesis import given
from hypothesis import strategies as st

from tests.roseprof.test_fuzz import (
    DECODE,
    FUZZ,
    STEPLOG,
    check_cli,
    flip_bits,
    store,  # noqa: F401  (the module fixture: the earlier run no case may change)
    truncate,
)

# ---- damaged step logs --------------------------------------------------------------------------------------


def _damage_json(value, rng: random.Random):
    """One random change inside a JSON value: a wrong-typed value, a deleted key, a shortened list."""
    if isinstance(value, dict) and value:
        key = rng.choice(list(value))
        how = rng.random()
        if how < 0.25:
            return {k: v for k, v in value.items() if k != key}
        return {**value, key: _damage_json(value[key], rng)}
    if isinstance(value, list) and value:
        how = rng.random()
        if how < 0.3:
            return value[: rng.randrange(len(value))]
        i = rng.randrange(len(value))
        return value[:i] + [_damage_json(value[i], rng)] + value[i + 1 :]
    return rng.choice([None, "x", -1, 2**70, 1.5, float("nan"), [], {}, True, "\udcff", [[[]]], 0])


@FUZZ
@given(seed=st.integers(0, 2**32 - 1), how=st.sampled_from(["records", "bytes", "truncate", "lines"]))
def test_damaged_step_log_is_warned_about_or_refused(store, tmp_path, seed, how):  # noqa: F811
    rng = random.Random(seed)
    lines = STEPLOG.read_text().splitlines()
    log = tmp_path / f"steps-{seed}.jsonl"
    if how == "records":
        for _ in range(rng.choice([1, 5, 40])):
            i = rng.randrange(len(lines))
            lines[i] = json.dumps(_damage_json(json.loads(lines[i]), rng))
        log.write_bytes("\n".join(lines).encode("utf-8", "surrogatepass"))
    elif how == "lines":
        for _ in range(rng.choice([1, 10])):
            lines.insert(
                rng.randrange(len(lines)), rng.choice(["[", "1", "null", "[" * 5000, "\x00\xff", "{}"])
            )
        log.write_bytes("\n".join(lines).encode("utf-8", "surrogateescape"))
    else:
        shutil.copyfile(STEPLOG, log)
        (truncate if how == "truncate" else flip_bits)(log, rng)
    check_cli(store, ["import", DECODE, "--steplog", log], label=log)


# ---- damaged stored runs ------------------------------------------------------------------------------------


@FUZZ
@given(
    seed=st.integers(0, 2**32 - 1),
    file=st.sampled_from(["summary.json", "steps.json", "itl.json", "names.json", "manifest.json", "ranges.npz",
                          "gpu_ops.npz", "marks.npz"]),
    how=st.sampled_from(["json", "truncate", "bits", "deleted", "empty", "huge number", "other tool"]),
)  # fmt: skip
def test_damaged_stored_run_never_tracebacks(store, tmp_path, seed, file, how):  # noqa: F811
    root, earlier, _ = store
    rng = random.Random(seed)
    victim = root / "t" / f"20990101T000000Z-victim-{seed % 65536:04x}"
    shutil.copytree(earlier, victim)
    try:
        manifest = json.loads((victim / "manifest.json").read_text())
        (victim / "manifest.json").write_text(
            json.dumps({**manifest, "name": "victim", "run_id": victim.name})
        )
        path = victim / file
        if how == "json" and file.endswith(".json"):
            damaged = _damage_json(json.loads(path.read_text()), rng)
            path.write_text(json.dumps(damaged))  # NaN included: Python writes it, a hand edit could too
        elif how == "bits":
            flip_bits(path, rng)
        elif how == "deleted":
            path.unlink()
        elif how == "empty" and file.endswith(".json"):
            path.write_text("{}" if file != "itl.json" else "[]")
        elif how == "huge number" and file == "summary.json":
            path.write_text(path.read_text().replace('"p50_ns": ', '"p50_ns": 1e308, "was": ', 1))
        elif how == "other tool":
            m = json.loads((victim / "manifest.json").read_text())
            (victim / "manifest.json").write_text(json.dumps({**m, "tool": {**m["tool"], "name": "torch"}}))
        else:
            truncate(path, rng)
        for args in (["ls"], ["ls", "--json"], ["show", victim.name], ["show", victim.name, "--json"],
                     ["open", victim.name], ["diff", earlier.name, victim.name, "--allow-incomplete"]):  # fmt: skip
            check_cli(
                store, args, label=victim.name, env={"DISPLAY": "", "WAYLAND_DISPLAY": "", "BROWSER": ""}
            )
    finally:
        shutil.rmtree(victim)
