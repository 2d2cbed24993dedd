"""dakit.enkf against dense NumPy: PHT = [C o (e e^T)] H^T / (L-1), HPHT, and
the stochastic analysis with dakit's own perturbations."""
import numpy as np
import pytest

import dakit
from conftest import FakeCudaArray, USABLE, backends, raises

sp = pytest.importorskip("scipy.sparse")

ENKF = backends("enkf")
# relative to the largest |value| of the dense result: float64 and float32
# rounding over sums of N*L terms (measured 4e-16 and 5e-8)
TOL = {np.float64: 1e-13, np.float32: 1e-5}


def compact(dist, c):
    """A correlation that is 0 beyond distance c (so "banded" applies)."""
    r = dist / c
    return np.where(r < 1, (1 - r) ** 2 * (1 + 2 * r), 0.0)


def dense_loc(loc, grid=None):
    """The N x N localization matrix C, formed (which dakit never does)."""
    if loc.ndim == 1:
        i = np.arange(loc.size)
        return loc[np.abs(i[:, None] - i[None, :])]
    nx, ny = loc.shape
    ix, iy = np.divmod(np.arange(nx * ny), ny)
    return loc[np.abs(ix[:, None] - ix[None, :]), np.abs(iy[:, None] - iy[None, :])]


def dense_cov(e, loc, H):
    L = e.shape[1]
    Hd = H.toarray()
    pht = (dense_loc(loc) * (e @ e.T)) @ Hd.T / (L - 1)
    return pht, Hd @ pht


def problem(rng, N=120, L=12, M=15, dtype=np.float64):
    e = rng.normal(size=(N, L))
    e -= e.mean(axis=1, keepdims=True)
    H = sp.random(M, N, density=0.05, random_state=rng.integers(1 << 30), format="csr")
    return e.astype(dtype), H


def variants(backend):
    return USABLE[backend].variants.get("enkf", ()) if backend in USABLE else ()


@pytest.mark.parametrize("backend", ENKF)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("support", ["compact", "full"])
def test_cov_equals_dense_numpy(backend, dtype, support, rng):
    e, H = problem(rng, dtype=dtype)
    i = np.arange(e.shape[0])
    loc = compact(i, 10.0) if support == "compact" else np.exp(-i / 15.0)
    ref, ref_hpht = dense_cov(e.astype(np.float64), loc, H)
    for v in (None,) + variants(backend):
        pht = dakit.enkf.cov(e, loc, H, variant=v, backend=backend)
        assert type(pht) is np.ndarray and pht.dtype == dtype and pht.shape == ref.shape
        assert np.abs(pht - ref).max() <= TOL[dtype] * np.abs(ref).max(), v
        pht, hpht = dakit.enkf.cov(e, loc, H, hpht=True, variant=v, backend=backend)
        assert np.abs(hpht - ref_hpht).max() <= TOL[dtype] * np.abs(ref_hpht).max(), v


@pytest.mark.parametrize("backend", ENKF)
def test_cov_with_a_2d_localization(backend, rng):
    nx, ny = 9, 11
    e, H = problem(rng, N=nx * ny)
    a, b = np.meshgrid(np.arange(nx), np.arange(ny), indexing="ij")
    loc = compact(np.hypot(a, b), 4.0)
    ref, _ = dense_cov(e, loc, H)
    pht = dakit.enkf.cov(e, loc, H, backend=backend)
    assert np.abs(pht - ref).max() <= 1e-13 * np.abs(ref).max()


def test_h_in_any_sparse_format_with_repeated_entries(rng):
    e, _ = problem(rng, N=40, M=6)
    rows = [0, 0, 2, 5, 5, 3]
    cols = [3, 3, 10, 39, 0, 7]
    vals = [1.0, 0.5, -2.0, 1.0, 3.0, 0.25]
    coo = sp.coo_matrix((vals, (rows, cols)), shape=(6, 40))  # (0, 3) twice: they add
    loc = np.exp(-np.arange(40) / 5.0)
    ref, _ = dense_cov(e, loc, coo.tocsr())
    for H in (coo, coo.tocsc(), coo.tocsr(), sp.csr_array(coo), coo.toarray()):
        pht = dakit.enkf.cov(e, loc, H, backend="cpu")
        assert np.abs(pht - ref).max() <= 1e-13 * np.abs(ref).max()


class RawCSR:
    """CSR arrays as given, unchecked (scipy may refuse to build some)."""

    def __init__(self, shape, indptr, indices, data):
        self.shape, self.indptr, self.indices, self.data = shape, np.array(indptr), np.array(indices), np.array(data)

    def tocsr(self):
        return self


