"""A kernel's name as the views show it: whole where it fits, else its base name shortened in the middle, with a
tag (four hex digits) where another kernel shown beside it shares that base name, so that six instantiations of one
template stay six rows, and the same kernel has the same tag whichever tool named it (`kernel_names.key`)."""

from __future__ import annotations

import hashlib

from roseprof.kernel_names import base_name, key
from roseprof.render.text import shorten_middle

TAG = " #"  # a disambiguator's separator: `clover::par_ranged2d_kernel #3fa2`


def kernel_tag(name: str, spelt: bool = False) -> str:
    """Four hex digits of a hash of what every tool's spelling of the name shares (kernel_names.key): the same
    kernel gets the same tag in every run and view, named by torch, nsys or ncu. `spelt`: of the name as written
    (for two kernels whose key is one: `k<a::Foo>` and `k<b::Foo>`, which differ by a qualifier only)."""
    text = name if spelt else (key(name) or name)
    return hashlib.blake2s(text.encode("utf-8", "surrogatepass"), digest_size=2).hexdigest()


def kernel_labels(names: list[str], among=()) -> list[str]:
    """The names as shown side by side: a name whose base name (what a narrow column keeps) is another's too gets
    its tag, so six instantiations of one template stay six kernels. kernel_name() keeps the tag. `among`: every
    kernel of the runs these rows come from: a changed kernel whose base name an unchanged one shares is tagged
    too, where its base name alone would not say which of the two changed."""
    bases: dict[str, set[str]] = {}
    for n in [*names, *among]:
        bases.setdefault(_base(n), set()).add(n)
    tags: dict[str, str] = {}  # each name whose base name another shares: its tag
    for group in bases.values():
        by_tag: dict[str, list[str]] = {}
        for n in group if len(group) > 1 else ():
            by_tag.setdefault(kernel_tag(n), []).append(n)
        # two kernels of one key (kernel_names.key) get their names' own tags
        for tag, alike in by_tag.items():
            tags.update({n: tag if len(alike) == 1 else kernel_tag(n, spelt=True) for n in alike})
    return [n + TAG + tags[n] if n in tags else n for n in names]


def label_of(names: list[str]) -> dict[str, str]:
    """Each name's `kernel_labels` label, by name (a table whose rows are looked up by kernel)."""
    return dict(zip(names, kernel_labels(names)))


def _base(name: str) -> str:
    """Its base name, or the name itself where it has none before its `<` (`<unknown>`)."""
    return base_name(name) or name


def _tagged(name: str) -> tuple[str, str]:
    """(the name without its kernel_labels() tag, the tag with its separator or "")."""
    body, sep, tag = name.rpartition(TAG)
    if not sep or len(tag) != 4 or any(c not in "0123456789abcdef" for c in tag):
        return name, ""
    return body, sep + tag


def kernel_name(name: str, width: int) -> str:
    """A kernel name for a narrow column: whole when it fits, else its base name, shortened in the middle; a tag
    from kernel_labels() stays at the end."""
    if len(name) <= width:
        return name
    body, tag = _tagged(name)
    return shorten_middle(_base(body), max(width - len(tag), 8)) + tag


def kernel_short(name: str) -> str:
    """A kernel named in a sentence: its base name, and a kernel_labels() tag where it has one (the full
    signature of a template instantiation can run to four lines of an 80-column terminal)."""
    body, tag = _tagged(name)
    return _base(body) + tag
