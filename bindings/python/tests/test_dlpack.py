"""Arrays given through DLPack (__dlpack__ / __dlpack_device__ only): host
memory is used in place as a NumPy view; a CUDA DLPack array on a backend
that cannot use CUDA memory is refused before any kernel runs. The CUDA
path itself runs in test_cuda.py where the cuda backend is usable."""
import ctypes

import numpy as np
import pytest

import dakit
from conftest import raises


class HostDLPack:
    """Only the DLPack protocol, over a NumPy array's memory."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, stream=None):
        return self._a.__dlpack__()

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.c_void_p), ("byte_offset", ctypes.c_uint64),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class FakeCudaDLPack:
    """A DLPack capsule that claims CUDA memory at an address nothing may read."""

    def __init__(self, shape, bits=32):
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.t = _DLManagedTensor(0xdead0000, 2, 0, len(shape), 2, bits, 1, self.shape, None, 0, None, None)
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        self.capsule = new(ctypes.addressof(self.t), b"dltensor", None)

    def __dlpack__(self, stream=None):
        return self.capsule

    def __dlpack_device__(self):
        return (2, 0)


def test_host_dlpack_is_used_in_place(calls, rng):
    x = rng.standard_normal((64, 80)).astype(np.float32)
    expected = dakit.gauss(x, 2.0, backend="cpu")
    calls.record("dk_buffer_wrap")
    got = dakit.gauss(HostDLPack(x), 2.0, backend="cpu")
    np.testing.assert_array_equal(got, expected)
    assert x.ctypes.data in calls.wrapped_pointers()  # the caller's memory, not a copy
    out = np.empty_like(x)
    dakit.gauss(HostDLPack(x), 2.0, out=HostDLPack(out), backend="cpu")
    np.testing.assert_array_equal(out, expected)


def test_host_dlpack_dtype_is_checked():
    x = np.zeros((8, 8), dtype=np.int32)
    with raises(dakit.InvalidArgumentError, "dtype int32"):
        dakit.gauss(HostDLPack(x), 2.0, backend="cpu")


def test_cuda_dlpack_on_a_host_backend_is_refused(calls):
    calls.forbid("dk_gauss_execute", "dk_gauss_execute_host", "dk_buffer_wrap")
    fake = FakeCudaDLPack((16, 16))
    with raises(dakit.InvalidArgumentError, "CUDA device array", "backend is 'cpu'"):
        dakit.gauss(fake, 2.0, backend="cpu")


def test_cuda_dlpack_of_an_unknown_type_is_refused(calls):
    calls.forbid("dk_gauss_execute", "dk_gauss_execute_host", "dk_buffer_wrap")
    with raises(dakit.InvalidArgumentError, "DLPack type", "16 bits"):
        dakit.gauss(FakeCudaDLPack((16, 16), bits=16), 2.0, backend="cpu")


def test_cuda_dlpack_is_not_host_data():
    with raises(dakit.InvalidArgumentError, "must be host data"):
        dakit.enkf.perturbations(1, FakeCudaDLPack((4,), bits=64), 3)
