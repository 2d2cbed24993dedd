/* Distributed LETKF (libdakit-mpi) against the single-process reference.
 * Run under mpirun with any number of ranks:
 *   mpirun -n P test_mpi_letkf BACKEND
 * Every rank makes the whole problem from one seed and analyses it whole in
 * one process on the same backend (dk_letkf_plan_create, the observations
 * in the layer's global order: rank 0's, then rank 1's, ...) and with
 * dk_letkf_reference (the observations as made), then compares its own
 * points' distributed analysis.
 * Against the one-process plan: bit for bit on cpu (the ranks' plans cut
 * the whole network's bucket grid, so each point sums the same
 * observations in the same order); 1e-10 of the ensemble's scale on opencl
 * and cuda, whose kernels may round a point differently with the batch it
 * falls in (docs/distributed.md). Against the reference: 1e-10 in float64
 * (another eigensolver), 1e-4 in float32 (the data rounded once to float on
 * writing). The observation counts exactly.
 * Points and observations are dealt to ranks in several ways (slabs,
 * round robin, a rank without points, a rank without observations).
 * Then bad input on one rank must give every rank the same status and
 * sentence, without a hang.
 * `test_mpi_letkf --skip REASON` prints the reason and exits 77. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_check.h"

typedef enum { SLABS, ROUND_ROBIN, NO_POINTS_ON_0, NO_OBS_ON_LAST } dealing;
static const char *const dealing_names[] = {"slabs", "round robin", "rank 0 without points",
                                            "last rank without observations"};

typedef struct tcase {
    const char *name;
    dk_letkf_metric metric;
    int nx, ny, nz;  /* grid: nx * ny points (cartesian x, y or sphere lon, lat), nz levels */
    size_t m, k;
    double radius, vradius, period0, inflation, rtpp, rtps;
    size_t max_obs;
    dk_dtype dtype;
    dealing deal;
} tcase;

static const tcase cases[] = {
    {"plane_60x50_k10", DK_LETKF_CARTESIAN, 60, 50, 1, 800, 10, 8, 0, 0, 1.05, 0, 0, 0, DK_F64, SLABS},
    {"ring_40_k20_periodic", DK_LETKF_CARTESIAN, 40, 1, 1, 40, 20, 13.9, 0, 40, 1.04, 0, 0, 0, DK_F64, ROUND_ROBIN},
    {"plane_40x40_k8_cap12_rtpp", DK_LETKF_CARTESIAN, 40, 40, 1, 1200, 8, 7, 0, 0, 1, 0.5, 0, 12, DK_F64,
     NO_POINTS_ON_0},
    {"sphere_36x18x3_k12_vertical", DK_LETKF_SPHERE, 36, 18, 3, 600, 12, 2500, 1.5, 0, 1, 0, 0.6, 0, DK_F64,
     NO_OBS_ON_LAST},
    {"plane_50x30_k16_f32_rtps", DK_LETKF_CARTESIAN, 50, 30, 1, 500, 16, 6, 0, 0, 1.1, 0, 0.5, 0, DK_F32, SLABS},
};

static double frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0;
}

typedef struct problem {
    size_t n, m, k;
    int nc;
    double *gc, *oc, *xb, *yb, *yo, *r;
} problem;

static void make(const tcase *t, problem *p)
{
    uint64_t s = 2024;
    p->k = t->k;
    p->n = (size_t)t->nx * t->ny * t->nz;
    p->m = t->m;
    p->nc = t->metric == DK_LETKF_SPHERE ? 2 + (t->vradius > 0) : (t->ny > 1 ? 2 : 1) + (t->vradius > 0);
    p->gc = malloc(sizeof(double) * p->n * p->nc);
    p->oc = malloc(sizeof(double) * p->m * p->nc);
    p->xb = malloc(sizeof(double) * p->n * p->k);
    p->yb = malloc(sizeof(double) * p->m * p->k);
    p->yo = malloc(sizeof(double) * p->m);
    p->r = malloc(sizeof(double) * p->m);
    size_t i = 0;
    for (int z = 0; z < t->nz; z++)
        for (int y = 0; y < t->ny; y++)
            for (int x = 0; x < t->nx; x++, i++) {
                double *c = p->gc + i * p->nc;
                if (t->metric == DK_LETKF_SPHERE) {
                    c[0] = x * 360.0 / t->nx, c[1] = -85 + y * 170.0 / (t->ny - 1);
                    if (p->nc == 3)
                        c[2] = z;
                } else {
                    c[0] = x;
                    if (t->ny > 1)
                        c[1] = y;
                }
            }
    for (size_t j = 0; j < p->m; j++) {
        double *c = p->oc + j * p->nc;
        if (t->metric == DK_LETKF_SPHERE) {
            c[0] = 360 * frand(&s), c[1] = -90 + 180 * frand(&s);
            if (p->nc == 3)
                c[2] = (t->nz - 1) * frand(&s);
        } else {
            c[0] = t->nx * frand(&s);
            if (t->ny > 1)
                c[1] = t->ny * frand(&s);
        }
    }
    for (size_t q = 0; q < p->n * p->k; q++)
        p->xb[q] = sin(0.1 * q) + frand(&s) - 0.5;
    for (size_t q = 0; q < p->m * p->k; q++)
        p->yb[q] = cos(0.3 * q) + 2 * frand(&s) - 1;
    for (size_t j = 0; j < p->m; j++)
        p->yo[j] = frand(&s) - 0.5, p->r[j] = 0.3 + frand(&s);
}

