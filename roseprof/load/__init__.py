"""`roseprof load`: serving load against any OpenAI-compatible `/v1/completions`, stored as a run of its own tool.

schedule.py (the seeded plan: arrivals, lengths, prompts), client.py (one streamed request on the client's
monotonic clock, raw asyncio HTTP/1.1 + SSE), runner.py (the asyncio driver: open loop at a rate or closed loop at
a concurrency, the /metrics scrape, Ctrl-C), serving.py (the records -> summary.json's `serving` part), stub.py (a
server that streams instantly: the generator's own ceiling, and the faults the tests play)."""
