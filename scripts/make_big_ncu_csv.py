"""Build a large Nsight Compute details CSV by repeating a real export's rows (for the ncu import's memory, issue 43).

    python scripts/make_big_ncu_csv.py tests/data/ncu/tn-details.csv /tmp/big-details.csv --mb 442

Each copy of the export's rows gets launch ids shifted past the previous copy's, so every copy is launches of its
own; copies are added until the file reaches --mb megabytes (10^6 bytes). Every cell is written quoted, as ncu does.
"""

from __future__ import annotations

import argparse
import csv
import io


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--mb", type=float, default=442)
    args = ap.parse_args()
    with open(args.src, newline="", encoding="utf-8") as fh:
        header, _, body = fh.read().partition("\n")
    rows = [r for r in csv.reader(io.StringIO(body)) if r]
    span = max(int(r[0]) for r in rows) + 1  # launch ids of one copy: 0 .. span - 1
    copies = 0
    with open(args.dst, "w", newline="", encoding="utf-8") as fh:
        fh.write(header + "\n")
        out = csv.writer(fh, quoting=csv.QUOTE_ALL, lineterminator="\n")
        while fh.tell() < args.mb * 1e6:
            out.writerows([str(int(r[0]) + copies * span), *r[1:]] for r in rows)
            copies += 1
        size = fh.tell()
    print(f"{args.dst}: {size / 1e6:.0f} MB, {copies} copies, {copies * span} launches")


if __name__ == "__main__":
    main()
