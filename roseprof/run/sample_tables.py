"""diff_samples.npz: what each analysis section's `diff_prepare` made of a run, kept at import so that `roseprof
diff` reads a run's samples instead of rebuilding them from its trace (issue 43: reading the 1M-kernel run's 98 MB
gpu_ops.npz and rebuilding its per-kernel samples was 0.5 to 1 s a run, a diff's largest part).

A cache, never the run's truth: a run stored before the file existed, one written by other builders (another
`version`: analysis/samples.SAMPLES_VERSION) or a file that does not read back cleanly gives None, and the diff
builds the samples from the trace as before. A section whose samples are not of the shapes below (its own kinds of
samples, ncu's trace) is left out of the file, and the diff builds that section's from the trace.

Each section's samples are None, one array (a section's own samples), or {field: value} (a run_data.Shared) with
values None, an array, {key: array}, {key: (array, float)} or {key: float}; arrays are 1-D. The arrays of one field
are concatenated into one (bounds say where each key's begins), so the file holds a few dozen arrays however many
kernels the run has; the keys, the layout and the version are a JSON header inside the .npz (one file, written
uncompressed as the other tables are)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np

FILE = "diff_samples.npz"
_HEADER = "header"


def storable(samples: dict) -> dict:
    """{section: samples} of `samples` that this file can keep (the shapes above); the others are left out."""
    out = {}
    for name, made in samples.items():
        try:
            _encode(made, [])
        except TypeError:
            continue
        out[name] = made
    return out


def write(folder: Path, version: int, samples: dict) -> None:
    """{section name: its samples} (all `storable`) into the run folder, under the builders' `version`."""
    arrays: list[np.ndarray] = []
    header = {"version": version, "sections": {name: _encode(made, arrays) for name, made in samples.items()}}
    blob = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    np.savez(folder / FILE, **{_HEADER: blob}, **{f"a{i}": a for i, a in enumerate(arrays)})


def read(folder: Path, version: int) -> dict | None:
    """{section name: its samples} as written, or None where the run has no such file, its builders' version is
    another, or it does not read back whole (the diff then builds the samples from the trace)."""
    path = folder / FILE
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(z[_HEADER].tobytes())
            if not isinstance(header, dict) or header.get("version") != version:
                return None
            arrays = [z[f"a{i}"] for i in range(len(z.files) - 1)]
        sections = header["sections"]
        return {name: _decode(spec, arrays) for name, spec in sections.items()}
    except (
        OSError,
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        AttributeError,
        EOFError,
        zipfile.BadZipFile,
    ):
        return None


def _add(arrays: list, a: np.ndarray) -> int:
    arrays.append(a)
    return len(arrays) - 1


def _array(value) -> np.ndarray:
    if not isinstance(value, np.ndarray) or value.ndim != 1 or value.dtype.hasobject:
        raise TypeError("not a 1-D array")
    return value


def _encode(made, arrays: list):
    """A section's samples as a JSON-able spec, its arrays appended to `arrays`; TypeError where not storable."""
    if made is None:
        return None
    if isinstance(made, np.ndarray):
        return {"own": _add(arrays, _array(made))}
    if not isinstance(made, dict):
        raise TypeError("not storable samples")
    return {"shared": {str(f): _encode_field(v, arrays) for f, v in made.items()}}


def _encode_field(value, arrays: list):
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        return {"array": _add(arrays, _array(value))}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise TypeError("not storable samples")
    items = list(value.values())
    keys = list(value)
    if all(isinstance(v, float) for v in items):  # {key: float}
        return {"floats": keys, "values": _add(arrays, np.asarray(items, dtype=np.float64))}
    pairs = all(isinstance(v, tuple) and len(v) == 2 and isinstance(v[1], float) for v in items)
    parts = [_array(v[0] if pairs else v) for v in items]
    if len({p.dtype for p in parts}) > 1:
        raise TypeError("arrays of different types under one field")
    bounds = np.cumsum([0] + [len(p) for p in parts], dtype=np.int64)
    spec = {
        "keys": keys,
        "values": _add(arrays, np.concatenate(parts) if parts else np.zeros(0)),
        "bounds": _add(arrays, bounds),
    }
    if pairs:
        spec["outside"] = _add(arrays, np.asarray([v[1] for v in items], dtype=np.float64))
    return spec


def _decode(spec, arrays: list):
    if spec is None:
        return None
    if "own" in spec:
        return arrays[spec["own"]]
    return {field: _decode_field(v, arrays) for field, v in spec["shared"].items()}


def _decode_field(spec, arrays: list):
    if spec is None:
        return None
    if "array" in spec:
        return arrays[spec["array"]]
    if "floats" in spec:
        values = arrays[spec["values"]].tolist()
        if len(values) != len(spec["floats"]):
            raise ValueError("keys and values differ in number")
        return dict(zip(spec["floats"], values))
    keys, values, bounds = spec["keys"], arrays[spec["values"]], arrays[spec["bounds"]]
    if (
        len(bounds) != len(keys) + 1
        or bounds[0] != 0
        or bounds[-1] != len(values)
        or np.any(np.diff(bounds) < 0)
    ):
        raise ValueError("bounds do not split the values")
    parts = np.split(values, bounds[1:-1])
    if "outside" not in spec:
        return dict(zip(keys, parts))
    outside = arrays[spec["outside"]].tolist()
    if len(outside) != len(keys):
        raise ValueError("keys and outside sums differ in number")
    return {k: (p, o) for k, p, o in zip(keys, parts, outside)}
