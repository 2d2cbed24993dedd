/* The enkf conformance cases, and how each is checked.
 *
 * cov cases: error = max |PHT - ref| over max_ij S_ij, and the same for
 * HPHT, where S_ij = 1/(L-1) sum_t |C[i,k_t]| sum_l |e_il e_kl| |H_t| is
 * the sum of the magnitudes of every term the definition adds. A sum of n
 * terms evaluated in another order differs by at most (n-1) eps sum|terms|
 * (Higham, Accuracy and Stability, ch. 4); n <= L * (nonzeros of a row)
 * <= 2e4 here, but errors add like a random walk in practice, so the
 * tolerance is 64 eps of the scale (float64 1.4e-14, float32 3.8e-6):
 * reordering passes it, a wrong or dropped term (|term| > 1e-3 S) does not.
 * The fft scheme rounds in the transforms: error ~ eps log2(P) ||c|| ||v||,
 * allowed 64 eps log2(P) of the scale.
 * The lowrank scheme replaces C by Q T Q^T with ||C - QTQ^T||_2 <= d ||C||_2
 * (d = DK_LOWRANK_TOL = 1e-12, probability 1 - 1e-10), so PHT[i,m] may
 * differ from the definition by d ||C||_2 1/(L-1) sum_l |e_il|
 * ||e_l o h_m||_2 (and HPHT by H times that); with ||C||_2 <= ||C||_inf,
 * the largest row sum of |C|, that bound over the scale is added to the fft
 * allowance (Q comes from FFT applications of C). Cases marked lowrank 1
 * must be accepted by that variant, -1 refused with the sentence that
 * names variant "fft"; elsewhere a refusal is not a failure (C may be of
 * too high a rank), an acceptance must meet the bound.
 *
 * analysis cases: error = max |Xa - ref| / max |Xa_ref - X|, the update's
 * size; the M x M solve amplifies rounding by cond(HPHT + R) <= 1 +
 * max HPHT / min r, so the tolerance is 256 eps cond. The perturbations are
 * drawn once on the host (dk_enkf_perturbations), so a backend that used
 * other numbers would be off by O(1). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/kit/enkf/lowrank.h>

#include "cli/cli.h"
#include "harness/conform.h"

typedef struct enkf_case {
    const char *name;
    dk_dtype dtype;
    int ndim;
    size_t n, nx, ny;
    size_t L, M;
    double density;
    double radius;  /* 0: full-support Gaussian with length scale `scale`; else Gaspari-Cohn half-width */
    double scale;
    int analysis;
    int quick;
    int lowrank; /* for variant lowrank: 1 accepted, -1 refused, 0 either */
} enkf_case;

#define F64 DK_F64
#define F32 DK_F32

