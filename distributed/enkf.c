/* Distributed enkf: the state's points split between ranks, C's support as
 * the halo, HPHT and HX by reductions.
 *
 * Each rank owns a contiguous range of state rows (1-D localization) or a
 * box of the nx x ny grid (2-D). PHT[i, :] needs the anomalies of every
 * point k with C[i, k] != 0, i.e. within C's support (rx; rx and ry in
 * 2-D) of i; so each rank builds a local enkf problem on its *window* (its
 * box widened by the support, clipped to the state): c (or c2) truncated to
 * the window, and H's columns restricted to the window and renumbered, all
 * M rows kept. It receives the window's anomalies from the ranks that own
 * them, runs libdakit's dk_enkf_cov_host on the window and keeps the rows
 * it owns, which are exact (every term they need is inside the window).
 *
 * HPHT = H PHT and H X are sums over state points: each rank adds the
 * terms of the points it owns in float64, then a reduction adds the ranks'
 * partial sums (dkm_sum: on the device where the backend offers it, else
 * MPI). The analysis solves (HPHT + R) Z = D once, on rank 0
 * (LAPACKE dposv), and broadcasts Z; every rank then updates its own rows.
 * The observation perturbations come from dk_enkf_perturbations (keyed by
 * member and observation), so they do not depend on the number of ranks.
 *
 * With one rank the window is the whole state and the calls are libdakit's
 * own (dk_enkf_cov_host, dk_enkf_analysis_host) on the local plan. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../algorithms/enkf/enkf_parts.h"
#include "../core/comm.h"
#include "internal.h"

static const char *const CREATE = "dk_mpi_enkf_plan_create";
static const char *const COV = "dk_mpi_enkf_cov";
static const char *const COV_HOST = "dk_mpi_enkf_cov_host";
static const char *const ANALYSIS = "dk_mpi_enkf_analysis";
static const char *const ANALYSIS_HOST = "dk_mpi_enkf_analysis_host";

/* The analysis's reduction: [failures, sum h, sum h^2] before HPHT. */
#define ANA_AT 3

/* Collectives on float64 arrays are cut into pieces of this many values
 * (MPI counts are int). */
#define CHUNK ((size_t)1 << 27)

typedef struct dkm_peer_list {
    int n;
    dkm_peer *peer;
} dkm_peer_list;

struct dkm_enkf {
    dk_dtype dtype;
    size_t esize;
    int ndim;        /* of the state's grid: 1 (loc_ndim 1) or 2 (nx x ny) */
    size_t shape[2]; /* {n} or {nx, ny} */
    size_t n, L, M;
    size_t rx, ry; /* C's support */
    dkm_box own, win;
    size_t own_count, win_count;
    dk_enkf_box own_in_win; /* this rank's points as a box of the window's grid */
    const char *variant;    /* the caller's string (NULL: the cost model) */

    /* the window's problem: c truncated, H's columns inside the window */
    dk_enkf_desc local;
    double *loc;
    int64_t *indptr, *indices;
    double *values;
    dk_plan *plan;   /* in the plan's dtype; NULL where this rank owns nothing */
    dk_plan *plan64; /* float64, for the analysis: plan itself for f64 data, made on first use for f32; on a rank
                        that owns nothing a plan over one point with no H entries, which runs the replicated solve */

    /* the window's exchange: who sends which box of points to whom */
    dkm_peer_list send, recv;
    MPI_Datatype point[2]; /* L values of the plan's dtype, L float64 */
    void *sendbuf, *recvbuf; /* host staging of the halo (float64 points fit) */
    MPI_Request *requests;
    double *red; /* host staging of a reduction, and zeros for a rank without points */

    /* device scratch. cov: the window's anomalies (NULL where the window is
     * the own box), the halo packs, and [failures, HPHT] in the dtype */
    dk_buffer *dwin, *dsend, *drecv, *dred;
    int red_dirty; /* the last reduction's failure count was not 0: reset it */
    /* analysis (float64, made on first use): the window's anomalies, own
     * X, e and PHT rows, the halo packs, [failures, sum h, sum h^2, HPHT, HX] */
    int ana_ready;
    dk_buffer *dwin64, *dX64, *de64, *dpht64, *dsend64, *drecv64, *dred64;
    double *d; /* M x L, y + eps */
};

/* ---- helpers ---- */

static uint64_t mix(uint64_t h, uint64_t w)
{
    h ^= w + 0x9e3779b97f4a7c15u + (h << 6) + (h >> 2);
    h *= 0xbf58476d1ce4e5b9u;
    return h ^ (h >> 31);
}

static uint64_t hash_bytes(const void *p, size_t bytes, uint64_t seed)
{
    const unsigned char *c = p;
    uint64_t h = mix(0x243f6a8885a308d3u, seed ^ bytes);
    size_t k = 0;
    for (; k + 8 <= bytes; k += 8) {
        uint64_t w;
        memcpy(&w, c + k, 8);
        h = mix(h, w);
    }
    uint64_t tail = 0;
    memcpy(&tail, c + k, bytes - k);
    return mix(h, tail) | 1; /* never 0 */
}

static double get(const void *p, dk_dtype t, size_t k)
{
    return t == DK_F32 ? (double)((const float *)p)[k] : ((const double *)p)[k];
}

/* The box widened by (0, rx, ry) along box axes 1 and 2 (1-D: rx along
 * axis 2), clipped to the grid; empty stays empty. */
static dkm_box widen(const dkm_enkf *e, const dkm_box *b)
{
    dkm_box w = *b;
    if (!dkm_box_count(b))
        return w;
    size_t h[2] = {e->rx, e->ry};
    for (int a = 0; a < e->ndim; a++) {
        int i = dkm_axis(e->ndim, a);
        size_t n = e->shape[a];
        w.lo[i] = b->lo[i] > h[a] ? b->lo[i] - h[a] : 0;
        w.hi[i] = b->hi[i] + h[a] < n ? b->hi[i] + h[a] : n;
    }
    return w;
}

/* Global state index of a point (box coordinates). */
static size_t global_index(const dkm_enkf *e, size_t i1, size_t i2)
{
    return e->ndim == 1 ? i2 : i1 * e->shape[1] + i2;
}

/* The point with global state index g inside box b: its index in b's C
 * order, or SIZE_MAX when g lies outside b. */
static size_t index_in(const dkm_enkf *e, const dkm_box *b, size_t g)
{
    size_t i1 = e->ndim == 1 ? 0 : g / e->shape[1], i2 = e->ndim == 1 ? g : g % e->shape[1];
    if (i1 < b->lo[1] || i1 >= b->hi[1] || i2 < b->lo[2] || i2 >= b->hi[2])
        return SIZE_MAX;
    return (i1 - b->lo[1]) * (b->hi[2] - b->lo[2]) + (i2 - b->lo[2]);
}

