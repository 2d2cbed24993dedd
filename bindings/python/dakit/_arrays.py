"""Arrays in and out of libdakit.

An operand is a NumPy array (host memory), an object with
__cuda_array_interface__ (CuPy, PyTorch, Numba: CUDA device memory), or an
object with __dlpack__ (JAX, PyTorch, CuPy, NumPy: host or CUDA memory). On the
cpu backend host arrays are wrapped as dakit buffers (dk_buffer_wrap,
DK_MEMORY_HOST) and on the cuda backend device arrays are (DK_MEMORY_CUDA):
the kernels read and write the caller's memory. Elsewhere host arrays go
through the *_execute_host calls, which copy. Only what C cannot see is
checked here: the dtype and layout the buffer is read with, and which kind of
memory an object is.
"""
import ctypes
import math
import sys

import numpy as np

from . import _cuda
from ._errors import invalid
from ._native import C, DK_MEMORY_CUDA, DK_MEMORY_HOST, DK_QUEUE_ASYNC, check


class Operand:
    """One array handed to C: its memory, dtype and shape."""

    __slots__ = ("obj", "device", "ptr", "shape", "dtype", "nbytes", "readonly", "stream", "name", "keep")

    def __init__(self, obj, device, ptr, shape, dtype, readonly, stream, name):
        self.obj = obj
        self.device = device          # True: CUDA device memory
        self.ptr = ptr or None        # None for an empty array
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = math.prod(self.shape) * self.dtype.itemsize
        self.readonly = readonly
        self.stream = stream
        self.name = name
        self.keep = None              # a DLPack capsule, alive while the memory is used

    @property
    def kind(self):
        return "a CUDA device array" if self.device else "a host (NumPy) array"

    def overlaps(self, other):
        if self.device != other.device or not self.ptr or not other.ptr:
            return False
        return self.ptr < other.ptr + other.nbytes and other.ptr < self.ptr + self.nbytes

    def same_memory(self, other):
        return self.device == other.device and self.ptr == other.ptr and self.nbytes == other.nbytes


def cuda_interface(obj):
    """obj.__cuda_array_interface__, or None (a CPU tensor's property raises)."""
    try:
        return obj.__cuda_array_interface__
    except AttributeError:
        return None
    except Exception:  # noqa: BLE001 - any failure means "not a CUDA array"
        return None


def cuda_key(obj):
    """What identifies a CUDA operand's memory and layout for a repeated call
    (type, address, read-only flag, shape, strides, dtype, stream), or None
    for anything else. Equal keys mean that the checks of operand() and the
    wrapping of a first call hold again."""
    try:
        cai = obj.__cuda_array_interface__
    except Exception:  # noqa: BLE001 - not a CUDA array
        return None
    return (type(obj), cai["data"], cai["shape"], cai.get("strides"), cai["typestr"], cai.get("stream"),
            cai.get("mask"))


# DLPack (dlpack.h, the unversioned DLManagedTensor that __dlpack__() returns
# when no max_version is asked for)
_KDLCPU, _KDLCUDA, _KDLCUDAHOST = 1, 2, 3
_DL_DTYPES = {(2, 32): np.float32, (2, 64): np.float64, (0, 32): np.int32, (0, 64): np.int64,
              (1, 8): np.uint8, (0, 8): np.int8, (1, 32): np.uint32, (1, 64): np.uint64}


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p),
                ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8),
                ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def dlpack_device(obj):
    """(device_type, device_id) of an object with __dlpack__, or None."""
    if isinstance(obj, np.ndarray) or not hasattr(obj, "__dlpack__"):
        return None
    try:
        return tuple(int(v) for v in obj.__dlpack_device__())
    except Exception:  # noqa: BLE001 - no usable DLPack device: not a DLPack array
        return None


def _dlpack_tensor(obj, name, who, stream):
    """(pointer, shape, dtype, C-contiguous, capsule) from obj.__dlpack__().
    The capsule must stay alive while the memory is used (its deleter runs
    when it is collected); obj keeps the memory itself alive."""
    try:
        capsule = obj.__dlpack__(stream=stream) if stream is not None else obj.__dlpack__()
    except TypeError:  # a producer without the stream keyword
        capsule = obj.__dlpack__()
    t = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    dtype = _DL_DTYPES.get((t.code, t.bits)) if t.lanes == 1 else None
    if dtype is None:
        raise invalid("%s: %s has the DLPack type (code %d, %d bits, %d lanes), which dakit does not take"
                      % (who, name, t.code, t.bits, t.lanes))
    dtype = np.dtype(dtype)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = None if not t.strides else tuple(t.strides[i] * dtype.itemsize for i in range(t.ndim))
    contiguous = strides is None or _c_contiguous(shape, strides, dtype.itemsize)
    return (t.data or 0) + t.byte_offset, shape, dtype, contiguous, capsule


