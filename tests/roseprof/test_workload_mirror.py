"""roseprof's mirror of roseinfer (workload/roseinfer.py) agrees with the engine's own definitions."""

from roseinfer import env, tracing
from roseinfer import steplog as engine_steplog
from roseprof.workload import roseinfer as mirror


def test_region_names_agree():
    assert mirror.REGION_NAMES == tracing.REGION_NAMES
    for name in (
        "DECODE_STEP",
        "BUILD_BLOCK_TABLES",
        "H2D_BLOCK_TABLES",
        "MODEL_FORWARD",
        "KV_APPEND",
        "SAMPLE",
        "PREFILL",
        "SCHEDULER_STEP",
        "EMBEDDING",
        "ATTENTION",
        "LAYERNORM",
        "MLP",
        "LM_HEAD",
        "ARGMAX",
        "RESERVE_BLOCKS_AHEAD",
        "ALLREDUCE",
    ):
        assert getattr(mirror, name) == getattr(tracing, name)


def test_step_breakdown_agrees():
    assert tuple(region for _, region in mirror.STEP_BREAKDOWN) == tracing.STEP_BREAKDOWN


def test_environment_keys_agree():
    assert mirror.ENV_KEYS == env.KEYS
    assert (mirror.NVTX_ENV, mirror.RECORD_FUNCTION_ENV, mirror.STEP_LOG_ENV) == (
        env.ROSEINFER_NVTX,
        env.ROSEINFER_RECORD_FUNCTION,
        env.ROSEINFER_STEP_LOG,
    )


def test_step_log_version_agrees():
    from roseprof.workload import steplog

    assert steplog.STEPLOG_VERSION == engine_steplog.STEPLOG_VERSION


def test_default_gpu_command_is_the_fast_path_and_parses():
    from roseinfer.bench.common import build_parser, engine_config, parse

    cmd = mirror.default_command("cuda")
    assert cmd[1:3] == ["-m", "roseinfer.benchmark_streaming"]
    assert "--paged-attn" in cmd and "--cuda-graph" in cmd
    cfg = engine_config(parse(build_parser("benchmark_streaming", "", "online"), cmd[3:]))
    assert cfg.device == "cuda" and cfg.paged_attn and cfg.cuda_graph and cfg.overlap_decode
    assert "--cuda-graph" not in mirror.default_command("cpu")
