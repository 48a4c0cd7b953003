#!/bin/sh
# tools/armlane.sh - edgerun on emulated Raspberry-Pi-class ARM Linux (Debian bookworm userland,
# qemu-user through binfmt_misc, chroot): the device-core and delegate tests, bundles packaged
# on this x86 host verified with edgerun.load(), and `edgerun deploy --verify` (and rollback)
# into an sshd running inside the arm64 userland.
#
#   tools/armlane.sh [arm64] [armhf]        (default: both, one after the other)
#
# Needs root, binfmt_misc and a reachable Debian mirror. Where any of these is missing it prints
# one "SKIP armlane: <reason>" line and exits 0: the lane proves things where it can run, it does
# not fail a machine that cannot host it. A test or board-check failure exits 1.
#
# Environment: WORK (cache dir, default ~/.cache/edgerun/armlane), MIRROR (Debian mirror, default
# the host's), SUBSET (test files), PYTEST_K, JOBS (pytest-xdist workers, default 2),
# QEMU_CPU (default cortex-a72 on arm64 = Pi 4, cortex-a7 on armhf = Pi 2/3 32-bit OS),
# ARMLANE_CHECKS=0 skips the board checks, ARMLANE_TESTS=0 skips pytest.
# The root filesystems are cached as $WORK/rootfs-ARCH.tar.zst (plus the unpacked tree), keyed
# by the package lists below; a change to them rebuilds.
set -eu
SRC=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-${XDG_CACHE_HOME:-$HOME/.cache}/edgerun/armlane}
ARCHES=${*:-arm64 armhf}
LANE_START=$(date +%s)

t() { echo "[armlane $(date -u +%T) +$(( $(date +%s) - LANE_START ))s] $*"; }
skip() { echo "SKIP armlane${ARCH:+ ($ARCH)}: $*"; exit 0; }

for a in $ARCHES; do
  case $a in arm64|armhf) ;; *) echo "usage: tools/armlane.sh [arm64] [armhf] (got '$a')" >&2; exit 2 ;; esac
done

# ---------------------------------------------------------------- host: can this machine host the lane?
[ "$(id -u)" -eq 0 ] || skip "needs root (chroot, mounts, binfmt_misc registration)"
command -v apt-get >/dev/null 2>&1 || skip "needs a Debian/Ubuntu host (apt-get) for qemu-user-static and debootstrap"
need=""
for p in qemu-user-static binfmt-support debootstrap zstd openssh-client; do
  dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
done
if [ -n "$need" ]; then
  t "host packages:$need"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need; } \
    >"${TMPDIR:-/tmp}/armlane-apt.log" 2>&1 || skip "cannot install host packages ($need ): see ${TMPDIR:-/tmp}/armlane-apt.log"
fi
host_mirror() {
  { grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}'
    grep -hE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
      | awk '{for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; break}}'
  } | grep -v security | head -1
}
MIRROR=${MIRROR:-$(host_mirror)}
[ -n "$MIRROR" ] || MIRROR=http://deb.debian.org/debian
BINFMT=/proc/sys/fs/binfmt_misc
if [ ! -e "$BINFMT/register" ]; then
  mount -t binfmt_misc binfmt_misc "$BINFMT" 2>/dev/null || skip "binfmt_misc is not available (cannot mount $BINFMT: a container without it?)"
fi
mkdir -p "$WORK"

