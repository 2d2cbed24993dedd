"""dakit.gauss and dakit.GaussPlan against NumPy and SciPy, on every backend
present (cpu, and opencl through PoCL)."""
import threading

import numpy as np
import pytest

import dakit
from conftest import FakeCudaArray, backends, raises

GAUSS = backends("gauss")
UNIT = {np.float32: 2.0 ** -24, np.float64: 2.0 ** -53}
# the rf filter with the zero rule: the filter whose impulse response is derived below
RF = dict(method="rf", mode="zero")


def rf_response(sigma, K):
    """The K-iterated recursive filter's impulse response on an unbounded
    line, from its own definition: one advancing pass has the causal
    response beta alpha^n, so K of them give f[n] = beta^K C(n+K-1, K-1)
    alpha^n, and the K backing passes the same reversed; the whole filter
    is f convolved with f reversed. Returned centred, cut where f falls
    below 1e-20 of its peak."""
    E = K / sigma ** 2
    alpha = 1.0 / (1.0 + E + np.sqrt(E * (E + 2.0)))
    f = [(1.0 - alpha) ** K]
    n = 1
    while True:
        f.append(f[-1] * alpha * (n + K - 1) / n)
        if n > K * alpha / (1 - alpha) and f[-1] < 1e-20 * max(f):
            break
        n += 1
    f = np.array(f)
    return np.correlate(f, f, "full"), alpha


def convolve_axis(x, h, axis):
    r = len(h) // 2
    return np.apply_along_axis(lambda v: np.convolve(v, h)[r:r + len(v)], axis, x)


def rounding_bound(x, K, dtype):
    """What "equal to rounding" means here: 2K passes, each adding a few
    rounding units of the running sum, bounded by 4 * 2K * u * max|x|."""
    return 4 * 2 * K * UNIT[dtype] * np.abs(x).max()


