/* The letkf conformance cases, and how each is checked.
 *
 * Each case draws grid and observation coordinates (1-D, 2-D, 3-D
 * cartesian with or without periodic columns and a vertical coordinate,
 * or lon/lat on the sphere with or without one), the ensembles Xb and Yb,
 * yo and r, and runs dk_letkf_reference once; every backend and variant
 * then runs the same case through a plan, either on buffers with xa apart
 * from xb (after a first analysis with other observations on the same
 * plan, so that state kept from an earlier call shows; xb must come back
 * unchanged) or through dk_letkf_execute_host in place (xa == xb).
 *
 * error = max over points i and members l of |Xa[i,l] - ref[i,l]| / s_i,
 * s_i = max_l max(|Xb[i,l]|, |ref[i,l]|), the magnitude of the point's
 * numbers; the spread's error |spread_i - ref_i| / s_i counts too, and the
 * observations used per point must equal the reference's exactly (the
 * search and the cap are the same integer decisions on the same float64
 * distances everywhere).
 *
 * float64, tolerance 1e-10: a backend may add A's and b's terms in another
 * order (at most a few hundred terms of like magnitude: ~p eps relative)
 * and use another backward-stable eigensolver (A + E with ||E|| <= c k eps
 * ||A||), or none (the cuda warp variant: a Householder reduction, stable
 * alike, then shifted solves with a rational approximation of x^-1/2 good
 * to 2e-14 relative); the maps lambda -> 1 / (g + lambda) and sqrt((k -
 * 1) / (g + lambda)) amplify a relative perturbation of A by at most ||A||
 * / g, since g + lambda >= g = (k - 1) / inflation. Here k <= 128 and ||A||
 * / g <= ~1e3, so k eps ||A|| / g stays below 3e-11; a wrong term, weight
 * or option moves the result by far more than 1e-10.
 * float32, tolerance 2^-23 + 1e-10: the definition solves each point in
 * float64 and rounds once on writing, so two backends' values differ by
 * the float64 difference above plus at most one float32 rounding (2^-23
 * relative to the point's magnitude) where they straddle a rounding
 * boundary; the spread is float64 and keeps 1e-10. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "harness/conform.h"

enum geometry {
    G_1D,       /* x */
    G_2D,       /* x, y */
    G_3D,       /* x, y, z */
    G_1D_V,     /* x, vertical */
    G_2D_V,     /* x, y, vertical */
    G_SPHERE,   /* lon, lat */
    G_SPHERE_V  /* lon, lat, vertical */
};

typedef struct letkf_case {
    const char *name;
    dk_dtype dtype;
    int geometry;
    size_t n, k, m;
    double extent;    /* cartesian: the box's side (and the period of periodic columns); sphere: unused */
    double radius;    /* km on the sphere */
    double vradius;   /* > 0 with a vertical coordinate, drawn in [0, 10) */
    int periodic;     /* bit a: column a is periodic with period extent */
    size_t max_obs;
    double inflation, rtpp, rtps;
    int in_place;     /* through dk_letkf_execute_host with xa == xb */
    int diagnostics;  /* ask for nobs and spread */
    int layout;       /* 0 random; 1 both on the integer lattice (ties); 2 grid over 3 x the observations' box;
                         3 the grid a regular lattice of side n^(1/columns) over the box, observations random */
    int quick;
    size_t wstride;   /* > 0: weight interpolation from every wstride-th lattice point per axis (layout 3) */
} letkf_case;

#define F64 DK_F64
#define F32 DK_F32

