#include "kmeans/geo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- projections ---- */

#ifdef DK_HAVE_PROJ
#include <proj.h>

struct geo_proj {
    PJ_CONTEXT *ctx;
    PJ *op;
    char *wkt;
};

int geo_available(void) { return 1; }

geo_proj *geo_open(const char *definition, char *err, size_t len)
{
    geo_proj *g = calloc(1, sizeof *g);
    if (!g || !(g->ctx = proj_context_create())) {
        snprintf(err, len, "out of memory for a PROJ context");
        free(g);
        return NULL;
    }
    proj_log_level(g->ctx, PJ_LOG_NONE); /* failures come back as sentences, not on stderr */
    if (!(g->op = proj_create(g->ctx, definition))) {
        snprintf(err, len, "PROJ refuses '%s': %s", definition,
                 proj_context_errno_string(g->ctx, proj_context_errno(g->ctx)));
        geo_close(g);
        return NULL;
    }
    return g;
}

void geo_close(geo_proj *g)
{
    if (!g)
        return;
    if (g->op)
        proj_destroy(g->op);
    free(g->wkt);
    proj_context_destroy(g->ctx);
    free(g);
}

/* A PROJ-string operation takes radians and gives metres forward. */
static void transform(geo_proj *g, PJ_DIRECTION dir, double *a, double *b, size_t n)
{
    const double d2r = M_PI / 180.0;
    if (dir == PJ_FWD)
        for (size_t i = 0; i < n; i++)
            a[i] *= d2r, b[i] *= d2r;
    proj_trans_generic(g->op, dir, a, sizeof *a, n, b, sizeof *b, n, NULL, 0, 0, NULL, 0, 0);
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i]) || fabs(a[i]) >= HUGE_VAL / 2 || fabs(b[i]) >= HUGE_VAL / 2)
            a[i] = b[i] = NAN;
        else if (dir == PJ_INV)
            a[i] /= d2r, b[i] /= d2r;
    }
}

void geo_forward(geo_proj *g, double *lon_x, double *lat_y, size_t n) { transform(g, PJ_FWD, lon_x, lat_y, n); }
void geo_inverse(geo_proj *g, double *x_lon, double *y_lat, size_t n) { transform(g, PJ_INV, x_lon, y_lat, n); }

const char *geo_wkt(geo_proj *g)
{
    if (g->wkt)
        return g->wkt;
    /* the CRS whose conversion the operation is */
    const char *def = proj_as_proj_string(g->ctx, g->op, PJ_PROJ_5, NULL);
    char crs_def[1024];
    PJ *crs = NULL;
    if (def && snprintf(crs_def, sizeof crs_def, "%s +type=crs", def) < (int)sizeof crs_def)
        crs = proj_create(g->ctx, crs_def);
    const char *w = crs ? proj_as_wkt(g->ctx, crs, PJ_WKT2_2019, NULL) : NULL;
    g->wkt = strdup(w ? w : "");
    if (crs)
        proj_destroy(crs);
    return g->wkt ? g->wkt : "";
}

#else

int geo_available(void) { return 0; }
geo_proj *geo_open(const char *definition, char *err, size_t len)
{
    (void)definition;
    snprintf(err, len, "this dakit was built without PROJ (install libproj-dev, as tools/setup does, and run "
                       "meson setup again)");
    return NULL;
}
void geo_close(geo_proj *g) { (void)g; }
void geo_forward(geo_proj *g, double *lon_x, double *lat_y, size_t n) { (void)g, (void)lon_x, (void)lat_y, (void)n; }
void geo_inverse(geo_proj *g, double *x_lon, double *y_lat, size_t n) { (void)g, (void)x_lon, (void)y_lat, (void)n; }
const char *geo_wkt(geo_proj *g)
{
    (void)g;
    return "";
}

#endif

/* ---- GSHHG shorelines and borders ---- */

