/* Distributed LETKF: each rank owns any set of grid points and holds any
 * set of observations. The local analyses are independent, so the layer's
 * one job is the observation halo. At plan time the ranks agree on the
 * whole network's bucket grid (dk_letkf_bucket_shape over the span of
 * every rank's observations), each rank names the buckets its points visit,
 * and each rank sends every other exactly its observations in those
 * buckets: their coordinates once, then at each execute their Yb rows
 * (device to device where the plan has a device communicator), yo and r.
 * The local plan, cut over the same span, then finds each point's
 * observations in the same buckets and the same order as one process
 * does, so the analysis is the single process's bit for bit whatever the
 * decomposition.
 *
 * The combined observations of a rank are its own, whole, and the others'
 * selections, in rank order, each in its holder's order: a subsequence of
 * the global order. A rank with points that would get none (nothing within
 * reach anywhere) still gets one observation from the lowest rank holding
 * any, so that its local plan has an observation network; it weighs
 * nothing. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/letkf.h>

#include "../core/comm.h"
#include "internal.h"

static const char *const CREATE = "dk_mpi_letkf_plan_create";
static const char *const EXEC = "dk_mpi_letkf_execute";

/* What every rank must pass alike. */
typedef struct shared_scalars {
    int32_t dtype, ncoords, metric, pad;
    uint64_t members, max_obs;
    double radius, vradius, inflation, rtpp, rtps, period[DK_LETKF_MAX_COORDS];
} shared_scalars;

/* A rank's bounding regions in position space: its points and its observations. */
typedef struct region {
    double glo[DK_LETKF_POS], ghi[DK_LETKF_POS], olo[DK_LETKF_POS], ohi[DK_LETKF_POS];
    uint64_t n, m;
} region;

struct dkm_letkf {
    dk_letkf_desc desc;   /* this rank's description (coordinates not kept) */
    dk_plan *local;       /* NULL on a rank without points */
    size_t n, m_own, m_comb;
    int nsrc;             /* ranks whose observations this rank receives (itself included) */
    int *src;             /* their ranks, ascending */
    size_t *src_off;      /* nsrc + 1: each block's first combined observation */
    int ndst;             /* ranks this rank sends observations to (itself excluded) */
    int *dst;
    size_t *sel_off;      /* ndst + 1: each destination's run of sel */
    int32_t *sel;         /* this rank's observations each destination needs, ascending per destination */
    size_t *first;        /* ndst: sel's first where a destination's are one contiguous range, else SIZE_MAX */
    int packed;           /* some destination's observations are not one range: Yb rows packed on the host */
    double *yo, *r;       /* m_comb, host */
    double *send_yo, *send_r; /* sel_off[ndst]: the packed yo and r */
    void *yb_host;        /* m_comb * k, host staging of the combined Yb */
    void *own_host, *send_host; /* m_own * k and sel_off[ndst] * k: this rank's Yb and the packed rows */
    dk_buffer *yb;        /* m_comb * k on the device */
    dk_buffer *send_dev;  /* sel_off[ndst] * k on the device, where packed with a device communicator */
    MPI_Datatype rowtype; /* one observation's k members, for the host-staged exchange */
};

void dkm_letkf_free(struct dkm_letkf *l)
{
    if (!l)
        return;
    dk_plan_destroy(l->local);
    dk_buffer_destroy(l->yb);
    dk_buffer_destroy(l->send_dev);
    free(l->src), free(l->src_off), free(l->dst), free(l->yo), free(l->r), free(l->yb_host);
    free(l->sel_off), free(l->sel), free(l->first), free(l->send_yo), free(l->send_r), free(l->own_host);
    free(l->send_host);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (l->rowtype != MPI_DATATYPE_NULL && !finalized)
        MPI_Type_free(&l->rowtype);
    free(l);
}

static shared_scalars scalars_of(const dk_letkf_desc *d)
{
    shared_scalars s;
    memset(&s, 0, sizeof s);
    s.dtype = (int32_t)d->dtype, s.ncoords = d->ncoords, s.metric = (int32_t)d->metric;
    s.members = d->members, s.max_obs = d->max_obs;
    s.radius = d->radius, s.vradius = d->vertical_radius, s.inflation = d->inflation;
    s.rtpp = d->rtpp, s.rtps = d->rtps;
    for (int a = 0; a < DK_LETKF_MAX_COORDS; a++)
        s.period[a] = d->period[a];
    return s;
}

/* Position-space bounds of count coordinates (lo > hi where there are none). */
static void bounds(const dk_letkf_geometry *g, const double *coords, size_t count, double *lo, double *hi)
{
    for (int a = 0; a < DK_LETKF_POS; a++)
        lo[a] = INFINITY, hi[a] = -INFINITY;
    for (size_t i = 0; i < count; i++) {
        double p[DK_LETKF_POS];
        dk_letkf_position(g, coords + i * (size_t)g->ncoords, p);
        for (int a = 0; a < g->dims; a++)
            lo[a] = p[a] < lo[a] ? p[a] : lo[a], hi[a] = p[a] > hi[a] ? p[a] : hi[a];
    }
}

/* How far along component a an observation within the radius can be. */
static double reach(const dk_letkf_geometry *g, int a)
{
    const double margin = 1.0 + 1e-9;
    if (g->vertical && a == g->hdims)
        return g->vradius * margin;
    if (g->metric == DK_LETKF_SPHERE) {
        double half = g->radius / (2.0 * DK_LETKF_SPHERE_KM);
        return 2.0 * DK_LETKF_SPHERE_KM * sin(half < 1.5707963267948966 ? half : 1.5707963267948966) * margin;
    }
    return g->radius * margin;
}

/* Whether rank p's points can see rank q's observations; a periodic
 * component never separates them (its bounds do not see the wrap). */
static int within_reach(const dk_letkf_geometry *g, const region *p, const region *q)
{
    if (!p->n || !q->m)
        return 0;
    for (int a = 0; a < g->dims; a++) {
        if (g->period[a] > 0)
            continue;
        double r = reach(g, a);
        if (p->glo[a] - r > q->ohi[a] || q->olo[a] > p->ghi[a] + r)
            return 0;
    }
    return 1;
}