static letkf_case cases[] = {
    /* name             dtype geometry    n    k   m     extent radius vrad per cap infl  rtpp rtps inpl diag lay quick wstride */
    {"1d",              F64, G_1D,       300, 8,   200,  100,  10,    0,   0, 0,  1.0,  0,   0,   0,   1,   0,  1, 0},
    {"1d_ring_l96",     F64, G_1D,       40,  20,  40,   40,   15.3,  0,   1, 0,  1.04, 0,   0,   0,   1,   0,  1, 0},
    {"1d_f32",          F32, G_1D,       400, 10,  300,  100,  7,     0,   0, 0,  1.1,  0,   0,   0,   1,   0,  1, 0},
    {"1d_k2_m1",        F64, G_1D,       50,  2,   1,    10,   6,     0,   0, 0,  1.0,  0,   0,   0,   1,   0,  1, 0},
    {"2d",              F64, G_2D,       400, 16,  500,  50,   8,     0,   0, 0,  1.0,  0,   0,   0,   1,   0,  1, 0},
    {"2d_periodic_x",   F64, G_2D,       300, 12,  400,  40,   9,     0,   1, 0,  1.0,  0,   0,   1,   1,   0,  1, 0},
    {"2d_periodic_xy",  F32, G_2D,       300, 12,  400,  30,   9,     0,   3, 0,  1.05, 0,   0,   0,   1,   0,  0, 0},
    {"2d_cap",          F64, G_2D,       300, 10,  800,  30,   8,     0,   0, 10, 1.0,  0,   0,   0,   1,   0,  1, 0},
    {"2d_cap_ties",     F64, G_2D,       225, 8,   900,  15,   4,     0,   0, 12, 1.0,  0,   0,   0,   1,   1,  1, 0},
    {"2d_rtpp",         F64, G_2D,       300, 12,  400,  40,   8,     0,   0, 0,  1.1,  0.5, 0,   0,   1,   0,  1, 0},
    {"2d_rtps",         F64, G_2D,       300, 12,  400,  40,   8,     0,   0, 0,  1.0,  0,   0.7, 0,   1,   0,  1, 0},
    {"2d_rtps_f32_inpl",F32, G_2D,       300, 12,  400,  40,   8,     0,   0, 20, 1.02, 0,   0.9, 1,   1,   0,  1, 0},
    {"2d_no_diag",      F64, G_2D,       200, 6,   300,  40,   8,     0,   0, 0,  1.0,  0,   0,   0,   0,   0,  1, 0},
    {"2d_far_points",   F64, G_2D,       300, 8,   200,  20,   5,     0,   0, 0,  1.2,  0,   0,   0,   1,   2,  1, 0},
    {"2d_vertical",     F64, G_2D_V,     300, 10,  600,  30,   9,     3,   0, 0,  1.0,  0,   0,   0,   1,   0,  1, 0},
    {"1d_vertical_cap", F32, G_1D_V,     300, 10,  600,  50,   12,    2.5, 1, 15, 1.0,  0,   0.5, 0,   1,   0,  0, 0},
    {"3d",              F64, G_3D,       300, 8,   600,  20,   6,     0,   0, 0,  1.0,  0,   0,   0,   1,   0,  1, 0},
    {"3d_periodic",     F64, G_3D,       300, 8,   600,  15,   6,     0,   7, 0,  1.0,  0.3, 0,   1,   1,   0,  0, 0},
    {"3d_f32_cap",      F32, G_3D,       300, 12,  800,  15,   6,     0,   2, 25, 1.1,  0,   0,   0,   1,   0,  0, 0},
    {"sphere",          F64, G_SPHERE,   400, 12,  1000, 0,    2000,  0,   0, 0,  1.0,  0,   0,   0,   1,   0,  1, 0},
    {"sphere_cap_f32",  F32, G_SPHERE,   400, 10,  1500, 0,    2500,  0,   0, 20, 1.05, 0,   0,   1,   1,   0,  1, 0},
    {"sphere_vertical", F64, G_SPHERE_V, 400, 12,  1500, 0,    2500,  3,   0, 0,  1.0,  0,   0.5, 0,   1,   0,  1, 0},
    {"sphere_wide_rtpp",F64, G_SPHERE,   150, 16,  600,  0,    9000,  0,   0, 0,  1.1,  0.4, 0,   0,   1,   0,  0, 0},
    {"k4",              F64, G_2D,       300, 4,   300,  30,   8,     0,   0, 0,  1.0,  0,   0,   0,   1,   0,  1, 0},
    {"k32",             F64, G_2D,       150, 32,  400,  30,   8,     0,   0, 0,  1.0,  0,   0,   0,   1,   0,  1, 0},
    {"k40_f32",         F32, G_2D,       100, 40,  400,  30,   8,     0,   0, 0,  1.0,  0,   0,   0,   1,   0,  0, 0},
    {"k64",             F64, G_2D,       40,  64,  400,  30,   8,     0,   0, 0,  1.1,  0,   0,   0,   1,   0,  1, 0},
    {"k80",             F64, G_2D,       30,  80,  500,  30,   9,     0,   0, 0,  1.02, 0,   0,   0,   1,   0,  1, 0},
    {"k100_f32_cap",    F32, G_2D,       20,  100, 600,  30,   10,    0,   0, 70, 1.0,  0,   0.3, 0,   1,   0,  0, 0},
    {"k128",            F64, G_2D,       10,  128, 600,  30,   10,    0,   0, 0,  1.0,  0,   0,   1,   1,   0,  0, 0},
    {"k128_cap_rtps",   F64, G_SPHERE,   8,   128, 800,  0,    3000,  0,   0, 60, 1.05, 0,   0.5, 0,   1,   0,  0, 0},
    /* weight interpolation: the reference interpolates the weight points' transforms too */
    {"interp_1d_ring",  F64, G_1D,       120, 20,  120,  120,  15,    0,   1, 0,  1.04, 0,   0,   0,   1,   3,  1, 3},
    {"interp_2d_rtps",  F64, G_2D,       900, 16,  500,  30,   8,     0,   0, 0,  1.0,  0,   0.7, 0,   1,   3,  1, 2},
    {"interp_2d_f32",   F32, G_2D,       400, 12,  400,  20,   6,     0,   3, 20, 1.05, 0.3, 0,   1,   1,   3,  1, 3},
    {"interp_3d",       F64, G_3D,       216, 8,   300,  12,   5,     0,   0, 0,  1.0,  0,   0,   0,   0,   3,  0, 2},
    [35 ... 42] = {NULL, F64, G_1D, 0, 0, 0, 0, 0, 0, 0, 0, 1.0, 0, 0, 0, 1, 0, 0, 0},
};

