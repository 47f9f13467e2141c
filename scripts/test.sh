#!/usr/bin/env bash
# The whole test suite: install what is needed, check formatting and lints, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets -- -D warnings
cargo test --release --workspace
