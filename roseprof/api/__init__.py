"""The library's verbs, what the CLI calls: capture and import (intake.py), compare (compare.py), and the views
of runs that renderers and exporters take (views.py). This package is where the drivers, the capture pipeline,
the analysis sections (sections.py), the run store and the renderers meet; each of them knows none of the others
beyond what docs/ARCHITECTURE.md's layering allows.

Each verb is imported from its module when first asked for (PEP 562): `roseprof show` needs the store and the
views, not the diff's statistics nor the capture pipeline, whose imports (and, where bytecode is not cached,
compiling them) were a tenth of its time on a 1M-kernel run (docs/BENCHMARKS.md, issue 43, session 23)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what the names are, for readers and type checkers; at run time __getattr__ imports them
    from roseprof.api.compare import diff_runs, load_run, resolve_side, set_baseline
    from roseprof.api.intake import capture, default_name, import_path, previous_run
    from roseprof.api.sections import analyse_trace, section_panels, summary_checks
    from roseprof.api.views import ensure_dashboard, export_chrome, open_store, run_view

# each verb, by the module (roseprof.api.<module>) that defines it
_MODULE_OF = {
    "diff_runs": "compare",
    "load_run": "compare",
    "resolve_side": "compare",
    "set_baseline": "compare",
    "capture": "intake",
    "default_name": "intake",
    "import_path": "intake",
    "previous_run": "intake",
    "analyse_trace": "sections",
    "section_panels": "sections",
    "summary_checks": "sections",
    "ensure_dashboard": "views",
    "export_chrome": "views",
    "open_store": "views",
    "run_view": "views",
}

__all__ = [
    "analyse_trace",
    "capture",
    "default_name",
    "diff_runs",
    "ensure_dashboard",
    "export_chrome",
    "import_path",
    "load_run",
    "open_store",
    "previous_run",
    "resolve_side",
    "run_view",
    "section_panels",
    "set_baseline",
    "summary_checks",
]


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
