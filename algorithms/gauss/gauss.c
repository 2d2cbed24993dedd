/* gauss: parameter validation, the precomputation every backend shares, and
 * dispatch to the context's plugin. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gauss_internal.h"
#include "../../core/halo.h"

DK_API void dk_gauss_desc_init(dk_gauss_desc *desc)
{
    if (!desc)
        return;
    memset(desc, 0, sizeof *desc);
    desc->dtype = DK_F32;
    desc->K = 4;
    desc->boundary = DK_BOUNDARY_REFLECT;
    desc->mode = DK_GAUSS_EXACT;
    desc->overlap = 5;
    desc->blocks = 3072;
    desc->method = DK_GAUSS_DERICHE;
    desc->order_poles = 5;
    desc->cval = 0.0;
}

DK_API size_t dk_gauss_window_halo(const dk_gauss_desc *d, int axis)
{
    if (!d || axis < 0 || axis >= d->ndim || axis >= DK_MAX_DIMS || !(d->axes & (1u << axis)))
        return 0;
    if (d->method == DK_GAUSS_RF)
        return d->K >= 1 ? dk_gauss_exact_halo(dk_gauss_alpha(d->sigma[axis], d->K), d->K, d->dtype) : 0;
    dk_gauss_iir iir;
    size_t reach = 0;
    if (dk_gauss_iir_make(d->method, d->order_poles, d->order[axis], d->sigma[axis], d->dtype, &iir,
                          &reach) != DK_OK)
        return 0;
    return reach;
}

DK_API const char *dk_gauss_method_name(dk_gauss_method method)
{
    static const char *const names[] = {"rf", "deriche", "vyv"};
    return (unsigned)method < 3 ? names[method] : "?";
}

DK_API const char *dk_gauss_boundary_name(dk_boundary boundary)
{
    static const char *const names[DK_BOUNDARY_COUNT] = {"zero", "constant", "reflect", "mirror",
                                                         "nearest", "wrap", "cval"};
    return (unsigned)boundary < DK_BOUNDARY_COUNT ? names[boundary] : "?";
}

/* 1 + E - sqrt(E(E+2)) written as 1 / (1 + E + sqrt(E(E+2))), the same
 * number without the cancellation: a tiny sigma (E overflowing) gives 0,
 * the identity filter, instead of NaN. */
DK_API double dk_gauss_alpha(double sigma, int K)
{
    double E = (double)K / (sigma * sigma);
    if (isinf(E))
        return 0.0;
    return 1.0 / (1.0 + E + sqrt(E * (E + 2.0)));
}

/* A bound on the two-sided tail beyond d of the K-iterated response, which
 * is a probability distribution: one pass pair has the moment generating
 * function beta^2 / ((1 - alpha e^t)(1 - alpha e^-t)) for alpha e^t < 1, and
 * Chernoff gives P(|X| >= d) <= 2 min_t M(t)^K e^(-t d). It costs the same
 * for any K and sigma; the log is minimized by golden-section search (it is
 * convex in t). */
static double chernoff_tail(double alpha, int K, double d)
{
    double beta = 1.0 - alpha, lo = 0.0, hi = -log(alpha);
    double best = 0.0;
    for (int it = 0; it < 200; it++) {
        double t1 = hi - (hi - lo) * 0.6180339887498949, t2 = lo + (hi - lo) * 0.6180339887498949;
        double f1 = K * (2.0 * log(beta) - log1p(-alpha * exp(t1)) - log1p(-alpha * exp(-t1))) - t1 * d;
        double f2 = K * (2.0 * log(beta) - log1p(-alpha * exp(t2)) - log1p(-alpha * exp(-t2))) - t2 * d;
        if (!isfinite(f1) || f1 > f2) {
            lo = t1;
            best = f2;
        } else {
            hi = t2;
            best = f1;
        }
    }
    return 2.0 * exp(best < 0.0 ? best : 0.0);
}

/* The least d whose Chernoff tail is at most limit. */
static size_t chernoff_halo(double alpha, int K, double limit)
{
    size_t hi = 1;
    while (hi < ((size_t)1 << 26) && chernoff_tail(alpha, K, (double)hi) > limit)
        hi *= 2;
    size_t lo = hi / 2;
    while (lo + 1 < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (chernoff_tail(alpha, K, (double)mid) > limit)
            lo = mid;
        else
            hi = mid;
    }
    return hi;
}

