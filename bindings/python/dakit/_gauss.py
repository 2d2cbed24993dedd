"""gauss: recursive Gaussian filters (rf, deriche, vyv) along axes of a 1-D to 3-D array."""
import ctypes
import numbers
import operator

import numpy as np

from ._arrays import Buffers, Stream, cuda_key, empty_like, operand, usable_here, zero_copy
from ._context import Plan
from ._errors import invalid
from ._native import (BOUNDARIES, C, DK_F32, DK_F64, DK_MAX_DIMS, GAUSS_METHODS, GAUSS_MODES, GAUSS_NAN,
                      GaussDesc, check)

_DTYPES = (np.float32, np.float64)
_INT_MAX = 2 ** 31 - 1


def gauss_alpha(sigma, K=4):
    """The recursive filter's coefficient alpha for sigma (grid units) and K."""
    return C.dk_gauss_alpha(float(sigma), _c_int(K, "K", "dakit.gauss_alpha"))


def _c_int(value, name, who):
    try:
        v = operator.index(value)
    except TypeError:
        raise invalid("%s: %s must be an integer, not %r" % (who, name, value)) from None
    if not -_INT_MAX - 1 <= v <= _INT_MAX:
        raise invalid("%s: %s = %d does not fit a C int" % (who, name, v))
    return v


def _size(value, name, who):
    try:
        v = operator.index(value)
    except TypeError:
        raise invalid("%s: %s must be an integer, not %r" % (who, name, value)) from None
    if v < 0:
        raise invalid("%s: %s is %d; it must be >= 0" % (who, name, v))
    return v


def _float(value, name, who):
    try:
        return float(value)
    except (TypeError, ValueError):
        raise invalid("%s: %s must be a number, not %r" % (who, name, value)) from None


