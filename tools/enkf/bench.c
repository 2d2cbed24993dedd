/* The enkf benchmark cases: N = 25,000 with a full-support C, N = 10^6 with
 * a compact-support and with a full-support C, and a CPU-sized case
 * (N = 10^4) to set beside the dense NumPy computation of enkf/bench-numpy.
 * All float64, L = 10 members, M = 32 observations, H density 0.05.
 * For a lowrank variant, setup (not timed) prints how long its plan took
 * (the factorisation of C) and, unless DAKIT_BENCH_ENKF_CHECK=0, how far
 * its PHT and HPHT are from the fft variant's on the same data (the fft
 * scheme is exact to rounding; the dense reference is out of reach at
 * N = 10^6). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "harness/bench.h"

typedef struct enkf_bench_case {
    const char *name, *what;
    size_t n;
    double radius; /* 0: full-support Gaussian, length scale n/10; else compact (triangle of this radius) */
} enkf_bench_case;

static const enkf_bench_case cases[] = {
    {"seed_25k_full", "N 25,000, L 10, M 32, H density 0.05, full-support Gaussian C, f64", 25000, 0},
    {"1e6_compact_r200", "N 10^6, L 10, M 32, H density 0.05, compact C (radius 200 points), f64", 1000000, 200},
    {"1e6_full_fft", "N 10^6, L 10, M 32, H density 0.05, full-support Gaussian C, f64", 1000000, 0},
    {"cpu_1e4_full", "N 10^4, L 10, M 32, H density 0.05, full-support Gaussian C, f64 (beside NumPy dense)", 10000,
     0},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))
#define L_ 10
#define M_ 32
#define DENSITY 0.05

typedef struct state {
    dk_plan *plan;
    dk_buffer *e, *pht, *hpht;
} state;

static int count(void) { return NCASES; }
static const char *name(int i) { return cases[i].name; }
static const char *what(int i) { return cases[i].what; }

/* The floor: e read once, PHT written once, H's nonzeros read once. */
static double bytes(int i)
{
    double n = (double)cases[i].n;
    return 8.0 * (n * L_ + n * M_) + 16.0 * DENSITY * n * M_;
}

static void teardown(void *p)
{
    state *s = p;
    if (!s)
        return;
    dk_plan_destroy(s->plan);
    dk_buffer_destroy(s->e);
    dk_buffer_destroy(s->pht);
    dk_buffer_destroy(s->hpht);
    free(s);
}

/* max |a - b| / max |b| over n values */
static double rel_diff(const double *a, const double *b, size_t n)
{
    double diff = 0, top = 0;
    for (size_t k = 0; k < n; k++) {
        double d = fabs(a[k] - b[k]);
        diff = d > diff || isnan(d) ? d : diff;
        top = fmax(top, fabs(b[k]));
    }
    return top > 0 ? diff / top : diff;
}

/* The lowrank plan's products against the fft variant's on the same e. */
static void check_lowrank(dk_context *ctx, const enkf_bench_case *c, const state *s, dk_enkf_desc d)
{
    size_t N = d.n, M = d.H.rows;
    dk_plan *fft = NULL;
    dk_buffer *pht = NULL, *hpht = NULL;
    double *a = malloc(N * M * sizeof *a), *b = malloc(N * M * sizeof *b), *ha = malloc(M * M * sizeof *ha),
           *hb = malloc(M * M * sizeof *hb);
    d.variant = "fft";
    if (!a || !b || !ha || !hb || dk_enkf_plan_create(ctx, &d, &fft) != DK_OK ||
        dk_buffer_create(ctx, N * M * sizeof(double), &pht) != DK_OK ||
        dk_buffer_create(ctx, M * M * sizeof(double), &hpht) != DK_OK ||
        dk_enkf_cov(s->plan, s->e, s->pht, s->hpht) != DK_OK || dk_enkf_cov(fft, s->e, pht, hpht) != DK_OK ||
        dk_buffer_read(s->pht, a, N * M * sizeof *a) != DK_OK || dk_buffer_read(pht, b, N * M * sizeof *b) != DK_OK ||
        dk_buffer_read(s->hpht, ha, M * M * sizeof *ha) != DK_OK ||
        dk_buffer_read(hpht, hb, M * M * sizeof *hb) != DK_OK)
        printf("enkf %s on %s/%s: the check against the fft variant could not run: %s\n", c->name,
               dk_context_backend(ctx), dk_enkf_plan_variant(s->plan), dk_last_error(ctx));
    else
        printf("enkf %s on %s/%s: against the fft variant on the same data: max |PHT - PHT_fft| / max |PHT_fft| "
               "%.2e, HPHT %.2e\n",
               c->name, dk_context_backend(ctx), dk_enkf_plan_variant(s->plan), rel_diff(a, b, N * M),
               rel_diff(ha, hb, M * M));
    dk_plan_destroy(fft);
    dk_buffer_destroy(pht);
    dk_buffer_destroy(hpht);
    free(a), free(b), free(ha), free(hb);
}