/* ---- checks on one rank ---- */

#define BAD(...) (dkm_note(o, DK_ERR_INVALID_ARGUMENT, __VA_ARGS__), 0)

/* libdakit's own rules for a description (dk_enkf_plan_create applies them
 * to each rank's window; the global description is checked here, with the
 * same words). Returns 1 when valid. */
static int valid_description(dkm_outcome *o, const dk_enkf_desc *d)
{
    if (d->dtype != DK_F32 && d->dtype != DK_F64)
        return BAD("enkf: dtype %d is neither f32 nor f64", (int)d->dtype);
    if (d->n < 1 || d->n > ((size_t)1 << 31) - 1)
        return BAD("enkf: the state size N is %zu; it must be between 1 and 2^31-1", d->n);
    if (d->members < 2)
        return BAD("enkf: the ensemble has %zu member%s; at least 2 are needed (the covariance divides by L-1)",
                   d->members, d->members == 1 ? "" : "s");
    if (d->members > 4096)
        return BAD("enkf: %zu members is more than the 4096 supported", d->members);
    if (d->loc_ndim != 1 && d->loc_ndim != 2)
        return BAD("enkf: loc_ndim is %d; the localization is 1-D (c) or 2-D (c2)", d->loc_ndim);
    if (d->loc_ndim == 2 && (d->nx < 1 || d->ny < 1 || d->nx > d->n || d->nx * d->ny != d->n))
        return BAD("enkf: the 2-D grid is %zu x %zu but N is %zu", d->nx, d->ny, d->n);
    if (!d->loc)
        return BAD("enkf: the localization (c) must not be NULL");
    const dk_csr *H = &d->H;
    if (!H->indptr || !H->indices || !H->values)
        return BAD("enkf: H's indptr, indices and values must not be NULL");
    if (H->rows < 1 || H->rows > DK_ENKF_MAX_OBS)
        return BAD("enkf: H has %zu rows (observations); 1 to %d are supported", H->rows, DK_ENKF_MAX_OBS);
    if (H->cols != d->n)
        return BAD("enkf: H has %zu columns but the state has N = %zu", H->cols, d->n);
    if (H->indptr[0] != 0)
        return BAD("enkf: H's indptr[0] is %lld; it must be 0", (long long)H->indptr[0]);
    for (size_t j = 0; j < H->rows; j++)
        if (H->indptr[j + 1] < H->indptr[j])
            return BAD("enkf: H's indptr decreases at row %zu", j);
    int64_t nnz = H->indptr[H->rows];
    if (nnz > INT32_MAX)
        return BAD("enkf: H has %lld nonzeros; at most 2^31-1 are supported", (long long)nnz);
    for (int64_t t = 0; t < nnz; t++) {
        if (H->indices[t] < 0 || (uint64_t)H->indices[t] >= d->n)
            return BAD("enkf: H's column index %lld (entry %lld) is outside 0..%zu", (long long)H->indices[t],
                       (long long)t, d->n - 1);
        if (!isfinite(H->values[t]))
            return BAD("enkf: H's entry %lld is not finite (%g)", (long long)t, H->values[t]);
    }
    for (size_t t = 0; t < d->n; t++)
        if (!isfinite(d->loc[t]))
            return BAD("enkf: the localization value %zu is not finite (%g)", t, d->loc[t]);
    return 1;
}

static void check_local(dkm_outcome *o, dk_context *ctx, const dk_enkf_desc *g, const dk_mpi_part *part,
                        dk_mpi_plan **plan)
{
    if (!ctx || !g || !part || !plan) {
        dkm_note(o, DK_ERR_INVALID_ARGUMENT, "ctx, global, part and plan must not be NULL");
        return;
    }
    if (!valid_description(o, g))
        return;
    if (g->loc_ndim == 1) {
        if (part->offset[0] > g->n || part->extent[0] > g->n - part->offset[0])
            dkm_note(o, DK_ERR_INVALID_ARGUMENT,
                     "its part lies outside the state: it starts at row %zu and holds %zu rows, but the state has "
                     "%zu",
                     part->offset[0], part->extent[0], g->n);
        return;
    }
    size_t shape[2] = {g->nx, g->ny};
    for (int a = 0; a < 2; a++)
        if (part->offset[a] > shape[a] || part->extent[a] > shape[a] - part->offset[a]) {
            dkm_note(o, DK_ERR_INVALID_ARGUMENT,
                     "its part lies outside the %zu x %zu grid: along axis %d it starts at %zu and holds %zu points",
                     g->nx, g->ny, a, part->offset[a], part->extent[a]);
            return;
        }
}

/* ---- the global description, compared between ranks ---- */

enum {
    F_DTYPE, F_N, F_MEMBERS, F_LOC_NDIM, F_NX, F_NY, F_ROWS, F_NNZ, F_LOC, F_INDPTR, F_INDICES, F_VALUES,
    F_VARIANT, NFIELDS
};
/* the scalars' names; for the arrays, the subject of "... not the same" */
static const char *const field_names[NFIELDS] = {
    "dtype", "n", "members", "loc_ndim", "nx", "ny", "H.rows", "H's number of nonzeros",
    "the localization (c or c2) is", "H's indptr is", "H's indices are", "H's values are", "the variant is"};

static void fields_of(const dk_enkf_desc *d, uint64_t f[NFIELDS])
{
    memset(f, 0, NFIELDS * sizeof *f);
    size_t M = d->H.rows, nnz = (size_t)d->H.indptr[M];
    f[F_DTYPE] = (uint64_t)d->dtype;
    f[F_N] = d->n;
    f[F_MEMBERS] = d->members;
    f[F_LOC_NDIM] = (uint64_t)d->loc_ndim;
    if (d->loc_ndim == 2) {
        f[F_NX] = d->nx;
        f[F_NY] = d->ny;
    }
    f[F_ROWS] = M;
    f[F_NNZ] = nnz;
    f[F_LOC] = hash_bytes(d->loc, d->n * sizeof *d->loc, 1);
    f[F_INDPTR] = hash_bytes(d->H.indptr, (M + 1) * sizeof *d->H.indptr, 2);
    f[F_INDICES] = hash_bytes(d->H.indices, nnz * sizeof *d->H.indices, 3);
    f[F_VALUES] = hash_bytes(d->H.values, nnz * sizeof *d->H.values, 4);
    f[F_VARIANT] = d->variant ? hash_bytes(d->variant, strlen(d->variant), 5) : 0;
}

/* Collective: the maximum and minimum of each field in one reduction (of
 * the values and their complements); the same verdict on every rank. */
