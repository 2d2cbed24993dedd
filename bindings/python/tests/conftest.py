"""Shared fixtures: which backends are here, a spy on the C calls, and a
check of error sentences."""
import contextlib

import numpy as np
import pytest

import dakit
from dakit import _native

INFO = dakit.info()
USABLE = {b.name: b for b in INFO.backends if b.usable}


def backends(algorithm, wanted=("cpu", "opencl")):
    """pytest params: the wanted backends that are usable and implement the
    algorithm (absent ones are reported as skipped, not silently dropped)."""
    out = []
    for name in wanted:
        b = USABLE.get(name)
        mark = () if b is not None and algorithm in b.algorithms else \
            pytest.mark.skip(reason="backend %s with %s is not usable here" % (name, algorithm))
        out.append(pytest.param(name, marks=mark, id=name))
    return out


class CallLog:
    """Records calls of chosen C functions (by replacing the prototypes the
    binding calls through) and can forbid others."""

    def __init__(self, monkeypatch):
        self.monkeypatch = monkeypatch
        self.calls = []

    def record(self, *names):
        for name in names:
            real = getattr(_native.C, name)

            def spy(*args, _real=real, _name=name):
                self.calls.append((_name, args))
                return _real(*args)
            self.monkeypatch.setattr(_native.C, name, spy)

    def forbid(self, *names):
        for name in names:
            def fail(*args, _name=name):
                raise AssertionError("%s was called" % _name)
            self.monkeypatch.setattr(_native.C, name, fail)

    def named(self, name):
        return [args for n, args in self.calls if n == name]

    def wrapped_pointers(self):
        """The memory dk_buffer_wrap was given, as ints."""
        return [a[2] for a in self.named("dk_buffer_wrap")]


@pytest.fixture
def calls(monkeypatch):
    return CallLog(monkeypatch)


class FakeCudaArray:
    """An object that claims to be CUDA memory (it is not: nothing may read it).
    The binding must refuse it before any C call on a non-cuda context."""

    def __init__(self, shape, typestr="<f4"):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (0xdead0000, False),
                                         "strides": None, "version": 3, "stream": None}


@pytest.fixture
def rng():
    return np.random.default_rng(20240611)


@contextlib.contextmanager
def raises(exc, *words):
    """pytest.raises that also wants each of `words` in the message."""
    with pytest.raises(exc) as info:
        yield info
    for w in words:
        assert w in str(info.value), (w, str(info.value))
