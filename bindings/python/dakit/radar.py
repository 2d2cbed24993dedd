"""Radar reflectivity clustering: DWD RADOLAN composites in, cluster labels out.

    import dakit
    data, meta = dakit.radar.read_radolan("raa01-rx_10000-1408102050-dwd---bin.gz")
    labels, centroids = dakit.radar.cluster(data, k=6)

read_radolan is libdakit's reader (dk_radolan_read, the one `dakit kmeans
--radolan` uses); cluster is the pipeline of `dakit kmeans --radolan` with
its defaults, through the same C calls, so its labels are the command's.
"""
import ctypes
import os

import numpy as np

from ._arrays import Buffers
from ._context import Plan, context_for
from ._errors import invalid
from ._gauss import _c_int, _float
from ._kmeans import _KMeansPlan
from ._native import (C, DK_KMEANS_FEATURE_MAJOR, GaussDesc, KMeansDesc, KMeansResult, Radolan, TextureStats,
                      check, text)

__all__ = ["read_radolan", "cluster"]

FEATURES = 3  # reflectivity, its local mean, its local standard deviation


def read_radolan(path):
    """Reads a RADOLAN composite (RX, EX, WX in dBZ; RW, RY, SF, ... in mm;
    gzip or plain).

    Returns (data, meta): data is float32, (rows, cols), NaN where there is
    no data or clutter; row 0 is the grid's south edge (as DWD stores it:
    plot with origin="lower"). meta: product, time ("2014-08-10 20:50 UTC",
    "" when the header has none), unit, rows, cols, bytes_per_pixel,
    data_pixels, clutter_pixels, max_value and, for the 900 x 900 and 1100
    x 900 grids, x0_km and y0_km: the south-west corner of pixel (0, 0) in
    DWD's polar stereographic projection (1 km pixels).

    Raises dakit.FileError (cannot open or read) or dakit.FormatError (not
    a RADOLAN composite, truncated, corrupt gzip) with libdakit's sentence."""
    r = Radolan()
    check(C.dk_radolan_read(os.fsencode(path), ctypes.byref(r)), None)
    try:
        rows, cols = r.rows, r.cols
        data = np.ctypeslib.as_array(r.value, shape=(rows * cols,)).reshape(rows, cols).copy()
        meta = {"product": text(r.product), "time": text(r.time), "unit": text(r.unit),
                "rows": rows, "cols": cols, "bytes_per_pixel": r.bytes_per_pixel,
                "data_pixels": r.data_pixels, "clutter_pixels": r.clutter_pixels,
                "max_value": float(r.max_value)}
    finally:
        C.dk_radolan_free(ctypes.byref(r))
    x0, y0 = ctypes.c_double(), ctypes.c_double()
    if C.dk_radolan_grid_origin(rows, cols, ctypes.byref(x0), ctypes.byref(y0)) == 0:
        meta["x0_km"], meta["y0_km"] = x0.value, y0.value
    return data, meta


class _GaussPlan(Plan):
    def __init__(self, desc, ctx):
        super().__init__(ctx)
        h = ctypes.c_void_p()
        check(C.dk_gauss_plan_create(self._ctx.handle, ctypes.byref(desc), ctypes.byref(h)), self._ctx.handle)
        self._adopt(h)


def cluster(data, k=6, lam=0.7, window=5, texture_sigma=2.0, min_dbz=5.0, max_iter=20, backend=None):
    """Clusters a reflectivity image as `dakit kmeans --radolan` does.

    data: (rows, cols) reflectivity, NaN (or any value that is not finite)
    where there is no data. Per pixel, the features are the value and its
    local mean and standard deviation over a Gaussian neighbourhood of
    texture_sigma pixels (normalized convolutions that ignore pixels
    without data), each standardized over the clustered pixels; pixels with
    no data or below min_dbz are not clustered. The initial centroids cut
    the reflectivity's range into k equal intervals; then k-means with the
    contiguity cost: lam weighs the feature distance against the share of
    the window x window neighbours with another label; max_iter iterations
    (tol 0). backend: None (the default context), a name or a
    dakit.Context; every step runs there (dakit/kmeans.h's texture calls, a
    gauss plan, the kmeans plan) and only the labels and centroids come back.

    Returns (labels, centroids): labels int32 (rows, cols), -1 where not
    clustered; centroids float32 (k, 3) in standardized feature units."""
    who = "dakit.radar.cluster"
    value = np.asarray(data)
    if value.ndim != 2:
        raise invalid("%s: data has shape %s; it must be 2-D, (rows, cols)" % (who, value.shape))
    if value.dtype.kind not in "biuf":
        raise invalid("%s: data has dtype %s; it must hold real numbers (reflectivity)" % (who, value.dtype))
    value = np.ascontiguousarray(value, dtype=np.float32)
    rows, cols = value.shape
    n = rows * cols
    k = _c_int(k, "k", who)

    gd = GaussDesc()
    C.dk_gauss_desc_init(ctypes.byref(gd))
    gd.ndim = 3
    gd.shape[0], gd.shape[1], gd.shape[2] = FEATURES, rows, cols
    gd.axes = 0x6  # the planes are smoothed over rows and columns, each on its own
    gd.sigma[1] = gd.sigma[2] = _float(texture_sigma, "texture_sigma", who)

    kd = KMeansDesc()
    C.dk_kmeans_desc_init(ctypes.byref(kd))
    kd.n, kd.d, kd.k = n, FEATURES, k
    kd.max_iters = _c_int(max_iter, "max_iter", who)
    kd.tol = 0.0
    kd.layout = DK_KMEANS_FEATURE_MAJOR
    kd.rows, kd.cols = rows, cols
    kd.lambda_ = _float(lam, "lam", who)
    kd.window = _c_int(window, "window", who)
    min_value = _float(min_dbz, "min_dbz", who)

    ctx = context_for(backend)
    labels = np.empty((rows, cols), dtype=np.int32)
    centroids = np.empty((k, FEATURES), dtype=np.float32)
    stats, result = TextureStats(), KMeansResult()
    with _GaussPlan(gd, ctx) as gauss, _KMeansPlan(kd, ctx) as km, Buffers(ctx) as b:
        h = ctx.handle
        bv = b.create(value.nbytes, value)
        planes, points = b.create(FEATURES * n * 4), b.create(FEATURES * n * 4)
        mask, init = b.create(n), b.create(centroids.nbytes)
        bl, bc = b.create(labels.nbytes), b.create(centroids.nbytes)
        check(C.dk_kmeans_texture_planes(km.handle, bv, planes), h)
        check(C.dk_gauss_execute(gauss.handle, planes, planes), h)
        check(C.dk_kmeans_texture_features(km.handle, bv, planes, min_value, points, mask, init,
                                           ctypes.byref(stats)), h)
        check(C.dk_kmeans_execute(km.handle, points, mask, init, bl, bc, ctypes.byref(result)), h)
        b.read(bl, labels)
        b.read(bc, centroids)
    return labels, centroids
