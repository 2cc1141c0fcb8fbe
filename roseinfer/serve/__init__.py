"""`roseinfer serve`: the engine behind an OpenAI-compatible HTTP server with Prometheus metrics.

app.py (routes), protocol.py (request models), errors.py (OpenAI-shaped errors), bridge.py (the engine's step
loop on its own thread, handing tokens to the event loop), text.py (incremental detokenization and stop strings),
metrics.py (Prometheus, with request-id exemplars in OpenMetrics), slo_capture.py (--capture-on: the flight
recorder's steps around an SLO breach, written to a folder), cli.py (the command).
"""
