#!/usr/bin/env bash
# Long runs in batch jobs: `dakit bench` run from a folder outside the tree
# finds its RADOLAN file (the source tree above its build folder), reports
# the case as skipped with the reason when $DAKIT_DATA names a folder without
# it (in the table and the CSV's `skipped` column) and exits non-zero only
# when nothing ran; --variant picks variants; --progress writes progress
# lines to a stderr that is no terminal (gbees, enkf l96, bench), --quiet and
# the default write none.
exec python3 - "$1" <<'PY'
import csv, os, subprocess, sys, tempfile
dakit = sys.argv[1]
tmp = tempfile.mkdtemp(prefix="batch-cli-")
fails = 0
RADAR = "raa01-rx_10000-1408102050-dwd---bin.gz"

def check(ok, what, detail=""):
    global fails
    print(("ok   " if ok else "FAIL ") + what + (f": {detail}" if detail and not ok else ""))
    fails += not ok

def run(args, env_add=None, cwd=tmp):
    env = {k: v for k, v in os.environ.items() if k not in ("DAKIT_DATA", "DAKIT_RADOLAN")}
    env.update(env_add or {})
    return subprocess.run([dakit] + args, capture_output=True, text=True, cwd=cwd, env=env)

def rows(path):
    return list(csv.DictReader(open(path))) if os.path.exists(path) else []

fast = ["--backend", "cpu", "--max-runs", "3", "--min-time", "0"]

# run from a temporary folder: the data is found through the executable's place
p = run(["bench", "--case", "radar_900", "--csv", "found.csv", "--progress"] + fast)
r = rows(os.path.join(tmp, "found.csv"))
check(p.returncode == 0, "bench radar_900 from outside the tree exits 0", f"exit {p.returncode}: {p.stderr[-400:]}")
check(f"kmeans radar_900: data /" in p.stderr and p.stderr.split("kmeans radar_900: data ")[1].split("\n")[0]
      .endswith("/tests/data/" + RADAR), "it names the data file it found", p.stderr[-400:])
check(len(r) > 0 and all(x["skipped"] == "" and float(x["median_ms"]) > 0 for x in r),
      "its CSV rows carry times and an empty `skipped`", str(r)[:300])
check("dakit bench: [" in p.stderr and "kmeans radar_900 on cpu/" in p.stderr,
      "bench --progress writes a line per case to a stderr that is no terminal", p.stderr[-400:])

# $DAKIT_DATA without the file: skipped with the reason; nothing ran, exit 1
empty = os.path.join(tmp, "empty")
os.makedirs(empty)
p = run(["bench", "--case", "radar_900", "--csv", "skipped.csv"] + fast, {"DAKIT_DATA": empty})
r = rows(os.path.join(tmp, "skipped.csv"))
check(p.returncode == 1, "bench with only a skipped case exits 1", f"exit {p.returncode}")
check(f"skipped: data file {RADAR} not in $DAKIT_DATA ({empty})" in p.stdout,
      "the table says the case was skipped and why", p.stdout[-400:])
check(len(r) > 0 and all(x["skipped"].startswith("data file " + RADAR) and x["median_ms"] == "" for x in r),
      "the CSV's `skipped` column holds the reason, the times are empty", str(r)[:300])
check("dakit bench: [" not in p.stderr, "no progress lines by default when stderr is no terminal", p.stderr[-300:])

# a skipped case beside one that runs: exit 0
p = run(["bench", "--case", "radar_900,cpu_1e4_full", "--quiet"] + fast, {"DAKIT_DATA": empty})
check(p.returncode == 0 and "skipped: data file" in p.stdout and "cpu_1e4_full" in p.stdout,
      "a skipped case beside one that ran: exit 0", f"exit {p.returncode}: {p.stdout[-300:]} {p.stderr[-300:]}")
check("dakit bench: [" not in p.stderr, "bench --quiet writes no progress", p.stderr[-300:])

# --variant: only the named variants of each backend; a name that no backend
# offers is named on stderr, and when none is left bench exits 2
p = run(["bench", "kmeans", "--case", "radar_900", "--variant", "simd,nosuch", "--csv", "variant.csv", "--quiet"]
        + fast)
r = rows(os.path.join(tmp, "variant.csv"))
check(p.returncode == 0 and [x["variant"] for x in r] == ["simd"], "bench --variant times only the named variant",
      f"exit {p.returncode}: {str(r)[:300]} {p.stderr[-300:]}")
check("no backend timed offers variant 'nosuch'" in p.stderr and "screen" in p.stderr,
      "a variant no backend offers is named on stderr with those offered", p.stderr[-300:])
p = run(["bench", "kmeans", "--case", "radar_900", "--variant", "nosuch", "--quiet"] + fast)
check(p.returncode == 2 and "names no variant to time" in p.stderr, "--variant naming nothing offered exits 2",
      f"exit {p.returncode}: {p.stderr[-300:]}")

# progress of gbees and enkf l96 into a log
meas = os.path.join(tmp, "meas")
os.makedirs(meas)
with open(os.path.join(meas, "measurement0.txt"), "w") as f:
    f.write("mean\n-11.5 -10 9.5\n\ncovariance\n1 0 0\n0 1 0\n0 0 1\n\nperiod\n0.1\n")
gb = ["gbees", "--model", "lorenz63", "--meas", meas, "--snapshots", "3", "--backend", "cpu"]
for flag, want in (("--progress", True), ("--quiet", False), (None, False)):
    p = run(gb + ["--out", os.path.join(tmp, f"gbees{flag}")] + ([flag] if flag else []))
    lines = [l for l in p.stderr.splitlines() if l.startswith("dakit gbees: [")]
    check(p.returncode == 0 and (len(lines) >= 3 if want else not lines),
          f"gbees {flag or '(default)'}: {'a line per snapshot' if want else 'no progress'} in the log",
          f"exit {p.returncode}, stderr: {p.stderr[-300:]}")
l96 = ["enkf", "l96", "--cycles", "20", "--spinup", "5", "--png", "", "--backend", "cpu"]
for flag, want in (("--progress", True), ("--quiet", False)):
    p = run(l96 + [flag])
    lines = [l for l in p.stderr.splitlines() if l.startswith("dakit enkf l96: [")]
    check(p.returncode == 0 and (len(lines) >= 2 if want else not lines),
          f"enkf l96 {flag}: {'its stages' if want else 'no progress'} in the log",
          f"exit {p.returncode}, stderr: {p.stderr[-300:]}")

print(f"{fails} failure(s)")
sys.exit(1 if fails else 0)
PY
