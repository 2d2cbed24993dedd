/* Distributed gauss, exact mode by halos.
 *
 * Axes are filtered one after another in increasing order, as in the single
 * process. An axis that no rank's box cuts is filtered by a local plan over
 * the box (consecutive such axes share one plan). An axis that is split is
 * first widened: each rank receives, from whichever ranks own them, the h
 * values beyond each end of its box along that axis (h from
 * dk_gauss_window_halo, for every method, clipped at the field's ends),
 * filters the widened
 * box along the axis with a local plan and keeps its own part. The plugin
 * applies the boundary rule at the widened box's ends; where those are
 * the field's ends that is the true rule, elsewhere the halo puts the
 * artificial ends out of reach at the dtype's rounding (docs/plugins.md,
 * "exact mode"), so the result equals the single-process one to rounding
 * whatever the number of ranks. Every boundary mode but wrap works so: a
 * mode continues a true end from values next to it, which the window holds
 * (h reaches as far as the continuation is read); wrap would need the far
 * end's values and is refused on a split axis. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/comm.h"
#include "../core/halo.h"
#include "internal.h"

_Static_assert(sizeof(size_t) == sizeof(uint64_t), "boxes travel as MPI_UINT64_T");

static const char *const CREATE = "dk_mpi_gauss_plan_create";
static const char *const EXECUTE = "dk_mpi_gauss_execute_host";
static const char *const EXECUTE_DEV = "dk_mpi_gauss_execute";

/* ---- the global description, compared between ranks ---- */

enum {
    F_DTYPE, F_NDIM, F_SHAPE0, F_SHAPE1, F_SHAPE2, F_AXES, F_SIGMA0, F_SIGMA1, F_SIGMA2,
    F_K, F_BOUNDARY, F_MODE, F_OVERLAP, F_BLOCKS, F_VARIANT, NFIELDS
};
static const char *const field_names[NFIELDS] = {
    "dtype", "ndim", "shape[0]", "shape[1]", "shape[2]", "axes", "sigma[0]", "sigma[1]", "sigma[2]",
    "K", "boundary", "mode", "overlap", "blocks", "variant"};

/* The fields that define the result; those the description says are not
 * read (sigma of an unfiltered axis, shape beyond ndim, the overlap
 * parameters in exact mode) are 0 so that they cannot differ. */
static void fields_of(const dk_gauss_desc *d, uint64_t f[NFIELDS])
{
    memset(f, 0, NFIELDS * sizeof *f);
    f[F_DTYPE] = (uint64_t)d->dtype;
    f[F_NDIM] = (uint64_t)d->ndim;
    for (int a = 0; a < d->ndim && a < DK_MAX_DIMS; a++) {
        f[F_SHAPE0 + a] = d->shape[a];
        if (d->axes & (1u << a))
            memcpy(&f[F_SIGMA0 + a], &d->sigma[a], sizeof(double));
    }
    f[F_AXES] = d->axes;
    f[F_K] = (uint64_t)(int64_t)d->K;
    f[F_BOUNDARY] = (uint64_t)d->boundary;
    f[F_MODE] = (uint64_t)d->mode;
    if (d->mode == DK_GAUSS_OVERLAP) {
        f[F_OVERLAP] = d->overlap;
        f[F_BLOCKS] = d->blocks;
    }
    f[F_VARIANT] = d->variant ? dkm_hash(d->variant, strlen(d->variant)) | 1 : 0; /* 0: no variant */
}

/* Collective; the same answer on every rank. */
static dk_status same_description(MPI_Comm comm, const dk_gauss_desc *d)
{
    uint64_t v[2 * NFIELDS], r[2 * NFIELDS];
    fields_of(d, v);
    for (int i = 0; i < NFIELDS; i++)
        v[NFIELDS + i] = ~v[i];
    MPI_Allreduce(v, r, 2 * NFIELDS, MPI_UINT64_T, MPI_MAX, comm);
    for (int i = 0; i < NFIELDS; i++) {
        uint64_t hi = r[i], lo = ~r[NFIELDS + i];
        if (hi == lo)
            continue;
        char values[160];
        if (i >= F_SIGMA0 && i <= F_SIGMA2) {
            double x, y;
            memcpy(&x, &lo, sizeof x);
            memcpy(&y, &hi, sizeof y);
            snprintf(values, sizeof values, "%s is %.17g on some ranks, %.17g on others", field_names[i], x, y);
        } else if (i == F_VARIANT) {
            snprintf(values, sizeof values, "the variant is not the same on every rank (another name, or "
                     "named on some ranks only)");
        } else if (i == F_K) {
            snprintf(values, sizeof values, "K is %lld on some ranks, %lld on others", (long long)(int64_t)lo,
                     (long long)(int64_t)hi);
        } else {
            snprintf(values, sizeof values, "%s is %llu on some ranks, %llu on others", field_names[i],
                     (unsigned long long)lo, (unsigned long long)hi);
        }
        return dkm_fail(DK_ERR_INVALID_ARGUMENT,
                        "%s: the ranks passed different global descriptions: %s; every rank must describe the "
                        "same global field",
                        CREATE, values);
    }
    return DK_OK;
}

/* ---- checks on one rank ---- */

/* What this rank can check alone: pointers, the description (libdakit's
 * own validation, through the serial reference on a field of one value),
 * the field's size, and the part inside the field. */