def dense_analysis(X, y, r, H, loc, seed, inflation):
    """The stochastic EnKF analysis written out densely, with dakit's
    perturbations."""
    L = X.shape[1]
    mean = X.mean(axis=1, keepdims=True)
    A = inflation * (X - mean)
    Xf = mean + A
    pht, hpht = dense_cov(A, loc, H)
    D = y[:, None] + dakit.enkf.perturbations(seed, r, L) - H.toarray() @ Xf
    return Xf + pht @ np.linalg.solve(hpht + np.diag(r), D)


@pytest.mark.parametrize("backend", ENKF)
@pytest.mark.parametrize("inflation", [1.0, 1.1])
def test_analysis_equals_dense_numpy(backend, inflation, rng):
    N, L, M = 100, 16, 12
    X = rng.normal(size=(N, L)) + np.sin(np.arange(N) / 9.0)[:, None]
    H = sp.random(M, N, density=0.06, random_state=7, format="csr")
    y = rng.normal(size=M)
    r = rng.uniform(0.3, 1.0, size=M)
    loc = compact(np.arange(N), 20.0)
    ref = dense_analysis(X, y, r, H, loc, 1234, inflation)
    keep = X.copy()
    xa = dakit.enkf.analysis(X, y, r, H, loc, 1234, inflation=inflation, backend=backend)
    np.testing.assert_array_equal(X, keep)  # a new array unless out= says otherwise
    assert np.abs(xa - ref).max() <= 1e-11 * np.abs(ref).max()
    out = np.empty_like(X)
    assert dakit.enkf.analysis(X, y, r, H, loc, 1234, inflation=inflation, backend=backend, out=out) is out
    np.testing.assert_array_equal(out, xa)
    assert dakit.enkf.analysis(X, y, r, H, loc, 1234, inflation=inflation, backend=backend, out=X) is X
    np.testing.assert_array_equal(X, xa)
    other = dakit.enkf.analysis(keep, y, r, H, loc, 99, inflation=inflation, backend=backend)
    assert np.abs(other - xa).max() > 1e-6  # another seed, other perturbations


def test_plan_reuse_and_scalar_r(rng):
    N, L, M = 60, 8, 5
    H = sp.random(M, N, density=0.1, random_state=1, format="csr")
    loc = compact(np.arange(N), 8.0)
    with dakit.enkf.Plan(N, L, loc, H, backend="cpu") as plan:
        assert plan.variant in variants("cpu") and plan.m == M
        for seed in range(3):
            X = rng.normal(size=(N, L))
            y = rng.normal(size=M)
            got = plan.analysis(X, y, 0.5, seed)
            np.testing.assert_allclose(got, dense_analysis(X, y, np.full(M, 0.5), H, loc, seed, 1.0), rtol=0,
                                       atol=1e-11 * np.abs(got).max())


def test_perturbations():
    r = np.array([1.0, 4.0, 0.25])
    eps = dakit.enkf.perturbations(42, r, 20000)
    assert eps.shape == (3, 20000) and eps.dtype == np.float64
    np.testing.assert_array_equal(eps, dakit.enkf.perturbations(42, r, 20000))
    assert not np.array_equal(eps, dakit.enkf.perturbations(43, r, 20000))
    assert (np.abs(eps.mean(axis=1)) < 4 * np.sqrt(r / 20000)).all()  # 4 standard errors
    np.testing.assert_allclose(eps.var(axis=1), r, rtol=0.05)
    # member l of observation j depends on (seed, l, j) only
    np.testing.assert_array_equal(dakit.enkf.perturbations(42, r[:2], 5), eps[:2, :5])
    assert dakit.enkf.perturbations(1, [], 4).shape == (0, 4)
    assert dakit.enkf.perturbations(2**64 - 1, [1.0], 2).shape == (1, 2)


def test_cpu_uses_the_arrays_own_memory(calls, rng):
    calls.record("dk_buffer_wrap", "dk_enkf_cov", "dk_enkf_analysis")
    calls.forbid("dk_enkf_cov_host", "dk_enkf_analysis_host", "dk_buffer_write", "dk_buffer_read")
    e, H = problem(rng)
    loc = compact(np.arange(e.shape[0]), 10.0)
    out, hout = np.empty((e.shape[0], H.shape[0])), np.empty((H.shape[0],) * 2)
    pht, hpht = dakit.enkf.cov(e, loc, H, hpht=True, backend="cpu", out=out, hpht_out=hout)
    assert pht is out and hpht is hout
    assert calls.wrapped_pointers() == [e.ctypes.data, out.ctypes.data, hout.ctypes.data]
    calls.calls.clear()
    X = e + 1.0
    dakit.enkf.analysis(X, np.zeros(H.shape[0]), 1.0, H, loc, 5, backend="cpu", out=X)
    assert calls.wrapped_pointers() == [X.ctypes.data]


