/* letkf on the cpu backend: the grid points' analyses in parallel with
 * OpenMP, each thread with its own scratch, each point through the kit's
 * one-point analysis (dakit/kit/letkf/analysis_host.h), so variant
 * "jacobi" equals the serial reference bit for bit whatever the thread
 * count. The observation space (perturbations, departures, 1 / r in
 * sorted order) is computed once per analysis, in parallel, into the
 * plan's own arrays.
 *
 * Variant "syevd" (built where LAPACKE is found) solves each point's
 * k x k eigenproblem with LAPACK's divide and conquer (dsyevd) instead of
 * cyclic Jacobi; everything else is the same code. It differs from the
 * reference by the eigensolver's rounding only.
 *
 * Variant "solves" (the default where LAPACKE is found) forms no
 * eigenvectors: the analysis needs only x . (g + A)^-1 b and sqrt((k - 1)
 * / (g + A)) x, so A is reduced to tridiagonal T = Q^T A Q (dsytrd), x and
 * b go to Q's basis (dormtr), the mean's weight is one positive definite
 * tridiagonal solve (dptsv) and the perturbations DK_LETKF_POLES shifted
 * ones weighted by Zolotarev's approximation of x^-1/2
 * (dakit/kit/letkf/inv_sqrt_host.h, 2e-14 relative), then back through Q.
 * A point whose T reaches beyond the approximation's interval takes dsyevd.
 * Weight interpolation, which needs every transform, takes dsyevd too. */
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#ifdef DK_CPU_LAPACKE
#include <lapacke.h>
#endif

#include <dakit/kit/letkf/analysis_host.h>
#include <dakit/kit/letkf/inv_sqrt_host.h>
#include <dakit/plugin.h>

/* Points handed to a thread at a time: their costs differ (edges, caps),
 * so the schedule is dynamic, in chunks large enough to keep its overhead
 * small. */
#define POINTS_PER_CHUNK 16

typedef struct letkf_plan {
    const dk_letkf_setup *su;
    int syevd;            /* the variant: 1 LAPACK dsyevd (or solves), 0 cyclic Jacobi */
    int solves;           /* the variant solves */
    double shift[DK_LETKF_POLES], weight[DK_LETKF_POLES], scale; /* its approximation, scaled by g */
    double *pos;          /* n x DK_LETKF_POS: the grid points' positions */
    double *yp, *dep, *rinv; /* m x k, m, m: the observation space in sorted order, per analysis */
} letkf_plan;

#ifdef DK_CPU_LAPACKE
/* solves is the default where built; dsyevd is faster than Jacobi from k = 8 on (docs/letkf.md). */
static const char *const letkf_variants[] = {"solves", "syevd", "jacobi", NULL};
#else
static const char *const letkf_variants[] = {"jacobi", NULL};
#endif

static void letkf_plan_destroy(void *p)
{
    letkf_plan *plan = p;
    if (!plan)
        return;
    free(plan->pos), free(plan->yp), free(plan->dep), free(plan->rinv);
    free(plan);
}

static dk_status letkf_plan_create(void *device, const dk_letkf_setup *su, void **out, dk_msg *msg)
{
    (void)device;
    const dk_letkf_desc *d = &su->desc;
    letkf_plan *plan = calloc(1, sizeof *plan);
    if (!plan) {
        dk_msg_set(msg, "cpu letkf: out of host memory for the plan");
        return DK_ERR_OUT_OF_MEMORY;
    }
    plan->su = su;
    plan->solves = !strcmp(d->variant, "solves");
    plan->syevd = plan->solves || !strcmp(d->variant, "syevd");
    if (plan->solves)
        dk_letkf_solves_setup((int)d->members, d->inflation, plan->shift, plan->weight, &plan->scale);
    plan->pos = malloc(d->n * DK_LETKF_POS * sizeof *plan->pos);
    plan->yp = malloc(d->m * d->members * sizeof *plan->yp);
    plan->dep = malloc(d->m * sizeof *plan->dep);
    plan->rinv = malloc(d->m * sizeof *plan->rinv);
    if (!plan->pos || !plan->yp || !plan->dep || !plan->rinv) {
        dk_msg_set(msg, "cpu letkf: out of host memory for the plan's %zu bytes",
                   (d->n * DK_LETKF_POS + d->m * (d->members + 2)) * sizeof(double));
        letkf_plan_destroy(plan);
        return DK_ERR_OUT_OF_MEMORY;
    }
    const long n = (long)d->n;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++)
        dk_letkf_position(&su->geo, d->grid_coords + (size_t)i * (size_t)d->ncoords, plan->pos + (size_t)i * DK_LETKF_POS);
    *out = plan;
    return DK_OK;
}

