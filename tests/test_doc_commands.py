#!/usr/bin/env python3
"""Runs every `dakit ...` command line shown in the code blocks of README.md
and docs/*.md, so that a document cannot go stale silently: an option renamed
or removed, a value refused, a file the example needs gone from the tree.

Each document's commands run in order in one scratch folder (a later command
may read what an earlier one wrote, as gbees-plot reads gbees's run/), with
tests/ reachable as in the source tree and DAKIT_BACKEND=cpu. A synopsis
runs without its optional [...] parts. Skipped, with the reason printed: a
command that needs a GPU, mpirun, or an input file that is not in the
repository. Long runs get options appended that make them short (printed).

usage: test_doc_commands.py DAKIT SOURCE_ROOT
"""
import glob
import os
import re
import shlex
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
    (("bench",), ["--case", "seed_table2", "--max-runs", "3", "--min-time", "0"]),
    (("demo",), ["--size", "128"]),
]


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


def skip_reason(words, text, cwd):
    if "mpirun" in words[: words.index("dakit")] or "--ranks" in words:
        return "needs mpirun"
    if "cuda" in words:
        return "needs a GPU (--backend cuda)"
    if any(w in ("|", "...") or "|" in w or "..." in w or "<" in w for w in words) or "$" in text:
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
        return "needs %s, not in the repository" % ", ".join(missing)
    return None


def main():
    docs = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    env = dict(os.environ, DAKIT_BACKEND="cpu")
    ran = failed = skipped = 0
    start = time.time()
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
                why = "needs a plugin of its own (%s)" % own[0] if own else skip_reason(words, text, cwd)
                if why:
                    print("skipped %s\n        (%s)" % (where, why))
                    skipped += 1
                    continue
                args = words[words.index("dakit") + 1:]
                extra = []
                for prefix, options in SHORTER:
                    if tuple(args[: len(prefix)]) == prefix:
                        extra = options
                        break
                run_env = dict(env, **dict(w.split("=", 1) for w in assign))
                p = subprocess.run([dakit] + args + extra, cwd=cwd, env=run_env, capture_output=True, text=True,
                                   timeout=120)
                ran += 1
                shown = " (with %s appended)" % " ".join(extra) if extra else ""
                if p.returncode != 0:
                    failed += 1
                    print("FAILED  %s%s: exit %d\n%s%s" % (where, shown, p.returncode, p.stdout[-2000:],
                                                             p.stderr[-2000:]))
                else:
                    print("ok      %s%s" % (where, shown))
    print("%d command lines ran (%d failed), %d skipped, in %.1f s" % (ran, failed, skipped, time.time() - start))
    return 1 if failed or not ran else 0


sys.exit(main())