static void check_local(dkm_outcome *o, dk_context *ctx, const dk_gauss_desc *g, const dk_mpi_part *part,
                        dk_mpi_plan **plan)
{
    if (!ctx || !g || !part || !plan) {
        dkm_note(o, DK_ERR_INVALID_ARGUMENT, "ctx, global, part and plan must not be NULL");
        return;
    }
    if (g->ndim < 1 || g->ndim > DK_MAX_DIMS) {
        dkm_note(o, DK_ERR_INVALID_ARGUMENT, "gauss: ndim is %d; 1, 2 or 3 axes are supported", g->ndim);
        return;
    }
    dk_gauss_desc probe = *g;
    double one[1] = {0};
    for (int a = 0; a < g->ndim; a++)
        probe.shape[a] = 1;
    if (dk_gauss_reference(&probe, one, one) != DK_OK) {
        dkm_note(o, DK_ERR_INVALID_ARGUMENT, "%s", dk_last_error(NULL));
        return;
    }
    size_t count = 1;
    for (int a = 0; a < g->ndim; a++) {
        if (g->shape[a] == 0) {
            dkm_note(o, DK_ERR_INVALID_ARGUMENT, "gauss: shape[%d] is 0; every axis needs a size >= 1", a);
            return;
        }
        if (count > SIZE_MAX / 8 / g->shape[a]) {
            dkm_note(o, DK_ERR_INVALID_ARGUMENT, "gauss: the global field's size overflows");
            return;
        }
        count *= g->shape[a];
    }
    for (int a = 0; a < g->ndim; a++)
        if (part->offset[a] > g->shape[a] || part->extent[a] > g->shape[a] - part->offset[a]) {
            dkm_note(o, DK_ERR_INVALID_ARGUMENT,
                     "its part lies outside the global field: along axis %d it starts at %zu and holds %zu "
                     "values, but the field has %zu",
                     a, part->offset[a], part->extent[a], g->shape[a]);
            return;
        }
}

/* ---- the plan ---- */

void dkm_gauss_plan_free(dk_mpi_plan *p)
{
    if (!p)
        return;
    for (int s = 0; s < p->nstages; s++) {
        dk_plan_destroy(p->stages[s].plan);
        free(p->stages[s].send);
        free(p->stages[s].recv);
    }
    dk_buffer_destroy(p->dwork);
    dk_buffer_destroy(p->dext);
    dk_buffer_destroy(p->dsend);
    dk_buffer_destroy(p->drecv);
    dk_buffer_destroy(p->din);
    dk_buffer_destroy(p->dout);
    free(p->work);
    free(p->ext);
    free(p->sendbuf);
    free(p->recvbuf);
    free(p->requests);
    free(p);
}

/* The box widened by h along box axis i, clipped to [0, n); empty stays empty. */
static dkm_box widen(const dkm_box *b, int i, size_t h, size_t n)
{
    dkm_box w = *b;
    if (!dkm_box_count(b))
        return w;
    w.lo[i] = b->lo[i] > h ? b->lo[i] - h : 0;
    w.hi[i] = b->hi[i] + h < n ? b->hi[i] + h : n;
    return w;
}

/* Who sends what to whom along the stage's axis; local (every rank derives
 * its own lists from the gathered boxes). */
static void plan_exchange(dk_mpi_plan *p, dkm_stage *s, const dkm_box *boxes, size_t h, dkm_outcome *o,
                          size_t *send_total, size_t *recv_total)
{
    int i = dkm_axis(p->desc.ndim, s->axis);
    size_t n = p->desc.shape[s->axis];
    s->ext = widen(&p->own, i, h, n);
    s->send = calloc((size_t)p->size, sizeof *s->send);
    s->recv = calloc((size_t)p->size, sizeof *s->recv);
    if (!s->send || !s->recv) {
        dkm_note(o, DK_ERR_OUT_OF_MEMORY, "out of host memory");
        return;
    }
    size_t st = 0, rt = 0;
    for (int j = 0; j < p->size; j++) {
        if (j == p->rank)
            continue;
        dkm_box b, wj = widen(&boxes[j], i, h, n);
        if (dkm_box_intersect(&boxes[j], &s->ext, &b)) {
            s->recv[s->nrecv] = (dkm_peer){.rank = j, .box = b, .offset = rt};
            rt += dkm_box_count(&b);
            s->nrecv++;
        }
        if (dkm_box_intersect(&p->own, &wj, &b)) {
            s->send[s->nsend] = (dkm_peer){.rank = j, .box = b, .offset = st};
            st += dkm_box_count(&b);
            s->nsend++;
        }
    }
    for (int k = 0; k < s->nrecv + s->nsend; k++) {
        size_t c = dkm_box_count(k < s->nrecv ? &s->recv[k].box : &s->send[k - s->nrecv].box);
        if (c > INT_MAX)
            dkm_note(o, DK_ERR_INVALID_ARGUMENT,
                     "a halo message along axis %d would hold %zu values; at most %d are supported", s->axis, c,
                     INT_MAX);
    }
    *send_total = st;
    *recv_total = rt;
}

static void make_local_plan(dk_mpi_plan *p, dkm_stage *s, const dk_gauss_desc *g, const dkm_box *box,
                            dkm_outcome *o)
{
    if (!dkm_box_count(box) || o->status != DK_OK)
        return;
    dk_gauss_desc d = *g;
    for (int a = 0; a < g->ndim; a++) {
        int i = dkm_axis(g->ndim, a);
        d.shape[a] = box->hi[i] - box->lo[i];
    }
    d.axes = s->axes;
    dk_status st = dk_gauss_plan_create(p->ctx, &d, &s->plan);
    /* NaN is the layer's to refuse (with global indices); the stages filter
     * what they are given */
    if (st == DK_OK)
        st = dk_gauss_plan_set_nan(s->plan, DK_GAUSS_NAN_PROPAGATE);
    if (st != DK_OK) {
        dk_plan_destroy(s->plan);
        s->plan = NULL;
        dkm_note(o, st, "%s", dk_last_error(p->ctx));
    }
}

/* Whether box b is one run of consecutive elements of box `in` (C order),
 * and where it starts in it. */
