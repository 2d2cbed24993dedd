/* The kmeans benchmark cases:
 *   points_3e6_d8_k16  n = 3e6, d = 8, k = 16, 20 iterations, tol 0: labels
 *                      and centroids from points already on the device. The
 *                      floor is reading the points 20 times.
 *   radar_900          the RADOLAN composite ($DAKIT_RADOLAN, else cli_data_file),
 *                      k = 6, lambda 0.7, window 5, 20 iterations. Timed: from
 *                      the decoded reflectivity in host memory (900 x 900
 *                      float32, NaN = no data) to the labels (int32) and
 *                      centroids in host memory (page-locked, from
 *                      dk_host_alloc, as a caller who keeps data moving
 *                      would hold it): the upload of the
 *                      reflectivity, its texture planes, their gauss
 *                      smoothing, the standardized features with the initial
 *                      centroids, the clustering, and the copies back. Not
 *                      timed: reading and decoding the file, the plans.
 * After the timed runs, each case prints how the backend's own clock split
 * the last run between assignment and centroid update (and, for the radar,
 * the host clock's split between the features and the clustering). With
 * DAKIT_BENCH_KMEANS_CHECK=1, points_3e6_d8_k16 also runs the serial
 * reference on the same points (seconds) and prints how many of the last
 * run's labels differ from it, and the centroids' largest difference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/kmeans.h>

#include "cli/cli.h"
#include "cli/datafile.h"
#include "harness/bench.h"
#include "kmeans/radar.h"
#include <dakit/radolan.h>

#define RADAR_FILE "raa01-rx_10000-1408102050-dwd---bin.gz"

static const struct {
    const char *name, *what;
} cases[] = {
    {"points_3e6_d8_k16", "3e6 points, d 8, k 16, 20 iterations, tol 0 (device-resident)"},
    {"radar_900", "RADOLAN RX 900x900, k 6, lambda 0.7, window 5, 20 iterations, reflectivity to labels"},
    {"points_3e6_d8_k16_weighted", "points_3e6_d8_k16 with every weight 1 (dk_kmeans_execute_weighted): the "
                                   "phases a launch each, as the distributed layer runs them"},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

typedef struct state {
    int which;
    char backend[64];
    dk_plan *plan;
    dk_buffer *x, *init, *labels, *cent, *weights;
    dk_kmeans_result last;
    dk_kmeans_desc desc;
    float *h_points, *h_init; /* kept for DAKIT_BENCH_KMEANS_CHECK */
    double feature_seconds, cluster_seconds;
    dk_radolan r;
    radar_pipeline *radar;
    dk_context *ctx;  /* for dk_host_free */
    float *h_value;   /* the reflectivity, in dk_host_alloc memory */
    int32_t *h_labels;
    float *h_cent;
} state;

static int count(void) { return NCASES; }
static const char *name(int i) { return cases[i].name; }
static const char *what(int i) { return cases[i].what; }

static double bytes(int i)
{
    if (i != 1)
        return 20.0 * 3e6 * 8 * sizeof(float);
    return 20.0 * 810000.0 * RADAR_FEATURES * sizeof(float);
}

/* The last run's labels and centroids against the serial reference's. */
static void check_points(state *s)
{
    const dk_kmeans_desc *d = &s->desc;
    size_t kd = (size_t)d->k * d->d;
    int32_t *got = malloc(d->n * sizeof *got), *ref = malloc(d->n * sizeof *ref);
    float *gc = malloc(kd * sizeof *gc), *rc = malloc(kd * sizeof *rc);
    dk_kmeans_result rr;
    if (!got || !ref || !gc || !rc || dk_buffer_read(s->labels, got, d->n * sizeof *got) != DK_OK ||
        dk_buffer_read(s->cent, gc, kd * sizeof *gc) != DK_OK ||
        dk_kmeans_reference(d, s->h_points, NULL, s->h_init, ref, rc, &rr) != DK_OK) {
        printf("kmeans %s on %s: reference check could not run\n", cases[s->which].name, s->backend);
    } else {
        size_t differ = 0;
        for (size_t i = 0; i < d->n; i++)
            differ += got[i] != ref[i];
        double err = 0;
        for (size_t j = 0; j < kd; j++)
            err = fmax(err, fabs((double)gc[j] - (double)rc[j]));
        printf("kmeans %s on %s: against the serial reference: %zu of %zu labels differ, max |C - C_ref| %.3g, "
               "objective %.9g vs %.9g, iterations %d vs %d\n",
               cases[s->which].name, s->backend, differ, d->n, err, s->last.objective, rr.objective,
               s->last.iterations, rr.iterations);
    }
    free(got);
    free(ref);
    free(gc);
    free(rc);
}