static enkf_case cases[] = {
    /* name                 dtype nd  n     nx  ny   L   M   dens  radius scale an quick */
    {"1d_full_small",       F64, 1, 300,   0,  0,   5,  7,  0.2,  0,   40,  0, 1, 0},
    {"1d_full_seedlike",    F64, 1, 2500,  0,  0,   10, 32, 0.05, 0,   200, 0, 1, 0},
    {"1d_compact",          F64, 1, 4000,  0,  0,   10, 32, 0.05, 20,  0,   0, 1, 0},
    {"1d_compact_sparse",   F64, 1, 20000, 0,  0,   8,  16, 0.002, 50, 0,   0, 1, 0},
    {"1d_dense_H",          F64, 1, 500,   0,  0,   4,  5,  1.0,  0,   30,  0, 1, 0},
    {"1d_L2_M1",            F64, 1, 1000,  0,  0,   2,  1,  0.1,  10,  0,   0, 1, 0},
    {"1d_f32_full",         F32, 1, 2000,  0,  0,   10, 20, 0.05, 0,   100, 0, 1, 0},
    {"1d_f32_compact",      F32, 1, 3000,  0,  0,   12, 16, 0.05, 30,  0,   0, 1, 0},
    {"2d_full",             F64, 2, 0,     40, 50,  6,  12, 0.05, 0,   8,   0, 1, 0},
    {"2d_compact",          F64, 2, 0,     60, 70,  8,  16, 0.03, 4,   0,   0, 1, 0},
    {"2d_tall",             F64, 2, 0,     300, 7,  5,  9,  0.05, 3,   0,   0, 1, 0},
    {"2d_f32",              F32, 2, 0,     33, 64,  10, 10, 0.05, 0,   6,   0, 1, 0},
    {"M_large",             F64, 1, 600,   0,  0,   6,  1500, 0.004, 0, 60, 0, 0, 0},
    {"analysis_1d",         F64, 1, 800,   0,  0,   20, 40, 0.02, 15,  0,   1, 1, 0},
    {"analysis_2d",         F64, 2, 0,     30, 30,  12, 25, 0.01, 0,   5,   1, 1, 0},
    {"analysis_f32",        F32, 1, 500,   0,  0,   10, 20, 0.02, 0,   50,  1, 1, 0},
    /* smooth full-support C for the lowrank scheme, and a white C (radius
     * 0.4: c = 1, 0, 0, ...; C = I, of full rank) it must refuse */
    {"lowrank_1d",          F64, 1, 3000,  0,  0,   10, 24, 0.05, 0,   300, 0, 1, 1},
    {"lowrank_1d_f32",      F32, 1, 2000,  0,  0,   8,  16, 0.05, 0,   250, 0, 1, 1},
    {"lowrank_2d",          F64, 2, 0,     40, 60,  10, 16, 0.05, 0,   20,  0, 1, 1},
    {"lowrank_2d_f32",      F32, 2, 0,     30, 50,  6,  12, 0.05, 0,   15,  0, 1, 1},
    {"lowrank_analysis",    F64, 1, 1500,  0,  0,   12, 20, 0.02, 0,   200, 1, 1, 1},
    {"lowrank_refused",     F64, 1, 5000,  0,  0,   6,  8,  0.01, 0.4, 0,   0, 1, -1},
    [22 ... 29] = {NULL, F64, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0},
};

#define NCASES ((int)(sizeof cases / sizeof cases[0]))
#define FIRST_RANDOM 22

static void draw_random_cases(void)
{
    static char names[NCASES][24];
    uint64_t st = 0xe4f5eedull;
    for (int i = FIRST_RANDOM; i < NCASES; i++) {
        enkf_case *c = &cases[i];
        double u = (cli_random(&st) + 1) / 2;
        snprintf(names[i], sizeof names[i], "random_%02d", i - FIRST_RANDOM);
        c->name = names[i];
        c->dtype = cli_random(&st) < 0 ? F32 : F64;
        c->ndim = cli_random(&st) < 0 ? 1 : 2;
        c->L = 2 + (size_t)(u * 20);
        c->M = 1 + (size_t)((cli_random(&st) + 1) / 2 * 40);
        c->density = 0.002 * pow(100.0, (cli_random(&st) + 1) / 2);
        if (c->ndim == 1) {
            c->n = 50 + (size_t)((cli_random(&st) + 1) / 2 * 3000);
        } else {
            c->nx = 5 + (size_t)((cli_random(&st) + 1) / 2 * 60);
            c->ny = 5 + (size_t)((cli_random(&st) + 1) / 2 * 60);
        }
        size_t n = c->ndim == 1 ? c->n : c->nx;
        if (cli_random(&st) < 0) {
            c->radius = 1 + (cli_random(&st) + 1) / 2 * (double)n / 4;
            c->scale = 0;
        } else {
            c->radius = 0;
            c->scale = 1 + (cli_random(&st) + 1) / 2 * (double)n / 3;
        }
        c->analysis = cli_random(&st) < -0.5;
    }
}

typedef struct prepared_case {
    dk_enkf_desc desc;
    double *loc, *values;
    int64_t *indptr, *indices;
    void *e, *pht_ref, *hpht_ref, *x_ref;
    double *y, *r;
    double scale, hscale, update;
    double low_pht, low_hpht; /* the lowrank scheme's bound over scale, hscale */
} prepared_case;

