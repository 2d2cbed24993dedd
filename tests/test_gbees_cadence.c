/* Where a run stops must not change it: Lorenz '63 (tests/data-gbees-lorenz63,
 * the update at t = 1) to t = 1.1 on one backend, with 2 snapshots per
 * period, with 7, with 1500 (closer than a time step, so one step is cut
 * at several snapshots), and with 7 taken 7 steps per dk_gbees_run call.
 * Each must make the same steps and cell-steps and end with the same cells
 * and density as the first, in every variant of the backend. A step cut at a snapshot is finished from its
 * start with the same fluxes, so the engine's backends (reference, cpu)
 * give the same bits; a device's sums may add in another order from run to
 * run, hence the tolerance: L1 <= 1e-12 (a step cut short and restarted
 * with a fresh flux, the rule before, moved the density by about 1e-3).
 * Usage: test_gbees_cadence DATA_DIR [BACKEND (reference)]. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/dakit.h>

#include "check.h"

#define T_END 1.1
#define MAX_L1 1e-12

typedef struct outcome {
    dk_gbees_stats stats;
    size_t cells;
    double *rows; /* the last snapshot: cells x 4 */
    int snapshots;
} outcome;

static int run(dk_context *ctx, const char *variant, const dk_gbees_meas *meas, int nmeas, int snapshots,
               int max_steps, outcome *out)
{
    memset(out, 0, sizeof *out);
    dk_gbees_desc d;
    dk_gbees_desc_init(&d);
    d.model = dk_gbees_model_find("lorenz63");
    d.variant = variant;
    d.snapshots = snapshots;
    d.t_end = T_END;
    dk_plan *plan = NULL;
    if (dk_gbees_plan_create(ctx, &d, meas, nmeas, &plan) != DK_OK) {
        printf("FAIL plan: %s\n", dk_last_error(ctx));
        return -1;
    }
    dk_gbees_event ev;
    dk_gbees_snapshot s = {0};
    dk_status st;
    while ((st = dk_gbees_run(plan, max_steps, &ev)) == DK_OK && ev != DK_GBEES_DONE)
        if (ev == DK_GBEES_SNAPSHOT) {
            dk_gbees_snapshot_get(plan, &s);
            out->snapshots++;
        }
    if (st != DK_OK) {
        printf("FAIL run: %s\n", dk_last_error(ctx));
        dk_plan_destroy(plan);
        return -1;
    }
    dk_gbees_stats_get(plan, &out->stats);
    out->cells = s.cells;
    out->rows = malloc(s.cells * 4 * sizeof *out->rows);
    if (out->rows)
        memcpy(out->rows, s.data, s.cells * 4 * sizeof *out->rows);
    dk_plan_destroy(plan);
    return out->rows && fabs(s.t - T_END) < 1e-12 ? 0 : -1;
}

static int by_centre(const void *a, const void *b)
{
    const double *x = a, *y = b;
    for (int i = 0; i < 3; i++)
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    return 0;
}

/* L1 distance between two snapshots of the same cells (sorted by centre:
 * a device may make a step's new cells in another order from run to run);
 * INFINITY when the cells differ. */
static double l1(const outcome *a, const outcome *b)
{
    if (a->cells != b->cells)
        return INFINITY;
    qsort(a->rows, a->cells, 4 * sizeof *a->rows, by_centre);
    qsort(b->rows, b->cells, 4 * sizeof *b->rows, by_centre);
    double sum = 0.0;
    for (size_t c = 0; c < a->cells; c++) {
        if (by_centre(a->rows + c * 4, b->rows + c * 4) != 0)
            return INFINITY;
        sum += fabs(a->rows[c * 4 + 3] - b->rows[c * 4 + 3]);
    }
    return sum;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "tests/data-gbees-lorenz63";
    const char *backend = argc > 2 ? argv[2] : "reference";
    dk_gbees_meas *meas = NULL;
    int nmeas = 0;
    if (dk_gbees_meas_read_dir(dir, &meas, &nmeas) != DK_OK) {
        printf("FAIL: %s\n", dk_last_error(NULL));
        return 1;
    }
    dk_context *ctx = NULL;
    if (strcmp(backend, "reference") != 0 && dk_context_create(backend, &ctx) != DK_OK) {
        printf("skip: backend %s absent: %s\n", backend, dk_last_error(NULL));
        free(meas);
        return 77;
    }
    struct {
        int snapshots, max_steps;
    } cadence[] = {{2, 0}, {7, 0}, {1500, 0}, {7, 7}};
    int ncad = (int)(sizeof cadence / sizeof cadence[0]);
    const char *const *variants = dk_gbees_variants(ctx);
    for (int v = 0; variants && variants[v]; v++) {
        const char *variant = variants[v];
        outcome base;
        if (run(ctx, variant, meas, nmeas, 2, 0, &base) != 0) {
            CHECK(0, "%s/%s: the run with 2 snapshots per period failed", backend, variant);
            free(base.rows);
            continue;
        }
        printf("%s/%s, 2 snapshots per period: %llu steps, %llu cell-steps, %zu cells at t = %g\n", backend,
               variant, (unsigned long long)base.stats.steps, (unsigned long long)base.stats.cell_steps, base.cells,
               T_END);
        for (int k = 1; k < ncad; k++) {
            outcome o;
            if (run(ctx, variant, meas, nmeas, cadence[k].snapshots, cadence[k].max_steps, &o) != 0) {
                CHECK(0, "%s/%s: the run with %d snapshots per period failed", backend, variant,
                      cadence[k].snapshots);
                free(o.rows);
                continue;
            }
            double dist = l1(&base, &o);
            printf("%s/%s, %d snapshots per period, %d steps per call: %d snapshots, %llu steps, %llu cell-steps, "
                   "%zu cells; L1 to 2 snapshots per period %.3g%s\n",
                   backend, variant, cadence[k].snapshots, cadence[k].max_steps, o.snapshots,
                   (unsigned long long)o.stats.steps, (unsigned long long)o.stats.cell_steps, o.cells, dist,
                   dist == 0.0 ? " (the same bits)" : "");
            CHECK(o.stats.steps == base.stats.steps, "%s/%s: %llu steps, but %llu with 2 snapshots per period",
                  backend, variant, (unsigned long long)o.stats.steps, (unsigned long long)base.stats.steps);
            CHECK(o.stats.cell_steps == base.stats.cell_steps,
                  "%s/%s: %llu cell-steps, but %llu with 2 snapshots per period", backend, variant,
                  (unsigned long long)o.stats.cell_steps, (unsigned long long)base.stats.cell_steps);
            CHECK(o.cells == base.cells, "%s/%s: %zu cells at the end, but %zu with 2 snapshots per period", backend,
                  variant, o.cells, base.cells);
            CHECK(dist <= MAX_L1, "%s/%s: the densities at the end differ by L1 %.3g (at most %g)", backend, variant,
                  dist, MAX_L1);
            free(o.rows);
        }
        free(base.rows);
    }
    dk_context_destroy(ctx);
    free(meas);
    return failures ? 1 : 0;
}
