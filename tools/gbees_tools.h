/* gbees subcommands and the Monte Carlo comparison the tests share. */
#ifndef DAKIT_TOOLS_GBEES_TOOLS_H
#define DAKIT_TOOLS_GBEES_TOOLS_H

#include <stddef.h>
#include <stdint.h>

#include <dakit/dakit.h>

int cmd_gbees(int argc, char **argv);
int cmd_gbees_plot(int argc, char **argv);
int cmd_gbees_mc(int argc, char **argv);

/* Propagates n samples of N(meas0) through the model's f from t = 0 to t
 * (adaptive Dormand-Prince 5(4)), estimates their density by Gaussian
 * kernels (Scott's bandwidth, full sample covariance) at the snapshot's
 * cell centres, and returns the Bhattacharyya coefficient between the two
 * (each normalized over the cells) in *bc. rows: cells x (dim + 1). */
dk_status gbees_mc_bc(const dk_gbees_model *model, const dk_gbees_meas *meas0, double t, size_t n,
                      uint64_t seed, const double *rows, size_t cells, int dim, double *bc, char *err,
                      size_t len);

#endif
