/* The radar pipeline: RADOLAN values -> texture features -> k-means labels.
 *
 * Features per pixel (each standardized over the clustered pixels):
 *   reflectivity Z, its local mean and its local standard deviation over a
 *   Gaussian neighbourhood. Pixels without data must not drag the local
 *   statistics to zero, so they are normalized convolutions:
 *   mean = G*(Z M) / G*M, std = sqrt(G*(Z^2 M) / G*M - mean^2), M the
 *   has-data mask. The three smoothings run as one gauss plan over a
 *   (3, rows, cols) field on the same device as the clustering. */
#include "kmeans/radar.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/kmeans.h>

#include "cli/cli.h"
#include "cli/plot.h"
#include "kmeans/geo.h"

/* radar_band_features rounds each float operation as the texture reference
 * does (no FMA contraction), so its features are the reference's. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

struct radar_pipeline {
    dk_context *ctx;
    radar_options o;
    size_t rows, cols, n;
    dk_gauss_desc gd;
    dk_kmeans_desc kd;
    dk_plan *gauss, *kmeans;
    dk_buffer *value, *planes, *smoothed, *points, *mask, *init, *labels, *centroids;
    dk_kmeans_texture_stats stats;
    float *h_planes, *h_feat, *h_init; /* the serial references (ctx NULL) */
    uint8_t *h_mask;
};

void radar_pipeline_destroy(radar_pipeline *p)
{
    if (!p)
        return;
    dk_plan_destroy(p->gauss);
    dk_plan_destroy(p->kmeans);
    dk_buffer_destroy(p->value);
    dk_buffer_destroy(p->planes);
    dk_buffer_destroy(p->smoothed);
    dk_buffer_destroy(p->points);
    dk_buffer_destroy(p->mask);
    dk_buffer_destroy(p->init);
    dk_buffer_destroy(p->labels);
    dk_buffer_destroy(p->centroids);
    free(p->h_planes);
    free(p->h_feat);
    free(p->h_init);
    free(p->h_mask);
    free(p);
}

dk_status radar_pipeline_create(dk_context *ctx, size_t rows, size_t cols, const radar_options *o,
                                radar_pipeline **out, char *err, size_t len)
{
    *out = NULL;
    radar_pipeline *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, len, "out of memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    p->ctx = ctx;
    p->o = *o;
    p->rows = rows;
    p->cols = cols;
    p->n = rows * cols;
    const size_t n = p->n, F = RADAR_FEATURES, kf = (size_t)o->k * F;
    dk_gauss_desc_init(&p->gd);
    /* the texture the pipeline's features were made with: rf, zero boundary */
    p->gd.method = DK_GAUSS_RF;
    p->gd.boundary = DK_BOUNDARY_ZERO;
    p->gd.ndim = 3;
    p->gd.shape[0] = F;
    p->gd.shape[1] = rows;
    p->gd.shape[2] = cols;
    p->gd.axes = 0x6;
    p->gd.sigma[1] = p->gd.sigma[2] = o->texture_sigma;
    dk_kmeans_desc_init(&p->kd);
    p->kd.n = n;
    p->kd.d = (int)F;
    p->kd.k = o->k;
    p->kd.max_iters = o->iters;
    p->kd.tol = o->tol;
    p->kd.variant = o->variant;
    p->kd.layout = DK_KMEANS_FEATURE_MAJOR;
    p->kd.rows = rows;
    p->kd.cols = cols;
    p->kd.lambda = o->lambda;
    p->kd.window = o->window;
    dk_status st = DK_OK;
    if (!ctx) {
        p->h_planes = malloc(F * n * sizeof(float));
        p->h_feat = malloc(F * n * sizeof(float));
        p->h_init = malloc(kf * sizeof(float));
        p->h_mask = malloc(n);
        if (!p->h_planes || !p->h_feat || !p->h_init || !p->h_mask) {
            snprintf(err, len, "out of memory for a %zu x %zu grid", rows, cols);
            st = DK_ERR_OUT_OF_MEMORY;
        }
    } else if ((st = dk_gauss_plan_create(ctx, &p->gd, &p->gauss)) != DK_OK ||
               (st = dk_kmeans_plan_create(ctx, &p->kd, &p->kmeans)) != DK_OK ||
               (st = dk_buffer_create(ctx, n * sizeof(float), &p->value)) != DK_OK ||
               (st = dk_buffer_create(ctx, F * n * sizeof(float), &p->planes)) != DK_OK ||
               (st = dk_buffer_create(ctx, F * n * sizeof(float), &p->smoothed)) != DK_OK ||
               (st = dk_buffer_create(ctx, F * n * sizeof(float), &p->points)) != DK_OK ||
               (st = dk_buffer_create(ctx, n, &p->mask)) != DK_OK ||
               (st = dk_buffer_create(ctx, kf * sizeof(float), &p->init)) != DK_OK ||
               (st = dk_buffer_create(ctx, n * sizeof(int32_t), &p->labels)) != DK_OK ||
               (st = dk_buffer_create(ctx, kf * sizeof(float), &p->centroids)) != DK_OK) {
        snprintf(err, len, "%s", dk_last_error(ctx));
    }
    if (st != DK_OK) {
        radar_pipeline_destroy(p);
        return st;
    }
    *out = p;
    return DK_OK;
}

