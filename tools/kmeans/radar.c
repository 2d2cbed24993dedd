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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/kmeans.h>

#include "cli/cli.h"
#include "cli/plot.h"

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
    dk_buffer *value, *planes, *points, *mask, *init, *labels, *centroids;
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

static dk_status too_few(radar_pipeline *p, char *err, size_t len)
{
    snprintf(err, len, "only %zu pixel(s) have data at or above %g; --k %d needs at least as many", p->stats.valid,
             p->o.min_value, p->o.k);
    return DK_ERR_INVALID_ARGUMENT;
}

/* On a device: the reflectivity goes over once, the texture planes, their
 * smoothing, the features with their standardization and the initial
 * centroids, and the clustering all stay there (dakit/kmeans.h's texture
 * functions), and the labels come back. */
dk_status radar_pipeline_run(radar_pipeline *p, const float *value, int32_t *labels, float *centroids,
                             radar_result *res, char *err, size_t len)
{
    const size_t n = p->n, F = RADAR_FEATURES, kf = (size_t)p->o.k * F;
    double t0 = cli_now(), t1;
    dk_kmeans_result kr;
    dk_status st;
    if (p->ctx) {
        if ((st = dk_buffer_write(p->value, value, n * sizeof(float))) != DK_OK ||
            (st = dk_kmeans_texture_planes(p->kmeans, p->value, p->planes)) != DK_OK ||
            (st = dk_gauss_execute(p->gauss, p->planes, p->planes)) != DK_OK) {
            snprintf(err, len, "texture features: %s", dk_last_error(p->ctx));
            return st;
        }
        st = dk_kmeans_texture_features(p->kmeans, p->value, p->planes, p->o.min_value, p->points, p->mask,
                                        p->init, &p->stats);
        if (st != DK_OK && p->stats.valid < (size_t)p->o.k)
            return too_few(p, err, len);
        if (st != DK_OK) {
            snprintf(err, len, "texture features: %s", dk_last_error(p->ctx));
            return st;
        }
        t1 = cli_now();
        if ((st = dk_kmeans_execute(p->kmeans, p->points, p->mask, p->init, p->labels, p->centroids, &kr)) !=
                DK_OK ||
            (st = dk_buffer_read(p->labels, labels, n * sizeof(int32_t))) != DK_OK ||
            (st = dk_buffer_read(p->centroids, centroids, kf * sizeof(float))) != DK_OK) {
            snprintf(err, len, "clustering: %s", dk_last_error(p->ctx));
            return st;
        }
    } else {
        if ((st = dk_kmeans_texture_planes_reference(&p->kd, value, p->h_planes)) != DK_OK ||
            (st = dk_gauss_reference(&p->gd, p->h_planes, p->h_planes)) != DK_OK) {
            snprintf(err, len, "texture features: %s", dk_last_error(NULL));
            return st;
        }
        st = dk_kmeans_texture_features_reference(&p->kd, value, p->h_planes, p->o.min_value, p->h_feat, p->h_mask,
                                                  p->h_init, &p->stats);
        if (st != DK_OK && p->stats.valid < (size_t)p->o.k)
            return too_few(p, err, len);
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
    if (!res->sizes || !res->mean_value || !res->mean_local || !res->mean_std || !feat) {
        if (feat != p->h_feat)
            free(feat);
        snprintf(err, len, "out of memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
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

int radar_picture(const dk_radolan *r, const radar_result *res, const radar_options *o, const radar_frame *frame,
                  const char *source, const char *path, char *err, size_t len)
{
    static const radar_frame radolan_grid = {0, 0, 1, "km east of the grid's south-west corner",
                                             "km north of the south-west corner", NULL};
    const radar_frame *f = frame ? frame : &radolan_grid;
    const int W = (int)r->cols, H = (int)r->rows;
    const double side = 450, pw = side * W / (W > H ? W : H), ph = side * H / (W > H ? W : H);
    const double left = 80, top = 92, gap = 185, legend = 330;
    const int dbz = !strcmp(r->unit, "dBZ");
    double lo = dbz ? -10 : 0, hi = dbz ? 60 : (r->max_value > 0 ? r->max_value : 1);
    plot_cmap cm = dbz ? PLOT_CMAP_REFLECTIVITY : PLOT_CMAP_SEQUENTIAL;
    const plot_rgb nodata = {0.55, 0.55, 0.55}, below = {0.88, 0.88, 0.88};
    uint32_t *px = malloc((size_t)W * (size_t)H * sizeof *px);
    plot *p = px ? plot_open(path, left + 2 * pw + gap + legend, top + ph + 70, 2, err, len) : NULL;
    if (!p) {
        if (!px)
            snprintf(err, len, "out of memory for the picture");
        free(px);
        return -1;
    }
    char title[256], sub[512], below_label[96], product[96];
    if (f->product)
        snprintf(product, sizeof product, "%s", f->product);
    else
        snprintf(product, sizeof product, "RADOLAN %s composite", r->product);
    snprintf(title, sizeof title, "%s%s%s: %s and its %d k-means clusters", product, r->time[0] ? ", " : "",
             r->time, dbz ? "reflectivity" : "values", res->k);
    snprintf(sub, sizeof sub, "%s; contiguity-weighted k-means, lambda %g, window %d px, texture sigma %g px, %d "
             "iterations; north up, %.3g km pixels", source, o->lambda, o->window, o->texture_sigma,
             res->kmeans.iterations, f->pixel_km);
    plot_title(p, title, sub);

    /* reflectivity, row 0 (south) at the bottom; grey where there is no data */
    for (int row = 0; row < H; row++)
        for (int x = 0; x < W; x++) {
            size_t i = (size_t)row * r->cols + (size_t)x;
            px[(size_t)(H - 1 - row) * W + x] = r->has_data[i] ? plot_pack(plot_cmap_color(cm, (r->value[i] - lo) / (hi - lo)))
                                                               : plot_pack(nodata);
        }
    const char *xname = f->xname, *yname = f->yname;
    const double x1 = f->x0_km + W * f->pixel_km, y1 = f->y0_km + H * f->pixel_km;
    plot_panel a = {left, top, pw, ph, f->x0_km, x1, f->y0_km, y1};
    plot_raster(p, &a, px, W, H, 0);
    char name[64];
    snprintf(name, sizeof name, "%s (%s)", dbz ? "reflectivity" : "value", r->unit);
    plot_axes(p, &a, name, xname, yname);
    snprintf(name, sizeof name, "%s (%s)", dbz ? "reflectivity" : r->product, r->unit);
    plot_colorbar(p, left + pw + 12, top, 16, ph * 0.75, cm, lo, hi, name);
    plot_box(p, left + pw + 12, top + ph * 0.75 + 22, 16, 12, nodata);
    plot_text(p, left + pw + 32, top + ph * 0.75 + 32, 11, -1, 0, "no data");

    /* clusters, in a qualitative palette; the two greys are what was not clustered */
    for (int row = 0; row < H; row++)
        for (int x = 0; x < W; x++) {
            size_t i = (size_t)row * r->cols + (size_t)x;
            int32_t l = res->labels[i];
            px[(size_t)(H - 1 - row) * W + x] = l >= 0 ? plot_pack(plot_category_color(l))
                                                : plot_pack(r->has_data[i] ? below : nodata);
        }
    plot_panel b = {left + pw + gap, top, pw, ph, f->x0_km, x1, f->y0_km, y1};
    plot_raster(p, &b, px, W, H, 1);
    free(px);
    plot_axes(p, &b, "k-means clusters", xname, yname);

    size_t total = 0;
    for (int c = 0; c < res->k; c++)
        total += res->sizes ? res->sizes[c] : 0;
    int rows_fit = (int)((ph - 60) / 18), shown = res->k < rows_fit ? res->k : rows_fit - 1;
    plot_legend_item items[DK_KMEANS_MAX_K + 3];
    char labels[DK_KMEANS_MAX_K + 1][96];
    int n = 0;
    for (int c = 0; c < shown; c++) {
        size_t sz = res->sizes ? res->sizes[c] : 0;
        snprintf(labels[c], sizeof labels[c], "cluster %d: mean %.1f %s, %.1f %%", c,
                 sz ? res->mean_value[c] : 0.0, r->unit, total ? 100.0 * (double)sz / (double)total : 0.0);
        items[n++] = (plot_legend_item){labels[c], plot_category_color(c), PLOT_MARK_BOX};
    }
    if (shown < res->k) {
        snprintf(labels[shown], sizeof labels[shown], "(%d more clusters not listed)", res->k - shown);
        items[n++] = (plot_legend_item){labels[shown], {1, 1, 1}, PLOT_MARK_BOX};
    }
    snprintf(below_label, sizeof below_label, "below %g %s: not clustered", o->min_value, r->unit);
    items[n++] = (plot_legend_item){below_label, below, PLOT_MARK_BOX};
    items[n++] = (plot_legend_item){"no data (outside coverage, clutter)", nodata, PLOT_MARK_BOX};
    double lh = plot_legend(p, b.x + pw + 14, top, items, n);
    plot_text(p, b.x + pw + 14, top + lh + 16, 11, -1, 0, "mean: the cluster's mean reflectivity;");
    plot_text(p, b.x + pw + 14, top + lh + 30, 11, -1, 0, "%: its share of the clustered pixels");
    return plot_close(p, err, len);
}
