#!/usr/bin/env bash
# Installs the Debian packages nfx needs (traffic tools, nftables, tshark, ...) when missing.
set -euo pipefail
pkgs=(iperf3 sockperf nftables tshark tcpdump iputils-ping iproute2 ethtool procps util-linux openssl sqlite3 clang g++ libbpf-dev ffmpeg)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "nfx: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