#define NCASES ((int)(sizeof cases / sizeof cases[0]))
#define FIRST_RANDOM 35

static double u01(uint64_t *st) { return (cli_random(st) + 1) / 2; }

static void draw_random_cases(void)
{
    static char names[NCASES][24];
    uint64_t st = 0x1e7cf0ull;
    for (int i = FIRST_RANDOM; i < NCASES; i++) {
        letkf_case *c = &cases[i];
        snprintf(names[i], sizeof names[i], "random_%02d", i - FIRST_RANDOM);
        c->name = names[i];
        c->dtype = u01(&st) < 0.3 ? F32 : F64;
        c->geometry = (int)(u01(&st) * 7) % 7;
        c->k = 2 + (size_t)(u01(&st) * u01(&st) * 60);
        c->n = 20 + (size_t)(u01(&st) * 3000.0 / (double)c->k);
        c->m = 1 + (size_t)(u01(&st) * 1500);
        c->extent = 10 + u01(&st) * 60;
        int sphere = c->geometry >= G_SPHERE;
        c->radius = sphere ? 300 + u01(&st) * 5000 : c->extent * (0.03 + u01(&st) * 0.4);
        c->vradius = c->geometry == G_1D_V || c->geometry == G_2D_V || c->geometry == G_SPHERE_V ? 1 + u01(&st) * 6 : 0;
        c->periodic = sphere ? 0 : (int)(u01(&st) * 8) & 7;
        c->max_obs = u01(&st) < 0.3 ? 1 + (size_t)(u01(&st) * 40) : 0;
        c->inflation = u01(&st) < 0.5 ? 1.0 : 0.9 + u01(&st) * 0.4;
        double relax = u01(&st);
        c->rtpp = relax < 0.25 ? u01(&st) : 0;
        c->rtps = relax > 0.75 ? u01(&st) : 0;
        c->in_place = u01(&st) < 0.5;
        c->diagnostics = u01(&st) < 0.8;
        c->layout = u01(&st) < 0.2 ? 1 : 0;
    }
}

/* Columns of the coordinates, and whether the last is a vertical one. */
static int columns(const letkf_case *c)
{
    static const int cols[] = {1, 2, 3, 2, 3, 2, 3};
    return cols[c->geometry];
}

typedef struct prepared_case {
    dk_letkf_desc desc;
    double *grid, *obs;
    void *xb, *yb, *ref;
    double *yo, *yo_other, *r, *ref_spread, *scale;
    int32_t *ref_nobs;
    size_t min_nobs, max_nobs; /* of the reference, for the detail */
} prepared_case;

