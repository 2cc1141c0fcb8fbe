"""roseprof reads the engine's names from roseinfer.names (no mirror): importing them, or any of roseprof's
reading side, loads no torch, and every switch the engine reads is declared there once."""

import re
import subprocess
import sys
from pathlib import Path

from roseinfer import env, names
from roseprof.workload import roseinfer as workload

ROOT = Path(__file__).parents[2]


def test_reading_runs_never_imports_torch():
    code = (
        "import sys\n"
        "import roseinfer.names, roseprof.cli, roseprof.api, roseprof.workload.roseinfer, roseprof.export.chrome\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_every_engine_switch_is_declared_in_names_once():
    """roseprof.workload lists every ROSEINFER_* / ROSELLM_* switch roseinfer reads (declared in names.py only)."""
    sources = {p: p.read_text() for p in (ROOT / "roseinfer").rglob("*.py")}
    spelled = {p.name for p, text in sources.items() if re.search(r'"(?:ROSEINFER|ROSELLM)_[A-Z_]+"', text)}
    assert spelled == {"names.py"}
    read = set(re.findall(r'"((?:ROSEINFER|ROSELLM)_[A-Z_]+)"', sources[ROOT / "roseinfer" / "names.py"]))
    assert read == set(workload.ENV_KEYS)
    assert env.read().torch_profile_schedule == workload.TORCH_PROFILE_SCHEDULE


def test_step_breakdown_is_the_engines():
    assert tuple(region for _, region in workload.STEP_BREAKDOWN) == names.STEP_BREAKDOWN


def test_default_gpu_command_is_the_fast_path_and_parses():
    from roseinfer.bench.common import build_parser, engine_config, parse

    cmd = workload.default_command("cuda")
    assert cmd[1:3] == ["-m", "roseinfer.benchmark_streaming"]
    assert "--paged-attn" in cmd and "--cuda-graph" in cmd
    cfg = engine_config(parse(build_parser("benchmark_streaming", "", "online"), cmd[3:]))
    assert cfg.device == "cuda" and cfg.paged_attn and cfg.cuda_graph
    assert "--cuda-graph" not in workload.default_command("cpu")
