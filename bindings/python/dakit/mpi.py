"""dakit.mpi: the distributed layer (libdakit-mpi) from mpi4py.

Each rank of an MPI job passes its own part: the grid points it owns
(its rows of xb and their coordinates) and the observations it holds (its
rows of yb, yo, obs_var and their coordinates). Every point is analysed
with every observation within the radius, whichever rank holds it; the
result equals the single-process :func:`dakit.letkf` on the whole problem
to the rounding of the order in which each point's observations are
summed (docs/distributed.md, "letkf").

    from mpi4py import MPI
    import dakit.mpi
    xa = dakit.mpi.letkf(MPI.COMM_WORLD, xb_mine, yb_mine, yo_mine, r_mine,
                         grid_mine, obs_mine, radius=300.0, metric="sphere")

The communicator travels to C as its handle (``MPI._handleof(comm)``, an
``MPI_Comm`` of the size ``MPI._sizeof(MPI.Comm)`` says), so mpi4py and
libdakit-mpi must use the same MPI library: this module compares their
``MPI_Get_library_version`` strings and refuses a mismatch. mpi4py's wheel
from ``pip install mpi4py`` (which loads the system's Open MPI or MPICH at
run time) is what the tests use.
"""
import ctypes
import glob
import os
from ctypes import POINTER, c_char_p, c_double, c_int, c_void_p

import numpy as np

from ._errors import invalid, raise_status
from ._letkf import LetkfDiagnostics, _DTYPES, _departures, _desc, _ensemble, _letkf_dtype, _obs
from ._arrays import empty_like, operand
from ._context import Closing, context_for
from ._native import LetkfDesc, library_path

__all__ = ["LetkfPlan", "letkf", "letkf_balance", "available"]

_lib = None
_why = None


def _load():
    """libdakit-mpi beside libdakit (a wheel, an install), else by name."""
    global _lib, _why
    if _lib is not None or _why is not None:
        return _lib
    here = os.path.dirname(library_path) if library_path and os.sep in library_path else None
    tried = sorted(glob.glob(os.path.join(here, "libdakit-mpi.so*"))) if here else []
    tried += [os.path.join(here, "distributed", "libdakit-mpi.so")] if here else []  # a build folder
    tried += ["libdakit-mpi.so"]
    errors = []
    for path in tried:
        if os.sep in path and not os.path.exists(path):
            continue
        try:
            _lib = ctypes.CDLL(path, mode=os.RTLD_GLOBAL | os.RTLD_NOW)
            break
        except OSError as e:
            errors.append("%s: %s" % (path, e))
    if _lib is None:
        _why = ("libdakit-mpi was not found beside %s (dakit was built without MPI, or the MPI library it needs "
                "cannot be loaded)%s" % (library_path, ": " + "; ".join(errors) if errors else ""))
    return _lib


def available():
    """(True, "") where libdakit-mpi loads, else (False, the reason)."""
    return (_load() is not None, _why or "")


def _lib_or_raise(who):
    lib = _load()
    if lib is None:
        raise invalid("%s: %s" % (who, _why))
    return lib


def _comm_handle(comm, who):
    """The MPI_Comm of an mpi4py communicator, as a ctypes value of its size,
    after checking that mpi4py's MPI library is libdakit-mpi's."""
    try:
        from mpi4py import MPI
    except ImportError:
        raise invalid("%s: mpi4py is not installed; dakit.mpi takes an mpi4py communicator" % who) from None
    if not isinstance(comm, MPI.Comm):
        raise invalid("%s: comm must be an mpi4py communicator (MPI.Comm), not %s" % (who, type(comm).__name__))
    if comm == MPI.COMM_NULL:
        raise invalid("%s: comm is MPI.COMM_NULL" % who)
    lib = _lib_or_raise(who)
    buf = ctypes.create_string_buffer(8192)
    n = c_int(0)
    try:
        version = lib.MPI_Get_library_version
    except AttributeError:
        version = None
    if version is not None and version(buf, ctypes.byref(n)) == 0:
        ours = buf.value.decode(errors="replace").strip("\0 \n")
        theirs = MPI.Get_library_version().strip("\0 \n")
        if ours.split("\n")[0] != theirs.split("\n")[0]:
            raise invalid("%s: mpi4py uses %r but libdakit-mpi uses %r; build mpi4py against the same MPI "
                          "(its wheel loads the system's MPI; or pip install --no-binary mpi4py mpi4py with that MPI's mpicc)"
                          % (who, theirs.split("\n")[0], ours.split("\n")[0]))
    # an int (MPICH and its ABI) or a pointer (Open MPI)
    ctype = c_int if MPI._sizeof(MPI.Comm) == ctypes.sizeof(c_int) else c_void_p
    return ctype(MPI._handleof(comm)), ctype


