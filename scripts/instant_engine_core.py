"""The engine core scripts/bench_bookkeeping.py measures: a real Engine and a real EngineCore driven as `_loop`
drives them, fed continuously, with a model runner that computes nothing (KV blocks as the real one takes them, a
token at once), the core's events pickled through a real pipe to a reader process."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import time

from roseinfer import tracing
from roseinfer.config import EngineConfig
from roseinfer.decode_paths import DecodeOutput
from roseinfer.engine import Engine
from roseinfer.model_runner import PrefillOutput
from roseinfer.sequence import SamplingParams
from roseinfer.serve.engine_core import EngineCore

TOKEN = 87  # what every step emits (not the EOS; the requests ignore it anyway)


class InstantRunner:
    """The model runner's interface without a model: KV blocks as the real runner takes them (a prompt's blocks,
    one more when a sequence fills its last), a token at once."""

    graphs = None
    in_flight = None
    device = "cpu"

    def __init__(self, mgr) -> None:
        self.mgr = mgr

    def prefill(self, seqs) -> PrefillOutput:
        tokens = 0
        for seq in seqs:
            keys, _ = self.mgr.allocate_prompt(seq)
            self.mgr.register_prompt(seq, keys)
            tokens += seq.num_tokens
            seq.num_cached = seq.num_tokens
        return PrefillOutput([TOKEN] * len(seqs), tokens, 0, 0)

    def decode(self, seqs) -> DecodeOutput:
        rolling = self.mgr.starting_a_block(seqs)
        self.mgr.append_blocks(rolling)
        kv_tokens = 0
        for seq in seqs:
            kv_tokens += seq.num_cached
            seq.num_cached += 1
        return DecodeOutput(seqs, seqs, [TOKEN] * len(seqs), len(rolling), 0, kv_tokens, launched=True)

    def drop_finished_in_flight(self) -> None:
        pass


# The server's side of the pipe, in a process of its own: unpickle every event batch until the core closes it. A
# bare interpreter (multiprocessing's spawn would import this script, and torch; a fork of a process with threads
# may hang).
READER = """
import sys
from multiprocessing.connection import Connection
conn = Connection(int(sys.argv[1]))
try:
    while True:
        conn.recv()
except (EOFError, OSError):
    pass
"""


class Bench:
    """One engine core (a configuration), fed continuously: a finished request is replaced at once."""

    def __init__(self, metrics: bool, recorder_steps: int, streams: int, tokens: int) -> None:
        cfg = EngineConfig(
            device="cpu", max_batch_size=max(streams, 1), prefill_max_batch_size=max(streams, 1),
            flight_recorder_steps=recorder_steps, num_blocks=streams * (tokens // 64 + 3) + 16,
        )  # fmt: skip
        engine = Engine("gpt2-tiny", cfg)
        engine.runner = InstantRunner(engine.mgr)
        ours, theirs = multiprocessing.Pipe()
        fd = theirs.fileno()
        self.reader = subprocess.Popen([sys.executable, "-c", READER, str(fd)], pass_fds=(fd,))
        theirs.close()
        self.core = core = EngineCore(ours, "gpt2-tiny", cfg, metrics)
        core.engine = engine
        engine.on_token = core._on_token
        engine.after_prefill = core._publish_prefilled
        self.engine, self.tokens, self.key = engine, tokens, 0
        # staggered lengths: about streams/tokens requests finish in each step from the start
        for i in range(streams):
            self._add(max(1, tokens - i * tokens // max(streams, 1)))

    def _add(self, max_new_tokens: int) -> None:
        self.key += 1
        params = SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True)
        self.core._add(self.key, f"cmpl-{self.key}", [[TOKEN]], params, tracing.now_ns())

    def run(self, steps: int) -> float:
        """`steps` steps as `EngineCore._loop` runs them; returns the process' CPU microseconds a step (the loop's
        thread and the outbox thread's pickling; CPU time, not wall time: the box is shared)."""
        core, engine = self.core, self.engine
        t0 = time.process_time_ns()
        for _ in range(steps):
            core._step_start_ns = start_ns = tracing.now_ns()
            finished = engine.step()
            core._publish(start_ns, finished)
            for _ in finished:
                self._add(self.tokens)
        return (time.process_time_ns() - t0) / steps / 1e3

    def close(self) -> None:
        self.core.out.close()
        self.core.conn.close()
        self.reader.wait(30)
        if self.engine.flight is not None:
            self.engine.flight.close()
