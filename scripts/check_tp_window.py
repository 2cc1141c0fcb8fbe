"""Checks a stored `roseprof live` run of a tensor-parallel server's window (scripts/gpu/windows_tp.sh, on 2 GPUs):
one run of every rank, the ranks' step counts agree, each rank's kernels (or CPU operators) are its own, no kernel
of no rank, the collectives matched in every step. Prints one line a check and exits 1 if any fails.

  python scripts/check_tp_window.py TRACES_DIR RUN [--ranks 2] [--gpu]   (--gpu: each rank must have GPU kernels)
"""

from __future__ import annotations

import argparse
import sys

from roseprof.api import open_store
from roseprof.run import tables


def checks(summary: dict, ranks: int, gpu: bool) -> list[tuple[str, bool]]:
    capture = summary["live"]["capture"]
    window = [r["steps"] for r in capture.get("ranks") or []]
    out = [
        (
            f"the window on {ranks} ranks, each {capture['steps']} steps: {window}",
            window == [capture["steps"]] * ranks,
        ),
        ("the window was not stopped early", not capture["stopped_early"]),
        ("no warning that the ranks disagree", not any("ranks recorded" in w for w in summary["warnings"])),
    ]
    if capture["tool"] != "torch":
        return out
    entries = summary.get("ranks") or []
    c = summary["collectives"]
    without = capture["steps"] - c["matched_steps"] - c["unmatched_steps"]
    drains = max((r.get("drains", 0) for r in capture.get("ranks") or []), default=0)
    out += [
        (f"the trace holds ranks {[e['rank'] for e in entries]}", [e["rank"] for e in entries] == list(range(ranks))),
        ("each rank's steps joined to its own log: " + str([e["steps"]["count"] for e in entries]),
         all(e["steps"]["count"] == capture["steps"] and e["rank_from"] == "step log" for e in entries)),
        ("each rank has kernels of its own (GPU) or ranges (CPU): "
         + str([(e["kernel_count"], e["range_count"]) for e in entries]),
         all(e["kernel_count"] > 0 if gpu else e["range_count"] > 0 for e in entries)),
        (f"kernels of no rank: {summary['rank_clock']['kernels_of_no_rank']}",
         summary["rank_clock"]["kernels_of_no_rank"] == 0),
        (f"no doubt on the ranks' clocks: {summary['rank_clock']['doubts']}", not summary["rank_clock"]["doubts"]),
        (f"no step where the ranks issued different numbers of collectives: {c['unmatched_steps']}",
         c["unmatched_steps"] == 0),
        # a drain of the overlapped decode launches nothing: the steps without a collective on any rank are those
        (f"collectives matched in {c['matched_steps']} of {capture['steps']} steps, the other {without} with none "
         f"on any rank, {drains} drain(s) of the overlapped decode among the window's steps",
         0 < c["matched_steps"] and without <= drains),
    ]  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces_dir")
    ap.add_argument("run")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument(
        "--gpu", action="store_true", help="a GPU server: every rank must have kernels of its own"
    )
    args = ap.parse_args()
    run = open_store(args.traces_dir).resolve(args.run)
    tables.check_stored_run(run.path, run.manifest)
    failed = 0
    for words, ok in checks(run.summary(), args.ranks, args.gpu):
        print(("ok    " if ok else "FAIL  ") + words)
        failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
