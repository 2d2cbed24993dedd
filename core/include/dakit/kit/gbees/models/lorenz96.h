/* Lorenz '96: f_i = (x_{i+1} - x_{i-2}) x_{i-1} - x_i + F, cyclic, F = 4;
 * any dimension from 4 (6 in the seed); h(x) = x. */
#ifndef GB_MODEL_FN
#include "model.h"
#endif

GB_MODEL_FN void lorenz96_f(int dim, const double *x, const double *c, double *v)
{
    for (int i = 0; i < dim; i++) {
        double next = x[(i + 1) % dim], prev = x[(i + dim - 1) % dim], prev2 = x[(i + dim - 2) % dim];
        v[i] = (next - prev2) * prev - x[i] + c[0];
    }
}

GB_MODEL_FN void lorenz96_h(int dim, const double *x, const double *c, double *y)
{
    (void)c;
    for (int i = 0; i < dim; i++)
        y[i] = x[i];
}

GB_MODEL(lorenz96, "Lorenz '96: (x[i+1]-x[i-2]) x[i-1] - x[i] + F, cyclic, F=4, d >= 4 (from the files); h = x",
         0, 4, 0, 1, 4.0)