def _dlpack_operand(obj, name, who):
    """A CUDA operand. The producer is asked to make the data ready on the
    legacy default stream (1), which the call then waits for."""
    ptr, shape, dtype, contiguous, capsule = _dlpack_tensor(obj, name, who, 1)
    op = Operand(obj, True, ptr, shape, dtype, False, 1, name)
    op.keep = capsule
    return op, contiguous


def _dlpack_host_view(obj, name, who):
    """Host memory given through DLPack as a writable NumPy view of the same
    memory (np.from_dlpack would mark it read-only); the view holds the
    capsule."""
    ptr, shape, dtype, contiguous, capsule = _dlpack_tensor(obj, name, who, None)
    if not contiguous:
        raise invalid("%s: %s is not C-contiguous; dakit reads arrays in C order without strides"
                      % (who, name))
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes == 0 or not ptr:
        return np.empty(shape, dtype=dtype)
    raw = (ctypes.c_char * nbytes).from_address(ptr)
    raw.capsule = capsule
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def _c_contiguous(shape, strides, itemsize):
    expected = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def _dtype_names(dtypes):
    names = [np.dtype(d).name for d in dtypes]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def operand(obj, name, who, dtypes, writable=False):
    """Checks obj as an array C can use in place: one of `dtypes`, C order,
    writable where C writes it. who: the function named in messages."""
    cai = cuda_interface(obj)
    if cai is not None:
        shape = tuple(cai["shape"])
        try:
            dtype = np.dtype(cai["typestr"])
        except TypeError:
            raise invalid("%s: %s has the CUDA array type string %r, which is not a NumPy dtype"
                          % (who, name, cai["typestr"])) from None
        ptr, readonly = cai["data"]
        stream = cai.get("stream")
        if stream == 0:  # not allowed by the protocol; read as the legacy default stream
            stream = 1
        op = Operand(obj, True, ptr, shape, dtype, bool(readonly), stream, name)
        strides = cai.get("strides")
        contiguous = strides is None or _c_contiguous(shape, strides, dtype.itemsize)
        if cai.get("mask") is not None:
            raise invalid("%s: %s is a masked CUDA array; dakit takes unmasked arrays" % (who, name))
    elif dlpack_device(obj) is not None and dlpack_device(obj)[0] == _KDLCUDA:
        op, contiguous = _dlpack_operand(obj, name, who)
    elif dlpack_device(obj) is not None and dlpack_device(obj)[0] not in (_KDLCPU, _KDLCUDAHOST):
        raise invalid("%s: %s lives on DLPack device type %d, which is neither the host nor a CUDA GPU"
                      % (who, name, dlpack_device(obj)[0]))
    else:
        if dlpack_device(obj) is not None:  # host memory through DLPack: a NumPy view, no copy
            obj = _dlpack_host_view(obj, name, who)
        if isinstance(obj, np.ndarray):
            arr = obj
        elif writable:
            raise invalid("%s: %s must be a NumPy array or a CUDA array (with __cuda_array_interface__ "
                          "or __dlpack__), not %s" % (who, name, type(obj).__name__))
        else:
            arr = np.asarray(obj)
        if arr.dtype.hasobject:
            raise invalid("%s: %s holds Python objects (dtype object); it must be a numeric array of %s"
                          % (who, name, _dtype_names(dtypes)))
        op = Operand(arr, False, arr.ctypes.data, arr.shape, arr.dtype, not arr.flags.writeable, None, name)
        contiguous = arr.flags.c_contiguous
    if op.dtype not in [np.dtype(d) for d in dtypes]:
        raise invalid("%s: %s has dtype %s; it must be %s%s" % (
            who, name, op.dtype, _dtype_names(dtypes),
            "" if op.device else " (convert it with %s.astype(numpy.%s))" % (name, np.dtype(dtypes[0]).name)))
    if not contiguous:
        raise invalid("%s: %s is not C-contiguous; dakit reads arrays in C order without strides (pass "
                      "%s)" % (who, name, "a contiguous copy" if op.device
                                           else "numpy.ascontiguousarray(%s)" % name))
    if writable and op.readonly:
        raise invalid("%s: %s is read-only, but dakit writes the result into it" % (who, name))
    return op


