"""enkf: the localized ensemble covariance product and the stochastic EnKF
analysis step.

    PHT  = [C o (e e^T)] H^T / (L - 1)     (N x M)
    HPHT = H PHT                           (M x M)

e: the N x L ensemble anomalies (member index fastest: one row per state
value), or the ensemble itself with anomalies=False (dakit removes the
member mean); C: the localization, symmetric Toeplitz from its first row
`loc` (N values), or for an nx x ny field in C order block Toeplitz from an
(nx, ny) table `loc`; H: M x N, a scipy.sparse matrix (any format) or a
dense NumPy array (SciPy is not needed), converted to CSR with int64
indices and float64 values, which the plan copies. An xarray.DataArray
ensemble gives DataArray results with its state coordinates.
"""
import ctypes
import math
import sys

import numpy as np

from ._arrays import Buffers, empty_like, host_input, labelled, operand, usable_here, zero_copy
from ._context import Plan as _Plan
from ._errors import invalid
from ._gauss import _cstr, _float, _size
from ._native import C, DK_F32, DK_F64, EnkfDesc, check, text

__all__ = ["Plan", "cov", "analysis", "perturbations"]

_DTYPES = (np.float32, np.float64)


def _seed(seed, who):
    try:
        s = int(seed)
    except (TypeError, ValueError, OverflowError):  # OverflowError: inf
        raise invalid("%s: seed must be an integer in [0, 2**64), not %r" % (who, seed)) from None
    if s != seed or not 0 <= s < 2 ** 64:
        raise invalid("%s: seed is %r; it must be an integer in [0, 2**64)" % (who, seed))
    return s


def _csr(H, who):
    """H as CSR arrays: a scipy.sparse matrix, or a dense 2-D array whose
    nonzero entries NumPy alone turns into CSR."""
    if hasattr(H, "tocsr"):
        H = H.tocsr()
        rows, cols = (int(v) for v in H.shape)
        indptr = np.ascontiguousarray(H.indptr, dtype=np.int64).reshape(-1)
        indices = np.ascontiguousarray(H.indices, dtype=np.int64).reshape(-1)
        values = np.ascontiguousarray(H.data, dtype=np.float64).reshape(-1)
    else:
        dense = H if isinstance(H, np.ndarray) else np.asarray(H) if isinstance(H, (list, tuple)) or \
            labelled(H)[1] is not None else None
        if dense is None or dense.dtype.kind not in "biuf":
            raise invalid("%s: H must be a scipy.sparse matrix or a dense 2-D NumPy array, not %s"
                          % (who, type(H).__name__))
        dense = host_input(dense, "H", who, np.float64)
        if dense.ndim != 2:
            raise invalid("%s: H has %d dimensions; it must be (M, N)" % (who, dense.ndim))
        rows, cols = dense.shape
        r, c = np.nonzero(dense)  # NaN is nonzero: C then refuses it
        indptr = np.zeros(rows + 1, dtype=np.int64)
        np.cumsum(np.bincount(r, minlength=rows), out=indptr[1:])
        indices = c.astype(np.int64)
        values = np.ascontiguousarray(dense[r, c])
    # C is given pointers: the lengths it reads by are checked here (its own
    # checks cover the values: order of indptr, column range, finiteness)
    if indptr.size != rows + 1:
        raise invalid("%s: H's indptr has %d entries; %d rows need %d" % (who, indptr.size, rows, rows + 1))
    nnz = int(indptr[-1])
    if nnz > indices.size or nnz > values.size:
        raise invalid("%s: H's indptr ends at %d, but it has %d column indices and %d values"
                      % (who, nnz, indices.size, values.size))
    return rows, cols, indptr, indices, values


