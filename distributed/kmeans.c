/* Distributed kmeans: the points split between ranks as contiguous ranges
 * (or, with the contiguity cost, bands of whole image rows); the Lloyd
 * iterations run here, in the layer.
 *
 * Each iteration every rank labels its points under the current centroids,
 * adds its points into per-cluster sums (double, point order) and counts,
 * and one reduction adds the ranks' sums (dkm_sum: on the device where the
 * backend offers it, else MPI_Allreduce); rank 0 rounds the means to
 * float (empty clusters keep their centroid) and broadcasts them, so every
 * rank holds the same bits. move and the stop rule are dakit/kmeans.h's.
 *
 * Plain cost: the labels come from libdakit: dk_kmeans_execute_host on a
 * local plan over this rank's points with max_iters = 1 (its labels are the
 * nearest centroids of the centroids passed in; its own new centroids are
 * not used). Where that call cannot run (a rank with fewer unmasked points
 * than k, an empty part) and for the contiguity cost, whose window needs the
 * previous labels of rows on other ranks, which dk_kmeans_execute_host does
 * not take, the layer labels the points on the host with the arithmetic of
 * the reference (float, no FMA contraction, ties to the lowest index). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/kmeans.h>

#include "internal.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

static const char *const CREATE = "dk_mpi_kmeans_plan_create";
static const char *const EXEC = "dk_mpi_kmeans_execute_host";

/* marks a kmeans plan: stages[0].axis (gauss uses -1 and 0..2) */
#define KMEANS_AXIS (-2)

typedef struct dkm_kmeans {
    dk_kmeans_desc desc; /* global; variant not kept */
    int contiguity;
    size_t lo, count;    /* this rank's rows (contiguity) or points */
    size_t per;          /* points per unit of the part: cols or 1 */
    size_t npts;         /* this rank's points */
    int have_local;      /* stages[0].plan is a local kmeans plan */
    int whole;           /* one rank: that plan is the caller's whole problem, run as one call */
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
        return BAD("kmeans: k is %d; it must be 1 .. %d and at most n (%zu)", d->k, DK_KMEANS_MAX_K, d->n);
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
    dkm_kmeans *k = malloc(sizeof *k + 2 * (size_t)size * sizeof(size_t));
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
        k->have_local = 0;
        k->whole = 0;
        for (int j = 0; j < size; j++)
            k->band[2 * j] = boxes[j].lo[2], k->band[2 * j + 1] = boxes[j].hi[2];
        /* one rank, plain cost: libdakit's own plan of the whole problem,
         * so the layer adds nothing but its checks */
        if (size == 1 && !contiguity && k->npts >= (size_t)d.k) {
            dk_plan *lp = NULL;
            dk_status ls = dk_kmeans_plan_create(ctx, &d, &lp);
            if (ls != DK_OK)
                dkm_note(o, ls, "%s", dk_last_error(ctx));
            else
                p->stages[0].plan = lp, k->have_local = 1, k->whole = 1;
        }
        /* a local plan for the plain cost where k fits this rank's points */
        else if (!contiguity && k->npts >= (size_t)d.k) {
            dk_kmeans_desc l = d;
            l.n = k->npts;
            l.max_iters = 1;
            l.tol = 0;
            l.rows = l.cols = 0;
            l.lambda = 1;
            dk_plan *lp = NULL;
            dk_status ls = dk_kmeans_plan_create(ctx, &l, &lp);
            if (ls != DK_OK)
                dkm_note(o, ls, "%s", dk_last_error(ctx));
            else
                p->stages[0].plan = lp, k->have_local = 1;
        } else if (!dk_kmeans_variants(ctx)) {
            dkm_note(o, DK_ERR_NOT_IMPLEMENTED, "backend %s has no kmeans", dk_context_backend(ctx));
        }
    }
    free(boxes);
    st = dkm_agree(comm, o, CREATE);
    if (st == DK_OK && MPI_Comm_dup(comm, &p->comm) != MPI_SUCCESS)
        st = dkm_fail(DK_ERR_BACKEND, "%s: MPI_Comm_dup failed", CREATE);
    if (st != DK_OK) {
        dkm_gauss_plan_free(p);
        return st;
    }
    /* the reductions: per-cluster sums, counts and the failure flag */
    dkm_comm_setup(p, (size_t)d.k * (size_t)d.d + (size_t)d.k + 1);
    dkm_stats_attach(p);
    *plan = p;
    return DK_OK;
}

static float distance2(const float *x, const float *c, int d)
{
    float dist = 0.0f;
    for (int f = 0; f < d; f++) {
        float diff = x[f] - c[f];
        dist += diff * diff;
    }
    return dist;
}

/* Labels of the rank's points [0, npts) on the host, as the reference:
 * prev == NULL: plain; else the contiguity cost over prev, the labels of
 * rows [plo, phi) (global), row-major. */
