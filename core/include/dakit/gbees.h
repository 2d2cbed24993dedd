/* dakit gbees: Grid-based Bayesian Estimation Exploiting Sparsity.
 *
 * Propagates a probability density through x' = f(x) by a finite-volume
 * solution of the advection form of the Fokker-Planck equation on a sparse
 * grid that holds only the cells where probability is not negligible, and
 * applies a Bayesian update at each measurement time.
 *
 * Cells are integer multi-indices j; cell j is centred at center + j o dx and
 * carries the probability (mass) in it; the masses sum to 1. Each step:
 * donor-cell upwind fluxes plus corner-transport-upwind and MC-limited
 * high-resolution corrections (Bewley & Sharma 2012; LeVeque 2002, ch. 20),
 * a time step at the CFL limit, growth of the downwind neighbours of cells
 * at or above the threshold, pruning every del_step steps of the cells below
 * it that no such cell flows into, and normalization.
 *
 * Use: read measurements (dk_gbees_meas_read_dir), fill a dk_gbees_desc, make
 * a plan (ctx NULL: the serial reference), then call dk_gbees_run until it
 * reports DK_GBEES_DONE, taking each snapshot it reports. */
#ifndef DAKIT_GBEES_H
#define DAKIT_GBEES_H

#include <stddef.h>
#include <stdint.h>

#include <dakit/dakit.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DK_GBEES_MAX_DIM 8
#define DK_GBEES_MAX_COEF 8

/* A model: x' = f(x) and the measurement y = h(x). f fills all dim
 * components of the velocity at x; h fills meas_dim values. */
typedef struct dk_gbees_model {
    const char *name;
    const char *about;  /* one line: the equations and coefficients */
    int dim;            /* 0: any dimension from min_dim up (set by the measurement file) */
    int min_dim;
    int meas_dim;       /* components of h(x); 0: as many as the state */
    int ncoef;
    double coef[DK_GBEES_MAX_COEF];
    void (*f)(int dim, const double *x, const double *coef, double *v);
    void (*h)(int dim, const double *x, const double *coef, double *y);
} dk_gbees_model;

/* The built-in models (NULL-terminated) and lookup by name (NULL: unknown). */
const dk_gbees_model *const *dk_gbees_models(void);
const dk_gbees_model *dk_gbees_model_find(const char *name);

/* One measurement file: a Gaussian N(mean, cov) and the time to propagate
 * after it. File 0 is the initial density; later ones are measurements of
 * h(x). */
typedef struct dk_gbees_meas {
    int dim;
    double mean[DK_GBEES_MAX_DIM];
    double cov[DK_GBEES_MAX_DIM * DK_GBEES_MAX_DIM]; /* row-major dim x dim */
    double period;
} dk_gbees_meas;

/* Reads one file in the published GBEES text format: a label line; the mean
 * on one line; a blank line; a label line; dim lines of the covariance; a
 * blank line; a label line; the period. Errors name the file and line. */
dk_status dk_gbees_meas_read(const char *path, dk_gbees_meas *meas);
/* Reads measurement0.txt, measurement1.txt, ... from dir until one is
 * missing (at least measurement0.txt). *list is malloc'ed. */
dk_status dk_gbees_meas_read_dir(const char *dir, dk_gbees_meas **list, int *count);

typedef struct dk_gbees_desc {
    const dk_gbees_model *model;
    double threshold;    /* cells below it may be pruned; > 0 */
    int del_step;        /* prune every del_step steps; >= 1 */
    double cfl;          /* time step = cfl * the CFL limit; in (0, 1] */
    double dx_factor;    /* dx = dx_factor * sqrt(cov0_ii) / 2 */
    int snapshots;       /* per measurement period, its start and end included; >= 2 */
    int update;          /* apply the measurement updates (1) or not (0) */
    double t_end;        /* stop at this time (<= 0: at the end of the last period) */
    const char *variant; /* NULL or one of the backend's variants */
} dk_gbees_desc;

/* Defaults: threshold 5e-6, del_step 20, cfl 1, dx_factor 1, 5 snapshots,
 * updates on, t_end 0 (all periods). The caller sets model. */
void dk_gbees_desc_init(dk_gbees_desc *desc);

/* ctx NULL: the serial reference, which defines the result. meas[0] is the
 * initial Gaussian; nmeas >= 1. */
dk_status dk_gbees_plan_create(dk_context *ctx, const dk_gbees_desc *desc,
                               const dk_gbees_meas *meas, int nmeas, dk_plan **plan);