static void same_fields(MPI_Comm comm, const uint64_t *v, int nfields, uint64_t *lo, uint64_t *hi)
{
    uint64_t both[2 * NFIELDS], r[2 * NFIELDS];
    for (int i = 0; i < nfields; i++) {
        both[i] = v[i];
        both[nfields + i] = ~v[i];
    }
    MPI_Allreduce(both, r, 2 * nfields, MPI_UINT64_T, MPI_MAX, comm);
    for (int i = 0; i < nfields; i++) {
        hi[i] = r[i];
        lo[i] = ~r[nfields + i];
    }
}

static dk_status same_description(MPI_Comm comm, const dk_enkf_desc *d)
{
    uint64_t v[NFIELDS], lo[NFIELDS], hi[NFIELDS];
    fields_of(d, v);
    same_fields(comm, v, NFIELDS, lo, hi);
    for (int i = 0; i < NFIELDS; i++) {
        if (lo[i] == hi[i])
            continue;
        char what[200];
        if (i >= F_LOC)
            snprintf(what, sizeof what, "%s not the same on every rank%s", field_names[i],
                     i == F_VARIANT ? " (another name, or named on some ranks only)" : "");
        else
            snprintf(what, sizeof what, "%s is %llu on some ranks, %llu on others", field_names[i],
                     (unsigned long long)lo[i], (unsigned long long)hi[i]);
        return dkm_fail(DK_ERR_INVALID_ARGUMENT,
                        "%s: the ranks passed different global descriptions: %s; every rank must describe the "
                        "same global problem (the same c and H, value for value)",
                        CREATE, what);
    }
    return DK_OK;
}

/* ---- the plan ---- */

void dkm_enkf_free(dkm_enkf *e)
{
    if (!e)
        return;
    if (e->plan64 != e->plan)
        dk_plan_destroy(e->plan64);
    dk_plan_destroy(e->plan);
    int finalized = 0;
    MPI_Finalized(&finalized);
    for (int k = 0; k < 2; k++)
        if (e->point[k] != MPI_DATATYPE_NULL && !finalized)
            MPI_Type_free(&e->point[k]);
    dk_buffer *bufs[] = {e->dwin, e->dsend, e->drecv, e->dred, e->dwin64, e->dX64, e->de64, e->dpht64,
                         e->dsend64, e->drecv64, e->dred64};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        dk_buffer_destroy(bufs[k]);
    free(e->loc);
    free(e->indptr);
    free(e->indices);
    free(e->values);
    free(e->send.peer);
    free(e->recv.peer);
    free(e->sendbuf);
    free(e->recvbuf);
    free(e->requests);
    free(e->red);
    free(e->d);
    free(e);
}

/* The window's problem: c (or c2) truncated to the window, H's columns
 * inside it renumbered as the window's points, all M rows kept. */
static void make_local_problem(dkm_enkf *e, const dk_enkf_desc *g, dkm_outcome *o)
{
    size_t M = e->M, nnz = (size_t)g->H.indptr[M];
    size_t w1 = e->win.hi[1] - e->win.lo[1], w2 = e->win.hi[2] - e->win.lo[2];
    e->loc = malloc(e->win_count * sizeof *e->loc);
    e->indptr = malloc((M + 1) * sizeof *e->indptr);
    size_t inside = 0;
    for (size_t t = 0; t < nnz; t++)
        inside += index_in(e, &e->win, (size_t)g->H.indices[t]) != SIZE_MAX;
    e->indices = malloc((inside ? inside : 1) * sizeof *e->indices);
    e->values = malloc((inside ? inside : 1) * sizeof *e->values);
    if (!e->loc || !e->indptr || !e->indices || !e->values) {
        dkm_note(o, DK_ERR_OUT_OF_MEMORY, "out of host memory for its window's c and H");
        return;
    }
    for (size_t a = 0; a < w1; a++)
        for (size_t b = 0; b < w2; b++)
            e->loc[a * w2 + b] = g->loc[e->ndim == 1 ? b : a * g->ny + b];
    size_t u = 0;
    e->indptr[0] = 0;
    for (size_t j = 0; j < M; j++) {
        for (int64_t t = g->H.indptr[j]; t < g->H.indptr[j + 1]; t++) {
            size_t k = index_in(e, &e->win, (size_t)g->H.indices[t]);
            if (k != SIZE_MAX) {
                e->indices[u] = (int64_t)k;
                e->values[u++] = g->H.values[t];
            }
        }
        e->indptr[j + 1] = (int64_t)u;
    }
    dk_enkf_desc_init(&e->local);
    e->local.dtype = e->dtype;
    e->local.n = e->win_count;
    e->local.members = e->L;
    e->local.loc_ndim = e->ndim;
    if (e->ndim == 2) {
        e->local.nx = w1;
        e->local.ny = w2;
    }
    e->local.loc = e->loc;
    e->local.H = (dk_csr){M, e->win_count, e->indptr, e->indices, e->values};
    e->local.variant = e->variant;
}

/* Who sends what to whom: rank j sends rank r the points of j's box inside
 * r's window. Every rank derives its own lists from the gathered boxes. */
static void plan_exchange(dkm_enkf *e, int rank, int size, const dkm_box *boxes, dkm_outcome *o,
                          size_t *send_total, size_t *recv_total)
{
    e->send.peer = calloc((size_t)size, sizeof *e->send.peer);
    e->recv.peer = calloc((size_t)size, sizeof *e->recv.peer);
    if (!e->send.peer || !e->recv.peer) {
        dkm_note(o, DK_ERR_OUT_OF_MEMORY, "out of host memory");
        return;
    }
    size_t st = 0, rt = 0;
    for (int j = 0; j < size; j++) {
        if (j == rank)
            continue;
        dkm_box b, wj = widen(e, &boxes[j]);
        if (dkm_box_intersect(&boxes[j], &e->win, &b)) {
            e->recv.peer[e->recv.n++] = (dkm_peer){j, b, rt};
            rt += dkm_box_count(&b);
        }
        if (dkm_box_intersect(&e->own, &wj, &b)) {
            e->send.peer[e->send.n++] = (dkm_peer){j, b, st};
            st += dkm_box_count(&b);
        }
    }
    for (int k = 0; k < e->recv.n + e->send.n; k++) {
        size_t c = dkm_box_count(k < e->recv.n ? &e->recv.peer[k].box : &e->send.peer[k - e->recv.n].box);
        if (c > INT_MAX)
            dkm_note(o, DK_ERR_INVALID_ARGUMENT,
                     "a halo message would hold %zu state points; at most %d are supported (more ranks, or a "
                     "more compact c)",
                     c, INT_MAX);
    }
    *send_total = st;
    *recv_total = rt;
}

