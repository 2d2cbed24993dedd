/* kmeans: parameter validation, the equal-interval initial centroids, and dispatch
 * to the context's plugin. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kmeans_internal.h"

DK_API void dk_kmeans_desc_init(dk_kmeans_desc *desc)
{
    if (!desc)
        return;
    memset(desc, 0, sizeof *desc);
    desc->max_iters = 20;
    desc->tol = 0.0;
    desc->layout = DK_KMEANS_POINT_MAJOR;
    desc->lambda = 1.0;
    desc->window = 5;
    desc->init = DK_KMEANS_INIT_GIVEN;
}

dk_status dk_kmeans_setup_make(const dk_kmeans_desc *desc, dk_kmeans_setup *setup)
{
    if (!desc || !setup)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "kmeans: the description must not be NULL");
    const dk_kmeans_desc *d = desc;
    if (d->n < 1)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "kmeans: n is 0; there must be at least one point");
    if (d->d < 1 || d->d > DK_KMEANS_MAX_D)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "kmeans: d is %d; each point needs 1 to %d features",
                       d->d, DK_KMEANS_MAX_D);
    if (d->n > ((size_t)1 << 40) / (size_t)d->d)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "kmeans: n * d = %zu * %d is too large", d->n, d->d);
    if (d->k < 1)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "kmeans: k is %d; there must be at least one cluster", d->k);
    if ((size_t)d->k > d->n)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "kmeans: k = %d is larger than the %zu points", d->k,
                       d->n);
    if (d->max_iters < 1)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "kmeans: max_iters is %d; it must be >= 1", d->max_iters);
    if (!(d->tol >= 0) || isinf(d->tol))
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "kmeans: tol is %g; it must be a finite number >= 0",
                       d->tol);
    if (d->layout != DK_KMEANS_POINT_MAJOR && d->layout != DK_KMEANS_FEATURE_MAJOR)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "kmeans: layout %d is neither point- nor feature-major",
                       (int)d->layout);
    if (!(d->lambda >= 0 && d->lambda <= 1))
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "kmeans: lambda is %g; it must lie in [0, 1]", d->lambda);
    int grid = d->rows || d->cols;
    if (grid && (d->rows == 0 || d->cols == 0 || d->rows * d->cols != d->n))
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                       "kmeans: the grid %zu x %zu does not hold the %zu points (rows * cols must equal n)",
                       d->rows, d->cols, d->n);
    if (d->lambda < 1 && !grid)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                       "kmeans: lambda %g < 1 asks for the contiguity cost, which needs a grid (rows, cols)",
                       d->lambda);
    if (d->window < 1 || d->window > DK_KMEANS_MAX_WINDOW || d->window % 2 == 0)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "kmeans: window is %d; it must be odd, 1 to %d", d->window,
                       DK_KMEANS_MAX_WINDOW);
    if (grid && d->lambda < 1 && d->k > DK_KMEANS_MAX_K)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                       "kmeans: k is %d; with the contiguity cost (lambda < 1) it must be at most %d", d->k,
                       DK_KMEANS_MAX_K);
    if (d->init != DK_KMEANS_INIT_GIVEN && d->init != DK_KMEANS_INIT_PLUSPLUS && d->init != DK_KMEANS_INIT_RANDOM)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                       "kmeans: init is %d; it must be DK_KMEANS_INIT_GIVEN, _PLUSPLUS or _RANDOM", (int)d->init);
    if (d->trials < 0 || d->trials > 1000)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                       "kmeans: trials is %d; it must be 0 (2 + ln k) or 1 to 1000 candidates per centroid",
                       d->trials);
    memset(setup, 0, sizeof *setup);
    setup->desc = *d;
    setup->contiguity = grid && d->lambda < 1;
    if (d->layout == DK_KMEANS_POINT_MAJOR) {
        setup->stride_point = (size_t)d->d;
        setup->stride_feature = 1;
    } else {
        setup->stride_point = 1;
        setup->stride_feature = d->n;
    }
    return DK_OK;
}

DK_API dk_status dk_kmeans_check_points(const dk_kmeans_desc *desc, const float *points,
                                        const uint8_t *mask, size_t *valid)
{
    dk_kmeans_setup s;
    dk_status st = dk_kmeans_setup_make(desc, &s);
    if (st != DK_OK)
        return st;
    if (!points)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "kmeans: points must not be NULL");
    size_t count = 0;
    for (size_t i = 0; i < s.desc.n; i++) {
        if (mask && !mask[i])
            continue;
        count++;
        for (int f = 0; f < s.desc.d; f++) {
            float v = points[i * s.stride_point + (size_t)f * s.stride_feature];
            if (!isfinite(v))
                return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                               "kmeans: feature %d of point %zu is %g; every feature must be a finite number", f,
                               i, (double)v);
        }
    }
    if (count < (size_t)s.desc.k)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "kmeans: k = %d is larger than the %zu unmasked points",
                       s.desc.k, count);
    if (valid)
        *valid = count;
    return DK_OK;
}

DK_API dk_status dk_kmeans_check_weights(const dk_kmeans_desc *desc, const float *weights, const uint8_t *mask)
{
    dk_kmeans_setup s;
    dk_status st = dk_kmeans_setup_make(desc, &s);
    if (st != DK_OK)
        return st;
    if (!weights)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "kmeans: weights must not be NULL");
    double total = 0.0;
    for (size_t i = 0; i < s.desc.n; i++) {
        if (!(weights[i] >= 0) || isinf(weights[i]))
            return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                           "kmeans: the weight of point %zu is %g; every weight must be a finite number >= 0", i,
                           (double)weights[i]);
        if (!mask || mask[i])
            total += weights[i];
    }
    if (!(total > 0))
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                       "kmeans: the weights of the unmasked points sum to 0; at least one must be positive");
    return DK_OK;
}

DK_API dk_status dk_kmeans_initial_centroids(const dk_kmeans_desc *desc, const float *points,
                                             const uint8_t *mask, int feature, float *centroids)
{
    dk_kmeans_setup s;
    dk_status st = dk_kmeans_check_points(desc, points, mask, NULL);
    if (st != DK_OK)
        return st;
    dk_kmeans_setup_make(desc, &s);
    const dk_kmeans_desc *d = &s.desc;
    if (feature < 0 || feature >= d->d)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "kmeans: feature %d to split does not exist (d = %d)",
                       feature, d->d);
    if (!centroids)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "kmeans: centroids must not be NULL");
    const size_t kd = (size_t)d->k * d->d;
    double *sum = calloc(kd + (size_t)d->d, sizeof *sum); /* last row: all points */
    size_t *count = calloc((size_t)d->k, sizeof *count);
    if (!sum || !count) {
        free(sum), free(count);
        return dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "kmeans: out of host memory");
    }
    float lo = INFINITY, hi = -INFINITY;
    size_t total = 0;
    for (size_t i = 0; i < d->n; i++) {
        if (mask && !mask[i])
            continue;
        float v = points[i * s.stride_point + (size_t)feature * s.stride_feature];
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    double width = ((double)hi - (double)lo) / d->k;
    for (size_t i = 0; i < d->n; i++) {
        if (mask && !mask[i])
            continue;
        double v = points[i * s.stride_point + (size_t)feature * s.stride_feature];
        int c = width > 0 ? (int)((v - lo) / width) : 0;
        c = c < 0 ? 0 : c >= d->k ? d->k - 1 : c;
        count[c]++;
        total++;
        for (int f = 0; f < d->d; f++) {
            double x = points[i * s.stride_point + (size_t)f * s.stride_feature];
            sum[(size_t)c * d->d + f] += x;
            sum[kd + f] += x;
        }
    }
    for (int c = 0; c < d->k; c++)
        for (int f = 0; f < d->d; f++) {
            size_t j = (size_t)c * d->d + f;
            if (count[c])
                centroids[j] = (float)(sum[j] / (double)count[c]);
            else if (f == feature)
                centroids[j] = (float)(lo + (c + 0.5) * width);
            else
                centroids[j] = (float)(sum[kd + f] / (double)total);
        }
    free(sum), free(count);
    return DK_OK;
}

