#!/usr/bin/env bash
# dakit enkf cov, enkf analysis, kmeans --in and kmeans --radolan (the radar
# pipeline on row bands) under mpirun -n 1..4 (docs/distributed.md,
# "Command line") on one backend, each rank reading and
# writing only its rows, checked against the same command in one process:
# the same header bytes, integer outputs (labels) byte for byte, float
# outputs within the layer's tolerance (enkf float64 1e-12 of the largest
# value, float32 64 eps; kmeans centroids 1e-5 of max(1, |c|); the radar
# labels byte for byte, no tolerance), and whether
# the bytes are all equal is printed; then a bad input visible to the last
# rank only (each rank runs in its own folder, the inputs named relative to
# it) giving every rank the same sentence, exit status 1, and no output.
# Arguments: the dakit command, mpirun ("" if none), "yes" when libdakit-mpi
# was built, the backend. Skips (77) without MPI or the backend. The RADOLAN
# composite is tests/data's, found beside this script.
dakit=$1 mpirun=$2 have_mpi=$3 backend=$4
if [ "$have_mpi" != yes ]; then echo "skip: libdakit-mpi was not built"; exit 77; fi
if [ -z "$mpirun" ] || ! [ -x "$mpirun" ]; then echo "skip: no mpirun or mpiexec was found"; exit 77; fi
if ! "$dakit" info 2>/dev/null | grep -A30 "^$backend " | grep -q "^  device 0:"; then
    echo "skip: backend $backend has no usable device here (dakit info says why)"; exit 77
fi
radolan=$(cd "$(dirname "$0")" && pwd)/data/raa01-rx_10000-1408102050-dwd---bin.gz
exec env DK_TESTS="$(cd "$(dirname "$0")" && pwd)" python3 - "$dakit" "$mpirun" "$backend" "$radolan" <<'PY'
import math, os, random, shutil, struct, subprocess, sys, tempfile
sys.path.insert(0, os.environ["DK_TESTS"])
import mpi_cli_common as common  # noqa: E402
dakit, mpirun, backend, radolan = sys.argv[1:5]
tmp = tempfile.mkdtemp(prefix="mpi-cli-algos-")
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
P = lambda *n: os.path.join(tmp, *n)

npy, split_npy = common.npy, common.split_npy
tally = common.Tally()
check = tally.check
run_mpi = common.mpi_runner(dakit, mpirun, tmp, env)

def mtx(path, rows, cols, entries):
    with open(path, "w") as f:
        f.write("%%MatrixMarket matrix coordinate real general\n%\n")
        f.write(f"{rows} {cols} {len(entries)}\n")
        for i, j, v in entries:
            f.write(f"{i + 1} {j + 1} {v!r}\n")

# ---- inputs, in tmp/good ----
os.mkdir(P("good"))
G = lambda n: P("good", n)
rnd = random.Random(13)
N, L, M = 67, 6, 9
nx, ny = 9, 8  # a 2-D c: N2 = 72 points
N2 = nx * ny
npy(G("E.npy"), (N, L), [rnd.uniform(-1, 1) for _ in range(N * L)])
npy(G("E2.npy"), (N2, L), [rnd.uniform(-1, 1) for _ in range(N2 * L)])
npy(G("c.npy"), (N,), [max(0.0, 1 - d / 7.0) for d in range(N)])  # compact support: 7 points
npy(G("c2.npy"), (nx, ny), [max(0.0, 1 - math.hypot(i, j) / 3.5) for i in range(nx) for j in range(ny)])
def H_of(n):
    e = []
    for j in range(M):
        for _ in range(3):
            e.append((j, rnd.randrange(n), rnd.uniform(0.5, 1.5)))
    return e
mtx(G("H.mtx"), M, N, H_of(N))
mtx(G("H2.mtx"), M, N2, H_of(N2))
npy(G("y.npy"), (M,), [rnd.uniform(-1, 1) for _ in range(M)])
npy(G("r.npy"), (M,), [rnd.uniform(0.2, 0.6) for _ in range(M)])
npts, d = 403, 3
X = []
for i in range(npts):
    cl = i % 4
    X += [cl * 2.0 + rnd.gauss(0, 0.4), rnd.gauss(cl, 0.5), rnd.uniform(-1, 1)]
