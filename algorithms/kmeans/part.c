/* kmeans: plans over one rank's part and the phases of a distributed Lloyd
 * iteration (kmeans_part.h), for libdakit-mpi. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "kmeans_internal.h"
#include "kmeans_part.h"

static const dk_kmeans_ops *phase_ops(const dk_context *ctx)
{
    if (!ctx)
        return NULL;
    const dk_plugin *pl = ctx->backend->plugin;
    const dk_kmeans_ops *ops = pl->kmeans;
    /* the phases came with the ops tables' generation 1 */
    if (!ops || pl->ops_generation < 1)
        return NULL;
    return ops->assign_partial && ops->update && ops->objective ? ops : NULL;
}

DK_API int dk_kmeans_has_phases(const dk_context *ctx) { return phase_ops(ctx) != NULL; }

DK_API dk_status dk_kmeans_part_plan_create(dk_context *ctx, const dk_kmeans_desc *desc, dk_plan **plan)
{
    static const char *const what = "dk_kmeans_part_plan_create";
    if (!ctx || !desc || !plan)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "%s: ctx, desc and plan must not be NULL", what);
    *plan = NULL;
    const dk_kmeans_ops *ops = phase_ops(ctx);
    if (!ops)
        return dk_fail(ctx, DK_ERR_NOT_IMPLEMENTED,
                       "%s: backend %s has no kmeans phases (assign_partial, update, objective)", what,
                       ctx->backend->plugin->name);
    /* the whole problem's rules, checked on a stand-in with k points at
     * least (a part may hold fewer, or none) */
    dk_kmeans_desc probe = *desc;
    if (probe.n < (size_t)probe.k || probe.n == 0) {
        probe.n = probe.k > 0 ? (size_t)probe.k : 1;
        probe.rows = probe.cols = 0;
        probe.lambda = 1;
    }
    dk_kmeans_setup setup;
    dk_status st = dk_kmeans_setup_make(&probe, &setup);
    if (st != DK_OK)
        return dk_fail(ctx, st, "%s", dk_last_error(NULL));
    setup.desc = *desc;
    setup.contiguity = desc->n > 0 && desc->rows && desc->cols && desc->rows * desc->cols == desc->n &&
                       desc->lambda < 1;
    if (desc->layout == DK_KMEANS_FEATURE_MAJOR)
        setup.stride_feature = desc->n;
    if (!(setup.desc.variant = dk_pick_variant(ctx, DK_ALGO_KMEANS, ops->variants, desc->variant)))
        return DK_ERR_NOT_IMPLEMENTED;
    return dk_kmeans_plan_from_setup(ctx, ops, &setup, "the part's plan", plan);
}

/* The buffer's handle after its checks; NULL with the error set. */
static int usable(dk_plan *plan, const dk_buffer *b, size_t bytes, const char *what, const char *call)
{
    if (!b) {
        dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s: the %s buffer must not be NULL", call, what);
        return 0;
    }
    if (b->ctx != plan->ctx) {
        dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s: the %s buffer belongs to another context than the plan",
                call, what);
        return 0;
    }
    if (b->bytes < bytes) {
        dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s: the %s buffer holds %zu bytes; it needs %zu", call, what,
                b->bytes, bytes);
        return 0;
    }
    return 1;
}

static const dk_kmeans_setup *part_setup(dk_plan *plan, const char *call)
{
    if (!plan) {
        dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "%s: plan must not be NULL", call);
        return NULL;
    }
    if (plan->algo != DK_ALGO_KMEANS || !phase_ops(plan->ctx)) {
        dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s: the plan is not a kmeans plan with phases", call);
        return NULL;
    }
    return plan->state;
}

