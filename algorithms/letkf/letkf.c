/* letkf: parameter validation, the observation buckets, dispatch to the
 * context's plugin, and the host helpers (departures, a sparse linear H). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/enkf.h>

#include "letkf_internal.h"

DK_API void dk_letkf_desc_init(dk_letkf_desc *desc)
{
    if (!desc)
        return;
    memset(desc, 0, sizeof *desc);
    desc->dtype = DK_F64;
    desc->metric = DK_LETKF_CARTESIAN;
    desc->inflation = 1.0;
}

#define BAD(...) dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "letkf: " __VA_ARGS__)

static dk_status check_desc(const dk_letkf_desc *d)
{
    if (!d)
        return BAD("the description must not be NULL");
    if (d->dtype != DK_F32 && d->dtype != DK_F64)
        return BAD("dtype %d is neither float32 nor float64", (int)d->dtype);
    if (d->n < 1)
        return BAD("n is 0; there must be at least one grid point");
    if (d->members < 2 || d->members > DK_LETKF_MAX_MEMBERS)
        return BAD("members is %zu; it must be 2 .. %d", d->members, DK_LETKF_MAX_MEMBERS);
    if (d->n > ((size_t)1 << 46) / d->members)
        return BAD("n * members = %zu * %zu is too large", d->n, d->members);
    if (d->m < 1)
        return BAD("m is 0; an analysis needs at least one observation");
    if (d->m > (size_t)INT32_MAX || d->m > ((size_t)1 << 46) / d->members)
        return BAD("m is %zu; at most %d observations (and m * members below 2^46)", d->m, INT32_MAX);
    if (d->metric != DK_LETKF_CARTESIAN && d->metric != DK_LETKF_SPHERE)
        return BAD("metric %d is neither cartesian (0) nor sphere (1)", (int)d->metric);
    if (d->ncoords < 1 || d->ncoords > DK_LETKF_MAX_COORDS)
        return BAD("ncoords is %d; the coordinates have 1 to %d columns", d->ncoords, DK_LETKF_MAX_COORDS);
    if (!(d->radius > 0) || !isfinite(d->radius))
        return BAD("radius is %g; it must be a finite distance > 0", d->radius);
    if (!(d->vertical_radius >= 0) || !isfinite(d->vertical_radius))
        return BAD("vertical_radius is %g; it must be finite and >= 0 (0: no vertical coordinate)",
                   d->vertical_radius);
    int vertical = d->vertical_radius > 0;
    if (d->metric == DK_LETKF_SPHERE) {
        if (d->ncoords != 2 + vertical)
            return BAD("on the sphere the coordinates are lon, lat%s (%d columns), not %d columns",
                       vertical ? " and the vertical" : " (and a vertical with vertical_radius > 0)", 2 + vertical,
                       d->ncoords);
        for (int a = 0; a < DK_LETKF_MAX_COORDS; a++)
            if (d->period[a] != 0)
                return BAD("period applies to cartesian coordinates; on the sphere longitude wraps by itself");
    } else {
        if (vertical && d->ncoords < 2)
            return BAD("a vertical coordinate (vertical_radius > 0) is the last of at least 2 columns; ncoords is "
                       "%d",
                       d->ncoords);
        for (int a = 0; a < DK_LETKF_MAX_COORDS; a++) {
            if (!(d->period[a] >= 0) || !isfinite(d->period[a]))
                return BAD("period[%d] is %g; it must be finite and >= 0 (0: not periodic)", a, d->period[a]);
            if (a >= d->ncoords && d->period[a] != 0)
                return BAD("period[%d] is %g but the coordinates have only %d columns", a, d->period[a],
                           d->ncoords);
        }
    }
    if (!(d->inflation > 0) || !isfinite(d->inflation))
        return BAD("inflation is %g; it must be a finite factor > 0 (1: none)", d->inflation);
    if (!(d->rtpp >= 0 && d->rtpp <= 1))
        return BAD("rtpp is %g; it must lie in [0, 1]", d->rtpp);
    if (!(d->rtps >= 0 && d->rtps <= 1))
        return BAD("rtps is %g; it must lie in [0, 1]", d->rtps);
    if (d->rtpp > 0 && d->rtps > 0)
        return BAD("rtpp (%g) and rtps (%g) are both set; choose one relaxation", d->rtpp, d->rtps);
    if (!d->grid_coords || !d->obs_coords)
        return BAD("grid_coords and obs_coords must not be NULL");
    return DK_OK;
}

static dk_status check_coords(const dk_letkf_desc *d, const double *c, size_t count, const char *what)
{
    for (size_t i = 0; i < count; i++)
        for (int a = 0; a < d->ncoords; a++) {
            double v = c[i * (size_t)d->ncoords + (size_t)a];
            if (!isfinite(v))
                return BAD("%s coordinate %d of %s %zu is %g; coordinates must be finite", what, a,
                           what[0] == 'g' ? "point" : "observation", i, v);
            if (d->metric == DK_LETKF_SPHERE && a == 1 && !(v >= -90 && v <= 90))
                return BAD("%s latitude of %s %zu is %g; it must lie in [-90, 90] degrees", what,
                           what[0] == 'g' ? "point" : "observation", i, v);
        }
    return DK_OK;
}

typedef struct keyed {
    uint64_t key;
    int32_t index;
} keyed;

static int by_key(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* The buckets' shape for observations whose positions span [lo[a], hi[a]]
 * along each non-periodic component a. */