typedef struct keyed_obs {
    dk_letkf_key_t key;
    size_t index;
} keyed_obs;

static int by_obs_key(const void *a, const void *b)
{
    const keyed_obs *x = a, *y = b;
    return x->key != y->key ? (x->key < y->key ? -1 : 1) : (x->index > y->index) - (x->index < y->index);
}

static int by_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int by_cells(const void *a, const void *b)
{
    return memcmp(a, b, DK_LETKF_POS * sizeof(int));
}

static int by_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The keys of every bucket that n points (coordinates grid) visit in the
 * buckets g, ascending and distinct, in a new *keys. 0 when out of memory. */
static int visited_keys(const dk_letkf_geometry *g, const double *grid, size_t n, uint64_t **keys, size_t *count)
{
    typedef struct cells {
        int b[DK_LETKF_POS];
    } cells;
    cells *c = malloc((n + 1) * sizeof *c);
    *keys = NULL, *count = 0;
    if (!c)
        return 0;
    size_t nc = 0;
    for (size_t i = 0; i < n; i++) {
        double pos[DK_LETKF_POS];
        cells here;
        memset(&here, 0, sizeof here);
        dk_letkf_position(g, grid + i * (size_t)g->ncoords, pos);
        for (int a = 0; a < g->dims; a++)
            here.b[a] = dk_letkf_cell(g, a, pos[a]);
        /* neighbours along a grid share cells: most repeats go here, before the sort */
        if (!nc || memcmp(&c[nc - 1], &here, sizeof here))
            c[nc++] = here;
    }
    qsort(c, nc, sizeof *c, by_cells);
    const int visits = dk_letkf_visits(g);
    uint64_t *k = malloc((nc * (size_t)visits + 1) * sizeof *k);
    if (!k) {
        free(c);
        return 0;
    }
    size_t nk = 0;
    for (size_t i = 0; i < nc; i++) {
        if (i && !memcmp(&c[i], &c[i - 1], sizeof *c))
            continue;
        for (int t = 0; t < visits; t++) {
            dk_letkf_key_t key;
            if (dk_letkf_visit_key(g, c[i].b, t, &key))
                k[nk++] = key;
        }
    }
    free(c);
    qsort(k, nk, sizeof *k, by_u64);
    size_t u = 0;
    for (size_t i = 0; i < nk; i++)
        if (!u || k[i] != k[u - 1])
            k[u++] = k[i];
    *keys = k, *count = u;
    return 1;
}

/* Appends v to l->sel (used of cap), growing it; 0 when out of memory. */
static int push_sel(struct dkm_letkf *l, size_t *cap, size_t *used, int32_t v)
{
    if (*used == *cap) {
        int32_t *grown = realloc(l->sel, 2 * *cap * sizeof *grown);
        if (!grown)
            return 0;
        l->sel = grown, *cap *= 2;
    }
    l->sel[(*used)++] = v;
    return 1;
}

/* Which of this rank's observations each other rank with points needs:
 * those in the buckets it visits (all_need: every rank's keys, ascending,
 * ncount and ndispl as MPI_Allgatherv took them). Fills l's dst, sel_off,
 * sel and first; 0 when out of memory. */
static int select_for_ranks(struct dkm_letkf *l, const dk_letkf_geometry *net, const dk_letkf_desc *local,
                            const region *reg, int rank, int size, const uint64_t *all_need, const int *ncount,
                            const int *ndispl)
{
    const size_t m = local->m;
    keyed_obs *ko = malloc((m + 1) * sizeof *ko);
    size_t cap = m + 1, used = 0;
    l->dst = malloc((size_t)size * sizeof *l->dst);
    l->sel_off = malloc(((size_t)size + 1) * sizeof *l->sel_off);
    l->first = malloc((size_t)size * sizeof *l->first);
    l->sel = malloc(cap * sizeof *l->sel);
    if (!ko || !l->dst || !l->sel_off || !l->first || !l->sel) {
        free(ko);
        return 0;
    }
    for (size_t j = 0; j < m; j++) {
        double pos[DK_LETKF_POS];
        int b[DK_LETKF_POS] = {0, 0, 0, 0};
        dk_letkf_position(net, local->obs_coords + j * (size_t)net->ncoords, pos);
        for (int a = 0; a < net->dims; a++)
            b[a] = dk_letkf_cell(net, a, pos[a]);
        ko[j].key = dk_letkf_cell_key(net, b);
        ko[j].index = j;
    }
    qsort(ko, m, sizeof *ko, by_obs_key);
    /* the lowest rank holding observations gives one to a rank with points that would get none */
    int giver = 0;
    while (giver < size && !reg[giver].m)
        giver++;
    for (int q = 0; q < size; q++) {
        if (q == rank || !reg[q].n || !m)
            continue;
        size_t start = used, j = 0;
        for (int e = 0; e < ncount[q]; e++) {
            uint64_t key = all_need[ndispl[q] + e];
            while (j < m && ko[j].key < key)
                j++;
            for (; j < m && ko[j].key == key; j++)
                if (!push_sel(l, &cap, &used, (int32_t)ko[j].index)) {
                    free(ko);
                    return 0;
                }
        }
        if (used == start && rank == giver && !reg[q].m && !push_sel(l, &cap, &used, 0)) {
            free(ko);
            return 0;
        }
        if (used == start)
            continue;
        qsort(l->sel + start, used - start, sizeof *l->sel, by_i32);
        int one_range = l->sel[used - 1] - l->sel[start] == (int32_t)(used - 1 - start);
        l->first[l->ndst] = one_range ? (size_t)l->sel[start] : SIZE_MAX;
        l->packed |= !one_range;
        l->sel_off[l->ndst] = start;
        l->dst[l->ndst++] = q;
    }
    l->sel_off[l->ndst] = used;
    free(ko);
    return 1;
}

#define BAD(...) dkm_note(&o, DK_ERR_INVALID_ARGUMENT, __VA_ARGS__)