DK_MPI_API dk_status dk_mpi_enkf_plan_create(dk_context *ctx, MPI_Comm comm, const dk_enkf_desc *global,
                                             const dk_mpi_part *part, dk_mpi_plan **plan)
{
    dk_status st = dkm_check_comm(comm, CREATE);
    if (plan)
        *plan = NULL;
    if (st != DK_OK)
        return st;
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);

    /* 1. what each rank can check alone, then agreed */
    dkm_outcome o = {DK_OK, ""};
    check_local(&o, ctx, global, part, plan);
    if ((st = dkm_agree(comm, &o, CREATE)) != DK_OK)
        return st;
    /* 2. the same description everywhere */
    if ((st = same_description(comm, global)) != DK_OK)
        return st;

    dk_mpi_plan *p = calloc(1, sizeof *p);
    dkm_enkf *e = calloc(1, sizeof *e);
    dkm_box *boxes = calloc((size_t)size, sizeof *boxes);
    if (!p || !e || !boxes)
        dkm_note(&o, DK_ERR_OUT_OF_MEMORY, "out of host memory");
    if ((st = dkm_agree(comm, &o, CREATE)) != DK_OK) {
        free(p);
        free(e);
        free(boxes);
        return st;
    }
    p->comm = MPI_COMM_NULL;
    p->rank = rank;
    p->size = size;
    p->ctx = ctx;
    p->enkf = e;
    e->point[0] = e->point[1] = MPI_DATATYPE_NULL;
    e->dtype = global->dtype;
    e->esize = dk_dtype_size(global->dtype);
    e->ndim = global->loc_ndim;
    e->n = global->n;
    e->L = global->members;
    e->M = global->H.rows;
    e->shape[0] = e->ndim == 1 ? global->n : global->nx;
    e->shape[1] = e->ndim == 1 ? 1 : global->ny;
    e->variant = global->variant;
    e->own = dkm_box_of_part(e->ndim, part);
    e->own_count = dkm_box_count(&e->own);

    /* 3. the parts tile the state */
    if ((st = dkm_check_tiling(comm, e->ndim, e->shape, &e->own, boxes, CREATE, "state", "points")) != DK_OK)
        goto fail;

    /* 4. C's support, the window, the local problem and plan, this rank's
     * columns of H, the exchange and the buffers; then agreed */
    if (e->ndim == 1) {
        for (size_t t = 0; t < e->n; t++)
            if (global->loc[t] != 0)
                e->rx = t;
    } else {
        for (size_t a = 0; a < global->nx; a++)
            for (size_t b = 0; b < global->ny; b++)
                if (global->loc[a * global->ny + b] != 0) {
                    e->rx = a > e->rx ? a : e->rx;
                    e->ry = b > e->ry ? b : e->ry;
                }
    }
    e->win = widen(e, &e->own);
    e->win_count = dkm_box_count(&e->win);
    for (int a = 0; a < 2; a++) {
        e->own_in_win.lo[a] = e->own.lo[a + 1] - e->win.lo[a + 1];
        e->own_in_win.hi[a] = e->own.hi[a + 1] - e->win.lo[a + 1];
    }
    size_t send_total = 0, recv_total = 0;
    plan_exchange(e, rank, size, boxes, &o, &send_total, &recv_total);
    if (o.status == DK_OK && e->own_count) {
        make_local_problem(e, global, &o);
        if (o.status == DK_OK) {
            if ((st = dk_enkf_plan_create(ctx, &e->local, &e->plan)) != DK_OK) {
                e->plan = NULL;
                dkm_note(&o, st, "%s", dk_last_error(ctx));
            }
            if (e->dtype == DK_F64)
                e->plan64 = e->plan;
        }
    }
    if (o.status == DK_OK && e->plan && size > 1 && !dk_enkf_has_parts(e->plan))
        dkm_note(&o, DK_ERR_NOT_IMPLEMENTED,
                 "backend '%s' lacks the enkf entries cov_rows, inflate and update that the distributed layer needs "
                 "(docs/plugins.md)",
                 dk_context_backend(ctx));
    MPI_Type_contiguous((int)e->L, e->dtype == DK_F64 ? MPI_DOUBLE : MPI_FLOAT, &e->point[0]);
    MPI_Type_commit(&e->point[0]);
    MPI_Type_contiguous((int)e->L, MPI_DOUBLE, &e->point[1]);
    MPI_Type_commit(&e->point[1]);
    if (o.status == DK_OK) {
        size_t unit = e->L * sizeof(double), M = e->M; /* the exchange buffers fit float64 points */
        int nreq = e->send.n + e->recv.n;
        e->sendbuf = malloc(send_total ? send_total * unit : 1);
        e->recvbuf = malloc(recv_total ? recv_total * unit : 1);
        e->requests = malloc((size_t)(nreq ? nreq : 1) * sizeof *e->requests);
        e->red = calloc(ANA_AT + M * M + M * e->L, sizeof *e->red);
        e->d = malloc(M * e->L * sizeof *e->d);
        if (!e->sendbuf || !e->recvbuf || !e->requests || !e->red || !e->d)
            dkm_note(&o, DK_ERR_OUT_OF_MEMORY, "out of host memory for the halo and reduction buffers");
    }
    /* the covariance's device scratch, so that no call has to agree on it */
    if (o.status == DK_OK && size > 1) {
        size_t unit = e->L * e->esize;
        struct {
            dk_buffer **buf;
            size_t bytes;
        } want[4] = {{&e->dwin, e->win_count > e->own_count ? e->win_count * unit : 0},
                     {&e->dsend, send_total * unit},
                     {&e->drecv, recv_total * unit},
                     {&e->dred, (1 + e->M * e->M) * e->esize}};
        for (int k = 0; k < 4 && o.status == DK_OK; k++)
            if (want[k].bytes && (st = dk_buffer_create(ctx, want[k].bytes, want[k].buf)) != DK_OK)
                dkm_note(&o, st, "%s", dk_last_error(ctx));
        if (o.status == DK_OK && (st = dk_buffer_write(e->dred, e->red, (1 + e->M * e->M) * e->esize)) != DK_OK)
            dkm_note(&o, st, "%s", dk_last_error(ctx));
    }
    if ((st = dkm_agree(comm, &o, CREATE)) != DK_OK)
        goto fail;

    MPI_Comm_dup(comm, &p->comm);
    dkm_stats_attach(p);
    free(boxes);
    /* the halos and reductions go device to device where every rank can */
    dkm_comm_setup(p, 0);
    *plan = p;
    return DK_OK;

fail:
    free(boxes);
    dkm_enkf_free(e);
    p->enkf = NULL;
    dkm_gauss_plan_free(p);
    return st;
}

/* ---- execution: one path on device buffers; the host entry points wrap it ---- */

/* The plan, or an immediate local failure (no communicator to tell). */
static dkm_enkf *enkf_of(dk_mpi_plan *plan, const char *what, dk_status *st)
{
    if (!plan) {
        *st = dkm_fail(DK_ERR_INVALID_ARGUMENT,
                       "%s: plan must not be NULL (this rank returned at once: without a plan there is no "
                       "communicator to tell the others)",
                       what);
        return NULL;
    }
    if (!plan->enkf) {
        *st = dkm_fail(DK_ERR_INVALID_ARGUMENT, "%s: the plan is a gauss plan (dk_mpi_gauss_plan_create)", what);
        return NULL;
    }
    return plan->enkf;
}

