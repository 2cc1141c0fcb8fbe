"""roseprof: capture, parse, analyse and compare profiles of roseinfer (or any command)."""
