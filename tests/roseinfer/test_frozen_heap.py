"""The heap is frozen while a decode loop runs (roseinfer.frozen_heap): the collector's passes between steps skip
the objects that existed before it, and nothing stays frozen once the last loop ends."""

from __future__ import annotations

import gc
import weakref

from roseinfer import LLM, SamplingParams
from roseinfer.frozen_heap import frozen_heap


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_the_last_loop_out_gives_the_heap_back():
    assert gc.get_freeze_count() == 0
    with frozen_heap():
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with frozen_heap():
            pass
        assert gc.get_freeze_count() == frozen  # the inner loop's end leaves the outer one's heap frozen
    assert gc.get_freeze_count() == 0


def test_a_cycle_of_before_the_loop_is_collected_after_it():
    ref = _cycle()  # garbage already, and not collected yet
    with frozen_heap():
        gc.collect()
        assert ref() is not None  # frozen: no collection during the loop walks it
    gc.collect()
    assert ref() is None  # given back, collected: nothing leaks


def test_generate_steps_with_the_heap_frozen():
    llm = LLM("gpt2-tiny")
    frozen_at_steps = []
    step = llm.engine.step

    def counted_step():
        frozen_at_steps.append(gc.get_freeze_count())
        return step()

    llm.engine.step = counted_step
    out = llm.generate([[1, 2, 3], [4]], SamplingParams(max_new_tokens=5, ignore_eos=True))
    assert [len(o.token_ids) for o in out] == [5, 5]
    assert frozen_at_steps and min(frozen_at_steps) > 0
    assert gc.get_freeze_count() == 0
