"""What a person reads in an 80-, 100- or 120-column terminal: tables that fit, names that stay apart, run ids
whole, commands cut at a word, and sentences that say what is true."""

import io

import pytest
from rich.console import Console

from roseprof import api
from roseprof.render import commands, text
from roseprof.render.terminal import print_runs, print_summary
from roseprof.render.terminal_diff import print_diff
from roseprof.run.store import RunStore
from tests.helpers import DATA, assert_fits

WIDTHS = (80, 100, 120)
GPU = DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.sqlite"
GPU_LOG = DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.steplog.jsonl"
CPU = DATA / "nsys" / "cpu-nsys2022.4-nvtx.sqlite"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = RunStore(tmp_path_factory.mktemp("terminal") / "traces")
    api.import_path(s, str(GPU), "before", str(GPU_LOG))
    api.import_path(s, str(GPU), "after", str(GPU_LOG))
    api.import_path(s, str(CPU), "a-cpu-run-with-a-longish-name", None)
    return s


def render(width, fn, *args) -> str:
    out = io.StringIO()
    fn(Console(file=out, width=width, color_system=None, force_terminal=False), *args)
    return out.getvalue()


@pytest.mark.parametrize("width", WIDTHS)
def test_summary_fits_and_keeps_names_apart(store, width):
    run = store.resolve("after")
    out = render(width, print_summary, run, run.summary())
    assert_fits(out, width)
    # The two block-table regions differ only at their end: both ends survive shortening.
    assert "h2d_block_tables" in out and "build_block_tables" in out
    # Kernel names with brackets are text, not markup (rich would eat "[lambda(int) (instance 1)]").
    assert "index_elementwise_kernel" in out


@pytest.mark.parametrize("width", WIDTHS)
def test_a_cpu_run_has_no_empty_gpu_columns(store, width):
    run = store.resolve("a-cpu-run-with-a-longish-name")
    out = render(width, print_summary, run, run.summary())
    assert_fits(out, width)
    assert "time per region" in out and "GPU" not in out


@pytest.mark.parametrize("width", WIDTHS)
def test_ls_never_cuts_a_run_id(store, width):
    runs = store.runs()
    for r in runs:  # a long command, as a capture records it
        r.manifest["command"] = ["/usr/bin/python3", "-m", "roseinfer.benchmark_streaming"] + ["--flag"] * 30
    out = render(width, print_runs, runs)
    assert_fits(out, width)
    for r in runs:
        assert r.id in out
        # The name, which diff and baseline take, beside it: whole or shortened in the middle.
        (row,) = [line.split() for line in out.splitlines() if r.id in line]
        head, _, tail = row[1].partition("…")
        name = r.manifest["name"]
        assert row[1] == name or (name.startswith(head) and name.endswith(tail)), row
        # whole wherever the id leaves it room (80 columns beside these 51-character ids do not)
        assert row[1] == name or width == 80, row
    # The command: what tells the runs apart (issue 45), where there is room beside the whole name (up to 100
    # columns there is none beside these 51-character ids); the same long command everywhere is its program's
    # name, whole or cut with an ellipsis.
    full = "benchmark_streaming"
    commands = [line[line.index("bench") :].rstrip() for line in out.splitlines() if "bench" in line]
    assert len(commands) == (0 if width <= 100 else len(runs))
    for c in commands:
        assert c == full or (c.endswith("…") and full.startswith(c[:-1]) and len(c) >= 10), c


@pytest.mark.parametrize("width", WIDTHS)
def test_diff_leads_with_the_verdict(store, width):
    result = api.diff_runs(store, ["before"], ["after"], 5.0, None, False).result
    out = render(width, print_diff, result, 25)
    assert_fits(out, width)
    lines = out.splitlines()
    assert lines[0].startswith("before  ") and lines[1].startswith("after   ")
    # One run a side: the line after the sides says what its intervals cannot see (issue 21), then the answer.
    assert lines[2].startswith("one run a side: the intervals see only the variation inside each run")
    answer = next(i for i, line in enumerate(lines) if line.startswith("no clear change"))
    assert "--repeat 3" in " ".join(lines[2:answer])
    assert lines[answer] == "no clear change between before and after (every interval includes 0)"
    head = "\n".join(lines[:18])
    for figure in ("step p50", "step p99", "ITL p50", "ITL p99", "TTFT p50", "throughput"):
        assert figure in head, figure
    assert "too few samples" in head  # 71 steps: p99 is not tested
    assert "15.75 ms" in head  # units a person reads, not 15,746,816 ns
    assert "gate: no regression" in out


