"""dakit.letkf against the definition of dakit/letkf.h written out in dense
NumPy (brute-force distances, numpy.linalg.eigh), on the serial reference
and on every backend here with an LETKF; the Kalman update where
localization is absent; diagnostics; H applied; and refusals carrying the
C library's sentence."""
import zlib

import numpy as np
import pytest

import dakit
from conftest import FakeCudaArray, USABLE, backends, raises

# "reference" is libdakit's serial reference (dakit.letkf_reference)
WHERE = [pytest.param("reference", id="reference")] + backends("letkf")
EARTH_KM = 6371.0


# ---- the definition in dense NumPy ----

def gaspari_cohn(z):
    """Gaspari & Cohn (1999) eq. 4.10 at z = distance / c, in powers of z."""
    z = np.asarray(z, dtype=np.float64)
    out = np.zeros_like(z)
    inner = z <= 1
    a = z[inner]
    out[inner] = -a ** 5 / 4 + a ** 4 / 2 + 5 * a ** 3 / 8 - 5 * a ** 2 / 3 + 1
    outer = (z > 1) & (z < 2)
    b = z[outer]
    out[outer] = b ** 5 / 12 - b ** 4 / 2 + 5 * b ** 3 / 8 + 5 * b ** 2 / 3 - 5 * b + 4 - 2 / (3 * b)
    return out


def weights(grid, obs, radius, metric="cartesian", period=None, vertical_radius=None):
    """rho (N x M) by brute force over every pair, and which pairs lie
    within the radii (the observations a point uses: rho > 0 there, though
    the polynomial evaluated here rounds to noise just inside)."""
    grid, obs = np.atleast_2d(grid.T).T, np.atleast_2d(obs.T).T
    vertical = vertical_radius is not None
    hcols = 2 if metric == "sphere" else grid.shape[1] - vertical
    if metric == "sphere":  # haversine
        lon1, lat1 = np.radians(grid[:, 0])[:, None], np.radians(grid[:, 1])[:, None]
        lon2, lat2 = np.radians(obs[:, 0])[None, :], np.radians(obs[:, 1])[None, :]
        h = np.sin((lat2 - lat1) / 2) ** 2 + np.cos(lat1) * np.cos(lat2) * np.sin((lon2 - lon1) / 2) ** 2
        dh = 2 * EARTH_KM * np.arcsin(np.minimum(1.0, np.sqrt(h)))
    else:
        sq = np.zeros((grid.shape[0], obs.shape[0]))
        for a in range(hcols):
            d = np.abs(grid[:, a][:, None] - obs[:, a][None, :])
            p = 0.0 if period is None else period[a]
            if p > 0:
                d = np.mod(d, p)
                d = np.minimum(d, p - d)
            sq += d * d
        dh = np.sqrt(sq)
    inside = dh < radius
    rho = np.where(inside, gaspari_cohn(2 * dh / radius), 0.0)
    if vertical:
        dz = np.abs(grid[:, -1][:, None] - obs[:, -1][None, :])
        inside &= dz < vertical_radius
        rho = np.where(inside, rho * gaspari_cohn(2 * dz / vertical_radius), 0.0)
    return rho, inside


