/* The LETKF's observation search and localization weights, one definition
 * for every backend: the core, the reference and the cpu plugin include it
 * as C, the cuda plugin with DK_LETKF_FN set to host and device code, and
 * the opencl plugin carries its text into its program. It keeps to what
 * C99, CUDA C++ and OpenCL C share (no pointers to global memory: the
 * bucket lookup is each backend's own).
 *
 * Positions: a point's coordinates become a position of up to DK_LETKF_POS
 * components: cartesian, the coordinates themselves (each periodic column
 * wrapped into [0, period)); on the sphere, the point on a sphere of
 * DK_LETKF_EARTH_RADIUS_KM (x, y, z in km) from lon, lat in degrees,
 * followed by the vertical coordinate where there is one.
 *
 * Buckets: component a is cut into ncell[a] cells of width cell[a] from
 * origin[a] (cell[a] >= the radius along a: the horizontal radius, the
 * vertical radius, or on the sphere the chord of the radius), so every
 * observation within the radius of a point lies in the point's cell or a
 * neighbour (periodic components wrap). A bucket's key numbers the cells in
 * C order; the core sorts the observations by key. */
#ifndef DAKIT_LETKF_LOCAL_H
#define DAKIT_LETKF_LOCAL_H

#ifndef DK_LETKF_FN
#define DK_LETKF_FN static inline
#endif

#ifdef __OPENCL_VERSION__
typedef ulong dk_letkf_key_t;
#else
#include <math.h>
#include <stdint.h>
typedef uint64_t dk_letkf_key_t;
#endif

#define DK_LETKF_POS 4
/* At most this many cells along a component, so a key fits 64 bits. */
#define DK_LETKF_MAX_CELLS 65535
#define DK_LETKF_SPHERE_KM 6371.0

typedef struct dk_letkf_geometry {
    int metric;   /* 0 cartesian, 1 sphere (dk_letkf_metric) */
    int ncoords;  /* columns of the coordinates */
    int hdims;    /* position components of the horizontal distance (sphere: 3) */
    int vertical; /* 1: position component hdims is the vertical coordinate */
    int dims;     /* position components in all: hdims + vertical */
    int ncell[DK_LETKF_POS];
    int pad_;
    double radius, vradius;
    double period[DK_LETKF_POS]; /* per component, 0 for none (cartesian only) */
    double origin[DK_LETKF_POS], cell[DK_LETKF_POS];
} dk_letkf_geometry;

/* Gaspari & Cohn (1999) eq. 4.10 at z = distance / c (support 2c): 1 at
 * 0, 0 from 2 on. The outer piece is the paper's polynomial factored as
 * (2 - z)^4 (z^2 + 2z - 1/2) / (12 z): expanded, its terms cancel near
 * z = 2 and leave rounding noise of either sign, so an observation just
 * inside the radius would be kept or dropped by chance. */
DK_LETKF_FN double dk_letkf_gc(double z)
{
    if (z >= 2.0)
        return 0.0;
    if (z <= 1.0)
        return (((-0.25 * z + 0.5) * z + 0.625) * z - 5.0 / 3.0) * z * z + 1.0;
    double t = (2.0 - z) * (2.0 - z);
    return t * t * ((z + 2.0) * z - 0.5) / (12.0 * z);
}

/* x wrapped into [0, period) (period > 0). */
DK_LETKF_FN double dk_letkf_wrap(double x, double period)
{
    double w = x - period * floor(x / period);
    return w >= period ? 0.0 : w;
}

/* The position of coordinates c (ncoords values). */
DK_LETKF_FN void dk_letkf_position(const dk_letkf_geometry *g, const double *c, double *pos)
{
    for (int a = 0; a < DK_LETKF_POS; a++)
        pos[a] = 0.0;
    if (g->metric == 1) {
        const double deg = 3.14159265358979323846 / 180.0;
        double lon = c[0] * deg, lat = c[1] * deg;
        pos[0] = DK_LETKF_SPHERE_KM * cos(lat) * cos(lon);
        pos[1] = DK_LETKF_SPHERE_KM * cos(lat) * sin(lon);
        pos[2] = DK_LETKF_SPHERE_KM * sin(lat);
        if (g->vertical)
            pos[3] = c[2];
        return;
    }
    for (int a = 0; a < g->ncoords; a++)
        pos[a] = g->period[a] > 0.0 ? dk_letkf_wrap(c[a], g->period[a]) : c[a];
}

