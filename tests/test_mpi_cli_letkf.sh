#!/usr/bin/env bash
# dakit letkf under mpirun -n 1..4 (docs/distributed.md, "letkf") on one
# backend, each rank reading and writing only its rows of the points and of
# the observations, against the same command in one process: the headers
# byte for byte, the observation counts (--nobs) byte for byte, the float
# outputs on cpu bit for bit (the ranks' plans bucket the whole network
# alike, so each point sums its observations in one process's order), but
# where Yb comes from --H (each rank sums its points' terms, MPI adds the
# ranks': other rounding) and on other backends within 1e-10 of the largest
# |value| in float64 (the tolerance of tests/test_mpi_letkf.c) and
# 2^-23 + 1e-10 in float32. Inputs: .npy (plane, periodic ring, sphere with
# a vertical and a cap, Yb from --H, float32) and, where ncgen is found, a
# netCDF ensemble (member, y, x) and netCDF yo (read by rows) in and netCDF
# outputs (compared through ncdump -p 9,17). Then a NaN in the last rank's rows of Xb: every
# rank prints the same sentence, exits 1, and leaves no output.
# Arguments: the dakit command, mpirun ("" if none), "yes" when libdakit-mpi
# was built, the backend, and "quick" for the first case at 2 ranks and
# the sphere at 3 only. Skips (77) without MPI or the backend.
dakit=$1 mpirun=$2 have_mpi=$3 backend=$4 quick=${5:-}
if [ "$have_mpi" != yes ]; then echo "skip: libdakit-mpi was not built"; exit 77; fi
if [ -z "$mpirun" ] || ! [ -x "$mpirun" ]; then echo "skip: no mpirun or mpiexec was found"; exit 77; fi
if ! "$dakit" info 2>/dev/null | grep -A30 "^$backend " | grep -q "^  device 0:"; then
    echo "skip: backend $backend has no usable device here (dakit info says why)"; exit 77
fi
exec env DK_TESTS="$(cd "$(dirname "$0")" && pwd)" python3 - "$dakit" "$mpirun" "$backend" "$quick" <<'PY'
import math, os, random, re, shutil, struct, subprocess, sys, tempfile
sys.path.insert(0, os.environ["DK_TESTS"])
import mpi_cli_common as common  # noqa: E402
dakit, mpirun, backend, quick = sys.argv[1:5]
tmp = tempfile.mkdtemp(prefix="mpi-cli-letkf-")
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
P = lambda *n: os.path.join(tmp, *n)
G = lambda n: P("good", n)
os.mkdir(P("good"))
rnd = random.Random(28)

npy, split_npy = common.npy, common.split_npy
tally = common.Tally()
check = tally.check
run_mpi = common.mpi_runner(dakit, mpirun, tmp, env)

# ---- inputs ----
def plane(tag, nx, ny, m, k, period=None):
    grid = [float(v) for i in range(nx) for j in range(ny) for v in (i, j)]
    # sorted along x, as the grid's rows: a rank's observations lie near its points, so it
    # receives its neighbours' blocks only (the observation halo), not every block
    obs = [v for x in sorted(rnd.uniform(0, nx - 1) for _ in range(m)) for v in (x, rnd.uniform(0, ny - 1))]
    npy(G(f"{tag}_grid.npy"), (nx * ny, 2), grid)
    npy(G(f"{tag}_obs.npy"), (m, 2), obs)
    npy(G(f"{tag}_xb.npy"), (nx * ny, k), [rnd.gauss(0, 1) for _ in range(nx * ny * k)])
    npy(G(f"{tag}_yb.npy"), (m, k), [rnd.gauss(0, 1) for _ in range(m * k)])
    npy(G(f"{tag}_yo.npy"), (m,), [rnd.gauss(0, 1) for _ in range(m)])
    npy(G(f"{tag}_r.npy"), (m,), [rnd.uniform(0.3, 1.5) for _ in range(m)])
plane("p", 24, 17, 260, 8)
# a ring observed at every point, H = I in MatrixMarket, Yb formed from it
n_ring, k_ring = 40, 10
npy(G("ring_grid.npy"), (n_ring,), [float(i) for i in range(n_ring)])
npy(G("ring_xb.npy"), (n_ring, k_ring), [rnd.gauss(0, 1) for _ in range(n_ring * k_ring)])
npy(G("ring_yo.npy"), (n_ring,), [rnd.gauss(0, 1) for _ in range(n_ring)])
with open(G("ring_H.mtx"), "w") as f:
    f.write("%%MatrixMarket matrix coordinate real general\n%\n")
    f.write(f"{n_ring} {n_ring} {n_ring}\n" + "".join(f"{i + 1} {i + 1} 1.0\n" for i in range(n_ring)))
