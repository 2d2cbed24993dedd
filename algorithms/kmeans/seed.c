/* kmeans seeding (dk_kmeans_seed in dakit/kmeans.h): greedy k-means++ and
 * random points, written once over a distance pass that runs on the host
 * (the reference) or in the plugin (seed_distance, seed_read). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kmeans_internal.h"

/* The distances round as the reference's (see reference.c). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *state) { return (double)(splitmix64(state) >> 11) * 0x1.0p-53; }

static double block_total(const double *blocks, size_t nb)
{
    double t = 0.0;
    for (size_t b = 0; b < nb; b++)
        t += blocks[b];
    return t;
}

/* The first point whose running sum of the slot's weights exceeds target
 * (the last point of positive weight when rounding leaves none); the sum
 * must be positive. */
static dk_status draw(const dk_kmeans_seed_io *io, int slot, const double *blocks, size_t nb, double target,
                      size_t *index)
{
    const size_t B = DK_KMEANS_SEED_BLOCK, n = io->n;
    double run = 0.0, before_last = 0.0;
    size_t b = 0, last = nb;
    for (; b < nb; b++) {
        if (blocks[b] > 0) {
            last = b;
            before_last = run;
            if (run + blocks[b] > target)
                break;
        }
        run += blocks[b];
    }
    if (b == nb) {
        b = last;
        run = before_last;
    }
    float values[DK_KMEANS_SEED_BLOCK];
    const size_t first = b * B, count = n - first < B ? n - first : B;
    dk_status st = io->values(io->ctx, slot, first, count, values);
    if (st != DK_OK)
        return st;
    size_t pick = count;
    for (size_t j = 0; j < count; j++) {
        if (!(values[j] > 0))
            continue;
        pick = j;
        run += values[j];
        if (run > target)
            break;
    }
    if (pick == count)
        return dk_fail(NULL, DK_ERR_BACKEND, "kmeans seeding: block %zu has a positive sum but no positive weight",
                       b);
    *index = first + pick;
    return DK_OK;
}

/* A set of ranks for Floyd's sampling: open addressing, size a power of two. */
typedef struct rank_set {
    size_t *slot, mask;
} rank_set;

static int rank_set_add(rank_set *s, size_t r) /* 0 when it was there */
{
    size_t h = (size_t)(((uint64_t)r * 0x9E3779B97F4A7C15ull) >> 17) & s->mask;
    while (s->slot[h] != (size_t)-1) {
        if (s->slot[h] == r)
            return 0;
        h = (h + 1) & s->mask;
    }
    s->slot[h] = r;
    return 1;
}

static dk_status seed_random(const dk_kmeans_setup *s, const dk_kmeans_seed_io *io, uint64_t *rng,
                             double *blocks, size_t nb, float *C)
{
    const int k = s->desc.k, d = s->desc.d;
    dk_status st = io->distance(io->ctx, NULL, -1, 0, blocks);
    if (st != DK_OK)
        return st;
    const size_t m = (size_t)block_total(blocks, nb);
    if (m < (size_t)k)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "kmeans: k = %d is larger than the %zu unmasked points", k, m);
    size_t cap = 16;
    while (cap < 2 * (size_t)k)
        cap *= 2;
    rank_set set = {malloc(cap * sizeof(size_t)), cap - 1};
    if (!set.slot)
        return dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "kmeans seeding: out of host memory");
    memset(set.slot, 0xff, cap * sizeof(size_t));
    int c = 0;
    for (size_t j = m - (size_t)k; j < m && st == DK_OK; j++, c++) {
        size_t t = (size_t)(uniform01(rng) * (double)(j + 1));
        if (t > j)
            t = j;
        if (!rank_set_add(&set, t)) {
            t = j;
            rank_set_add(&set, t);
        }
        size_t i = 0;
        /* the point of rank t: its running count t + 1 is the first above t + 0.5 */
        if ((st = draw(io, 0, blocks, nb, (double)t + 0.5, &i)) == DK_OK)
            st = io->point(io->ctx, i, C + (size_t)c * d);
    }
    free(set.slot);
    return st;
}

