"""Checks a `roseprof live` run of a server with a planted cause (scripts/gpu/live_truth.sh, issue 49's truth on
the GPU): every request `show` names first by its worst ITL is blamed on the planted cause, and no other.

A planted long prompt is a prefill; on the H200 a prefill of GPT-2 small costs the host ~6-13 ms whatever its
length (a 105-token prefill of 7.9 ms beside an 888-token one of 7.2 ms; docs/BENCHMARKS.md, session 23), so the
prefill case checks that each request is blamed on a prefill that accounts for its gap, and that the slowest is a
planted long one; how many of the rest were planted is said.

  python scripts/check_live_truth.py TRACES_DIR RUN --region NAME --every K    a region slowed on 1 entry in K
  python scripts/check_live_truth.py TRACES_DIR RUN --prefill-tokens N        a long prompt (>= N tokens) now and then

Prints one line a check and exits 1 if any fails."""

from __future__ import annotations

import argparse
import sys

from roseprof.api import open_store


def _prefill_tokens(line: str) -> int:
    return int(line.split("admitted a ")[1].split("-token")[0]) if "admitted a " in line else 0


def _prefill_ms(line: str) -> float:
    return float(line.split("-token prefill (")[1].split(" ms)")[0]) if "-token prefill (" in line else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces_dir")
    ap.add_argument("run")
    ap.add_argument("--region")
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--prefill-tokens", type=int)
    args = ap.parse_args()
    summary = open_store(args.traces_dir).resolve(args.run).summary()
    part = summary["live"]
    worst = [e for e in part["slowest"] if e["by"] == "itl"]
    checks = [(f"the run names {len(worst)} requests by their worst ITL", bool(worst))]
    if args.region:
        planted = [e for e in worst if f"{args.region} +" in e["line"]]
        checks.append(
            (f"each is blamed on {args.region}: {len(planted)} of {len(worst)}", len(planted) == len(worst))
        )
        # the slowed entries are every Kth entry of the region since the server started (a warm-up load counts), so
        # their steps are K apart
        steps = sorted({e.get("cause_step", e["step"]) for e in worst if e["step"] is not None})
        apart = all((b - a) % args.every == 0 for a, b in zip(steps, steps[1:]))
        checks.append((f"their steps {steps} are {args.every} apart (or a multiple)", apart))
    if args.prefill_tokens:
        by_prefill = [e for e in worst if e["cause"] == "prefill"]
        checks.append(
            (f"each is blamed on a prefill its step admitted: {len(by_prefill)} of {len(worst)}",
             len(by_prefill) == len(worst))
        )  # fmt: skip
        # the blame is true: the prefill took at least half of the request's gap
        explained = [e for e in by_prefill if _prefill_ms(e["line"]) >= 0.5 * e["ms"]]
        checks.append(
            (f"each one's prefill took at least half its gap: {len(explained)} of {len(worst)}",
             len(explained) == len(worst))
        )  # fmt: skip
        planted = [e for e in by_prefill if _prefill_tokens(e["line"]) >= args.prefill_tokens]
        first = bool(worst) and _prefill_tokens(worst[0]["line"]) >= args.prefill_tokens
        checks.append(
            (f"the slowest is a planted prefill of >= {args.prefill_tokens} tokens ({len(planted)} of "
             f"{len(worst)} are)", first)
        )  # fmt: skip
    failed = 0
    for words, ok in checks:
        print(("ok    " if ok else "FAIL  ") + words)
        failed += not ok
    for e in worst:
        print("      " + e["line"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
