#!/usr/bin/env bash
# dakit enkf on the command line: a good cov run checked against a dense
# computation of the definition (pure Python, no NumPy needed), the analysis
# reproducible across runs and backends for one seed, and every kind of bad
# input refused with a message and a non-zero exit.
exec python3 - "$1" <<'PY'
import math, os, random, struct, subprocess, sys, tempfile
dakit = sys.argv[1]
tmp = tempfile.mkdtemp(prefix="enkf-cli-")
fails = 0

def npy(path, shape, values, dtype="<f8"):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        dtype, "".join(f"{s}," for s in shape))
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%d%s" % (len(values), "d" if dtype == "<f8" else "f"), *values))

def read_npy(path):
    b = open(path, "rb").read()
    hl = struct.unpack("<H", b[8:10])[0]
    data = b[10 + hl:]
    return struct.unpack("<%dd" % (len(data) // 8), data)

def mtx(path, rows, cols, entries, text=None):
    with open(path, "w") as f:
        if text is not None:
            f.write(text); return
        f.write("%%MatrixMarket matrix coordinate real general\n%\n")
        f.write(f"{rows} {cols} {len(entries)}\n")
        for i, j, v in entries:
            f.write(f"{i + 1} {j + 1} {v!r}\n")

def run(args, expect_ok, what, needle=None):
    global fails
    p = subprocess.run([dakit, "enkf"] + args, capture_output=True, text=True)
    ok = (p.returncode == 0) == expect_ok and (needle is None or needle in p.stderr)
    if expect_ok is False and not p.stderr.strip():
        ok = False
    print(("ok   " if ok else "FAIL ") + what + ("" if expect_ok else "  -> " + p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""))
    if not ok:
        print(p.stdout, p.stderr); fails += 1
    return p

rnd = random.Random(5)
N, L, M = 60, 5, 7
E = [rnd.uniform(-1, 1) for _ in range(N * L)]
c = [math.exp(-0.5 * (d / 6.0) ** 2) for d in range(N)]
H = []
for j in range(M):
    if j == 3: continue  # an empty row
    for _ in range(4):
        H.append((j, rnd.randrange(N), rnd.uniform(0.5, 1.5)))
H.append((0, H[0][1], 0.25))  # a repeated column adds
P = lambda n: os.path.join(tmp, n)
npy(P("E.npy"), (N, L), E); npy(P("c.npy"), (N,), c); mtx(P("H.mtx"), M, N, H)
# dense definition
Hd = [[0.0] * N for _ in range(M)]
for j, k, v in H: Hd[j][k] += v
def cov_dense():
    out = [[0.0] * M for _ in range(N)]
    for i in range(N):
        for k in range(N):
            ck = c[abs(i - k)] * sum(E[i * L + l] * E[k * L + l] for l in range(L)) / (L - 1)
            for j in range(M):
                out[i][j] += ck * Hd[j][k]
    return out
ref = cov_dense()
for scheme in ["auto", "tiled", "banded", "fft"]:
    p = run(["cov", "--ens", P("E.npy"), "--loc", P("c.npy"), "--H", P("H.mtx"), "--out", P("pht.npy"),
             "--hpht", P("hpht.npy"), "--scheme", scheme, "--backend", "cpu"], True, f"cov --scheme {scheme}")
    if p.returncode == 0:
        got = read_npy(P("pht.npy"))
        err = max(abs(got[i * M + j] - ref[i][j]) for i in range(N) for j in range(M))
        scale = max(abs(v) for row in ref for v in row)
        if err > 1e-12 * scale:
            print(f"FAIL cov {scheme}: max error {err} against the dense definition"); fails += 1
        h = read_npy(P("hpht.npy"))
        herr = max(abs(h[a * M + j] - sum(Hd[a][k] * ref[k][j] for k in range(N))) for a in range(M) for j in range(M))
        if herr > 1e-11 * scale:
            print(f"FAIL hpht {scheme}: max error {herr}"); fails += 1
# 2-D table
npy(P("c2.npy"), (6, 10), [math.exp(-(a * a + b * b) / 8.0) for a in range(6) for b in range(10)])
run(["cov", "--ens", P("E.npy"), "--loc", P("c2.npy"), "--H", P("H.mtx"), "--out", P("pht2.npy"), "--backend", "cpu"],
    True, "cov with a 6 x 10 block-Toeplitz table")
# analysis, twice: same seed, same numbers; the reference agrees to rounding
npy(P("y.npy"), (M,), [rnd.uniform(-1, 1) for _ in range(M)]); npy(P("r.npy"), (M,), [0.5] * M)
base = ["analysis", "--ens", P("E.npy"), "--obs", P("y.npy"), "--obs-var", P("r.npy"), "--H", P("H.mtx"),
        "--loc", P("c.npy"), "--seed", "7", "--inflation", "1.1"]
run(base + ["--out", P("xa1.npy"), "--backend", "cpu"], True, "analysis on cpu")
run(base + ["--out", P("xa2.npy"), "--backend", "cpu", "--scheme", "fft"], True, "analysis on cpu, fft scheme")
run(base + ["--out", P("xa3.npy"), "--reference"], True, "analysis by the reference")
a1, a2, a3 = read_npy(P("xa1.npy")), read_npy(P("xa2.npy")), read_npy(P("xa3.npy"))
d = max(max(abs(x - y) for x, y in zip(a1, a2)), max(abs(x - y) for x, y in zip(a1, a3)))
print(("ok   " if d < 1e-12 else "FAIL ") + f"analysis agrees across schemes and the reference (max diff {d:.2e})")
fails += d >= 1e-12
run(base[:-4] + ["--seed", "8", "--inflation", "1.1", "--out", P("xa4.npy"), "--backend", "cpu"], True, "analysis, other seed")
if read_npy(P("xa4.npy")) == a1:
    print("FAIL another seed gave the same analysis"); fails += 1

# bad input
good = {"--ens": P("E.npy"), "--loc": P("c.npy"), "--H": P("H.mtx"), "--out": P("o.npy")}
def cov_with(**over):
    a = dict(good); a.update({k.replace("_", "-").replace("--", "--"): v for k, v in over.items()})
    a.setdefault("--backend", "cpu")
    return ["cov"] + [x for kv in a.items() for x in kv]
npy(P("c_short.npy"), (N - 1,), c[:-1])
run(cov_with(**{"--loc": P("c_short.npy")}), False, "c of the wrong length", "N = 60")
npy(P("c2_bad.npy"), (7, 10), [1.0] * 70)
run(cov_with(**{"--loc": P("c2_bad.npy")}), False, "2-D table that does not match N", "grid")
mtx(P("H_wide.mtx"), M, N + 1, H)
run(cov_with(**{"--H": P("H_wide.mtx")}), False, "H with the wrong number of columns", "M x N")
mtx(P("H_oob.mtx"), 0, 0, None, "%%MatrixMarket matrix coordinate real general\n3 60 1\n2 61 1.0\n")
run(cov_with(**{"--H": P("H_oob.mtx")}), False, "H index out of range", "outside")
mtx(P("H_junk.mtx"), 0, 0, None, "%%MatrixMarket matrix coordinate real general\n3 60 2\n1 1 1.0\n2 x\n")
run(cov_with(**{"--H": P("H_junk.mtx")}), False, "malformed MatrixMarket line", "line 4")
mtx(P("H_short.mtx"), 0, 0, None, "%%MatrixMarket matrix coordinate real general\n3 60 5\n1 1 1.0\n")
run(cov_with(**{"--H": P("H_short.mtx")}), False, "MatrixMarket file that ends early", "ends after")
mtx(P("H_array.mtx"), 0, 0, None, "%%MatrixMarket matrix array real general\n3 60\n")
run(cov_with(**{"--H": P("H_array.mtx")}), False, "MatrixMarket array (dense) file", "coordinate")
open(P("H_none.mtx"), "w").write("hello\n")
run(cov_with(**{"--H": P("H_none.mtx")}), False, "not a MatrixMarket file", "header")
npy(P("E1.npy"), (N, 1), E[:N])
run(cov_with(**{"--ens": P("E1.npy")}), False, "L = 1", "at least 2")
En = list(E); En[17] = float("nan"); npy(P("Enan.npy"), (N, L), En)
run(cov_with(**{"--ens": P("Enan.npy")}), False, "NaN in the ensemble", "not finite")
cn = list(c); cn[3] = float("inf"); npy(P("cinf.npy"), (N,), cn)
run(cov_with(**{"--loc": P("cinf.npy")}), False, "Inf in c", "not finite")
run(cov_with(**{"--ens": P("missing.npy")}), False, "a missing file")
run(cov_with(**{"--scheme": "magic"}), False, "unknown scheme", "--scheme")
run(cov_with(**{"--backend": "nosuch"}), False, "unknown backend")
npy(P("r_bad.npy"), (M,), [0.5] * (M - 1) + [0.0])
run(base[:5] + ["--obs-var", P("r_bad.npy")] + base[7:] + ["--out", P("o.npy"), "--backend", "cpu"], False,
    "a zero observation variance", "> 0")
npy(P("y_short.npy"), (M - 1,), [0.0] * (M - 1))
run(base[:4] + [P("y_short.npy")] + base[5:] + ["--out", P("o.npy"), "--backend", "cpu"], False,
    "y of the wrong length", "one per row of H")
run(["analysis", "--ens", P("E.npy")], False, "analysis without its inputs", "required")
if os.path.exists(P("o.npy")):
    print("FAIL a refused run wrote its output"); fails += 1
print(f"{fails} failure(s)")
sys.exit(1 if fails else 0)
PY