static int run_in(const dkm_box *b, const dkm_box *in, size_t *offset)
{
    int k = 0;
    while (k < 2 && b->hi[k] - b->lo[k] == 1)
        k++;
    for (int i = k + 1; i < 3; i++)
        if (b->lo[i] != in->lo[i] || b->hi[i] != in->hi[i])
            return 0;
    size_t off = 0;
    for (int i = 0; i < 3; i++)
        off = off * (in->hi[i] - in->lo[i]) + (b->lo[i] - in->lo[i]);
    *offset = off;
    return 1;
}

static int below_box(const dk_mpi_plan *p, const dkm_stage *s, const dkm_peer *q)
{
    int i = dkm_axis(p->desc.ndim, s->axis);
    return q->box.hi[i] <= p->own.lo[i];
}

/* A received box that is one run of its halo: where it lands in drecv. */
static int received_in_place(const dk_mpi_plan *p, const dkm_stage *s, const dkm_peer *q, size_t *offset)
{
    int below = below_box(p, s, q);
    if (!run_in(&q->box, below ? &s->lo_box : &s->up_box, offset))
        return 0;
    *offset += below ? 0 : s->lo_count;
    return 1;
}

/* A halo stage's buffers: the halos below and above the box at 0 and
 * lo_count elements into drecv, where every received box that is one run
 * of its halo lands; the others land after them (in dext on the device)
 * and are moved into place. Sends that are runs of the box go from it. */
static void plan_halos(dk_mpi_plan *p, dkm_stage *s, size_t *recv_total, size_t *overflow)
{
    int i = dkm_axis(p->desc.ndim, s->axis);
    s->halo = 1;
    s->lo_box = s->up_box = s->ext;
    s->lo_box.hi[i] = p->own.lo[i];
    s->up_box.lo[i] = p->own.hi[i];
    s->lo_count = dkm_box_count(&s->ext) ? dkm_box_count(&s->lo_box) : 0;
    s->up_count = dkm_box_count(&s->ext) ? dkm_box_count(&s->up_box) : 0;
    size_t at = s->lo_count + s->up_count, extra = 0;
    for (int k = 0; k < s->nrecv; k++) {
        dkm_peer *q = &s->recv[k];
        size_t off;
        if (received_in_place(p, s, q, &off)) {
            q->offset = off;
        } else {
            q->offset = at + extra;
            extra += dkm_box_count(&q->box);
        }
    }
    *recv_total = at + extra;
    *overflow = extra;
}

static void make_halo_plan(dk_mpi_plan *p, dkm_stage *s, const dk_gauss_desc *g, dkm_outcome *o)
{
    if (!p->own_count || o->status != DK_OK)
        return;
    int i = dkm_axis(g->ndim, s->axis);
    dk_gauss_desc d = *g;
    for (int a = 0; a < g->ndim; a++)
        d.shape[a] = p->own.hi[dkm_axis(g->ndim, a)] - p->own.lo[dkm_axis(g->ndim, a)];
    d.axes = s->axes;
    size_t lc = p->own.lo[i] - s->ext.lo[i], uc = s->ext.hi[i] - p->own.hi[i];
    size_t most[DK_MAX_DIMS] = {0};
    most[s->axis] = lc > uc ? lc : uc > 0 ? uc : 1; /* 0 would say the plan takes no halos */
    dk_status st = dk_gauss_plan_create_halo(p->ctx, &d, most, &s->plan);
    if (st == DK_OK)
        st = dk_gauss_plan_set_nan(s->plan, DK_GAUSS_NAN_PROPAGATE);
    if (st != DK_OK) {
        dk_plan_destroy(s->plan);
        s->plan = NULL;
        dkm_note(o, st, "%s", dk_last_error(p->ctx));
    }
}

