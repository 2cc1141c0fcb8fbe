"""Ways to damage real Kineto JSON and ncu CSV files, for the fuzz suite (test_fuzz.py): each mutation takes a copy
of a real file and a seeded random.Random, changes the copy in place and says what it did.

The kinds are the ones that broke readers in the robustness run of issue 23 (deep nesting, a duplicated
traceEvents key, huge names, text where numbers belong, a byte-order mark or UTF-16, rows cut short) and their
neighbours."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

DEEP = 100_000
WRONG_JSON = [None, "x", "0x7f3a00000007", "", -1, 0, 2**64 + 1, 1.5, 1e308, -1e308, [], {}, True, [1, [2]],
              "\u202e\x1b[2J", "n" * 70_000]  # fmt: skip
EVENT_KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args"]
ARG_KEYS = ["correlation", "device", "stream", "name"]


def _load(path: Path) -> tuple[str, bool]:
    raw = path.read_bytes()
    gz = raw[:2] == b"\x1f\x8b"
    return (gzip.decompress(raw) if gz else raw).decode("utf-8", "replace"), gz


def _save(path: Path, text: str, gz: bool) -> None:
    data = text.encode("utf-8", "surrogatepass")
    path.write_bytes(gzip.compress(data, compresslevel=1) if gz else data)


def kineto_values(path: Path, rng: random.Random) -> str:
    """1, 3 or 50 events given a wrong value in one field (or in one field of their args), a field deleted."""
    text, gz = _load(path)
    doc = json.loads(text)
    events = doc["traceEvents"]
    n = rng.choice([1, 3, 50])
    key = rng.choice(EVENT_KEYS + [f"args.{k}" for k in ARG_KEYS])
    value = rng.choice(WRONG_JSON + ["<deleted>"])
    for i in rng.sample(range(len(events)), min(n, len(events))):
        target, k = events[i], key
        if key.startswith("args."):
            target, k = events[i].setdefault("args", {}), key[5:]
            if not isinstance(target, dict):
                continue
        if value == "<deleted>":
            target.pop(k, None)
        else:
            target[k] = value
    _save(path, json.dumps(doc), gz)
    return f"{n} events: {key} = {str(value)[:20]}"


def kineto_structure(path: Path, rng: random.Random) -> str:
    """Nesting 100k deep (in an event's args, in the header), a second traceEvents array, a 2 MB or 8 MB name,
    the array's end cut, traceEvents renamed or made an object."""
    text, gz = _load(path)
    doc = json.loads(text)
    how = rng.choice(["deep args", "deep header", "two arrays", "huge name", "cut array", "renamed",
                      "object", "bare array"])  # fmt: skip
    if how == "deep args":
        e = rng.choice(doc["traceEvents"])
        e["args"] = "@@DEEP@@"
        out = json.dumps(doc).replace(
            '"@@DEEP@@"', rng.choice(["[" * DEEP + "]" * DEEP, '{"a":' * DEEP + "1" + "}" * DEEP])
        )
    elif how == "deep header":
        doc["deep"] = "@@DEEP@@"
        out = json.dumps(doc).replace('"@@DEEP@@"', "[" * DEEP + "]" * DEEP)
    elif how == "two arrays":
        second = json.dumps(doc["traceEvents"][: rng.choice([0, 5, 500])])
        out = json.dumps(doc).rstrip()[:-1] + f', "traceEvents": {second}}}'
    elif how == "huge name":
        rng.choice(doc["traceEvents"])["name"] = "n" * rng.choice([2 << 20, 8 << 20])
        out = json.dumps(doc)
    elif how == "cut array":
        out = json.dumps(doc)
        out = out[: out.index('"traceEvents"') + rng.randrange(20, 2000)]
    elif how == "renamed":
        doc["traceEventz"] = doc.pop("traceEvents")
        out = json.dumps(doc)
    elif how == "object":
        doc["traceEvents"] = {str(i): e for i, e in enumerate(doc["traceEvents"][:100])}
        out = json.dumps(doc)
    else:
        out = json.dumps(doc["traceEvents"])
    _save(path, out, gz)
    return how


def csv_encoding(path: Path, rng: random.Random) -> str:
    """The same export re-saved as Windows tools do: a UTF-8 byte-order mark or UTF-16, with CRLF or not."""
    text = path.read_text(encoding="utf-8")
    codec = rng.choice(["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be"])
    newline = rng.choice(["\n", "\r\n"])
    path.write_bytes(text.replace("\n", newline).encode(codec))
    return f"{codec} {newline!r}"


def csv_rows(path: Path, rng: random.Random) -> str:
    """Lines cut at a random character, dropped, duplicated, or a cell given a wrong value."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    how = rng.choice(["cut", "drop", "duplicate", "cell", "header cell"])
    for _ in range(rng.choice([1, 3])):
        i = rng.randrange(1 if how != "header cell" else 0, len(lines))
        if how == "cut":
            lines[i] = lines[i][: rng.randrange(len(lines[i]))] + "\n"
        elif how == "drop":
            del lines[i]
        elif how == "duplicate":
            lines.insert(i, lines[i])
        else:
            cells = lines[i].rstrip("\n").split('","')
            j = rng.randrange(len(cells))
            cells[j] = rng.choice(["", "n/a", "1e999", "-1", "x", "1,2,3", '"', "9" * 400, "\x00"])
            lines[i] = '","'.join(cells) + "\n"
    path.write_text("".join(lines), encoding="utf-8")
    return how
