"""Where a server process's main thread spends a long stretch (issue 49's GPU truth: the first 8 requests of every
load on the H200 had all their tokens delivered at once, ~100 ms after sending, while the engine emitted them over
that time; docs/BENCHMARKS.md, session 23).

Through a sitecustomize.py that calls `install_from_env()` (API_LOOP_PROBE=DIR, scripts/ on PYTHONPATH), every
Python process of the server starts a thread that samples every thread's stack every 2 ms and writes to
DIR/stretches-PID.txt each stretch of 20 ms or more in which a thread's innermost frames did not change (not
counting waits: IDLE), and each in which the sampler itself could not run (the GIL held, or the process
descheduled); `at` is time.monotonic_ns, the clock of the server's stamps and of a load's `start_monotonic_ns`.

    python scripts/probe_api_loop.py DIR [N]     the latest N stretches of every process, with their stacks
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from pathlib import Path

TICK_S = 0.002
KEEP_IDLE = bool(
    os.environ.get("API_LOOP_PROBE_IDLE")
)  # waits too (IDLE): where a thread waited, and how long
LONG_NS = 20_000_000
DEPTH = int(os.environ.get("API_LOOP_PROBE_DEPTH", "8"))


def _key(frame) -> tuple[str, ...]:
    if frame is None:
        return ()
    return tuple(
        f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in traceback.extract_stack(frame)[-DEPTH:]
    )


IDLE = ("select", "wait", "poll", "_run", "accept", "_recv", "_recv_bytes", "recv_bytes", "read", "sleep")


def _sample(out: Path) -> None:
    """Every thread of the process: a stretch of LONG_NS or more in one place (its innermost frames unchanged),
    unless that place is a wait (IDLE), and every stretch in which this sampler could not run."""
    fh = open(out / f"stretches-{os.getpid()}.txt", "a", buffering=1)  # noqa: SIM115 - for the process's life
    fh.write(f"# pid {os.getpid()} argv {' '.join(sys.argv)[:200]}\n")
    me = threading.get_ident()
    last: dict[int, tuple[tuple[str, ...], int]] = {}
    names: dict[int, str] = {}
    last_t = time.monotonic_ns()
    while True:
        time.sleep(TICK_S)
        now = time.monotonic_ns()
        frames = sys._current_frames()
        if now - last_t > LONG_NS:
            fh.write(f"starved {(now - last_t) / 1e6:.1f} ms at {last_t}\n")
        for ident, frame in frames.items():
            if ident == me:
                continue
            key = _key(frame)
            was = last.get(ident)
            if was is None or was[0] != key:
                idle = bool(was) and bool(was[0]) and was[0][-1].split()[-1] in IDLE
                if was is not None and now - was[1] > LONG_NS and (KEEP_IDLE or not idle):
                    name = names.get(ident) or next(
                        (t.name for t in threading.enumerate() if t.ident == ident), "?"
                    )
                    names[ident] = name
                    fh.write(f"same {(now - was[1]) / 1e6:.1f} ms at {was[1]} thread {name}\n  "
                             + " <- ".join(reversed(was[0])) + "\n")  # fmt: skip
                last[ident] = (key, now)
        last_t = now


def install_from_env() -> None:
    out = os.environ.get("API_LOOP_PROBE")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        threading.Thread(target=_sample, args=(Path(out),), daemon=True, name="loop-probe").start()


def summarize(folder: Path, top: int = 12) -> None:
    for path in sorted(folder.glob("stretches-*.txt")):
        text = path.read_text()
        head = text.splitlines()[0] if text else path.name
        entries = [e for e in text.split("\n") if e.startswith(("starved", "same"))]
        print(f"{path.name}: {head}; {len(entries)} stretches >= {LONG_NS / 1e6:.0f} ms")
        blocks = text.split("\n")
        items = []
        for i, line in enumerate(blocks):
            if line.startswith(("starved", "same")):
                items.append(
                    (
                        int(line.split()[4]),
                        "\n".join(blocks[i : i + (1 if line.startswith("starved") else 2)]),
                    )
                )
        for _, block in sorted(items)[-top:]:  # the latest
            print("  " + block.replace("\n", "\n  "))


if __name__ == "__main__":
    summarize(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 12)
