/* gbees benchmark: whole propagations, timed end to end (initialization,
 * every step, snapshots). The table's "bytes" is a floor of the memory a
 * step must touch per cell (probability read and written, d face
 * velocities, 2d neighbour links, d fluxes written and read): 16 + 32 d
 * bytes per cell-step; the cell-steps per second follow each row. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "gbees/mc.h"
#include "harness/bench.h"

typedef struct bench_case {
    const char *name, *what, *model;
    int dim, nmeas;
    double threshold, t_end, mean[6], var, period, y, r;
    uint64_t cell_steps; /* of the last run */
} bench_case;

static bench_case cases[] = {
    {"lorenz63", "Lorenz '63, threshold 5e-6, two measurements (z = -8 at t = 1), to t = 2", "lorenz63", 3, 2,
     5e-6, 0.0, {-11.5, -10, 9.5}, 1.0, 1.0, -8.0, 1.0, 0},
    {"lorenz96-short", "Lorenz '96 6-D, threshold 1e-7, to t = 0.03", "lorenz96", 6, 1,
     1e-7, 0.03, {4.5, 4, 4, 4, 4, 4}, 0.04, 1.3, 0, 0, 0},
    /* threshold 8e-9, as in the long Monte Carlo test (millions of cells
     * from the start), run long enough to show sustained cell-steps per
     * second; a run takes minutes on a CPU device, so those skip it */
    {"lorenz96-8e-9", "Lorenz '96 6-D, threshold 8e-9, to t = 0.2 (GPU backends only)", "lorenz96", 6, 1,
     8e-9, 0.2, {4.5, 4, 4, 4, 4, 4}, 0.04, 1.3, 0, 0, 0},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

typedef struct state {
    dk_context *ctx;
    int i;
    const char *variant;
    double best, total;
    int runs;
} state;

static int count(void) { return NCASES; }
static const char *name(int i) { return cases[i].name; }
static const char *what(int i) { return cases[i].what; }
static double bytes(int i) { return (double)cases[i].cell_steps * (16.0 + 32.0 * cases[i].dim); }

/* Whether ctx computes on a CPU (the cpu plugin, or OpenCL on PoCL): the
 * device dk_context_create picked, DAKIT_DEVICE or 0, in the backend list. */
static int on_cpu(dk_context *ctx)
{
    const char *dev = getenv("DAKIT_DEVICE");
    char *end;
    long want = dev && *dev ? strtol(dev, &end, 10) : 0;
    if (dev && *dev && *end)
        want = -1; /* dk_context_create refuses it; never here */
    /* the probed list: asking the registry would probe every plugin here */
    const dk_backend_info *info = cli_backend_named(dk_context_backend(ctx));
    if (info && info->usable && want >= 0 && want < info->device_count)
        return info->devices[want].kind == DK_DEVICE_CPU;
    return !strcmp(dk_context_backend(ctx), "cpu");
}

static void *setup(dk_context *ctx, int i, const char *variant, char *err, size_t len)
{
    if (cases[i].threshold < 1e-8 && on_cpu(ctx)) {
        snprintf(err, len, "a threshold below 1e-8 takes minutes per run on a CPU device (GPU devices only)");
        return NULL;
    }
    state *s = calloc(1, sizeof *s);
    if (s) {
        s->ctx = ctx;
        s->i = i;
        s->variant = variant;
    }
    return s;
}

static dk_status run(void *p)
{
    state *s = p;
    bench_case *c = &cases[s->i];
    dk_gbees_meas z[2];
    gbees_case_measurements(c->dim, c->mean, c->var, c->period, c->y, c->r, z);
    dk_gbees_desc d;
    dk_gbees_desc_init(&d);
    d.model = dk_gbees_model_find(c->model);
    d.threshold = c->threshold;
    d.t_end = c->t_end;
    d.variant = s->variant;
    dk_plan *plan = NULL;
    double t0 = cli_now();
    dk_status st = dk_gbees_plan_create(s->ctx, &d, z, c->nmeas, &plan);
    dk_gbees_event ev = DK_GBEES_PROGRESS;
    while (st == DK_OK && ev != DK_GBEES_DONE)
        st = dk_gbees_run(plan, 0, &ev);
    dk_gbees_stats stats = {0};
    if (st == DK_OK)
        dk_gbees_stats_get(plan, &stats);
    dk_plan_destroy(plan);
    double t = cli_now() - t0;
    c->cell_steps = stats.cell_steps;
    if (st == DK_OK && t > 0) {
        double rate = stats.cell_steps / t;
        s->best = rate > s->best ? rate : s->best;
        s->total += t;
        s->runs++;
    }
    return st;
}

static void teardown(void *p)
{
    state *s = p;
    if (s->runs)
        printf("       %s: %llu cell-steps per run, %.3g cell-steps/s (mean over %d runs), best %.3g\n", cases[s->i].name,
               (unsigned long long)cases[s->i].cell_steps, cases[s->i].cell_steps * s->runs / s->total, s->runs,
               s->best);
    free(s);
}

const bench_suite bench_gbees = {
    .algo = "gbees",
    .count = count,
    .name = name,
    .what = what,
    .bytes = bytes,
    .variants = dk_gbees_variants,
    .setup = setup,
    .run = run,
    .teardown = teardown,
};