void geo_lines_free(geo_lines *l)
{
    free(l->start);
    free(l->lon);
    free(l->lat);
    memset(l, 0, sizeof *l);
}

#ifdef DK_HAVE_NETCDF
#include <netcdf.h>

/* The file of kind and resolution (c, l, i, h, f) when it is installed. */
static int gshhg_path(int kind, char res, char *path, size_t n)
{
    /* DAKIT_GSHHG_DIR, when set, is the only place looked in */
    const char *env = getenv("DAKIT_GSHHG_DIR");
    const char *dirs[2] = {env, env ? NULL : "/usr/share/gmt-gshhg"};
    for (int d = 0; d < 2; d++) {
        if (!dirs[d])
            continue;
        snprintf(path, n, "%s/binned_%s_%c.nc", dirs[d], kind ? "border" : "GSHHS", res);
        FILE *f = fopen(path, "rb");
        if (f) {
            fclose(f);
            return 1;
        }
    }
    return 0;
}

static int get_ints(int id, const char *name, int *out)
{
    int v;
    return nc_inq_varid(id, name, &v) == NC_NOERR && nc_get_var_int(id, v, out) == NC_NOERR ? 0 : -1;
}

/* 16-bit values read as stored (netCDF would refuse the negative ones as unsigned) */
static int get_shorts(int id, const char *name, unsigned short *out)
{
    int v;
    return nc_inq_varid(id, name, &v) == NC_NOERR && nc_get_var_short(id, v, (short *)out) == NC_NOERR ? 0 : -1;
}

/* Each segment's point count and level: the border files keep them in two
 * arrays, the shoreline files packed in one (count << 9 | level << 6 | exit
 * and entry sides). */
static int segment_info(int id, size_t ns, int *npt, int *level)
{
    unsigned short *a = malloc(ns * sizeof *a), *b = malloc(ns * sizeof *b);
    int rc = -1;
    if (a && b && !get_shorts(id, "N_points_for_a_segment", a) && !get_shorts(id, "Hierarchial_level_of_a_segment", b)) {
        for (size_t s = 0; s < ns; s++)
            npt[s] = a[s], level[s] = b[s];
        rc = 0;
    } else if (!get_ints(id, "Embedded_npts_levels_exit_entry_for_a_segment", npt)) {
        for (size_t s = 0; s < ns; s++)
            level[s] = (npt[s] >> 6) & 7, npt[s] = (int)((unsigned)npt[s] >> 9);
        rc = 0;
    }
    free(a), free(b);
    return rc;
}

static size_t dim_len(int id, const char *name)
{
    int d;
    size_t n = 0;
    return nc_inq_dimid(id, name, &d) == NC_NOERR && nc_inq_dimlen(id, d, &n) == NC_NOERR ? n : 0;
}

/* GMT's binned layout: the globe in square bins numbered row by row from
 * the north-west corner; a bin lists its segments, a segment its points as
 * 16-bit fractions of the bin's side from its south-west corner. Level 1 is
 * the sea's shore (coasts) or a national border, 2 a lake's shore (coasts). */