static prepared_case prepared[NCASES];

/* Weight interpolation's cases: the lattice's interpolation C, the weight
 * points' coordinates, and desc turned into the weight points' plan. */
typedef struct interp_case {
    dk_csr C;
    size_t *weight_index;
    double *wcoords;
} interp_case;

static interp_case interps[NCASES];

static dk_status interp_build(const letkf_case *c, const double *grid, interp_case *ic, dk_letkf_desc *d)
{
    const int dims = columns(c);
    const size_t n = c->n, side = (size_t)llround(pow((double)n, 1.0 / dims));
    size_t shape[3] = {side, side, side}, stride[3] = {c->wstride, c->wstride, c->wstride}, nw = 0;
    int64_t *indptr = malloc((n + 1) * sizeof *indptr), *indices = malloc(n * 8 * sizeof *indices);
    double *values = malloc(n * 8 * sizeof *values);
    ic->weight_index = malloc(n * sizeof *ic->weight_index);
    ic->wcoords = malloc(n * (size_t)dims * sizeof *ic->wcoords);
    ic->C.indptr = indptr, ic->C.indices = indices, ic->C.values = values;
    if (!indptr || !indices || !values || !ic->weight_index || !ic->wcoords)
        return DK_ERR_OUT_OF_MEMORY;
    dk_status rc = dk_letkf_interp_grid(dims, shape, stride, &nw, ic->weight_index, indptr, indices, values);
    if (rc != DK_OK)
        return rc;
    for (size_t w = 0; w < nw; w++)
        memcpy(ic->wcoords + w * (size_t)dims, grid + ic->weight_index[w] * (size_t)dims, (size_t)dims * sizeof(double));
    ic->C.rows = n, ic->C.cols = nw;
    d->n = nw;
    d->grid_coords = ic->wcoords;
    return DK_OK;
}

static void interp_free(interp_case *ic)
{
    free((void *)ic->C.indptr), free((void *)ic->C.indices), free((void *)ic->C.values);
    free(ic->weight_index), free(ic->wcoords);
    memset(ic, 0, sizeof *ic);
}

static int letkf_count(void)
{
    if (!cases[FIRST_RANDOM].name)
        draw_random_cases();
    return NCASES;
}
static const char *letkf_name(int i) { return cases[i].name; }
static int letkf_quick(int i) { return cases[i].quick; }