static void unmake(problem *p)
{
    free(p->gc), free(p->oc), free(p->xb), free(p->yb), free(p->yo), free(p->r);
}

static void desc_of(const tcase *t, const problem *p, dk_letkf_desc *d)
{
    dk_letkf_desc_init(d);
    d->dtype = t->dtype;
    d->members = p->k;
    d->ncoords = p->nc;
    d->metric = t->metric;
    d->radius = t->radius;
    d->vertical_radius = t->vradius;
    d->period[0] = t->period0;
    d->inflation = t->inflation;
    d->rtpp = t->rtpp, d->rtps = t->rtps;
    d->max_obs = t->max_obs;
}

/* Which rank owns point i and holds observation j. */
static int point_owner(const tcase *t, size_t i, size_t n)
{
    int ranks = t->deal == NO_POINTS_ON_0 && size > 1 ? size - 1 : size;
    int first = t->deal == NO_POINTS_ON_0 && size > 1 ? 1 : 0;
    if (t->deal == ROUND_ROBIN)
        return (int)(i % (size_t)size);
    return first + (int)(i * (size_t)ranks / n);
}

static int obs_holder(const tcase *t, size_t j)
{
    int ranks = t->deal == NO_OBS_ON_LAST && size > 1 ? size - 1 : size;
    return (int)(j % (size_t)ranks);
}

/* The rows of src (count x width doubles) with keep[row], converted to dtype. */
static void *pick(const double *src, size_t count, size_t width, const int *keep, dk_dtype dtype, size_t *kept)
{
    size_t c = 0;
    for (size_t i = 0; i < count; i++)
        c += keep[i];
    void *out = malloc((c ? c : 1) * width * (dtype == DK_F32 ? sizeof(float) : sizeof(double)));
    size_t o = 0;
    for (size_t i = 0; i < count; i++)
        if (keep[i]) {
            for (size_t w = 0; w < width; w++) {
                if (dtype == DK_F32)
                    ((float *)out)[o * width + w] = (float)src[i * width + w];
                else
                    ((double *)out)[o * width + w] = src[i * width + w];
            }
            o++;
        }
    *kept = c;
    return out;
}

/* dk_mpi_letkf_balance on this rank's part: each point's cost must be
 * its observation count from the analysis (nobs, capped as the analysis
 * caps) plus 5.5 k, or 1 without observations; the owners must be
 * non-decreasing in the ranks' order, and no rank's summed cost may exceed
 * its share (the total / P) by more than one point's. */
