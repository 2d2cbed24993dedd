/* enkf: validation, the cost model that picks a variant, the observation
 * perturbations, and dispatch to the context's plugin. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "enkf_internal.h"

static const char *const scheme_names[] = {"", "tiled", "banded", "fft", "lowrank"};

/* The scheme a variant name performs ("banded-simt": banded), or 0. */
dk_enkf_scheme dk_enkf_scheme_of(const char *variant)
{
    if (!variant)
        return (dk_enkf_scheme)0;
    for (int k = DK_ENKF_TILED; k <= DK_ENKF_LOWRANK; k++) {
        size_t n = strlen(scheme_names[k]);
        if (!strncmp(variant, scheme_names[k], n) && (variant[n] == 0 || variant[n] == '-'))
            return (dk_enkf_scheme)k;
    }
    return (dk_enkf_scheme)0;
}

DK_API const char *const *dk_enkf_variants(const dk_context *ctx)
{
    if (!ctx || !ctx->backend->plugin->enkf)
        return NULL;
    return ctx->backend->plugin->enkf->variants;
}

DK_API void dk_enkf_desc_init(dk_enkf_desc *desc)
{
    if (!desc)
        return;
    memset(desc, 0, sizeof *desc);
    desc->dtype = DK_F64;
    desc->loc_ndim = 1;
}

void dk_enkf_setup_free(dk_enkf_setup *s)
{
    if (!s)
        return;
    free(s->loc);
    free(s->indptr);
    free(s->indices);
    free(s->values);
    s->loc = NULL;
    s->indptr = s->indices = NULL;
    s->values = NULL;
}

typedef struct entry {
    int64_t col;
    double value;
} entry;

static int by_column(const void *a, const void *b)
{
    int64_t x = ((const entry *)a)->col, y = ((const entry *)b)->col;
    return (x > y) - (x < y);
}

#define FAIL(...) dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, __VA_ARGS__)

