/* The Lorenz-96 model of the twin experiments (dakit enkf l96, dakit letkf
 * l96): 40 variables on a ring, F = 8, one RK4 step of 0.05 time units per
 * assimilation cycle; and their picture of the analysis RMSE and ensemble
 * spread per cycle. */
#ifndef DAKIT_TOOLS_ENKF_L96_H
#define DAKIT_TOOLS_ENKF_L96_H

#include <stddef.h>

#define L96_N 40
#define L96_F 8.0
#define L96_DT 0.05

/* One RK4 step of L96_DT on a state of L96_N values `stride` apart (a
 * member of an N x L ensemble: stride L). */
void l96_step(double *x, size_t stride);

/* What the picture shows besides the two curves. */
typedef struct l96_picture_info {
    const char *title, *subtitle;
    int spinup;    /* cycles shaded as spin-up (not averaged) */
    double mean;   /* time-mean RMSE after the spin-up (a line over those cycles) */
    double target; /* > 0: a dashed line at this RMSE, labelled as the target */
    double top;    /* > 0: the y axis's top; 0: from the curves (at least 1.2, to show the observation error) */
} l96_picture_info;

/* The analysis RMSE and spread over n cycles, with the observation error
 * standard deviation (1), to path (PNG, SVG or PDF). 0, or 1 with the
 * sentence printed as "dakit CMD: ...". */
int l96_picture(const char *cmd, const char *path, const double *rmse, const double *spread, int n,
                const l96_picture_info *info);

#endif
