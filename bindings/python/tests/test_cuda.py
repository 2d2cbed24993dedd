"""CUDA arrays (__cuda_array_interface__) on the cuda backend: used in place
(dk_buffer_wrap with DK_MEMORY_CUDA), results of the same kind. Runs only
where the cuda backend is usable. The arrays are a small stand-in over the
CUDA driver library, so no CuPy or PyTorch is needed; where CuPy is
installed it is tested too."""
import ctypes

import numpy as np
import pytest

import dakit
from conftest import USABLE, raises

pytestmark = pytest.mark.skipif("cuda" not in USABLE, reason="the cuda backend is not usable here")
# the gauss cases below were written for the rf filter with the zero rule
# (the defaults before scipy's); they keep testing that
RF = dict(method="rf", mode="zero")


class _Driver:
    def __init__(self, ordinal):
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.cu.cuInit(0)
        dev = ctypes.c_int()
        assert self.cu.cuDeviceGet(ctypes.byref(dev), ordinal) == 0
        self.ctx = ctypes.c_void_p()
        assert self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev) == 0

    def call(self, name, *args):
        assert self.cu.cuCtxPushCurrent_v2(self.ctx) == 0
        try:
            status = getattr(self.cu, name)(*args)
        finally:
            self.cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
        assert status == 0, (name, status)


class DeviceArray:
    """Device memory with __cuda_array_interface__ (version 3, no stream)."""
    driver = None

    def __init__(self, shape, dtype):
        if DeviceArray.driver is None:
            DeviceArray.driver = _Driver(dakit.Context("cuda").native_device)
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape)) * self.dtype.itemsize
        ptr = ctypes.c_uint64()
        self.driver.call("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(max(self.nbytes, 1)))
        self.ptr = ptr.value

    @classmethod
    def from_host(cls, a):
        a = np.ascontiguousarray(a)
        d = cls(a.shape, a.dtype)
        d.driver.call("cuMemcpyHtoD_v2", ctypes.c_uint64(d.ptr), a.ctypes.data_as(ctypes.c_void_p),
                      ctypes.c_size_t(a.nbytes))
        return d

    def get(self):
        a = np.empty(self.shape, self.dtype)
        self.driver.call("cuMemcpyDtoH_v2", a.ctypes.data_as(ctypes.c_void_p), ctypes.c_uint64(self.ptr),
                         ctypes.c_size_t(a.nbytes))
        return a

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "strides": None,
                "version": 3, "stream": None}

    def __del__(self):
        if self.driver is not None:
            self.driver.call("cuMemFree_v2", ctypes.c_uint64(self.ptr))


def test_gauss_on_device_memory_in_place_and_out(calls, rng):
    x = rng.normal(size=(64, 80)).astype(np.float32)
    expected = dakit.gauss(x, 3.0, **RF, backend="cpu")
    dx, dout = DeviceArray.from_host(x), DeviceArray(x.shape, x.dtype)
    calls.record("dk_buffer_wrap")
    calls.forbid("dk_gauss_execute_host")
    assert dakit.gauss(dx, 3.0, **RF, backend="cuda", out=dout) is dout
    assert calls.wrapped_pointers() == [dx.ptr, dout.ptr]
    np.testing.assert_allclose(dout.get(), expected, rtol=0, atol=1e-6)
    assert dakit.gauss(dx, 3.0, **RF, backend="cuda", out=dx) is dx
    np.testing.assert_allclose(dx.get(), expected, rtol=0, atol=1e-6)


def test_host_arrays_on_cuda_go_through_the_host_call(calls, rng):
    calls.record("dk_gauss_execute_host")
    x = rng.normal(size=200)
    y = dakit.gauss(x, 2.0, **RF, backend="cuda")
    assert type(y) is np.ndarray and len(calls.named("dk_gauss_execute_host")) == 1
    np.testing.assert_allclose(y, dakit.gauss(x, 2.0, **RF, backend="cpu"), rtol=0, atol=1e-13)


def test_device_errors(rng):
    dx = DeviceArray.from_host(np.zeros((4, 4), np.float32))
    with raises(dakit.InvalidArgumentError, "a host array", "same side"):
        dakit.gauss(dx, 1.0, **RF, backend="cuda", out=np.zeros((4, 4), np.float32))
    with raises(dakit.InvalidArgumentError, "dtype int32"):
        dakit.gauss(DeviceArray((4,), np.int32), 1.0, **RF, backend="cuda")
    with raises(dakit.InvalidArgumentError, "pass out="):
        dakit.gauss(dx, 1.0, **RF, backend="cuda")  # the stand-in cannot make a like array
    with raises(dakit.InvalidArgumentError, "CUDA device array", "'cpu'"):
        dakit.gauss(dx, 1.0, **RF, backend="cpu")