static void shape_buckets(dk_letkf_geometry *g, const double *lo, const double *hi)
{
    const double margin = 1.0 + 1e-9; /* a neighbour within the radius never falls two cells away by rounding */
    for (int a = 0; a < g->dims; a++) {
        double reach;
        if (g->vertical && a == g->hdims)
            reach = g->vradius;
        else if (g->metric == DK_LETKF_SPHERE) {
            double half = g->radius / (2.0 * DK_LETKF_SPHERE_KM);
            reach = 2.0 * DK_LETKF_SPHERE_KM * sin(half < 1.5707963267948966 ? half : 1.5707963267948966);
        } else
            reach = g->radius;
        reach *= margin;
        if (g->period[a] > 0) {
            double n = floor(g->period[a] / reach);
            n = n < 1 ? 1 : n > DK_LETKF_MAX_CELLS ? DK_LETKF_MAX_CELLS : n;
            g->ncell[a] = (int)n;
            g->cell[a] = g->period[a] / n;
            g->origin[a] = 0;
            continue;
        }
        double extent = hi[a] - lo[a], cell = reach;
        if (extent / cell > DK_LETKF_MAX_CELLS - 2)
            cell = extent / (DK_LETKF_MAX_CELLS - 2);
        g->cell[a] = cell;
        g->origin[a] = lo[a];
        double n = floor(extent / cell) + 1;
        g->ncell[a] = (int)(n > DK_LETKF_MAX_CELLS ? DK_LETKF_MAX_CELLS : n);
    }
}

/* The metric part of the geometry (no buckets yet) of a checked description. */
static void geometry_of(const dk_letkf_desc *d, dk_letkf_geometry *g)
{
    memset(g, 0, sizeof *g);
    g->metric = (int)d->metric;
    g->ncoords = d->ncoords;
    g->vertical = d->vertical_radius > 0;
    g->hdims = d->metric == DK_LETKF_SPHERE ? 3 : d->ncoords - g->vertical;
    g->dims = g->hdims + g->vertical;
    g->radius = d->radius;
    g->vradius = d->vertical_radius;
    if (d->metric == DK_LETKF_CARTESIAN)
        for (int a = 0; a < d->ncoords; a++)
            g->period[a] = d->period[a];
}

/* A given span: finite and lo <= hi along each non-periodic component. */
static dk_status check_span(const dk_letkf_geometry *g, const double *lo, const double *hi)
{
    for (int a = 0; a < g->dims; a++)
        if (g->period[a] == 0 && !(isfinite(lo[a]) && isfinite(hi[a]) && lo[a] <= hi[a]))
            return BAD("the buckets' span along position component %d is [%g, %g]; it must be finite with lo <= hi",
                       a, lo[a], hi[a]);
    return DK_OK;
}

DK_API dk_status dk_letkf_bucket_shape(const dk_letkf_desc *desc, const double *lo, const double *hi,
                                       dk_letkf_geometry *geo)
{
    if (!desc || !lo || !hi || !geo)
        return BAD("dk_letkf_bucket_shape: desc, lo, hi and geo must not be NULL");
    /* the description's shared fields, checked as a plan checks them */
    double zero[DK_LETKF_MAX_COORDS] = {0, 0, 0};
    dk_letkf_desc probe = *desc;
    probe.n = probe.m = 1;
    probe.grid_coords = probe.obs_coords = zero;
    dk_status st = check_desc(&probe);
    if (st != DK_OK)
        return st;
    dk_letkf_geometry g;
    geometry_of(desc, &g);
    if ((st = check_span(&g, lo, hi)) != DK_OK)
        return st;
    shape_buckets(&g, lo, hi);
    *geo = g;
    return DK_OK;
}