static void teardown(void *p)
{
    state *s = p;
    if (!s)
        return;
    if (s->which != 1 && s->last.iterations && s->h_points && getenv("DAKIT_BENCH_KMEANS_CHECK") &&
        !strcmp(getenv("DAKIT_BENCH_KMEANS_CHECK"), "1"))
        check_points(s);
    if (s->last.iterations && (s->last.assign_seconds > 0 || s->last.update_seconds > 0))
        printf("kmeans %s on %s: last run %d iterations, backend clock: assignment + block partial sums %.3f ms, "
               "centroid update (reduction) %.3f ms\n",
               cases[s->which].name, s->backend, s->last.iterations, s->last.assign_seconds * 1e3,
               s->last.update_seconds * 1e3);
    if (s->which == 1 && s->last.iterations)
        printf("kmeans radar_900 on %s: last run, host clock: reflectivity upload + texture features %.3f ms, "
               "clustering + labels back %.3f ms\n",
               s->backend, s->feature_seconds * 1e3, s->cluster_seconds * 1e3);
    dk_plan_destroy(s->plan);
    dk_buffer_destroy(s->x);
    dk_buffer_destroy(s->init);
    dk_buffer_destroy(s->labels);
    dk_buffer_destroy(s->cent);
    dk_buffer_destroy(s->weights);
    radar_pipeline_destroy(s->radar);
    dk_host_free(s->ctx, s->h_value);
    dk_host_free(s->ctx, s->h_labels);
    dk_host_free(s->ctx, s->h_cent);
    dk_radolan_free(&s->r);
    free(s->h_points);
    free(s->h_init);
    free(s);
}

