"""kmeans in scikit-learn's estimator shape."""
import ctypes
import inspect

import numpy as np

from ._arrays import Buffers, cuda_interface, operand, to_host, usable_here, zero_copy
from ._context import Plan, context_for
from ._errors import invalid
from ._gauss import _c_int, _cstr, _float, _size
from ._native import (C, DK_KMEANS_INIT_GIVEN, DK_KMEANS_INIT_PLUSPLUS, DK_KMEANS_INIT_RANDOM, DK_KMEANS_POINT_MAJOR,
                      KMeansDesc, KMeansResult, check)


class _KMeansPlan(Plan):
    def __init__(self, desc, backend):
        super().__init__(backend)
        h = ctypes.c_void_p()
        check(C.dk_kmeans_plan_create(self._ctx.handle, ctypes.byref(desc), ctypes.byref(h)), self._ctx.handle)
        self._adopt(h)


_INITS = {"k-means++": DK_KMEANS_INIT_PLUSPLUS, "random": DK_KMEANS_INIT_RANDOM}


def _seeds(random_state, count, who):
    """count 64-bit seeds for the runs from scikit-learn's random_state: None
    (fresh entropy), an integer 0 .. 2**64-1, or a numpy RandomState or
    Generator (which the draw advances)."""
    if random_state is None:
        return np.random.SeedSequence().generate_state(count, np.uint64)
    if isinstance(random_state, np.random.RandomState):
        return random_state.randint(0, 2**63, size=count, dtype=np.int64).astype(np.uint64)
    if isinstance(random_state, np.random.Generator):
        return random_state.integers(0, 2**64, size=count, dtype=np.uint64)
    if isinstance(random_state, (bool, np.bool_)) or not isinstance(random_state, (int, np.integer)):
        raise invalid("%s: random_state is %r; it must be None, an integer from 0 to 2**64 - 1, or a "
                      "numpy RandomState or Generator" % (who, random_state))
    if not 0 <= int(random_state) < 2**64:
        raise invalid("%s: random_state is %d; an integer seed must lie in 0 .. 2**64 - 1" % (who, random_state))
    return np.random.SeedSequence(int(random_state)).generate_state(count, np.uint64)