DK_MPI_API dk_status dk_mpi_gauss_plan_create(dk_context *ctx, MPI_Comm comm, const dk_gauss_desc *global,
                                              const dk_mpi_part *part, dk_mpi_plan **plan)
{
    dk_status st = dkm_check_comm(comm, CREATE);
    if (st != DK_OK) {
        if (plan)
            *plan = NULL;
        return st;
    }
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    if (plan)
        *plan = NULL;

    /* 1. what each rank can check alone, then agreed */
    dkm_outcome o = {DK_OK, ""};
    check_local(&o, ctx, global, part, plan);
    if ((st = dkm_agree(comm, &o, CREATE)) != DK_OK)
        return st;
    /* 2. the same description everywhere (the same verdict on every rank) */
    if ((st = same_description(comm, global)) != DK_OK)
        return st;

    dk_mpi_plan *p = calloc(1, sizeof *p);
    dkm_box *boxes = calloc((size_t)size, sizeof *boxes);
    if (!p || !boxes)
        dkm_note(&o, DK_ERR_OUT_OF_MEMORY, "out of host memory");
    if ((st = dkm_agree(comm, &o, CREATE)) != DK_OK) {
        free(p);
        free(boxes);
        return st;
    }
    p->comm = MPI_COMM_NULL;
    p->rank = rank;
    p->size = size;
    p->ctx = ctx;
    p->desc = *global;
    p->desc.variant = NULL;
    p->esize = dk_dtype_size(global->dtype);
    p->mtype = global->dtype == DK_F64 ? MPI_DOUBLE : MPI_FLOAT;
    p->own = dkm_box_of_part(global->ndim, part);
    p->own_count = dkm_box_count(&p->own);
    int ndim = global->ndim;

    /* 3. the parts tile the field */
    if ((st = dkm_check_tiling(comm, ndim, global->shape, &p->own, boxes, CREATE, "field", "values")) != DK_OK)
        goto fail;

    /* 4. split axes are filtered with halos in place where every rank's
     * plugin can (dk_gauss_halo_offered), else through a widened copy */
    int offered = dk_gauss_halo_offered(ctx, global), everywhere;
    MPI_Allreduce(&offered, &everywhere, 1, MPI_INT, MPI_MIN, comm);
    p->halo_path = everywhere;

    /* the stages: an axis is exchanged when some rank's box does not
     * hold it whole */
    for (int a = 0; a < ndim; a++) {
        if (!(global->axes & (1u << a)))
            continue;
        int i = dkm_axis(ndim, a), split = 0;
        for (int j = 0; j < size; j++)
            if (dkm_box_count(&boxes[j]) && boxes[j].hi[i] - boxes[j].lo[i] < global->shape[a])
                split = 1;
        if (split && global->boundary == DK_BOUNDARY_WRAP) {
            st = dkm_fail(DK_ERR_NOT_IMPLEMENTED,
                          "%s: boundary wrap is not distributed: the filtered axis %d is split between ranks, and "
                          "wrap continues each end with the values of the other end, which another rank holds; "
                          "keep every filtered axis whole on every rank, or use another boundary", CREATE, a);
            goto fail;
        }
        if (split) {
            p->stages[p->nstages++] = (dkm_stage){.axis = a, .axes = 1u << a};
        } else if (p->nstages && p->stages[p->nstages - 1].axis < 0) {
            p->stages[p->nstages - 1].axes |= 1u << a;
        } else {
            p->stages[p->nstages++] = (dkm_stage){.axis = -1, .axes = 1u << a};
        }
    }

    /* 5. exchange lists, local plans and buffers on each rank, then agreed */
    size_t ext_max = 0, send_max = 0, recv_max = 0;
    int req_max = 0;
    for (int s = 0; s < p->nstages && o.status == DK_OK; s++) {
        dkm_stage *sg = &p->stages[s];
        if (sg->axis < 0) {
            make_local_plan(p, sg, global, &p->own, &o);
            continue;
        }
        /* overlap mode cuts its blocks on the whole line: a split axis is
         * gathered whole (h = the line), so the blocks are the single
         * process's */
        size_t h = global->mode == DK_GAUSS_OVERLAP ? global->shape[sg->axis] : dk_gauss_window_halo(global, sg->axis),
               sends = 0, recvs = 0;
        plan_exchange(p, sg, boxes, h, &o, &sends, &recvs);
        if (p->halo_path && o.status == DK_OK) {
            size_t overflow;
            plan_halos(p, sg, &recvs, &overflow);
            ext_max = overflow > ext_max ? overflow : ext_max;
            send_max = sends > send_max ? sends : send_max;
            recv_max = recvs > recv_max ? recvs : recv_max;
            req_max = sg->nsend + sg->nrecv > req_max ? sg->nsend + sg->nrecv : req_max;
            make_halo_plan(p, sg, global, &o);
            continue;
        }
        size_t e = dkm_box_count(&sg->ext);
        ext_max = e > ext_max ? e : ext_max;
        send_max = sends > send_max ? sends : send_max;
        recv_max = recvs > recv_max ? recvs : recv_max;
        req_max = sg->nsend + sg->nrecv > req_max ? sg->nsend + sg->nrecv : req_max;
        make_local_plan(p, sg, global, &sg->ext, &o);
    }
    if (o.status == DK_OK) {
        /* scratch for the box between stages, and the source a failed rank
         * exchanges from; one local stage needs none (nothing is
         * exchanged, and the caller's memory is used directly) */
        size_t work = p->nstages > 1 || p->stages[0].axis >= 0 ? p->own_count : 0;
        p->work = calloc(work ? work : 1, p->esize);
        p->ext = malloc((ext_max ? ext_max : 1) * p->esize);
        p->sendbuf = malloc((send_max ? send_max : 1) * p->esize);
        p->recvbuf = malloc((recv_max ? recv_max : 1) * p->esize);
        p->requests = malloc((size_t)(req_max ? req_max : 1) * sizeof *p->requests);
        p->ext_max = ext_max;
        p->send_max = send_max;
        p->recv_max = recv_max;
        if (!p->work || !p->ext || !p->sendbuf || !p->recvbuf || !p->requests)
            dkm_note(&o, DK_ERR_OUT_OF_MEMORY, "out of host memory for the halo buffers");
    }
    if ((st = dkm_agree(comm, &o, CREATE)) != DK_OK)
        goto fail;

    MPI_Comm_dup(comm, &p->comm);
    dkm_stats_attach(p);
    free(boxes);
    *plan = p;
    return DK_OK;

fail:
    free(boxes);
    dkm_gauss_plan_free(p);
    return st;
}

/* Widens the current box along the stage's axis into p->ext: sends what
 * others need of cur (this rank's box), receives what it needs of theirs. */
/* Posts the stage's halo messages: receives into p->recvbuf, sends of
 * what is packed in p->sendbuf; returns the requests made. */
static int post_halos(dk_mpi_plan *p, const dkm_stage *s)
{
    int n = 0;
    char *rb = p->recvbuf, *sb = p->sendbuf;
    for (int k = 0; k < s->nrecv; k++) {
        const dkm_peer *q = &s->recv[k];
        DKM_COMM(p->comm, MPI_Irecv(rb + q->offset * p->esize, (int)dkm_box_count(&q->box), p->mtype, q->rank, s->axis,
                                    p->comm, &p->requests[n++]));
    }
    for (int k = 0; k < s->nsend; k++) {
        const dkm_peer *q = &s->send[k];
        DKM_COMM(p->comm, MPI_Isend(sb + q->offset * p->esize, (int)dkm_box_count(&q->box), p->mtype, q->rank, s->axis,
                                    p->comm, &p->requests[n++]));
    }
    return n;
}