# the sphere: 18 x 9 columns of 3 levels, profiles and surface observations
ns, ks = 18 * 9 * 3, 12
sg = [v for lat in range(9) for lon in range(18) for z in range(3) for v in (lon * 20.0, -80.0 + lat * 20.0, z * 1.0)]
so = []
for c in range(30):
    lon, lat = rnd.uniform(0, 360), rnd.uniform(-85, 85)
    so += [v for z in range(3) for v in (lon, lat, z * 1.0)]
for _ in range(110):
    so += [rnd.uniform(0, 360), rnd.uniform(-85, 85), 0.0]
ms = len(so) // 3
npy(G("s_grid.npy"), (ns, 3), sg)
npy(G("s_obs.npy"), (ms, 3), so)
npy(G("s_xb.npy"), (ns, ks), [rnd.gauss(0, 1) for _ in range(ns * ks)])
npy(G("s_yb.npy"), (ms, ks), [rnd.gauss(0, 1) for _ in range(ms * ks)])
npy(G("s_yo.npy"), (ms,), [rnd.gauss(0, 1) for _ in range(ms)])

have_nc = shutil.which("ncgen") and shutil.which("ncdump")
if have_nc:
    # Xb as (member, y, x) in netCDF: the points in the order of p_grid (x along 24, y along 17)
    head, code, raw, xb = split_npy(G("p_xb.npy"))
    k, nx, ny = 8, 24, 17
    vals = [xb[(i * ny + j) * k + l] for l in range(k) for i in range(nx) for j in range(ny)]
    cdl = ("netcdf xb {\ndimensions:\n member = %d ;\n x = %d ;\n y = %d ;\nvariables:\n double T(member, x, y) ;\n"
           "  T:units = \"K\" ;\ndata:\n T = %s ;\n}\n" % (k, nx, ny, ", ".join(repr(v) for v in vals)))
    open(P("xb.cdl"), "w").write(cdl)
    have_nc = subprocess.run(["ncgen", "-4", "-o", G("p_xb.nc"), P("xb.cdl")]).returncode == 0
    yo_vals = split_npy(G("p_yo.npy"))[3]
    open(P("yo.cdl"), "w").write("netcdf yo {\ndimensions:\n obs = %d ;\nvariables:\n double yo(obs) ;\ndata:\n"
                                 " yo = %s ;\n}\n" % (len(yo_vals), ", ".join(repr(v) for v in yo_vals)))
    have_nc = have_nc and subprocess.run(["ncgen", "-4", "-o", G("p_yo.nc"), P("yo.cdl")]).returncode == 0

def p_args(xb="p_xb.npy", yo="p_yo.npy"):
    return ["--xb", xb, "--yb", "p_yb.npy", "--yo", yo, "--r", "p_r.npy", "--grid-coords", "p_grid.npy",
            "--obs-coords", "p_obs.npy"]

cases = [
    ("plane, inflation, all outputs", p_args() + ["--radius", "5", "--inflation", "1.05"],
     ["out", "nobs", "spread", "omb"], "f64", [1, 2, 3, 4]),
    ("plane, f32, RTPS, cap 9", p_args() + ["--radius", "6", "--rtps", "0.5", "--max-obs", "9", "--dtype", "f32"],
     ["out", "nobs"], "f32", [3]),
    ("ring, periodic, Yb from --H, O-A", ["--xb", "ring_xb.npy", "--H", "ring_H.mtx", "--yo", "ring_yo.npy",
     "--r-value", "1", "--grid-coords", "ring_grid.npy", "--obs-coords", "ring_grid.npy", "--radius", "14.56",
     "--period", "40", "--inflation", "1.0816"], ["out", "nobs", "omb", "oma"], "f64", [4]),
    ("sphere, vertical, cap 20, RTPP", ["--xb", "s_xb.npy", "--yb", "s_yb.npy", "--yo", "s_yo.npy", "--r-value",
     "0.5", "--grid-coords", "s_grid.npy", "--obs-coords", "s_obs.npy", "--metric", "sphere", "--radius", "3000",
     "--vertical-radius", "1.5", "--max-obs", "20", "--rtpp", "0.5"], ["out", "nobs", "spread"], "f64", [3]),
]
if have_nc:
    cases.append(("plane, netCDF Xb (member, x, y) and yo, netCDF outputs", p_args("p_xb.nc", "p_yo.nc:yo") + ["--radius", "5"],
                  ["out.nc", "nobs.nc", "spread.npy"], "f64", [3]))
else:
    print("skip netCDF: this dakit reads no netCDF or ncgen/ncdump are missing")

