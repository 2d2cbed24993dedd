"""libdakit through ctypes: finding the library, the C structures, the
function prototypes, and turning a dk_status into an exception.

ctypes.CDLL releases the GIL around every foreign call, so other Python
threads run while a kernel does. The structures mirror core/include/dakit/*.h
field by field; tests/test_layout.py compares them with the C compiler's
layout where a compiler and the headers are at hand.
"""
import ctypes
import glob
import os
import sys
from ctypes import (POINTER, Structure, c_char, c_char_p, c_double, c_float, c_int, c_size_t, c_uint,
                    c_uint8, c_uint64, c_void_p)

from ._errors import raise_status

# ---- the structures (dakit.h, gauss.h, kmeans.h, enkf.h, letkf.h) ----

DK_MAX_DEVICES = 16
DK_MAX_DIMS = 3

# dk_dtype
DK_F32, DK_F64 = 0, 1
# dk_memory_kind
DK_MEMORY_HOST, DK_MEMORY_CUDA, DK_MEMORY_OPENCL = 0, 1, 2
# dk_context_set_queue's flag
DK_QUEUE_ASYNC = 1
# dk_boundary, dk_gauss_mode
BOUNDARIES = {"zero": 0, "constant": 1, "reflect": 2, "mirror": 3, "nearest": 4, "wrap": 5, "cval": 6}
# dk_gauss_method, dk_gauss_nan
GAUSS_METHODS = {"rf": 0, "deriche": 1, "vyv": 2}
GAUSS_NAN = {"error": 0, "propagate": 1, "ignore": 2}
GAUSS_MODES = {"exact": 0, "overlap": 1}
# dk_kmeans_layout
DK_KMEANS_POINT_MAJOR, DK_KMEANS_FEATURE_MAJOR = 0, 1
DK_KMEANS_INIT_GIVEN, DK_KMEANS_INIT_PLUSPLUS, DK_KMEANS_INIT_RANDOM = 0, 1, 2
# dk_device_kind
DEVICE_KINDS = {0: "unknown", 1: "cpu", 2: "gpu", 3: "accelerator"}
# the order of dk_backend_info.variants
ALGORITHMS = ("gauss", "enkf", "kmeans", "gbees", "letkf")
# dk_letkf_metric
LETKF_METRICS = {"cartesian": 0, "sphere": 1}
DK_LETKF_MAX_COORDS = 3


class DeviceInfo(Structure):
    _fields_ = [("name", c_char * 128),
                ("memory_bytes", c_size_t),
                ("kind", c_int)]


class BackendInfo(Structure):
    _fields_ = [("name", c_char * 64),
                ("version", c_char * 32),
                ("path", c_char * 1024),
                ("priority", c_int),
                ("usable", c_int),
                ("reason", c_char * 512),
                ("device_count", c_int),
                ("devices", DeviceInfo * DK_MAX_DEVICES),
                ("algorithms", c_char * 128),
                ("variants", (c_char * 160) * 5),
                ("comm", c_char * 64)]


class Native(Structure):
    _fields_ = [("memory", c_int),
                ("device", c_int),
                ("context", c_void_p),
                ("queue", c_void_p)]


class GaussDesc(Structure):
    _fields_ = [("dtype", c_int),
                ("ndim", c_int),
                ("shape", c_size_t * DK_MAX_DIMS),
                ("axes", c_uint),
                ("sigma", c_double * DK_MAX_DIMS),
                ("K", c_int),
                ("boundary", c_int),
                ("mode", c_int),
                ("overlap", c_size_t),
                ("blocks", c_size_t),
                ("variant", c_char_p),
                ("method", c_int),
                ("order_poles", c_int),
                ("cval", c_double),
                ("order", c_int * DK_MAX_DIMS)]


