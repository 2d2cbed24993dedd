/* Distributed kmeans: the points split between ranks as contiguous ranges
 * (or, with the contiguity cost, bands of whole image rows), on the device
 * of each rank's context.
 *
 * One rank: libdakit's own plan of the whole problem, one dk_kmeans_execute.
 * More ranks: each iteration is a short script on the device's queue,
 *   assign_partial (labels and this rank's per-cluster sums and counts, in
 *   double) -> all-reduce of the k d + k sums and a failure flag -> update
 *   (the same centroids from the same reduced sums on every rank) [-> the
 *   contiguity window's label halos, device to device].
 * The plugin's phases (dk_kmeans_ops in dakit/kmeans.h) run on the part's
 * plan; the collectives go through the plan's device communicator, queued
 * between them on the device's stream where the plugin can queue them, else
 * through host staging (read the small sums, MPI, write them back). With
 * tol 0 nothing waits on the host until the end; with tol > 0 the host
 * reads the device's stop flag (the same on every rank) every BATCH
 * iterations, and the phases queued after the stop do nothing. A failure on
 * one rank rides in the reductions as a flag, so every rank stops, reads
 * the same flag at the end and only then agrees on the sentence over MPI. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/kmeans.h>

#include "../algorithms/kmeans/kmeans_part.h"
#include "../core/comm.h"
#include "internal.h"

static const char *const CREATE = "dk_mpi_kmeans_plan_create";
static const char *const EXEC = "dk_mpi_kmeans_execute";
static const char *const EXEC_HOST = "dk_mpi_kmeans_execute_host";

/* marks a kmeans plan: stages[0].axis (gauss uses -1 and 0..2) */
#define KMEANS_AXIS (-2)
/* Iterations queued between two reads of the stop flag when tol > 0. */
#define BATCH 8
/* The end's reduction: objective, unmasked count, failure flag. */
#define TAIL_LEN 3

/* Rows of this rank's wide label buffer sent to or received from a peer;
 * row0 counts from the buffer's first row (global row lo - r). */
typedef struct halo_move {
    int peer, recv;
    size_t row0, rows;
} halo_move;

typedef struct dkm_kmeans {
    dk_kmeans_desc desc; /* global; variant not kept */
    int contiguity;
    size_t lo, count;    /* this rank's rows (contiguity) or points */
    size_t per;          /* points per unit of the part: cols or 1 */
    size_t npts;         /* this rank's points */
    size_t r;            /* halo rows: window / 2 under contiguity, else 0 */
    dk_plan *whole;      /* one rank: libdakit's plan of the whole problem */
    dk_plan *part;       /* more ranks: this part's plan of the phases */
    /* device scratch of the phases: sums (DK_KMEANS_SUMS_LEN), state, the
     * end's tail, stand-in centroids for a rank whose own are unusable, and
     * (contiguity) two wide label buffers of rows [lo - r, lo + count + r) */
    dk_buffer *sums, *state, *tail, *spare, *wide[2];
    double *host;        /* host staging of a reduction */
    int32_t *host_wide;  /* host staging of a wide label buffer */
    size_t wide_len;     /* labels in a wide buffer */
    int nmoves;
    halo_move *moves;
    dk_comm_move *dmoves;
    MPI_Request *req;
    size_t band[]; /* size x 2: every rank's [lo, hi) in units (rows or points) */
} dkm_kmeans;

static dkm_kmeans *state(dk_mpi_plan *p) { return (dkm_kmeans *)p->work; }

static int invalid(void) { return 0; }
#define BAD(...) (dkm_note(o, DK_ERR_INVALID_ARGUMENT, __VA_ARGS__), invalid())

