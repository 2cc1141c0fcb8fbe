#!/usr/bin/env bash
# Install Debian's Chromium for the dashboard browser tests, idempotently. The tests drive it with Playwright
# (installed into .venv by setup.sh) pointed at this binary: no browser is downloaded from anywhere else.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; then
  echo "install-chromium: $(chromium --version 2>/dev/null || echo present)"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ! command -v apt-get >/dev/null; then
  echo "install-chromium: no chromium and no apt-get; install Chromium and put it on PATH" >&2
  exit 1
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
echo "install-chromium: $(chromium --version)"
