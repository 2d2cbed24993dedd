"""Radar reflectivity clustering: DWD RADOLAN composites and ODIM_H5 sweeps
in, cluster labels out.

    import dakit
    data = dakit.radar.read_radolan("raa01-rx_10000-1408102050-dwd---bin.gz")
    labels, centroids = dakit.radar.cluster(data, k=6)

read_radolan is libdakit's reader (dk_radolan_read, the one `dakit kmeans
--radolan` uses) and read_odim reads one sweep of an ODIM_H5 volume (with
h5py); both give x/y (metres), latitude/longitude and the time (a
datetime), as an xarray DataArray when xarray is installed. cluster is the
pipeline of `dakit kmeans --radolan` with its defaults, through the same C
calls, so its labels are the command's.
"""
import ctypes
import datetime
import os

import numpy as np

from ._arrays import Buffers
from ._context import Plan, context_for
from ._errors import invalid
from ._gauss import _c_int, _float
from ._kmeans import _KMeansPlan
from ._native import (BOUNDARIES, C, DK_KMEANS_FEATURE_MAJOR, GAUSS_METHODS, GaussDesc, KMeansDesc, KMeansResult,
                      Radolan, TextureStats, check, text)

__all__ = ["read_radolan", "read_odim", "cluster"]

FEATURES = 3  # reflectivity, its local mean, its local standard deviation
DK_ERR_INVALID_ARGUMENT = 1  # dakit.h's dk_status: what a dry scan's texture features return


# DWD's RADOLAN grid: polar stereographic on a sphere of radius 6370.04 km,
# true at 60 N, central meridian 10 E (the PROJ string the command uses)
RADOLAN_PROJ = "+proj=stere +lat_0=90 +lat_ts=60 +lon_0=10 +R=6370040 +x_0=0 +y_0=0 +units=m"
_RADOLAN_R, _RADOLAN_LAT_TS, _RADOLAN_LON_0 = 6370040.0, 60.0, 10.0
# ODIM bins: the 4/3 effective earth radius for the beam, the sphere of this radius for the ground
_EARTH_R = 6371000.0


def _want_xarray(xarray, who):
    """The xarray module when a DataArray is wanted (xarray=None: when it is
    installed), else None."""
    if xarray is False:
        return None
    try:
        import xarray as xr
    except ImportError:
        if xarray:
            raise ImportError("%s(xarray=True) needs xarray (pip install xarray)" % who) from None
        return None
    return xr


def _radolan_latlon(x, y):
    """Latitude and longitude (degrees) of RADOLAN x/y (metres): the inverse
    of the spherical polar stereographic projection, as PROJ computes it for
    RADOLAN_PROJ."""
    k = _RADOLAN_R * (1.0 + np.sin(np.radians(_RADOLAN_LAT_TS)))
    r2 = x * x + y * y
    lat = np.degrees(np.arcsin((k * k - r2) / (k * k + r2)))
    lon = np.degrees(np.arctan2(x, -y)) + _RADOLAN_LON_0
    return lat, lon


def _utc(year, month, day, hour, minute, second=0):
    return datetime.datetime(year, month, day, hour, minute, second, tzinfo=datetime.timezone.utc)


def _as_dataarray(xr, data, dims, coords, meta, name):
    """A DataArray of data with its coordinates; the scalar metadata as
    attributes, time as a numpy datetime64 (UTC) coordinate."""
    c = dict(coords)
    if meta.get("time") is not None:
        c["time"] = np.datetime64(meta["time"].replace(tzinfo=None), "ns")
    attrs = {k: v for k, v in meta.items() if np.ndim(v) == 0 and v is not None and k != "time"}
    return xr.DataArray(data, dims=dims, coords=c, attrs=attrs, name=name)