static int valid_description(dkm_outcome *o, const dk_kmeans_desc *d)
{
    if (d->n < 1)
        return BAD("kmeans: n is 0; at least one point is needed");
    if (d->d < 1 || d->d > DK_KMEANS_MAX_D)
        return BAD("kmeans: d is %d; it must be 1 .. %d", d->d, DK_KMEANS_MAX_D);
    if (d->k < 1 || d->k > DK_KMEANS_MAX_K || (size_t)d->k > d->n)
        return BAD("kmeans: k is %d; the distributed layer takes 1 .. %d (DK_KMEANS_MAX_K) and at most n (%zu)",
                   d->k, DK_KMEANS_MAX_K, d->n);
    if (d->init != DK_KMEANS_INIT_GIVEN)
        return BAD("kmeans: the distributed layer starts from the caller's centroids only (desc.init "
                   "DK_KMEANS_INIT_GIVEN, not %d); seed them with dk_kmeans_seed on one rank and broadcast them",
                   (int)d->init);
    if (d->max_iters < 1)
        return BAD("kmeans: max_iters is %d; it must be >= 1", d->max_iters);
    if (!(d->tol >= 0) || !isfinite(d->tol))
        return BAD("kmeans: tol is %g; it must be finite and >= 0", d->tol);
    if (d->layout != DK_KMEANS_POINT_MAJOR)
        return BAD("kmeans: the distributed layer takes point-major points only (layout %d)", (int)d->layout);
    if ((d->rows || d->cols) && d->rows * d->cols == d->n && d->lambda < 1) {
        if (!(d->lambda >= 0))
            return BAD("kmeans: lambda is %g; it must be 0 .. 1", d->lambda);
        if (d->window < 1 || d->window > DK_KMEANS_MAX_WINDOW || d->window % 2 == 0)
            return BAD("kmeans: window is %d; it must be odd, 1 .. %d", d->window, DK_KMEANS_MAX_WINDOW);
    }
    return 1;
}

/* the scalars every rank must agree on */
static void scalars(const dk_kmeans_desc *d, double v[10])
{
    v[0] = (double)d->n, v[1] = d->d, v[2] = d->k, v[3] = d->max_iters, v[4] = d->tol;
    v[5] = (double)d->layout, v[6] = (double)d->rows, v[7] = (double)d->cols, v[8] = d->lambda;
    v[9] = d->window;
}

static const char *const scalar_names[10] = {"n", "d", "k", "max_iters", "tol", "layout", "rows", "cols",
                                             "lambda", "window"};

void dkm_kmeans_free(dk_mpi_plan *p)
{
    if (!p || !p->kmeans || !p->work)
        return;
    dkm_kmeans *k = state(p);
    dk_plan_destroy(k->whole);
    dk_plan_destroy(k->part);
    dk_buffer *b[] = {k->sums, k->state, k->tail, k->spare, k->wide[0], k->wide[1]};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        dk_buffer_destroy(b[i]);
    free(k->host);
    free(k->host_wide);
    free(k->moves);
    free(k->dmoves);
    free(k->req);
    free(k);
    p->work = NULL;
}

/* Who sends which rows of the wide label buffers to whom: this rank
 * receives the rows of its widened band that others own, and sends its own
 * rows that lie in another's widened band (a halo may span thin bands). */
static int halo_pattern(dk_mpi_plan *p, dkm_kmeans *k)
{
    const long r = (long)k->r, rows = (long)k->desc.rows, lo = (long)k->lo, hi = (long)(k->lo + k->count);
    const long base = lo - r;
    k->moves = calloc(2 * (size_t)p->size + 1, sizeof *k->moves);
    k->dmoves = calloc(2 * (size_t)p->size + 1, sizeof *k->dmoves);
    k->req = calloc(2 * (size_t)p->size + 1, sizeof *k->req);
    if (!k->moves || !k->dmoves || !k->req)
        return 0;
    for (int j = 0; j < p->size && lo < hi; j++) {
        const long jlo = (long)k->band[2 * j], jhi = (long)k->band[2 * j + 1];
        if (j == p->rank || jlo >= jhi)
            continue;
        long a = jlo > lo - r ? jlo : lo - r, b = jhi < hi + r ? jhi : hi + r;
        if (a < b)
            k->moves[k->nmoves++] = (halo_move){j, 1, (size_t)(a - base), (size_t)(b - a)};
        const long wlo = jlo - r > 0 ? jlo - r : 0, whi = jhi + r < rows ? jhi + r : rows;
        a = lo > wlo ? lo : wlo, b = hi < whi ? hi : whi;
        if (a < b)
            k->moves[k->nmoves++] = (halo_move){j, 0, (size_t)(a - base), (size_t)(b - a)};
    }
    return 1;
}