DK_API const char *const *dk_kmeans_variants(const dk_context *ctx)
{
    if (!ctx || !ctx->backend->plugin->kmeans)
        return NULL;
    return ctx->backend->plugin->kmeans->variants;
}

DK_API dk_status dk_kmeans_plan_create(dk_context *ctx, const dk_kmeans_desc *desc, dk_plan **plan)
{
    if (!ctx || !plan)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "dk_kmeans_plan_create: ctx and plan must not be NULL");
    *plan = NULL;
    const dk_kmeans_ops *ops = dk_context_ops(ctx, DK_ALGO_KMEANS);
    if (!ops)
        return DK_ERR_NOT_IMPLEMENTED;
    dk_kmeans_setup setup;
    dk_status st = dk_kmeans_setup_make(desc, &setup);
    if (st != DK_OK)
        return dk_fail(ctx, st, "%s", dk_last_error(NULL));
    if (!(setup.desc.variant = dk_pick_variant(ctx, DK_ALGO_KMEANS, ops->variants, desc->variant)))
        return DK_ERR_NOT_IMPLEMENTED;
    return dk_kmeans_plan_from_setup(ctx, ops, &setup, "the plan", plan);
}

dk_status dk_kmeans_plan_from_setup(dk_context *ctx, const dk_kmeans_ops *ops, const dk_kmeans_setup *setup,
                                    const char *what, dk_plan **plan)
{
    dk_plan *p = calloc(1, sizeof *p);
    if (!p || !(p->state = malloc(sizeof *setup))) {
        free(p);
        return dk_fail(ctx, DK_ERR_OUT_OF_MEMORY, "kmeans: out of host memory");
    }
    p->ctx = ctx;
    p->algo = DK_ALGO_KMEANS;
    p->impl_destroy = ops->plan_destroy;
    memcpy(p->state, setup, sizeof *setup);
    dk_msg msg = {{0}};
    dk_device_enter(ctx);
    dk_status st = ops->plan_create(ctx->device, p->state, &p->impl, &msg);
    dk_device_leave(ctx);
    if (st != DK_OK) {
        p->impl = NULL;
        dk_plan_destroy(p);
        char text[96];
        snprintf(text, sizeof text, "kmeans: the backend could not make %s", what);
        return dk_fail_msg(ctx, st, &msg, text);
    }
    *plan = p;
    return DK_OK;
}

