#include "harness/accuracy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/dakit.h>

double gauss_error_vs_exact(double sigma, dk_gauss_method method, int K, size_t m, double *response)
{
    size_t n = 2 * m + 1;
    double *x = calloc(n, sizeof *x);
    if (!x)
        return -1;
    x[m] = 1.0;
    dk_gauss_desc d;
    dk_gauss_desc_init(&d);
    d.dtype = DK_F64;
    d.ndim = 1;
    d.shape[0] = n;
    d.axes = 1;
    d.sigma[0] = sigma;
    d.K = K;
    d.method = method;
    d.boundary = DK_BOUNDARY_ZERO;
    if (dk_gauss_reference(&d, x, x) != DK_OK) {
        free(x);
        return -1;
    }
    double worst = 0, peak = 1.0 / (sqrt(2 * M_PI) * sigma);
    for (size_t i = 0; i < n; i++) {
        double t = ((double)i - (double)m) / sigma;
        double g = peak * exp(-0.5 * t * t);
        if (fabs(x[i] - g) > worst)
            worst = fabs(x[i] - g);
    }
    if (response)
        memcpy(response, x, n * sizeof *x);
    free(x);
    return worst / peak;
}
