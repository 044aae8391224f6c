#!/usr/bin/env python3
"""Rewrites a workload CSV for `sluice simulate`: arrival times divided by a factor (run times
unchanged), optionally only a window of arrivals. Python standard library only.

  trace_compress.py IN.csv OUT.csv [--factor K] [--from SECONDS] [--to SECONDS]

--from/--to pick rows by their ORIGINAL submit time (seconds since the trace's first job);
the kept rows are shifted so the first one arrives at 0, then divided by K. All other
columns are copied as they are.
"""
import argparse
import csv
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--factor", type=float, default=1.0, help="divide arrival times by this (default 1)")
    ap.add_argument("--from", dest="start", type=float, default=None, help="first original submit kept (s)")
    ap.add_argument("--to", dest="end", type=float, default=None, help="last original submit kept (s, exclusive)")
    a = ap.parse_args()
    if a.factor <= 0:
        sys.exit("--factor must be positive")
    with open(a.input, newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    s = header.index("submit")
    keep = [r for r in body if r and (a.start is None or float(r[s]) >= a.start)
            and (a.end is None or float(r[s]) < a.end)]
    if not keep:
        sys.exit("no rows in that window")
    t0 = min(float(r[s]) for r in keep)
    for r in keep:
        r[s] = str(int(round((float(r[s]) - t0) / a.factor)))
    keep.sort(key=lambda r: int(r[s]))
    with open(a.output, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(keep)
    print(f"{a.output}: {len(keep)} jobs, arrivals / {a.factor:g}", file=sys.stderr)


if __name__ == "__main__":
    main()
