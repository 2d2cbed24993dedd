/* The letkf benchmark cases, float64, data on the device, one analysis a run:
 *   letkf_1e6  N = 10^6 points on a 1000 x 1000 unit grid, k = 40 members,
 *              M = 10^5 observations at random places, radius 21.9 grid
 *              units (about 150 observations a point).
 *   letkf_l96  one analysis of the Lorenz-96 twin experiment: 40 variables
 *              on a ring of period 40, every variable observed, R = I,
 *              k = 20, the settings of `dakit letkf l96` (DAPPER's
 *              sakov2008 set-up as docs/validation.md translates it):
 *              radius 14.56 (DAPPER's loc_rad = 4), inflation 1.04^2.
 *   letkf_1e6_interp2  letkf_1e6's data with weight interpolation: the
 *              transforms at every 2nd grid point of both axes (250,000
 *              weight points), bilinear to the rest (dk_letkf_execute_interp,
 *              which copies C to the device each call); its check reports
 *              the interpolation's difference from the full analysis.
 * Each run writes nobs too (the analysis's diagnostics cost nothing apart).
 * The harness's floor is the bytes that must move (Xb read, Xa written, Yb
 * read); the work is arithmetic, so teardown prints the floating-point
 * operations counted, per point with p observations used,
 *   2 k^2 p      C Y_l as a dense k x p by p x k product (b adds 2 k p)
 *   + 9 k^3      a symmetric eigen-decomposition with vectors (tridiagonal
 *                reduction and QR, the textbook count)
 *   + 2 k^3      W = Q diag Q^T
 *   + 2 k^2      X W,
 * summed over the points with p from nobs, the rate they give at the median
 * analysis time, and the plan's time (dk_letkf_plan_create: the buckets and
 * the backend's copies) apart from the analysis. Unless
 * DAKIT_BENCH_LETKF_CHECK=0, it also compares 200 points spread over the
 * grid with dk_letkf_reference on the same data. `dakit bench --variant`
 * picks variants (the cpu plugin's jacobi is several times slower than
 * syevd). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/enkf.h>
#include <dakit/letkf.h>

#include "cli/cli.h"
#include "harness/bench.h"

typedef struct letkf_bench_case {
    const char *name, *what;
    size_t n, k, m;
} letkf_bench_case;

static const letkf_bench_case cases[] = {
    {"letkf_1e6", "N 10^6 (1000 x 1000 grid), k 40, M 10^5 at random places, radius 21.9 (~150 obs a point), f64",
     1000000, 40, 100000},
    {"letkf_l96", "one Lorenz-96 analysis as dakit letkf l96 makes it: N 40 (ring), k 20, M 40, R = I, "
                  "GC radius 14.56, inflation 1.04^2, f64",
     40, 20, 40},
    {"letkf_1e6_interp2", "letkf_1e6 with weight interpolation: transforms at every 2nd point of both axes "
                          "(250,000), bilinear to the rest, f64",
     1000000, 40, 100000},
};
#define INTERP2 2
#define NCASES ((int)(sizeof cases / sizeof cases[0]))
#define CHECK_POINTS 200
#define MAX_TIMES 256

typedef struct state {
    int which;
    char label[96];
    dk_letkf_desc desc;
    double *grid, *obs, *xb, *yb, *yo, *r;
    dk_plan *plan;
    dk_buffer *bxb, *byb, *bxa, *bnobs;
    dk_csr C;              /* letkf_1e6_interp2: the interpolation */
    double *wgrid;         /* its weight points' coordinates */
    size_t *widx;
    double plan_seconds, times[MAX_TIMES];
    int calls, runs; /* runs: timed ones, after the harness's warm-up */
} state;

static int count(void) { return NCASES; }
static const char *name(int i) { return cases[i].name; }
static const char *what(int i) { return cases[i].what; }

static double bytes(int i)
{
    const letkf_bench_case *c = &cases[i];
    return 8.0 * (2.0 * (double)c->n * (double)c->k + (double)c->m * (double)c->k);
}

/* The radius whose Gaspari-Cohn taper is e^-0.5 at distance 4: GC(z) falls
 * from 1 at z = 0 to 5/24 at z = 1, so z lies in (0, 1); bisection. */