static void check_balance(const tcase *t, const dk_letkf_desc *ld, const int32_t *nobs)
{
    size_t n = ld->n;
    int32_t *owner = malloc(sizeof(int32_t) * (n ? n : 1));
    double *cost = malloc(sizeof(double) * (n ? n : 1));
    dk_status st = dk_mpi_letkf_balance(MPI_COMM_WORLD, ld, owner, cost);
    long wrong = 0, order = 0;
    double *per = calloc((size_t)size, sizeof(double)), top = 0, total = 0;
    for (size_t i = 0; st == DK_OK && i < n; i++) {
        double want = nobs[i] > 0 ? nobs[i] + 5.5 * (double)ld->members : 1.0;
        wrong += cost[i] != want;
        order += owner[i] < 0 || owner[i] >= size || (i && owner[i] < owner[i - 1]);
        if (owner[i] >= 0 && owner[i] < size)
            per[owner[i]] += cost[i];
        top = fmax(top, cost[i]);
    }
    int last = n ? owner[n - 1] : -1, prev_last;
    /* the owners continue across ranks: rank r's first is at least rank r-1's last */
    MPI_Allreduce(MPI_IN_PLACE, per, size, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &top, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Exscan(&last, &prev_last, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank > 0 && n && owner[0] < prev_last)
        order++;
    double most = 0;
    for (int q = 0; q < size; q++)
        total += per[q], most = fmax(most, per[q]);
    int ok = all_ranks(st == DK_OK && !wrong && !order) && most <= total / size + top;
    if (rank == 0)
        printf("%-4s %s (%s): dk_mpi_letkf_balance: costs from the observation counts, owners in order, largest "
               "share %.4g of a mean %.4g (one point at most %.4g)%s\n",
               ok ? "ok" : "FAIL", t->name, dealing_names[t->deal], most, total / size, top,
               st != DK_OK ? dk_mpi_last_error() : "");
    if (!ok && st == DK_OK)
        fprintf(stderr, "rank %d: %s: %ld costs differ from the counts, %ld owners out of order\n", rank, t->name,
                wrong, order);
    failures += !ok;
    free(owner), free(cost), free(per);
}

static void run_case(dk_context *ctx, const tcase *t, int device)
{
    problem p;
    make(t, &p);
    dk_letkf_desc d;
    desc_of(t, &p, &d);
    const size_t k = p.k, es = t->dtype == DK_F32 ? sizeof(float) : sizeof(double);
    /* the reference on the whole problem, from the same dtype's data */
    int *all = malloc(sizeof(int) * (p.n > p.m ? p.n : p.m));
    for (size_t i = 0; i < (p.n > p.m ? p.n : p.m); i++)
        all[i] = 1;
    size_t cnt;
    void *xb_all = pick(p.xb, p.n, k, all, t->dtype, &cnt), *yb_all = pick(p.yb, p.m, k, all, t->dtype, &cnt);
    void *xa_ref = malloc(p.n * k * es);
    int32_t *nobs_ref = malloc(sizeof(int32_t) * p.n);
    double *spread_ref = malloc(sizeof(double) * p.n);
    dk_letkf_desc whole = d;
    whole.n = p.n, whole.m = p.m, whole.grid_coords = p.gc, whole.obs_coords = p.oc;
    dk_status st = dk_letkf_reference(&whole, xb_all, yb_all, p.yo, p.r, xa_ref, nobs_ref, spread_ref);
    if (st != DK_OK) {
        printf("FAIL %s: the reference failed: %s\n", t->name, dk_last_error(NULL));
        failures++;
    }
    /* the whole problem in one process on this backend, its observations in
     * the layer's global order (rank 0's, then rank 1's, ...) */
    size_t *order = malloc(sizeof(size_t) * p.m), at = 0;
    for (int q = 0; q < size; q++)
        for (size_t j = 0; j < p.m; j++)
            if (obs_holder(t, j) == q)
                order[at++] = j;
    double *oc_o = malloc(sizeof(double) * p.m * p.nc), *yo_o = malloc(sizeof(double) * p.m);
    double *r_o = malloc(sizeof(double) * p.m);
    char *yb_o = malloc(p.m * k * es);
    for (size_t j = 0; j < p.m; j++) {
        memcpy(oc_o + j * p.nc, p.oc + order[j] * p.nc, sizeof(double) * p.nc);
        memcpy(yb_o + j * k * es, (char *)yb_all + order[j] * k * es, k * es);
        yo_o[j] = p.yo[order[j]], r_o[j] = p.r[order[j]];
    }
    dk_letkf_desc ordered = whole;
    ordered.obs_coords = oc_o;
    void *xa_one = malloc(p.n * k * es);
    dk_plan *one = NULL;
    if (dk_letkf_plan_create(ctx, &ordered, &one) != DK_OK ||
        dk_letkf_execute_host(one, xb_all, yb_o, yo_o, r_o, xa_one, NULL, NULL) != DK_OK) {
        printf("FAIL %s: the one-process plan failed: %s\n", t->name, dk_last_error(ctx));
        failures++;
    }
    dk_plan_destroy(one);
    free(order), free(oc_o), free(yo_o), free(r_o), free(yb_o);
    /* this rank's part */
    int *mine_p = calloc(p.n, sizeof(int)), *mine_o = calloc(p.m, sizeof(int));
    for (size_t i = 0; i < p.n; i++)
        mine_p[i] = point_owner(t, i, p.n) == rank;
    for (size_t j = 0; j < p.m; j++)
        mine_o[j] = obs_holder(t, j) == rank;
    size_t n_loc, m_loc;
    double *gc_loc = pick(p.gc, p.n, (size_t)p.nc, mine_p, DK_F64, &n_loc);
    double *oc_loc = pick(p.oc, p.m, (size_t)p.nc, mine_o, DK_F64, &m_loc);
    void *xb_loc = pick(p.xb, p.n, k, mine_p, t->dtype, &n_loc), *yb_loc = pick(p.yb, p.m, k, mine_o, t->dtype, &m_loc);
    double *yo_loc = pick(p.yo, p.m, 1, mine_o, DK_F64, &m_loc), *r_loc = pick(p.r, p.m, 1, mine_o, DK_F64, &m_loc);
    dk_letkf_desc ld = d;
    ld.n = n_loc, ld.m = m_loc, ld.grid_coords = gc_loc, ld.obs_coords = oc_loc;
    dk_mpi_plan *plan = NULL;
    st = dk_mpi_letkf_plan_create(ctx, MPI_COMM_WORLD, &ld, &plan);
    void *xa_loc = malloc((n_loc ? n_loc : 1) * k * es);
    int32_t *nobs_loc = malloc(sizeof(int32_t) * (n_loc ? n_loc : 1));
    double *spread_loc = malloc(sizeof(double) * (n_loc ? n_loc : 1));
    if (st == DK_OK && !device)
        st = dk_mpi_letkf_execute_host(plan, xb_loc, yb_loc, yo_loc, r_loc, xa_loc, nobs_loc, spread_loc);
    else if (st == DK_OK) {
        dk_buffer *bx = NULL, *by = NULL, *bn = NULL, *bs = NULL;
        if (n_loc) {
            dk_buffer_create(ctx, n_loc * k * es, &bx);
            dk_buffer_create(ctx, n_loc * sizeof(int32_t), &bn);
            dk_buffer_create(ctx, n_loc * sizeof(double), &bs);
            dk_buffer_write(bx, xb_loc, n_loc * k * es);
        }
        if (m_loc) {
            dk_buffer_create(ctx, m_loc * k * es, &by);
            dk_buffer_write(by, yb_loc, m_loc * k * es);
        }
        st = dk_mpi_letkf_execute(plan, bx, by, yo_loc, r_loc, bx, bn, bs);
        if (st == DK_OK && n_loc) {
            dk_buffer_read(bx, xa_loc, n_loc * k * es);
            dk_buffer_read(bn, nobs_loc, n_loc * sizeof(int32_t));
            dk_buffer_read(bs, spread_loc, n_loc * sizeof(double));
        }
        dk_buffer_destroy(bx), dk_buffer_destroy(by), dk_buffer_destroy(bn), dk_buffer_destroy(bs);
    }
    double scale = 0, err = 0, serr = 0, oerr = 0;
    long count_bad = 0;
    if (st == DK_OK) {
        size_t q = 0;
        for (size_t i = 0; i < p.n; i++) {
            if (!mine_p[i])
                continue;
            for (size_t l = 0; l < k; l++) {
                double a = t->dtype == DK_F32 ? ((float *)xa_loc)[q * k + l] : ((double *)xa_loc)[q * k + l];
                double b = t->dtype == DK_F32 ? ((float *)xa_ref)[i * k + l] : ((double *)xa_ref)[i * k + l];
                double c = t->dtype == DK_F32 ? ((float *)xa_one)[i * k + l] : ((double *)xa_one)[i * k + l];
                err = fmax(err, fabs(a - b));
                oerr = fmax(oerr, fabs(a - c));
                scale = fmax(scale, fabs(b));
            }
            serr = fmax(serr, fabs(spread_loc[q] - spread_ref[i]));
            count_bad += nobs_loc[q] != nobs_ref[i];
            q++;
        }
    }
    double tol = (t->dtype == DK_F32 ? 1e-4 : 1e-10) * fmax(scale, 1.0);
    double otol = strcmp(dk_context_backend(ctx), "cpu") ? 1e-10 * fmax(scale, 1.0) : 0;
    int ok = all_ranks(st == DK_OK && err <= tol && serr <= tol && oerr <= otol && count_bad == 0);
    double worst, oworst;
    MPI_Allreduce(&err, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&oerr, &oworst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    /* the halo against whole blocks: every other rank's observations, to each rank with points */
    uint64_t got = 0, sent = 0, whole_blocks = n_loc ? (uint64_t)(p.m - m_loc) : 0;
    if (st == DK_OK && dk_mpi_letkf_halo(plan, &got, &sent) != DK_OK)
        ok = 0;
    ok = all_ranks(ok && got <= whole_blocks);
    MPI_Allreduce(MPI_IN_PLACE, &got, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &whole_blocks, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%-4s %s (%s, %s, %s): max |xa - one process| %.2e (tolerance %.1e), |xa - reference| %.2e (%.1e); "
               "halo %llu observations received in all (whole blocks: %llu)%s\n",
               ok ? "ok" : "FAIL", t->name, dealing_names[t->deal], device ? "device buffers" : "host arrays",
               dk_mpi_plan_transport(plan), oworst, otol, worst, tol, (unsigned long long)got,
               (unsigned long long)whole_blocks, st != DK_OK ? dk_mpi_last_error() : "");
    if (!ok && st == DK_OK)
        fprintf(stderr, "rank %d: %s: error %.3e (one process %.3e) spread error %.3e, %ld counts differ\n", rank,
                t->name, err, oerr, serr, count_bad);
    failures += !ok;
    if (st == DK_OK && !device)
        check_balance(t, &ld, nobs_loc);
    dk_mpi_plan_destroy(plan);
    free(all), free(xb_all), free(yb_all), free(xa_ref), free(xa_one), free(nobs_ref), free(spread_ref), free(mine_p), free(mine_o);
    free(gc_loc), free(oc_loc), free(xb_loc), free(yb_loc), free(yo_loc), free(r_loc), free(xa_loc), free(nobs_loc);
    free(spread_loc);
    unmake(&p);
}

static void bad_input(dk_context *ctx)
{
    const tcase *t = &cases[0];
    problem p;
    make(t, &p);
    dk_letkf_desc d;
    desc_of(t, &p, &d);
    /* contiguous slabs of points and observations */
    size_t n0 = p.n * (size_t)rank / (size_t)size, n1 = p.n * (size_t)(rank + 1) / (size_t)size;
    size_t m0 = p.m * (size_t)rank / (size_t)size, m1 = p.m * (size_t)(rank + 1) / (size_t)size;
    d.n = n1 - n0, d.m = m1 - m0, d.grid_coords = p.gc + n0 * p.nc, d.obs_coords = p.oc + m0 * p.nc;
    dk_letkf_desc e = d;
    if (rank == size - 1)
        e.radius = 9;
    dk_mpi_plan *plan = NULL;
    dk_status st = dk_mpi_letkf_plan_create(ctx, MPI_COMM_WORLD, &e, &plan);
    if (size > 1)
        expect_failure("a radius that differs on the last rank", st, DK_ERR_INVALID_ARGUMENT, "differs from rank 0");
    dk_mpi_plan_destroy(plan);
    plan = NULL;
    st = dk_mpi_letkf_plan_create(ctx, MPI_COMM_WORLD, &d, &plan);
    if (st == DK_OK) {
        double *xa = malloc(sizeof(double) * (d.n ? d.n : 1) * p.k);
        double *r = malloc(sizeof(double) * (d.m ? d.m : 1));
        memcpy(r, p.r + m0, sizeof(double) * d.m);
        if (rank == size - 1 && d.m)
            r[d.m - 1] = 0;
        memcpy(xa, p.xb + n0 * p.k, sizeof(double) * d.n * p.k);
        st = dk_mpi_letkf_execute_host(plan, p.xb + n0 * p.k, p.yb + m0 * p.k, p.yo + m0, r, xa, NULL, NULL);
        expect_failure("an error variance of 0 on the last rank", st, DK_ERR_INVALID_ARGUMENT, "variance");
        int same = memcmp(xa, p.xb + n0 * p.k, sizeof(double) * d.n * p.k) == 0;
        if (!all_ranks(same)) {
            failures++;
            if (rank == 0)
                printf("FAIL a refused analysis changed xa\n");
        }
        free(xa), free(r);
    } else {
        failures++;
        if (rank == 0)
            printf("FAIL plan for the bad-input case: %s\n", dk_mpi_last_error());
    }
    dk_mpi_plan_destroy(plan);
    unmake(&p);
}

int main(int argc, char **argv)
{
    int code;
    dk_context *ctx = mpi_test_begin(&argc, &argv, dk_letkf_variants, &code);
    if (!ctx)
        return code;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        run_case(ctx, &cases[c], 0);
    run_case(ctx, &cases[0], 1);
    run_case(ctx, &cases[3], 1);
    bad_input(ctx);
    return mpi_test_end(ctx);
}
