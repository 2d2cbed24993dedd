#!/usr/bin/env bash
# The radar pictures and labels on the map (issue 29):
# - a dry scan (--min-dbz 70) gives labels of -1 everywhere, a picture and
#   exit status 0, for RADOLAN (one process and, where mpirun and
#   libdakit-mpi are here, two ranks) and for an ODIM sweep;
# - the cluster map colours each cluster by its rank in mean reflectivity
#   on a sequential palette: one colour per cluster, darker for stronger
#   (read from the cluster raster that the SVG embeds, against the labels);
# - the map carries latitude/longitude lines (PROJ), coasts and borders
#   when GSHHG is installed and none when DAKIT_GSHHG_DIR names an empty
#   folder, and on an ODIM PPI range rings and the radar's site;
# - labels.nc: x/y in metres as its CRS says, lat/lon those of DWD's
#   spherical polar stereographic grid (and of the ODIM bins) to 1e-9 deg.
#   test_radar_maps.sh DAKIT MAKE_ODIM RADOLAN_FILE [MPIRUN]
# Skips (77) when dakit was built without cairo, PROJ or netCDF.
exec python3 - "$@" <<'PY'
import base64, math, os, re, shutil, struct, subprocess, sys, tempfile, zlib
dakit, make_odim, radolan = sys.argv[1:4]
mpirun = sys.argv[4] if len(sys.argv) > 4 else ""
tmp = tempfile.mkdtemp(prefix="radar-maps-")
P = lambda name: os.path.join(tmp, name)
fails = 0

def check(ok, what, detail=""):
    global fails
    print(("ok   " if ok else "FAIL ") + what + (f": {detail}" if detail and not ok else ""))
    fails += not ok

def run(args, env=None, prefix=()):
    e = dict(os.environ, **(env or {}))
    return subprocess.run(list(prefix) + [dakit] + args, capture_output=True, text=True, timeout=600, env=e)

def png_rows(b):
    """Rows of (r, g, b) tuples of an 8-bit RGB/RGBA PNG given as bytes."""
    pos, idat = 8, b""
    while pos < len(b):
        n, kind = struct.unpack(">I4s", b[pos:pos + 8])
        body = b[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, prev, rows = zlib.decompress(idat), w * bpp, bytearray(w * bpp), []
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + prev[i]) & 255
            elif f == 3: line[i] = (line[i] + (a + prev[i]) // 2) & 255
            elif f == 4:
                p = a + prev[i] - c
                pa, pb, pc = abs(p - a), abs(p - prev[i]), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else prev[i] if pb <= pc else c)) & 255
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, bpp)])
        prev = line
    return rows

def svg_images(path):
    """The rasters an SVG embeds, as (width, height, PNG bytes), in order."""
    s = open(path).read()
    return [(int(w), int(h), base64.b64decode(d)) for w, h, d in
            re.findall(r'<image[^>]*width="(\d+)" height="(\d+)"[^>]*xlink:href="data:image/png;base64,([^"]+)"', s)]

def strokes(path):
    """The (stroke colour, width, dashed) of every stroked path of an SVG."""
    out = set()
    for style in re.findall(r'style="([^"]*stroke:rgb[^"]*)"', open(path).read()):
        c = re.search(r"stroke:rgb\(([^)]*)\)", style).group(1)
        w = re.search(r"stroke-width:([0-9.]+)", style)
        out.add((c, float(w.group(1)) if w else 1.0, "dasharray" in style))
    return out