dk_status dk_letkf_setup_build(const dk_letkf_desc *desc, const double *span_lo, const double *span_hi,
                               dk_letkf_setup **out)
{
    dk_status st = check_desc(desc);
    if (st != DK_OK)
        return st;
    const dk_letkf_desc *d = desc;
    if ((st = check_coords(d, d->grid_coords, d->n, "grid")) != DK_OK ||
        (st = check_coords(d, d->obs_coords, d->m, "observation")) != DK_OK)
        return st;
    const size_t nc = (size_t)d->ncoords, m = d->m;
    /* one block: setup, grid and observation coordinates, obs_order, obs_pos, then the cells */
    size_t off_grid = (sizeof(dk_letkf_setup) + 63) & ~(size_t)63;
    size_t off_obsc = off_grid + d->n * nc * sizeof(double);
    size_t off_pos = off_obsc + m * nc * sizeof(double);
    size_t off_order = off_pos + m * DK_LETKF_POS * sizeof(double);
    size_t off_key = (off_order + m * sizeof(int32_t) + 7) & ~(size_t)7;
    size_t off_start = off_key + m * sizeof(uint64_t);
    size_t total = off_start + (m + 1) * sizeof(int32_t);
    char *block = malloc(total);
    keyed *keys = malloc(m * sizeof *keys);
    double *pos = malloc(m * DK_LETKF_POS * sizeof *pos);
    if (!block || !keys || !pos) {
        free(block), free(keys), free(pos);
        return dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "letkf: out of host memory for the plan's %zu bytes", total);
    }
    dk_letkf_setup *s = (dk_letkf_setup *)block;
    memset(s, 0, sizeof *s);
    s->desc = *d;
    double *grid = (double *)(block + off_grid), *obsc = (double *)(block + off_obsc);
    memcpy(grid, d->grid_coords, d->n * nc * sizeof(double));
    memcpy(obsc, d->obs_coords, m * nc * sizeof(double));
    s->desc.grid_coords = grid;
    s->desc.obs_coords = obsc;

    dk_letkf_geometry *g = &s->geo;
    geometry_of(d, g);
    for (size_t j = 0; j < m; j++)
        dk_letkf_position(g, obsc + j * nc, pos + j * DK_LETKF_POS);
    double lo[DK_LETKF_POS], hi[DK_LETKF_POS];
    for (int a = 0; a < DK_LETKF_POS; a++) {
        lo[a] = INFINITY, hi[a] = -INFINITY;
        for (size_t j = 0; j < m; j++) {
            double v = pos[j * DK_LETKF_POS + (size_t)a];
            lo[a] = v < lo[a] ? v : lo[a];
            hi[a] = v > hi[a] ? v : hi[a];
        }
    }
    if (span_lo) {
        /* another span (every rank's the same): the observations must lie inside it */
        st = check_span(g, span_lo, span_hi);
        for (int a = 0; st == DK_OK && a < g->dims; a++)
            if (g->period[a] == 0 && (lo[a] < span_lo[a] || hi[a] > span_hi[a]))
                st = BAD("the observations reach [%g, %g] along position component %d, outside the buckets' span "
                         "[%g, %g]",
                         lo[a], hi[a], a, span_lo[a], span_hi[a]);
        if (st != DK_OK) {
            free(block), free(keys), free(pos);
            return st;
        }
    }
    shape_buckets(g, span_lo ? span_lo : lo, span_lo ? span_hi : hi);
    for (size_t j = 0; j < m; j++) {
        int b[DK_LETKF_POS] = {0, 0, 0, 0};
        for (int a = 0; a < g->dims; a++)
            b[a] = dk_letkf_cell(g, a, pos[j * DK_LETKF_POS + (size_t)a]);
        keys[j].key = dk_letkf_cell_key(g, b);
        keys[j].index = (int32_t)j;
    }
    qsort(keys, m, sizeof *keys, by_key);
    int32_t *order = (int32_t *)(block + off_order);
    double *spos = (double *)(block + off_pos);
    uint64_t *ckey = (uint64_t *)(block + off_key);
    int32_t *cstart = (int32_t *)(block + off_start);
    size_t cells = 0;
    for (size_t j = 0; j < m; j++) {
        order[j] = keys[j].index;
        memcpy(spos + j * DK_LETKF_POS, pos + (size_t)keys[j].index * DK_LETKF_POS, DK_LETKF_POS * sizeof(double));
        if (j == 0 || keys[j].key != keys[j - 1].key) {
            ckey[cells] = keys[j].key;
            cstart[cells] = (int32_t)j;
            cells++;
        }
    }
    cstart[cells] = (int32_t)m;
    s->obs_order = order;
    s->obs_pos = spos;
    s->cell_key = ckey;
    s->cell_start = cstart;
    s->cells = cells;
    free(keys), free(pos);
    *out = s;
    return DK_OK;
}

