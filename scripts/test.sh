#!/usr/bin/env bash
# The whole test suite: install what is needed, check formatting and lints, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets -- -D warnings
# Licenses, bans and sources (deny.toml); advisories need the RustSec database from
# GitHub, which CI cannot reach.
target/tools/cargo-deny/bin/cargo-deny --offline check licenses bans sources
# The fuzz targets are crates of their own (`cargo +nightly fuzz` builds them); check that
# they still compile against the workspace's APIs (docs/fuzzing.md). Release profile and
# the workspace's target directory: the dependencies clippy just checked, and the C
# builds of aws-lc and ring, are reused instead of redone in a directory of their own.
for f in crates/*/fuzz; do
  cargo check --locked --quiet --release --bins --manifest-path "$f/Cargo.toml" --target-dir target
done
cargo test --release --workspace