class KMeansDesc(Structure):
    _fields_ = [("n", c_size_t),
                ("d", c_int),
                ("k", c_int),
                ("max_iters", c_int),
                ("tol", c_double),
                ("layout", c_int),
                ("rows", c_size_t),
                ("cols", c_size_t),
                ("lambda_", c_double),
                ("window", c_int),
                ("variant", c_char_p),
                ("init", c_int),
                ("seed", c_uint64),
                ("trials", c_int)]


class KMeansResult(Structure):
    _fields_ = [("iterations", c_int),
                ("objective", c_double),
                ("last_move", c_double),
                ("valid", c_size_t),
                ("assign_seconds", c_double),
                ("update_seconds", c_double)]


class TextureStats(Structure):
    _fields_ = [("valid", c_size_t),
                ("mean", c_double * 3),
                ("sd", c_double * 3)]


class Radolan(Structure):
    _fields_ = [("product", c_char * 3),
                ("time", c_char * 24),
                ("rows", c_size_t),
                ("cols", c_size_t),
                ("bytes_per_pixel", c_int),
                ("unit", c_char * 8),
                ("header_bytes", c_size_t),
                ("value", POINTER(c_float)),
                ("has_data", POINTER(c_uint8)),
                ("data_pixels", c_size_t),
                ("clutter_pixels", c_size_t),
                ("max_value", c_float)]


class CSR(Structure):
    _fields_ = [("rows", c_size_t),
                ("cols", c_size_t),
                ("indptr", c_void_p),
                ("indices", c_void_p),
                ("values", c_void_p)]


class EnkfDesc(Structure):
    _fields_ = [("dtype", c_int),
                ("n", c_size_t),
                ("members", c_size_t),
                ("loc_ndim", c_int),
                ("nx", c_size_t),
                ("ny", c_size_t),
                ("loc", c_void_p),
                ("H", CSR),
                ("variant", c_char_p)]


class LetkfDesc(Structure):
    _fields_ = [("dtype", c_int),
                ("n", c_size_t),
                ("members", c_size_t),
                ("m", c_size_t),
                ("ncoords", c_int),
                ("metric", c_int),
                ("radius", c_double),
                ("vertical_radius", c_double),
                ("period", c_double * DK_LETKF_MAX_COORDS),
                ("inflation", c_double),
                ("rtpp", c_double),
                ("rtps", c_double),
                ("max_obs", c_size_t),
                ("grid_coords", c_void_p),
                ("obs_coords", c_void_p),
                ("variant", c_char_p)]


# ---- finding libdakit ----

def _candidates():
    """Where libdakit may be, most specific first."""
    explicit = os.environ.get("DAKIT_LIBRARY")
    if explicit:
        yield explicit
        return
    # The wheel: meson-python puts the project's shared libraries (and so the
    # plugins, installed under <libdir>/dakit/plugins) in .dakit.mesonpy.libs
    # at the root of the install. The distribution's file list says where.
    try:
        from importlib import metadata
        files = metadata.files("dakit") or []
        for f in files:
            name = f.name
            if name.startswith("libdakit.so") and ".mesonpy.libs" in str(f):
                yield str(f.locate())
    except Exception:  # no metadata (sources on sys.path): look on the path
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    for root in [os.path.dirname(here)] + sys.path:
        for path in sorted(glob.glob(os.path.join(root or ".", ".dakit.mesonpy.libs", "libdakit.so*"))):
            yield path
    # meson install -Dpython=enabled: libdakit in the system's library path
    yield "libdakit.so.0"


def _load():
    tried = []
    for path in _candidates():
        if path in tried:
            continue
        tried.append(path)
        # RTLD_GLOBAL, as for a program linked to libdakit: a plugin may use
        # libdakit's exported dk_* helpers without linking it (the opencl
        # plugin calls dk_dtype_size), which a local load hides.
        if os.path.exists(path):
            return ctypes.CDLL(path, mode=os.RTLD_GLOBAL | os.RTLD_NOW), path
        if os.sep not in path:  # a bare name: the dynamic loader's search
            try:
                return ctypes.CDLL(path, mode=os.RTLD_GLOBAL | os.RTLD_NOW), path
            except OSError:
                pass
    where = ", ".join(tried) if tried else "nowhere (no installed dakit distribution was found)"
    raise ImportError(
        "dakit: libdakit was not found; looked at " + where + ". Install the package with "
        "'pip install .' from the dakit repository, or set DAKIT_LIBRARY to a libdakit.so")


