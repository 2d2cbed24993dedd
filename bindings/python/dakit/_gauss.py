"""gauss: recursive Gaussian filters (deriche, vyv, rf) along axes of a 1-D to 3-D array, with the
signature and defaults of scipy.ndimage.gaussian_filter."""
import ctypes
import math
import numbers
import operator
import warnings

import numpy as np

from ._arrays import Buffers, Stream, cuda_key, empty_like, labelled, operand, usable_here, zero_copy
from ._context import Plan
from ._errors import invalid
from ._native import (BOUNDARIES, C, DK_F32, DK_F64, DK_MAX_DIMS, GAUSS_METHODS, GAUSS_MODES, GAUSS_NAN,
                      GaussDesc, check)

_DTYPES = (np.float32, np.float64)
_INT_MAX = 2 ** 31 - 1
_SIZE_MAX = 2 ** (8 * ctypes.sizeof(ctypes.c_size_t)) - 1


def gauss_alpha(sigma, K=4):
    """The recursive filter's coefficient alpha for sigma (grid units) and K."""
    return C.dk_gauss_alpha(_float(sigma, "sigma", "dakit.gauss_alpha"), _c_int(K, "K", "dakit.gauss_alpha"))


def _c_int(value, name, who):
    try:
        v = operator.index(value)
    except TypeError:
        raise invalid("%s: %s must be an integer, not %r" % (who, name, value)) from None
    if not -_INT_MAX - 1 <= v <= _INT_MAX:
        raise invalid("%s: %s = %d does not fit a C int" % (who, name, v))
    return v


def _size(value, name, who):
    """A size or count for a C size_t: checked here, since ctypes would keep
    only its low 64 bits (2**64 + 3 would run as 3)."""
    try:
        v = operator.index(value)
    except TypeError:
        raise invalid("%s: %s must be an integer, not %r" % (who, name, value)) from None
    if v < 0:
        raise invalid("%s: %s is %d; it must be >= 0" % (who, name, v))
    if v > _SIZE_MAX:
        raise invalid("%s: %s is %d, more than a C size_t holds (%d)" % (who, name, v, _SIZE_MAX))
    return v


def _float(value, name, who):
    """A number for a C double (its range is checked by C, which words it)."""
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise invalid("%s: %s must be a number that a double holds, not %r" % (who, name, value)) from None


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
    except (TypeError, ValueError, OverflowError):
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


# scipy.ndimage's mode names (for its filters the grid- names are synonyms),
# plus dakit's own: the rf paper's two rules and the C name of scipy's constant
MODES = {"reflect": "reflect", "grid-mirror": "reflect", "constant": "cval", "grid-constant": "cval",
         "nearest": "nearest", "mirror": "mirror", "wrap": "wrap", "grid-wrap": "wrap", "cval": "cval",
         "zero": "zero", "rf-constant": "constant"}
# scipy skips an axis whose sigma is at most this
_SKIP_SIGMA = 1e-15
# the Gaussian's weight that scipy's truncation may cut and still match an
# untruncated recursive filter well within the methods' accuracy (truncate=4
# cuts at most 6.3e-5)
_MAX_CUT = 1e-4


def _per_axis(value, count, name, who):
    """scipy's convention: one value for every filtered axis, or a sequence
    of one per axis."""
    if isinstance(value, (list, tuple)):
        if len(value) != count:
            raise invalid("%s: %s has %d values for %d filtered axes; give one per axis or a single value"
                          % (who, name, len(value), count))
        return list(value)
    return [value] * count


def _mode(mode, count, who):
    """The dk_boundary of a scipy mode (or a sequence of one per axis, all alike)."""
    modes = _per_axis(mode, count, "mode", who)
    for m in modes:
        if not isinstance(m, str) or m not in MODES:
            raise invalid("%s: mode is %r; it must be one of %s (scipy's), or dakit's 'zero' or 'rf-constant' "
                          "(the rf paper's rules)" % (who, m, ", ".join(repr(k) for k in list(MODES)[:8])))
    names = {MODES[m] for m in modes}
    if len(names) > 1:
        raise invalid("%s: mode differs between axes (%s); dakit filters every axis of a call with one mode: "
                      "call it once per axis" % (who, ", ".join(repr(m) for m in modes)))
    return names.pop() if names else "reflect"


