"""dakit.letkf's weight interpolation (weight_stride): against the full
analysis on a smooth case, the reference, and the refusals."""
import numpy as np
import pytest

import dakit


def _case(side=40, k=16, m=400, seed=7):
    rng = np.random.default_rng(seed)
    iy, ix = np.divmod(np.arange(side * side), side)
    grid = np.stack([iy, ix], axis=1).astype(np.float64)
    obs = rng.uniform(0, side - 1, size=(m, 2))
    xb = rng.standard_normal((side * side, k))
    yb = rng.standard_normal((m, k))
    yo = 0.5 * rng.standard_normal(m)
    return xb, yb, yo, grid, obs


def test_weight_stride_error_bound():
    xb, yb, yo, grid, obs = _case()
    full = dakit.letkf(xb, yb, yo, 0.5, grid, obs, 20.0, backend="cpu")
    interp = dakit.letkf(xb, yb, yo, 0.5, grid, obs, 20.0, backend="cpu", weight_stride=2, grid_shape=(40, 40))
    rel = np.sqrt(np.mean((interp - full) ** 2) / np.mean((full - xb) ** 2))
    # 0.46 % of the increment here (radius 10 strides; docs/letkf.md); a wrong
    # interpolation or transform gives tens of percent
    assert 0 < rel < 0.03, rel
    ref = dakit.letkf(xb, yb, yo, 0.5, grid, obs, 20.0, backend="reference", weight_stride=2, grid_shape=(40, 40))
    assert np.max(np.abs(interp - ref)) < 1e-10 * np.max(np.abs(ref))


def test_stride_one_is_the_full_analysis():
    xb, yb, yo, grid, obs = _case(side=20, m=150)
    full = dakit.letkf(xb, yb, yo, 0.5, grid, obs, 6.0, rtps=0.6, backend="cpu")
    same = dakit.letkf(xb, yb, yo, 0.5, grid, obs, 6.0, rtps=0.6, backend="cpu", weight_stride=1,
                       grid_shape=(20, 20))
    assert np.max(np.abs(same - full)) < 1e-12 * np.max(np.abs(full))


def test_weight_stride_refusals():
    xb, yb, yo, grid, obs = _case(side=10, m=50)
    with pytest.raises(ValueError, match="grid_shape"):
        dakit.letkf(xb, yb, yo, 0.5, grid, obs, 4.0, backend="cpu", weight_stride=2)
    with pytest.raises(ValueError, match="holds 99 points"):
        dakit.letkf(xb, yb, yo, 0.5, grid, obs, 4.0, backend="cpu", weight_stride=2, grid_shape=(9, 11))
