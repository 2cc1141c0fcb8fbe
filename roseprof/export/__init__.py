"""Stored runs written out in other tools' formats (chrome.py: Chrome trace-event JSON for Perfetto)."""