static void assign_host(const dkm_kmeans *k, const float *x, const uint8_t *mask, const float *C,
                        const int32_t *prev, size_t plo, size_t phi, int32_t *out)
{
    const dk_kmeans_desc *d = &k->desc;
    const float lambda = (float)d->lambda, inv_d = 1.0f / (float)d->d;
    const long r = d->window / 2;
    int same[DK_KMEANS_MAX_K];
    for (size_t i = 0; i < k->npts; i++) {
        if (mask && !mask[i]) {
            out[i] = -1;
            continue;
        }
        int m = 0;
        if (prev) {
            memset(same, 0, sizeof(int) * (size_t)d->k);
            long row = (long)(k->lo + i / d->cols), col = (long)(i % d->cols);
            for (long y = row - r; y <= row + r; y++)
                for (long xx = col - r; xx <= col + r; xx++) {
                    if (y < (long)plo || xx < 0 || y >= (long)phi || xx >= (long)d->cols || (y == row && xx == col))
                        continue;
                    int32_t l = prev[(size_t)(y - (long)plo) * d->cols + (size_t)xx];
                    if (l < 0)
                        continue;
                    m++;
                    same[l]++;
                }
        }
        int best = 0;
        float best_cost = 0.0f;
        for (int c = 0; c < d->k; c++) {
            float cost = distance2(x + i * (size_t)d->d, C + (size_t)c * d->d, d->d);
            if (prev)
                cost = lambda * (cost * inv_d) + (1.0f - lambda) * (m ? (float)(m - same[c]) / (float)m : 0.0f);
            if (c == 0 || cost < best_cost) {
                best = c;
                best_cost = cost;
            }
        }
        out[i] = best;
    }
}

/* The halo: prev holds rows [plo, phi) (this rank's band widened by r,
 * clipped); this rank's own labels are at row k->lo. Fills the others from
 * the ranks that own them and sends its rows to the ranks whose widened
 * band covers them. */
static void exchange_halo(dk_mpi_plan *p, const dkm_kmeans *k, int32_t *prev, size_t plo, size_t phi,
                          MPI_Request *req)
{
    const size_t r = (size_t)k->desc.window / 2, cols = k->desc.cols, rows = k->desc.rows;
    int n = 0;
    size_t mlo = k->lo, mhi = k->lo + k->count;
    for (int j = 0; j < p->size; j++) {
        size_t jlo = k->band[2 * j], jhi = k->band[2 * j + 1];
        if (j == p->rank || jlo >= jhi || mlo >= mhi)
            continue;
        /* receive: j's rows inside [plo, phi) */
        size_t a = jlo > plo ? jlo : plo, b = jhi < phi ? jhi : phi;
        if (a < b)
            DKM_COMM(p->comm,
                     MPI_Irecv(prev + (a - plo) * cols, (int)((b - a) * cols), MPI_INT32_T, j, 7, p->comm, &req[n++]));
        /* send: my rows inside j's widened band */
        size_t wlo = jlo > r ? jlo - r : 0, whi = jhi + r < rows ? jhi + r : rows;
        a = mlo > wlo ? mlo : wlo, b = mhi < whi ? mhi : whi;
        if (a < b)
            DKM_COMM(p->comm,
                     MPI_Isend(prev + (a - plo) * cols, (int)((b - a) * cols), MPI_INT32_T, j, 7, p->comm, &req[n++]));
    }
    DKM_COMM(p->comm, MPI_Waitall(n, req, MPI_STATUSES_IGNORE));
}

