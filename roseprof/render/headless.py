"""Headless Chromium (Debian's), driven by Playwright: loading dashboards in tests and taking screenshots."""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from pathlib import Path

# These keep Chromium off the network (the machines here have none) and quiet in containers.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@contextmanager
def chromium_page(width: int = 1400, height: int = 1000):
    from playwright.sync_api import sync_playwright

    exe = find_chromium()
    if exe is None:
        raise RuntimeError("Chromium not found (scripts/install-chromium.sh installs Debian's)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            yield page
        finally:
            browser.close()


def load_dashboard(page, path: str, timeout_ms: int = 30000) -> dict:
    """Open a dashboard file; returns what a test checks: errors, figures drawn, title, body text."""
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.goto(Path(path).resolve().as_uri())
    page.wait_for_selector("body[data-figures]", timeout=timeout_ms)
    figures = page.evaluate(
        """() => Array.from(document.querySelectorAll('.fig')).map(el => ({
              id: el.id,
              traces: (el.data || []).length,
              drawn: el.querySelectorAll('.main-svg').length > 0,
              points: (el._fullData || []).reduce((n, t) => n + ((t.x && t.x.length) || (t.y && t.y.length) || 0), 0),
           }))"""
    )
    return {
        "errors": errors + page.evaluate("() => window.__dashboardErrors || []"),
        "figures": figures,
        "declared": int(page.get_attribute("body", "data-figures")),
        "title": page.title(),
        "text": page.inner_text("body"),
        "img_x": page.evaluate("() => document.querySelectorAll('img[src=\"x\"]').length"),
        "pwned": page.evaluate("() => window.__pwned || null"),
    }
