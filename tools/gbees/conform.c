/* gbees conformance: short runs of each model on a backend against the
 * serial reference, compared at every snapshot by three measures:
 * the Bhattacharyya coefficient (at least 0.999), the L1 distance (at most
 * 1e-3, cells missing on one side counting their whole mass) and the cell
 * count (within 1%). Thread order changes rounding on parallel devices and
 * can move a cell across the threshold, which these allow; a difference in
 * the scheme moves the density by far more. The detail also says when a
 * backend matched bit for bit (the cpu plugin does: it shares the engine
 * and sums in fixed chunks). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gbees/mc.h"
#include "harness/conform.h"

#define GB_MIN_BC 0.999
#define GB_MAX_L1 1e-3
#define GB_MAX_CELL_DIFF 0.01

typedef struct gbees_case {
    const char *name, *model;
    int dim, nmeas, update, quick;
    double threshold, t_end;
    double mean[6], var, period;
    double y, r; /* second measurement (lorenz63 only) */
    int nsnap;       /* reference snapshots */
    size_t *cells;   /* per snapshot */
    double **rows;   /* per snapshot: cells x (dim + 1) */
} gbees_case;

#define MAX_SNAP 8

static gbees_case cases[] = {
    {"lorenz63-t0.3", "lorenz63", 3, 1, 0, 1, 5e-6, 0.3, {-11.5, -10, 9.5}, 1.0, 0.3, 0, 0, 0, NULL, NULL},
    {"lorenz63-update", "lorenz63", 3, 2, 1, 1, 5e-6, 0.3, {-11.5, -10, 9.5}, 1.0, 0.15, -8.0, 1.0, 0, NULL, NULL},
    {"lorenz96-6d", "lorenz96", 6, 1, 0, 1, 1e-6, 0.03, {4.5, 4, 4, 4, 4, 4}, 0.04, 0.03, 0, 0, 0, NULL, NULL},
    {"pcr3bp", "pcr3bp", 4, 1, 0, 0, 1e-6, 0.02, {0.8, 0.3, 0.0, 0.3}, 1e-4, 0.02, 0, 0, 0, NULL, NULL},
    {"cr3bp", "cr3bp", 6, 1, 0, 0, 1e-6, 0.005, {0.8, 0.3, 0.05, 0.0, 0.3, 0.0}, 1e-4, 0.005, 0, 0, 0, NULL, NULL},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static int count(void) { return NCASES; }
static const char *name(int i) { return cases[i].name; }
static int quick(int i) { return cases[i].quick; }

static void free_snaps(int nsnap, size_t *cells, double **rows)
{
    for (int k = 0; rows && k < nsnap; k++)
        free(rows[k]);
    free(rows);
    free(cells);
}

/* Runs case i on ctx (NULL: reference), copying out every snapshot. */
static dk_status run_case(dk_context *ctx, const char *variant, int i, int *nsnap, size_t **cells_out,
                          double ***rows_out, char *err, size_t len)
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
    size_t *cells = calloc(MAX_SNAP, sizeof *cells);
    double **rows = calloc(MAX_SNAP, sizeof *rows);
    int n = 0, too_many = 0;
    dk_gbees_event ev;
    dk_status st = cells && rows ? DK_OK : DK_ERR_OUT_OF_MEMORY;
    while (st == DK_OK && (st = dk_gbees_run(plan, 0, &ev)) == DK_OK && ev != DK_GBEES_DONE) {
        if (ev != DK_GBEES_SNAPSHOT)
            continue;
        dk_gbees_snapshot s = {0};
        dk_gbees_snapshot_get(plan, &s);
        if (n == MAX_SNAP) {
            too_many = 1;
            break;
        }
        size_t bytes = s.cells * (size_t)(c->dim + 1) * sizeof(double);
        if (!(rows[n] = malloc(bytes ? bytes : 1))) {
            st = DK_ERR_OUT_OF_MEMORY;
            break;
        }
        memcpy(rows[n], s.data, bytes);
        cells[n++] = s.cells;
    }
    if (st != DK_OK || too_many) {
        snprintf(err, len, "%s", too_many                      ? "more snapshots than the suite expects"
                                 : st == DK_ERR_OUT_OF_MEMORY ? "out of memory"
                                                              : dk_last_error(ctx));
        if (too_many)
            st = DK_ERR_INVALID_ARGUMENT;
        free_snaps(n, cells, rows);
        dk_plan_destroy(plan);
        return st;
    }
    dk_plan_destroy(plan);
    *nsnap = n;
    *cells_out = cells;
    *rows_out = rows;
    return DK_OK;
}

/* Cells are matched by their integer offsets on the reference's lattice:
 * its cell widths, the origin its first cell (an axis the reference never
 * varies along gets width 1: every cell has the same offset there). */
typedef struct lattice {
    int d;
    double origin[DK_GBEES_MAX_DIM], dx[DK_GBEES_MAX_DIM];
} lattice;

static int lattice_from(lattice *lat, const double *rows, size_t cells, int d)
{
    if (cells == 0)
        return -1;
    lat->d = d;
    for (int j = 0; j < d; j++)
        lat->dx[j] = NAN;
    gbees_cell_widths(rows, cells, d, lat->dx);
    for (int j = 0; j < d; j++) {
        if (isnan(lat->dx[j]))
            return -1; /* out of memory */
        if (!isfinite(lat->dx[j]))
            lat->dx[j] = 1.0;
        lat->origin[j] = rows[j];
    }
    return 0;
}

typedef struct keyed {
    int64_t key[DK_GBEES_MAX_DIM];
    double p;
} keyed;