/* The K-iterated response to a unit impulse, in double, on 2m+1 points. */
static void impulse_response(double alpha, int K, size_t m, double *r)
{
    size_t n = 2 * m + 1;
    double beta = 1.0 - alpha;
    memset(r, 0, n * sizeof *r);
    r[m] = 1.0;
    for (int k = 0; k < K; k++) {
        double p = 0.0;
        for (size_t i = 0; i < n; i++)
            r[i] = p = beta * r[i] + alpha * p;
        double s = 0.0;
        for (size_t i = n; i-- > 0;)
            r[i] = s = beta * r[i] + alpha * s;
    }
}

/* A window's artificial end starts each of the 2K passes from a state that
 * is off by at most about 2 max|x|; in the first pass that error decays as
 * alpha^d = (beta alpha^d) / beta, the forward impulse response over beta,
 * and later passes only smooth it. So the error d values inside is bounded
 * by 2K * 2 max|x| / beta times the K-iterated response's tail beyond d.
 * The halo is the least d that puts this under a quarter of the dtype's
 * rounding unit: then windows are invisible at rounding. The tail is read
 * off the response itself while that costs at most HALO_WORK passes over
 * points; past that (huge K or sigma) from the Chernoff bound, which is
 * never smaller, so the plan's cost stays bounded whatever the parameters. */
#define HALO_WORK 2e8
DK_API size_t dk_gauss_exact_halo(double alpha, int K, dk_dtype dtype)
{
    double eps = dtype == DK_F64 ? 0x1p-53 : 0x1p-24;
    double beta = 1.0 - alpha;
    double limit = 0.25 * eps * beta / (4.0 * K);
    if (alpha <= 0.0)
        return 1; /* the identity filter reaches no neighbour */
    for (size_t m = 64; m < ((size_t)1 << 26); m *= 2) {
        if ((double)K * (double)(2 * m + 1) > HALO_WORK)
            return chernoff_halo(alpha, K, limit);
        double *r = malloc((2 * m + 1) * sizeof *r);
        if (!r)
            return m;
        impulse_response(alpha, K, m, r);
        /* an array narrower than the kernel loses its mass through the zero
         * ends and would look like a short tail: widen it first */
        double mass = 0.0;
        for (size_t i = 0; i < 2 * m + 1; i++)
            mass += r[i];
        if (mass < 0.999) {
            free(r);
            continue;
        }
        double tail = 0.0;
        size_t d = m;
        /* walk inward from the ends while the two-sided tail stays small */
        while (d > 0) {
            double add = r[m - d] + r[m + d];
            if (tail + add > limit)
                break;
            tail += add;
            d--;
        }
        free(r);
        if (d < m - 1) /* the tail was resolved inside the array */
            return d + 1;
    }
    return (size_t)1 << 26;
}