dk_status dk_enkf_setup_make(const dk_enkf_desc *d, dk_enkf_setup *s)
{
    if (!d || !s)
        return FAIL("enkf: the description must not be NULL");
    memset(s, 0, sizeof *s);
    if (d->dtype != DK_F32 && d->dtype != DK_F64)
        return FAIL("enkf: dtype %d is neither f32 nor f64", (int)d->dtype);
    if (d->n < 1 || d->n > ((size_t)1 << 31) - 1)
        return FAIL("enkf: the state size N is %zu; it must be between 1 and 2^31-1", d->n);
    if (d->members < 2)
        return FAIL("enkf: the ensemble has %zu member%s; at least 2 are needed (the covariance divides by L-1)",
                    d->members, d->members == 1 ? "" : "s");
    if (d->members > 4096)
        return FAIL("enkf: %zu members is more than the 4096 supported", d->members);
    if (d->loc_ndim != 1 && d->loc_ndim != 2)
        return FAIL("enkf: loc_ndim is %d; the localization is 1-D (c) or 2-D (c2)", d->loc_ndim);
    if (d->loc_ndim == 2 && (d->nx < 1 || d->ny < 1 || d->nx * d->ny != d->n))
        return FAIL("enkf: the 2-D grid is %zu x %zu = %zu points but N is %zu", d->nx, d->ny,
                    d->nx * d->ny, d->n);
    if (!d->loc)
        return FAIL("enkf: the localization (c) must not be NULL");
    const dk_csr *H = &d->H;
    if (!H->indptr || !H->indices || !H->values)
        return FAIL("enkf: H's indptr, indices and values must not be NULL");
    if (H->rows < 1 || H->rows > DK_ENKF_MAX_OBS)
        return FAIL("enkf: H has %zu rows (observations); 1 to %d are supported", H->rows, DK_ENKF_MAX_OBS);
    if (H->cols != d->n)
        return FAIL("enkf: H has %zu columns but the state has N = %zu", H->cols, d->n);
    if (H->indptr[0] != 0)
        return FAIL("enkf: H's indptr[0] is %lld; it must be 0", (long long)H->indptr[0]);
    for (size_t j = 0; j < H->rows; j++)
        if (H->indptr[j + 1] < H->indptr[j])
            return FAIL("enkf: H's indptr decreases at row %zu", j);
    int64_t nnz = H->indptr[H->rows];
    if (nnz > INT32_MAX)
        return FAIL("enkf: H has %lld nonzeros; at most 2^31-1 are supported", (long long)nnz);
    for (int64_t t = 0; t < nnz; t++) {
        if (H->indices[t] < 0 || (uint64_t)H->indices[t] >= d->n)
            return FAIL("enkf: H's column index %lld (entry %lld) is outside 0..%zu", (long long)H->indices[t],
                        (long long)t, d->n - 1);
        if (!isfinite(H->values[t]))
            return FAIL("enkf: H's entry %lld is not finite (%g)", (long long)t, H->values[t]);
    }
    size_t loc_count = d->loc_ndim == 1 ? d->n : d->nx * d->ny;
    for (size_t t = 0; t < loc_count; t++)
        if (!isfinite(d->loc[t]))
            return FAIL("enkf: the localization value %zu is not finite (%g)", t, d->loc[t]);
    if (d->variant && !dk_enkf_scheme_of(d->variant))
        return FAIL("enkf: variant '%s' names none of the schemes tiled, banded, fft, lowrank", d->variant);

    s->desc = *d;
    s->scheme = dk_enkf_scheme_of(d->variant);
    s->nnz = (size_t)nnz;
    s->loc_count = loc_count;
    s->loc = malloc(loc_count * sizeof *s->loc);
    s->indptr = malloc((H->rows + 1) * sizeof *s->indptr);
    s->indices = malloc((s->nnz ? s->nnz : 1) * sizeof *s->indices);
    s->values = malloc((s->nnz ? s->nnz : 1) * sizeof *s->values);
    entry *row = malloc((s->nnz ? s->nnz : 1) * sizeof *row);
    if (!s->loc || !s->indptr || !s->indices || !s->values || !row) {
        free(row);
        dk_enkf_setup_free(s);
        return dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "enkf: out of host memory copying c and H");
    }
    memcpy(s->loc, d->loc, loc_count * sizeof *s->loc);
    memcpy(s->indptr, H->indptr, (H->rows + 1) * sizeof *s->indptr);
    /* sorted columns let the banded scheme find a row's window by bisection */
    for (size_t j = 0; j < H->rows; j++) {
        int64_t b = H->indptr[j], e = H->indptr[j + 1];
        for (int64_t t = b; t < e; t++)
            row[t - b] = (entry){H->indices[t], H->values[t]};
        qsort(row, (size_t)(e - b), sizeof *row, by_column);
        for (int64_t t = b; t < e; t++) {
            s->indices[t] = row[t - b].col;
            s->values[t] = row[t - b].value;
        }
    }
    free(row);
    s->desc.loc = s->loc;
    s->desc.H.indptr = s->indptr;
    s->desc.H.indices = s->indices;
    s->desc.H.values = s->values;

    if (d->loc_ndim == 1) {
        size_t r = 0;
        for (size_t t = 0; t < d->n; t++)
            if (s->loc[t] != 0)
                r = t;
        s->rx = r;
        s->window = r;
    } else {
        size_t rx = 0, ry = 0;
        for (size_t a = 0; a < d->nx; a++)
            for (size_t b = 0; b < d->ny; b++)
                if (s->loc[a * d->ny + b] != 0) {
                    rx = a > rx ? a : rx;
                    ry = b > ry ? b : ry;
                }
        s->rx = rx;
        s->ry = ry;
        /* |ix-kx| <= rx bounds |i-k| by rx*ny + ny-1 */
        s->window = rx * d->ny + d->ny - 1;
        if (s->window > d->n - 1)
            s->window = d->n - 1;
    }
    return DK_OK;
}

/* The first variant of `offered` that performs scheme s, or NULL. */
static const char *offers(const char *const *offered, dk_enkf_scheme s)
{
    for (const char *const *o = offered; o && *o; o++)
        if (dk_enkf_scheme_of(*o) == s)
            return *o;
    return NULL;
}

/* Estimated work of each scheme in multiply-adds of the inner loops:
 * tiled visits every (state point, nonzero of H) pair, banded only the
 * pairs inside C's support plus a bisection per (point, observation), FFT
 * does L*M forward and inverse transforms of the circulant embedding
 * (about 2.5 P log2 P flops each), all weighted alike. Returns the first
 * offered variant of the cheapest scheme, or NULL when none applies.
 * lowrank is never picked here: whether C is low-rank, and at what rank,
 * is known only after its plan-time factorisation, which costs about 2R+10
 * applications of C by FFT; a caller names it. */