static void note_ctx(dk_mpi_plan *p, dkm_outcome *o, dk_status st)
{
    if (st != DK_OK)
        dkm_note(o, st, "%s", dk_last_error(p->ctx));
}

/* The copy of box b (global coordinates) from an array holding box `from`
 * at byte from_off of its buffer to one holding box `to` at to_off; the
 * element is a point (unit bytes). */
static dk_box_copy point_box(const dkm_box *b, const dkm_box *from, size_t from_off, const dkm_box *to,
                             size_t to_off, size_t unit)
{
    dk_box_copy c = {.esize = unit, .src_offset = from_off, .dst_offset = to_off};
    for (int i = 0; i < 3; i++) {
        c.count[i] = b->hi[i] - b->lo[i];
        c.src_shape[i] = from->hi[i] - from->lo[i];
        c.src_lo[i] = b->lo[i] - from->lo[i];
        c.dst_shape[i] = to->hi[i] - to->lo[i];
        c.dst_lo[i] = b->lo[i] - to->lo[i];
    }
    return c;
}

/* The halo: the window `win` (a buffer holding e->win) gets this rank's
 * points from src (a buffer holding e->own) and the neighbours' points
 * within it, device to device through the plan's communicator (queued on
 * the device's stream where the plugin can), else with only the packed
 * halo rows staged through host memory and MPI. Every rank makes every
 * transfer call whatever failed before it (src then holds garbage). */
static void exchange(dk_mpi_plan *p, int is64, const dk_buffer *src, dk_buffer *win, dk_buffer *dsend,
                     dk_buffer *drecv, dkm_outcome *o)
{
    dkm_enkf *e = p->enkf;
    size_t unit = e->L * (is64 ? sizeof(double) : e->esize), sends = 0, recvs = 0;
    for (int k = 0; k < e->send.n; k++) {
        const dkm_peer *q = &e->send.peer[k];
        dk_box_copy c = point_box(&q->box, &e->own, 0, &q->box, q->offset * unit, unit);
        if (src)
            note_ctx(p, o, dk_buffer_copy_box(dsend, src, &c));
        sends += dkm_box_count(&q->box);
    }
    for (int k = 0; k < e->recv.n; k++)
        recvs += dkm_box_count(&e->recv.peer[k].box);
    dk_comm *dev = dkm_device_comm(p);
    if (!e->send.n && !e->recv.n) {
        /* nothing crosses ranks */
    } else if (dev) {
        int n = 0;
        dk_comm_move *m = malloc((size_t)(e->send.n + e->recv.n + 1) * sizeof *m);
        if (!m) {
            dkm_note(o, DK_ERR_OUT_OF_MEMORY, "out of host memory");
            return; /* the peers' calls end at the communicator's time limit */
        }
        for (int k = 0; k < e->recv.n; k++)
            m[n++] = (dk_comm_move){e->recv.peer[k].rank, 1, drecv, e->recv.peer[k].offset * unit,
                                    dkm_box_count(&e->recv.peer[k].box) * unit};
        for (int k = 0; k < e->send.n; k++)
            m[n++] = (dk_comm_move){e->send.peer[k].rank, 0, dsend, e->send.peer[k].offset * unit,
                                    dkm_box_count(&e->send.peer[k].box) * unit};
        dk_status st;
        DKM_COMM(p->comm, st = dk_comm_can_queue(dev) ? dk_comm_exchange_queued(dev, m, n)
                                                       : dk_comm_exchange(dev, m, n));
        free(m);
        note_ctx(p, o, st);
    } else {
        if (sends)
            note_ctx(p, o, dk_buffer_read(dsend, e->sendbuf, sends * unit));
        MPI_Datatype t = e->point[is64 ? 1 : 0];
        char *rb = e->recvbuf, *sb = e->sendbuf;
        int n = 0;
        for (int k = 0; k < e->recv.n; k++) {
            const dkm_peer *q = &e->recv.peer[k];
            DKM_COMM(p->comm, MPI_Irecv(rb + q->offset * unit, (int)dkm_box_count(&q->box), t, q->rank, 0, p->comm,
                                        &e->requests[n++]));
        }
        for (int k = 0; k < e->send.n; k++) {
            const dkm_peer *q = &e->send.peer[k];
            DKM_COMM(p->comm, MPI_Isend(sb + q->offset * unit, (int)dkm_box_count(&q->box), t, q->rank, 0, p->comm,
                                        &e->requests[n++]));
        }
        DKM_COMM(p->comm, MPI_Waitall(n, e->requests, MPI_STATUSES_IGNORE));
        if (recvs)
            note_ctx(p, o, dk_buffer_write(drecv, e->recvbuf, recvs * unit));
    }
    if (win == src)
        return;
    dk_box_copy c = point_box(&e->own, &e->own, 0, &e->win, 0, unit);
    if (src && e->own_count)
        note_ctx(p, o, dk_buffer_copy_box(win, src, &c));
    for (int k = 0; k < e->recv.n; k++) {
        const dkm_peer *q = &e->recv.peer[k];
        c = point_box(&q->box, &q->box, q->offset * unit, &e->win, 0, unit);
        note_ctx(p, o, dk_buffer_copy_box(win, drecv, &c));
    }
}

/* Sums the reduction buffer red (count values of dtype t, [0] the
 * failures) over the ranks, in place, with every rank getting the same
 * bits: an all-reduce on the device communicator (queued where it can
 * be), else staged through host (into e->red) with a reduce to rank 0 and
 * a broadcast. head: this rank's first `nhead` values, which replace the
 * buffer's on the host path (the device path wrote them before). On
 * return *queued says whether the sum may still be in flight
 * (dk_comm_wait), and on the host path e->red holds the sums. */