def letkf_numpy(xb, yb, yo, r, rho, inside, inflation=1.0, rtpp=0.0, rtps=0.0, max_obs=None):
    """The analysis of dakit/letkf.h, point by point: (xa, nobs, spread)."""
    xb, yb = xb.astype(np.float64), yb.astype(np.float64)
    n, k = xb.shape
    Y = yb - yb.mean(axis=1, keepdims=True)
    dep = yo - yb.mean(axis=1)
    xa, nobs, spread = np.empty((n, k)), np.empty(n, np.int32), np.empty(n)
    g = (k - 1) / inflation
    for i in range(n):
        used = np.flatnonzero(inside[i])
        if max_obs and used.size > max_obs:  # largest rho first, ties to the lower index
            used = used[np.lexsort((used, -rho[i, used]))[:max_obs]]
        nobs[i] = used.size
        c = rho[i, used] / r[used]
        Yl = Y[used]
        A = Yl.T @ (c[:, None] * Yl)
        b = Yl.T @ (c * dep[used])
        lam, Q = np.linalg.eigh(A)
        w = Q @ ((Q.T @ b) / (g + lam))
        W = (Q * np.sqrt((k - 1) / (g + lam))) @ Q.T
        if rtpp > 0:
            W = (1 - rtpp) * W + rtpp * np.eye(k)
        xm = xb[i].mean()
        X = xb[i] - xm
        a = X @ W
        if rtps > 0:
            sb, sa = X.std(ddof=1), a.std(ddof=1)
            if sa > 0:
                a = a * (1 + rtps * (sb - sa) / sa)
        xa[i] = xm + X @ w + a
        spread[i] = xa[i].std(ddof=1)
    return xa, nobs, spread


# ---- random cases ----

def ensembles(rng, n, m, k, dtype):
    """xb, yb (a nonlinear function of nearby state values), yo, r."""
    xb = rng.normal(size=(n, k)) + rng.normal(size=(n, 1))
    yb = np.tanh(xb[rng.integers(0, n, m)]) + 0.3 * rng.normal(size=(m, k))
    yo = rng.normal(size=m)
    r = rng.uniform(0.3, 2.0, size=m)
    return xb.astype(dtype), yb.astype(dtype), yo, r


def case(name, rng):
    """(grid, obs, options) of a named geometry."""
    if name == "ring":
        grid = np.arange(40.0)
        obs = rng.uniform(0, 40, 35)
        return grid, obs, dict(radius=7.0, period=[40.0])
    if name == "plane":
        return rng.uniform(0, 10, (60, 2)), rng.uniform(0, 10, (50, 2)), dict(radius=3.0)
    if name == "channel":  # periodic in x only
        return rng.uniform(0, 12, (50, 2)), rng.uniform(0, 12, (60, 2)), dict(radius=3.5, period=[12.0, 0.0])
    if name == "cartesian_vertical":
        grid = np.column_stack([rng.uniform(0, 10, (50, 2)), rng.uniform(0, 5, 50)])
        obs = np.column_stack([rng.uniform(0, 10, (70, 2)), rng.uniform(0, 5, 70)])
        return grid, obs, dict(radius=4.0, vertical_radius=2.0)
    if name == "sphere":
        def points(count):
            return np.column_stack([rng.uniform(-180, 360, count), np.degrees(np.arcsin(rng.uniform(-1, 1, count))),
                                    rng.uniform(0, 10, count)])
        return points(60), points(120), dict(radius=4000.0, vertical_radius=5.0, metric="sphere")
    raise KeyError(name)


OPTIONS = {
    "plain": {},
    "inflation": dict(inflation=1.15),
    "rtpp": dict(rtpp=0.6),
    "rtps": dict(rtps=0.8, inflation=1.05),
    "cap": dict(max_obs=4),
}


def run(where, xb, yb, yo, r, grid, obs, variant=None, **options):
    if where == "reference":
        return dakit.letkf_reference(xb, yb, yo, r, grid, obs, return_diagnostics=True, **options)
    return dakit.letkf(xb, yb, yo, r, grid, obs, backend=where, variant=variant, return_diagnostics=True, **options)


def variants(where):
    """None (the default) and each of the backend's variants."""
    return (None,) + (USABLE[where].variants.get("letkf", ()) if where in USABLE else ())