dk_status dk_gauss_setup_make(const dk_gauss_desc *desc, dk_gauss_setup *setup)
{
    if (!desc || !setup)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "gauss: the description must not be NULL");
    const dk_gauss_desc *d = desc;
    if (d->dtype != DK_F32 && d->dtype != DK_F64)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "gauss: dtype %d is neither f32 nor f64",
                       (int)d->dtype);
    if (d->ndim < 1 || d->ndim > DK_MAX_DIMS)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "gauss: ndim is %d; 1, 2 or 3 axes are supported",
                       d->ndim);
    size_t count = 1;
    for (int a = 0; a < d->ndim; a++) {
        if (d->shape[a] == 0)
            return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "gauss: shape[%d] is 0; every axis needs a size >= 1", a);
        if (count > SIZE_MAX / 8 / d->shape[a])
            return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "gauss: the field's size overflows");
        count *= d->shape[a];
    }
    if (d->axes == 0)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "gauss: no axis selected (axes is 0)");
    if (d->axes >> d->ndim)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                       "gauss: axes 0x%x names an axis beyond the field's %d axes", d->axes, d->ndim);
    for (int a = 0; a < d->ndim; a++) {
        if ((d->axes & (1u << a)) && !(isfinite(d->sigma[a]) && d->sigma[a] > 0))
            return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                           "gauss: sigma for axis %d is %g; it must be a finite number > 0", a,
                           d->sigma[a]);
        if ((d->axes & (1u << a)) && d->sigma[a] > DK_GAUSS_MAX_SIGMA)
            return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                           "gauss: sigma for axis %d is %g grid units; at most %g is supported (the filter's "
                           "coefficient would round to 1)", a, d->sigma[a], DK_GAUSS_MAX_SIGMA);
    }
    if (d->K < 1 || d->K > 1000000)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "gauss: K is %d; it must be between 1 and 1000000", d->K);
    if ((unsigned)d->boundary >= DK_BOUNDARY_COUNT)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                       "gauss: boundary %d is none of zero, constant, reflect, mirror, nearest, wrap, cval",
                       (int)d->boundary);
    if (d->boundary == DK_BOUNDARY_CVAL && !isfinite(d->cval))
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "gauss: cval is %g; it must be a finite number",
                       d->cval);
    if ((unsigned)d->method > DK_GAUSS_VYV)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "gauss: method %d is none of rf, deriche, vyv",
                       (int)d->method);
    if (d->method == DK_GAUSS_VYV && (d->order_poles < 3 || d->order_poles > 5))
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                       "gauss: vyv has %d poles; van Vliet, Young and Verbeek give poles for 3, 4 or 5",
                       d->order_poles);
    for (int a = 0; a < d->ndim; a++) {
        if (!(d->axes & (1u << a)))
            continue;
        if (d->order[a] < 0 || d->order[a] > 2)
            return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                           "gauss: order for axis %d is %d; it must be 0 (smooth), 1 or 2 (derivatives)", a,
                           d->order[a]);
        if (d->order[a] != 0 && d->method == DK_GAUSS_RF)
            return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                           "gauss: order %d on axis %d needs method deriche or vyv; rf only smooths",
                           d->order[a], a);
    }
    if (d->method != DK_GAUSS_RF) {
        if (d->mode != DK_GAUSS_EXACT)
            return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                           "gauss: overlap mode is the rf paper's block decomposition; %s runs in exact mode only "
                           "(overlap mode needs method rf)",
                           dk_gauss_method_name(d->method));
        for (int a = 0; a < d->ndim; a++)
            if ((d->axes & (1u << a)) && (d->sigma[a] < DK_GAUSS_IIR_MIN_SIGMA ||
                                          d->sigma[a] > DK_GAUSS_IIR_MAX_SIGMA))
                return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                               "gauss: sigma for axis %d is %g; %s supports %g to %g grid units (its poles "
                               "come too near 1 beyond, and too far from the Gaussian below; use rf)",
                               a, d->sigma[a], dk_gauss_method_name(d->method), DK_GAUSS_IIR_MIN_SIGMA,
                               DK_GAUSS_IIR_MAX_SIGMA);
    }
    if (d->mode != DK_GAUSS_EXACT && d->mode != DK_GAUSS_OVERLAP)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "gauss: mode %d is neither exact nor overlap",
                       (int)d->mode);
    if (d->mode == DK_GAUSS_OVERLAP && d->boundary != DK_BOUNDARY_ZERO && d->boundary != DK_BOUNDARY_CONSTANT)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                       "gauss: overlap mode filters each block with the RF paper's zero or constant rule; "
                       "boundary %s needs exact mode", dk_gauss_boundary_name(d->boundary));
    if (d->mode == DK_GAUSS_OVERLAP && d->blocks < 1)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "gauss: overlap mode needs blocks >= 1");

    memset(setup, 0, sizeof *setup);
    setup->desc = *d;
    setup->count = count;
    for (int a = 0; a < d->ndim; a++) {
        if (!(d->axes & (1u << a)))
            continue;
        if (d->method != DK_GAUSS_RF) {
            dk_status st = dk_gauss_iir_make(d->method, d->order_poles, d->order[a], d->sigma[a],
                                             d->dtype, &setup->iir[a], &setup->reach[a]);
            if (st != DK_OK)
                return st;
            setup->extended[a] = 1;
            setup->halo[a] = setup->reach[a] < d->shape[a] ? setup->reach[a] : d->shape[a];
            continue;
        }
        setup->alpha[a] = dk_gauss_alpha(d->sigma[a], d->K);
        setup->halo[a] = dk_gauss_exact_halo(setup->alpha[a], d->K, d->dtype);
        if (d->boundary != DK_BOUNDARY_ZERO && d->boundary != DK_BOUNDARY_CONSTANT) {
            /* scipy's modes: the window reaches past the ends into the
             * continued input, far enough that its zero starts are invisible */
            setup->extended[a] = 1;
            setup->reach[a] = setup->halo[a];
        }
        if (setup->halo[a] > d->shape[a])
            setup->halo[a] = d->shape[a]; /* a window as long as the line is exact */
    }
    return DK_OK;
}

