/* The gauss benchmark cases: a 8192 x 8192 field and a line of 10^8 values
 * in exact mode (also in place), and overlap mode at K 500 on a line of 10^5 values cut
 * into 3072 blocks with overlap 5; deriche and vyv on the 8192 x 8192 field
 * (exact, reflect, scipy's default boundary). */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "harness/bench.h"

typedef struct gauss_bench_case {
    const char *name, *what;
    int ndim;
    size_t shape[3];
    unsigned axes;
    double sigma;
    int K;
    dk_gauss_mode mode;
    size_t overlap, blocks;
    dk_gauss_method method;
    dk_boundary boundary;
    int inplace; /* in == out, the loop the README shows */
} gauss_bench_case;

static const gauss_bench_case cases[] = {
    {"2d_8192_exact", "8192x8192 f32, sigma 2, K 4, both axes, exact", 2, {8192, 8192}, 3, 2, 4, DK_GAUSS_EXACT, 0, 0,
     DK_GAUSS_RF, DK_BOUNDARY_ZERO, 0},
    {"1d_1e8_exact", "1e8 f32, sigma 2, K 4, exact", 1, {100000000}, 1, 2, 4, DK_GAUSS_EXACT, 0, 0, DK_GAUSS_RF,
     DK_BOUNDARY_ZERO, 0},
    {"2d_8192_inplace", "as 2d_8192_exact, in place", 2, {8192, 8192}, 3, 2, 4, DK_GAUSS_EXACT, 0, 0, DK_GAUSS_RF,
     DK_BOUNDARY_ZERO, 1},
    {"1d_1e8_inplace", "as 1d_1e8_exact, in place", 1, {100000000}, 1, 2, 4, DK_GAUSS_EXACT, 0, 0, DK_GAUSS_RF,
     DK_BOUNDARY_ZERO, 1},
    {"seed_table2", "1e5 f32, sigma 2, K 500, overlap m=5, 3072 blocks", 1, {100000}, 1, 2, 500, DK_GAUSS_OVERLAP, 5,
     3072, DK_GAUSS_RF, DK_BOUNDARY_ZERO, 0},
    {"2d_8192_deriche", "8192x8192 f32, sigma 2, deriche, both axes, exact, reflect", 2, {8192, 8192}, 3, 2, 4,
     DK_GAUSS_EXACT, 0, 0, DK_GAUSS_DERICHE, DK_BOUNDARY_REFLECT, 0},
    {"2d_8192_vyv", "8192x8192 f32, sigma 2, vyv 5 poles, both axes, exact, reflect", 2, {8192, 8192}, 3, 2, 4,
     DK_GAUSS_EXACT, 0, 0, DK_GAUSS_VYV, DK_BOUNDARY_REFLECT, 0},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

typedef struct state {
    dk_plan *plan;
    dk_buffer *in, *out;
} state;

static int count(void) { return NCASES; }
static const char *name(int i) { return cases[i].name; }
static const char *what(int i) { return cases[i].what; }

static size_t elements(int i)
{
    size_t n = 1;
    for (int a = 0; a < cases[i].ndim; a++)
        n *= cases[i].shape[a];
    return n;
}

static double bytes(int i) { return 2.0 * (double)(elements(i) * sizeof(float)); }

static void teardown(void *p)
{
    state *s = p;
    if (!s)
        return;
    dk_plan_destroy(s->plan);
    dk_buffer_destroy(s->in);
    dk_buffer_destroy(s->out);
    free(s);
}

static void *setup(dk_context *ctx, int i, const char *variant, char *err, size_t len)
{
    const gauss_bench_case *c = &cases[i];
    dk_gauss_desc d;
    dk_gauss_desc_init(&d);
    d.ndim = c->ndim;
    for (int a = 0; a < c->ndim; a++) {
        d.shape[a] = c->shape[a];
        d.sigma[a] = c->sigma;
    }
    d.axes = c->axes;
    d.K = c->K;
    d.mode = c->mode;
    d.overlap = c->overlap;
    d.blocks = c->blocks;
    d.method = c->method;
    d.boundary = c->boundary;
    d.variant = variant;
    size_t n = elements(i), size = n * sizeof(float);
    state *s = calloc(1, sizeof *s);
    float *host = malloc(size);
    if (!s || !host) {
        snprintf(err, len, "out of host memory");
        free(host);
        free(s);
        return NULL;
    }
    cli_fill_random(host, DK_F32, n, 42);
    if (dk_gauss_plan_create(ctx, &d, &s->plan) != DK_OK || dk_buffer_create(ctx, size, &s->in) != DK_OK ||
        (!c->inplace && dk_buffer_create(ctx, size, &s->out) != DK_OK) ||
        dk_buffer_write(s->in, host, size) != DK_OK) {
        snprintf(err, len, "%s", dk_last_error(ctx));
        teardown(s);
        s = NULL;
    }
    free(host);
    return s;
}

static dk_status run(void *p)
{
    state *s = p;
    return dk_gauss_execute(s->plan, s->in, s->out ? s->out : s->in);
}

const bench_suite bench_gauss = {
    .algo = "gauss",
    .count = count,
    .name = name,
    .what = what,
    .bytes = bytes,
    .variants = dk_gauss_variants,
    .setup = setup,
    .run = run,
    .teardown = teardown,
};
