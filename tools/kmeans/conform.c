/* The kmeans conformance cases, and how each is checked.
 *
 * Every backend runs the definition of dakit/kmeans.h; what may differ is the
 * order of the centroid sums (float partial sums per GPU block, double per
 * CPU thread), so a centroid differs from the reference by a few float
 * rounding units of the data's scale, and a label differs only where a point
 * is that close to a tie between two costs.
 * - labels: `flips`, the labels that differ from the reference, must stay
 *   below 1e-3 of the points (a point lies within ~1e-6 relative of a tie
 *   with a probability of that order or less on continuous data);
 * - error: max |C - C_ref| / max |x|; tolerance 1e-5 (float rounding of the
 *   sums, with margin) plus 2 * flips / (smallest cluster size), the most that
 *   the flipped points can move a centroid (each moves two means by at most
 *   2 max|x| / size);
 * - iterations must be equal, and the objective agree within 1e-4 relative;
 *   one iteration more or fewer passes only with no label differing and the
 *   stop decided within the centroids' rounding of tol (the move that
 *   stopped the earlier run within 64 float rounding units of max |x| of
 *   tol: other sums may fall on either side of it).
 * The seeded cases (kpp_*, random_*) start from dk_kmeans_seed's centroids,
 * which the reference computes on the host and the backend with its
 * distance pass: the same draws unless a block sum differs by a rounding unit
 * right at a draw, so the checks above hold unchanged. The large_k cases
 * (k > 256, plain k-means) take the centroids in tiles. The w_* cases give
 * every point a sample weight (about one in ten 0, the others in [0.25, 3))
 * and run dk_kmeans_execute_host_weighted against
 * dk_kmeans_reference_weighted, with the same checks; d64 is
 * DK_KMEANS_MAX_D (scikit-learn's digits).
 * The texture_* cases check the texture features of dakit/kmeans.h instead:
 * from a reflectivity-like image with no-data holes, the planes must equal
 * the reference's; from the reference's smoothed planes, the mask and the
 * unmasked count must be equal, and the standardized features and initial
 * centroids agree within 1e-5 of their largest magnitude (the backend sums
 * the statistics in another order: a float rounding unit or so). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/kmeans.h>

#include "cli/cli.h"
#include "harness/conform.h"

typedef struct kmeans_case {
    const char *name;
    size_t n;
    int d, k, iters;
    double tol;
    int blobs;         /* 1: well-separated blobs, 0: uniform noise, 2: smooth image */
    int far_centroid;  /* one initial centroid far from every point: it stays empty */
    dk_kmeans_layout layout;
    size_t rows, cols;
    double lambda;
    int window;
    int masked;        /* mask out about a third of the pixels */
    int quick;
    int texture;       /* 1: the texture features, not a clustering */
    dk_kmeans_init seeded; /* where the initial centroids come from (GIVEN: equal intervals) */
    int weighted;      /* sample weights */
} kmeans_case;

#define PM DK_KMEANS_POINT_MAJOR
#define FM DK_KMEANS_FEATURE_MAJOR

