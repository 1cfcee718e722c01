#!/usr/bin/env python3
"""Picks the committed corpus of one target: the hand-made seeds plus at most N other
inputs, chosen greedily by how many coverage edges each adds (largest gain first, the
smaller file on ties), from a libFuzzer merge control file (`-merge=1 -use_counters=0
-merge_control_file=F`, written by scripts/fuzz.sh cmin). Prints the chosen paths.

    select.py CONTROL_FILE N
"""

import os
import sys


def main():
    control, budget = sys.argv[1], int(sys.argv[2])
    with open(control) as f:
        lines = f.read().splitlines()
    n = int(lines[0])
    files = lines[2 : 2 + n]
    # The same input may be in both the corpus and the work directory: keep one path.
    first = {}
    for i, p in enumerate(files):
        first.setdefault(os.path.basename(p), i)
    cov = {}
    for line in lines[2 + n :]:
        if line.startswith("COV "):
            parts = line.split()
            cov[int(parts[1])] = set(map(int, parts[2:]))
    covered = set()
    chosen = []
    for i, path in enumerate(files):
        if first[os.path.basename(path)] != i:
            continue
        if os.path.basename(path).startswith("seed-"):
            chosen.append(path)
            covered |= cov.get(i, set())
    others = [
        i for i, p in enumerate(files) if first[os.path.basename(p)] == i and not os.path.basename(p).startswith("seed-")
    ]
    size = {i: os.path.getsize(files[i]) for i in others}
    for _ in range(budget):
        best, gain = None, 0
        for i in others:
            g = len(cov.get(i, set()) - covered)
            if g > gain or (g == gain and g > 0 and size[i] < size[best]):
                best, gain = i, g
        if best is None:
            break
        chosen.append(files[best])
        covered |= cov[best]
        others.remove(best)
    print("\n".join(chosen))
    total = set().union(*cov.values()) if cov else set()
    print(f"{len(chosen)} files cover {len(covered)} of {len(total)} edges", file=sys.stderr)


if __name__ == "__main__":
    main()