static dk_status check_buffer(dk_plan *plan, const dk_buffer *b, size_t bytes, const char *what)
{
    if (!b)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "dk_kmeans_execute: the %s buffer must not be NULL",
                       what);
    if (b->ctx != plan->ctx)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT,
                       "dk_kmeans_execute: the %s buffer belongs to another context than the plan", what);
    if (b->bytes < bytes)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT,
                       "dk_kmeans_execute: the %s buffer holds %zu bytes; it needs %zu", what, b->bytes, bytes);
    return DK_OK;
}

/* The plan and the buffers of an execute (weights and init where given or
 * needed), each sentence naming dk_kmeans_execute. */
static dk_status check_execute(dk_plan *plan, const dk_buffer *points, const dk_buffer *mask,
                               const dk_buffer *weights, const dk_buffer *init, const dk_buffer *labels,
                               const dk_buffer *centroids)
{
    if (!plan)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "dk_kmeans_execute: plan must not be NULL");
    if (plan->algo != DK_ALGO_KMEANS)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "dk_kmeans_execute: the plan is a %s plan",
                       dk_algo_name(plan->algo));
    const dk_kmeans_setup *s = plan->state;
    const size_t n = s->desc.n, kd = (size_t)s->desc.k * s->desc.d;
    const int seeded = s->desc.init != DK_KMEANS_INIT_GIVEN;
    dk_status st;
    if ((st = check_buffer(plan, points, n * s->desc.d * sizeof(float), "points")) != DK_OK ||
        (mask && (st = check_buffer(plan, mask, n, "mask")) != DK_OK) ||
        (weights && (st = check_buffer(plan, weights, n * sizeof(float), "weights")) != DK_OK) ||
        (!seeded && (st = check_buffer(plan, init, kd * sizeof(float), "initial centroids")) != DK_OK) ||
        (st = check_buffer(plan, labels, n * sizeof(int32_t), "labels")) != DK_OK ||
        (st = check_buffer(plan, centroids, kd * sizeof(float), "centroids")) != DK_OK)
        return st;
    return DK_OK;
}

