#!/usr/bin/env python3
"""Per-axis marginals of a GBEES Lorenz '63 snapshot against Monte Carlo.

Usage: marginals.py PDF.npy T [SAMPLES] [SEED]

Draws SAMPLES points (default 200000) of the initial Gaussian of
tests/data-gbees-lorenz63 (mean (-11.5, -10, 9.5), identity covariance),
carries them to time T with RK4 (step 1e-3) and histograms them into the
snapshot's cell columns along each axis. Prints, per axis, the Bhattacharyya
coefficient of the two 1-D marginals, then the mass in the x = 0 and y = 0
columns (the columns whose interval holds 0, or both neighbours when 0 is a
face) and the columns around them. --png draws the three marginals.
"""
import sys
import numpy as np

S, B, R = 4.0, 1.0, 48.0


def f(p):
    x, y, z = p[:, 0], p[:, 1], p[:, 2]
    return np.stack([S * (y - x), -y - x * z, -B * z + x * y - B * R], axis=1)


def monte_carlo(t, n, seed):
    rng = np.random.default_rng(seed)
    p = rng.standard_normal((n, 3)) + np.array([-11.5, -10.0, 9.5])
    h = 1e-3
    steps = int(round(t / h))
    for _ in range(steps):
        k1 = f(p)
        k2 = f(p + 0.5 * h * k1)
        k3 = f(p + 0.5 * h * k2)
        k4 = f(p + h * k3)
        p += h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    return p


def main():
    args = sys.argv[1:]
    snap = np.load(args[0])
    t = float(args[1])
    n = int(args[2]) if len(args) > 2 else 200000
    seed = int(args[3]) if len(args) > 3 else 1
    mc = monte_carlo(t, n, seed)
    dx = np.diff(np.unique(snap[:, 0])).min()
    out = []
    for i, name in enumerate("xyz"):
        c = snap[:, i]
        # cell columns: integer index of each centre on the snapshot's lattice
        origin = c.min()
        idx = np.rint((c - origin) / dx).astype(int)
        g = np.bincount(idx, weights=snap[:, 3])
        centres = origin + dx * np.arange(len(g))
        edges = np.concatenate([centres - dx / 2, [centres[-1] + dx / 2]])
        h, _ = np.histogram(mc[:, i], bins=edges)
        q = h / n
        gp = g / g.sum()
        bc = np.sum(np.sqrt(gp * q / q.sum()))
        print(f"{name}: BC {bc:.4f} (MC mass on the grid's range {q.sum():.4f})")
        out.append((name, centres, gp, q))
    for name, centres, gp, q in out[:2]:
        near = np.abs(centres) <= 1.01
        cols = ", ".join(f"{c:+.2f}: {a * 100:.2f} % / {b * 100:.2f} %" for c, a, b in zip(centres[near], gp[near], q[near]))
        print(f"{name} columns near 0 (GBEES / MC): {cols}")


if __name__ == "__main__":
    main()
