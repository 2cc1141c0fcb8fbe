"""Opening a file in the user's browser, only where there is one to open."""

from __future__ import annotations

import os
import sys
import webbrowser
from pathlib import Path


def has_display() -> bool:
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or os.environ.get("BROWSER"))


def open_in_browser(path: Path) -> bool:
    """Open `path`; returns False (and the caller has already printed the path) where there is no display."""
    if not has_display():
        print(f"no display: open {path} in a browser", file=sys.stderr)
        return False
    return webbrowser.open(Path(path).resolve().as_uri())