DK_MPI_API dk_status dk_mpi_letkf_plan_create(dk_context *ctx, MPI_Comm comm, const dk_letkf_desc *local,
                                              dk_mpi_plan **plan)
{
    dk_status st = dkm_check_comm(comm, CREATE);
    if (st != DK_OK)
        return st;
    if (plan)
        *plan = NULL;
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    dkm_outcome o = {DK_OK, ""};
    if (!ctx || !local || !plan)
        BAD("ctx, the description and plan must not be NULL");
    else if (!dk_letkf_variants(ctx))
        dkm_note(&o, DK_ERR_NOT_IMPLEMENTED, "backend %s has no letkf", dk_context_backend(ctx));
    else if ((local->n && !local->grid_coords) || (local->m && !local->obs_coords))
        BAD("grid_coords (n = %zu) or obs_coords (m = %zu) is NULL", local->n, local->m);
    /* the shared scalars: checked by libdakit on a description of this rank's
     * own (with at least one point and observation), then compared with rank 0's */
    shared_scalars mine, *all = calloc((size_t)size, sizeof *all);
    memset(&mine, 0, sizeof mine);
    if (!all)
        dkm_note(&o, DK_ERR_OUT_OF_MEMORY, "out of host memory");
    dk_letkf_geometry geo;
    memset(&geo, 0, sizeof geo);
    if (o.status == DK_OK) {
        mine = scalars_of(local);
        /* the shared fields checked as a plan checks them, on the host (the
         * backend's own limits come with the local plan, agreed below), and
         * the metric that places positions */
        const double zero[DK_LETKF_POS] = {0, 0, 0, 0};
        if ((st = dk_letkf_bucket_shape(local, zero, zero, &geo)) != DK_OK)
            dkm_note(&o, st, "%s", dk_last_error(NULL));
    }
    if (all)
        MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, comm);
    if (o.status == DK_OK && all && memcmp(&all[0], &mine, sizeof mine) != 0)
        BAD("this rank's description differs from rank 0's in a field that must be the same everywhere "
            "(dtype, members, ncoords, metric, radius, vertical_radius, period, inflation, rtpp, rtps, max_obs)");
    free(all);
    if ((st = dkm_agree(comm, &o, CREATE)) != DK_OK)
        return st;

    /* every rank's observations' bounds: the whole network's span, and so its buckets */
    region me, *reg = calloc((size_t)size, sizeof *reg);
    struct dkm_letkf *l = calloc(1, sizeof *l);
    dk_mpi_plan *p = calloc(1, sizeof *p);
    if (l)
        l->rowtype = MPI_DATATYPE_NULL;
    if (p)
        p->comm = MPI_COMM_NULL;
    if (!reg || !l || !p)
        dkm_note(&o, DK_ERR_OUT_OF_MEMORY, "out of host memory");
    memset(&me, 0, sizeof me);
    me.n = local->n, me.m = local->m;
    bounds(&geo, local->obs_coords, local->m, me.olo, me.ohi);
    if (reg)
        MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, reg, (int)sizeof me, MPI_BYTE, comm);
    size_t total_m = 0;
    double span_lo[DK_LETKF_POS], span_hi[DK_LETKF_POS];
    for (int a = 0; a < DK_LETKF_POS; a++)
        span_lo[a] = INFINITY, span_hi[a] = -INFINITY;
    if (o.status == DK_OK) {
        for (int q = 0; q < size; q++) {
            total_m += reg[q].m;
            for (int a = 0; a < DK_LETKF_POS; a++)
                span_lo[a] = fmin(span_lo[a], reg[q].olo[a]), span_hi[a] = fmax(span_hi[a], reg[q].ohi[a]);
        }
        if (total_m == 0)
            BAD("no rank holds an observation; an analysis needs at least one");
        if (total_m > (size_t)INT32_MAX)
            BAD("the ranks hold %zu observations; at most %d", total_m, INT32_MAX);
    }
    dk_letkf_geometry net;
    memset(&net, 0, sizeof net);
    if (o.status == DK_OK && (st = dk_letkf_bucket_shape(local, span_lo, span_hi, &net)) != DK_OK)
        dkm_note(&o, st, "%s", dk_last_error(NULL));
    /* the buckets this rank's points visit, every rank's gathered */
    uint64_t *need = NULL, *all_need = NULL;
    size_t nneed = 0;
    int *ncount = calloc((size_t)size, sizeof *ncount), *ndispl = calloc((size_t)size, sizeof *ndispl);
    if (o.status == DK_OK && (!ncount || !ndispl || !visited_keys(&net, local->grid_coords, local->n, &need, &nneed)))
        dkm_note(&o, DK_ERR_OUT_OF_MEMORY, "out of host memory for the buckets of %zu points", local->n);
    if (o.status == DK_OK && nneed > (size_t)INT32_MAX)
        BAD("this rank's points visit %zu buckets; at most %d", nneed, INT32_MAX);
    if ((st = dkm_agree(comm, &o, CREATE)) != DK_OK) {
        free(need), free(ncount), free(ndispl);
        goto fail;
    }
    int mine_need = (int)nneed;
    MPI_Allgather(&mine_need, 1, MPI_INT, ncount, 1, MPI_INT, comm);
    size_t total_need = 0;
    for (int q = 0; q < size; q++)
        ndispl[q] = (int)total_need, total_need += (size_t)ncount[q];
    if (total_need > (size_t)INT32_MAX)
        BAD("the ranks' points visit %zu buckets in all; at most %d", total_need, INT32_MAX);
    else if (!(all_need = malloc((total_need + 1) * sizeof *all_need)))
        dkm_note(&o, DK_ERR_OUT_OF_MEMORY, "out of host memory for %zu bucket keys", total_need);
    if ((st = dkm_agree(comm, &o, CREATE)) != DK_OK) {
        free(need), free(ncount), free(ndispl), free(all_need);
        goto fail;
    }
    MPI_Allgatherv(need, mine_need, MPI_UINT64_T, all_need, ncount, ndispl, MPI_UINT64_T, comm);
    free(need);
    /* what each rank needs of this rank's observations */
    uint64_t *send_cnt = calloc((size_t)size, sizeof *send_cnt), *recv_cnt = calloc((size_t)size, sizeof *recv_cnt);
    if (!send_cnt || !recv_cnt || !select_for_ranks(l, &net, local, reg, rank, size, all_need, ncount, ndispl))
        dkm_note(&o, DK_ERR_OUT_OF_MEMORY, "out of host memory for the observation halo");
    free(all_need), free(ncount), free(ndispl);
    for (int i = 0; o.status == DK_OK && i < l->ndst; i++)
        send_cnt[l->dst[i]] = l->sel_off[i + 1] - l->sel_off[i];
    if (send_cnt && recv_cnt)
        MPI_Alltoall(send_cnt, 1, MPI_UINT64_T, recv_cnt, 1, MPI_UINT64_T, comm);
    if (o.status == DK_OK) {
        if (MPI_Type_contiguous((int)(local->members * dk_dtype_size(local->dtype)), MPI_BYTE, &l->rowtype) !=
                MPI_SUCCESS ||
            MPI_Type_commit(&l->rowtype) != MPI_SUCCESS)
            dkm_note(&o, DK_ERR_BACKEND, "MPI_Type_contiguous failed");
        l->desc = *local;
        l->desc.grid_coords = l->desc.obs_coords = NULL;
        l->n = local->n;
        l->m_own = local->m;
        l->src = malloc((size_t)size * sizeof *l->src);
        l->src_off = malloc(((size_t)size + 1) * sizeof *l->src_off);
        if (!l->src || !l->src_off)
            dkm_note(&o, DK_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    if (o.status == DK_OK) {
        /* a rank without points receives nothing; with points, its own
         * observations whole and the others' selections, in rank order */
        size_t off = 0;
        for (int q = 0; l->n && q < size; q++) {
            size_t cnt = q == rank ? l->m_own : (size_t)recv_cnt[q];
            if (!cnt)
                continue;
            l->src[l->nsrc] = q;
            l->src_off[l->nsrc++] = off;
            off += cnt;
        }
        l->src_off[l->nsrc] = off;
        l->m_comb = off;
    }
    free(send_cnt), free(recv_cnt);
    /* the sources' coordinates, then the local plan over this rank's points */
    double *obs = NULL, *send_coords = NULL;
    const size_t nc = (size_t)local->ncoords;
    if (o.status == DK_OK && l->m_comb) {
        obs = malloc(l->m_comb * nc * sizeof *obs);
        l->yo = malloc(l->m_comb * sizeof *l->yo);
        l->r = malloc(l->m_comb * sizeof *l->r);
        if (!obs || !l->yo || !l->r)
            dkm_note(&o, DK_ERR_OUT_OF_MEMORY, "out of host memory for %zu observations", l->m_comb);
    }
    if (o.status == DK_OK && l->ndst) {
        size_t sent = l->sel_off[l->ndst];
        send_coords = malloc(sent * nc * sizeof *send_coords);
        l->send_yo = malloc(sent * sizeof *l->send_yo);
        l->send_r = malloc(sent * sizeof *l->send_r);
        if (!send_coords || !l->send_yo || !l->send_r)
            dkm_note(&o, DK_ERR_OUT_OF_MEMORY, "out of host memory for the %zu observations sent", sent);
        for (size_t e = 0; send_coords && e < sent; e++)
            memcpy(send_coords + e * nc, local->obs_coords + (size_t)l->sel[e] * nc, nc * sizeof *send_coords);
    }
    if ((st = dkm_agree(comm, &o, CREATE)) != DK_OK) {
        free(obs), free(send_coords);
        goto fail;
    }
    MPI_Request *req = malloc(((size_t)l->nsrc + (size_t)l->ndst + 1) * sizeof *req);
    int nreq = 0;
    for (int i = 0; req && i < l->nsrc; i++) {
        size_t cnt = (l->src_off[i + 1] - l->src_off[i]) * nc;
        if (l->src[i] == rank)
            memcpy(obs + l->src_off[i] * nc, local->obs_coords, cnt * sizeof *obs);
        else
            MPI_Irecv(obs + l->src_off[i] * nc, (int)cnt, MPI_DOUBLE, l->src[i], 71, comm, &req[nreq++]);
    }
    for (int i = 0; req && i < l->ndst; i++)
        MPI_Isend(send_coords + l->sel_off[i] * nc, (int)((l->sel_off[i + 1] - l->sel_off[i]) * nc), MPI_DOUBLE,
                  l->dst[i], 71, comm, &req[nreq++]);
    if (req)
        MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE);
    else
        dkm_note(&o, DK_ERR_OUT_OF_MEMORY, "out of host memory");
    free(req);
    free(send_coords);
    if (l->n && o.status == DK_OK) {
        dk_letkf_desc d = *local;
        d.m = l->m_comb;
        d.obs_coords = obs;
        if ((st = dk_letkf_plan_create_span(ctx, &d, span_lo, span_hi, &l->local)) != DK_OK)
            dkm_note(&o, st, "%s", dk_last_error(ctx));
        else if ((st = dk_buffer_create(ctx, l->m_comb * local->members * dk_dtype_size(local->dtype), &l->yb)) !=
                 DK_OK)
            dkm_note(&o, st, "%s", dk_last_error(ctx));
    }
    free(obs);
    obs = NULL;
    if ((st = dkm_agree(comm, &o, CREATE)) == DK_OK && MPI_Comm_dup(comm, &p->comm) != MPI_SUCCESS)
        st = dkm_fail(DK_ERR_BACKEND, "%s: MPI_Comm_dup failed", CREATE);
    if (st != DK_OK)
        goto fail;
    free(reg);
    p->ctx = ctx;
    p->rank = rank, p->size = size;
    p->letkf = l;
    dkm_comm_setup(p, 1); /* the blocks travel by dk_comm_exchange; no reductions */
    dkm_stats_attach(p);
    *plan = p;
    return DK_OK;
fail:
    free(reg);
    dkm_letkf_free(l);
    if (p && p->comm != MPI_COMM_NULL)
        MPI_Comm_free(&p->comm);
    free(p);
    return st;
}

