#!/usr/bin/env python3
"""k-means with dakit.KMeans beside scikit-learn's KMeans.

Makes synthetic blobs (Gaussian clouds around random centres), clusters them
with dakit.KMeans (scikit-learn's estimator shape: fit, predict, labels_,
cluster_centers_, inertia_) and, when scikit-learn is installed, with
sklearn.cluster.KMeans from the same initial centroids (Lloyd's algorithm,
one start), then compares the two: the same labels, and centroids equal to
float32 rounding (the two sum in different orders).

Run:  python3 examples/python/kmeans.py [--backend cpu] [--samples 20000] [--clusters 6]
Needs the dakit package and NumPy; scikit-learn only for the comparison.
Exits 1 if the labels differ from scikit-learn's or the centroids by more than 1e-4.
"""
import argparse
import sys
import time

import numpy as np

import dakit


def blobs(rng, n, k, d):
    """n points in d dimensions around k centres, float32 as dakit clusters them."""
    centres = rng.uniform(-10, 10, size=(k, d))
    truth = rng.integers(k, size=n)
    return (centres[truth] + rng.normal(scale=1.5, size=(n, d))).astype(np.float32)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default=None,
                        help="dakit backend: cpu, opencl, cuda or a comma list in order of preference "
                             "(default: dakit's automatic choice, which DAKIT_BACKEND can set)")
    parser.add_argument("--samples", type=int, default=20000, help="number of points (default 20000)")
    parser.add_argument("--clusters", type=int, default=6, help="k, the number of clusters (default 6)")
    parser.add_argument("--features", type=int, default=3, help="dimensions of a point (default 3)")
    parser.add_argument("--iterations", type=int, default=300,
                        help="Lloyd iterations at most (default 300, scikit-learn's max_iter)")
    args = parser.parse_args()
    rng = np.random.default_rng(14)
    k = args.clusters

    X = blobs(rng, args.samples, k, args.features)
    init = X[rng.choice(len(X), k, replace=False)]  # the same start for both libraries

    start = time.perf_counter()
    km = dakit.KMeans(n_clusters=k, init=init, max_iter=args.iterations, tol=0.0, backend=args.backend).fit(X)
    took = time.perf_counter() - start
    print("dakit.KMeans: %d points, k=%d, %d iterations in %.1f ms, inertia %.6g"
          % (len(X), k, km.n_iter_, took * 1e3, km.inertia_))
    print("  cluster sizes: %s" % " ".join(str(s) for s in np.bincount(km.labels_, minlength=k)))

    try:
        from sklearn.cluster import KMeans
    except ImportError:
        print("scikit-learn: skipped, it is not installed (pip install scikit-learn)")
        return 0
    # tol=0 and Lloyd's algorithm: both stop once nothing changes any more,
    # and both give the labels under the final centroids.
    start = time.perf_counter()
    ref = KMeans(n_clusters=k, init=init, n_init=1, algorithm="lloyd", max_iter=args.iterations, tol=0.0).fit(X)
    took = time.perf_counter() - start
    same = int((km.labels_ == ref.labels_).sum())
    moved = float(np.abs(km.cluster_centers_ - ref.cluster_centers_).max())
    print("sklearn KMeans: %d iterations in %.1f ms, inertia %.6g" % (ref.n_iter_, took * 1e3, ref.inertia_))
    print("labels equal to scikit-learn's: %d of %d; centroids at most %.1e apart"
          % (same, len(X), moved))
    # new points are labelled alike too
    fresh = blobs(np.random.default_rng(15), 1000, k, args.features)
    agree = int((km.predict(fresh) == ref.predict(fresh)).sum())
    print("predict on %d new points: %d equal" % (len(fresh), agree))
    return 0 if same == len(X) and agree == len(fresh) and moved <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
