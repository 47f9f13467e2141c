#!/usr/bin/env bash
# `cargo deny check advisories` without network: against the RustSec snapshot committed in
# .ci/advisory-db (scripts/advisory-db.py refreshes it). cargo-deny reads its database as
# a git repository under deny.toml's db-path, so the snapshot becomes a throw-away one
# there, dated as its source commit (cargo-deny warns about a stale database by that date).
set -euo pipefail
cd "$(dirname "$0")/.."
snap=.ci/advisory-db
missing=$(cat Cargo.lock fuzz/Cargo.lock | sed -n 's/^name = "\(.*\)"$/\1/p' | sort -u |
  comm -23 - <(sort -u "$snap/CRATES"))
if [ -n "$missing" ]; then
  echo "nfx: the advisory snapshot was not made for: $(echo $missing)" >&2
  echo "nfx: refresh it: python3 scripts/advisory-db.py <clone of rustsec/advisory-db>" >&2
  exit 1
fi
read -r _ commit date < "$snap/SOURCE"
# The directory name cargo-deny derives from the default database URL.
db=target/advisory-db/advisory-db-3157b0e258782691
rm -rf "$db"
mkdir -p "$db"
cp -r "$snap/crates" "$db/"
git -C "$db" init -q
git -C "$db" add -A
GIT_AUTHOR_DATE="$date" GIT_COMMITTER_DATE="$date" \
  git -C "$db" -c user.name=nfx -c user.email=nfx@localhost \
  commit -q -m "RustSec advisory-db $commit (pruned to nfx's crates)"
target/tools/cargo-deny/bin/cargo-deny --offline check advisories
