/* The serial reference for kmeans: the definition in dakit/kmeans.h, written
 * for clarity. Distances and costs in float (as every backend computes them),
 * sums in double. */
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

static float feature(const dk_kmeans_setup *s, const float *x, size_t i, int f)
{
    return x[i * s->stride_point + (size_t)f * s->stride_feature];
}

static float distance2(const dk_kmeans_setup *s, const float *x, size_t i, const float *c)
{
    float dist = 0.0f;
    for (int f = 0; f < s->desc.d; f++) {
        float diff = feature(s, x, i, f) - c[f];
        dist += diff * diff;
    }
    return dist;
}

/* Labels of every point under centroids C; with prev != NULL the
 * contiguity cost with prev as the neighbours' labels. */
static void assign(const dk_kmeans_setup *s, const float *x, const uint8_t *mask, const float *C,
                   const int32_t *prev, int32_t *out)
{
    const dk_kmeans_desc *d = &s->desc;
    const float lambda = (float)d->lambda, inv_d = 1.0f / (float)d->d;
    int same[DK_KMEANS_MAX_K]; /* prev (the contiguity cost) only with k <= DK_KMEANS_MAX_K */
    const int r = d->window / 2;
    for (size_t i = 0; i < d->n; i++) {
        if (mask && !mask[i]) {
            out[i] = -1;
            continue;
        }
        int m = 0;
        if (prev) {
            memset(same, 0, sizeof(int) * (size_t)d->k);
            long row = (long)(i / d->cols), col = (long)(i % d->cols);
            for (long y = row - r; y <= row + r; y++)
                for (long xx = col - r; xx <= col + r; xx++) {
                    if (y < 0 || xx < 0 || y >= (long)d->rows || xx >= (long)d->cols ||
                        (y == row && xx == col))
                        continue;
                    int32_t l = prev[(size_t)y * d->cols + (size_t)xx];
                    if (l < 0)
                        continue;
                    m++;
                    same[l]++;
                }
        }
        int best = 0;
        float best_cost = 0.0f;
        for (int c = 0; c < d->k; c++) {
            float cost = distance2(s, x, i, C + (size_t)c * d->d);
            if (prev)
                cost = lambda * (cost * inv_d) +
                       (1.0f - lambda) * (m ? (float)(m - same[c]) / (float)m : 0.0f);
            if (c == 0 || cost < best_cost) {
                best = c;
                best_cost = cost;
            }
        }
        out[i] = best;
    }
}

DK_API dk_status dk_kmeans_reference(const dk_kmeans_desc *desc, const float *points,
                                     const uint8_t *mask, const float *init, int32_t *labels,
                                     float *centroids, dk_kmeans_result *result)
{
    return dk_kmeans_reference_weighted(desc, points, mask, NULL, init, labels, centroids, result);
}

DK_API dk_status dk_kmeans_reference_weighted(const dk_kmeans_desc *desc, const float *points, const uint8_t *mask,
                                              const float *weights, const float *init, int32_t *labels,
                                              float *centroids, dk_kmeans_result *result)
{
    dk_kmeans_setup s;
    dk_status st = dk_kmeans_setup_make(desc, &s);
    if (st != DK_OK)
        return st;
    const int seeded = s.desc.init != DK_KMEANS_INIT_GIVEN;
    if (!points || (!init && !seeded) || !labels || !centroids)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                       "kmeans reference: points, init, labels and centroids must not be NULL (init may be when "
                       "desc.init seeds)");
    size_t valid = 0;
    if ((st = dk_kmeans_check_points(desc, points, mask, &valid)) != DK_OK ||
        (weights && (st = dk_kmeans_check_weights(desc, weights, mask)) != DK_OK))
        return st;
    const dk_kmeans_desc *d = &s.desc;
    const size_t kd = (size_t)d->k * (size_t)d->d;
    float *C = malloc(kd * sizeof *C);
    double *sum = malloc(kd * sizeof *sum);
    double *count = malloc((size_t)d->k * sizeof *count); /* the sum of the weights */
    int32_t *prev = s.contiguity ? malloc(d->n * sizeof *prev) : NULL;
    if (!C || !sum || !count || (s.contiguity && !prev)) {
        free(C), free(sum), free(count), free(prev);
        return dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "kmeans reference: out of host memory");
    }
    if (seeded)
        st = dk_kmeans_seed_host(&s, points, mask, weights, C);
    else
        memcpy(C, init, kd * sizeof *C);
    if (st != DK_OK) {
        free(C), free(sum), free(count), free(prev);
        return st;
    }
    if (prev)
        assign(&s, points, mask, C, NULL, prev);

    int it = 0;
    double move = 0.0;
    while (it < d->max_iters) {
        assign(&s, points, mask, C, prev, labels);
        it++;
        memset(sum, 0, kd * sizeof *sum);
        memset(count, 0, (size_t)d->k * sizeof *count);
        for (size_t i = 0; i < d->n; i++) {
            int32_t l = labels[i];
            if (l < 0)
                continue;
            const double w = weights ? (double)weights[i] : 1.0;
            count[l] += w;
            for (int f = 0; f < d->d; f++)
                sum[(size_t)l * d->d + f] += w * (double)feature(&s, points, i, f);
        }
        move = 0.0;
        for (int c = 0; c < d->k; c++) {
            if (!count[c])
                continue;
            double m2 = 0.0;
            for (int f = 0; f < d->d; f++) {
                size_t j = (size_t)c * d->d + f;
                float next = (float)(sum[j] / count[c]);
                double diff = (double)next - (double)C[j];
                m2 += diff * diff;
                C[j] = next;
            }
            if (sqrt(m2) > move)
                move = sqrt(m2);
        }
        if (prev)
            memcpy(prev, labels, d->n * sizeof *prev);
        if (move < d->tol)
            break;
    }
    double objective = 0.0;
    for (size_t i = 0; i < d->n; i++)
        if (labels[i] >= 0)
            objective += (weights ? (double)weights[i] : 1.0) *
                         (double)distance2(&s, points, i, C + (size_t)labels[i] * d->d);
    memcpy(centroids, C, kd * sizeof *C);
    if (result) {
        memset(result, 0, sizeof *result);
        result->iterations = it;
        result->objective = objective;
        result->last_move = move;
        result->valid = valid;
    }
    free(C), free(sum), free(count), free(prev);
    return DK_OK;
}