def host_input(obj, name, who, dtype):
    """A small host input that C copies (coefficients, observations): any
    array-like, converted to a C-order array of `dtype`."""
    dl = dlpack_device(obj)
    if cuda_interface(obj) is not None or (dl is not None and dl[0] == _KDLCUDA):
        raise invalid("%s: %s must be host data (a NumPy array or a sequence), not a CUDA array" % (who, name))
    try:
        return np.asarray(obj, dtype=dtype, order="C")
    except (TypeError, ValueError) as e:
        raise invalid("%s: %s cannot be read as %s values: %s" % (who, name, np.dtype(dtype).name, e)) from None


def empty_like(op, shape=None, dtype=None):
    """A new array of the same kind as op (NumPy, CuPy, PyTorch)."""
    shape = op.shape if shape is None else tuple(shape)
    dtype = op.dtype if dtype is None else np.dtype(dtype)
    if not op.device:
        return np.empty(shape, dtype=dtype)
    obj = op.obj
    module = type(obj).__module__.split(".")[0]
    if module == "torch":
        import torch
        return torch.empty(shape, dtype=getattr(torch, dtype.name), device=obj.device)
    if module == "cupy":
        import cupy
        with cupy.cuda.Device(obj.device.id):
            return cupy.empty(shape, dtype=dtype)
    if hasattr(obj, "__array_namespace__"):
        xp = obj.__array_namespace__()
        return xp.empty(shape, dtype=dtype.name)
    if module == "numba":
        from numba import cuda
        return cuda.device_array(shape, dtype=dtype)
    raise invalid("dakit: cannot allocate a result like the CUDA array of type %s.%s; pass out= (an array of "
                  "shape %s and dtype %s)" % (type(obj).__module__, type(obj).__name__, shape, dtype))


def to_host(op):
    """A CUDA operand's contents as a NumPy array (used where dakit needs host
    data, e.g. the initial centroids)."""
    if not op.device:
        return op.obj
    obj = op.obj
    if hasattr(obj, "get"):          # CuPy
        return np.asarray(obj.get())
    if hasattr(obj, "cpu"):          # PyTorch
        return obj.cpu().numpy()
    if hasattr(obj, "copy_to_host"):  # Numba
        return obj.copy_to_host()
    raise invalid("dakit: cannot copy the CUDA array of type %s to the host" % type(obj).__name__)


def _wrap_key(ctx, op):
    """Device memory whose owner names its GPU (CuPy, PyTorch): the context
    keeps its wrapper for later calls, since a wrapper holds only the address
    and size, and an address range of one GPU is that GPU's memory whatever
    allocation holds it now. None: wrap for this call only."""
    if not op.device or not op.ptr:
        return None
    dev = getattr(op.obj, "device", None)
    ordinal = getattr(dev, "id", None)
    if ordinal is None:
        ordinal = getattr(dev, "index", None)
    if not isinstance(ordinal, int) or ordinal != ctx.native_device:
        return None
    return (op.ptr, op.nbytes)


class Buffers:
    """dakit buffers made for one call: the caller's memory wrapped, or new
    device memory; all destroyed at the end of the with block."""

    def __init__(self, ctx, how=True):
        self.ctx = ctx
        self.handles = []
        self.wrapped = []  # (operand, handle)
        self.stream = how if isinstance(how, Stream) else None

    def __enter__(self):
        if self.ctx.takes_queues:
            # the queue is the context's: one call at a time sets it, and it
            # stays set while successive calls name the same stream
            self.ctx._queue_lock.acquire()
            try:
                if self.ctx._queue != self.stream:
                    self.ctx._queue = None
                    check(C.dk_context_set_queue(self.ctx.handle, self.stream and int(self.stream),
                                                 DK_QUEUE_ASYNC if self.stream else 0), self.ctx.handle)
                    self.ctx._queue = self.stream
            except BaseException:
                self.ctx._queue_lock.release()
                raise
        return self

    def __exit__(self, *exc):
        for h in reversed(self.handles):
            C.dk_buffer_destroy(h)
        self.handles.clear()
        if self.ctx.takes_queues:
            # only the default streams (1 legacy, 2 per-thread) outlive any
            # array: a stream the caller made may be destroyed after this call
            if self.ctx._queue not in (None, 1, 2):
                self.ctx._queue = None
                C.dk_context_set_queue(self.ctx.handle, None, 0)
            self.ctx._queue_lock.release()
        return False

    def wrap(self, op):
        """The buffer over op's memory; the same buffer for the same memory,
        so that in-place calls pass in == out."""
        if op is None:
            return None
        for other, h in self.wrapped:
            if other.same_memory(op):
                return h
        key = _wrap_key(self.ctx, op)
        h = self.ctx._wraps.get(key) if key else None
        if h is None:
            kind = DK_MEMORY_CUDA if op.device else DK_MEMORY_HOST
            h = ctypes.c_void_p()
            check(C.dk_buffer_wrap(self.ctx.handle, kind, op.ptr, op.nbytes, ctypes.byref(h)), self.ctx.handle)
            if not (key and self.ctx.keep_wrap(key, h)):
                self.handles.append(h)
        self.wrapped.append((op, h))
        return h

    def create(self, nbytes, data=None):
        """A new buffer of the context, filled from host `data` if given."""
        h = ctypes.c_void_p()
        check(C.dk_buffer_create(self.ctx.handle, nbytes, ctypes.byref(h)), self.ctx.handle)
        self.handles.append(h)
        if data is not None:
            check(C.dk_buffer_write(h, data.ctypes.data, nbytes), self.ctx.handle)
        return h

    def read(self, h, array):
        check(C.dk_buffer_read(h, array.ctypes.data, array.nbytes), self.ctx.handle)
        return array

    def copy(self, dst, src, nbytes):
        check(C.dk_buffer_copy(dst, src, nbytes), self.ctx.handle)


