#!/usr/bin/env python3
"""Refreshes the RustSec advisory snapshot the test script checks Cargo.lock against.

CI cannot reach GitHub, so `cargo deny check advisories` runs on a snapshot committed in
`.ci/advisory-db/`: the advisories (`crates/<name>/RUSTSEC-*.md`, CC0) of every crate the
workspace's and the fuzz workspace's locks name, the snapshot's source commit and date
(`SOURCE`), and the crate names it was made for (`CRATES`; the test script fails when a
lock names one that is not there).

Usage: python3 scripts/advisory-db.py PATH-TO-A-CLONE-OF-rustsec/advisory-db
"""

import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / ".ci" / "advisory-db"
LOCKS = [ROOT / "Cargo.lock", ROOT / "fuzz" / "Cargo.lock"]


def lock_crates():
    names = set()
    for lock in LOCKS:
        names |= set(re.findall(r'^name = "([^"]+)"', lock.read_text(), re.M))
    return sorted(names)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    src = pathlib.Path(sys.argv[1])
    if not (src / "crates").is_dir():
        sys.exit(f"{src}: not a clone of rustsec/advisory-db (no crates/)")
    commit, date = subprocess.check_output(
        ["git", "-C", str(src), "show", "-s", "--format=%H %cI", "HEAD"], text=True
    ).split()
    names = lock_crates()
    if OUT.exists():
        shutil.rmtree(OUT)
    (OUT / "crates").mkdir(parents=True)
    kept = 0
    for name in names:
        d = src / "crates" / name
        if d.is_dir():
            shutil.copytree(d, OUT / "crates" / name)
            kept += len(list(d.glob("*.md")))
    (OUT / "SOURCE").write_text(
        f"https://github.com/rustsec/advisory-db {commit} {date}\n"
    )
    (OUT / "CRATES").write_text("".join(n + "\n" for n in names))
    print(f"{kept} advisories of {len(names)} crates from {commit[:12]} ({date}) in {OUT}")


if __name__ == "__main__":
    main()
