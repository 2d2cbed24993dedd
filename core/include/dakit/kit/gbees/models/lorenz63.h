/* Lorenz '63 in the form of the published GBEES code:
 * f = (s(y - x), -y - x z, -b z + x y - b r), s = 4, b = 1, r = 48; h = z. */
#ifndef GB_MODEL_FN
#include "model.h"
#endif

GB_MODEL_FN void lorenz63_f(int dim, const double *x, const double *c, double *v)
{
    (void)dim;
    v[0] = c[0] * (x[1] - x[0]);
    v[1] = -x[1] - x[0] * x[2];
    v[2] = -c[1] * x[2] + x[0] * x[1] - c[1] * c[2];
}

GB_MODEL_FN void lorenz63_h(int dim, const double *x, const double *c, double *y)
{
    (void)dim;
    (void)c;
    y[0] = x[2];
}

GB_MODEL(lorenz63, "Lorenz '63: (s(y-x), -y-xz, -bz+xy-br), s=4 b=1 r=48; h = z",
         3, 3, 1, 3, 4.0, 1.0, 48.0)
