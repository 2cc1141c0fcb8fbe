"""Which JSON parser for Kineto traces: time and peak memory of parsing one file and summing its kernel time.

Usage: /tmp/hta-venv/bin/python scripts/bench_json_parsers.py TRACE.json   (a venv with orjson, msgspec, ijson;
each parser runs in its own process so peak RSS is its own)
"""

import subprocess
import sys

CASES = {
    "json (stdlib)": "import json; d = json.load(open(P, 'rb')); ev = d['traceEvents']",
    "orjson": "import orjson; d = orjson.loads(open(P, 'rb').read()); ev = d['traceEvents']",
    "msgspec untyped": "import msgspec; d = msgspec.json.decode(open(P, 'rb').read()); ev = d['traceEvents']",
    "msgspec typed (whole file)": (
        "import msgspec\n"
        "class E(msgspec.Struct):\n cat: str = ''\n dur: float = 0.0\n"
        "class T(msgspec.Struct):\n traceEvents: list[E]\n"
        "ev = msgspec.json.decode(open(P, 'rb').read(), type=T).traceEvents"
    ),
    "ijson (yajl2_c, streamed)": "import ijson; ev = list(ijson.items(open(P, 'rb'), 'traceEvents.item', use_float=True))",
}
TAIL = "\nprint(sum((e['dur'] if isinstance(e, dict) else e.dur) for e in ev if (e.get('cat') if isinstance(e, dict) else e.cat) == 'kernel'))"


def main() -> None:
    path = sys.argv[1]
    for label, code in CASES.items():
        prog = f"import time; t = time.perf_counter(); P = {path!r}\n{code}{TAIL}\nprint(time.perf_counter() - t)"
        out = subprocess.run(
            ["/usr/bin/time", "-f", "%M", sys.executable, "-c", prog], capture_output=True, text=True
        )
        peak = int(out.stderr.strip().splitlines()[-1])  # KB, this process alone (GNU time)
        lines = out.stdout.split()
        if out.returncode:
            print(f"{label}: failed ({out.stderr.strip().splitlines()[-1]})")
            continue
        print(
            f"{label:28s} {float(lines[1]):6.2f} s  peak RSS {peak / 1024:7.0f} MB  kernel us {float(lines[0]):.0f}"
        )


if __name__ == "__main__":
    main()
