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

#ifdef DKM_HAVE_LAPACKE
#include <lapacke.h>
#endif

#include "internal.h"

static const char *const CREATE = "dk_mpi_enkf_plan_create";
static const char *const COV = "dk_mpi_enkf_cov_host";
static const char *const ANALYSIS = "dk_mpi_enkf_analysis_host";

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
    const char *variant; /* the caller's string (NULL: the cost model) */

    /* the window's problem: c truncated, H's columns inside the window */
    dk_enkf_desc local;
    double *loc;
    int64_t *indptr, *indices;
    double *values;
    dk_plan *plan;   /* in the plan's dtype; NULL where this rank owns nothing */
    dk_plan *plan64; /* float64, for the analysis: plan itself for f64 data, made on first use for f32 */

    /* H's entries in the columns this rank owns: M rows, columns numbered
     * as this rank's points (C order of its box), sorted within each row */
    int64_t *oindptr, *oindices;
    double *ovalues;

    /* the window's exchange: who sends which box of points to whom */
    dkm_peer_list send, recv;
    MPI_Datatype point[2]; /* L values of the plan's dtype, L float64 */
    void *sendbuf, *recvbuf;
    MPI_Request *requests;

    /* scratch */
    void *ext, *phtw;            /* cov: the window's anomalies and PHT (only where the window is larger) */
    double *red;                 /* M*M + M*L + 1: partial HPHT, HX and a failure flag */
    double *z;                   /* M x L: the analysis's innovations, then (HPHT + R)^-1 of them */
    double *X64, *ext64, *pht64; /* analysis: own X in float64, the window's anomalies and PHT (first use) */
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

