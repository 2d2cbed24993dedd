/* gbees: validation, the measurement schedule, and dispatch to the
 * context's plugin (or to the serial reference when there is no context). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gbees_internal.h"

typedef struct gbees_state {
    const dk_gbees_ops *ops;
    dk_gbees_desc desc;
    dk_gbees_setup setup; /* what the backend's plan was made with */
    int dim, meas_dim, nmeas;
    dk_gbees_meas *meas;
    double *period_start; /* nmeas + 1 */
    int started, done;
    int next_period, next_k; /* the snapshot due next */
    int final_due;           /* the next snapshot is the last (t_end) */
    dk_gbees_snapshot snap;
    double *rows;
    size_t rows_cap;
} gbees_state;

DK_API void dk_gbees_desc_init(dk_gbees_desc *desc)
{
    if (!desc)
        return;
    memset(desc, 0, sizeof *desc);
    desc->threshold = 5e-6;
    desc->del_step = 20;
    desc->cfl = 1.0;
    desc->dx_factor = 1.0;
    desc->snapshots = 5;
    desc->update = 1;
}

/* Inverse of the symmetric matrix a (n x n) through its Cholesky factor;
 * -1 when it is not positive definite. */
static int spd_inverse(const double *a, int n, double *inv)
{
    double l[DK_GBEES_MAX_DIM * DK_GBEES_MAX_DIM] = {0};
    for (int j = 0; j < n; j++) {
        double s = a[j * n + j];
        for (int k = 0; k < j; k++)
            s -= l[j * n + k] * l[j * n + k];
        if (!(s > 1e-300))
            return -1;
        l[j * n + j] = sqrt(s);
        for (int i = j + 1; i < n; i++) {
            double t = a[i * n + j];
            for (int k = 0; k < j; k++)
                t -= l[i * n + k] * l[j * n + k];
            l[i * n + j] = t / l[j * n + j];
        }
    }
    /* columns of inv: solve L L' x = e_c */
    for (int c = 0; c < n; c++) {
        double y[DK_GBEES_MAX_DIM];
        for (int i = 0; i < n; i++) {
            double t = i == c ? 1.0 : 0.0;
            for (int k = 0; k < i; k++)
                t -= l[i * n + k] * y[k];
            y[i] = t / l[i * n + i];
        }
        for (int i = n - 1; i >= 0; i--) {
            double t = y[i];
            for (int k = i + 1; k < n; k++)
                t -= l[k * n + i] * inv[k * n + c];
            inv[i * n + c] = t / l[i * n + i];
        }
    }
    return 0;
}

/* log of the Gaussian density's normalization times the cell volume, for
 * the initial density of inverse covariance inv: log det inv from inv's
 * Cholesky factor (inv is positive definite: the covariance was checked). */
static double initial_lognorm(const double *inv, int d, const double *dx)
{
    double a[DK_GBEES_MAX_DIM * DK_GBEES_MAX_DIM], logdet_inv = 0.0;
    memcpy(a, inv, (size_t)d * d * sizeof *a);
    for (int j = 0; j < d; j++) {
        double s = a[j * d + j];
        for (int k = 0; k < j; k++)
            s -= a[j * d + k] * a[j * d + k];
        a[j * d + j] = sqrt(s);
        logdet_inv += 2.0 * log(a[j * d + j]);
        for (int i = j + 1; i < d; i++) {
            double t = a[i * d + j];
            for (int k = 0; k < j; k++)
                t -= a[i * d + k] * a[j * d + k];
            a[i * d + j] = t / a[j * d + j];
        }
    }
    double lognorm = 0.5 * logdet_inv - 0.5 * d * log(2.0 * M_PI);
    for (int i = 0; i < d; i++)
        lognorm += log(dx[i]);
    return lognorm;
}

static void gbees_state_free(gbees_state *s)
{
    if (!s)
        return;
    free(s->meas);
    free(s->period_start);
    free(s->rows);
}

/* The plan's impl: the backend's plan and the state, freed together. */
typedef struct gbees_impl {
    const dk_gbees_ops *ops;
    void *plan;
    gbees_state *state;
} gbees_impl;