# ---------------------------------------------------------------- per-architecture description
arch_vars() {
  case $1 in
    arm64) QBIN=qemu-aarch64; QCPU=${QEMU_CPU:-cortex-a72}; PYMACH=aarch64
           # ai-edge-litert has aarch64 wheels; cryptography too (signed bundles); openssh-server for deploy;
           # gcc builds edgerun.native's kernels as on a Pi with a compiler
           DEBS=python3,python3-venv,openssh-server,ca-certificates,gcc,libc6-dev
           VENVOPT=""
           PIPS="numpy flatbuffers ai-edge-litert cryptography pillow typer rich pytest hypothesis pytest-timeout pytest-xdist setuptools>=68 wheel"
           CPUINFO="Features\t: fp asimd evtstrm crc32 cpuid\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd08\nCPU revision\t: 3" ;;
    armhf) QBIN=qemu-arm; QCPU=${QEMU_CPU:-cortex-a7}; PYMACH=armv7l
           # 32-bit Pi OS class: no numpy, ai-edge-litert or cryptography wheels for armv7 on PyPI, so
           # Debian's numpy 1.24 (the oldest numpy edgerun supports) and tflite-runtime 2.14; signatures
           # are checked by edgerun's pure-Python ed25519 fallback
           DEBS=python3,python3-venv,python3-numpy,python3-pil,ca-certificates,gcc,libc6-dev
           VENVOPT=--system-site-packages
           PIPS="flatbuffers tflite-runtime typer rich pytest hypothesis pytest-timeout pytest-xdist setuptools>=68 wheel"
           CPUINFO="model name\t: ARMv7 Processor rev 5 (v7l)\nFeatures\t: half thumb fastmult vfp edsp neon vfpv3 tls vfpv4 idiva idivt vfpd32 lpae evtstrm\nCPU implementer\t: 0x41\nCPU architecture: 7\nCPU variant\t: 0x0\nCPU part\t: 0xc07\nCPU revision\t: 5" ;;
    *) echo "armlane: unknown architecture '$1' (arm64 or armhf)" >&2; exit 2 ;;
  esac
  R=$WORK/rootfs-$1
  CACHE=$WORK/rootfs-$1.tar.zst
  KEY=$(printf '%s|%s|%s|bookworm|v1' "$DEBS" "$PIPS" "$VENVOPT" | sha256sum | cut -c1-16)
}

in_chroot() {  # clean environment; QEMU_CPU pins the emulated core (qemu's default 'max' CPU breaks XNNPACK int8)
  chroot "$R" /usr/bin/env -i QEMU_CPU="$QCPU" PATH=/opt/venv/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    LANG=C.UTF-8 TF_CPP_MIN_LOG_LEVEL=2 PIP_DEFAULT_TIMEOUT=180 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    ${PIP_INDEX_URL:+PIP_INDEX_URL=$PIP_INDEX_URL} "$@"
}
unmount_all() {
  [ -n "${R:-}" ] || return 0
  if [ -f "$R/run/armlane-sshd.pid" ]; then kill "$(cat "$R/run/armlane-sshd.pid")" 2>/dev/null || true; rm -f "$R/run/armlane-sshd.pid"; fi
  for m in proc/cpuinfo dev/pts dev sys proc src/project; do
    mountpoint -q "$R/$m" 2>/dev/null && umount -l "$R/$m"
  done
  return 0
}
mount_all() {
  mount -t proc proc "$R/proc"; mount -t sysfs sysfs "$R/sys"
  mount --bind /dev "$R/dev"; mount --bind /dev/pts "$R/dev/pts"
  # qemu-user 7.2 passes the host's x86 /proc/cpuinfo through: LiteRT's cpuinfo library then
  # segfaults (or XNNPACK is skipped). Show a Raspberry-Pi-like one, one entry per host CPU.
  n=$(getconf _NPROCESSORS_CONF); : > "$WORK/cpuinfo-$ARCH"
  i=0; while [ "$i" -lt "$n" ]; do printf "processor\t: $i\n$CPUINFO\n\n" >> "$WORK/cpuinfo-$ARCH"; i=$((i + 1)); done
  mount --bind "$WORK/cpuinfo-$ARCH" "$R/proc/cpuinfo"
  cp -L /etc/resolv.conf "$R/etc/resolv.conf" 2>/dev/null || true
  # the host's CA bundle (TLS-intercepting proxies); never the host's pip config (x86-only extra indexes)
  [ -f /etc/ssl/certs/ca-certificates.crt ] && cp -L /etc/ssl/certs/ca-certificates.crt "$R/etc/ssl/certs/ca-certificates.crt"
  return 0
}
trap 'unmount_all' EXIT INT TERM