def _check_truncation(sigma, truncate, radius, who):
    """dakit's filters are not truncated: refuse a scipy truncation that cuts
    more of the Gaussian than the methods' own error."""
    if radius is None:
        truncate = _float(truncate, "truncate", who)
        if not truncate > 0 or math.isinf(truncate):
            raise invalid("%s: truncate is %r; it must be a positive number" % (who, truncate))
    radii = _per_axis(radius, len(sigma), "radius", who)
    for s, r in zip(sigma, radii):
        if not math.isfinite(s) or s <= 0:
            continue  # C words a bad sigma
        if r is None:
            r = int(truncate * s + 0.5)
        else:
            r = _size(r, "radius", who)
        cut = math.erfc((r + 0.5) / (math.sqrt(2.0) * s))
        if cut > _MAX_CUT:
            raise invalid("%s: %s cuts %.1e of the Gaussian's weight at sigma %g; dakit's filters are not "
                          "truncated and match scipy's only where its kernel reaches about 4 sigma (truncate >= "
                          "4, radius >= 4 sigma)" % (who, "radius %d" % r if radius is not None else
                                                     "truncate %g (radius %d)" % (truncate, r), cut, s))


def _legacy(mode, boundary, decomposition, who):
    """The keywords before scipy's signature: boundary= (the C names) and
    mode="exact"/"overlap" (now decomposition=), with a DeprecationWarning."""
    if isinstance(mode, str) and mode in GAUSS_MODES:
        warnings.warn("%s: mode=%r is the decomposition now (decomposition=%r); mode is scipy's boundary mode"
                      % (who, mode, mode), DeprecationWarning, stacklevel=3)
        decomposition, mode = mode, "reflect"
    if boundary is not None:
        warnings.warn("%s: boundary= is deprecated; use mode= with scipy's names ('constant' is scipy's, the rf "
                      "paper's rule is 'rf-constant')" % who, DeprecationWarning, stacklevel=3)
        if not isinstance(boundary, str) or boundary not in BOUNDARIES:
            raise invalid("%s: boundary is %r; it must be one of %s"
                          % (who, boundary, ", ".join(repr(k) for k in BOUNDARIES)))
        mode = {"constant": "rf-constant"}.get(boundary, boundary)
    return mode, decomposition


