"""dakit.radar: libdakit's RADOLAN reader and the pipeline of `dakit kmeans
--radolan`, compared with the command itself."""
import datetime
import gzip
import math
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
    data, meta = dakit.radar.read_radolan(RX, xarray=False)
    assert data.dtype == np.float32 and data.shape == (900, 900)
    assert meta["product"] == "RX" and meta["unit"] == "dBZ" and meta["time_text"] == "2014-08-10 20:50 UTC"
    assert meta["time"] == datetime.datetime(2014, 8, 10, 20, 50, tzinfo=datetime.timezone.utc)
    assert (meta["rows"], meta["cols"]) == (900, 900)
    # the numbers test_kmeans.c checks for the C reader
    assert np.count_nonzero(~np.isnan(data)) == meta["data_pixels"] == 633455
    assert np.nanmax(data) == meta["max_value"] == 56.5
    assert np.count_nonzero(data >= 5) == 149569
    assert meta["x0_km"] == -523.4622 and meta["y0_km"] == -4658.645


def test_read_radolan_plain_file(tmp_path):
    plain = tmp_path / "rx.bin"
    plain.write_bytes(gzip.decompress(open(RX, "rb").read()))
    a, _ = dakit.radar.read_radolan(plain, xarray=False)
    b, _ = dakit.radar.read_radolan(RX, xarray=False)
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

    data, _ = dakit.radar.read_radolan(RX, xarray=False)
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
    data, _ = dakit.radar.read_radolan(RX, xarray=False)
    with raises(dakit.InvalidArgumentError, "2-D"):
        dakit.radar.cluster(data.ravel())
    with raises(dakit.InvalidArgumentError, "window"):
        dakit.radar.cluster(data, window=4, backend="cpu")


@pytest.mark.parametrize("backend", backends("kmeans", ("cpu", "opencl", "cuda")))
def test_cluster_dry_scan(backend):
    """A dry scan is an outcome: labels of -1 and NaN centroids, as the
    command gives, whether nothing has data, nothing reaches min_dbz or
    fewer pixels than k do."""
    data, _ = dakit.radar.read_radolan(RX, xarray=False)
    for field, opts in ((np.full((120, 90), np.nan, np.float32), {}), (data, {"min_dbz": 70.0}),
                        (data, {"min_dbz": 56.0, "k": 50})):
        labels, centroids = dakit.radar.cluster(field, backend=backend, **opts)
        assert labels.shape == field.shape and labels.dtype == np.int32 and (labels == -1).all()
        assert centroids.shape == (opts.get("k", 6), 3) and np.isnan(centroids).all()


def radolan_latlon(x, y):
    """DWD's spherical polar stereographic inverse (R 6370.04 km, true at
    60 N, central meridian 10 E), written out here as the check."""
    k = 6370040.0 * (1 + math.sin(math.radians(60)))
    r2 = x * x + y * y
    return math.degrees(math.asin((k * k - r2) / (k * k + r2))), math.degrees(math.atan2(x, -y)) + 10


def test_read_radolan_coordinates():
    data, meta = dakit.radar.read_radolan(RX, xarray=False)
    x, y, lat, lon = meta["x"], meta["y"], meta["lat"], meta["lon"]
    assert x.shape == (900,) and y.shape == (900,) and lat.shape == lon.shape == (900, 900)
    # pixel centres in metres from DWD's corner, 1 km apart
    assert x[0] == pytest.approx(-523462.2 + 500) and y[0] == pytest.approx(-4658645 + 500)
    np.testing.assert_allclose(np.diff(x), 1000)
    np.testing.assert_allclose(np.diff(y), 1000)
    for i, j in ((0, 0), (899, 899), (450, 123)):
        assert (lat[i, j], lon[i, j]) == pytest.approx(radolan_latlon(x[j], y[i]), abs=1e-9)
    # DWD's published corners (south-west 46.9526 N 3.5889 E, north-east 54.7405 N 15.7208 E), half a pixel off
    assert abs(lat[0, 0] - 46.9526) < 0.01 and abs(lon[0, 0] - 3.5889) < 0.01
    assert abs(lat[-1, -1] - 54.7405) < 0.01 and abs(lon[-1, -1] - 15.7208) < 0.02
    assert "+units=m" in meta["crs"]


def test_read_radolan_dataarray():
    xr = pytest.importorskip("xarray")
    da = dakit.radar.read_radolan(RX)
    assert isinstance(da, xr.DataArray) and da.dims == ("y", "x") and da.shape == (900, 900)
    data, meta = dakit.radar.read_radolan(RX, xarray=False)
    np.testing.assert_array_equal(da.values, data)
    np.testing.assert_array_equal(da["x"].values, meta["x"])
    np.testing.assert_array_equal(da["lat"].values, meta["lat"])
    assert da["x"].attrs["units"] == "m" and da.attrs["units"] == "dBZ" and da.attrs["product"] == "RX"
    assert da["time"].values == np.datetime64("2014-08-10T20:50")
    # xarray in, xarray out: the labels keep the coordinates
    labels, _ = dakit.radar.cluster(da, backend="cpu", max_iter=2)
    assert isinstance(labels, xr.DataArray) and labels.dims == ("y", "x")
    np.testing.assert_array_equal(labels["lat"].values, meta["lat"])


def test_read_radolan_xarray_false_or_missing(monkeypatch):
    import builtins
    real = builtins.__import__

    def no_xarray(name, *args, **kwargs):
        if name == "xarray":
            raise ImportError("no xarray here")
        return real(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_xarray)
    data, meta = dakit.radar.read_radolan(RX)  # no xarray: the tuple
    assert data.shape == (900, 900) and meta["lat"].shape == (900, 900)
    with pytest.raises(ImportError, match="needs xarray"):
        dakit.radar.read_radolan(RX, xarray=True)