static void exchange(dk_mpi_plan *p, const dkm_stage *s, const void *cur)
{
    char *sb = p->sendbuf;
    for (int k = 0; k < s->nsend; k++) {
        const dkm_peer *q = &s->send[k];
        dkm_box_copy(sb + q->offset * p->esize, &q->box, cur, &p->own, &q->box, p->esize);
    }
    int n = post_halos(p, s);
    dkm_box_copy(p->ext, &s->ext, cur, &p->own, &p->own, p->esize); /* while the messages travel */
    DKM_COMM(p->comm, MPI_Waitall(n, p->requests, MPI_STATUSES_IGNORE));
    for (int k = 0; k < s->nrecv; k++) {
        const dkm_peer *q = &s->recv[k];
        dkm_box_copy(p->ext, &s->ext, (char *)p->recvbuf + q->offset * p->esize, &q->box, &q->box, p->esize);
    }
}

/* Both execute calls: a distributed gauss plan, or a sentence (local: there
 * is no communicator to tell the others). */
static dk_status check_gauss_plan(const dk_mpi_plan *p, const char *what)
{
    if (!p)
        return dkm_fail(DK_ERR_INVALID_ARGUMENT,
                        "%s: plan must not be NULL (this rank returned at once: without a plan there is no "
                        "communicator to tell the others)",
                        what);
    if (p->enkf || p->kmeans)
        return dkm_fail(DK_ERR_INVALID_ARGUMENT, "%s: the plan is %s plan (dk_mpi_%s_plan_create)", what,
                        p->enkf ? "an enkf" : "a kmeans", p->enkf ? "enkf" : "kmeans");
    return DK_OK;
}

DK_MPI_API dk_status dk_mpi_gauss_plan_set_nan(dk_mpi_plan *plan, dk_gauss_nan policy)
{
    if (!plan || plan->enkf || plan->kmeans)
        return dkm_fail(DK_ERR_INVALID_ARGUMENT, "dk_mpi_gauss_plan_set_nan: a distributed gauss plan is needed");
    if (policy == DK_GAUSS_NAN_IGNORE)
        return dkm_fail(DK_ERR_NOT_IMPLEMENTED,
                        "dk_mpi_gauss_plan_set_nan: nan policy ignore (normalized convolution) is not distributed; "
                        "error and propagate are");
    if (policy != DK_GAUSS_NAN_ERROR && policy != DK_GAUSS_NAN_PROPAGATE)
        return dkm_fail(DK_ERR_INVALID_ARGUMENT, "dk_mpi_gauss_plan_set_nan: policy %d is not one of error (0), "
                        "propagate (1), ignore (2)", (int)policy);
    plan->nan = policy;
    return DK_OK;
}

DK_MPI_API const char *dk_mpi_gauss_plan_path(const dk_mpi_plan *plan)
{
    if (!plan || plan->enkf || plan->kmeans)
        return NULL;
    for (int s = 0; s < plan->nstages; s++)
        if (plan->stages[s].axis >= 0)
            return plan->halo_path ? "halo" : "widened";
    return "local";
}

/* DK_GAUSS_NAN_ERROR: this rank's NaN, named by their global index. */
static void refuse_nan(dk_mpi_plan *p, const void *in, dkm_outcome *o)
{
    size_t count = 0, first = 0;
    for (size_t i = 0; i < p->own_count; i++) {
        double v = p->desc.dtype == DK_F64 ? ((const double *)in)[i] : (double)((const float *)in)[i];
        if (v != v && count++ == 0)
            first = i;
    }
    if (!count)
        return;
    char where[96];
    int n = 0, ndim = p->desc.ndim;
    size_t index[3];
    for (int i = 2; i >= 0; i--) {
        size_t extent = p->own.hi[i] - p->own.lo[i];
        index[i] = p->own.lo[i] + first % extent;
        first /= extent;
    }
    for (int a = 0; a < ndim && n < (int)sizeof where; a++)
        n += snprintf(where + n, sizeof where - (size_t)n, "%s%zu", a ? ", " : "", index[dkm_axis(ndim, a)]);
    dkm_note(o, DK_ERR_INVALID_ARGUMENT,
             "its part holds %zu NaN value%s (the first at [%s] of the global field); let them spread with nan "
             "policy propagate (dk_mpi_gauss_plan_set_nan)", count, count == 1 ? "" : "s", where);
}

static void run_stages(dk_mpi_plan *p, const dk_buffer *in, dk_buffer *out, dkm_outcome *o);
static dk_status device_setup(dk_mpi_plan *p, const char *what);

/* The host call on the path of dk_mpi_gauss_execute: the part goes to the
 * device and back around it (plain copies for the cpu plugin). The NaN
 * check already needs the host, so its outcome is agreed over MPI. */
static dk_status execute_host_on_device(dk_mpi_plan *p, const void *in, void *out, dkm_outcome *o)
{
    dk_status st;
    if (!p->dev_ready && (st = device_setup(p, EXECUTE)) != DK_OK)
        return st;
    size_t bytes = p->own_count * p->esize;
    if (!p->din) {
        dkm_outcome made = {DK_OK, ""};
        size_t part = bytes ? bytes : p->esize;
        st = dk_buffer_create(p->ctx, part, &p->din);
        if (st == DK_OK)
            st = dk_buffer_create(p->ctx, part, &p->dout);
        if (st != DK_OK)
            dkm_note(&made, st, "%s", dk_last_error(p->ctx));
        if ((st = dkm_agree(p->comm, &made, EXECUTE)) != DK_OK) {
            /* every rank tries again on its next call */
            dk_buffer_destroy(p->din);
            dk_buffer_destroy(p->dout);
            p->din = p->dout = NULL;
            return st;
        }
    }
    if (o->status == DK_OK && bytes && (st = dk_buffer_write(p->din, in, bytes)) != DK_OK)
        dkm_note(o, st, "%s", dk_last_error(p->ctx));
    run_stages(p, p->din, p->dout, o);
    dk_comm *dev = p->halo_path ? dkm_device_comm(p) : NULL;
    if (dev && dk_comm_can_queue(dev) && (st = dk_comm_wait(dev)) != DK_OK) /* polled, with the time limit */
        dkm_note(o, st, "%s", dk_last_error(p->ctx));
    if (o->status == DK_OK && bytes && (st = dk_buffer_read(p->dout, out, bytes)) != DK_OK)
        dkm_note(o, st, "%s", dk_last_error(p->ctx));
    return dkm_agree(p->comm, o, EXECUTE);
}

