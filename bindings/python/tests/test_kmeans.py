"""dakit.KMeans against scikit-learn's KMeans, on cpu and opencl."""
import numpy as np
import pytest

import dakit
from conftest import FakeCudaArray, backends, raises

KMEANS = backends("kmeans")


def blobs(rng, n=4000, k=5, d=3, spread=1.3):
    centers = rng.uniform(-6, 6, size=(k, d))
    return (centers[rng.integers(0, k, n)] + rng.normal(size=(n, d)) * spread).astype(np.float32)


@pytest.mark.parametrize("backend", KMEANS)
@pytest.mark.parametrize("k,d", [(5, 3), (3, 1), (8, 6)])
def test_same_answer_as_scikit_learn(backend, k, d, rng):
    """Lloyd's iterations from the same initial centroids: scikit-learn
    (n_init=1, algorithm='lloyd', float32) and dakit give the same labels and
    centroids within 1e-5 (they sum in different orders)."""
    sklearn_cluster = pytest.importorskip("sklearn.cluster")
    X = blobs(rng, k=k, d=d)
    init = X[:k].copy()
    ref = sklearn_cluster.KMeans(n_clusters=k, init=init, n_init=1, algorithm="lloyd", max_iter=300,
                                 tol=0.0).fit(X)
    assert ref.n_iter_ > 2  # a real walk, not a start at the answer
    km = dakit.KMeans(k, max_iter=300, init=init, tol=0.0, backend=backend).fit(X)
    np.testing.assert_array_equal(km.labels_, ref.labels_)
    np.testing.assert_allclose(km.cluster_centers_, ref.cluster_centers_, rtol=0, atol=1e-5)
    assert km.inertia_ == pytest.approx(ref.inertia_, rel=1e-5)
    assert km.labels_.dtype == np.int32 and km.cluster_centers_.dtype == np.float32
    # tol = 0 stops when no centroid moved, as scikit-learn's strict convergence
    assert abs(km.n_iter_ - ref.n_iter_) <= 1 and km.last_move_ == 0.0
    np.testing.assert_array_equal(km.predict(X), ref.predict(X))
    np.testing.assert_array_equal(km.fit_predict(X), ref.labels_)


@pytest.mark.parametrize("backend", KMEANS)
def test_tol_stops_early(backend, rng):
    X = blobs(rng)
    km = dakit.KMeans(5, max_iter=300, tol=1e-3, init=X[:5], backend=backend).fit(X)
    # tol is relative to the mean variance of the features, as scikit-learn's
    assert km.n_iter_ < 300 and km.last_move_ < np.sqrt(1e-3 * np.var(X, axis=0).mean())


@pytest.mark.parametrize("backend", KMEANS)
def test_mask_leaves_points_out(backend, rng):
    X = blobs(rng, n=1000)
    mask = rng.random(1000) < 0.7
    init = X[mask][:5]
    km = dakit.KMeans(5, max_iter=50, init=init, backend=backend).fit(X, mask=mask)
    alone = dakit.KMeans(5, max_iter=50, init=init, backend=backend).fit(X[mask])
    assert (km.labels_[~mask] == -1).all()
    np.testing.assert_array_equal(km.labels_[mask], alone.labels_)
    np.testing.assert_array_equal(km.cluster_centers_, alone.cluster_centers_)


@pytest.mark.parametrize("backend", KMEANS)
def test_equal_interval_initialization_and_conversion(backend, rng):
    X = blobs(rng, n=2000, k=3, d=2)
    km32 = dakit.KMeans(3, init="intervals", max_iter=100, backend=backend).fit(X)
    km64 = dakit.KMeans(3, init="intervals", max_iter=100, backend=backend).fit(X.astype(np.float64))
    np.testing.assert_array_equal(km32.labels_, km64.labels_)
    assert sorted(np.bincount(km32.labels_)) == sorted(np.bincount(km64.labels_))
    fortran = dakit.KMeans(3, init="intervals", max_iter=100, backend=backend).fit(np.asfortranarray(X))
    np.testing.assert_array_equal(km32.labels_, fortran.labels_)


