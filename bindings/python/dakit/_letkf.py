"""letkf: the local ensemble transform Kalman filter (Hunt, Kostelich &
Szunyogh 2007) with Gaspari-Cohn localization by distance, a cap on the
observations per point, multiplicative inflation, RTPP and RTPS.

The definition every backend computes is the header comment of
dakit/letkf.h. Ensembles are state x member (member index fastest, as
enkf): xb (N, k), yb = H(xb) (M, k). Coordinates are host data, (N, d) and
(M, d) (or (N,) and (M,) for one column), copied by the plan.
"""
import ctypes
import functools
import inspect
import operator
import typing

import numpy as np

from ._arrays import Buffers, empty_like, host_input, labelled, operand, to_host, usable_here, zero_copy
from ._context import Plan as _Plan
from ._errors import invalid
from ._gauss import _choice, _cstr, _float
from ._native import C, CSR, DK_F32, DK_F64, DK_LETKF_MAX_COORDS, LETKF_METRICS, LetkfDesc, check

__all__ = ["letkf", "LetkfPlan", "LetkfDiagnostics", "letkf_reference", "letkf_departures", "letkf_apply"]

_DTYPES = (np.float32, np.float64)


class LetkfDiagnostics(typing.NamedTuple):
    """What an analysis reports besides the ensemble.

    Attributes
    ----------
    nobs : array of int32, shape (N,)
        The number of observations each grid point used (after the cap).
    spread : array of float64, shape (N,)
        The analysis spread: the standard deviation of each point's members
        (k - 1 divisor).
    omb : numpy.ndarray of float64, shape (M,)
        The O-B departures ``yo - mean(yb, axis=1)``.

    nobs and spread are of the ensemble's kind (NumPy, or CuPy / torch on
    the GPU); omb is always a NumPy array.
    """
    nobs: typing.Any
    spread: typing.Any
    omb: np.ndarray


