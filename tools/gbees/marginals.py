#!/usr/bin/env python3
"""Per-axis marginals of a GBEES Lorenz '63 snapshot against Monte Carlo.

Usage: marginals.py PDF.npy T [SAMPLES] [SEED] [--png FILE]
       marginals.py --axis RUN_DIR [SAMPLES] [SEED] [--png FILE]

Draws SAMPLES points (default 200000) of the initial Gaussian of
tests/data-gbees-lorenz63 (mean (-11.5, -10, 9.5), identity covariance),
carries them with RK4 (step 1e-3) and compares them with GBEES.

The first form histograms them at time T into the snapshot's cell columns
along each axis and prints, per axis, the Bhattacharyya coefficient of the
two 1-D marginals, then the mass in the x = 0 and y = 0 columns (the
columns whose interval holds 0, or both neighbours when 0 is a face) and the
columns around them; --png draws the three marginals.

The second form reads every snapshot of a `dakit gbees` run (RUN_DIR's
summary.txt gives their times) and prints, at each, the probability within
one and a half cells of the z-axis (|x|, |y| < 1.5 dx: the axis cells and
their neighbours) for GBEES and Monte Carlo, and the rate at which each
decays from the snapshot before; --png draws the two masses against time.
"""
import sys
import numpy as np

S, B, R = 4.0, 1.0, 48.0


def f(p):
    x, y, z = p[:, 0], p[:, 1], p[:, 2]
    return np.stack([S * (y - x), -y - x * z, -B * z + x * y - B * R], axis=1)


def monte_carlo(times, n, seed):
    """The samples at each of the sorted times (a list of arrays)."""
    rng = np.random.default_rng(seed)
    p = rng.standard_normal((n, 3)) + np.array([-11.5, -10.0, 9.5])
    h = 1e-3
    out, step = [], 0
    for t in times:
        for _ in range(int(round(t / h)) - step):
            k1 = f(p)
            k2 = f(p + 0.5 * h * k1)
            k3 = f(p + 0.5 * h * k2)
            k4 = f(p + h * k3)
            p += h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        step = int(round(t / h))
        out.append(p.copy())
    return out


def take_png(args):
    """Removes --png FILE from args; returns FILE or None."""
    if "--png" not in args:
        return None
    i = args.index("--png")
    if i + 1 >= len(args):
        sys.exit("marginals.py: --png needs a file name")
    name = args[i + 1]
    del args[i:i + 2]
    return name


def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        sys.exit("marginals.py: --png needs matplotlib (apt-get install python3-matplotlib)")


def axis_mass(cells, weights, half):
    near = (np.abs(cells[:, 0]) < half) & (np.abs(cells[:, 1]) < half)
    return weights[near].sum()


def axis_decay(run, n, seed, png):
    times = {}
    with open(f"{run}/summary.txt") as fh:
        for line in fh:
            w = line.split()
            if len(w) == 4 and w[0] == "snapshot" and w[2] == "t":
                times[w[1]] = float(w[3])
    if not times:
        sys.exit(f"marginals.py: no snapshots listed in {run}/summary.txt")
    names = sorted(times, key=times.get)
    mcs = monte_carlo([times[k] for k in names], n, seed)
    rows, prev = [], None
    print("t, probability within 1.5 dx of the z-axis (GBEES, Monte Carlo), decay rates since the snapshot before")
    for name, mc in zip(names, mcs):
        snap = np.load(f"{run}/{name}.npy")
        xs = np.unique(snap[:, 0])
        dx = np.diff(xs).min() if len(xs) > 1 else 1.0
        g = axis_mass(snap, snap[:, 3], 1.5 * dx) / snap[:, 3].sum()
        q = axis_mass(mc, np.full(n, 1.0 / n), 1.5 * dx)
        t = times[name]
        rates = ""
        if prev and g > 0 and q > 0 and prev[1] > 0 and prev[2] > 0 and t > prev[0]:
            rates = f"   {np.log(prev[1] / g) / (t - prev[0]):6.2f}  {np.log(prev[2] / q) / (t - prev[0]):6.2f}"
        print(f"{t:6.3f}  {100 * g:7.3f} %  {100 * q:7.3f} %{rates}")
        rows.append((t, g, q))
        prev = (t, g, q)
    if png:
        plt = pyplot()
        t, g, q = (np.array(c) for c in zip(*rows))
        fig, ax = plt.subplots(figsize=(6, 4))
        # zero (no mass there yet) has no place on a log scale
        ax.semilogy(t, np.where(g > 0, g, np.nan), "o-", label="GBEES")
        ax.semilogy(t, np.where(q > 0, q, np.nan), "s--", label=f"Monte Carlo ({n} samples)")
        ax.set_xlabel("t")
        ax.set_ylabel("probability with |x|, |y| < 1.5 dx")
        ax.set_title(f"Lorenz '63 near the z-axis, dx = {dx:g}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(png, dpi=100)


def main():
    args = sys.argv[1:]
    png = take_png(args)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return
    if args[0] == "--axis":
        if len(args) < 2:
            sys.exit("marginals.py: --axis needs a run folder")
        n = int(args[2]) if len(args) > 2 else 200000
        seed = int(args[3]) if len(args) > 3 else 1
        axis_decay(args[1], n, seed, png)
        return
    if len(args) < 2:
        sys.exit("marginals.py: give a snapshot and its time (--help)")
    snap = np.load(args[0])
    t = float(args[1])
    n = int(args[2]) if len(args) > 2 else 200000
    seed = int(args[3]) if len(args) > 3 else 1
    mc = monte_carlo([t], n, seed)[0]
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
    if png:
        plt = pyplot()
        fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
        for ax, (name, centres, gp, q) in zip(axes, out):
            ax.step(centres, gp, where="mid", label="GBEES")
            ax.step(centres, q / q.sum(), where="mid", linestyle="--", label="Monte Carlo")
            ax.set_xlabel(name)
        axes[0].set_ylabel("probability per column")
        axes[0].legend()
        fig.suptitle(f"Lorenz '63 marginals at t = {t:g}")
        fig.tight_layout()
        fig.savefig(png, dpi=100)


if __name__ == "__main__":
    main()