dk_status dk_letkf_check_obs(size_t m, const double *yo, const double *r)
{
    if (!yo || !r)
        return BAD("yo and r must not be NULL");
    for (size_t j = 0; j < m; j++) {
        if (!isfinite(yo[j]))
            return BAD("observation %zu is %g; observations must be finite", j, yo[j]);
        if (!(r[j] > 0) || !isfinite(r[j]))
            return BAD("the error variance of observation %zu is %g; it must be finite and > 0", j, r[j]);
    }
    return DK_OK;
}

dk_status dk_letkf_check_finite(dk_dtype dtype, const void *x, size_t count, const char *what)
{
    for (size_t i = 0; i < count; i++) {
        double v = dtype == DK_F32 ? (double)((const float *)x)[i] : ((const double *)x)[i];
        if (!isfinite(v))
            return BAD("value %zu of %s is %g; every value must be finite", i, what, v);
    }
    return DK_OK;
}

DK_API const char *const *dk_letkf_variants(const dk_context *ctx)
{
    if (!ctx || !ctx->backend->plugin->letkf)
        return NULL;
    return ctx->backend->plugin->letkf->variants;
}

DK_API dk_status dk_letkf_plan_create(dk_context *ctx, const dk_letkf_desc *desc, dk_plan **plan)
{
    return dk_letkf_plan_create_span(ctx, desc, NULL, NULL, plan);
}

DK_API dk_status dk_letkf_plan_create_span(dk_context *ctx, const dk_letkf_desc *desc, const double *lo,
                                           const double *hi, dk_plan **plan)
{
    if (!ctx || !plan)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "dk_letkf_plan_create: ctx and plan must not be NULL");
    if (!lo != !hi)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "dk_letkf_plan_create_span: give both lo and hi, or neither");
    *plan = NULL;
    const dk_letkf_ops *ops = dk_context_ops(ctx, DK_ALGO_LETKF);
    if (!ops)
        return DK_ERR_NOT_IMPLEMENTED;
    dk_letkf_setup *setup = NULL;
    dk_status st = dk_letkf_setup_build(desc, lo, hi, &setup);
    if (st != DK_OK)
        return dk_fail(ctx, st, "%s", dk_last_error(NULL));
    if (!(setup->desc.variant = dk_pick_variant(ctx, DK_ALGO_LETKF, ops->variants, desc->variant))) {
        free(setup);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    dk_plan *p = calloc(1, sizeof *p);
    if (!p) {
        free(setup);
        return dk_fail(ctx, DK_ERR_OUT_OF_MEMORY, "letkf: out of host memory");
    }
    p->ctx = ctx;
    p->algo = DK_ALGO_LETKF;
    p->impl_destroy = ops->plan_destroy;
    p->state = setup;
    /* yo then r, written on every execute */
    if ((st = dk_buffer_create(ctx, 2 * setup->desc.m * sizeof(double), &p->staging)) != DK_OK) {
        dk_plan_destroy(p);
        return st;
    }
    dk_msg msg = {{0}};
    dk_device_enter(ctx);
    st = ops->plan_create(ctx->device, setup, &p->impl, &msg);
    dk_device_leave(ctx);
    if (st != DK_OK) {
        p->impl = NULL;
        dk_plan_destroy(p);
        return dk_fail_msg(ctx, st, &msg, "letkf: the backend could not make the plan");
    }
    *plan = p;
    return DK_OK;
}

static dk_status check_buffer(dk_plan *plan, const dk_buffer *b, size_t bytes, const char *what)
{
    if (!b)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "dk_letkf_execute: the %s buffer must not be NULL", what);
    if (b->ctx != plan->ctx)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT,
                       "dk_letkf_execute: the %s buffer belongs to another context than the plan", what);
    if (b->bytes < bytes)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT,
                       "dk_letkf_execute: the %s buffer holds %zu bytes; it needs %zu", what, b->bytes, bytes);
    return DK_OK;
}

static const dk_letkf_setup *plan_setup(dk_plan *plan, const char *what)
{
    if (!plan) {
        dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "%s: plan must not be NULL", what);
        return NULL;
    }
    if (plan->algo != DK_ALGO_LETKF) {
        dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s: the plan is a %s plan", what, dk_algo_name(plan->algo));
        return NULL;
    }
    return plan->state;
}