/* The part's plan and the phases' scratch, made once with the plan. */
static void make_part(dk_mpi_plan *p, dkm_kmeans *k, const dk_kmeans_desc *global, dkm_outcome *o)
{
    dk_context *ctx = p->ctx;
    const dk_kmeans_desc *d = global;
    dk_kmeans_desc l = *d;
    l.n = k->npts;
    if (!k->contiguity || !k->count)
        l.rows = l.cols = 0, l.lambda = 1;
    else
        l.rows = k->count;
    if (dk_kmeans_part_plan_create(ctx, &l, &k->part) != DK_OK) {
        dkm_note(o, DK_ERR_NOT_IMPLEMENTED, "%s", dk_last_error(ctx));
        return;
    }
    const size_t slen = DK_KMEANS_SUMS_LEN(d->k, d->d), kd = (size_t)d->k * (size_t)d->d;
    k->wide_len = k->contiguity && k->count ? (k->count + 2 * k->r) * d->cols : 0;
    k->host = calloc(slen, sizeof *k->host);
    k->host_wide = malloc((k->wide_len ? k->wide_len : 1) * sizeof *k->host_wide);
    if (!k->host || !k->host_wide || !halo_pattern(p, k)) {
        dkm_note(o, DK_ERR_OUT_OF_MEMORY, "out of host memory");
        return;
    }
    if (dk_buffer_create(ctx, slen * sizeof(double), &k->sums) != DK_OK ||
        dk_buffer_create(ctx, DK_KMEANS_STATE_LEN * sizeof(double), &k->state) != DK_OK ||
        dk_buffer_create(ctx, TAIL_LEN * sizeof(double), &k->tail) != DK_OK ||
        dk_buffer_create(ctx, kd * sizeof(float), &k->spare) != DK_OK) {
        dkm_note(o, DK_ERR_OUT_OF_MEMORY, "%s", dk_last_error(ctx));
        return;
    }
    /* rows outside the image stay -1 for ever; the others are rewritten */
    for (size_t i = 0; i < k->wide_len; i++)
        k->host_wide[i] = -1;
    for (int w = 0; w < 2 && k->wide_len; w++)
        if (dk_buffer_create(ctx, k->wide_len * sizeof(int32_t), &k->wide[w]) != DK_OK ||
            dk_buffer_write(k->wide[w], k->host_wide, k->wide_len * sizeof(int32_t)) != DK_OK) {
            dkm_note(o, DK_ERR_OUT_OF_MEMORY, "%s", dk_last_error(ctx));
            return;
        }
}

