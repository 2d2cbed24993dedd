"""Contexts (one backend, one device), the per-process default, plans'
common life cycle, and dakit.info()."""
import atexit
import ctypes
import dataclasses
import os
import threading
import weakref
from typing import Dict, Tuple

from ._errors import invalid
from ._native import (ALGORITHMS, C, DEVICE_KINDS, DK_MEMORY_CUDA, DK_MEMORY_HOST, BackendInfo, Native, check, library_path,
                      string_list, text)


class Closing:
    """close() on leaving a with block and when collected."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


class Context(Closing):
    """One backend on one device.

    backend: None picks automatically (DAKIT_BACKEND, else GPUs first, then
    plugin priority), a name ("cpu", "opencl", "cuda") or a comma list in
    order of preference. DAKIT_DEVICE=N picks the device. Share a context
    between threads freely; close() (or a with block) releases the device
    early, otherwise it is released when the last reference goes.
    """

    def __init__(self, backend=None):
        self._handle = None
        self._pid = os.getpid()
        self._plans = weakref.WeakSet()
        self._lock = threading.RLock()  # re-entered by a pinned array freed by the collector
        if backend is not None and not isinstance(backend, str):
            raise invalid("dakit.Context: backend must be None or a name such as 'cpu', not %r" % (backend,))
        handle = ctypes.c_void_p()
        check(C.dk_context_create(backend.encode() if backend else None, ctypes.byref(handle)), None)
        self._handle = handle
        self._dk = handle     # the C context, destroyed when closed and no pinned array is left
        self._pinned = set()  # addresses from dk_host_alloc still in use (empty_pinned)
        self.backend = text(C.dk_context_backend(handle))
        self.device = text(C.dk_context_device(handle))
        native = Native()
        if C.dk_context_native(handle, ctypes.byref(native)) == 0:
            self.memory = native.memory
            self.native_device = native.device
            self.native_context = native.context
            self.native_queue = native.queue
        else:  # a plugin that gives no handles: treat its memory as its own
            self.memory = None
            self.native_device = 0
            self.native_context = self.native_queue = None
        # CUDA arrays' streams are taken as the context's queue where the
        # backend can order its work with one (dk_context_set_queue)
        self._queue_lock = threading.Lock()
        self._queue = None  # the stream the context's work is ordered with now
        self._wraps = {}    # (address, bytes) -> dk_buffer over device memory (_arrays._wrap_key)
        self.takes_queues = self.memory == DK_MEMORY_CUDA and \
            C.dk_context_set_queue(handle, None, 0) == 0 and self._probe_queue(handle)

    @staticmethod
    def _probe_queue(handle):
        # the legacy default stream is a queue every CUDA context can take
        ok = C.dk_context_set_queue(handle, 1, 0) == 0
        C.dk_context_set_queue(handle, None, 0)
        return ok

    def keep_wrap(self, key, handle):
        """Keeps a wrapper of device memory for later calls; False when 64
        are kept already (the caller then releases it after its call)."""
        with self._lock:
            if len(self._wraps) >= 64:
                return False
            self._wraps[key] = handle
            return True

    def drop_wraps(self):
        """Releases the wrappers kept for device memory (not while calls run
        on this context from other threads)."""
        with self._lock:
            wraps, self._wraps = self._wraps, {}
        for h in wraps.values():
            C.dk_buffer_destroy(h)

    def wait(self):
        """Returns when every call on this context has finished its device work."""
        check(C.dk_context_wait(self.handle), self.handle)

    @property
    def handle(self):
        """The dk_context pointer (a ctypes c_void_p)."""
        if self._handle is None:
            raise invalid("dakit: this Context (%s) was closed" % self.backend)
        if self._pid != os.getpid():
            raise invalid("dakit: this Context (%s) was made in process %d, before a fork; make a new one in "
                          "this process" % (self.backend, self._pid))
        return self._handle

    @property
    def zero_copy_host(self):
        """True when NumPy arrays are used in place (the cpu backend)."""
        return self.memory == DK_MEMORY_HOST

    def variants(self, algorithm):
        """The variants the backend offers for an algorithm ("gauss",
        "kmeans", "enkf", "letkf"), the default first; () when it has none."""
        f = {"gauss": C.dk_gauss_variants, "kmeans": C.dk_kmeans_variants, "enkf": C.dk_enkf_variants,
             "letkf": C.dk_letkf_variants}.get(algorithm)
        if f is None:
            raise invalid("dakit: no algorithm %r; the binding knows gauss, kmeans, enkf and letkf" % (algorithm,))
        return string_list(f(self.handle))

    def empty_pinned(self, shape, dtype="float32"):
        """A NumPy array in host memory this context's device copies to and
        from fastest (dk_host_alloc: page-locked on cuda and opencl, as
        cupyx.empty_pinned), uninitialized. Data that moves between the host
        and the device often (a radar scan in, its labels out) belongs in
        one; any dakit call takes it as a NumPy array. The memory is freed
        when the array (and every view of it) is gone; the context's device
        is kept open until then, even after close()."""
        import numpy as np
        dt = np.dtype(dtype)
        shape = (int(shape),) if np.isscalar(shape) else tuple(int(n) for n in shape)
        if any(n < 0 for n in shape):
            raise invalid("dakit.Context.empty_pinned: shape %r has a negative extent" % (shape,))
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if nbytes == 0:
            return np.empty(shape, dt)
        with self._lock:
            if self._handle is None:
                raise invalid("dakit.Context.empty_pinned: the context is closed")
            ptr = ctypes.c_void_p()
            check(C.dk_host_alloc(self._handle, nbytes, ctypes.byref(ptr)), self._handle)
            self._pinned.add(ptr.value)
        raw = (ctypes.c_char * nbytes).from_address(ptr.value)
        # every view's base chain ends at raw: the memory goes when raw does
        weakref.finalize(raw, self._free_pinned, ptr.value)
        return np.frombuffer(raw, dtype=dt).reshape(shape)

    def _free_pinned(self, address):
        with self._lock:
            self._pinned.discard(address)
            if self._pid == os.getpid():
                C.dk_host_free(self._dk, address)
            if self._handle is None and not self._pinned:
                self._destroy()

    def _destroy(self):
        if self._dk is not None and self._pid == os.getpid():
            C.dk_context_destroy(self._dk)
        self._dk = None

    def close(self):
        """Releases the device; plans made on this context are closed first.
        Arrays from empty_pinned keep the device open until they are gone."""
        with self._lock:
            if self._handle is None:
                return
            for plan in list(self._plans):
                plan.close()
            if self._pid == os.getpid():
                for h in self._wraps.values():
                    C.dk_buffer_destroy(h)
            self._wraps = {}
            self._handle = None
            if not self._pinned:
                self._destroy()

    def __repr__(self):
        state = "" if self._handle is not None else ", closed"
        return "dakit.Context(backend=%r, device=%r%s)" % (self.backend, self.device, state)


_lock = threading.Lock()
_default = None
_named: Dict[str, Context] = {}


def default_context():
    """The process's context for backend=None, made on first use."""
    global _default
    with _lock:
        if _default is None or _default._handle is None:
            _default = Context(None)
        return _default