def _anomalies(op, anomalies, name, who):
    """The operand of the anomalies: e as given (anomalies True, or None
    after a check on host data that e is not plainly the ensemble itself),
    or e less its member mean (False; a new array of e's kind)."""
    if anomalies is False:
        obj = op.obj
        try:
            centred = obj - obj.mean(axis=1, keepdims=True)
        except Exception as err:  # noqa: BLE001 - an array type without NumPy's mean
            raise invalid("%s: cannot remove the member mean of %s (%s); pass its anomalies" % (who, name, err)) \
                from None
        return operand(centred, name, who, (op.dtype,))
    if anomalies is not True and anomalies is not None:
        raise invalid("%s: anomalies is %r; it must be None, True (%s is the anomalies) or False (%s is the "
                      "ensemble: dakit removes the member mean)" % (who, anomalies, name, name))
    if anomalies is None and not op.device and op.obj.size:
        a = op.obj
        with np.errstate(all="ignore"):
            mean = a.mean(axis=1, dtype=np.float64)
            level = float(np.mean(mean * mean))
            spread = float(np.mean(np.square(a, dtype=np.float64))) - level
        # an ensemble far from 0: its mean dwarfs the spread about it
        if level > 100 * max(spread, 0.0):
            raise invalid("%s: %s looks like the ensemble, not its anomalies: its member mean (rms %.3g) is far "
                          "above the spread about it (rms %.3g); pass anomalies=False to have dakit remove the "
                          "mean, or anomalies=True to use %s as given"
                          % (who, name, math.sqrt(level), math.sqrt(max(spread, 0.0)), name))
    return op


def _members_along_rows(shape, loc, H, name, who):
    """A clear sentence for an ensemble given member-major, (members, n)."""
    if len(shape) != 2 or shape[0] == shape[1]:
        return
    n, members = shape
    loc_n = math.prod(np.shape(loc)) if np.ndim(loc) in (1, 2) else None
    h_shape = tuple(getattr(H, "shape", None) or np.shape(H))
    h_cols = h_shape[1] if len(h_shape) == 2 else None
    if members in (loc_n, h_cols) and n not in (loc_n, h_cols):
        raise invalid("%s: %s has shape %s, with the state along its columns (loc and H describe %d state "
                      "values); dakit takes (n state values, members), one row per state value: pass %s.T "
                      "(numpy.ascontiguousarray(%s.T))" % (who, name, shape, members, name, name))


def _finite(op, what, who):
    """What the *_host calls check, for host arrays used in place."""
    if op.device:
        return
    a = op.obj.reshape(-1)
    bad = np.flatnonzero(~np.isfinite(a))
    if bad.size:
        raise invalid("%s: %s value %d is not finite (%g)" % (who, what, bad[0], a[bad[0]]))


def perturbations(seed, r, members):
    """The observation perturbations dakit's analysis adds, eps[j, l] ~
    N(0, r[j]) (Philox4x32-10 keyed by seed, counter (l, j)), as an
    (M, members) float64 array. Like the C function it checks nothing of r:
    a negative variance gives NaN."""
    who = "dakit.enkf.perturbations"
    r = host_input(r, "r", who, np.float64).reshape(-1)
    members = _size(members, "members", who)
    eps = np.empty((r.size, members), dtype=np.float64)
    if eps.size:
        C.dk_enkf_perturbations(_seed(seed, who), r.size, members, r.ctypes.data, eps.ctypes.data)
    return eps