DK_MPI_API dk_status dk_mpi_kmeans_plan_create(dk_context *ctx, MPI_Comm comm, const dk_kmeans_desc *global,
                                               const dk_mpi_part *part, dk_mpi_plan **plan)
{
    dk_status st = dkm_check_comm(comm, CREATE);
    if (st != DK_OK)
        return st;
    if (plan)
        *plan = NULL;
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    dkm_outcome oc = {DK_OK, ""}, *o = &oc;
    dk_kmeans_desc d;
    memset(&d, 0, sizeof d);
    if (!ctx || !global || !part || !plan)
        BAD("ctx, global, part and plan must not be NULL");
    else {
        d = *global;
        valid_description(o, &d);
    }
    /* the same description on every rank: min and max of each scalar */
    double v[20], lo[10], hi[10];
    scalars(&d, v);
    for (int i = 0; i < 10; i++)
        v[10 + i] = -v[i];
    double r[20];
    MPI_Allreduce(v, r, 20, MPI_DOUBLE, MPI_MIN, comm);
    for (int i = 0; i < 10; i++)
        lo[i] = r[i], hi[i] = -r[10 + i];
    if (oc.status == DK_OK)
        for (int i = 0; i < 10; i++)
            if (lo[i] != hi[i]) {
                BAD("the description's %s is not the same on every rank (%g here, from %g to %g over the ranks)",
                    scalar_names[i], v[i], lo[i], hi[i]);
                break;
            }
    st = dkm_agree(comm, o, CREATE);
    if (st != DK_OK)
        return st;

    int contiguity = d.rows && d.cols && d.rows * d.cols == d.n && d.lambda < 1;
    size_t units = contiguity ? d.rows : d.n, per = contiguity ? d.cols : 1;
    if (part->offset[0] > units || part->extent[0] > units - part->offset[0])
        BAD("its part [%zu, %zu) lies outside the %zu %s", part->offset[0], part->offset[0] + part->extent[0],
            units, contiguity ? "image rows" : "points");
    st = dkm_agree(comm, o, CREATE);
    if (st != DK_OK)
        return st;
    dk_mpi_part p1;
    memset(&p1, 0, sizeof p1);
    p1.offset[0] = part->offset[0];
    p1.extent[0] = part->extent[0];
    dkm_box own = dkm_box_of_part(1, &p1), *boxes = malloc((size_t)size * sizeof *boxes);
    if (!boxes)
        dkm_note(o, DK_ERR_OUT_OF_MEMORY, "out of host memory");
    st = dkm_agree(comm, o, CREATE);
    if (st != DK_OK) {
        free(boxes);
        return st;
    }
    st = dkm_check_tiling(comm, 1, &units, &own, boxes, CREATE, contiguity ? "image" : "point set",
                          contiguity ? "rows" : "points");
    if (st != DK_OK) {
        free(boxes);
        return st;
    }

    dk_mpi_plan *p = calloc(1, sizeof *p);
    dkm_kmeans *k = calloc(1, sizeof *k + 2 * (size_t)size * sizeof(size_t));
    if (!p || !k)
        BAD("out of host memory"), oc.status = DK_ERR_OUT_OF_MEMORY;
    if (p) {
        p->comm = MPI_COMM_NULL;
        p->work = k;
        p->kmeans = 1;
        p->nstages = 1;
        p->stages[0].axis = KMEANS_AXIS;
        p->ctx = ctx;
        p->rank = rank, p->size = size;
    } else {
        free(k);
        k = NULL;
    }
    if (k) {
        k->desc = d;
        k->desc.variant = NULL;
        k->contiguity = contiguity;
        k->lo = part->offset[0];
        k->count = part->extent[0];
        k->per = per;
        k->npts = k->count * per;
        k->r = contiguity ? (size_t)d.window / 2 : 0;
        for (int j = 0; j < size; j++)
            k->band[2 * j] = boxes[j].lo[2], k->band[2 * j + 1] = boxes[j].hi[2];
        if (size == 1) {
            /* the layer adds nothing but its checks */
            if (dk_kmeans_plan_create(ctx, &d, &k->whole) != DK_OK)
                dkm_note(o, dk_kmeans_variants(ctx) ? DK_ERR_INVALID_ARGUMENT : DK_ERR_NOT_IMPLEMENTED, "%s",
                         dk_last_error(ctx));
        } else if (!dk_kmeans_variants(ctx)) {
            dkm_note(o, DK_ERR_NOT_IMPLEMENTED, "backend %s has no kmeans", dk_context_backend(ctx));
        } else if (!dk_kmeans_has_phases(ctx)) {
            dkm_note(o, DK_ERR_NOT_IMPLEMENTED,
                     "backend %s has no kmeans phases (assign_partial, update, objective), which the distributed "
                     "layer runs",
                     dk_context_backend(ctx));
        } else {
            make_part(p, k, &d, o);
        }
    }
    free(boxes);
    st = dkm_agree(comm, o, CREATE);
    if (st == DK_OK && MPI_Comm_dup(comm, &p->comm) != MPI_SUCCESS)
        st = dkm_fail(DK_ERR_BACKEND, "%s: MPI_Comm_dup failed", CREATE);
    if (st != DK_OK) {
        dkm_kmeans_free(p);
        dkm_gauss_plan_free(p);
        return st;
    }
    /* the sums, counts and failure flag of one iteration */
    dkm_comm_setup(p, DK_KMEANS_SUMS_LEN(d.k, d.d));
    dkm_stats_attach(p);
    *plan = p;
    return DK_OK;
}

static int is_kmeans(const dk_mpi_plan *p)
{
    return p && !p->enkf && p->kmeans && p->nstages == 1 && p->stages[0].axis == KMEANS_AXIS && p->work;
}

