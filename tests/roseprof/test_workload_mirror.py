"""roseprof's mirror of roseinfer (workload/roseinfer.py) agrees with the engine's own definitions."""

from roseinfer import env, tracing
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

    assert steplog.STEPLOG_VERSION == tracing.STEPLOG_VERSION