def test_contiguity_cost_agrees_across_backends(rng):
    """The radar clustering's contiguity-weighted cost on a 40 x 50 image: the
    C library defines the result, so every backend gives the same labels."""
    rows, cols = 40, 50
    truth = (np.add.outer(np.arange(rows), np.arange(cols)) > 45).astype(np.float32)
    X = (truth + rng.normal(scale=0.6, size=(rows, cols))).reshape(-1, 1).astype(np.float32)
    results = []
    for b in [p.values[0] for p in KMEANS if not p.marks]:
        km = dakit.KMeans(2, init="intervals", max_iter=10, lambda_=0.5, window=5, grid_shape=(rows, cols),
                          backend=b).fit(X)
        plain = dakit.KMeans(2, init="intervals", max_iter=10, backend=b).fit(X)
        results.append(km.labels_)
        # the neighbourhood term smooths: fewer label changes between neighbours
        changes = lambda lab: np.count_nonzero(np.diff(lab.reshape(rows, cols), axis=1))  # noqa: E731
        assert changes(km.labels_) < changes(plain.labels_)
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])


def test_predict_fewer_samples_than_clusters(rng):
    X = blobs(rng)
    km = dakit.KMeans(5, max_iter=100, init=X[:5], backend="cpu").fit(X)
    np.testing.assert_array_equal(km.predict(X[:3]), km.predict(X)[:3])
    np.testing.assert_array_equal(km.predict(km.cluster_centers_[::-1]), np.arange(5)[::-1])
    km.set_params(n_clusters=7)  # predict keeps to the fitted centroids
    np.testing.assert_array_equal(km.predict(X[:50]), km.labels_[:50])


def test_cpu_uses_the_arrays_own_memory(calls, rng):
    calls.record("dk_buffer_wrap", "dk_kmeans_execute")
    calls.forbid("dk_kmeans_execute_host", "dk_buffer_write", "dk_buffer_read")
    X = blobs(rng, n=500)
    km = dakit.KMeans(5, max_iter=5, init=X[:5], tol=0.0, backend="cpu").fit(X)
    assert X.ctypes.data in calls.wrapped_pointers()
    assert km.labels_.ctypes.data in calls.wrapped_pointers()
    assert km.cluster_centers_.ctypes.data in calls.wrapped_pointers()


def test_scikit_learn_parameter_protocol():
    sklearn_base = pytest.importorskip("sklearn.base")
    km = dakit.KMeans(3, max_iter=7, lambda_=0.5, grid_shape=(2, 3))
    clone = sklearn_base.clone(km)
    assert clone.get_params() == km.get_params() and clone is not km
    assert km.set_params(max_iter=9).max_iter == 9
    with raises(dakit.InvalidArgumentError, "no parameter 'n_jobs'"):
        km.set_params(n_jobs=3)
    ref = sklearn_base.clone(pytest.importorskip("sklearn.cluster").KMeans())
    shared = {p: v for p, v in ref.get_params().items() if p in km.get_params()}
    assert shared == {p: dakit.KMeans().get_params()[p] for p in shared}  # scikit-learn's defaults
    assert set(ref.get_params()) <= set(km.get_params())


def test_errors(rng):
    X = blobs(rng, n=100)
    with raises(dakit.InvalidArgumentError, "must be 2-D"):
        dakit.KMeans(2).fit(X[:, 0])
    with raises(dakit.InvalidArgumentError, "dtype complex128"):
        dakit.KMeans(2).fit(X.astype(np.complex128))
    with raises(dakit.InvalidArgumentError, "init has shape (2, 3)", "(3, 3)"):
        dakit.KMeans(3, init=X[:2]).fit(X)
    bad = X[:3].copy()
    bad[1, 2] = np.nan
    with raises(dakit.InvalidArgumentError, "initial centroid value 5 is nan"):
        dakit.KMeans(3, init=bad, backend="cpu").fit(X)
    with raises(dakit.InvalidArgumentError, "not fitted"):
        dakit.KMeans(3).predict(X)
    with raises(dakit.InvalidArgumentError, "mask has shape (5,)"):
        dakit.KMeans(3).fit(X, mask=np.ones(5, bool))
    with raises(dakit.InvalidArgumentError, "CUDA device array", "'cpu'"):
        dakit.KMeans(3, backend="cpu").fit(FakeCudaArray((100, 3)))


