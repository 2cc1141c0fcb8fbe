"""One kernel's name as every tool spells it: a regular expression for ncu's `--kernel-name regex:`, and a key
that a kernel's tag hashes (render/kernel_labels.kernel_tag).

`roseprof ncu --from RUN` names the run's top kernels to ncu, but each tool spells a C++ kernel its own way:

    torch (GNU):   void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)
    nsys 2025.3:   void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>, std::array<char *, (unsigned long)1>>(int, T2, T3)
    ncu 2025.3:    void at::vectorized_elementwise_kernel<4, at::FillFunctor<float>, std::array<char *, 1>>(int, T2, T3)

(tests/data/ncu/h200-ncu2025.3-roseinfer-names-*.csv.xz hold ncu's spellings of the engine's kernels). What they
share is a sequence of atoms: each identifier that is not a qualifier (`vectorized_elementwise_kernel`,
`FillFunctor`, `float`), each number and boolean by its value, and the template arguments' structure (`<`, `,`,
`>`, `*`, `&`). Everything else is spelling: qualifiers, which ncu shortens (`at::native::` -> `at::`); casts on literals
(`(int)4`) and their suffixes (`1ul`); spaces; `const` on either side of a type; `(anonymous namespace)` or
`<unnamed>`; a lambda's `{lambda()#1}` or `[lambda() (instance 1)]`; and parameter lists, which NVIDIA's tools
write with template parameters (`T2`) where GNU writes types. The pattern matches a name holding the atoms in that
order with only spelling between them; the key is the atoms joined. The pattern uses what every regex engine ncu
might use reads alike (groups, alternation, lazy repeats, `\\b`; no lookaround): ncu links Boost.Regex."""

from __future__ import annotations

import functools
import re

from roseprof.errors import RoseprofError
from roseprof.model import uncut

# A command line's longest argument is 128 KiB on Linux (MAX_ARG_STRLEN); a CUTLASS GEMM's pattern is about 30,000
# characters (the torch run's top 6 kernels, three of them such GEMMs, 94,395).
MAX_PATTERN_CHARS = 120_000
# Words that are spelling, not atoms: cv-qualifiers, elaborated-type keywords, the `instance` of NVIDIA's
# `[lambda() (instance 1)]`.
_SPELLING = ("const", "volatile", "struct", "class", "enum", "union", "typename", "instance")
# Between two atoms, spelling only: punctuation that is not an atom (spaces, `#`, brackets, `::`), a spelling word,
# `void` (the return type NVIDIA writes for a function named in a template argument), a qualifier (`at::`, ncu's
# `<unnamed>::`, GNU's `(anonymous namespace)::`) and a cast (`(int)`, `(unsigned long)`, `(cute::GMMA::Major)`).
# No other word, no digit and no `-`: `k<int>` is not `k<unsigned int>`, nor `k<4>` `k<-4>`.
# (`(anonymous namespace)` is a cast's shape; GNU prints none of struct, class, enum, union or typename.)
_FILL = r"(?:[^\w<>,*&-]|\b(?:const|volatile|void|instance)\b|\w+::|<unnamed>::|\([\w: ]+\))*?"
# ... before `>`, `,`, `*` or `&`: punctuation and cv-qualifiers only (`Half const,`, `char const*`, `#1}>`)
_FILL_PUNCT = r"(?:[^\w<>,*&-]|\b(?:const|volatile)\b|\w+::)*?"  # `Foo::*`: a qualifier too
# ... between a template's name and its `<`
_FILL_ANGLE = " ?"
_PUNCT = {
    "<": "<",
    ",": ",",
    "*": r"\*",
    "&": "&",
}  # as atoms: only `*` needs its escape (none gets one it needn't)
_CLOSE = r"(?:, *)?>"  # `>`, maybe after an empty pack, which NVIDIA writes as an empty argument: `X, >`
# 0 and 1 as template arguments: GNU writes a bool's as false and true, NVIDIA's tools as (bool)0 and (bool)1
_BOOL = {"0": r"\b(?:0[uUlL]*|false)\b", "1": r"\b(?:1[uUlL]*|true)\b"}
# after `void`: a function's name follows (void is its return type), not `void const*` (a type argument)
_RETURNS = re.compile(
    r"\s+(?:\(anonymous namespace\)|(?!const\b|volatile\b)[A-Za-z_<])"
)  # not `void (*)(int)`
# a cast on a literal: `(int)4`, `(cute::GMMA::Major)0` (ncu writes 4, 0); words apart, so no backtracking blows up
_CAST = re.compile(r"\([A-Za-z_][\w:]*(?:\s+[A-Za-z_][\w:]*)*\)(?=-?\d)")