def test_kmeans_on_device_points(rng):
    X = np.concatenate([rng.normal(size=(500, 2)), rng.normal(size=(500, 2)) + 6]).astype(np.float32)
    ref = dakit.KMeans(2, max_iter=20, init=X[[0, 999]], backend="cpu").fit(X)
    km = dakit.KMeans(2, max_iter=20, init=X[[0, 999]], backend="cuda").fit(DeviceArray.from_host(X))
    np.testing.assert_array_equal(km.labels_, ref.labels_)
    np.testing.assert_allclose(km.cluster_centers_, ref.cluster_centers_, rtol=0, atol=1e-5)
    auto = dakit.KMeans(2, max_iter=20, backend="cuda").fit(DeviceArray.from_host(X))  # init from a host copy
    np.testing.assert_array_equal(auto.labels_, dakit.KMeans(2, max_iter=20, backend="cpu").fit(X).labels_)


def test_enkf_on_device_memory(rng):
    sp = pytest.importorskip("scipy.sparse")
    N, L, M = 80, 10, 6
    X = rng.normal(size=(N, L))
    e = X - X.mean(axis=1, keepdims=True)
    H = sp.random(M, N, density=0.1, random_state=4, format="csr")
    loc = np.exp(-np.arange(N) / 6.0)
    de, dp = DeviceArray.from_host(e), DeviceArray((N, M), np.float64)
    assert dakit.enkf.cov(de, loc, H, backend="cuda", out=dp) is dp
    np.testing.assert_allclose(dp.get(), dakit.enkf.cov(e, loc, H, backend="cpu"), rtol=0, atol=1e-12)
    y, r = rng.normal(size=M), np.full(M, 0.5)
    dx = DeviceArray.from_host(X)
    assert dakit.enkf.analysis(dx, y, r, H, loc, 7, backend="cuda", out=dx) is dx
    np.testing.assert_allclose(dx.get(), dakit.enkf.analysis(X, y, r, H, loc, 7, backend="cpu"), rtol=0,
                               atol=1e-10)


def test_cupy_in_cupy_out(rng):
    cp = pytest.importorskip("cupy")
    x = rng.normal(size=(32, 32)).astype(np.float32)
    y = dakit.gauss(cp.asarray(x), 2.0, **RF, backend="cuda")
    assert isinstance(y, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(y), dakit.gauss(x, 2.0, **RF, backend="cpu"), rtol=0, atol=1e-6)