DK_MPI_API dk_status dk_mpi_gauss_execute_host(dk_mpi_plan *plan, const void *in_local, void *out_local)
{
    dk_status st = check_gauss_plan(plan, EXECUTE);
    if (st != DK_OK)
        return st;
    dk_mpi_plan *p = plan;
    dkm_outcome o = {DK_OK, ""};
    if (p->own_count && (!in_local || !out_local))
        dkm_note(&o, DK_ERR_INVALID_ARGUMENT, "in_local and out_local must not be NULL (its part holds %zu values)",
                 p->own_count);
    else if (p->nan == DK_GAUSS_NAN_ERROR)
        refuse_nan(p, in_local, &o);
    if (p->halo_path)
        return execute_host_on_device(p, in_local, out_local, &o);
    /* A rank that failed goes on exchanging (its scratch, not the caller's
     * memory) so that no other rank waits for it. */
    const void *cur = o.status == DK_OK ? in_local : p->work;
    for (int s = 0; s < p->nstages; s++) {
        dkm_stage *sg = &p->stages[s];
        void *dst = s == p->nstages - 1 && o.status == DK_OK ? out_local : p->work;
        if (sg->axis >= 0)
            exchange(p, sg, cur);
        if (sg->plan && o.status == DK_OK) {
            st = sg->axis < 0 ? dk_gauss_execute_host(sg->plan, cur, dst)
                              : dk_gauss_execute_host(sg->plan, p->ext, p->ext);
            if (st != DK_OK)
                dkm_note(&o, st, "%s", dk_last_error(p->ctx));
        }
        if (sg->axis >= 0)
            dkm_box_copy(dst, &p->own, p->ext, &sg->ext, &p->own, p->esize);
        cur = dst;
    }
    return dkm_agree(p->comm, &o, EXECUTE);
}

/* ---- device buffers ---- */

/* The copy of box b (global coordinates) from an array holding box `from`
 * at byte from_off of its buffer to one holding box `to` at to_off. */
static dk_box_copy box_copy(const dkm_box *b, const dkm_box *from, size_t from_off, const dkm_box *to, size_t to_off,
                            size_t esize)
{
    dk_box_copy c = {.esize = esize, .src_offset = from_off, .dst_offset = to_off};
    for (int i = 0; i < 3; i++) {
        c.count[i] = b->hi[i] - b->lo[i];
        c.src_shape[i] = from->hi[i] - from->lo[i];
        c.src_lo[i] = b->lo[i] - from->lo[i];
        c.dst_shape[i] = to->hi[i] - to->lo[i];
        c.dst_lo[i] = b->lo[i] - to->lo[i];
    }
    return c;
}

static void copy_box(dk_mpi_plan *p, dkm_outcome *o, dk_buffer *dst, const dk_buffer *src, const dk_box_copy *c)
{
    dk_status st = dk_buffer_copy_box(dst, src, c);
    if (st != DK_OK)
        dkm_note(o, st, "%s", dk_last_error(p->ctx));
}

/* Collective, on the first dk_mpi_gauss_execute: the device scratch (the
 * sizes of the host scratch) and, where every rank has a device of its own
 * with device-side communication, the device communicator. */
static dk_status device_setup(dk_mpi_plan *p, const char *what)
{
    dkm_outcome o = {DK_OK, ""};
    size_t es = p->esize;
    int need_work = p->nstages > 1 || p->stages[0].axis >= 0;
    struct {
        dk_buffer **buf;
        size_t count;
    } want[4] = {{&p->dwork, need_work ? p->own_count : 0}, {&p->dext, p->ext_max},
                 {&p->dsend, p->send_max}, {&p->drecv, p->recv_max}};
    for (int i = 0; i < 4 && o.status == DK_OK; i++) {
        dk_status st = dk_buffer_create(p->ctx, (want[i].count ? want[i].count : 1) * es, want[i].buf);
        if (st != DK_OK)
            dkm_note(&o, st, "%s", dk_last_error(p->ctx));
    }
    dk_status st = dkm_agree(p->comm, &o, what);
    if (st != DK_OK)
        return st;
    int halos = 0;
    for (int s = 0; s < p->nstages; s++)
        halos |= p->stages[s].axis >= 0;
    if (halos && !p->xfer)
        dkm_comm_setup(p, 0);
    p->dev_ready = 1;
    return DK_OK;
}

/* exchange() on device buffers: the boxes others need are packed into
 * dsend, travel to the peers' drecv (device to device through the plan's
 * communicator, else staged through host memory and MPI) and are unpacked
 * into dext around this rank's own box. Every rank makes every transfer
 * call whatever failed before it. */
