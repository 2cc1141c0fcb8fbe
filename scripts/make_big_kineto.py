"""A large Kineto trace from a real one: its events repeated with shifted timestamps and ids (for benchmarks).

Usage: python scripts/make_big_kineto.py SRC.json[.gz] OUT.json --copies N

Each copy moves every timestamp by the source's span (plus a gap), and correlation / External ids and flow
ids by the largest id of the source, so launches and kernels still join one to one. Written event by event:
the output is never held in memory.
"""

from __future__ import annotations

import argparse
import gzip
import json


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--copies", type=int, default=20)
    a = ap.parse_args()
    opener = gzip.open if a.src.endswith(".gz") else open
    with opener(a.src, "rb") as fh:
        doc = json.load(fh)
    events = doc.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M"]
    t0 = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - t0 + 1000.0
    ids = [e["id"] for e in events if isinstance(e.get("id"), int)]
    ids += [e["args"].get("correlation", 0) for e in events if isinstance(e.get("args"), dict)]
    id_step = max(i for i in ids if isinstance(i, int)) + 1
    with open(a.out, "w", encoding="utf-8") as out:
        out.write(json.dumps(doc)[:-1] + ', "traceEvents": [\n')
        first = True
        for k in range(a.copies):
            for e in events:
                if e.get("ph") == "M" and k:
                    continue
                e2 = dict(e)
                if isinstance(e2.get("ts"), (int, float)) and e2.get("ph") != "M":
                    e2["ts"] = round(e2["ts"] + k * span, 3)
                if isinstance(e2.get("id"), int):
                    e2["id"] = e2["id"] + k * id_step
                args = e2.get("args")
                if isinstance(args, dict) and "correlation" in args:
                    e2["args"] = {**args, "correlation": args["correlation"] + k * id_step}
                out.write(("" if first else ",\n") + json.dumps(e2))
                first = False
        out.write("\n]}\n")


if __name__ == "__main__":
    main()