const char *dk_enkf_pick_variant(const dk_enkf_setup *s, const char *const *offered)
{
    double N = (double)s->desc.n, L = (double)s->desc.members, M = (double)s->desc.H.rows;
    double nnz = (double)s->nnz;
    double span = fmin(N, 2.0 * (double)s->window + 1.0);
    double P = s->desc.loc_ndim == 1 ? 2.0 * N : 4.0 * N;
    double cost[4] = {INFINITY, N * nnz * L + N * M * L, nnz * span * L + N * M * (L + log2(nnz / M + 2.0)),
                      L * M * 2.0 * 2.5 * P * log2(P) + N * M * L};
    int best = 0;
    for (int k = DK_ENKF_TILED; k <= DK_ENKF_FFT; k++)
        if (offers(offered, (dk_enkf_scheme)k) && (!best || cost[k] < cost[best]))
            best = k;
    return best ? offers(offered, (dk_enkf_scheme)best) : NULL;
}

/* ---- Philox4x32-10 (Salmon et al., SC'11) ---- */

static void philox4x32(uint32_t ctr[4], uint32_t key0, uint32_t key1)
{
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * ctr[0], p1 = (uint64_t)0xCD9E8D57u * ctr[2];
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t next[4] = {hi1 ^ ctr[1] ^ key0, lo1, hi0 ^ ctr[3] ^ key1, lo0};
        memcpy(ctr, next, sizeof next);
        key0 += 0x9E3779B9u;
        key1 += 0xBB67AE85u;
    }
}

/* 53 random bits to (0, 1]: never 0, so log() is finite. */
static double unit_interval(uint32_t hi, uint32_t lo)
{
    uint64_t bits = (((uint64_t)hi << 32) | lo) >> 11;
    return ((double)bits + 1.0) * 0x1p-53;
}

DK_API void dk_enkf_perturbations(uint64_t seed, size_t m, size_t members, const double *r, double *eps)
{
    const double two_pi = 6.283185307179586476925286766559;
    for (size_t j = 0; j < m; j++)
        for (size_t l = 0; l < members; l++) {
            uint32_t c[4] = {(uint32_t)l, (uint32_t)j, 0, 0};
            philox4x32(c, (uint32_t)seed, (uint32_t)(seed >> 32));
            double u1 = unit_interval(c[0], c[1]), u2 = unit_interval(c[2], c[3]);
            double z = sqrt(-2.0 * log(u1)) * cos(two_pi * u2);
            eps[j * members + l] = sqrt(r[j]) * z;
        }
}

/* ---- plans ---- */

/* The plan's state is one allocation (dk_plan_destroy frees it with a
 * single free): the setup followed by its copies of c and H. */
typedef struct enkf_state {
    dk_enkf_setup setup;
} enkf_state;

static enkf_state *state_pack(const dk_enkf_setup *s)
{
    size_t rows = s->desc.H.rows, nnz = s->nnz ? s->nnz : 1;
    size_t bytes = sizeof(enkf_state) + s->loc_count * sizeof(double) + (rows + 1) * sizeof(int64_t) +
                   nnz * sizeof(int64_t) + nnz * sizeof(double);
    enkf_state *st = malloc(bytes);
    if (!st)
        return NULL;
    st->setup = *s;
    char *p = (char *)(st + 1);
    st->setup.loc = memcpy(p, s->loc, s->loc_count * sizeof(double));
    p += s->loc_count * sizeof(double);
    st->setup.indptr = memcpy(p, s->indptr, (rows + 1) * sizeof(int64_t));
    p += (rows + 1) * sizeof(int64_t);
    st->setup.indices = memcpy(p, s->indices, nnz * sizeof(int64_t));
    p += nnz * sizeof(int64_t);
    st->setup.values = memcpy(p, s->values, nnz * sizeof(double));
    st->setup.desc.loc = st->setup.loc;
    st->setup.desc.H.indptr = st->setup.indptr;
    st->setup.desc.H.indices = st->setup.indices;
    st->setup.desc.H.values = st->setup.values;
    return st;
}