@pytest.mark.parametrize("backend", KMEANS)
def test_errors_worded_by_libdakit(backend, rng):
    X = blobs(rng, n=100)
    nan = X.copy()
    nan[7, 1] = np.nan
    with raises(dakit.InvalidArgumentError, "feature 1 of point 7 is nan"):
        dakit.KMeans(3, init=X[:3], backend=backend).fit(nan)
    with raises(dakit.InvalidArgumentError, "k = 200 is larger than the 100 points"):
        dakit.KMeans(200, backend=backend).fit(X)
    with raises(dakit.InvalidArgumentError, "window is 4; it must be odd"):
        dakit.KMeans(3, window=4, backend=backend).fit(X)
    with raises(dakit.InvalidArgumentError, "contiguity cost, which needs a grid"):
        dakit.KMeans(3, lambda_=0.5, backend=backend).fit(X)
    with raises(dakit.InvalidArgumentError, "grid 10 x 11 does not hold the 100 points"):
        dakit.KMeans(3, lambda_=0.5, grid_shape=(10, 11), backend=backend).fit(X)
    with raises(dakit.InvalidArgumentError, "d is 65", "1 to 64"):
        dakit.KMeans(3, backend=backend).fit(np.zeros((100, 65), np.float32))
    with raises(dakit.NotImplementedByBackendError, "no variant 'nope'"):
        dakit.KMeans(3, variant="nope", backend=backend).fit(X)
    with raises(dakit.InvalidArgumentError, "k is -1"):
        dakit.KMeans(-1, backend=backend).fit(X)
    with raises(dakit.InvalidArgumentError, "random_state is inf"):
        dakit.KMeans(3, random_state=float("inf"), backend=backend).fit(X)
    with raises(dakit.InvalidArgumentError, "tol is -1"):
        dakit.KMeans(3, tol=-1, backend=backend).fit(X)
    with raises(dakit.InvalidArgumentError, "init is 'kmeans++'"):
        dakit.KMeans(3, init="kmeans++", backend=backend).fit(X)
    with raises(dakit.InvalidArgumentError, "sample_weight[4] is -1", ">= 0"):
        dakit.KMeans(3, backend=backend).fit(X, sample_weight=np.where(np.arange(100) == 4, -1.0, 1.0))
    with raises(dakit.InvalidArgumentError, "sample_weight has shape (99,)", "(100,)"):
        dakit.KMeans(3, backend=backend).fit(X, sample_weight=np.ones(99))
    with raises(dakit.InvalidArgumentError, "weights of the unmasked points sum to 0"):
        dakit.KMeans(3, init=X[:3], backend=backend).fit(X, sample_weight=np.zeros(100))
    with raises(dakit.InvalidArgumentError, "3 unmasked points of positive weight"):
        dakit.KMeans(4, init="random", backend=backend).fit(X, sample_weight=(np.arange(100) < 3) * 1.0)
    with raises(dakit.InvalidArgumentError, "with the contiguity cost", "at most 256"):
        dakit.KMeans(300, lambda_=0.5, grid_shape=(20, 20), backend=backend).fit(np.zeros((400, 1), np.float32))


def _data_sets():
    datasets = pytest.importorskip("sklearn.datasets")
    X, _ = datasets.make_blobs(n_samples=10000, centers=10, n_features=6, cluster_std=2.0, random_state=3)
    yield "blobs", X.astype(np.float32), 10
    yield "load_digits", datasets.load_digits().data.astype(np.float32), 10  # 64 features, as shipped
    for load, k in [(datasets.load_wine, 3), (datasets.load_breast_cancer, 8)]:
        D = load().data
        yield load.__name__, ((D - D.mean(0)) / D.std(0)).astype(np.float32), k


