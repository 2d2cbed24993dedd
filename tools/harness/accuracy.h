#ifndef DAKIT_TOOLS_HARNESS_ACCURACY_H
#define DAKIT_TOOLS_HARNESS_ACCURACY_H

#include <stddef.h>

#include <dakit/gauss.h>

/* Filters a unit impulse (float64, 2m+1 points, zero boundary) with the
 * serial reference of `method` (rf with K iterations, deriche, or vyv with 5
 * poles) and compares with the exact sampled Gaussian of the same sigma:
 * returns max |y - g| / max g. When response is not NULL it receives the
 * 2m+1 filtered values. Returns a negative number on failure. */
double gauss_error_vs_exact(double sigma, dk_gauss_method method, int K, size_t m, double *response);

#endif