class KMeans:
    """k-means in scikit-learn's shape (sklearn.cluster.KMeans: the same
    parameters, defaults, methods and fitted attributes), on any dakit
    backend; plus the contiguity-weighted cost of radar clustering where
    grid_shape is given and lambda_ < 1.

    n_clusters: k, any number up to the samples (at most 256 with the
    contiguity cost). init: 'k-means++' (greedy k-means++, seeded on the
    device: the distance passes run in the backend, the random draws on the
    host), 'random' (k distinct samples), a (k, n_features) array, a
    callable init(X, n_clusters, random_state) returning one, or
    'intervals' (the range of feature init_feature cut into k equal
    intervals, as the radar paper does). n_init: runs from different seeds,
    the one of least inertia kept; 'auto' is 1 for 'k-means++' and an array,
    10 for 'random' and a callable. max_iter: iterations at most per run.
    tol: relative to the mean of the features' variances, as in
    scikit-learn: a run stops when no centroid moved more than
    sqrt(tol * mean variance) (tol 0: when none moved at all).
    random_state: None, an integer seed or a numpy RandomState/Generator;
    dakit's own random stream, so the seeds (not the quality) differ from
    scikit-learn's. algorithm: 'lloyd' (the only one). verbose and copy_x
    are accepted for scikit-learn's sake (dakit never writes X).
    lambda_: the weight of the feature distance against the neighbourhood
    term (1: plain k-means). window: the odd w of the w x w neighbourhood.
    grid_shape: (rows, cols), rows * cols == n_samples, for the contiguity
    cost. variant: one of Context.variants("kmeans"). backend: None, a name
    or a dakit.Context.

    sample_weight (fit, score): one weight per sample, finite and >= 0, as
    scikit-learn's: the centroids are weighted means, the inertia and the
    k-means++ draws are weighted, 'random' draws samples by weight; equal
    weights change nothing.

    After fit: cluster_centers_ (float32), labels_ (int32, each sample's
    nearest centroid, -1 where masked), inertia_ (the sum of squared
    distances of the samples to their centroids, times their weights),
    n_iter_ (iterations of the
    kept run), n_features_in_, last_move_ (the largest centroid move of the
    kept run's last iteration).
    """

    def __init__(self, n_clusters=8, *, init="k-means++", n_init="auto", max_iter=300, tol=1e-4, verbose=0,
                 random_state=None, copy_x=True, algorithm="lloyd", lambda_=1.0, window=5, grid_shape=None,
                 backend=None, variant=None, init_feature=0):
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.verbose = verbose
        self.random_state = random_state
        self.copy_x = copy_x
        self.algorithm = algorithm
        self.lambda_ = lambda_
        self.window = window
        self.grid_shape = grid_shape
        self.backend = backend
        self.variant = variant
        self.init_feature = init_feature

    # scikit-learn's parameter protocol (clone, GridSearchCV)
    def get_params(self, deep=True):
        return {p: getattr(self, p) for p in inspect.signature(type(self).__init__).parameters if p != "self"}

    def set_params(self, **params):
        valid = self.get_params()
        for k, v in params.items():
            if k not in valid:
                raise invalid("dakit.KMeans: no parameter %r; the parameters are %s" % (k, ", ".join(valid)))
            setattr(self, k, v)
        return self

    def __repr__(self):
        return "dakit.KMeans(%s)" % ", ".join("%s=%r" % kv for kv in self.get_params().items())

    # ---- the data ----

    def _points(self, X, who):
        if cuda_interface(X) is not None:
            xo = operand(X, "X", who, (np.float32,))
        else:
            arr = np.asarray(X)
            if arr.dtype.kind not in "biuf":
                raise invalid("%s: X has dtype %s; it must hold real numbers (dakit clusters float32 "
                              "features)" % (who, arr.dtype))
            # float32 C order is used as it is; anything else is converted once
            xo = operand(np.ascontiguousarray(arr, dtype=np.float32), "X", who, (np.float32,))
        if len(xo.shape) != 2:
            raise invalid("%s: X has shape %s; it must be 2-D, (n_samples, n_features)" % (who, xo.shape))
        return xo

    def _mask(self, mask, n, who):
        if mask is None:
            return None
        if cuda_interface(mask) is not None:
            mo = operand(mask, "mask", who, (np.uint8, np.bool_))
        else:
            m = np.asarray(mask)
            if m.dtype != np.bool_ and m.dtype != np.uint8:
                m = m != 0
            mo = operand(np.ascontiguousarray(m).view(np.uint8), "mask", who, (np.uint8,))
        if mo.shape != (n,):
            raise invalid("%s: mask has shape %s; it must hold one value per sample, (%d,)" % (who, mo.shape, n))
        return mo

    def _weights(self, sample_weight, n, who):
        """float32 host weights, one per sample, or None where there are
        none or all are equal and positive (which weights nothing)."""
        if sample_weight is None:
            return None
        w = to_host(operand(sample_weight, "sample_weight", who, (np.float32, np.float64))) \
            if cuda_interface(sample_weight) is not None else sample_weight
        try:
            w = np.asarray(w, dtype=np.float64)
        except (TypeError, ValueError) as e:
            raise invalid("%s: sample_weight cannot be read as numbers: %s" % (who, e)) from None
        if w.shape == ():
            w = np.full(n, float(w))
        if w.shape != (n,):
            raise invalid("%s: sample_weight has shape %s; it must hold one weight per sample, (%d,)"
                          % (who, w.shape, n))
        bad = np.flatnonzero(~(np.isfinite(w) & (w >= 0)))
        if bad.size:
            raise invalid("%s: sample_weight[%d] is %g; every weight must be a finite number >= 0"
                          % (who, bad[0], w[bad[0]]))
        if n and w[0] > 0 and np.all(w == w[0]):
            return None
        return np.ascontiguousarray(w, dtype=np.float32)

    def _desc(self, n, d, max_iter, who, k=None, tol=0.0, init=DK_KMEANS_INIT_GIVEN, seed=0):
        desc = KMeansDesc()
        C.dk_kmeans_desc_init(ctypes.byref(desc))
        desc.n = n
        desc.d = _c_int(d, "the number of features", who)
        desc.k = _c_int(self.n_clusters if k is None else k, "n_clusters", who)
        desc.max_iters = _c_int(max_iter, "max_iter", who)
        desc.tol = tol
        desc.layout = DK_KMEANS_POINT_MAJOR
        desc.init = init
        desc.seed = int(seed)
        if self.grid_shape is not None:
            try:
                rows, cols = self.grid_shape
            except (TypeError, ValueError):
                raise invalid("%s: grid_shape must be (rows, cols), not %r" % (who, self.grid_shape)) from None
            desc.rows, desc.cols = _size(rows, "rows", who), _size(cols, "cols", who)
        desc.lambda_ = _float(self.lambda_, "lambda_", who)
        desc.window = _c_int(self.window, "window", who)
        self._variant_bytes = _cstr(self.variant, "variant", who)
        desc.variant = self._variant_bytes
        return desc

    def _given(self, init, k, d, who):
        if cuda_interface(init) is not None:
            init = to_host(operand(init, "init", who, (np.float32, np.float64)))
        try:
            init = np.ascontiguousarray(init, dtype=np.float32)
        except (TypeError, ValueError) as e:
            raise invalid("%s: init cannot be read as float32 centroids: %s" % (who, e)) from None
        if init.shape != (k, d):
            raise invalid("%s: init has shape %s; it must be (n_clusters, n_features) = (%d, %d)"
                          % (who, init.shape, k, d))
        return init

    def _intervals(self, desc, xo, mo, who):
        points = np.ascontiguousarray(to_host(xo), dtype=np.float32)
        mask = None if mo is None else np.ascontiguousarray(to_host(mo)).view(np.uint8)
        init = np.empty((desc.k, desc.d), dtype=np.float32)
        feature = _c_int(self.init_feature, "init_feature", who)
        check(C.dk_kmeans_initial_centroids(ctypes.byref(desc), points.ctypes.data,
                                            None if mask is None else mask.ctypes.data, feature,
                                            init.ctypes.data), None)
        return init

    def _runs(self, who):
        """How many runs n_init asks for, with this init."""
        n_init = self.n_init
        if isinstance(n_init, str):
            if n_init != "auto":
                raise invalid("%s: n_init is %r; it must be 'auto' or a positive integer" % (who, n_init))
            return 1 if isinstance(self.init, str) and self.init in ("k-means++", "intervals") or \
                not (isinstance(self.init, str) or callable(self.init)) else 10
        n = _c_int(n_init, "n_init", who)
        if n < 1:
            raise invalid("%s: n_init is %d; it must be 'auto' or at least 1" % (who, n))
        if not isinstance(self.init, str) and not callable(self.init) or self.init == "intervals":
            return 1  # the same start gives the same run
        return n

    def _tolerance(self, xo, mo, who):
        """dakit's tol (the largest centroid move that stops a run) from
        scikit-learn's (relative to the mean of the features' variances)."""
        tol = _float(self.tol, "tol", who)
        if not (tol >= 0) or np.isinf(tol):
            return tol  # libdakit says what is wrong with it
        if tol == 0:
            return np.nextafter(0.0, 1.0)  # stop when no centroid moved
        x = to_host(xo)
        if mo is not None:
            x = x[to_host(mo).view(np.bool_)]
        mean_var = float(np.mean(np.var(x, axis=0, dtype=np.float64))) if len(x) else 0.0
        return float(np.sqrt(tol * mean_var)) if mean_var > 0 else np.nextafter(0.0, 1.0)

    # ---- running ----

    def _run(self, xo, mo, init, max_iter, who, k=None, tol=0.0, how=DK_KMEANS_INIT_GIVEN, seed=0, weights=None):
        """One plan over xo from the (k, d) float32 centroids init, or
        seeded by `how` (init None); weights: None or n float32."""
        n, d = xo.shape
        if init is not None:
            k = init.shape[0]
            assert init.shape == (k, d) and init.dtype == np.float32 and init.flags.c_contiguous
        desc = self._desc(n, d, max_iter, who, k=k, tol=tol, init=how, seed=seed)
        labels = np.empty(n, dtype=np.int32)
        k = desc.k
        centers = np.empty((max(k, 0), d), dtype=np.float32)
        result = KMeansResult()
        with _KMeansPlan(desc, self.backend) as plan:
            ctx = plan.context
            how_ = zero_copy(ctx, who, xo, mo)
            if how_:
                if not xo.device:
                    # what dk_kmeans_execute_host checks before copying
                    check(C.dk_kmeans_check_points(ctypes.byref(desc), xo.ptr, None if mo is None else mo.ptr,
                                                   None), None)
                if weights is not None:
                    check(C.dk_kmeans_check_weights(ctypes.byref(desc), weights.ctypes.data,
                                                    None if mo is None or mo.device else mo.ptr), None)
                if init is not None:
                    bad = np.flatnonzero(~np.isfinite(init))
                    if bad.size:
                        raise invalid("dakit.KMeans: initial centroid value %d is %g; it must be finite"
                                      % (bad[0], init.flat[bad[0]]))
                with Buffers(ctx, how_) as b:
                    if xo.device:  # device points: the small arrays travel through dakit buffers
                        bi = None if init is None else b.create(init.nbytes, init)
                        bw = None if weights is None else b.create(weights.nbytes, weights)
                        bl, bc = b.create(labels.nbytes), b.create(centers.nbytes)
                    else:
                        bi = None if init is None else b.wrap(operand(init, "init", who, (np.float32,)))
                        bw = None if weights is None else b.wrap(operand(weights, "sample_weight", who,
                                                                         (np.float32,)))
                        bl = b.wrap(operand(labels, "labels", who, (np.int32,), writable=True))
                        bc = b.wrap(operand(centers, "centers", who, (np.float32,), writable=True))
                    check(C.dk_kmeans_execute_weighted(plan.handle, b.wrap(xo), b.wrap(mo), bw, bi, bl, bc,
                                                       ctypes.byref(result)), ctx.handle)
                    if xo.device:
                        b.read(bl, labels)
                        b.read(bc, centers)
            else:
                check(C.dk_kmeans_execute_host_weighted(plan.handle, xo.ptr, None if mo is None else mo.ptr,
                                                        None if weights is None else weights.ctypes.data,
                                                        None if init is None else init.ctypes.data,
                                                        labels.ctypes.data, centers.ctypes.data,
                                                        ctypes.byref(result)), ctx.handle)
        return labels, centers, result

    def _inertia(self, xo, labels, centers, weights=None):
        x = to_host(xo)
        keep = labels >= 0
        diff = x[keep].astype(np.float64) - centers[labels[keep]].astype(np.float64)
        d2 = np.einsum("ij,ij->i", diff, diff)
        return float(d2.sum() if weights is None else np.dot(weights[keep].astype(np.float64), d2))

    def fit(self, X, y=None, sample_weight=None, mask=None):
        """Clusters X, (n_samples, n_features). mask: optional, one bool per
        sample; False excludes it (label -1). y is ignored. sample_weight:
        None, a number, or one finite weight >= 0 per sample."""
        who = "dakit.KMeans.fit"
        xo = self._points(X, who)
        mo = self._mask(mask, xo.shape[0], who)
        usable_here(context_for(self.backend), who, xo, mo)
        n, d = xo.shape
        weights = self._weights(sample_weight, n, who)
        if self.algorithm != "lloyd":
            raise invalid("%s: algorithm is %r; dakit runs 'lloyd' only" % (who, self.algorithm))
        max_iter = _c_int(self.max_iter, "max_iter", who)
        k = _c_int(self.n_clusters, "n_clusters", who)
        runs = self._runs(who)
        tol = self._tolerance(xo, mo, who)
        seeds = _seeds(self.random_state, runs, who)
        init = self.init
        best = None
        for run in range(runs):
            how, start = DK_KMEANS_INIT_GIVEN, None
            if isinstance(init, str):
                if init == "intervals":
                    start = self._intervals(self._desc(n, d, max_iter, who, k=k), xo, mo, who)
                elif init in _INITS:
                    how = _INITS[init]
                else:
                    raise invalid("%s: init is %r; it must be 'k-means++', 'random', 'intervals', an array of "
                                  "shape (n_clusters, n_features) or a callable" % (who, init))
            elif callable(init):
                start = self._given(init(to_host(xo), k, np.random.RandomState(seeds[run] >> np.uint64(32))),
                                    k, d, who)
            else:
                start = self._given(init, k, d, who)
            labels, centers, result = self._run(xo, mo, start, max_iter, who, k=k, tol=tol, how=how,
                                                seed=seeds[run], weights=weights)
            if result.last_move != 0.0 and self.grid_shape is None:
                # the last labels came before the last update: label under the final centroids
                labels, _, _ = self._run(xo, mo, centers, 1, who)
            inertia = self._inertia(xo, labels, centers, weights) if self.grid_shape is None \
                else float(result.objective)
            if best is None or inertia < best[0]:
                best = (inertia, labels, centers, result)
        inertia, labels, centers, result = best
        self.labels_ = labels
        self.cluster_centers_ = centers
        self.inertia_ = inertia
        self.n_iter_ = int(result.iterations)
        self.last_move_ = float(result.last_move)
        self.n_features_in_ = d
        return self

    def fit_predict(self, X, y=None, sample_weight=None, mask=None):
        return self.fit(X, sample_weight=sample_weight, mask=mask).labels_

    def _fitted(self, X, who):
        if not hasattr(self, "cluster_centers_"):
            raise invalid("%s: this KMeans is not fitted yet; call fit first" % who)
        xo = self._points(X, who)
        if xo.shape[1] != self.n_features_in_:
            raise invalid("%s: X has %d features, but the estimator was fitted on %d"
                          % (who, xo.shape[1], self.n_features_in_))
        return xo

    def predict(self, X, sample_weight=None, mask=None):
        """The label of each sample under cluster_centers_ (with the
        contiguity cost where the estimator has it): one dakit iteration
        started from the fitted centroids. sample_weight is checked and
        otherwise unused: a weight moves no label (scikit-learn deprecated
        it here)."""
        who = "dakit.KMeans.predict"
        xo = self._fitted(X, who)
        n = xo.shape[0]
        self._weights(sample_weight, n, who)
        mo = self._mask(mask, n, who)
        usable_here(context_for(self.backend), who, xo, mo)
        k = self.cluster_centers_.shape[0]
        valid = n if mo is None else int(np.count_nonzero(to_host(mo)))
        if valid < k and self.grid_shape is None and not xo.device:
            # Fewer samples than clusters: dakit refuses to cluster them, but
            # labelling is per sample here, so append the centroids themselves
            # (each its own nearest) and drop their labels.
            points = np.concatenate([xo.obj, self.cluster_centers_])
            m = np.ones(n + k, dtype=np.uint8)
            if mo is not None:
                m[:n] = mo.obj
            labels, _, _ = self._run(operand(points, "X", who, (np.float32,)),
                                     operand(m, "mask", who, (np.uint8,)), self.cluster_centers_, 1, who)
            return labels[:n]
        labels, _, _ = self._run(xo, mo, self.cluster_centers_, 1, who)
        return labels

    def transform(self, X):
        """The Euclidean distance of each sample to each centroid,
        (n_samples, n_clusters) float64."""
        who = "dakit.KMeans.transform"
        x = to_host(self._fitted(X, who)).astype(np.float64)
        c = self.cluster_centers_.astype(np.float64)
        out = np.empty((x.shape[0], c.shape[0]))
        step = max(1, (1 << 24) // max(1, c.size))  # about 128 MiB of differences at a time
        for i in range(0, x.shape[0], step):
            diff = x[i:i + step, None, :] - c[None, :, :]
            out[i:i + step] = np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))
        return out

    def fit_transform(self, X, y=None, sample_weight=None):
        return self.fit(X, sample_weight=sample_weight).transform(X)

    def score(self, X, y=None, sample_weight=None):
        """Minus the inertia of X under cluster_centers_, each squared
        distance times its sample's weight (scikit-learn's sign: larger is
        better)."""
        who = "dakit.KMeans.score"
        xo = self._fitted(X, who)
        weights = self._weights(sample_weight, xo.shape[0], who)
        if weights is None and sample_weight is not None:  # equal weights: the inertia times that weight
            scale = float(np.ravel(np.asarray(to_host(sample_weight) if cuda_interface(sample_weight) is not None
                                              else sample_weight, dtype=np.float64))[0])
        else:
            scale = 1.0
        return -scale * self._inertia(xo, self.predict(X), self.cluster_centers_, weights)
