#!/usr/bin/env bash
# The whole test suite: install what is needed, check formatting and lints, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# Every crate of Cargo.lock, for every platform: cargo-deny's offline metadata needs the
# ones a Linux build never downloads (windows-sys, ...); a no-op when they are cached.
cargo fetch --locked --quiet
cargo fmt --all -- --check
cargo clippy --profile ci --workspace --all-targets -- -D warnings
# Licenses, bans and sources (deny.toml); RustSec advisories against the committed
# snapshot of its database (CI cannot reach GitHub; scripts/advisories.sh).
target/tools/cargo-deny/bin/cargo-deny --offline check licenses bans sources
scripts/advisories.sh
# The fuzz targets are crates of their own, one workspace apart from nfx's (fuzz/Cargo.toml;
# `cargo +nightly fuzz` builds them): check in one call that they still compile against
# the workspace's APIs (docs/fuzzing.md). Same profile and target directory as the clippy
# step above, so the dependencies it checked are not checked again.
cargo check --locked --quiet --profile ci --target-dir target --workspace --bins --manifest-path fuzz/Cargo.toml
# Libraries, binaries and test targets; nfx has no doc tests (doc comments carry no code
# examples), so rustdoc is not started once per crate for nothing. Every cargo call here
# uses the `ci` profile (Cargo.toml: release without the local ThinLTO pass), so build
# scripts and checked dependencies are shared between the steps.
cargo test --profile ci --workspace --lib --bins --tests