static void impl_destroy(void *p)
{
    gbees_impl *impl = p;
    if (!impl)
        return;
    if (impl->plan)
        impl->ops->plan_destroy(impl->plan);
    gbees_state_free(impl->state);
    free(impl->state);
    free(impl);
}

DK_API const char *const *dk_gbees_variants(const dk_context *ctx)
{
    if (!ctx)
        return dk_gbees_reference_ops.variants;
    const dk_gbees_ops *ops = ctx->backend->plugin->gbees;
    return ops ? ops->variants : NULL;
}

DK_API dk_status dk_gbees_plan_create(dk_context *ctx, const dk_gbees_desc *desc,
                                      const dk_gbees_meas *meas, int nmeas, dk_plan **plan)
{
    if (!desc || !meas || !plan)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "gbees: desc, meas and plan are required");
    *plan = NULL;
    const dk_gbees_model *model = desc->model;
    if (!model || !model->f || !model->h)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "gbees: a model is required (dk_gbees_model_find)");
    if (nmeas < 1)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "gbees: at least one measurement (the initial Gaussian) is required");
    if (!(desc->threshold > 0.0) || !(desc->threshold < 1.0))
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "gbees: the threshold must be in (0, 1), not %g", desc->threshold);
    if (desc->del_step < 1)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "gbees: del_step must be >= 1, not %d", desc->del_step);
    if (!(desc->cfl > 0.0) || desc->cfl > 1.0)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "gbees: the CFL number must be in (0, 1], not %g", desc->cfl);
    if (!(desc->dx_factor > 0.0) || !isfinite(desc->dx_factor))
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "gbees: dx_factor must be > 0, not %g", desc->dx_factor);
    if (desc->snapshots < 2)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "gbees: snapshots per period must be >= 2 (start and end), not %d",
                       desc->snapshots);
    if (!isfinite(desc->t_end))
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "gbees: t_end must be finite");
    int d = meas[0].dim;
    if (model->dim ? d != model->dim : d < model->min_dim || d > DK_GBEES_MAX_DIM)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT,
                       "gbees: the initial measurement has dimension %d but model %s needs %s%d", d, model->name,
                       model->dim ? "" : "at least ", model->dim ? model->dim : model->min_dim);
    int m = model->meas_dim ? model->meas_dim : d;
    for (int k = 0; k < nmeas; k++) {
        const dk_gbees_meas *z = &meas[k];
        int want = k == 0 ? d : m;
        if (z->dim != want)
            return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT,
                           "gbees: measurement %d has dimension %d but model %s %s %d", k, z->dim, model->name,
                           k == 0 ? "has state dimension" : "measures", want);
        if (!(z->period > 0.0))
            return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "gbees: measurement %d has period %g; it must be > 0", k,
                           z->period);
        double inv[DK_GBEES_MAX_DIM * DK_GBEES_MAX_DIM];
        for (int i = 0; i < want; i++)
            if (!isfinite(z->mean[i]))
                return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "gbees: measurement %d has a mean that is not finite", k);
        if (spd_inverse(z->cov, want, inv) != 0)
            return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT,
                           "gbees: the covariance of measurement %d is not positive definite", k);
    }
    const dk_gbees_ops *ops = &dk_gbees_reference_ops;
    if (ctx) {
        ops = dk_context_ops(ctx, DK_ALGO_GBEES);
        if (!ops)
            return DK_ERR_NOT_IMPLEMENTED;
    }
    const char *variant = dk_pick_variant(ctx, DK_ALGO_GBEES, ops->variants, desc->variant);
    if (!variant)
        return DK_ERR_NOT_IMPLEMENTED;

    dk_gbees_setup setup;
    memset(&setup, 0, sizeof setup);
    setup.model = model;
    setup.dim = d;
    for (int i = 0; i < d; i++) {
        setup.center[i] = meas[0].mean[i];
        setup.dx[i] = desc->dx_factor * 0.5 * sqrt(meas[0].cov[i * d + i]);
    }
    setup.threshold = desc->threshold;
    setup.cfl = desc->cfl;
    setup.del_step = desc->del_step;
    setup.variant = variant;

    dk_plan *p = calloc(1, sizeof *p);
    gbees_impl *impl = calloc(1, sizeof *impl);
    gbees_state *s = calloc(1, sizeof *s);
    if (s) {
        s->meas = malloc(nmeas * sizeof *meas);
        s->period_start = malloc((nmeas + 1) * sizeof *s->period_start);
    }
    if (!p || !impl || !s || !s->meas || !s->period_start) {
        free(p);
        free(impl);
        gbees_state_free(s);
        free(s);
        return dk_fail(ctx, DK_ERR_OUT_OF_MEMORY, "gbees: out of memory making a plan");
    }
    memcpy(s->meas, meas, nmeas * sizeof *meas);
    s->ops = ops;
    s->desc = *desc;
    s->desc.variant = variant;
    s->setup = setup;
    s->dim = d;
    s->meas_dim = m;
    s->nmeas = nmeas;
    s->period_start[0] = 0.0;
    for (int k = 0; k < nmeas; k++)
        s->period_start[k + 1] = s->period_start[k] + meas[k].period;
    impl->ops = ops;
    impl->state = s;
    p->ctx = ctx;
    p->algo = DK_ALGO_GBEES;
    p->impl = impl;
    p->impl_destroy = impl_destroy;
    dk_msg msg = {{0}};
    dk_device_enter(ctx);
    dk_status st = ops->plan_create(ctx ? ctx->device : NULL, &s->setup, &impl->plan, &msg);
    dk_device_leave(ctx);
    if (st != DK_OK) {
        dk_plan_destroy(p);
        return dk_fail_msg(ctx, st, &msg, "gbees plan");
    }
    *plan = p;
    return DK_OK;
}

