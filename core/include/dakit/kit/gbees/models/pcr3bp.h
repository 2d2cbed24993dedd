/* Planar circular restricted three-body problem in the rotating frame,
 * state (x, y, vx, vy), Earth-Moon mass ratio mu = 0.012150585609624;
 * h = (x, y). */
#ifndef GB_MODEL_FN
#include "model.h"
#endif

GB_MODEL_FN void pcr3bp_f(int dim, const double *s, const double *c, double *v)
{
    (void)dim;
    double mu = c[0], x = s[0], y = s[1];
    double r1 = pow((x + mu) * (x + mu) + y * y, 1.5);
    double r2 = pow((x - 1.0 + mu) * (x - 1.0 + mu) + y * y, 1.5);
    v[0] = s[2];
    v[1] = s[3];
    v[2] = 2.0 * s[3] + x - (1.0 - mu) * (x + mu) / r1 - mu * (x - 1.0 + mu) / r2;
    v[3] = -2.0 * s[2] + y - (1.0 - mu) * y / r1 - mu * y / r2;
}

GB_MODEL_FN void pcr3bp_h(int dim, const double *s, const double *c, double *y)
{
    (void)dim;
    (void)c;
    y[0] = s[0];
    y[1] = s[1];
}

GB_MODEL(pcr3bp, "planar CR3BP (x, y, vx, vy), rotating frame, mu = 0.012150585609624 (Earth-Moon); h = (x, y)",
         4, 4, 2, 1, 0.012150585609624)
