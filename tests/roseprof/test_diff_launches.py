"""`roseprof diff` on two real H100 captures of the engine's decode step (nsys 2025.3): session 4's CUDA graphs
with plain launches, and issue 27's batch-1 step (GEMVs with the add + LayerNorm in their prologues, PDL). The
add + LayerNorm kernel ran 25 times a step before and once after: its time per step fell 97.7% because it runs
fewer times, not because it got faster, and the diff must say so."""

import json
from pathlib import Path

from tests.helpers import assert_fits, roseprof

DATA = Path(__file__).parent.parent / "data" / "nsys"


def _import(name: str, base: str, store: list) -> None:
    proc = roseprof(
        "import", DATA / f"{base}.sqlite", "--name", name, "--steplog", DATA / f"{base}.steplog.jsonl", *store
    )
    assert proc.returncode == 0, proc.stderr


def test_diff_words_a_kernel_launched_fewer_times_a_step_as_such(tmp_path):
    store = ["--traces-dir", tmp_path / "traces", "--dashboards-dir", tmp_path / "dashboards"]
    _import("graphs", "h100-nsys2025.3-roseinfer-graphs", store)
    _import("pdl", "h100-nsys2025.3-roseinfer-pdl", store)
    proc = roseprof("diff", "graphs", "pdl", "--json", *store)
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads(proc.stdout)["verdict"]
    kernels = {r["label"]: r for r in verdict["kernels"]}
    # the GPU's work per step (its busy time: on one stream every kernel's own time summed), a decision figure:
    # 403 -> 223 µs
    (work,) = (r for r in verdict["headline"] if r["metric"] == "gpu.kernel_p50_ns")
    assert work["word"] == "faster" and -50 < work["delta_pct"] < -40
    assert any(r["metric"] == "gpu.kernel_p50_ns" for r in verdict["decision"]["rows"])
    norm = kernels["add_layer_norm_kernel"]
    assert norm["word"] == "fewer launches" and norm["delta_pct"] < -90
    # 2 x 12 layers + ln_f, and ln_f alone, a decode step (a step here and there launched none: eager ones)
    assert 24 <= norm["launches_before"] <= 25 and 0.9 <= norm["launches_after"] <= 1
    # the embedding lookups run twice a step on both sides: their change keeps its faster/slower word
    (lookup,) = (r for label, r in kernels.items() if "indexSelectSmallIndex" in label)
    assert lookup["word"] == "faster" and "launches_before" not in lookup
    text = roseprof("diff", "graphs", "pdl", *store, env={"COLUMNS": "80"})
    assert text.returncode == 0, text.stderr
    assert "fewer launches (25→0.98)" in text.stdout
    assert "GPU work p50 -44.8%" in text.stdout.replace("\n", " ")
    # the first line names a kernel as its table does, by its base name: not the template's whole signature
    answer = text.stdout[text.stdout.index("after is faster") : text.stdout.index(" figure ")].replace(
        "\n", " "
    )
    assert "at::native::indexSelectSmallIndex -56.6% faster" in answer and "TensorInfo" not in answer
    assert_fits(text.stdout, 80)
