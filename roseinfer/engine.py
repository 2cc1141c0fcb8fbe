"""The engine: a step is schedule, run, postprocess.

The scheduler picks the batch (and preempts), the model runner runs it on the device and returns token ids,
and the engine's postprocess emits the tokens, finishes sequences and writes the step log. A step admits and
prefills what fits, then decodes every running sequence once.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from roseinfer import env, steplog, tracing
from roseinfer.config import EngineConfig
from roseinfer.cuda_graphs import DecodeGraphs
from roseinfer.decode_paths import DecodeOutput
from roseinfer.flight_recorder import FlightRecorder
from roseinfer.graph_kernels import GraphKernels
from roseinfer.model_runner import ModelRunner, PrefillOutput
from roseinfer.scheduler import Scheduler
from roseinfer.sequence import SamplingParams, Sequence, Status
from roseinfer.tracing import region


class Engine:
    def __init__(self, model: str, cfg: EngineConfig) -> None:
        self.cfg = cfg
        self.runner = ModelRunner(model, cfg)
        self.device = self.runner.device
        self.model = self.runner.model
        self.model_cfg = self.runner.model_cfg  # the engine's copy: its eos_token_id is what stops sequences
        self.mgr = self.runner.mgr  # block accounting (every rank alike)
        self.kv_cache = self.runner.kv_cache  # this rank's key/value tensors
        self.scheduler = Scheduler(cfg, self.mgr)
        tp = self.runner.tp
        self.rank, self.world_size = (tp.rank, tp.world_size) if tp is not None else (0, 1)
        meta = {
            "block_size": cfg.block_size,
            "model": model,
            "rank": self.rank,
            "world_size": self.world_size,
        }
        if env.ENV.torch_profile:
            # The profiler's schedule (decode steps): roseprof leaves out the tokens whose gap holds its own work
            # (starting to collect, starting to record, writing the trace) from the ITL figures.
            meta["torch_profile_schedule"] = list(env.ENV.torch_profile_schedule)
        # The step log's file and, serving, the flight recorder (rank 0's: every rank runs the same steps) take the
        # same records; `steplog` is both, either or None.
        self.flight: FlightRecorder | None = None
        if cfg.flight_recorder_steps and self.rank == 0:
            self.flight = FlightRecorder(cfg.flight_recorder_steps, meta)
        self.steplog = steplog.tee(steplog.step_log(meta, rank=self.rank), self.flight)
        # Each region's CPU time per step (while regions are on) is for CPU engines: tracing.STATE.step_cpu (its host
        # wall time is recorded on every device). It is the stepping thread's CPU time, so only with one intra-op
        # thread (the default for the built-in small models, cpu_threads.py): with more, torch's other threads do
        # part of every BLAS call, which it would miss, and a diff would judge half a region; without CPU times it
        # judges the wall time's p5 instead.
        tracing.STATE.step_cpu = torch.device(self.device).type == "cpu" and torch.get_num_threads() == 1
        self.decode_steps = 0  # decode step ranges so far (the step log's index)
        self.rollover_steps: set[int] = set()  # decode step indices in which some sequence took a new block
        # Counters over the engine's life (tests and benchmarks read them).
        self.stats = {
            "prefix_hit_blocks": 0,
            "cow": 0,
            "rollovers": 0,
            "preemptions": 0,
            "decode_ns": 0,
            "prefill_ns": 0,
            "decode_steps": 0,  # forward passes of decode (a drain of the overlapped decode runs none)
            "decode_kv_tokens": 0,  # past tokens whose K/V the decode steps read (for the HBM floor)
        }
        self._next_id = 0
        self.on_token: Callable[[Sequence, int], None] | None = None
        # Called after a step's prefill, before its decode: a server sends the prefilled requests' first tokens
        # then, so that their TTFT does not also hold the running batch's decode step.
        self.after_prefill: Callable[[], None] | None = None

    @property
    def graphs(self) -> DecodeGraphs | None:
        return self.runner.graphs

    def use_static_decode(self, capture: bool, kernels: GraphKernels | None = None) -> None:
        """The decode path CUDA graphs replay (see `ModelRunner.use_static_decode`)."""
        self.runner.use_static_decode(capture, kernels)

    # -- requests ------------------------------------------------------------------------------------------------
    def add_request(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        arrival_ns: int | None = None,
        request_id: str | None = None,
    ) -> Sequence:
        mc = self.model_cfg
        if len(prompt_ids) == 0:
            raise ValueError("prompt is empty: give at least one token")
        bad = [t for t in prompt_ids if not (0 <= int(t) < mc.vocab_size)]
        if bad:
            raise ValueError(f"token id {bad[0]} is outside the vocabulary (0..{mc.vocab_size - 1})")
        if len(prompt_ids) + params.max_new_tokens > mc.n_positions:
            raise ValueError(
                f"prompt ({len(prompt_ids)} tokens) plus max_new_tokens ({params.max_new_tokens}) exceeds the "
                f"model's {mc.n_positions} positions"
            )
        seq = Sequence(
            id=self._next_id,
            prompt_ids=[int(t) for t in prompt_ids],
            params=params,
            arrival_ns=tracing.now_ns() if arrival_ns is None else arrival_ns,
            request_id=request_id,
        )
        self._next_id += 1
        self.scheduler.add(seq)
        return seq

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def abort(self, seq: Sequence, reason: str = "abort") -> None:
        """Drop a request between steps (its client went away, or a stop string ended it: `reason`): it leaves the
        queue or the batch and its blocks are freed. A step in flight that computed its token is read and the token
        discarded, as for an EOS."""
        if seq.status is Status.FINISHED:
            return
        if seq.status is Status.WAITING:
            self.scheduler.waiting.remove(seq)
            seq.status, seq.finish_reason = Status.FINISHED, reason
        else:
            self.scheduler.finish(seq, reason)
        self._log_request(seq)

    def close(self) -> None:
        """Stop the flight recorder's watch on Python's collections (its records stay readable). The step log's
        file is the process's (`steplog.close`)."""
        if self.flight is not None:
            self.flight.close()

    # -- steps ---------------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def step(self) -> list[Sequence]:
        """One scheduler step: admit and prefill what fits, then decode every running sequence once. With a step
        in flight (overlapped decode) that the next cannot follow on the device, read its tokens instead."""
        if env.ENV.test_fail_step is not None and self.decode_steps >= env.ENV.test_fail_step:
            raise RuntimeError(
                f"injected engine failure at decode step {self.decode_steps} (ROSEINFER_TEST_FAIL_STEP)"
            )
        finished: list[Sequence] = []
        start_ns, prefill_ns = tracing.now_ns(), self.stats["prefill_ns"]
        with region(tracing.SCHEDULER_STEP):
            in_flight = self.runner.in_flight
            if in_flight is not None and not self.scheduler.can_follow(in_flight):
                finished += self._decode(None)
            else:
                prefill = self.scheduler.schedule_prefill()
                if prefill:
                    finished += self._prefill(prefill)
                    if self.after_prefill is not None:
                        self.after_prefill()
                batch, preempted = self.scheduler.schedule_decode()
                self.stats["preemptions"] += preempted
                if preempted and self.steplog is not None:
                    # The preempted sequences went back to the front of the queue, newest first.
                    for seq in list(self.scheduler.waiting)[:preempted]:
                        self.steplog.preempt(seq.id)
                if not batch:
                    return finished
                finished += self._decode(batch)
        # Decode time: the whole step but its prefill, scheduling and emitting included. With the overlapped
        # decode the GPU works through all of it, so the decode ranges alone would leave real time out.
        self.stats["decode_ns"] += tracing.now_ns() - start_ns - (self.stats["prefill_ns"] - prefill_ns)
        return finished

    def _prefill(self, seqs: list[Sequence]) -> list[Sequence]:
        start_ns = tracing.now_ns()
        with region(tracing.PREFILL):
            out = self.runner.prefill(seqs)
        self._log_prefill(start_ns, seqs, out)
        return self._postprocess(seqs, out.token_ids, -1)

    def _decode(self, batch: list[Sequence] | None) -> list[Sequence]:
        """A decode step range: run `batch` (None: only read the step in flight), then emit what came back."""
        start_ns = tracing.now_ns()
        with region(tracing.DECODE_STEP):
            out = self.runner.decode(batch) if batch is not None else self.runner.drain()
        index = self._log_decode_step(start_ns, out)
        finished = self._postprocess(out.seqs, out.token_ids, index)
        self.runner.drop_finished_in_flight()
        return finished

    # -- postprocess ---------------------------------------------------------------------------------------------
    def _postprocess(self, seqs: list[Sequence], token_ids: list[int], step_index: int) -> list[Sequence]:
        """Emit each sequence's new token (step_index: the decode step that produced it, -1 for prefill), finish
        those that stop, release their blocks and log them."""
        now = tracing.now_ns()
        eos = self.model_cfg.eos_token_id
        finished = []
        for seq, tok in zip(seqs, token_ids):
            if seq.status is not Status.RUNNING:
                continue  # finished (EOS) while the step that computed this token was in flight
            seq.output_ids.append(tok)
            seq.token_ns.append(now)
            seq.token_step.append(step_index)
            if self.on_token is not None:
                self.on_token(seq, tok)
            reason = None
            if tok == eos and not seq.params.ignore_eos:
                reason = "stop"
            elif len(seq.output_ids) >= seq.params.max_new_tokens:
                reason = "length"
            if reason is not None:
                self.scheduler.finish(seq, reason)
                finished.append(seq)
                self._log_request(seq)
        return finished

    def _log_prefill(self, start_ns: int, seqs: list[Sequence], out: PrefillOutput) -> None:
        self.stats["prefix_hit_blocks"] += out.prefix_hit_blocks
        self.stats["cow"] += out.cow
        self.stats["prefill_ns"] += tracing.now_ns() - start_ns
        if self.steplog is not None:
            self.steplog.write(
                {
                    "type": "prefill",
                    "start_ns": start_ns,
                    "end_ns": tracing.now_ns(),
                    "batch_size": len(seqs),
                    "tokens": out.tokens,
                    "cow": out.cow,
                    "requests": [s.id for s in seqs],
                    "readmitted": [s.id for s in seqs if s.preemptions],
                }
            )

    def _log_decode_step(self, start_ns: int, out: DecodeOutput) -> int:
        """Count and log one decode step range; returns its index."""
        end_ns = tracing.now_ns()
        self.stats["rollovers"] += out.rollovers
        self.stats["decode_steps"] += int(out.launched)
        self.stats["cow"] += out.cow
        self.stats["decode_kv_tokens"] += out.kv_tokens
        index = self.decode_steps
        self.decode_steps += 1
        if out.rollovers:
            self.rollover_steps.add(index)
        # Taken every step, so a step never carries an earlier one's times. Regions on: each region's own host
        # (wall) time in the step, and on a CPU engine on one thread its thread CPU time too (tracing._StepTimes).
        times = tracing.take_step_times()
        if self.steplog is not None:
            batch = out.batch
            graphs = self.runner.graphs
            self.steplog.step(
                start_ns,
                end_ns,
                len(batch),
                out.rollovers,
                out.cow,
                batch,  # the sinks take the ids (the flight recorder only when asked: a step stays cheap)
                launched=out.launched,
                bucket=graphs.bucket_for(len(batch)) if graphs is not None and batch else None,
                **times,
            )
        tracing.profiler_step()  # torch.profiler's schedule advances once per decode step (ROSEINFER_TORCH_PROFILE)
        return index

    def _log_request(self, seq: Sequence) -> None:
        if self.steplog is None:
            return
        self.steplog.write(steplog.request_record(seq))

    # -- measurement hook (scripts/bench_decode_host.py) ---------------------------------------------------------
    def time_parts(self, into: dict[str, list[int]]) -> None:
        """Time each part of a step on the host into `into` (label -> ns per call), the runner's parts included;
        call it after `use_static_decode`."""
        tracing.time_calls(self, {"step": "engine.step", "_postprocess": "engine.postprocess"}, into)
        tracing.time_calls(
            self.scheduler,
            {"can_follow": "scheduler.can_follow", "schedule_decode": "scheduler.schedule_decode"},
            into,
        )
        self.runner.time_parts(into)