# ---------------------------------------------------------------- root filesystem (cached)
prepare_rootfs() {
  update-binfmts --enable "$QBIN" >/dev/null 2>&1 || true
  grep -q enabled "$BINFMT/$QBIN" 2>/dev/null || skip "cannot register $QBIN with binfmt_misc"
  if [ -d "$R" ] && [ "$(cat "$R/.armlane-key" 2>/dev/null)" != "$KEY" ]; then t "rootfs is stale (package lists changed): rebuilding"; rm -rf "$R"; fi
  if [ ! -d "$R" ] && [ -f "$CACHE" ] && [ "$(cat "$CACHE.key" 2>/dev/null)" = "$KEY" ]; then
    t "restore cached rootfs $CACHE"; mkdir -p "$R"; zstd -dcq "$CACHE" | tar -C "$R" --numeric-owner -xf -
  fi
  if [ -x "$R/opt/venv/bin/python" ]; then mount_all; return 0; fi
  rm -rf "$R"
  python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/dists/bookworm/Release', timeout=20)" \
    "$MIRROR" 2>/dev/null || skip "the Debian mirror $MIRROR cannot be reached (set MIRROR)"
  t "debootstrap bookworm $ARCH from $MIRROR (emulated second stage: minutes)"
  if ! debootstrap --arch="$ARCH" --variant=minbase --include="$DEBS" bookworm "$R" "$MIRROR" >"$WORK/debootstrap-$ARCH.log" 2>&1; then
    tail -5 "$WORK/debootstrap-$ARCH.log"; [ -f "$R/debootstrap/debootstrap.log" ] && tail -20 "$R/debootstrap/debootstrap.log"
    rm -rf "$R"; echo "armlane ($ARCH): debootstrap failed: see $WORK/debootstrap-$ARCH.log"; exit 1
  fi
  mount_all
  t "venv + pip install (emulated)"
  in_chroot python3 -m venv $VENVOPT /opt/venv
  index=${PIP_INDEX_URL:-https://pypi.org/simple}
  python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1].rstrip('/') + '/pip/', timeout=20)" \
    "$index" 2>/dev/null || { unmount_all; rm -rf "$R"; skip "the package index $index cannot be reached (set PIP_INDEX_URL)"; }
  # shellcheck disable=SC2086
  if ! in_chroot pip install -q $PIPS >"$WORK/pip-$ARCH.log" 2>&1; then
    tail -20 "$WORK/pip-$ARCH.log"; unmount_all; rm -rf "$R"
    echo "armlane ($ARCH): pip install in the $ARCH userland failed: see $WORK/pip-$ARCH.log"; exit 1
  fi
  echo "$KEY" > "$R/.armlane-key"
  t "save rootfs cache $CACHE"
  unmount_all
  rm -rf "$R/var/cache/apt/archives/"*.deb "$R/root/.cache/pip"
  tar -C "$R" --numeric-owner -cf - . | zstd -T0 -3 -q -f -o "$CACHE"
  echo "$KEY" > "$CACHE.key"
  mount_all
}

# ---------------------------------------------------------------- the project inside
install_project() {
  t "install the working tree (tracked and untracked-not-ignored files), no dependencies"
  rm -rf "$R/src/project"; mkdir -p "$R/src/project"
  (cd "$SRC" && git ls-files -z --cached --others --exclude-standard | xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' _ \
     | tar --null -T - -cf -) | tar -C "$R/src/project" -xf -
  in_chroot sh -c 'cd /src/project && pip install -q --no-deps --no-build-isolation -e . >/dev/null'
  in_chroot python -c "import platform, sys, numpy; print('python', sys.version.split()[0], platform.machine(), 'numpy', numpy.__version__)"
  in_chroot python -c "
import importlib
for m in ('ai_edge_litert', 'tflite_runtime'):
    try:
        v = importlib.import_module(m).__version__
        print(m, v)
    except ImportError:
        pass"
}

# ---------------------------------------------------------------- bundles made on this x86 host
make_bundles() {
  B=$WORK/bundles
  stamp=$( (cd "$SRC" && git rev-parse HEAD && git status --porcelain -- edgerun delegates) | sha256sum | cut -c1-16)
  [ "$(cat "$B/.stamp" 2>/dev/null)" = "$stamp" ] && return 0
  t "package signed bundles on the host ($(uname -m)): int8 and float models, golden vectors recorded here"
  rm -rf "$B"; mkdir -p "$B"
  (cd "$SRC" && python3 - "$B" <<'PY'
import sys
from pathlib import Path

import numpy as np

from edgerun.ir import ModelBuilder
from edgerun.testing import mobilenet_v1

out = Path(sys.argv[1])
(out / "mobilenet_int8.tflite").write_bytes(mobilenet_v1(alpha=0.25, size=64, classes=10, dtype="int8"))
(out / "mobilenet_float.tflite").write_bytes(mobilenet_v1(alpha=0.25, size=64, classes=10, dtype="float32"))
# float in, QUANTIZE to int8 (NaN, infinities and values past int32 included), DEQUANTIZE out: the
# golden vectors pin edgerun's own QUANTIZE bytes, which must not depend on the CPU
b = ModelBuilder("quantize_edges")
x = b.input("x", (1, 64), "float32")
q = b.tensor("q", (1, 64), "int8", (0.05, 17))
y = b.tensor("y", (1, 64), "float32")
b.op("QUANTIZE", [x], [q])
b.op("DEQUANTIZE", [q], [y])
b.output(y)
(out / "quantize_edges.tflite").write_bytes(b.to_bytes())
special = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 1e20, -1e20, 2.5, -2.5, 0.025, -0.075], np.float32)
rng = np.random.default_rng(3)
for i in range(2):
    v = rng.normal(scale=4.0, size=(1, 64)).astype(np.float32)
    v[0, :special.size] = np.roll(special, i)
    np.save(out / f"quantize_edges_golden{i}.npy", v)
PY
   edgerun keygen -o "$B/lane" >/dev/null
   edgerun package models/mcu_small.tflite -o "$B/mcu_small.bundle" --sign "$B/lane.key" >/dev/null
   edgerun package "$B/mobilenet_int8.tflite" -o "$B/mobilenet_int8.bundle" --sign "$B/lane.key" >/dev/null
   edgerun package "$B/mobilenet_int8.tflite" -t rpi -o "$B/mobilenet_int8_rpi.bundle" --sign "$B/lane.key" >/dev/null
   edgerun package "$B/mobilenet_float.tflite" -o "$B/mobilenet_float.bundle" --sign "$B/lane.key" >/dev/null
   edgerun package "$B/quantize_edges.tflite" -o "$B/quantize_edges.bundle" --sign "$B/lane.key" \
     --golden "$B/quantize_edges_golden0.npy" --golden "$B/quantize_edges_golden1.npy" >/dev/null
  ) || { echo "  packaging on the host failed"; return 1; }
  ls "$B"/*.bundle | sed 's,.*/,  ,'
  echo "$stamp" > "$B/.stamp"
}

