#!/usr/bin/env bash
# Install Nsight Systems for CPU captures on a Debian-like machine, idempotently.
#
# Debian ships nsight-systems 2022.4 in its non-free component. Two things keep that package from finishing a
# capture out of the box: `nsys` looks for its importer (QdstrmImporter) in a `host-linux-x64` folder beside its
# own target folder, and the importer needs libssh-4. Without them `nsys profile` leaves only a .qdstrm file.
set -euo pipefail
source "$(dirname "$0")/apt-non-free.sh"

find_nsys() {
  command -v nsys 2>/dev/null && return 0
  for candidate in /usr/lib/nsight-systems/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/bin/nsys; do
    [ -x "$candidate" ] && { echo "$candidate"; return 0; }
  done
  return 1
}

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

if ! find_nsys >/dev/null; then
  if ! command -v apt-get >/dev/null; then
    echo "install-nsys: no nsys found and no apt-get to install it; install Nsight Systems and put nsys on PATH" >&2
    exit 1
  fi
  apt_install_non_free nsight-systems libssh-4
fi

NSYS=$(find_nsys)
# nsys looks for its importer in host-linux-x64 beside its own (resolved) target folder; Debian puts the two
# folders under different parents, so link the host folder next to the target one.
TARGET_DIR=$(dirname "$(readlink -f "$NSYS")")
PARENT=$(dirname "$TARGET_DIR")
if [ ! -x "$PARENT/host-linux-x64/QdstrmImporter" ]; then
  HOST=""
  for cand in /usr/lib/nsight-systems/host-linux-x64 "$(dirname "$(dirname "$NSYS")")/host-linux-x64"; do
    [ -x "$cand/QdstrmImporter" ] && { HOST="$cand"; break; }
  done
  if [ -z "$HOST" ]; then
    echo "install-nsys: QdstrmImporter not found; nsys will leave only .qdstrm files" >&2
    exit 1
  fi
  $SUDO ln -sfn "$HOST" "$PARENT/host-linux-x64"
fi
missing=$(ldd "$PARENT/host-linux-x64/QdstrmImporter" 2>/dev/null | grep "not found" || true)
if [ -n "$missing" ]; then
  echo "install-nsys: the importer lacks libraries: $missing" >&2
  exit 1
fi
echo "install-nsys: $("$NSYS" --version) at $NSYS"
