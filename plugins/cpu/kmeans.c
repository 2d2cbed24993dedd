/* kmeans on the cpu backend: the definition of dakit/kmeans.h with OpenMP.
 * Each thread assigns a static slice of the points and sums them into its own
 * double partial sums (the CPU form of per-block partial sums: no shared
 * counter is written by two threads); the partials are then reduced by
 * cluster in parallel. Labels update synchronously (previous labels in their
 * own buffer), so the result does not depend on the thread count beyond the
 * order of the double sums. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <dakit/kmeans.h>
#include <dakit/plugin.h>

typedef struct kmeans_plan {
    dk_kmeans_setup s;
    int threads;
    double *partial;  /* threads * k * (d + 1): sums, then the count */
    int32_t *prev;    /* contiguity: the previous labels */
    float *C;         /* k * d current centroids */
} kmeans_plan;

static double now(void)
{
#ifdef _OPENMP
    return omp_get_wtime();
#else
    return 0.0;
#endif
}

static void plan_destroy(void *handle)
{
    kmeans_plan *p = handle;
    if (!p)
        return;
    free(p->partial);
    free(p->prev);
    free(p->C);
    free(p);
}

static dk_status plan_create(void *device, const dk_kmeans_setup *setup, void **out, dk_msg *msg)
{
    (void)device;
    kmeans_plan *p = calloc(1, sizeof *p);
    if (!p) {
        dk_msg_set(msg, "cpu kmeans: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    p->s = *setup;
#ifdef _OPENMP
    p->threads = omp_get_max_threads();
#else
    p->threads = 1;
#endif
    const dk_kmeans_desc *d = &setup->desc;
    p->partial = malloc((size_t)p->threads * d->k * (d->d + 1) * sizeof *p->partial);
    p->C = malloc((size_t)d->k * d->d * sizeof *p->C);
    if (setup->contiguity)
        p->prev = malloc(d->n * sizeof *p->prev);
    if (!p->partial || !p->C || (setup->contiguity && !p->prev)) {
        plan_destroy(p);
        dk_msg_set(msg, "cpu kmeans: out of host memory for a plan of %zu points", d->n);
        return DK_ERR_OUT_OF_MEMORY;
    }
    *out = p;
    return DK_OK;
}

/* Label of point i: the least cost, ties to the lowest index. */
static inline int best_label(const kmeans_plan *p, const float *X, const int32_t *prev, size_t i,
                             const float *C)
{
    const dk_kmeans_desc *d = &p->s.desc;
    float x[DK_KMEANS_MAX_D];
    for (int f = 0; f < d->d; f++)
        x[f] = X[i * p->s.stride_point + (size_t)f * p->s.stride_feature];
    int same[DK_KMEANS_MAX_K];
    int m = 0;
    if (prev) {
        memset(same, 0, sizeof(int) * (size_t)d->k);
        const long r = d->window / 2, row = (long)(i / d->cols), col = (long)(i % d->cols);
        for (long y = row - r; y <= row + r; y++) {
            if (y < 0 || y >= (long)d->rows)
                continue;
            for (long c = col - r; c <= col + r; c++) {
                if (c < 0 || c >= (long)d->cols || (y == row && c == col))
                    continue;
                int32_t l = prev[(size_t)y * d->cols + (size_t)c];
                if (l >= 0) {
                    m++;
                    same[l]++;
                }
            }
        }
    }
    const float lambda = (float)d->lambda, inv_d = 1.0f / (float)d->d;
    int best = 0;
    float best_cost = 0.0f;
    for (int c = 0; c < d->k; c++) {
        const float *cc = C + (size_t)c * d->d;
        float dist = 0.0f;
        for (int f = 0; f < d->d; f++) {
            float diff = x[f] - cc[f];
            dist += diff * diff;
        }
        float cost = dist;
        if (prev)
            cost = lambda * (dist * inv_d) + (1.0f - lambda) * (m ? (float)(m - same[c]) / (float)m : 0.0f);
        if (c == 0 || cost < best_cost) {
            best = c;
            best_cost = cost;
        }
    }
    return best;
}

static dk_status execute(void *handle, const void *points, const void *mask_, const void *init,
                         void *labels_, void *centroids, dk_kmeans_result *res, dk_msg *msg)
{
    (void)msg;
    kmeans_plan *p = handle;
    const dk_kmeans_desc *d = &p->s.desc;
    const float *X = points;
    const uint8_t *mask = mask_;
    int32_t *labels = labels_;
    const int k = d->k, dd = d->d, stride = dd + 1, T = p->threads;
    const size_t n = d->n, kd = (size_t)k * dd;
    float *C = p->C;
    memcpy(C, init, kd * sizeof *C);
    int32_t *prev = p->prev;
    if (prev) {
#pragma omp parallel for schedule(static) num_threads(T)
        for (size_t i = 0; i < n; i++)
            prev[i] = mask && !mask[i] ? -1 : best_label(p, X, NULL, i, C);
    }
    double assign_s = 0, update_s = 0, move = 0;
    int it = 0;
    while (it < d->max_iters) {
        double t0 = now();
#pragma omp parallel num_threads(T)
        {
#ifdef _OPENMP
            int t = omp_get_thread_num();
#else
            int t = 0;
#endif
            double *part = p->partial + (size_t)t * k * stride;
            memset(part, 0, (size_t)k * stride * sizeof *part);
#pragma omp for schedule(static)
            for (size_t i = 0; i < n; i++) {
                if (mask && !mask[i]) {
                    labels[i] = -1;
                    continue;
                }
                int l = best_label(p, X, prev, i, C);
                labels[i] = l;
                double *row = part + (size_t)l * stride;
                for (int f = 0; f < dd; f++)
                    row[f] += X[i * p->s.stride_point + (size_t)f * p->s.stride_feature];
                row[dd] += 1.0;
            }
        }
        double t1 = now();
        it++;
        move = 0;
        for (int c = 0; c < k; c++) {
            double count = 0;
            for (int t = 0; t < T; t++)
                count += p->partial[((size_t)t * k + c) * stride + dd];
            if (count == 0)
                continue;
            double m2 = 0;
            for (int f = 0; f < dd; f++) {
                double sum = 0;
                for (int t = 0; t < T; t++)
                    sum += p->partial[((size_t)t * k + c) * stride + f];
                float next = (float)(sum / count);
                double diff = (double)next - (double)C[(size_t)c * dd + f];
                m2 += diff * diff;
                C[(size_t)c * dd + f] = next;
            }
            if (sqrt(m2) > move)
                move = sqrt(m2);
        }
        if (prev)
            memcpy(prev, labels, n * sizeof *prev);
        double t2 = now();
        assign_s += t1 - t0;
        update_s += t2 - t1;
        if (move < d->tol)
            break;
    }
    double objective = 0;
    size_t valid = 0;
#pragma omp parallel for schedule(static) num_threads(T) reduction(+ : objective, valid)
    for (size_t i = 0; i < n; i++) {
        int32_t l = labels[i];
        if (l < 0)
            continue;
        valid++;
        float dist = 0.0f;
        for (int f = 0; f < dd; f++) {
            float diff = X[i * p->s.stride_point + (size_t)f * p->s.stride_feature] - C[(size_t)l * dd + f];
            dist += diff * diff;
        }
        objective += dist;
    }
    memcpy(centroids, C, kd * sizeof *C);
    res->iterations = it;
    res->objective = objective;
    res->last_move = move;
    res->valid = valid;
    res->assign_seconds = assign_s;
    res->update_seconds = update_s;
    return DK_OK;
}

const dk_kmeans_ops dk_cpu_kmeans_ops = {
    .plan_create = plan_create,
    .execute = execute,
    .plan_destroy = plan_destroy,
};