DK_API const char *const *dk_gauss_variants(const dk_context *ctx)
{
    if (!ctx || !ctx->backend->plugin->gauss)
        return NULL;
    return ctx->backend->plugin->gauss->variants;
}

static dk_status plan_create(dk_context *ctx, const dk_gauss_desc *desc, const size_t *halo_max, dk_plan **plan);

DK_API dk_status dk_gauss_plan_create(dk_context *ctx, const dk_gauss_desc *desc, dk_plan **plan)
{
    return plan_create(ctx, desc, NULL, plan);
}

DK_API int dk_gauss_halo_offered(const dk_context *ctx, const dk_gauss_desc *desc)
{
    const dk_plugin *pl = ctx && desc ? ctx->backend->plugin : NULL;
    return pl && pl->gauss && pl->ops_generation >= 1 && pl->gauss->execute_halo &&
           desc->mode == DK_GAUSS_EXACT && desc->method == DK_GAUSS_RF &&
           (desc->boundary == DK_BOUNDARY_ZERO || desc->boundary == DK_BOUNDARY_CONSTANT);
}

DK_API dk_status dk_gauss_plan_create_halo(dk_context *ctx, const dk_gauss_desc *desc,
                                           const size_t halo_max[DK_MAX_DIMS], dk_plan **plan)
{
    if (plan)
        *plan = NULL;
    if (!ctx || !desc || !halo_max || !plan)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "dk_gauss_plan_create_halo: no argument may be NULL");
    if (!dk_gauss_halo_offered(ctx, desc))
        return dk_fail(ctx, DK_ERR_NOT_IMPLEMENTED,
                       "gauss: backend '%s' does not filter this description with halos (exact mode, rf, the zero "
                       "or constant boundary, and a plugin with execute_halo are needed)",
                       ctx->backend->plugin->name);
    int axes = 0;
    for (int a = 0; a < desc->ndim && a < DK_MAX_DIMS; a++)
        axes += (desc->axes >> a) & 1u;
    if (axes != 1 || desc->axes >> desc->ndim)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "dk_gauss_plan_create_halo: the plan must filter one axis");
    return plan_create(ctx, desc, halo_max, plan);
}

static dk_status plan_create(dk_context *ctx, const dk_gauss_desc *desc, const size_t *halo_max, dk_plan **plan)
{
    if (!ctx || !plan)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "dk_gauss_plan_create: ctx and plan must not be NULL");
    *plan = NULL;
    const dk_gauss_ops *ops = dk_context_ops(ctx, DK_ALGO_GAUSS);
    if (!ops)
        return DK_ERR_NOT_IMPLEMENTED;
    dk_gauss_setup setup;
    dk_status st = dk_gauss_setup_make(desc, &setup);
    if (st != DK_OK)
        return dk_fail(ctx, st, "%s", dk_last_error(NULL));
    unsigned has = ctx->backend->plugin->gauss_features;
    if (desc->method != DK_GAUSS_RF && !(has & DK_GAUSS_FEATURE_RECURSIVE))
        return dk_fail(ctx, DK_ERR_NOT_IMPLEMENTED,
                       "gauss: backend '%s' does not implement method %s (only rf); `dakit info` lists the backends",
                       ctx->backend->plugin->name, dk_gauss_method_name(desc->method));
    if (desc->boundary >= DK_BOUNDARY_REFLECT && !(has & DK_GAUSS_FEATURE_MODES))
        return dk_fail(ctx, DK_ERR_NOT_IMPLEMENTED,
                       "gauss: backend '%s' does not implement boundary %s (only zero and constant); `dakit info` "
                       "lists the backends", ctx->backend->plugin->name, dk_gauss_boundary_name(desc->boundary));
    if (!(setup.desc.variant = dk_pick_variant(ctx, DK_ALGO_GAUSS, ops->variants, desc->variant)))
        return DK_ERR_NOT_IMPLEMENTED;
    for (int a = 0; halo_max && a < desc->ndim; a++)
        setup.halo_max[a] = (desc->axes & (1u << a)) ? halo_max[a] : 0;
    dk_plan *p = calloc(1, sizeof *p);
    if (!p)
        return dk_fail(ctx, DK_ERR_OUT_OF_MEMORY, "gauss: out of host memory");
    p->ctx = ctx;
    p->algo = DK_ALGO_GAUSS;
    p->impl_destroy = ops->plan_destroy;
    dk_gauss_state *state = malloc(sizeof *state);
    if (!state) {
        free(p);
        return dk_fail(ctx, DK_ERR_OUT_OF_MEMORY, "gauss: out of host memory");
    }
    state->setup = setup;
    state->nan = DK_GAUSS_NAN_ERROR;
    p->state = state;
    dk_msg msg = {{0}};
    dk_device_enter(ctx);
    st = ops->plan_create(ctx->device, &state->setup, &p->impl, &msg);
    dk_device_leave(ctx);
    if (st != DK_OK) {
        p->impl = NULL;
        dk_plan_destroy(p);
        return dk_fail_msg(ctx, st, &msg, "gauss: the backend could not make the plan");
    }
    *plan = p;
    return DK_OK;
}

