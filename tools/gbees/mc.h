/* The Monte Carlo check of GBEES snapshots (dakit gbees-mc and
 * tests/test_gbees_mc.c), and helpers the gbees cases share. */
#ifndef DAKIT_TOOLS_GBEES_MC_H
#define DAKIT_TOOLS_GBEES_MC_H

#include <stddef.h>
#include <stdint.h>

#include <dakit/dakit.h>

typedef struct gbees_mc_result {
    double bc;                 /* Bhattacharyya coefficient on the cells at or above the threshold */
    double bc_all;             /* the same over every cell of the snapshot */
    size_t support;            /* cells at or above the threshold */
    double gbees_mass_support; /* GBEES probability on those cells */
    double kde_mass;           /* the kernel estimate's probability on all the cells */
    double kde_mass_support;   /* ... on the cells at or above the threshold */
    size_t draws;              /* sampled estimate: support cells drawn (0: every cell computed) */
    double bc_se;              /* sampled estimate: standard error of bc */
} gbees_mc_result;

/* Snapshots with more cells than this are compared on GBEES_MC_DRAWS cells
 * drawn by their probability rather than on every cell (see gbees_mc_bc). */
#define GBEES_MC_EXACT_CELLS 2000000
#define GBEES_MC_DRAWS 400000

/* Propagates n samples of N(meas0) through the model's f from t = 0 to t
 * (adaptive Dormand-Prince 5(4)), estimates their density by Gaussian
 * kernels (Scott's bandwidth on the sample covariance) turned into the
 * probability of each snapshot cell (kernel integrated over the cell, whose
 * width is read off the centres), and compares with the snapshot by the
 * Bhattacharyya coefficient, each side normalized over the compared cells.
 * rows: cells x (dim + 1); threshold: the run's, which marks the support.
 * draws 0: the estimate at every cell; draws > 0: the coefficients as
 * expectations over that many cells drawn by their GBEES probability (for
 * snapshots of tens of millions of cells; res->bc_se is the standard error
 * of the draws' mean), the estimate's normalizers from kernel draws. */
dk_status gbees_mc_bc(const dk_gbees_model *model, const dk_gbees_meas *meas0, double t, size_t n,
                      uint64_t seed, const double *rows, size_t cells, int dim, double threshold, size_t draws,
                      gbees_mc_result *res, char *err, size_t len);

/* The cell width along each axis of a snapshot (rows: cells x (d + 1)):
 * the smallest gap between distinct centre coordinates (centres lie on
 * center + k dx, and a grown grid has neighbours along every axis). An axis
 * with no such gap gets INFINITY; 0 when every axis has one, else -1. */
int gbees_cell_widths(const double *rows, size_t cells, int d, double *dx);

/* The measurements of a synthetic case: z[0] an isotropic Gaussian start
 * (mean, variance var on every axis), z[1] one scalar measurement y of
 * variance r; both with the same period (the case says how many it uses). */
void gbees_case_measurements(int dim, const double *mean, double var, double period, double y, double r,
                             dk_gbees_meas z[2]);

#endif