@pytest.mark.parametrize("backend", KMEANS)
def test_inertia_as_scikit_learn(backend):
    """scikit-learn's benchmark shapes (make_blobs, and the data sets it
    ships, standardized): with the same n_init, the mean inertia over seeds
    lies within 1 % of scikit-learn's, for k-means++ and random inits."""
    sklearn_cluster = pytest.importorskip("sklearn.cluster")
    for name, X, k in _data_sets():
        # n_init 10: a single run's inertia depends on the draw (which local
        # minimum it ends in) by more than 1 %, on either side
        for init, n_init in [("k-means++", 10), ("random", "auto")]:
            ours = [dakit.KMeans(k, init=init, n_init=n_init, random_state=s, backend=backend).fit(X).inertia_
                    for s in range(3)]
            theirs = [sklearn_cluster.KMeans(k, init=init, n_init=n_init, random_state=s).fit(X).inertia_
                      for s in range(3)]
            assert np.mean(ours) == pytest.approx(np.mean(theirs), rel=0.01), (name, init, n_init)


@pytest.mark.parametrize("backend", KMEANS)
def test_seeded_fit_attributes_and_methods(backend, rng):
    X = blobs(rng, n=3000, k=6, d=4)
    km = dakit.KMeans(6, random_state=7, backend=backend).fit(X)
    again = dakit.KMeans(6, random_state=7, backend=backend).fit(X)
    np.testing.assert_array_equal(km.cluster_centers_, again.cluster_centers_)  # the seed decides
    np.testing.assert_array_equal(km.labels_, km.predict(X))  # labels under the final centroids
    dist = km.transform(X)
    assert dist.shape == (3000, 6)
    np.testing.assert_array_equal(dist.argmin(1), km.labels_)
    assert km.score(X) == pytest.approx(-km.inertia_, rel=1e-6)
    assert km.inertia_ == pytest.approx((dist.min(1) ** 2).sum(), rel=1e-5)
    mask = rng.random(3000) < 0.5
    masked = dakit.KMeans(6, init="random", n_init=3, random_state=1, backend=backend).fit(X, mask=mask)
    assert (masked.labels_[~mask] == -1).all() and (masked.labels_[mask] >= 0).all()
    assert dakit.KMeans(6, n_init=2, random_state=np.random.RandomState(0), backend=backend).fit(X).n_iter_ >= 1
    assert dakit.KMeans(6, init=lambda X, k, rs: X[:k], backend=backend).fit(X).inertia_ > 0


@pytest.mark.parametrize("backend", KMEANS)
def test_large_k(backend, rng):
    """More clusters than the old cap of 256: the same labels on every
    backend as on the reference's (through cpu's scalar variant)."""
    X = rng.normal(size=(6000, 3)).astype(np.float32)
    km = dakit.KMeans(700, n_init=1, max_iter=5, random_state=2, backend=backend).fit(X)
    ref = dakit.KMeans(700, n_init=1, max_iter=5, random_state=2, backend="cpu", variant="scalar").fit(X)
    assert km.cluster_centers_.shape == (700, 3)
    np.testing.assert_array_equal(km.labels_, ref.labels_)
    np.testing.assert_array_equal(km.cluster_centers_, ref.cluster_centers_)
    assert len(np.unique(km.labels_)) > 600


