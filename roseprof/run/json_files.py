"""A run folder's JSON files, read and written whole (written atomically: a reader never sees half a file). The
store (store.py), the normalised tables (tables.py) and the baselines (baselines.py) all write through here."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_json(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=1, allow_nan=False, default=_jsonable)
    os.replace(tmp, path)


def _jsonable(x):
    import numpy as np

    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def read_json(path: Path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)
