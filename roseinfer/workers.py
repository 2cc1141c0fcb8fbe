"""`LLM(..., tensor_parallel_size=N)`'s ranks: the calling process is rank 0, ranks 1..N-1 are processes it starts.

Every rank builds the same engine (the same model, options and seed; its own shard) and runs the same requests
through the same steps: rank 0 hands each `generate` call's requests to the workers over a pipe (host control,
no tensors), then every rank steps its engine until all are finished, the collectives inside the forward keeping
them together. Only rank 0 returns outputs. A worker waits for work on its pipe, not in a collective, so an idle
`LLM` never times out; it leaves when rank 0 says so, or when rank 0's process is gone.

A rank that fails stops the rest: its pipe carries one line saying why, its connections close, and the others'
collectives fail (or time out, `EngineConfig.tp_timeout_s`); rank 0 then raises one line naming the rank.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import traceback
from multiprocessing.connection import Connection

import torch

from roseinfer import distributed, steplog, tracing
from roseinfer.config import EngineConfig
from roseinfer.engine import Engine
from roseinfer.frozen_heap import freeze_startup_heap
from roseinfer.sequence import SamplingParams, Sequence

POLL_S = 1.0  # how often an idle worker checks that rank 0 is still there


class RankFailed(RuntimeError):
    """A tensor-parallel rank died or failed; the others stopped."""


def run_requests(engine: Engine, prompts: list[list[int]], params: SamplingParams) -> list[Sequence]:
    """Queue every prompt and step until all are finished: what every rank does for one `generate` call."""
    seqs = [engine.add_request(ids, params) for ids in prompts]
    while engine.has_unfinished():
        engine.step()
    return seqs


def serve_step(engine: Engine, ops: list[tuple], served: dict[int, Sequence]) -> None:
    """A worker's share of one `roseinfer serve` step: apply rank 0's adds and aborts in its order (so every
    rank numbers and schedules the sequences alike), then step if anything is unfinished, as rank 0 does."""
    for op in ops:
        if op[0] == "add":
            seq = engine.add_request(op[1], op[2], request_id=op[3])
            served[seq.id] = seq
        else:
            seq = served.pop(op[1], None)
            if seq is not None:
                engine.abort(seq, op[2])
    if engine.has_unfinished():
        for seq in engine.step():
            served.pop(seq.id, None)


def _worker_main(model: str, options: dict, rank: int, world_size: int, port: int, conn: Connection) -> None:
    conn.send(("started", None))  # imported and running: rank 0 may now wait in the rendezvous
    os.environ["LOCAL_RANK"] = str(rank)
    try:
        cfg = EngineConfig.from_options(**options)
        distributed.init(
            world_size,
            torch.device(cfg.device).type,
            cfg.tp_timeout_s,
            rank=rank,
            init_method=f"tcp://127.0.0.1:{port}",
        )
        engine = Engine(model, cfg)
        freeze_startup_heap()  # this process is the rank's: its start-up's objects frozen (roseinfer.frozen_heap)
        conn.send(("ready", None))
        served: dict[int, Sequence] = {}  # roseinfer serve's requests on this rank, by sequence id
        windows = None  # roseinfer serve's capture windows on this rank (serve/rank_windows.py), once asked
        while True:
            if not conn.poll(POLL_S):
                if mp.parent_process() is not None and not mp.parent_process().is_alive():
                    return  # rank 0 is gone
                continue
            command, payload = conn.recv()
            if command == "stop":
                return
            if command == "step":
                serve_step(engine, payload, served)
                continue
            if command == "window":
                if windows is None:
                    from roseinfer.serve.rank_windows import WorkerWindows

                    windows = WorkerWindows(engine)
                windows.apply(payload, served)
                continue
            run_requests(engine, *payload)
            if engine.steplog is not None:
                engine.steplog.flush()  # the rank's log is complete when generate returns
            conn.send(("done", None))
    except (EOFError, KeyboardInterrupt):
        return
    except BaseException as e:  # noqa: BLE001 - said to rank 0 in one line, then this rank exits non-zero
        last = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
        where = f" ({os.path.basename(last.filename)}:{last.lineno})" if last else ""
        try:
            conn.send(("error", f"{type(e).__name__}: {e}{where}".splitlines()[0]))
        except OSError:
            pass
        raise SystemExit(1) from None
    finally:
        # now, not in the exit hooks (a spawned child runs them at its sys.exit, after this): the step log and
        # torch.profiler's trace are written while the process group, which names the trace's file, lives
        steplog.close()
        tracing.close_profiler()
        distributed.destroy()


class Workers:
    """Rank 0's handle on ranks 1..N-1, started by `LLM` before it builds its own engine (rank 0)."""

    def __init__(self, model: str, options: dict, world_size: int) -> None:
        self.port = distributed.free_port()
        ctx = mp.get_context("spawn")
        self.procs: list = []
        self.conns: list[Connection] = []
        for rank in range(1, world_size):
            parent, child = ctx.Pipe()
            p = ctx.Process(
                target=_worker_main,
                args=(model, options, rank, world_size, self.port, child),
                daemon=True,
                name=f"roseinfer-rank{rank}",
            )
            p.start()
            child.close()
            self.procs.append(p)
            self.conns.append(parent)

    @property
    def init_method(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def wait_started(self, timeout_s: float) -> None:
        """Every worker process runs (a worker that cannot start, e.g. a main module without the
        `if __name__ == "__main__":` guard spawn needs, fails here at once, not at the rendezvous's timeout)."""
        for rank, (p, conn) in enumerate(zip(self.procs, self.conns), start=1):
            waited = 0.0
            while not conn.poll(0.2):
                waited += 0.2
                if not p.is_alive() or waited > timeout_s:
                    self.close()
                    raise RankFailed(
                        f"tensor-parallel rank {rank} did not start (exit code {p.exitcode}); a script that builds "
                        'an LLM with tensor_parallel_size > 1 needs `if __name__ == "__main__":` around it'
                    )
            self._expect(rank, conn, "started", timeout_s)

    def wait_ready(self, timeout_s: float) -> None:
        for rank, conn in enumerate(self.conns, start=1):
            self._expect(rank, conn, "ready", timeout_s)

    def submit(self, prompts: list[list[int]], params: SamplingParams) -> None:
        self.check_alive()
        for conn in self.conns:
            conn.send(("generate", (prompts, params)))

    def send_step(self, ops: list[tuple]) -> None:
        """`roseinfer serve`: the adds and aborts rank 0 applied before this step (see `serve_step`); no answer is
        awaited, the step's collectives keep the ranks together."""
        for conn in self.conns:
            conn.send(("step", ops))

    def send_window(self, op: tuple) -> None:
        """`roseinfer serve --enable-profiling`: a capture window's start or close (serve/rank_windows.py), applied
        by each worker between the same two steps as rank 0, since a pipe is read in order."""
        for conn in self.conns:
            conn.send(("window", op))

    def wait_done(self, timeout_s: float) -> None:
        for rank, conn in enumerate(self.conns, start=1):
            self._expect(rank, conn, "done", timeout_s)

    def _expect(self, rank: int, conn: Connection, word: str, timeout_s: float) -> None:
        try:
            if not conn.poll(timeout_s):
                raise RankFailed(f"tensor-parallel rank {rank} did not answer in {timeout_s:.0f} s")
            kind, message = conn.recv()
        except (EOFError, OSError):
            raise RankFailed(self.failure() or f"tensor-parallel rank {rank} is gone") from None
        if kind == "error":
            raise RankFailed(f"tensor-parallel rank {rank} failed: {message}")
        if kind != word:
            raise RankFailed(f"tensor-parallel rank {rank} said {kind!r}, expected {word!r}")

    def failure(self, wait_s: float = 0.0) -> str | None:
        """One line naming the first worker that failed or died (waiting up to wait_s for one to say why)."""
        for rank, (p, conn) in enumerate(zip(self.procs, self.conns), start=1):
            try:
                if conn.poll(wait_s):
                    kind, message = conn.recv()
                    if kind == "error":
                        return f"tensor-parallel rank {rank} failed: {message}"
            except (EOFError, OSError):
                pass
            p.join(wait_s)
            if p.exitcode is not None and p.exitcode != 0:
                return f"tensor-parallel rank {rank} died (exit code {p.exitcode}); the other ranks stopped"
        return None

    def check_alive(self) -> None:
        for rank, p in enumerate(self.procs, start=1):
            if not p.is_alive():
                raise RankFailed(
                    f"tensor-parallel rank {rank} died (exit code {p.exitcode}); start a new LLM"
                )

    def close(self, timeout_s: float = 10.0) -> None:
        for conn in self.conns:
            try:
                conn.send(("stop", None))
            except OSError:
                pass
        for p in self.procs:
            p.join(timeout_s)
            if p.is_alive():
                p.kill()  # our own worker, stuck in a collective whose peer is gone
                p.join(timeout_s)
        for conn in self.conns:
            conn.close()
        self.procs, self.conns = [], []