/* Weighted random: draws without replacement over a binary indexed tree of
 * the remaining weights (slot 0 of a distance pass without centre: w_i,
 * 0 where masked), read to the host once. */
static dk_status seed_random_weighted(const dk_kmeans_setup *s, const dk_kmeans_seed_io *io, uint64_t *rng,
                                      double *blocks, float *C)
{
    const int k = s->desc.k, d = s->desc.d;
    const size_t n = io->n, B = DK_KMEANS_SEED_BLOCK;
    dk_status st = io->distance(io->ctx, NULL, -1, 0, blocks);
    if (st != DK_OK)
        return st;
    float *w = malloc(n * sizeof *w);
    double *tree = calloc(n + 1, sizeof *tree); /* tree[j]: the weights of (j - (j & -j), j] */
    if (!w || !tree) {
        free(w), free(tree);
        return dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "kmeans seeding: out of host memory for %zu weights", n);
    }
    size_t positive = 0;
    for (size_t first = 0; first < n && st == DK_OK; first += B)
        st = io->values(io->ctx, 0, first, n - first < B ? n - first : B, w + first);
    for (size_t j = 1; st == DK_OK && j <= n; j++) {
        positive += w[j - 1] > 0;
        tree[j] += w[j - 1];
        size_t up = j + (j & (~j + 1));
        if (up <= n)
            tree[up] += tree[j];
    }
    if (st == DK_OK && positive < (size_t)k)
        st = dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                     "kmeans: k = %d is larger than the %zu unmasked points of positive weight", k, positive);
    size_t top = 1;
    while (top * 2 <= n)
        top *= 2;
    for (int c = 0; c < k && st == DK_OK; c++) {
        double total = 0.0;
        for (size_t j = n; j > 0; j -= j & (~j + 1))
            total += tree[j];
        double rest = uniform01(rng) * total;
        size_t at = 0; /* the points whose running sum is <= the target */
        for (size_t step = top; step > 0; step /= 2)
            if (at + step <= n && tree[at + step] <= rest) {
                at += step;
                rest -= tree[at];
            }
        /* rounding in the tree: the nearest point still of positive weight */
        size_t i = at < n ? at : n - 1;
        while (i < n && !(w[i] > 0))
            i++;
        if (i == n)
            for (i = at < n ? at : n - 1; !(w[i] > 0); i--)
                ;
        for (size_t j = i + 1; j <= n; j += j & (~j + 1))
            tree[j] -= w[i];
        w[i] = 0.0f;
        st = io->point(io->ctx, i, C + (size_t)c * d);
    }
    free(w), free(tree);
    return st;
}

static dk_status seed_plusplus(const dk_kmeans_setup *s, const dk_kmeans_seed_io *io, uint64_t *rng,
                               double *bn, double *bt, double *bb, size_t nb, float *C)
{
    const int k = s->desc.k, d = s->desc.d;
    const int trials = s->desc.trials > 0 ? s->desc.trials : 2 + (int)log((double)k);
    int near = 0, trial = 1, best = 2;
    float cand[DK_KMEANS_MAX_D];
    size_t i = 0;
    /* the first centroid: a draw by weight 1 among the unmasked points */
    dk_status st = io->distance(io->ctx, NULL, -1, trial, bt);
    if (st != DK_OK || (st = draw(io, trial, bt, nb, uniform01(rng) * block_total(bt, nb), &i)) != DK_OK ||
        (st = io->point(io->ctx, i, C)) != DK_OK || (st = io->distance(io->ctx, C, -1, near, bn)) != DK_OK)
        return st;
    for (int c = 1; c < k; c++) {
        float *Cc = C + (size_t)c * d;
        const double pot = block_total(bn, nb);
        if (!(pot > 0)) {
            /* every point sits on a centroid: any point adds nothing */
            if ((st = io->distance(io->ctx, NULL, -1, trial, bt)) != DK_OK ||
                (st = draw(io, trial, bt, nb, uniform01(rng) * block_total(bt, nb), &i)) != DK_OK ||
                (st = io->point(io->ctx, i, Cc)) != DK_OK)
                return st;
            continue;
        }
        double best_pot = INFINITY;
        for (int t = 0; t < trials; t++) {
            if ((st = draw(io, near, bn, nb, uniform01(rng) * pot, &i)) != DK_OK ||
                (st = io->point(io->ctx, i, cand)) != DK_OK ||
                (st = io->distance(io->ctx, cand, near, trial, bt)) != DK_OK)
                return st;
            const double p = block_total(bt, nb);
            if (p < best_pot) {
                best_pot = p;
                int ts = trial;
                trial = best, best = ts;
                double *tb = bt;
                bt = bb, bb = tb;
                memcpy(Cc, cand, (size_t)d * sizeof *cand);
            }
        }
        int ts = near;
        near = best, best = ts;
        double *tb = bn;
        bn = bb, bb = tb;
    }
    return DK_OK;
}