DK_API dk_status dk_enkf_plan_create(dk_context *ctx, const dk_enkf_desc *desc, dk_plan **plan)
{
    if (!ctx || !plan)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "dk_enkf_plan_create: ctx and plan must not be NULL");
    *plan = NULL;
    const dk_enkf_ops *ops = dk_context_ops(ctx, DK_ALGO_ENKF);
    if (!ops)
        return DK_ERR_NOT_IMPLEMENTED;
    dk_enkf_setup made;
    dk_status rc = dk_enkf_setup_make(desc, &made);
    if (rc != DK_OK)
        return dk_fail(ctx, rc, "%s", dk_last_error(NULL));
    enkf_state *st = state_pack(&made);
    dk_enkf_setup_free(&made);
    if (!st)
        return dk_fail(ctx, DK_ERR_OUT_OF_MEMORY, "enkf: out of host memory");
    const char *variant = desc->variant ? dk_pick_variant(ctx, DK_ALGO_ENKF, ops->variants, desc->variant)
                                        : dk_enkf_pick_variant(&st->setup, ops->variants);
    if (!variant) {
        free(st);
        if (desc->variant)
            return DK_ERR_NOT_IMPLEMENTED;
        return dk_fail(ctx, DK_ERR_NOT_IMPLEMENTED, "enkf: backend '%s' lists no variant of tiled, banded or fft",
                       ctx->backend->plugin->name);
    }
    st->setup.desc.variant = variant;
    st->setup.scheme = dk_enkf_scheme_of(variant);
    dk_plan *p = calloc(1, sizeof *p);
    if (!p) {
        free(st);
        return dk_fail(ctx, DK_ERR_OUT_OF_MEMORY, "enkf: out of host memory");
    }
    p->ctx = ctx;
    p->algo = DK_ALGO_ENKF;
    p->impl_destroy = ops->plan_destroy;
    p->state = st;
    dk_msg msg = {{0}};
    dk_device_enter(ctx);
    rc = ops->plan_create(ctx->device, &st->setup, &p->impl, &msg);
    dk_device_leave(ctx);
    if (rc != DK_OK) {
        p->impl = NULL;
        dk_plan_destroy(p);
        return dk_fail_msg(ctx, rc, &msg, "enkf: the backend could not make the plan");
    }
    *plan = p;
    return DK_OK;
}

static dk_status check_plan(dk_plan *plan, const char *what)
{
    if (!plan)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "%s: plan must not be NULL", what);
    if (plan->algo != DK_ALGO_ENKF)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s: the plan is a %s plan", what,
                       dk_algo_name(plan->algo));
    return DK_OK;
}

DK_API const char *dk_enkf_plan_variant(const dk_plan *plan)
{
    if (!plan || plan->algo != DK_ALGO_ENKF)
        return "";
    return ((const enkf_state *)plan->state)->setup.desc.variant;
}

static dk_status check_buffer(dk_plan *plan, const dk_buffer *b, size_t bytes, const char *what,
                              const char *name)
{
    if (!b)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s: buffer %s must not be NULL", what, name);
    if (b->ctx != plan->ctx)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s: buffer %s belongs to another context", what,
                       name);
    if (b->bytes < bytes)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s: buffer %s holds %zu bytes; %zu are needed", what,
                       name, b->bytes, bytes);
    return DK_OK;
}

DK_API dk_status dk_enkf_cov(dk_plan *plan, const dk_buffer *e, dk_buffer *pht, dk_buffer *hpht)
{
    dk_status rc = check_plan(plan, "dk_enkf_cov");
    if (rc != DK_OK)
        return rc;
    const dk_enkf_setup *s = &((enkf_state *)plan->state)->setup;
    size_t w = dk_dtype_size(s->desc.dtype), N = s->desc.n, L = s->desc.members, M = s->desc.H.rows;
    if ((rc = check_buffer(plan, e, N * L * w, "dk_enkf_cov", "e")) != DK_OK ||
        (rc = check_buffer(plan, pht, N * M * w, "dk_enkf_cov", "pht")) != DK_OK ||
        (hpht && (rc = check_buffer(plan, hpht, M * M * w, "dk_enkf_cov", "hpht")) != DK_OK))
        return rc;
    dk_msg msg = {{0}};
    const dk_enkf_ops *ops = plan->ctx->backend->plugin->enkf;
    dk_device_enter(plan->ctx);
    rc = ops->cov(plan->impl, e->handle, pht->handle, hpht ? hpht->handle : NULL, &msg);
    dk_device_leave(plan->ctx);
    return rc == DK_OK ? DK_OK : dk_fail_msg(plan->ctx, rc, &msg, "enkf: the covariance product failed");
}