def context_for(backend):
    """backend: None (the default context), a Context, or a backend name
    (one context per name and process, made on first use)."""
    if isinstance(backend, Context):
        return backend
    if backend is None:
        return default_context()
    if not isinstance(backend, str):
        raise invalid("dakit: backend must be None, a name such as 'cpu', or a dakit.Context, not %r" % (backend,))
    with _lock:
        ctx = _named.get(backend)
        if ctx is None or ctx._handle is None:
            ctx = _named[backend] = Context(backend)
        return ctx


def _forget_after_fork():
    # A child must not use (or destroy) its parent's devices: start afresh.
    global _default, _named, _lock
    _lock = threading.Lock()
    _default = None
    _named = {}


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


@atexit.register
def _close_all():
    # Release the devices while the interpreter is whole, before the
    # drivers' own exit handlers run.
    with _lock:
        contexts = list(_named.values()) + ([_default] if _default is not None else [])
    for ctx in contexts:
        ctx.close()


class Plan(Closing):
    """What every plan shares: its context, its dk_plan, one caller at a time."""

    def __init__(self, backend):
        self._handle = None
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._ctx = context_for(backend)

    def _adopt(self, handle):
        self._handle = handle
        self._ctx._plans.add(self)

    @property
    def context(self):
        return self._ctx

    @property
    def backend(self):
        return self._ctx.backend

    @property
    def handle(self):
        if self._handle is None:
            raise invalid("dakit: this %s was closed" % type(self).__name__)
        self._ctx.handle  # raises after a fork or a closed context
        return self._handle

    def close(self):
        h, self._handle = self._handle, None
        if h is not None and self._pid == os.getpid():
            C.dk_plan_destroy(h)


