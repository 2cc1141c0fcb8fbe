"""Read the engine's step log (ROSEINFER_STEP_LOG, JSON lines; written by roseinfer.steplog).

Version 1 logs (no `version` in the meta record) have meta, step, prefill and request records (and, since
2026-11, `run_start` records where a benchmark run begins). Version 2 adds what ITL spike attribution needs:
`gc` records (a collection's start and end, from `gc.callbacks`), `preempt` records (which request was
preempted, when), and per step `launched` (false: a drain of the overlapped decode) and `bucket` (the CUDA-graph
batch bucket). A version 1 log still reads; the analyses infer what they can. With tensor parallelism each rank
writes its own log (rank 0 the named file, rank r `NAME.rank<r>.EXT`) and its meta record carries `rank` and
`world_size`; the meta record is kept as written (`StepLogRecords.meta`). Version 3 adds, per step and only
while the engine's regions were on, `cpu_ns` (the step's thread CPU time) and `cpu_own_ns` ({region: its own
thread CPU time in the step}; a CPU engine on one intra-op thread only). Version 4 adds, per step while the
regions were on and on every device, `host_own_ns` ({region: its own wall time in the step}: what a GPU engine's
host did in a slow step). Older logs and steps without them simply have none. A flight recorder's window
(its meta record has `flight_recorder_steps`) is renumbered from its first step (`_rebase_window`). A live run's
step log (roseprof/live/load_steps.py: the load's steps cut from the recorder's snapshot) adds to the meta record
`load_steps` (the snapshot's steps, those kept, those left out before and after) and `profiler_pauses` (where a
capture window's profiler paused the engine loop: after which server step, and for how long).

A step log can be damaged (a capture interrupted mid-line, a disk that filled up, a file passed by mistake), so
every line is checked and a damaged one costs only itself:

    a line that is not JSON, not an object, too deep, too long, or NaN/Infinity  -> skipped, counted
    a record missing a key it needs (step, prefill, gc: start_ns and end_ns;      -> skipped, counted
    request: id, arrival_ns, token_ns; preempt: t_ns, request), or any known key
    with a value of the wrong type or range (a count below 0, an id list that is
    not a list of integers, an interval ending before it starts)
    a count or id list that is absent (older engines)                            -> kept: 0, [], launched true
    a step whose cpu_ns / cpu_own_ns (or host_own_ns) is damaged                 -> kept without them
    a request whose token_step is shorter or longer than token_ns                -> kept: missing steps are -1
                                                                                    (unknown), extra ones dropped
    records of unknown type                                                      -> ignored (newer engines)
    a step record repeating an earlier one (its index, start and end)            -> skipped, counted

What was skipped or repaired becomes warnings in the run's summary (`StepLogRecords.warnings`). A file in which
no line at all is a step-log record (a binary file, another tool's file) is refused in one line by the caller
that was given it (`roseprof import --steplog`); a capture's own log never fails the capture.

Every record the reader returns holds each field it knows, of the right type: the analyses (steps, ITL, spikes)
index them without checking again.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field

from roseinfer import names

STEPLOG_VERSION = names.STEPLOG_VERSION  # the newest format this reader knows (the engine's)
MAX_LINE_BYTES = 64 << 20  # one request's token times are a few hundred kB; a longer line is damage
INT_LIMIT = 1 << 62  # timestamps beyond this are damage (and would overflow differences)


@dataclass
class StepLogRecords:
    meta: dict = field(default_factory=dict)
    steps: list[dict] = field(default_factory=list)
    prefills: list[dict] = field(default_factory=list)
    requests: list[dict] = field(default_factory=list)
    run_starts: list[dict] = field(default_factory=list)  # a benchmark run begins (warm-up or measured)
    gc: list[dict] = field(
        default_factory=list
    )  # version 2: {"start_ns", "end_ns", "generation", "collected"}
    preempts: list[dict] = field(default_factory=list)  # version 2: {"t_ns", "request"}
    problems: Counter = field(default_factory=Counter)  # what was skipped or repaired -> how many lines
    lines: int = 0

    @property
    def version(self) -> int:
        v = self.meta.get("version", 1)
        return v if isinstance(v, int) and not isinstance(v, bool) else 1

    @property
    def first_step(self) -> int:
        """The engine's number of the log's first step: a flight recorder's window starts mid-run (0 otherwise)."""
        k = self.meta.get("first_step", 0)
        return k if _is_int(k) else 0

    @property
    def bad_lines(self) -> int:
        return sum(n for why, n in self.problems.items() if not why.startswith("repaired"))

    @property
    def records(self) -> int:
        return len(self.steps) + len(self.prefills) + len(self.requests) + bool(self.meta)

    def warnings(self, label: str = "the step log") -> list[str]:
        return [f"{label}: {n} line(s) {why}" for why, n in sorted(self.problems.items())]


