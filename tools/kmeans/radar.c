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
#include "cli/image.h"

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

dk_status radar_cluster(dk_context *ctx, const radolan *r, const radar_options *o, radar_result *out,
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

/* 3 x 5 glyphs, rows top to bottom, 3 bits each (4 = left column). */
static const struct {
    char c;
    unsigned char rows[5];
} glyphs[] = {
    {'0', {7, 5, 5, 5, 7}}, {'1', {2, 6, 2, 2, 7}}, {'2', {7, 1, 7, 4, 7}}, {'3', {7, 1, 3, 1, 7}},
    {'4', {5, 5, 7, 1, 1}}, {'5', {7, 4, 7, 1, 7}}, {'6', {7, 4, 7, 5, 7}}, {'7', {7, 1, 1, 2, 2}},
    {'8', {7, 5, 7, 5, 7}}, {'9', {7, 5, 7, 1, 7}}, {'.', {0, 0, 0, 0, 2}}, {'-', {0, 0, 7, 0, 0}},
    {'N', {5, 7, 7, 7, 5}}, {'d', {1, 1, 7, 5, 7}}, {'B', {6, 5, 6, 5, 6}}, {'Z', {7, 1, 2, 4, 7}},
    {'k', {4, 5, 6, 5, 5}}, {'m', {0, 7, 7, 5, 5}}, {':', {0, 2, 0, 2, 0}}, {'%', {5, 1, 2, 4, 5}},
};

static void draw_text(image *img, int x, int y, int scale, const char *s, const unsigned char rgb[3])
{
    for (; *s; s++, x += 4 * scale) {
        for (size_t g = 0; g < sizeof glyphs / sizeof glyphs[0]; g++) {
            if (glyphs[g].c != *s)
                continue;
            for (int r = 0; r < 5; r++)
                for (int c = 0; c < 3; c++)
                    if (glyphs[g].rows[r] & (4 >> c))
                        for (int dy = 0; dy < scale; dy++)
                            for (int dx = 0; dx < scale; dx++)
                                image_set(img, x + c * scale + dx, y + r * scale + dy, rgb);
        }
    }
}

static void fill(image *img, int x0, int y0, int w, int h, const unsigned char rgb[3])
{
    for (int y = y0; y < y0 + h; y++)
        for (int x = x0; x < x0 + w; x++)
            image_set(img, x, y, rgb);
}

/* Reflectivity colours: dark blue at 5 dBZ through green and yellow to red and
 * magenta at 60. */
static void reflectivity_color(double v, unsigned char rgb[3])
{
    static const double stops[][4] = {{-10, 220, 230, 240}, {5, 40, 70, 200},  {20, 40, 180, 80},
                                      {35, 250, 220, 30},   {45, 240, 60, 30}, {60, 200, 30, 200}};
    int ns = (int)(sizeof stops / sizeof stops[0]);
    if (v <= stops[0][0]) {
        for (int c = 0; c < 3; c++)
            rgb[c] = (unsigned char)stops[0][c + 1];
        return;
    }
    for (int s = 1; s < ns; s++)
        if (v <= stops[s][0] || s == ns - 1) {
            double t = (v - stops[s - 1][0]) / (stops[s][0] - stops[s - 1][0]);
            t = t < 0 ? 0 : t > 1 ? 1 : t;
            for (int c = 0; c < 3; c++)
                rgb[c] = (unsigned char)(stops[s - 1][c + 1] + t * (stops[s][c + 1] - stops[s - 1][c + 1]));
            return;
        }
}

int radar_png(const radolan *r, const radar_result *res, const char *path, char *err, size_t len)
{
    const int W = (int)r->cols, H = (int)r->rows, margin = 20, legend = 230;
    image img;
    if (image_create(&img, 2 * W + 3 * margin + legend, H + 2 * margin, 255)) {
        snprintf(err, len, "out of memory for the picture");
        return -1;
    }
    /* cluster colours by rank of mean reflectivity, on the same scale */
    unsigned char ccol[DK_KMEANS_MAX_K][3];
    for (int c = 0; c < res->k; c++)
        reflectivity_color(res->sizes && res->sizes[c] ? res->mean_value[c] : -20, ccol[c]);
    const unsigned char nodata[3] = {150, 150, 150}, below[3] = {235, 235, 235}, black[3] = {0, 0, 0};
    for (int row = 0; row < H; row++) {
        int y = margin + (H - 1 - row); /* row 0 is the south edge: north up */
        for (int x = 0; x < W; x++) {
            size_t i = (size_t)row * r->cols + (size_t)x;
            unsigned char c[3];
            if (!r->has_data[i])
                memcpy(c, nodata, 3);
            else
                reflectivity_color(r->value[i], c);
            image_set(&img, margin + x, y, c);
            int32_t l = res->labels[i];
            image_set(&img, 2 * margin + W + x, y, l >= 0 ? ccol[l] : r->has_data[i] ? below : nodata);
        }
    }
    /* frames and north arrows */
    for (int p = 0; p < 2; p++) {
        int x0 = margin + p * (W + margin);
        image_line(&img, x0 - 1, margin - 1, x0 + W, margin - 1, black);
        image_line(&img, x0 - 1, margin + H, x0 + W, margin + H, black);
        image_line(&img, x0 - 1, margin - 1, x0 - 1, margin + H, black);
        image_line(&img, x0 + W, margin - 1, x0 + W, margin + H, black);
        image_line(&img, x0 + 20, margin + 50, x0 + 20, margin + 15, black);
        image_line(&img, x0 + 20, margin + 15, x0 + 14, margin + 25, black);
        image_line(&img, x0 + 20, margin + 15, x0 + 26, margin + 25, black);
        draw_text(&img, x0 + 15, margin + 55, 3, "N", black);
    }
    /* legend: the dBZ scale, then each cluster's colour, mean dBZ and share */
    int lx = 3 * margin + 2 * W, ly = margin;
    draw_text(&img, lx, ly, 3, "dBZ", black);
    for (int v = 60, j = 0; v >= 0; v -= 10, j++) {
        unsigned char c[3];
        reflectivity_color(v, c);
        fill(&img, lx, ly + 25 + j * 28, 30, 24, c);
        char t[16];
        snprintf(t, sizeof t, "%d", v);
        draw_text(&img, lx + 40, ly + 30 + j * 28, 3, t, black);
    }
    ly += 25 + 7 * 28 + 30;
    draw_text(&img, lx, ly, 3, "k dBZ %", black);
    size_t total = 0;
    for (int c = 0; c < res->k; c++)
        total += res->sizes ? res->sizes[c] : 0;
    for (int c = 0; c < res->k && ly + 30 + c * 28 < H; c++) {
        fill(&img, lx, ly + 25 + c * 28, 30, 24, ccol[c]);
        char t[48];
        snprintf(t, sizeof t, "%d %.1f %.0f", c, res->sizes && res->sizes[c] ? res->mean_value[c] : 0.0,
                 total ? 100.0 * (double)(res->sizes ? res->sizes[c] : 0) / (double)total : 0.0);
        draw_text(&img, lx + 40, ly + 30 + c * 28, 3, t, black);
    }
    int rc = image_write_png(&img, path, err, len);
    image_free(&img);
    return rc;
}