static void reduce(dk_mpi_plan *p, dk_buffer *red, size_t count, dk_dtype t, const double *head, int nhead,
                   int *queued, dkm_outcome *o)
{
    dkm_enkf *e = p->enkf;
    dk_comm *dev = dkm_device_comm(p);
    *queued = 0;
    if (dev) {
        dk_status st;
        *queued = dk_comm_can_queue(dev);
        DKM_COMM(p->comm, st = *queued ? dk_comm_all_reduce_sum_queued(dev, red, 0, count, t)
                                        : dk_comm_all_reduce_sum(dev, red, 0, count, t));
        note_ctx(p, o, st);
        return;
    }
    size_t es = dk_dtype_size(t);
    if (e->own_count) /* a rank without points adds nothing */
        note_ctx(p, o, dk_buffer_read(red, e->red, count * es));
    else
        memset(e->red, 0, count * es);
    for (int k = 0; k < nhead; k++) {
        if (t == DK_F32)
            ((float *)e->red)[k] = (float)head[k];
        else
            e->red[k] = head[k];
    }
    MPI_Datatype mt = t == DK_F32 ? MPI_FLOAT : MPI_DOUBLE;
    for (size_t off = 0; off < count; off += CHUNK) {
        int n = (int)(count - off < CHUNK ? count - off : CHUNK);
        char *at = (char *)e->red + off * es;
        DKM_COMM(p->comm, MPI_Reduce(p->rank == 0 ? MPI_IN_PLACE : at, at, n, mt, MPI_SUM, 0, p->comm));
        DKM_COMM(p->comm, MPI_Bcast(at, n, mt, 0, p->comm));
    }
    note_ctx(p, o, dk_buffer_write(red, e->red, count * es));
}

/* The end of a collective call: the queued collectives waited for, the
 * failure count read back (the first `nhead` values of red into head).
 * Returns the number of ranks that failed (-1: the wait or the read failed
 * here, which NCCL's abort makes every rank see). */
static double finish(dk_mpi_plan *p, dk_buffer *red, dk_dtype t, int queued, double *head, int nhead,
                     dkm_outcome *o)
{
    dkm_enkf *e = p->enkf;
    dk_status st = DK_OK;
    if (queued)
        DKM_COMM(p->comm, st = dk_comm_wait(dkm_device_comm(p)));
    if (st != DK_OK) {
        note_ctx(p, o, st);
        return -1;
    }
    float f[ANA_AT];
    if (dkm_device_comm(p)) {
        st = t == DK_F32 ? dk_buffer_read(red, f, (size_t)nhead * sizeof *f)
                         : dk_buffer_read(red, head, (size_t)nhead * sizeof *head);
        if (st != DK_OK) {
            note_ctx(p, o, st);
            return -1;
        }
        for (int k = 0; t == DK_F32 && k < nhead; k++)
            head[k] = f[k];
    } else
        for (int k = 0; k < nhead; k++)
            head[k] = t == DK_F32 ? ((float *)e->red)[k] : e->red[k];
    return head[0];
}

/* Writes this rank's head values (failure flag first) into red before the
 * reduction, where the device path needs it: always where there are more
 * than the flag, else only to set or reset the flag. A rank without
 * points zeroes the whole reduction first (it adds nothing). */
static void write_head(dk_mpi_plan *p, dk_buffer *red, size_t count, dk_dtype t, const double *head, int nhead,
                       int always, dkm_outcome *o)
{
    dkm_enkf *e = p->enkf;
    size_t es = dk_dtype_size(t);
    if (!dkm_device_comm(p))
        return;
    char h[ANA_AT * sizeof(double)];
    for (int k = 0; k < nhead; k++) {
        if (t == DK_F32)
            ((float *)h)[k] = (float)head[k];
        else
            ((double *)h)[k] = head[k];
    }
    if (!e->own_count) {
        memset(e->red, 0, count * es);
        memcpy(e->red, h, (size_t)nhead * es);
        note_ctx(p, o, dk_buffer_write(red, e->red, count * es));
    } else if (always || head[0] != 0 || e->red_dirty)
        note_ctx(p, o, dk_buffer_write(red, h, (size_t)nhead * es));
}

/* The failure of any rank, with the sentence of the lowest, on every
 * rank: only reached when the reduction said that a rank failed (or the
 * communication itself did), so it costs no round trip on success. */
static dk_status failed(dk_mpi_plan *p, const dkm_outcome *o, const char *what)
{
    dk_status st = dkm_agree(p->comm, o, what);
    return st != DK_OK ? st
                       : dkm_fail(DK_ERR_BACKEND, "%s: a collective call failed on another rank (see its log)", what);
}

static int too_small(const dk_buffer *b, size_t bytes)
{
    return !b || dk_buffer_size(b) < bytes;
}

/* dk_mpi_enkf_cov; o carries what the host wrapper found before. */
static dk_status cov(dk_mpi_plan *p, const dk_buffer *e_local, dk_buffer *pht_local, dk_buffer *hpht, dkm_outcome *o,
                     const char *what)
{
    dkm_enkf *e = p->enkf;
    size_t M = e->M, es = e->esize;
    if (e->own_count && o->status == DK_OK &&
        (too_small(e_local, e->own_count * e->L * es) || too_small(pht_local, e->own_count * M * es)))
        dkm_note(o, DK_ERR_INVALID_ARGUMENT,
                 "e_local and pht_local must hold its %zu state points (%zu and %zu bytes; they hold %zu and %zu)",
                 e->own_count, e->own_count * e->L * es, e->own_count * M * es, e_local ? dk_buffer_size(e_local) : 0,
                 pht_local ? dk_buffer_size(pht_local) : 0);
    if (hpht && o->status == DK_OK && too_small(hpht, M * M * es))
        dkm_note(o, DK_ERR_INVALID_ARGUMENT, "hpht holds %zu bytes; %zu are needed", dk_buffer_size(hpht),
                 M * M * es);
    /* 1. one rank: libdakit's own call */
    if (p->size == 1) {
        if (o->status == DK_OK)
            note_ctx(p, o, dk_enkf_cov(e->plan, e_local, pht_local, hpht));
        return dkm_agree(p->comm, o, what);
    }
    /* 2. the window's anomalies, then this rank's rows of PHT and its
     * terms of HPHT; a rank that failed still exchanges (its scratch) */
    int ok = o->status == DK_OK;
    dk_buffer *win = e->dwin ? e->dwin : (dk_buffer *)e_local;
    /* where the collectives queue, the phases follow each other on the
     * device and finish's wait is the call's only one (under profile each
     * phase ends with its wait, so that the reduction's is its own) */
    int deferred = !p->profile && dkm_defer_begin(p);
    exchange(p, 0, ok ? e_local : NULL, win, e->dsend, e->drecv, o);
    if (o->status == DK_OK && e->own_count)
        note_ctx(p, o, dk_enkf_cov_rows(e->plan, win, &e->own_in_win, pht_local, e->dred, 1, NULL));
    /* 3. [failures, HPHT] summed over the ranks, on the device */
    double head[1] = {o->status != DK_OK};
    size_t count = 1 + M * M;
    write_head(p, e->dred, count, e->dtype, head, 1, 0, o);
    int queued;
    reduce(p, e->dred, count, e->dtype, head, 1, &queued, o);
    if (hpht && o->status == DK_OK) {
        dk_box_copy c = {.esize = es,
                         .count = {1, 1, M * M},
                         .src_shape = {1, 1, 1 + M * M},
                         .src_lo = {0, 0, 1},
                         .dst_shape = {1, 1, M * M}};
        note_ctx(p, o, dk_buffer_copy_box(hpht, e->dred, &c));
    }
    if (deferred)
        dk_context_defer_end(p->ctx);
    double failures = finish(p, e->dred, e->dtype, queued, head, 1, o);
    e->red_dirty = failures != 0;
    if (failures != 0 || o->status != DK_OK)
        return failed(p, o, what);
    return DK_OK;
}

