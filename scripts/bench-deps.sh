#!/usr/bin/env bash
# Installs the tunnel peers that `nfx bench tunnel` measures next to nfx, when missing:
# WireGuard tools, wireguard-go, boringtun, OpenVPN, OpenSSH client/server, Dropbear,
# plus the traffic tools (strongSwan, also a peer, comes from deps.sh: the interop tests
# need it). Idempotent. Not part of deps.sh/test.sh (CI stays fast).
# Run as root (or with sudo available). Binaries land in /usr/local/bin.
set -euo pipefail
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
BIN=/usr/local/bin

pkgs=(iperf3 sockperf iproute2 procps openssl wireguard-tools dropbear-bin openvpn openssh-client openssh-server)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bench-deps: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  # Packages only: no service of theirs may start on the host (the bench starts its own).
  # An existing policy-rc.d is left as it is.
  made_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod 755 /usr/sbin/policy-rc.d
    made_policy=1
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  if [ -n "$made_policy" ]; then $SUDO rm -f /usr/sbin/policy-rc.d; fi
fi

# wireguard-go: the Go module's binary is called `wireguard`; install it as wireguard-go.
# (Never run it with --help: it takes that as an interface name and daemonises.)
if [ ! -x "$BIN/wireguard-go" ]; then
  GO=$(command -v go || echo /usr/local/go/bin/go)
  [ -x "$GO" ] || { echo "bench-deps: go not found (expected /usr/local/go/bin/go)" >&2; exit 1; }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "bench-deps: building wireguard-go" >&2
  GOBIN="$tmp" GOFLAGS=-modcacherw "$GO" install golang.zx2c4.com/wireguard@latest
  $SUDO install -m 755 "$tmp/wireguard" "$BIN/wireguard-go"
fi

# boringtun: userspace WireGuard in Rust (binary boringtun-cli).
if [ ! -x "$BIN/boringtun-cli" ]; then
  CARGO=$(command -v cargo || echo "$HOME/.cargo/bin/cargo")
  [ -x "$CARGO" ] || { echo "bench-deps: cargo not found" >&2; exit 1; }
  echo "bench-deps: building boringtun-cli (a few minutes)" >&2
  $SUDO env "PATH=$PATH" "$CARGO" install boringtun-cli --locked --root /usr/local
fi

for b in wg openvpn ssh sshd dropbear iperf3 sockperf "$BIN/wireguard-go" "$BIN/boringtun-cli"; do
  if command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ]; then :; else
    echo "bench-deps: $b still missing" >&2; exit 1
  fi
done
echo "bench-deps: all tunnel peers installed" >&2
