#!/usr/bin/env python3
"""Writes a valid sluice Pipeline of exactly N steps to standard output, for the lint benchmark.

Shapes:
  chain  s0 -> s1 -> ... -> s(N-1). Each step needs its predecessor and reads the
         predecessor's output through {{steps.PREV.outputs.out}}, so reference and
         upstream checks run on every step, along a path N steps deep.
  fan    wide, and O(N) in file size: one `root`; about N workers w0, w1, ... that each need
         root and read its output (all in one level, so they could all run at once); then
         a reduction tree: reducers r1-0, r1-1, ... each need (and read the outputs of) up to
         FANIN (100) workers, reducers r2-* each need up to 100 of the r1-*, and so on,
         until one step, `join`, needs what is left. Every worker and reducer is named once
         in some `needs` list, so the file grows linearly, no `needs` list has more than
         about 100 names, and every step is upstream of `join`. (A single join that needs
         every worker would be one line of O(N) names; a join that needs only one worker
         would leave the fan-in untested.) When N cannot be met exactly by the tree, the
         1 or 2 steps left over become extra workers that `join` needs directly.

Names match ^[a-z][a-z0-9-]{0,62}$. The pipelines are meant to be linted, not run (their
commands use `cat`, `wc` and `echo`, which would work, but 100,000 processes is not the point).

Usage: gen_pipeline.py --shape chain|fan --steps N [--fanin F]
"""
import argparse
import sys

HEADER = "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata:\n  name: {name}\nspec:\n  steps:\n"


def ref(step):
    return "{{steps.%s.outputs.out}}" % step


def chain(n, out):
    out.write(HEADER.format(name=f"bench-chain-{n}"))
    out.write('    - name: s0\n      run: echo 0 > "$SLUICE_OUTPUT_DIR/out"\n      outputs: [out]\n')
    for i in range(1, n):
        out.write(
            f"    - name: s{i}\n"
            f"      needs: [s{i - 1}]\n"
            f'      run: cat {ref(f"s{i - 1}")} > "$SLUICE_OUTPUT_DIR/out"\n'
            "      outputs: [out]\n"
        )


def reduction_levels(workers, fanin):
    """Sizes of the reducer levels above `workers` leaves; the last level has one step (join)."""
    levels, width = [], workers
    while True:
        width = -(-width // fanin)  # ceil
        levels.append(width)
        if width == 1:
            return levels


def fan_layout(n, fanin):
    """(workers, levels, extra) such that 1 + workers + sum(levels) + extra == n."""
    workers = n - 2
    while workers > 1 and 1 + workers + sum(reduction_levels(workers, fanin)) > n:
        workers -= 1
    levels = reduction_levels(workers, fanin)
    extra = n - (1 + workers + sum(levels))
    assert extra >= 0, (n, workers, levels)
    return workers, levels, extra


def reducer(name, children, out):
    needs = ", ".join(children)
    inputs = " ".join(ref(c) for c in children)
    out.write(
        f"    - name: {name}\n"
        f"      needs: [{needs}]\n"
        f'      run: cat {inputs} > "$SLUICE_OUTPUT_DIR/out"\n'
        "      outputs: [out]\n"
    )


def fan(n, out, fanin):
    workers, levels, extra = fan_layout(n, fanin)
    out.write(HEADER.format(name=f"bench-fan-{n}"))
    out.write('    - name: root\n      run: echo data > "$SLUICE_OUTPUT_DIR/data"\n      outputs: [data]\n')
    below = [f"w{i}" for i in range(workers)] + [f"x{i}" for i in range(extra)]
    for name in below:
        out.write(
            f"    - name: {name}\n"
            "      needs: [root]\n"
            '      run: wc -c {{steps.root.outputs.data}} > "$SLUICE_OUTPUT_DIR/out"\n'
            "      outputs: [out]\n"
        )
    # The extra workers skip the tree and go straight to `join`.
    children, direct = below[:workers], below[workers:]
    for depth, width in enumerate(levels, start=1):
        names = ["join"] if width == 1 else [f"r{depth}-{j}" for j in range(width)]
        groups = [[] for _ in names]
        for i, child in enumerate(children):
            groups[i * width // len(children)].append(child)  # contiguous, even-sized groups
        if width == 1:
            groups[0] += direct
        for name, group in zip(names, groups):
            reducer(name, group, out)
        children = names


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=["chain", "fan"], required=True)
    p.add_argument("--steps", type=int, required=True, help="number of steps (at least 3)")
    p.add_argument("--fanin", type=int, default=100, help="fan shape: most steps a reducer needs")
    a = p.parse_args()
    if a.steps < 3:
        p.error("--steps must be at least 3")
    if a.fanin < 2:
        p.error("--fanin must be at least 2")
    out = sys.stdout
    if a.shape == "chain":
        chain(a.steps, out)
    else:
        fan(a.steps, out, a.fanin)
    out.flush()


if __name__ == "__main__":
    main()