/* yo finite and r finite and > 0 (this rank's observations), else a note. */
static int obs_ok(dkm_outcome *o, size_t m, const double *yo, const double *r)
{
    for (size_t j = 0; j < m; j++)
        if (!isfinite(yo[j]) || !(r[j] > 0) || !isfinite(r[j])) {
            dkm_note(o, DK_ERR_INVALID_ARGUMENT,
                     "observation %zu of this rank is %g with error variance %g; observations must be finite and "
                     "variances finite and > 0",
                     j, yo[j], r[j]);
            return 0;
        }
    return 1;
}

static int finite_ok(dkm_outcome *o, dk_dtype dtype, const void *x, size_t count, const char *what)
{
    for (size_t i = 0; i < count; i++) {
        double v = dtype == DK_F32 ? (double)((const float *)x)[i] : ((const double *)x)[i];
        if (!isfinite(v)) {
            dkm_note(o, DK_ERR_INVALID_ARGUMENT, "value %zu of this rank's %s is %g; every value must be finite", i,
                     what, v);
            return 0;
        }
    }
    return 1;
}

static struct dkm_letkf *letkf_of(dk_mpi_plan *plan, const char *what)
{
    if (!plan || !plan->letkf) {
        dkm_fail(DK_ERR_INVALID_ARGUMENT, "%s: the plan is not a distributed letkf plan", what);
        return NULL;
    }
    return plan->letkf;
}