def test_errors(rng):
    e, H = problem(rng, N=30, M=4)
    loc = np.exp(-np.arange(30) / 4.0)
    y, r = np.zeros(4), np.ones(4)
    with raises(dakit.InvalidArgumentError, "H must be a scipy.sparse matrix"):
        dakit.enkf.cov(e, loc, "H")
    with raises(dakit.InvalidArgumentError, "loc has 29 values", "n = 30"):
        dakit.enkf.cov(e, loc[:29], H)
    with raises(dakit.InvalidArgumentError, "loc has 3 dimensions"):
        dakit.enkf.cov(e, np.ones((2, 3, 5)), H)
    with raises(dakit.InvalidArgumentError, "e has dtype int64"):
        dakit.enkf.cov(np.zeros((30, 4), np.int64), loc, H)
    with raises(dakit.InvalidArgumentError, "not C-contiguous"):
        dakit.enkf.cov(np.asfortranarray(e), loc, H)
    with raises(dakit.InvalidArgumentError, "y has 3 values", "m = 4"):
        dakit.enkf.analysis(e, y[:3], r, H, loc, 1)
    with raises(dakit.InvalidArgumentError, "seed is -1"):
        dakit.enkf.analysis(e, y, r, H, loc, -1)
    with raises(dakit.InvalidArgumentError, "out has shape (30, 3)"):
        dakit.enkf.analysis(e, y, r, H, loc, 1, out=np.zeros((30, 3)))
    with raises(dakit.InvalidArgumentError, "out overlaps x"):
        big = np.zeros((31, 12))
        dakit.enkf.analysis(big[:30], y, r, H, loc, 1, out=big[1:])
    with raises(dakit.InvalidArgumentError, "CUDA device array"):
        dakit.enkf.cov(FakeCudaArray((30, 12), "<f8"), loc, H, backend="cpu")
    with raises(dakit.InvalidArgumentError, "indptr has 2 entries; 2 rows need 3"):
        dakit.enkf.cov(e, loc, RawCSR((2, 30), [0, 1], [0], [1.0]))
    with raises(dakit.InvalidArgumentError, "indptr ends at 5, but it has 2 column indices"):
        dakit.enkf.cov(e, loc, RawCSR((2, 30), [0, 1, 5], [0, 1], [1.0, 1.0]))
    with raises(dakit.InvalidArgumentError, "members is -2"):
        dakit.enkf.perturbations(1, r, -2)


@pytest.mark.parametrize("backend", ENKF)
def test_errors_worded_by_libdakit(backend, rng):
    e, H = problem(rng, N=30, M=4)
    loc = np.exp(-np.arange(30) / 4.0)
    y, r = np.zeros(4), np.ones(4)
    bad = e.copy()
    bad[3, 2] = np.inf
    with raises(dakit.InvalidArgumentError, "value 38 is not finite (inf)"):
        dakit.enkf.cov(bad, loc, H, backend=backend)
    with raises(dakit.InvalidArgumentError, "observation error variance 2 is -1"):
        dakit.enkf.analysis(e, y, [1, 1, -1, 1], H, loc, 1, backend=backend)
    with raises(dakit.InvalidArgumentError, "observation 1 is not finite"):
        dakit.enkf.analysis(e, [0, np.nan, 0, 0], r, H, loc, 1, backend=backend)
    with raises(dakit.InvalidArgumentError, "inflation is 0"):
        dakit.enkf.analysis(e, y, r, H, loc, 1, inflation=0.0, backend=backend)
    with raises(dakit.InvalidArgumentError, "1 member; at least 2"):
        dakit.enkf.cov(e[:, :1].copy(), loc, H, backend=backend)
    with raises(dakit.InvalidArgumentError, "columns"):
        dakit.enkf.cov(e[:20].copy(), loc[:20], H, backend=backend)
    with raises(dakit.InvalidArgumentError, "H's indptr decreases at row 1"):
        dakit.enkf.cov(e, loc, RawCSR((4, 30), [0, 2, 1, 2, 2], [0, 1], [1.0, 1.0]), backend=backend)
    with raises(dakit.InvalidArgumentError, "H's column index 31 (entry 1) is outside 0..29"):
        dakit.enkf.cov(e, loc, RawCSR((4, 30), [0, 1, 2, 2, 2], [0, 31], [1.0, 1.0]), backend=backend)
    with raises(dakit.InvalidArgumentError, "H's entry 0 is not finite (nan)"):
        dakit.enkf.cov(e, loc, RawCSR((4, 30), [0, 1, 1, 1, 1], [0], [np.nan]), backend=backend)
    with raises(dakit.InvalidArgumentError, "2-D grid is 4 x 5 = 20 points but N is 30"):
        dakit.enkf.cov(e, np.ones((4, 5)), H, backend=backend)
    with raises(dakit.InvalidArgumentError, "variant 'nope' names none of the schemes"):
        dakit.enkf.cov(e, loc, H, variant="nope", backend=backend)