class Plan(_Plan):
    """An enkf plan for ensembles of n state values and `members` members,
    the localization `loc` and the observation operator H, executed many
    times (cov, analysis). dtype: float64 (default) or float32, of the
    ensembles and results. variant: "tiled", "banded", "fft" (or a backend's
    suffixed name); None lets dakit's cost model pick (see .variant)."""

    def __init__(self, n, members, loc, H, dtype=np.float64, variant=None, backend=None):
        who = "dakit.enkf.Plan"
        super().__init__(backend)
        self.n = _size(n, "n", who)
        self.members = _size(members, "members", who)
        try:
            self.dtype = np.dtype(dtype)
        except TypeError:
            raise invalid("%s: dtype %r is not a NumPy dtype" % (who, dtype)) from None
        if self.dtype not in _DTYPES:
            raise invalid("%s: dtype is %s; enkf computes in float32 or float64" % (who, self.dtype))
        loc = host_input(loc, "loc", who, np.float64)
        d = EnkfDesc()
        C.dk_enkf_desc_init(ctypes.byref(d))
        d.dtype = DK_F32 if self.dtype == np.float32 else DK_F64
        d.n, d.members = self.n, self.members
        # C reads n (or nx*ny) values of loc: its length is checked here
        if loc.ndim == 1:
            if loc.size != self.n:
                raise invalid("%s: loc has %d values; a 1-D localization row needs n = %d" % (who, loc.size, self.n))
            d.loc_ndim = 1
        elif loc.ndim == 2:
            d.loc_ndim = 2
            d.nx, d.ny = loc.shape
        else:
            raise invalid("%s: loc has %d dimensions; it must be 1-D (n values) or 2-D (nx, ny)" % (who, loc.ndim))
        d.loc = loc.ctypes.data
        rows, cols, indptr, indices, values = _csr(H, who)
        d.H.rows, d.H.cols = rows, cols
        d.H.indptr, d.H.indices, d.H.values = indptr.ctypes.data, indices.ctypes.data, values.ctypes.data
        variant_bytes = _cstr(variant, "variant", who)
        d.variant = variant_bytes
        h = ctypes.c_void_p()
        check(C.dk_enkf_plan_create(self._ctx.handle, ctypes.byref(d), ctypes.byref(h)), self._ctx.handle)
        self._adopt(h)
        self.m = rows
        self.variant = text(C.dk_enkf_plan_variant(h))

    def _ensemble(self, x, name, who):
        op = operand(x, name, who, (self.dtype,))
        usable_here(self._ctx, who, op)
        if op.shape != (self.n, self.members):
            raise invalid("%s: %s has shape %s; the plan takes (n, members) = (%d, %d)"
                          % (who, name, op.shape, self.n, self.members))
        return op

    def _result(self, out, like, shape, name, who):
        if out is None:
            out = empty_like(like, shape=shape)
        op = operand(out, name, who, (self.dtype,), writable=True)
        if op.shape != shape:
            raise invalid("%s: %s has shape %s; it must be %s" % (who, name, op.shape, shape))
        return op

    def cov(self, e, hpht=False, out=None, hpht_out=None, anomalies=None):
        """PHT (n x m) from the anomalies e (n x members), and HPHT (m x m)
        too when hpht is True: returns pht or (pht, hpht), arrays of e's kind
        (DataArrays for a DataArray e). anomalies: None (e is the anomalies;
        refused where its member mean is plainly far above its spread),
        True (e is the anomalies, unchecked) or False (e is the ensemble:
        its member mean is removed first)."""
        who = "dakit.enkf.cov"
        e, labels = labelled(e)
        out_da, hpht_out_da = out, hpht_out
        out, hpht_out = labelled(out)[0], labelled(hpht_out)[0]
        eo = self._ensemble(e, "e", who)
        eo = _anomalies(eo, anomalies, "e", who)
        po = self._result(out, eo, (self.n, self.m), "out", who)
        ho = self._result(hpht_out, eo, (self.m, self.m), "hpht_out", who) if hpht or hpht_out is not None else None
        # a result written over e (out=e) or over the other result: both are
        # computed into new arrays, then copied to the caller's
        given = None
        if po.overlaps(eo) or (ho is not None and (ho.overlaps(eo) or ho.overlaps(po))):
            if eo.device:
                raise invalid("%s: out or hpht_out overlaps e or each other; pass separate arrays" % who)
            given = (po, ho)
            po = operand(np.empty(po.shape, self.dtype), "out", who, (self.dtype,), writable=True)
            ho = None if ho is None else operand(np.empty(ho.shape, self.dtype), "hpht_out", who, (self.dtype,),
                                                 writable=True)
        with self._lock:
            handle, ctx = self.handle, self._ctx
            how = zero_copy(ctx, who, eo, po, ho)
            if how:
                _finite(eo, "an ensemble anomaly", who)
                with Buffers(ctx, how) as b:
                    check(C.dk_enkf_cov(handle, b.wrap(eo), b.wrap(po), b.wrap(ho)), ctx.handle)
            else:
                check(C.dk_enkf_cov_host(handle, eo.ptr, po.ptr, None if ho is None else ho.ptr), ctx.handle)
        if given is not None:
            for mine, theirs in zip((po, ho), given):
                if mine is not None:
                    np.copyto(theirs.obj, mine.obj)
            po, ho = given
        pht, hpht_arr = po.obj, None if ho is None else ho.obj
        if out is not None:
            pht = out_da
        elif labels is not None:
            pht = labels.rows(pht, ("observation",))
        if hpht_out is not None:
            hpht_arr = hpht_out_da
        elif labels is not None and ho is not None:
            hpht_arr = sys.modules["xarray"].DataArray(hpht_arr, dims=("observation", "observation_2"))
        return (pht, hpht_arr) if ho is not None else pht

    def analysis(self, x, y, r, seed, inflation=1.0, out=None):
        """The analysis ensemble from the forecast x (n x members): observations
        y and their error variances r (m values, or one r for all), the
        perturbations of `seed`. out: None (a new array of x's kind), x (in
        place) or another array of x's shape."""
        who = "dakit.enkf.analysis"
        x, labels = labelled(x)
        out, out_labels = labelled(out)
        xo = self._ensemble(x, "x", who)
        y = host_input(y, "y", who, np.float64).reshape(-1)
        r = host_input(r, "r", who, np.float64)
        if r.ndim == 0:
            r = np.full(self.m, float(r))
        r = r.reshape(-1)
        # C reads m values of each
        for name, v in (("y", y), ("r", r)):
            if v.size != self.m:
                raise invalid("%s: %s has %d values; H has m = %d rows (observations)" % (who, name, v.size, self.m))
        seed = _seed(seed, who)
        inflation = _float(inflation, "inflation", who)
        oo = self._result(out, xo, (self.n, self.members), "out", who)
        if xo.overlaps(oo) and not xo.same_memory(oo):
            raise invalid("%s: out overlaps x without being x; pass out=x to update in place" % who)
        with self._lock:
            handle, ctx = self.handle, self._ctx
            how = zero_copy(ctx, who, xo, oo)
            if how:
                _finite(xo, "a forecast ensemble", who)
                with Buffers(ctx, how) as b:
                    bo = b.wrap(oo)
                    if not xo.same_memory(oo):
                        b.copy(bo, b.wrap(xo), xo.nbytes)
                    check(C.dk_enkf_analysis(handle, bo, y.ctypes.data, r.ctypes.data, seed, inflation),
                          ctx.handle)
            else:
                if not xo.same_memory(oo):
                    np.copyto(oo.obj, xo.obj)
                check(C.dk_enkf_analysis_host(handle, oo.ptr, y.ctypes.data, r.ctypes.data, seed,
                                              inflation), ctx.handle)
        if out_labels is not None:
            return out_labels.source
        return labels.like(oo.obj) if labels is not None and out is None else oo.obj

    def __repr__(self):
        return "dakit.enkf.Plan(n=%d, members=%d, m=%d, dtype=%s, variant=%r, backend=%r)" % (
            self.n, self.members, self.m, self.dtype.name, self.variant, self.backend)