static dk_status check_finite(dk_plan *plan, const void *data, dk_dtype t, size_t count, const char *what)
{
    for (size_t k = 0; k < count; k++) {
        double v = t == DK_F32 ? (double)((const float *)data)[k] : ((const double *)data)[k];
        if (!isfinite(v))
            return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "enkf: %s value %zu is not finite (%g)", what, k, v);
    }
    return DK_OK;
}

DK_API dk_status dk_enkf_cov_host(dk_plan *plan, const void *e, void *pht, void *hpht)
{
    dk_status rc = check_plan(plan, "dk_enkf_cov_host");
    if (rc != DK_OK)
        return rc;
    if (!e || !pht)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "dk_enkf_cov_host: e and pht must not be NULL");
    const dk_enkf_setup *s = &((enkf_state *)plan->state)->setup;
    size_t w = dk_dtype_size(s->desc.dtype), N = s->desc.n, L = s->desc.members, M = s->desc.H.rows;
    if ((rc = check_finite(plan, e, s->desc.dtype, N * L, "an ensemble anomaly")) != DK_OK)
        return rc;
    /* buffers per call: the host path copies anyway; loops keep their own buffers */
    dk_buffer *be = NULL, *bp = NULL, *bh = NULL;
    if ((rc = dk_buffer_create(plan->ctx, N * L * w, &be)) == DK_OK &&
        (rc = dk_buffer_create(plan->ctx, N * M * w, &bp)) == DK_OK &&
        (!hpht || (rc = dk_buffer_create(plan->ctx, M * M * w, &bh)) == DK_OK) &&
        (rc = dk_buffer_write(be, e, N * L * w)) == DK_OK && (rc = dk_enkf_cov(plan, be, bp, bh)) == DK_OK &&
        (rc = dk_buffer_read(bp, pht, N * M * w)) == DK_OK && hpht)
        rc = dk_buffer_read(bh, hpht, M * M * w);
    dk_buffer_destroy(be);
    dk_buffer_destroy(bp);
    dk_buffer_destroy(bh);
    return rc;
}

static dk_status check_obs(dk_context *ctx, size_t m, const double *y, const double *r, double inflation)
{
    if (!y || !r)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "enkf analysis: y and r must not be NULL");
    for (size_t j = 0; j < m; j++) {
        if (!isfinite(y[j]))
            return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "enkf analysis: observation %zu is not finite (%g)", j, y[j]);
        if (!(isfinite(r[j]) && r[j] > 0))
            return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT,
                           "enkf analysis: observation error variance %zu is %g; it must be finite and > 0", j, r[j]);
    }
    if (!(isfinite(inflation) && inflation > 0))
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "enkf analysis: inflation is %g; it must be finite and > 0",
                       inflation);
    return DK_OK;
}

/* d = y + eps, M x L: the part of the analysis every backend must share. */
static double *perturbed_obs(size_t m, size_t L, const double *y, const double *r, uint64_t seed)
{
    double *d = malloc(m * L * sizeof *d);
    if (!d)
        return NULL;
    dk_enkf_perturbations(seed, m, L, r, d);
    for (size_t j = 0; j < m; j++)
        for (size_t l = 0; l < L; l++)
            d[j * L + l] += y[j];
    return d;
}

DK_API dk_status dk_enkf_analysis(dk_plan *plan, dk_buffer *x, const double *y, const double *r, uint64_t seed,
                                  double inflation)
{
    dk_status rc = check_plan(plan, "dk_enkf_analysis");
    if (rc != DK_OK)
        return rc;
    const dk_enkf_setup *s = &((enkf_state *)plan->state)->setup;
    size_t N = s->desc.n, L = s->desc.members, M = s->desc.H.rows;
    if ((rc = check_buffer(plan, x, N * L * dk_dtype_size(s->desc.dtype), "dk_enkf_analysis", "x")) != DK_OK ||
        (rc = check_obs(plan->ctx, M, y, r, inflation)) != DK_OK)
        return rc;
    double *d = perturbed_obs(M, L, y, r, seed);
    if (!d)
        return dk_fail(plan->ctx, DK_ERR_OUT_OF_MEMORY, "enkf analysis: out of host memory");
    dk_msg msg = {{0}};
    const dk_enkf_ops *ops = plan->ctx->backend->plugin->enkf;
    dk_device_enter(plan->ctx);
    rc = ops->analysis(plan->impl, x->handle, d, r, inflation, &msg);
    dk_device_leave(plan->ctx);
    free(d);
    return rc == DK_OK ? DK_OK : dk_fail_msg(plan->ctx, rc, &msg, "enkf: the analysis failed");
}