dk_status dk_kmeans_seed_run(const dk_kmeans_setup *s, const dk_kmeans_seed_io *io, float *centroids)
{
    const size_t nb = (s->desc.n + DK_KMEANS_SEED_BLOCK - 1) / DK_KMEANS_SEED_BLOCK;
    double *blocks = malloc(3 * nb * sizeof *blocks);
    if (!blocks)
        return dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "kmeans seeding: out of host memory");
    uint64_t rng = s->desc.seed;
    dk_status st;
    if (s->desc.init == DK_KMEANS_INIT_RANDOM && io->weighted)
        st = seed_random_weighted(s, io, &rng, blocks, centroids);
    else if (s->desc.init == DK_KMEANS_INIT_RANDOM)
        st = seed_random(s, io, &rng, blocks, nb, centroids);
    else
        st = seed_plusplus(s, io, &rng, blocks, blocks + nb, blocks + 2 * nb, nb, centroids);
    free(blocks);
    return st;
}

/* ---- the host's distance pass: the reference, and backends without one ---- */

typedef struct host_io {
    const dk_kmeans_setup *s;
    const float *x;
    const uint8_t *mask;
    const float *w;
    float *slot[3];
} host_io;

static dk_status host_distance(void *ctx, const float *centre, int near, int out, double *blocks)
{
    host_io *h = ctx;
    const dk_kmeans_desc *d = &h->s->desc;
    const float *nv = near >= 0 ? h->slot[near] : NULL;
    float *ov = h->slot[out];
    const size_t B = DK_KMEANS_SEED_BLOCK;
    for (size_t b = 0; b * B < d->n; b++) {
        double sum = 0.0;
        const size_t end = (b + 1) * B < d->n ? (b + 1) * B : d->n;
        for (size_t i = b * B; i < end; i++) {
            float v = 0.0f;
            if (!h->mask || h->mask[i]) {
                if (centre) {
                    v = 0.0f;
                    for (int f = 0; f < d->d; f++) {
                        float diff = h->x[i * h->s->stride_point + (size_t)f * h->s->stride_feature] - centre[f];
                        v += diff * diff;
                    }
                } else {
                    v = 1.0f;
                }
                if (h->w)
                    v = h->w[i] * v;
                if (nv && nv[i] < v)
                    v = nv[i];
            }
            ov[i] = v;
            sum += v;
        }
        blocks[b] = sum;
    }
    return DK_OK;
}

static dk_status host_values(void *ctx, int slot, size_t first, size_t count, float *values)
{
    host_io *h = ctx;
    memcpy(values, h->slot[slot] + first, count * sizeof *values);
    return DK_OK;
}

static dk_status host_point(void *ctx, size_t i, float *x)
{
    host_io *h = ctx;
    for (int f = 0; f < h->s->desc.d; f++)
        x[f] = h->x[i * h->s->stride_point + (size_t)f * h->s->stride_feature];
    return DK_OK;
}

dk_status dk_kmeans_seed_host(const dk_kmeans_setup *s, const float *points, const uint8_t *mask,
                              const float *weights, float *centroids)
{
    host_io h = {s, points, mask, weights, {NULL, NULL, NULL}};
    dk_status st = DK_OK;
    for (int j = 0; j < 3; j++)
        if (!(h.slot[j] = malloc(s->desc.n * sizeof(float))))
            st = dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "kmeans seeding: out of host memory for %zu points",
                         s->desc.n);
    if (st == DK_OK) {
        dk_kmeans_seed_io io = {&h, s->desc.n, weights != NULL, host_distance, host_values, host_point};
        st = dk_kmeans_seed_run(s, &io, centroids);
    }
    for (int j = 0; j < 3; j++)
        free(h.slot[j]);
    return st;
}

