/* Circular restricted three-body problem in the rotating frame, state
 * (x, y, z, vx, vy, vz), Earth-Moon mass ratio mu = 0.012150585609624;
 * h = (x, y, z). */
#ifndef GB_MODEL_FN
#include "model.h"
#endif

GB_MODEL_FN void cr3bp_f(int dim, const double *s, const double *c, double *v)
{
    (void)dim;
    double mu = c[0], x = s[0], y = s[1], z = s[2];
    double r1 = pow((x + mu) * (x + mu) + y * y + z * z, 1.5);
    double r2 = pow((x - 1.0 + mu) * (x - 1.0 + mu) + y * y + z * z, 1.5);
    v[0] = s[3];
    v[1] = s[4];
    v[2] = s[5];
    v[3] = 2.0 * s[4] + x - (1.0 - mu) * (x + mu) / r1 - mu * (x - 1.0 + mu) / r2;
    v[4] = -2.0 * s[3] + y - (1.0 - mu) * y / r1 - mu * y / r2;
    v[5] = -(1.0 - mu) * z / r1 - mu * z / r2;
}

GB_MODEL_FN void cr3bp_h(int dim, const double *s, const double *c, double *y)
{
    (void)dim;
    (void)c;
    y[0] = s[0];
    y[1] = s[1];
    y[2] = s[2];
}

GB_MODEL(cr3bp, "CR3BP (x, y, z, vx, vy, vz), rotating frame, mu = 0.012150585609624 (Earth-Moon); h = (x, y, z)",
         6, 6, 3, 1, 0.012150585609624)