def _balanced(depth: int) -> str:
    """A parenthesised list with up to `depth` levels of parentheses inside, as a pattern with one way to match
    (a lazy `\\(.*?\\)` per list could stretch to any later `)`: a near miss of a name with a dozen such lists took
    75 s in Python's engine and ran Boost's out of stack)."""
    inner = r"\([^()]*\)"
    for _ in range(depth):
        inner = r"\([^()]*(?:" + inner + r"[^()]*)*\)"
    return inner


_PARAMS = _balanced(5)  # six levels
_INTEGER = re.compile(r"(-?\d+)[uUlL]*")
_OPERATOR = re.compile(r"\s*(\(\)|\[\]|[^\sA-Za-z0-9_(]+)")  # the symbol of `operator()`, `operator<<`, ...
_TOKEN = re.compile(
    r"(?P<skip>\(anonymous namespace\)|<unnamed>)"
    r"|(?P<num>-?\d[\w.]*)"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<punct>[<>,(*&])"
    r"|."
)


def _literal(text: str) -> str:
    """`text` matched as written, escaping only what is special to every engine (Python's re.escape also escapes
    `&`, `-`, `#` and spaces, which an engine with ECMAScript's rules may refuse)."""
    return re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\1", text)


def _close(s: str, i: int) -> int | None:
    """The index after the `)` that closes the `(` at s[i], or None when it never closes (a name cut short)."""
    depth = 0
    for j in range(i, len(s)):
        depth += {"(": 1, ")": -1}.get(s[j], 0)
        if depth == 0:
            return j + 1
    return None


def _split(name: str) -> tuple[str, str]:
    """(the name without its return type and its own parameter list, that parameter list or ""). NVIDIA writes a
    template parameter in a return type where GNU writes its value (`std::enable_if<!T7, void>::type`)."""
    s, params = name.rstrip(), ""
    if s.endswith(")"):
        depth = 0
        for i in range(len(s) - 1, 0, -1):
            depth += {")": 1, "(": -1}.get(s[i], 0)
            if depth == 0:
                if s[i - 1].isalnum() or s[i - 1] in "_>]":
                    s, params = s[:i], s[i:]
                break
    depth, cut = 0, 0
    for i, c in enumerate(s):
        depth += {"<": 1, "(": 1, "[": 1, "{": 1, ">": -1, ")": -1, "]": -1, "}": -1}.get(c, 0)
        if c == " " and depth == 0:
            cut = i + 1  # the last top-level space: the return type ends there
    return s[cut:], params


def _body(name: str) -> str:
    return _split(name)[0]


def atoms(name: str) -> list[str]:
    """The name's atoms, each as a regular expression; a parameter list inside the name (the function a lambda is
    declared in) is one atom, any balanced list (_PARAMS); a lambda's own parameters are atoms."""
    s = _CAST.sub("", _body(name))
    out: list[str] = []
    i, prev = 0, ""  # prev: the last significant character before i (the function a `(` follows)
    while i < len(s):
        m = _TOKEN.match(s, i)
        i = m.end()
        if m.group("skip"):
            continue
        n = m.group("num")
        if n is not None:
            integer = _INTEGER.fullmatch(n)
            if integer is None:  # `1.5f`, `0x1F`: as written (GNU and NVIDIA write integers in decimal)
                out.append(r"\b" + _literal(n) + r"\b")
            elif integer.group(1) in _BOOL:
                out.append(_BOOL[integer.group(1)])
            else:
                v = integer.group(1)
                out.append(("" if v.startswith("-") else r"\b") + _literal(v) + r"[uUlL]*\b")
            prev = "0"
            continue
        word = m.group("word")
        if word is not None:
            if s.startswith("::", i):
                prev = ":"  # a qualifier: ncu shortens them, so none is an atom
                continue
            if word == "operator":  # its symbol is part of its name: `operator()`, `operator ()`, `operator<`
                sym = _OPERATOR.match(s, i)
                i = sym.end() if sym else i
                out.append(r"\boperator *" + (_literal(sym.group(1)) if sym else ""))
                prev = "a"
                continue
            if word in ("true", "false"):
                out.append(_BOOL["1" if word == "true" else "0"])
            elif word == "void" and _RETURNS.match(s, i):
                pass  # a return type: NVIDIA writes one for a function named in a template argument, GNU does not
            elif word not in _SPELLING:
                out.append(r"\b" + word + r"\b")
            prev = "a"
            # a lambda's own parameters are atoms: `lambda()` is not `lambda(float)`
            end = _close(s, i) if word == "lambda" and s.startswith("(", i) else None
            if end is not None:
                out += [r"\("] + _list_atoms(s[i + 1 : end - 1]) + [r"\)"]
                i, prev = end, ")"
            continue
        punct = m.group("punct")
        if punct == "(":
            if prev in ("a", ">", ")") and not s[m.start() - 1].isspace():
                end = _close(s, m.start())  # a function's parameter list: spelt differently by each tool
                out.append(_PARAMS if end is not None else r"\(.*")
                i, prev = end if end is not None else len(s), ")"
            continue
        if punct == ">":
            if out and out[-1] == ",":
                out.pop()  # an empty pack: NVIDIA's `X, >`, GNU's `X>`
            out.append(_CLOSE)
            prev = ">"
        elif punct:
            out.append(_PUNCT[punct])
            prev = punct
        elif not m.group().isspace():
            prev = m.group()
    return out


