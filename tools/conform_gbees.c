/* gbees conformance: short runs of each model on a backend against the
 * serial reference. The cpu plugin shares the reference's engine and sums
 * in fixed chunks, so it must give the same cells with the same
 * probabilities (tolerance 1e-13 absolute: rounding only; any difference in
 * the scheme moves probabilities by far more). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conform.h"
#include "gbees_tools.h"

typedef struct gbees_case {
    const char *name, *model;
    int dim, nmeas, update, quick;
    double threshold, t_end;
    double mean[6], var, period;
    double y, r; /* second measurement (lorenz63 only) */
    size_t cells;
    double *rows;
} gbees_case;

static gbees_case cases[] = {
    {"lorenz63-t0.3", "lorenz63", 3, 1, 0, 1, 5e-6, 0.3, {-11.5, -10, 9.5}, 1.0, 0.3, 0, 0, 0, NULL},
    {"lorenz63-update", "lorenz63", 3, 2, 1, 1, 5e-6, 0.3, {-11.5, -10, 9.5}, 1.0, 0.15, -8.0, 1.0, 0, NULL},
    {"lorenz96-6d", "lorenz96", 6, 1, 0, 1, 1e-6, 0.03, {4.5, 4, 4, 4, 4, 4}, 0.04, 0.03, 0, 0, 0, NULL},
    {"pcr3bp", "pcr3bp", 4, 1, 0, 0, 1e-6, 0.02, {0.8, 0.3, 0.0, 0.3}, 1e-4, 0.02, 0, 0, 0, NULL},
    {"cr3bp", "cr3bp", 6, 1, 0, 0, 1e-6, 0.005, {0.8, 0.3, 0.05, 0.0, 0.3, 0.0}, 1e-4, 0.005, 0, 0, 0, NULL},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static int count(void) { return NCASES; }
static const char *name(int i) { return cases[i].name; }
static int quick(int i) { return cases[i].quick; }

/* Runs case i on ctx (NULL: reference); the final snapshot is copied out. */
static dk_status run_case(dk_context *ctx, const char *variant, int i, double **rows, size_t *cells, char *err,
                          size_t len)
{
    gbees_case *c = &cases[i];
    dk_gbees_meas z[2];
    gbees_case_measurements(c->dim, c->mean, c->var, c->period, c->y, c->r, z);
    dk_gbees_desc d;
    dk_gbees_desc_init(&d);
    d.model = dk_gbees_model_find(c->model);
    d.threshold = c->threshold;
    d.snapshots = 2;
    d.del_step = 5;
    d.update = c->update;
    d.t_end = c->t_end;
    d.variant = variant;
    dk_plan *plan = NULL;
    if (dk_gbees_plan_create(ctx, &d, z, c->nmeas, &plan) != DK_OK) {
        snprintf(err, len, "%s", dk_last_error(ctx));
        return DK_ERR_INVALID_ARGUMENT;
    }
    dk_gbees_event ev;
    dk_gbees_snapshot s = {0};
    dk_status st;
    while ((st = dk_gbees_run(plan, 0, &ev)) == DK_OK && ev != DK_GBEES_DONE)
        if (ev == DK_GBEES_SNAPSHOT)
            dk_gbees_snapshot_get(plan, &s);
    if (st != DK_OK) {
        snprintf(err, len, "%s", dk_last_error(ctx));
        dk_plan_destroy(plan);
        return st;
    }
    size_t n = s.cells * (size_t)(c->dim + 1);
    *rows = malloc(n * sizeof **rows);
    if (!*rows) {
        dk_plan_destroy(plan);
        snprintf(err, len, "out of memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    memcpy(*rows, s.data, n * sizeof **rows);
    *cells = s.cells;
    dk_plan_destroy(plan);
    return DK_OK;
}

static dk_status prepare(int i, char *err, size_t len)
{
    if (cases[i].rows)
        return DK_OK;
    return run_case(NULL, NULL, i, &cases[i].rows, &cases[i].cells, err, len);
}

static void run(dk_context *ctx, const char *variant, int i, conform_result *r)
{
    double *rows = NULL;
    size_t cells = 0;
    char err[512];
    r->tolerance = 1e-13;
    if (run_case(ctx, variant, i, &rows, &cells, err, sizeof err) != DK_OK) {
        r->error = INFINITY;
        r->passed = 0;
        snprintf(r->detail, sizeof r->detail, "%s", err);
        return;
    }
    gbees_case *c = &cases[i];
    int w = c->dim + 1;
    double worst = 0.0;
    int same = cells == c->cells;
    for (size_t k = 0; same && k < cells; k++) {
        for (int j = 0; j < c->dim; j++)
            same &= rows[k * w + j] == c->rows[k * w + j];
        worst = fmax(worst, fabs(rows[k * w + c->dim] - c->rows[k * w + c->dim]));
    }
    free(rows);
    if (!same) {
        r->error = INFINITY;
        r->passed = 0;
        snprintf(r->detail, sizeof r->detail, "cells differ: %zu here, %zu in the reference (or in another order)",
                 cells, c->cells);
        return;
    }
    r->error = worst;
    r->passed = worst <= r->tolerance;
    snprintf(r->detail, sizeof r->detail, "%zu cells, max |p - p_ref| %.3g", cells, worst);
}

static void release(int i)
{
    free(cases[i].rows);
    cases[i].rows = NULL;
}

const conform_suite conform_gbees = {
    .algo = "gbees",
    .measure = "max|p-p_ref|",
    .count = count,
    .name = name,
    .quick = quick,
    .variants = dk_gbees_variants,
    .prepare = prepare,
    .run = run,
    .release = release,
};