class GaussPlan(Plan):
    """A validated gauss filter for arrays of one shape and dtype, executed
    many times: plan = GaussPlan(x.shape, x.dtype, sigma=3); y = plan(x).

    The parameters are those of gauss() (scipy.ndimage.gaussian_filter's and
    dakit's own); an axis whose sigma is 0 is not filtered.
    """

    def __init__(self, shape, dtype, sigma, order=0, mode="reflect", cval=0.0, truncate=4.0, *, radius=None,
                 axes=None, method="deriche", nan="error", K=4, decomposition="exact", overlap=None, blocks=None,
                 order_poles=5, variant=None, backend=None, boundary=None, _who="dakit.GaussPlan"):
        who = _who
        super().__init__(backend)
        mode, decomposition = _legacy(mode, boundary, decomposition, who)
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
        named = _axes(axes, ndim, who)
        sigma = _sigmas(sigma, named, who)
        orders = _orders(order, named, who)
        boundary_name = _mode(mode, len(named), who)
        _check_truncation(sigma, truncate, radius, who)
        # as scipy: an axis of sigma 0 is left alone
        kept = [i for i, s in enumerate(sigma) if not 0 <= s <= _SKIP_SIGMA]
        self.axes = tuple(named[i] for i in kept)
        self.sigma = tuple(sigma[i] for i in kept)
        self.order = tuple(orders[i] for i in kept)
        self.K = _c_int(K, "K", who)
        self.mode = mode
        self.boundary = boundary_name
        self.decomposition = decomposition

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
        d.boundary = BOUNDARIES[boundary_name]
        d.mode = _choice(decomposition, GAUSS_MODES, "decomposition", who)
        d.method = _choice(method, GAUSS_METHODS, "method", who)
        d.order_poles = _c_int(order_poles, "order_poles", who)
        d.cval = _float(cval, "cval", who)
        nan_policy = _choice(nan, GAUSS_NAN, "nan", who)
        self.method, self.order_poles, self.cval, self.nan = method, d.order_poles, d.cval, nan
        if overlap is not None:
            d.overlap = _size(overlap, "overlap", who)
        if blocks is not None:
            d.blocks = _size(blocks, "blocks", who)
        self.overlap, self.blocks = d.overlap, d.blocks
        variant_bytes = _cstr(variant, "variant", who)
        d.variant = variant_bytes
        self._identity = not self.axes and named
        if self._identity:  # every sigma 0: a copy, as scipy gives
            self.variant = variant
            self._last = None
            return
        h = ctypes.c_void_p()
        check(C.dk_gauss_plan_create(self._ctx.handle, ctypes.byref(d), ctypes.byref(h)), self._ctx.handle)
        self._adopt(h)
        check(C.dk_gauss_plan_set_nan(self.handle, nan_policy), self._ctx.handle)
        self.variant = variant if variant is not None else (self._ctx.variants("gauss") or ("",))[0]
        self._last = None  # the last call on CUDA memory, when it can be repeated

    def __call__(self, x, out=None):
        """Filters x (a NumPy or CUDA array, or an xarray.DataArray, of the
        plan's shape and dtype) into out, a new array of the same kind when
        None; out may be x (in place). Returns out."""
        values, labels = labelled(x)
        out_values, out_labels = labelled(out)
        if labels is None and out_labels is None:
            return self._call(x, out)
        result = self._call(values, out_values)
        if out_labels is not None:
            return out
        return labels.like(result) if labels is not None and out is None else result

    def _call(self, x, out):
        # a call repeated on the same CUDA memory (the loop of an assimilation
        # cycle) skips what the first one checked and wrapped
        last = self._last
        if last is not None and out is not None and last[2] is self._ctx._wraps:
            kx = cuda_key(x)
            if kx is not None and kx == last[0] and cuda_key(out) == last[1]:
                with self._lock:
                    with Buffers(self._ctx, last[3]) as b:
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
        partly = xo.overlaps(oo) and not xo.same_memory(oo)
        if self._identity:
            return self._copy(xo, oo, who)
        if partly and not xo.device:
            # out overlaps x without being x: filter a copy of x (the host
            # call and the NaN policy read x while out is written)
            xo = operand(np.array(xo.obj), "x", who, (self.dtype,))
        with self._lock:
            handle, ctx = self.handle, self._ctx
            how = zero_copy(ctx, who, xo, oo)
            if how and not xo.device and (self.nan == "ignore" or (self.nan == "error" and _may_hold_nan(xo.obj))):
                how = False  # the host call applies the nan policy (and words its refusal)
            if how:
                with Buffers(ctx, how) as b:
                    src = b.wrap(xo)
                    if partly:
                        # partly overlapping device views: filter a copy of x
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

    def _copy(self, xo, oo, who):
        if xo.same_memory(oo):
            return oo.obj
        if not xo.device:
            np.copyto(oo.obj, xo.obj)
            return oo.obj
        with self._lock, Buffers(self._ctx, zero_copy(self._ctx, who, xo, oo)) as b:
            src = b.wrap(xo)
            if xo.overlaps(oo):
                tmp = b.create(xo.nbytes)
                b.copy(tmp, src, xo.nbytes)
                src = tmp
            b.copy(b.wrap(oo), src, xo.nbytes)
        return oo.obj

    def __repr__(self):
        return ("dakit.GaussPlan(shape=%s, dtype=%s, sigma=%s, order=%s, mode=%r, cval=%r, axes=%s, method=%r, "
                "K=%d, decomposition=%r, nan=%r, variant=%r, backend=%r)"
                % (self.shape, self.dtype.name, self.sigma, self.order, self.mode, self.cval, self.axes,
                   self.method, self.K, self.decomposition, self.nan, self.variant, self.backend))


def _output(output, out, who):
    """scipy's output (None, an array or a dtype), or dakit's out=."""
    if out is not None:
        if output is not None:
            raise invalid("%s: give output or out, not both (out is dakit's older name of output)" % who)
        output = out
    if output is None:
        return None, None
    if isinstance(output, (type, np.dtype, str)):
        try:
            dtype = np.dtype(output)
        except TypeError:
            raise invalid("%s: output %r is neither an array nor a NumPy dtype" % (who, output)) from None
        if dtype.kind not in "biufc":
            raise invalid("%s: output dtype %s does not hold numbers" % (who, dtype))
        return None, dtype
    return output, None