/* A dry scan: too few pixels to cluster is an outcome, not an error. */
static void dry_scan(radar_pipeline *p, int32_t *labels, float *centroids, radar_result *res, double t0)
{
    for (size_t i = 0; i < p->n; i++)
        labels[i] = -1;
    for (size_t j = 0; j < (size_t)p->o.k * RADAR_FEATURES; j++)
        centroids[j] = NAN;
    if (!res)
        return;
    memset(&res->kmeans, 0, sizeof res->kmeans);
    res->kmeans.valid = p->stats.valid;
    res->feature_seconds = res->seconds = cli_now() - t0;
    res->cluster_seconds = 0;
    if (p->stats.valid == 0)
        snprintf(res->dry, sizeof res->dry, "a dry scan: no pixel at or above %g, nothing to cluster",
                 p->o.min_value);
    else
        snprintf(res->dry, sizeof res->dry, "a dry scan: only %zu pixel(s) at or above %g, fewer than k = %d; "
                 "nothing clustered", p->stats.valid, p->o.min_value, p->o.k);
}

/* On a device: the reflectivity goes over once, the texture planes, their
 * smoothing, the features with their standardization and the initial
 * centroids, and the clustering all stay there (dakit/kmeans.h's texture
 * functions), and the labels come back, or are written into the caller's
 * memory where the backend can wrap it. */
static dk_status pipeline_run(radar_pipeline *p, const float *value, int32_t *labels, float *centroids,
                              radar_result *res, char *err, size_t len)
{
    const size_t n = p->n, F = RADAR_FEATURES, kf = (size_t)p->o.k * F;
    double t0 = cli_now(), t1;
    dk_kmeans_result kr;
    dk_status st;
    if (res)
        res->dry[0] = '\0';
    if (p->ctx) {
        if ((st = dk_buffer_write(p->value, value, n * sizeof(float))) != DK_OK ||
            (st = dk_kmeans_texture_planes(p->kmeans, p->value, p->planes)) != DK_OK ||
            (st = dk_gauss_execute(p->gauss, p->planes, p->smoothed)) != DK_OK) {
            snprintf(err, len, "texture features: %s", dk_last_error(p->ctx));
            return st;
        }
        p->stats.valid = SIZE_MAX; /* stays so when the call fails before counting */
        st = dk_kmeans_texture_features(p->kmeans, p->value, p->smoothed, p->o.min_value, p->points, p->mask,
                                        p->init, &p->stats);
        if (st == DK_ERR_INVALID_ARGUMENT && p->stats.valid < (size_t)p->o.k) {
            dry_scan(p, labels, centroids, res, t0);
            return DK_OK;
        }
        if (st != DK_OK) {
            snprintf(err, len, "texture features: %s", dk_last_error(p->ctx));
            return st;
        }
        t1 = cli_now();
        /* where the backend reaches the caller's memory (page-locked on
         * cuda, any on cpu), the results are written there, with no copy back */
        dk_buffer *to_labels = NULL, *to_centroids = NULL;
        if (dk_buffer_wrap(p->ctx, DK_MEMORY_HOST, labels, n * sizeof(int32_t), &to_labels) != DK_OK)
            to_labels = NULL;
        if (dk_buffer_wrap(p->ctx, DK_MEMORY_HOST, centroids, kf * sizeof(float), &to_centroids) != DK_OK)
            to_centroids = NULL;
        if ((st = dk_kmeans_execute(p->kmeans, p->points, p->mask, p->init, to_labels ? to_labels : p->labels,
                                    to_centroids ? to_centroids : p->centroids, &kr)) != DK_OK ||
            (!to_labels && (st = dk_buffer_read(p->labels, labels, n * sizeof(int32_t))) != DK_OK) ||
            (!to_centroids && (st = dk_buffer_read(p->centroids, centroids, kf * sizeof(float))) != DK_OK))
            snprintf(err, len, "clustering: %s", dk_last_error(p->ctx));
        dk_buffer_destroy(to_labels);
        dk_buffer_destroy(to_centroids);
        if (st != DK_OK)
            return st;
    } else {
        if ((st = dk_kmeans_texture_planes_reference(&p->kd, value, p->h_planes)) != DK_OK ||
            (st = dk_gauss_reference(&p->gd, p->h_planes, p->h_planes)) != DK_OK) {
            snprintf(err, len, "texture features: %s", dk_last_error(NULL));
            return st;
        }
        p->stats.valid = SIZE_MAX; /* stays so when the call fails before counting */
        st = dk_kmeans_texture_features_reference(&p->kd, value, p->h_planes, p->o.min_value, p->h_feat, p->h_mask,
                                                  p->h_init, &p->stats);
        if (st == DK_ERR_INVALID_ARGUMENT && p->stats.valid < (size_t)p->o.k) {
            dry_scan(p, labels, centroids, res, t0);
            return DK_OK;
        }
        if (st != DK_OK) {
            snprintf(err, len, "texture features: %s", dk_last_error(NULL));
            return st;
        }
        t1 = cli_now();
        if ((st = dk_kmeans_reference(&p->kd, p->h_feat, p->h_mask, p->h_init, labels, centroids, &kr)) != DK_OK) {
            snprintf(err, len, "clustering: %s", dk_last_error(NULL));
            return st;
        }
    }
    double t2 = cli_now();
    if (res) {
        res->kmeans = kr;
        res->feature_seconds = t1 - t0;
        res->cluster_seconds = t2 - t1;
        res->seconds = t2 - t0;
    }
    return DK_OK;
}

