# Sourced by install-nsys.sh and install-ncu.sh: Debian ships nsight-systems and nsight-compute in non-free.
# apt_install_non_free PKG...: enable the contrib and non-free components (deb822 sources on bookworm and later,
# sources.list before that), then install PKG... quietly, with $SUDO as the caller set it.
apt_install_non_free() {
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    if ! grep -q "non-free" /etc/apt/sources.list.d/debian.sources; then
      $SUDO sed -i -E 's/^(Components:.*\bmain\b)(.*)$/\1\2 contrib non-free/' /etc/apt/sources.list.d/debian.sources
    fi
  elif [ -f /etc/apt/sources.list ] && ! grep -q "non-free" /etc/apt/sources.list; then
    $SUDO sed -i -E 's/^(deb .* main)(.*)$/\1\2 contrib non-free/' /etc/apt/sources.list
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