DK_API dk_status dk_kmeans_execute(dk_plan *plan, const dk_buffer *points, const dk_buffer *mask,
                                   const dk_buffer *init, dk_buffer *labels, dk_buffer *centroids,
                                   dk_kmeans_result *result)
{
    dk_status st = check_execute(plan, points, mask, NULL, init, labels, centroids);
    if (st != DK_OK)
        return st;
    const dk_kmeans_setup *s = plan->state;
    const int seeded = s->desc.init != DK_KMEANS_INIT_GIVEN;
    if (seeded) { /* the seeds go to centroids, which execute may take as its init */
        if ((st = dk_kmeans_seed(plan, points, mask, centroids)) != DK_OK)
            return st;
        init = centroids;
    }
    dk_kmeans_result local;
    memset(&local, 0, sizeof local);
    dk_msg msg = {{0}};
    const dk_kmeans_ops *ops = plan->ctx->backend->plugin->kmeans;
    dk_device_enter(plan->ctx);
    st = ops->execute(plan->impl, points->handle, mask ? mask->handle : NULL, init->handle, labels->handle,
                      centroids->handle, &local, &msg);
    dk_device_leave(plan->ctx);
    if (st != DK_OK)
        return dk_fail_msg(plan->ctx, st, &msg, "kmeans: execution failed");
    if (result)
        *result = local;
    return DK_OK;
}

/* The weighted iterations through the plugin's phases on one device:
 * assign_weighted -> update, the stop flag read every WEIGHTED_BATCH
 * iterations when tol > 0 (the phases queued after the stop do nothing),
 * then objective_weighted. */
#define WEIGHTED_BATCH 8

static const dk_kmeans_ops *weighted_ops(const dk_context *ctx)
{
    const dk_plugin *pl = ctx->backend->plugin;
    const dk_kmeans_ops *ops = pl->kmeans;
    if (!ops || pl->ops_generation < 3 || !ops->assign_weighted || !ops->objective_weighted || !ops->update)
        return NULL;
    return ops;
}

static dk_status phase_status(dk_plan *plan, dk_status st, dk_msg *msg, const char *what)
{
    return st == DK_OK ? DK_OK : dk_fail_msg(plan->ctx, st, msg, what);
}