DK_API dk_status dk_letkf_execute(dk_plan *plan, const dk_buffer *xb, const dk_buffer *yb, const double *yo,
                                  const double *r, dk_buffer *xa, dk_buffer *nobs, dk_buffer *spread)
{
    const dk_letkf_setup *s = plan_setup(plan, "dk_letkf_execute");
    if (!s)
        return DK_ERR_INVALID_ARGUMENT;
    const dk_letkf_desc *d = &s->desc;
    const size_t es = dk_dtype_size(d->dtype);
    dk_status st;
    if ((st = check_buffer(plan, xb, d->n * d->members * es, "xb")) != DK_OK ||
        (st = check_buffer(plan, yb, d->m * d->members * es, "yb")) != DK_OK ||
        (st = check_buffer(plan, xa, d->n * d->members * es, "xa")) != DK_OK ||
        (nobs && (st = check_buffer(plan, nobs, d->n * sizeof(int32_t), "nobs")) != DK_OK) ||
        (spread && (st = check_buffer(plan, spread, d->n * sizeof(double), "spread")) != DK_OK))
        return st;
    if (xa != xb && xa->handle == xb->handle)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "dk_letkf_execute: xa and xb wrap the same memory; "
                       "pass the same buffer for an analysis in place");
    if ((st = dk_letkf_check_obs(d->m, yo, r)) != DK_OK)
        return dk_fail(plan->ctx, st, "%s", dk_last_error(NULL));
    dk_msg msg = {{0}};
    const dk_plugin *pl = plan->ctx->backend->plugin;
    double *both = malloc(2 * d->m * sizeof *both);
    if (!both)
        return dk_fail(plan->ctx, DK_ERR_OUT_OF_MEMORY, "letkf: out of host memory");
    memcpy(both, yo, d->m * sizeof *both);
    memcpy(both + d->m, r, d->m * sizeof *both);
    st = dk_buffer_write(plan->staging, both, 2 * d->m * sizeof *both);
    free(both);
    if (st != DK_OK)
        return st;
    dk_device_enter(plan->ctx);
    st = pl->letkf->analysis(plan->impl, xb->handle, yb->handle, plan->staging->handle, xa->handle,
                             nobs ? nobs->handle : NULL, spread ? spread->handle : NULL, &msg);
    dk_device_leave(plan->ctx);
    if (st != DK_OK)
        return dk_fail_msg(plan->ctx, st, &msg, "letkf: the analysis failed");
    return DK_OK;
}

DK_API dk_status dk_letkf_execute_host(dk_plan *plan, const void *xb, const void *yb, const double *yo,
                                       const double *r, void *xa, int32_t *nobs, double *spread)
{
    const dk_letkf_setup *s = plan_setup(plan, "dk_letkf_execute_host");
    if (!s)
        return DK_ERR_INVALID_ARGUMENT;
    if (!xb || !yb || !xa)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "dk_letkf_execute_host: xb, yb and xa must not be NULL");
    const dk_letkf_desc *d = &s->desc;
    const size_t es = dk_dtype_size(d->dtype), nx = d->n * d->members, ny = d->m * d->members;
    dk_status st;
    if ((st = dk_letkf_check_finite(d->dtype, xb, nx, "xb")) != DK_OK ||
        (st = dk_letkf_check_finite(d->dtype, yb, ny, "yb")) != DK_OK ||
        (st = dk_letkf_check_obs(d->m, yo, r)) != DK_OK)
        return dk_fail(plan->ctx, st, "%s", dk_last_error(NULL));
    dk_context *ctx = plan->ctx;
    dk_buffer *bx = NULL, *by = NULL, *bn = NULL, *bs = NULL;
    if ((st = dk_buffer_create(ctx, nx * es, &bx)) == DK_OK && (st = dk_buffer_create(ctx, ny * es, &by)) == DK_OK &&
        (!nobs || (st = dk_buffer_create(ctx, d->n * sizeof(int32_t), &bn)) == DK_OK) &&
        (!spread || (st = dk_buffer_create(ctx, d->n * sizeof(double), &bs)) == DK_OK) &&
        (st = dk_buffer_write(bx, xb, nx * es)) == DK_OK && (st = dk_buffer_write(by, yb, ny * es)) == DK_OK &&
        (st = dk_letkf_execute(plan, bx, by, yo, r, bx, bn, bs)) == DK_OK &&
        (st = dk_buffer_read(bx, xa, nx * es)) == DK_OK && (!nobs || (st = dk_buffer_read(bn, nobs, d->n * sizeof(int32_t))) == DK_OK) &&
        spread)
        st = dk_buffer_read(bs, spread, d->n * sizeof(double));
    dk_buffer_destroy(bx);
    dk_buffer_destroy(by);
    dk_buffer_destroy(bn);
    dk_buffer_destroy(bs);
    return st;
}

