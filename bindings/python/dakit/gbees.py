"""gbees: grid-based Bayesian uncertainty propagation.

A probability density is propagated through x' = f(x) on a sparse grid and
updated at each measurement time; the result is a list of snapshots (the
cells' centres and probabilities) at chosen times.

    import dakit
    run = dakit.gbees.propagate("lorenz63", "measurements/")   # or a list of Measurement
    for s in run.snapshots:
        print(s.t, s.points.shape, s.probability.sum())

The models are libdakit's built-in ones (`dakit.gbees.models()`); the
measurements are Gaussians N(mean, cov), the first one the initial density,
each followed by `period` time units of propagation.
"""
import ctypes
import os
from collections import namedtuple
from ctypes import POINTER, Structure, c_char_p, c_double, c_int, c_size_t, c_uint64, c_void_p

import numpy as np

from ._context import context_for
from ._errors import invalid
from ._native import C, _proto, check, text

__all__ = ["Measurement", "Snapshot", "Run", "Model", "models", "propagate"]

MAX_DIM = 8
MAX_COEF = 8


class _Model(Structure):
    _fields_ = [("name", c_char_p),
                ("about", c_char_p),
                ("dim", c_int),
                ("min_dim", c_int),
                ("meas_dim", c_int),
                ("ncoef", c_int),
                ("coef", c_double * MAX_COEF),
                ("f", c_void_p),
                ("h", c_void_p)]


class _Meas(Structure):
    _fields_ = [("dim", c_int),
                ("mean", c_double * MAX_DIM),
                ("cov", c_double * (MAX_DIM * MAX_DIM)),
                ("period", c_double)]


class _Desc(Structure):
    _fields_ = [("model", POINTER(_Model)),
                ("threshold", c_double),
                ("del_step", c_int),
                ("cfl", c_double),
                ("dx_factor", c_double),
                ("snapshots", c_int),
                ("update", c_int),
                ("t_end", c_double),
                ("variant", c_char_p)]


class _Snapshot(Structure):
    _fields_ = [("period", c_int),
                ("index", c_int),
                ("t", c_double),
                ("dim", c_int),
                ("cells", c_size_t),
                ("data", POINTER(c_double))]


class _Stats(Structure):
    _fields_ = [("t", c_double),
                ("steps", c_uint64),
                ("cell_steps", c_uint64),
                ("cells", c_size_t),
                ("period", c_int),
                ("dt", c_double)]


_pplan = POINTER(c_void_p)
_models = _proto("dk_gbees_models", POINTER(POINTER(_Model)))
_find = _proto("dk_gbees_model_find", POINTER(_Model), c_char_p)
_read_dir = _proto("dk_gbees_meas_read_dir", c_int, c_char_p, POINTER(POINTER(_Meas)), POINTER(c_int))
_desc_init = _proto("dk_gbees_desc_init", None, POINTER(_Desc))
_plan_create = _proto("dk_gbees_plan_create", c_int, c_void_p, POINTER(_Desc), POINTER(_Meas), c_int, _pplan)
_run = _proto("dk_gbees_run", c_int, c_void_p, c_int, POINTER(c_int))
_snapshot_get = _proto("dk_gbees_snapshot_get", c_int, c_void_p, POINTER(_Snapshot))
_stats_get = _proto("dk_gbees_stats_get", c_int, c_void_p, POINTER(_Stats))
_free = ctypes.CDLL(None).free
_free.argtypes = [c_void_p]
_free.restype = None

PROGRESS, SNAPSHOT, DONE = 0, 1, 2

Model = namedtuple("Model", "name about dim min_dim meas_dim")
Model.__doc__ = "A built-in model: dim 0 means any dimension from min_dim up; meas_dim 0: the state's."
Measurement = namedtuple("Measurement", "mean cov period")
Measurement.__doc__ = "A Gaussian N(mean, cov) and the time to propagate after it."
Snapshot = namedtuple("Snapshot", "period index t points probability")
Snapshot.__doc__ = ("The density at time t: points (cells x dim, the cells' centres) and "
                    "probability (cells,), in measurement period `period`.")
Stats = namedtuple("Stats", "t steps cell_steps cells period dt")


class Run(namedtuple("Run", "model backend snapshots stats")):
    """What propagate returns: the snapshots in time order and the counters
    at the end (t, steps, cell_steps, cells, period, dt)."""


def models():
    """The built-in models, as Model tuples."""
    out = []
    table = _models()
    i = 0
    while table[i]:
        m = table[i].contents
        out.append(Model(text(m.name), text(m.about), m.dim, m.min_dim, m.meas_dim))
        i += 1
    return tuple(out)


def _model(model):
    if isinstance(model, Model):
        model = model.name
    if not isinstance(model, str):
        raise invalid("gbees.propagate: model must be a name such as 'lorenz63' (see dakit.gbees.models()), "
                      "not %r" % (model,))
    ptr = _find(model.encode())
    if not ptr:
        names = ", ".join(m.name for m in models())
        raise invalid("gbees.propagate: unknown model %r; the built-in models are %s" % (model, names))
    return ptr


