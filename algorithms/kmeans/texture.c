/* kmeans texture features of an image (dakit/kmeans.h): the serial
 * references, and dispatch to the plugin's device code or, where a plugin
 * has none, to the references on the host. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kmeans_internal.h"

/* Each float operation of a distance or cost rounds on its own, as the
 * definition writes it: no contraction of a multiply and an add into an FMA
 * (GCC's gnu11 default contracts wherever the target has FMA, e.g. aarch64
 * or -march=native; clang's within an expression). The backends' labels
 * equal the reference's because they round the same way. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define TD DK_KMEANS_TEXTURE_D

static dk_status check_desc(const dk_kmeans_desc *desc, const char *who)
{
    dk_kmeans_setup s;
    dk_status st = dk_kmeans_setup_make(desc, &s);
    if (st != DK_OK)
        return st;
    if (desc->layout != DK_KMEANS_FEATURE_MAJOR || desc->d != TD || !desc->rows)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                       "%s: the texture features need a feature-major plan with d = %d over a grid "
                       "(this one: layout %d, d %d, rows %zu)",
                       who, TD, (int)desc->layout, desc->d, desc->rows);
    return DK_OK;
}

DK_API dk_status dk_kmeans_texture_planes_reference(const dk_kmeans_desc *desc, const float *value,
                                                    float *planes)
{
    dk_status st = check_desc(desc, "dk_kmeans_texture_planes_reference");
    if (st != DK_OK)
        return st;
    if (!value || !planes)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                       "dk_kmeans_texture_planes_reference: value and planes must not be NULL");
    const size_t n = desc->n;
    for (size_t i = 0; i < n; i++) {
        int has = isfinite(value[i]);
        float z = has ? value[i] : 0.0f;
        planes[i] = z;
        planes[n + i] = z * z;
        planes[2 * n + i] = (float)has;
    }
    return DK_OK;
}

DK_API dk_status dk_kmeans_texture_features_reference(const dk_kmeans_desc *desc, const float *value,
                                                      const float *smoothed, double min_value, float *points,
                                                      uint8_t *mask, float *init,
                                                      dk_kmeans_texture_stats *stats)
{
    dk_status st = check_desc(desc, "dk_kmeans_texture_features_reference");
    if (st != DK_OK)
        return st;
    if (!value || !smoothed || !points || !mask || !init)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                       "dk_kmeans_texture_features_reference: no buffer may be NULL");
    if (isnan(min_value))
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "kmeans texture: min_value is NaN");
    const size_t n = desc->n;
    const float *a = smoothed, *b = a + n, *w = b + n;
    double sum[TD] = {0}, sq[TD] = {0};
    size_t valid = 0;
    for (size_t i = 0; i < n; i++) {
        int has = isfinite(value[i]);
        float z = has ? value[i] : 0.0f;
        float mean = w[i] > 1e-6f ? a[i] / w[i] : z;
        float var = w[i] > 1e-6f ? b[i] / w[i] - mean * mean : 0.0f;
        float f[TD] = {z, mean, var > 0 ? sqrtf(var) : 0.0f};
        mask[i] = has && z >= min_value;
        for (int j = 0; j < TD; j++) {
            points[(size_t)j * n + i] = f[j];
            if (mask[i]) {
                sum[j] += f[j];
                sq[j] += (double)f[j] * f[j];
            }
        }
        valid += mask[i];
    }
    dk_kmeans_texture_stats local;
    local.valid = valid;
    for (int j = 0; j < TD; j++) {
        local.mean[j] = valid ? sum[j] / (double)valid : 0.0;
        double var = valid ? sq[j] / (double)valid - local.mean[j] * local.mean[j] : 0.0;
        local.sd[j] = var > 1e-12 ? sqrt(var) : 1.0;
    }
    if (stats)
        *stats = local;
    if (valid < (size_t)desc->k)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "kmeans texture: k = %d is larger than the %zu unmasked pixels",
                       desc->k, valid);
    for (int j = 0; j < TD; j++)
        for (size_t i = 0; i < n; i++) {
            float *p = &points[(size_t)j * n + i];
            *p = mask[i] ? (float)((*p - local.mean[j]) / local.sd[j]) : 0.0f;
        }
    return dk_kmeans_initial_centroids(desc, points, mask, 0, init);
}

static dk_status check_buffer(dk_plan *plan, const dk_buffer *b, size_t bytes, const char *who, const char *what)
{
    if (!b)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s: the %s buffer must not be NULL", who, what);
    if (b->ctx != plan->ctx)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s: the %s buffer belongs to another context", who,
                       what);
    if (b->bytes < bytes)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s: the %s buffer holds %zu bytes; it needs %zu", who,
                       what, b->bytes, bytes);
    return DK_OK;
}

static dk_status check_plan(dk_plan *plan, const char *who)
{
    if (!plan)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "%s: plan must not be NULL", who);
    if (plan->algo != DK_ALGO_KMEANS)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s: the plan is a %s plan", who,
                       dk_algo_name(plan->algo));
    const dk_kmeans_setup *s = plan->state;
    if (check_desc(&s->desc, who) != DK_OK)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s", dk_last_error(NULL));
    return DK_OK;
}

/* Reads the named buffers to host memory, or writes them back. */
static dk_status host_copy(dk_plan *plan, int write, dk_buffer *const *bufs, void *const *host,
                           const size_t *bytes, int count)
{
    for (int j = 0; j < count; j++) {
        dk_status st = write ? dk_buffer_write(bufs[j], host[j], bytes[j]) : dk_buffer_read(bufs[j], host[j], bytes[j]);
        if (st != DK_OK)
            return st;
    }
    (void)plan;
    return DK_OK;
}