def close(got, want, dtype):
    """float64: 1e-10 relative to the largest value; float32: the value
    rounded once from the float64 analysis (at most one unit in the last
    place: dakit solves in float64 whatever the dtype)."""
    got = np.asarray(got, dtype=np.float64)
    if dtype == np.float64:
        return np.abs(got - want).max() <= 1e-10 * max(1.0, np.abs(want).max())
    return bool(np.all(np.abs(got - want) <= 2.0 ** -23 * np.abs(want)))


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("geometry", ["ring", "plane", "channel", "cartesian_vertical", "sphere"])
@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_equals_the_dense_definition(where, dtype, geometry, option):
    rng = np.random.default_rng(zlib.crc32((geometry + option).encode()))
    grid, obs, geo = case(geometry, rng)
    k = 6 if option == "cap" else 9
    xb, yb, yo, r = ensembles(rng, len(grid), len(obs), k, dtype)
    opts = dict(geo, **OPTIONS[option])
    rho, inside = weights(grid, obs, opts["radius"], opts.get("metric", "cartesian"), opts.get("period"),
                          opts.get("vertical_radius"))
    want, want_nobs, want_spread = letkf_numpy(xb, yb, yo, r, rho, inside, inflation=opts.get("inflation", 1.0),
                                               rtpp=opts.get("rtpp", 0.0), rtps=opts.get("rtps", 0.0),
                                               max_obs=opts.get("max_obs"))
    assert want_nobs.max() > 0
    if option == "cap":
        assert inside.sum(axis=1).max() > 4
    for v in variants(where):
        xa, diag = run(where, xb, yb, yo, r, grid, obs, variant=v, **opts)
        assert type(xa) is np.ndarray and xa.dtype == dtype and xa.shape == xb.shape
        assert close(xa, want, dtype), (v, np.abs(xa - want).max())
        np.testing.assert_array_equal(diag.nobs, want_nobs)
        assert np.abs(diag.spread - want_spread).max() <= 1e-10 * want_spread.max(), v
        np.testing.assert_allclose(diag.omb, yo - yb.astype(np.float64).mean(axis=1), rtol=0, atol=1e-13)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("inflation", [1.0, 1.08])
def test_one_place_is_the_kalman_update(where, inflation, rng):
    """Every point and observation at one place: rho = 1, no localization,
    so the analysis mean and covariance are the Kalman update's with
    P = inflation X X^T / (k - 1) and a linear H."""
    n, m, k = 7, 5, 12
    xb = rng.normal(size=(n, k)) + 3 * rng.normal(size=(n, 1))
    H = rng.normal(size=(m, n))
    yb = dakit.letkf_apply(H, xb)
    yo, r = rng.normal(size=m), rng.uniform(0.5, 1.5, m)
    X = xb - xb.mean(axis=1, keepdims=True)
    P = inflation * X @ X.T / (k - 1)
    K = P @ H.T @ np.linalg.inv(H @ P @ H.T + np.diag(r))
    mean = xb.mean(axis=1) + K @ (yo - H @ xb.mean(axis=1))
    cov = (np.eye(n) - K @ H) @ P
    for v in variants(where):
        xa = run(where, xb, yb, yo, r, np.zeros(n), np.zeros(m), radius=1.0, inflation=inflation, variant=v)[0]
        Xa = xa - xa.mean(axis=1, keepdims=True)
        assert np.abs(xa.mean(axis=1) - mean).max() <= 1e-12 * np.abs(mean).max(), v
        assert np.abs(Xa @ Xa.T / (k - 1) - cov).max() <= 1e-12 * np.abs(cov).max(), v


