"""kmeans in scikit-learn's estimator shape."""
import ctypes
import inspect

import numpy as np

from ._arrays import Buffers, cuda_interface, operand, to_host, usable_here, zero_copy
from ._context import Plan, context_for
from ._errors import invalid
from ._gauss import _c_int, _cstr, _float, _size
from ._native import C, DK_KMEANS_POINT_MAJOR, KMeansDesc, KMeansResult, check


class _KMeansPlan(Plan):
    def __init__(self, desc, backend):
        super().__init__(backend)
        h = ctypes.c_void_p()
        check(C.dk_kmeans_plan_create(self._ctx.handle, ctypes.byref(desc), ctypes.byref(h)), self._ctx.handle)
        self._adopt(h)


class KMeans:
    """Lloyd's k-means on float32 features, with the contiguity-weighted
    cost of radar clustering where grid_shape is given and lambda_ < 1.

    n_clusters: k. max_iter: iterations at most. tol: stop when no centroid
    moved more than tol (0: run max_iter). init: None (the range of feature
    `init_feature` cut into k equal intervals, as the radar paper does) or a
    (k, n_features) array of initial centroids. lambda_: the weight of the
    feature distance against the neighbourhood term (1: plain k-means).
    window: the odd w of the w x w neighbourhood. grid_shape: (rows, cols),
    rows * cols == n_samples, for the contiguity cost. variant: one of
    Context.variants("kmeans"). backend: None, a name or a dakit.Context.

    After fit: labels_ (int32, -1 where masked), cluster_centers_ (float32),
    inertia_ (the sum of squared distances to the final centroids), n_iter_,
    last_move_ (the largest centroid move of the last iteration).
    labels_ are the last iteration's labels, computed from the centroids
    before its update, as dakit defines them; they equal predict(X) once
    the centroids have stopped moving.
    """

    def __init__(self, n_clusters=8, max_iter=20, tol=0.0, init=None, lambda_=1.0, window=5, grid_shape=None,
                 backend=None, variant=None, init_feature=0):
        self.n_clusters = n_clusters
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
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

    def _desc(self, n, d, max_iter, who, k=None):
        desc = KMeansDesc()
        C.dk_kmeans_desc_init(ctypes.byref(desc))
        desc.n = n
        desc.d = _c_int(d, "the number of features", who)
        desc.k = _c_int(self.n_clusters if k is None else k, "n_clusters", who)
        desc.max_iters = _c_int(max_iter, "max_iter", who)
        desc.tol = _float(self.tol, "tol", who)
        desc.layout = DK_KMEANS_POINT_MAJOR
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

    def _initial(self, desc, xo, mo, who):
        k, d = desc.k, desc.d
        if self.init is None:
            points = np.ascontiguousarray(to_host(xo), dtype=np.float32)
            mask = None if mo is None else np.ascontiguousarray(to_host(mo)).view(np.uint8)
            init = np.empty((k, d), dtype=np.float32)
            feature = _c_int(self.init_feature, "init_feature", who)
            check(C.dk_kmeans_initial_centroids(ctypes.byref(desc), points.ctypes.data,
                                                None if mask is None else mask.ctypes.data, feature,
                                                init.ctypes.data), None)
            return init
        if isinstance(self.init, str):
            raise invalid("%s: init is %r; it must be None (equal intervals of a feature) or a (k, n_features) "
                          "array" % (who, self.init))
        init = self.init
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

    # ---- running ----

    def _run(self, xo, mo, init, max_iter, who):
        """One plan over xo from the (k, d) float32 centroids init (k from
        init: predict runs with the fitted centroids whatever n_clusters says
        now)."""
        n, d = xo.shape
        k = init.shape[0]
        assert init.shape == (k, d) and init.dtype == np.float32 and init.flags.c_contiguous
        desc = self._desc(n, d, max_iter, who, k=k)
        labels = np.empty(n, dtype=np.int32)
        centers = np.empty((k, d), dtype=np.float32)
        result = KMeansResult()
        with _KMeansPlan(desc, self.backend) as plan:
            ctx = plan.context
            how = zero_copy(ctx, who, xo, mo)
            if how:
                if not xo.device:
                    # what dk_kmeans_execute_host checks before copying
                    check(C.dk_kmeans_check_points(ctypes.byref(desc), xo.ptr, None if mo is None else mo.ptr,
                                                   None), None)
                bad = np.flatnonzero(~np.isfinite(init))
                if bad.size:
                    raise invalid("dakit.KMeans: initial centroid value %d is %g; it must be finite"
                                  % (bad[0], init.flat[bad[0]]))
                with Buffers(ctx, how) as b:
                    if xo.device:  # device points: the small arrays travel through dakit buffers
                        bi = b.create(init.nbytes, init)
                        bl, bc = b.create(labels.nbytes), b.create(centers.nbytes)
                    else:
                        bi = b.wrap(operand(init, "init", who, (np.float32,)))
                        bl = b.wrap(operand(labels, "labels", who, (np.int32,), writable=True))
                        bc = b.wrap(operand(centers, "centers", who, (np.float32,), writable=True))
                    check(C.dk_kmeans_execute(plan.handle, b.wrap(xo), b.wrap(mo), bi, bl, bc,
                                              ctypes.byref(result)), ctx.handle)
                    if xo.device:
                        b.read(bl, labels)
                        b.read(bc, centers)
            else:
                check(C.dk_kmeans_execute_host(plan.handle, xo.ptr, None if mo is None else mo.ptr,
                                               init.ctypes.data, labels.ctypes.data, centers.ctypes.data,
                                               ctypes.byref(result)), ctx.handle)
        return labels, centers, result

    def fit(self, X, y=None, mask=None):
        """Clusters X, (n_samples, n_features). mask: optional, one bool per
        sample; False excludes it (label -1). y is ignored."""
        who = "dakit.KMeans.fit"
        xo = self._points(X, who)
        mo = self._mask(mask, xo.shape[0], who)
        usable_here(context_for(self.backend), who, xo, mo)
        desc = self._desc(xo.shape[0], xo.shape[1], self.max_iter, who)
        init = self._initial(desc, xo, mo, who)
        labels, centers, result = self._run(xo, mo, init, self.max_iter, who)
        self.labels_ = labels
        self.cluster_centers_ = centers
        self.inertia_ = float(result.objective)
        self.n_iter_ = int(result.iterations)
        self.last_move_ = float(result.last_move)
        self.n_features_in_ = xo.shape[1]
        return self

    def fit_predict(self, X, y=None, mask=None):
        return self.fit(X, mask=mask).labels_

    def predict(self, X, mask=None):
        """The label of each sample under cluster_centers_ (with the
        contiguity cost where the estimator has it): one dakit iteration
        started from the fitted centroids."""
        who = "dakit.KMeans.predict"
        if not hasattr(self, "cluster_centers_"):
            raise invalid("%s: this KMeans is not fitted yet; call fit first" % who)
        xo = self._points(X, who)
        n, d = xo.shape
        if d != self.n_features_in_:
            raise invalid("%s: X has %d features, but the estimator was fitted on %d" % (who, d, self.n_features_in_))
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

