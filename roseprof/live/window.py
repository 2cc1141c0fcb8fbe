"""A capture window on a roseinfer server (`roseinfer serve --enable-profiling`: POST /profile/start|stop, GET
/profile/status, GET /profile/files/NAME), from roseprof's side: open one, wait for it to close, fetch its files.
The server's side and why the files travel over HTTP: roseinfer/serve/profiling.py."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

from roseprof.errors import RoseprofError
from roseprof.load.client import parse_url

CLOSED = ("done", "failed")  # a window's states once its files are written, or will never be
WAIT_S = 300.0  # how long a window's export may take before roseprof gives up on it


class WindowClient:
    def __init__(self, url: str, api_key: str | None) -> None:
        self.ep = parse_url(url, api_key)
        self.api_key = api_key

    def address(self, route: str) -> str:
        return f"http://{self.ep.host}:{self.ep.port}{self.ep.path(route)}"

    def call(self, method: str, route: str, body: dict | None = None, timeout_s: float = 60.0) -> bytes:
        """The body of the answer; RoseprofError in one line (the server's own words) otherwise."""
        address = self.address(route)
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        req = urllib.request.Request(address, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if self.api_key:
            req.add_header("Authorization", f"Bearer {self.api_key}")
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                return resp.read()
        except urllib.error.HTTPError as e:
            raise RoseprofError(f"{address}: HTTP {e.code}: {_message(e)}") from None
        except (urllib.error.URLError, OSError) as e:
            raise RoseprofError(f"{address}: cannot be reached ({getattr(e, 'reason', e)})") from None

    def status(self) -> dict | None:
        """The last window's state (None: no window yet)."""
        return json.loads(self.call("GET", "/profile/status"))["window"]

    def start(self, tool: str, steps: int) -> dict:
        return json.loads(self.call("POST", "/profile/start", {"tool": tool, "steps": steps}))

    def stop(self) -> dict:
        return json.loads(self.call("POST", "/profile/stop"))

    def wait_closed(self, stop: bool, wait_s: float = WAIT_S) -> dict:
        """The window once its files are written. `stop`: end it now if it is still recording (the load is over:
        no more steps will come to fill it)."""
        window = self.status()
        if window is None:
            raise RoseprofError(f"{self.address('/profile/status')}: the server has no window")
        if stop and window["state"] == "recording":
            try:
                window = self.stop()
            except RoseprofError:
                window = self.status()  # it closed on its own meanwhile
        deadline = time.monotonic() + wait_s
        while window["state"] not in CLOSED:
            if time.monotonic() > deadline:
                raise RoseprofError(
                    f"{self.address('/profile/status')}: window {window['id']} still {window['state']} after "
                    f"{wait_s:.0f} s"
                )
            time.sleep(0.2)
            window = self.status()
        if window["state"] == "failed":
            raise RoseprofError(f"{self.address('/profile/status')}: {window['error']}")
        return window

    def fetch(self, window: dict, into: Path) -> dict[str, Path]:
        """The window's files saved into `into`: {name: path}."""
        into.mkdir(parents=True, exist_ok=True)
        out = {}
        for name in window["files"]:
            path = into / name
            path.write_bytes(self.call("GET", f"/profile/files/{name}", timeout_s=WAIT_S))
            out[name] = path
        return out


def _message(e: urllib.error.HTTPError) -> str:
    """The server's one line (an OpenAI-shaped error body), else the HTTP reason."""
    try:
        return json.loads(e.read())["error"]["message"]
    except (ValueError, KeyError, TypeError, OSError):
        return str(e.reason)