int geo_shorelines(int kind, double lon0, double lon1, double lat0, double lat1, double span_km, geo_lines *out)
{
    memset(out, 0, sizeof *out);
    const char *order = span_km < 400 ? "hifl" : "ilhc";
    char path[4096];
    int found = 0;
    for (const char *r = order; *r && !found; r++)
        found = gshhg_path(kind, *r, path, sizeof path);
    if (!found)
        return 0;
    int id, rc = -1;
    if (nc_open(path, NC_NOWRITE, &id) != NC_NOERR)
        return -1;
    size_t nb = dim_len(id, "Dimension_of_bin_arrays"), ns = dim_len(id, "Dimension_of_segment_arrays");
    size_t np = dim_len(id, "Dimension_of_point_arrays");
    int minutes = 0, nx = 0;
    int *first_seg = malloc((nb ? nb : 1) * sizeof *first_seg), *first_pt = malloc((ns ? ns : 1) * sizeof *first_pt);
    unsigned short *nseg = malloc((nb ? nb : 1) * sizeof *nseg);
    int *npt = malloc((ns ? ns : 1) * sizeof *npt), *level = malloc((ns ? ns : 1) * sizeof *level);
    unsigned short *rx = malloc((np ? np : 1) * sizeof *rx), *ry = malloc((np ? np : 1) * sizeof *ry);
    if (!first_seg || !first_pt || !nseg || !npt || !level || !rx || !ry || !nb || !ns || !np)
        goto done;
    if (get_ints(id, "Bin_size_in_minutes", &minutes) || get_ints(id, "N_bins_in_360_longitude_range", &nx) ||
        get_ints(id, "Id_of_first_segment_in_a_bin", first_seg) || get_shorts(id, "N_segments_in_a_bin", nseg) ||
        segment_info(id, ns, npt, level) ||
        get_ints(id, "Id_of_first_point_in_a_segment", first_pt) ||
        get_shorts(id, "Relative_longitude_from_SW_corner_of_bin", rx) ||
        get_shorts(id, "Relative_latitude_from_SW_corner_of_bin", ry) || minutes <= 0 || nx <= 0)
        goto done;
    const double side = minutes / 60.0;
    size_t cap_lines = 0, cap_pts = 0;
    for (size_t b = 0; b < nb; b++) {
        double bw = (double)(b % (size_t)nx) * side, bs = 90.0 - (double)(b / (size_t)nx + 1) * side;
        if (bw >= 180)
            bw -= 360;
        if (bs > lat1 || bs + side < lat0 || bw > lon1 || bw + side < lon0)
            continue;
        for (size_t s = first_seg[b] < 0 ? ns : (size_t)first_seg[b]; s < (size_t)first_seg[b] + nseg[b] && s < ns; s++) {
            if (level[s] < 1 || level[s] > (kind ? 1 : 2) || npt[s] < 0 || first_pt[s] < 0 ||
                (size_t)first_pt[s] + (size_t)npt[s] > np)
                continue;
            if (out->nlines + 2 > cap_lines) {
                cap_lines = cap_lines ? 2 * cap_lines : 256;
                size_t *st = realloc(out->start, cap_lines * sizeof *st);
                if (!st)
                    goto done;
                out->start = st;
            }
            if (out->npoints + (size_t)npt[s] > cap_pts) {
                cap_pts = (out->npoints + (size_t)npt[s]) * 2;
                double *lo = realloc(out->lon, cap_pts * sizeof *lo);
                if (lo)
                    out->lon = lo;
                double *la = realloc(out->lat, cap_pts * sizeof *la);
                if (la)
                    out->lat = la;
                if (!lo || !la)
                    goto done;
            }
            out->start[out->nlines++] = out->npoints;
            for (size_t p = (size_t)first_pt[s]; p < (size_t)first_pt[s] + (size_t)npt[s]; p++) {
                out->lon[out->npoints] = bw + rx[p] * side / 65535.0;
                out->lat[out->npoints] = bs + ry[p] * side / 65535.0;
                out->npoints++;
            }
        }
    }
    if (!out->start && !(out->start = malloc(sizeof *out->start)))
        goto done;
    out->start[out->nlines] = out->npoints;
    rc = 0;
done:
    nc_close(id);
    free(first_seg), free(first_pt), free(nseg), free(npt), free(level), free(rx), free(ry);
    if (rc)
        geo_lines_free(out);
    return rc;
}

#else

int geo_shorelines(int kind, double lon0, double lon1, double lat0, double lat1, double span_km, geo_lines *out)
{
    (void)kind, (void)lon0, (void)lon1, (void)lat0, (void)lat1, (void)span_km;
    memset(out, 0, sizeof *out);
    return 0;
}

#endif