def _xarray_io(fn):
    """xarray in, xarray out for an analysis entry: a DataArray xb (and yb,
    out) is computed on its data; xa comes back with xb's dims, coordinates
    and attributes (out itself where given), and the diagnostics nobs and
    spread along xb's first dimension."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def entry(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        given = bound.arguments
        xb, labels = labelled(given["xb"])
        out_da = given.get("out")
        if labels is None and labelled(out_da)[1] is None and labelled(given.get("yb"))[1] is None:
            return fn(*args, **kwargs)
        given["xb"] = xb
        if "yb" in given:
            given["yb"] = labelled(given["yb"])[0]
        if out_da is not None:
            given["out"] = labelled(out_da)[0]
        result = fn(*bound.args, **bound.kwargs)
        xa, diag = result if isinstance(result, tuple) else (result, None)
        if labelled(out_da)[1] is not None:
            xa = out_da
        elif labels is not None and out_da is None:
            xa = labels.like(xa)
        if diag is None:
            return xa
        if labels is not None:
            diag = diag._replace(nobs=labels.rows(diag.nobs, ()), spread=labels.rows(diag.spread, ()))
        return xa, diag
    return entry


def _count(value, name, who):
    """None (0 for C) or an integer >= 0."""
    if value is None:
        return 0
    try:
        v = operator.index(value)
    except TypeError:
        raise invalid("%s: %s must be None or an integer, not %r" % (who, name, value)) from None
    if v < 0:
        raise invalid("%s: %s is %d; it must be None (no cap) or an integer >= 1" % (who, name, v))
    return v


def _members(value, who):
    try:
        v = operator.index(value)
    except TypeError:
        raise invalid("%s: members must be an integer, not %r" % (who, value)) from None
    if v < 0:
        raise invalid("%s: members is %d; it must be >= 2" % (who, v))
    return v


def _coords(c, name, who):
    """Coordinates as a C-order float64 (rows, columns) array."""
    c = host_input(c, name, who, np.float64)
    if c.ndim == 1:
        c = c.reshape(-1, 1)
    if c.ndim != 2:
        raise invalid("%s: %s has %d dimensions; it must be (points,) or (points, columns)" % (who, name, c.ndim))
    return np.ascontiguousarray(c)


def _desc(grid_coords, obs_coords, radius, members, dtype, inflation, rtpp, rtps, max_obs, metric, period,
          vertical_radius, variant, who):
    """The dk_letkf_desc and what it points at (kept alive by the caller)."""
    grid = _coords(grid_coords, "grid_coords", who)
    obs = _coords(obs_coords, "obs_coords", who)
    if grid.shape[1] != obs.shape[1]:
        raise invalid("%s: grid_coords has %d column(s) and obs_coords %d; both take the same coordinates"
                      % (who, grid.shape[1], obs.shape[1]))
    ncoords = grid.shape[1]
    d = LetkfDesc()
    C.dk_letkf_desc_init(ctypes.byref(d))
    d.dtype = DK_F32 if dtype == np.float32 else DK_F64
    d.n, d.m, d.members = grid.shape[0], obs.shape[0], _members(members, who)
    d.ncoords = ncoords
    d.metric = _choice(metric, LETKF_METRICS, "metric", who)
    d.radius = _float(radius, "radius", who)
    d.vertical_radius = 0.0 if vertical_radius is None else _float(vertical_radius, "vertical_radius", who)
    if period is not None:
        p = host_input(period, "period", who, np.float64).reshape(-1)
        if p.size == 1 and ncoords > 1:
            raise invalid("%s: period has 1 value for %d coordinate columns; give one per column (0: not "
                          "periodic)" % (who, ncoords))
        if p.size > DK_LETKF_MAX_COORDS or p.size != ncoords:
            raise invalid("%s: period has %d values; give one per coordinate column (%d), 0 for a column that "
                          "is not periodic" % (who, p.size, ncoords))
        for a, v in enumerate(p):
            d.period[a] = float(v)
    d.inflation = _float(inflation, "inflation", who)
    d.rtpp = _float(rtpp, "rtpp", who)
    d.rtps = _float(rtps, "rtps", who)
    d.max_obs = _count(max_obs, "max_obs", who)
    d.grid_coords = grid.ctypes.data
    d.obs_coords = obs.ctypes.data
    name = _cstr(variant, "variant", who)
    d.variant = name
    return d, (grid, obs, name)


def _obs(yo, obs_var, m, who):
    """yo and r as m float64 values each (obs_var may be one number)."""
    yo = host_input(yo, "yo", who, np.float64).reshape(-1)
    r = host_input(obs_var, "obs_var", who, np.float64)
    if r.ndim == 0:
        r = np.full(m, float(r))
    r = r.reshape(-1)
    # C reads m values of each
    for name, v in (("yo", yo), ("obs_var", r)):
        if v.size != m:
            raise invalid("%s: %s has %d values; there are %d observations (rows of obs_coords)"
                          % (who, name, v.size, m))
    return yo, r


def _ensemble(x, name, rows, members, dtype, who, writable=False):
    """An ensemble operand of shape (rows, members) and the dtype."""
    op = operand(x, name, who, (dtype,), writable=writable)
    if op.shape != (rows, members):
        raise invalid("%s: %s has shape %s; it must be (%d, %d) (%s, members)"
                      % (who, name, op.shape, rows, members, "observations" if name == "yb" else "grid points"))
    return op


def _departures(dtype, y, yo, k):
    """yo - mean(y) (C's dk_letkf_departures) for host y (m, k)."""
    out = np.empty(yo.size, dtype=np.float64)
    check(C.dk_letkf_departures(DK_F32 if dtype == np.float32 else DK_F64, yo.size, k, y.ctypes.data,
                                yo.ctypes.data, out.ctypes.data), None)
    return out



def _letkf_dtype(dtype, who):
    """dtype as a NumPy dtype the LETKF computes on, or dakit's error."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise invalid("%s: dtype %r is not a NumPy dtype" % (who, dtype)) from None
    if dt not in _DTYPES:
        raise invalid("%s: dtype is %s; the LETKF computes on float32 or float64 ensembles" % (who, dt))
    return dt

class LetkfPlan(_Plan):
    """An LETKF analysis on one grid and observation network, executed many
    times.

    The plan validates the options and the coordinates once and sorts the
    observations into buckets of the radius's size; each
    :meth:`analysis` then costs only the analysis.

    Parameters
    ----------
    grid_coords : array_like, shape (N, d) or (N,)
        The grid points' coordinates (host data, copied). Cartesian: any
        units, d = 1 to 3. Sphere: longitude and latitude in degrees, and a
        vertical coordinate as a third column where `vertical_radius` is
        given.
    obs_coords : array_like, shape (M, d) or (M,)
        The observations' coordinates, in the same columns.
    radius : float
        The horizontal distance at which the Gaspari-Cohn taper reaches 0,
        in the coordinates' units (kilometres on the sphere).
    members : int
        The ensemble size k (2 to 1024).
    dtype : {numpy.float64, numpy.float32}
        The ensembles' dtype. The local k x k problems are solved in float64
        either way.
    inflation : float, default 1.0
        Multiplicative prior inflation of the background covariance.
    rtpp, rtps : float, default 0.0
        Relaxation to prior perturbations or to prior spread, in [0, 1]; at
        most one of them > 0.
    max_obs : int or None
        None: every observation within the radius; else at most this many
        per point, those of largest weight (ties to the lower index).
    metric : {"cartesian", "sphere"}
        Euclidean distance (with `period`), or great circles on the Earth
        (radius 6371 km).
    period : sequence of float or None
        Cartesian only: each coordinate column's period, 0 for a column that
        is not periodic (a ring of 40 points: ``period=[40]``).
    vertical_radius : float or None
        Given: the last column is a vertical coordinate, tapered separately
        with this radius (in its own units).
    variant : str or None
        One of ``Context.variants("letkf")``; None: the backend's default.
    backend : None, str or Context
        None (the default context), a name ("cpu", "opencl", "cuda") or a
        Context.
    diagnostics : bool, default False
        True: every analysis also computes the diagnostics and keeps them
        in :attr:`nobs`, :attr:`spread` and :attr:`omb`.

    Attributes
    ----------
    n, m, members, dtype, variant
        What the plan was made for.
    nobs, spread, omb
        The last analysis's diagnostics (see :class:`LetkfDiagnostics`);
        None until an analysis computed them.

    Examples
    --------
    >>> plan = dakit.LetkfPlan(grid, obs_xy, radius=5.0, members=20, period=[40])
    >>> for cycle in range(100):
    ...     xa = plan.analysis(xb, H @ xb, yo, 1.0)
    """

    def __init__(self, grid_coords, obs_coords, radius, members, *, dtype=np.float64, inflation=1.0, rtpp=0.0,
                 rtps=0.0, max_obs=None, metric="cartesian", period=None, vertical_radius=None, variant=None,
                 backend=None, diagnostics=False):
        who = "dakit.LetkfPlan"
        super().__init__(backend)
        self.dtype = _letkf_dtype(dtype, who)
        d, keep = _desc(grid_coords, obs_coords, radius, members, self.dtype, inflation, rtpp, rtps, max_obs,
                        metric, period, vertical_radius, variant, who)
        h = ctypes.c_void_p()
        check(C.dk_letkf_plan_create(self._ctx.handle, ctypes.byref(d), ctypes.byref(h)), self._ctx.handle)
        del keep  # the plan copied the coordinates
        self._adopt(h)
        self.n, self.m, self.members = int(d.n), int(d.m), int(d.members)
        self.variant = variant if variant is not None else (self._ctx.variants("letkf") or ("",))[0]
        self.diagnostics = bool(diagnostics)
        self.nobs = self.spread = self.omb = None
        self._yo = None

    def _ensemble(self, x, name, rows, who, writable=False):
        return _ensemble(x, name, rows, self.members, self.dtype, who, writable)

    @_xarray_io
    def analysis(self, xb, yb, yo, obs_var, out=None, return_diagnostics=False):
        """The analysis ensemble.

        Parameters
        ----------
        xb : array, shape (n, members)
            The background ensemble, of the plan's dtype, C order: a NumPy
            array, or on the cuda backend a CUDA array (CuPy, torch, DLPack)
            used in place.
        yb : array, shape (m, members)
            The observation-space ensemble H(xb), from the caller's own
            (possibly nonlinear) operator; on the same side as xb.
        yo : array_like, shape (m,)
            The observations (host data).
        obs_var : array_like, shape (m,), or float
            Their error variances (the diagonal of R), > 0.
        out : array or None
            None: a new array of xb's kind; xb: the analysis in place; or
            another array of xb's shape, dtype and kind.
        return_diagnostics : bool
            True: return ``(xa, LetkfDiagnostics)``.

        Returns
        -------
        xa : array, shape (n, members)
            The analysis ensemble (out where given).
        diagnostics : LetkfDiagnostics
            Only with return_diagnostics (or a plan made with
            diagnostics=True, which keeps them as attributes).
        """
        who = "dakit.LetkfPlan.analysis"
        xo = self._ensemble(xb, "xb", self.n, who)
        bo = self._ensemble(yb, "yb", self.m, who)
        yo, r = _obs(yo, obs_var, self.m, who)
        usable_here(self._ctx, who, xo, bo)
        if out is None:
            out = empty_like(xo)
        oo = self._ensemble(out, "out", self.n, who, writable=True)
        usable_here(self._ctx, who, xo, bo, oo)
        if xo.overlaps(oo) and not xo.same_memory(oo):
            raise invalid("%s: out overlaps xb without being xb; pass out=xb for an analysis in place" % who)
        if bo.overlaps(oo):
            raise invalid("%s: out overlaps yb; the analysis reads yb while it writes out" % who)
        diag = return_diagnostics or self.diagnostics
        nobs = spread = None
        if diag:
            nobs = operand(empty_like(xo, shape=(self.n,), dtype=np.int32), "nobs", who, (np.int32,), True)
            spread = operand(empty_like(xo, shape=(self.n,), dtype=np.float64), "spread", who, (np.float64,), True)
        with self._lock:
            handle, ctx = self.handle, self._ctx
            # Host arrays go through the copying call, which checks them for
            # NaN in C; its copies cost O(n k) against the analysis's O(n k^3).
            how = zero_copy(ctx, who, xo, bo, oo) if xo.device else False
            if how:
                with Buffers(ctx, how) as b:
                    check(C.dk_letkf_execute(handle, b.wrap(xo), b.wrap(bo), yo.ctypes.data, r.ctypes.data,
                                             b.wrap(oo), b.wrap(nobs), b.wrap(spread)), ctx.handle)
            else:
                check(C.dk_letkf_execute_host(handle, xo.ptr, bo.ptr, yo.ctypes.data, r.ctypes.data, oo.ptr,
                                              nobs and nobs.ptr, spread and spread.ptr), ctx.handle)
            self._yo = yo
            if not diag:
                return oo.obj
            omb = _departures(self.dtype, np.ascontiguousarray(to_host(bo)), yo, self.members)
            self.nobs, self.spread, self.omb = nobs.obj, spread.obj, omb
        result = LetkfDiagnostics(nobs.obj, spread.obj, omb)
        return (oo.obj, result) if return_diagnostics else oo.obj

    def oma(self, hxa, yo=None):
        """The O-A departures ``yo - mean(hxa, axis=1)`` (float64, NumPy).

        Parameters
        ----------
        hxa : array, shape (m, members)
            H(xa), the analysis ensemble through the caller's observation
            operator (see :func:`letkf_apply` for a linear one); a CUDA
            array is copied to the host.
        yo : array_like, shape (m,), optional
            The observations; None: those of the last analysis.
        """
        who = "dakit.LetkfPlan.oma"
        if yo is None:
            if self._yo is None:
                raise invalid("%s: no analysis has run on this plan yet; pass yo" % who)
            yo = self._yo
        return letkf_departures(hxa, yo, members=self.members, who=who, rows=self.m)

    def __repr__(self):
        return "dakit.LetkfPlan(n=%d, m=%d, members=%d, dtype=%s, variant=%r, backend=%r)" % (
            self.n, self.m, self.members, self.dtype.name, self.variant, self.backend)


def _background(xb, who):
    xo = operand(xb, "xb", who, _DTYPES)
    if len(xo.shape) != 2:
        raise invalid("%s: xb has shape %s; it must be (N, members)" % (who, xo.shape))
    return xo


def _interp_grid(grid_shape, weight_stride, n, who):
    """The weight points (grid indices) and C of a strided lattice (dk_letkf_interp_grid)."""
    try:
        shape = [int(v) for v in np.atleast_1d(grid_shape)]
    except (TypeError, ValueError):
        raise invalid("%s: grid_shape must be a sequence of 1 to 3 integers, not %r" % (who, grid_shape)) from None
    try:
        stride = [int(v) for v in np.atleast_1d(weight_stride)]
    except (TypeError, ValueError):
        raise invalid("%s: weight_stride must be an integer or one per axis, not %r" % (who, weight_stride)) from None
    if len(stride) == 1:
        stride = stride * len(shape)
    if not 1 <= len(shape) <= 3 or len(stride) != len(shape):
        raise invalid("%s: grid_shape has %d axes and weight_stride %d values; give 1 to 3 axes, and one stride or "
                      "one per axis" % (who, len(shape), len(stride)))
    if int(np.prod(shape)) != n:
        raise invalid("%s: grid_shape %s holds %d points; grid_coords has %d (row-major, first axis slowest)"
                      % (who, tuple(shape), int(np.prod(shape)), n))
    sh = np.array(shape, dtype=np.uintp)
    st = np.array(stride, dtype=np.uintp)
    nw = ctypes.c_size_t()
    widx = np.empty(n, dtype=np.uintp)
    indptr = np.empty(n + 1, dtype=np.int64)
    indices = np.empty(n << len(shape), dtype=np.int64)
    values = np.empty(n << len(shape), dtype=np.float64)
    check(C.dk_letkf_interp_grid(len(shape), sh.ctypes.data, st.ctypes.data, ctypes.byref(nw), widx.ctypes.data,
                                 indptr.ctypes.data, indices.ctypes.data, values.ctypes.data), None)
    return widx[:nw.value].astype(np.int64), (indptr, indices, values, n, nw.value)


def _letkf_interp(xb, yb, yo, obs_var, grid_coords, obs_coords, radius, grid_shape, weight_stride, backend, out,
                  desc_args, variant, who):
    """letkf with weight interpolation on a strided lattice (host arrays)."""
    xo = _background(xb, who)
    if xo.device:
        raise invalid("%s: weight_stride takes host (NumPy) arrays; xb is a CUDA array" % who)
    grid = _coords(grid_coords, "grid_coords", who)
    if grid_shape is None:
        raise invalid("%s: weight_stride needs grid_shape, the lattice's shape (row-major, first axis slowest)" % who)
    widx, (indptr, indices, values, n, nw) = _interp_grid(grid_shape, weight_stride, grid.shape[0], who)
    if xo.shape[0] != n:
        raise invalid("%s: xb has %d rows but grid_coords %d points; one row per grid point" % (who, xo.shape[0], n))
    wgrid = np.ascontiguousarray(grid[widx])
    csr = CSR(n, nw, indptr.ctypes.data, indices.ctypes.data, values.ctypes.data)
    k = xo.shape[1]
    if out is None:
        out = np.empty((n, k), dtype=xo.dtype)
    oo = _ensemble(out, "out", n, k, xo.dtype, who, writable=True)
    if oo.device:
        raise invalid("%s: weight_stride takes host (NumPy) arrays; out is a CUDA array" % who)
    if isinstance(backend, str) and backend == "reference":
        d, keep = _desc(wgrid, obs_coords, radius, k, xo.dtype, *desc_args, None, who)
        bo = _ensemble(yb, "yb", int(d.m), k, xo.dtype, who)
        yo, r = _obs(yo, obs_var, int(d.m), who)
        check(C.dk_letkf_reference_interp(ctypes.byref(d), ctypes.byref(csr), xo.ptr, bo.ptr, yo.ctypes.data,
                                          r.ctypes.data, oo.ptr, None), None)
        del keep
        return oo.obj
    inflation, rtpp, rtps, max_obs, metric, period, vertical_radius = desc_args
    with LetkfPlan(wgrid, obs_coords, radius, k, dtype=xo.dtype, inflation=inflation, rtpp=rtpp, rtps=rtps,
                   max_obs=max_obs, metric=metric, period=period, vertical_radius=vertical_radius, variant=variant,
                   backend=backend) as plan:
        bo = _ensemble(yb, "yb", plan.m, k, xo.dtype, who)
        if bo.device:
            raise invalid("%s: weight_stride takes host (NumPy) arrays; yb is a CUDA array" % who)
        yo, r = _obs(yo, obs_var, plan.m, who)
        with plan._lock:
            check(C.dk_letkf_execute_interp_host(plan.handle, ctypes.byref(csr), xo.ptr, bo.ptr, yo.ctypes.data,
                                                 r.ctypes.data, oo.ptr, None), plan._ctx.handle)
    return oo.obj


@_xarray_io
def letkf(xb, yb, yo, obs_var, grid_coords, obs_coords, radius, *, inflation=1.0, rtpp=0.0, rtps=0.0,
          max_obs=None, metric="cartesian", period=None, vertical_radius=None, backend=None, variant=None,
          out=None, return_diagnostics=False, weight_stride=None, grid_shape=None):
    """One LETKF analysis.

    For each grid point the observations within `radius`, weighted by the
    Gaspari-Cohn taper of their distance, give a k x k problem solved
    independently of every other point (dakit/letkf.h states the exact
    definition; docs/letkf.md explains it).

    Parameters
    ----------
    xb : array, shape (N, k)
        The background ensemble (state x member), float32 or float64, C
        order: NumPy, or on the cuda backend a CUDA array (CuPy, torch,
        DLPack) used in place.
    yb : array, shape (M, k)
        H(xb) from the caller's observation operator, of xb's dtype and
        side.
    yo : array_like, shape (M,)
        The observations.
    obs_var : array_like, shape (M,), or float
        Their error variances (diagonal R), > 0.
    grid_coords : array_like, shape (N, d) or (N,)
        The grid points' coordinates: cartesian in any unit; on the sphere
        longitude, latitude in degrees [, vertical].
    obs_coords : array_like, shape (M, d) or (M,)
        The observations' coordinates, in the same columns.
    radius : float
        Where the taper reaches 0, in the coordinates' units (km on the
        sphere).
    inflation : float, default 1.0
        Multiplicative prior inflation.
    rtpp, rtps : float, default 0.0
        Relaxation to prior perturbations / spread (at most one > 0).
    max_obs : int or None
        At most this many observations per point, those of largest weight.
    metric : {"cartesian", "sphere"}
    period : sequence of float or None
        Cartesian: each column's period, 0 for none.
    vertical_radius : float or None
        The last column is a vertical coordinate with this radius.
    backend : None, str or Context
        Also "reference": libdakit's serial reference (host arrays), which
        defines the result.
    variant : str or None
        A variant of the backend's (Context.variants("letkf")).
    out : array or None
        Where to write the analysis (out=xb: in place).
    return_diagnostics : bool
        True: return ``(xa, LetkfDiagnostics)``.
    weight_stride : int, sequence of int, or None
        Weight interpolation: the transforms are computed only at every
        weight_stride-th point of each axis of the lattice (and its last),
        and interpolated (bi/trilinear) to the others; needs grid_shape,
        host arrays, and no return_diagnostics. docs/letkf.md states its
        error.
    grid_shape : sequence of int or None
        The lattice's shape, row-major (first axis slowest), for
        weight_stride.

    Returns
    -------
    xa : array, shape (N, k)
        The analysis ensemble, of xb's kind (NumPy in, NumPy out; CuPy in,
        CuPy out on cuda).
    diagnostics : LetkfDiagnostics
        With return_diagnostics: observations used per point, analysis
        spread, O-B departures.

    Examples
    --------
    >>> x = np.arange(40.0)                     # a ring of 40 points
    >>> xa = dakit.letkf(xb, xb, yo, 1.0, x, x, radius=8.0, period=[40], inflation=1.04)
    """
    who = "dakit.letkf"
    if weight_stride is not None:
        if return_diagnostics:
            raise invalid("%s: return_diagnostics is not available with weight_stride" % who)
        return _letkf_interp(xb, yb, yo, obs_var, grid_coords, obs_coords, radius, grid_shape, weight_stride,
                             backend, out, (inflation, rtpp, rtps, max_obs, metric, period, vertical_radius),
                             variant, who)
    if isinstance(backend, str) and backend == "reference":
        return letkf_reference(xb, yb, yo, obs_var, grid_coords, obs_coords, radius, inflation=inflation,
                               rtpp=rtpp, rtps=rtps, max_obs=max_obs, metric=metric, period=period,
                               vertical_radius=vertical_radius, out=out, return_diagnostics=return_diagnostics)
    xo = _background(xb, who)
    with LetkfPlan(grid_coords, obs_coords, radius, xo.shape[1], dtype=xo.dtype, inflation=inflation, rtpp=rtpp,
                   rtps=rtps, max_obs=max_obs, metric=metric, period=period, vertical_radius=vertical_radius,
                   variant=variant, backend=backend) as plan:
        if xo.shape[0] != plan.n:
            raise invalid("%s: xb has %d rows but grid_coords %d points; one row per grid point"
                          % (who, xo.shape[0], plan.n))
        return plan.analysis(xb, yb, yo, obs_var, out=out, return_diagnostics=return_diagnostics)


@_xarray_io
def letkf_reference(xb, yb, yo, obs_var, grid_coords, obs_coords, radius, *, inflation=1.0, rtpp=0.0, rtps=0.0,
                    max_obs=None, metric="cartesian", period=None, vertical_radius=None, out=None,
                    return_diagnostics=False):
    """The serial reference that defines the LETKF's result
    (``dk_letkf_reference``), on NumPy arrays.

    The parameters and the result are those of :func:`letkf`; every backend
    is tested against this function. It runs on one core.
    """
    who = "dakit.letkf_reference"
    xo = _background(xb, who)
    if xo.device:
        raise invalid("%s: xb is a CUDA array; the serial reference takes host (NumPy) arrays" % who)
    d, keep = _desc(grid_coords, obs_coords, radius, xo.shape[1], xo.dtype, inflation, rtpp, rtps, max_obs,
                    metric, period, vertical_radius, None, who)
    n, m, k = int(d.n), int(d.m), int(d.members)
    if xo.shape[0] != n:
        raise invalid("%s: xb has %d rows but grid_coords %d points; one row per grid point" % (who, xo.shape[0], n))
    bo = _ensemble(yb, "yb", m, k, xo.dtype, who)
    yo, r = _obs(yo, obs_var, m, who)
    if out is None:
        out = np.empty((n, k), dtype=xo.dtype)
    oo = _ensemble(out, "out", n, k, xo.dtype, who, writable=True)
    if bo.device or oo.device:
        raise invalid("%s: %s is a CUDA array; the serial reference takes host (NumPy) arrays"
                      % (who, "yb" if bo.device else "out"))
    if xo.overlaps(oo) and not xo.same_memory(oo) or bo.overlaps(oo):
        raise invalid("%s: out overlaps xb or yb; pass out=xb for an analysis in place, or a separate array" % who)
    nobs = np.empty(n, dtype=np.int32) if return_diagnostics else None
    spread = np.empty(n, dtype=np.float64) if return_diagnostics else None
    check(C.dk_letkf_reference(ctypes.byref(d), xo.ptr, bo.ptr, yo.ctypes.data, r.ctypes.data, oo.ptr,
                               None if nobs is None else nobs.ctypes.data,
                               None if spread is None else spread.ctypes.data), None)
    del keep
    if not return_diagnostics:
        return oo.obj
    return oo.obj, LetkfDiagnostics(nobs, spread, _departures(xo.dtype, bo.obj, yo, k))


def letkf_departures(y, yo, *, members=None, who="dakit.letkf_departures", rows=None):
    """The departures ``yo - mean(y, axis=1)`` in float64
    (``dk_letkf_departures``): O-B from yb, O-A from H(xa).

    Parameters
    ----------
    y : array, shape (M, k)
        An observation-space ensemble, float32 or float64 (a CUDA array is
        copied to the host).
    yo : array_like, shape (M,)
        The observations.

    Returns
    -------
    numpy.ndarray of float64, shape (M,)
    """
    op = operand(y, "y", who, _DTYPES)
    want_rows = rows if rows is not None else (op.shape[0] if len(op.shape) == 2 else None)
    want_k = members if members is not None else (op.shape[1] if len(op.shape) == 2 else None)
    if len(op.shape) != 2 or op.shape != (want_rows, want_k):
        raise invalid("%s: y has shape %s; it must be (observations, members)%s"
                      % (who, op.shape, "" if rows is None else " = (%d, %d)" % (rows, members)))
    yo = host_input(yo, "yo", who, np.float64).reshape(-1)
    if yo.size != op.shape[0]:
        raise invalid("%s: yo has %d values; y has %d rows (observations)" % (who, yo.size, op.shape[0]))
    host = np.ascontiguousarray(to_host(op))
    return _departures(op.dtype, host, yo, op.shape[1])


def _csr_of(H, who):
    """H (scipy.sparse, or a dense 2-D NumPy array) as CSR arrays: int64
    indptr and indices, float64 values."""
    if hasattr(H, "tocsr"):
        H = H.tocsr()
        rows, cols = (int(v) for v in H.shape)
        indptr = np.ascontiguousarray(H.indptr, dtype=np.int64).reshape(-1)
        indices = np.ascontiguousarray(H.indices, dtype=np.int64).reshape(-1)
        values = np.ascontiguousarray(H.data, dtype=np.float64).reshape(-1)
    else:
        try:
            dense = host_input(H, "H", who, np.float64)
        except Exception:
            raise invalid("%s: H must be a scipy.sparse matrix or a dense 2-D array, not %s"
                          % (who, type(H).__name__)) from None
        if dense.ndim != 2:
            raise invalid("%s: H has %d dimensions; it must be (M, N)" % (who, dense.ndim))
        rows, cols = dense.shape
        indptr = np.arange(rows + 1, dtype=np.int64) * cols
        indices = np.tile(np.arange(cols, dtype=np.int64), rows)
        values = np.ascontiguousarray(dense).reshape(-1)
    # C reads by these lengths; it checks the values (order, columns, finiteness)
    if indptr.size != rows + 1:
        raise invalid("%s: H's indptr has %d entries; %d rows need %d" % (who, indptr.size, rows, rows + 1))
    nnz = int(indptr[-1]) if indptr.size else 0
    if nnz > indices.size or nnz > values.size:
        raise invalid("%s: H's indptr ends at %d, but it has %d column indices and %d values"
                      % (who, nnz, indices.size, values.size))
    return rows, cols, indptr, indices, values


def letkf_apply(H, x, out=None):
    """y = H x for a linear observation operator (``dk_letkf_apply_csr``),
    summed in float64 in H's order.

    Parameters
    ----------
    H : scipy.sparse matrix or numpy.ndarray, shape (M, N)
        Any sparse format (converted to CSR) or a dense array.
    x : numpy.ndarray, shape (N, k)
        An ensemble, float32 or float64 (host).
    out : numpy.ndarray, shape (M, k), optional
        Where to write y, of x's dtype.

    Returns
    -------
    y : numpy.ndarray, shape (M, k), of x's dtype
        yb = letkf_apply(H, xb) before an analysis, H(xa) = letkf_apply(H, xa)
        for the O-A departures.
    """
    who = "dakit.letkf_apply"
    xo = operand(x, "x", who, _DTYPES)
    if xo.device:
        raise invalid("%s: x is a CUDA array; letkf_apply takes host (NumPy) arrays (on the GPU, use the array "
                      "library's own sparse product)" % who)
    rows, cols, indptr, indices, values = _csr_of(H, who)
    if len(xo.shape) != 2 or xo.shape[0] != cols:
        raise invalid("%s: x has shape %s; H has %d columns, so x must be (%d, members)"
                      % (who, xo.shape, cols, cols))
    k = xo.shape[1]
    if out is None:
        out = np.empty((rows, k), dtype=xo.dtype)
    oo = operand(out, "out", who, (xo.dtype,), writable=True)
    if oo.device or oo.shape != (rows, k):
        raise invalid("%s: out has shape %s; it must be a host array of shape (%d, %d)" % (who, oo.shape, rows, k))
    if oo.overlaps(xo):
        raise invalid("%s: out overlaps x; pass a separate array" % who)
    csr = CSR(rows, cols, indptr.ctypes.data, indices.ctypes.data, values.ctypes.data)
    check(C.dk_letkf_apply_csr(ctypes.byref(csr), DK_F32 if xo.dtype == np.float32 else DK_F64, k, xo.ptr, oo.ptr),
          None)
    return oo.obj