static prepared_case prepared[NCASES];

static int enkf_count(void)
{
    if (!cases[FIRST_RANDOM].name)
        draw_random_cases();
    return NCASES;
}
static const char *enkf_name(int i) { return cases[i].name; }
static int enkf_quick(int i) { return cases[i].quick; }

static double gc(double d, double c)
{
    double r = d / c;
    if (r <= 1)
        return (((-0.25 * r + 0.5) * r + 0.625) * r - 5.0 / 3.0) * r * r + 1.0;
    if (r < 2)
        return ((((r / 12.0 - 0.5) * r + 0.625) * r + 5.0 / 3.0) * r - 5.0) * r + 4.0 - 2.0 / (3.0 * r);
    return 0.0;
}

static double loc_value(const enkf_case *c, double d)
{
    return c->radius > 0 ? gc(d, c->radius) : exp(-0.5 * (d / c->scale) * (d / c->scale));
}

static double get(const void *p, dk_dtype t, size_t k)
{
    return t == DK_F32 ? (double)((const float *)p)[k] : ((const double *)p)[k];
}

/* The lowrank scheme's bound (see the top) over the scales: d ||C||_inf
 * max 1/(L-1) sum_l |e_il| ||e_l o h_m||_2, and H times it for HPHT. */
static void lowrank_bound(prepared_case *p)
{
    const dk_enkf_desc *d = &p->desc;
    size_t N = d->n, L = d->members, M = d->H.rows;
    dk_enkf_setup s = {.desc = *d, .loc = p->loc};
    double cnorm = 0;
    if (d->loc_ndim == 1) {
        /* row i of |C| sums |c| over distances 0..i and 1..N-1-i */
        double *pre = malloc(N * sizeof *pre);
        for (size_t k = 0; k < N; k++)
            pre[k] = fabs(p->loc[k]) + (k ? pre[k - 1] : 0);
        for (size_t i = 0; i < N; i++)
            cnorm = fmax(cnorm, pre[i] + pre[N - 1 - i] - fabs(p->loc[0]));
        free(pre);
    } else {
        for (size_t i = 0; i < N; i++) {
            double row = 0;
            for (size_t k = 0; k < N; k++)
                row += fabs(dk_enkf_c(&s, i, k));
            cnorm = fmax(cnorm, row);
        }
    }
    double *h = calloc(N, sizeof *h), *norms = calloc(M * L, sizeof *norms), *B = calloc(N * M, sizeof *B);
    for (size_t m = 0; m < M; m++) {
        for (int64_t t = p->indptr[m]; t < p->indptr[m + 1]; t++)
            h[p->indices[t]] += p->values[t];
        for (int64_t t = p->indptr[m]; t < p->indptr[m + 1]; t++) {
            size_t k = (size_t)p->indices[t];
            for (size_t l = 0; l < L && h[k] != 0; l++) {
                double v = get(p->e, d->dtype, k * L + l) * h[k];
                norms[m * L + l] += v * v;
            }
            h[k] = 0; /* a repeated column counts once, with its summed value */
        }
    }
    double bmax = 0, hmax = 0;
    for (size_t i = 0; i < N; i++)
        for (size_t m = 0; m < M; m++) {
            double sum = 0;
            for (size_t l = 0; l < L; l++)
                sum += fabs(get(p->e, d->dtype, i * L + l)) * sqrt(norms[m * L + l]);
            B[i * M + m] = sum / (double)(L - 1);
            bmax = fmax(bmax, B[i * M + m]);
        }
    for (size_t a = 0; a < M; a++)
        for (size_t m = 0; m < M; m++) {
            double sum = 0;
            for (int64_t t = p->indptr[a]; t < p->indptr[a + 1]; t++)
                sum += fabs(p->values[t]) * B[(size_t)p->indices[t] * M + m];
            hmax = fmax(hmax, sum);
        }
    free(h), free(norms), free(B);
    p->low_pht = DK_LOWRANK_TOL * cnorm * bmax / p->scale;
    p->low_hpht = DK_LOWRANK_TOL * cnorm * hmax / p->hscale;
}