def _measurements(measurements):
    """A directory of measurementN.txt files, or a sequence of Measurement
    (or (mean, cov, period) tuples): a ctypes array of dk_gbees_meas."""
    if isinstance(measurements, (str, bytes, os.PathLike)):
        path = os.fsencode(measurements)
        lst = POINTER(_Meas)()
        count = c_int(0)
        check(_read_dir(path, ctypes.byref(lst), ctypes.byref(count)))
        try:
            arr = (_Meas * count.value)()
            ctypes.memmove(arr, lst, ctypes.sizeof(_Meas) * count.value)
        finally:
            _free(lst)
        return arr
    try:
        items = list(measurements)
    except TypeError:
        raise invalid("gbees.propagate: measurements must be a directory or a sequence of "
                      "Measurement(mean, cov, period), not %s" % type(measurements).__name__) from None
    if not items:
        raise invalid("gbees.propagate: measurements is empty; the first one is the initial density")
    arr = (_Meas * len(items))()
    for i, item in enumerate(items):
        try:
            mean, cov, period = item
        except (TypeError, ValueError):
            raise invalid("gbees.propagate: measurement %d must be (mean, cov, period), not %r" % (i, item)) from None
        mean = np.asarray(mean, dtype=np.float64).reshape(-1)
        dim = mean.size
        if not 1 <= dim <= MAX_DIM:
            raise invalid("gbees.propagate: measurement %d has %d mean values; between 1 and %d are allowed"
                          % (i, dim, MAX_DIM))
        cov = np.asarray(cov, dtype=np.float64)
        if cov.shape != (dim, dim):
            raise invalid("gbees.propagate: measurement %d: cov has shape %s; its mean of %d values needs (%d, %d)"
                          % (i, cov.shape, dim, dim, dim))
        arr[i].dim = dim
        arr[i].mean[:dim] = mean.tolist()
        arr[i].cov[:dim * dim] = cov.reshape(-1).tolist()
        arr[i].period = float(period)
    return arr


def propagate(model, measurements, *, threshold=5e-6, del_step=20, cfl=1.0, dx_factor=1.0, snapshots=5,
              update=True, t_end=None, variant=None, backend=None, progress=None, steps_per_call=200):
    """Propagates the first measurement's Gaussian through `model`, applying
    the later measurements as Bayesian updates (update=False: propagation
    only), and returns a Run with `snapshots` snapshots per period (its start
    and end included) up to t_end (None: the end of the last period).

    backend: None (automatic), a name ('cpu', 'opencl', 'cuda'), a Context,
    or 'reference' for libdakit's serial reference, which defines the result.
    progress: None or a callable given the Stats every `steps_per_call` steps
    (for a progress bar on long runs).
    """
    desc = _Desc()
    _desc_init(ctypes.byref(desc))
    desc.model = _model(model)
    desc.threshold = float(threshold)
    desc.del_step = int(del_step)
    desc.cfl = float(cfl)
    desc.dx_factor = float(dx_factor)
    desc.snapshots = int(snapshots)
    desc.update = 1 if update else 0
    desc.t_end = 0.0 if t_end is None else float(t_end)
    desc.variant = variant.encode() if variant is not None else None
    meas = _measurements(measurements)
    if backend == "reference":
        ctx, used = None, "reference"
    else:
        context = context_for(backend)
        ctx, used = context.handle, context.backend
    handle = c_void_p()
    check(_plan_create(ctx, ctypes.byref(desc), meas, len(meas), ctypes.byref(handle)), ctx)
    try:
        out = []
        event = c_int(PROGRESS)
        stats = _Stats()
        while event.value != DONE:
            check(_run(handle, int(steps_per_call) if progress else 0, ctypes.byref(event)), ctx)
            if event.value == SNAPSHOT:
                snap = _Snapshot()
                check(_snapshot_get(handle, ctypes.byref(snap)), ctx)
                rows = np.ctypeslib.as_array(snap.data, shape=(snap.cells, snap.dim + 1)).copy() \
                    if snap.cells else np.empty((0, snap.dim + 1))
                out.append(Snapshot(snap.period, snap.index, snap.t, rows[:, :snap.dim], rows[:, snap.dim]))
            if progress is not None:
                check(_stats_get(handle, ctypes.byref(stats)), ctx)
                progress(Stats(stats.t, stats.steps, stats.cell_steps, stats.cells, stats.period, stats.dt))
        check(_stats_get(handle, ctypes.byref(stats)), ctx)
        return Run(text(desc.model.contents.name), used, tuple(out),
                   Stats(stats.t, stats.steps, stats.cell_steps, stats.cells, stats.period, stats.dt))
    finally:
        C.dk_plan_destroy(handle)