DK_API dk_status dk_enkf_analysis_host(dk_plan *plan, void *x, const double *y, const double *r, uint64_t seed,
                                       double inflation)
{
    dk_status rc = check_plan(plan, "dk_enkf_analysis_host");
    if (rc != DK_OK)
        return rc;
    if (!x)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "dk_enkf_analysis_host: x must not be NULL");
    const dk_enkf_setup *s = &((enkf_state *)plan->state)->setup;
    size_t bytes = s->desc.n * s->desc.members * dk_dtype_size(s->desc.dtype);
    if ((rc = check_finite(plan, x, s->desc.dtype, s->desc.n * s->desc.members, "a forecast ensemble")) != DK_OK)
        return rc;
    dk_buffer *bx = NULL;
    if ((rc = dk_buffer_create(plan->ctx, bytes, &bx)) == DK_OK && (rc = dk_buffer_write(bx, x, bytes)) == DK_OK &&
        (rc = dk_enkf_analysis(plan, bx, y, r, seed, inflation)) == DK_OK)
        rc = dk_buffer_read(bx, x, bytes);
    dk_buffer_destroy(bx);
    return rc;
}

/* Shared with the reference. */
dk_status dk_enkf_check_obs(size_t m, const double *y, const double *r, double inflation)
{
    return check_obs(NULL, m, y, r, inflation);
}

double *dk_enkf_perturbed_obs(size_t m, size_t L, const double *y, const double *r, uint64_t seed)
{
    return perturbed_obs(m, L, y, r, seed);
}

/* ---- the phases of libdakit-mpi's device path (enkf_parts.h) ---- */

static const dk_enkf_ops *parts_of(const dk_plan *plan)
{
    const dk_plugin *pl = plan->ctx->backend->plugin;
    const dk_enkf_ops *ops = pl->enkf;
    if (pl->ops_generation < 1) /* a table from before the parts ends at plan_destroy */
        return NULL;
    return ops->cov_rows && ops->inflate && ops->update ? ops : NULL;
}

DK_API int dk_enkf_has_parts(const dk_plan *plan)
{
    return plan && plan->algo == DK_ALGO_ENKF && parts_of(plan) != NULL;
}

DK_API void dk_enkf_grid(const dk_plan *plan, size_t grid[2])
{
    const dk_enkf_desc *d = &((const enkf_state *)plan->state)->setup.desc;
    grid[0] = d->loc_ndim == 2 ? d->nx : 1;
    grid[1] = d->loc_ndim == 2 ? d->ny : d->n;
}

static dk_status parts_check(dk_plan *plan, const char *what)
{
    dk_status rc = check_plan(plan, what);
    if (rc == DK_OK && !parts_of(plan))
        rc = dk_fail(plan->ctx, DK_ERR_NOT_IMPLEMENTED,
                     "%s: backend '%s' lacks the enkf entries cov_rows, inflate and update (docs/plugins.md)", what,
                     plan->ctx->backend->plugin->name);
    return rc;
}

static size_t box_count(const dk_enkf_box *b)
{
    return (b->hi[0] - b->lo[0]) * (b->hi[1] - b->lo[1]);
}