def test_shorten_middle_keeps_the_distinguishing_tail():
    name = "roseinfer.decode_step_sessions.build_block_tables"
    assert text.shorten_middle(name, 36) == "roseinfer.decode_…build_block_tables"
    assert text.shorten_middle(name, 100) == name
    for width in (19, 24, 30):
        a = text.shorten_middle(name, width)
        b = text.shorten_middle("roseinfer.decode_step_sessions.h2d_block_tables", width)
        assert len(a) <= width and len(b) <= width and a != b


def test_a_short_name_leaves_its_statistic_whole():
    """A region name in a room too narrow even for its last component keeps its last characters, so that the
    statistic beside it stays whole (a clean-clone CI run's table cut it to `…build_block_tables·norm me…`)."""
    from roseprof.render.terminal_diff import _cut_statistic, short_names

    name = "decode_step_sessions.build_block_tables"
    room, what = 28, "norm mean"
    width = room - len(what) - 3  # what print_diff gives short_names: the room less its widest statistic
    short = short_names([name, "kv.append_token"], width)
    assert short[name] == "…ld_block_tables" and short["kv.append_token"] == "kv.append_token"
    assert _cut_statistic(f"{short[name]} · {what}", room) == "…ld_block_tables · norm mean"
    wide = short_names([name], 30)  # room for whole components: the trailing ones that fit
    assert wide[name] == "…build_block_tables"


def test_command_is_cut_at_a_word():
    argv = ["/work/.venv/bin/python", "-m", "roseinfer.benchmark_streaming", "--num-requests", "64"]
    assert commands.command(argv, 200) == "python -m roseinfer.benchmark_streaming --num-requests 64"
    assert commands.command(argv, 50) == "python -m roseinfer.benchmark_streaming…"


def test_rollover_sentence_says_what_is_true():
    def steps(roll_mean, norm_mean, excess):
        return {
            "rollover": {"count": 6, "mean_ns": roll_mean},
            "normal": {"count": 394, "mean_ns": norm_mean},
            "rollover_excess": {"region": "roseinfer.kv.append_token", "mean_ns": excess},
        }

    slower = text.rollover_sentence(steps(3e6, 2e6, 0.8e6))
    assert slower.startswith("rollover steps are slower by 1.00 ms") and "mostly in roseinfer.kv" in slower
    faster = text.rollover_sentence(steps(2e6, 3e6, 0.1e6))
    assert faster.startswith("rollover steps are faster by 1.00 ms") and "slower" not in faster
    assert "6 rollover vs 394 normal steps" in faster
    assert "mostly" not in text.rollover_sentence(steps(2e6, 3e6, -1e3))


def test_new_and_vanished_instantiations_of_one_template_stay_apart():
    # A GPU A/B (session 26, H200): the fused MLP's <__half, float> instantiation vanished and its <__half, __half>
    # one came, and two instantiations of the fused attention vanished; by their base names alone the lines read
    # "fused_attn_kernel, fused_mlp_kernel, fused_attn_kernel" and the MLP kernel as both new and vanished.
    from roseprof.render.terminal_diff import kernel_change_lines

    ns = "void (anonymous namespace)::"
    mlp = (
        ns
        + "fused_mlp_kernel<__half, {}, 768, true>(const __half *, const {} *, float *, unsigned long long *)"
    )
    attn = ns + "fused_attn_kernel<{}, 768, true>(const __half *, const {} *, const long *, float *)"
    v = {
        "new_kernels": [mlp.format("__half", "__half"), "split_decode_kernel"],
        "vanished_kernels": [
            attn.format("float", "float"),
            mlp.format("float", "float"),
            attn.format("__half", "__half"),
        ],
    }
    new, gone = kernel_change_lines(v)
    new_names, gone_names = new.split(": ", 1)[1].split(", "), gone.split(": ", 1)[1].split(", ")
    assert new_names[1] == "split_decode_kernel"
    assert len(set(new_names + gone_names)) == 5  # five kernels, five labels
    assert all(len(n) <= 60 for n in new_names + gone_names)
    assert {n.split(" #")[0] for n in gone_names} == {"fused_attn_kernel", "fused_mlp_kernel"}
    assert new_names[0].startswith("fused_mlp_kernel #")