def _cstr(value, name, who):
    """None or a str, as the bytes a const char * field points at."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid("%s: %s must be a string (or None), not %r" % (who, name, value))
    return value.encode()


def _may_hold_nan(x):
    """False when x surely holds no NaN: its sum is a number (one pass, no
    temporary array)."""
    with np.errstate(all="ignore"):
        return bool(np.isnan(np.add.reduce(np.asarray(x), axis=None)))


def _choice(value, table, name, who):
    if value not in table:
        raise invalid("%s: %s is %r; it must be one of %s" % (who, name, value, ", ".join(repr(k) for k in table)))
    return table[value]


def _axes(axes, ndim, who):
    """The filtered axes as a list in the caller's order (negative counted
    from the end); None: every axis."""
    if axes is None:
        return list(range(ndim))
    if isinstance(axes, numbers.Integral):
        axes = [axes]
    out = []
    for a in axes:
        a = _c_int(a, "an axis", who)
        if not -ndim <= a < ndim:
            raise invalid("%s: axis %d is out of range for an array of %d dimension(s)" % (who, a, ndim))
        a %= ndim
        if a in out:
            raise invalid("%s: axis %d is named twice in axes" % (who, a))
        out.append(a)
    return out


def _sigmas(sigma, axes, who):
    try:
        values = np.asarray(sigma, dtype=np.float64)
    except (TypeError, ValueError):
        raise invalid("%s: sigma must be a number or a sequence of numbers, not %r" % (who, sigma)) from None
    if values.ndim == 0:
        return [float(values)] * len(axes)
    sigma = [float(s) for s in values.ravel()]
    if len(sigma) != len(axes):
        raise invalid("%s: %d sigma values for %d filtered axes; give one per axis (in the order of axes) or a "
                      "single number" % (who, len(sigma), len(axes)))
    return sigma


def _orders(order, axes, who):
    orders = [order] * len(axes) if isinstance(order, numbers.Integral) else list(order) \
        if isinstance(order, (list, tuple)) else None
    if orders is None or len(orders) != len(axes) or \
            not all(isinstance(o, numbers.Integral) and 0 <= o <= 2 for o in orders):
        raise invalid("%s: order must be 0, 1 or 2, or a sequence of them, one per filtered axis (%d), not %r"
                      % (who, len(axes), order))
    return [int(o) for o in orders]


class GaussPlan(Plan):
    """A validated gauss filter for arrays of one shape and dtype, executed
    many times: plan = GaussPlan(x.shape, x.dtype, sigma=3); y = plan(x).

    sigma: one number, or one per filtered axis (in the order of `axes`), in
    grid units. axes: None (every axis), an int or a sequence. method: "rf"
    (the K-iterated first-order filter), "deriche" or "vyv" (recursive
    Gaussians within 5e-4 and 3e-3 of the sampled one; order_poles 3 to 5 for
    vyv). order: 0 (smooth), or 1 and 2 for the first and second derivative
    of the smoothed field, as scipy.ndimage.gaussian_filter's order (deriche
    and vyv): one number, or one per filtered axis. boundary: scipy's "reflect", "mirror", "nearest", "wrap" and "cval"
    (scipy's "constant", with `cval`), or dakit's "zero" and "constant"
    (docs/gauss.md). mode: "exact" (equals the serial reference to rounding)
    or "overlap" (the GPU paper's blocks, with `overlap` and `blocks`). nan:
    "error" (NaN in host input is refused), "ignore" (smoothed around by
    normalized convolution; host arrays only) or "propagate"; on CUDA arrays
    the data are not read back, so NaN propagates under "error". variant: one
    of Context.variants("gauss"). backend: None (the default context), a
    name, or a dakit.Context.
    """

    def __init__(self, shape, dtype, sigma, K=4, axes=None, boundary="zero", mode="exact", variant=None,
                 backend=None, overlap=None, blocks=None, method="rf", order_poles=5, cval=0.0, nan="error",
                 order=0):
        who = "dakit.GaussPlan"
        super().__init__(backend)
        if isinstance(shape, numbers.Integral):
            shape = (shape,)
        self.shape = tuple(_size(s, "a dimension of shape", who) for s in shape)
        try:
            self.dtype = np.dtype(dtype)
        except TypeError:
            raise invalid("%s: dtype %r is not a NumPy dtype" % (who, dtype)) from None
        if self.dtype not in _DTYPES:
            raise invalid("%s: dtype is %s; gauss filters float32 or float64" % (who, self.dtype))
        ndim = len(self.shape)
        self.axes = tuple(_axes(axes, ndim, who))
        self.sigma = tuple(_sigmas(sigma, self.axes, who))
        self.order = tuple(_orders(order, self.axes, who))
        self.K = _c_int(K, "K", who)
        self.boundary = boundary
        self.mode = mode

        d = GaussDesc()
        C.dk_gauss_desc_init(ctypes.byref(d))
        d.dtype = DK_F32 if self.dtype == np.float32 else DK_F64
        d.ndim = ndim
        if ndim <= DK_MAX_DIMS:  # more axes than C takes: C says so from ndim
            for a, n in enumerate(self.shape):
                d.shape[a] = n
            for a, s, o in zip(self.axes, self.sigma, self.order):
                d.axes |= 1 << a
                d.sigma[a] = s
                d.order[a] = o
        d.K = self.K
        d.boundary = _choice(boundary, BOUNDARIES, "boundary", who)
        d.mode = _choice(mode, GAUSS_MODES, "mode", who)
        d.method = _choice(method, GAUSS_METHODS, "method", who)
        d.order_poles = _c_int(order_poles, "order_poles", who)
        try:
            d.cval = float(cval)
        except (TypeError, ValueError):
            raise invalid("%s: cval must be a number, not %r" % (who, cval)) from None
        nan_policy = _choice(nan, GAUSS_NAN, "nan", who)
        self.method, self.order_poles, self.cval, self.nan = method, d.order_poles, d.cval, nan
        if overlap is not None:
            d.overlap = _size(overlap, "overlap", who)
        if blocks is not None:
            d.blocks = _size(blocks, "blocks", who)
        self.overlap, self.blocks = d.overlap, d.blocks
        variant_bytes = _cstr(variant, "variant", who)
        d.variant = variant_bytes
        h = ctypes.c_void_p()
        check(C.dk_gauss_plan_create(self._ctx.handle, ctypes.byref(d), ctypes.byref(h)), self._ctx.handle)
        self._adopt(h)
        check(C.dk_gauss_plan_set_nan(self.handle, nan_policy), self._ctx.handle)
        self.variant = variant if variant is not None else (self._ctx.variants("gauss") or ("",))[0]
        self._last = None  # the last call on CUDA memory, when it can be repeated

    def __call__(self, x, out=None):
        """Filters x (a NumPy or CUDA array of the plan's shape and dtype) into
        out, a new array of the same kind when None; out may be x (in place).
        Returns out."""
        # a call repeated on the same CUDA memory (the loop of an assimilation
        # cycle) skips what the first one checked and wrapped
        last = self._last
        if last is not None and out is not None and last[2] is self._ctx._wraps:
            kx = cuda_key(x)
            if kx is not None and kx == last[0] and cuda_key(out) == last[1]:
                with self._lock:
                    with Buffers(self._ctx, last[3]):
                        check(C.dk_gauss_execute(self.handle, last[4], last[5]), self._ctx.handle)
                return out
        who = "dakit.gauss"
        xo = operand(x, "x", who, (self.dtype,))
        if xo.shape != self.shape:
            raise invalid("%s: x has shape %s, but the plan was made for shape %s" % (who, xo.shape, self.shape))
        usable_here(self._ctx, who, xo)
        if out is None:
            out = empty_like(xo)
        oo = operand(out, "out", who, (self.dtype,), writable=True)
        if oo.shape != self.shape:
            raise invalid("%s: out has shape %s; it must have x's shape %s" % (who, oo.shape, self.shape))
        with self._lock:
            handle, ctx = self.handle, self._ctx
            how = zero_copy(ctx, who, xo, oo)
            if how and not xo.device and (self.nan == "ignore" or (self.nan == "error" and _may_hold_nan(xo.obj))):
                how = False  # the host call applies the nan policy (and words its refusal)
            if how:
                with Buffers(ctx, how) as b:
                    src = b.wrap(xo)
                    if xo.overlaps(oo) and not xo.same_memory(oo):
                        # partly overlapping views: filter a copy of x
                        tmp = b.create(xo.nbytes)
                        b.copy(tmp, src, xo.nbytes)
                        src = tmp
                    dst = b.wrap(oo)
                    check(C.dk_gauss_execute(handle, src, dst), ctx.handle)
                    # repeatable where both wrappers outlive the call (kept by
                    # the context) and the call only orders itself on a stream
                    if not b.handles and isinstance(how, Stream):
                        self._last = (cuda_key(x), cuda_key(out), ctx._wraps, how, src, dst)
            else:
                check(C.dk_gauss_execute_host(handle, xo.ptr, oo.ptr), ctx.handle)
        return oo.obj

    def __repr__(self):
        return ("dakit.GaussPlan(shape=%s, dtype=%s, sigma=%s, K=%d, axes=%s, boundary=%r, mode=%r, method=%r, "
                "order=%s, nan=%r, variant=%r, backend=%r)" % (self.shape, self.dtype.name, self.sigma, self.K,
                                                               self.axes, self.boundary, self.mode, self.method,
                                                               self.order, self.nan, self.variant, self.backend))


def gauss(x, sigma, K=4, axes=None, boundary="zero", mode="exact", variant=None, backend=None, out=None,
          overlap=None, blocks=None, method="rf", order_poles=5, cval=0.0, nan="error", order=0):
    """Gaussian smoothing of x by a recursive filter (rf by default).

    x: a float32 or float64 array of 1 to 3 dimensions in C order (NumPy, or
    a CUDA array on the cuda backend). Returns an array of the same kind
    (out, when given; out may be x to filter in place). See GaussPlan for
    the parameters; for repeated calls on one shape make a GaussPlan once.
    """
    xo = operand(x, "x", "dakit.gauss", _DTYPES)
    with GaussPlan(xo.shape, xo.dtype, sigma, K=K, axes=axes, boundary=boundary, mode=mode, variant=variant,
                   backend=backend, overlap=overlap, blocks=blocks, method=method, order_poles=order_poles, cval=cval,
                   nan=nan, order=order) as plan:
        return plan(x, out=out)
