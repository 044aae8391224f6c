"""One trial of the sweep benchmarks: Branin at (x1, x2), printed as loss=VALUE."""
import math
import sys

x1, x2 = float(sys.argv[1]), float(sys.argv[2])
b, c, r, s, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 6, 10, 1 / (8 * math.pi)
print(f"loss={(x2 - b * x1**2 + c * x1 - r) ** 2 + s * (1 - t) * math.cos(x1) + s}")
