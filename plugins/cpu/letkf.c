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
 * reference by the eigensolver's rounding only. */
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#ifdef DK_CPU_LAPACKE
#include <lapacke.h>
#endif

#include <dakit/kit/letkf/analysis_host.h>
#include <dakit/plugin.h>

/* Points handed to a thread at a time: their costs differ (edges, caps),
 * so the schedule is dynamic, in chunks large enough to keep its overhead
 * small. */
#define POINTS_PER_CHUNK 16

typedef struct letkf_plan {
    const dk_letkf_setup *su;
    int syevd;            /* the variant: 1 LAPACK dsyevd, 0 cyclic Jacobi */
    double *pos;          /* n x DK_LETKF_POS: the grid points' positions */
    double *yp, *dep, *rinv; /* m x k, m, m: the observation space in sorted order, per analysis */
} letkf_plan;

#ifdef DK_CPU_LAPACKE
/* dsyevd is the default where built: it is faster than Jacobi from k = 8 on (docs/letkf.md). */
static const char *const letkf_variants[] = {"syevd", "jacobi", NULL};
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
    plan->syevd = !strcmp(d->variant, "syevd");
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

/* One thread's scratch: the kit's, and dsyevd's workspace. */
typedef struct thread_scratch {
    dk_letkf_scratch s;
    double *x;      /* k: the point's background, widened */
    double *work;   /* dsyevd */
    int *iwork;
    int lwork, liwork;
} thread_scratch;

static void thread_scratch_free(thread_scratch *t)
{
    if (t->s.k)
        dk_letkf_scratch_free(&t->s);
    free(t->x), free(t->work), free(t->iwork);
}

/* 0, or -1 when out of memory. */
static int thread_scratch_make(thread_scratch *t, int k, size_t cap, int syevd)
{
    memset(t, 0, sizeof *t);
    if (dk_letkf_scratch_make(&t->s, k, cap))
        return -1;
    t->x = malloc((size_t)k * sizeof *t->x);
    if (syevd) {
        /* dsyevd's minimal workspace for eigenvectors: 1 + 6k + 2k^2 and 3 + 5k */
        t->lwork = 1 + 6 * k + 2 * k * k;
        t->liwork = 3 + 5 * k;
        t->work = malloc((size_t)t->lwork * sizeof *t->work);
        t->iwork = malloc((size_t)t->liwork * sizeof *t->iwork);
    }
    if (!t->x || (syevd && (!t->work || !t->iwork))) {
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

/* The points' loop's outcome: 0 fine, 1 out of memory, 2 an eigensolver
 * failed (LAPACK's info at failed_point). */
static dk_status points_status(int failure, int lapack_info, size_t k, long failed_point, dk_msg *msg)
{
    if (failure == 1) {
        dk_msg_set(msg, "cpu letkf: out of host memory for a thread's scratch");
        return DK_ERR_OUT_OF_MEMORY;
    }
    if (failure == 2) {
        dk_msg_set(msg, "cpu letkf: LAPACK's dsyevd failed (info %d) on the %zu x %zu matrix of grid point %ld",
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
            if (plan->syevd) {
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
