"""The load's plan, seeded: when each request is sent (open loop: Poisson or gamma arrivals at a rate) and what it
asks for (prompt and output lengths, fixed or uniform, or prompts from the user's JSONL file). The same seed gives
the same schedule and lengths."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from roseprof.errors import RoseprofError

# Synthetic prompts are token ids (the completions protocol takes a list of ids as the prompt), drawn from a range
# every GPT-2-family vocabulary has, so a prompt of N ids is N tokens on every server.
TOKEN_LOW, TOKEN_HIGH = 100, 10000


@dataclass(frozen=True)
class Length:
    """A length distribution: fixed (low == high) or uniform over [low, high]."""

    low: int
    high: int

    def draw(self, rng: np.random.Generator) -> int:
        return self.low if self.low == self.high else int(rng.integers(self.low, self.high + 1))

    def __str__(self) -> str:
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


def parse_length(text: str, what: str) -> Length:
    """`128` (fixed) or `64-256` (uniform, both ends included)."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", text or "")
    if not m:
        raise RoseprofError(f"{what} {text!r} is no length: give N (fixed) or LOW-HIGH (uniform)")
    low = int(m.group(1))
    high = int(m.group(2)) if m.group(2) else low
    if low < 1 or high < low:
        raise RoseprofError(f"{what} {text!r}: lengths are at least 1 and LOW <= HIGH")
    return Length(low, high)


@dataclass(frozen=True)
class Planned:
    """One request of the plan: when it is due (seconds after the start; None: as soon as a slot is free) and
    what it asks."""

    index: int
    at_s: float | None
    prompt: list[int] | str
    prompt_len: int | None  # tokens (None: a dataset's text, whose token count is the server's)
    max_tokens: int


@dataclass(frozen=True)
class Plan:
    seed: int = 0
    requests: int | None = None  # stop after this many (None: --duration)
    duration_s: float | None = None
    rate: float | None = None  # requests/s (inf: all at once); None: closed loop at `concurrency`
    concurrency: int | None = None
    arrivals: str = "poisson"  # poisson | gamma
    burstiness: float = 1.0  # gamma's shape (1: Poisson; < 1 burstier)
    prompt_len: Length = Length(32, 32)
    output_len: Length = Length(64, 64)
    dataset: tuple = field(default=(), compare=False)  # [(prompt text, output_len or None)] from a JSONL file
    dataset_path: str | None = None

    def check(self) -> None:
        if (self.rate is None) == (self.concurrency is None):
            raise RoseprofError("give --rate R or --concurrency C (one of them)")
        if self.rate is not None and not self.rate > 0:
            raise RoseprofError(f"--rate {self.rate} is no rate: give requests per second > 0 (or inf)")
        if self.concurrency is not None and self.concurrency < 1:
            raise RoseprofError(f"--concurrency {self.concurrency}: at least 1")
        if self.requests is None and self.duration_s is None:
            raise RoseprofError("give --requests N or --duration S")
        if self.arrivals not in ("poisson", "gamma"):
            raise RoseprofError(f"--arrivals {self.arrivals!r}: poisson or gamma")
        if not self.burstiness > 0:
            raise RoseprofError(f"--burstiness {self.burstiness}: a gamma shape > 0")

    def describe(self) -> dict:
        return {
            "seed": self.seed,
            "requests": self.requests,
            "duration_s": self.duration_s,
            "rate": self.rate if self.rate is None or np.isfinite(self.rate) else "inf",
            "concurrency": self.concurrency,
            "arrivals": self.arrivals if self.rate is not None else None,
            "burstiness": self.burstiness if self.rate is not None else None,
            "prompt_len": str(self.prompt_len) if not self.dataset else None,
            "output_len": str(self.output_len),
            "dataset": self.dataset_path,
        }

    def schedule(self) -> Iterator[Planned]:
        """The requests in order, endless where only a duration bounds them (the runner stops taking). Arrival
        gaps and lengths come from separate seeded streams, so the lengths do not depend on the rate."""
        gaps_rng, len_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(self.seed).spawn(2))
        order = None
        if self.dataset:
            order = np.random.default_rng(np.random.SeedSequence(self.seed).spawn(3)[2]).permutation(
                len(self.dataset)
            )
        t, i = 0.0, 0
        while self.requests is None or i < self.requests:
            at = None
            if self.rate is not None:
                if i > 0 and np.isfinite(self.rate):
                    if self.arrivals == "gamma":
                        t += float(gaps_rng.gamma(self.burstiness, 1.0 / (self.rate * self.burstiness)))
                    else:
                        t += float(gaps_rng.exponential(1.0 / self.rate))
                at = t
            out = self.output_len.draw(len_rng)
            if order is not None:
                text, wanted = self.dataset[int(order[i % len(order)])]
                yield Planned(i, at, text, None, int(wanted) if wanted else out)
            else:
                n = self.prompt_len.draw(len_rng)
                prompt = len_rng.integers(TOKEN_LOW, TOKEN_HIGH, size=n).tolist()
                yield Planned(i, at, prompt, n, out)
            i += 1


def read_dataset(path: str) -> tuple:
    """A user's JSONL file of prompts: one object a line with `prompt` (text) and optionally `output_len` (or
    `max_tokens`). Bad lines are refused in one line naming the file and the line."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise RoseprofError(f"cannot read the dataset {path}: {e.strerror or type(e).__name__}") from None
    except UnicodeDecodeError:
        raise RoseprofError(f"the dataset {path} is not UTF-8 text (JSONL: one JSON object a line)") from None
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            raise RoseprofError(f'{path}:{n}: not JSON (JSONL: one object a line with a "prompt")') from None
        prompt = obj.get("prompt") if isinstance(obj, dict) else None
        if not isinstance(prompt, str) or not prompt:
            raise RoseprofError(f'{path}:{n}: no "prompt" text')
        wanted = obj.get("output_len", obj.get("max_tokens"))
        if wanted is not None and (not isinstance(wanted, int) or isinstance(wanted, bool) or wanted < 1):
            raise RoseprofError(f"{path}:{n}: output_len {wanted!r} is no positive integer")
        out.append((prompt, wanted))
    if not out:
        raise RoseprofError(f"the dataset {path} has no prompts")
    return tuple(out)
