"""Running a tool and turning what it wrote into a stored run, the same way for every driver.

pipeline.py    capture or import -> run folder: status and exit codes, the analysis step passed in
process.py     the one way a tool runs: its own session, Ctrl-C forwarded once, its own lines kept out of the
               terminal, one capture per tool at a time (a lock per machine user)
environment.py what the manifest records about the machine
telemetry.py   GPU telemetry sampled while the tool runs

Layering: capture/ sits above drivers/ (what to run, how to read it) and run/ (the store); neither imports it.
"""
