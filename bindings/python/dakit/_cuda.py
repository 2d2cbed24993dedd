"""What the binding needs of CUDA itself, through the driver library
(libcuda.so.1, present wherever a GPU driver is): waiting for the stream
an array's producer named in __cuda_array_interface__ (version 3), since
dakit's kernels run on a stream of their own that does not wait for it.

Nothing here runs unless a CUDA array is passed to a cuda context.
"""
import ctypes
import threading

from ._errors import Error

_lock = threading.Lock()
_driver = None
_primary = {}  # ordinal -> CUcontext retained for the process's lifetime


def _cu():
    global _driver
    with _lock:
        if _driver is None:
            try:
                d = ctypes.CDLL("libcuda.so.1")
            except OSError as e:
                raise Error("dakit: the CUDA driver library libcuda.so.1 cannot be loaded (%s), so the "
                            "stream of a CUDA array cannot be waited for" % e) from None
            for name, args in [("cuInit", [ctypes.c_uint]),
                               ("cuDeviceGet", [ctypes.POINTER(ctypes.c_int), ctypes.c_int]),
                               ("cuDevicePrimaryCtxRetain", [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]),
                               ("cuCtxPushCurrent_v2", [ctypes.c_void_p]),
                               ("cuCtxPopCurrent_v2", [ctypes.POINTER(ctypes.c_void_p)]),
                               ("cuStreamSynchronize", [ctypes.c_void_p]),
                               ("cuGetErrorString", [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)])]:
                f = getattr(d, name)
                f.restype = ctypes.c_int
                f.argtypes = args
            _driver = d
        return _driver


def _try(status, what):
    if status != 0:
        s = ctypes.c_char_p()
        _driver.cuGetErrorString(status, ctypes.byref(s))
        reason = s.value.decode() if s.value else "error %d" % status
        raise Error("dakit: %s failed: %s" % (what, reason))


def synchronize(ordinal, streams):
    """Waits for every stream in `streams` (CUstream handles as ints; 1 and 2
    are the legacy and per-thread default streams) with the primary context
    of GPU `ordinal` current, which is the context CuPy, PyTorch and dakit's
    CUDA runtime share."""
    streams = [s for s in dict.fromkeys(streams) if s is not None]
    if not streams:
        return
    d = _cu()
    with _lock:
        ctx = _primary.get(ordinal)
        if ctx is None:
            _try(d.cuInit(0), "cuInit")
            dev = ctypes.c_int()
            _try(d.cuDeviceGet(ctypes.byref(dev), ordinal), "cuDeviceGet")
            c = ctypes.c_void_p()
            _try(d.cuDevicePrimaryCtxRetain(ctypes.byref(c), dev.value), "cuDevicePrimaryCtxRetain")
            ctx = _primary[ordinal] = c.value
    _try(d.cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent")
    try:
        for s in streams:
            _try(d.cuStreamSynchronize(s), "waiting for the array's stream %#x" % s)
    finally:
        popped = ctypes.c_void_p()
        d.cuCtxPopCurrent_v2(ctypes.byref(popped))