static int lattice_d; /* for the qsort/bsearch comparator */
static int cmp_keyed(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    for (int j = 0; j < lattice_d; j++)
        if (x->key[j] != y->key[j])
            return (x->key[j] > y->key[j]) - (x->key[j] < y->key[j]);
    return 0;
}

static keyed *to_keyed(const lattice *lat, const double *rows, size_t cells)
{
    int d = lat->d;
    keyed *out = malloc((cells ? cells : 1) * sizeof *out);
    for (size_t k = 0; out && k < cells; k++) {
        memset(out[k].key, 0, sizeof out[k].key);
        for (int j = 0; j < d; j++)
            out[k].key[j] = llround((rows[k * (d + 1) + j] - lat->origin[j]) / lat->dx[j]);
        out[k].p = rows[k * (d + 1) + d];
    }
    return out;
}

/* Bhattacharyya coefficient, L1 distance and bit-for-bit equality of one
 * snapshot against the reference's. */
static int compare_snapshot(int d, const double *ref, size_t nref, const double *got, size_t ngot, double *bc,
                            double *l1, int *identical)
{
    *identical = nref == ngot && memcmp(ref, got, nref * (size_t)(d + 1) * sizeof *ref) == 0;
    lattice lat;
    if (lattice_from(&lat, ref, nref, d) != 0)
        return -1;
    keyed *r = to_keyed(&lat, ref, nref), *g = to_keyed(&lat, got, ngot);
    if (!r || !g) {
        free(r);
        free(g);
        return -1;
    }
    lattice_d = d;
    qsort(r, nref, sizeof *r, cmp_keyed);
    double sum_bc = 0.0, sum_l1 = 0.0, matched_ref = 0.0;
    for (size_t k = 0; k < ngot; k++) {
        keyed *m = bsearch(&g[k], r, nref, sizeof *r, cmp_keyed);
        if (m) {
            sum_bc += sqrt(fmax(m->p, 0.0) * fmax(g[k].p, 0.0));
            sum_l1 += fabs(m->p - g[k].p);
            matched_ref += m->p;
        } else {
            sum_l1 += fabs(g[k].p);
        }
    }
    double total_ref = 0.0;
    for (size_t k = 0; k < nref; k++)
        total_ref += r[k].p;
    sum_l1 += total_ref - matched_ref; /* reference cells the backend lacks */
    free(r);
    free(g);
    *bc = sum_bc;
    *l1 = sum_l1;
    return 0;
}

static dk_status prepare(int i, char *err, size_t len)
{
    gbees_case *c = &cases[i];
    if (c->rows)
        return DK_OK;
    return run_case(NULL, NULL, i, &c->nsnap, &c->cells, &c->rows, err, len);
}

static void run(dk_context *ctx, const char *variant, int i, conform_result *r)
{
    gbees_case *c = &cases[i];
    int nsnap = 0;
    size_t *cells = NULL;
    double **rows = NULL;
    char err[512];
    r->tolerance = GB_MAX_L1;
    r->passed = 0;
    r->error = INFINITY;
    if (run_case(ctx, variant, i, &nsnap, &cells, &rows, err, sizeof err) != DK_OK) {
        snprintf(r->detail, sizeof r->detail, "%s", err);
        return;
    }
    if (nsnap != c->nsnap) {
        snprintf(r->detail, sizeof r->detail, "%d snapshots, the reference has %d", nsnap, c->nsnap);
        free_snaps(nsnap, cells, rows);
        return;
    }
    double worst_bc = 1.0, worst_l1 = 0.0, worst_cells = 0.0;
    int identical = 1, at = 0;
    for (int k = 0; k < nsnap; k++) {
        double bc, l1;
        int same;
        if (compare_snapshot(c->dim, c->rows[k], c->cells[k], rows[k], cells[k], &bc, &l1, &same) != 0) {
            snprintf(r->detail, sizeof r->detail, "snapshot %d: empty or out of memory", k);
            free_snaps(nsnap, cells, rows);
            return;
        }
        double dc = fabs((double)cells[k] - (double)c->cells[k]) / (double)c->cells[k];
        if (bc < worst_bc || l1 > worst_l1 || dc > worst_cells)
            at = k;
        worst_bc = fmin(worst_bc, bc);
        worst_l1 = fmax(worst_l1, l1);
        worst_cells = fmax(worst_cells, dc);
        identical &= same;
    }
    size_t last_cells = cells[nsnap - 1];
    free_snaps(nsnap, cells, rows);
    r->error = worst_l1;
    r->passed = worst_bc >= GB_MIN_BC && worst_l1 <= GB_MAX_L1 && worst_cells <= GB_MAX_CELL_DIFF;
    if (identical)
        snprintf(r->detail, sizeof r->detail, "%d snapshots identical to the reference (%zu cells at the end)",
                 nsnap, last_cells);
    else
        snprintf(r->detail, sizeof r->detail,
                 "%d snapshots; worst (snapshot %d): BC %.6f (>= %g), L1 %.3g (<= %g), cells %+.2f%% (within %g%%)",
                 nsnap, at, worst_bc, GB_MIN_BC, worst_l1, GB_MAX_L1, 100.0 * worst_cells, 100.0 * GB_MAX_CELL_DIFF);
}

static void release(int i)
{
    gbees_case *c = &cases[i];
    free_snaps(c->nsnap, c->cells, c->rows);
    c->cells = NULL;
    c->rows = NULL;
    c->nsnap = 0;
}

const conform_suite conform_gbees = {
    .algo = "gbees",
    .measure = "L1 to ref",
    .count = count,
    .name = name,
    .quick = quick,
    .variants = dk_gbees_variants,
    .prepare = prepare,
    .run = run,
    .release = release,
};
