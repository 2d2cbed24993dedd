#!/usr/bin/env python3
"""Cluster a DWD RADOLAN radar composite with dakit.radar, in five lines.

Reads the composite with dakit.radar.read_radolan (libdakit's reader), then
dakit.radar.cluster runs the pipeline of `dakit kmeans --radolan` on the
backend: per pixel the reflectivity and its local mean and standard
deviation, and k-means with the contiguity cost, so that clusters are
patches of rain rather than scattered pixels. Prints each cluster's size and
mean reflectivity; with --png FILE it also draws the clusters (when
matplotlib is installed; it is never required).

Run:  python3 examples/python/radar.py [FILE] [--backend cpu] [--k 6] [--png clusters.png]
FILE defaults to the repository's composite of 10 August 2014, 20:50 UTC
(tests/data/raa01-rx_10000-1408102050-dwd---bin.gz).
"""
import argparse
import os
import sys

import numpy as np

import dakit

HERE = os.path.dirname(os.path.abspath(__file__))
COMPOSITE = os.path.join(HERE, "..", "..", "tests", "data", "raa01-rx_10000-1408102050-dwd---bin.gz")


def save_png(path, data, labels, meta):
    try:
        import matplotlib
        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        print("png: skipped, matplotlib is not installed (pip install matplotlib)")
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 5), constrained_layout=True)
    im = a.imshow(data, origin="lower", cmap="viridis")  # row 0 is the grid's south edge
    fig.colorbar(im, ax=a, label=meta["unit"])
    a.set_title("%s %s" % (meta["product"], meta["time"].strftime("%Y-%m-%d %H:%M UTC")))
    k = labels.max() + 1
    im = b.imshow(np.ma.masked_less(labels, 0), origin="lower", cmap=plt.get_cmap("tab10", k),
                  vmin=-0.5, vmax=k - 0.5, interpolation="nearest")
    fig.colorbar(im, ax=b, label="cluster", ticks=range(k))
    b.set_title("dakit.radar.cluster: %d clusters" % k)
    fig.savefig(path, dpi=80)
    print("png: wrote %s" % path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", nargs="?", default=COMPOSITE,
                        help="a RADOLAN composite, gzip or plain (default: the repository's RX composite)")
    parser.add_argument("--backend", default=None,
                        help="dakit backend: cpu, opencl, cuda or a comma list in order of preference "
                             "(default: dakit's automatic choice, which DAKIT_BACKEND can set)")
    parser.add_argument("--k", type=int, default=6, help="number of clusters (default 6)")
    parser.add_argument("--png", metavar="FILE", help="also draw the data and the clusters into FILE "
                                                      "(needs matplotlib)")
    args = parser.parse_args()

    # the five lines
    try:
        data, meta = dakit.radar.read_radolan(args.file, xarray=False)
    except (dakit.FileError, dakit.FormatError) as e:  # libdakit's sentence: missing, truncated, not RADOLAN
        sys.exit("radar: %s" % e)
    labels, centroids = dakit.radar.cluster(data, k=args.k, backend=args.backend)
    clustered = labels >= 0                  # -1: no data, or below 5 dBZ
    sizes = np.bincount(labels[clustered], minlength=args.k)
    print("radar: %s %s, %d x %d pixels, %d with data, %d clustered"
          % (meta["product"], meta["time"].strftime("%Y-%m-%d %H:%M UTC"), meta["rows"], meta["cols"], meta["data_pixels"], clustered.sum()))

    for c in range(args.k):
        inside = data[labels == c]
        print("  cluster %d: %6d pixels, mean %5.1f %s" % (c, sizes[c], inside.mean() if inside.size else np.nan,
                                                            meta["unit"]))
    print("cluster sizes: %s" % " ".join(str(s) for s in sizes))
    if args.png:
        save_png(args.png, data, labels, meta)

    # every pixel has at most one cluster, and only pixels with data have one
    ok = labels.max() < args.k and sizes.sum() == clustered.sum() and np.isfinite(data[clustered]).all()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
