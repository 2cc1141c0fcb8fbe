"""What nsys itself prints on the program's pipes: its status and progress lines (kept in raw/nsys.log, out of the
terminal), its lines where it failed on its agent (a start that may be made again), and the message to quote
from them. drivers/nsys/capture.py drives nsys with these."""

from __future__ import annotations

import re
from pathlib import Path

# nsys 2022.4 throws this while it sets up, before the program starts, when another nsys process on the machine
# (one that roseprof's lock does not cover: a user's own `nsys profile`, another checkout's tests) holds its
# agent: seen in the test suite on a shared 2-core machine. Nothing ran, so starting again is safe.
AGENT_REFUSED = b"Local Endpoint is not available"
# ... and these lines, as the whole of its output, where it lost its agent (the log holds the program's output
# too, which printed nothing; the engine's benchmark prints only at its end, so it may have run for a while):
# under load, one capture in several hundred of the clean-clone CI runs, a test's capture failing with no report
# (docs/BENCHMARKS.md, sessions 32-34). Nothing of that capture is kept to lose, and what a user does next is
# what starting again does: capture again.
AGENT_LOST = {b"End of file", b"Connection to the Agent lost.", b"Connection reset by peer"}
# ... and this exception, thrown as it sets up (its ProcessWaiter's named semaphore gone: "[QuadDCommon::
# tag_errno_text*] = No such file or directory", "[boost::errinfo_api_function_*] = sem_open") where another nsys
# of the machine was ending: two tests' captures in a clean-clone CI run beside other test sessions (session 42).
# No report, nothing of the program's: starting again is safe.
AGENT_SEMAPHORE = b"[boost::errinfo_api_function_*] = sem_open"


def is_agent_lost(line: bytes) -> bool:
    """One of nsys' lines where it lost its agent (a program may print one too: capture.py holds them back)."""
    return line.strip() in AGENT_LOST


def agent_refused(log_path: Path, out_base: Path) -> bool:
    """Did nsys fail on its own agent, and leave no report (so starting the capture again loses nothing)?"""
    if any(out_base.with_suffix(s).exists() for s in (".nsys-rep", ".qdstrm", ".qdrep")):
        return False
    try:
        with open(log_path, "rb") as fh:
            text = fh.read(1 << 20)
    except OSError:
        return False
    lines = {line.strip() for line in text.splitlines() if line.strip()}
    return AGENT_REFUSED in text or AGENT_SEMAPHORE in text or bool(lines) and lines <= AGENT_LOST


# nsys' own status and progress lines (2020.5 to 2025.3), kept in raw/nsys.log and out of the terminal. nsys
# writes them on the same pipes as the program's output, so a program line that looks exactly like one of
# these is hidden too (it is in the log, kept with the run). Among them, the four lines of nsys' C++ exception dump (2022.4, a
# clean-clone CI run under load, session 37: "<file>.cpp(381): Throw in function ...GetLocalEndpoint() const",
# "Dynamic exception type: boost::wrapexcept<QuadDCommon::RuntimeException>", "std::exception::what:
# RuntimeException", "[QuadDCommon::tag_message*] = Local Endpoint is not available."): where roseprof starts nsys
# again they were noise before its one line saying so, and where nsys wrote no report the error quotes the message
# (nsys_message). Its lines where it lost its agent (AGENT_LOST) are held instead (held_line): a program may print
# "End of file" too.
NSYS_OWN_LINE = re.compile(
    rb"^\s*(?:"
    rb"Collecting data\.\.\.|Generating '.*'|Generated:|Processing events\.\.\.|"
    rb"Saving temporary \".*\" file|Creating final output files\.\.\.|Saving intermediate .*|"
    rb"\[\d+/\d+\] .*|\S+\.(?:nsys-rep|qdrep|qdstrm|sqlite)|Report file (?:moved|saved) to .*|"
    rb"Capture range (?:started|ended) in the application\.|"
    rb"The target application terminated\. One or more process it created re-parented\.|"
    rb"Waiting for termination of re-parented processes\.|Use the `--wait` option to modify this behavior\.|"
    rb"(?:WARNING|Warning): (?:CPU |LBR |Backtraces |.*(?:sampling|[Nn]sys|report|injection|context-switch)).*|"
    rb"Exporting \d+ events:.*|Processing \[.*|"
    rb"\S+\.cpp\(\d+\): Throw in function .*|Dynamic exception type: .*|std::exception::what: .*|"
    rb"\[QuadDCommon::[^\]]*\] = .*|\[boost::errinfo_[^\]]*\] = .*"
    rb")\s*$"
)


def is_nsys_line(line: bytes) -> bool:
    if not line.strip():
        return False
    # A progress bar redraws itself with \r: "[1/1] [==50%   ] trace.nsys-rep\r".
    return bool(NSYS_OWN_LINE.match(line.rstrip(b"\r\n")))


NSYS_LOG = "nsys.log"  # in the run's raw/: nsys' own lines, kept out of the terminal
NSYS_MESSAGE = re.compile(rb"^\s*\[QuadDCommon::tag_(?:message|errno_text)\*\] = (.+?)\s*$", re.MULTILINE)
NSYS_API_FUNCTION = re.compile(rb"^\s*\[boost::errinfo_api_function_\*\] = (\S+)\s*$", re.MULTILINE)


def nsys_message(log: Path) -> str | None:
    """The message of the last C++ exception nsys dumped into its log, else its last line saying it lost its
    agent (both hidden from the terminal), or None."""
    try:
        with open(log, "rb") as fh:
            text = fh.read(1 << 20)
    except OSError:
        return None
    found = NSYS_MESSAGE.findall(text)
    if found:
        call = NSYS_API_FUNCTION.findall(text)  # the system call that failed, where the dump names one
        return (f"{call[-1].decode()}: " if call else "") + found[-1].decode("utf-8", "replace")
    lost = [line.strip() for line in text.splitlines() if is_agent_lost(line)]
    return lost[-1].decode("utf-8", "replace") if lost else None
