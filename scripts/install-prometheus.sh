#!/usr/bin/env bash
# Install Debian's Prometheus (the server and promtool), idempotently: the `roseinfer serve` tests check /metrics
# with `promtool check metrics` and scrape a live server with a real Prometheus. Only the binaries are used; the
# package's own service is not needed (the tests start their own server on a free loopback port).
set -euo pipefail
if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
  echo "install-prometheus: $(prometheus --version 2>&1 | head -1)"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ! command -v apt-get >/dev/null; then
  echo "install-prometheus: no prometheus and no apt-get; install Prometheus and put it on PATH" >&2
  exit 1
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
echo "install-prometheus: $(prometheus --version 2>&1 | head -1)"