/* The combined yo and r on the host: this rank's whole, the others'
 * selections packed and sent by MPI (small). */
static void gather_obs(dk_mpi_plan *p, struct dkm_letkf *l, const double *yo, const double *r)
{
    MPI_Request *req = malloc(2 * ((size_t)l->nsrc + (size_t)l->ndst + 1) * sizeof *req);
    int nreq = 0;
    if (!req)
        return; /* the caller's agreement found the allocation failure */
    for (int i = 0; i < l->nsrc; i++) {
        size_t off = l->src_off[i], cnt = l->src_off[i + 1] - off;
        if (l->src[i] == p->rank) {
            memcpy(l->yo + off, yo, cnt * sizeof *yo);
            memcpy(l->r + off, r, cnt * sizeof *r);
        } else {
            MPI_Irecv(l->yo + off, (int)cnt, MPI_DOUBLE, l->src[i], 72, p->comm, &req[nreq++]);
            MPI_Irecv(l->r + off, (int)cnt, MPI_DOUBLE, l->src[i], 73, p->comm, &req[nreq++]);
        }
    }
    for (int i = 0; i < l->ndst; i++) {
        size_t off = l->sel_off[i], cnt = l->sel_off[i + 1] - off;
        for (size_t e = off; e < off + cnt; e++)
            l->send_yo[e] = yo[l->sel[e]], l->send_r[e] = r[l->sel[e]];
        MPI_Isend(l->send_yo + off, (int)cnt, MPI_DOUBLE, l->dst[i], 72, p->comm, &req[nreq++]);
        MPI_Isend(l->send_r + off, (int)cnt, MPI_DOUBLE, l->dst[i], 73, p->comm, &req[nreq++]);
    }
    DKM_COMM(p->comm, MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE));
    free(req);
}

/* The rows of this rank's Yb that the destinations need, packed in sel's
 * order into l->send_host (on a failed read, whatever own_host holds: the
 * agreement after the exchange discards the analysis). */
static void pack_rows(struct dkm_letkf *l, const dk_buffer *yb_local, size_t row, dkm_outcome *o, dk_context *ctx)
{
    size_t sent = l->sel_off[l->ndst];
    if (!l->own_host)
        l->own_host = malloc(l->m_own * row + 1);
    if (!l->send_host)
        l->send_host = malloc(sent * row + 1);
    if (!l->own_host || !l->send_host) {
        dkm_note(o, DK_ERR_OUT_OF_MEMORY, "out of host memory for the observation halo");
        return;
    }
    dk_status st = dk_buffer_read(yb_local, l->own_host, l->m_own * row);
    if (st != DK_OK)
        dkm_note(o, st, "%s", dk_last_error(ctx));
    for (size_t e = 0; e < sent; e++)
        memcpy((char *)l->send_host + e * row, (const char *)l->own_host + (size_t)l->sel[e] * row, row);
}

/* The combined Yb on the device: this rank's block by a device copy, the
 * others' selections device to device (NCCL: a destination's rows sent
 * straight from yb_local where they are one range, else packed on the
 * host into a device buffer) or staged through the host (MPI). Every rank
 * makes every MPI call whatever failed before, so none waits. */