@pytest.mark.parametrize("backend", backends("letkf"))
def test_plan_repeated_in_place_and_diagnostics(backend, rng):
    sp = pytest.importorskip("scipy.sparse")
    grid, obs, geo = case("plane", rng)
    n, m, k = len(grid), len(obs), 8
    H = sp.random(m, n, density=0.08, random_state=3, format="csr")
    plan = dakit.LetkfPlan(grid, obs, members=k, backend=backend, diagnostics=True, inflation=1.02, **geo)
    assert (plan.n, plan.m, plan.members, plan.backend) == (n, m, k, backend)
    assert plan.nobs is None and plan.variant in dakit.Context(backend).variants("letkf")
    for cycle in range(3):
        xb = rng.normal(size=(n, k))
        yb = dakit.letkf_apply(H, xb)
        yo, r = rng.normal(size=m), 0.7
        want = dakit.letkf_reference(xb, yb, yo, r, grid, obs, inflation=1.02, **geo)
        kept = xb.copy()
        xa = plan.analysis(xb, yb, yo, r, out=xb)  # in place
        assert xa is xb and np.abs(xa - want).max() <= 1e-10 * np.abs(want).max()
        assert plan.nobs.shape == (n,) and plan.spread.shape == (n,)
        np.testing.assert_allclose(plan.omb, yo - yb.mean(axis=1), rtol=0, atol=1e-14)
        hxa = dakit.letkf_apply(H, xa)
        np.testing.assert_allclose(plan.oma(hxa), yo - (H @ xa).mean(axis=1), rtol=0, atol=1e-12)
        np.testing.assert_array_equal(plan.oma(hxa), dakit.letkf_departures(hxa, yo))
        xa2, diag = plan.analysis(kept, yb, yo, r, return_diagnostics=True)
        assert xa2 is not kept and np.array_equal(xa2, xa)
        np.testing.assert_array_equal(diag.spread, plan.spread)
    plan.close()
    with raises(dakit.InvalidArgumentError, "was closed"):
        plan.analysis(xb, yb, yo, r)


def test_apply_sparse_and_dense(rng):
    sp = pytest.importorskip("scipy.sparse")
    H = sp.random(9, 30, density=0.2, random_state=5, format="coo")
    for dtype in (np.float64, np.float32):
        x = rng.normal(size=(30, 6)).astype(dtype)
        y = dakit.letkf_apply(H, x)
        assert y.dtype == dtype and y.shape == (9, 6)
        want = H.toarray() @ x.astype(np.float64)
        assert np.abs(y - want).max() <= (1e-14 if dtype == np.float64 else 1e-6) * np.abs(want).max()
        dense = dakit.letkf_apply(H.toarray(), x)
        assert np.abs(dense - want).max() <= (1e-14 if dtype == np.float64 else 1e-6) * np.abs(want).max()
    with raises(dakit.InvalidArgumentError, "H has 30 columns"):
        dakit.letkf_apply(H, np.zeros((29, 6)))


