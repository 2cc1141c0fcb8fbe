"""Tensor parallelism's process group and collectives, on torch.distributed: NCCL on CUDA, gloo on CPU.

A rank is one process with one device. Every rank runs the same engine on the same requests: the same scheduler
makes the same decisions (admission, preemption, block ids) from the same inputs, and the model's replicated
lm_head gives every rank the same logits (they follow an all-reduce), so the same tokens. Only activations
cross ranks: one all-reduce after the attention's output projection and one after the MLP's, per layer
(`TPGroup.row_parallel`, `roseinfer.sharding`). Nothing else is exchanged per step, except where an input is not
the same everywhere by construction: a benchmark's arrival times (`broadcast_int`, on the host group).

Ranks start one of three ways, all ending in `init`:
- `LLM(model, tensor_parallel_size=N)`: the calling process is rank 0 and starts ranks 1..N-1 (`roseinfer.workers`);
- a benchmark with `--tensor-parallel-size N`: it starts N-1 more copies of itself (`launch`);
- `torchrun --nproc-per-node N -m roseinfer.benchmark_...`: torchrun started them and set RANK, WORLD_SIZE,
  LOCAL_RANK, MASTER_ADDR and MASTER_PORT (`--nnodes` works the same: NCCL then crosses the network).

Every collective has a timeout (`EngineConfig.tp_timeout_s`): a rank that dies makes the others fail (gloo sees
the closed connection at once; NCCL's watchdog aborts when the timeout passes), never hang.
"""

from __future__ import annotations

import gc
import os
import socket
import sys
import weakref
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from roseinfer.fused_allreduce import FusedAllReduce, PushedRows, enable_symm_mem
from roseinfer.linears import fused_allreduce_applies, linear
from roseinfer.tracing import ALLREDUCE, region