static gbees_impl *impl_of(const dk_plan *plan)
{
    return plan && plan->algo == DK_ALGO_GBEES ? plan->impl : NULL;
}

static double snapshot_time(const gbees_state *s, int period, int k)
{
    double t0 = s->period_start[period], t1 = s->period_start[period + 1];
    return k == s->desc.snapshots - 1 ? t1 : t0 + (t1 - t0) * k / (s->desc.snapshots - 1);
}

static dk_status take_snapshot(dk_plan *plan, gbees_impl *impl, int period, int k)
{
    gbees_state *s = impl->state;
    dk_msg msg = {{0}};
    size_t cells = 0;
    dk_status st = impl->ops->snapshot(impl->plan, NULL, 0, &cells, &msg);
    if (st != DK_OK)
        return dk_fail_msg(plan->ctx, st, &msg, "gbees snapshot");
    size_t need = cells * (size_t)(s->dim + 1);
    if (need > s->rows_cap) {
        double *bigger = realloc(s->rows, need * sizeof *bigger);
        if (!bigger)
            return dk_fail(plan->ctx, DK_ERR_OUT_OF_MEMORY, "gbees: out of memory for a snapshot of %zu cells", cells);
        s->rows = bigger;
        s->rows_cap = need;
    }
    st = impl->ops->snapshot(impl->plan, s->rows, cells, &cells, &msg);
    if (st != DK_OK)
        return dk_fail_msg(plan->ctx, st, &msg, "gbees snapshot");
    dk_gbees_stats stats;
    impl->ops->stats(impl->plan, &stats);
    s->snap.period = period;
    s->snap.index = k;
    s->snap.t = stats.t;
    s->snap.dim = s->dim;
    s->snap.cells = cells;
    s->snap.data = s->rows;
    return DK_OK;
}

/* Moves the due snapshot on by one; marks the run done past the end. */
static void schedule_next(gbees_state *s)
{
    if (s->final_due) {
        s->done = 1;
        return;
    }
    if (++s->next_k == s->desc.snapshots) {
        s->next_k = 0;
        if (++s->next_period == s->nmeas)
            s->done = 1;
    }
}