def write_odim(path, lat=50.0, lon=8.0, nrays=360, nbins=120):
    """A small ODIM_H5 volume (the layout tests/make_odim.c writes): sweep 1
    of DBZH as uint8, gain 0.5, offset -32, nodata 255, undetect 0."""
    h5py = pytest.importorskip("h5py")
    az = (np.arange(nrays) + 0.5)[:, None]
    r = ((np.arange(nbins) + 0.5) * 0.5)[None, :]
    z = 10 + 30 * np.exp(-((np.minimum(az, 360 - az) / 15) ** 2 + ((r - 30) / 8) ** 2))
    raw = np.clip(np.round((z + 32) / 0.5), 1, 254).astype(np.uint8)
    raw[:, :5] = 0  # undetect near the radar
    raw[100:130, 110:] = 255  # not scanned
    with h5py.File(path, "w") as f:
        f.attrs["Conventions"] = np.bytes_("ODIM_H5/V2_2")
        w = f.create_group("what")
        for k, v in (("object", "PVOL"), ("date", "20140810"), ("time", "205000"), ("source", "NOD:detst")):
            w.attrs[k] = np.bytes_(v)
        g = f.create_group("where")
        g.attrs["lat"], g.attrs["lon"], g.attrs["height"] = lat, lon, 100.0
        ds = f.create_group("dataset1")
        w = ds.create_group("where")
        w.attrs["elangle"], w.attrs["rscale"], w.attrs["rstart"] = 0.5, 500.0, 0.0
        w.attrs["nbins"], w.attrs["nrays"] = np.int64(nbins), np.int64(nrays)
        ds.create_group("what").attrs["starttime"] = np.bytes_("205030")
        ds["what"].attrs["startdate"] = np.bytes_("20140810")
        d = ds.create_group("data1")
        dw = d.create_group("what")
        dw.attrs["quantity"] = np.bytes_("DBZH")
        dw.attrs["gain"], dw.attrs["offset"], dw.attrs["nodata"], dw.attrs["undetect"] = 0.5, -32.0, 255.0, 0.0
        d.create_dataset("data", data=raw, compression="gzip")
    return raw


def test_read_odim(tmp_path):
    path = str(tmp_path / "vol.h5")
    raw = write_odim(path)
    data, meta = dakit.radar.read_odim(path, xarray=False)
    assert data.shape == (360, 120) and data.dtype == np.float32
    value = raw != 0
    value &= raw != 255
    np.testing.assert_array_equal(np.isnan(data), ~value)
    np.testing.assert_allclose(data[value], -32 + 0.5 * raw[value])
    assert (meta["state"] == 0).sum() == 300 and (meta["state"] == 1).sum() == (raw == 0).sum()
    assert meta["time"] == datetime.datetime(2014, 8, 10, 20, 50, 30, tzinfo=datetime.timezone.utc)
    assert meta["elangle"] == 0.5 and meta["radar_lat"] == 50.0 and meta["radar_lon"] == 8.0
    np.testing.assert_allclose(meta["azimuth"][:2], [0.5, 1.5])
    np.testing.assert_allclose(meta["range"][:2], [250.0, 750.0])
    # x/y: ground metres east and north; a ray due east (azimuth 90.5) has x ~ ground, y ~ 0
    assert meta["x"][90, -1] == pytest.approx(59750 * math.cos(math.radians(0.5)), rel=1e-3)
    assert abs(meta["y"][90, -1]) < 600
    assert meta["lat"][0, -1] > 50.5 and meta["lon"][90, -1] > 8.8
    with raises(dakit.InvalidArgumentError, "no sweep 3"):
        dakit.radar.read_odim(path, sweep=3)
    with raises(dakit.InvalidArgumentError, "no quantity TH"):
        dakit.radar.read_odim(path, quantity="TH")
    (tmp_path / "text.h5").write_bytes(b"not hdf5")
    with raises(dakit.FormatError, "not an HDF5 file"):
        dakit.radar.read_odim(str(tmp_path / "text.h5"))


def test_read_odim_dataarray_and_the_command(tmp_path):
    """read_odim's lat/lon are those of the command's labels.nc (PROJ's
    azimuthal equidistant inverse), and its DataArray clusters to the
    command's labels' shape."""
    xr = pytest.importorskip("xarray")
    h5py = pytest.importorskip("h5py")
    path = str(tmp_path / "vol.h5")
    write_odim(path)
    da = dakit.radar.read_odim(path)
    assert isinstance(da, xr.DataArray) and da.dims == ("azimuth", "range")
    assert da["range"].attrs["units"] == "m" and da["time"].values == np.datetime64("2014-08-10T20:50:30")
    exe = dakit_command()
    if exe is None:
        pytest.skip("no dakit command to compare with (set DAKIT_EXE, or build it in build/)")
    out = str(tmp_path / "ol.nc")
    p = subprocess.run([exe, "kmeans", "--odim", path, "--k", "4", "--labels", out, "--reference"],
                       capture_output=True, text=True)
    if p.returncode != 0 and "without HDF5" in p.stderr:
        pytest.skip(p.stderr.strip())
    assert p.returncode == 0, p.stderr
    with h5py.File(out, "r") as f:
        if "lat" not in f:
            pytest.skip("the command was built without PROJ: labels.nc has no lat/lon")
        np.testing.assert_allclose(da["lat"].values, f["lat"][()], rtol=0, atol=1e-9)
        np.testing.assert_allclose(da["lon"].values, f["lon"][()], rtol=0, atol=1e-9)