@pytest.mark.parametrize("backend", GAUSS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sigma,K", [(0.7, 1), (2.5, 4), (6.0, 3), (6.0, 8), (20.0, 4)])
def test_1d_equals_convolution_with_the_filters_impulse_response(backend, dtype, sigma, K, rng):
    h, alpha = rf_response(sigma, K)
    assert alpha == pytest.approx(dakit.gauss_alpha(sigma, K), rel=1e-15)
    r = len(h) // 2
    # data in the middle, zeros for the response's reach on each side: the
    # zero boundary's ends then matter below rounding
    x = np.zeros(2 * r + 300, dtype=dtype)
    x[r:r + 300] = rng.normal(size=300)
    y = dakit.gauss(x, sigma, K=K, backend=backend, **RF)
    assert type(y) is np.ndarray and y.dtype == dtype and y.shape == x.shape
    ref = convolve_axis(x.astype(np.float64), h, 0)
    assert np.abs(y - ref).max() <= rounding_bound(x, K, dtype)


@pytest.mark.parametrize("backend", GAUSS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_3d_is_separable_convolution_along_the_chosen_axes(backend, dtype, rng):
    sigmas = {0: 1.5, 2: 3.0}  # axis 1 is left alone
    K = 4
    hs = {a: rf_response(s, K)[0] for a, s in sigmas.items()}
    pad = {a: len(h) // 2 for a, h in hs.items()}
    core = (6, 5, 7)
    shape = (core[0] + 2 * pad[0], core[1], core[2] + 2 * pad[2])
    x = np.zeros(shape, dtype=dtype)
    x[pad[0]:pad[0] + core[0], :, pad[2]:pad[2] + core[2]] = rng.normal(size=core)
    y = dakit.gauss(x, [sigmas[2], sigmas[0]], K=K, axes=(2, 0), backend=backend, **RF)
    ref = x.astype(np.float64)
    for a in sorted(sigmas):
        ref = convolve_axis(ref, hs[a], a)
    assert np.abs(y - ref).max() <= 2 * rounding_bound(x, K, dtype)


@pytest.mark.parametrize("backend", GAUSS)
def test_2d_negative_axis_and_plan_reuse(backend, rng):
    h, _ = rf_response(2.0, 4)
    r = len(h) // 2
    plan = dakit.GaussPlan((3, 2 * r + 50), np.float64, 2.0, axes=-1, backend=backend, **RF)
    assert plan.axes == (1,) and plan.backend == backend
    for _ in range(3):
        x = np.zeros(plan.shape)
        x[:, r:r + 50] = rng.normal(size=(3, 50))
        y = plan(x)
        assert np.abs(y - convolve_axis(x, h, 1)).max() <= rounding_bound(x, 4, np.float64)
    plan.close()


@pytest.mark.parametrize("K,bound", [(64, 3e-3), (256, 1e-3)])
def test_large_K_approaches_scipy_gaussian_filter(K, bound, rng):
    """The RF's variance is 2K alpha/(1-alpha)^2, which the coefficient makes
    equal to sigma^2; with that sigma, SciPy's sampled Gaussian and the
    K-iterated filter differ by the filter's excess kurtosis (O(1/K)) and by
    lattice effects (O(1/sigma^2)): at sigma = 8 by at most 3e-3 max|x| for
    K = 64 and 1e-3 max|x| for K = 256 (measured 1.5e-3 and 5e-4)."""
    scipy_ndimage = pytest.importorskip("scipy.ndimage")
    sigma = 8.0
    alpha = dakit.gauss_alpha(sigma, K)
    sigma_rf = np.sqrt(2 * K * alpha / (1 - alpha) ** 2)
    assert sigma_rf == pytest.approx(sigma, rel=1e-12)
    x = np.zeros(600)
    x[100:500] = rng.normal(size=400)
    y = dakit.gauss(x, sigma, K=K, backend="cpu", **RF)
    g = scipy_ndimage.gaussian_filter(x, sigma_rf, mode="constant", truncate=10.0)
    assert np.abs(y - g).max() <= bound * np.abs(x).max()


@pytest.mark.parametrize("backend", GAUSS)
def test_constant_boundary_keeps_a_constant_field(backend):
    x = np.full((7, 40), 3.25)
    y = dakit.gauss(x, 5.0, method="rf", mode="rf-constant", backend=backend)
    assert np.abs(y - 3.25).max() <= 1e-13


@pytest.mark.parametrize("backend", GAUSS)
def test_overlap_mode_with_a_wide_overlap_equals_exact_mode(backend, rng):
    x = rng.normal(size=2000)
    exact = dakit.gauss(x, 3.0, backend=backend, **RF)
    wide = dakit.gauss(x, 3.0, decomposition="overlap", overlap=400, blocks=16, backend=backend, **RF)
    assert np.abs(wide - exact).max() <= 1e-12
    narrow = dakit.gauss(x, 3.0, decomposition="overlap", overlap=1, blocks=16, backend=backend, **RF)
    assert np.abs(narrow - exact).max() > 1e-6  # the paper's approximation shows at block edges


# ---- where the result goes ----

@pytest.mark.parametrize("backend", GAUSS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_out_and_in_place(backend, dtype, rng):
    x = rng.normal(size=(30, 20)).astype(dtype)
    expected = dakit.gauss(x, 2.0, backend=backend)
    out = np.empty_like(x)
    y = dakit.gauss(x, 2.0, backend=backend, out=out)
    assert y is out
    np.testing.assert_array_equal(out, expected)
    keep = x.copy()
    y = dakit.gauss(x, 2.0, backend=backend, out=x)
    assert y is x
    np.testing.assert_array_equal(x, expected)
    # overlapping views that are not the same memory: filtered from a copy
    a = np.zeros(100, dtype=dtype)
    a[10:60] = keep[0, :20].tolist() + keep[1, :20].tolist() + keep[2, :10].tolist()
    src, dst = a[10:60], a[15:65]
    expected = dakit.gauss(src.copy(), 2.0, backend=backend)
    dakit.gauss(src, 2.0, backend=backend, out=dst)
    np.testing.assert_array_equal(a[15:65], expected)


def test_cpu_uses_the_arrays_own_memory(calls, rng):
    """Zero copy on cpu: the buffers dakit filters are the NumPy arrays'
    memory (dk_buffer_wrap of their data pointers), and the copying host
    call is never made."""
    calls.record("dk_buffer_wrap", "dk_gauss_execute")
    calls.forbid("dk_gauss_execute_host", "dk_buffer_write", "dk_buffer_read")
    x = rng.normal(size=(64, 64)).astype(np.float32)
    out = np.empty_like(x)
    y = dakit.gauss(x, 3.0, backend="cpu", out=out)
    assert y is out
    assert calls.wrapped_pointers() == [x.ctypes.data, out.ctypes.data]
    assert len(calls.named("dk_gauss_execute")) == 1
    # in place: one buffer over x, passed as both in and out
    calls.calls.clear()
    dakit.gauss(x, 3.0, backend="cpu", out=x)
    assert calls.wrapped_pointers() == [x.ctypes.data]
    (args,) = calls.named("dk_gauss_execute")
    assert args[1] is args[2]


@pytest.mark.parametrize("backend", GAUSS)
def test_nan_refused_ignored_or_propagated(backend, rng):
    x = rng.normal(size=(40, 30)).astype(np.float64)
    x[7, 11] = np.nan
    with raises(dakit.InvalidArgumentError, "1 NaN value (the first at [7, 11])"):
        dakit.gauss(x, 2.0, backend=backend)
    y = dakit.gauss(x, 2.0, backend=backend, nan="ignore")
    assert np.isfinite(y).all()
    z = dakit.gauss(x, 2.0, backend=backend, nan="propagate")
    assert np.isnan(z[7, 11])
    clean = np.nan_to_num(x)
    np.testing.assert_allclose(dakit.gauss(clean, 2.0, backend=backend, nan="ignore"),
                               dakit.gauss(clean, 2.0, backend=backend), rtol=0, atol=1e-12)
    with raises(dakit.InvalidArgumentError, "nan is 'maybe'"):
        dakit.GaussPlan(x.shape, x.dtype, 2.0, backend=backend, nan="maybe")


@pytest.mark.parametrize("backend", GAUSS)
@pytest.mark.parametrize("method,bound", [("deriche", 1e-3), ("vyv", 3e-3)])
@pytest.mark.parametrize("mode", ["reflect", "mirror", "nearest", "wrap", "constant"])
def test_recursive_gaussians_against_scipy(backend, method, bound, mode, rng):
    """deriche and vyv against scipy.ndimage.gaussian_filter (truncated far
    out) with the same boundary mode, within each method's bound of the peak
    (docs/gauss.md)."""
    ndimage = pytest.importorskip("scipy.ndimage")
    x = np.zeros((60, 70))
    x[20, 33] = 1.0
    x[0, 0] = 0.5
    y = dakit.gauss(x, 3.0, backend=backend, method=method, mode=mode, cval=0.25)
    ref = ndimage.gaussian_filter(x, 3.0, mode=mode, cval=0.25, truncate=12)
    peak = ndimage.gaussian_filter(np.pad([1.0], 40), 3.0, truncate=12).max()
    assert np.abs(y - ref).max() <= bound * peak


@pytest.mark.parametrize("backend", GAUSS)
@pytest.mark.parametrize("method,bounds", [("deriche", (8e-3, 6e-2)), ("vyv", (8e-3, 3e-2))])
@pytest.mark.parametrize("order", [(1, 0), (0, 2), (2, 1)])
def test_derivatives_against_scipy(backend, method, bounds, order, rng):
    """order= as scipy.ndimage.gaussian_filter's, within the bound of each
    derivative order (docs/gauss.md), relative to the peak of the response;
    on a ramp along the axis the first derivative is its slope."""
    ndimage = pytest.importorskip("scipy.ndimage")
    x = rng.standard_normal((50, 64))
    y = dakit.gauss(x, (3.0, 4.0), backend=backend, method=method, mode="reflect", order=order)
    ref = ndimage.gaussian_filter(x, (3.0, 4.0), order=order, mode="reflect", truncate=12)
    assert np.abs(y - ref).max() <= 4 * bounds[max(order) - 1] * np.abs(ref).max()
    ramp = np.tile(0.5 * np.arange(300.0), (5, 1))
    slope = dakit.gauss(ramp, 4.0, axes=1, backend=backend, method=method, mode="nearest", order=1)
    np.testing.assert_allclose(slope[:, 100:200], 0.5, rtol=0, atol=1e-9)


def test_derivative_errors():
    x = np.zeros(10)
    with raises(dakit.InvalidArgumentError, "order must be 0, 1 or 2", "3"):
        dakit.gauss(x, 2.0, method="vyv", order=3)
    with raises(dakit.InvalidArgumentError, "one per filtered axis (1)"):
        dakit.gauss(x, 2.0, method="vyv", order=(1, 1))
    with raises(dakit.InvalidArgumentError, "needs method deriche or vyv"):
        dakit.gauss(x, 2.0, order=1, method="rf")
    with raises(dakit.InvalidArgumentError, "cannot normalize"):
        dakit.gauss(x, 2.0, method="vyv", order=1, nan="ignore")


@pytest.mark.parametrize("backend", [b for b in GAUSS if b.id != "cpu"])
def test_other_backends_copy_through_the_host_call(backend, calls, rng):
    calls.record("dk_gauss_execute_host")
    calls.forbid("dk_buffer_wrap")
    dakit.gauss(rng.normal(size=50), 2.0, backend=backend)
    assert len(calls.named("dk_gauss_execute_host")) == 1


def test_threads_share_the_default_context(rng):
    xs = [rng.normal(size=(50, 50)) for _ in range(4)]
    expected = [dakit.gauss(x, 2.0) for x in xs]
    got = [None] * 4

    def work(i):
        got[i] = dakit.gauss(xs[i], 2.0)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e, g in zip(expected, got):
        np.testing.assert_array_equal(e, g)


# ---- errors: a sentence, never a crash ----

def test_errors_found_in_python():
    x = np.zeros((4, 4))
    with raises(dakit.InvalidArgumentError, "dtype int64", "float32 or float64"):
        dakit.gauss(np.zeros(5, dtype=np.int64), 1.0)
    with raises(dakit.InvalidArgumentError, "not C-contiguous", "ascontiguousarray"):
        dakit.gauss(x[:, ::2], 1.0)
    with raises(dakit.InvalidArgumentError, "not C-contiguous"):
        dakit.gauss(np.asfortranarray(np.zeros((3, 4))), 1.0)
    with raises(dakit.InvalidArgumentError, "out has shape (3, 4)"):
        dakit.gauss(x, 1.0, out=np.zeros((3, 4)))
    with raises(dakit.InvalidArgumentError, "out has dtype float32"):
        dakit.GaussPlan(x.shape, x.dtype, 1.0)(x, out=np.zeros((4, 4), dtype=np.float32))
    ro = np.zeros((4, 4))
    ro.flags.writeable = False
    with raises(dakit.InvalidArgumentError, "read-only"):
        dakit.gauss(x, 1.0, out=ro)
    dakit.gauss(ro, 1.0)  # a read-only input is fine
    with raises(dakit.InvalidArgumentError, "must be a NumPy array"):
        dakit.gauss(x, 1.0, out=[[0.0] * 4] * 4)
    with raises(dakit.InvalidArgumentError, "2 sigma values for 1 filtered axes"):
        dakit.gauss(x, [1.0, 2.0], axes=0)
    with raises(dakit.InvalidArgumentError, "axis 2 is out of range"):
        dakit.gauss(x, 1.0, axes=2)
    with raises(dakit.InvalidArgumentError, "named twice"):
        dakit.gauss(x, 1.0, axes=(1, -1))
    with raises(dakit.InvalidArgumentError, "mode is 'scipy'", "'reflect'", "'grid-wrap'", "'rf-constant'"):
        dakit.gauss(x, 1.0, mode="scipy")
    with raises(dakit.InvalidArgumentError, "shape (4, 4)", "(4, 5)"):
        dakit.GaussPlan((4, 5), np.float64, 1.0)(x)
    with raises(dakit.InvalidArgumentError, "dtype float64", "float32"):
        dakit.GaussPlan((4, 4), np.float32, 1.0)(x)
    with raises(dakit.InvalidArgumentError, "float32 or float64"):
        dakit.GaussPlan((4, 4), np.int32, 1.0)


def test_errors_worded_by_libdakit():
    """Everything C can judge is judged there; its sentence comes through."""
    with raises(dakit.InvalidArgumentError, "gauss: sigma for axis 0 is -1"):
        dakit.gauss(np.zeros(8), -1.0)
    with raises(dakit.InvalidArgumentError, "gauss: sigma for axis 1 is nan"):
        dakit.gauss(np.zeros((2, 8)), [1.0, float("nan")])
    with raises(dakit.InvalidArgumentError, "gauss: K is 0"):
        dakit.gauss(np.zeros(8), 1.0, K=0)
    with raises(dakit.InvalidArgumentError, "ndim is 4; 1, 2 or 3 axes are supported"):
        dakit.gauss(np.zeros((2, 2, 2, 2)), 1.0)
    with raises(dakit.InvalidArgumentError, "ndim is 0"):
        dakit.gauss(np.float64(1.0), 1.0)
    with raises(dakit.InvalidArgumentError, "shape[0] is 0"):
        dakit.gauss(np.zeros(0), 1.0)
    with raises(dakit.NotImplementedByBackendError, "no variant 'nope'", "it offers"):
        dakit.gauss(np.zeros(8), 1.0, variant="nope", backend="cpu")
    with raises(dakit.NoBackendError, "nosuch"):
        dakit.gauss(np.zeros(8), 1.0, backend="nosuch")


def test_device_array_on_a_host_backend_is_refused(calls):
    calls.forbid("dk_buffer_wrap", "dk_gauss_execute", "dk_gauss_execute_host")
    fake = FakeCudaArray((8, 8))
    with raises(dakit.InvalidArgumentError, "CUDA device array", "'cpu'", "backend='cuda'"):
        dakit.gauss(fake, 1.0, backend="cpu")
    with raises(dakit.InvalidArgumentError, "dtype int32"):
        dakit.gauss(FakeCudaArray((8,), "<i4"), 1.0, backend="cpu")
    with raises(dakit.InvalidArgumentError, "CUDA device array"):
        dakit.gauss(np.zeros((8, 8), np.float32), 1.0, backend="cpu", out=fake)
