#!/usr/bin/env python3
"""The localized EnKF with dakit.enkf on a Lorenz '96 model, beside dense NumPy.

A 40-variable Lorenz '96 model (F = 8) is observed every other variable
through H, a dense NumPy matrix. The script
  1. forms PHT = [C o (e e^T)] H^T / (L-1) with dakit.enkf.cov (C the
     localization, never formed by dakit) and compares it with the dense
     NumPy product;
  2. runs one stochastic analysis with dakit.enkf.analysis and compares it
     with the same formulas written densely (with dakit's perturbations,
     dakit.enkf.perturbations);
  3. cycles forecast and analysis with a dakit.enkf.Plan (made once) and
     prints the error of the ensemble mean against the truth, beside a run
     without assimilation.

Run:  python3 examples/python/enkf.py [--backend cpu] [--members 20] [--cycles 40]
Needs the dakit package and NumPy. Exits 1 if dakit and NumPy differ
by more than 1e-11 of the largest value.
"""
import argparse
import sys

import numpy as np

import dakit

N = 40           # state variables on the ring
F = 8.0          # Lorenz '96 forcing: chaotic
DT = 0.05        # one model step (6 hours in Lorenz's reading)


def l96(x):
    """dx/dt for every column of x (one column per member)."""
    return (np.roll(x, -1, axis=0) - np.roll(x, 2, axis=0)) * np.roll(x, 1, axis=0) - x + F


def forecast(x, steps):
    """Fourth-order Runge-Kutta, `steps` steps of DT."""
    for _ in range(steps):
        k1 = l96(x)
        k2 = l96(x + 0.5 * DT * k1)
        k3 = l96(x + 0.5 * DT * k2)
        k4 = l96(x + DT * k3)
        x = x + DT / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return x


def gaspari_cohn(d, c):
    """Gaspari and Cohn's fifth-order compactly supported correlation (0 beyond 2c)."""
    r = np.abs(d) / c
    out = np.zeros_like(r)
    a, b = r <= 1, (r > 1) & (r < 2)
    ra, rb = r[a], r[b]
    out[a] = -ra ** 5 / 4 + ra ** 4 / 2 + 5 * ra ** 3 / 8 - 5 * ra ** 2 / 3 + 1
    out[b] = rb ** 5 / 12 - rb ** 4 / 2 + 5 * rb ** 3 / 8 + 5 * rb ** 2 / 3 - 5 * rb + 4 - 2 / (3 * rb)
    return out


# ---- the same formulas, dense (bindings/python/tests/test_enkf.py) ----

def dense_cov(e, loc, Hd):
    i = np.arange(len(loc))
    C = loc[np.abs(i[:, None] - i[None, :])]     # the N x N Toeplitz matrix dakit never forms
    pht = (C * (e @ e.T)) @ Hd.T / (e.shape[1] - 1)
    return pht, Hd @ pht


def dense_analysis(X, y, r, Hd, loc, seed, inflation):
    L = X.shape[1]
    mean = X.mean(axis=1, keepdims=True)
    A = inflation * (X - mean)
    pht, hpht = dense_cov(A, loc, Hd)
    D = y[:, None] + dakit.enkf.perturbations(seed, r, L) - Hd @ (mean + A)
    return mean + A + pht @ np.linalg.solve(hpht + np.diag(r), D)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default=None,
                        help="dakit backend: cpu, opencl, cuda or a comma list in order of preference "
                             "(default: dakit's automatic choice, which DAKIT_BACKEND can set)")
    parser.add_argument("--members", type=int, default=20, help="ensemble members L (default 20)")
    parser.add_argument("--cycles", type=int, default=40, help="forecast-analysis cycles (default 40)")
    parser.add_argument("--radius", type=float, default=4.0,
                        help="localization half-width c in grid points (zero beyond 2c; default 4)")
    args = parser.parse_args()
    rng = np.random.default_rng(14)
    L = args.members

    # observe x[0], x[2], ...: M = 20 rows of H, one 1 in each
    obs = np.arange(0, N, 2)
    # a dense NumPy H is enough (dakit keeps its nonzero entries); a
    # scipy.sparse matrix is taken as well
    H = np.zeros((obs.size, N))
    H[np.arange(obs.size), obs] = 1.0
    r = np.full(obs.size, 1.0)                     # observation error variances
    # the first row of the symmetric Toeplitz localization (distance along
    # the index, so the ring's wrap-around pairs count as far apart)
    loc = gaspari_cohn(np.arange(N, dtype=float), args.radius)

    truth = forecast(F + rng.normal(size=(N, 1)), 1000)           # on the attractor
    ens = forecast(truth + rng.normal(size=(N, L)), 100)           # spread out, then run on
    free = ens.copy()                                              # the same start, never corrected

    # 1. the covariance product
    e = ens - ens.mean(axis=1, keepdims=True)
    pht, hpht = dakit.enkf.cov(e, loc, H, hpht=True, backend=args.backend)
    ref, ref_hpht = dense_cov(e, loc, H)
    d_cov = max(np.abs(pht - ref).max() / np.abs(ref).max(), np.abs(hpht - ref_hpht).max() / np.abs(ref_hpht).max())
    print("enkf.cov: PHT %s, HPHT %s, max |dakit - numpy| = %.1e of the largest value" % (pht.shape, hpht.shape,
                                                                                           d_cov))

    # 2. one analysis
    y = H @ truth[:, 0] + rng.normal(size=obs.size) * np.sqrt(r)
    xa = dakit.enkf.analysis(ens, y, r, H, loc, seed=1, inflation=1.05, backend=args.backend)
    ref = dense_analysis(ens, y, r, H, loc, 1, 1.05)
    d_ana = np.abs(xa - ref).max() / np.abs(ref).max()
    print("enkf.analysis: %d x %d ensemble, max |dakit - numpy| = %.1e of the largest value" % (N, L, d_ana))

    # 3. cycling, with a plan made once
    rmse = lambda x: float(np.sqrt(np.mean((x.mean(axis=1) - truth[:, 0]) ** 2)))
    with dakit.enkf.Plan(N, L, loc, H, backend=args.backend) as plan:
        print("cycling with %r:" % plan)
        for cycle in range(1, args.cycles + 1):
            truth = forecast(truth, 1)
            ens, free = forecast(ens, 1), forecast(free, 1)
            y = H @ truth[:, 0] + rng.normal(size=obs.size) * np.sqrt(r)
            before = rmse(ens)
            plan.analysis(ens, y, r, seed=cycle, inflation=1.05, out=ens)   # in place
            if cycle % 10 == 0 or cycle == args.cycles:
                print("  cycle %3d: rmse forecast %.3f, analysis %.3f, without assimilation %.3f"
                      % (cycle, before, rmse(ens), rmse(free)))
    print("enkf example: dakit and numpy agree" if max(d_cov, d_ana) <= 1e-11 else "enkf example: FAILED")
    return 0 if max(d_cov, d_ana) <= 1e-11 else 1


if __name__ == "__main__":
    sys.exit(main())