/* One thread's scratch: the kit's, and dsyevd's (or dsytrd's and dormtr's) workspace. */
typedef struct thread_scratch {
    dk_letkf_scratch s;
    double *x;      /* k: the point's background, widened */
    double *work;   /* dsyevd, dsytrd, dormtr */
    int *iwork;
    int lwork, liwork;
    double *td;     /* solves, k each: T's diagonal, subdiagonal, dsytrd's tau, a shifted copy of T's two, x and b in
                       Q's basis, a solve, the perturbations */
    double *te, *tau, *sd, *se, *xq, *bq, *z, *u;
} thread_scratch;

static void thread_scratch_free(thread_scratch *t)
{
    if (t->s.k)
        dk_letkf_scratch_free(&t->s);
    free(t->x), free(t->work), free(t->iwork), free(t->td);
}

/* 0, or -1 when out of memory. */
static int thread_scratch_make(thread_scratch *t, int k, size_t cap, int syevd)
{
    memset(t, 0, sizeof *t);
    if (dk_letkf_scratch_make(&t->s, k, cap))
        return -1;
    t->x = malloc((size_t)k * sizeof *t->x);
    if (syevd) {
        /* dsyevd's minimal workspace for eigenvectors: 1 + 6k + 2k^2 and 3 + 5k; dsytrd and dormtr (two columns)
         * run blocked in 64k */
        t->lwork = 1 + 6 * k + 2 * k * k + 64 * k;
        t->liwork = 3 + 5 * k;
        t->work = malloc((size_t)t->lwork * sizeof *t->work);
        t->iwork = malloc((size_t)t->liwork * sizeof *t->iwork);
        t->td = malloc(9 * (size_t)k * sizeof *t->td);
        if (t->td) {
            t->te = t->td + k, t->tau = t->te + k, t->sd = t->tau + k, t->se = t->sd + k;
            t->xq = t->se + k, t->bq = t->xq + k, t->z = t->bq + k, t->u = t->z + k; /* xq, bq: dormtr's k x 2 */
        }
    }
    if (!t->x || (syevd && (!t->work || !t->iwork || !t->td))) {
        thread_scratch_free(t);
        return -1;
    }
    return 0;
}

/* A's eigen-decomposition into s->Q (row-major) and s->lam with dsyevd:
 * 0, or LAPACK's info. */
static int eig_syevd(thread_scratch *t)
{
#ifdef DK_CPU_LAPACKE
    dk_letkf_scratch *s = &t->s;
    const int k = s->k;
    /* A is symmetric, so its row-major storage is also its column-major one;
     * the eigenvectors come back in A's columns (column-major) */
    lapack_int info = LAPACKE_dsyevd_work(LAPACK_COL_MAJOR, 'V', 'L', k, s->A, k, s->lam, t->work, t->lwork,
                                          t->iwork, t->liwork);
    if (info != 0)
        return (int)info;
    for (int l = 0; l < k; l++)
        for (int e = 0; e < k; e++)
            s->Q[(size_t)l * k + e] = s->A[(size_t)e * k + l];
    return 0;
#else
    (void)t;
    return -1;
#endif
}

/* z = (T + shift)^-1 rhs for T's diagonal t->td and subdiagonal t->te
 * (dsytrd's), positive definite for shift > 0: 0 or dptsv's info. */
static int shifted_solve(thread_scratch *t, int k, double shift, const double *rhs)
{
#ifdef DK_CPU_LAPACKE
    for (int l = 0; l < k; l++)
        t->sd[l] = t->td[l] + shift, t->z[l] = rhs[l];
    memcpy(t->se, t->te, (size_t)(k - 1) * sizeof(double));
    return (int)LAPACKE_dptsv_work(LAPACK_COL_MAJOR, k, 1, t->sd, t->se, t->z, k);
#else
    (void)t, (void)k, (void)shift, (void)rhs;
    return -1;
#endif
}

