#!/usr/bin/env bash
# dakit gauss under mpirun (docs/distributed.md, "Command line"): 2-D and
# 3-D .npy files filtered by 2 and 3 ranks on the cpu backend, each rank
# reading and writing only its box, checked against the single-process
# command (the same header bytes, the values within the conformance
# tolerance); --decomp grids; and bad input giving every rank the same
# sentence, exit status 1 and no output file. Arguments: the dakit command,
# the mpirun found when the build was configured ("" if none), and "yes"
# when libdakit-mpi was built. Skips (77) without either.
dakit=$1 mpirun=$2 have_mpi=$3
if [ "$have_mpi" != yes ]; then echo "skip: libdakit-mpi was not built"; exit 77; fi
if [ -z "$mpirun" ] || ! [ -x "$mpirun" ]; then echo "skip: no mpirun or mpiexec was found"; exit 77; fi
exec python3 - "$dakit" "$mpirun" <<'PY'
import math, os, struct, subprocess, sys, tempfile
dakit, mpirun = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix="mpi-cli-")
fails = 0
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")

def npy(path, shape, values, dtype):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        dtype, "".join(f"{s}," for s in shape))
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%d%s" % (len(values), "d" if dtype == "<f8" else "f"), *values))

def split_npy(path):
    raw = open(path, "rb").read()
    hlen = struct.unpack("<H", raw[8:10])[0]
    head, data = raw[:10 + hlen], raw[10 + hlen:]
    code = "d" if b"'<f8'" in head else "f"
    return head, code, struct.unpack("<%d%s" % (len(data) // struct.calcsize(code), code), data)

def check(what, ok, detail=""):
    global fails
    print(("ok   " if ok else "FAIL ") + what + (("  " + detail) if detail else ""))
    if not ok:
        fails += 1

def run_mpi(np, args, tag, last_rank_env=""):
    """Each rank's stderr and exit status into its own files (mpirun would
    interleave the lines and report one status); last_rank_env: variable
    settings for the last rank only."""
    quoted = " ".join("'" + a.replace("'", "'\\''") + "'" for a in [dakit, "gauss"] + args)
    r = "$OMPI_COMM_WORLD_RANK"
    script = (f'if [ "{r}" = {np - 1} ]; then export {last_rank_env or "DK_NOTHING=1"}; fi; '
              f'{quoted} 2>"{tmp}/{tag}.err.{r}"; s=$?; echo $s >"{tmp}/{tag}.rc.{r}"; exit $s')
    p = subprocess.run([mpirun, "-n", str(np), "--oversubscribe", "--mca", "orte_abort_on_non_zero_status", "0", "sh", "-c", script], env=env,
                       capture_output=True, text=True, timeout=240)
    def text(name):
        path = os.path.join(tmp, name)
        return open(path).read() if os.path.exists(path) else ""
    texts = [text(f"{tag}.err.{k}") for k in range(np)]
    rcs = [text(f"{tag}.rc.{k}").strip() for k in range(np)]
    return p.returncode, texts, p.stderr, rcs

n = 0
def values(count):
    return [math.sin(0.37 * i) + ((i * 7919) % 13) / 13.0 for i in range(count)]

inputs = {
    "2d_f32": ([37, 23], "<f4"),
    "3d_f64": ([9, 11, 7], "<f8"),
}
for name, (shape, dtype) in inputs.items():
    cnt = 1
    for s in shape:
        cnt *= s
    npy(os.path.join(tmp, name + ".npy"), shape, values(cnt), dtype)

rf = ["--method", "rf", "--boundary", "zero"]  # the GPU RF paper's filter (the default is deriche, reflect)
cases = [
    ("2d_f32", ["--sigma", "2"] + rf, 2, None),
    ("2d_f32", ["--sigma", "2"] + rf, 3, None),
    ("2d_f32", ["--sigma", "2"] + rf, 2, "2x1"),
    ("2d_f32", ["--sigma", "2"] + rf, 2, "1x2"),
    ("2d_f32", ["--sigma", "1.5,3", "--method", "rf", "--boundary", "constant", "--K", "3"], 3, "1x3"),
    ("2d_f32", ["--sigma", "2", "--dtype", "f64", "--axes", "1"] + rf, 2, None),
    ("3d_f64", ["--sigma", "1.5"] + rf, 2, None),
    ("3d_f64", ["--sigma", "1.5"] + rf, 3, None),
    ("3d_f64", ["--sigma", "1,2,0.7", "--dtype", "f32"] + rf, 3, "1x1x3"),
    ("3d_f64", ["--sigma", "1.5", "--axes", "0,2"] + rf, 2, "1x2x1"),
    ("2d_f32", ["--sigma", "2", "--mode", "overlap"] + rf, 3, "3x1"),
    ("2d_f32", ["--sigma", "2", "--method", "deriche", "--boundary", "reflect"], 2, "2x1"),
    ("2d_f32", ["--sigma", "2"], 3, None),  # the defaults
]
for i, (name, opts, np, decomp) in enumerate(cases):
    src = os.path.join(tmp, name + ".npy")
    ref, out = os.path.join(tmp, f"ref{i}.npy"), os.path.join(tmp, f"out{i}.npy")
    what = f"{name} {' '.join(opts)} at {np} ranks" + (f" --decomp {decomp}" if decomp else "")
    p = subprocess.run([dakit, "gauss", "--in", src, "--out", ref, "--backend", "cpu"] + opts, env=env,
                       capture_output=True, text=True)
    if p.returncode != 0:
        check(what + ": the single-process run", False, p.stderr.strip())
        continue
    args = ["--in", src, "--out", out, "--backend", "cpu"] + opts + (["--decomp", decomp] if decomp else [])
    rc, texts, mpierr, rcs = run_mpi(np, args, f"case{i}")
    if rc != 0 or rcs != ["0"] * np or not os.path.exists(out):
        check(what, False, f"exit {rc}: {texts} {mpierr.strip()[-300:]}")
        continue
    h1, c1, v1 = split_npy(ref)
    h2, c2, v2 = split_npy(out)
    eps = 2.0 ** -53 if c1 == "d" else 2.0 ** -24
    K = int(opts[opts.index("--K") + 1]) if "--K" in opts else 4
    naxes = len(opts[opts.index("--axes") + 1].split(",")) if "--axes" in opts else len(name) and int(name[0])
    tol = (2.0 * K * naxes + 4.0) * 2.0 * eps
    scale = max(1.0, max(abs(v) for v in v1))
    err = max((abs(a - b) for a, b in zip(v1, v2)), default=0.0) / scale
    ok = h1 == h2 and c1 == c2 and len(v1) == len(v2) and err <= tol
    check(what, ok, f"header {'same' if h1 == h2 else 'DIFFERS'}, error {err:.3g} (tolerance {tol:.3g})")
    check(what + ": no temporary file left",
          not [f for f in os.listdir(tmp) if f.startswith(f".out{i}.npy.tmp")])

# bad input: every rank exits with the same status and sentence (1, or 2
# for a usage error), and no output file or temporary file is left
src2 = os.path.join(tmp, "2d_f32.npy")
bad = [
    ("a missing input", ["--in", os.path.join(tmp, "missing.npy"), "--sigma", "2"], "", "cannot open", "1"),
    ("an unknown backend", ["--in", src2, "--sigma", "2", "--backend", "nosuch"], "", "nosuch", "1"),
    ("--decomp whose product is not the ranks", ["--in", src2, "--sigma", "2", "--decomp", "2x2"], "",
     "--decomp", "2"),
    ("wrap on a split filtered axis", ["--in", src2, "--sigma", "2", "--boundary", "wrap"], "",
     "wrap", "1"),
    ("a device the last rank does not have", ["--in", src2, "--sigma", "2"], "DAKIT_DEVICE=9",
     "DAKIT_DEVICE=9", "1"),
]
for j, (what, args, last_env, needle, code) in enumerate(bad):
    for np in (2, 3):
        out = os.path.join(tmp, f"bad{j}_{np}.npy")
        if "--backend" not in args:
            args = args + ["--backend", "cpu"]
        rc, texts, mpierr, rcs = run_mpi(np, args + ["--out", out], f"bad{j}_{np}", last_env)
        lines = [t.strip().splitlines()[-1] if t.strip() else "" for t in texts]
        ok = (all(l == lines[0] for l in lines) and lines[0].startswith("dakit gauss: ")
              and needle in lines[0] and rcs == [code] * np and not os.path.exists(out)
              and not [f for f in os.listdir(tmp) if f.startswith(f".bad{j}_{np}.npy.tmp")])
        if last_env:
            ok = ok and f"rank {np - 1} of {np}:" in lines[0]
        check(f"{what} at {np} ranks: every rank exits {code} with the same sentence, no output", ok,
              f"exit {rcs}: {lines[0] if lines else ''}")
print(f"{fails} failure(s)")
sys.exit(1 if fails else 0)
PY
