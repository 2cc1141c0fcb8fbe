"""The library's verbs, what the CLI calls: capture and import (intake.py), compare (compare.py), and the views
of runs that renderers and exporters take (views.py). This package is where the drivers, the capture pipeline,
the analysis sections (sections.py), the run store and the renderers meet; each of them knows none of the others
beyond what docs/ARCHITECTURE.md's layering allows."""

from roseprof.api.compare import diff_runs, load_run, resolve_side, set_baseline
from roseprof.api.intake import capture, default_name, import_path, previous_run
from roseprof.api.sections import analyse_trace, section_panels, summary_checks
from roseprof.api.views import ensure_dashboard, export_chrome, open_store, run_view

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