board_checks() {
  t "board check: edgerun.load(bundle).verify() of the host-made bundles on $ARCH"
  rm -rf "$R/src/bundles"; cp -r "$WORK/bundles" "$R/src/bundles"
  in_chroot python - <<'PY'
import glob
import platform
import sys

import edgerun

bad = 0
for p in sorted(glob.glob("/src/bundles/*.bundle")):
    # edgerun's kernels, then the manifest's delegates as the board would pick them
    for delegates, label in (([], "edgerun kernels"), (None, "default delegates")):
        try:
            m = edgerun.load(p, trusted_key="/src/bundles/lane.pub", delegates=delegates)
            # the bundle's own rule: integer outputs bit for bit, float outputs within float rounding
            # across CPUs (golden.FLOAT_RTOL; numpy's exp/log and BLAS differ on ARM, docs/platforms.md)
            r = m.verify()
            ok, detail = bool(r["ok"]), f"{r['cases']} cases, max diff {r['max_abs_diff']}, via {r['delegates']}"
        except Exception as e:  # noqa: BLE001 - the lane reports every failure and goes on
            ok, detail = False, f"{type(e).__name__}: {e}"
        bad += not ok
        print(f"  {platform.machine()} {p.rsplit('/', 1)[1]} ({label}): {'verified' if ok else 'FAILED'}: {detail}")
sys.exit(1 if bad else 0)
PY
}

deploy_check() {
  t "board check: edgerun deploy --verify and --rollback into sshd inside the $ARCH userland"
  port=${ARMLANE_SSH_PORT:-2222}
  D=$WORK/ssh; rm -rf "$D"; mkdir -p "$D"; chmod 700 "$D"
  ssh-keygen -q -t ed25519 -N "" -f "$D/id" >/dev/null
  in_chroot sh -c 'mkdir -p /root/.ssh /run/sshd && chmod 700 /root/.ssh && { [ -f /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -q -A; }'
  cp "$D/id.pub" "$R/root/.ssh/authorized_keys"; chmod 600 "$R/root/.ssh/authorized_keys"
  # sessions find edgerun on PATH as on a board with it pip-installed; QEMU_CPU reaches the emulator
  # through the session environment (sshd starts each session with a fresh one)
  printf 'PATH=/opt/venv/bin:/usr/local/bin:/usr/bin:/bin\nQEMU_CPU=%s\nLANG=C.UTF-8\n' "$QCPU" > "$R/root/.ssh/environment"
  in_chroot /usr/sbin/sshd -o ListenAddress=127.0.0.1 -o Port="$port" -o PermitRootLogin=prohibit-password \
    -o PasswordAuthentication=no -o PermitUserEnvironment=yes -o PidFile=/run/armlane-sshd.pid \
    || { echo "  sshd did not start in the $ARCH userland"; return 1; }
  SSHO="-o StrictHostKeyChecking=no -o UserKnownHostsFile=$D/known_hosts"
  i=0; until ssh -q -i "$D/id" -p "$port" $SSHO -o BatchMode=yes root@127.0.0.1 uname -m 2>/dev/null; do
    i=$((i + 1)); [ $i -lt 30 ] || { echo "  cannot ssh into the $ARCH userland"; return 1; }; sleep 1; done
  B=$WORK/bundles; rc=0
  rm -rf "$R/root/edgerun"  # a fresh board each run
  dep() { (cd "$SRC" && edgerun deploy -H root@127.0.0.1 -p "$port" -i "$D/id" \
             -o StrictHostKeyChecking=no -o "UserKnownHostsFile=$D/known_hosts" "$@"); }
  dep "$B/mcu_small.bundle" --verify --key "$B/lane.pub" || rc=1
  dep "$B/quantize_edges.bundle" --verify --key "$B/lane.pub" || rc=1
  dep --status || rc=1
  first=$(readlink "$R/root/edgerun/previous" || true); now=$(readlink "$R/root/edgerun/current" || true)
  dep --rollback || rc=1
  back=$(readlink "$R/root/edgerun/current" || true)
  if [ -z "$first" ] || [ "$back" != "$first" ] || [ "$back" = "$now" ]; then
    echo "  rollback did not return current to the first bundle (current was $now, previous $first, now $back)"; rc=1
  else
    echo "  rollback: current -> $back"
  fi
  kill "$(cat "$R/run/armlane-sshd.pid")" 2>/dev/null || true; rm -f "$R/run/armlane-sshd.pid"
  return $rc
}