/* The analysis of the point whose system dk_letkf_point_system left in
 * t->s (A destroyed), without eigenvectors (the variant solves, above):
 * its k values into xa and its spread into *spread, or *beyond = 1 where T
 * reaches beyond the approximation's interval or is not finite (the caller
 * takes dsyevd). Returns 0 or LAPACK's info. */
static int point_solves(const letkf_plan *plan, thread_scratch *t, double xm, double *xa, double *spread, int *beyond)
{
    *beyond = 0;
#ifdef DK_CPU_LAPACKE
    dk_letkf_scratch *s = &t->s;
    const int k = s->k;
    const double g = (double)(k - 1) / plan->su->desc.inflation;
    /* A is symmetric: its row-major storage is its column-major one */
    lapack_int info = LAPACKE_dsytrd_work(LAPACK_COL_MAJOR, 'L', k, s->A, k, t->td, t->te, t->tau, t->work, t->lwork);
    if (info != 0)
        return (int)info;
    /* x and b side by side (column-major k x 2), into Q's basis */
    memcpy(t->xq, s->x, (size_t)k * sizeof(double));
    memcpy(t->xq + k, s->b, (size_t)k * sizeof(double));
    info = LAPACKE_dormtr_work(LAPACK_COL_MAJOR, 'L', 'L', 'T', k, 2, s->A, k, t->tau, t->xq, k, t->work, t->lwork);
    if (info != 0)
        return (int)info;
    double gersh = 0.0, total = 0.0;
    for (int l = 0; l < k; l++) {
        const double el = l + 1 < k ? fabs(t->te[l]) : 0.0, ep = l > 0 ? fabs(t->te[l - 1]) : 0.0;
        gersh = fmax(gersh, fabs(t->td[l]) + el + ep);
        total += t->td[l] + el + t->xq[l] + t->bq[l];
    }
    if (!(1.0 + gersh / g <= DK_LETKF_KAPPA) || !isfinite(total)) {
        *beyond = 1;
        return 0;
    }
    /* the mean: x . (g + A)^-1 b = (Q^T x) . (g + T)^-1 (Q^T b) */
    if ((info = shifted_solve(t, k, g, t->bq)) != 0)
        return (int)info;
    double xam = xm;
    for (int l = 0; l < k; l++)
        xam += t->xq[l] * t->z[l];
    /* the perturbations: sqrt((k - 1) / (g + T)) Q^T x as the weighted shifted solves */
    for (int l = 0; l < k; l++)
        t->u[l] = plan->scale * t->xq[l];
    for (int p = 0; p < DK_LETKF_POLES; p++) {
        if ((info = shifted_solve(t, k, plan->shift[p], t->xq)) != 0)
            return (int)info;
        for (int l = 0; l < k; l++)
            t->u[l] += plan->weight[p] * t->z[l];
    }
    info = LAPACKE_dormtr_work(LAPACK_COL_MAJOR, 'L', 'L', 'N', k, 1, s->A, k, t->tau, t->u, k, t->work, t->lwork);
    if (info != 0)
        return (int)info;
    const double rtpp = plan->su->desc.rtpp;
    if (rtpp > 0.0)
        for (int l = 0; l < k; l++)
            t->u[l] = (1.0 - rtpp) * t->u[l] + rtpp * s->x[l];
    *spread = dk_letkf_point_tail(plan->su, s, xam, t->u, xa);
    return 0;
#else
    (void)plan, (void)t, (void)xm, (void)xa, (void)spread;
    *beyond = 1;
    return 0;
#endif
}

/* The observation space in sorted order: perturbations, departures, 1 / r. */
static void obs_rows(letkf_plan *plan, const void *yb, const void *obs)
{
    const dk_letkf_setup *su = plan->su;
    const size_t k = su->desc.members, m = su->desc.m;
    const double *yo = obs, *r = (const double *)obs + m;
#pragma omp parallel for schedule(static)
    for (long j = 0; j < (long)m; j++)
        dk_letkf_obs_row(su, yb, yo, r, (size_t)j, plan->yp + (size_t)j * k, plan->dep + j, plan->rinv + j);
}

