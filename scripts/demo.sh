#!/usr/bin/env bash
# The main job: install what is needed, build nfx, run `nfx demo` (needs root for namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cargo build --release -p nfx
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
exec $SUDO target/release/nfx demo "$@"