static double get(const void *p, dk_dtype t, size_t i)
{
    return t == DK_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

static void put(void *p, dk_dtype t, size_t i, double v)
{
    if (t == DK_F32)
        ((float *)p)[i] = (float)v;
    else
        ((double *)p)[i] = v;
}

/* Coordinates of count points (ncol columns) for case c. */
static void draw_coords(const letkf_case *c, double *xyz, size_t count, int grid, uint64_t *st)
{
    int ncol = columns(c), vertical = c->vradius > 0;
    size_t side = (size_t)c->extent;
    for (size_t i = 0; i < count; i++) {
        double *p = xyz + i * (size_t)ncol;
        if (c->geometry >= G_SPHERE) {
            p[0] = -180 + 540 * u01(st);
            p[1] = asin(cli_random(st)) * 180 / 3.14159265358979323846;
            if (grid && i < 4) { /* the poles and the date line */
                p[0] = i % 2 ? 180 : -180;
                p[1] = i < 2 ? 90 : -90;
            }
        } else {
            for (int a = 0; a < ncol - vertical; a++) {
                if (grid && c->layout == 3) {
                    size_t s3 = (size_t)llround(pow((double)count, 1.0 / (ncol - vertical))), q = i;
                    for (int b = ncol - vertical - 1; b > a; b--)
                        q /= s3;
                    p[a] = c->extent * (double)(q % s3) / (double)s3;
                } else if (c->layout == 1)
                    p[a] = (double)(grid ? (a == 0 ? i % side : i / side % side) : (size_t)(u01(st) * (double)side));
                else if (c->periodic >> a & 1)
                    p[a] = c->extent * (-0.25 + 1.5 * u01(st)); /* outside [0, period) too: wrapped */
                else
                    p[a] = c->extent * u01(st) * (grid && c->layout == 2 ? 3 : 1);
            }
        }
        if (vertical)
            p[ncol - 1] = 10 * u01(st);
    }
}

static dk_status interp_prepare(const letkf_case *c, prepared_case *p)
{
    interp_case *ic = &interps[c - cases];
    dk_status rc = interp_build(c, p->grid, ic, &p->desc);
    if (rc == DK_OK)
        rc = dk_letkf_reference_interp(&p->desc, &ic->C, p->xb, p->yb, p->yo, p->r, p->ref, p->ref_spread);
    return rc;
}

static dk_status letkf_prepare(int i, char *err, size_t len)
{
    const letkf_case *c = &cases[i];
    prepared_case *p = &prepared[i];
    memset(p, 0, sizeof *p);
    const size_t n = c->n, k = c->k, m = c->m, w = dk_dtype_size(c->dtype);
    const int ncol = columns(c);
    uint64_t st = 0x1e7f0000ull + (uint64_t)i;
    p->grid = malloc(n * (size_t)ncol * sizeof *p->grid);
    p->obs = malloc(m * (size_t)ncol * sizeof *p->obs);
    p->xb = malloc(n * k * w);
    p->yb = malloc(m * k * w);
    p->ref = malloc(n * k * w);
    p->yo = malloc(m * sizeof *p->yo);
    p->yo_other = malloc(m * sizeof *p->yo_other);
    p->r = malloc(m * sizeof *p->r);
    p->ref_spread = malloc(n * sizeof *p->ref_spread);
    p->scale = malloc(n * sizeof *p->scale);
    p->ref_nobs = malloc(n * sizeof *p->ref_nobs);
    if (!p->grid || !p->obs || !p->xb || !p->yb || !p->ref || !p->yo || !p->yo_other || !p->r || !p->ref_spread ||
        !p->scale || !p->ref_nobs) {
        snprintf(err, len, "out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    draw_coords(c, p->grid, n, 1, &st);
    draw_coords(c, p->obs, m, 0, &st);
    /* Xb about 3 (so the means matter), Yb about 1, yo near the ensemble's mean */
    for (size_t t = 0; t < n * k; t++)
        put(p->xb, c->dtype, t, 3 + cli_random(&st));
    for (size_t t = 0; t < m * k; t++)
        put(p->yb, c->dtype, t, 1 + 1.5 * cli_random(&st));
    for (size_t j = 0; j < m; j++) {
        double mean = 0;
        for (size_t l = 0; l < k; l++)
            mean += get(p->yb, c->dtype, j * k + l);
        p->yo[j] = mean / (double)k + 0.8 * cli_random(&st);
        p->yo_other[j] = p->yo[j] + 1 + cli_random(&st);
        p->r[j] = 0.3 + u01(&st);
    }
    dk_letkf_desc *d = &p->desc;
    dk_letkf_desc_init(d);
    d->dtype = c->dtype;
    d->n = n;
    d->members = k;
    d->m = m;
    d->ncoords = ncol;
    d->metric = c->geometry >= G_SPHERE ? DK_LETKF_SPHERE : DK_LETKF_CARTESIAN;
    d->radius = c->radius;
    d->vertical_radius = c->vradius;
    if (d->metric == DK_LETKF_CARTESIAN)
        for (int a = 0; a < ncol - (c->vradius > 0); a++)
            d->period[a] = c->periodic >> a & 1 ? c->extent : 0;
    d->inflation = c->inflation;
    d->rtpp = c->rtpp;
    d->rtps = c->rtps;
    d->max_obs = c->max_obs;
    d->grid_coords = p->grid;
    d->obs_coords = p->obs;
    dk_status rc;
    if (c->wstride) {
        rc = interp_prepare(c, p);
        memset(p->ref_nobs, 0, n * sizeof *p->ref_nobs);
    } else
        rc = dk_letkf_reference(d, p->xb, p->yb, p->yo, p->r, p->ref, p->ref_nobs, p->ref_spread);
    if (rc != DK_OK) {
        snprintf(err, len, "%s", dk_last_error(NULL));
        return rc;
    }
    p->min_nobs = (size_t)-1;
    for (size_t a = 0; a < n; a++) {
        double s = 0;
        for (size_t l = 0; l < k; l++)
            s = fmax(s, fmax(fabs(get(p->xb, c->dtype, a * k + l)), fabs(get(p->ref, c->dtype, a * k + l))));
        p->scale[a] = s > 0 ? s : 1;
        p->min_nobs = (size_t)p->ref_nobs[a] < p->min_nobs ? (size_t)p->ref_nobs[a] : p->min_nobs;
        p->max_nobs = (size_t)p->ref_nobs[a] > p->max_nobs ? (size_t)p->ref_nobs[a] : p->max_nobs;
    }
    return DK_OK;
}

static void letkf_release(int i)
{
    prepared_case *p = &prepared[i];
    interp_free(&interps[i]);
    free(p->grid), free(p->obs), free(p->xb), free(p->yb), free(p->ref), free(p->yo), free(p->yo_other);
    free(p->r), free(p->ref_spread), free(p->scale), free(p->ref_nobs);
    memset(p, 0, sizeof *p);
}

/* The analysis on buffers, xa apart from xb: first with other
 * observations, then with the case's; xb must come back unchanged. */
static int run_buffers(dk_context *ctx, dk_plan *plan, const letkf_case *c, const prepared_case *p, void *xa,
                       int32_t *nobs, double *spread, char *detail, size_t len)
{
    const size_t n = c->n, k = c->k, m = c->m, w = dk_dtype_size(c->dtype);
    dk_buffer *bx = NULL, *by = NULL, *ba = NULL, *bn = NULL, *bs = NULL;
    void *back = malloc(n * k * w);
    int ok = back && dk_buffer_create(ctx, n * k * w, &bx) == DK_OK &&
             dk_buffer_create(ctx, m * k * w, &by) == DK_OK && dk_buffer_create(ctx, n * k * w, &ba) == DK_OK &&
             (!nobs || dk_buffer_create(ctx, n * sizeof *nobs, &bn) == DK_OK) &&
             (!spread || dk_buffer_create(ctx, n * sizeof *spread, &bs) == DK_OK) &&
             dk_buffer_write(bx, p->xb, n * k * w) == DK_OK && dk_buffer_write(by, p->yb, m * k * w) == DK_OK &&
             dk_letkf_execute(plan, bx, by, p->yo_other, p->r, ba, bn, bs) == DK_OK &&
             dk_letkf_execute(plan, bx, by, p->yo, p->r, ba, bn, bs) == DK_OK &&
             dk_buffer_read(ba, xa, n * k * w) == DK_OK && dk_buffer_read(bx, back, n * k * w) == DK_OK &&
             (!nobs || dk_buffer_read(bn, nobs, n * sizeof *nobs) == DK_OK) &&
             (!spread || dk_buffer_read(bs, spread, n * sizeof *spread) == DK_OK);
    if (!ok)
        snprintf(detail, len, "%s", back ? dk_last_error(ctx) : "out of host memory");
    else if (memcmp(back, p->xb, n * k * w)) {
        snprintf(detail, len, "xb changed although xa is another buffer");
        ok = 0;
    }
    dk_buffer_destroy(bx), dk_buffer_destroy(by), dk_buffer_destroy(ba), dk_buffer_destroy(bn), dk_buffer_destroy(bs);
    free(back);
    return ok;
}

static void letkf_run(dk_context *ctx, const char *variant, int i, conform_result *r)
{
    const letkf_case *c = &cases[i];
    const prepared_case *p = &prepared[i];
    const size_t n = c->n, k = c->k, w = dk_dtype_size(c->dtype);
    r->error = INFINITY;
    r->tolerance = c->dtype == DK_F64 ? 1e-10 : 0x1p-23 + 1e-10;
    r->passed = 0;
    dk_letkf_desc d = p->desc;
    d.variant = variant;
    dk_plan *plan = NULL;
    void *xa = malloc(n * k * w);
    int32_t *nobs = c->diagnostics ? malloc(n * sizeof *nobs) : NULL;
    double *spread = c->diagnostics ? malloc(n * sizeof *spread) : NULL;
    if (!xa || (c->diagnostics && (!nobs || !spread))) {
        snprintf(r->detail, sizeof r->detail, "out of host memory");
        goto done;
    }
    if (dk_letkf_plan_create(ctx, &d, &plan) != DK_OK) {
        snprintf(r->detail, sizeof r->detail, "%s", dk_last_error(ctx));
        goto done;
    }
    if (c->wstride) {
        /* host memory only; in place or apart, xb must come back unchanged when apart */
        if (c->in_place)
            memcpy(xa, p->xb, n * k * w);
        dk_status rc = dk_letkf_execute_interp_host(plan, &interps[i].C, c->in_place ? xa : p->xb, p->yb, p->yo,
                                                    p->r, xa, spread);
        if (rc != DK_OK) {
            /* a backend or variant without the interpolation: an optional feature, said and not run */
            r->not_implemented = rc == DK_ERR_NOT_IMPLEMENTED;
            snprintf(r->detail, sizeof r->detail, "%s", dk_last_error(ctx));
            goto done;
        }
        free(nobs);
        nobs = NULL;
    } else if (c->in_place) {
        memcpy(xa, p->xb, n * k * w);
        if (dk_letkf_execute_host(plan, xa, p->yb, p->yo, p->r, xa, nobs, spread) != DK_OK) {
            snprintf(r->detail, sizeof r->detail, "%s", dk_last_error(ctx));
            goto done;
        }
    } else if (!run_buffers(ctx, plan, c, p, xa, nobs, spread, r->detail, sizeof r->detail))
        goto done;
    double err = 0, serr = 0;
    size_t worst = 0, sworst = 0, nobs_wrong = 0, first_wrong = 0;
    for (size_t a = 0; a < n; a++) {
        for (size_t l = 0; l < k; l++) {
            double e = fabs(get(xa, c->dtype, a * k + l) - get(p->ref, c->dtype, a * k + l)) / p->scale[a];
            if (!(e <= err)) {
                err = isnan(e) ? INFINITY : e;
                worst = a * k + l;
            }
        }
        if (spread) {
            double e = fabs(spread[a] - p->ref_spread[a]) / p->scale[a];
            if (!(e <= serr)) {
                serr = isnan(e) ? INFINITY : e;
                sworst = a;
            }
        }
        if (nobs && nobs[a] != p->ref_nobs[a] && !nobs_wrong++)
            first_wrong = a;
    }
    r->error = fmax(err, serr);
    r->passed = r->error <= r->tolerance && !nobs_wrong;
    if (nobs_wrong)
        snprintf(r->detail, sizeof r->detail, "observations used differ at %zu points, first at point %zu: %d vs "
                 "reference %d", nobs_wrong, first_wrong, nobs[first_wrong], p->ref_nobs[first_wrong]);
    else if (!r->passed && err >= serr)
        snprintf(r->detail, sizeof r->detail, "worst at Xa[%zu,%zu]: %.17g vs reference %.17g", worst / k,
                 worst % k, get(xa, c->dtype, worst), get(p->ref, c->dtype, worst));
    else if (!r->passed)
        snprintf(r->detail, sizeof r->detail, "worst spread at point %zu: %.17g vs reference %.17g", sworst,
                 spread[sworst], p->ref_spread[sworst]);
    else
        snprintf(r->detail, sizeof r->detail, "%s; %zu to %zu observations a point", err == 0 && serr == 0 ?
                 "equal bit for bit" : "within tolerance", p->min_nobs, p->max_nobs);
done:
    dk_plan_destroy(plan);
    free(xa), free(nobs), free(spread);
}

#ifdef DK_TOOLS_MPI
#include <dakit/mpi.h>

/* Each rank a contiguous range of the points and another of the
 * observations (dk_mpi_letkf_plan_create gathers the observations within
 * the radius of its points), executed twice on one plan (other
 * observations, then the case's), in place where the case is; its rows
 * checked as letkf_run checks them. The layer sums each point's
 * observations in the single process's order, so the tolerance is the
 * same. */
static int letkf_run_ranks(dk_context *ctx, const char *variant, int i, conform_result *r)
{
    const letkf_case *c = &cases[i];
    const prepared_case *p = &prepared[i];
    r->error = INFINITY;
    r->tolerance = c->dtype == DK_F64 ? 1e-10 : 0x1p-23 + 1e-10;
    r->passed = 0;
    if (c->wstride) {
        snprintf(r->detail, sizeof r->detail, "weight interpolation runs in one process");
        return 1;
    }
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const size_t k = c->k, w = dk_dtype_size(c->dtype), ncol = (size_t)columns(c);
    dk_mpi_part pts, obs;
    size_t n = c->n, m = c->m;
    dk_mpi_plan *plan = NULL;
    void *xa = NULL;
    int32_t *nobs = NULL;
    double *spread = NULL;
    r->detail[0] = '\0';
    if (dk_mpi_decompose(MPI_COMM_WORLD, 1, &n, NULL, &pts) != DK_OK ||
        dk_mpi_decompose(MPI_COMM_WORLD, 1, &m, NULL, &obs) != DK_OK) {
        snprintf(r->detail, sizeof r->detail, "%s", dk_mpi_last_error());
        goto done;
    }
    const size_t p0 = pts.offset[0], np = pts.extent[0], o0 = obs.offset[0], mo = obs.extent[0];
    dk_letkf_desc d = p->desc;
    d.variant = variant;
    d.n = np;
    d.grid_coords = p->grid + p0 * ncol;
    d.m = mo;
    d.obs_coords = p->obs + o0 * ncol;
    xa = malloc(np * k * w + 1);
    nobs = c->diagnostics ? malloc(np * sizeof *nobs + 1) : NULL;
    spread = c->diagnostics ? malloc(np * sizeof *spread + 1) : NULL;
    if (!xa || (c->diagnostics && (!nobs || !spread))) {
        snprintf(r->detail, sizeof r->detail, "rank %d: out of host memory", rank);
        goto done;
    }
    const char *xb = (const char *)p->xb + p0 * k * w, *yb = (const char *)p->yb + o0 * k * w;
    memcpy(xa, xb, np * k * w);
    if (dk_mpi_letkf_plan_create(ctx, MPI_COMM_WORLD, &d, &plan) != DK_OK ||
        dk_mpi_letkf_execute_host(plan, c->in_place ? xa : xb, yb, p->yo + o0, p->r + o0, xa, nobs, spread) !=
            DK_OK) {
        snprintf(r->detail, sizeof r->detail, "%s", dk_mpi_last_error());
        goto done;
    }
    memcpy(xa, xb, np * k * w);
    if (dk_mpi_letkf_execute_host(plan, c->in_place ? xa : xb, yb, p->yo + o0, p->r + o0, xa, nobs, spread) !=
        DK_OK) {
        snprintf(r->detail, sizeof r->detail, "%s", dk_mpi_last_error());
        goto done;
    }
    double err = 0;
    size_t worst = 0, nobs_wrong = 0;
    for (size_t a = 0; a < np; a++) {
        const size_t g = p0 + a;
        for (size_t l = 0; l < k; l++) {
            double e = fabs(get(xa, c->dtype, a * k + l) - get(p->ref, c->dtype, g * k + l)) / p->scale[g];
            if (!(e <= err)) {
                err = isnan(e) ? INFINITY : e;
                worst = g;
            }
        }
        if (spread) {
            double e = fabs(spread[a] - p->ref_spread[g]) / p->scale[g];
            if (!(e <= err)) {
                err = isnan(e) ? INFINITY : e;
                worst = g;
            }
        }
        nobs_wrong += nobs && nobs[a] != p->ref_nobs[g];
    }
    r->error = err;
    r->passed = err <= r->tolerance && !nobs_wrong;
    if (nobs_wrong)
        snprintf(r->detail, sizeof r->detail, "rank %d: observations used differ at %zu of its points", rank,
                 nobs_wrong);
    else
        snprintf(r->detail, sizeof r->detail, "rank %d: worst at point %zu (points [%zu, %zu), observations [%zu, "
                 "%zu))", rank, worst, p0, p0 + np, o0, o0 + mo);
done:
    dk_mpi_plan_destroy(plan);
    free(xa), free(nobs), free(spread);
    conform_ranks_agree(r);
    return 0;
}
#endif

const conform_suite conform_letkf = {
    .algo = "letkf",
    .measure = "max|Xa-ref|/max(|Xb|,|ref|) per point",
    .count = letkf_count,
    .name = letkf_name,
    .quick = letkf_quick,
    .variants = dk_letkf_variants,
    .prepare = letkf_prepare,
    .run = letkf_run,
    .release = letkf_release,
#ifdef DK_TOOLS_MPI
    .run_ranks = letkf_run_ranks,
#endif
};