npy(G("X.npy"), (npts, d), X, "<f4")
npy(G("C0.npy"), (4, d), [X[i * d + f] for i in (0, 1, 2, 3) for f in range(d)], "<f4")
shutil.copy(radolan, G("radar.gz"))

# ---- results against one process ----
b = ["--backend", backend]
cases = [
    # (name, command args (outputs given as OUT/ OUT2 placeholders), outputs, dtype of compute, ranks, decomp)
    ("enkf cov 1-D c", ["enkf", "cov", "--ens", "E.npy", "--loc", "c.npy", "--H", "H.mtx", "--out", "OUT",
                        "--hpht", "OUT2"], "f64", [1, 2, 3, 4], [None]),
    ("enkf cov 1-D c f32", ["enkf", "cov", "--ens", "E.npy", "--loc", "c.npy", "--H", "H.mtx", "--out", "OUT",
                            "--dtype", "f32"], "f32", [2, 3], [None]),
    ("enkf cov 2-D c", ["enkf", "cov", "--ens", "E2.npy", "--loc", "c2.npy", "--H", "H2.mtx", "--out", "OUT",
                        "--hpht", "OUT2"], "f64", [2, 4], [None, "2x1", "1x2", "2x2"]),
    ("enkf analysis 1-D c", ["enkf", "analysis", "--ens", "E.npy", "--loc", "c.npy", "--H", "H.mtx", "--obs",
                             "y.npy", "--obs-var", "r.npy", "--seed", "42", "--inflation", "1.05", "--out", "OUT"],
     "f64", [1, 2, 3, 4], [None]),
    ("enkf analysis 2-D c", ["enkf", "analysis", "--ens", "E2.npy", "--loc", "c2.npy", "--H", "H2.mtx", "--obs",
                             "y.npy", "--obs-var", "r.npy", "--seed", "7", "--out", "OUT"], "f64", [3, 4],
     [None, "2x2"]),
    ("kmeans --in", ["kmeans", "--in", "X.npy", "--k", "4", "--iters", "30", "--labels", "OUT",
                     "--centroids", "OUT2"], "kmeans", [1, 2, 3, 4], [None]),
    ("kmeans --in --init", ["kmeans", "--in", "X.npy", "--k", "4", "--init", "C0.npy", "--tol", "1e-6",
                            "--labels", "OUT", "--centroids", "OUT2"], "kmeans", [2, 4], [None]),
    # the 900 x 900 composite; bands of 900 / P rows, halos of the texture's gauss and the window
    ("kmeans --radolan", ["kmeans", "--radolan", "radar.gz", "--labels", "OUT"], "kmeans", [1, 2, 3], [None]),
    ("kmeans --radolan, window 11", ["kmeans", "--radolan", "radar.gz", "--k", "9", "--window", "11", "--lambda",
                                     "0.5", "--texture-sigma", "1.3", "--iters", "30", "--labels", "OUT"],
     "kmeans", [2, 4], [None]),
]
for ci, (name, args, kind, ranks, decomps) in enumerate(cases):
    outs = [a for a in args if a in ("OUT", "OUT2")]
    ref = [P(f"ref{ci}_{o}.npy") for o in outs]
    sub = lambda paths: [paths[outs.index(a)] if a in outs else a for a in args]
    p = subprocess.run([dakit] + sub(ref) + b, env=env, capture_output=True, text=True, cwd=P("good"))
    if p.returncode != 0:
        check(f"{name}: the single-process run", False, p.stderr.strip()[-300:])
        continue
    for np in ranks:
        for dc in decomps:
            if dc and math.prod(int(v) for v in dc.split("x")) != np:
                continue
            tag = f"c{ci}_{np}_{dc or 'default'}"
            got = [P(f"{tag}_{o}.npy") for o in outs]
            what = f"{name} at {np} rank(s)" + (f" --decomp {dc}" if dc else "")
            rc, texts, rcs = run_mpi(np, sub(got) + b + (["--decomp", dc] if dc else []), tag)
            if rc != 0 or rcs != ["0"] * np or not all(os.path.exists(g) for g in got):
                check(what, False, f"exit {rcs}: {[t.strip()[-200:] for t in texts]}")
                continue
            details, ok = [], True
            for o, r_, g_ in zip(outs, ref, got):
                h1, c1, raw1, v1 = split_npy(r_)
                h2, c2, raw2, v2 = split_npy(g_)
                same_bytes = h1 == h2 and raw1 == raw2
                if c1 == "i":
                    good = same_bytes
                    err = 0.0 if good else 1.0
                    tol = 0.0
                elif kind == "kmeans":
                    err = max((abs(a - bb) / max(1.0, abs(a)) for a, bb in zip(v1, v2)), default=0.0)
                    tol = 1e-5
                    good = h1 == h2 and len(v1) == len(v2)
                else:
                    scale = max([abs(v) for v in v1] + [1e-300])
                    err = max((abs(a - bb) for a, bb in zip(v1, v2)), default=0.0) / scale
                    tol = 1e-12 if kind == "f64" else 64 * 2.0 ** -24
                    good = h1 == h2 and len(v1) == len(v2)
                good = good and err <= tol
                ok = ok and good
                details.append(f"{o}: header {'same' if h1 == h2 else 'DIFFERS'}, "
                               f"{'bytes identical' if same_bytes else f'error {err:.3g} (tolerance {tol:.3g})'}")
            check(what, ok, "; ".join(details))
            check(what + ": no temporary file left", not [f for f in os.listdir(tmp) if ".tmp-" in f])