/* dakit letkf l96's defaults (tools/letkf/l96.c, docs/validation.md). */
#define L96_RADIUS (2.0 * 1.82 * 4.0)
#define L96_INFLATION (1.04 * 1.04)

static void free_state(state *s)
{
    dk_plan_destroy(s->plan);
    dk_buffer_destroy(s->bxb), dk_buffer_destroy(s->byb), dk_buffer_destroy(s->bxa), dk_buffer_destroy(s->bnobs);
    free(s->grid), free(s->obs), free(s->xb), free(s->yb), free(s->yo), free(s->r);
    free((void *)s->C.indptr), free((void *)s->C.indices), free((void *)s->C.values), free(s->wgrid), free(s->widx);
    free(s);
}

/* 200 points spread over the grid against dk_letkf_reference on the same
 * observations: max |Xa - ref| / max(|Xb|, |ref|) over them. */
static void check(state *s, const double *xa)
{
    const dk_letkf_desc *d = &s->desc;
    const size_t k = d->members, nc = (size_t)d->ncoords;
    size_t npts = d->n < CHECK_POINTS ? d->n : CHECK_POINTS;
    double *grid = malloc(npts * nc * sizeof *grid), *xb = calloc(npts * k, sizeof *xb),
           *ref = malloc(npts * k * sizeof *ref);
    if (!grid || !xb || !ref) {
        free(grid), free(xb), free(ref);
        return;
    }
    for (size_t t = 0; t < npts; t++) {
        size_t i = t * (d->n / npts);
        memcpy(grid + t * nc, s->grid + i * nc, nc * sizeof *grid);
        memcpy(xb + t * k, s->xb + i * k, k * sizeof *xb);
    }
    dk_letkf_desc sub = *d;
    sub.n = npts;
    sub.grid_coords = grid;
    sub.variant = NULL;
    if (dk_letkf_reference(&sub, xb, s->yb, s->yo, s->r, ref, NULL, NULL) != DK_OK)
        printf("letkf %s on %s: the check against the reference failed: %s\n", cases[s->which].name, s->label,
               dk_last_error(NULL));
    else {
        double worst = 0, sq = 0, sqref = 0;
        for (size_t t = 0; t < npts; t++) {
            size_t i = t * (d->n / npts);
            double scale = 0;
            for (size_t l = 0; l < k; l++)
                scale = fmax(scale, fmax(fabs(xb[t * k + l]), fabs(ref[t * k + l])));
            for (size_t l = 0; l < k; l++) {
                double e = fabs(xa[i * k + l] - ref[t * k + l]) / scale;
                worst = e > worst || isnan(e) ? e : worst;
                sq += (xa[i * k + l] - ref[t * k + l]) * (xa[i * k + l] - ref[t * k + l]);
                sqref += (ref[t * k + l] - xb[t * k + l]) * (ref[t * k + l] - xb[t * k + l]);
            }
        }
        if (s->which == INTERP2)
            printf("letkf %s on %s: %zu points against the full analysis (dk_letkf_reference): max |Xa - ref| / "
                   "max(|Xb|, |ref|) %.2e; RMS(Xa - ref) / RMS(ref - Xb) %.2e (the interpolation's error)\n",
                   cases[s->which].name, s->label, npts, worst, sqrt(sq / (sqref > 0 ? sqref : 1)));
        else
            printf("letkf %s on %s: %zu points against dk_letkf_reference: max |Xa - ref| / max(|Xb|, |ref|) %.2e\n",
               cases[s->which].name, s->label, npts, worst);
    }
    free(grid), free(xb), free(ref);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void teardown(void *p)
{
    state *s = p;
    if (!s)
        return;
    const dk_letkf_desc *d = &s->desc;
    const double k = (double)d->members;
    int32_t *nobs = malloc(d->n * sizeof *nobs);
    double *xa = malloc(d->n * d->members * sizeof *xa);
    const size_t n = s->which == INTERP2 ? s->C.rows : d->n;
    if (s->which == INTERP2) {
        free(nobs), free(xa);
        xa = malloc(n * d->members * sizeof *xa);
        if (s->runs && xa && dk_buffer_read(s->bxa, xa, n * d->members * sizeof *xa) == DK_OK) {
            int runs = s->runs < MAX_TIMES ? s->runs : MAX_TIMES;
            qsort(s->times, (size_t)runs, sizeof *s->times, cmp_double);
            double med = runs % 2 ? s->times[runs / 2] : 0.5 * (s->times[runs / 2 - 1] + s->times[runs / 2]);
            printf("letkf %s on %s: plan %.3f s; analysis median %.3f ms over %d runs (%zu weight points for %zu "
                   "grid points)\n", cases[s->which].name, s->label, s->plan_seconds, med * 1e3, runs, d->n, n);
            const char *c = getenv("DAKIT_BENCH_LETKF_CHECK");
            if (!c || strcmp(c, "0")) {
                dk_letkf_desc full = *d;
                full.n = n;
                full.grid_coords = s->grid;
                s->desc = full;
                check(s, xa);
            }
            fflush(stdout);
        }
        free(xa);
        free_state(s);
        return;
    }
    if (s->runs && nobs && xa && dk_buffer_read(s->bnobs, nobs, d->n * sizeof *nobs) == DK_OK &&
        dk_buffer_read(s->bxa, xa, d->n * d->members * sizeof *xa) == DK_OK) {
        double p = 0, flops = 0;
        for (size_t i = 0; i < d->n; i++) {
            p += nobs[i];
            flops += 2 * k * k * nobs[i] + 11 * k * k * k + 2 * k * k;
        }
        int runs = s->runs < MAX_TIMES ? s->runs : MAX_TIMES;
        qsort(s->times, (size_t)runs, sizeof *s->times, cmp_double);
        double med = runs % 2 ? s->times[runs / 2] : 0.5 * (s->times[runs / 2 - 1] + s->times[runs / 2]);
        printf("letkf %s on %s: plan %.3f s; analysis median %.3f ms over %d runs; %.1f observations a point; "
               "%.3g flop counted (2k^2p + 11k^3 + 2k^2 a point): %.1f GFLOP/s\n",
               cases[s->which].name, s->label, s->plan_seconds, med * 1e3, runs, p / (double)d->n, flops,
               flops / med / 1e9);
        const char *c = getenv("DAKIT_BENCH_LETKF_CHECK");
        if (!c || strcmp(c, "0"))
            check(s, xa);
        fflush(stdout);
    }
    free(nobs), free(xa);
    free_state(s);
}

static void *setup(dk_context *ctx, int i, const char *variant, char *err, size_t len)
{
    const letkf_bench_case *c = &cases[i];
    const size_t n = c->n, k = c->k, m = c->m;
    const int l96 = i == 1, nc = l96 ? 1 : 2;
    state *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, len, "out of host memory");
        return NULL;
    }
    s->which = i;
    snprintf(s->label, sizeof s->label, "%s/%s", dk_context_backend(ctx), variant);
    s->grid = malloc(n * (size_t)nc * sizeof *s->grid);
    s->obs = malloc(m * (size_t)nc * sizeof *s->obs);
    s->xb = malloc(n * k * sizeof *s->xb);
    s->yb = malloc(m * k * sizeof *s->yb);
    s->yo = malloc(m * sizeof *s->yo);
    s->r = malloc(m * sizeof *s->r);
    if (!s->grid || !s->obs || !s->xb || !s->yb || !s->yo || !s->r) {
        snprintf(err, len, "out of host memory");
        free_state(s);
        return NULL;
    }
    uint64_t st = 0x1e7fbe7cull + (uint64_t)(i == INTERP2 ? 0 : i); /* interp2: letkf_1e6's data */
    dk_letkf_desc *d = &s->desc;
    dk_letkf_desc_init(d);
    d->n = n;
    d->members = k;
    d->m = m;
    d->ncoords = nc;
    d->variant = variant;
    if (l96) {
        /* the ring x_0 .. x_39 near the attractor's climatology (mean 2.3,
         * spread 3.6), every variable observed by H = I */
        d->radius = L96_RADIUS;
        d->period[0] = 40;
        d->inflation = L96_INFLATION;
        for (size_t a = 0; a < n; a++) {
            s->grid[a] = (double)a;
            s->obs[a] = (double)a;
            double truth = 2.3 + 3.6 * cli_random(&st);
            for (size_t l = 0; l < k; l++)
                s->xb[a * k + l] = truth + 0.5 * cli_random(&st);
            s->yo[a] = truth + cli_random(&st);
            s->r[a] = 1.0;
        }
        memcpy(s->yb, s->xb, n * k * sizeof *s->yb);
    } else {
        d->radius = 21.9;
        for (size_t a = 0; a < n; a++) {
            s->grid[2 * a] = (double)(a % 1000);
            s->grid[2 * a + 1] = (double)(a / 1000);
        }
        for (size_t t = 0; t < n * k; t++)
            s->xb[t] = cli_random(&st);
        for (size_t j = 0; j < m; j++) {
            s->obs[2 * j] = 999.0 * (cli_random(&st) + 1) / 2;
            s->obs[2 * j + 1] = 999.0 * (cli_random(&st) + 1) / 2;
            for (size_t l = 0; l < k; l++)
                s->yb[j * k + l] = cli_random(&st);
            s->yo[j] = 0.5 * cli_random(&st);
            s->r[j] = 0.5;
        }
    }
    d->grid_coords = s->grid;
    d->obs_coords = s->obs;
    double t0 = cli_now();
    if (i == INTERP2) {
        size_t shape[2] = {1000, 1000}, stride[2] = {2, 2}, nw = 0;
        int64_t *ip = malloc((n + 1) * sizeof *ip), *ix = malloc(4 * n * sizeof *ix);
        double *v = malloc(4 * n * sizeof *v);
        s->C.indptr = ip, s->C.indices = ix, s->C.values = v;
        s->widx = malloc(n * sizeof *s->widx);
        s->wgrid = malloc(2 * n * sizeof *s->wgrid);
        if (!ip || !ix || !v || !s->widx || !s->wgrid ||
            dk_letkf_interp_grid(2, shape, stride, &nw, s->widx, ip, ix, v) != DK_OK) {
            snprintf(err, len, "%s", ip && ix && v && s->widx && s->wgrid ? dk_last_error(NULL) : "out of host memory");
            free_state(s);
            return NULL;
        }
        s->C.rows = n, s->C.cols = nw;
        for (size_t w = 0; w < nw; w++)
            s->wgrid[2 * w] = s->grid[2 * s->widx[w]], s->wgrid[2 * w + 1] = s->grid[2 * s->widx[w] + 1];
        d->n = nw;
        d->grid_coords = s->wgrid;
    }
    if (dk_letkf_plan_create(ctx, d, &s->plan) != DK_OK) {
        snprintf(err, len, "%s", dk_last_error(ctx));
        free_state(s);
        return NULL;
    }
    s->plan_seconds = cli_now() - t0;
    if (dk_buffer_create(ctx, n * k * sizeof(double), &s->bxb) != DK_OK ||
        dk_buffer_create(ctx, m * k * sizeof(double), &s->byb) != DK_OK ||
        dk_buffer_create(ctx, n * k * sizeof(double), &s->bxa) != DK_OK ||
        dk_buffer_create(ctx, n * sizeof(int32_t), &s->bnobs) != DK_OK ||
        dk_buffer_write(s->bxb, s->xb, n * k * sizeof(double)) != DK_OK ||
        dk_buffer_write(s->byb, s->yb, m * k * sizeof(double)) != DK_OK) {
        snprintf(err, len, "%s", dk_last_error(ctx));
        free_state(s);
        return NULL;
    }
    return s;
}

/* One analysis, xa apart from xb (so every run starts from the same Xb). */
static dk_status run(void *p)
{
    state *s = p;
    double t0 = cli_now();
    dk_status st = s->which == INTERP2
                       ? dk_letkf_execute_interp(s->plan, &s->C, s->bxb, s->byb, s->yo, s->r, s->bxa, NULL)
                       : dk_letkf_execute(s->plan, s->bxb, s->byb, s->yo, s->r, s->bxa, s->bnobs, NULL);
    if (st == DK_OK && s->calls++ > 0) {
        if (s->runs < MAX_TIMES)
            s->times[s->runs] = cli_now() - t0;
        s->runs++;
    }
    return st;
}

const bench_suite bench_letkf = {
    .algo = "letkf",
    .count = count,
    .name = name,
    .what = what,
    .bytes = bytes,
    .variants = dk_letkf_variants,
    .setup = setup,
    .run = run,
    .teardown = teardown,
};