def read_radolan(path, xarray=None):
    """Reads a RADOLAN composite (RX, EX, WX in dBZ; RW, RY, SF, ... in mm;
    gzip or plain).

    The values are float32, (rows, cols), NaN where there is no data or
    clutter; row 0 is the grid's south edge (as DWD stores it: plot with
    origin="lower"). For the 900 x 900 and 1100 x 900 grids, whose place DWD
    publishes, the coordinates are x (cols,) and y (rows,) in metres of the
    pixel centres in DWD's polar stereographic projection (RADOLAN_PROJ),
    and lat, lon (rows, cols) in degrees; the time is a timezone-aware
    datetime (UTC), None when the header has none.

    xarray None (the default): a DataArray when xarray is installed, else a
    tuple; True: a DataArray (ImportError without xarray); False: a tuple.
    DataArray: dims ("y", "x"), coordinates x, y, lat, lon and time
    (datetime64, UTC), the metadata below as attributes. Tuple: (data,
    meta); meta holds product, time, unit, rows, cols, bytes_per_pixel,
    data_pixels, clutter_pixels, max_value, crs (the PROJ string), and on
    the known grids x0_km, y0_km (the south-west corner of pixel (0, 0)),
    x, y, lat and lon.

    Raises dakit.FileError (cannot open or read) or dakit.FormatError (not
    a RADOLAN composite, truncated, corrupt gzip) with libdakit's sentence."""
    xr = _want_xarray(xarray, "dakit.radar.read_radolan")
    r = Radolan()
    check(C.dk_radolan_read(os.fsencode(path), ctypes.byref(r)), None)
    try:
        rows, cols = r.rows, r.cols
        data = np.ctypeslib.as_array(r.value, shape=(rows * cols,)).reshape(rows, cols).copy()
        meta = {"product": text(r.product), "time": None, "time_text": text(r.time), "unit": text(r.unit),
                "rows": rows, "cols": cols, "bytes_per_pixel": r.bytes_per_pixel,
                "data_pixels": r.data_pixels, "clutter_pixels": r.clutter_pixels,
                "max_value": float(r.max_value)}
    finally:
        C.dk_radolan_free(ctypes.byref(r))
    if meta["time_text"]:  # "2014-08-10 20:50 UTC"
        t = datetime.datetime.strptime(meta["time_text"], "%Y-%m-%d %H:%M UTC")
        meta["time"] = t.replace(tzinfo=datetime.timezone.utc)
    coords = {}
    x0, y0 = ctypes.c_double(), ctypes.c_double()
    if C.dk_radolan_grid_origin(rows, cols, ctypes.byref(x0), ctypes.byref(y0)) == 0:
        meta["x0_km"], meta["y0_km"] = x0.value, y0.value
        meta["crs"] = RADOLAN_PROJ
        x = (x0.value + np.arange(cols) + 0.5) * 1000.0
        y = (y0.value + np.arange(rows) + 0.5) * 1000.0
        lat, lon = _radolan_latlon(x[None, :], y[:, None])
        meta.update(x=x, y=y, lat=lat, lon=lon)
        coords = {"x": ("x", x, {"units": "m", "standard_name": "projection_x_coordinate"}),
                  "y": ("y", y, {"units": "m", "standard_name": "projection_y_coordinate"}),
                  "lat": (("y", "x"), lat, {"units": "degrees_north", "standard_name": "latitude"}),
                  "lon": (("y", "x"), lon, {"units": "degrees_east", "standard_name": "longitude"})}
    if xr is None:
        return data, meta
    name = "reflectivity" if meta["unit"] == "dBZ" else meta["product"]
    out = _as_dataarray(xr, data, ("y", "x"), coords, meta, name)
    out.attrs["units"] = meta["unit"]
    return out


def _odim_attrs(h5, *groups):
    """The attributes of the groups that exist, the later ones winning."""
    out = {}
    for g in groups:
        if g in h5:
            for k, v in h5[g].attrs.items():
                out[k] = v.decode() if isinstance(v, bytes) else v.item() if np.ndim(v) == 0 else v
    return out


