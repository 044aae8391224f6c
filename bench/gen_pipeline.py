#!/usr/bin/env python3
"""Writes a valid sluice Pipeline of N steps to standard output, for the lint benchmark.

Shapes:
  chain  s0 -> s1 -> ... -> s(N-1); each step reads its predecessor's output through
         {{steps.PREV.outputs.out}}, so reference and upstream checks run on every step.
  fan    one `root`, N-2 steps that each need root and read its output, and a `join`
         that needs the first of them: a graph 2 levels wide with N-2 steps in a level.
         (A join needing all N-2 steps would make the file quadratic in size, so it
         needs one; width is what the shape measures.)

Usage: gen_pipeline.py --shape chain|fan --steps N
"""
import argparse
import sys


def chain(n, out):
    out.write("apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {name: chain}\nspec:\n  steps:\n")
    out.write("    - name: s0\n      run: echo 0 > \"$SLUICE_OUTPUT_DIR/out\"\n      outputs: [out]\n")
    for i in range(1, n):
        out.write(
            f"    - name: s{i}\n      needs: [s{i - 1}]\n"
            f"      run: cat {{{{steps.s{i - 1}.outputs.out}}}} > \"$SLUICE_OUTPUT_DIR/out\"\n"
            "      outputs: [out]\n"
        )


def fan(n, out):
    out.write("apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {name: fan}\nspec:\n  steps:\n")
    out.write("    - name: root\n      run: echo data > \"$SLUICE_OUTPUT_DIR/data\"\n      outputs: [data]\n")
    for i in range(n - 2):
        out.write(f"    - name: w{i}\n      needs: [root]\n      run: wc -c {{{{steps.root.outputs.data}}}}\n")
    out.write("    - name: join\n      needs: [w0]\n      run: echo done\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=["chain", "fan"], required=True)
    p.add_argument("--steps", type=int, required=True)
    a = p.parse_args()
    if a.steps < 3:
        p.error("--steps must be at least 3")
    (chain if a.shape == "chain" else fan)(a.steps, sys.stdout)


if __name__ == "__main__":
    main()