static dk_status check_plan(dk_plan *plan, const char *what)
{
    if (!plan)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "%s: plan must not be NULL", what);
    if (plan->algo != DK_ALGO_GAUSS)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s: the plan is a %s plan", what,
                       dk_algo_name(plan->algo));
    return DK_OK;
}

/* The plugin's execute on two buffer handles, behind the device lock. */
static dk_status run_plugin(dk_plan *plan, const void *in, void *out)
{
    dk_msg msg = {{0}};
    const dk_gauss_ops *ops = plan->ctx->backend->plugin->gauss;
    dk_device_enter(plan->ctx);
    dk_status st = ops->execute(plan->impl, in, out, &msg);
    dk_device_leave(plan->ctx);
    return st == DK_OK ? DK_OK : dk_fail_msg(plan->ctx, st, &msg, "gauss: execution failed");
}

DK_API dk_status dk_gauss_plan_set_nan(dk_plan *plan, dk_gauss_nan policy)
{
    dk_status st = check_plan(plan, "dk_gauss_plan_set_nan");
    if (st != DK_OK)
        return st;
    if (policy != DK_GAUSS_NAN_ERROR && policy != DK_GAUSS_NAN_PROPAGATE && policy != DK_GAUSS_NAN_IGNORE)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT,
                       "dk_gauss_plan_set_nan: policy %d is not one of error (0), propagate (1), ignore (2)",
                       (int)policy);
    int axis = dk_gauss_derivative_axis(&((dk_gauss_state *)plan->state)->setup.desc);
    if (policy == DK_GAUSS_NAN_IGNORE && axis >= 0)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT,
                       "dk_gauss_plan_set_nan: nan policy ignore normalizes a smoothing; axis %d takes "
                       "derivative order %d, which it cannot normalize", axis,
                       ((dk_gauss_state *)plan->state)->setup.desc.order[axis]);
    ((dk_gauss_state *)plan->state)->nan = policy;
    return DK_OK;
}

DK_API dk_status dk_gauss_execute(dk_plan *plan, const dk_buffer *in, dk_buffer *out)
{
    dk_status st = check_plan(plan, "dk_gauss_execute");
    if (st != DK_OK)
        return st;
    const dk_gauss_setup *setup = plan->state;
    if (((const dk_gauss_state *)plan->state)->nan == DK_GAUSS_NAN_IGNORE)
        return dk_fail(plan->ctx, DK_ERR_NOT_IMPLEMENTED,
                       "dk_gauss_execute: nan policy ignore needs the data in host memory "
                       "(dk_gauss_execute_host); on device buffers NaN propagates");
    size_t bytes = setup->count * dk_dtype_size(setup->desc.dtype);
    if (!in || !out)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "dk_gauss_execute: buffers must not be NULL");
    if (in->ctx != plan->ctx || out->ctx != plan->ctx)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT,
                       "dk_gauss_execute: a buffer belongs to another context than the plan");
    if (in->bytes < bytes || out->bytes < bytes)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT,
                       "dk_gauss_execute: the field needs %zu bytes, the buffers hold %zu and %zu", bytes,
                       in->bytes, out->bytes);
    return run_plugin(plan, in->handle, out->handle);
}

/* One pass of the plan over host memory: in place on the caller's own
 * where the backend's buffers are host memory (the cpu plugin; out of place
 * when in and out differ, so no copy and no in-place-only path), else
 * through its staging buffer. */
