#!/usr/bin/env python3
"""Runs every `dakit ...` command line shown in the code blocks of README.md
and docs/*.md, so that a document cannot go stale silently: an option renamed
or removed, a value refused, a file the example needs gone from the tree.

Each document's commands run in order in one scratch folder (a later command
may read what an earlier one wrote, as gbees-plot reads gbees's run/), with
tests/ reachable as in the source tree and DAKIT_BACKEND=cpu. The folder
starts with small inputs under the names the documents use (inputs(): X.npy,
H.mtx, Xb.nc, era.nc, volume.h5 from the build's make_odim, ...), sized to
fit one another. A synopsis runs without its optional [...] parts; under
mpirun a command runs on 2 ranks (the product of --decomp AxB where given),
--ranks P becomes --ranks 2, both with --oversubscribe. Skipped, with the
reason printed: a synopsis with placeholders, a command that needs a GPU, a
plugin of its own, or an input file that is not there, and the mpirun ones
when mpirun is absent. Long runs get options appended that make them short
(printed).

usage: test_doc_commands.py DAKIT SOURCE_ROOT
"""
import glob
import math
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import time

dakit, root = sys.argv[1], sys.argv[2]

# options whose value is a file or folder the command reads
INPUTS = {"--in", "--mask", "--ens", "--loc", "--H", "--obs", "--obs-var", "--xb", "--yb", "--yo", "--r",
          "--grid-coords", "--obs-coords", "--radolan", "--odim", "--init", "--meas", "--pdf", "--truth"}
# appended to keep the runs of long commands short: (command words, options)
SHORTER = [
    (("enkf", "l96"), ["--cycles", "60", "--spinup", "20", "--every", "20"]),
    (("letkf", "l96"), ["--cycles", "60", "--spinup", "20", "--every", "20"]),
    (("gbees-mc",), ["--samples", "2000"]),
    (("conform",), ["--quick", "--algo", "gauss", "--backend", "cpu"]),
    (("bench", "--ranks"), ["--case", "kmeans", "--max-runs", "3", "--min-time", "0"]),
    (("bench",), ["--case", "seed_table2", "--max-runs", "3", "--min-time", "0"]),
    (("demo",), ["--size", "128"]),
]


def npy(path, shape, values, dtype="<f8"):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (dtype, "".join("%d," % n for n in shape))
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%d%s" % (len(values), {"<f8": "d", "<f4": "f"}[dtype]), *values))


def ncgen(path, cdl, cwd):
    """A netCDF file from CDL text by ncgen; False where ncgen is absent."""
    if not shutil.which("ncgen"):
        return False
    with open(os.path.join(cwd, "in.cdl"), "w") as f:
        f.write(cdl)
    subprocess.run(["ncgen", "-k", "nc4", "-o", path, "in.cdl"], cwd=cwd, check=True)
    os.remove(os.path.join(cwd, "in.cdl"))
    return True