def read_odim(path, quantity="DBZH", sweep=1, xarray=None):
    """Reads one sweep of an ODIM_H5 polar volume (EUMETNET OPERA, version
    2.x), as `dakit kmeans --odim` does: /dataset<sweep> (from 1), the
    dataM whose what/quantity is quantity, value = offset + gain * raw;
    what/ and where/ may sit at the data or the dataset level (the data
    level wins). Needs h5py.

    The values are float32 (nrays, nbins), NaN where the bin is nodata (not
    scanned) or undetect (scanned, no echo); ray i is centred at azimuth
    (i + 0.5) * 360 / nrays degrees from north. Coordinates: azimuth
    (nrays,) in degrees, range (nbins,) the slant range of the bin centres
    in metres, x and y (nrays, nbins) the ground distance east and north of
    the radar in metres (the 4/3 effective earth radius model), lat and lon
    from them (the azimuthal equidistant projection around the radar on a
    sphere of 6371 km, as the command's labels.nc); the time is the
    sweep's start (what/startdate, starttime; else /what/date, time) as a
    timezone-aware datetime (UTC).

    xarray: as for read_radolan. DataArray: dims ("azimuth", "range"),
    coordinates azimuth, range, x, y, lat, lon and time, the metadata as
    attributes. Tuple: (data, meta); meta holds quantity, sweep, elangle,
    nrays, nbins, rscale, rstart (km), radar_lat, radar_lon, radar_height,
    source, time, state ((nrays, nbins) uint8: 0 nodata, 1 undetect, 2 a
    value), azimuth, range, x, y, lat and lon.

    Raises dakit.FileError (cannot open), dakit.FormatError (not HDF5 or not
    ODIM_H5, missing attributes) or dakit.InvalidArgumentError (no such
    sweep or quantity)."""
    from ._errors import FileError, FormatError, InvalidArgumentError
    who = "dakit.radar.read_odim"
    xr = _want_xarray(xarray, who)
    try:
        import h5py
    except ImportError:
        raise ImportError("%s needs h5py (pip install h5py)" % who) from None
    if not os.path.exists(path):
        raise FileError("%s: cannot open %s: no such file" % (who, path))
    try:
        h5 = h5py.File(path, "r")
    except OSError as e:
        raise FormatError("%s: %s is not an HDF5 file (%s)" % (who, path, e)) from None
    with h5:
        if "what" not in h5 or "dataset1" not in h5:
            raise FormatError("%s: %s is not ODIM_H5 (no /what or /dataset1)" % (who, path))
        sweep = int(sweep)
        ds = "dataset%d" % sweep
        if ds not in h5:
            n = sum(1 for k in h5 if k.startswith("dataset"))
            raise InvalidArgumentError("%s: %s has no sweep %d (it has /dataset1 to /dataset%d)"
                                       % (who, path, sweep, n))
        found, have = None, []
        for m in range(1, 100):
            g = "%s/data%d" % (ds, m)
            if g not in h5:
                break
            q = _odim_attrs(h5, g + "/what").get("quantity", "?")
            have.append(q)
            if q == quantity:
                found = g
                break
        if found is None:
            raise InvalidArgumentError("%s: %s: sweep %d has no quantity %s (it has: %s)"
                                       % (who, path, sweep, quantity, ", ".join(have) or "none"))
        what = _odim_attrs(h5, ds + "/what", found + "/what")
        where = _odim_attrs(h5, ds + "/where", found + "/where")
        top_what, top_where = _odim_attrs(h5, "what"), _odim_attrs(h5, "where")
        try:
            gain, offset = float(what["gain"]), float(what["offset"])
            nbins, nrays = int(where["nbins"]), int(where["nrays"])
            rscale, elangle = float(where["rscale"]), float(where["elangle"])
        except KeyError as e:
            raise FormatError("%s: %s: sweep %d lacks %s (what/gain, offset, where/elangle, nbins, nrays, rscale)"
                              % (who, path, sweep, e)) from None
        raw = np.asarray(h5[found + "/data"][()], dtype=np.float64)
    if raw.shape != (nrays, nbins):
        raise FormatError("%s: %s: %s/data is %s, not nrays x nbins (%d x %d)"
                          % (who, path, found, raw.shape, nrays, nbins))
    state = np.full(raw.shape, 2, dtype=np.uint8)
    state[raw == float(what.get("undetect", np.nan))] = 1
    state[raw == float(what.get("nodata", np.nan))] = 0
    data = np.where(state == 2, offset + gain * raw, np.nan).astype(np.float32)

    rstart = float(where.get("rstart", 0.0))
    azimuth = (np.arange(nrays) + 0.5) * 360.0 / nrays
    rng = rstart * 1000.0 + (np.arange(nbins) + 0.5) * rscale
    # 4/3 earth: the bin's height, then its ground distance along the great circle
    ke, el = 4.0 / 3.0 * _EARTH_R, np.radians(elangle)
    h = np.sqrt(rng ** 2 + ke ** 2 + 2 * rng * ke * np.sin(el)) - ke
    ground = ke * np.arcsin(rng * np.cos(el) / (ke + h))
    a = np.radians(azimuth)[:, None]
    x, y = ground[None, :] * np.sin(a), ground[None, :] * np.cos(a)
    lat0, lon0 = float(top_where.get("lat", np.nan)), float(top_where.get("lon", np.nan))
    # the azimuthal equidistant inverse on the sphere: along azimuth a for the angle ground / R
    d, p0 = ground[None, :] / _EARTH_R, np.radians(lat0)
    lat = np.arcsin(np.sin(p0) * np.cos(d) + np.cos(p0) * np.sin(d) * np.cos(a))
    lon = lon0 + np.degrees(np.arctan2(np.sin(a) * np.sin(d) * np.cos(p0), np.cos(d) - np.sin(p0) * np.sin(lat)))
    lat = np.degrees(lat)

    date = what.get("startdate") or top_what.get("date", "")
    clock = what.get("starttime") or top_what.get("time", "")
    when = None
    if len(date) == 8 and len(clock) == 6 and (date + clock).isdigit():
        when = _utc(int(date[:4]), int(date[4:6]), int(date[6:]), int(clock[:2]), int(clock[2:4]), int(clock[4:]))
    meta = {"quantity": quantity, "sweep": sweep, "elangle": elangle, "nrays": nrays, "nbins": nbins,
            "rscale": rscale, "rstart": rstart, "radar_lat": lat0, "radar_lon": lon0,
            "radar_height": float(top_where.get("height", np.nan)), "source": top_what.get("source", ""),
            "time": when, "state": state, "azimuth": azimuth, "range": rng, "x": x, "y": y, "lat": lat, "lon": lon}
    if xr is None:
        return data, meta
    coords = {"azimuth": ("azimuth", azimuth, {"units": "degrees", "long_name": "azimuth clockwise from north"}),
              "range": ("range", rng, {"units": "m", "long_name": "slant range to the bin centre"}),
              "x": (("azimuth", "range"), x, {"units": "m", "long_name": "ground distance east of the radar"}),
              "y": (("azimuth", "range"), y, {"units": "m", "long_name": "ground distance north of the radar"}),
              "lat": (("azimuth", "range"), lat, {"units": "degrees_north", "standard_name": "latitude"}),
              "lon": (("azimuth", "range"), lon, {"units": "degrees_east", "standard_name": "longitude"})}
    out = _as_dataarray(xr, data, ("azimuth", "range"), coords, meta, quantity)
    return out