lib, library_path = _load()


def _proto(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


class _C:
    """The prototypes, one attribute per C function (tests may replace one)."""


C = _C()
_ctx, _buf, _plan = c_void_p, c_void_p, c_void_p
_pctx, _pbuf, _pplan = POINTER(c_void_p), POINTER(c_void_p), POINTER(c_void_p)
for _name, _res, _args in [
    ("dk_status_string", c_char_p, [c_int]),
    ("dk_last_error", c_char_p, [_ctx]),
    ("dk_context_create", c_int, [c_char_p, _pctx]),
    ("dk_context_destroy", None, [_ctx]),
    ("dk_context_backend", c_char_p, [_ctx]),
    ("dk_context_device", c_char_p, [_ctx]),
    ("dk_context_native", c_int, [_ctx, POINTER(Native)]),
    ("dk_context_set_queue", c_int, [_ctx, c_void_p, c_uint]),
    ("dk_context_wait", c_int, [_ctx]),
    ("dk_buffer_create", c_int, [_ctx, c_size_t, _pbuf]),
    ("dk_buffer_wrap", c_int, [_ctx, c_int, c_void_p, c_size_t, _pbuf]),
    ("dk_host_alloc", c_int, [_ctx, c_size_t, POINTER(c_void_p)]),
    ("dk_host_free", None, [_ctx, c_void_p]),
    ("dk_buffer_destroy", None, [_buf]),
    ("dk_buffer_write", c_int, [_buf, c_void_p, c_size_t]),
    ("dk_buffer_read", c_int, [_buf, c_void_p, c_size_t]),
    ("dk_buffer_copy", c_int, [_buf, _buf, c_size_t]),
    ("dk_plan_destroy", None, [_plan]),
    ("dk_backend_count", c_int, []),
    ("dk_backend_get", c_int, [c_int, POINTER(BackendInfo)]),
    # gauss
    ("dk_gauss_desc_init", None, [POINTER(GaussDesc)]),
    ("dk_gauss_plan_set_nan", c_int, [_plan, c_int]),
    ("dk_gauss_plan_create", c_int, [_ctx, POINTER(GaussDesc), _pplan]),
    ("dk_gauss_execute", c_int, [_plan, _buf, _buf]),
    ("dk_gauss_execute_host", c_int, [_plan, c_void_p, c_void_p]),
    ("dk_gauss_variants", POINTER(c_char_p), [_ctx]),
    ("dk_gauss_alpha", c_double, [c_double, c_int]),
    # kmeans
    ("dk_kmeans_desc_init", None, [POINTER(KMeansDesc)]),
    ("dk_kmeans_plan_create", c_int, [_ctx, POINTER(KMeansDesc), _pplan]),
    ("dk_kmeans_variants", POINTER(c_char_p), [_ctx]),
    ("dk_kmeans_execute", c_int, [_plan, _buf, _buf, _buf, _buf, _buf, POINTER(KMeansResult)]),
    ("dk_kmeans_execute_host", c_int, [_plan, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                                       POINTER(KMeansResult)]),
    ("dk_kmeans_execute_weighted", c_int, [_plan, _buf, _buf, _buf, _buf, _buf, _buf, POINTER(KMeansResult)]),
    ("dk_kmeans_execute_host_weighted", c_int, [_plan, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                                                POINTER(KMeansResult)]),
    ("dk_kmeans_check_points", c_int, [POINTER(KMeansDesc), c_void_p, c_void_p, POINTER(c_size_t)]),
    ("dk_kmeans_check_weights", c_int, [POINTER(KMeansDesc), c_void_p, c_void_p]),
    ("dk_kmeans_initial_centroids", c_int, [POINTER(KMeansDesc), c_void_p, c_void_p, c_int, c_void_p]),
    ("dk_kmeans_reference", c_int, [POINTER(KMeansDesc), c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                                    POINTER(KMeansResult)]),
    ("dk_kmeans_texture_planes", c_int, [_plan, _buf, _buf]),
    ("dk_kmeans_texture_features", c_int, [_plan, _buf, _buf, c_double, _buf, _buf, _buf,
                                           POINTER(TextureStats)]),
    # RADOLAN
    ("dk_radolan_read", c_int, [c_char_p, POINTER(Radolan)]),
    ("dk_radolan_free", None, [POINTER(Radolan)]),
    ("dk_radolan_grid_origin", c_int, [c_size_t, c_size_t, POINTER(c_double), POINTER(c_double)]),
    # enkf
    ("dk_enkf_desc_init", None, [POINTER(EnkfDesc)]),
    ("dk_enkf_plan_create", c_int, [_ctx, POINTER(EnkfDesc), _pplan]),
    ("dk_enkf_variants", POINTER(c_char_p), [_ctx]),
    ("dk_enkf_plan_variant", c_char_p, [_plan]),
    ("dk_enkf_cov", c_int, [_plan, _buf, _buf, _buf]),
    ("dk_enkf_cov_host", c_int, [_plan, c_void_p, c_void_p, c_void_p]),
    ("dk_enkf_analysis", c_int, [_plan, _buf, c_void_p, c_void_p, c_uint64, c_double]),
    ("dk_enkf_analysis_host", c_int, [_plan, c_void_p, c_void_p, c_void_p, c_uint64, c_double]),
    ("dk_enkf_perturbations", None, [c_uint64, c_size_t, c_size_t, c_void_p, c_void_p]),
    # letkf
    ("dk_letkf_desc_init", None, [POINTER(LetkfDesc)]),
    ("dk_letkf_plan_create", c_int, [_ctx, POINTER(LetkfDesc), _pplan]),
    ("dk_letkf_variants", POINTER(c_char_p), [_ctx]),
    ("dk_letkf_execute", c_int, [_plan, _buf, _buf, c_void_p, c_void_p, _buf, _buf, _buf]),
    ("dk_letkf_execute_host", c_int, [_plan, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                                      c_void_p]),
    ("dk_letkf_reference", c_int, [POINTER(LetkfDesc), c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                                   c_void_p, c_void_p]),
    ("dk_letkf_departures", c_int, [c_int, c_size_t, c_size_t, c_void_p, c_void_p, c_void_p]),
    ("dk_letkf_interp_grid", c_int, [c_int, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p]),
    ("dk_letkf_execute_interp_host", c_int, [_plan, POINTER(CSR), c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                                             c_void_p]),
    ("dk_letkf_reference_interp", c_int, [POINTER(LetkfDesc), POINTER(CSR), c_void_p, c_void_p, c_void_p,
                                          c_void_p, c_void_p, c_void_p]),
    ("dk_letkf_apply_csr", c_int, [POINTER(CSR), c_int, c_size_t, c_void_p, c_void_p]),
]:
    setattr(C, _name, _proto(_name, _res, *_args))

del _name, _res, _args


def text(raw):
    """A C string (bytes or a char array) as str."""
    if raw is None:
        return ""
    if not isinstance(raw, bytes):
        raw = bytes(raw)
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def last_error(ctx_handle=None):
    return text(C.dk_last_error(ctx_handle))


def check(status, ctx_handle=None):
    """Raises the exception of a failed call, with libdakit's sentence.

    ctx_handle: the context whose calling thread's last error describes the
    failure (None: the thread's last failure of any call)."""
    if status != 0:
        raise_status(status, last_error(ctx_handle))


def string_list(ptr):
    """A NULL-terminated const char *const * as a tuple of str."""
    out = []
    if ptr:
        i = 0
        while ptr[i] is not None:
            out.append(text(ptr[i]))
            i += 1
    return tuple(out)