static void *setup(dk_context *ctx, int i, const char *variant, char *err, size_t len)
{
    const enkf_bench_case *c = &cases[i];
    size_t N = c->n, per_row = (size_t)(DENSITY * (double)N), nnz = per_row * M_;
    state *s = calloc(1, sizeof *s);
    double *loc = malloc(N * sizeof *loc), *values = malloc(nnz * sizeof *values), *e = malloc(N * L_ * sizeof *e);
    int64_t *indptr = malloc((M_ + 1) * sizeof *indptr), *indices = malloc(nnz * sizeof *indices);
    if (!s || !loc || !values || !e || !indptr || !indices) {
        snprintf(err, len, "out of host memory");
        goto fail;
    }
    for (size_t d = 0; d < N; d++) {
        double x = (double)d / ((double)N / 10);
        loc[d] = c->radius > 0 ? fmax(0.0, 1.0 - (double)d / c->radius) : exp(-0.5 * x * x);
    }
    uint64_t st = 0xbe7c4ull + (uint64_t)i;
    for (size_t j = 0; j <= M_; j++)
        indptr[j] = (int64_t)(j * per_row);
    for (size_t t = 0; t < nnz; t++) {
        indices[t] = (int64_t)((size_t)((cli_random(&st) + 1) / 2 * (double)N) % N);
        values[t] = 1.0;
    }
    cli_fill_random(e, DK_F64, N * L_, 0xe1ull + (uint64_t)i);
    dk_enkf_desc d;
    dk_enkf_desc_init(&d);
    d.n = N;
    d.members = L_;
    d.loc = loc;
    d.H = (dk_csr){M_, N, indptr, indices, values};
    d.variant = variant;
    double t0 = cli_now();
    if (dk_enkf_plan_create(ctx, &d, &s->plan) != DK_OK) {
        snprintf(err, len, "%s", dk_last_error(ctx));
        goto fail;
    }
    double plan_seconds = cli_now() - t0;
    if (dk_buffer_create(ctx, N * L_ * sizeof(double), &s->e) != DK_OK ||
        dk_buffer_create(ctx, N * M_ * sizeof(double), &s->pht) != DK_OK ||
        dk_buffer_create(ctx, M_ * M_ * sizeof(double), &s->hpht) != DK_OK ||
        dk_buffer_write(s->e, e, N * L_ * sizeof(double)) != DK_OK) {
        snprintf(err, len, "%s", dk_last_error(ctx));
        goto fail;
    }
    if (!strncmp(dk_enkf_plan_variant(s->plan), "lowrank", 7)) {
        const char *check = getenv("DAKIT_BENCH_ENKF_CHECK");
        printf("enkf %s on %s/%s: plan (the factorisation of C) %.3f s\n", c->name, dk_context_backend(ctx),
               dk_enkf_plan_variant(s->plan), plan_seconds);
        if (!check || strcmp(check, "0"))
            check_lowrank(ctx, c, s, d);
    }
    free(loc), free(values), free(e), free(indptr), free(indices);
    return s;
fail:
    free(loc), free(values), free(e), free(indptr), free(indices);
    teardown(s);
    return NULL;
}

/* DAKIT_BENCH_ENKF_NO_HPHT=1 times PHT alone (HPHT's share of a case). */
static dk_status run(void *p)
{
    state *s = p;
    const char *no_hpht = getenv("DAKIT_BENCH_ENKF_NO_HPHT");
    return dk_enkf_cov(s->plan, s->e, s->pht, no_hpht && *no_hpht && *no_hpht != '0' ? NULL : s->hpht);
}

const bench_suite bench_enkf = {
    .algo = "enkf",
    .count = count,
    .name = name,
    .what = what,
    .bytes = bytes,
    .variants = dk_enkf_variants,
    .setup = setup,
    .run = run,
    .teardown = teardown,
};