static void exchange_device(dk_mpi_plan *p, const dkm_stage *s, const dk_buffer *cur, dkm_outcome *o)
{
    size_t es = p->esize;
    for (int k = 0; k < s->nsend; k++) {
        const dkm_peer *q = &s->send[k];
        dk_box_copy c = box_copy(&q->box, &p->own, 0, &q->box, q->offset * es, es);
        copy_box(p, o, p->dsend, cur, &c);
    }
    dk_comm *dev = dkm_device_comm(p);
    if (dev) {
        int n = 0;
        dk_comm_move *m = malloc((size_t)(s->nsend + s->nrecv + 1) * sizeof *m);
        if (!m) {
            dkm_note(o, DK_ERR_OUT_OF_MEMORY, "out of host memory");
            return; /* the peers' NCCL calls end at the communicator's time limit */
        }
        for (int k = 0; k < s->nrecv; k++)
            m[n++] = (dk_comm_move){s->recv[k].rank, 1, p->drecv, s->recv[k].offset * es,
                                    dkm_box_count(&s->recv[k].box) * es};
        for (int k = 0; k < s->nsend; k++)
            m[n++] = (dk_comm_move){s->send[k].rank, 0, p->dsend, s->send[k].offset * es,
                                    dkm_box_count(&s->send[k].box) * es};
        dk_status st;
        DKM_COMM(p->comm, st = dk_comm_exchange(dev, m, n));
        free(m);
        if (st != DK_OK)
            dkm_note(o, st, "%s", dk_last_error(p->ctx));
    } else {
        size_t sends = 0, recvs = 0;
        for (int k = 0; k < s->nsend; k++)
            sends += dkm_box_count(&s->send[k].box);
        for (int k = 0; k < s->nrecv; k++)
            recvs += dkm_box_count(&s->recv[k].box);
        dk_status st = sends ? dk_buffer_read(p->dsend, p->sendbuf, sends * es) : DK_OK;
        if (st != DK_OK)
            dkm_note(o, st, "%s", dk_last_error(p->ctx));
        int n = post_halos(p, s);
        DKM_COMM(p->comm, MPI_Waitall(n, p->requests, MPI_STATUSES_IGNORE));
        st = recvs ? dk_buffer_write(p->drecv, p->recvbuf, recvs * es) : DK_OK;
        if (st != DK_OK)
            dkm_note(o, st, "%s", dk_last_error(p->ctx));
    }
    dk_box_copy c = box_copy(&p->own, &p->own, 0, &s->ext, 0, es);
    copy_box(p, o, p->dext, cur, &c);
    for (int k = 0; k < s->nrecv; k++) {
        const dkm_peer *q = &s->recv[k];
        c = box_copy(&q->box, &q->box, q->offset * es, &s->ext, 0, es);
        copy_box(p, o, p->dext, p->drecv, &c);
    }
}

/* A halo stage's exchange: the sends that are runs of the box go from cur
 * itself (device to device), the others are packed into dsend; the halos
 * land in drecv (lower at 0, upper at lo_count), a piece that is not one
 * run of its halo in dext, moved into place after. With a device
 * communicator that queues, nothing here waits on the host: the plugin's
 * filter is queued after the exchange on the same device queue. Every
 * rank makes every transfer call whatever failed before it. */
static void exchange_halos(dk_mpi_plan *p, const dkm_stage *s, const dk_buffer *cur, dkm_outcome *o)
{
    size_t es = p->esize, halos = s->lo_count + s->up_count;
    dk_comm *dev = dkm_device_comm(p);
    size_t off;
    for (int k = 0; k < s->nsend; k++) {
        const dkm_peer *q = &s->send[k];
        if (dev && run_in(&q->box, &p->own, &off))
            continue;
        dk_box_copy c = box_copy(&q->box, &p->own, 0, &q->box, q->offset * es, es);
        copy_box(p, o, p->dsend, cur, &c);
    }
    if (dev) {
        int n = 0;
        dk_comm_move *m = malloc((size_t)(s->nsend + s->nrecv + 1) * sizeof *m);
        if (!m) {
            dkm_note(o, DK_ERR_OUT_OF_MEMORY, "out of host memory");
            return; /* the peers' NCCL calls end at the communicator's time limit */
        }
        for (int k = 0; k < s->nrecv; k++) {
            const dkm_peer *q = &s->recv[k];
            int direct = q->offset < halos;
            m[n++] = (dk_comm_move){q->rank, 1, direct ? p->drecv : p->dext, (direct ? q->offset : q->offset - halos) * es,
                                    dkm_box_count(&q->box) * es};
        }
        for (int k = 0; k < s->nsend; k++) {
            const dkm_peer *q = &s->send[k];
            int direct = run_in(&q->box, &p->own, &off);
            m[n++] = (dk_comm_move){q->rank, 0, direct ? (dk_buffer *)cur : p->dsend, (direct ? off : q->offset) * es,
                                    dkm_box_count(&q->box) * es};
        }
        dk_status st;
        if (!dk_comm_can_queue(dev)) {
            DKM_COMM(p->comm, st = dk_comm_exchange(dev, m, n));
        } else if (p->profile) {
            /* the exchange's own time: the work before it drained first */
            st = dk_comm_wait(dev);
            if (st == DK_OK)
                DKM_COMM(p->comm, st = dk_comm_exchange_queued(dev, m, n); if (st == DK_OK) st = dk_comm_wait(dev));
        } else {
            DKM_COMM(p->comm, st = dk_comm_exchange_queued(dev, m, n));
        }
        free(m);
        if (st != DK_OK)
            dkm_note(o, st, "%s", dk_last_error(p->ctx));
    } else {
        size_t sends = 0, recvs = halos;
        for (int k = 0; k < s->nsend; k++)
            sends += dkm_box_count(&s->send[k].box);
        for (int k = 0; k < s->nrecv; k++)
            recvs += s->recv[k].offset < halos ? 0 : dkm_box_count(&s->recv[k].box);
        dk_status st = sends ? dk_buffer_read(p->dsend, p->sendbuf, sends * es) : DK_OK;
        if (st != DK_OK)
            dkm_note(o, st, "%s", dk_last_error(p->ctx));
        int n = post_halos(p, s);
        DKM_COMM(p->comm, MPI_Waitall(n, p->requests, MPI_STATUSES_IGNORE));
        st = halos ? dk_buffer_write(p->drecv, p->recvbuf, halos * es) : DK_OK;
        if (st == DK_OK && recvs > halos)
            st = dk_buffer_write(p->dext, (char *)p->recvbuf + halos * es, (recvs - halos) * es);
        if (st != DK_OK)
            dkm_note(o, st, "%s", dk_last_error(p->ctx));
    }
    for (int k = 0; k < s->nrecv; k++) {
        const dkm_peer *q = &s->recv[k];
        if (q->offset < halos)
            continue;
        int below = below_box(p, s, q);
        dk_box_copy c = box_copy(&q->box, &q->box, (q->offset - halos) * es, below ? &s->lo_box : &s->up_box,
                                 below ? 0 : s->lo_count * es, es);
        copy_box(p, o, p->drecv, p->dext, &c);
    }
}

