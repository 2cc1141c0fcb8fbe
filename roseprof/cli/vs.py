"""`roseprof diff A1 A2 --vs B1 B2`: click takes one value per option, so the words after --vs are rewritten
into one --vs each before click parses them."""

from __future__ import annotations

import click


class VsCommand(click.Command):
    """`diff A1 A2 --vs B1 B2`: the words after --vs, up to the next option, are the after side."""

    def parse_args(self, ctx, args):
        out, i = [], 0
        while i < len(args):
            if args[i] == "--":
                out += args[i:]
                break
            if args[i] == "--vs":
                i += 1
                taken = 0
                while i < len(args) and not args[i].startswith("-"):
                    out += ["--vs", args[i]]
                    i, taken = i + 1, taken + 1
                if not taken:
                    out.append("--vs")  # click says it needs a value
                continue
            out.append(args[i])
            i += 1
        return super().parse_args(ctx, out)