typedef enum dk_gbees_event {
    DK_GBEES_PROGRESS = 0, /* max_steps steps done, no snapshot due yet */
    DK_GBEES_SNAPSHOT = 1, /* a snapshot is ready: dk_gbees_snapshot */
    DK_GBEES_DONE = 2      /* the end was reached; nothing more to run */
} dk_gbees_event;

typedef struct dk_gbees_stats {
    double t;            /* simulated time */
    uint64_t steps;
    uint64_t cell_steps; /* cells processed, summed over steps */
    size_t cells;        /* cells now */
    int period;          /* measurement period now (0-based) */
    double dt;           /* last time step */
} dk_gbees_stats;

/* Runs at most max_steps steps (<= 0: no limit) or up to the next snapshot.
 * The first call reports the snapshot of the initial density. */
dk_status dk_gbees_run(dk_plan *plan, int max_steps, dk_gbees_event *event);

/* The snapshot just reported: `cells` rows of dim + 1 doubles (the centre,
 * then the probability). data belongs to the plan and stays valid until the
 * next dk_gbees_run. */
typedef struct dk_gbees_snapshot {
    int period, index;
    double t;
    int dim;
    size_t cells;
    const double *data;
} dk_gbees_snapshot;
dk_status dk_gbees_snapshot_get(dk_plan *plan, dk_gbees_snapshot *snap);
dk_status dk_gbees_stats_get(const dk_plan *plan, dk_gbees_stats *stats);

const char *const *dk_gbees_variants(const dk_context *ctx);

/* ---- plugin ops: what a backend implements (docs/plugins.md) ----
 * The scheme's pieces a device implementation reuses (the models' drift and
 * measurement functions, the flux limiter, the host engine and hash table)
 * are in the plugin kit, dakit/kit/gbees/. */

struct dk_msg; /* dakit/plugin.h */

/* What a backend's plan receives: validated, and the same for every backend. */
typedef struct dk_gbees_setup {
    const dk_gbees_model *model;
    int dim;
    double center[DK_GBEES_MAX_DIM];
    double dx[DK_GBEES_MAX_DIM];
    double threshold;
    double cfl;
    int del_step;
    const char *variant; /* one of ops->variants (the plugin's own string), never NULL */
} dk_gbees_setup;

typedef struct dk_gbees_ops {
    /* Required. NULL-terminated variant names; the first is the default. */
    const char *const *variants;
    /* Required. Called once per plan. `setup` stays valid until plan_destroy
     * returns: the plugin may keep the pointer. */
    dk_status (*plan_create)(void *device, const dk_gbees_setup *setup, void **plan, struct dk_msg *msg);
    /* Required. Called once, first. Grows the grid from the centre outward
     * over cells whose Gaussian probability is at or above the threshold,
     * then normalizes. A cell's mass is exp(lognorm - q / 2),
     * q = (x - mean)' cov_inv (x - mean): lognorm (the density's
     * normalization times the cell volume) comes from the core, which has
     * factored the covariance already. */
    dk_status (*init)(void *plan, const double *mean, const double *cov_inv, double lognorm, struct dk_msg *msg);
    /* Required. Steps until t reaches t_target exactly or max_steps (> 0)
     * were done. A step that would pass t_target is cut there and finished
     * by the next advance from its start with the same fluxes, counting
     * once (gb_step_part, dakit/kit/gbees/flux.h); update ends it instead.
     * So where a run stops never changes the steps it makes. */
    dk_status (*advance)(void *plan, double t_target, int max_steps, struct dk_msg *msg);
    /* Required. Multiplies by exp(-(h(x)-y)' R^-1 (h(x)-y) / 2) and
     * normalizes. */
    dk_status (*update)(void *plan, const double *y, const double *r_inv, int meas_dim,
                        struct dk_msg *msg);
    /* Required. Writes up to max rows (dim + 1 doubles: the cell's centre,
     * then its probability) into host memory out; *cells = all cells. */
    dk_status (*snapshot)(void *plan, double *out, size_t max, size_t *cells, struct dk_msg *msg);
    /* Required. Fills the counters of dk_gbees_stats the plugin keeps
     * (t, steps, cell_steps, cells, ...); cannot fail. */
    void (*stats)(void *plan, dk_gbees_stats *stats);
    /* Required. Frees the plan. */
    void (*plan_destroy)(void *plan);
} dk_gbees_ops;

#ifdef __cplusplus
}
#endif

#endif