DK_MPI_API dk_status dk_mpi_enkf_cov(dk_mpi_plan *plan, const dk_buffer *e_local, dk_buffer *pht_local,
                                     dk_buffer *hpht)
{
    dk_status st;
    if (!enkf_of(plan, COV, &st))
        return st;
    dkm_outcome o = {DK_OK, ""};
    return cov(plan, e_local, pht_local, hpht, &o, COV);
}

/* The first non-finite value of this rank's points, noted with its global
 * state row and member. */
static void check_finite(dkm_outcome *o, const dkm_enkf *e, const void *data, const char *what)
{
    size_t count = e->own_count * e->L;
    for (size_t k = 0; k < count; k++) {
        double v = get(data, e->dtype, k);
        if (!isfinite(v)) {
            size_t pt = k / e->L, on = e->own.hi[2] - e->own.lo[2];
            size_t g = global_index(e, pt / on + e->own.lo[1], pt % on + e->own.lo[2]);
            dkm_note(o, DK_ERR_INVALID_ARGUMENT, "enkf: %s at state row %zu, member %zu is not finite (%g)", what, g,
                     k % e->L, v);
            return;
        }
    }
}

/* Device buffers for the host wrappers, made per call (the host path
 * copies anyway; loops that care keep their data on the device). */
static dk_buffer *upload(dk_mpi_plan *p, const void *src, size_t bytes, dkm_outcome *o)
{
    dk_buffer *b = NULL;
    if (o->status != DK_OK || !bytes)
        return NULL;
    dk_status st = dk_buffer_create(p->ctx, bytes, &b);
    if (st == DK_OK && src)
        st = dk_buffer_write(b, src, bytes);
    note_ctx(p, o, st);
    return b;
}

DK_MPI_API dk_status dk_mpi_enkf_cov_host(dk_mpi_plan *plan, const void *e_local, void *pht_local, void *hpht)
{
    dk_status st;
    dkm_enkf *e = enkf_of(plan, COV_HOST, &st);
    if (!e)
        return st;
    dk_mpi_plan *p = plan;
    size_t M = e->M, es = e->esize, own = e->own_count;
    dkm_outcome o = {DK_OK, ""};
    if (own && (!e_local || !pht_local))
        dkm_note(&o, DK_ERR_INVALID_ARGUMENT, "e_local and pht_local must not be NULL (its part holds %zu state points)",
                 own);
    else if (own)
        check_finite(&o, e, e_local, "the anomaly");
    dk_buffer *be = upload(p, e_local, own * e->L * es, &o), *bp = upload(p, NULL, own * M * es, &o),
              *bh = hpht ? upload(p, NULL, M * M * es, &o) : NULL;
    st = cov(p, be, bp, bh, &o, COV_HOST);
    if (st == DK_OK) { /* read back after the agreement: a failure here is this rank's alone */
        dk_status rs = own ? dk_buffer_read(bp, pht_local, own * M * es) : DK_OK;
        if (rs == DK_OK && hpht)
            rs = dk_buffer_read(bh, hpht, M * M * es);
        if (rs != DK_OK)
            st = dkm_fail(rs, "%s: reading the result back: %s", COV_HOST, dk_last_error(p->ctx));
    }
    dk_buffer_destroy(be);
    dk_buffer_destroy(bp);
    dk_buffer_destroy(bh);
    return st;
}

/* ---- the analysis ---- */

/* The analysis's float64 plan and scratch, on the first call (collective:
 * its outcome is agreed once). A rank without points gets a plan over one
 * point with no H entries, so that it runs the replicated solve too. */
static dk_status analysis_setup(dk_mpi_plan *p, const char *what)
{
    dkm_enkf *e = p->enkf;
    dkm_outcome o = {DK_OK, ""};
    size_t L = e->L, M = e->M, own = e->own_count ? e->own_count : 1;
    static const double one_c = 1.0;
    int64_t *noptr = calloc(M + 1, sizeof *noptr);
    int64_t noidx = 0;
    double noval = 0;
    if (!e->plan64 && !noptr)
        dkm_note(&o, DK_ERR_OUT_OF_MEMORY, "out of host memory");
    else if (!e->plan64) {
        dk_enkf_desc d64 = e->local;
        if (!e->own_count) { /* one point, every row of H empty */
            dk_enkf_desc_init(&d64);
            d64.n = 1;
            d64.members = L;
            d64.loc = &one_c;
            d64.H = (dk_csr){M, 1, noptr, &noidx, &noval};
        }
        d64.dtype = DK_F64;
        dk_status st = dk_enkf_plan_create(p->ctx, &d64, &e->plan64);
        if (st != DK_OK) {
            e->plan64 = NULL;
            note_ctx(p, &o, st);
        } else if (!dk_enkf_has_parts(e->plan64))
            dkm_note(&o, DK_ERR_NOT_IMPLEMENTED, "backend '%s' lacks the enkf entries cov_rows, inflate and update",
                     dk_context_backend(p->ctx));
    }
    free(noptr);
    size_t unit = L * sizeof(double), sends = 0, recvs = 0;
    for (int k = 0; k < e->send.n; k++)
        sends += dkm_box_count(&e->send.peer[k].box);
    for (int k = 0; k < e->recv.n; k++)
        recvs += dkm_box_count(&e->recv.peer[k].box);
    struct {
        dk_buffer **buf;
        size_t bytes;
    } want[7] = {{&e->dwin64, e->win_count > e->own_count ? e->win_count * unit : 0},
                 {&e->dX64, own * unit},
                 {&e->de64, own * unit},
                 {&e->dpht64, own * M * sizeof(double)},
                 {&e->dsend64, sends * unit},
                 {&e->drecv64, recvs * unit},
                 {&e->dred64, (ANA_AT + M * M + M * L) * sizeof(double)}};
    for (int k = 0; k < 7 && o.status == DK_OK; k++)
        if (want[k].bytes && !*want[k].buf)
            note_ctx(p, &o, dk_buffer_create(p->ctx, want[k].bytes, want[k].buf));
    dk_status st = dkm_agree(p->comm, &o, what);
    e->ana_ready = st == DK_OK;
    return st;
}

/* A hash of the analysis's inputs that must be the same on every rank, of
 * `bits` bits: the reduction carries h and h^2, and P sum h^2 == (sum h)^2
 * only when every rank's h is the same (all sums exact in float64). */
