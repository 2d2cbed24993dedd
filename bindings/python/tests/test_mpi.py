"""dakit.mpi under mpirun -n 2: the distributed LETKF from mpi4py against
dakit.letkf on the whole problem, dakit.mpi.letkf_balance against the
analysis's observation counts, and a bad argument on one rank giving the
same error on both. Skips without mpi4py, mpirun or libdakit-mpi."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(r"""
    import sys
    import numpy as np
    from mpi4py import MPI
    import dakit, dakit.mpi

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    rng = np.random.default_rng(28)
    nx, ny, m, k = 30, 20, 400, 10
    grid = np.array([(i, j) for i in range(nx) for j in range(ny)], dtype=np.float64)
    obs = np.column_stack([np.sort(rng.uniform(0, nx - 1, m)), rng.uniform(0, ny - 1, m)])
    xb = rng.standard_normal((nx * ny, k))
    yb = rng.standard_normal((m, k))
    yo = rng.standard_normal(m)
    r = rng.uniform(0.3, 1.5, m)
    opts = dict(inflation=1.05, max_obs=30, backend="cpu")
    ref, rd = dakit.letkf(xb, yb, yo, r, grid, obs, 5.0, return_diagnostics=True, **opts)
    # contiguous slabs of points, observations dealt round robin
    p0, p1 = len(grid) * rank // size, len(grid) * (rank + 1) // size
    mine = np.arange(m) % size == rank
    xa, d = dakit.mpi.letkf(comm, xb[p0:p1], yb[mine], yo[mine], r[mine], grid[p0:p1], obs[mine], 5.0,
                            return_diagnostics=True, **opts)
    err = np.max(np.abs(xa - ref[p0:p1])) / np.max(np.abs(ref))
    same_counts = bool(np.array_equal(d.nobs, rd.nobs[p0:p1]))
    with dakit.mpi.LetkfPlan(comm, grid[p0:p1], obs[mine], 5.0, k, **opts) as plan:
        xa2 = plan.analysis(xb[p0:p1], yb[mine], yo[mine], r[mine])
        transport = plan.transport
    owner, cost = dakit.mpi.letkf_balance(comm, grid[p0:p1], obs[mine], 5.0, k, max_obs=30)
    want = np.where(rd.nobs[p0:p1] > 0, rd.nobs[p0:p1] + 5.5 * k, 1.0)
    balance_ok = bool(np.array_equal(cost, want)) and bool(np.all(np.diff(owner) >= 0))
    # a radius that differs on the last rank: every rank raises the same sentence
    try:
        dakit.mpi.LetkfPlan(comm, grid[p0:p1], obs[mine], 5.0 if rank < size - 1 else 6.0, k, backend="cpu")
        said = "no error"
    except dakit.InvalidArgumentError as e:
        said = str(e)
    said_all = comm.allgather(said)
    ok = comm.allreduce(int(err <= 1e-10 and same_counts and np.array_equal(xa, xa2) and balance_ok), op=MPI.MIN)
    if rank == 0:
        print("error %.3g, counts %s, balance %s, transport %s" % (err, same_counts, balance_ok, transport))
        print("bad radius:", said_all)
        same = len(set(said_all)) == 1 and "differs from rank 0" in said_all[0]
        print("RESULT", "ok" if ok and same else "FAILED")
""")


def test_mpi_letkf_two_ranks(tmp_path):
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (bindings/python/run-tests installs it)")
    import dakit.mpi
    have, why = dakit.mpi.available()
    if not have:
        pytest.skip(why)
    mpirun = shutil.which("mpirun") or shutil.which("mpiexec")
    if not mpirun:
        pytest.skip("no mpirun or mpiexec on the path")
    script = tmp_path / "letkf_mpi.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    p = subprocess.run([mpirun, "-n", "2", "--oversubscribe", sys.executable, str(script)], env=env,
                       capture_output=True, text=True, timeout=240)
    print(p.stdout, p.stderr)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "RESULT ok" in p.stdout, p.stdout


def test_mpi_comm_checked():
    mpi4py = pytest.importorskip("mpi4py", reason="mpi4py is not installed")
    import dakit
    import dakit.mpi
    have, why = dakit.mpi.available()
    if not have:
        pytest.skip(why)
    with pytest.raises(dakit.InvalidArgumentError, match="mpi4py communicator"):
        dakit.mpi.LetkfPlan(object(), [[0.0]], [[0.0]], 1.0, 4)
    del mpi4py