def usable_here(ctx, who, *ops):
    """Raises for device memory the context cannot use, or a mix of kinds."""
    ops = [o for o in ops if o is not None]
    device = [o for o in ops if o.device]
    if device and ctx.memory != DK_MEMORY_CUDA:
        raise invalid("%s: %s is a CUDA device array, but the context's backend is '%s', which cannot use CUDA "
                      "memory; use backend='cuda', or copy the array to the host" % (who, device[0].name,
                                                                                    ctx.backend))
    if device and len(device) != len(ops):
        host = [o for o in ops if not o.device][0]
        raise invalid("%s: %s is a CUDA device array but %s is a host array; pass both on the same side"
                      % (who, device[0].name, host.name))
    return device


class Stream(int):
    """The one CUDA stream the device operands of a call were produced on:
    the call is queued on it (dk_context_set_queue, DK_QUEUE_ASYNC) instead
    of the host waiting for it."""


def zero_copy(ctx, who, *ops):
    """How the operands reach C. False: through the host calls (copied).
    True: wrapped, nothing to wait for. A Stream: wrapped, and the call is
    ordered on that stream on the device (the producers of every device
    operand named it). Operands naming different streams are waited for on
    the host, and the call then blocks as before."""
    device = usable_here(ctx, who, *ops)
    if device:
        streams = {o.stream for o in device if o.stream is not None}
        if len(streams) == 1 and ctx.takes_queues:
            return Stream(streams.pop())
        _cuda.synchronize(ctx.native_device, list(streams))
        return True
    return ctx.memory == DK_MEMORY_HOST


def labelled(obj):
    """xarray in, xarray out: (values, labels) where values is what dakit
    computes on (the DataArray's .data: NumPy, or CuPy) and labels turns a
    result back into a DataArray (labels.like). For anything that is not a
    DataArray: (obj, None). xarray is never imported here: a DataArray can
    only exist once the caller has imported it."""
    xr = sys.modules.get("xarray")
    if xr is None or not isinstance(obj, xr.DataArray):
        return obj, None
    return obj.data, Labels(obj)


class Labels:
    """The dims, coordinates, name and attributes of a DataArray given to dakit."""

    __slots__ = ("source",)

    def __init__(self, source):
        self.source = source

    @property
    def dims(self):
        return self.source.dims

    def axis(self, name, who):
        """The index of a dimension given by its name (or an int, unchanged)."""
        if isinstance(name, str):
            if name not in self.source.dims:
                raise invalid("%s: the DataArray has no dimension %r (its dims are %s)"
                              % (who, name, ", ".join(map(repr, self.source.dims))))
            return self.source.dims.index(name)
        return name

    def like(self, values):
        """values (of the source's shape) with the source's dims, coordinates,
        name and attributes."""
        return self.source.copy(deep=False, data=values)

    def rows(self, values, dims, attrs=False):
        """values whose first axis is the source's first dimension (a result
        per state value or point), named `dims` after it: the coordinates
        along that dimension are kept; attrs only when asked (a covariance
        or a label is not in the source's units)."""
        xr = sys.modules["xarray"]
        first = self.source.dims[0]
        coords = {k: c for k, c in self.source.coords.items() if c.dims == (first,)}
        return xr.DataArray(values, dims=(first,) + tuple(dims), coords=coords,
                            attrs=dict(self.source.attrs) if attrs else {}, name=self.source.name)