DK_API dk_status dk_kmeans_assign_partial(dk_plan *plan, const dk_buffer *points, const dk_buffer *mask,
                                          const dk_buffer *centroids, const dk_buffer *prev, dk_buffer *next,
                                          dk_buffer *labels, dk_buffer *sums, const dk_buffer *state)
{
    static const char *const call = "dk_kmeans_assign_partial";
    const dk_kmeans_setup *s = part_setup(plan, call);
    if (!s)
        return DK_ERR_INVALID_ARGUMENT;
    const dk_kmeans_desc *d = &s->desc;
    const size_t n = d->n, wide = (d->rows + (size_t)(d->window / 2) * 2) * d->cols * sizeof(int32_t);
    if ((prev || next) && !s->contiguity)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT,
                       "%s: previous and next labels need a plan under the contiguity cost", call);
    if ((n && !usable(plan, points, n * (size_t)d->d * sizeof(float), "points", call)) ||
        (n && mask && !usable(plan, mask, n, "mask", call)) ||
        !usable(plan, centroids, (size_t)d->k * (size_t)d->d * sizeof(float), "centroids", call) ||
        (prev && !usable(plan, prev, wide, "previous labels", call)) ||
        (next && !usable(plan, next, wide, "next labels", call)) ||
        (n && !usable(plan, labels, n * sizeof(int32_t), "labels", call)) ||
        !usable(plan, sums, DK_KMEANS_SUMS_LEN(d->k, d->d) * sizeof(double), "sums", call) ||
        !usable(plan, state, DK_KMEANS_STATE_LEN * sizeof(double), "state", call))
        return DK_ERR_INVALID_ARGUMENT;
    if (prev && prev == next)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s: prev and next must be distinct buffers", call);
    const dk_kmeans_ops *ops = plan->ctx->backend->plugin->kmeans;
    dk_msg msg = {{0}};
    dk_device_enter(plan->ctx);
    dk_status st = ops->assign_partial(plan->impl, points ? points->handle : NULL, mask ? mask->handle : NULL,
                                       centroids->handle, prev ? prev->handle : NULL, next ? next->handle : NULL,
                                       labels ? labels->handle : NULL, sums->handle, state->handle, &msg);
    dk_device_leave(plan->ctx);
    return st == DK_OK ? DK_OK : dk_fail_msg(plan->ctx, st, &msg, "kmeans: the assignment failed");
}

DK_API dk_status dk_kmeans_update(dk_plan *plan, const dk_buffer *sums, dk_buffer *centroids, dk_buffer *state)
{
    static const char *const call = "dk_kmeans_update";
    const dk_kmeans_setup *s = part_setup(plan, call);
    if (!s)
        return DK_ERR_INVALID_ARGUMENT;
    const dk_kmeans_desc *d = &s->desc;
    if (!usable(plan, sums, DK_KMEANS_SUMS_LEN(d->k, d->d) * sizeof(double), "sums", call) ||
        !usable(plan, centroids, (size_t)d->k * (size_t)d->d * sizeof(float), "centroids", call) ||
        !usable(plan, state, DK_KMEANS_STATE_LEN * sizeof(double), "state", call))
        return DK_ERR_INVALID_ARGUMENT;
    const dk_kmeans_ops *ops = plan->ctx->backend->plugin->kmeans;
    dk_msg msg = {{0}};
    dk_device_enter(plan->ctx);
    dk_status st = ops->update(plan->impl, sums->handle, centroids->handle, state->handle, &msg);
    dk_device_leave(plan->ctx);
    return st == DK_OK ? DK_OK : dk_fail_msg(plan->ctx, st, &msg, "kmeans: the update failed");
}

DK_API dk_status dk_kmeans_objective(dk_plan *plan, const dk_buffer *points, const dk_buffer *labels,
                                     const dk_buffer *centroids, dk_buffer *out)
{
    static const char *const call = "dk_kmeans_objective";
    const dk_kmeans_setup *s = part_setup(plan, call);
    if (!s)
        return DK_ERR_INVALID_ARGUMENT;
    const dk_kmeans_desc *d = &s->desc;
    const size_t n = d->n;
    if ((n && !usable(plan, points, n * (size_t)d->d * sizeof(float), "points", call)) ||
        (n && !usable(plan, labels, n * sizeof(int32_t), "labels", call)) ||
        !usable(plan, centroids, (size_t)d->k * (size_t)d->d * sizeof(float), "centroids", call) ||
        !usable(plan, out, 2 * sizeof(double), "objective", call))
        return DK_ERR_INVALID_ARGUMENT;
    const dk_kmeans_ops *ops = plan->ctx->backend->plugin->kmeans;
    dk_msg msg = {{0}};
    dk_device_enter(plan->ctx);
    dk_status st = ops->objective(plan->impl, points ? points->handle : NULL, labels ? labels->handle : NULL,
                                  centroids->handle, out->handle, &msg);
    dk_device_leave(plan->ctx);
    return st == DK_OK ? DK_OK : dk_fail_msg(plan->ctx, st, &msg, "kmeans: the objective failed");
}