/* S_ij's maximum over the matrix (see the top). */
static void scales(prepared_case *p)
{
    const dk_enkf_desc *d = &p->desc;
    size_t N = d->n, L = d->members, M = d->H.rows;
    double smax = 0, hmax = 0;
    double *S = calloc(N * M, sizeof *S);
    dk_enkf_setup s = {.desc = *d, .loc = p->loc};
    for (size_t i = 0; i < N; i++)
        for (size_t j = 0; j < M; j++) {
            double sum = 0;
            for (int64_t t = p->indptr[j]; t < p->indptr[j + 1]; t++) {
                size_t k = (size_t)p->indices[t];
                double dot = 0;
                for (size_t l = 0; l < L; l++)
                    dot += fabs(get(p->e, d->dtype, i * L + l) * get(p->e, d->dtype, k * L + l));
                sum += fabs(dk_enkf_c(&s, i, k)) * dot * fabs(p->values[t]);
            }
            S[i * M + j] = sum / (double)(L - 1);
            smax = fmax(smax, S[i * M + j]);
        }
    for (size_t a = 0; a < M; a++)
        for (size_t j = 0; j < M; j++) {
            double sum = 0;
            for (int64_t t = p->indptr[a]; t < p->indptr[a + 1]; t++)
                sum += fabs(p->values[t]) * S[(size_t)p->indices[t] * M + j];
            hmax = fmax(hmax, sum);
        }
    free(S);
    p->scale = smax > 0 ? smax : 1;
    p->hscale = hmax > 0 ? hmax : 1;
    lowrank_bound(p);
}

static dk_status enkf_prepare(int i, char *err, size_t len)
{
    const enkf_case *c = &cases[i];
    prepared_case *p = &prepared[i];
    memset(p, 0, sizeof *p);
    size_t N = c->ndim == 1 ? c->n : c->nx * c->ny, L = c->L, M = c->M, w = dk_dtype_size(c->dtype);
    size_t loc_count = N;
    uint64_t st = 0xabcd0000ull + (uint64_t)i;
    p->loc = malloc(loc_count * sizeof *p->loc);
    if (c->ndim == 1)
        for (size_t k = 0; k < N; k++)
            p->loc[k] = loc_value(c, (double)k);
    else
        for (size_t a = 0; a < c->nx; a++)
            for (size_t b = 0; b < c->ny; b++)
                p->loc[a * c->ny + b] = loc_value(c, sqrt((double)(a * a + b * b)));
    /* H: each row draws ~density*N columns at random (repeats allowed and
     * kept, as scipy would sum them); every fifth row is empty */
    size_t want = (size_t)(c->density * (double)N + 0.5);
    if (want < 1)
        want = 1;
    p->indptr = malloc((M + 1) * sizeof *p->indptr);
    p->indices = malloc((M * want + 1) * sizeof *p->indices);
    p->values = malloc((M * want + 1) * sizeof *p->values);
    size_t nnz = 0;
    p->indptr[0] = 0;
    for (size_t j = 0; j < M; j++) {
        if (j % 5 != 4 || M == 1)
            for (size_t t = 0; t < want; t++) {
                size_t k = (size_t)((cli_random(&st) + 1) / 2 * (double)N) % N;
                if (t == 1)
                    k = (size_t)p->indices[nnz - 1]; /* a repeated column */
                p->indices[nnz] = (int64_t)k;
                p->values[nnz] = 0.5 + (cli_random(&st) + 1) / 4;
                nnz++;
            }
        p->indptr[j + 1] = (int64_t)nnz;
    }
    dk_enkf_desc *d = &p->desc;
    dk_enkf_desc_init(d);
    d->dtype = c->dtype;
    d->n = N;
    d->members = L;
    d->loc_ndim = c->ndim;
    d->nx = c->nx;
    d->ny = c->ny;
    d->loc = p->loc;
    d->H = (dk_csr){M, N, p->indptr, p->indices, p->values};
    p->e = malloc(N * L * w);
    cli_fill_random(p->e, c->dtype, N * L, 0xe0000000ull + (uint64_t)i);
    p->pht_ref = malloc(N * M * w);
    p->hpht_ref = malloc(M * M * w);
    dk_status rc = dk_enkf_cov_reference(d, p->e, p->pht_ref, p->hpht_ref);
    if (rc != DK_OK) {
        snprintf(err, len, "%s", dk_last_error(NULL));
        return rc;
    }
    scales(p);
    if (c->analysis) {
        p->y = malloc(M * sizeof *p->y);
        p->r = malloc(M * sizeof *p->r);
        for (size_t j = 0; j < M; j++) {
            p->y[j] = 2 * cli_random(&st);
            p->r[j] = 0.5 + (cli_random(&st) + 1) / 2;
        }
        p->x_ref = malloc(N * L * w);
        memcpy(p->x_ref, p->e, N * L * w);
        if ((rc = dk_enkf_analysis_reference(d, p->x_ref, p->y, p->r, 7, 1.1)) != DK_OK) {
            snprintf(err, len, "%s", dk_last_error(NULL));
            return rc;
        }
        double upd = 0;
        for (size_t k = 0; k < N * L; k++)
            upd = fmax(upd, fabs(get(p->x_ref, c->dtype, k) - get(p->e, c->dtype, k)));
        p->update = upd > 0 ? upd : 1;
    }
    return DK_OK;
}