DK_API dk_status dk_letkf_departures(dk_dtype dtype, size_t m, size_t members, const void *y, const double *yo,
                                     double *out)
{
    if (!y || !yo || !out || members < 1 || (dtype != DK_F32 && dtype != DK_F64))
        return BAD("dk_letkf_departures: y, yo and out must not be NULL, members >= 1, dtype float32 or float64");
    for (size_t j = 0; j < m; j++) {
        double s = 0;
        for (size_t l = 0; l < members; l++)
            s += dtype == DK_F32 ? (double)((const float *)y)[j * members + l] : ((const double *)y)[j * members + l];
        out[j] = yo[j] - s / (double)members;
    }
    return DK_OK;
}

DK_API dk_status dk_letkf_apply_csr(const dk_csr *H, dk_dtype dtype, size_t members, const void *x, void *y)
{
    if (!H || !x || !y || members < 1 || (dtype != DK_F32 && dtype != DK_F64))
        return BAD("dk_letkf_apply_csr: H, x and y must not be NULL, members >= 1, dtype float32 or float64");
    if (H->rows && (!H->indptr || !H->indices || !H->values))
        return BAD("dk_letkf_apply_csr: H's indptr, indices and values must not be NULL");
    if (H->rows && H->indptr[0] != 0)
        return BAD("dk_letkf_apply_csr: H's indptr[0] is %lld; it must be 0", (long long)H->indptr[0]);
    for (size_t i = 0; i < H->rows; i++) {
        if (H->indptr[i + 1] < H->indptr[i])
            return BAD("dk_letkf_apply_csr: H's indptr decreases at row %zu", i);
        for (int64_t e = H->indptr[i]; e < H->indptr[i + 1]; e++)
            if (H->indices[e] < 0 || (size_t)H->indices[e] >= H->cols || !isfinite(H->values[e]))
                return BAD("dk_letkf_apply_csr: entry %lld of H (column %lld, value %g) lies outside its %zu "
                           "columns or is not finite",
                           (long long)e, (long long)H->indices[e], H->values[e], H->cols);
    }
    double *row = malloc(members * sizeof *row);
    if (!row)
        return dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "letkf: out of host memory");
    for (size_t i = 0; i < H->rows; i++) {
        for (size_t l = 0; l < members; l++)
            row[l] = 0;
        for (int64_t e = H->indptr[i]; e < H->indptr[i + 1]; e++) {
            size_t c = (size_t)H->indices[e];
            for (size_t l = 0; l < members; l++)
                row[l] += H->values[e] * (dtype == DK_F32 ? (double)((const float *)x)[c * members + l]
                                                          : ((const double *)x)[c * members + l]);
        }
        for (size_t l = 0; l < members; l++) {
            if (dtype == DK_F32)
                ((float *)y)[i * members + l] = (float)row[l];
            else
                ((double *)y)[i * members + l] = row[l];
        }
    }
    free(row);
    return DK_OK;
}

/* ---- weight interpolation ---- */

DK_API dk_status dk_letkf_interp_check(const dk_csr *C, size_t n, size_t nw)
{
    if (!C)
        return BAD("the interpolation C must not be NULL");
    if (C->rows != n || C->cols != nw)
        return BAD("the interpolation is %zu x %zu; it must be %zu x %zu (grid points x weight points)", C->rows,
                   C->cols, n, nw);
    if (n && (!C->indptr || !C->indices || !C->values))
        return BAD("the interpolation's indptr, indices and values must not be NULL");
    if (n && C->indptr[0] != 0)
        return BAD("the interpolation's indptr[0] is %lld; it must be 0", (long long)C->indptr[0]);
    for (size_t i = 0; i < n; i++) {
        if (C->indptr[i + 1] < C->indptr[i])
            return BAD("the interpolation's indptr decreases at row %zu", i);
        double sum = 0.0;
        for (int64_t e = C->indptr[i]; e < C->indptr[i + 1]; e++) {
            if (C->indices[e] < 0 || (size_t)C->indices[e] >= nw)
                return BAD("entry %lld of the interpolation (row %zu) names weight point %lld, outside 0 .. %zu",
                           (long long)e, i, (long long)C->indices[e], nw - 1);
            if (!isfinite(C->values[e]))
                return BAD("entry %lld of the interpolation (row %zu) is not finite", (long long)e, i);
            sum += C->values[e];
        }
        if (!(fabs(sum - 1.0) <= 1e-12))
            return BAD("row %zu of the interpolation sums to %.17g; every row must sum to 1 (within 1e-12)", i, sum);
    }
    return DK_OK;
}