static dk_status run_weighted(dk_plan *plan, const dk_kmeans_ops *ops, const dk_buffer *points,
                              const dk_buffer *mask, const dk_buffer *weights, dk_buffer *labels,
                              dk_buffer *centroids, dk_kmeans_result *result)
{
    const dk_kmeans_setup *s = plan->state;
    const dk_kmeans_desc *d = &s->desc;
    dk_context *ctx = plan->ctx;
    const size_t r = (size_t)(d->window / 2), wide = s->contiguity ? (d->rows + 2 * r) * d->cols : 0;
    const size_t nsums = DK_KMEANS_SUMS_LEN(d->k, d->d);
    dk_buffer *sums = NULL, *state = NULL, *out = NULL, *lab[2] = {NULL, NULL};
    double *zeros = calloc(nsums > DK_KMEANS_STATE_LEN ? nsums : DK_KMEANS_STATE_LEN, sizeof *zeros);
    int32_t *none = wide ? malloc(wide * sizeof *none) : NULL;
    dk_status st = zeros && (!wide || none) ? DK_OK
                                            : dk_fail(ctx, DK_ERR_OUT_OF_MEMORY, "kmeans: out of host memory");
    for (size_t i = 0; i < wide && none; i++)
        none[i] = -1;
    if (st == DK_OK && (st = dk_buffer_create(ctx, nsums * sizeof(double), &sums)) == DK_OK &&
        (st = dk_buffer_create(ctx, DK_KMEANS_STATE_LEN * sizeof(double), &state)) == DK_OK &&
        (st = dk_buffer_create(ctx, 2 * sizeof(double), &out)) == DK_OK &&
        (st = dk_buffer_write(sums, zeros, nsums * sizeof(double))) == DK_OK)
        st = dk_buffer_write(state, zeros, DK_KMEANS_STATE_LEN * sizeof(double));
    for (int j = 0; j < 2 && wide && st == DK_OK; j++)
        if ((st = dk_buffer_create(ctx, wide * sizeof(int32_t), &lab[j])) == DK_OK)
            st = dk_buffer_write(lab[j], none, wide * sizeof(int32_t));
    const void *X = points->handle, *M = mask ? mask->handle : NULL, *W = weights ? weights->handle : NULL;
    dk_msg msg = {{0}};
    double host_state[DK_KMEANS_STATE_LEN] = {0}, obj[2] = {0};
    if (st == DK_OK && wide) { /* the first labels: plain nearest centroid */
        dk_device_enter(ctx);
        st = ops->assign_weighted(plan->impl, X, M, W, centroids->handle, NULL, lab[0]->handle, labels->handle,
                                  sums->handle, state->handle, &msg);
        dk_device_leave(ctx);
        st = phase_status(plan, st, &msg, "kmeans: the first labels failed");
    }
    for (int t = 0; st == DK_OK && t < d->max_iters; t++) {
        dk_device_enter(ctx);
        st = ops->assign_weighted(plan->impl, X, M, W, centroids->handle, wide ? lab[t & 1]->handle : NULL,
                                  wide ? lab[(t + 1) & 1]->handle : NULL, labels->handle, sums->handle,
                                  state->handle, &msg);
        if (st == DK_OK)
            st = ops->update(plan->impl, sums->handle, centroids->handle, state->handle, &msg);
        dk_device_leave(ctx);
        if ((st = phase_status(plan, st, &msg, "kmeans: a weighted iteration failed")) != DK_OK)
            break;
        if (d->tol > 0 && (t + 1) % WEIGHTED_BATCH == 0 && t + 1 < d->max_iters) {
            if ((st = dk_buffer_read(state, host_state, sizeof host_state)) != DK_OK || host_state[1] != 0)
                break;
        }
    }
    if (st == DK_OK) {
        dk_device_enter(ctx);
        st = ops->objective_weighted(plan->impl, X, labels->handle, W, centroids->handle, out->handle, &msg);
        dk_device_leave(ctx);
        st = phase_status(plan, st, &msg, "kmeans: the weighted objective failed");
    }
    if (st == DK_OK && (st = dk_buffer_read(state, host_state, sizeof host_state)) == DK_OK)
        st = dk_buffer_read(out, obj, sizeof obj);
    if (st == DK_OK && result) {
        memset(result, 0, sizeof *result);
        result->iterations = (int)host_state[0];
        result->objective = obj[0];
        result->last_move = host_state[2];
        result->valid = (size_t)obj[1];
    }
    dk_buffer_destroy(sums);
    dk_buffer_destroy(state);
    dk_buffer_destroy(out);
    dk_buffer_destroy(lab[0]);
    dk_buffer_destroy(lab[1]);
    free(zeros), free(none);
    return st;
}

DK_API dk_status dk_kmeans_execute_weighted(dk_plan *plan, const dk_buffer *points, const dk_buffer *mask,
                                            const dk_buffer *weights, const dk_buffer *init, dk_buffer *labels,
                                            dk_buffer *centroids, dk_kmeans_result *result)
{
    if (!weights)
        return dk_kmeans_execute(plan, points, mask, init, labels, centroids, result);
    dk_status st = check_execute(plan, points, mask, weights, init, labels, centroids);
    if (st != DK_OK)
        return st;
    const dk_kmeans_setup *s = plan->state;
    const size_t kd = (size_t)s->desc.k * s->desc.d;
    const int seeded = s->desc.init != DK_KMEANS_INIT_GIVEN;
    const dk_kmeans_ops *ops = weighted_ops(plan->ctx);
    if (!ops)
        return dk_fail(plan->ctx, DK_ERR_NOT_IMPLEMENTED,
                       "kmeans: backend %s takes no sample weights (its ops table lacks assign_weighted and "
                       "objective_weighted, ops generation 3)",
                       plan->ctx->backend->plugin->name);
    if (seeded)
        st = dk_kmeans_seed_weighted(plan, points, mask, weights, centroids);
    else if (init != centroids)
        st = dk_buffer_copy(centroids, init, kd * sizeof(float));
    if (st != DK_OK)
        return st;
    return run_weighted(plan, ops, points, mask, weights, labels, centroids, result);
}

