"""Kernel names across tools, on real names: what torch.profiler left mangled, demangled (roseprof/drivers/demangle.py),
and one name matched however a tool spells it (roseprof/kernel_names.py).

The fixtures: the engine at batch 64 (its CUTLASS GEMMs) under roseprof torch on an H200
(tests/data/torch/h200-torch2.11-roseinfer-cutlass.json.gz), ncu 2025.3's names of the same command's first 600
launches exported from one report with each kernel-name base (h200-ncu2025.3-roseinfer-names-raw.csv.xz and
-mangled-raw.csv.xz: the same IDs in the same order), and every nsys export here with both a mangled and a demangled
name per kernel (nsys 2024-2025: NVIDIA's spelling, against GNU's that c++filt gives for the mangled one)."""

import csv
import gzip
import io
import json
import lzma
import re
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from roseprof.drivers.demangle import demangle
from roseprof.drivers.torch.reader import read_kineto
from roseprof.errors import RoseprofError
from roseprof.kernel_names import _split, base_name, key, name_pattern, names_pattern
from roseprof.model import KERNEL, MAX_NAME_CHARS, cut_name, uncut
from roseprof.render.kernel_labels import kernel_name, kernel_short, kernel_tag
from tests.helpers import DATA

TORCH = DATA / "torch" / "h200-torch2.11-roseinfer-cutlass.json.gz"
NCU_NAMES = DATA / "ncu" / "h200-ncu2025.3-roseinfer-names-raw.csv.xz"
NCU_MANGLED = DATA / "ncu" / "h200-ncu2025.3-roseinfer-names-mangled-raw.csv.xz"


def ncu_names(path: Path) -> dict[int, str]:
    """Each profiled launch's kernel name by its ID (the raw page's second row is units: no ID)."""
    rows = csv.DictReader(io.StringIO(lzma.open(path, "rt").read()))
    return {int(r["ID"]): r["Kernel Name"] for r in rows if r["ID"].isdigit()}


def ncu_symbols() -> dict[str, str]:
    """ncu's demangled spelling of each mangled name it profiled (extern "C" kernels are their own)."""
    spelt, mangled = ncu_names(NCU_NAMES), ncu_names(NCU_MANGLED)
    assert spelt.keys() == mangled.keys() and len(spelt) == 600
    return {mangled[i]: spelt[i] for i in spelt}