DK_API dk_status dk_letkf_interp_grid(int ndims, const size_t *shape, const size_t *stride, size_t *nw,
                                      size_t *weight_index, int64_t *indptr, int64_t *indices, double *values)
{
    if (ndims < 1 || ndims > 3)
        return BAD("dk_letkf_interp_grid: ndims is %d; it must be 1, 2 or 3", ndims);
    if (!shape || !stride || !nw || !weight_index || !indptr || !indices || !values)
        return BAD("dk_letkf_interp_grid: no argument may be NULL");
    size_t n = 1;
    for (int a = 0; a < ndims; a++) {
        if (shape[a] < 1 || stride[a] < 1)
            return BAD("dk_letkf_interp_grid: axis %d has shape %zu and stride %zu; both must be >= 1", a, shape[a],
                       stride[a]);
        n *= shape[a];
    }
    /* a grid index is a weight point when every axis index is on its coarse lattice */
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        size_t rest = i, on = 1;
        for (int a = ndims - 1; a >= 0; a--) {
            size_t ia = rest % shape[a];
            rest /= shape[a];
            if (ia % stride[a] && ia != shape[a] - 1)
                on = 0;
        }
        if (on)
            weight_index[count++] = i;
    }
    *nw = count;
    int64_t nnz = 0;
    indptr[0] = 0;
    for (size_t i = 0; i < n; i++) {
        size_t idx[3] = {0, 0, 0}, lo[3], hi[3];
        double t[3];
        size_t rest = i;
        for (int a = ndims - 1; a >= 0; a--) {
            idx[a] = rest % shape[a];
            rest /= shape[a];
            lo[a] = idx[a] / stride[a] * stride[a];
            hi[a] = lo[a] + stride[a] < shape[a] - 1 ? lo[a] + stride[a] : shape[a] - 1;
            t[a] = hi[a] > lo[a] ? (double)(idx[a] - lo[a]) / (double)(hi[a] - lo[a]) : 0.0;
        }
        for (int corner = 0; corner < (1 << ndims); corner++) {
            double c = 1.0;
            size_t g = 0;
            for (int a = 0; a < ndims; a++) {
                int up = (corner >> a) & 1;
                c *= up ? t[a] : 1.0 - t[a];
                g = g * shape[a] + (up ? hi[a] : lo[a]);
            }
            if (c == 0.0)
                continue;
            /* the weight point's number: its rank among the ascending weight indices */
            size_t l = 0, h = count;
            while (l < h) {
                size_t mid = l + (h - l) / 2;
                if (weight_index[mid] < g)
                    l = mid + 1;
                else
                    h = mid;
            }
            indices[nnz] = (int64_t)l;
            values[nnz] = c;
            nnz++;
        }
        indptr[i + 1] = nnz;
    }
    return DK_OK;
}

/* The interpolation's device buffers, kept in plan->kept between analyses
 * (one grid, many cycles) and destroyed with the plan: the transforms and
 * C's three arrays. Their contents are written by every call. */
enum { KEPT_TRANSFORMS, KEPT_INDPTR, KEPT_INDICES, KEPT_VALUES };

/* plan->kept[slot] of at least bytes: the one held, or a new one where it
 * holds fewer (the old freed first); on failure the slot is left empty. */
static dk_status kept_buffer(dk_plan *plan, int slot, size_t bytes, dk_buffer **out)
{
    dk_buffer **b = &plan->kept[slot];
    if (*b && (*b)->bytes < bytes) {
        dk_buffer_destroy(*b);
        *b = NULL;
    }
    dk_status st = *b ? DK_OK : dk_buffer_create(plan->ctx, bytes, b);
    *out = *b;
    return st;
}