static void *setup(dk_context *ctx, int i, const char *variant, char *err, size_t len)
{
    state *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, len, "out of host memory");
        return NULL;
    }
    s->which = i;
    snprintf(s->backend, sizeof s->backend, "%s", dk_context_backend(ctx));
    if (i == 1) {
        /* $DAKIT_RADOLAN, else the data folders of cli_data_file; a file
         * not found makes the case skipped with the sentence */
        char found[4200];
        const char *path = getenv("DAKIT_RADOLAN");
        if (!path || !*path) {
            if (cli_data_file(RADAR_FILE, found, sizeof found, err, len) != 0) {
                teardown(s);
                return NULL;
            }
            path = found;
        }
        fprintf(stderr, "kmeans radar_900: data %s\n", path);
        radar_options o = {6, 0.7, 5, 5.0, 2.0, 20, 0.0, variant};
        if (dk_radolan_read(path, &s->r) != DK_OK) {
            snprintf(err, len, "%s", dk_last_error(NULL));
            teardown(s);
            return NULL;
        }
        if (radar_pipeline_create(ctx, s->r.rows, s->r.cols, &o, &s->radar, err, len) != DK_OK) {
            teardown(s);
            return NULL;
        }
        const size_t n = s->r.rows * s->r.cols;
        s->ctx = ctx;
        if (dk_host_alloc(ctx, n * sizeof *s->h_value, (void **)&s->h_value) != DK_OK ||
            dk_host_alloc(ctx, n * sizeof *s->h_labels, (void **)&s->h_labels) != DK_OK ||
            dk_host_alloc(ctx, 6 * RADAR_FEATURES * sizeof *s->h_cent, (void **)&s->h_cent) != DK_OK) {
            snprintf(err, len, "%s", dk_last_error(ctx));
            teardown(s);
            return NULL;
        }
        memcpy(s->h_value, s->r.value, n * sizeof *s->h_value);
        return s;
    }
    dk_kmeans_desc d;
    dk_kmeans_desc_init(&d);
    d.n = 3000000;
    d.d = 8;
    d.k = 16;
    d.max_iters = 20;
    d.tol = 0;
    d.variant = variant;
    size_t xs = d.n * d.d * sizeof(float), cs = (size_t)d.k * d.d * sizeof(float);
    float *host = malloc(xs), *init = malloc(cs);
    if (!host || !init) {
        snprintf(err, len, "out of host memory");
        free(host);
        free(init);
        teardown(s);
        return NULL;
    }
    /* 16 overlapping blobs in 8 dimensions, uniform noise around them */
    uint64_t st = 99;
    float centers[16][8];
    for (int c = 0; c < 16; c++)
        for (int f = 0; f < 8; f++)
            centers[c][f] = (float)(4 * cli_random(&st));
    for (size_t p = 0; p < d.n; p++)
        for (int f = 0; f < 8; f++)
            host[p * 8 + f] = centers[p % 16][f] + (float)cli_random(&st);
    if (dk_kmeans_initial_centroids(&d, host, NULL, 0, init) != DK_OK ||
        dk_kmeans_plan_create(ctx, &d, &s->plan) != DK_OK || dk_buffer_create(ctx, xs, &s->x) != DK_OK ||
        dk_buffer_create(ctx, cs, &s->init) != DK_OK ||
        dk_buffer_create(ctx, d.n * sizeof(int32_t), &s->labels) != DK_OK ||
        dk_buffer_create(ctx, cs, &s->cent) != DK_OK || dk_buffer_write(s->x, host, xs) != DK_OK ||
        dk_buffer_write(s->init, init, cs) != DK_OK) {
        snprintf(err, len, "%s", dk_last_error(ctx));
        free(host);
        free(init);
        teardown(s);
        return NULL;
    }
    if (i == 2) {
        /* every weight 1, written from the points' host copy reused as scratch */
        for (size_t p = 0; p < d.n; p++)
            host[p] = 1.0f;
        if (dk_buffer_create(ctx, d.n * sizeof(float), &s->weights) != DK_OK ||
            dk_buffer_write(s->weights, host, d.n * sizeof(float)) != DK_OK) {
            snprintf(err, len, "%s", dk_last_error(ctx));
            free(host);
            free(init);
            teardown(s);
            return NULL;
        }
        free(host);
        host = NULL;
    }
    s->desc = d;
    s->h_points = host;
    s->h_init = init;
    return s;
}

static dk_status run(void *p)
{
    state *s = p;
    if (s->which == 1) {
        char err[512];
        radar_result res;
        memset(&res, 0, sizeof res);
        dk_status st = radar_pipeline_run(s->radar, s->h_value, s->h_labels, s->h_cent, &res, err, sizeof err);
        if (st == DK_OK) {
            s->last = res.kmeans;
            s->feature_seconds = res.feature_seconds;
            s->cluster_seconds = res.cluster_seconds;
        }
        else
            fprintf(stderr, "kmeans radar_900: %s\n", err);
        return st;
    }
    if (s->which == 2)
        return dk_kmeans_execute_weighted(s->plan, s->x, NULL, s->weights, s->init, s->labels, s->cent, &s->last);
    return dk_kmeans_execute(s->plan, s->x, NULL, s->init, s->labels, s->cent, &s->last);
}

const bench_suite bench_kmeans = {
    .algo = "kmeans",
    .count = count,
    .name = name,
    .what = what,
    .bytes = bytes,
    .variants = dk_kmeans_variants,
    .setup = setup,
    .run = run,
    .teardown = teardown,
};