def _last_error(lib):
    lib.dk_mpi_last_error.restype = c_char_p
    lib.dk_mpi_last_error.argtypes = []
    e = lib.dk_mpi_last_error()
    return e.decode(errors="replace") if e else ""


def _check(lib, status):
    if status != 0:
        raise_status(status, _last_error(lib))


class LetkfPlan(Closing):
    """A distributed LETKF analysis (``dk_mpi_letkf_*``) on this rank's
    points and observations, executed many times.

    Made collectively on every rank of comm, with the arguments of
    :class:`dakit.LetkfPlan` but that grid_coords and obs_coords are this
    rank's (either may have no rows), and every other argument the same on
    every rank (checked). Close it on every rank (``close()`` or a ``with``
    block), which frees its duplicate of comm.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The ranks that share the analysis.
    grid_coords, obs_coords, radius, members, dtype, inflation, rtpp, rtps,
    max_obs, metric, period, vertical_radius, variant, backend
        As :class:`dakit.LetkfPlan`, for this rank's part.

    Attributes
    ----------
    n, m : int
        This rank's points and observations.
    transport : str
        How the observation halo crosses ranks (``dk_mpi_plan_transport``):
        "device (nccl)", or "host (MPI): " and the reason.
    """

    def __init__(self, comm, grid_coords, obs_coords, radius, members, *, dtype=np.float64, inflation=1.0,
                 rtpp=0.0, rtps=0.0, max_obs=None, metric="cartesian", period=None, vertical_radius=None,
                 variant=None, backend=None):
        who = "dakit.mpi.LetkfPlan"
        self._handle = None
        lib = _lib_or_raise(who)
        handle, ctype = _comm_handle(comm, who)
        self.dtype = _letkf_dtype(dtype, who)
        d, keep = _desc(grid_coords, obs_coords, radius, members, self.dtype, inflation, rtpp, rtps, max_obs,
                        metric, period, vertical_radius, variant, who)
        self._lib, self._ctx = lib, context_for(backend)
        lib.dk_mpi_letkf_plan_create.restype = c_int
        lib.dk_mpi_letkf_plan_create.argtypes = [c_void_p, ctype, POINTER(LetkfDesc), POINTER(c_void_p)]
        h = c_void_p()
        # collective: every rank returns the same status and sentence
        _check(lib, lib.dk_mpi_letkf_plan_create(self._ctx.handle, handle, ctypes.byref(d), ctypes.byref(h)))
        del keep  # the plan copied the coordinates
        self._handle = h
        self.n, self.m, self.members = int(d.n), int(d.m), int(d.members)
        lib.dk_mpi_plan_transport.restype = c_char_p
        lib.dk_mpi_plan_transport.argtypes = [c_void_p]
        self.transport = lib.dk_mpi_plan_transport(h).decode(errors="replace")

    def analysis(self, xb, yb, yo, obs_var, out=None, return_diagnostics=False):
        """This rank's analysis ensemble; collective.

        Parameters
        ----------
        xb : numpy.ndarray, shape (n, members)
            This rank's rows of the background ensemble, of the plan's dtype.
        yb : numpy.ndarray, shape (m, members)
            This rank's observations' rows of H(xb).
        yo, obs_var : array_like, shape (m,) (obs_var may be one number)
            This rank's observations and their error variances.
        out : numpy.ndarray or None
            None: a new array; xb: in place; or another (n, members) array.
        return_diagnostics : bool
            True: return ``(xa, LetkfDiagnostics)`` for this rank's points and
            observations.
        """
        who = "dakit.mpi.LetkfPlan.analysis"
        if self._handle is None:
            raise invalid("%s: this plan was closed" % who)
        xo = _ensemble(xb, "xb", self.n, self.members, self.dtype, who)
        bo = _ensemble(yb, "yb", self.m, self.members, self.dtype, who)
        if xo.device or bo.device:
            raise invalid("%s: dakit.mpi takes host (NumPy) arrays" % who)
        yo, r = _obs(yo, obs_var, self.m, who)
        if out is None:
            out = empty_like(xo)
        oo = _ensemble(out, "out", self.n, self.members, self.dtype, who, writable=True)
        if oo.device:
            raise invalid("%s: dakit.mpi takes host (NumPy) arrays" % who)
        if xo.overlaps(oo) and not xo.same_memory(oo):
            raise invalid("%s: out overlaps xb without being xb; pass out=xb for an analysis in place" % who)
        if bo.overlaps(oo):
            raise invalid("%s: out overlaps yb; the analysis reads yb while it writes out" % who)
        nobs = np.empty(self.n, dtype=np.int32) if return_diagnostics else None
        spread = np.empty(self.n, dtype=np.float64) if return_diagnostics else None
        lib = self._lib
        lib.dk_mpi_letkf_execute_host.restype = c_int
        lib.dk_mpi_letkf_execute_host.argtypes = [c_void_p, c_void_p, c_void_p, POINTER(c_double),
                                                  POINTER(c_double), c_void_p, c_void_p, c_void_p]
        pd = POINTER(c_double)
        _check(lib, lib.dk_mpi_letkf_execute_host(
            self._handle, xo.ptr, bo.ptr, yo.ctypes.data_as(pd), r.ctypes.data_as(pd), oo.ptr,
            None if nobs is None else nobs.ctypes.data, None if spread is None else spread.ctypes.data))
        if not return_diagnostics:
            return oo.obj
        omb = _departures(self.dtype, np.ascontiguousarray(bo.obj), yo, self.members)
        return oo.obj, LetkfDiagnostics(nobs, spread, omb)

    def close(self):
        """Frees the plan (collective: call it on every rank)."""
        h, self._handle = self._handle, None
        if h is not None:
            self._lib.dk_mpi_plan_destroy.restype = None
            self._lib.dk_mpi_plan_destroy.argtypes = [c_void_p]
            self._lib.dk_mpi_plan_destroy(h)

    def __repr__(self):
        return "dakit.mpi.LetkfPlan(n=%d, m=%d, members=%d, dtype=%s, transport=%r)" % (
            self.n, self.m, self.members, self.dtype.name, getattr(self, "transport", ""))