def inputs(cwd):
    """The documents' example inputs: a state of N = 40 points (a 5 x 8 grid
    in Xb.nc), L = 10 members, M = 20 observations of every other point."""
    N, L, M = 40, 10, 20
    f = lambda name: os.path.join(cwd, name)
    ens = [math.sin(0.3 * i) + 0.2 * math.sin(1.7 * i + 2.3 * m) for i in range(N) for m in range(L)]
    for name in ("E.npy", "Xb.npy"):
        npy(f(name), (N, L), ens)
    npy(f("X.npy"), (N, L), ens, "<f4")  # also kmeans's points, which are float32
    npy(f("c.npy"), (N,), [math.exp(-(j / 4.0) ** 2) if j < 12 else 0.0 for j in range(N)])
    with open(f("H.mtx"), "w") as h:
        h.write("%%%%MatrixMarket matrix coordinate real general\n%d %d %d\n" % (M, N, M))
        h.writelines("%d %d 1.0\n" % (o + 1, 2 * o + 1) for o in range(M))
    npy(f("Yb.npy"), (M, L), [ens[2 * o * L + m] for o in range(M) for m in range(L)])
    obs = [math.sin(0.6 * o) + 0.1 for o in range(M)]
    for name in ("y.npy", "yo.npy"):
        npy(f(name), (M,), obs)
    npy(f("r.npy"), (M,), [0.25] * M)
    # lon, lat (degrees) and a level: the sphere's columns (cartesian, lon's period 4000 never wraps)
    grid = [(6.0 + 0.5 * (i % 8), 48.0 + 0.5 * (i // 8), float(i % 3)) for i in range(N)]
    npy(f("grid.npy"), (N, 3), [v for p in grid for v in p])
    npy(f("obs.npy"), (M, 3), [v for o in range(M) for v in grid[2 * o]])
    npy(f("G.npy"), (N, 2), [v for p in grid for v in p[:2]])
    npy(f("O.npy"), (M, 2), [v for o in range(M) for v in grid[2 * o][:2]])
    npy(f("x.npy"), (64, 64), [math.sin(0.2 * i) * math.cos(0.15 * j) for i in range(64) for j in range(64)], "<f4")
    values = lambda count, fn: ", ".join("%.4f" % fn(i) for i in range(count))
    ncgen(f("Xb.nc"), "netcdf Xb { dimensions: member = %d ; y = 5 ; x = 8 ; variables: double T(member, y, x) ; "
                      "data: T = %s ; }" % (L, values(L * N, lambda i: ens[(i % N) * L + i // N])), cwd)
    ncgen(f("era.nc"), "netcdf era { dimensions: time = 4 ; latitude = 301 ; longitude = 6 ; variables: "
                       "float t2m(time, latitude, longitude) ; data: t2m = %s ; }"
                       % values(4 * 301 * 6, lambda i: 280 + 10 * math.sin(i / 500.0) + (i % 6)), cwd)
    make_odim = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(dakit))), "tests", "make_odim")
    if os.access(make_odim, os.X_OK):
        subprocess.run([make_odim, f("volume.h5")], check=True, capture_output=True)


def commands(path):
    """(line number, text) of each dakit command line in the code blocks."""
    lines = open(path, encoding="utf-8").read().split("\n")
    fenced = False
    k = 0
    while k < len(lines):
        line = lines[k]
        if line.lstrip().startswith("```"):
            fenced = not fenced
            k += 1
            continue
        indented = line.startswith("    ") and not fenced
        text = line.strip()
        if text.startswith("$ "):
            text = text[2:]
        if (fenced or indented) and re.match(r"^(\w+=\S+ )*(mpirun .*)?dakit( |$)", text):
            start = k
            while text.endswith("\\") and k + 1 < len(lines):
                k += 1
                text = text[:-1] + " " + lines[k].strip()
            yield start + 1, text
        k += 1


def skip_reason(words, cwd):
    if "cuda" in words:
        return "needs a GPU (--backend cuda)"
    if ("mpirun" in words[: words.index("dakit")] or "--ranks" in words) and not shutil.which("mpirun"):
        return "needs mpirun, which is not installed"
    if any("|" in w or "..." in w or "<" in w or "$" in w for w in words):
        return "a synopsis with placeholders"
    missing = []
    for i, w in enumerate(words):
        path = None
        if words[i - 1] in INPUTS:
            path = w
        elif words[1] == "gbees-plot" and i == 2:
            path = w
        if path:
            path = re.sub(r":[A-Za-z_][\w]*(\[.*\])?$", "", path)  # X.nc:VAR[hyperslab]
            outside = os.path.isabs(path) and not path.startswith(os.path.join(root, ""))
            if outside or not os.path.exists(os.path.join(cwd, path)):
                missing.append(path)
    if missing:
        return "needs %s: not in the tree, nor made by inputs() (ncgen, the build's make_odim)" % ", ".join(missing)
    return None


def main():
    docs = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    env = dict(os.environ, DAKIT_BACKEND="cpu", DAKIT_MPIRUN="mpirun --oversubscribe", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    ran = failed = skipped = 0
    start = time.time()
    made = tempfile.mkdtemp()
    inputs(made)
    for doc in docs:
        name = os.path.relpath(doc, root)
        with tempfile.TemporaryDirectory() as cwd:
            os.symlink(os.path.join(root, "tests"), os.path.join(cwd, "tests"))
            for line, text in commands(doc):
                # the optional parts of a synopsis, then a trailing comment
                text = re.sub(r"\s+\[[^\[\]]*\]", "", text)
                words = shlex.split(text, comments=True)
                where = "%s:%d: %s" % (name, line, " ".join(words))
                assign = [w for w in words[: words.index("dakit")] if "=" in w and w.index("=") > 0]
                own = [w for w in assign if w.startswith("DAKIT_PLUGIN_PATH=")]
                # the inputs as made, whatever an earlier command wrote over them (y.npy by gauss --out)
                for made_name in os.listdir(made):
                    shutil.copy(os.path.join(made, made_name), cwd)
                why = "needs a plugin of its own (%s)" % own[0] if own else skip_reason(words, cwd)
                if why:
                    print("skipped %s\n        (%s)" % (where, why))
                    skipped += 1
                    continue
                args = words[words.index("dakit") + 1:]
                launch = [dakit]
                if "mpirun" in words[: words.index("dakit")]:
                    ranks = 2
                    if "--decomp" in args:
                        ranks = math.prod(int(n) for n in args[args.index("--decomp") + 1].split("x"))
                    launch = ["mpirun", "--oversubscribe", "-n", str(ranks), dakit]
                if "--ranks" in args:
                    args[args.index("--ranks") + 1] = "2"
                extra = []
                for prefix, options in SHORTER:
                    if tuple(args[: len(prefix)]) == prefix:
                        extra = options
                        break
                run_env = dict(env, **dict(w.split("=", 1) for w in assign))
                if launch[0] == "mpirun" or "--ranks" in args:
                    # as tools/sanitize runs the mpi suite: OpenMPI's unloaded components
                    # leave leaks that name no library, so an ASan build checks no leaks here
                    run_env["ASAN_OPTIONS"] = ":".join(filter(None, [run_env.get("ASAN_OPTIONS"), "detect_leaks=0"]))
                p = subprocess.run(launch + args + extra, cwd=cwd, env=run_env, capture_output=True, text=True,
                                   timeout=120)
                ran += 1
                shown = " (with %s appended)" % " ".join(extra) if extra else ""
                if launch[0] == "mpirun" or "--ranks" in args:
                    shown += " (as %s)" % " ".join(launch[:-1] + ["dakit"] + args)
                if p.returncode != 0:
                    failed += 1
                    print("FAILED  %s%s: exit %d\n%s%s" % (where, shown, p.returncode, p.stdout[-2000:],
                                                             p.stderr[-2000:]))
                else:
                    print("ok      %s%s" % (where, shown))
    shutil.rmtree(made)
    print("%d command lines ran (%d failed), %d skipped, in %.1f s" % (ran, failed, skipped, time.time() - start))
    return 1 if failed or not ran else 0


sys.exit(main())