static void gather_yb(dk_mpi_plan *p, struct dkm_letkf *l, const dk_buffer *yb_local, dkm_outcome *o)
{
    const size_t row = l->desc.members * dk_dtype_size(l->desc.dtype), sent = l->ndst ? l->sel_off[l->ndst] : 0;
    dk_comm *dc = dkm_device_comm(p);
    dk_status st;
    if (l->ndst && (!dc || l->packed))
        pack_rows(l, yb_local, row, o, p->ctx);
    if (dc) {
        if (l->packed && !l->send_dev &&
            (st = dk_buffer_create(p->ctx, sent * row, &l->send_dev)) != DK_OK)
            dkm_note(o, st, "%s", dk_last_error(p->ctx));
        if (l->packed && l->send_dev && l->send_host &&
            (st = dk_buffer_write(l->send_dev, l->send_host, sent * row)) != DK_OK)
            dkm_note(o, st, "%s", dk_last_error(p->ctx));
        dk_comm_move *mv = calloc((size_t)l->nsrc + (size_t)l->ndst + 1, sizeof *mv);
        int nm = 0;
        for (int i = 0; mv && i < l->nsrc; i++) {
            size_t off = l->src_off[i], cnt = l->src_off[i + 1] - off;
            if (l->src[i] != p->rank) {
                mv[nm++] = (dk_comm_move){l->src[i], 1, l->yb, off * row, cnt * row};
                continue;
            }
            dk_box_copy box;
            memset(&box, 0, sizeof box);
            box.esize = row;
            box.count[0] = box.count[1] = 1, box.count[2] = cnt;
            box.src_shape[0] = box.src_shape[1] = 1, box.src_shape[2] = cnt;
            box.dst_shape[0] = box.dst_shape[1] = 1, box.dst_shape[2] = l->m_comb;
            box.dst_lo[2] = off;
            if ((st = dk_buffer_copy_box(l->yb, yb_local, &box)) != DK_OK)
                dkm_note(o, st, "%s", dk_last_error(p->ctx));
        }
        for (int i = 0; mv && i < l->ndst; i++) {
            size_t off = l->sel_off[i], cnt = l->sel_off[i + 1] - off;
            if (l->first[i] != SIZE_MAX)
                mv[nm++] = (dk_comm_move){l->dst[i], 0, (dk_buffer *)yb_local, l->first[i] * row, cnt * row};
            else
                mv[nm++] = (dk_comm_move){l->dst[i], 0, l->send_dev, off * row, cnt * row};
        }
        /* a rank without what it must send still joins the exchange, with
         * nothing to move; its peers' NCCL calls then end at the
         * communicator's time limit */
        if (!mv)
            dkm_note(o, DK_ERR_OUT_OF_MEMORY, "out of host memory");
        if (l->packed && (!l->send_dev || !l->send_host))
            nm = 0;
        DKM_COMM(p->comm, st = dk_comm_exchange(dc, mv, nm));
        if (st != DK_OK)
            dkm_note(o, st, "%s", dk_last_error(p->ctx));
        free(mv);
        return;
    }
    /* host staging: the combined block assembled on the host, then written */
    char *host = l->yb_host;
    if (!host && l->m_comb)
        host = l->yb_host = malloc(l->m_comb * row);
    MPI_Request *req = malloc(((size_t)l->nsrc + (size_t)l->ndst + 1) * sizeof *req);
    if ((l->m_comb && !host) || !req)
        dkm_note(o, DK_ERR_OUT_OF_MEMORY, "out of host memory for the observation halo");
    int nreq = 0;
    if (req && (!l->m_comb || host)) {
        for (int i = 0; i < l->nsrc; i++) {
            size_t off = l->src_off[i], cnt = l->src_off[i + 1] - off;
            if (l->src[i] != p->rank)
                MPI_Irecv(host + off * row, (int)cnt, l->rowtype, l->src[i], 74, p->comm, &req[nreq++]);
            else if ((st = dk_buffer_read(yb_local, host + off * row, cnt * row)) != DK_OK)
                dkm_note(o, st, "%s", dk_last_error(p->ctx));
        }
        for (int i = 0; i < l->ndst && l->send_host; i++)
            MPI_Isend((char *)l->send_host + l->sel_off[i] * row, (int)(l->sel_off[i + 1] - l->sel_off[i]),
                      l->rowtype, l->dst[i], 74, p->comm, &req[nreq++]);
    }
    DKM_COMM(p->comm, MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE));
    free(req);
    if (o->status == DK_OK && l->yb && (st = dk_buffer_write(l->yb, host, l->m_comb * row)) != DK_OK)
        dkm_note(o, st, "%s", dk_last_error(p->ctx));
}

DK_MPI_API dk_status dk_mpi_letkf_execute(dk_mpi_plan *plan, const dk_buffer *xb_local, const dk_buffer *yb_local,
                                          const double *yo_local, const double *r_local, dk_buffer *xa_local,
                                          dk_buffer *nobs_local, dk_buffer *spread_local)
{
    struct dkm_letkf *l = letkf_of(plan, EXEC);
    if (!l)
        return DK_ERR_INVALID_ARGUMENT;
    dkm_outcome o = {DK_OK, ""};
    const size_t row = l->desc.members * dk_dtype_size(l->desc.dtype);
    if (l->m_own && (!yo_local || !r_local || !yb_local))
        dkm_note(&o, DK_ERR_INVALID_ARGUMENT, "yb, yo and r must not be NULL on a rank holding observations");
    else if (l->m_own && dk_buffer_size(yb_local) < l->m_own * row)
        dkm_note(&o, DK_ERR_INVALID_ARGUMENT, "the yb buffer holds %zu bytes; this rank's %zu observations need %zu",
                 dk_buffer_size(yb_local), l->m_own, l->m_own * row);
    else if (l->m_own)
        obs_ok(&o, l->m_own, yo_local, r_local);
    if (l->n && (!xb_local || !xa_local))
        dkm_note(&o, DK_ERR_INVALID_ARGUMENT, "xb and xa must not be NULL on a rank owning grid points");
    /* agreed before any data moves, so that a refusal changes nothing anywhere */
    dk_status st = dkm_agree(plan->comm, &o, EXEC);
    if (st != DK_OK)
        return st;
    gather_obs(plan, l, yo_local, r_local);
    gather_yb(plan, l, yb_local, &o);
    if (o.status == DK_OK && l->local &&
        (st = dk_letkf_execute(l->local, xb_local, l->yb, l->yo, l->r, xa_local, nobs_local, spread_local)) != DK_OK)
        dkm_note(&o, st, "%s", dk_last_error(plan->ctx));
    return dkm_agree(plan->comm, &o, EXEC);
}

