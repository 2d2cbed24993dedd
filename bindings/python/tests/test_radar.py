"""dakit.radar: libdakit's RADOLAN reader and the pipeline of `dakit kmeans
--radolan`, compared with the command itself."""
import gzip
import os
import shutil
import subprocess

import numpy as np
import pytest

import dakit

from conftest import backends, raises

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
RX = os.path.join(REPO, "tests", "data", "raa01-rx_10000-1408102050-dwd---bin.gz")


def dakit_command():
    """The dakit command to compare with: DAKIT_EXE, the build beside the
    sources (build/tools/dakit), or dakit on PATH."""
    for exe in (os.environ.get("DAKIT_EXE"), os.path.join(REPO, "build", "tools", "dakit"), shutil.which("dakit")):
        if exe and os.access(exe, os.X_OK):
            return exe
    return None


def test_read_radolan():
    data, meta = dakit.radar.read_radolan(RX)
    assert data.dtype == np.float32 and data.shape == (900, 900)
    assert meta["product"] == "RX" and meta["unit"] == "dBZ" and meta["time"] == "2014-08-10 20:50 UTC"
    assert (meta["rows"], meta["cols"]) == (900, 900)
    # the numbers test_kmeans.c checks for the C reader
    assert np.count_nonzero(~np.isnan(data)) == meta["data_pixels"] == 633455
    assert np.nanmax(data) == meta["max_value"] == 56.5
    assert np.count_nonzero(data >= 5) == 149569
    assert meta["x0_km"] == -523.4622 and meta["y0_km"] == -4658.645


def test_read_radolan_plain_file(tmp_path):
    plain = tmp_path / "rx.bin"
    plain.write_bytes(gzip.decompress(open(RX, "rb").read()))
    a, _ = dakit.radar.read_radolan(plain)
    b, _ = dakit.radar.read_radolan(RX)
    np.testing.assert_array_equal(a, b)


def test_read_radolan_errors(tmp_path):
    absent = str(tmp_path / "absent.gz")
    with raises(dakit.FileError, "cannot open", absent):
        dakit.radar.read_radolan(absent)
    corrupt = bytearray(open(RX, "rb").read(4096))
    for i in range(100, len(corrupt), 7):
        corrupt[i] ^= 0x5A
    (tmp_path / "corrupt.gz").write_bytes(bytes(corrupt))
    with raises(dakit.FormatError, "corrupt", "corrupt.gz"):
        dakit.radar.read_radolan(str(tmp_path / "corrupt.gz"))
    (tmp_path / "text.txt").write_bytes(b"not a composite\n" * 10)
    with raises(dakit.FormatError, "RADOLAN header"):
        dakit.radar.read_radolan(str(tmp_path / "text.txt"))


@pytest.mark.parametrize("backend", backends("kmeans", ("cpu", "opencl", "cuda")))
@pytest.mark.parametrize("options", [{}, {"k": 4, "lam": 0.5, "window": 3, "texture_sigma": 1.5, "min_dbz": 10.0,
                                          "max_iter": 7}], ids=["defaults", "options"])
def test_cluster_equals_the_command(backend, options, tmp_path):
    exe = dakit_command()
    if exe is None:
        pytest.skip("no dakit command to compare with (set DAKIT_EXE, or build it in build/)")
    flags = {"k": "--k", "lam": "--lambda", "window": "--window", "texture_sigma": "--texture-sigma",
             "min_dbz": "--min-dbz", "max_iter": "--iters"}
    out = tmp_path / "labels.npy"
    cmd = [exe, "kmeans", "--radolan", RX, "--labels", str(out), "--backend", backend]
    for name, value in options.items():
        cmd += [flags[name], str(value)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    expected = np.load(out)

    data, _ = dakit.radar.read_radolan(RX)
    labels, centroids = dakit.radar.cluster(data, backend=backend, **options)
    k = options.get("k", 6)
    assert labels.dtype == np.int32 and labels.shape == data.shape
    assert centroids.dtype == np.float32 and centroids.shape == (k, 3)
    np.testing.assert_array_equal(labels, expected)
    # pixels without data or below min_dbz are not clustered; every cluster is used
    clustered = ~np.isnan(data) & (np.nan_to_num(data, nan=-100) >= options.get("min_dbz", 5.0))
    np.testing.assert_array_equal(labels >= 0, clustered)
    assert set(np.unique(labels[clustered])) == set(range(k))


def test_cluster_errors():
    data, _ = dakit.radar.read_radolan(RX)
    with raises(dakit.InvalidArgumentError, "2-D"):
        dakit.radar.cluster(data.ravel())
    # fewer pixels at or above min_dbz than clusters: libdakit's sentence
    with raises(dakit.InvalidArgumentError):
        dakit.radar.cluster(data, min_dbz=56.0, k=50, backend="cpu")
    with raises(dakit.InvalidArgumentError, "window"):
        dakit.radar.cluster(data, window=4, backend="cpu")