/* On cuda the device calls queue back to back on the context's own stream
 * (DK_QUEUE_ASYNC); the texture statistics and the clustering, whose
 * results come to the host, still wait. */
dk_status radar_pipeline_run(radar_pipeline *p, const float *value, int32_t *labels, float *centroids,
                             radar_result *res, char *err, size_t len)
{
    dk_native nat;
    int queued = p->ctx && dk_context_native(p->ctx, &nat) == DK_OK && nat.memory == DK_MEMORY_CUDA && nat.queue &&
                 dk_context_set_queue(p->ctx, nat.queue, DK_QUEUE_ASYNC) == DK_OK;
    dk_status st = pipeline_run(p, value, labels, centroids, res, err, len);
    if (queued) {
        dk_status wt = dk_context_wait(p->ctx), qt = dk_context_set_queue(p->ctx, NULL, 0);
        if (st == DK_OK && (wt != DK_OK || qt != DK_OK)) {
            st = wt != DK_OK ? wt : qt;
            snprintf(err, len, "%s", dk_last_error(p->ctx));
        }
    }
    return st;
}

/* Per-cluster means in physical units, from the standardized features
 * (read back from the device where there is one). */
static dk_status cluster_statistics(radar_pipeline *p, radar_result *res, char *err, size_t len)
{
    const size_t n = p->n, F = RADAR_FEATURES;
    const int k = p->o.k;
    res->sizes = calloc((size_t)k, sizeof *res->sizes);
    res->mean_value = calloc((size_t)k, sizeof(double));
    res->mean_local = calloc((size_t)k, sizeof(double));
    res->mean_std = calloc((size_t)k, sizeof(double));
    float *feat = p->h_feat ? p->h_feat : malloc(F * n * sizeof *feat);
    if (res->dry[0]) { /* nothing clustered: no statistics to gather */
        if (feat != p->h_feat)
            free(feat);
        feat = NULL;
    }
    if (!res->sizes || !res->mean_value || !res->mean_local || !res->mean_std || (!feat && !res->dry[0])) {
        if (feat != p->h_feat)
            free(feat);
        snprintf(err, len, "out of memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    if (res->dry[0])
        return DK_OK;
    if (feat != p->h_feat && dk_buffer_read(p->points, feat, F * n * sizeof *feat) != DK_OK) {
        snprintf(err, len, "reading the features back: %s", dk_last_error(p->ctx));
        free(feat);
        return DK_ERR_BACKEND;
    }
    double *mean[RADAR_FEATURES] = {res->mean_value, res->mean_local, res->mean_std};
    for (size_t i = 0; i < n; i++) {
        int l = res->labels[i];
        if (l < 0)
            continue;
        res->sizes[l]++;
        for (size_t f = 0; f < F; f++)
            mean[f][l] += feat[f * n + i] * p->stats.sd[f] + p->stats.mean[f];
    }
    for (int c = 0; c < k; c++)
        for (size_t f = 0; f < F; f++)
            if (res->sizes[c])
                mean[f][c] /= (double)res->sizes[c];
    if (feat != p->h_feat)
        free(feat);
    return DK_OK;
}

dk_status radar_band_features(dk_context *ctx, const float *value, size_t rows, size_t cols, size_t row0,
                              size_t nrows, const radar_options *o, float *feat, uint8_t *mask,
                              double sums[1 + 2 * RADAR_FEATURES], char *err, size_t len)
{
    const size_t F = RADAR_FEATURES;
    memset(sums, 0, (1 + 2 * F) * sizeof *sums);
    if (!nrows)
        return DK_OK;
    dk_gauss_desc gd;
    dk_gauss_desc_init(&gd);
    gd.method = DK_GAUSS_RF; /* as radar_pipeline_create's texture */
    gd.boundary = DK_BOUNDARY_ZERO;
    gd.ndim = 3;
    gd.shape[0] = F;
    gd.shape[1] = rows;
    gd.shape[2] = cols;
    gd.axes = 0x6;
    gd.sigma[1] = gd.sigma[2] = o->texture_sigma;
    /* the rows the smoothing of the band reaches, clipped at the grid's edges */
    size_t h = dk_gauss_window_halo(&gd, 1);
    size_t w0 = row0 > h ? row0 - h : 0, w1 = row0 + nrows + h < rows ? row0 + nrows + h : rows;
    size_t nw = (w1 - w0) * cols, n = nrows * cols, skip = (row0 - w0) * cols;
    gd.shape[1] = w1 - w0;
    float *planes = malloc(F * nw * sizeof *planes);
    if (!planes) {
        snprintf(err, len, "out of memory for the texture planes of %zu rows", w1 - w0);
        return DK_ERR_OUT_OF_MEMORY;
    }
    const float *v = value + w0 * cols;
    for (size_t i = 0; i < nw; i++) { /* dk_kmeans_texture_planes */
        int has = isfinite(v[i]);
        float z = has ? v[i] : 0.0f;
        planes[i] = z;
        planes[nw + i] = z * z;
        planes[2 * nw + i] = (float)has;
    }
    dk_plan *plan = NULL;
    dk_status st = ctx ? dk_gauss_plan_create(ctx, &gd, &plan) : DK_OK;
    if (st == DK_OK)
        st = ctx ? dk_gauss_execute_host(plan, planes, planes) : dk_gauss_reference(&gd, planes, planes);
    dk_plan_destroy(plan);
    if (st != DK_OK) {
        snprintf(err, len, "texture features: %s", dk_last_error(ctx));
        free(planes);
        return st;
    }
    const float *a = planes + skip, *b = planes + nw + skip, *w = planes + 2 * nw + skip;
    v = value + row0 * cols;
    for (size_t i = 0; i < n; i++) { /* dk_kmeans_texture_features_reference before the standardization */
        int has = isfinite(v[i]);
        float z = has ? v[i] : 0.0f;
        float mean = w[i] > 1e-6f ? a[i] / w[i] : z;
        float var = w[i] > 1e-6f ? b[i] / w[i] - mean * mean : 0.0f;
        float f[RADAR_FEATURES] = {z, mean, var > 0 ? sqrtf(var) : 0.0f};
        mask[i] = has && z >= o->min_value;
        for (size_t j = 0; j < F; j++) {
            feat[i * F + j] = f[j];
            if (mask[i]) {
                sums[1 + j] += f[j];
                sums[1 + F + j] += (double)f[j] * f[j];
            }
        }
        sums[0] += mask[i];
    }
    free(planes);
    return DK_OK;
}

dk_status radar_cluster(dk_context *ctx, const dk_radolan *r, const radar_options *o, radar_result *out,
                        char *err, size_t len)
{
    memset(out, 0, sizeof *out);
    out->k = o->k;
    radar_pipeline *p = NULL;
    dk_status st = radar_pipeline_create(ctx, r->rows, r->cols, o, &p, err, len);
    if (st != DK_OK)
        return st;
    out->labels = malloc(r->rows * r->cols * sizeof *out->labels);
    out->centroids = malloc((size_t)o->k * RADAR_FEATURES * sizeof *out->centroids);
    if (!out->labels || !out->centroids) {
        snprintf(err, len, "out of memory");
        st = DK_ERR_OUT_OF_MEMORY;
    } else if ((st = radar_pipeline_run(p, r->value, out->labels, out->centroids, out, err, len)) == DK_OK) {
        st = cluster_statistics(p, out, err, len);
    }
    radar_pipeline_destroy(p);
    if (st != DK_OK)
        radar_result_free(out);
    return st;
}

void radar_result_free(radar_result *r)
{
    free(r->labels);
    free(r->centroids);
    free(r->sizes);
    free(r->mean_value);
    free(r->mean_local);
    free(r->mean_std);
    memset(r, 0, sizeof *r);
}

/* ---- the picture ---- */

/* Polylines in the frame's km, broken by NAN. */
typedef struct map_lines {
    double *x, *y;
    size_t n, cap;
} map_lines;

typedef struct map_label {
    double at;   /* km along the edge */
    int left;    /* 0: below the bottom edge (a meridian), 1: left of the left edge (a parallel) */
    char text[24];
} map_label;

/* What is drawn over both maps: the graticule with its labels, coasts and borders. */
typedef struct radar_map {
    map_lines graticule, coast, border;
    map_label label[64];
    int nlabels;
} radar_map;

static void map_free(radar_map *m)
{
    map_lines *l[3] = {&m->graticule, &m->coast, &m->border};
    for (int i = 0; i < 3; i++)
        free(l[i]->x), free(l[i]->y);
}

static int lines_room(map_lines *L, size_t more)
{
    if (L->n + more <= L->cap)
        return 0;
    size_t cap = (L->n + more) * 2;
    double *x = realloc(L->x, cap * sizeof *x);
    if (x)
        L->x = x;
    double *y = realloc(L->y, cap * sizeof *y);
    if (y)
        L->y = y;
    if (!x || !y)
        return -1;
    L->cap = cap;
    return 0;
}

/* Appends a polyline given in degrees, projected to km; points far off the
 * box (x0, x1, y0, y1 in km) break it, so that nothing outside is drawn
 * across the map. The projected points stay in x/y (km) for the caller. */
static int append_projected(map_lines *L, geo_proj *g, const double *lon, const double *lat, size_t n,
                            const double box[4])
{
    if (lines_room(L, n + 1))
        return -1;
    double *x = L->x + L->n, *y = L->y + L->n;
    memcpy(x, lon, n * sizeof *x);
    memcpy(y, lat, n * sizeof *y);
    geo_forward(g, x, y, n);
    const double mx = 0.1 * (box[1] - box[0]), my = 0.1 * (box[3] - box[2]);
    for (size_t i = 0; i < n; i++) {
        x[i] /= 1000, y[i] /= 1000;
        if (!(x[i] > box[0] - mx && x[i] < box[1] + mx && y[i] > box[2] - my && y[i] < box[3] + my))
            x[i] = y[i] = NAN;
    }
    L->n += n;
    L->x[L->n] = L->y[L->n] = NAN;
    L->n++;
    return 0;
}

static void degrees(double v, int is_lat, char *s, size_t n)
{
    double a = fabs(v) < 1e-9 ? 0 : fabs(v);
    const char *hemi = a == 0 ? "" : is_lat ? (v < 0 ? "S" : "N") : (v < 0 ? "W" : "E");
    snprintf(s, n, "%g\u00b0%s", round(a * 1e6) / 1e6, hemi);
}

/* Graticule steps: the smallest that gives at most eight lines. */
static double graticule_step(double span)
{
    static const double steps[] = {0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 45};
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++)
        if (span / steps[i] <= 8)
            return steps[i];
    return 90;
}

/* Where the polyline (m->graticule's last n points) meets the bottom edge
 * (left 0) or the left edge (left 1) inside the box: its label there. */
static void edge_label(radar_map *m, size_t from, const double box[4], int left, const char *text)
{
    const map_lines *L = &m->graticule;
    for (size_t i = from; i + 1 < L->n && m->nlabels < 64; i++) {
        double a0 = left ? L->x[i] : L->y[i], a1 = left ? L->x[i + 1] : L->y[i + 1];
        double b0 = left ? L->y[i] : L->x[i], b1 = left ? L->y[i + 1] : L->x[i + 1];
        double edge = left ? box[0] : box[2], lo = left ? box[2] : box[0], hi = left ? box[3] : box[1];
        if (!isfinite(a0) || !isfinite(a1) || (a0 - edge) * (a1 - edge) > 0 || a0 == a1)
            continue;
        double at = b0 + (edge - a0) / (a1 - a0) * (b1 - b0);
        if (at > lo && at < hi) {
            map_label *l = &m->label[m->nlabels++];
            l->at = at;
            l->left = left;
            snprintf(l->text, sizeof l->text, "%s", text);
        }
        return;
    }
}

/* The map over the box (km of the projection proj): 0, or -1 when there is
 * none (no PROJ, a projection it refuses, no memory): the picture then
 * keeps its km axes. */
static int map_build(radar_map *m, const char *proj, const double box[4])
{
    memset(m, 0, sizeof *m);
    char err[256];
    geo_proj *g = proj ? geo_open(proj, err, sizeof err) : NULL;
    if (!g)
        return -1;
    /* the box's extent in degrees, from its edges (no pole inside a radar product) */
    enum { E = 64 };
    double lon[4 * E], lat[4 * E];
    for (int i = 0; i < E; i++) {
        double t = (double)i / (E - 1);
        double ex[4] = {box[0] + t * (box[1] - box[0]), box[1], box[1] - t * (box[1] - box[0]), box[0]};
        double ey[4] = {box[2], box[2] + t * (box[3] - box[2]), box[3], box[3] - t * (box[3] - box[2])};
        for (int e = 0; e < 4; e++)
            lon[e * E + i] = ex[e] * 1000, lat[e * E + i] = ey[e] * 1000;
    }
    geo_inverse(g, lon, lat, 4 * E);
    double lon0 = INFINITY, lon1 = -INFINITY, lat0 = INFINITY, lat1 = -INFINITY;
    for (int i = 0; i < 4 * E; i++)
        if (isfinite(lon[i]) && isfinite(lat[i])) {
            lon0 = fmin(lon0, lon[i]), lon1 = fmax(lon1, lon[i]);
            lat0 = fmin(lat0, lat[i]), lat1 = fmax(lat1, lat[i]);
        }
    int rc = -1;
    if (!(lon1 > lon0 && lat1 > lat0))
        goto done;
    enum { S = 181 };
    double a[S], b[S];
    const double dlon = graticule_step(lon1 - lon0), dlat = graticule_step(lat1 - lat0);
    const double pad_lon = 0.05 * (lon1 - lon0), pad_lat = 0.05 * (lat1 - lat0);
    char text[24];
    for (double v = ceil(lon0 / dlon) * dlon; v <= lon1; v += dlon) { /* meridians */
        for (int i = 0; i < S; i++)
            a[i] = v, b[i] = lat0 - pad_lat + (lat1 - lat0 + 2 * pad_lat) * i / (S - 1);
        size_t from = m->graticule.n;
        if (append_projected(&m->graticule, g, a, b, S, box))
            goto done;
        degrees(v, 0, text, sizeof text);
        edge_label(m, from, box, 0, text);
    }
    for (double v = ceil(lat0 / dlat) * dlat; v <= lat1; v += dlat) { /* parallels */
        for (int i = 0; i < S; i++)
            b[i] = v, a[i] = lon0 - pad_lon + (lon1 - lon0 + 2 * pad_lon) * i / (S - 1);
        size_t from = m->graticule.n;
        if (append_projected(&m->graticule, g, a, b, S, box))
            goto done;
        degrees(v, 1, text, sizeof text);
        edge_label(m, from, box, 1, text);
    }
    const double span_km = fmax(box[1] - box[0], box[3] - box[2]);
    for (int kind = 0; kind < 2; kind++) {
        geo_lines gl;
        if (geo_shorelines(kind, lon0 - pad_lon, lon1 + pad_lon, lat0 - pad_lat, lat1 + pad_lat, span_km, &gl))
            continue; /* a damaged file: the map without it */
        for (size_t i = 0; i < gl.nlines; i++)
            if (append_projected(kind ? &m->border : &m->coast, g, gl.lon + gl.start[i], gl.lat + gl.start[i],
                                 gl.start[i + 1] - gl.start[i], box)) {
                geo_lines_free(&gl);
                goto done;
            }
        geo_lines_free(&gl);
    }
    rc = 0;
done:
    geo_close(g);
    if (rc)
        map_free(m);
    return rc;
}

static const plot_rgb graticule_color = {0.2, 0.2, 0.2}, coast_color = {0.05, 0.1, 0.45},
                      border_color = {0, 0, 0}, ring_color = {0.25, 0.25, 0.25};

/* The map's lines over a panel, the range rings and the site (ring_km > 0),
 * and the graticule's labels outside its left and bottom edges. */
static void draw_map(plot *p, const plot_panel *a, const radar_map *m, double ring_km)
{
    plot_line(p, a, m->graticule.x, m->graticule.y, m->graticule.n, graticule_color, 0.4, 0);
    plot_line(p, a, m->coast.x, m->coast.y, m->coast.n, coast_color, 0.9, 0);
    plot_line(p, a, m->border.x, m->border.y, m->border.n, border_color, 0.8, 1);
    if (ring_km > 0) {
        const double reach = fmax(fmax(fabs(a->left), fabs(a->right)), fmax(fabs(a->bottom), fabs(a->top)));
        enum { S = 241 };
        double x[S], y[S];
        for (double r = ring_km; r <= reach * 1.0001; r += ring_km) {
            for (int i = 0; i < S; i++)
                x[i] = r * sin(2 * M_PI * i / (S - 1)), y[i] = r * cos(2 * M_PI * i / (S - 1));
            plot_line(p, a, x, y, S, ring_color, 0.7, 0);
            double fx, fy;
            char s[32];
            plot_to_figure(a, r * M_SQRT1_2, r * M_SQRT1_2, &fx, &fy);
            snprintf(s, sizeof s, "%g km", r);
            if (fx < a->x + a->w - 20 && fy > a->y + 10)
                plot_text(p, fx + 2, fy - 2, 9, -1, 0, s);
        }
        plot_marker(p, a, 0, 0, 11);
    }
    for (int i = 0; i < m->nlabels; i++) {
        const map_label *l = &m->label[i];
        double fx, fy;
        plot_to_figure(a, l->left ? a->left : l->at, l->left ? l->at : a->bottom, &fx, &fy);
        if (l->left)
            plot_text(p, fx - 4, fy + 3.5, 10, 1, 0, l->text);
        else
            plot_text(p, fx, fy + 13, 10, 0, 0, l->text);
    }
}

/* Cluster c's place when the clusters are ordered by mean value, weakest
 * first (empty clusters before all). */
static void rank_by_mean(const radar_result *res, int *rank)
{
    for (int c = 0; c < res->k; c++) {
        rank[c] = 0;
        double mc = res->sizes && res->sizes[c] ? res->mean_value[c] : -INFINITY;
        for (int d = 0; d < res->k; d++) {
            double md = res->sizes && res->sizes[d] ? res->mean_value[d] : -INFINITY;
            rank[c] += md < mc || (md == mc && d < c);
        }
    }
}

static plot_rgb cluster_color(int rank, int k) { return plot_cmap_color(PLOT_CMAP_INTENSITY, k > 1 ? (double)rank / (k - 1) : 1.0); }

int radar_picture(const dk_radolan *r, const radar_result *res, const radar_options *o, const radar_frame *frame,
                  const char *source, const char *path, char *err, size_t len)
{
    radar_frame grid = {0, 0, 1, "km east of the grid's south-west corner", "km north of the south-west corner",
                        NULL, NULL, 0};
    if (!frame && dk_radolan_grid_origin(r->rows, r->cols, &grid.x0_km, &grid.y0_km) == DK_OK) {
        grid.xname = "x (km), DWD's RADOLAN polar stereographic grid";
        grid.yname = "y (km)";
        grid.proj = GEO_RADOLAN_PROJ;
    }
    const radar_frame *f = frame ? frame : &grid;
    const int W = (int)r->cols, H = (int)r->rows;
    const double side = 450, pw = side * W / (W > H ? W : H), ph = side * H / (W > H ? W : H);
    const double left = 80, top = 92, gap = 185, legend = 330;
    const int dbz = !strcmp(r->unit, "dBZ");
    double lo = dbz ? -10 : 0, hi = dbz ? 60 : (r->max_value > 0 ? r->max_value : 1);
    plot_cmap cm = dbz ? PLOT_CMAP_REFLECTIVITY : PLOT_CMAP_SEQUENTIAL;
    const plot_rgb nodata = {0.55, 0.55, 0.55}, below = {0.88, 0.88, 0.88};
    const double x1 = f->x0_km + W * f->pixel_km, y1 = f->y0_km + H * f->pixel_km;
    const double box[4] = {f->x0_km, x1, f->y0_km, y1};
    radar_map map;
    const int mapped = map_build(&map, f->proj, box) == 0;
    int rank[DK_KMEANS_MAX_K];
    rank_by_mean(res, rank);
    uint32_t *px = malloc((size_t)W * (size_t)H * sizeof *px);
    plot *p = px ? plot_open(path, left + 2 * pw + gap + legend, top + ph + 70, 2, err, len) : NULL;
    if (!p) {
        if (!px)
            snprintf(err, len, "out of memory for the picture");
        free(px);
        if (mapped)
            map_free(&map);
        return -1;
    }
    char title[256], sub[512], below_label[96], product[96];
    if (f->product)
        snprintf(product, sizeof product, "%s", f->product);
    else
        snprintf(product, sizeof product, "RADOLAN %s composite", r->product);
    if (res->dry[0])
        snprintf(title, sizeof title, "%s%s%s: %s, a dry scan with nothing to cluster", product,
                 r->time[0] ? ", " : "", r->time, dbz ? "reflectivity" : "values");
    else
        snprintf(title, sizeof title, "%s%s%s: %s and its %d k-means clusters", product, r->time[0] ? ", " : "",
                 r->time, dbz ? "reflectivity" : "values", res->k);
    snprintf(sub, sizeof sub, "%s; contiguity-weighted k-means, lambda %g, window %d px, texture sigma %g px, %d "
             "iterations; %.3g km pixels", source, o->lambda, o->window, o->texture_sigma,
             res->kmeans.iterations, f->pixel_km);
    plot_title(p, title, sub);

    /* reflectivity, row 0 (south) at the bottom; grey where there is no data */
    for (int row = 0; row < H; row++)
        for (int x = 0; x < W; x++) {
            size_t i = (size_t)row * r->cols + (size_t)x;
            px[(size_t)(H - 1 - row) * W + x] = r->has_data[i] ? plot_pack(plot_cmap_color(cm, (r->value[i] - lo) / (hi - lo)))
                                                               : plot_pack(nodata);
        }
    plot_panel a = {left, top, pw, ph, f->x0_km, x1, f->y0_km, y1};
    /* with a map the edges carry latitude and longitude instead of km */
    plot_panel framed = a;
    if (mapped)
        framed.right = framed.left, framed.top = framed.bottom;
    const char *xname = mapped ? NULL : f->xname, *yname = mapped ? NULL : f->yname;
    plot_raster(p, &a, px, W, H, 0);
    if (mapped)
        draw_map(p, &a, &map, f->ring_km);
    char name[64];
    snprintf(name, sizeof name, "%s (%s)", dbz ? "reflectivity" : "value", r->unit);
    plot_axes(p, &framed, name, xname, yname);
    snprintf(name, sizeof name, "%s (%s)", dbz ? "reflectivity" : r->product, r->unit);
    plot_colorbar(p, left + pw + 12, top, 16, ph * 0.75, cm, lo, hi, name);
    plot_box(p, left + pw + 12, top + ph * 0.75 + 22, 16, 12, nodata);
    plot_text(p, left + pw + 32, top + ph * 0.75 + 32, 11, -1, 0, "no data");

    /* clusters coloured by their rank in mean value; the two greys are what was not clustered */
    for (int row = 0; row < H; row++)
        for (int x = 0; x < W; x++) {
            size_t i = (size_t)row * r->cols + (size_t)x;
            int32_t l = res->labels[i];
            px[(size_t)(H - 1 - row) * W + x] = l >= 0 && l < res->k ? plot_pack(cluster_color(rank[l], res->k))
                                                : plot_pack(r->has_data[i] ? below : nodata);
        }
    plot_panel b = {left + pw + gap, top, pw, ph, f->x0_km, x1, f->y0_km, y1};
    plot_raster(p, &b, px, W, H, 1);
    free(px);
    if (mapped)
        draw_map(p, &b, &map, f->ring_km);
    framed.x = b.x;
    plot_axes(p, mapped ? &framed : &b, "k-means clusters", xname, yname);
    if (res->dry[0])
        plot_note(p, &b, res->dry);

    size_t total = 0;
    for (int c = 0; c < res->k; c++)
        total += res->sizes ? res->sizes[c] : 0;
    int rows_fit = (int)((ph - 60) / 18), listed = res->dry[0] ? 0 : res->k;
    int shown = listed < rows_fit ? listed : rows_fit - 1;
    plot_legend_item items[DK_KMEANS_MAX_K + 3];
    char labels[DK_KMEANS_MAX_K + 1][96];
    int n = 0, by_rank[DK_KMEANS_MAX_K];
    for (int c = 0; c < res->k; c++)
        by_rank[rank[c]] = c;
    for (int i = 0; i < shown; i++) { /* the strongest first */
        int c = by_rank[res->k - 1 - i];
        size_t sz = res->sizes ? res->sizes[c] : 0;
        if (sz)
            snprintf(labels[i], sizeof labels[i], "cluster %d: mean %.1f %s, %.1f %%", c, res->mean_value[c],
                     r->unit, total ? 100.0 * (double)sz / (double)total : 0.0);
        else
            snprintf(labels[i], sizeof labels[i], "cluster %d: empty", c);
        items[n++] = (plot_legend_item){labels[i], cluster_color(rank[c], res->k), PLOT_MARK_BOX};
    }
    if (shown < listed) {
        snprintf(labels[shown], sizeof labels[shown], "(%d weaker clusters not listed)", listed - shown);
        items[n++] = (plot_legend_item){labels[shown], {1, 1, 1}, PLOT_MARK_BOX};
    }
    snprintf(below_label, sizeof below_label, "below %g %s: not clustered", o->min_value, r->unit);
    items[n++] = (plot_legend_item){below_label, below, PLOT_MARK_BOX};
    items[n++] = (plot_legend_item){"no data (outside coverage, clutter)", nodata, PLOT_MARK_BOX};
    double lh = plot_legend(p, b.x + pw + 14, top, items, n);
    double ty = top + lh + 16;
    if (!res->dry[0]) {
        plot_text(p, b.x + pw + 14, ty, 11, -1, 0, "ordered and coloured by mean reflectivity;");
        plot_text(p, b.x + pw + 14, ty + 14, 11, -1, 0, "%: the share of the clustered pixels");
        ty += 28;
    }
    if (mapped) {
        plot_legend_item lines[4];
        int nl = 0;
        if (map.coast.n)
            lines[nl++] = (plot_legend_item){"coast, lake shore (GSHHG)", coast_color, PLOT_MARK_LINE};
        if (map.border.n)
            lines[nl++] = (plot_legend_item){"national border (GSHHG)", border_color, PLOT_MARK_DASHED};
        lines[nl++] = (plot_legend_item){"latitude, longitude", graticule_color, PLOT_MARK_LINE};
        if (f->ring_km > 0)
            lines[nl++] = (plot_legend_item){"range ring, radar site", ring_color, PLOT_MARK_LINE};
        plot_legend(p, b.x + pw + 14, ty + 8, lines, nl);
        map_free(&map);
    }
    return plot_close(p, err, len);
}