DK_MPI_API dk_status dk_mpi_letkf_execute_host(dk_mpi_plan *plan, const void *xb_local, const void *yb_local,
                                               const double *yo_local, const double *r_local, void *xa_local,
                                               int32_t *nobs_local, double *spread_local)
{
    static const char *const HOST = "dk_mpi_letkf_execute_host";
    struct dkm_letkf *l = letkf_of(plan, HOST);
    if (!l)
        return DK_ERR_INVALID_ARGUMENT;
    dkm_outcome o = {DK_OK, ""};
    const size_t k = l->desc.members, es = dk_dtype_size(l->desc.dtype);
    dk_context *ctx = plan->ctx;
    dk_buffer *bx = NULL, *by = NULL, *bn = NULL, *bs = NULL;
    dk_status st = DK_OK;
    if ((l->n && (!xb_local || !xa_local)) || (l->m_own && !yb_local))
        dkm_note(&o, DK_ERR_INVALID_ARGUMENT, "xb and xa (a rank with points) and yb (a rank with observations) "
                 "must not be NULL");
    else if ((l->n && !finite_ok(&o, l->desc.dtype, xb_local, l->n * k, "xb")) ||
             (l->m_own && !finite_ok(&o, l->desc.dtype, yb_local, l->m_own * k, "yb")))
        st = o.status;
    else if ((l->n && ((st = dk_buffer_create(ctx, l->n * k * es, &bx)) != DK_OK ||
                       (nobs_local && (st = dk_buffer_create(ctx, l->n * sizeof(int32_t), &bn)) != DK_OK) ||
                       (spread_local && (st = dk_buffer_create(ctx, l->n * sizeof(double), &bs)) != DK_OK) ||
                       (st = dk_buffer_write(bx, xb_local, l->n * k * es)) != DK_OK)) ||
             (l->m_own && ((st = dk_buffer_create(ctx, l->m_own * k * es, &by)) != DK_OK ||
                           (st = dk_buffer_write(by, yb_local, l->m_own * k * es)) != DK_OK)))
        dkm_note(&o, st, "%s", dk_last_error(ctx));
    if ((st = dkm_agree(plan->comm, &o, HOST)) == DK_OK &&
        (st = dk_mpi_letkf_execute(plan, bx, by, yo_local, r_local, bx, bn, bs)) == DK_OK && l->n) {
        if ((st = dk_buffer_read(bx, xa_local, l->n * k * es)) != DK_OK ||
            (nobs_local && (st = dk_buffer_read(bn, nobs_local, l->n * sizeof(int32_t))) != DK_OK) ||
            (spread_local && (st = dk_buffer_read(bs, spread_local, l->n * sizeof(double))) != DK_OK))
            dkm_note(&o, st, "%s", dk_last_error(ctx));
    }
    if (st == DK_OK)
        st = dkm_agree(plan->comm, &o, HOST);
    dk_buffer_destroy(bx), dk_buffer_destroy(by), dk_buffer_destroy(bn), dk_buffer_destroy(bs);
    return st;
}

DK_MPI_API dk_status dk_mpi_letkf_halo(const dk_mpi_plan *plan, uint64_t *received, uint64_t *sent)
{
    struct dkm_letkf *l = letkf_of((dk_mpi_plan *)plan, "dk_mpi_letkf_halo");
    if (!l)
        return DK_ERR_INVALID_ARGUMENT;
    if (!received || !sent)
        return dkm_fail(DK_ERR_INVALID_ARGUMENT, "dk_mpi_letkf_halo: received and sent must not be NULL");
    *received = l->m_comb - (l->nsrc ? l->m_own : 0);
    *sent = l->ndst ? l->sel_off[l->ndst] : 0;
    return DK_OK;
}

/* ---- points assigned by cost (dk_mpi_letkf_balance) ---- */

/* How many of the m observations (coordinates obs) lie within the radius
 * of each of the n points: the buckets of kit/letkf/local.h over these
 * observations (cells as wide as the reach, from their lowest position). */
static int count_within(const dk_letkf_geometry *shape, const double *grid, size_t n, const double *obs, size_t m,
                        int64_t *count)
{
    dk_letkf_geometry g = *shape;
    const int nc = g.ncoords;
    double *pos = malloc((m + 1) * DK_LETKF_POS * sizeof *pos);
    keyed_obs *keys = malloc((m + 1) * sizeof *keys);
    if (!pos || !keys) {
        free(pos), free(keys);
        return 0;
    }
    for (size_t j = 0; j < m; j++)
        dk_letkf_position(&g, obs + j * (size_t)nc, pos + j * DK_LETKF_POS);
    for (int a = 0; a < g.dims; a++) {
        double r = reach(&g, a);
        if (g.period[a] > 0) {
            double c = floor(g.period[a] / r);
            c = c < 1 ? 1 : c > DK_LETKF_MAX_CELLS ? DK_LETKF_MAX_CELLS : c;
            g.ncell[a] = (int)c, g.cell[a] = g.period[a] / c, g.origin[a] = 0;
            continue;
        }
        double lo = INFINITY, hi = -INFINITY;
        for (size_t j = 0; j < m; j++)
            lo = fmin(lo, pos[j * DK_LETKF_POS + (size_t)a]), hi = fmax(hi, pos[j * DK_LETKF_POS + (size_t)a]);
        double cell = (hi - lo) / r > DK_LETKF_MAX_CELLS - 2 ? (hi - lo) / (DK_LETKF_MAX_CELLS - 2) : r;
        double c = floor((hi - lo) / cell) + 1;
        g.cell[a] = cell, g.origin[a] = m ? lo : 0, g.ncell[a] = (int)(c > DK_LETKF_MAX_CELLS ? DK_LETKF_MAX_CELLS : c);
    }
    for (size_t j = 0; j < m; j++) {
        int b[DK_LETKF_POS] = {0, 0, 0, 0};
        for (int a = 0; a < g.dims; a++)
            b[a] = dk_letkf_cell(&g, a, pos[j * DK_LETKF_POS + (size_t)a]);
        keys[j].key = dk_letkf_cell_key(&g, b);
        keys[j].index = j;
    }
    qsort(keys, m, sizeof *keys, by_obs_key);
    const int visits = dk_letkf_visits(&g);
    for (size_t i = 0; i < n; i++) {
        double p[DK_LETKF_POS];
        int b[DK_LETKF_POS] = {0, 0, 0, 0};
        dk_letkf_position(&g, grid + i * (size_t)nc, p);
        int inside = 1;
        for (int a = 0; a < g.dims; a++) {
            b[a] = dk_letkf_cell(&g, a, p[a]);
            inside &= b[a] >= -1 && b[a] <= g.ncell[a];
        }
        count[i] = 0;
        for (int t = 0; inside && m && t < visits; t++) {
            dk_letkf_key_t key;
            if (!dk_letkf_visit_key(&g, b, t, &key))
                continue;
            size_t lo = 0, hi = m; /* the first of the bucket */
            while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (keys[mid].key < key)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            for (size_t j = lo; j < m && keys[j].key == key; j++)
                count[i] += dk_letkf_weight(&g, p, pos + keys[j].index * DK_LETKF_POS) > 0;
        }
    }
    free(pos), free(keys);
    return 1;
}

