"""An engine run that injects every cause the spike analysis names (used by test_spikes.py, in a subprocess so the
step log is the engine's own, written and closed as in a capture). Usage: python spike_engine_run.py STEPLOG

prefix sharing (all prompts start with the same two 16-token blocks; two are exactly those blocks, so their
prefill copies the shared last block on write), rollovers (16-token blocks), a KV pool too small for everyone
(requests wait and are preempted, then recomputed), staggered arrivals (prefills between decode steps), and a
forced garbage collection during one step (Python's gc, recorded by the engine's gc callback)."""

import gc
import os
import sys

os.environ["ROSEINFER_STEP_LOG"] = sys.argv[1]

import torch  # noqa: E402

from roseinfer.config import EngineConfig  # noqa: E402
from roseinfer.engine import Engine  # noqa: E402
from roseinfer.sequence import SamplingParams  # noqa: E402

torch.set_num_threads(1)  # a shared 2-core machine: two OpenMP threads collapse under load
shared = list(range(100, 132))
prompts = [shared + [7 + i] * (2 + i) for i in range(6)] + [shared, shared]
arrival_step = [0, 0, 2, 5, 9, 14, 20, 27]
engine = Engine(
    "gpt2-tiny", EngineConfig(block_size=16, num_blocks=22, max_batch_size=6, prefill_max_batch_size=2)
)
params = SamplingParams(max_new_tokens=48, ignore_eos=True)
added = step = 0
while added < len(prompts) or engine.has_unfinished():
    while added < len(prompts) and arrival_step[added] <= step:
        engine.add_request(prompts[added], params)
        added += 1
    if step == 12:
        garbage = [[i] for i in range(200_000)]  # something for the collector to walk
        gc.collect()
        del garbage
    engine.step()
    step += 1
print(engine.stats["preemptions"], engine.stats["rollovers"], engine.stats["cow"])