def numbers(path):
    """(header-ish text, values) of an output: .npy split, .nc through ncdump."""
    if path.endswith(".npy"):
        h, c, raw, v = split_npy(path)
        return h, c, raw, v
    text = subprocess.run(["ncdump", "-p", "9,17", path], capture_output=True, text=True).stdout
    # the first line names the file; the history attribute holds the time and command line
    text = "\n".join(l for l in text.splitlines()[1:] if ":history" not in l)
    head, _, data = text.partition("data:")
    vals = [float(x) for x in re.findall(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|NaN)", data)]
    code = "i" if "int nobs" in head else "d"
    return head, code, data.encode(), vals

if quick:
    cases = [(c[0], c[1], c[2], c[3], [2]) for c in cases[:1]] + [c for c in cases if c[0].startswith("sphere")]
b = ["--backend", backend]
for ci, (name, args, outs, kind, ranks) in enumerate(cases):
    def with_outs(prefix):
        a = list(args)
        for o in outs:
            a += ["--" + o.split(".")[0], P(f"{prefix}_{o}" + ("" if "." in o else ".npy"))]
        return a
    p = subprocess.run([dakit, "letkf"] + with_outs(f"ref{ci}") + b, env=env, capture_output=True, text=True,
                       cwd=P("good"))
    if p.returncode != 0 and "netCDF" in name and "netCDF" in p.stderr and "support" in p.stderr:
        print(f"skip {name}: {p.stderr.strip()}")
        continue
    if p.returncode != 0:
        check(f"{name}: the single-process run", False, p.stderr.strip()[-300:])
        continue
    for np in ranks:
        tag = f"c{ci}_{np}"
        rc, texts, rcs = run_mpi(np, ["letkf"] + with_outs(tag) + b, tag)
        what = f"{name} at {np} rank(s)"
        files = [(P(f"ref{ci}_{o}" + ("" if "." in o else ".npy")), P(f"{tag}_{o}" + ("" if "." in o else ".npy")))
                 for o in outs]
        if rc != 0 or rcs != ["0"] * np or not all(os.path.exists(g) for _, g in files):
            check(what, False, f"exit {rcs}: {[t.strip()[-300:] for t in texts]}")
            continue
        details, ok = [], True
        for o, (r_, g_) in zip(outs, files):
            h1, c1, raw1, v1 = numbers(r_)
            h2, c2, raw2, v2 = numbers(g_)
            same = h1 == h2 and raw1 == raw2
            if c1 == "i":
                good, err, tol = same, 0.0 if same else 1.0, 0.0
            else:
                scale = max([abs(v) for v in v1] + [1e-300])
                err = max((abs(a - bb) for a, bb in zip(v1, v2)), default=0.0) / scale
                tol = 1e-10 if kind == "f64" or o.startswith("om") else 2.0 ** -23 + 1e-10
                if backend == "cpu" and "--H" not in args:
                    tol = 0.0
                good = h1 == h2 and len(v1) == len(v2) and err <= tol
            ok = ok and good
            details.append(f"{o}: header {'same' if h1 == h2 else 'DIFFERS'}, "
                           f"{'bytes identical' if same else f'error {err:.3g} (tolerance {tol:.3g})'}")
        check(what, ok, "; ".join(details))
        check(what + ": no temporary file left", not [f for f in os.listdir(tmp) if ".tmp-" in f])

# ---- a NaN in the last rank's rows of Xb ----
os.mkdir(P("bad"))
for f in os.listdir(P("good")):
    shutil.copy(G(f), P("bad", f))
vals = list(split_npy(G("p_xb.npy"))[3])
vals[-3] = float("nan")
npy(P("bad", "p_xb.npy"), (24 * 17, 8), vals)
for np in (3,):
    out = P(f"bad_{np}.npy")
    rc, texts, rcs = run_mpi(np, ["letkf"] + p_args() + ["--radius", "5", "--out", out] + b, f"bad_{np}", P("bad"))
    lines = [t.strip().splitlines()[-1] if t.strip() else "" for t in texts]
    want = f"value {24 * 17 * 8 - 3} is nan"
    ok = (all(l == lines[0] for l in lines) and lines[0].startswith("dakit letkf: ") and want in lines[0]
          and rcs == ["1"] * np and not os.path.exists(out) and not [f for f in os.listdir(tmp) if ".tmp-" in f])
    check(f"a NaN in the last rank's Xb rows at {np} ranks: every rank exits 1 with the same sentence, no output",
          ok, f"exit {rcs}: {lines}")
print(f"{tally.fails} failure(s)")
sys.exit(1 if tally.fails else 0)
PY