static void enkf_release(int i)
{
    prepared_case *p = &prepared[i];
    free(p->loc), free(p->values), free(p->indptr), free(p->indices);
    free(p->e), free(p->pht_ref), free(p->hpht_ref), free(p->x_ref), free(p->y), free(p->r);
    memset(p, 0, sizeof *p);
}

static double max_diff(const void *a, const void *b, dk_dtype t, size_t n, size_t *worst)
{
    double m = 0;
    for (size_t k = 0; k < n; k++) {
        double diff = fabs(get(a, t, k) - get(b, t, k));
        if (!(diff <= m)) {
            m = isnan(diff) ? INFINITY : diff;
            *worst = k;
        }
    }
    return m;
}

static void enkf_run(dk_context *ctx, const char *variant, int i, conform_result *r)
{
    const enkf_case *c = &cases[i];
    prepared_case *p = &prepared[i];
    dk_enkf_desc d = p->desc;
    size_t N = d.n, L = d.members, M = d.H.rows, w = dk_dtype_size(c->dtype);
    d.variant = variant;
    double eps = c->dtype == DK_F64 ? 0x1p-53 : 0x1p-24;
    r->error = INFINITY;
    r->passed = 0;
    dk_plan *plan = NULL;
    void *out = malloc(N * (M > L ? M : L) * w), *hout = malloc(M * M * w);
    int low = variant && !strncmp(variant, "lowrank", 7);
    dk_status st = dk_enkf_plan_create(ctx, &d, &plan);
    if (st != DK_OK) {
        const char *why = dk_last_error(ctx);
        snprintf(r->detail, sizeof r->detail, "%s", why);
        int refused = low && st == DK_ERR_NOT_IMPLEMENTED && strstr(why, "not numerically low-rank") &&
                      strstr(why, "variant \"fft\"");
        if (refused && c->lowrank == -1) {
            r->error = r->tolerance = 0;
            r->passed = 1;
        } else if (refused && c->lowrank == 0)
            r->not_implemented = 1;
        goto done;
    }
    if (low && c->lowrank == -1) {
        snprintf(r->detail, sizeof r->detail, "a plan for a C of full rank (white c) was accepted");
        goto done;
    }
    double P = c->ndim == 1 ? 2.0 * (double)N : 4.0 * (double)N;
    int transformed = !strncmp(dk_enkf_plan_variant(plan), "fft", 3) || low;
    double fft_factor = transformed ? log2(P) : 1.0;
    size_t worst = 0;
    if (c->analysis) {
        double cond = 1;
        for (size_t a = 0; a < M; a++)
            cond = fmax(cond, 1 + fabs(get(p->hpht_ref, c->dtype, a * M + a)) * 1.21 / 0.5);
        /* float32 data also round the update's inputs: the spread of the
         * result is then eps32 of the state, not of the update */
        r->tolerance = 256 * eps * cond * fft_factor;
        /* lowrank: PHT's and HPHT's relative bounds, amplified by the
         * solve as any relative perturbation of its data is */
        if (low)
            r->tolerance += cond * fmax(p->low_pht, p->low_hpht);
        memcpy(out, p->e, N * L * w);
        if (dk_enkf_analysis_host(plan, out, p->y, p->r, 7, 1.1) != DK_OK) {
            snprintf(r->detail, sizeof r->detail, "%s", dk_last_error(ctx));
            goto done;
        }
        r->error = max_diff(out, p->x_ref, c->dtype, N * L, &worst) / p->update;
        if (c->dtype == DK_F32)
            r->error = r->error * p->update / fmax(p->update, 1.0);
        if (r->error > r->tolerance)
            snprintf(r->detail, sizeof r->detail, "worst at X[%zu]: %.9g vs reference %.9g", worst,
                     get(out, c->dtype, worst), get(p->x_ref, c->dtype, worst));
    } else {
        r->tolerance = 64 * eps * fft_factor + (low ? fmax(p->low_pht, p->low_hpht) : 0);
        memset(out, 0xff, N * M * w);
        memset(hout, 0xff, M * M * w);
        if (dk_enkf_cov_host(plan, p->e, out, hout) != DK_OK) {
            snprintf(r->detail, sizeof r->detail, "%s", dk_last_error(ctx));
            goto done;
        }
        size_t hworst = 0;
        double e1 = max_diff(out, p->pht_ref, c->dtype, N * M, &worst) / p->scale;
        double e2 = max_diff(hout, p->hpht_ref, c->dtype, M * M, &hworst) / p->hscale;
        r->error = fmax(e1, e2);
        if (r->error > r->tolerance)
            snprintf(r->detail, sizeof r->detail, "%s worst at [%zu,%zu]: %.9g vs reference %.9g",
                     e1 >= e2 ? "PHT" : "HPHT", (e1 >= e2 ? worst : hworst) / M, (e1 >= e2 ? worst : hworst) % M,
                     e1 >= e2 ? get(out, c->dtype, worst) : get(hout, c->dtype, hworst),
                     e1 >= e2 ? get(p->pht_ref, c->dtype, worst) : get(p->hpht_ref, c->dtype, hworst));
    }
    r->passed = r->error <= r->tolerance;
    if (r->passed)
        snprintf(r->detail, sizeof r->detail, "variant %s", dk_enkf_plan_variant(plan));
done:
    free(out);
    free(hout);
    dk_plan_destroy(plan);
}