static void put(void *p, dk_dtype t, size_t k, double v)
{
    if (t == DK_F32)
        ((float *)p)[k] = (float)v;
    else
        ((double *)p)[k] = v;
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

/* The window's index of this rank's k-th point. */
static size_t win_index(const dkm_enkf *e, size_t k)
{
    size_t on = e->own.hi[2] - e->own.lo[2], wn = e->win.hi[2] - e->win.lo[2];
    return (k / on + e->own.lo[1] - e->win.lo[1]) * wn + k % on + e->own.lo[2] - e->win.lo[2];
}

static void bcast_doubles(double *buf, size_t n, int root, MPI_Comm comm)
{
    for (size_t off = 0; off < n; off += CHUNK)
        DKM_COMM(comm, MPI_Bcast(buf + off, (int)(n - off < CHUNK ? n - off : CHUNK), MPI_DOUBLE, root, comm));
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
    free(e->loc);
    free(e->indptr);
    free(e->indices);
    free(e->values);
    free(e->oindptr);
    free(e->oindices);
    free(e->ovalues);
    free(e->send.peer);
    free(e->recv.peer);
    free(e->sendbuf);
    free(e->recvbuf);
    free(e->requests);
    free(e->ext);
    free(e->phtw);
    free(e->red);
    free(e->z);
    free(e->X64);
    free(e->ext64);
    free(e->pht64);
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

typedef struct owned_entry {
    int64_t col; /* global */
    int64_t pos; /* in H: ties keep H's order */
    double value;
} owned_entry;

static int by_column(const void *a, const void *b)
{
    const owned_entry *x = a, *y = b;
    if (x->col != y->col)
        return (x->col > y->col) - (x->col < y->col);
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* H's entries in this rank's columns, sorted by column within each row (as
 * libdakit sorts H), numbered as this rank's points. */
static void make_owned_h(dkm_enkf *e, const dk_enkf_desc *g, dkm_outcome *o)
{
    size_t M = e->M, nnz = (size_t)g->H.indptr[M], mine = 0;
    for (size_t t = 0; t < nnz && e->own_count; t++)
        mine += index_in(e, &e->own, (size_t)g->H.indices[t]) != SIZE_MAX;
    e->oindptr = malloc((M + 1) * sizeof *e->oindptr);
    e->oindices = malloc((mine ? mine : 1) * sizeof *e->oindices);
    e->ovalues = malloc((mine ? mine : 1) * sizeof *e->ovalues);
    owned_entry *row = malloc((mine ? mine : 1) * sizeof *row);
    if (!e->oindptr || !e->oindices || !e->ovalues || !row) {
        free(row);
        dkm_note(o, DK_ERR_OUT_OF_MEMORY, "out of host memory for its columns of H");
        return;
    }
    size_t u = 0;
    e->oindptr[0] = 0;
    for (size_t j = 0; j < M; j++) {
        size_t first = u;
        for (int64_t t = g->H.indptr[j]; t < g->H.indptr[j + 1] && e->own_count; t++)
            if (index_in(e, &e->own, (size_t)g->H.indices[t]) != SIZE_MAX)
                row[u++] = (owned_entry){g->H.indices[t], t, g->H.values[t]};
        qsort(row + first, u - first, sizeof *row, by_column);
        for (size_t v = first; v < u; v++) {
            e->oindices[v] = (int64_t)index_in(e, &e->own, (size_t)row[v].col);
            e->ovalues[v] = row[v].value;
        }
        e->oindptr[j + 1] = (int64_t)u;
    }
    free(row);
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
    if (o.status == DK_OK)
        make_owned_h(e, global, &o);
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
        e->red = malloc((M * M + M * e->L + 1) * sizeof *e->red);
        e->z = malloc(M * e->L * sizeof *e->z);
        if (e->win_count > e->own_count) {
            e->ext = malloc(e->win_count * e->L * e->esize);
            e->phtw = malloc(e->win_count * M * e->esize);
        }
        if (!e->sendbuf || !e->recvbuf || !e->requests || !e->red || !e->z ||
            (e->win_count > e->own_count && (!e->ext || !e->phtw)))
            dkm_note(&o, DK_ERR_OUT_OF_MEMORY, "out of host memory for the halo and reduction buffers");
    }
    if ((st = dkm_agree(comm, &o, CREATE)) != DK_OK)
        goto fail;

    MPI_Comm_dup(comm, &p->comm);
    dkm_stats_attach(p);
    free(boxes);
    /* the reductions: HPHT, HX and the analysis's failure flag */
    dkm_comm_setup(p, e->M * e->M + e->M * e->L + 1);
    *plan = p;
    return DK_OK;

fail:
    free(boxes);
    dkm_enkf_free(e);
    p->enkf = NULL;
    dkm_gauss_plan_free(p);
    return st;
}

/* Fills the window dst (points of L values, float64 when is64) from this
 * rank's points in src (a box sbox: this rank's own, or the window itself)
 * and the neighbours' messages. A rank that failed passes src or dst NULL:
 * it still sends (whatever its buffer holds) and receives, so no other rank
 * waits for it. */
static void exchange(dk_mpi_plan *p, int is64, const void *src, const dkm_box *sbox, void *dst)
{
    dkm_enkf *e = p->enkf;
    size_t unit = e->L * (is64 ? sizeof(double) : e->esize);
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
        if (src)
            dkm_box_copy(sb + q->offset * unit, &q->box, src, sbox, &q->box, unit);
        DKM_COMM(p->comm, MPI_Isend(sb + q->offset * unit, (int)dkm_box_count(&q->box), t, q->rank, 0, p->comm,
                                    &e->requests[n++]));
    }
    if (src && dst && src != dst)
        dkm_box_copy(dst, &e->win, src, sbox, &e->own, unit);
    DKM_COMM(p->comm, MPI_Waitall(n, e->requests, MPI_STATUSES_IGNORE));
    for (int k = 0; dst && k < e->recv.n; k++) {
        const dkm_peer *q = &e->recv.peer[k];
        dkm_box_copy(dst, &e->win, rb + q->offset * unit, &q->box, &q->box, unit);
    }
}

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

DK_MPI_API dk_status dk_mpi_enkf_cov_host(dk_mpi_plan *plan, const void *e_local, void *pht_local, void *hpht)
{
    dk_status st;
    dkm_enkf *e = enkf_of(plan, COV, &st);
    if (!e)
        return st;
    dk_mpi_plan *p = plan;
    size_t M = e->M;
    /* 1. the inputs, agreed before any work; hpht on every rank or none */
    dkm_outcome o = {DK_OK, ""};
    if (e->own_count && (!e_local || !pht_local))
        dkm_note(&o, DK_ERR_INVALID_ARGUMENT,
                 "e_local and pht_local must not be NULL (its part holds %zu state points)", e->own_count);
    else if (e->own_count && p->size > 1) /* one rank: libdakit's call checks */
        check_finite(&o, e, e_local, "the anomaly");
    if ((st = dkm_agree(p->comm, &o, COV)) != DK_OK)
        return st;
    uint64_t has = hpht != NULL, lo, hi;
    same_fields(p->comm, &has, 1, &lo, &hi);
    if (lo != hi)
        return dkm_fail(DK_ERR_INVALID_ARGUMENT,
                        "%s: hpht is NULL on some ranks and not on others; pass it on every rank or on none", COV);

    /* 2. one rank: libdakit's call on the whole state */
    if (p->size == 1) {
        if (e->plan && (st = dk_enkf_cov_host(e->plan, e_local, pht_local, hpht)) != DK_OK)
            dkm_note(&o, st, "%s", dk_last_error(p->ctx));
        return dkm_agree(p->comm, &o, COV);
    }

    /* 3. the window's anomalies, PHT on the window, this rank's rows kept */
    int widened = e->win_count > e->own_count;
    if (e->send.n || e->recv.n)
        exchange(p, 0, e_local, &e->own, widened ? e->ext : NULL);
    if (e->plan) {
        st = dk_enkf_cov_host(e->plan, widened ? e->ext : e_local, widened ? e->phtw : pht_local, NULL);
        if (st != DK_OK)
            dkm_note(&o, st, "%s", dk_last_error(p->ctx));
        else if (widened)
            dkm_box_copy(pht_local, &e->own, e->phtw, &e->win, &e->own, M * e->esize);
    }

    /* 4. HPHT: this rank's terms, summed over ranks */
    if (hpht) {
        double *h = e->red;
        memset(h, 0, M * M * sizeof *h);
        if (o.status == DK_OK)
            for (size_t a = 0; a < M; a++)
                for (int64_t t = e->oindptr[a]; t < e->oindptr[a + 1]; t++) {
                    size_t k = (size_t)e->oindices[t];
                    double v = e->ovalues[t];
                    for (size_t b = 0; b < M; b++)
                        h[a * M + b] += v * get(pht_local, e->dtype, k * M + b);
                }
        DKM_COMM(p->comm, dkm_sum(p, h, M * M, -1));
        for (size_t k = 0; k < M * M; k++)
            put(hpht, e->dtype, k, h[k]);
    }
    return dkm_agree(p->comm, &o, COV);
}

/* The analysis's inputs that must be the same on every rank. */
static dk_status same_observations(MPI_Comm comm, size_t M, const double *y, const double *r, uint64_t seed,
                                   double inflation)
{
    static const char *const names[4] = {"the seed", "the inflation", "y", "r"};
    uint64_t v[4], lo[4], hi[4];
    v[0] = seed;
    memcpy(&v[1], &inflation, sizeof inflation);
    v[2] = hash_bytes(y, M * sizeof *y, 6);
    v[3] = hash_bytes(r, M * sizeof *r, 7);
    same_fields(comm, v, 4, lo, hi);
    for (int i = 0; i < 4; i++)
        if (lo[i] != hi[i]) {
            char values[96] = "";
            if (i == 0)
                snprintf(values, sizeof values, " (%llu on some ranks, %llu on others)", (unsigned long long)lo[i],
                         (unsigned long long)hi[i]);
            return dkm_fail(DK_ERR_INVALID_ARGUMENT,
                            "%s: %s is not the same on every rank%s; every rank must pass the same y, r, seed and "
                            "inflation",
                            ANALYSIS, names[i], values);
        }
    return DK_OK;
}

/* Makes the float64 plan and the analysis's scratch on first use. */
static void analysis_scratch(dk_mpi_plan *p, dkm_outcome *o)
{
    dkm_enkf *e = p->enkf;
    if (!e->own_count)
        return;
    if (!e->plan64) {
        dk_enkf_desc d64 = e->local;
        d64.dtype = DK_F64;
        dk_status st = dk_enkf_plan_create(p->ctx, &d64, &e->plan64);
        if (st != DK_OK) {
            e->plan64 = NULL;
            dkm_note(o, st, "%s", dk_last_error(p->ctx));
            return;
        }
    }
    if (!e->X64)
        e->X64 = malloc(e->own_count * e->L * sizeof *e->X64);
    if (!e->ext64)
        e->ext64 = malloc(e->win_count * e->L * sizeof *e->ext64);
    if (!e->pht64)
        e->pht64 = malloc(e->win_count * e->M * sizeof *e->pht64);
    if (!e->X64 || !e->ext64 || !e->pht64)
        dkm_note(o, DK_ERR_OUT_OF_MEMORY, "out of host memory for the analysis");
}

#ifdef DKM_HAVE_LAPACKE
/* Rank 0: D = y + eps - HX in z, then (HPHT + R) Z = D in place. */
static void solve(dkm_enkf *e, double *hpht, const double *hx, const double *y, const double *r, uint64_t seed,
                  double *z, dkm_outcome *o)
{
    size_t M = e->M, L = e->L;
    dk_enkf_perturbations(seed, M, L, r, z);
    for (size_t j = 0; j < M; j++) {
        hpht[j * M + j] += r[j];
        for (size_t l = 0; l < L; l++) {
            z[j * L + l] += y[j];
            z[j * L + l] -= hx[j * L + l];
        }
    }
    lapack_int info =
        LAPACKE_dposv(LAPACK_ROW_MAJOR, 'L', (lapack_int)M, (lapack_int)L, hpht, (lapack_int)M, z, (lapack_int)L);
    if (info > 0)
        dkm_note(o, DK_ERR_INVALID_ARGUMENT,
                 "enkf analysis: HPHT + R is not positive definite (LAPACKE_dposv, minor %d)", (int)info);
    else if (info < 0)
        dkm_note(o, DK_ERR_BACKEND, "enkf analysis: LAPACKE_dposv rejected argument %d", (int)-info);
}
#endif

DK_MPI_API dk_status dk_mpi_enkf_analysis_host(dk_mpi_plan *plan, void *x_local, const double *y, const double *r,
                                               uint64_t seed, double inflation)
{
    dk_status st;
    dkm_enkf *e = enkf_of(plan, ANALYSIS, &st);
    if (!e)
        return st;
    dk_mpi_plan *p = plan;
    size_t M = e->M, L = e->L;
    /* 1. the inputs, agreed before any work, and the same observations,
     * seed and inflation everywhere */
    dkm_outcome o = {DK_OK, ""};
#ifndef DKM_HAVE_LAPACKE
    if (p->size > 1)
        dkm_note(&o, DK_ERR_NOT_IMPLEMENTED,
                 "libdakit-mpi was built without LAPACKE, which the distributed analysis's M x M solve needs");
#endif
    if (e->own_count && !x_local)
        dkm_note(&o, DK_ERR_INVALID_ARGUMENT, "x_local must not be NULL (its part holds %zu state points)",
                 e->own_count);
    if (!y || !r)
        dkm_note(&o, DK_ERR_INVALID_ARGUMENT, "enkf analysis: y and r must not be NULL");
    for (size_t j = 0; o.status == DK_OK && j < M; j++) {
        if (!isfinite(y[j]))
            dkm_note(&o, DK_ERR_INVALID_ARGUMENT, "enkf analysis: observation %zu is not finite (%g)", j, y[j]);
        else if (!(isfinite(r[j]) && r[j] > 0))
            dkm_note(&o, DK_ERR_INVALID_ARGUMENT,
                     "enkf analysis: observation error variance %zu is %g; it must be finite and > 0", j, r[j]);
    }
    if (!(isfinite(inflation) && inflation > 0))
        dkm_note(&o, DK_ERR_INVALID_ARGUMENT, "enkf analysis: inflation is %g; it must be finite and > 0",
                 inflation);
    if (o.status == DK_OK && e->own_count && p->size > 1) /* one rank: libdakit's call checks */
        check_finite(&o, e, x_local, "the forecast");
    if ((st = dkm_agree(p->comm, &o, ANALYSIS)) != DK_OK)
        return st;
    if ((st = same_observations(p->comm, M, y, r, seed, inflation)) != DK_OK)
        return st;

    /* 2. one rank: libdakit's call on the whole state */
    if (p->size == 1) {
        if (e->plan && (st = dk_enkf_analysis_host(e->plan, x_local, y, r, seed, inflation)) != DK_OK)
            dkm_note(&o, st, "%s", dk_last_error(p->ctx));
        return dkm_agree(p->comm, &o, ANALYSIS);
    }

    /* 3. the mean and the inflated anomalies of each own row, in float64,
     * in the order of libdakit's reference; the anomalies go straight into
     * the window */
    analysis_scratch(p, &o);
    int ok = o.status == DK_OK && e->own_count;
    for (size_t k = 0; ok && k < e->own_count; k++) {
        double mean = 0, *w = e->ext64 + win_index(e, k) * L, *X = e->X64 + k * L;
        for (size_t l = 0; l < L; l++)
            mean += get(x_local, e->dtype, k * L + l);
        mean /= (double)L;
        for (size_t l = 0; l < L; l++) {
            w[l] = inflation * (get(x_local, e->dtype, k * L + l) - mean);
            X[l] = mean + w[l];
        }
    }
    exchange(p, 1, ok ? e->ext64 : NULL, &e->win, ok ? e->ext64 : NULL);
    if (ok && (st = dk_enkf_cov_host(e->plan64, e->ext64, e->pht64, NULL)) != DK_OK) {
        dkm_note(&o, st, "%s", dk_last_error(p->ctx));
        ok = 0;
    }

    /* 4. this rank's terms of HPHT and of H X, summed on rank 0 with a flag
     * that says whether any rank failed */
    double *hpht = e->red, *hx = e->red + M * M, *flag = hx + M * L;
    memset(e->red, 0, (M * M + M * L + 1) * sizeof *e->red);
    if (ok)
        for (size_t a = 0; a < M; a++)
            for (int64_t t = e->oindptr[a]; t < e->oindptr[a + 1]; t++) {
                size_t k = (size_t)e->oindices[t];
                double v = e->ovalues[t];
                const double *row = e->pht64 + win_index(e, k) * M, *X = e->X64 + k * L;
                for (size_t b = 0; b < M; b++)
                    hpht[a * M + b] += v * row[b];
                for (size_t l = 0; l < L; l++)
                    hx[a * L + l] += v * X[l];
            }
    *flag = o.status != DK_OK;
    DKM_COMM(p->comm, dkm_sum(p, e->red, M * M + M * L + 1, 0));

    /* 5. rank 0 solves (unless a rank failed), the outcome is agreed, Z is
     * broadcast and each rank updates its own rows */
    double *z = e->z;
#ifdef DKM_HAVE_LAPACKE
    if (p->rank == 0 && *flag == 0)
        solve(e, hpht, hx, y, r, seed, z, &o);
#endif
    if ((st = dkm_agree(p->comm, &o, ANALYSIS)) != DK_OK)
        return st;
    bcast_doubles(z, M * L, 0, p->comm);
    for (size_t k = 0; k < e->own_count; k++) {
        const double *row = e->pht64 + win_index(e, k) * M, *X = e->X64 + k * L;
        for (size_t l = 0; l < L; l++) {
            double v = X[l];
            for (size_t j = 0; j < M; j++)
                v += row[j] * z[j * L + l];
            put(x_local, e->dtype, k * L + l, v);
        }
    }
    return DK_OK;
}