run_tests() {
  SUBSET_DEFAULT="tests/schema/test_schema.py tests/runtime/test_interpreter_api.py tests/runtime/test_interpreter_fuzz.py tests/ops/test_ops_*.py
    tests/ops/test_activations.py tests/ops/test_fixedpoint.py tests/ops/test_native.py tests/runtime/test_planner.py tests/runtime/test_partition_graph.py
    tests/delegates/test_delegate_xnnpack.py tests/delegates/test_delegate_framework.py tests/bundle/test_bundle_format.py tests/bundle/test_bundle_load.py"
  subset=$(printf '%s' "${SUBSET:-$SUBSET_DEFAULT}" | tr '\n' ' ')
  # where LiteRT on ARM (any version) or tflite-runtime 2.14 (armhf's only LiteRT) differs from LiteRT 2.3 on
  # x86 (tests/support/platform_oracles.py), the oracle is edgerun's output on this host, recorded now: ARM must give
  # the same bytes (or, for float outputs, what the test's own tolerance allows)
  t "record edgerun's x86 outputs for the cases LiteRT on $ARCH cannot judge"
    (cd "$SRC" && PYTHONPATH=. EDGERUN_ORACLE_RECORD="$WORK/x86-oracle-$ARCH.npz" python3 - "${PYTEST_K:-not tflm}" <<'PY'
import sys

import pytest

sys.path.insert(0, ".")
import tests.support.platform_oracles as p  # noqa: E402

sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-p", "tests.support.platform_oracles", "-o", "addopts=",
                      "-k", sys.argv[1], *p.record_args()]))
PY
  ) | tail -1 || return 1
  cp "$WORK/x86-oracle-$ARCH.npz" "$R/src/x86-oracle.npz"
  set +e
  in_chroot sh -c "cd /src/project && PYTHONPATH=/src/project EDGERUN_ORACLE_REPLAY=/src/x86-oracle.npz \
    python -m pytest -q -p no:cacheprovider -p tests.support.platform_oracles -n ${JOBS:-2} --dist loadfile -k '${PYTEST_K:-not tflm}' -o addopts='-ra' $subset"
  rc=$?
  set -e
  return $rc
}

# ---------------------------------------------------------------- main
status=0
for ARCH in $ARCHES; do
  arch_vars "$ARCH"
  t "=== $ARCH (qemu $QBIN, QEMU_CPU=$QCPU) ==="
  prepare_rootfs
  install_project
  arc=0
  if [ "${ARMLANE_CHECKS:-1}" != 0 ]; then
    make_bundles && board_checks || arc=1
    if [ "$ARCH" = arm64 ]; then deploy_check || arc=1; fi
  fi
  if [ "${ARMLANE_TESTS:-1}" != 0 ]; then
    t "pytest: device core and delegates on $ARCH"
    run_tests || arc=1
  fi
  unmount_all
  t "=== $ARCH: $( [ $arc = 0 ] && echo passed || echo FAILED ) ==="
  [ $arc = 0 ] || status=1
  R=""
done
t "lane done in $(( $(date +%s) - LANE_START ))s, status $status"
exit $status