static dk_status staged(dk_plan *plan, const void *in, void *out)
{
    const dk_gauss_setup *setup = plan->state;
    size_t bytes = setup->count * dk_dtype_size(setup->desc.dtype);
    dk_status st;
    dk_native native;
    dk_buffer *bin = NULL, *bout = NULL;
    if (bytes > 0 && dk_context_native(plan->ctx, &native) == DK_OK && native.memory == DK_MEMORY_HOST &&
        dk_buffer_wrap(plan->ctx, DK_MEMORY_HOST, (void *)in, bytes, &bin) == DK_OK) {
        /* the plugin reads in and writes only out (or its own scratch) */
        st = in == out ? DK_OK : dk_buffer_wrap(plan->ctx, DK_MEMORY_HOST, out, bytes, &bout);
        if (st == DK_OK)
            st = run_plugin(plan, bin->handle, (bout ? bout : bin)->handle);
        dk_buffer_destroy(bout);
        dk_buffer_destroy(bin);
        return st;
    }
    if (!plan->staging && (st = dk_buffer_create(plan->ctx, bytes, &plan->staging)) != DK_OK)
        return st;
    if ((st = dk_buffer_write(plan->staging, in, bytes)) != DK_OK ||
        (st = run_plugin(plan, plan->staging->handle, plan->staging->handle)) != DK_OK)
        return st;
    return dk_buffer_read(plan->staging, out, bytes);
}

static dk_status staged_in_place(void *plan, void *field)
{
    return staged(plan, field, field);
}

DK_API dk_status dk_gauss_execute_host(dk_plan *plan, const void *in, void *out)
{
    dk_status st = check_plan(plan, "dk_gauss_execute_host");
    if (st != DK_OK)
        return st;
    if (!in || !out)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "dk_gauss_execute_host: in and out must not be NULL");
    const dk_gauss_state *state = plan->state;
    switch (state->nan) {
    case DK_GAUSS_NAN_IGNORE:
        return dk_gauss_smooth_missing(plan->ctx, &state->setup, in, out, staged_in_place, plan);
    case DK_GAUSS_NAN_ERROR:
        if ((st = dk_gauss_refuse_nan(plan->ctx, &state->setup, in, "dk_gauss_execute_host")) != DK_OK)
            return st;
        break;
    default:
        break;
    }
    return staged(plan, in, out);
}

DK_API dk_status dk_gauss_execute_halo(dk_plan *plan, const dk_buffer *in, dk_buffer *out, dk_gauss_halo_side lower,
                                       dk_gauss_halo_side upper)
{
    const char *what = "dk_gauss_execute_halo";
    dk_status st = check_plan(plan, what);
    if (st != DK_OK)
        return st;
    const dk_gauss_setup *setup = plan->state;
    const dk_gauss_desc *d = &setup->desc;
    int axis = 0;
    while (axis < d->ndim && !(d->axes & (1u << axis)))
        axis++;
    size_t es = dk_dtype_size(d->dtype), bytes = setup->count * es;
    if (!in || !out || in == out || in->ctx != plan->ctx || out->ctx != plan->ctx || in->bytes < bytes ||
        out->bytes < bytes)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT,
                       "%s: in and out must be two distinct buffers of the plan's context holding %zu bytes", what,
                       bytes);
    dk_gauss_halo_side side[2] = {lower, upper};
    for (int k = 0; k < 2; k++) {
        if (!side[k].count)
            continue;
        size_t need = (setup->count / d->shape[axis] * side[k].count + side[k].offset) * es;
        if (side[k].count > setup->halo_max[axis] || !side[k].buffer || side[k].buffer->ctx != plan->ctx ||
            side[k].buffer->bytes < need)
            return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT,
                           "%s: the %s halo (%zu values a line, at most %zu) needs a buffer of the plan's context "
                           "holding %zu bytes", what, k ? "upper" : "lower", side[k].count, setup->halo_max[axis],
                           need);
    }
    dk_gauss_halo h = {axis,
                       lower.count ? lower.buffer->handle : NULL,
                       upper.count ? upper.buffer->handle : NULL,
                       lower.offset, upper.offset, lower.count, upper.count};
    const dk_gauss_ops *ops = plan->ctx->backend->plugin->gauss;
    dk_msg msg = {{0}};
    dk_device_enter(plan->ctx);
    st = ops->execute_halo(plan->impl, &h, in->handle, out->handle, &msg);
    dk_device_leave(plan->ctx);
    return st == DK_OK ? DK_OK : dk_fail_msg(plan->ctx, st, &msg, "gauss: execution with halos failed");
}