DK_MPI_API dk_status dk_mpi_kmeans_execute_host(dk_mpi_plan *plan, const float *points_local,
                                                const uint8_t *mask_local, const float *init,
                                                int32_t *labels_local, float *centroids, dk_kmeans_result *result)
{
    if (!plan)
        return dkm_fail(DK_ERR_INVALID_ARGUMENT, "%s: plan must not be NULL", EXEC);
    if (plan->enkf || !plan->kmeans || plan->nstages != 1 || plan->stages[0].axis != KMEANS_AXIS)
        return dkm_fail(DK_ERR_INVALID_ARGUMENT, "%s: the plan is not a kmeans plan", EXEC);
    dk_mpi_plan *p = plan;
    dkm_kmeans *k = state(p);
    const dk_kmeans_desc *d = &k->desc;
    const size_t kd = (size_t)d->k * (size_t)d->d, npts = k->npts;
    dkm_outcome oc = {DK_OK, ""}, *o = &oc;

    if (!init || !centroids || (npts && (!points_local || !labels_local)))
        BAD("points, init, labels and centroids must not be NULL (points and labels may be NULL on an empty "
            "part)");
    /* init the same on every rank, bit for bit */
    uint64_t h[2] = {0, 0};
    if (init) {
        uint64_t x = 0x243f6a8885a308d3u;
        const unsigned char *c = (const unsigned char *)init;
        for (size_t i = 0; i < kd * sizeof(float); i++)
            x = (x ^ c[i]) * 0x100000001b3u;
        h[0] = x, h[1] = ~x;
    }
    uint64_t hm[2];
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

    if (k->whole) { /* one rank: libdakit's call, after the same checks */
        dk_status st = dkm_agree(p->comm, o, EXEC);
        if (st != DK_OK)
            return st;
        st = dk_kmeans_execute_host(p->stages[0].plan, points_local, mask_local, init, labels_local, centroids,
                                    result);
        if (st != DK_OK)
            dkm_note(o, st, "%s", dk_last_error(p->ctx));
        return dkm_agree(p->comm, o, EXEC);
    }

    /* scratch */
    const size_t r = k->contiguity ? (size_t)d->window / 2 : 0;
    size_t plo = 0, phi = 0;
    if (k->contiguity && k->count) {
        plo = k->lo > r ? k->lo - r : 0;
        phi = k->lo + k->count + r < d->rows ? k->lo + k->count + r : d->rows;
    }
    float *C = malloc(kd * sizeof *C), *tmp = malloc(kd * sizeof *tmp);
    double *sum = malloc((kd + (size_t)d->k + 1) * sizeof *sum);
    int32_t *prev = k->contiguity ? calloc((phi - plo) * d->cols + 1, sizeof *prev) : NULL;
    MPI_Request *req = malloc(2 * (size_t)p->size * sizeof *req);
    if (!C || !tmp || !sum || !req || (k->contiguity && !prev))
        dkm_note(o, DK_ERR_OUT_OF_MEMORY, "out of host memory");
    dk_status st = dkm_agree(p->comm, o, EXEC);
    if (st != DK_OK) {
        free(C), free(tmp), free(sum), free(prev), free(req);
        return st;
    }
    memcpy(C, init, kd * sizeof *C);
    int32_t *own_prev = prev && k->count ? prev + (k->lo - plo) * d->cols : NULL;
    if (prev && npts) {
        assign_host(k, points_local, mask_local, C, NULL, 0, 0, own_prev);
    }
    if (prev)
        exchange_halo(p, k, prev, plo, phi, req);

    int it = 0;
    double move = 0.0;
    while (it < d->max_iters) {
        /* label: libdakit where it can, else on the host */
        if (npts) {
            if (prev)
                assign_host(k, points_local, mask_local, C, prev, plo, phi, labels_local);
            else if (k->have_local && valid >= (size_t)d->k) {
                st = dk_kmeans_execute_host(p->stages[0].plan, points_local, mask_local, C, labels_local, tmp,
                                            NULL);
                if (st != DK_OK)
                    dkm_note(o, st, "%s", dk_last_error(p->ctx));
            } else
                assign_host(k, points_local, mask_local, C, NULL, 0, 0, labels_local);
        }
        it++;
        memset(sum, 0, (kd + (size_t)d->k + 1) * sizeof *sum);
        double *count = sum + kd;
        for (size_t i = 0; i < npts && oc.status == DK_OK; i++) {
            int32_t l = labels_local[i];
            if (l < 0)
                continue;
            count[l] += 1.0;
            for (int f = 0; f < d->d; f++)
                sum[(size_t)l * d->d + f] += points_local[i * (size_t)d->d + f];
        }
        sum[kd + (size_t)d->k] = oc.status != DK_OK; /* a failure flag rides along */
        DKM_COMM(p->comm, dkm_sum(p, sum, kd + (size_t)d->k + 1, -1));
        if (sum[kd + (size_t)d->k] != 0)
            break; /* agreed below */
        /* rank 0 rounds, every rank takes its bits */
        if (p->rank == 0) {
            memcpy(tmp, C, kd * sizeof *tmp);
            for (int c = 0; c < d->k; c++)
                if (count[c] > 0)
                    for (int f = 0; f < d->d; f++) {
                        size_t j = (size_t)c * d->d + f;
                        tmp[j] = (float)(sum[j] / count[c]);
                    }
        }
        DKM_COMM(p->comm, MPI_Bcast(tmp, (int)kd, MPI_FLOAT, 0, p->comm));
        move = 0.0;
        for (int c = 0; c < d->k; c++) {
            if (count[c] <= 0)
                continue;
            double m2 = 0.0;
            for (int f = 0; f < d->d; f++) {
                size_t j = (size_t)c * d->d + f;
                double diff = (double)tmp[j] - (double)C[j];
                m2 += diff * diff;
            }
            if (sqrt(m2) > move)
                move = sqrt(m2);
        }
        memcpy(C, tmp, kd * sizeof *C);
        if (prev) {
            memcpy(own_prev, labels_local, npts * sizeof *prev);
            exchange_halo(p, k, prev, plo, phi, req);
        }
        if (move < d->tol)
            break;
    }
    st = dkm_agree(p->comm, o, EXEC);
    if (st == DK_OK) {
        double obj = 0.0;
        for (size_t i = 0; i < npts; i++)
            if (labels_local[i] >= 0)
                obj += distance2(points_local + i * (size_t)d->d, C + (size_t)labels_local[i] * d->d, d->d);
        DKM_COMM(p->comm, dkm_sum(p, &obj, 1, -1));
        memcpy(centroids, C, kd * sizeof *C);
        if (result) {
            memset(result, 0, sizeof *result);
            result->iterations = it;
            result->objective = obj;
            result->last_move = move;
            result->valid = (size_t)total;
        }
    }
    free(C), free(tmp), free(sum), free(prev), free(req);
    return st;
}
