"""One kernel's name as every demangler writes it: a regular expression for ncu's `--kernel-name regex:`.

`roseprof ncu --from RUN` names the run's top kernels to ncu, but each tool spells a C++ kernel its own way:

    torch (GNU):   void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)
    nsys 2025.3:   void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>, std::array<char *, (unsigned long)1>>(int, T2, T3)
    ncu 2025.3:    void at::vectorized_elementwise_kernel<4, at::FillFunctor<float>, std::array<char *, 1>>(int, T2, T3)

(tests/data/ncu/h200-ncu2025.3-roseinfer-names-*.csv.xz hold ncu's spellings of the engine's kernels). What they
share is a sequence of atoms: each identifier that is not a qualifier (`vectorized_elementwise_kernel`,
`FillFunctor`, `float`), each number and boolean by its value, and the template arguments' structure (`<`, `,`,
`>`). Everything else is spelling: qualifiers, which ncu shortens (`at::native::` -> `at::`); casts on literals
(`(int)4`) and their suffixes (`1ul`); spaces; `const` on either side of a type; `(anonymous namespace)` or
`<unnamed>`; a lambda's `{lambda()#1}` or `[lambda() (instance 1)]`; and parameter lists, which NVIDIA's tools
write with template parameters (`T2`) where GNU writes types. The pattern matches a name holding the atoms in that
order with only spelling between them. It uses what every regex engine ncu might use reads alike (groups,
alternation, lazy repeats, `\\b`; no lookaround)."""

from __future__ import annotations

import re

# A command line's longest argument is 128 KiB on Linux (MAX_ARG_STRLEN); a CUTLASS GEMM's pattern is about 15,000
# characters.
MAX_PATTERN_CHARS = 100_000
# Between two atoms: anything but the template structure, or ncu's `<unnamed>` qualifier (which looks like it).
_FILL = r"(?:[^<>,]|<unnamed>)*?"
# Words that are spelling, not atoms: cv-qualifiers, elaborated-type keywords, the `instance` of
# NVIDIA's `[lambda() (instance 1)]`.
_CLOSE = r"(?:, *)?>"  # `>`, maybe after an empty pack, which NVIDIA writes as an empty argument: `X, >`
_SPELLING = {"const", "volatile", "struct", "class", "enum", "union", "typename", "instance"}
# 0 and 1 as template arguments: GNU writes a bool's as false and true, NVIDIA's tools as (bool)0 and (bool)1
_BOOL = {"0": r"\b(?:0[uUlL]*|false)\b", "1": r"\b(?:1[uUlL]*|true)\b"}
_RETURNS = re.compile(r"\s+[A-Za-z_(<]")  # after `void`: a function's name follows (void is its return type)
_CAST = re.compile(
    r"\((?:[A-Za-z_][A-Za-z0-9_:]*\s*)+\)(?=-?\d)"
)  # `(int)4`, `(cute::GMMA::Major)0`: ncu writes 4, 0
_TOKEN = re.compile(
    r"(?P<skip>\(anonymous namespace\)|<unnamed>)"
    r"|(?P<num>-?\d+)[uUlL]*"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<punct>[<>,(])"
    r"|."
)


def _close(s: str, i: int) -> int:
    """The index after the `)` that closes the `(` at s[i] (len(s) when it never closes)."""
    depth = 0
    for j in range(i, len(s)):
        depth += {"(": 1, ")": -1}.get(s[j], 0)
        if depth == 0:
            return j + 1
    return len(s)


def _body(name: str) -> str:
    """The name without its return type (NVIDIA writes a template parameter where GNU writes its value:
    `std::enable_if<!T7, void>::type`) and its own parameter list (the last top-level `( ... )`)."""
    s = name.rstrip()
    if s.endswith(")"):
        depth = 0
        for i in range(len(s) - 1, 0, -1):
            depth += {")": 1, "(": -1}.get(s[i], 0)
            if depth == 0:
                if s[i - 1].isalnum() or s[i - 1] in "_>]":
                    s = s[:i]
                break
    depth, cut = 0, 0
    for i, c in enumerate(s):
        depth += {"<": 1, "(": 1, "[": 1, "{": 1, ">": -1, ")": -1, "]": -1, "}": -1}.get(c, 0)
        if c == " " and depth == 0:
            cut = i + 1  # the last top-level space: the return type ends there
    return s[cut:]