DK_API dk_status dk_letkf_execute_interp(dk_plan *plan, const dk_csr *C, const dk_buffer *xb, const dk_buffer *yb,
                                         const double *yo, const double *r, dk_buffer *xa, dk_buffer *spread)
{
    const dk_letkf_setup *s = plan_setup(plan, "dk_letkf_execute_interp");
    if (!s)
        return DK_ERR_INVALID_ARGUMENT;
    dk_context *ctx = plan->ctx;
    const dk_letkf_desc *d = &s->desc;
    const dk_plugin *pl = ctx->backend->plugin;
    /* the interpolation's ops came with the ops tables' generation 4 */
    if (pl->ops_generation < 4 || !pl->letkf->transforms || !pl->letkf->apply_transforms)
        return dk_fail(ctx, DK_ERR_NOT_IMPLEMENTED,
                       "letkf: the %s backend does not implement weight interpolation (the transforms and "
                       "apply_transforms ops)", pl->name);
    dk_status st;
    if ((st = dk_letkf_interp_check(C, C ? C->rows : 0, d->n)) != DK_OK)
        return dk_fail(ctx, st, "%s", dk_last_error(NULL));
    const size_t n = C->rows, k = d->members, es = dk_dtype_size(d->dtype);
    if ((st = check_buffer(plan, xb, n * k * es, "xb")) != DK_OK ||
        (st = check_buffer(plan, yb, d->m * k * es, "yb")) != DK_OK ||
        (st = check_buffer(plan, xa, n * k * es, "xa")) != DK_OK ||
        (spread && (st = check_buffer(plan, spread, n * sizeof(double), "spread")) != DK_OK))
        return st;
    if (xa != xb && xa->handle == xb->handle)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "dk_letkf_execute_interp: xa and xb wrap the same memory; "
                       "pass the same buffer for an analysis in place");
    if ((st = dk_letkf_check_obs(d->m, yo, r)) != DK_OK)
        return dk_fail(ctx, st, "%s", dk_last_error(NULL));
    const size_t nnz = (size_t)C->indptr[n], tbytes = d->n * k * k * sizeof(double);
    double *both = malloc(2 * d->m * sizeof *both);
    if (!both)
        return dk_fail(ctx, DK_ERR_OUT_OF_MEMORY, "letkf: out of host memory");
    memcpy(both, yo, d->m * sizeof *both);
    memcpy(both + d->m, r, d->m * sizeof *both);
    dk_buffer *bt, *bp, *bi, *bv;
    dk_msg msg = {{0}};
    if ((st = kept_buffer(plan, KEPT_TRANSFORMS, tbytes, &bt)) == DK_OK &&
        (st = kept_buffer(plan, KEPT_INDPTR, (n + 1) * sizeof(int64_t), &bp)) == DK_OK &&
        (st = kept_buffer(plan, KEPT_INDICES, (nnz ? nnz : 1) * sizeof(int64_t), &bi)) == DK_OK &&
        (st = kept_buffer(plan, KEPT_VALUES, (nnz ? nnz : 1) * sizeof(double), &bv)) == DK_OK &&
        (st = dk_buffer_write(bp, C->indptr, (n + 1) * sizeof(int64_t))) == DK_OK &&
        (!nnz || ((st = dk_buffer_write(bi, C->indices, nnz * sizeof(int64_t))) == DK_OK &&
                  (st = dk_buffer_write(bv, C->values, nnz * sizeof(double))) == DK_OK)) &&
        (st = dk_buffer_write(plan->staging, both, 2 * d->m * sizeof *both)) == DK_OK) {
        dk_device_enter(ctx);
        st = pl->letkf->transforms(plan->impl, yb->handle, plan->staging->handle, bt->handle, &msg);
        if (st == DK_OK)
            st = pl->letkf->apply_transforms(plan->impl, n, xb->handle, bt->handle, bp->handle, bi->handle,
                                             bv->handle, xa->handle, spread ? spread->handle : NULL, &msg);
        dk_device_leave(ctx);
        if (st != DK_OK)
            st = dk_fail_msg(ctx, st, &msg, "letkf: the interpolated analysis failed");
    }
    free(both);
    return st;
}

DK_API dk_status dk_letkf_execute_interp_host(dk_plan *plan, const dk_csr *C, const void *xb, const void *yb,
                                              const double *yo, const double *r, void *xa, double *spread)
{
    const dk_letkf_setup *s = plan_setup(plan, "dk_letkf_execute_interp_host");
    if (!s)
        return DK_ERR_INVALID_ARGUMENT;
    dk_context *ctx = plan->ctx;
    if (!xb || !yb || !xa || !C)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "dk_letkf_execute_interp_host: C, xb, yb and xa must not be NULL");
    const dk_letkf_desc *d = &s->desc;
    const size_t n = C->rows, k = d->members, es = dk_dtype_size(d->dtype), nx = n * k, ny = d->m * k;
    dk_status st;
    if ((st = dk_letkf_check_finite(d->dtype, xb, nx, "xb")) != DK_OK ||
        (st = dk_letkf_check_finite(d->dtype, yb, ny, "yb")) != DK_OK)
        return dk_fail(ctx, st, "%s", dk_last_error(NULL));
    dk_buffer *bx = NULL, *by = NULL, *bs = NULL;
    if ((st = dk_buffer_create(ctx, (nx ? nx : 1) * es, &bx)) == DK_OK && (st = dk_buffer_create(ctx, ny * es, &by)) == DK_OK &&
        (!spread || (st = dk_buffer_create(ctx, (n ? n : 1) * sizeof(double), &bs)) == DK_OK) &&
        (st = dk_buffer_write(bx, xb, nx * es)) == DK_OK && (st = dk_buffer_write(by, yb, ny * es)) == DK_OK &&
        (st = dk_letkf_execute_interp(plan, C, bx, by, yo, r, bx, bs)) == DK_OK &&
        (st = dk_buffer_read(bx, xa, nx * es)) == DK_OK && spread)
        st = dk_buffer_read(bs, spread, n * sizeof(double));
    dk_buffer_destroy(bx), dk_buffer_destroy(by), dk_buffer_destroy(bs);
    return st;
}