def npy_int32(path):
    b = open(path, "rb").read()
    hl = struct.unpack("<H", b[8:10])[0]
    header = b[10:10 + hl].decode()
    shape = tuple(int(v) for v in re.search(r"\(([^)]*)\)", header).group(1).split(",") if v.strip())
    data = b[10 + hl:]
    return shape, struct.unpack("<%di" % (len(data) // 4), data)

def ncdump_var(path, var):
    p = subprocess.run(["ncdump", "-p", "15,17", "-v", var, path], capture_output=True, text=True)
    body = p.stdout.split("data:")[1]
    m = re.search(r"\b%s =\s*([^;]*);" % var, body)
    return [float(v) for v in m.group(1).replace("\n", " ").split(",")]

def ncdump_header(path):
    return subprocess.run(["ncdump", "-h", path], capture_output=True, text=True).stdout

# what this dakit was built with
probe = run(["kmeans", "--backend", "cpu", "--radolan", radolan, "--k", "2", "--iters", "1", "--png", P("probe.png")])
if "pictures were not built" in probe.stderr:
    print("SKIP dakit was built without cairo: " + probe.stderr.strip())
    sys.exit(77)
if shutil.which("ncdump") is None:
    print("SKIP ncdump (netcdf-bin) is not installed")
    sys.exit(77)
p = run(["kmeans", "--backend", "cpu", "--radolan", radolan, "--k", "2", "--iters", "1", "--labels", P("probe.nc")])
if p.returncode != 0 or " lat(" not in ncdump_header(P("probe.nc")):
    print("SKIP dakit was built without netCDF or PROJ (labels.nc has no lat/lon): " + p.stderr.strip())
    sys.exit(77)

GRATICULE, COAST, BORDER, RING = ("20%,20%,20%", 0.4, False), ("5%,10%,45%", 0.9, False), \
    ("0%,0%,0%", 0.8, True), ("25%,25%,25%", 0.7, False)
NODATA, BELOW = (140, 140, 140), (224, 224, 224)
gshhg = any(os.path.exists("/usr/share/gmt-gshhg/binned_GSHHS_%s.nc" % r) for r in "cli")

# ---- RADOLAN: clusters by mean reflectivity, the map ----
p = run(["kmeans", "--backend", "cpu", "--radolan", radolan, "--k", "6", "--iters", "5", "--labels", P("l.npy"),
         "--png", P("c.svg")])
check(p.returncode == 0, "kmeans --radolan --png c.svg", p.stderr.strip()[:300])
means = {int(c): float(m) for c, m in re.findall(r"cluster (\d+): \d+ pixels, mean (-?[0-9.]+) dBZ", p.stdout)}
check(len(means) == 6, "six clusters with their mean reflectivity", p.stdout[-400:])
shape, labels = npy_int32(P("l.npy"))
imgs = [i for i in svg_images(P("c.svg")) if (i[1], i[0]) == shape]
check(len(imgs) == 2, "the SVG embeds the reflectivity and the cluster rasters", str([i[:2] for i in svg_images(P("c.svg"))]))
if len(imgs) == 2 and len(means) == 6:
    rows, cols = shape
    pix = png_rows(imgs[1][2])
    colour_of, bad = {}, 0
    for r in range(rows):
        for c in range(cols):
            l, px = labels[r * cols + c], pix[rows - 1 - r][c]  # row 0 (south) at the bottom
            if l < 0:
                bad += px not in (NODATA, BELOW)
            else:
                colour_of.setdefault(l, set()).add(px)
    check(bad == 0, "unclustered pixels are the two greys", f"{bad} are not")
    check(all(len(v) == 1 for v in colour_of.values()) and len(colour_of) == 6, "one colour per cluster",
          str({k: list(v)[:3] for k, v in colour_of.items()}))
    lum = lambda rgb: 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]
    by_mean = sorted(colour_of, key=lambda l: means[l])
    ls = [lum(next(iter(colour_of[l]))) for l in by_mean]
    check(all(a > b for a, b in zip(ls, ls[1:])), "a sequential palette: the stronger the mean, the darker",
          f"means {[means[l] for l in by_mean]}, luminance {[round(v) for v in ls]}")
    check(all(next(iter(v)) not in (NODATA, BELOW) for v in colour_of.values()), "no cluster is grey")
s = strokes(P("c.svg"))
check(GRATICULE in s, "latitude/longitude lines on the RADOLAN map", str(s))
if gshhg:
    check(COAST in s and BORDER in s, "coasts and borders (GSHHG is installed)", str(s))
else:
    print("skip coasts and borders: no GSHHG in /usr/share/gmt-gshhg (Debian: gmt-gshhg-low)")
empty = P("no-gshhg")
os.makedirs(empty)
p = run(["kmeans", "--backend", "cpu", "--radolan", radolan, "--k", "6", "--iters", "1", "--png", P("c0.svg")],
        env={"DAKIT_GSHHG_DIR": empty})
s = strokes(P("c0.svg")) if p.returncode == 0 else set()
check(p.returncode == 0 and GRATICULE in s and COAST not in s and BORDER not in s,
      "DAKIT_GSHHG_DIR without files: the map has no coasts or borders and is still drawn", p.stderr[:300])

# ---- a dry scan ----
def dry_checks(args, what, prefix=(), n=None):
    p = run(args, prefix=prefix)
    check(p.returncode == 0, what + ": exit status 0", (p.stderr or p.stdout).strip()[:300])
    check("dry scan" in p.stdout, what + ": says it is a dry scan", p.stdout[-300:])
    if os.path.exists(args[args.index("--labels") + 1]):
        shape, v = npy_int32(args[args.index("--labels") + 1])
        check(set(v) == {-1} and (n is None or len(v) == n), what + ": every label is -1", f"{shape} {set(v)}")
    else:
        check(False, what + ": labels written")
    png = args[args.index("--png") + 1]
    check(os.path.exists(png) and os.path.getsize(png) > 10000, what + ": a picture")

dry_checks(["kmeans", "--backend", "cpu", "--radolan", radolan, "--min-dbz", "70", "--labels", P("dry.npy"),
            "--png", P("dry.png")], "RADOLAN --min-dbz 70", n=810000)
p = run(["kmeans", "--backend", "cpu", "--radolan", radolan, "--min-dbz", "70", "--png", P("dry.svg")])
imgs = [i for i in svg_images(P("dry.svg")) if i[0] == 900] if p.returncode == 0 else []
check(len(imgs) == 2 and {px for row in png_rows(imgs[1][2]) for px in row} <= {NODATA, BELOW},
      "the dry scan's cluster map is all grey")
if mpirun and os.path.exists(mpirun):
    env_root = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    # under AddressSanitizer, as tools/sanitize runs the mpi suite: OpenMPI
    # unloads its components at MPI_Finalize, so what they keep cannot be
    # told from a leak of dakit's
    if "detect_leaks=1" in os.environ.get("ASAN_OPTIONS", ""):
        env_root["ASAN_OPTIONS"] = os.environ["ASAN_OPTIONS"].replace("detect_leaks=1", "detect_leaks=0")
    os.environ.update(env_root)
    dry_checks(["kmeans", "--backend", "cpu", "--radolan", radolan, "--min-dbz", "70", "--labels", P("mdry.npy"),
                "--png", P("mdry.png")], "RADOLAN --min-dbz 70 under mpirun -n 2",
               prefix=(mpirun, "--oversubscribe", "-n", "2"), n=810000)

# ---- ODIM: range rings and the site; a dry sweep ----
subprocess.run([make_odim, P("vol.h5")], check=True)
p = run(["kmeans", "--backend", "cpu", "--odim", P("vol.h5"), "--k", "4", "--labels", P("ol.nc"), "--png", P("ppi.svg")])
check(p.returncode == 0, "kmeans --odim --png ppi.svg", p.stderr.strip()[:300])
s = strokes(P("ppi.svg"))
check(GRATICULE in s and RING in s, "latitude/longitude lines and range rings on the PPI", str(s))
check(("0%,0%,0%", 1.2, False) in s, "the radar's site marked on the PPI", str(s))
dry_checks(["kmeans", "--backend", "cpu", "--odim", P("vol.h5"), "--min-dbz", "70", "--labels", P("odry.npy"),
            "--png", P("odry.png")], "ODIM --min-dbz 70", n=360 * 120)

# ---- labels.nc: metres, and lat/lon of the projection ----
p = run(["kmeans", "--backend", "cpu", "--radolan", radolan, "--iters", "1", "--labels", P("l.nc")])
h = ncdump_header(P("l.nc"))
check(p.returncode == 0 and 'x:units = "m"' in h and 'y:units = "m"' in h and "+units=m" in h, "labels.nc: x/y in metres, as the CRS", h[:800])
check('crs:crs_wkt = "PROJCRS' in h and "metre" in h, "labels.nc: crs_wkt from PROJ in metres")
x, y = ncdump_var(P("l.nc"), "x"), ncdump_var(P("l.nc"), "y")
check(abs(x[0] - (-523462.2 + 500)) < 1e-6 and abs(y[0] - (-4658645 + 500)) < 1e-6 and abs(x[1] - x[0] - 1000) < 1e-6,
      "labels.nc: pixel centres in metres from DWD's corner", f"{x[:2]} {y[:1]}")
lat, lon = ncdump_var(P("l.nc"), "lat"), ncdump_var(P("l.nc"), "lon")
k = 6370040 * (1 + math.sin(math.radians(60)))
worst = 0
for (i, j) in ((0, 0), (0, 899), (899, 0), (899, 899), (450, 321)):
    r2 = x[j] ** 2 + y[i] ** 2
    la, lo = math.degrees(math.asin((k * k - r2) / (k * k + r2))), math.degrees(math.atan2(x[j], -y[i])) + 10
    worst = max(worst, abs(lat[i * 900 + j] - la), abs(lon[i * 900 + j] - lo))
check(worst < 1e-9, "labels.nc: lat/lon of DWD's spherical polar stereographic grid", f"off by {worst} deg")
# DWD's published corners of the 900 x 900 grid, half a pixel from the centres
check(abs(lat[0] - 46.9526) < 0.01 and abs(lon[0] - 3.5889) < 0.01 and abs(lat[-1] - 54.7405) < 0.01 and
      abs(lon[-1] - 15.7208) < 0.02, "labels.nc: DWD's corners", f"{lat[0]} {lon[0]} {lat[-1]} {lon[-1]}")
olat, olon = ncdump_var(P("ol.nc"), "lat"), ncdump_var(P("ol.nc"), "lon")
rng = ncdump_var(P("ol.nc"), "range")
worst = 0
for (i, j) in ((0, 0), (90, 60), (200, 119), (359, 7)):
    a, el, ke, R = math.radians(i + 0.5), math.radians(0.5), 4 / 3 * 6371000, 6371000
    hgt = math.sqrt(rng[j] ** 2 + ke ** 2 + 2 * rng[j] * ke * math.sin(el)) - ke
    d = ke * math.asin(rng[j] * math.cos(el) / (ke + hgt)) / R
    p0 = math.radians(50)
    la = math.asin(math.sin(p0) * math.cos(d) + math.cos(p0) * math.sin(d) * math.cos(a))
    lo = 8 + math.degrees(math.atan2(math.sin(a) * math.sin(d) * math.cos(p0), math.cos(d) - math.sin(p0) * math.sin(la)))
    worst = max(worst, abs(olat[i * 120 + j] - math.degrees(la)), abs(olon[i * 120 + j] - lo))
check(worst < 1e-9, "ODIM labels.nc: lat/lon of the bins (4/3 earth, great circle)", f"off by {worst} deg")

print(f"{fails} failure(s)")
sys.exit(1 if fails else 0)
PY
