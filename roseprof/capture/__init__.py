"""Running a tool and turning what it wrote into a stored run, the same way for every driver.

pipeline.py    a capture or an import -> a run folder: status and exit codes; the analysis step (and, for an
               import, the reader picker) passed in by roseprof.api
tool.py        the one path every tool runs by (the Capturer a driver implements, run_capture)
process.py     a tool in its own session: Ctrl-C forwarded once, its own lines kept out of the terminal
lock.py        one capture per tool at a time, per machine user, saying whose capture a newcomer waits for
environment.py what the manifest records about the machine
telemetry.py   GPU telemetry sampled while the tool runs

Layering: capture/ sits above drivers/ (what to run, how to read it) and run/ (the store); neither imports it.
"""