def letkf(comm, xb, yb, yo, obs_var, grid_coords, obs_coords, radius, *, inflation=1.0, rtpp=0.0, rtps=0.0,
          max_obs=None, metric="cartesian", period=None, vertical_radius=None, variant=None, backend=None, out=None,
          return_diagnostics=False):
    """One distributed LETKF analysis: :func:`dakit.letkf`'s arguments for
    this rank's points (xb's rows, grid_coords) and observations (yb's rows,
    yo, obs_var, obs_coords), collectively on every rank of comm.

    Returns this rank's rows of the analysis ensemble (and the diagnostics
    of its points and observations with return_diagnostics).
    """
    who = "dakit.mpi.letkf"
    xo = operand(xb, "xb", who, _DTYPES)
    if len(xo.shape) != 2:
        raise invalid("%s: xb has shape %s; it must be (points of this rank, members)" % (who, xo.shape))
    with LetkfPlan(comm, grid_coords, obs_coords, radius, xo.shape[1], dtype=xo.dtype, inflation=inflation,
                   rtpp=rtpp, rtps=rtps, max_obs=max_obs, metric=metric, period=period,
                   vertical_radius=vertical_radius, variant=variant, backend=backend) as plan:
        return plan.analysis(xb, yb, yo, obs_var, out=out, return_diagnostics=return_diagnostics)


def letkf_balance(comm, grid_coords, obs_coords, radius, members, *, max_obs=None, metric="cartesian", period=None,
                  vertical_radius=None):
    """Points assigned by cost (``dk_mpi_letkf_balance``), collectively:
    for each of this rank's points the rank that should analyse it, so that
    every rank gets about the same work where observations crowd some
    ranks' points. Returns ``(owner, cost)``: int32 and float64 arrays of
    this rank's points (owner non-decreasing along the ranks' order)."""
    who = "dakit.mpi.letkf_balance"
    lib = _lib_or_raise(who)
    handle, ctype = _comm_handle(comm, who)
    d, keep = _desc(grid_coords, obs_coords, radius, members, np.float64, 1.0, 0.0, 0.0, max_obs, metric, period,
                    vertical_radius, None, who)
    owner = np.empty(int(d.n), dtype=np.int32)
    cost = np.empty(int(d.n), dtype=np.float64)
    lib.dk_mpi_letkf_balance.restype = c_int
    lib.dk_mpi_letkf_balance.argtypes = [ctype, POINTER(LetkfDesc), c_void_p, c_void_p]
    _check(lib, lib.dk_mpi_letkf_balance(handle, ctypes.byref(d), owner.ctypes.data, cost.ctypes.data))
    del keep
    return owner, cost
