#!/usr/bin/env bash
# Installs edgerun for development: the Debian packages the tests use (C toolchains, QEMU,
# OpenSSH), then the package itself with every extra. Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
DEB_PACKAGES="build-essential gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm openssh-server openssh-client rsync chromium clang libclang-rt-14-dev"
if command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  missing=""
  for p in $DEB_PACKAGES; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  if [ -n "$missing" ]; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
  fi
else
  echo "apt-get not found: install a C compiler, arm-none-eabi-gcc, qemu-system-arm and sshd (and chromium for the report test) yourself" >&2
fi
python3 -m pip install -q -e ".[dev]"