DK_API dk_status dk_enkf_cov_rows(dk_plan *plan, const dk_buffer *e, const dk_enkf_box *own, dk_buffer *pht,
                                  dk_buffer *part, size_t at, const dk_buffer *x)
{
    static const char *const what = "dk_enkf_cov_rows";
    dk_status rc = parts_check(plan, what);
    if (rc != DK_OK)
        return rc;
    const dk_enkf_setup *s = &((enkf_state *)plan->state)->setup;
    size_t w = dk_dtype_size(s->desc.dtype), N = s->desc.n, L = s->desc.members, M = s->desc.H.rows, grid[2];
    dk_enkf_grid(plan, grid);
    if (!own || own->lo[0] > own->hi[0] || own->lo[1] > own->hi[1] || own->hi[0] > grid[0] || own->hi[1] > grid[1])
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s: the box leaves the plan's %zu x %zu grid", what,
                       grid[0], grid[1]);
    size_t count = box_count(own);
    if ((rc = check_buffer(plan, e, N * L * w, what, "e")) != DK_OK ||
        (rc = check_buffer(plan, pht, (count ? count : 1) * M * w, what, "pht")) != DK_OK ||
        (part && (rc = check_buffer(plan, part, (at + M * M + (x ? M * L : 0)) * w, what, "part")) != DK_OK) ||
        (x && (rc = check_buffer(plan, x, (count ? count : 1) * L * w, what, "x")) != DK_OK))
        return rc;
    if (x && !part)
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s: x needs part", what);
    dk_msg msg = {{0}};
    dk_device_enter(plan->ctx);
    rc = parts_of(plan)->cov_rows(plan->impl, e->handle, own, pht->handle, part ? part->handle : NULL, at,
                                  x ? x->handle : NULL, &msg);
    dk_device_leave(plan->ctx);
    return rc == DK_OK ? DK_OK : dk_fail_msg(plan->ctx, rc, &msg, "enkf: the covariance rows failed");
}

DK_API dk_status dk_enkf_inflate(dk_plan *plan, const dk_buffer *x, dk_dtype xt, size_t count, double inflation,
                                 dk_buffer *X, dk_buffer *e)
{
    static const char *const what = "dk_enkf_inflate";
    dk_status rc = parts_check(plan, what);
    if (rc != DK_OK)
        return rc;
    size_t L = ((enkf_state *)plan->state)->setup.desc.members, n = count ? count : 1;
    if ((xt != DK_F32 && xt != DK_F64) || !(isfinite(inflation) && inflation > 0))
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT, "%s: a float dtype and a finite inflation > 0 are needed",
                       what);
    if ((rc = check_buffer(plan, x, n * L * dk_dtype_size(xt), what, "x")) != DK_OK ||
        (rc = check_buffer(plan, X, n * L * 8, what, "X")) != DK_OK ||
        (rc = check_buffer(plan, e, n * L * 8, what, "e")) != DK_OK)
        return rc;
    dk_msg msg = {{0}};
    dk_device_enter(plan->ctx);
    rc = parts_of(plan)->inflate(plan->impl, x->handle, xt, count, inflation, X->handle, e->handle, &msg);
    dk_device_leave(plan->ctx);
    return rc == DK_OK ? DK_OK : dk_fail_msg(plan->ctx, rc, &msg, "enkf: the inflation failed");
}

DK_API dk_status dk_enkf_update(dk_plan *plan, const dk_buffer *sums, size_t at, const double *d, const double *r,
                                const dk_buffer *pht, const dk_buffer *X, size_t count, dk_buffer *x, dk_dtype xt)
{
    static const char *const what = "dk_enkf_update";
    dk_status rc = parts_check(plan, what);
    if (rc != DK_OK)
        return rc;
    const dk_enkf_setup *s = &((enkf_state *)plan->state)->setup;
    size_t L = s->desc.members, M = s->desc.H.rows, n = count ? count : 1;
    if (!d || !r || at < 1 || (xt != DK_F32 && xt != DK_F64))
        return dk_fail(plan->ctx, DK_ERR_INVALID_ARGUMENT,
                       "%s: d, r, a float dtype and sums after their failure count (at >= 1) are needed", what);
    if ((rc = check_buffer(plan, sums, (at + M * M + M * L) * 8, what, "sums")) != DK_OK ||
        (rc = check_buffer(plan, pht, n * M * 8, what, "pht")) != DK_OK ||
        (rc = check_buffer(plan, X, n * L * 8, what, "X")) != DK_OK ||
        (rc = check_buffer(plan, x, n * L * dk_dtype_size(xt), what, "x")) != DK_OK)
        return rc;
    dk_msg msg = {{0}};
    dk_device_enter(plan->ctx);
    rc = parts_of(plan)->update(plan->impl, sums->handle, at, d, r, pht->handle, X->handle, count, x->handle, xt,
                                &msg);
    dk_device_leave(plan->ctx);
    return rc == DK_OK ? DK_OK : dk_fail_msg(plan->ctx, rc, &msg, "enkf: the analysis update failed");
}