class _Skip(Exception):
    pass


def _no_constants(name: str):
    raise _Skip("skipped: NaN or Infinity")


def _bad(rec: dict, key: str) -> _Skip:
    return _Skip(f"skipped: {rec.get('type')} record with a missing or invalid {key}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -INT_LIMIT <= value <= INT_LIMIT


def _int(rec: dict, key: str, default=None, minimum: int = -INT_LIMIT) -> int:
    value = rec.get(key, default)
    if not _is_int(value) or value < minimum:
        raise _bad(rec, key)
    return value


def _ints(rec: dict, key: str, default=None) -> list[int]:
    values = rec.get(key, default)
    if not isinstance(values, list) or not all(_is_int(v) for v in values):
        raise _bad(rec, key)
    return values


def _interval(rec: dict) -> dict:
    start, end = _int(rec, "start_ns"), _int(rec, "end_ns")
    if end < start:
        raise _Skip(f"skipped: {rec.get('type')} record ending before it starts")
    return {"start_ns": start, "end_ns": end}


def _counts(rec: dict, *keys: str) -> dict:
    """Counts that default to 0 when absent (older engines) and are damage when present but not a count."""
    return {key: _int(rec, key, 0, minimum=0) for key in keys}


# Every record is rebuilt from its checked fields (plus whatever else it holds, untouched), so an analysis
# indexing a field the reader knows never meets a missing key or a value of the wrong type.
def _step(rec: dict, problems: Counter) -> dict:
    launched = rec.get("launched", True)
    bucket = rec.get("bucket")
    if not isinstance(launched, bool):
        raise _bad(rec, "launched")
    if bucket is not None and not _is_int(bucket):
        raise _bad(rec, "bucket")
    checked = {**_interval(rec), **_counts(rec, "rollovers", "batch_size", "cow")}
    step = {**rec, **checked, "requests": _ints(rec, "requests", []), "launched": launched, "bucket": bucket}
    if "cpu_ns" in rec or "cpu_own_ns" in rec:
        cpu = _cpu_times(rec)
        if cpu is None:  # the step itself is sound: only its CPU times are dropped
            step.pop("cpu_ns", None)
            step.pop("cpu_own_ns", None)
            problems["repaired: damaged CPU times dropped from a step"] += 1
        else:
            step["cpu_ns"], step["cpu_own_ns"] = cpu
    if "wait_ns" in rec and not (_is_int(rec["wait_ns"]) and rec["wait_ns"] >= 0):  # version 5
        step.pop("wait_ns")
        problems["repaired: a damaged wait for a core dropped from a step"] += 1
    if "host_own_ns" in rec and not _region_ns(rec["host_own_ns"]):
        step.pop("host_own_ns")
        problems["repaired: damaged host times dropped from a step"] += 1
    return step


def _region_ns(own) -> bool:
    """{region: ns}: names that are strings, counts of 0 or more."""
    return isinstance(own, dict) and all(isinstance(k, str) and _is_int(v) and v >= 0 for k, v in own.items())


def _cpu_times(rec: dict) -> tuple[int, dict[str, int]] | None:
    """Version 3: the step's thread CPU ns and each region's own CPU ns in it, or None when either is damaged
    (a missing half, a negative count, a name that is not a string)."""
    total, own = rec.get("cpu_ns"), rec.get("cpu_own_ns")
    if not (_is_int(total) and total >= 0 and _region_ns(own)):
        return None
    return total, own


def _prefill(rec: dict) -> dict:
    checked = {**_interval(rec), **_counts(rec, "batch_size", "tokens", "cow")}
    return {
        **rec,
        **checked,
        "requests": _ints(rec, "requests", []),
        "readmitted": _ints(rec, "readmitted", []),
    }


def _request(rec: dict, problems: Counter) -> dict:
    # The engine's ids are integers; the analyses match them against steps' and preemptions' id lists.
    ident, arrival = _int(rec, "id"), _int(rec, "arrival_ns")
    tokens = _ints(rec, "token_ns")
    steps = _ints(rec, "token_step") if "token_step" in rec else []
    if len(steps) != len(tokens):
        problems["repaired: token_step not as long as token_ns (unknown steps are -1)"] += 1
        steps = (steps + [-1] * len(tokens))[: len(tokens)]
    return {**rec, "id": ident, "arrival_ns": arrival, "token_ns": tokens, "token_step": steps}


def _gc(rec: dict) -> dict:
    return {**rec, **_interval(rec)}


def _preempt(rec: dict) -> dict:
    return {**rec, "t_ns": _int(rec, "t_ns"), "request": _int(rec, "request")}


def _run_start(rec: dict) -> dict:
    checked = {"ts_ns": _int(rec, "ts_ns"), "next_step": _int(rec, "next_step", 0, minimum=0)}
    if "run" in rec:
        checked["run"] = _int(rec, "run", minimum=0)
    return {**rec, **checked}


def _meta(rec: dict, problems: Counter) -> dict:
    version = rec.get("version", 1)
    meta = {**rec, "version": version if _is_int(version) and version > 0 else 1}
    if "profiler_pauses" in rec and not _pauses(rec["profiler_pauses"]):
        meta.pop("profiler_pauses")
        problems["repaired: damaged profiler pauses dropped from the meta record"] += 1
    return meta


def _pauses(pauses) -> bool:
    """A live run's window pauses (roseprof/live/load_steps.py): after_step, what, loop_ms and beside_ms each."""
    return isinstance(pauses, list) and all(
        isinstance(p, dict)
        and _is_int(p.get("after_step"))
        and isinstance(p.get("what"), str)
        and all(_is_ms(p.get(k)) for k in ("loop_ms", "beside_ms"))
        for p in pauses
    )


def _is_ms(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e12


def _lines(fh):
    """Lines of a binary file, a line over MAX_LINE_BYTES read no further than that (and reported)."""
    while True:
        line = fh.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while (more := fh.readline(1 << 20)) and not more.endswith(b"\n"):
                pass
            yield None
            continue
        yield line


def read_steplog(path: str) -> StepLogRecords | None:
    """The log's records, or None when the file is missing or empty. Damage is counted, never raised."""
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return None
    log = StepLogRecords()
    with open(path, "rb") as fh:
        for raw in _lines(fh):
            log.lines += 1
            if raw is None:
                log.problems["skipped: longer than 64 MiB"] += 1
                continue
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw.decode("utf-8", "replace"), parse_constant=_no_constants)
                if not isinstance(rec, dict):
                    raise _Skip("skipped: not a JSON object")
                kind = rec.get("type")
                if kind == "step":
                    log.steps.append(_step(rec, log.problems))
                elif kind == "request":
                    log.requests.append(_request(rec, log.problems))
                elif kind == "prefill":
                    log.prefills.append(_prefill(rec))
                elif kind == "gc":
                    log.gc.append(_gc(rec))
                elif kind == "preempt":
                    log.preempts.append(_preempt(rec))
                elif kind == "run_start":
                    log.run_starts.append(_run_start(rec))
                elif kind == "meta" and not log.meta:
                    log.meta = _meta(rec, log.problems)
            except _Skip as e:
                log.problems[str(e)] += 1
            except RecursionError:
                log.problems["skipped: nested too deeply"] += 1
            except ValueError:  # JSONDecodeError: e.g. a last line cut short when the capture was interrupted
                log.problems["skipped: not JSON"] += 1
    # Several engines in one process share the log; their step records interleave in time order already.
    log.steps.sort(key=lambda r: r["start_ns"])
    _drop_repeats(log)
    if "flight_recorder_steps" in log.meta and log.steps:
        _rebase_window(log)
    return log


def _drop_repeats(log: StepLogRecords) -> None:
    """A step record that repeats an earlier one (its index, start and end: a log concatenated to itself, a
    record written twice) is no step of its own: joined to the trace, every step after it would pair with the
    wrong range (and the ranks' collectives with another step's)."""
    seen: set[tuple] = set()
    kept = []
    for step in log.steps:
        key = (repr(step.get("index")), step["start_ns"], step["end_ns"])  # an index is as the log wrote it
        if key in seen:
            log.problems["skipped: a step record repeating an earlier one (same index, start and end)"] += 1
            continue
        seen.add(key)
        kept.append(step)
    log.steps = kept


def _rebase_window(log: StepLogRecords) -> None:
    """A flight recorder's window (roseinfer serve's /debug/steps) starts at some step k of a running server: its
    steps are renumbered from 0, as the analyses index them, and each request keeps the tokens of the window only
    (a token of a step before it, or a prefill's before its first record, is cut). `meta["first_step"]` keeps k:
    the server's step of position i is k + i (what a client's `token_steps` say)."""
    first = log.steps[0]["index"]
    log.meta["first_step"] = first
    since = min([log.steps[0]["start_ns"]] + [p["start_ns"] for p in log.prefills])
    for rec in log.steps:
        rec["index"] -= first
    for rec in log.requests:
        keep = [
            i
            for i, (t, k) in enumerate(zip(rec["token_ns"], rec["token_step"]))
            if k >= first or (k < 0 and t >= since)
        ]
        rec["token_ns"] = [rec["token_ns"][i] for i in keep]
        rec["token_step"] = [k - first if k >= 0 else k for k in (rec["token_step"][i] for i in keep)]


def rank_path(path: str, rank: int) -> str:
    """Where rank `rank`'s log of the run whose rank 0 log is `path` lies: the engine's naming
    (roseinfer/steplog.py `rank_path`, not imported: roseprof reads runs without loading the engine)."""
    if rank == 0:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.rank{rank}{ext}"


def rank_log_paths(path: str) -> dict[int, str]:
    """{rank: path} of every rank's log of one run, given rank 0's: rank 0 the path itself (when it exists), rank
    r >= 1 `NAME.rank<r>.EXT` beside it (the engine's naming: roseinfer/steplog.py `rank_path`)."""
    folder, base = os.path.split(path)
    stem, ext = os.path.splitext(base)
    found = {0: path} if os.path.isfile(path) else {}
    pattern = re.compile(re.escape(stem) + r"\.rank([1-9][0-9]{0,5})" + re.escape(ext) + "$")
    try:
        entries = os.listdir(folder or ".")
    except OSError:
        return found
    for entry in entries:
        m = pattern.match(entry)
        full = os.path.join(folder, entry)
        if m and os.path.isfile(full):
            found[int(m.group(1))] = full
    return dict(sorted(found.items()))


def log_rank(log: StepLogRecords, file_rank: int) -> int:
    """The rank a log speaks for: its meta record's `rank`, else the one its file name gives."""
    rank = log.meta.get("rank")
    return rank if _is_int(rank) and 0 <= rank < 1 << 31 else file_rank