def atoms(name: str) -> list[str]:
    """The name's atoms, each as a regular expression; a parameter list inside the name (the function a lambda is
    declared in) is the atom `\\(.*?\\)`."""
    s = _CAST.sub("", _body(name))
    out: list[str] = []
    i, prev = 0, ""  # prev: the last significant character before i (the function a `(` follows)
    while i < len(s):
        m = _TOKEN.match(s, i)
        i = m.end()
        if m.group("skip"):
            continue
        if m.group("num") is not None:
            n = m.group("num")
            if n in ("0", "1"):
                out.append(_BOOL[n])
            else:
                out.append(("" if n.startswith("-") else r"\b") + re.escape(n) + r"[uUlL]*\b")
            prev = "0"
            continue
        word = m.group("word")
        if word is not None:
            if s.startswith("::", i):
                prev = ":"  # a qualifier: ncu shortens them, so none is an atom
                continue
            if word == "operator":  # its symbol is part of its name: `operator()`, `operator ()`
                sym = re.compile(r"\s*(?:\(\)|\[\]|[^\sA-Za-z0-9_(]+)").match(s, i)
                i = sym.end() if sym else i
                out.append(r"\boperator\b")
                prev = "a"
                continue
            if word in ("true", "false"):
                out.append(_BOOL["1" if word == "true" else "0"])
            elif word == "void" and _RETURNS.match(s, i):
                pass  # a return type: NVIDIA writes one for a function named in a template argument, GNU does not
            elif word not in _SPELLING:
                out.append(r"\b" + word + r"\b")
            prev = "a" if word != "lambda" else "("  # a lambda's own parameters are atoms
            continue
        punct = m.group("punct")
        if punct == "(":
            if prev in ("a", ">", ")") and not s[m.start() - 1].isspace():
                i = _close(s, m.start())  # a function's parameter list: spelt differently by each tool
                out.append(r"\(.*?\)")
                prev = ")"
            continue
        if punct == ">":
            if out and out[-1] == ",":
                out.pop()  # an empty pack: NVIDIA's `X, >`, GNU's `X>`
            out.append(_CLOSE)
            prev = ">"
        elif punct:
            out.append(re.escape(punct))
            prev = punct
        elif not m.group().isspace():
            prev = m.group()
    return out


def name_pattern(name: str) -> str:
    """A regular expression matching the whole of `name` as any of the demanglers above writes it."""
    return _pattern(atoms(name), whole=True)


def _pattern(parts: list[str], whole: bool) -> str:
    """The atoms with spelling between them, after a return type; `whole`: and nothing after them but spelling
    and a parameter list (else anything: the atoms are a prefix of the name's)."""
    end = _FILL + r"(?:\(.*\))?$" if whole else ".*$"
    return "^(?:.*? )?" + _FILL + _FILL.join(parts) + end


def base_name(name: str) -> str:
    """The kernel's function, qualified, without return type, template arguments or parameters (for a sentence):
    `void (anonymous namespace)::paged_attn_kernel<2, long>(...)` -> `paged_attn_kernel` (an anonymous namespace,
    `(anonymous namespace)::` or ncu's `<unnamed>::`, left out)."""
    body = _body(name).replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    return body.split("<", 1)[0]


def names_pattern(names: list[str], limit: int = MAX_PATTERN_CHARS) -> str:
    """One pattern matching any of `names` (ncu's `--kernel-name regex:`, with --kernel-name-base demangled), at
    most `limit` characters: past it, the longest names are matched by the first half of their atoms, then the
    first quarter, and so on (such a pattern may match other instantiations of that template too)."""
    parts = [atoms(n) for n in names]
    whole = [True] * len(parts)

    def joined() -> str:
        return "|".join("(?:" + _pattern(p, w) + ")" for p, w in zip(parts, whole))

    out = joined()
    while len(out) > limit and max(map(len, parts), default=0) > 1:
        longest = max(range(len(parts)), key=lambda i: len(parts[i]))
        parts[longest], whole[longest] = parts[longest][: len(parts[longest]) // 2], False
        out = joined()
    return out