static dk_status run(dk_plan *plan, gbees_impl *impl, int max_steps, dk_gbees_event *event)
{
    gbees_state *s = impl->state;
    dk_msg msg = {{0}};
    dk_status st;
    if (s->done) {
        *event = DK_GBEES_DONE;
        return DK_OK;
    }
    if (!s->started) {
        double inv[DK_GBEES_MAX_DIM * DK_GBEES_MAX_DIM];
        spd_inverse(s->meas[0].cov, s->dim, inv);
        double lognorm = initial_lognorm(inv, s->dim, s->setup.dx);
        if (!isfinite(lognorm))
            return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT,
                           "gbees initialization: the initial covariance is too ill-conditioned to normalize");
        if ((st = impl->ops->init(impl->plan, s->meas[0].mean, inv, lognorm, &msg)) != DK_OK)
            return dk_fail_msg(plan->ctx, st, &msg, "gbees initialization");
        s->started = 1;
    }
    int period = s->next_period, k = s->next_k;
    double target = snapshot_time(s, period, k);
    if (s->desc.t_end > 0.0 && target >= s->desc.t_end) {
        target = s->desc.t_end;
        s->final_due = 1;
    }
    if (k == 0 && period > 0 && !s->final_due) {
        /* the period starts with the measurement update (once: the
         * snapshot below moves the schedule on) */
        if (s->desc.update) {
            double inv[DK_GBEES_MAX_DIM * DK_GBEES_MAX_DIM];
            spd_inverse(s->meas[period].cov, s->meas_dim, inv);
            if ((st = impl->ops->update(impl->plan, s->meas[period].mean, inv, s->meas_dim, &msg)) != DK_OK)
                return dk_fail_msg(plan->ctx, st, &msg, "gbees measurement update");
        }
    } else {
        if ((st = impl->ops->advance(impl->plan, target, max_steps, &msg)) != DK_OK)
            return dk_fail_msg(plan->ctx, st, &msg, "gbees time marching");
        dk_gbees_stats stats;
        impl->ops->stats(impl->plan, &stats);
        if (stats.t < target) {
            s->final_due = 0;
            *event = DK_GBEES_PROGRESS;
            return DK_OK;
        }
    }
    if ((st = take_snapshot(plan, impl, period, k)) != DK_OK)
        return st;
    schedule_next(s);
    *event = DK_GBEES_SNAPSHOT;
    return DK_OK;
}

DK_API dk_status dk_gbees_run(dk_plan *plan, int max_steps, dk_gbees_event *event)
{
    gbees_impl *impl = impl_of(plan);
    if (!impl || !event)
        return dk_fail(plan ? plan->ctx : NULL, DK_ERR_INVALID_ARGUMENT, "dk_gbees_run: a gbees plan and event are required");
    dk_device_enter(plan->ctx);
    dk_status st = run(plan, impl, max_steps, event);
    dk_device_leave(plan->ctx);
    return st;
}

DK_API dk_status dk_gbees_snapshot_get(dk_plan *plan, dk_gbees_snapshot *snap)
{
    gbees_impl *impl = impl_of(plan);
    if (!impl || !snap)
        return dk_fail(plan ? plan->ctx : NULL, DK_ERR_INVALID_ARGUMENT, "dk_gbees_snapshot_get: a gbees plan and snap are required");
    if (!impl->state->snap.data)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "dk_gbees_snapshot_get: no snapshot was reported yet");
    *snap = impl->state->snap;
    return DK_OK;
}

DK_API dk_status dk_gbees_stats_get(const dk_plan *plan, dk_gbees_stats *stats)
{
    gbees_impl *impl = impl_of(plan);
    if (!impl || !stats)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "dk_gbees_stats_get: a gbees plan and stats are required");
    memset(stats, 0, sizeof *stats);
    if (impl->state->started) {
        dk_device_enter(plan->ctx);
        impl->ops->stats(impl->plan, stats);
        dk_device_leave(plan->ctx);
    }
    stats->period = impl->state->next_period < impl->state->nmeas ? impl->state->next_period : impl->state->nmeas - 1;
    return DK_OK;
}
