#ifndef DAKIT_TOOLS_HARNESS_ACCURACY_H
#define DAKIT_TOOLS_HARNESS_ACCURACY_H

#include <stddef.h>

/* Filters a unit impulse (float64, 2m+1 points, zero boundary) with the
 * serial reference and compares with the exact sampled Gaussian of the same
 * sigma: returns max |rf - g| / max g. When response is not NULL it receives
 * the 2m+1 filtered values. Returns a negative number on failure. */
double gauss_error_vs_exact(double sigma, int K, size_t m, double *response);

#endif