static double observation_hash(size_t M, const double *y, const double *r, uint64_t seed, double inflation, int bits)
{
    uint64_t h = hash_bytes(y, M * sizeof *y, 6) ^ hash_bytes(r, M * sizeof *r, 7);
    h = mix(h, seed);
    uint64_t w;
    memcpy(&w, &inflation, sizeof w);
    h = mix(h, w);
    return (double)(h >> (64 - bits));
}

static dk_status analysis(dk_mpi_plan *p, dk_buffer *x_local, const double *y, const double *r, uint64_t seed,
                          double inflation, dkm_outcome *o, const char *what)
{
    dkm_enkf *e = p->enkf;
    size_t M = e->M, L = e->L, own = e->own_count;
    if (own && o->status == DK_OK && too_small(x_local, own * L * e->esize))
        dkm_note(o, DK_ERR_INVALID_ARGUMENT, "x_local must hold its %zu state points (%zu bytes; it holds %zu)", own,
                 own * L * e->esize, x_local ? dk_buffer_size(x_local) : 0);
    if (o->status == DK_OK && (!y || !r))
        dkm_note(o, DK_ERR_INVALID_ARGUMENT, "enkf analysis: y and r must not be NULL");
    for (size_t j = 0; o->status == DK_OK && j < M; j++) {
        if (!isfinite(y[j]))
            dkm_note(o, DK_ERR_INVALID_ARGUMENT, "enkf analysis: observation %zu is not finite (%g)", j, y[j]);
        else if (!(isfinite(r[j]) && r[j] > 0))
            dkm_note(o, DK_ERR_INVALID_ARGUMENT,
                     "enkf analysis: observation error variance %zu is %g; it must be finite and > 0", j, r[j]);
    }
    if (o->status == DK_OK && !(isfinite(inflation) && inflation > 0))
        dkm_note(o, DK_ERR_INVALID_ARGUMENT, "enkf analysis: inflation is %g; it must be finite and > 0", inflation);
    /* 1. one rank: libdakit's own call */
    if (p->size == 1) {
        if (o->status == DK_OK)
            note_ctx(p, o, dk_enkf_analysis(e->plan, x_local, y, r, seed, inflation));
        return dkm_agree(p->comm, o, what);
    }
    dk_status st;
    if (!e->ana_ready && (st = analysis_setup(p, what)) != DK_OK)
        return st;
    /* 2. the inflated forecast of the own points, the window's anomalies,
     * the own rows of PHT and the terms of HPHT and H X */
    int bits = 26;
    while (bits > 1 && 2 * bits + 2 * (int)ceil(log2((double)p->size)) > 52)
        bits--;
    double h = o->status == DK_OK ? observation_hash(M, y, r, seed, inflation, bits) : 0;
    int ok = o->status == DK_OK;
    if (ok && own)
        note_ctx(p, o, dk_enkf_inflate(e->plan64, x_local, e->dtype, own, inflation, e->dX64, e->de64));
    dk_buffer *win = e->dwin64 ? e->dwin64 : e->de64;
    exchange(p, 1, ok ? e->de64 : NULL, win, e->dsend64, e->drecv64, o);
    if (o->status == DK_OK && own)
        note_ctx(p, o, dk_enkf_cov_rows(e->plan64, win, &e->own_in_win, e->dpht64, e->dred64, ANA_AT, e->dX64));
    /* 3. [failures, h, h^2, HPHT, HX] summed over the ranks */
    double head[ANA_AT] = {o->status != DK_OK, h, h * h};
    size_t count = ANA_AT + M * M + M * L;
    write_head(p, e->dred64, count, DK_F64, head, ANA_AT, 1, o);
    int queued;
    reduce(p, e->dred64, count, DK_F64, head, ANA_AT, &queued, o);
    /* 4. every rank: D = y + eps - HX, (HPHT + R) Z = D, x = X + PHT Z on
     * its own points (left alone where a rank failed) */
    if (r)
        dk_enkf_perturbations(seed, M, L, r, e->d);
    for (size_t j = 0; y && j < M; j++)
        for (size_t l = 0; l < L; l++)
            e->d[j * L + l] += y[j];
    dkm_outcome solve = {DK_OK, ""};
    if (o->status == DK_OK && e->plan64) {
        st = dk_enkf_update(e->plan64, e->dred64, ANA_AT, e->d, r, e->dpht64, e->dX64, own,
                            own ? x_local : e->dX64, own ? e->dtype : DK_F64);
        note_ctx(p, &solve, st);
    }
    double failures = finish(p, e->dred64, DK_F64, queued, head, ANA_AT, o);
    e->red_dirty = failures != 0;
    if (failures != 0 || o->status != DK_OK)
        return failed(p, o, what);
    if ((double)p->size * head[2] != head[1] * head[1])
        return dkm_fail(DK_ERR_INVALID_ARGUMENT,
                        "%s: y, r, the seed or the inflation is not the same on every rank; every rank must pass the "
                        "same y, r, seed and inflation (x_local is unspecified after this)",
                        what);
    /* the solve saw the same sums and observations on every rank */
    if (solve.status != DK_OK)
        return dkm_fail(solve.status, "%s: %s", what, solve.msg);
    return DK_OK;
}

DK_MPI_API dk_status dk_mpi_enkf_analysis(dk_mpi_plan *plan, dk_buffer *x_local, const double *y, const double *r,
                                          uint64_t seed, double inflation)
{
    dk_status st;
    if (!enkf_of(plan, ANALYSIS, &st))
        return st;
    dkm_outcome o = {DK_OK, ""};
    return analysis(plan, x_local, y, r, seed, inflation, &o, ANALYSIS);
}

DK_MPI_API dk_status dk_mpi_enkf_analysis_host(dk_mpi_plan *plan, void *x_local, const double *y, const double *r,
                                               uint64_t seed, double inflation)
{
    dk_status st;
    dkm_enkf *e = enkf_of(plan, ANALYSIS_HOST, &st);
    if (!e)
        return st;
    dk_mpi_plan *p = plan;
    size_t bytes = e->own_count * e->L * e->esize;
    dkm_outcome o = {DK_OK, ""};
    if (e->own_count && !x_local)
        dkm_note(&o, DK_ERR_INVALID_ARGUMENT, "x_local must not be NULL (its part holds %zu state points)",
                 e->own_count);
    else if (e->own_count)
        check_finite(&o, e, x_local, "the forecast");
    dk_buffer *bx = upload(p, x_local, bytes, &o);
    st = analysis(p, bx, y, r, seed, inflation, &o, ANALYSIS_HOST);
    if (st == DK_OK && bytes) {
        dk_status rs = dk_buffer_read(bx, x_local, bytes);
        if (rs != DK_OK)
            st = dkm_fail(rs, "%s: reading the result back: %s", ANALYSIS_HOST, dk_last_error(p->ctx));
    }
    dk_buffer_destroy(bx);
    return st;
}
