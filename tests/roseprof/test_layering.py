"""The layers docs/ARCHITECTURE.md names, checked on the source: the store (run/) and the drivers never import
each other or capture/ (which sits above both); none of them, nor render/, imports analysis/."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2] / "roseprof"
FORBIDDEN = {
    "run": ("roseprof.drivers", "roseprof.capture", "roseprof.analysis"),
    "drivers": ("roseprof.run", "roseprof.capture", "roseprof.analysis"),
    "capture": ("roseprof.analysis",),
    "render": ("roseprof.analysis",),
}


def imported(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports(layer):
    wrong = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / layer).rglob("*.py"))
        for name in imported(path)
        if name.startswith(FORBIDDEN[layer])
    ]
    assert not wrong, wrong


def test_no_module_over_400_lines_in_the_capture_layers():
    for layer in ("capture", "drivers", "run"):
        for path in (ROOT / layer).rglob("*.py"):
            assert len(path.read_text().splitlines()) <= 400, path