/* ---- the plugin's distance pass ---- */

typedef struct device_io {
    dk_plan *plan;
    const dk_kmeans_ops *ops;
    const void *points, *mask, *weights;
    dk_buffer *slot[3], *centre, *blocks;
    size_t nb;
} device_io;

static dk_status device_distance(void *ctx, const float *centre, int near, int out, double *blocks)
{
    device_io *io = ctx;
    const dk_kmeans_setup *s = io->plan->state;
    dk_status st;
    if (centre && (st = dk_buffer_write(io->centre, centre, (size_t)s->desc.d * sizeof *centre)) != DK_OK)
        return st;
    dk_msg msg = {{0}};
    dk_context *c = io->plan->ctx;
    dk_device_enter(c);
    const void *ch = centre ? io->centre->handle : NULL, *nh = near >= 0 ? io->slot[near]->handle : NULL;
    if (io->weights)
        st = io->ops->seed_distance_weighted(io->plan->impl, io->points, io->mask, io->weights, ch, nh,
                                             io->slot[out]->handle, io->blocks->handle, &msg);
    else
        st = io->ops->seed_distance(io->plan->impl, io->points, io->mask, ch, nh, io->slot[out]->handle,
                                    io->blocks->handle, &msg);
    dk_device_leave(c);
    if (st != DK_OK)
        return dk_fail_msg(c, st, &msg, "kmeans: the seeding's distance pass failed");
    return dk_buffer_read(io->blocks, blocks, io->nb * sizeof *blocks);
}

static dk_status device_read(device_io *io, int slot, size_t first, size_t count, float *values, size_t point,
                             float *x)
{
    dk_msg msg = {{0}};
    dk_context *c = io->plan->ctx;
    dk_device_enter(c);
    dk_status st = io->ops->seed_read(io->plan->impl, io->points, io->slot[slot]->handle, first, count, values,
                                      point, x, &msg);
    dk_device_leave(c);
    if (st != DK_OK)
        return dk_fail_msg(c, st, &msg, "kmeans: the seeding could not read the device");
    return DK_OK;
}

static dk_status device_values(void *ctx, int slot, size_t first, size_t count, float *values)
{
    return device_read(ctx, slot, first, count, values, 0, NULL);
}

static dk_status device_point(void *ctx, size_t i, float *x) { return device_read(ctx, 0, 0, 0, NULL, i, x); }

/* The plugin's seeding ops, or NULL (they came with the tables' generation
 * 2, the weighted pass with 3). */
static const dk_kmeans_ops *seed_ops(const dk_context *ctx, int weighted)
{
    const dk_plugin *pl = ctx->backend->plugin;
    const dk_kmeans_ops *ops = pl->kmeans;
    if (!ops || pl->ops_generation < 2 || !ops->seed_distance || !ops->seed_read)
        return NULL;
    if (weighted && (pl->ops_generation < 3 || !ops->seed_distance_weighted))
        return NULL;
    return ops;
}

/* Without the plugin's ops: the points (mask and weights) come to the host. */
static dk_status seed_on_host(dk_plan *plan, const dk_buffer *points, const dk_buffer *mask,
                              const dk_buffer *weights, float *C)
{
    const dk_kmeans_setup *s = plan->state;
    const size_t n = s->desc.n;
    float *x = malloc(n * (size_t)s->desc.d * sizeof *x);
    uint8_t *m = mask ? malloc(n) : NULL;
    float *w = weights ? malloc(n * sizeof *w) : NULL;
    dk_status st;
    if (!x || (mask && !m) || (weights && !w))
        st = dk_fail(plan->ctx, DK_ERR_OUT_OF_MEMORY, "kmeans seeding: out of host memory for %zu points", n);
    else if ((st = dk_buffer_read(points, x, n * (size_t)s->desc.d * sizeof *x)) == DK_OK &&
             (!mask || (st = dk_buffer_read(mask, m, n)) == DK_OK) &&
             (!weights || (st = dk_buffer_read(weights, w, n * sizeof *w)) == DK_OK))
        st = dk_kmeans_seed_host(s, x, m, w, C);
    free(x), free(m), free(w);
    return st;
}