class _GaussPlan(Plan):
    def __init__(self, desc, ctx):
        super().__init__(ctx)
        h = ctypes.c_void_p()
        check(C.dk_gauss_plan_create(self._ctx.handle, ctypes.byref(desc), ctypes.byref(h)), self._ctx.handle)
        self._adopt(h)


def cluster(data, k=6, lam=0.7, window=5, texture_sigma=2.0, min_dbz=5.0, max_iter=20, backend=None):
    """Clusters a reflectivity image as `dakit kmeans --radolan` does.

    data: (rows, cols) reflectivity, NaN (or any value that is not finite)
    where there is no data. Per pixel, the features are the value and its
    local mean and standard deviation over a Gaussian neighbourhood of
    texture_sigma pixels (normalized convolutions that ignore pixels
    without data), each standardized over the clustered pixels; pixels with
    no data or below min_dbz are not clustered. The initial centroids cut
    the reflectivity's range into k equal intervals; then k-means with the
    contiguity cost: lam weighs the feature distance against the share of
    the window x window neighbours with another label; max_iter iterations
    (tol 0). backend: None (the default context), a name or a
    dakit.Context; every step runs there (dakit/kmeans.h's texture calls, a
    gauss plan, the kmeans plan) and only the labels and centroids come back.

    A dry scan (fewer pixels to cluster than k: an all-NaN field, or none at
    or above min_dbz) is an outcome, not an error: every label is -1 and the
    centroids are NaN, as `dakit kmeans --radolan` gives.

    Returns (labels, centroids): labels int32 (rows, cols), -1 where not
    clustered (a DataArray with data's coordinates when data is one);
    centroids float32 (k, 3) in standardized feature units."""
    who = "dakit.radar.cluster"
    value = np.asarray(data)
    if value.ndim != 2:
        raise invalid("%s: data has shape %s; it must be 2-D, (rows, cols)" % (who, value.shape))
    if value.dtype.kind not in "biuf":
        raise invalid("%s: data has dtype %s; it must hold real numbers (reflectivity)" % (who, value.dtype))
    value = np.ascontiguousarray(value, dtype=np.float32)
    rows, cols = value.shape
    n = rows * cols
    k = _c_int(k, "k", who)

    gd = GaussDesc()
    C.dk_gauss_desc_init(ctypes.byref(gd))
    gd.method = GAUSS_METHODS["rf"]  # the pipeline's texture, as `dakit kmeans --radar` makes it
    gd.boundary = BOUNDARIES["zero"]
    gd.ndim = 3
    gd.shape[0], gd.shape[1], gd.shape[2] = FEATURES, rows, cols
    gd.axes = 0x6  # the planes are smoothed over rows and columns, each on its own
    gd.sigma[1] = gd.sigma[2] = _float(texture_sigma, "texture_sigma", who)

    kd = KMeansDesc()
    C.dk_kmeans_desc_init(ctypes.byref(kd))
    kd.n, kd.d, kd.k = n, FEATURES, k
    kd.max_iters = _c_int(max_iter, "max_iter", who)
    kd.tol = 0.0
    kd.layout = DK_KMEANS_FEATURE_MAJOR
    kd.rows, kd.cols = rows, cols
    kd.lambda_ = _float(lam, "lam", who)
    kd.window = _c_int(window, "window", who)
    min_value = _float(min_dbz, "min_dbz", who)

    ctx = context_for(backend)
    labels = np.empty((rows, cols), dtype=np.int32)
    centroids = np.empty((k, FEATURES), dtype=np.float32)
    stats, result = TextureStats(), KMeansResult()
    with _GaussPlan(gd, ctx) as gauss, _KMeansPlan(kd, ctx) as km, Buffers(ctx) as b:
        h = ctx.handle
        bv = b.create(value.nbytes, value)
        planes, points = b.create(FEATURES * n * 4), b.create(FEATURES * n * 4)
        mask, init = b.create(n), b.create(centroids.nbytes)
        bl, bc = b.create(labels.nbytes), b.create(centroids.nbytes)
        check(C.dk_kmeans_texture_planes(km.handle, bv, planes), h)
        check(C.dk_gauss_execute(gauss.handle, planes, planes), h)
        stats.valid = ctypes.c_size_t(-1).value  # stays so when the call fails before counting
        st = C.dk_kmeans_texture_features(km.handle, bv, planes, min_value, points, mask, init, ctypes.byref(stats))
        dry = st == DK_ERR_INVALID_ARGUMENT and stats.valid < k
        if dry:
            labels.fill(-1)
            centroids.fill(np.nan)
        else:
            check(st, h)
            check(C.dk_kmeans_execute(km.handle, points, mask, init, bl, bc, ctypes.byref(result)), h)
            b.read(bl, labels)
            b.read(bc, centroids)
    if hasattr(data, "dims") and hasattr(data, "coords") and hasattr(data, "copy"):  # an xarray DataArray
        labels = data.copy(data=labels)
        labels.name = "labels"
        labels.attrs = {"long_name": "k-means cluster of radar reflectivity texture",
                        "comment": "-1: not clustered (no data, or below min_dbz)"}
    return labels, centroids