/* |p - q| along component a, the shorter way round a periodic one. */
DK_LETKF_FN double dk_letkf_delta(const dk_letkf_geometry *g, int a, double p, double q)
{
    double d = fabs(p - q);
    if (g->period[a] > 0.0 && d > 0.5 * g->period[a])
        d = g->period[a] - d;
    return d;
}

/* The localization weight rho between positions p and q (0 beyond the radius). */
DK_LETKF_FN double dk_letkf_weight(const dk_letkf_geometry *g, const double *p, const double *q)
{
    double s = 0.0;
    for (int a = 0; a < g->hdims; a++) {
        double d = dk_letkf_delta(g, a, p[a], q[a]);
        s += d * d;
    }
    double dh = sqrt(s);
    if (g->metric == 1) {
        double sine = dh / (2.0 * DK_LETKF_SPHERE_KM);
        dh = 2.0 * DK_LETKF_SPHERE_KM * asin(sine < 1.0 ? sine : 1.0);
    }
    if (dh >= g->radius)
        return 0.0;
    double rho = dk_letkf_gc(2.0 * dh / g->radius);
    if (g->vertical) {
        double dz = dk_letkf_delta(g, g->hdims, p[g->hdims], q[g->hdims]);
        rho = dz >= g->vradius ? 0.0 : rho * dk_letkf_gc(2.0 * dz / g->vradius);
    }
    return rho;
}

/* The cell of position p along component a: in [0, ncell) for a periodic
 * component; clamped to [-2, ncell + 1] otherwise (so that a point far
 * outside the observations' cells has no neighbour among them). */
DK_LETKF_FN int dk_letkf_cell(const dk_letkf_geometry *g, int a, double p)
{
    double c = floor((p - g->origin[a]) / g->cell[a]);
    int n = g->ncell[a];
    if (g->period[a] > 0.0) {
        int b = (int)(c < 0.0 ? 0.0 : c > (double)(n - 1) ? (double)(n - 1) : c);
        return b;
    }
    return (int)(c < -2.0 ? -2.0 : c > (double)(n + 1) ? (double)(n + 1) : c);
}

/* Neighbour cells visited along component a: 3 (the cell and one either
 * side), or every cell of a periodic component of fewer than 3. */
DK_LETKF_FN int dk_letkf_steps(const dk_letkf_geometry *g, int a)
{
    if (a >= g->dims)
        return 1;
    return g->period[a] > 0.0 && g->ncell[a] < 3 ? g->ncell[a] : 3;
}

/* Cell along component a at step s (0 .. steps - 1) around cell b, or -1
 * where there is none. */
DK_LETKF_FN int dk_letkf_step_cell(const dk_letkf_geometry *g, int a, int b, int s)
{
    if (a >= g->dims)
        return 0;
    int n = g->ncell[a];
    if (g->period[a] > 0.0) {
        if (n < 3)
            return s;
        int c = b + s - 1;
        return c < 0 ? c + n : c >= n ? c - n : c;
    }
    int c = b + s - 1;
    return c < 0 || c >= n ? -1 : c;
}

/* The key of the cells b[] (each inside [0, ncell)): an observation's bucket. */
DK_LETKF_FN dk_letkf_key_t dk_letkf_cell_key(const dk_letkf_geometry *g, const int *b)
{
    dk_letkf_key_t k = 0;
    for (int a = 0; a < g->dims; a++)
        k = k * (dk_letkf_key_t)g->ncell[a] + (dk_letkf_key_t)b[a];
    return k;
}

/* How many neighbour visits a point makes (at most 81). */
DK_LETKF_FN int dk_letkf_visits(const dk_letkf_geometry *g)
{
    int v = 1;
    for (int a = 0; a < g->dims; a++)
        v *= dk_letkf_steps(g, a);
    return v;
}

/* The key of visit t (0 .. visits - 1) around the cells b[] of a point, in
 * *key; returns 0 where that visit names no cell. */
DK_LETKF_FN int dk_letkf_visit_key(const dk_letkf_geometry *g, const int *b, int t, dk_letkf_key_t *key)
{
    dk_letkf_key_t k = 0;
    for (int a = 0; a < g->dims; a++) {
        int steps = dk_letkf_steps(g, a);
        int c = dk_letkf_step_cell(g, a, b[a], t % steps);
        t /= steps;
        if (c < 0)
            return 0;
        k = k * (dk_letkf_key_t)g->ncell[a] + (dk_letkf_key_t)c;
    }
    *key = k;
    return 1;
}

#endif