def gauss(x, sigma, order=0, output=None, mode="reflect", cval=0.0, truncate=4.0, *, radius=None, axes=None,
          method="deriche", nan="error", K=4, decomposition="exact", overlap=None, blocks=None, order_poles=5,
          variant=None, backend=None, out=None, boundary=None):
    """Gaussian smoothing of x, as scipy.ndimage.gaussian_filter(x, sigma)
    computes it (within 1e-3 of max|x| with the default method).

    x: a float32 or float64 array of 1 to 3 dimensions in C order: NumPy, a
    CUDA array on the cuda backend, or an xarray.DataArray (returned as one,
    with its dims, coordinates and attributes; axes may then name dims).

    scipy's parameters:
      sigma: one number, or one per filtered axis, in grid units; an axis
        whose sigma is 0 is left alone.
      order: 0 smooths; 1 and 2 give the first and second derivative of the
        smoothed field (deriche and vyv); one number or one per axis.
      output: an array to write into (it may be x: in place) or a dtype.
      mode: "reflect" (default), "constant" (with cval), "nearest",
        "mirror", "wrap" and their "grid-" synonyms; one for every axis.
        dakit's own: "zero" and "rf-constant", the rf paper's rules
        (docs/gauss.md).
      truncate, radius: accepted where scipy's kernel reaches far enough
        (about 4 sigma, the default) to agree with dakit's untruncated
        filters; a shorter kernel is refused.
      axes: None (every axis), an int, or a sequence.

    dakit's own (keyword only):
      method: "deriche" (default; within 5e-4 of the sampled Gaussian, sigma
        0.5 to 1e4), "vyv" (order_poles 3 to 5) or "rf" (the GPU paper's
        K-iterated first-order filter, fastest, least accurate).
      nan: "error" (NaN in host input is refused), "ignore" (smoothed
        around by normalized convolution; host arrays only) or "propagate".
      decomposition: "exact" (equals the serial reference to rounding) or
        "overlap" (rf only: the GPU paper's blocks, with `overlap` and
        `blocks`).
      variant, backend: a backend's variant; None (the default context), a
        backend name, or a dakit.Context.
      out: dakit's older name of output. boundary (the C names) and
        mode="exact"/"overlap" still work, with a DeprecationWarning.

    Returns output (a new array of x's kind when output is None or a
    dtype). For repeated calls on one shape make a GaussPlan once.
    """
    who = "dakit.gauss"
    values, labels = labelled(x)
    target, dtype = _output(output, out, who)
    target_values, target_labels = labelled(target)
    if labels is not None and axes is not None:
        axes = labels.axis(axes, who) if isinstance(axes, str) else [labels.axis(a, who) for a in axes] \
            if isinstance(axes, (list, tuple)) else axes
    xo = operand(values, "x", who, _DTYPES)
    mode, decomposition = _legacy(mode, boundary, decomposition, who)
    # an output array of another dtype (host): computed in x's, then cast as scipy casts
    direct = target is None or not isinstance(target_values, np.ndarray) or target_values.dtype == xo.dtype
    if not direct:
        if target_values.shape != xo.shape:
            raise invalid("%s: output has shape %s; it must have x's shape %s" % (who, target_values.shape, xo.shape))
        if not target_values.flags.writeable:
            raise invalid("%s: output is read-only, but dakit writes the result into it" % who)
    with GaussPlan(xo.shape, xo.dtype, sigma, order, mode, cval, truncate, radius=radius, axes=axes, method=method,
                   nan=nan, K=K, decomposition=decomposition, overlap=overlap, blocks=blocks,
                   order_poles=order_poles, variant=variant, backend=backend, _who=who) as plan:
        if direct:
            result = plan(values, out=target_values)
        else:  # another dtype: computed in x's, then cast as scipy casts
            result = plan(values)
    if target is not None:
        if not direct:
            if xo.device:
                raise invalid("%s: output has dtype %s and x %s; on CUDA arrays dakit writes x's dtype"
                              % (who, target_values.dtype, xo.dtype))
            np.copyto(target_values, result, casting="unsafe")
        return target
    if dtype is not None and dtype != xo.dtype:
        if xo.device:
            raise invalid("%s: output is dtype %s and x %s; on CUDA arrays dakit writes x's dtype"
                          % (who, dtype, xo.dtype))
        result = result.astype(dtype)
    return labels.like(result) if labels is not None else result
