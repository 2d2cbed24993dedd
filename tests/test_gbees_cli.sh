#!/usr/bin/env bash
# dakit gbees on the command line: a short Lorenz '63 run writes its
# snapshots (rows of centre + probability summing to 1), summary.txt and,
# through gbees-plot, the pictures; every kind of bad input named in the
# issue is refused with a message and a non-zero exit; and a run that fails
# at a measurement update keeps the snapshots it had written.
exec python3 - "$1" <<'PY'
import os, struct, subprocess, sys, tempfile
dakit = sys.argv[1]
tmp = tempfile.mkdtemp(prefix="gbees-cli-")
fails = 0

def check(ok, what, detail=""):
    global fails
    print(("ok   " if ok else "FAIL ") + what + (f": {detail}" if detail and not ok else ""))
    fails += not ok

def meas_dir(name, files):
    d = os.path.join(tmp, name)
    os.makedirs(d, exist_ok=True)
    for i, text in enumerate(files):
        with open(os.path.join(d, f"measurement{i}.txt"), "w") as f:
            f.write(text)
    return d

def gaussian(mean, cov, period):
    rows = "\n".join(" ".join(repr(v) for v in row) for row in cov)
    return f"mean\n{' '.join(repr(v) for v in mean)}\n\ncovariance\n{rows}\n\nperiod\n{period!r}\n"

def run(args, expect_ok, what, needle=None):
    p = subprocess.run([dakit, "gbees"] + args, capture_output=True, text=True)
    ok = (p.returncode == 0) == expect_ok and (needle is None or needle in p.stderr)
    if not expect_ok and not p.stderr.strip():
        ok = False
    check(ok, what, f"exit {p.returncode}, stderr: {p.stderr.strip()[:300]}")
    return p

def read_npy(path):
    b = open(path, "rb").read()
    hl = struct.unpack("<H", b[8:10])[0]
    header = b[10:10 + hl].decode()
    shape = tuple(int(x) for x in header.split("'shape': (")[1].split(")")[0].split(",") if x.strip())
    data = b[10 + hl:]
    return shape, struct.unpack("<%dd" % (len(data) // 8), data)

eye3 = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
good = meas_dir("good", [gaussian([-11.5, -10.0, 9.5], eye3, 0.1), "z\n-8\n\ncov\n1\n\nT\n0.1\n"])

# a good run: two periods of three snapshots each
out = os.path.join(tmp, "run")
run(["--model", "lorenz63", "--meas", good, "--out", out, "--snapshots", "3", "--backend", "cpu"], True,
    "a short Lorenz '63 run with one update")
names = sorted(n for n in os.listdir(out) if n.endswith(".npy")) if os.path.isdir(out) else []
check(names == [f"pdf_{p}_{k}.npy" for p in (0, 1) for k in range(3)], "six snapshots", str(names))
for n in names:
    shape, v = read_npy(os.path.join(out, n))
    total = sum(v[i] for i in range(3, len(v), 4))
    check(len(shape) == 2 and shape[1] == 4 and abs(total - 1.0) < 1e-9, f"{n}: cells x 4, probabilities sum to 1",
          f"shape {shape}, sum {total}")
summary = dict(l.split(" ", 1) for l in open(os.path.join(out, "summary.txt")).read().split("\n") if " " in l) \
    if os.path.exists(os.path.join(out, "summary.txt")) else {}
check(summary.get("status") == "completed" and summary.get("model") == "lorenz63" and
      int(summary.get("steps", "0")) > 0 and int(summary.get("cell_steps", "0")) > 0,
      "summary.txt: completed, steps and cell-steps", str(summary))
if os.environ.get("DAKIT_TEST_PICTURES", "1") == "1":
    p = subprocess.run([dakit, "gbees-plot", out], capture_output=True, text=True)
    pngs = [n for n in os.listdir(out) if n.endswith(".png")] if os.path.isdir(out) else []
    check(p.returncode == 0 and len(pngs) == 6, "gbees-plot draws one PNG per snapshot", p.stderr.strip()[:300])
else:
    print("skip (dakit was built without cairo, no pictures): gbees-plot draws one PNG per snapshot")

# bad input
base = ["--out", os.path.join(tmp, "bad"), "--backend", "cpu"]
run(["--model", "lorenz63", "--meas", os.path.join(tmp, "nowhere")] + base, False, "missing measurement folder",
    "measurement0.txt")
run(["--model", "lorenz63", "--meas", meas_dir("malformed", ["mean\n-11.5 oops 9.5\n\ncov\n1 0 0\n"])] + base, False,
    "malformed measurement file", "measurement0.txt")
run(["--model", "lorenz63", "--meas", meas_dir("notpd", [gaussian([0.0, 0.0, 0.0],
    [[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]], 0.1)])] + base, False, "covariance not positive definite",
    "positive definite")
run(["--model", "lorenz63", "--meas", meas_dir("dim6", [gaussian([4.0] * 6,
    [[1.0 if i == j else 0.0 for j in range(6)] for i in range(6)], 0.1)])] + base, False,
    "dimension that disagrees with the model", "dimension")
run(["--model", "lorenz63", "--meas", good, "--threshold", "0"] + base, False, "threshold <= 0", "threshold")
run(["--model", "lorenz63", "--meas", good, "--threshold", "abc"] + base, False, "threshold not a number")
run(["--model", "nosuchmodel", "--meas", good] + base, False, "unknown model", "nosuchmodel")
run(["--model", "lorenz63", "--meas", good, "--variant", "nope"] + base, False, "unknown variant, offered ones named",
    "offers")

# a run that fails at the update keeps the first period's snapshots
far = meas_dir("far", [gaussian([-11.5, -10.0, 9.5], eye3, 0.05), "z\n1e9\n\ncov\n1e-6\n\nT\n0.05\n"])
out2 = os.path.join(tmp, "failing")
run(["--model", "lorenz63", "--meas", far, "--out", out2, "--snapshots", "2", "--backend", "cpu"], False,
    "a measurement with no support on the grid fails", "no support")
kept = sorted(n for n in os.listdir(out2) if n.endswith(".npy")) if os.path.isdir(out2) else []
check(kept[:2] == ["pdf_0_0.npy", "pdf_0_1.npy"], "the snapshots written before the failure are kept", str(kept))
status = [l for l in open(os.path.join(out2, "summary.txt"))] if os.path.exists(os.path.join(out2, "summary.txt")) else []
check("status failed\n" in status, "summary.txt says the run failed", "".join(status)[:200])

print(f"{fails} failure(s)")
sys.exit(1 if fails else 0)
PY
