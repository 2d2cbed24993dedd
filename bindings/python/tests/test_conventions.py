"""The conventions users already know (issue 29): dakit.gauss as
scipy.ndimage.gaussian_filter, enkf's anomalies and dense H, xarray in and
out; and the Python argument checks of issue 30 (results overlapping their
inputs, sizes past 2**64, numbers no C type holds)."""
import subprocess
import sys
import warnings

import numpy as np
import pytest

import dakit
from conftest import backends, raises

GAUSS = backends("gauss")
ENKF = backends("enkf")
SCIPY_MODES = ["reflect", "constant", "nearest", "mirror", "wrap", "grid-constant", "grid-mirror", "grid-wrap"]


def field(shape, rng):
    """Noise plus impulses at the corners and the middle: the ends matter."""
    x = rng.uniform(-1.0, 1.0, size=shape)
    x[(0,) * len(shape)] = 3.0
    x[tuple(n - 1 for n in shape)] = -2.0
    x[tuple(n // 2 for n in shape)] = 4.0
    return x


# ---- gauss as scipy.ndimage.gaussian_filter ----

@pytest.mark.parametrize("backend", GAUSS)
@pytest.mark.parametrize("mode", SCIPY_MODES)
@pytest.mark.parametrize("shape", [(300,), (48, 37), (9, 20, 16)], ids=["1d", "2d", "3d"])
def test_defaults_match_scipy_for_every_mode(backend, mode, shape, rng):
    ndimage = pytest.importorskip("scipy.ndimage")
    x = field(shape, rng)
    for sigma in (0.8, 1.5, 3.0, 7.0):
        y = dakit.gauss(x, sigma, mode=mode, cval=0.4, backend=backend)
        ref = ndimage.gaussian_filter(x, sigma, mode=mode, cval=0.4)
        assert np.abs(y - ref).max() <= 1e-3 * np.abs(x).max(), sigma


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_default_call_is_scipys(dtype, rng):
    """dakit.gauss(x, s) alone, positional arguments in scipy's order."""
    ndimage = pytest.importorskip("scipy.ndimage")
    x = rng.standard_normal((64, 64)).astype(dtype)
    np.testing.assert_allclose(dakit.gauss(x, 3), ndimage.gaussian_filter(x, 3), rtol=0,
                               atol=1e-3 * np.abs(x).max())
    got = dakit.gauss(x, 2.0, 0, None, "constant", 1.5, 4.0)
    np.testing.assert_allclose(got, ndimage.gaussian_filter(x, 2.0, 0, None, "constant", 1.5, 4.0), rtol=0,
                               atol=1e-3 * np.abs(x).max())


def test_sigma_zero_skips_an_axis_and_all_zero_copies(rng):
    ndimage = pytest.importorskip("scipy.ndimage")
    x = field((30, 40), rng)
    y = dakit.gauss(x, (0, 2.5))
    np.testing.assert_allclose(y, ndimage.gaussian_filter(x, (0, 2.5)), rtol=0, atol=1e-3 * np.abs(x).max())
    np.testing.assert_array_equal(y[:, :], dakit.gauss(x, 2.5, axes=1))
    same = dakit.gauss(x, 0)
    assert same is not x
    np.testing.assert_array_equal(same, x)
    out = np.empty_like(x)
    assert dakit.gauss(x, [0.0, 0.0], output=out) is out
    np.testing.assert_array_equal(out, x)


def test_order_axes_and_output_as_scipy(rng):
    ndimage = pytest.importorskip("scipy.ndimage")
    x = field((40, 50), rng)
    # the derivatives' own bounds (docs/gauss.md): order 1 within 8e-3 of the peak response
    d = dakit.gauss(x, 3.0, order=(1, 0))
    ref = ndimage.gaussian_filter(x, 3.0, order=(1, 0))
    assert np.abs(d - ref).max() <= 8e-3 * np.abs(ref).max() * 4
    np.testing.assert_allclose(dakit.gauss(x, 2.0, axes=(1,)), ndimage.gaussian_filter(x, 2.0, axes=(1,)),
                               rtol=0, atol=1e-3 * np.abs(x).max())
    y32 = dakit.gauss(x, 2.0, output=np.float32)
    assert y32.dtype == np.float32
    np.testing.assert_allclose(y32, ndimage.gaussian_filter(x, 2.0), rtol=0, atol=1e-3 * np.abs(x).max())
    into = np.zeros(x.shape, np.float32)
    assert dakit.gauss(x, 2.0, output=into) is into
    np.testing.assert_array_equal(into, y32)
    # a truncation that keeps about 4 sigma is honoured; a shorter one would differ, and is refused
    np.testing.assert_array_equal(dakit.gauss(x, 2.0, radius=9), dakit.gauss(x, 2.0))
    with raises(dakit.InvalidArgumentError, "truncate 2 (radius 4)", "cuts"):
        dakit.gauss(x, 2.0, truncate=2.0)
    with raises(dakit.InvalidArgumentError, "radius 3", "cuts"):
        dakit.gauss(x, 2.0, radius=3)
    with raises(dakit.InvalidArgumentError, "order must be 0, 1 or 2"):
        dakit.gauss(x, 2.0, order=3)
    with raises(dakit.InvalidArgumentError, "needs method deriche or vyv"):
        dakit.gauss(x, 2.0, order=1, method="rf")
    with raises(dakit.InvalidArgumentError, "mode differs between axes"):
        dakit.gauss(x, 2.0, mode=["reflect", "wrap"])
    dakit.gauss(x, 2.0, mode=["wrap", "grid-wrap"])  # one mode by two names
    with raises(dakit.InvalidArgumentError, "mode is 'edge'", "'rf-constant'"):
        dakit.gauss(x, 2.0, mode="edge")
    with raises(dakit.InvalidArgumentError, "output or out, not both"):
        dakit.gauss(x, 2.0, output=np.empty_like(x), out=np.empty_like(x))


def test_rf_is_one_keyword_away_and_old_keywords_warn(rng):
    x = rng.standard_normal(500)
    rf = dakit.gauss(x, 3.0, method="rf", mode="zero")
    assert np.abs(rf - dakit.gauss(x, 3.0)).max() > 1e-2  # a different filter
    with pytest.warns(DeprecationWarning) as caught:
        old = dakit.gauss(x, 3.0, method="rf", boundary="zero", mode="exact")
    assert sorted("decomposition" in str(w.message) for w in caught) == [False, True]
    assert all(w.filename == __file__ for w in caught)  # the caller's line is named
    np.testing.assert_array_equal(old, rf)
    with pytest.warns(DeprecationWarning, match="boundary= is deprecated"):
        old = dakit.gauss(x, 3.0, method="rf", boundary="constant")
    np.testing.assert_array_equal(old, dakit.gauss(x, 3.0, method="rf", mode="rf-constant"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dakit.gauss(x, 3.0, method="rf", mode="zero", decomposition="overlap", overlap=40)


# ---- xarray in, xarray out ----

def test_xarray_round_trips_gauss(rng):
    xr = pytest.importorskip("xarray")
    ndimage = pytest.importorskip("scipy.ndimage")
    values = field((20, 30), rng)
    da = xr.DataArray(values, dims=("y", "x"), coords={"y": np.arange(20) * 1000.0, "x": np.arange(30) * 500.0,
                                                        "lat": (("y", "x"), rng.uniform(size=(20, 30)))},
                      attrs={"units": "dBZ"}, name="reflectivity")
    y = dakit.gauss(da, 2.0)
    assert isinstance(y, xr.DataArray) and y.dims == da.dims and y.name == "reflectivity"
    assert y.attrs == {"units": "dBZ"}
    xr.testing.assert_identical(y.coords.to_dataset(), da.coords.to_dataset())
    np.testing.assert_allclose(y.values, ndimage.gaussian_filter(values, 2.0), rtol=0, atol=1e-3 * 4)
    along_x = dakit.gauss(da, 2.0, axes="x")
    np.testing.assert_array_equal(along_x.values, dakit.gauss(values, 2.0, axes=1))
    with raises(dakit.InvalidArgumentError, "no dimension 'time'"):
        dakit.gauss(da, 2.0, axes=["time"])
    out = xr.zeros_like(da)
    assert dakit.gauss(da, 2.0, output=out) is out
    np.testing.assert_array_equal(out.values, y.values)
    with dakit.GaussPlan(da.shape, da.dtype, 2.0) as plan:
        xr.testing.assert_identical(plan(da), y)
        assert plan(da, out=out) is out


def test_xarray_round_trips_enkf_and_letkf(rng):
    xr = pytest.importorskip("xarray")
    N, L, M = 40, 8, 5
    X = rng.normal(size=(N, L)) + 280.0
    H = np.zeros((M, N))
    H[np.arange(M), np.arange(M) * 7] = 1.0
    loc = np.exp(-np.arange(N) / 5.0)
    coords = {"cell": np.arange(N) * 10.0, "member": np.arange(L)}
    ens = xr.DataArray(X, dims=("cell", "member"), coords=coords, attrs={"units": "K"})
    pht = dakit.enkf.cov(ens, loc, H, anomalies=False)
    assert isinstance(pht, xr.DataArray) and pht.dims == ("cell", "observation")
    np.testing.assert_array_equal(pht["cell"].values, coords["cell"])
    np.testing.assert_array_equal(pht.values, dakit.enkf.cov(X - X.mean(axis=1, keepdims=True), loc, H))
    xa = dakit.enkf.analysis(ens, np.full(M, 280.0), 1.0, H, loc, seed=3)
    assert isinstance(xa, xr.DataArray) and xa.attrs == {"units": "K"}
    np.testing.assert_array_equal(xa.values, dakit.enkf.analysis(X, np.full(M, 280.0), 1.0, H, loc, seed=3))
    yb = xr.DataArray(H @ X, dims=("obs", "member"))
    grid = np.arange(N, dtype=float)
    xa, diag = dakit.letkf(ens, yb, np.full(M, 280.0), 1.0, grid, grid[np.arange(M) * 7], 6.0,
                           return_diagnostics=True)
    assert isinstance(xa, xr.DataArray) and xa.dims == ("cell", "member") and xa.attrs == {"units": "K"}
    assert diag.spread.dims == ("cell",)
    np.testing.assert_array_equal(xa.values, dakit.letkf(X, H @ X, np.full(M, 280.0), 1.0, grid,
                                                         grid[np.arange(M) * 7], 6.0))


def test_xarray_is_never_imported_by_dakit():
    """xarray is optional: a NumPy call does not import it (a fresh interpreter,
    since other tests import it)."""
    code = ("import sys, numpy, dakit; dakit.gauss(numpy.zeros(16), 1.0); dakit.enkf.cov(numpy.zeros((4, 2)), "
            "numpy.ones(4), numpy.eye(4)); assert 'xarray' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- enkf: anomalies or the ensemble, member-major, dense H ----

def test_enkf_says_anomalies_or_ensemble(rng):
    N, L = 30, 10
    X = rng.normal(size=(N, L)) + 100.0
    A = X - X.mean(axis=1, keepdims=True)
    H = np.eye(N)[::3]
    loc = np.exp(-np.arange(N) / 4.0)
    with raises(dakit.InvalidArgumentError, "looks like the ensemble", "anomalies=False"):
        dakit.enkf.cov(X, loc, H)
    np.testing.assert_allclose(dakit.enkf.cov(X, loc, H, anomalies=False), dakit.enkf.cov(A, loc, H), rtol=0,
                               atol=1e-12)
    dakit.enkf.cov(X, loc, H, anomalies=True)  # said so: used as given
    with raises(dakit.InvalidArgumentError, "anomalies is 'yes'"):
        dakit.enkf.cov(A, loc, H, anomalies="yes")


def test_enkf_member_major_is_named(rng):
    A = rng.normal(size=(10, 40))  # members x state
    A -= A.mean(axis=0)
    H = np.eye(40)[::4]
    with raises(dakit.InvalidArgumentError, "shape (10, 40)", "(n state values, members)", "e.T"):
        dakit.enkf.cov(A, np.exp(-np.arange(40) / 4.0), H)
    with raises(dakit.InvalidArgumentError, "ens.T"):
        dakit.enkf.analysis(A + 5, np.zeros(10), 1.0, H, np.exp(-np.arange(40) / 4.0), 1)


def test_enkf_dense_h_without_scipy(monkeypatch, rng):
    sp = pytest.importorskip("scipy.sparse")
    N, L = 24, 6
    A = rng.normal(size=(N, L))
    A -= A.mean(axis=1, keepdims=True)
    Hd = np.zeros((4, N))
    Hd[[0, 1, 2, 3], [1, 5, 9, 20]] = [1.0, 0.5, 2.0, 1.0]
    Hd[2, 10] = 0.5
    loc = np.exp(-np.arange(N) / 3.0)
    expected = dakit.enkf.cov(A, loc, sp.csr_array(Hd))
    for name in [m for m in sys.modules if m == "scipy" or m.startswith("scipy.")]:
        monkeypatch.setitem(sys.modules, name, None)  # import scipy now fails
    np.testing.assert_array_equal(dakit.enkf.cov(A, loc, Hd), expected)
    np.testing.assert_array_equal(dakit.enkf.cov(A, loc, Hd.tolist()), expected)


# ---- issue 30: results over their inputs, sizes, numbers ----

@pytest.mark.parametrize("backend", ENKF)
def test_enkf_cov_into_its_own_input(backend, rng):
    N, L = 36, 6
    A = rng.normal(size=(N, L))
    A -= A.mean(axis=1, keepdims=True)
    H = np.zeros((L, N))  # m == L, so out=e has PHT's shape
    H[np.arange(L), np.arange(L) * 5] = 1.0
    loc = np.exp(-np.arange(N) / 4.0)
    expected, expected_hpht = dakit.enkf.cov(A, loc, H, hpht=True, backend=backend)
    e = A.copy()
    assert dakit.enkf.cov(e, loc, H, out=e, backend=backend) is e
    np.testing.assert_array_equal(e, expected)
    e = A.copy()
    big = np.zeros(N * L + L * L)
    pht_view, hpht_view = big[:N * L].reshape(N, L), big[N * L - L * L // 2:][:L * L].reshape(L, L)
    dakit.enkf.cov(e, loc, H, hpht=True, out=pht_view, hpht_out=hpht_view, backend=backend)
    np.testing.assert_array_equal(hpht_view, expected_hpht)  # hpht written after pht, over its end


@pytest.mark.parametrize("backend", GAUSS)
@pytest.mark.parametrize("nan", ["ignore", "error", "propagate"])
def test_gauss_out_partly_over_its_input(backend, nan, rng):
    a = rng.normal(size=120)
    a[30] = np.nan if nan == "ignore" else a[30]
    src, dst = a[10:90], a[14:94]
    expected = dakit.gauss(src.copy(), 2.0, nan=nan, backend=backend)
    assert dakit.gauss(src, 2.0, nan=nan, backend=backend, output=dst) is dst
    np.testing.assert_array_equal(a[14:94], expected)
    b = field((12, 16), rng)
    expected = dakit.gauss(b, 1.5, nan=nan, backend=backend)
    assert dakit.gauss(b, 1.5, nan=nan, backend=backend, output=b) is b
    np.testing.assert_array_equal(b, expected)


def test_sizes_past_size_t_are_refused():
    big = 2 ** 64
    with raises(dakit.InvalidArgumentError, "blocks is 18446744073709551619", "more than a C size_t holds"):
        dakit.gauss(np.zeros(64), 2.0, method="rf", decomposition="overlap", blocks=big + 3)
    with raises(dakit.InvalidArgumentError, "a dimension of shape is 18446744073709551616", "size_t"):
        dakit.GaussPlan((big,), np.float64, 2.0)
    with raises(dakit.InvalidArgumentError, "overlap is", "size_t"):
        dakit.gauss(np.zeros(64), 2.0, method="rf", decomposition="overlap", overlap=big)
    with raises(dakit.InvalidArgumentError, "radius is", "size_t"):
        dakit.gauss(np.zeros(64), 2.0, radius=big)
    with raises(dakit.InvalidArgumentError, "n is 18446744073709551617", "size_t"):
        dakit.enkf.Plan(big + 1, 4, np.ones(3), np.eye(3))
    with raises(dakit.InvalidArgumentError, "members is", "size_t"):
        dakit.enkf.perturbations(1, [1.0], big)


def test_numbers_no_c_type_holds_are_dakits_errors():
    A = np.zeros((6, 3))
    H, loc = np.eye(6)[:2], np.ones(6)
    for seed in (float("inf"), float("nan"), 2 ** 64, 1.5, "1"):
        with raises(dakit.InvalidArgumentError, "seed"):
            dakit.enkf.analysis(A, np.zeros(2), 1.0, H, loc, seed)
        with raises(dakit.InvalidArgumentError, "seed"):
            dakit.enkf.perturbations(seed, [1.0], 2)
    with raises(dakit.InvalidArgumentError, "inflation must be a number"):
        dakit.enkf.analysis(A, np.zeros(2), 1.0, H, loc, 1, inflation=10 ** 400)
    with raises(dakit.InvalidArgumentError, "cval must be a number"):
        dakit.gauss(np.zeros(8), 1.0, cval=10 ** 400)
    with raises(dakit.InvalidArgumentError, "sigma must be a number"):
        dakit.gauss(np.zeros(8), 10 ** 400)
    with raises(dakit.InvalidArgumentError, "truncate is inf"):
        dakit.gauss(np.zeros(8), 1.0, truncate=float("inf"))
    with raises(dakit.InvalidArgumentError, "K = 4294967296 does not fit a C int"):
        dakit.gauss(np.zeros(8), 1.0, K=2 ** 32)
    with raises(dakit.InvalidArgumentError, "sigma must be a number"):
        dakit.gauss_alpha(10 ** 400)