DK_API dk_status dk_kmeans_texture_planes(dk_plan *plan, const dk_buffer *value, dk_buffer *planes)
{
    const char *who = "dk_kmeans_texture_planes";
    dk_status st = check_plan(plan, who);
    if (st != DK_OK)
        return st;
    const dk_kmeans_setup *s = plan->state;
    const size_t n = s->desc.n;
    if ((st = check_buffer(plan, value, n * sizeof(float), who, "value")) != DK_OK ||
        (st = check_buffer(plan, planes, TD * n * sizeof(float), who, "planes")) != DK_OK)
        return st;
    const dk_kmeans_ops *ops = plan->ctx->backend->plugin->kmeans;
    if (ops->texture_planes) {
        dk_msg msg = {{0}};
        dk_device_enter(plan->ctx);
        st = ops->texture_planes(plan->impl, value->handle, planes->handle, &msg);
        dk_device_leave(plan->ctx);
        return st == DK_OK ? DK_OK : dk_fail_msg(plan->ctx, st, &msg, "kmeans texture planes");
    }
    float *hv = malloc(n * sizeof *hv), *hp = malloc(TD * n * sizeof *hp);
    if (!hv || !hp) {
        free(hv), free(hp);
        return dk_fail(plan->ctx, DK_ERR_OUT_OF_MEMORY, "%s: out of host memory", who);
    }
    if ((st = dk_buffer_read(value, hv, n * sizeof *hv)) == DK_OK) {
        if (dk_kmeans_texture_planes_reference(&s->desc, hv, hp) != DK_OK)
            st = dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s", dk_last_error(NULL));
        else
            st = dk_buffer_write(planes, hp, TD * n * sizeof *hp);
    }
    free(hv), free(hp);
    return st;
}

DK_API dk_status dk_kmeans_texture_features(dk_plan *plan, const dk_buffer *value, const dk_buffer *smoothed,
                                            double min_value, dk_buffer *points, dk_buffer *mask, dk_buffer *init,
                                            dk_kmeans_texture_stats *stats)
{
    const char *who = "dk_kmeans_texture_features";
    dk_status st = check_plan(plan, who);
    if (st != DK_OK)
        return st;
    const dk_kmeans_setup *s = plan->state;
    const size_t n = s->desc.n, kd = (size_t)s->desc.k * TD;
    if ((st = check_buffer(plan, value, n * sizeof(float), who, "value")) != DK_OK ||
        (st = check_buffer(plan, smoothed, TD * n * sizeof(float), who, "smoothed planes")) != DK_OK ||
        (st = check_buffer(plan, points, TD * n * sizeof(float), who, "points")) != DK_OK ||
        (st = check_buffer(plan, mask, n, who, "mask")) != DK_OK ||
        (st = check_buffer(plan, init, kd * sizeof(float), who, "initial centroids")) != DK_OK)
        return st;
    if (isnan(min_value))
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s: min_value is NaN", who);
    dk_kmeans_texture_stats local;
    memset(&local, 0, sizeof local);
    const dk_kmeans_ops *ops = plan->ctx->backend->plugin->kmeans;
    if (ops->texture_features) {
        dk_msg msg = {{0}};
        dk_device_enter(plan->ctx);
        st = ops->texture_features(plan->impl, value->handle, smoothed->handle, min_value, points->handle,
                                   mask->handle, init->handle, &local, &msg);
        dk_device_leave(plan->ctx);
        if (stats)
            *stats = local;
        if (st != DK_OK)
            return dk_fail_msg(plan->ctx, st, &msg, "kmeans texture features");
        if (local.valid < (size_t)s->desc.k)
            return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT,
                           "kmeans texture: k = %d is larger than the %zu unmasked pixels", s->desc.k, local.valid);
        return DK_OK;
    }
    float *hv = malloc(n * sizeof(float)), *hs = malloc(TD * n * sizeof(float)), *hp = malloc(TD * n * sizeof(float));
    uint8_t *hm = malloc(n);
    float *hi = malloc(kd * sizeof(float));
    if (!hv || !hs || !hp || !hm || !hi) {
        st = dk_fail(plan->ctx, DK_ERR_OUT_OF_MEMORY, "%s: out of host memory", who);
    } else {
        dk_buffer *in[] = {(dk_buffer *)value, (dk_buffer *)smoothed};
        void *hin[] = {hv, hs};
        size_t bin[] = {n * sizeof(float), TD * n * sizeof(float)};
        dk_buffer *out[] = {points, mask, init};
        void *hout[] = {hp, hm, hi};
        size_t bout[] = {TD * n * sizeof(float), n, kd * sizeof(float)};
        if ((st = host_copy(plan, 0, in, hin, bin, 2)) == DK_OK) {
            if (dk_kmeans_texture_features_reference(&s->desc, hv, hs, min_value, hp, hm, hi, &local) != DK_OK)
                st = dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s", dk_last_error(NULL));
            else
                st = host_copy(plan, 1, out, hout, bout, 3);
            if (stats)
                *stats = local;
        }
    }
    free(hv), free(hs), free(hp), free(hm), free(hi);
    return st;
}