def cov(e, loc, H, hpht=False, variant=None, backend=None, out=None, hpht_out=None, anomalies=None):
    """PHT = [C o (e e^T)] H^T / (L-1) for the anomalies e (N x L), and
    HPHT = H PHT when hpht is True (then a pair is returned). anomalies:
    None (e is the anomalies; refused where its member mean is plainly far
    above its spread), True (e is the anomalies, unchecked) or False (e is
    the ensemble: dakit removes its member mean). See the module's text for
    loc and H."""
    who = "dakit.enkf.cov"
    eo = operand(labelled(e)[0], "e", who, _DTYPES)
    if len(eo.shape) != 2:
        raise invalid("%s: e has shape %s; it must be (N, L)" % (who, eo.shape))
    _members_along_rows(eo.shape, loc, H, "e", who)
    with Plan(eo.shape[0], eo.shape[1], loc, H, dtype=eo.dtype, variant=variant, backend=backend) as plan:
        return plan.cov(e, hpht=hpht, out=out, hpht_out=hpht_out, anomalies=anomalies)


def analysis(ens, y, r, H, loc, seed, inflation=1.0, variant=None, backend=None, out=None):
    """One stochastic EnKF analysis of the forecast ensemble ens (N x L):
    each member x_l <- x_l + PHT (HPHT + R)^-1 (y + eps_l - H x_l), with
    R = diag(r), the anomalies of the forecast (inflated by `inflation`) and
    eps = perturbations(seed, r, L). Returns the analysis ensemble (a new
    array unless out is given; out=ens updates in place; a DataArray for a
    DataArray ens)."""
    who = "dakit.enkf.analysis"
    xo = operand(labelled(ens)[0], "ens", who, _DTYPES)
    if len(xo.shape) != 2:
        raise invalid("%s: ens has shape %s; it must be (N, L)" % (who, xo.shape))
    _members_along_rows(xo.shape, loc, H, "ens", who)
    with Plan(xo.shape[0], xo.shape[1], loc, H, dtype=xo.dtype, variant=variant, backend=backend) as plan:
        return plan.analysis(ens, y, r, seed, inflation=inflation, out=out)