@pytest.mark.parametrize("backend", KMEANS)
def test_sample_weight_as_scikit_learn(backend, rng):
    """Lloyd's iterations with sample weights from the same initial
    centroids: scikit-learn and dakit give the same labels, centroids
    (within 1e-5) and weighted inertia; score and predict take the weights."""
    sklearn_cluster = pytest.importorskip("sklearn.cluster")
    X = blobs(rng, n=3000, k=5, d=3)
    w = rng.uniform(0, 4, 3000)
    w[::7] = 0
    init = X[:5].copy()
    ref = sklearn_cluster.KMeans(5, init=init, n_init=1, max_iter=300, tol=0.0).fit(X, sample_weight=w)
    km = dakit.KMeans(5, init=init, max_iter=300, tol=0.0, backend=backend).fit(X, sample_weight=w)
    np.testing.assert_array_equal(km.labels_, ref.labels_)
    np.testing.assert_allclose(km.cluster_centers_, ref.cluster_centers_, rtol=0, atol=1e-5)
    assert km.inertia_ == pytest.approx(ref.inertia_, rel=1e-5)
    assert km.score(X, sample_weight=w) == pytest.approx(ref.score(X, sample_weight=w), rel=1e-5)
    assert km.score(X, sample_weight=2.0) == pytest.approx(2 * km.score(X), rel=1e-12)
    np.testing.assert_array_equal(km.predict(X, sample_weight=w), ref.predict(X))
    plain = dakit.KMeans(5, init=init, max_iter=300, tol=0.0, backend=backend).fit(X)
    assert np.abs(plain.cluster_centers_ - km.cluster_centers_).max() > 1e-3  # the weights moved the centroids


@pytest.mark.parametrize("backend", KMEANS)
def test_sample_weight_integer_is_repetition(backend, rng):
    """Integer weights are repeated samples (for k-means++ seeding too: a
    sample of weight 0 is never a seed), and equal weights change nothing."""
    X = blobs(rng, n=1500, k=4, d=2)
    w = rng.integers(0, 4, 1500).astype(np.float64)
    km = dakit.KMeans(4, init=X[w > 0][:4], max_iter=100, tol=0.0, backend=backend).fit(X, sample_weight=w)
    rep = dakit.KMeans(4, init=X[w > 0][:4], max_iter=100, tol=0.0, backend=backend).fit(np.repeat(X, w.astype(int), 0))
    np.testing.assert_allclose(km.cluster_centers_, rep.cluster_centers_, rtol=0, atol=1e-5)
    assert km.inertia_ == pytest.approx(rep.inertia_, rel=1e-5)
    only = np.zeros(1500)
    only[[3, 50, 700, 1200]] = [1, 2, 3, 4]
    seeded = dakit.KMeans(4, max_iter=1, random_state=5, backend=backend).fit(X, sample_weight=only)
    assert set(np.unique(seeded.labels_[[3, 50, 700, 1200]])) == {0, 1, 2, 3}
    for init in ("k-means++", "random"):
        a = dakit.KMeans(4, init=init, random_state=3, backend=backend).fit(X)
        b = dakit.KMeans(4, init=init, random_state=3, backend=backend).fit(X, sample_weight=np.full(1500, 2.5))
        np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
        assert b.inertia_ == pytest.approx(a.inertia_, rel=1e-12)


@pytest.mark.parametrize("backend", KMEANS)
def test_sample_weight_inertia_as_scikit_learn(backend):
    """Seeded runs with sample weights: the mean weighted inertia over seeds
    within 1 % of scikit-learn's with the same n_init, on blobs and digits."""
    sklearn_cluster = pytest.importorskip("sklearn.cluster")
    datasets = pytest.importorskip("sklearn.datasets")
    X, _ = datasets.make_blobs(n_samples=6000, centers=8, n_features=5, cluster_std=2.0, random_state=4)
    digits = datasets.load_digits().data.astype(np.float32)
    for X, k in [(X.astype(np.float32), 8), (digits, 10)]:
        w = np.random.default_rng(9).uniform(0.1, 3.0, len(X))
        for init, n_init in (("k-means++", 5), ("random", "auto")):  # 'auto': 10 random starts
            ours = [dakit.KMeans(k, init=init, n_init=n_init, random_state=s, backend=backend)
                    .fit(X, sample_weight=w).inertia_ for s in range(3)]
            theirs = [sklearn_cluster.KMeans(k, init=init, n_init=n_init, random_state=s)
                      .fit(X, sample_weight=w).inertia_ for s in range(3)]
            assert np.mean(ours) == pytest.approx(np.mean(theirs), rel=0.01), (X.shape, init)
