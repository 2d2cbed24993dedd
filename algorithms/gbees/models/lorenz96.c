/* Lorenz '96: f_i = (x_{i+1} - x_{i-2}) x_{i-1} - x_i + F, cyclic, F = 4;
 * any dimension from 4 (6 in the seed); h(x) = x. */
#include <dakit/gbees.h>

static void f(int dim, const double *x, const double *c, double *v)
{
    for (int i = 0; i < dim; i++) {
        double next = x[(i + 1) % dim], prev = x[(i + dim - 1) % dim], prev2 = x[(i + dim - 2) % dim];
        v[i] = (next - prev2) * prev - x[i] + c[0];
    }
}

static void h(int dim, const double *x, const double *c, double *y)
{
    (void)c;
    for (int i = 0; i < dim; i++)
        y[i] = x[i];
}

const dk_gbees_model dk_gbees_model_lorenz96 = {
    .name = "lorenz96",
    .about = "Lorenz '96: (x[i+1]-x[i-2]) x[i-1] - x[i] + F, cyclic, F=4, d >= 4 (from the files); h = x",
    .dim = 0, .min_dim = 4, .meas_dim = 0,
    .ncoef = 1, .coef = {4.0},
    .f = f, .h = h,
};