/* The stages on device buffers. A rank that failed goes on exchanging (its
 * scratch, not the caller's buffers) so that no other rank waits for it.
 * A halo stage never writes the buffer it reads: it goes to the scratch or
 * to out, whichever its input is not (out is free once the first stage has
 * read in), and through the scratch where it is last and reads out. */
static void run_stages(dk_mpi_plan *p, const dk_buffer *in, dk_buffer *out, dkm_outcome *o)
{
    /* where the collectives queue, the stages follow each other on the
     * device: the caller's wait (the agreement's, or the read's) is the
     * only one */
    int deferred = p->halo_path && dkm_defer_begin(p);
    const dk_buffer *cur = o->status == DK_OK ? in : p->dwork;
    for (int s = 0; s < p->nstages; s++) {
        dkm_stage *sg = &p->stages[s];
        int last = s == p->nstages - 1;
        dk_buffer *dst = last && o->status == DK_OK ? out : p->dwork;
        if (sg->halo && dst == cur)
            dst = cur == p->dwork ? out : p->dwork;
        if (o->status != DK_OK)
            dst = p->dwork;
        dk_status st = DK_OK;
        if (sg->halo) {
            exchange_halos(p, sg, cur, o);
            if (sg->plan && o->status == DK_OK) {
                int i = dkm_axis(p->desc.ndim, sg->axis);
                dk_gauss_halo_side lo = {p->drecv, 0, p->own.lo[i] - sg->ext.lo[i]};
                dk_gauss_halo_side up = {p->drecv, sg->lo_count, sg->ext.hi[i] - p->own.hi[i]};
                st = dk_gauss_execute_halo(sg->plan, cur, dst, lo, up);
            }
        } else {
            if (sg->axis >= 0)
                exchange_device(p, sg, cur, o);
            if (sg->plan && o->status == DK_OK)
                st = sg->axis < 0 ? dk_gauss_execute(sg->plan, cur, dst) : dk_gauss_execute(sg->plan, p->dext, p->dext);
            if (st == DK_OK && sg->axis >= 0 && o->status == DK_OK && p->own_count) {
                dk_box_copy c = box_copy(&p->own, &sg->ext, 0, &p->own, 0, p->esize);
                copy_box(p, o, dst, p->dext, &c);
            }
        }
        if (st != DK_OK)
            dkm_note(o, st, "%s", dk_last_error(p->ctx));
        cur = dst;
    }
    if (o->status == DK_OK && p->own_count && cur != out) {
        dk_status st = dk_buffer_copy(out, cur, p->own_count * p->esize);
        if (st != DK_OK)
            dkm_note(o, st, "%s", dk_last_error(p->ctx));
    }
    if (deferred)
        dk_context_defer_end(p->ctx);
}

/* The outcome agreed where the exchanges run on a device communicator that
 * queues: the stages are all queued by now and the device is still at
 * work, so the ranks' one-integer MPI_Allreduce (dkm_agree) costs the call
 * nothing while the host would wait for the device anyway; then the wait.
 * A failure the wait finds (the device's, or NCCL's, which aborts the
 * communicator so that no peer waits past its time limit) is this rank's
 * own. Elsewhere, dkm_agree after the work. */
static dk_status agree_queued(dk_mpi_plan *p, const dkm_outcome *o, const char *what)
{
    dk_comm *dev = p->halo_path ? dkm_device_comm(p) : NULL;
    if (!dev || !dk_comm_can_queue(dev))
        return dkm_agree(p->comm, o, what);
    dk_status st = dkm_agree(p->comm, o, what);
    dk_status done = dk_comm_wait(dev);
    if (st == DK_OK && done != DK_OK)
        st = dkm_fail(done, "%s: rank %d of %d: %s", what, p->rank, p->size, dk_last_error(p->ctx));
    return st;
}

DK_MPI_API dk_status dk_mpi_gauss_execute(dk_mpi_plan *plan, const dk_buffer *in_local, dk_buffer *out_local)
{
    dk_status st = check_gauss_plan(plan, EXECUTE_DEV);
    if (st != DK_OK)
        return st;
    dk_mpi_plan *p = plan;
    if (!p->dev_ready && (st = device_setup(p, EXECUTE_DEV)) != DK_OK)
        return st;
    dkm_outcome o = {DK_OK, ""};
    size_t bytes = p->own_count * p->esize;
    if (p->own_count && (!in_local || !out_local))
        dkm_note(&o, DK_ERR_INVALID_ARGUMENT, "in_local and out_local must not be NULL (its part holds %zu values)",
                 p->own_count);
    else if (p->own_count && (dk_buffer_size(in_local) < bytes || dk_buffer_size(out_local) < bytes))
        dkm_note(&o, DK_ERR_INVALID_ARGUMENT,
                 "its part holds %zu bytes, but in_local holds %zu and out_local %zu", bytes,
                 dk_buffer_size(in_local), dk_buffer_size(out_local));
    run_stages(p, in_local, out_local, &o);
    return agree_queued(p, &o, EXECUTE_DEV);
}