DK_API dk_status dk_kmeans_execute_host(dk_plan *plan, const float *points, const uint8_t *mask,
                                        const float *init, int32_t *labels, float *centroids,
                                        dk_kmeans_result *result)
{
    return dk_kmeans_execute_host_weighted(plan, points, mask, NULL, init, labels, centroids, result);
}

DK_API dk_status dk_kmeans_execute_host_weighted(dk_plan *plan, const float *points, const uint8_t *mask,
                                                 const float *weights, const float *init, int32_t *labels,
                                                 float *centroids, dk_kmeans_result *result)
{
    if (!plan || plan->algo != DK_ALGO_KMEANS)
        return dk_fail(plan ? plan->ctx : NULL, DK_ERR_INVALID_ARGUMENT,
                       "dk_kmeans_execute_host: plan must be a kmeans plan");
    const dk_kmeans_setup *s = plan->state;
    const int seeded = s->desc.init != DK_KMEANS_INIT_GIVEN;
    if (!points || (!init && !seeded) || !labels || !centroids)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT,
                       "dk_kmeans_execute_host: points, init, labels and centroids must not be NULL (init may be "
                       "when desc.init seeds)");
    if (dk_kmeans_check_points(&s->desc, points, mask, NULL) != DK_OK ||
        (weights && dk_kmeans_check_weights(&s->desc, weights, mask) != DK_OK))
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s", dk_last_error(NULL));
    for (size_t j = 0; !seeded && j < (size_t)s->desc.k * s->desc.d; j++)
        if (!isfinite(init[j]))
            return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT,
                           "dk_kmeans_execute_host: initial centroid value %zu is %g; it must be finite", j,
                           (double)init[j]);
    const size_t n = s->desc.n, kd = (size_t)s->desc.k * s->desc.d;
    dk_context *ctx = plan->ctx;
    dk_buffer *bx = NULL, *bm = NULL, *bw = NULL, *bi = NULL, *bl = NULL, *bc = NULL;
    dk_status st;
    if ((st = dk_buffer_create(ctx, n * s->desc.d * sizeof(float), &bx)) == DK_OK &&
        (!mask || (st = dk_buffer_create(ctx, n, &bm)) == DK_OK) &&
        (!weights || (st = dk_buffer_create(ctx, n * sizeof(float), &bw)) == DK_OK) &&
        (seeded || (st = dk_buffer_create(ctx, kd * sizeof(float), &bi)) == DK_OK) &&
        (st = dk_buffer_create(ctx, n * sizeof(int32_t), &bl)) == DK_OK &&
        (st = dk_buffer_create(ctx, kd * sizeof(float), &bc)) == DK_OK &&
        (st = dk_buffer_write(bx, points, n * s->desc.d * sizeof(float))) == DK_OK &&
        (!mask || (st = dk_buffer_write(bm, mask, n)) == DK_OK) &&
        (!weights || (st = dk_buffer_write(bw, weights, n * sizeof(float))) == DK_OK) &&
        (seeded || (st = dk_buffer_write(bi, init, kd * sizeof(float))) == DK_OK) &&
        (st = dk_kmeans_execute_weighted(plan, bx, bm, bw, bi, bl, bc, result)) == DK_OK &&
        (st = dk_buffer_read(bl, labels, n * sizeof(int32_t))) == DK_OK)
        st = dk_buffer_read(bc, centroids, kd * sizeof(float));
    dk_buffer_destroy(bx);
    dk_buffer_destroy(bm);
    dk_buffer_destroy(bw);
    dk_buffer_destroy(bi);
    dk_buffer_destroy(bl);
    dk_buffer_destroy(bc);
    return st;
}