def nsys_symbols(path: Path) -> dict[str, str]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    cols = {r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
    if not {"mangledName", "demangledName"} <= cols:
        return {}
    rows = con.execute(
        "SELECT DISTINCT m.value, d.value FROM CUPTI_ACTIVITY_KIND_KERNEL k"
        " JOIN StringIds m ON m.id = k.mangledName JOIN StringIds d ON d.id = k.demangledName"
    ).fetchall()
    con.close()
    return dict(rows)


# the nsys exports with a mangled and a demangled name a kernel (the CPU captures of nsys 2022.4 have no kernels)
NSYS = [p for p in sorted((DATA / "nsys").rglob("*.sqlite")) if nsys_symbols(p)]


def spellings(symbols: dict[str, str]) -> list[tuple[str, str]]:
    """(a tool's spelling, GNU's) of each symbol: GNU's by demangling the mangled name."""
    mangled = list(symbols)
    gnu, warning = demangle(mangled)
    assert warning is None
    return [(symbols[m], g) for m, g in zip(mangled, gnu)]


def kernel_names(trace) -> list[str]:
    o = trace.ops
    return [trace.names[i] for i in sorted(set(o.name[o.kind == KERNEL].tolist()))]


def test_torch_left_the_cutlass_gemms_mangled_and_the_reader_demangles_them():
    raw = json.load(gzip.open(TORCH))["traceEvents"]
    left = {e["name"] for e in raw if e.get("cat") == "kernel" and e["name"].startswith("_Z")}
    assert len(left) == 3 and all(n.startswith("_ZN7cutlass13device_kernel") for n in left)
    trace = read_kineto(TORCH)
    names = kernel_names(trace)
    assert not any(n.startswith("_Z") for n in names) and trace.warnings == []
    gemms = [
        n for n in names if n.startswith("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<")
    ]
    assert len(gemms) == 3
    # ncu demangled the same symbols its own way: each name the reader gave matches ncu's spelling of its symbol
    spelt = ncu_symbols()
    for mangled, gnu in zip(*[sorted(left), demangle(sorted(left))[0]]):
        assert gnu in gemms and re.match(name_pattern(gnu), spelt[mangled])


def test_a_name_cxxfilt_cannot_read_stays_and_says_so():
    names, warning = demangle(["_Zgarbage", "add_layer_norm_kernel", "_Z1av _Z1bv"])
    assert names == ["_Zgarbage", "add_layer_norm_kernel", "_Z1av _Z1bv"]  # the last: two words, not one name
    assert warning == "1 kernel name(s) are left mangled: c++filt could not demangle them"
    assert demangle(["paged_attn_kernel"]) == (["paged_attn_kernel"], None)


def test_without_cxxfilt_the_names_stay_mangled_with_a_warning(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    trace = read_kineto(TORCH)
    assert sum(n.startswith("_ZN7cutlass") for n in kernel_names(trace)) == 3
    (warning,) = trace.warnings
    assert warning.startswith("3 kernel name(s) are left mangled (`_ZN7cutlass13device_kernel")
    assert warning.endswith("needs c++filt (binutils), which is not on PATH")


@pytest.mark.parametrize(
    "symbols",
    [pytest.param(ncu_symbols, id="ncu2025.3")]
    + [pytest.param(lambda p=p: nsys_symbols(p), id=p.name) for p in NSYS],
)
def test_a_kernel_matches_itself_in_every_spelling_and_no_other_kernel(symbols):
    pairs = spellings(symbols())
    # one key, so one tag, whichever tool spelt the kernel; another kernel's is another
    assert all(key(spelt) == key(gnu) and kernel_tag(spelt) == kernel_tag(gnu) for spelt, gnu in pairs)
    assert len({key(spelt) for spelt, _ in pairs}) == len(pairs)
    for i, (spelt, gnu) in enumerate(pairs):
        for source in (spelt, gnu):
            pattern = re.compile(name_pattern(source))
            assert pattern.match(spelt) and pattern.match(gnu), source
            others = [n for j, pair in enumerate(pairs) if j != i for n in pair]
            assert not any(pattern.match(n) for n in others), source


def test_the_torch_runs_top_kernels_are_the_ones_ncu_profiles():
    trace = read_kineto(TORCH)
    o = trace.ops
    busy = Counter()
    for name, start, end in zip(o.name[o.kind == KERNEL], o.start[o.kind == KERNEL], o.end[o.kind == KERNEL]):
        busy[trace.names[name]] += end - start
    top = [n for n, _ in busy.most_common(6)]
    pattern = re.compile(names_pattern(top))
    spelt = set(ncu_symbols().values())
    chosen = {n for n in spelt if pattern.match(n)}
    assert len(spelt) == 17 and len(chosen) == 6
    # ncu shortens qualifiers and writes `<unnamed>` for GNU's `(anonymous namespace)`
    assert Counter(base_name(n).split("::")[-1] for n in chosen) == Counter(
        base_name(n).split("::")[-1] for n in top
    )


def test_past_the_limit_the_longest_names_keep_a_prefix_of_their_atoms():
    trace = read_kineto(TORCH)
    names = kernel_names(trace)
    whole = names_pattern(names)
    assert len(whole) > 40_000  # three CUTLASS GEMMs: about 15,000 characters each
    short = names_pattern(names, limit=20_000)
    assert len(short) <= 20_000
    assert all(re.match(short, n) for n in names)
    assert all(re.match(short, n) for n in ncu_symbols().values() if re.match(whole, n))


@pytest.mark.parametrize(
    "name, other",
    [
        ("void k<int>(int)", "void k<unsigned int>(int)"),
        ("void k<int>(int)", "void k<short int>(int)"),
        ("void k<int>(int)", "void k<int *>(int)"),
        ("void k<int>(int)", "void k<const int &>(int)"),
        ("void k<char>(int)", "void k<signed char>(int)"),
        ("void k<>(int)", "void k<float>(int)"),
        ("void k<4>(int)", "void k<-4>(int)"),
        ("void k<void const*>(int)", "void k<float>(int)"),
        # odd names, each against its neighbour
        ("void k<ns::f()::{lambda()#1}>(int)", "void k<ns::f()::{lambda(float)#1}>(int)"),
        ("bool operator< <int>(int, int)", "bool operator< <long>(int, int)"),
        ("void k<int Foo::*>(int)", "void k<int>(int)"),
        ("void k<void (*)(int)>(int)", "void k<void>(int)"),
    ],
)
def test_another_instantiation_is_another_kernel(name, other):
    # pairs no fixture holds side by side: what the spelling allowed between atoms must not let through
    assert re.match(name_pattern(name), name) and re.match(name_pattern(other), other)
    assert not re.match(name_pattern(name), other) and not re.match(name_pattern(other), name)


@pytest.mark.parametrize(
    "name",
    [
        "bool operator< <int>(int, int)",
        "void operator<<(int)",
        "void f(int",  # cut short
        "void k<1.5f>(int)",
        "void k<0x1F>()",
        "copy_blocked[v1,cw51](Array<long long, 1, C, mutable, aligned>, long long)",  # numba's
        "add_layer_norm_kernel",
    ],
)
def test_odd_names_match_themselves(name):
    assert re.match(name_pattern(name), name)


def test_an_empty_name_matches_no_kernel():
    for blank in ("", "   "):
        assert not any(re.match(name_pattern(blank), n) for n in ("add_layer_norm_kernel", "void foo(int)"))


def test_a_name_the_model_cut_matches_by_what_it_kept():
    gemm = next(n for n in kernel_names(read_kineto(TORCH)) if n.startswith("void cutlass::device_kernel<"))
    inner = gemm[len("void cutlass::device_kernel<") : gemm.rindex(">(")]
    long = "void outer<" + ", ".join([inner] * 8) + ">(int)"
    cut = cut_name(long)
    assert len(long) > MAX_NAME_CHARS and cut != long
    assert re.match(name_pattern(cut), long) and re.match(names_pattern([cut]), long)
    assert base_name(cut) == "outer"


def test_too_many_names_for_a_command_line_say_so():
    names = [f"void k{i}<{i}>(int)" for i in range(3000)]
    with pytest.raises(
        RoseprofError, match=r"the 3000 kernels make a name filter of .* give fewer \(--top\)"
    ):
        names_pattern(names, limit=10_000)


def test_a_torch_run_and_an_ncu_run_tag_the_same_gemms_alike():
    torch_gemms = [n for n in kernel_names(read_kineto(TORCH)) if "cutlass::device_kernel" in n]
    ncu_gemms = {n for n in ncu_symbols().values() if "cutlass::device_kernel" in n}
    assert len(torch_gemms) == len(ncu_gemms) == 3
    assert {kernel_tag(n) for n in torch_gemms} == {kernel_tag(n) for n in ncu_gemms}


def test_a_function_that_is_no_template_keeps_its_parameters_in_its_key():
    # overloads differ by their parameters only, which GNU and NVIDIA write alike but for spelling
    assert key("void k(float const*)") == key("void k(const float *)")
    assert key("void k(float*)") != key("void k(double*)")


def test_a_near_miss_of_a_long_name_is_answered_at_once():
    # the GNU spelling of a real kernel with a dozen parameter lists inside its name (torch's normal_ kernel in the
    # matmul capture), against the same name with its last lambda's number changed: a lazy `\(.*?\)` per list
    # tried every way to stretch each (75 s in Python's engine; Boost's ran out of stack)
    symbols = nsys_symbols(DATA / "nsys" / "h100-nsys2025.3-matmul-nvtx.sqlite")
    mangled = next(m for m, d in symbols.items() if "distribution_elementwise_grid_stride_kernel" in d)
    (gnu,), _ = demangle([mangled])
    assert gnu.count("(") >= 12
    params = _split(gnu)[1]  # its own parameter list, which the pattern takes as any
    body = gnu[: len(gnu) - len(params)]
    at = body.rindex(")#1}")  # the template's last lambda
    sibling = body[:at] + ")#2}" + body[at + 4 :] + params
    assert sibling != gnu and re.match(name_pattern(gnu), gnu)
    assert not re.match(name_pattern(gnu), sibling)
    # the same shape in ncu's spelling: 30 lambdas, the last of another instance
    many = "void ns::k<" + ", ".join(["ns::f(int)::[lambda() (instance 1)]"] * 30) + ">(int)"
    other = many[: many.rindex("instance 1")] + "instance 2)]>(int)"
    assert re.match(name_pattern(many), many) and not re.match(name_pattern(many), other)


def test_two_kernels_of_one_key_get_their_names_tags():
    from roseprof.render.kernel_labels import kernel_labels

    # a qualifier inside a template argument is spelling to the key (ncu drops some), not to the kernel
    a, b = "void ns::k<a::Foo>(int)", "void ns::k<b::Foo>(int)"
    assert key(a) == key(b)
    labels = kernel_labels([a, b, "void ns::k<int>(int)"])
    assert len({label.rsplit(" #", 1)[1] for label in labels}) == 3


def test_a_kernel_whose_return_type_is_a_templates_member_is_named_by_its_function():
    """cuBLAS's GEMV returns `std::enable_if<...>::type`: its base name is the function after that type, not the
    first words of the name (which every such kernel shares)."""
    (name,) = [
        n
        for n in nsys_symbols(DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.sqlite").values()
        if "gemvx" in n
    ]
    assert name.startswith("std::enable_if<")
    assert base_name(name) == "internal::gemvx::kernel"
    assert kernel_short(name) == "internal::gemvx::kernel"
    assert kernel_name(name, 40) == "internal::gemvx::kernel"


def test_a_label_is_never_empty_nor_a_cut_names_whole_parameter_list():
    """`<unknown>` has no function before its `<`: it keeps its name. A name the model cut (past MAX_NAME_CHARS)
    inside its parameters has no `)` for the return type's split to find: its label is still its function."""
    long = cut_name("void foo(" + ", ".join(["const float *"] * 2000) + ")")
    assert uncut(long)[1]
    for name, label in (("<unknown>", "<unknown>"), ("<lambda>", "<lambda>"), (long, "foo")):
        assert kernel_short(name) == label and kernel_name(name, 30) == label
