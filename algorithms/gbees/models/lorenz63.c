/* Lorenz '63 in the form of the published GBEES code:
 * f = (s(y - x), -y - x z, -b z + x y - b r), s = 4, b = 1, r = 48; h = z. */
#include <dakit/gbees.h>

static void f(int dim, const double *x, const double *c, double *v)
{
    (void)dim;
    v[0] = c[0] * (x[1] - x[0]);
    v[1] = -x[1] - x[0] * x[2];
    v[2] = -c[1] * x[2] + x[0] * x[1] - c[1] * c[2];
}

static void h(int dim, const double *x, const double *c, double *y)
{
    (void)dim;
    (void)c;
    y[0] = x[2];
}

const dk_gbees_model dk_gbees_model_lorenz63 = {
    .name = "lorenz63",
    .about = "Lorenz '63: (s(y-x), -y-xz, -bz+xy-br), s=4 b=1 r=48; h = z",
    .dim = 3, .min_dim = 3, .meas_dim = 1,
    .ncoef = 3, .coef = {4.0, 1.0, 48.0},
    .f = f, .h = h,
};