#ifdef DK_TOOLS_MPI
#include <dakit/mpi.h>

/* Slabs of state rows (of grid rows along nx for a 2-D c): each rank's
 * points are consecutive rows of E, PHT and X. The tolerances are enkf_run's. */
static int enkf_run_ranks(dk_context *ctx, const char *variant, int i, conform_result *r)
{
    const enkf_case *c = &cases[i];
    prepared_case *p = &prepared[i];
    dk_enkf_desc d = p->desc;
    size_t N = d.n, L = d.members, M = d.H.rows, w = dk_dtype_size(c->dtype);
    d.variant = variant;
    double eps = c->dtype == DK_F64 ? 0x1p-53 : 0x1p-24;
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    r->error = INFINITY;
    r->passed = 0;
    r->detail[0] = '\0';
    size_t grid[2] = {c->ndim == 1 ? N : c->nx, c->ny}, row = c->ndim == 1 ? 1 : c->ny;
    dk_mpi_part part;
    dk_mpi_decompose(MPI_COMM_WORLD, c->ndim, grid, NULL, &part);
    size_t first = part.offset[0] * row, points = part.extent[0] * row;
    double P = c->ndim == 1 ? 2.0 * (double)N : 4.0 * (double)N;
    int low = variant && !strncmp(variant, "lowrank", 7);
    double fft_factor = variant && (!strncmp(variant, "fft", 3) || low) ? log2(P) : 1.0;
    char *out = malloc(points * (M > L ? M : L) * w + 1), *hout = malloc(M * M * w + 1);
    dk_mpi_plan *plan = NULL;
    size_t worst = 0;
    if (!out || !hout)
        snprintf(r->detail, sizeof r->detail, "rank %d: out of host memory", rank);
    else if (dk_mpi_enkf_plan_create(ctx, MPI_COMM_WORLD, &d, &part, &plan) != DK_OK) {
        const char *why = dk_mpi_last_error();
        snprintf(r->detail, sizeof r->detail, "%s", why);
        /* lowrank refuses a C that is not low-rank, as in one process */
        if (low && strstr(why, "not numerically low-rank")) {
            free(out);
            free(hout);
            if (c->lowrank == -1) {
                r->error = r->tolerance = 0;
                r->passed = 1;
                conform_ranks_agree(r);
                return 0;
            }
            return 1;
        }
    } else if (c->analysis) {
        double cond = 1;
        for (size_t a = 0; a < M; a++)
            cond = fmax(cond, 1 + fabs(get(p->hpht_ref, c->dtype, a * M + a)) * 1.21 / 0.5);
        r->tolerance = 256 * eps * cond * fft_factor + (low ? cond * fmax(p->low_pht, p->low_hpht) : 0);
        memcpy(out, (char *)p->e + first * L * w, points * L * w);
        if (dk_mpi_enkf_analysis_host(plan, out, p->y, p->r, 7, 1.1) != DK_OK)
            snprintf(r->detail, sizeof r->detail, "%s", dk_mpi_last_error());
        else {
            r->error = max_diff(out, (char *)p->x_ref + first * L * w, c->dtype, points * L, &worst) / p->update;
            if (c->dtype == DK_F32)
                r->error = r->error * p->update / fmax(p->update, 1.0);
            r->passed = r->error <= r->tolerance;
            snprintf(r->detail, sizeof r->detail, "rank %d of %d: X rows %zu to %zu", rank, size, first,
                     first + points);
        }
    } else {
        r->tolerance = 64 * eps * fft_factor + (low ? fmax(p->low_pht, p->low_hpht) : 0);
        memset(out, 0xff, points * M * w);
        memset(hout, 0xff, M * M * w);
        if (dk_mpi_enkf_cov_host(plan, (char *)p->e + first * L * w, out, hout) != DK_OK)
            snprintf(r->detail, sizeof r->detail, "%s", dk_mpi_last_error());
        else {
            size_t hworst = 0;
            double e1 = max_diff(out, (char *)p->pht_ref + first * M * w, c->dtype, points * M, &worst) / p->scale;
            double e2 = max_diff(hout, p->hpht_ref, c->dtype, M * M, &hworst) / p->hscale;
            r->error = fmax(e1, e2);
            r->passed = r->error <= r->tolerance;
            snprintf(r->detail, sizeof r->detail, "rank %d of %d: PHT rows %zu to %zu, %s worst", rank, size, first,
                     first + points, e1 >= e2 ? "PHT" : "HPHT");
        }
    }
    dk_mpi_plan_destroy(plan);
    free(out);
    free(hout);
    conform_ranks_agree(r);
    return 0;
}
#endif

const conform_suite conform_enkf = {
    .algo = "enkf",
    .measure = "max|y-ref|/scale",
    .count = enkf_count,
    .name = enkf_name,
    .quick = enkf_quick,
    .variants = dk_enkf_variants,
    .prepare = enkf_prepare,
    .run = enkf_run,
    .release = enkf_release,
#ifdef DK_TOOLS_MPI
    .run_ranks = enkf_run_ranks,
#endif
};
