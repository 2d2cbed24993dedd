#!/usr/bin/env python3
"""Propagate a probability density through Lorenz '63 with dakit.gbees.

GBEES (grid-based Bayesian estimation exploiting sparsity) solves the
Fokker-Planck equation on a sparse grid that grows where the density goes
and is pruned where it falls under a threshold. The measurements are the
published GBEES Lorenz '63 case (tests/data-gbees-lorenz63 in the
repository): the first is the initial Gaussian N((-11.5, -10, 9.5), I), the
second a measurement of z (-8, variance 1) applied as a Bayesian update at
t = 1. The script prints, per snapshot, the number of grid cells, the total
probability (1 up to rounding) and the density's mean.

Run:  python3 examples/python/gbees.py [MEASUREMENTS] [--backend cpu] [--threshold 5e-6]
MEASUREMENTS is a folder of measurementN.txt files (default: the repository's
Lorenz '63 case). --backend reference runs libdakit's serial reference.
Exits 1 if a snapshot's total probability is not 1 within 1e-9.
"""
import argparse
import os
import sys

import numpy as np

import dakit

HERE = os.path.dirname(os.path.abspath(__file__))
LORENZ63 = os.path.join(HERE, "..", "..", "tests", "data-gbees-lorenz63")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("measurements", nargs="?", default=LORENZ63,
                        help="folder of measurementN.txt files (default: the repository's Lorenz '63 case)")
    parser.add_argument("--backend", default=None,
                        help="dakit backend: cpu, opencl, cuda, a comma list in order of preference, or "
                             "reference (libdakit's serial reference) (default: dakit's automatic choice, "
                             "which DAKIT_BACKEND can set)")
    parser.add_argument("--threshold", type=float, default=5e-6,
                        help="cells whose probability falls below this are pruned (default 5e-6; smaller: "
                             "more cells, slower)")
    parser.add_argument("--snapshots", type=int, default=3,
                        help="snapshots per measurement period, its start and end included (default 3)")
    args = parser.parse_args()

    model = [m for m in dakit.gbees.models() if m.name == "lorenz63"][0]
    print("model: %s" % model.about)
    try:
        run = dakit.gbees.propagate("lorenz63", args.measurements, threshold=args.threshold,
                                    snapshots=args.snapshots, backend=args.backend)
    except (dakit.FileError, dakit.FormatError) as e:  # a missing or unreadable measurement file
        sys.exit("gbees: %s" % e)

    worst = 0.0
    for s in run.snapshots:
        total = s.probability.sum()
        mean = s.probability @ s.points              # the density's mean, (x, y, z)
        worst = max(worst, abs(total - 1))
        after = "  after the update" if s.period > 0 and s.index == 0 else ""
        print("period %d t=%.2f: %6d cells, total probability %.12f, mean (%6.2f, %6.2f, %6.2f)%s"
              % (s.period, s.t, len(s.probability), total, *mean, after))
    st = run.stats
    print("%s: %d steps, %.3g cell-steps, %d cells at t=%.2f"
          % (run.backend, st.steps, st.cell_steps, st.cells, st.t))
    # the update at t = 1 pulls the mean's z towards the measured -8
    return 0 if worst <= 1e-9 else 1


if __name__ == "__main__":
    sys.exit(main())