/* The points' loop's outcome: 0 fine, 1 out of memory, 2 LAPACK failed
 * (its info at failed_point). */
static dk_status points_status(int failure, int lapack_info, size_t k, long failed_point, dk_msg *msg)
{
    if (failure == 1) {
        dk_msg_set(msg, "cpu letkf: out of host memory for a thread's scratch");
        return DK_ERR_OUT_OF_MEMORY;
    }
    if (failure == 2) {
        dk_msg_set(msg, "cpu letkf: LAPACK failed (info %d) on the %zu x %zu matrix of grid point %ld",
                   lapack_info, k, k, failed_point);
        return DK_ERR_BACKEND;
    }
    return DK_OK;
}

static dk_status letkf_analysis(void *p, const void *xb, const void *yb, const void *obs, void *xa, void *nobs,
                                void *spread, dk_msg *msg)
{
    letkf_plan *plan = p;
    const dk_letkf_setup *su = plan->su;
    const dk_letkf_desc *d = &su->desc;
    const size_t k = d->members, m = d->m;
    const int f32 = d->dtype == DK_F32;

    obs_rows(plan, yb, obs);

    /* 0 fine, 1 out of memory, 2 an eigensolver failed (at failed_point) */
    int failure = 0, lapack_info = 0;
    long failed_point = -1;
    const long n = (long)d->n;
#pragma omp parallel
    {
        thread_scratch t;
        int mine = thread_scratch_make(&t, (int)k, m < 1024 ? m : 1024, plan->syevd) ? 1 : 0;
        if (mine) {
#pragma omp atomic write
            failure = 1;
        }
#pragma omp for schedule(dynamic, POINTS_PER_CHUNK)
        for (long i = 0; i < n; i++) {
            int stop;
#pragma omp atomic read
            stop = failure;
            if (stop)
                continue;
            long nsel = dk_letkf_select_grown(su, plan->pos + (size_t)i * DK_LETKF_POS, &t.s);
            if (nsel < 0) {
#pragma omp atomic write
                failure = 1;
                continue;
            }
            const size_t row = (size_t)i * k;
            for (size_t l = 0; l < k; l++)
                t.x[l] = f32 ? (double)((const float *)xb)[row + l] : ((const double *)xb)[row + l];
            double sd;
            int solved = 0;
            if (plan->solves) {
                double xm = dk_letkf_point_system(&t.s, nsel, plan->yp, plan->dep, plan->rinv, t.x);
                int beyond;
                int info = point_solves(plan, &t, xm, t.x, &sd, &beyond);
                if (info != 0) {
#pragma omp critical(dk_cpu_letkf_failure)
                    {
                        failure = 2;
                        failed_point = i;
                        lapack_info = info;
                    }
                    continue;
                }
                solved = !beyond;
            }
            if (solved) {
                /* done */
            } else if (plan->syevd) {
                /* (solves: A was reduced in place; its point beyond the approximation forms it again) */
                double xm = dk_letkf_point_system(&t.s, nsel, plan->yp, plan->dep, plan->rinv, t.x);
                int info = eig_syevd(&t);
                if (info) {
#pragma omp critical(dk_cpu_letkf_failure)
                    {
                        failure = 2;
                        failed_point = i;
                        lapack_info = info;
                    }
                    continue;
                }
                sd = dk_letkf_point_finish(su, &t.s, xm, t.x);
            } else {
                sd = dk_letkf_point(su, &t.s, nsel, plan->yp, plan->dep, plan->rinv, t.x, t.x);
            }
            for (size_t l = 0; l < k; l++) {
                if (f32)
                    ((float *)xa)[row + l] = (float)t.x[l];
                else
                    ((double *)xa)[row + l] = t.x[l];
            }
            if (nobs)
                ((int32_t *)nobs)[i] = (int32_t)nsel;
            if (spread)
                ((double *)spread)[i] = sd;
        }
        thread_scratch_free(&t);
    }
    return points_status(failure, lapack_info, k, failed_point, msg);
}

/* Weight interpolation: each point's transform from the same one-point
 * system and eigensolver as the analysis (the background does not enter). */