static const kmeans_case cases[] = {
    /* name               n       d   k    it  tol   blob far layout rows cols lambda w  mask quick texture init     w */
    {"k1",                1000,   3,  1,   5,  0,    0,   0,  PM, 0,   0,   1,   5, 0, 1, 0, DK_KMEANS_INIT_GIVEN, 0},
    {"d1_k4",             5000,   1,  4,   20, 0,    1,   0,  PM, 0,   0,   1,   5, 0, 1, 0, DK_KMEANS_INIT_GIVEN, 0},
    {"blobs_d4_k5",       20000,  4,  5,   20, 0,    1,   0,  PM, 0,   0,   1,   5, 0, 1, 0, DK_KMEANS_INIT_GIVEN, 0},
    {"uniform_d8_k16",    60000,  8,  16,  20, 0,    0,   0,  PM, 0,   0,   1,   5, 0, 1, 0, DK_KMEANS_INIT_GIVEN, 0},
    {"ragged_d8_k16",     60013,  8,  16,  20, 0,    1,   0,  PM, 0,   0,   1,   5, 0, 1, 0, DK_KMEANS_INIT_GIVEN, 0},
    {"empty_cluster",     8000,   2,  6,   10, 0,    1,   1,  PM, 0,   0,   1,   5, 0, 1, 0, DK_KMEANS_INIT_GIVEN, 0},
    {"tol_stops_early",   20000,  4,  5,   100, 1e-4, 1,  0,  PM, 0,   0,   1,   5, 0, 1, 0, DK_KMEANS_INIT_GIVEN, 0},
    {"feature_major",     30000,  5,  7,   15, 0,    0,   0,  FM, 0,   0,   1,   5, 0, 1, 0, DK_KMEANS_INIT_GIVEN, 0},
    {"masked_plain",      30000,  3,  6,   15, 0,    2,   0,  FM, 150, 200, 1,   5, 1, 1, 0, DK_KMEANS_INIT_GIVEN, 0},
    {"d32_k256",          40000,  32, 256, 5,  0,    0,   0,  PM, 0,   0,   1,   5, 0, 0, 0, DK_KMEANS_INIT_GIVEN, 0},
    {"odd_n_k37_masked",  30049,  5,  37,  15, 0,    2,   0,  PM, 151, 199, 1,   5, 1, 1, 0, DK_KMEANS_INIT_GIVEN, 0},
    {"contig_l0.7_w5",    30000,  3,  6,   20, 0,    2,   0,  FM, 150, 200, 0.7, 5, 1, 1, 0, DK_KMEANS_INIT_GIVEN, 0},
    {"contig_l0.5_w3",    30000,  4,  5,   10, 0,    2,   0,  FM, 200, 150, 0.5, 3, 0, 1, 0, DK_KMEANS_INIT_GIVEN, 0},
    {"contig_l0.9_w9_pm", 16384,  3,  8,   10, 0,    2,   0,  PM, 128, 128, 0.9, 9, 1, 1, 0, DK_KMEANS_INIT_GIVEN, 0},
    {"contig_k1",         2500,   2,  1,   3,  0,    2,   0,  FM, 50,  50,  0.7, 5, 1, 1, 0, DK_KMEANS_INIT_GIVEN, 0},
    {"contig_radar_size", 810000, 3,  6,   20, 0,    2,   0,  FM, 900, 900, 0.7, 5, 1, 0, 0, DK_KMEANS_INIT_GIVEN, 0},
    {"texture_k6",        120000, 3,  6,   20, 0,    2,   0,  FM, 300, 400, 0.7, 5, 1, 1, 1, DK_KMEANS_INIT_GIVEN, 0},
    {"texture_k40",       90000,  3,  40,  20, 0,    2,   0,  FM, 300, 300, 0.7, 5, 1, 0, 1, DK_KMEANS_INIT_GIVEN, 0},
    {"kpp_blobs_d4_k12",  20000,  4,  12,  30, 1e-6, 1,  0,  PM, 0,   0,   1,   5, 0, 1, 0, DK_KMEANS_INIT_PLUSPLUS, 0},
    {"kpp_masked_fm_k9",  30049,  5,  9,   15, 0,    2,   0,  FM, 151, 199, 1,   5, 1, 1, 0, DK_KMEANS_INIT_PLUSPLUS, 0},
    {"random_masked_k20", 30000,  3,  20,  15, 0,    2,   0,  PM, 150, 200, 1,   5, 1, 1, 0, DK_KMEANS_INIT_RANDOM, 0},
    {"large_k1000_d3",    30000,  3,  1000, 5, 0,    0,   0,  PM, 0,   0,   1,   5, 0, 1, 0, DK_KMEANS_INIT_PLUSPLUS, 0},
    {"large_k300_fm_d6",  20011,  6,  300, 5,  0,    0,   0,  FM, 0,   0,   1,   5, 0, 1, 0, DK_KMEANS_INIT_RANDOM, 0},
    {"large_k4096_d16",   30000,  16, 4096, 2, 0,    0,   0,  PM, 0,   0,   1,   5, 0, 0, 0, DK_KMEANS_INIT_RANDOM, 0},
    {"d64_k10_kpp",       6000,   64, 10,  20, 1e-4, 1,  0,  PM, 0,   0,   1,   5, 0, 1, 0, DK_KMEANS_INIT_PLUSPLUS, 0},
    {"w_blobs_d4_k5",     20000,  4,  5,   20, 0,    1,   0,  PM, 0,   0,   1,   5, 0, 1, 0, DK_KMEANS_INIT_GIVEN, 1},
    {"w_empty_cluster",   8000,   2,  6,   10, 0,    1,   1,  PM, 0,   0,   1,   5, 0, 1, 0, DK_KMEANS_INIT_GIVEN, 1},
    {"w_kpp_tol_d6_k8",   20000,  6,  8,   100, 1e-4, 1,  0,  PM, 0,   0,   1,   5, 0, 1, 0, DK_KMEANS_INIT_PLUSPLUS, 1},
    {"w_random_masked_fm", 30049, 5,  12,  15, 0,    2,   0,  FM, 151, 199, 1,   5, 1, 1, 0, DK_KMEANS_INIT_RANDOM, 1},
    {"w_contig_l0.7_w5",  30000,  3,  6,   20, 0,    2,   0,  FM, 150, 200, 0.7, 5, 1, 1, 0, DK_KMEANS_INIT_GIVEN, 1},
    {"w_d64_k10_kpp",     6000,   64, 10,  20, 1e-4, 1,  0,  PM, 0,   0,   1,   5, 0, 1, 0, DK_KMEANS_INIT_PLUSPLUS, 1},
    {"w_large_k300_d3",   20000,  3,  300, 5,  0,    0,   0,  PM, 0,   0,   1,   5, 0, 1, 0, DK_KMEANS_INIT_PLUSPLUS, 1},
    {"w_large_k260_fm_masked", 30000, 5, 260, 5, 0,  2,   0,  FM, 150, 200, 1,   5, 1, 1, 0, DK_KMEANS_INIT_GIVEN, 1},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static struct {
    float *x, *init, *cref, *w;
    uint8_t *mask;
    int32_t *lref;
    dk_kmeans_result rref;
    float scale;
    float *value, *planes, *smoothed; /* texture cases; x, mask, init: the reference's features */
    dk_kmeans_texture_stats stats;
} prep[NCASES];

#define TEX_MIN_VALUE 5.0

static int km_count(void) { return NCASES; }
static const char *km_name(int i) { return cases[i].name; }
static int km_quick(int i) { return cases[i].quick; }

static void desc_of(const kmeans_case *c, dk_kmeans_desc *d)
{
    dk_kmeans_desc_init(d);
    d->n = c->n;
    d->d = c->d;
    d->k = c->k;
    d->max_iters = c->iters;
    d->tol = c->tol;
    d->layout = c->layout;
    d->rows = c->rows;
    d->cols = c->cols;
    d->lambda = c->lambda;
    d->window = c->window;
    d->init = c->seeded;
    d->seed = 0x5eedull + c->n + (uint64_t)c->k;
}

/* Fills the case's points: x[i, f] at the layout's place. */
static void make_points(const kmeans_case *c, float *x, uint8_t *mask)
{
    uint64_t st = 0x6b6d65616e73ull + c->n * 31 + (uint64_t)c->d;
    size_t sp = c->layout == PM ? (size_t)c->d : 1, sf = c->layout == PM ? 1 : c->n;
    float centers[16][DK_KMEANS_MAX_D];
    for (int b = 0; b < 16; b++)
        for (int f = 0; f < c->d; f++)
            centers[b][f] = (float)(10.0 * cli_random(&st));
    for (size_t i = 0; i < c->n; i++) {
        if (mask)
            mask[i] = 1;
        for (int f = 0; f < c->d; f++) {
            double v;
            if (c->blobs == 1) {
                int b = (int)(i % (size_t)(c->k < 16 ? c->k : 16));
                v = centers[b][f] + 0.3 * cli_random(&st);
            } else if (c->blobs == 2) {
                /* a smooth image with noise: regions of different texture */
                double y = (double)(i / c->cols), xx = (double)(i % c->cols);
                v = 3 * sin(0.05 * (f + 1) * y) * cos(0.04 * xx + f) + 0.5 * cli_random(&st);
            } else {
                v = cli_random(&st);
            }
            x[i * sp + (size_t)f * sf] = (float)v;
        }
        if (mask && c->masked) {
            double y = (double)(i / c->cols), xx = (double)(i % c->cols);
            mask[i] = sin(0.07 * y) + cos(0.05 * xx) > -0.6;
        }
    }
}

static void km_release(int i)
{
    free(prep[i].x);
    free(prep[i].init);
    free(prep[i].cref);
    free(prep[i].w);
    free(prep[i].mask);
    free(prep[i].lref);
    free(prep[i].value);
    free(prep[i].planes);
    free(prep[i].smoothed);
    memset(&prep[i], 0, sizeof prep[i]);
}

/* A reflectivity-like image: smooth cells of 0 to 55 with noise, no data
 * (NaN) in a band and a corner, its planes, their smoothing and the
 * reference features. */
static dk_status tex_prepare(int i, char *err, size_t len)
{
    const kmeans_case *c = &cases[i];
    const size_t n = c->n;
    prep[i].value = malloc(n * sizeof(float));
    prep[i].planes = malloc(3 * n * sizeof(float));
    prep[i].smoothed = malloc(3 * n * sizeof(float));
    prep[i].x = malloc(3 * n * sizeof(float));
    prep[i].mask = malloc(n);
    prep[i].init = malloc((size_t)c->k * 3 * sizeof(float));
    if (!prep[i].value || !prep[i].planes || !prep[i].smoothed || !prep[i].x || !prep[i].mask || !prep[i].init) {
        snprintf(err, len, "out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    uint64_t st = 0x74657874ull + n;
    for (size_t j = 0; j < n; j++) {
        double y = (double)(j / c->cols), x = (double)(j % c->cols);
        double v = 30 + 25 * sin(0.031 * y) * cos(0.027 * x + 1) + 6 * cli_random(&st) - 8;
        int hole = (y > 0.4 * c->rows && y < 0.45 * c->rows) || (x < 20 && y < 30);
        prep[i].value[j] = hole ? NAN : (float)v;
    }
    dk_kmeans_desc d;
    desc_of(c, &d);
    dk_gauss_desc g;
    dk_gauss_desc_init(&g);
    g.method = DK_GAUSS_RF; /* the radar pipeline's texture (tools/kmeans/radar.c) */
    g.boundary = DK_BOUNDARY_ZERO;
    g.ndim = 3;
    g.shape[0] = 3;
    g.shape[1] = c->rows;
    g.shape[2] = c->cols;
    g.axes = 0x6;
    g.sigma[1] = g.sigma[2] = 2.0;
    dk_status s;
    if ((s = dk_kmeans_texture_planes_reference(&d, prep[i].value, prep[i].planes)) != DK_OK ||
        (s = dk_gauss_reference(&g, prep[i].planes, prep[i].smoothed)) != DK_OK ||
        (s = dk_kmeans_texture_features_reference(&d, prep[i].value, prep[i].smoothed, TEX_MIN_VALUE, prep[i].x,
                                                  prep[i].mask, prep[i].init, &prep[i].stats)) != DK_OK)
        snprintf(err, len, "%s", dk_last_error(NULL));
    return s;
}

static double max_abs_diff(const float *a, const float *b, size_t count, double *scale)
{
    double e = 0, m = 0;
    for (size_t j = 0; j < count; j++) {
        double t = fabs((double)a[j] - (double)b[j]);
        e = t > e || t != t ? t : e;
        m = fabs((double)b[j]) > m ? fabs((double)b[j]) : m;
    }
    *scale = m;
    return e;
}

static void tex_run(dk_context *ctx, const char *variant, int i, conform_result *r)
{
    const kmeans_case *c = &cases[i];
    const size_t n = c->n, kf = (size_t)c->k * 3;
    r->error = INFINITY;
    r->tolerance = 1e-5;
    r->passed = 0;
    dk_kmeans_desc d;
    desc_of(c, &d);
    d.variant = variant;
    dk_plan *plan = NULL;
    dk_buffer *bv = NULL, *bp = NULL, *bs = NULL, *bx = NULL, *bm = NULL, *bi = NULL;
    float *planes = malloc(3 * n * sizeof(float)), *x = malloc(3 * n * sizeof(float)), *init = malloc(kf * sizeof(float));
    uint8_t *mask = malloc(n);
    dk_kmeans_texture_stats stats;
    if (!planes || !x || !init || !mask) {
        snprintf(r->detail, sizeof r->detail, "out of host memory");
        goto done;
    }
    if (dk_kmeans_plan_create(ctx, &d, &plan) != DK_OK || dk_buffer_create(ctx, n * sizeof(float), &bv) != DK_OK ||
        dk_buffer_create(ctx, 3 * n * sizeof(float), &bp) != DK_OK ||
        dk_buffer_create(ctx, 3 * n * sizeof(float), &bs) != DK_OK ||
        dk_buffer_create(ctx, 3 * n * sizeof(float), &bx) != DK_OK || dk_buffer_create(ctx, n, &bm) != DK_OK ||
        dk_buffer_create(ctx, kf * sizeof(float), &bi) != DK_OK ||
        dk_buffer_write(bv, prep[i].value, n * sizeof(float)) != DK_OK ||
        dk_buffer_write(bs, prep[i].smoothed, 3 * n * sizeof(float)) != DK_OK ||
        dk_kmeans_texture_planes(plan, bv, bp) != DK_OK ||
        dk_kmeans_texture_features(plan, bv, bs, TEX_MIN_VALUE, bx, bm, bi, &stats) != DK_OK ||
        dk_buffer_read(bp, planes, 3 * n * sizeof(float)) != DK_OK ||
        dk_buffer_read(bx, x, 3 * n * sizeof(float)) != DK_OK || dk_buffer_read(bm, mask, n) != DK_OK ||
        dk_buffer_read(bi, init, kf * sizeof(float)) != DK_OK) {
        snprintf(r->detail, sizeof r->detail, "%s", dk_last_error(ctx));
        goto done;
    }
    double sp, sx, si;
    double ep = max_abs_diff(planes, prep[i].planes, 3 * n, &sp);
    double ex = max_abs_diff(x, prep[i].x, 3 * n, &sx) / sx;
    double ei = max_abs_diff(init, prep[i].init, kf, &si) / si;
    size_t mask_diff = 0;
    for (size_t j = 0; j < n; j++)
        mask_diff += !mask[j] != !prep[i].mask[j];
    r->error = ex > ei ? ex : ei;
    r->passed = ep == 0 && mask_diff == 0 && stats.valid == prep[i].stats.valid && ex <= r->tolerance &&
                ei <= r->tolerance;
    snprintf(r->detail, sizeof r->detail,
             "planes max diff %.2e, mask %zu differ, valid %zu vs %zu, features %.2e, initial centroids %.2e", ep,
             mask_diff, stats.valid, prep[i].stats.valid, ex, ei);
done:
    dk_plan_destroy(plan);
    dk_buffer_destroy(bv);
    dk_buffer_destroy(bp);
    dk_buffer_destroy(bs);
    dk_buffer_destroy(bx);
    dk_buffer_destroy(bm);
    dk_buffer_destroy(bi);
    free(planes);
    free(x);
    free(init);
    free(mask);
}

static dk_status km_prepare(int i, char *err, size_t len)
{
    const kmeans_case *c = &cases[i];
    if (c->texture)
        return tex_prepare(i, err, len);
    size_t kd = (size_t)c->k * c->d;
    prep[i].x = malloc(c->n * c->d * sizeof(float));
    prep[i].init = malloc(kd * sizeof(float));
    prep[i].cref = malloc(kd * sizeof(float));
    prep[i].lref = malloc(c->n * sizeof(int32_t));
    prep[i].mask = c->masked ? malloc(c->n) : NULL;
    if (!prep[i].x || !prep[i].init || !prep[i].cref || !prep[i].lref || (c->masked && !prep[i].mask)) {
        snprintf(err, len, "out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    make_points(c, prep[i].x, prep[i].mask);
    if (c->weighted) {
        if (!(prep[i].w = malloc(c->n * sizeof(float)))) {
            snprintf(err, len, "out of host memory");
            return DK_ERR_OUT_OF_MEMORY;
        }
        uint64_t ws = 0x77656967687473ull + c->n;
        for (size_t j = 0; j < c->n; j++) {
            double u = 0.5 * (cli_random(&ws) + 1.0); /* [0, 1) */
            prep[i].w[j] = j % 10 == 3 ? 0.0f : (float)(0.25 + 2.75 * u);
        }
    }
    float scale = 0;
    for (size_t j = 0; j < c->n * c->d; j++)
        scale = fabsf(prep[i].x[j]) > scale ? fabsf(prep[i].x[j]) : scale;
    prep[i].scale = scale;
    dk_kmeans_desc d;
    desc_of(c, &d);
    dk_status st = c->seeded ? DK_OK : dk_kmeans_initial_centroids(&d, prep[i].x, prep[i].mask, 0, prep[i].init);
    if (st == DK_OK && c->far_centroid)
        for (int f = 0; f < c->d; f++)
            prep[i].init[(size_t)(c->k / 2) * c->d + f] = 1000.0f;
    if (st == DK_OK)
        st = dk_kmeans_reference_weighted(&d, prep[i].x, prep[i].mask, prep[i].w, c->seeded ? NULL : prep[i].init,
                                          prep[i].lref, prep[i].cref, &prep[i].rref);
    if (st != DK_OK)
        snprintf(err, len, "%s", dk_last_error(NULL));
    return st;
}

static void km_run(dk_context *ctx, const char *variant, int i, conform_result *r)
{
    const kmeans_case *c = &cases[i];
    if (c->texture) {
        tex_run(ctx, variant, i, r);
        return;
    }
    size_t kd = (size_t)c->k * c->d;
    r->error = INFINITY;
    r->tolerance = 1e-5;
    r->passed = 0;
    dk_kmeans_desc d;
    desc_of(c, &d);
    d.variant = variant;
    dk_plan *plan = NULL;
    int32_t *labels = malloc(c->n * sizeof *labels);
    float *cent = malloc(kd * sizeof *cent);
    dk_kmeans_result res;
    if (!labels || !cent) {
        snprintf(r->detail, sizeof r->detail, "out of host memory");
        goto done;
    }
    dk_status st = dk_kmeans_plan_create(ctx, &d, &plan);
    if (st == DK_OK)
        st = dk_kmeans_execute_host_weighted(plan, prep[i].x, prep[i].mask, prep[i].w,
                                             c->seeded ? NULL : prep[i].init, labels, cent, &res);
    if (st != DK_OK) {
        r->not_implemented = st == DK_ERR_NOT_IMPLEMENTED;
        snprintf(r->detail, sizeof r->detail, "%s", dk_last_error(ctx));
        goto done;
    }
    size_t flips = 0, bad_masked = 0;
    size_t *sizes = calloc((size_t)c->k, sizeof *sizes);
    for (size_t j = 0; j < c->n; j++) {
        flips += labels[j] != prep[i].lref[j];
        bad_masked += (prep[i].lref[j] < 0) != (labels[j] < 0);
        if (sizes && prep[i].lref[j] >= 0)
            sizes[prep[i].lref[j]]++;
    }
    size_t smallest = c->n;
    for (int k = 0; k < c->k; k++)
        if (sizes && sizes[k] && sizes[k] < smallest)
            smallest = sizes[k];
    free(sizes);
    double err = 0;
    for (size_t j = 0; j < kd; j++) {
        double e = fabs((double)cent[j] - (double)prep[i].cref[j]) / prep[i].scale;
        err = e > err || e != e ? e : err;
    }
    r->error = err;
    r->tolerance = 1e-5 + 2.0 * (double)flips / (double)smallest;
    double obj_rel = fabs(res.objective - prep[i].rref.objective) / (prep[i].rref.objective + 1e-30);
    int same_stop = res.iterations == prep[i].rref.iterations;
    if (!same_stop && flips == 0 && abs(res.iterations - prep[i].rref.iterations) == 1) {
        double decided = res.iterations < prep[i].rref.iterations ? res.last_move : prep[i].rref.last_move;
        same_stop = fabs(decided - c->tol) <= 64.0 * 0x1p-24 * prep[i].scale;
    }
    int ok = err <= r->tolerance && flips <= c->n / 1000 && !bad_masked && same_stop &&
             obj_rel <= 1e-4 + (double)flips / (double)c->n && res.valid == prep[i].rref.valid;
    r->passed = ok;
    snprintf(r->detail, sizeof r->detail,
             "%zu label(s) differ (masked mismatch %zu), iterations %d vs %d, objective rel. diff %.2e, valid %zu vs %zu",
             flips, bad_masked, res.iterations, prep[i].rref.iterations, obj_rel, res.valid, prep[i].rref.valid);
done:
    dk_plan_destroy(plan);
    free(labels);
    free(cent);
}

#ifdef DK_TOOLS_MPI
#include <dakit/mpi.h>

/* Each rank a contiguous range of points (of image rows with contiguity),
 * given to the layer point-major; the checks are km_run's. */
static int km_run_ranks(dk_context *ctx, const char *variant, int i, conform_result *r)
{
    const kmeans_case *c = &cases[i];
    r->error = INFINITY;
    r->passed = 0;
    r->tolerance = 1e-5;
    if (c->texture || c->seeded || c->k > DK_KMEANS_MAX_K || c->weighted) {
        snprintf(r->detail, sizeof r->detail, "%s run in one process",
                 c->texture    ? "the texture features"
                 : c->seeded   ? "the seeded inits"
                 : c->weighted ? "sample weights"
                               : "k > 256");
        return 1;
    }
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t kd = (size_t)c->k * c->d;
    dk_kmeans_desc d;
    desc_of(c, &d);
    d.variant = variant;
    d.layout = DK_KMEANS_POINT_MAJOR;
    int contig = c->rows && c->lambda < 1;
    size_t units = contig ? c->rows : c->n, per = contig ? c->cols : 1;
    dk_mpi_part part;
    dk_mpi_decompose(MPI_COMM_WORLD, 1, &units, NULL, &part);
    size_t first = part.offset[0] * per, npts = part.extent[0] * per;
    float *x = malloc(npts * c->d * sizeof *x + 1), *cent = malloc(kd * sizeof *cent);
    int32_t *labels = malloc(npts * sizeof *labels + 1);
    dk_mpi_plan *plan = NULL;
    dk_kmeans_result res;
    r->detail[0] = '\0';
    if (!x || !cent || !labels)
        snprintf(r->detail, sizeof r->detail, "rank %d: out of host memory", rank);
    else {
        for (size_t j = 0; j < npts; j++)
            for (int f = 0; f < c->d; f++)
                x[j * c->d + f] = c->layout == FM ? prep[i].x[(size_t)f * c->n + first + j]
                                                  : prep[i].x[(first + j) * c->d + f];
        if (dk_mpi_kmeans_plan_create(ctx, MPI_COMM_WORLD, &d, &part, &plan) != DK_OK ||
            dk_mpi_kmeans_execute_host(plan, x, prep[i].mask ? prep[i].mask + first : NULL, prep[i].init, labels,
                                       cent, &res) != DK_OK)
            snprintf(r->detail, sizeof r->detail, "%s", dk_mpi_last_error());
        else {
            unsigned long long counts[2] = {0, 0}; /* flips, masked mismatches */
            for (size_t j = 0; j < npts; j++) {
                counts[0] += labels[j] != prep[i].lref[first + j];
                counts[1] += (prep[i].lref[first + j] < 0) != (labels[j] < 0);
            }
            MPI_Allreduce(MPI_IN_PLACE, counts, 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
            size_t *sizes = calloc((size_t)c->k, sizeof *sizes), smallest = c->n;
            for (size_t j = 0; sizes && j < c->n; j++)
                if (prep[i].lref[j] >= 0)
                    sizes[prep[i].lref[j]]++;
            for (int k = 0; k < c->k; k++)
                if (sizes && sizes[k] && sizes[k] < smallest)
                    smallest = sizes[k];
            free(sizes);
            double err = 0;
            for (size_t j = 0; j < kd; j++) {
                double e = fabs((double)cent[j] - (double)prep[i].cref[j]) / prep[i].scale;
                err = e > err || e != e ? e : err;
            }
            r->error = err;
            r->tolerance = 1e-5 + 2.0 * (double)counts[0] / (double)smallest;
            double obj_rel = fabs(res.objective - prep[i].rref.objective) / (prep[i].rref.objective + 1e-30);
            r->passed = err <= r->tolerance && counts[0] <= c->n / 1000 && !counts[1] &&
                        res.iterations == prep[i].rref.iterations &&
                        obj_rel <= 1e-4 + (double)counts[0] / (double)c->n && res.valid == prep[i].rref.valid;
            snprintf(r->detail, sizeof r->detail,
                     "%llu label(s) differ (masked mismatch %llu), iterations %d vs %d, objective rel. diff %.2e, "
                     "valid %zu vs %zu", counts[0], counts[1], res.iterations, prep[i].rref.iterations, obj_rel,
                     res.valid, prep[i].rref.valid);
        }
    }
    dk_mpi_plan_destroy(plan);
    free(x);
    free(cent);
    free(labels);
    conform_ranks_agree(r);
    return 0;
}
#endif

const conform_suite conform_kmeans = {
    .algo = "kmeans",
    .measure = "max |C - C_ref| / max|x|",
    .count = km_count,
    .name = km_name,
    .quick = km_quick,
    .variants = dk_kmeans_variants,
    .prepare = km_prepare,
    .run = km_run,
    .release = km_release,
#ifdef DK_TOOLS_MPI
    .run_ranks = km_run_ranks,
#endif
};