def test_torch_in_torch_out(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch without CUDA")
    x = rng.normal(size=(32, 32)).astype(np.float32)
    y = dakit.gauss(torch.from_numpy(x).cuda(), 2.0, **RF, backend="cuda")
    assert isinstance(y, torch.Tensor) and y.is_cuda
    np.testing.assert_allclose(y.cpu().numpy(), dakit.gauss(x, 2.0, **RF, backend="cpu"), rtol=0, atol=1e-6)


class DLPackOnly:
    """Only the DLPack protocol over a CUDA array (as JAX gives it)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, stream=None):
        return self._a.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_dlpack_in_place(calls, rng):
    """A CUDA array given only through __dlpack__ is used in place: the
    pointer dakit wraps is the producer's (zero copy)."""
    cp = pytest.importorskip("cupy")
    x = rng.normal(size=(48, 64)).astype(np.float32)
    dx, dout = cp.asarray(x), cp.empty((48, 64), dtype=cp.float32)
    calls.record("dk_buffer_wrap")
    calls.forbid("dk_gauss_execute_host")
    wrapped_out = DLPackOnly(dout)
    assert dakit.gauss(DLPackOnly(dx), 2.0, **RF, backend="cuda", out=wrapped_out) is wrapped_out
    assert calls.wrapped_pointers() == [dx.data.ptr, dout.data.ptr]
    np.testing.assert_allclose(cp.asnumpy(dout), dakit.gauss(x, 2.0, **RF, backend="cpu"), rtol=0, atol=1e-6)
    with raises(dakit.InvalidArgumentError, "pass out="):
        dakit.gauss(DLPackOnly(dx), 2.0, **RF, backend="cuda")


def test_cupy_gauss_in_place_is_zero_copy(calls, rng):
    """Smoothing a CuPy array in place on the GPU in a few lines, as docs/python.md shows."""
    cp = pytest.importorskip("cupy")
    x = cp.asarray(rng.normal(size=(256, 256)).astype(np.float32))
    host = cp.asnumpy(x)
    dakit._context.context_for("cuda").drop_wraps()  # CuPy's pool may hand out an address wrapped before
    calls.record("dk_buffer_wrap")
    plan = dakit.GaussPlan(x.shape, np.float32, 3.0, **RF, backend="cuda")
    assert plan(x, out=x) is x
    assert calls.wrapped_pointers() == [x.data.ptr]
    once = dakit.gauss(host, 3.0, **RF, backend="cpu")
    np.testing.assert_allclose(cp.asnumpy(x), once, rtol=0, atol=1e-6)
    assert plan(x, out=x) is x  # the wrapper is kept for the next call (the cpu calls wrap host memory)
    assert calls.wrapped_pointers().count(x.data.ptr) == 1
    # twice filtered on each side: each side's float32 rounding twice
    np.testing.assert_allclose(cp.asnumpy(x), dakit.gauss(once, 3.0, **RF, backend="cpu"), rtol=0, atol=3e-6)


def test_cupy_repeated_calls(calls, rng):
    """A plan called again on the same CuPy arrays (the assimilation loop)
    takes its short path; other arrays, a wrong shape and released wrappers
    still get the full checks."""
    cp = pytest.importorskip("cupy")
    host = rng.normal(size=(128, 96)).astype(np.float32)
    expected = dakit.gauss(host, 2.0, **RF, backend="cpu")
    x, y = cp.asarray(host), cp.empty((128, 96), np.float32)
    plan = dakit.GaussPlan(x.shape, np.float32, 2.0, **RF, backend="cuda")
    plan(x, out=y)
    assert plan._last is not None
    calls.record("dk_buffer_wrap")
    for _ in range(3):
        y.fill(0)
        assert plan(x, out=y) is y
        np.testing.assert_allclose(cp.asnumpy(y), expected, rtol=0, atol=1e-6)
    assert calls.named("dk_buffer_wrap") == []
    z = cp.empty_like(y)
    assert plan(x, out=z) is z
    np.testing.assert_allclose(cp.asnumpy(z), expected, rtol=0, atol=1e-6)
    with raises(dakit.InvalidArgumentError, "shape"):
        plan(x[:64], out=y[:64])
    dakit._context.context_for("cuda").drop_wraps()
    y.fill(0)
    assert plan(x, out=y) is y
    np.testing.assert_allclose(cp.asnumpy(y), expected, rtol=0, atol=1e-6)


def test_cupy_on_its_own_stream(rng):
    """Arrays made on a non-default CuPy stream: the call is queued on that
    stream (no host wait) and its result is ordered with later work there;
    once the stream is gone the context works on as before."""
    cp = pytest.importorskip("cupy")
    x = rng.normal(size=(512, 512)).astype(np.float32)
    expected = dakit.gauss(x, 2.0, **RF, backend="cuda")
    with cp.cuda.Stream(non_blocking=True) as s:
        dx = cp.asarray(x)
        dy = dakit.gauss(dx, 2.0, **RF, backend="cuda")
        total = float(dy.sum())  # queued on s after dakit's work
        s.synchronize()
    np.testing.assert_allclose(cp.asnumpy(dy), expected, rtol=0, atol=1e-6)
    assert total == pytest.approx(float(expected.sum()), rel=1e-5)
    del s
    np.testing.assert_allclose(dakit.gauss(x, 2.0, **RF, backend="cuda"), expected, rtol=0, atol=0)


def _letkf_case(rng, n=30, m=25, k=8):
    if "letkf" not in USABLE["cuda"].algorithms:
        pytest.skip("the cuda backend has no letkf")
    xb, yb = rng.normal(size=(n, k)), rng.normal(size=(m, k))
    geo = dict(radius=6.0, period=[float(n)])
    return xb, yb, rng.normal(size=m), np.arange(float(n)), rng.uniform(0, n, m), geo


def test_letkf_on_device_memory(calls, rng):
    xb, yb, yo, grid, obs, geo = _letkf_case(rng)
    want = dakit.letkf_reference(xb, yb, yo, 0.5, grid, obs, **geo)
    dx, dy, da = DeviceArray.from_host(xb), DeviceArray.from_host(yb), DeviceArray(xb.shape, np.float64)
    calls.record("dk_buffer_wrap")
    calls.forbid("dk_letkf_execute_host")
    assert dakit.letkf(dx, dy, yo, 0.5, grid, obs, backend="cuda", out=da, **geo) is da
    assert calls.wrapped_pointers() == [dx.ptr, dy.ptr, da.ptr]
    assert np.abs(da.get() - want).max() <= 1e-10 * np.abs(want).max()
    assert dakit.letkf(dx, dy, yo, 0.5, grid, obs, backend="cuda", out=dx, **geo) is dx  # in place
    assert np.abs(dx.get() - want).max() <= 1e-10 * np.abs(want).max()


def test_letkf_cupy_in_cupy_out_with_diagnostics(rng):
    cp = pytest.importorskip("cupy")
    xb, yb, yo, grid, obs, geo = _letkf_case(rng)
    want, wd = dakit.letkf_reference(xb, yb, yo, 0.5, grid, obs, return_diagnostics=True, **geo)
    plan = dakit.LetkfPlan(grid, obs, members=xb.shape[1], backend="cuda", **geo)
    xa, diag = plan.analysis(cp.asarray(xb), cp.asarray(yb), yo, 0.5, return_diagnostics=True)
    assert isinstance(xa, cp.ndarray) and isinstance(diag.nobs, cp.ndarray) and isinstance(diag.spread, cp.ndarray)
    assert np.abs(cp.asnumpy(xa) - want).max() <= 1e-10 * np.abs(want).max()
    np.testing.assert_array_equal(cp.asnumpy(diag.nobs), wd.nobs)
    np.testing.assert_allclose(cp.asnumpy(diag.spread), wd.spread, rtol=1e-10, atol=0)
    np.testing.assert_array_equal(diag.omb, wd.omb)
    np.testing.assert_array_equal(plan.oma(xa[: len(yo)]), dakit.letkf_departures(cp.asnumpy(xa[: len(yo)]), yo))