DK_API dk_status dk_kmeans_seed(dk_plan *plan, const dk_buffer *points, const dk_buffer *mask, dk_buffer *centroids)
{
    return dk_kmeans_seed_weighted(plan, points, mask, NULL, centroids);
}

DK_API dk_status dk_kmeans_seed_weighted(dk_plan *plan, const dk_buffer *points, const dk_buffer *mask,
                                         const dk_buffer *weights, dk_buffer *centroids)
{
    if (!plan || plan->algo != DK_ALGO_KMEANS)
        return dk_fail(plan ? plan->ctx : NULL, DK_ERR_INVALID_ARGUMENT, "dk_kmeans_seed: plan must be a kmeans plan");
    const dk_kmeans_setup *s = plan->state;
    dk_context *ctx = plan->ctx;
    if (s->desc.init != DK_KMEANS_INIT_PLUSPLUS && s->desc.init != DK_KMEANS_INIT_RANDOM)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT,
                       "dk_kmeans_seed: the plan's init is %d; seeding needs DK_KMEANS_INIT_PLUSPLUS or "
                       "DK_KMEANS_INIT_RANDOM",
                       (int)s->desc.init);
    const size_t n = s->desc.n, kd = (size_t)s->desc.k * s->desc.d;
    if (!points || !centroids || points->ctx != ctx || centroids->ctx != ctx || (mask && mask->ctx != ctx) ||
        (weights && weights->ctx != ctx))
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT,
                       "dk_kmeans_seed: points and centroids must be buffers of the plan's context (mask and "
                       "weights too, when given)");
    if (points->bytes < n * (size_t)s->desc.d * sizeof(float) || (mask && mask->bytes < n) ||
        (weights && weights->bytes < n * sizeof(float)) || centroids->bytes < kd * sizeof(float))
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT,
                       "dk_kmeans_seed: a buffer is too small (points n*d floats, mask n bytes, weights n floats, "
                       "centroids k*d floats)");
    float *C = malloc(kd * sizeof *C);
    if (!C)
        return dk_fail(ctx, DK_ERR_OUT_OF_MEMORY, "kmeans seeding: out of host memory");
    const dk_kmeans_ops *ops = seed_ops(ctx, weights != NULL);
    dk_status st = DK_OK;
    if (!ops) {
        st = seed_on_host(plan, points, mask, weights, C);
    } else {
        device_io io = {plan,
                        ops,
                        points->handle,
                        mask ? mask->handle : NULL,
                        weights ? weights->handle : NULL,
                        {NULL, NULL, NULL},
                        NULL,
                        NULL,
                        (n + DK_KMEANS_SEED_BLOCK - 1) / DK_KMEANS_SEED_BLOCK};
        for (int j = 0; j < 3 && st == DK_OK; j++)
            st = dk_buffer_create(ctx, n * sizeof(float), &io.slot[j]);
        if (st == DK_OK)
            st = dk_buffer_create(ctx, (size_t)s->desc.d * sizeof(float), &io.centre);
        if (st == DK_OK)
            st = dk_buffer_create(ctx, io.nb * sizeof(double), &io.blocks);
        if (st == DK_OK) {
            dk_kmeans_seed_io sio = {&io, n, weights != NULL, device_distance, device_values, device_point};
            st = dk_kmeans_seed_run(s, &sio, C);
        }
        for (int j = 0; j < 3; j++)
            dk_buffer_destroy(io.slot[j]);
        dk_buffer_destroy(io.centre);
        dk_buffer_destroy(io.blocks);
    }
    if (st == DK_OK)
        st = dk_buffer_write(centroids, C, kd * sizeof *C);
    free(C);
    if (st != DK_OK) /* the sentence, set by whichever call failed, on the context too */
        return dk_fail(ctx, st, "%s", dk_last_error(NULL));
    return st;
}
