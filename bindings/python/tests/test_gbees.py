"""dakit.gbees.propagate against libdakit's serial reference, on cpu and opencl."""
import os

import numpy as np
import pytest

import dakit
from conftest import backends, raises

GBEES = backends("gbees")
LORENZ63 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests",
                        "data-gbees-lorenz63")


def l1(a, b):
    """The conformance measure of tools/gbees/conform.c: the L1 distance of
    the two densities, a cell missing on one side counting its whole mass."""
    pa = {tuple(p): w for p, w in zip(np.round(a.points, 9).tolist(), a.probability)}
    pb = {tuple(p): w for p, w in zip(np.round(b.points, 9).tolist(), b.probability)}
    return sum(abs(pa.get(k, 0.0) - pb.get(k, 0.0)) for k in set(pa) | set(pb))


def test_models_are_listed():
    names = [m.name for m in dakit.gbees.models()]
    assert "lorenz63" in names and "lorenz96" in names
    l63 = [m for m in dakit.gbees.models() if m.name == "lorenz63"][0]
    assert l63.dim == 3 and l63.about


@pytest.mark.parametrize("backend", GBEES)
def test_same_density_as_the_reference(backend):
    """The published Lorenz '63 case (its measurement files) to t = 0.3, with
    the measurement update at its time: every snapshot within the L1
    distance conformance allows (1e-3), at the same times."""
    kw = dict(threshold=2e-5, t_end=0.3, snapshots=4)
    ref = dakit.gbees.propagate("lorenz63", LORENZ63, backend="reference", **kw)
    got = dakit.gbees.propagate("lorenz63", LORENZ63, backend=backend, **kw)
    assert ref.backend == "reference" and got.backend == backend
    assert len(got.snapshots) == len(ref.snapshots) >= 2
    for a, b in zip(ref.snapshots, got.snapshots):
        assert (a.period, a.index, a.t) == (b.period, b.index, b.t)
        assert a.points.shape[1] == 3 and a.probability.shape == (a.points.shape[0],)
        assert abs(b.probability.sum() - 1) < 1e-9
        assert l1(a, b) < 1e-3
    assert got.stats.steps == ref.stats.steps and got.stats.t == pytest.approx(0.3)


def test_measurements_as_tuples_equal_the_files():
    """A list of Measurement with the files' numbers gives the files' result,
    bit for bit; the initial density is centred on the first mean."""
    meas = [dakit.gbees.Measurement([-11.5, -10.0, 9.5], np.eye(3), 1.0),
            dakit.gbees.Measurement([-8.0], [[1.0]], 1.0)]
    kw = dict(threshold=1e-4, t_end=1.05, snapshots=3, backend="reference")
    a = dakit.gbees.propagate("lorenz63", meas, **kw)
    b = dakit.gbees.propagate("lorenz63", LORENZ63, **kw)
    assert len(a.snapshots) == len(b.snapshots) >= 4  # both periods, the update between
    for x, y in zip(a.snapshots, b.snapshots):
        assert x.t == y.t
        np.testing.assert_array_equal(x.points, y.points)
        np.testing.assert_array_equal(x.probability, y.probability)
    s0 = a.snapshots[0]
    centre = (s0.points * s0.probability[:, None]).sum(axis=0)
    np.testing.assert_allclose(centre, [-11.5, -10.0, 9.5], atol=0.05)
    with raises(dakit.InvalidArgumentError, "measurement 1 has dimension 3", "measures 1"):
        dakit.gbees.propagate("lorenz63", [meas[0], meas[0]], **kw)


def test_progress_is_reported():
    seen = []
    dakit.gbees.propagate("lorenz63", LORENZ63, threshold=1e-4, t_end=0.1, backend="reference",
                          progress=seen.append, steps_per_call=10)
    assert len(seen) >= 3
    assert [s.steps for s in seen] == sorted(s.steps for s in seen)
    assert seen[-1].t == pytest.approx(0.1)


def test_bad_input_raises_the_sentence():
    with raises(dakit.InvalidArgumentError, "unknown model", "lorenz63"):
        dakit.gbees.propagate("lorenz64", LORENZ63, backend="reference")
    with raises(dakit.InvalidArgumentError, "cov has shape"):
        dakit.gbees.propagate("lorenz63", [([0, 0, 1], np.eye(2), 1.0)], backend="reference")
    with raises(dakit.InvalidArgumentError, "empty"):
        dakit.gbees.propagate("lorenz63", [], backend="reference")
    with pytest.raises(dakit.Error) as info:
        dakit.gbees.propagate("lorenz63", "/nonexistent/folder", backend="reference")
    assert "measurement0.txt" in str(info.value)
    with pytest.raises(dakit.Error) as info:
        dakit.gbees.propagate("lorenz63", LORENZ63, threshold=-1, backend="reference")
    assert "threshold" in str(info.value)
