"""The fuzz suite (test_fuzz.py's property and store) on multi-rank inputs (issue 46): the 2-H200 TP=2 Kineto folder
(tests/data/torch/h200x2-torch2.11-roseinfer-tp2: one file per rank and each rank's step log) damaged one way per
case, in its rank files (clock bases, ranks, world sizes, NCCL kernels), the folder (files that are no trace, a
rank twice, a rank missing), the step logs (pids, ranks, repeated or foreign records) and the gzip members.

The property, beyond test_fuzz.py's (read, or refused in one line naming the folder, nothing left behind, no
traceback, the earlier run unchanged): a run stored complete is one `roseprof show` reads (no "damaged" run that
`ls` lists as complete), and no straggler is named where the ranks' timings are said to be in doubt."""

from __future__ import annotations

import gzip
import json
import random
import shutil
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import DATA, run_cli
from tests.roseprof.test_fuzz import (
    FUZZ,
    check_cli,
    flip_bits,
    store,  # noqa: F401  (the module fixture: the earlier run no case may change)
    truncate,
)

TP2 = DATA / "torch" / "h200x2-torch2.11-roseinfer-tp2"
TP4 = DATA / "torch" / "h200x4-torch2.11-roseinfer-tp4"
BASES = [0, -1, 2**62, 2**63 - 1, 2**63, 2**64, -(2**63), 1.5, "x", None]
NUMBERS = [-5, -1, 0, 1, 2, 3, 7, 2**31 - 1, 2**31, 2**62, 10**9, 1.5, "0xdeadbeef", None, True, [], {}]


def _load(path: Path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def _save(path: Path, doc: dict) -> None:
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)