TORCHRUN_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class SymmMemAllReduce:
    """torch's symmetric-memory all-reduce (`torch.ops.symm_mem`, `EngineConfig.tp_allreduce="symm_mem"`): every
    rank's buffer is mapped into its peers over NVLink and one kernel sums them (two-shot: each rank reduces a
    slice and writes it to every rank), where NCCL's ring runs a protocol of several latency-bound steps; for the
    decode step's small messages ([B, C], a few KB) latency is the whole cost. The row-parallel GEMM writes straight
    into the buffer and the sum is read from it, so the path adds no copy kernel. Each element is reduced by one
    rank and then copied, so every rank gets the same bits (its tokens must match). CUDA on one node only; larger
    messages (prefill) and sizes not a multiple of 16 bytes go through NCCL."""

    def __init__(self, group, capacity: int, dtype: torch.dtype, device: torch.device) -> None:
        import torch.distributed._symmetric_memory as symm_mem

        self.group_name = group.group_name
        enable_symm_mem(self.group_name)
        self.buffer = symm_mem.empty(capacity, dtype=dtype, device=device)  # [capacity]
        symm_mem.rendezvous(self.buffer, self.group_name)  # collective: every rank maps every other's buffer
        self.dtype = dtype

    def output(self, rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor | None:
        """A [rows, cols] view of the buffer for a GEMM to write its partial sums into, or None where it does not
        fit (then NCCL)."""
        n = rows * cols
        if dtype != self.dtype or n > self.buffer.numel() or (n * self.buffer.element_size()) % 16:
            return None
        return self.buffer[:n].view(rows, cols)

    def reduce(self, out: torch.Tensor) -> None:
        torch.ops.symm_mem.two_shot_all_reduce_(out.view(-1), "sum", self.group_name)


@dataclass
class TPGroup:
    rank: int
    world_size: int
    local_rank: int  # the rank's GPU on its node
    backend: str  # nccl | gloo
    group: object  # the device group: the model's all-reduces
    cpu_group: object  # gloo: small host-side messages (a benchmark's arrivals), never on a GPU stream
    symm_mem: SymmMemAllReduce | None = None  # the decode step's all-reduce, where chosen (`use_symm_mem`)
    fused: FusedAllReduce | None = None  # ... or fused into the one-row GEMVs (`use_fused`)

    def row_parallel(self, x: torch.Tensor, lin: torch.nn.Linear, slot: int | None = None) -> torch.Tensor:
        """lin(x) summed over the ranks: x [T, N_r] this rank's input columns, lin its [C, N_r] weight shard (the
        bias on rank 0 only) -> [T, C]. With symmetric memory the result is a view of its buffer, valid until the
        next row-parallel projection (the model consumes it before that). With the fused all-reduce, where it
        applies, the result is slot `slot`'s words [W, C / 2]: every rank's partial sum with the step's epoch, which
        only a GEMV told `wait_for(words)` may read (`roseinfer.fused_allreduce`)."""
        if self.fused is not None and slot is not None and fused_allreduce_applies(x, lin):
            return self.fused.project(x, lin, slot)
        symm = self.symm_mem
        out = symm.output(x.shape[0], lin.weight.shape[0], x.dtype) if symm is not None else None
        if out is None:
            y = linear(x, lin)  # [T, C] this rank's partial sum (the small-batch GEMV where it wins)
            with region(ALLREDUCE):
                dist.all_reduce(y, group=self.group)
            return y
        if lin.bias is None:
            torch.mm(x, lin.weight.t(), out=out)
        else:
            torch.addmm(lin.bias, x, lin.weight.t(), out=out)
        with region(ALLREDUCE):
            symm.reduce(out)
        return out

    def broadcast_int(self, value: int) -> int:
        """Rank 0's `value` on every rank (a host decision the ranks must share)."""
        t = torch.tensor([value], dtype=torch.int64)
        dist.broadcast(t, src=0, group=self.cpu_group)
        return int(t.item())

    def wait_for(self, delta: torch.Tensor) -> PushedRows | None:
        """What a GEMV reading `delta` must wait on: where delta is a fused all-reduce's words, else None."""
        return self.fused.wait_for(delta) if self.fused is not None else None

    def use_symm_mem(self, capacity: int, dtype: torch.dtype, device: torch.device) -> None:
        """Row-parallel outputs of up to `capacity` elements summed through torch's symmetric memory (CUDA)."""
        self.symm_mem = SymmMemAllReduce(self.group, capacity, dtype, device)

    def use_fused(self, n_layer: int, width: int, device: torch.device, timeout_s: float) -> None:
        """The one-row decode step's all-reduces fused into its GEMVs (CUDA): two slots a layer."""
        self.fused = FusedAllReduce(self, 2 * n_layer, width, device, timeout_s)


_GROUP: TPGroup | None = None


def current() -> TPGroup | None:
    """This process's tensor-parallel group, once `init` ran."""
    return _GROUP


def shard_range(n: int, world_size: int, rank: int) -> tuple[int, int]:
    """[start, stop) of `rank`'s share of n items (heads, MLP columns): n // world each, the first n % world
    ranks one more. An uneven split is what lets gpt2-xl's 25 heads run on 2 GPUs (13 + 12)."""
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def under_torchrun() -> bool:
    return "WORLD_SIZE" in os.environ and "RANK" in os.environ


def free_port() -> int:
    """A free TCP port on the loopback interface (the rendezvous of ranks on one machine)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torch_device_type(device: str) -> str:
    return torch.device(device).type


def check_devices(world_size: int, device_type: str) -> None:
    """One line for what a user gets wrong before any process starts."""
    if device_type == "cuda":
        if not dist.is_nccl_available():
            raise ValueError(
                f"tensor_parallel_size {world_size} on CUDA needs NCCL, and this torch build has none "
                "(torch.distributed.is_nccl_available() is False)"
            )
        visible = torch.cuda.device_count()
        if not under_torchrun() and visible < world_size:
            raise ValueError(f"tensor_parallel_size {world_size} needs {world_size} GPUs, {visible} visible")
    elif not dist.is_gloo_available():
        raise ValueError(f"tensor_parallel_size {world_size} on CPU needs gloo, which this torch build lacks")


def init(
    world_size: int,
    device_type: str,
    timeout_s: float,
    rank: int | None = None,
    init_method: str | None = None,
) -> TPGroup:
    """Join the process group (rank and rendezvous from torchrun's variables unless given) and return it."""
    global _GROUP
    if _GROUP is not None:
        if _GROUP.world_size != world_size:
            raise ValueError(
                f"this process is rank {_GROUP.rank} of {_GROUP.world_size}, not of tensor_parallel_size {world_size}"
            )
        return _GROUP
    if rank is None:
        if not under_torchrun():
            raise ValueError(
                f"tensor_parallel_size {world_size} needs its ranks started: use LLM(..., tensor_parallel_size=N), "
                "a benchmark's --tensor-parallel-size N, or torchrun --nproc-per-node N"
            )
        env_world = int(os.environ["WORLD_SIZE"])
        if env_world != world_size:
            raise ValueError(
                f"torchrun started {env_world} processes (WORLD_SIZE={env_world}) but tensor_parallel_size is "
                f"{world_size}: give --nproc-per-node (x --nnodes) equal to --tensor-parallel-size"
            )
        rank = int(os.environ["RANK"])
        init_method = "env://"
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    check_devices(world_size, device_type)
    backend = "nccl" if device_type == "cuda" else "gloo"
    timeout = timedelta(seconds=timeout_s)
    options = {}
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        # Bind the communicator to this GPU now: NCCL then sets up eagerly, not inside the first captured step.
        options["device_id"] = torch.device("cuda", local_rank)
    dist.init_process_group(
        backend, init_method=init_method, rank=rank, world_size=world_size, timeout=timeout, **options
    )
    group = dist.group.WORLD
    cpu_group = dist.new_group(backend="gloo", timeout=timeout) if backend == "nccl" else group
    _GROUP = TPGroup(rank, world_size, local_rank, backend, group, cpu_group)
    return _GROUP


# What must go before the group does (`before_destroy`): weak, so an engine nobody holds is not kept alive.
_BEFORE_DESTROY: list[weakref.WeakMethod] = []


def before_destroy(method) -> None:
    """Call the bound `method` in `destroy`, before the process group goes, if its object still lives.

    A CUDA graph that captured an NCCL collective holds a reference on the communicator that is dropped only when
    the graph is destroyed, and NCCL's finalize waits for it: destroying the group first hangs the process at exit
    in ncclCommFinalize (seen on 2 H200s, ~100 s a rank, with the decode graphs' all-reduces;
    pytorch/pytorch#115388). The decode graphs register their release here."""
    _BEFORE_DESTROY.append(weakref.WeakMethod(method))


def destroy() -> None:
    global _GROUP
    releases = [m for m in (ref() for ref in _BEFORE_DESTROY) if m is not None]
    _BEFORE_DESTROY.clear()
    try:
        for release in releases:
            release()
        if _GROUP is not None and _GROUP.backend == "nccl" and dist.is_initialized():
            gc.collect()  # graphs only a reference cycle still holds go now, not after the group
            torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - a failed run's sticky CUDA error: the group must still go, and the run's
        pass  # own one-line error (launch, Workers) stays the one the user sees
    if _GROUP is not None and dist.is_initialized():
        dist.destroy_process_group()
    _GROUP = None


def rank_device(device: str, tp: TPGroup | None) -> torch.device:
    """The rank's device: `cuda` means the rank's own GPU (LOCAL_RANK) under tensor parallelism."""
    d = torch.device(device)
    if tp is not None and d.type == "cuda":
        return torch.device("cuda", tp.local_rank)
    return d


# -- a command started as N ranks (the benchmarks' --tensor-parallel-size without torchrun) ------------------------
def _rank_main(target, args: tuple, rank: int, world_size: int, port: int, finished) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    from roseinfer import steplog, tracing

    code = 1
    try:
        code = target(*args)
    finally:
        steplog.close()
        tracing.close_profiler()  # its trace, while the process group (which names the file) lives
        destroy()
    code = code if isinstance(code, int) else int(bool(code))
    # The rank's work is done and said so before the interpreter's teardown: the teardown must run (Nsight Systems
    # and CUPTI flush a process' activity buffers in its exit hooks; a rank that left through os._exit lost every
    # kernel it ran), but its C++ destructors aborted a finished rank once in some 60 CPU runs ("terminate called
    # without an active exception", exit -6: a library thread still joinable). `launch` takes a rank that finished
    # with 0 and then died of a signal in its teardown as finished.
    finished.value = code
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)


def _rank_failure(rank: int, exitcode: int | None, finished: int) -> str | None:
    """Why spawned rank `rank` failed, or None: it finished with 0 (`finished`, said before its teardown), and a
    signal in the teardown that followed (exit code < 0) does not undo that."""
    if exitcode == 0 or (finished == 0 and exitcode is not None and exitcode < 0):
        return None
    return f"rank {rank} exit code {exitcode}"


def launch(target, args: tuple, world_size: int, timeout_s: float) -> int:
    """Run `target(*args)` as ranks 0..world_size-1 on this machine, rank 0 in this process, the rest spawned,
    as torchrun would (its variables set in each). Returns rank 0's exit code, or 1 if another rank failed."""
    import multiprocessing as mp

    port = free_port()
    ctx = mp.get_context("spawn")
    # Each spawned rank's exit code as it said it before its teardown (-1: not yet).
    finished = [ctx.Value("i", -1, lock=False) for _ in range(1, world_size)]
    procs = [
        ctx.Process(
            target=_rank_main, args=(target, args, rank, world_size, port, finished[rank - 1]), daemon=True
        )
        for rank in range(1, world_size)
    ]
    for p in procs:
        p.start()
    os.environ.update(
        RANK="0", WORLD_SIZE=str(world_size), LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    rank0_error = None
    try:
        code = target(*args)
    except (
        Exception
    ) as e:  # a collective failed (a rank died) or rank 0 itself failed: said in one line below
        code, rank0_error = (
            1,
            f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}",
        )
    finally:
        destroy()
        for key in TORCHRUN_KEYS:
            os.environ.pop(key, None)
    failed = []
    for rank, p in enumerate(procs, start=1):
        # The others finish with rank 0 when it succeeded; when it failed they may wait in a collective for it.
        p.join(timeout_s if code == 0 else 10)
        if p.is_alive():
            p.kill()  # a rank we started that did not finish in time
            p.join(5)
        failure = _rank_failure(rank, p.exitcode, finished[rank - 1].value)
        if failure:
            failed.append(failure)
    if failed or rank0_error:
        said = ", ".join(failed + ([f"rank 0: {rank0_error}"] if rank0_error else []))
        print(f"tensor parallelism failed: {said}", file=sys.stderr)
        return code or 1
    return code