def test_refusals_carry_the_c_sentence(rng):
    grid, obs, geo = case("ring", rng)
    xb, yb, yo, r = ensembles(rng, len(grid), len(obs), 5, np.float64)
    where = ["reference"] + [b for b in ("cpu", "opencl") if b in USABLE and "letkf" in USABLE[b].algorithms]
    for backend in where:
        def call(xb=xb, yb=yb, yo=yo, r=r, grid=grid, obs=obs, **kw):
            return dakit.letkf(xb, yb, yo, r, grid, obs, backend=backend, **dict(geo, **kw))
        bad = xb.copy()
        bad[3, 2] = np.nan
        # every sentence below is libdakit's (they all start "letkf:")
        with raises(dakit.InvalidArgumentError, "letkf: value 17 of xb is nan; every value must be finite"):
            call(xb=bad)
        bad = yb.copy()
        bad[0, 1] = np.inf
        with raises(dakit.InvalidArgumentError, "letkf: value 1 of yb is inf"):
            call(yb=bad)
        bad = yo.copy()
        bad[4] = np.nan
        with raises(dakit.InvalidArgumentError, "letkf: observation 4 is nan"):
            call(yo=bad)
        with raises(dakit.InvalidArgumentError, "letkf: the error variance of observation 0 is 0"):
            call(r=0.0)
        with raises(dakit.InvalidArgumentError, "letkf: radius is 0"):
            call(radius=0.0)
        with raises(dakit.InvalidArgumentError, "letkf: rtpp (0.5) and rtps (0.5) are both set"):
            call(rtpp=0.5, rtps=0.5)
        with raises(dakit.InvalidArgumentError, "letkf: members is 1"):
            call(xb=xb[:, :1].copy(), yb=yb[:, :1].copy())
        with raises(dakit.InvalidArgumentError, "letkf: period[0] is -40"):
            call(period=[-40.0])
        with raises(dakit.InvalidArgumentError, "letkf: ncoords is 4"):
            call(grid=np.zeros((len(grid), 4)), obs=np.zeros((len(obs), 4)), period=None)
        with raises(dakit.InvalidArgumentError, "letkf: on the sphere the coordinates are lon, lat"):
            call(metric="sphere", period=None)
        lonlat = np.column_stack([np.zeros(len(obs)), np.full(len(obs), 95.0)])
        with raises(dakit.InvalidArgumentError, "letkf: observation latitude of observation 0 is 95"):
            call(grid=np.zeros((len(grid), 2)), obs=lonlat, metric="sphere", period=None, radius=100.0)
        bad = obs.copy()
        bad[2] = np.nan
        with raises(dakit.InvalidArgumentError, "letkf: observation coordinate 0 of observation 2 is nan"):
            call(obs=bad)
        # what C cannot see (the lengths it reads by) is the binding's
        with raises(dakit.InvalidArgumentError, "yb has shape (34, 5); it must be (35, 5) (observations, members)"):
            call(yb=yb[1:])
        with raises(dakit.InvalidArgumentError, "xb has 39 rows but grid_coords 40 points"):
            call(xb=xb[1:])
        with raises(dakit.InvalidArgumentError, "yo has 34 values; there are 35 observations"):
            call(yo=yo[1:])
        with raises(dakit.InvalidArgumentError, "period has 2 values"):
            call(period=[40.0, 0.0])
        with raises(dakit.InvalidArgumentError, "grid_coords has 1 column(s) and obs_coords 2"):
            call(obs=np.zeros((len(obs), 2)), period=None)
        with raises(dakit.InvalidArgumentError, "metric is 'flat'"):
            call(metric="flat")
        with raises(dakit.InvalidArgumentError, "yb has dtype float32"):
            call(yb=yb.astype(np.float32))


def test_plan_refusals(rng):
    grid, obs, geo = case("ring", rng)
    xb, yb, yo, r = ensembles(rng, len(grid), len(obs), 5, np.float64)
    with raises(dakit.InvalidArgumentError, "dtype is int32"):
        dakit.LetkfPlan(grid, obs, members=5, dtype=np.int32, backend="cpu", **geo)
    if "letkf" not in USABLE["cpu"].algorithms:
        with raises(dakit.NotImplementedByBackendError):
            dakit.LetkfPlan(grid, obs, members=5, backend="cpu", **geo)
        return
    plan = dakit.LetkfPlan(grid, obs, members=5, backend="cpu", **geo)
    with raises(dakit.InvalidArgumentError, "out overlaps xb without being xb"):
        big = np.zeros((len(grid) + 1, 5))
        plan.analysis(big[1:], yb, yo, r, out=big[:-1])
    with raises(dakit.InvalidArgumentError, "CUDA device array", "'cpu'"):
        plan.analysis(FakeCudaArray(xb.shape, "<f8"), FakeCudaArray(yb.shape, "<f8"), yo, r)
    with raises(dakit.InvalidArgumentError, "out is read-only"):
        ro = np.zeros_like(xb)
        ro.flags.writeable = False
        plan.analysis(xb, yb, yo, r, out=ro)
    with raises(dakit.InvalidArgumentError, "no analysis has run on this plan yet"):
        plan.oma(yb)


def test_reference_takes_host_arrays_only(rng):
    grid, obs, geo = case("ring", rng)
    with raises(dakit.InvalidArgumentError, "serial reference takes host"):
        dakit.letkf_reference(FakeCudaArray((40, 5), "<f8"), FakeCudaArray((35, 5), "<f8"), np.zeros(35), 1.0,
                              grid, obs, **geo)