def _nccl(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ncclDevKernel")]


# ---- mutations: each changes the folder in place and says what it did -------------------------------------------


def mutate_rank_file(folder: Path, rng: random.Random) -> str:
    rank = rng.choice([0, 1])
    path = folder / f"rank-{rank}.trace.json.gz"
    doc = _load(path)
    how = rng.choice(["base", "base shift", "rank", "world", "no distributedInfo", "nccl dur", "nccl device",
                      "nccl pid", "nccl ts"])  # fmt: skip
    if how == "base":
        doc["baseTimeNanoseconds"] = rng.choice(BASES)
    elif how == "base shift":
        doc["baseTimeNanoseconds"] += rng.choice([1, 10**3, 10**6, 5 * 10**6, 10**9, 3600 * 10**9, -(10**8)])
    elif how in ("rank", "world"):
        doc["distributedInfo"]["rank" if how == "rank" else "world_size"] = rng.choice(NUMBERS)
    elif how == "no distributedInfo":
        doc.pop("distributedInfo")
    else:
        for e in rng.sample(_nccl(doc), rng.choice([1, 5, 50])):
            if how == "nccl dur":
                e["dur"] = rng.choice([1e15, 1e12, -1, 0, 1e9])
            elif how == "nccl device":
                e.setdefault("args", {})["device"] = rng.choice(NUMBERS)
            elif how == "nccl pid":
                e["pid"] = rng.choice(NUMBERS)
            else:
                e["ts"] = e["ts"] + rng.choice([-(10**6), 10**6, 10**9])
    _save(path, doc)
    return f"rank {rank}: {how}"


def mutate_folder(folder: Path, rng: random.Random) -> str:
    how = rng.choice(["config.json", "empty rank", "random bytes", "rank twice", "rank missing", "other run's rank",
                      "names swapped", "nested folder", "truncated rank", "bits flipped"])  # fmt: skip
    if how == "config.json":
        (folder / "config.json").write_text(json.dumps({"tensor_parallel_size": 2}))
    elif how == "empty rank":
        (folder / f"rank-{rng.choice([0, 1, 2])}.trace.json.gz").write_bytes(b"")
    elif how == "random bytes":
        (folder / "rank-2.trace.json.gz").write_bytes(rng.randbytes(rng.choice([1, 100, 5000])))
    elif how == "rank twice":
        shutil.copy(folder / "rank-1.trace.json.gz", folder / "rank-2.trace.json.gz")
    elif how == "rank missing":
        (folder / f"rank-{rng.choice([0, 1])}.trace.json.gz").unlink()
    elif how == "other run's rank":
        shutil.copy(TP4 / "rank-1.trace.json.gz", folder / "rank-1.trace.json.gz")
    elif how == "names swapped":
        a, b = folder / "rank-0.trace.json.gz", folder / "rank-1.trace.json.gz"
        a.rename(folder / "tmp"), b.rename(a), (folder / "tmp").rename(b)
    elif how == "nested folder":
        (folder / "rank-3.trace.json.gz").mkdir()
    else:
        (truncate if how == "truncated rank" else flip_bits)(
            folder / f"rank-{rng.choice([0, 1])}.trace.json.gz", rng
        )
    return how


def mutate_step_logs(folder: Path, rng: random.Random) -> str:
    paths = [folder / "steplog.jsonl", folder / "steplog.rank1.jsonl"]
    logs = [[json.loads(x) for x in p.read_text().splitlines()] for p in paths]
    k = rng.choice([0, 1])
    how = rng.choice(["pids swapped", "records twice", "meta rank", "meta world", "meta pid", "log missing",
                      "other run's log", "steps shifted", "steps reversed"])  # fmt: skip
    if how == "pids swapped":
        logs[0][0]["pid"], logs[1][0]["pid"] = logs[1][0]["pid"], logs[0][0]["pid"]
    elif how == "records twice":
        logs[k] = [y for x in logs[k] for y in ([x, x] if x["type"] == "step" else [x])]
    elif how in ("meta rank", "meta world", "meta pid"):
        logs[k][0][{"meta rank": "rank", "meta world": "world_size", "meta pid": "pid"}[how]] = rng.choice(
            NUMBERS
        )
    elif how == "steps shifted":
        for x in logs[k]:
            if x["type"] == "step":
                shift = rng.choice([10**3, 10**6, 10**9])
                x["start_ns"], x["end_ns"] = x["start_ns"] + shift, x["end_ns"] + shift
    elif how == "steps reversed":
        logs[k] = logs[k][:1] + logs[k][1:][::-1]
    if how == "log missing":
        paths[k].unlink()
    elif how == "other run's log":
        shutil.copy(TP4 / paths[k].name, paths[k])
    else:
        for p, log in zip(paths, logs):
            p.write_text("".join(json.dumps(x) + "\n" for x in log))
    return f"log {k}: {how}"


def mutate_gzip_members(folder: Path, rng: random.Random) -> str:
    path = folder / f"rank-{rng.choice([0, 1])}.trace.json.gz"
    data = gzip.decompress(path.read_bytes())
    n = rng.choice([2, 3, 7])
    cuts = sorted({0, len(data), *(rng.randrange(len(data)) for _ in range(n - 1))})
    members = [gzip.compress(data[a:b]) for a, b in zip(cuts, cuts[1:])]
    how = rng.choice(["members", "empty member", "trailing zeros", "trailing garbage", "member cut short"])
    if how == "empty member":
        members.insert(rng.randrange(len(members) + 1), gzip.compress(b""))
    elif how == "trailing zeros":
        members.append(b"\0" * rng.choice([1, 512, 100_000]))
    elif how == "trailing garbage":
        members.append(rng.randbytes(rng.choice([1, 64])) + b"x")
    elif how == "member cut short":
        i = rng.randrange(len(members))
        members[i] = members[i][: rng.randrange(1, len(members[i]))]
    path.write_bytes(b"".join(members))
    return f"{len(cuts) - 1} members: {how}"


MUTATIONS = {
    "rank file": mutate_rank_file,
    "folder": mutate_folder,
    "step logs": mutate_step_logs,
    "gzip members": mutate_gzip_members,
}


# ---- the property -----------------------------------------------------------------------------------------------


def check_ranks(store, folder: Path, with_log: bool) -> int:  # noqa: F811
    """test_fuzz.check_cli's property for an import of `folder`, and: a run stored is complete and `show` reads it
    (no run that `ls` lists as complete while every command refuses it); no straggler is named where the ranks'
    timings are in doubt."""
    traces, dashboards = store[0] / "t", store[0] / "d"

    def readable(run: Path) -> None:
        assert json.loads((run / "manifest.json").read_text())["status"] == "complete"
        code, _, err = run_cli("show", run.name, "--traces-dir", traces, "--dashboards-dir", dashboards)
        assert code == 0 and not err.strip(), err
        summary = json.loads((run / "summary.json").read_text())
        if (summary.get("rank_clock") or {}).get("doubts") and summary.get("collectives"):
            assert summary["collectives"]["straggler"] is None

    args = ["import", folder, *(["--steplog", folder / "steplog.jsonl"] if with_log else [])]
    return check_cli(store, args, label=folder, on_stored=readable)


@FUZZ
@given(
    seed=st.integers(0, 2**32 - 1),
    which=st.sampled_from(sorted(MUTATIONS)),
    with_log=st.booleans(),
)
def test_damaged_rank_folder_is_read_or_refused_in_one_line(store, tmp_path, seed, which, with_log):  # noqa: F811
    rng = random.Random(seed)
    folder = tmp_path / f"tp2-{seed}-{which.replace(' ', '-')}"
    shutil.rmtree(folder, ignore_errors=True)  # hypothesis runs its cases in one tmp_path, a seed maybe twice
    shutil.copytree(TP2, folder)
    MUTATIONS[which](folder, rng)
    check_ranks(store, folder, with_log or which == "step logs")
    shutil.rmtree(folder)