# ---- a bad input visible to the last rank only ----
os.mkdir(P("bad"))
for f in os.listdir(P("good")):
    shutil.copy(G(f), P("bad", f))
# the ensemble with a NaN in the last row (the last rank's), X.npy cut short
vals = list(split_npy(G("E.npy"))[3])
vals[(N - 1) * L + 2] = float("nan")
npy(P("bad", "E.npy"), (N, L), vals)
raw = open(G("X.npy"), "rb").read()
open(P("bad", "X.npy"), "wb").write(raw[:len(raw) - 40])
raw = open(G("radar.gz"), "rb").read()
open(P("bad", "radar.gz"), "wb").write(raw[:len(raw) // 2])
bad = [
    ("enkf cov, a NaN in the last rank's rows",
     ["enkf", "cov", "--ens", "E.npy", "--loc", "c.npy", "--H", "H.mtx"], "is not finite", "dakit enkf: "),
    ("enkf analysis, a NaN in the last rank's rows",
     ["enkf", "analysis", "--ens", "E.npy", "--loc", "c.npy", "--H", "H.mtx", "--obs", "y.npy", "--obs-var",
      "r.npy", "--seed", "1"], "is not finite", "dakit enkf: "),
    ("kmeans, X.npy cut short on the last rank", ["kmeans", "--in", "X.npy", "--k", "4", "--centroids", "OUT2"],
     "X.npy", "dakit kmeans: "),
    ("kmeans --radolan, the file cut short on the last rank",
     ["kmeans", "--radolan", "radar.gz", "--labels", "OUT2"], "radar.gz is corrupt or truncated", "dakit kmeans: "),
]
for j, (what, args, needle, prefix) in enumerate(bad):
    for np in (2, 3):
        out, out2 = P(f"bad{j}_{np}.npy"), P(f"bad{j}_{np}_b.npy")
        a = [out2 if x == "OUT2" else x for x in args]
        if "OUT2" not in args:
            a += ["--out", out]
        rc, texts, rcs = run_mpi(np, a + b, f"bad{j}_{np}", P("bad"))
        lines = [t.strip().splitlines()[-1] if t.strip() else "" for t in texts]
        ok = (all(l == lines[0] for l in lines) and lines[0].startswith(prefix) and needle in lines[0]
              and rcs == ["1"] * np and not os.path.exists(out) and not os.path.exists(out2)
              and not [f for f in os.listdir(tmp) if ".tmp-" in f])
        check(f"{what} at {np} ranks: every rank exits 1 with the same sentence, no output", ok,
              f"exit {rcs}: {lines}")
# ---- issue 30 (cpu only: the command's logic, not the backend's) ----
if backend == "cpu":
    # ranks whose node-local copies differ from rank 0's: every rank stops
    # with the same sentence, none waits in a collective
    npy(G("g.npy"), (16, 12), [rnd.uniform(-1, 1) for _ in range(16 * 12)], "<f4")
    def diff_dir(j):  # the last rank's folder: the good files but one
        os.mkdir(P(f"diff{j}"))
        for f in os.listdir(P("good")):
            shutil.copy(G(f), P(f"diff{j}", f))
        return lambda n: P(f"diff{j}", n)
    D = diff_dir(0)
    npy(D("X.npy"), (3, d), X[:3 * d], "<f4")  # fewer points than --k on the last rank alone
    D = diff_dir(1)
    npy(D("C0.npy"), (4, d), [v + 1.0 for v in split_npy(G("C0.npy"))[3]], "<f4")
    D = diff_dir(2)
    import gzip
    raw = bytearray(gzip.open(radolan).read())
    at = len(raw) - 900 * 450  # a pixel in the middle of the 900 x 900 bytes: another valid value
    raw[at] = 100 if raw[at] != 100 else 101
    with gzip.open(D("radar.gz"), "wb") as f:
        f.write(bytes(raw))
    D = diff_dir(3)
    npy(D("g.npy"), (12, 16), [rnd.uniform(-1, 1) for _ in range(16 * 12)], "<f4")
    D = diff_dir(4)
    cvals = list(split_npy(G("c.npy"))[3])
    cvals[3] = 0.5
    npy(D("c.npy"), (N,), cvals)
    differ = [
        ("kmeans --in, the last rank's X.npy holds 3 points", ["kmeans", "--in", "X.npy", "--k", "4", "--labels", "OUT"],
         "but rank 0's is float32 (403, 3)"),
        ("kmeans --init, the last rank's C0.npy differs", ["kmeans", "--in", "X.npy", "--k", "4", "--init", "C0.npy",
                                                           "--labels", "OUT"], "C0.npy differs from rank 0's"),
        ("kmeans --radolan, the last rank's composite differs in one pixel",
         ["kmeans", "--radolan", "radar.gz", "--labels", "OUT"], "radar.gz differs from rank 0's"),
        ("gauss, the last rank's g.npy is 12 x 16", ["gauss", "--in", "g.npy", "--sigma", "2", "--out", "OUT"],
         "but rank 0's is float32 (16, 12)"),
        ("enkf cov, the last rank's c.npy differs in one value",
         ["enkf", "cov", "--ens", "E.npy", "--loc", "c.npy", "--H", "H.mtx", "--out", "OUT"], "c.npy differs from rank 0's"),
    ]
    for j, (what, args, needle) in enumerate(differ):
        for np in (2, 3):
            out = P(f"differ{j}_{np}.npy")
            try:
                rc, texts, rcs = run_mpi(np, [out if a == "OUT" else a for a in args] + b, f"differ{j}_{np}", P(f"diff{j}"),
                                         timeout=90)
            except subprocess.TimeoutExpired:
                check(f"{what} at {np} ranks: no hang", False, "mpirun did not end within 90 s")
                continue
            lines = [t.strip().splitlines()[-1] if t.strip() else "" for t in texts]
            ok = all(l == lines[0] for l in lines) and needle in lines[0] and rcs == ["1"] * np and not os.path.exists(out)
            check(f"{what} at {np} ranks: every rank exits 1 with the same sentence, no output", ok,
                  f"exit {rcs}: {lines}")

    # netCDF in and out under mpirun, against one process (ncdump's values)
    import re
    have_ncdump = shutil.which("ncdump") is not None
    def nc_values(path):
        """The numbers of ncdump's data section (coordinates and the variable)."""
        if not os.path.exists(path) or open(path, "rb").read(4) != b"\x89HDF":
            return None
        if not have_ncdump:
            return []
        p = subprocess.run(["ncdump", path], capture_output=True, text=True)
        if p.returncode != 0:
            return None
        return [float(v) for v in re.findall(r"[-+]?(?:\d+\.?\d*(?:e[-+]?\d+)?|_)(?=[ ,;\n])",
                                             p.stdout.split("data:", 1)[-1]) if v != "_"]
    def close(a, b):  # ncdump prints floats to 7 digits: 1e-5 of the largest value
        if a is None or b is None or len(a) != len(b):
            return False
        scale = max([abs(v) for v in a] + [1.0])
        return max((abs(x - y) for x, y in zip(a, b)), default=0.0) <= 1e-5 * scale
    npy(G("g3.npy"), (3, 16, 12), [rnd.uniform(-1, 1) for _ in range(3 * 16 * 12)], "<f4")
    npy(G("X64.npy"), (npts, d), X)
    rf = ["--method", "rf", "--boundary", "zero"]
    setup = [["gauss", "--in", "g.npy", "--sigma", "0.5", "--out", "g.nc"] + rf,
             ["gauss", "--in", "g3.npy", "--sigma", "0.5", "--out", "g3.nc"] + rf,
             ["gauss", "--in", "X64.npy", "--axes", "0", "--sigma", "0.01", "--out", "X.nc"] + rf]
    made = all(subprocess.run([dakit] + a + b, env=env, capture_output=True, cwd=P("good")).returncode == 0
               for a in setup)
    if not made:
        print("skip: this dakit writes no netCDF (built without netCDF-C)")
    nc_cases = [
        ("gauss X.nc -> .nc", ["gauss", "--in", "g.nc", "--sigma", "2", "--out", "OUT.nc"] + rf),
        ("gauss X.nc:VAR[hyperslab] -> .nc", ["gauss", "--in", "g3.nc:data[dim0=1,dim1=2:14]", "--sigma", "1.5",
                                              "--out", "OUT.nc"] + rf),
        ("gauss .npy -> .nc", ["gauss", "--in", "g.npy", "--sigma", "2", "--out", "OUT.nc"] + rf),
        ("kmeans --in X.nc (float64) -> .nc", ["kmeans", "--in", "X.nc", "--k", "4", "--labels", "OUT.nc",
                                               "--centroids", "OUT2.nc"]),
        ("enkf cov -> .nc", ["enkf", "cov", "--ens", "E.npy", "--loc", "c.npy", "--H", "H.mtx", "--out", "OUT.nc",
                             "--hpht", "OUT2.nc"]),
        ("enkf analysis 2-D c -> .nc", ["enkf", "analysis", "--ens", "E2.npy", "--loc", "c2.npy", "--H", "H2.mtx",
                                        "--obs", "y.npy", "--obs-var", "r.npy", "--seed", "7", "--out", "OUT.nc"]),
    ]
    for j, (what, args) in enumerate(nc_cases if made else []):
        ref = [a.replace("OUT", P(f"ncref{j}_")) for a in args]
        p = subprocess.run([dakit] + ref + b, env=env, capture_output=True, text=True, cwd=P("good"))
        if p.returncode != 0:
            check(f"{what}: the single-process run", False, p.stderr.strip()[-300:])
            continue
        for np in (2, 3):
            got = [a.replace("OUT", P(f"nc{j}_{np}_")) for a in args]
            rc, texts, rcs = run_mpi(np, got + b, f"nc{j}_{np}")
            outs = [(r_, g_) for r_, g_ in zip(ref, got) if r_ != g_]
            ok = rcs == ["0"] * np and all(nc_values(g_) is not None for _, g_ in outs)
            if ok and have_ncdump:
                ok = all(close(nc_values(r_), nc_values(g_)) for r_, g_ in outs)
            check(f"{what} at {np} ranks: netCDF-4 output, the values of one process", ok,
                  f"exit {rcs}: {[t.strip()[-200:] for t in texts]}")

print(f"{tally.fails} failure(s)")
sys.exit(1 if tally.fails else 0)
PY
