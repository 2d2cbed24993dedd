#!/usr/bin/env bash
# Every picture the dakit command draws, in every format it offers: the
# demo, the Lorenz-96 RMSE, the radar cluster map and the gbees marginals
# come out as a PNG of the figure's size whose pixels decode (and hold the
# colours the picture promises: the cluster palette and the greys), an SVG
# that parses as XML and a PDF with its header and trailer; a picture name
# with another extension is refused before any work and leaves no file.
# Skips (77) when dakit was built without cairo.
exec python3 - "$@" <<'PY'
import os, struct, subprocess, sys, tempfile, zlib
import xml.etree.ElementTree as ET
dakit, radolan = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix="pictures-")
fails = 0

def check(ok, what, detail=""):
    global fails
    print(("ok   " if ok else "FAIL ") + what + (f": {detail}" if detail and not ok else ""))
    fails += not ok

def run(args):
    return subprocess.run([dakit] + args, capture_output=True, text=True, timeout=600)

def png_pixels(path):
    """(width, height, set of (r, g, b)) of an 8-bit RGB or RGBA PNG, unfiltered here."""
    b = open(path, "rb").read()
    assert b[:8] == b"\x89PNG\r\n\x1a\n", "no PNG signature"
    pos, idat, w = 8, b"", None
    while pos < len(b):
        n, kind = struct.unpack(">I4s", b[pos:pos + 8])
        body = b[pos + 8:pos + 8 + n]
        if zlib.crc32(kind + body) != struct.unpack(">I", b[pos + 8 + n:pos + 12 + n])[0]:
            raise ValueError(f"bad CRC in chunk {kind}")
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), f"depth {depth}, colour type {ctype}"
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + n
    raw, stride, prev, colours = zlib.decompress(idat), w * bpp, bytearray(w * bpp), set()
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
        colours.update(bytes(line[i:i + 3]) for i in range(0, stride, bpp * 3))  # every third pixel
        prev = line
    return w, h, colours

def check_png(path, what, size=None, colours=()):
    try:
        w, h, seen = png_pixels(path)
    except Exception as e:
        check(False, what + ": a PNG that decodes", str(e))
        return
    check(size is None or (w, h) == size, what + f": PNG of {size or 'any size'}", f"{w} x {h}")
    check(len(seen) > 50, what + ": drawn (text, axes and data give many colours)", f"{len(seen)} colours")
    missing = [c for c in colours if bytes(c) not in seen]
    check(not missing, what + ": holds the colours it promises", f"missing {missing}")

def check_svg(path, what):
    try:
        root = ET.parse(path).getroot()
        ok = root.tag.endswith("svg") and float(root.get("width").rstrip("pt")) > 100 and len(list(root.iter())) > 50
        check(ok, what + ": SVG that parses as XML with a drawing in it", root.tag)
    except Exception as e:
        check(False, what + ": SVG that parses as XML", str(e))

def check_pdf(path, what):
    b = open(path, "rb").read() if os.path.exists(path) else b""
    check(b.startswith(b"%PDF-") and b.rstrip().endswith(b"%%EOF") and len(b) > 2000, what + ": a whole PDF")

P = lambda name: os.path.join(tmp, name)

p = run(["demo", "--backend", "cpu", "--size", "256", "--out", P("demo.png")])
if p.returncode != 0 and "pictures were not built" in p.stderr:
    print("SKIP dakit was built without cairo: " + p.stderr.strip())
    sys.exit(77)
check(p.returncode == 0, "dakit demo draws demo.png", p.stderr.strip()[:300])
check_png(P("demo.png"), "demo", (1620, 560))
for ext, checker in (("svg", check_svg), ("pdf", check_pdf)):
    p = run(["demo", "--backend", "cpu", "--size", "256", "--out", P("demo." + ext)])
    check(p.returncode == 0, f"dakit demo --out demo.{ext}", p.stderr.strip()[:300])
    checker(P("demo." + ext), "demo")

p = run(["enkf", "l96", "--backend", "cpu", "--members", "10", "--spinup", "20", "--cycles", "60",
         "--png", P("l96.png"), "--svg", P("l96.svg"), "--pdf", P("l96.pdf")])
check(p.returncode == 0, "dakit enkf l96 draws PNG, SVG and PDF", p.stderr.strip()[:300])
check_png(P("l96.png"), "enkf l96", (1000, 520))
check_svg(P("l96.svg"), "enkf l96")
check_pdf(P("l96.pdf"), "enkf l96")

# the cluster map: the sequential palette's two ends (the weakest and the
# strongest cluster) and the two greys; tests/test_radar_maps.sh checks
# the order
palette_ends = [(253, 226, 120), (62, 12, 84)]
greys = [(140, 140, 140), (224, 224, 224)]
p = run(["kmeans", "--backend", "cpu", "--radolan", radolan, "--k", "6", "--png", P("clusters.png")])
check(p.returncode == 0, "dakit kmeans --radolan draws clusters.png", p.stderr.strip()[:300])
check_png(P("clusters.png"), "radar cluster map", None, palette_ends + greys)
p = run(["kmeans", "--backend", "cpu", "--radolan", radolan, "--k", "6", "--png", P("clusters.svg")])
check(p.returncode == 0, "dakit kmeans --radolan --png clusters.svg", p.stderr.strip()[:300])
check_svg(P("clusters.svg"), "radar cluster map")

meas = P("meas")
os.makedirs(meas)
with open(os.path.join(meas, "measurement0.txt"), "w") as f:
    f.write("mean\n-11.5 -10.0 9.5\n\ncovariance\n1 0 0\n0 1 0\n0 0 1\n\nperiod\n0.1\n")
p = run(["gbees", "--model", "lorenz63", "--meas", meas, "--out", P("run"), "--snapshots", "2", "--backend", "cpu"])
check(p.returncode == 0, "a short gbees run", p.stderr.strip()[:300])
for fmt in ("png", "svg", "pdf"):
    p = run(["gbees-plot", P("run"), "--format", fmt])
    check(p.returncode == 0, f"dakit gbees-plot --format {fmt}", p.stderr.strip()[:300])
    for k in (0, 1):
        path = os.path.join(P("run"), f"pdf_0_{k}.{fmt}")
        {"png": lambda q, w: check_png(q, w, None, [(8, 48, 107)]), "svg": check_svg, "pdf": check_pdf}[fmt](
            path, f"gbees-plot pdf_0_{k}.{fmt}")

# a picture name the tools cannot write: refused before any work, nothing left
for args in (["demo", "--backend", "cpu", "--size", "64", "--out", P("demo.jpg")],
             ["enkf", "l96", "--backend", "cpu", "--cycles", "2", "--spinup", "0", "--png", P("l96.gif")],
             ["kmeans", "--backend", "cpu", "--radolan", radolan, "--png", P("clusters.tiff")]):
    p = run(args)
    check(p.returncode == 1 and ".png, .svg or .pdf" in p.stderr and not os.path.exists(args[-1]),
          f"{args[0]} refuses {os.path.basename(args[-1])}", p.stderr.strip()[:300])
p = run(["gbees-plot", P("run"), "--format", "jpg"])
check(p.returncode == 2 and "png, svg or pdf" in p.stderr, "gbees-plot refuses --format jpg", p.stderr.strip())

print(f"{fails} failure(s)")
sys.exit(1 if fails else 0)
PY
