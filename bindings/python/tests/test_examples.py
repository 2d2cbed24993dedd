"""The scripts of examples/python run as a user runs them (this Python, in a
subprocess, from another folder) with --backend cpu, exit 0 and print their
results. Each script compares dakit with its reference itself (scipy,
scikit-learn, dense NumPy) and exits 1 when they differ."""
import importlib.util
import os
import re
import subprocess
import sys

import pytest

from conftest import USABLE

EXAMPLES = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                         "examples", "python"))
SCRIPTS = ("gauss.py", "radar.py", "kmeans.py", "enkf.py", "gbees.py")
# what the key lines of each script need beyond dakit and NumPy
NEEDS = {"gauss.py": ("scipy",), "kmeans.py": ("sklearn",), "enkf.py": ("scipy",)}

pytestmark = pytest.mark.skipif("cpu" not in USABLE, reason="the cpu backend is not usable here")


def run(script, *args, cwd):
    path = os.path.join(EXAMPLES, script)
    assert os.path.isfile(path), "%s is missing (examples/python in the repository)" % path
    return subprocess.run([sys.executable, path] + list(args), cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def run_cpu(script, tmp_path):
    for module in NEEDS.get(script, ()):
        if importlib.util.find_spec(module) is None:
            pytest.skip("%s needs %s, which is not installed here" % (script, module))
    p = run(script, "--backend", "cpu", cwd=tmp_path)
    assert p.returncode == 0, "%s exited %d\n%s%s" % (script, p.returncode, p.stdout, p.stderr)
    return p.stdout


@pytest.mark.parametrize("script", SCRIPTS)
def test_help(script, tmp_path):
    p = run(script, "--help", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage: %s" % script) and "--backend" in p.stdout


def test_gauss(tmp_path):
    out = run_cpu("gauss.py", tmp_path)
    assert re.search(r"^GaussPlan on cpu \(variant \w+\): 20 steps", out, re.M), out
    assert re.search(r"^methods: deriche +max \|dakit - scipy\| = \S+ of the peak", out, re.M), out
    assert re.search(r"^nan='error': .*NaN values \(the first at \[\d+, \d+\]\)", out, re.M), out
    assert re.search(r"^nan='ignore': [\d.]+ % missing, NaN left 0;", out, re.M), out
    assert "cupy: skipped, --backend cpu was asked for" in out
    assert out.endswith("gauss example: all parts agree with their references\n"), out


@pytest.mark.skipif("cuda" not in USABLE, reason="the cuda backend is not usable here")
def test_gauss_on_the_gpu_with_cupy(tmp_path):
    """The script's CuPy part: a CuPy array filtered in place, equal to the cpu result."""
    if importlib.util.find_spec("cupy") is None or importlib.util.find_spec("scipy") is None:
        pytest.skip("gauss.py's GPU part needs CuPy (and SciPy for its other parts)")
    p = run("gauss.py", "--backend", "cuda", cwd=tmp_path)
    assert p.returncode == 0, "gauss.py exited %d\n%s%s" % (p.returncode, p.stdout, p.stderr)
    assert re.search(r"^GaussPlan on cuda ", p.stdout, re.M), p.stdout
    assert re.search(r"^cupy: in place on .*: same array True, max \|gpu - cpu\| = \S+, ", p.stdout, re.M), p.stdout
    assert p.stdout.endswith("gauss example: all parts agree with their references\n"), p.stdout


def test_radar(tmp_path):
    out = run_cpu("radar.py", tmp_path)
    head = re.search(r"^radar: RX 2014-08-10 20:50 UTC, 900 x 900 pixels, (\d+) with data, (\d+) clustered$", out,
                     re.M)
    assert head, out
    sizes = re.search(r"^cluster sizes: ((?:\d+ ){5}\d+)$", out, re.M)  # k = 6
    assert sizes, out
    assert sum(int(s) for s in sizes.group(1).split()) == int(head.group(2)) <= int(head.group(1))


def test_radar_refuses_a_file_that_is_not_radolan(tmp_path):
    bad = tmp_path / "not-radolan.bin"
    bad.write_bytes(b"no header here\n" * 100)
    p = run("radar.py", str(bad), "--backend", "cpu", cwd=tmp_path)
    assert p.returncode == 1 and p.stderr.startswith("radar: ") and "Traceback" not in p.stderr, p.stderr


def test_kmeans(tmp_path):
    out = run_cpu("kmeans.py", tmp_path)
    # tol=0 stops when no label moves, as scikit-learn's does: the same iteration count
    ours = re.search(r"^dakit.KMeans: 20000 points, k=6, (\d+) iterations", out, re.M)
    theirs = re.search(r"^sklearn KMeans: (\d+) iterations", out, re.M)
    assert ours and theirs and ours.group(1) == theirs.group(1), out
    assert re.search(r"^labels equal to scikit-learn's: 20000 of 20000;", out, re.M), out
    assert re.search(r"^predict on 1000 new points: 1000 equal$", out, re.M), out


def test_enkf(tmp_path):
    out = run_cpu("enkf.py", tmp_path)
    for what in ("enkf.cov: PHT \\(40, 20\\), HPHT \\(20, 20\\)", "enkf.analysis: 40 x 20 ensemble"):
        m = re.search(r"^%s.*max \|dakit - numpy\| = (\S+) of the largest value$" % what, out, re.M)
        assert m and float(m.group(1)) <= 1e-11, out
    cycles = re.findall(r"^  cycle +\d+: rmse forecast ([\d.]+), analysis ([\d.]+), without assimilation ([\d.]+)$",
                        out, re.M)
    assert len(cycles) == 4, out
    last = [float(v) for v in cycles[-1]]
    assert last[1] < last[2], out  # assimilating keeps the mean nearer the truth than the free run
    assert out.endswith("enkf example: dakit and numpy agree\n"), out


def test_gbees(tmp_path):
    out = run_cpu("gbees.py", tmp_path)
    snaps = re.findall(r"^period (\d) t=([\d.]+): +(\d+) cells, total probability ([\d.]+), mean", out, re.M)
    assert [(p, t) for p, t, _, _ in snaps] == [("0", "0.00"), ("0", "0.50"), ("0", "1.00"),
                                                ("1", "1.00"), ("1", "1.50"), ("1", "2.00")], out
    assert all(int(c) > 0 and abs(float(s) - 1) <= 1e-9 for _, _, c, s in snaps), out
    update = re.search(r"^period 1 t=1.00: .*mean \( *\S+, +\S+, +(\S+)\)  after the update$", out, re.M)
    assert update and abs(float(update.group(1)) + 8) < 0.5, out  # z measured -8 (variance 1): pulled there
    assert re.search(r"^cpu: \d+ steps, \S+ cell-steps, \d+ cells at t=2.00$", out, re.M), out