def _list_atoms(text: str) -> list[str]:
    """The atoms of a comma-separated list (a lambda's or a function's parameters), read as template arguments."""
    return atoms("p<" + text + ">")[2:-1]


def _name_atoms(name: str) -> tuple[list[str], bool, str]:
    """(the name's atoms, whether they are all of it, what of it they are of). A name the model cut
    (model.cut_name: past 16,384 characters) is read by what was kept of it, less its last atom (a word cut in
    two, maybe)."""
    kept, was_cut = uncut(name)
    parts = atoms(kept)
    return (parts[:-1] if was_cut else parts), not was_cut, kept


def name_pattern(name: str) -> str:
    """A regular expression matching the whole of `name` as any of the demanglers above writes it (a name the
    model cut, by what was kept of it)."""
    return _pattern(*_name_atoms(name))


def _pattern(parts: list[str], whole: bool, name: str = "") -> str:
    """The atoms with spelling between them, after a return type; `whole`: and nothing after them but spelling
    and a parameter list (else anything: the atoms are a prefix of the name's). A name of no atoms matches as
    written."""
    if not parts:
        return "^" + _literal(name.strip()) + ("$" if whole else "")
    end = _FILL + r"(?:\(.*\))?$" if whole else ".*$"
    out = ["^(?:.*? )?", _FILL, parts[0]]
    for before, atom in zip(parts, parts[1:]):
        if atom == "<" and before.endswith(r"\b") and not before.startswith(r"\b(?:"):
            out.append(_FILL_ANGLE)  # after a word, not a number: a template's argument list
        elif atom in (_CLOSE, *_PUNCT.values()):
            out.append(_FILL_PUNCT)
        else:
            out.append(_FILL)
        out.append(atom)
    return "".join(out) + end


@functools.lru_cache(maxsize=4096)
def key(name: str) -> str:
    """What every spelling of the kernel shares, as one string: its atoms, and for a function that is no template
    its parameters' too (GNU and NVIDIA write those alike but for spelling, `k(float const*)` and `k(const float *)`;
    a template's, NVIDIA writes as `T2`). Equal for each kernel's spellings in the fixtures
    (tests/roseprof/test_kernel_names.py), so a kernel's tag (render/kernel_labels.kernel_tag) does not depend on the tool
    that named it."""
    kept, _ = uncut(name)
    body, params = _split(kept)
    parts = atoms(kept)
    if params and "<" not in body.replace("<unnamed>", ""):
        parts += ["("] + _list_atoms(params[1:-1]) + [")"]
    return "\x1f".join(parts)


@functools.lru_cache(maxsize=1 << 14)  # every view labels every kernel of both runs of a diff
def base_name(name: str) -> str:
    """The kernel's function, qualified, without return type, template arguments or parameters (for a sentence):
    `void (anonymous namespace)::paged_attn_kernel<2, long>(...)` -> `paged_attn_kernel` (an anonymous namespace,
    `(anonymous namespace)::` or ncu's `<unnamed>::`, left out)."""
    kept, was_cut = uncut(name)
    body = _body(kept).replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    if was_cut:  # a cut name's parameter list has no end for _split to find: the function ends at its `(`
        depth = 0
        for i, c in enumerate(body):
            depth += {"<": 1, "[": 1, ">": -1, "]": -1}.get(c, 0)
            if c == "(" and depth == 0 and i > 0:
                body = body[:i]
                break
    return body.split("<", 1)[0]


def names_pattern(names: list[str], limit: int = MAX_PATTERN_CHARS) -> str:
    """One pattern matching any of `names` (ncu's `--kernel-name regex:`, with --kernel-name-base demangled), at
    most `limit` characters: past it, the longest names are matched by the first half of their atoms, then the
    first quarter, and so on (such a pattern may match other instantiations of that template too)."""
    read = [list(_name_atoms(n)) for n in names]  # [atoms, whole, kept] a name: what _pattern takes

    def joined() -> str:
        return "|".join("(?:" + _pattern(*r) + ")" for r in read)

    out = joined()
    while len(out) > limit and max((len(r[0]) for r in read), default=0) > 1:
        longest = max(read, key=lambda r: len(r[0]))
        longest[0], longest[1] = longest[0][: len(longest[0]) // 2], False
        out = joined()
    if len(out) > limit:
        raise RoseprofError(
            f"the {len(names)} kernels make a name filter of {len(out):,} characters, more than a command line "
            f"takes ({limit:,}): give fewer (--top)"
        )
    return out
