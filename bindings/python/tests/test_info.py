"""dakit.info(), contexts, and where the installed package finds its plugins."""
import os

import numpy as np
import pytest

import dakit
from dakit import _context
from conftest import INFO, raises

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DEV = bool(os.environ.get("DAKIT_LIBRARY"))  # a library named by hand, not the installed one


def test_info_describes_every_plugin():
    assert isinstance(INFO, dakit.Info)
    assert INFO.version == dakit.__version__ and INFO.library == dakit.library_path
    names = [b.name for b in INFO.backends]
    assert "cpu" in INFO.usable
    for b in INFO.backends:
        assert isinstance(b, dakit.Backend) and os.path.isfile(b.path)
        if b.usable:
            assert b.reason == "" and b.devices and b.algorithms
            assert all(isinstance(d, dakit.Device) and d.kind in ("cpu", "gpu", "accelerator", "unknown")
                       for d in b.devices)
            assert set(b.variants) <= set(b.algorithms)
            for a in ("gauss", "kmeans"):
                assert b.variants[a], (b.name, a)
        else:
            assert b.reason  # a refusal always says why
    text = str(INFO)
    for n in names:
        assert n in text
    cpu = next(b for b in INFO.backends if b.name == "cpu")
    assert set(cpu.algorithms) >= {"gauss", "kmeans", "enkf", "gbees"}


@pytest.mark.skipif(DEV, reason="DAKIT_LIBRARY names a library outside an installed wheel")
def test_installed_package_finds_its_plugins_beside_libdakit():
    """The wheel holds libdakit in .dakit.mesonpy.libs/ and the plugins in
    .dakit.mesonpy.libs/dakit/plugins/, where libdakit's discovery looks, so
    no environment variable is needed."""
    sources = os.path.realpath(os.path.join(REPO, "bindings", "python", "dakit"))
    assert os.path.dirname(os.path.realpath(dakit.__file__)) != sources, "imported the sources, not the install"
    assert not os.environ.get("DAKIT_PLUGIN_PATH")
    libdir = os.path.dirname(os.path.realpath(dakit.library_path))
    assert os.path.basename(libdir) == ".dakit.mesonpy.libs"
    plugins = os.path.join(libdir, "dakit", "plugins")
    for b in INFO.backends:
        assert os.path.dirname(b.path) == plugins, b.path
    assert {"cpu"} <= {b.name for b in INFO.backends}


def test_context():
    with dakit.Context("cpu") as ctx:
        assert ctx.backend == "cpu" and ctx.device and ctx.zero_copy_host
        assert ctx.variants("gauss") == next(b for b in INFO.backends if b.name == "cpu").variants["gauss"]
        assert "cpu" in repr(ctx)
        x = np.arange(10.0)
        np.testing.assert_array_equal(dakit.gauss(x, 1.0, backend=ctx), dakit.gauss(x, 1.0, backend="cpu"))
        plan = dakit.GaussPlan(10, np.float64, 1.0, backend=ctx)
    with raises(dakit.InvalidArgumentError, "was closed"):
        plan(x)
    with raises(dakit.InvalidArgumentError, "was closed"):
        ctx.variants("gauss")
    with raises(dakit.InvalidArgumentError, "no algorithm 'fft'"):
        dakit.Context("cpu").variants("fft")
    assert dakit.default_context() is dakit.default_context()
    with raises(dakit.NoBackendError, "nosuch"):
        dakit.Context("nosuch")
    with raises(dakit.InvalidArgumentError, "backend must be None"):
        dakit.gauss(x, 1.0, backend=3)
    if "opencl" in INFO.usable:
        ctx = dakit.Context("opencl")
        assert ctx.backend == "opencl" and not ctx.zero_copy_host
        ctx.close()
        ctx.close()  # twice is fine


def test_a_forked_child_makes_its_own_contexts(monkeypatch):
    ctx = dakit.Context("cpu")
    default = dakit.default_context()
    monkeypatch.setattr(os, "getpid", lambda: -1)  # as if in a child after fork
    _context._forget_after_fork()
    with raises(dakit.InvalidArgumentError, "before a fork"):
        ctx.variants("gauss")
    monkeypatch.undo()
    _context._forget_after_fork()
    assert dakit.default_context() is not default


def test_errors_are_python_exceptions_too():
    assert issubclass(dakit.InvalidArgumentError, ValueError)
    assert issubclass(dakit.NotImplementedByBackendError, NotImplementedError)
    assert issubclass(dakit.OutOfMemoryError, MemoryError)
    assert issubclass(dakit.NoBackendError, RuntimeError)
    with pytest.raises(ValueError) as e:
        dakit.gauss(np.zeros(3), -1.0)
    assert e.value.status == "DK_ERR_INVALID_ARGUMENT"


@pytest.mark.parametrize("backend", INFO.usable)
def test_empty_pinned_carries_data_and_outlives_close(backend):
    """Context.empty_pinned: dk_host_alloc memory as a NumPy array of the
    asked shape and dtype, which a dakit call takes as host memory (gauss
    equals the same call on an ordinary array); a context closed while such
    an array lives keeps its device until the array is gone."""
    import gc
    ctx = dakit.Context(backend)
    a = ctx.empty_pinned((64, 48), np.float32)
    assert a.shape == (64, 48) and a.dtype == np.float32 and a.flags.writeable and a.flags.c_contiguous
    rng = np.random.default_rng(3)
    a[...] = rng.standard_normal(a.shape, dtype=np.float32)
    want = dakit.gauss(np.array(a), 2.0, backend=ctx)
    got = dakit.gauss(a, 2.0, backend=ctx)
    np.testing.assert_array_equal(got, want)
    b = ctx.empty_pinned(10, "int32")
    assert b.shape == (10,) and b.dtype == np.int32
    assert ctx.empty_pinned((0, 3)).shape == (0, 3)
    with raises(dakit.InvalidArgumentError, "negative"):
        ctx.empty_pinned((-1, 2))
    view = a[1:3]
    ctx.close()
    assert len(ctx._pinned) == 2 and ctx._dk is not None  # still open for a and b
    view[...] = 1.0  # the memory is still there
    del a, b
    gc.collect()
    assert len(ctx._pinned) == 1  # the view holds a's memory
    del view
    gc.collect()
    assert not ctx._pinned and ctx._dk is None
    with raises(dakit.InvalidArgumentError, "closed"):
        ctx.empty_pinned(4)