static dk_status letkf_transforms(void *p, const void *yb, const void *obs, void *T, dk_msg *msg)
{
    letkf_plan *plan = p;
    const dk_letkf_setup *su = plan->su;
    const dk_letkf_desc *d = &su->desc;
    const size_t k = d->members, kk = k * k, m = d->m;
    obs_rows(plan, yb, obs);

    int failure = 0, lapack_info = 0;
    long failed_point = -1;
    const long n = (long)d->n;
#pragma omp parallel
    {
        thread_scratch t;
        int mine = thread_scratch_make(&t, (int)k, m < 1024 ? m : 1024, plan->syevd) ? 1 : 0;
        if (mine) {
#pragma omp atomic write
            failure = 1;
        } else {
            for (size_t l = 0; l < k; l++)
                t.x[l] = 0.0;
        }
#pragma omp for schedule(dynamic, POINTS_PER_CHUNK)
        for (long i = 0; i < n; i++) {
            int stop;
#pragma omp atomic read
            stop = failure;
            if (stop)
                continue;
            long nsel = dk_letkf_select_grown(su, plan->pos + (size_t)i * DK_LETKF_POS, &t.s);
            if (nsel < 0) {
#pragma omp atomic write
                failure = 1;
                continue;
            }
            dk_letkf_point_system(&t.s, nsel, plan->yp, plan->dep, plan->rinv, t.x);
            if (plan->syevd) {
                int info = eig_syevd(&t);
                if (info) {
#pragma omp critical(dk_cpu_letkf_failure)
                    {
                        failure = 2;
                        failed_point = i;
                        lapack_info = info;
                    }
                    continue;
                }
            } else {
                dk_letkf_jacobi((int)k, t.s.A, t.s.Q, t.s.lam);
            }
            dk_letkf_point_weights(su, &t.s);
            dk_letkf_point_transform(&t.s, (double *)T + (size_t)i * kk);
        }
        thread_scratch_free(&t);
    }
    return points_status(failure, lapack_info, k, failed_point, msg);
}

static dk_status letkf_apply_transforms(void *p, size_t n, const void *xb, const void *T, const void *indptr,
                                        const void *indices, const void *values, void *xa, void *spread, dk_msg *msg)
{
    letkf_plan *plan = p;
    const dk_letkf_desc *d = &plan->su->desc;
    const size_t k = d->members, kk = k * k;
    const int f32 = d->dtype == DK_F32;
    const int64_t *ip = indptr, *ix = indices;
    const double *cv = values, *Ts = T;
    int failure = 0;
#pragma omp parallel
    {
        double *Ti = malloc(kk * sizeof *Ti), *x = malloc(k * sizeof *x);
        if (!Ti || !x) {
#pragma omp atomic write
            failure = 1;
        }
#pragma omp for schedule(static)
        for (long i = 0; i < (long)n; i++) {
            if (!Ti || !x)
                continue;
            memset(Ti, 0, kk * sizeof *Ti);
            for (int64_t e = ip[i]; e < ip[i + 1]; e++)
                for (size_t q = 0; q < kk; q++)
                    Ti[q] += cv[e] * Ts[(size_t)ix[e] * kk + q];
            const size_t row = (size_t)i * k;
            for (size_t l = 0; l < k; l++)
                x[l] = f32 ? (double)((const float *)xb)[row + l] : ((const double *)xb)[row + l];
            double sd = dk_letkf_apply_transform((int)k, d->rtps, x, Ti, x);
            for (size_t l = 0; l < k; l++) {
                if (f32)
                    ((float *)xa)[row + l] = (float)x[l];
                else
                    ((double *)xa)[row + l] = x[l];
            }
            if (spread)
                ((double *)spread)[i] = sd;
        }
        free(Ti), free(x);
    }
    if (failure) {
        dk_msg_set(msg, "cpu letkf: out of host memory for a thread's %zu x %zu transform", k, k);
        return DK_ERR_OUT_OF_MEMORY;
    }
    return DK_OK;
}

const dk_letkf_ops dk_cpu_letkf_ops = {
    .variants = letkf_variants,
    .plan_create = letkf_plan_create,
    .analysis = letkf_analysis,
    .plan_destroy = letkf_plan_destroy,
    .transforms = letkf_transforms,
    .apply_transforms = letkf_apply_transforms,
};