/* The run of one execute on this rank: whether its own buffers still take
 * part (ok), and whether a collective failed on the device (comm_bad). */
typedef struct run {
    dk_mpi_plan *p;
    dkm_kmeans *k;
    dk_comm *dc; /* the device communicator, or NULL: host staging */
    dkm_outcome o;
    int ok, comm_bad;
} run;

static void fail_call(run *u, dk_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail_call(run *u, dk_status st, const char *fmt, ...)
{
    char text[DKM_MSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    dkm_note(&u->o, st, "%s", text);
    u->ok = 0;
}

/* This rank's contribution to a reduction of n doubles (the last the
 * failure flag) once it failed: zeros and the flag. */
static void write_flag(run *u, dk_buffer *buf, size_t n)
{
    memset(u->k->host, 0, n * sizeof *u->k->host);
    u->k->host[n - 1] = 1;
    dk_buffer_write(buf, u->k->host, n * sizeof *u->k->host);
}

/* Sums n doubles of buf over the ranks, in place, every rank the same bits:
 * queued on the device's stream, or through the host (reduce to rank 0 and
 * broadcast, since an all-reduce need not give every rank the same bits). */
static void reduce(run *u, dk_buffer *buf, size_t n)
{
    if (u->dc) {
        dk_status st;
        /* queued: the stats see only the time to queue it */
        DKM_COMM(u->p->comm, st = dk_comm_can_queue(u->dc) ? dk_comm_all_reduce_sum_queued(u->dc, buf, 0, n, DK_F64)
                                                          : dk_comm_all_reduce_sum(u->dc, buf, 0, n, DK_F64));
        if (st != DK_OK) {
            fail_call(u, st, "%s", dk_last_error(u->p->ctx));
            u->comm_bad = 1;
        }
        return;
    }
    dk_mpi_plan *p = u->p;
    double *h = u->k->host;
    if (dk_buffer_read(buf, h, n * sizeof *h) != DK_OK) {
        fail_call(u, DK_ERR_BACKEND, "%s", dk_last_error(p->ctx));
        memset(h, 0, n * sizeof *h);
        h[n - 1] = 1;
    }
    DKM_COMM(p->comm, MPI_Reduce(p->rank == 0 ? MPI_IN_PLACE : h, h, (int)n, MPI_DOUBLE, MPI_SUM, 0, p->comm));
    DKM_COMM(p->comm, MPI_Bcast(h, (int)n, MPI_DOUBLE, 0, p->comm));
    if (dk_buffer_write(buf, h, n * sizeof *h) != DK_OK)
        fail_call(u, DK_ERR_BACKEND, "%s", dk_last_error(p->ctx));
}

/* The label halos of wide buffer w: device to device, or through the host. */
static void halos(run *u, dk_buffer *w)
{
    dkm_kmeans *k = u->k;
    const size_t cols = k->desc.cols;
    if (!k->nmoves)
        return;
    if (u->dc) {
        for (int i = 0; i < k->nmoves; i++)
            k->dmoves[i] = (dk_comm_move){k->moves[i].peer, k->moves[i].recv, w,
                                          k->moves[i].row0 * cols * sizeof(int32_t),
                                          k->moves[i].rows * cols * sizeof(int32_t)};
        dk_status st;
        DKM_COMM(u->p->comm, st = dk_comm_can_queue(u->dc) ? dk_comm_exchange_queued(u->dc, k->dmoves, k->nmoves)
                                                          : dk_comm_exchange(u->dc, k->dmoves, k->nmoves));
        if (st != DK_OK) {
            fail_call(u, st, "%s", dk_last_error(u->p->ctx));
            u->comm_bad = 1;
        }
        return;
    }
    dk_mpi_plan *p = u->p;
    int32_t *h = k->host_wide;
    if (dk_buffer_read(w, h, k->wide_len * sizeof *h) != DK_OK)
        fail_call(u, DK_ERR_BACKEND, "%s", dk_last_error(p->ctx));
    for (int i = 0; i < k->nmoves; i++) {
        const halo_move *m = &k->moves[i];
        int32_t *at = h + m->row0 * cols;
        int count = (int)(m->rows * cols);
        if (m->recv)
            MPI_Irecv(at, count, MPI_INT32_T, m->peer, 7, p->comm, &k->req[i]);
        else
            MPI_Isend(at, count, MPI_INT32_T, m->peer, 7, p->comm, &k->req[i]);
    }
    DKM_COMM(p->comm, MPI_Waitall(k->nmoves, k->req, MPI_STATUSES_IGNORE));
    if (dk_buffer_write(w, h, k->wide_len * sizeof *h) != DK_OK)
        fail_call(u, DK_ERR_BACKEND, "%s", dk_last_error(p->ctx));
}

/* Reads n doubles of buf once the work queued before has finished. */
static void read_back(run *u, const dk_buffer *buf, double *out, size_t n)
{
    if (u->dc && dk_comm_can_queue(u->dc) && dk_comm_wait(u->dc) != DK_OK) {
        fail_call(u, DK_ERR_BACKEND, "%s", dk_last_error(u->p->ctx));
        u->comm_bad = 1;
    }
    if (dk_buffer_read(buf, out, n * sizeof *out) != DK_OK) {
        fail_call(u, DK_ERR_BACKEND, "%s", dk_last_error(u->p->ctx));
        u->comm_bad = 1;
    }
}

static int fits(const dk_buffer *b, size_t bytes) { return b && dk_buffer_size(b) >= bytes; }

DK_MPI_API dk_status dk_mpi_kmeans_execute(dk_mpi_plan *plan, const dk_buffer *points_local,
                                           const dk_buffer *mask_local, const dk_buffer *init,
                                           dk_buffer *labels_local, dk_buffer *centroids, dk_kmeans_result *result)
{
    if (!plan)
        return dkm_fail(DK_ERR_INVALID_ARGUMENT, "%s: plan must not be NULL", EXEC);
    if (!is_kmeans(plan))
        return dkm_fail(DK_ERR_INVALID_ARGUMENT, "%s: the plan is not a kmeans plan", EXEC);
    dkm_kmeans *k = state(plan);
    const dk_kmeans_desc *d = &k->desc;
    const size_t kd = (size_t)d->k * (size_t)d->d, npts = k->npts, slen = DK_KMEANS_SUMS_LEN(d->k, d->d);
    run u = {plan, k, dkm_device_comm(plan), {DK_OK, ""}, 1, 0};
    dkm_outcome *o = &u.o;

    /* this rank's arguments; a bad one makes this rank ride along with the
     * failure flag set instead of leaving the others waiting */
    if (!init || !centroids || (npts && (!points_local || !labels_local)))
        BAD("points, init, labels and centroids must not be NULL (points and labels may be NULL on an empty "
            "part)");
    else if ((npts && !fits(points_local, npts * (size_t)d->d * sizeof(float))) ||
             (npts && mask_local && !fits(mask_local, npts)) || !fits(init, kd * sizeof(float)) ||
             (npts && !fits(labels_local, npts * sizeof(int32_t))) || !fits(centroids, kd * sizeof(float)))
        BAD("a buffer is too small: points need %zu bytes, mask %zu, labels %zu, init and centroids %zu "
            "(this rank's %zu points)",
            npts * (size_t)d->d * sizeof(float), npts, npts * sizeof(int32_t), kd * sizeof(float), npts);

    if (k->whole) { /* one rank: libdakit's call */
        dk_status ls = o->status == DK_OK ? dk_kmeans_execute(k->whole, points_local, mask_local, init,
                                                              labels_local, centroids, result)
                                          : DK_OK;
        if (ls != DK_OK)
            dkm_note(o, ls, "%s", dk_last_error(plan->ctx));
        return dkm_agree(plan->comm, o, EXEC);
    }
    u.ok = o->status == DK_OK;
    if (u.ok && init != centroids && dk_buffer_copy(centroids, init, kd * sizeof(float)) != DK_OK)
        fail_call(&u, DK_ERR_BACKEND, "%s", dk_last_error(plan->ctx));
    dk_buffer *C = u.ok ? centroids : k->spare;
    double zero[DK_KMEANS_STATE_LEN > TAIL_LEN ? DK_KMEANS_STATE_LEN : TAIL_LEN] = {0};
    memset(k->host, 0, slen * sizeof *k->host);
    if (dk_buffer_write(k->sums, k->host, slen * sizeof *k->host) != DK_OK ||
        dk_buffer_write(k->state, zero, DK_KMEANS_STATE_LEN * sizeof(double)) != DK_OK ||
        dk_buffer_write(k->tail, zero, TAIL_LEN * sizeof(double)) != DK_OK)
        fail_call(&u, DK_ERR_BACKEND, "%s", dk_last_error(plan->ctx));

    const int bands = k->wide_len > 0;
    /* iteration 1's previous labels: the plain labels of init */
    if (bands) {
        if (u.ok && dk_kmeans_assign_partial(k->part, points_local, mask_local, C, NULL, k->wide[0], labels_local,
                                             k->sums, k->state) != DK_OK)
            fail_call(&u, DK_ERR_INVALID_ARGUMENT, "%s", dk_last_error(plan->ctx));
        halos(&u, k->wide[0]);
    }
    for (int t = 0; t < d->max_iters; t++) {
        dk_buffer *prev = bands ? k->wide[t & 1] : NULL, *next = bands ? k->wide[(t + 1) & 1] : NULL;
        if (u.ok && dk_kmeans_assign_partial(k->part, points_local, mask_local, C, prev, next, labels_local,
                                             k->sums, k->state) != DK_OK)
            fail_call(&u, DK_ERR_INVALID_ARGUMENT, "%s", dk_last_error(plan->ctx));
        if (!u.ok)
            write_flag(&u, k->sums, slen);
        reduce(&u, k->sums, slen);
        if (dk_kmeans_update(k->part, k->sums, C, k->state) != DK_OK)
            fail_call(&u, DK_ERR_BACKEND, "%s", dk_last_error(plan->ctx));
        const int last = t + 1 == d->max_iters;
        if (bands && !last)
            halos(&u, next);
        if (d->tol > 0 && !last && (t + 1) % BATCH == 0) {
            double st[DK_KMEANS_STATE_LEN];
            read_back(&u, k->state, st, DK_KMEANS_STATE_LEN);
            if (u.comm_bad || st[1] != 0)
                break;
        }
    }
    if (u.ok && dk_kmeans_objective(k->part, points_local, labels_local, C, k->tail) != DK_OK)
        fail_call(&u, DK_ERR_BACKEND, "%s", dk_last_error(plan->ctx));
    if (!u.ok)
        write_flag(&u, k->tail, TAIL_LEN);
    reduce(&u, k->tail, TAIL_LEN);
    double tail[TAIL_LEN] = {0, 0, 1}, st[DK_KMEANS_STATE_LEN] = {0, 0, 0, 1};
    read_back(&u, k->tail, tail, TAIL_LEN);
    read_back(&u, k->state, st, DK_KMEANS_STATE_LEN);
    /* the flags are the same on every rank: only a failure asks who failed */
    if (u.comm_bad || tail[TAIL_LEN - 1] != 0 || st[3] != 0) {
        dk_status s = dkm_agree(plan->comm, o, EXEC);
        return s != DK_OK ? s : dkm_fail(DK_ERR_BACKEND, "%s: a rank failed without a sentence", EXEC);
    }
    if (result) {
        memset(result, 0, sizeof *result);
        result->iterations = (int)st[0];
        result->objective = tail[0];
        result->last_move = st[2];
        result->valid = (size_t)tail[1];
    }
    return DK_OK;
}

/* init's bytes hashed, for the check that every rank has the same. */
static void hash_init(const float *init, size_t kd, uint64_t h[2])
{
    uint64_t x = dkm_hash(init, kd * sizeof(float));
    h[0] = x, h[1] = ~x;
}

DK_MPI_API dk_status dk_mpi_kmeans_execute_host(dk_mpi_plan *plan, const float *points_local,
                                                const uint8_t *mask_local, const float *init,
                                                int32_t *labels_local, float *centroids, dk_kmeans_result *result)
{
    if (!plan)
        return dkm_fail(DK_ERR_INVALID_ARGUMENT, "%s: plan must not be NULL", EXEC_HOST);
    if (!is_kmeans(plan))
        return dkm_fail(DK_ERR_INVALID_ARGUMENT, "%s: the plan is not a kmeans plan", EXEC_HOST);
    dk_mpi_plan *p = plan;
    dkm_kmeans *k = state(p);
    const dk_kmeans_desc *d = &k->desc;
    const size_t kd = (size_t)d->k * (size_t)d->d, npts = k->npts;
    dkm_outcome oc = {DK_OK, ""}, *o = &oc;

    if (!init || !centroids || (npts && (!points_local || !labels_local)))
        BAD("points, init, labels and centroids must not be NULL (points and labels may be NULL on an empty "
            "part)");
    /* init the same on every rank, bit for bit */
    uint64_t h[2] = {0, 0}, hm[2];
    if (init)
        hash_init(init, kd, h);
    DKM_COMM(p->comm, MPI_Allreduce(h, hm, 2, MPI_UINT64_T, MPI_MIN, p->comm));
    if (init && (hm[0] != h[0] || hm[1] != h[1]))
        BAD("init is not the same on every rank");
    size_t valid = 0;
    if (oc.status == DK_OK) {
        for (size_t i = 0; i < kd; i++)
            if (!isfinite(init[i])) {
                BAD("init value %zu (centroid %zu, feature %zu) is not finite", i, i / (size_t)d->d,
                    i % (size_t)d->d);
                break;
            }
        for (size_t i = 0; i < npts && oc.status == DK_OK; i++) {
            if (mask_local && !mask_local[i])
                continue;
            valid++;
            for (int f = 0; f < d->d; f++)
                if (!isfinite(points_local[i * (size_t)d->d + f])) {
                    BAD("point %zu (global), feature %d is not finite", k->lo * k->per + i, f);
                    break;
                }
        }
    }
    unsigned long long vs = valid, total = 0;
    DKM_COMM(p->comm, MPI_Allreduce(&vs, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, p->comm));
    if (oc.status == DK_OK && total < (unsigned long long)d->k)
        BAD("only %llu points are unmasked over all ranks, fewer than k = %d", total, d->k);

    /* the same path as device buffers: upload, dk_mpi_kmeans_execute, download */
    dk_buffer *bx = NULL, *bm = NULL, *bi = NULL, *bl = NULL, *bc = NULL;
    const size_t xbytes = npts * (size_t)d->d * sizeof(float), lbytes = npts * sizeof(int32_t);
    if (oc.status == DK_OK) {
        dk_status st;
        if ((st = dk_buffer_create(p->ctx, xbytes ? xbytes : 4, &bx)) != DK_OK ||
            (mask_local && (st = dk_buffer_create(p->ctx, npts ? npts : 1, &bm)) != DK_OK) ||
            (st = dk_buffer_create(p->ctx, kd * sizeof(float), &bi)) != DK_OK ||
            (st = dk_buffer_create(p->ctx, lbytes ? lbytes : 4, &bl)) != DK_OK ||
            (st = dk_buffer_create(p->ctx, kd * sizeof(float), &bc)) != DK_OK ||
            (npts && (st = dk_buffer_write(bx, points_local, xbytes)) != DK_OK) ||
            (npts && mask_local && (st = dk_buffer_write(bm, mask_local, npts)) != DK_OK) ||
            (st = dk_buffer_write(bi, init, kd * sizeof(float))) != DK_OK)
            dkm_note(o, st, "%s", dk_last_error(p->ctx));
    }
    dk_status st = dkm_agree(p->comm, o, EXEC_HOST);
    if (st == DK_OK) {
        st = dk_mpi_kmeans_execute(plan, bx, bm, bi, bl, bc, result);
        if (st == DK_OK && ((npts && dk_buffer_read(bl, labels_local, lbytes) != DK_OK) ||
                            dk_buffer_read(bc, centroids, kd * sizeof(float)) != DK_OK))
            dkm_note(o, DK_ERR_BACKEND, "%s", dk_last_error(p->ctx));
        if (st == DK_OK)
            st = dkm_agree(p->comm, o, EXEC_HOST);
    }
    dk_buffer_destroy(bx);
    dk_buffer_destroy(bm);
    dk_buffer_destroy(bi);
    dk_buffer_destroy(bl);
    dk_buffer_destroy(bc);
    return st;
}