# ---- info ----

@dataclasses.dataclass(frozen=True)
class Device:
    name: str
    memory_bytes: int  # 0 when unknown
    kind: str          # "cpu", "gpu", "accelerator" or "unknown"


@dataclasses.dataclass(frozen=True)
class Backend:
    name: str                          # "" when refused before its descriptor was read
    version: str
    path: str
    priority: int
    usable: bool
    reason: str                        # why it was refused; "" when usable
    devices: Tuple[Device, ...]
    algorithms: Tuple[str, ...]
    variants: Dict[str, Tuple[str, ...]]  # per algorithm, the default first


@dataclasses.dataclass(frozen=True)
class Info:
    version: str
    library: str
    backends: Tuple[Backend, ...]

    @property
    def usable(self):
        """Names of the backends that can be used."""
        return tuple(b.name for b in self.backends if b.usable)

    def __str__(self):
        lines = ["dakit %s (%s): %d plugin(s) found" % (self.version, self.library, len(self.backends))]
        for b in self.backends:
            lines.append("")
            if not b.usable:
                lines.append("%s refused: %s" % (b.name or "(unnamed)", b.reason))
                lines.append("  file: %s" % b.path)
                continue
            lines.append("%s %s (priority %d): %s" % (b.name, b.version, b.priority, b.path))
            for a in b.algorithms:
                lines.append("  %-7s variants: %s" % (a, ", ".join(b.variants.get(a, ()))))
            for i, d in enumerate(b.devices):
                mem = " (%.1f GiB)" % (d.memory_bytes / 2 ** 30) if d.memory_bytes else ""
                lines.append("  device %d: %s, %s%s" % (i, d.name, d.kind, mem))
        return "\n".join(lines)


def info():
    """What libdakit found: every plugin, usable or refused (with the
    reason), its devices, algorithms and variants."""
    from . import __version__
    backends = []
    for i in range(C.dk_backend_count()):
        b = BackendInfo()
        check(C.dk_backend_get(i, ctypes.byref(b)), None)
        algorithms = tuple(a for a in text(b.algorithms).split(",") if a)
        variants = {}
        for k, a in enumerate(ALGORITHMS):
            v = tuple(x for x in text(b.variants[k]).split(",") if x)
            if v:
                variants[a] = v
        devices = tuple(Device(text(b.devices[d].name), int(b.devices[d].memory_bytes),
                               DEVICE_KINDS.get(b.devices[d].kind, "unknown"))
                        for d in range(min(b.device_count, len(b.devices))))
        backends.append(Backend(text(b.name), text(b.version), text(b.path), int(b.priority), bool(b.usable),
                                text(b.reason), devices, algorithms, variants))
    return Info(__version__, library_path, tuple(backends))
