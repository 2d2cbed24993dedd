"""dakit: GPU kernels for data assimilation, from Python.

A thin binding of libdakit (ctypes; the GIL is released during every call):
the C library checks parameters and data and words every error; this
package translates arrays and raises those sentences as exceptions.

    import dakit
    print(dakit.info())                      # backends, devices, algorithms, variants
    y = dakit.gauss(x, sigma=3.0)            # NumPy in, NumPy out (CuPy in, CuPy out on cuda)
    km = dakit.KMeans(4).fit(points)         # scikit-learn's estimator shape
    pht = dakit.enkf.cov(e, loc, H)          # H: scipy.sparse
    xa = dakit.letkf(xb, yb, yo, obs_var, grid_coords, obs_coords, radius)   # the local ETKF
    run = dakit.gbees.propagate("lorenz63", "measurements/")   # snapshots of the density
    data, meta = dakit.radar.read_radolan("raa01-rx...gz")     # a DWD RADOLAN composite
    labels, centroids = dakit.radar.cluster(data, k=6)         # dakit kmeans --radolan

See docs/python.md in the dakit repository.
"""
from ._native import library_path
from ._errors import (BackendError, Error, FileError, FormatError, InvalidArgumentError, NoBackendError,
                      NotImplementedByBackendError, OutOfMemoryError)
from ._context import Backend, Context, Device, Info, default_context, info
from ._gauss import GaussPlan, gauss, gauss_alpha
from ._kmeans import KMeans
from ._letkf import LetkfDiagnostics, LetkfPlan, letkf, letkf_apply, letkf_departures, letkf_reference
from . import enkf, gbees, radar

try:
    from ._version import version as __version__
except ImportError:  # the sources, not an install
    __version__ = "unknown"

__all__ = [
    "info", "Info", "Backend", "Device", "Context", "default_context",
    "gauss", "GaussPlan", "gauss_alpha", "KMeans", "enkf", "gbees", "radar",
    "letkf", "LetkfPlan", "LetkfDiagnostics", "letkf_reference", "letkf_departures", "letkf_apply",
    "Error", "InvalidArgumentError", "NoBackendError", "NotImplementedByBackendError", "BackendError",
    "OutOfMemoryError", "FileError", "FormatError", "library_path",
]