DK_MPI_API dk_status dk_mpi_letkf_balance(MPI_Comm comm, const dk_letkf_desc *local, int32_t *owner, double *cost)
{
    static const char *const BAL = "dk_mpi_letkf_balance";
    dk_status st = dkm_check_comm(comm, BAL);
    if (st != DK_OK)
        return st;
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    dkm_outcome o = {DK_OK, ""};
    dk_letkf_geometry geo;
    memset(&geo, 0, sizeof geo);
    const double zero[DK_LETKF_POS] = {0, 0, 0, 0};
    if (!local || (local->n && (!owner || !local->grid_coords)) || (local->m && !local->obs_coords))
        BAD("the description must not be NULL, nor owner and grid_coords where n > 0, nor obs_coords where m > 0");
    else if (local->ncoords < 1 || local->ncoords > DK_LETKF_MAX_COORDS || !(local->radius > 0) ||
             local->members < 2 || (local->metric == DK_LETKF_SPHERE && local->ncoords < 2))
        BAD("ncoords (%d), radius (%g) or members (%zu) is out of range (dk_letkf_desc: ncoords 1 to %d, 2 or 3 on "
            "the sphere; radius > 0; members >= 2)",
            local->ncoords, local->radius, local->members, DK_LETKF_MAX_COORDS);
    else if ((st = dk_letkf_bucket_shape(local, zero, zero, &geo)) != DK_OK)
        dkm_note(&o, st, "%s", dk_last_error(NULL)); /* the other fields, checked as a plan checks them */
    if ((st = dkm_agree(comm, &o, BAL)) != DK_OK)
        return st;

    /* the observations of every rank within reach of this rank's points: whole blocks, by bounding regions */
    region me, *reg = calloc((size_t)size, sizeof *reg);
    memset(&me, 0, sizeof me);
    me.n = local->n, me.m = local->m;
    bounds(&geo, local->grid_coords, local->n, me.glo, me.ghi);
    bounds(&geo, local->obs_coords, local->m, me.olo, me.ohi);
    int *src = malloc((size_t)size * sizeof *src), *dst = malloc((size_t)size * sizeof *dst), nsrc = 0, ndst = 0;
    size_t *off = malloc(((size_t)size + 1) * sizeof *off);
    if (!reg || !src || !dst || !off)
        dkm_note(&o, DK_ERR_OUT_OF_MEMORY, "out of host memory");
    if (reg)
        MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, reg, (int)sizeof me, MPI_BYTE, comm);
    size_t mcomb = 0;
    for (int q = 0; o.status == DK_OK && q < size; q++)
        for (int s = 0; s < size; s++) {
            int in = within_reach(&geo, &reg[q], &reg[s]);
            if (in && q == rank)
                off[nsrc] = mcomb, mcomb += reg[s].m, src[nsrc++] = s;
            if (in && s == rank && q != rank)
                dst[ndst++] = q;
        }
    const size_t nc = (size_t)local->ncoords;
    double *obs = o.status == DK_OK ? malloc((mcomb + 1) * nc * sizeof *obs) : NULL;
    int64_t *count = malloc((local->n + 1) * sizeof *count);
    if (o.status == DK_OK && (!obs || !count))
        dkm_note(&o, DK_ERR_OUT_OF_MEMORY, "out of host memory for %zu observations", mcomb);
    if ((st = dkm_agree(comm, &o, BAL)) == DK_OK) {
        MPI_Request *req = malloc(((size_t)nsrc + (size_t)ndst + 1) * sizeof *req);
        int nreq = 0;
        for (int i = 0; req && i < nsrc; i++) {
            size_t cnt = reg[src[i]].m * nc;
            if (src[i] == rank)
                memcpy(obs + off[i] * nc, local->obs_coords, cnt * sizeof *obs);
            else if (cnt)
                MPI_Irecv(obs + off[i] * nc, (int)cnt, MPI_DOUBLE, src[i], 75, comm, &req[nreq++]);
        }
        for (int i = 0; req && i < ndst; i++)
            if (local->m)
                MPI_Isend(local->obs_coords, (int)(local->m * nc), MPI_DOUBLE, dst[i], 75, comm, &req[nreq++]);
        if (req)
            MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE);
        else
            dkm_note(&o, DK_ERR_OUT_OF_MEMORY, "out of host memory");
        free(req);
        if (o.status == DK_OK && !count_within(&geo, local->grid_coords, local->n, obs, mcomb, count))
            dkm_note(&o, DK_ERR_OUT_OF_MEMORY, "out of host memory for the buckets of %zu observations", mcomb);
        st = dkm_agree(comm, &o, BAL);
    }
    if (st == DK_OK) {
        /* a point's work: 2 k^2 p for A and b, some 11 k^3 for the eigenproblem and W, in units of 2 k^2 */
        const double k = (double)local->members;
        double mine = 0, before = 0, total = 0;
        for (size_t i = 0; i < local->n; i++) {
            double p = (double)count[i];
            if (local->max_obs && p > (double)local->max_obs)
                p = (double)local->max_obs;
            double c = p > 0 ? p + 5.5 * k : 1.0;
            if (cost)
                cost[i] = c;
            mine += c;
        }
        MPI_Exscan(&mine, &before, 1, MPI_DOUBLE, MPI_SUM, comm);
        MPI_Allreduce(&mine, &total, 1, MPI_DOUBLE, MPI_SUM, comm);
        if (rank == 0)
            before = 0;
        double share = total / size, at = before;
        for (size_t i = 0; i < local->n; i++) {
            double p = (double)count[i], c;
            if (local->max_obs && p > (double)local->max_obs)
                p = (double)local->max_obs;
            c = p > 0 ? p + 5.5 * k : 1.0;
            double mid = at + 0.5 * c;
            int r = share > 0 ? (int)(mid / share) : 0;
            owner[i] = r < 0 ? 0 : r >= size ? size - 1 : r;
            at += c;
        }
    }
    free(reg), free(src), free(dst), free(off), free(obs), free(count);
    return st;
}
