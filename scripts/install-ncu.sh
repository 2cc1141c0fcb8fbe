#!/usr/bin/env bash
# Install Nsight Compute's command line (ncu) on a Debian-like machine, idempotently.
#
# Debian ships nsight-compute 2022.3 in its non-free component. On a CPU-only machine it cannot profile, but it
# exports reports (`ncu --import R --csv --page raw|details`), which is what `roseprof import R.ncu-rep` needs:
# reports written by ncu 2022.3 and older import; newer ones get one line naming the version that wrote them.
set -euo pipefail
source "$(dirname "$0")/apt-non-free.sh"

find_ncu() {
  if [ -n "${NCU:-}" ] && [ -x "$NCU" ]; then echo "$NCU"; return 0; fi
  command -v ncu 2>/dev/null && return 0
  for candidate in /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu /usr/local/cuda-*/bin/ncu \
                   /usr/lib/nsight-compute/ncu; do
    [ -x "$candidate" ] && { echo "$candidate"; return 0; }
  done
  return 1
}

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

if ! find_ncu >/dev/null; then
  if ! command -v apt-get >/dev/null; then
    echo "install-ncu: no ncu found and no apt-get to install it; install Nsight Compute and put ncu on PATH" >&2
    exit 1
  fi
  apt_install_non_free nsight-compute
fi

NCU=$(find_ncu)
echo "install-ncu: $("$NCU" --version | grep -i version) at $NCU"
