/* deriche and vyv: the recursive Gaussians of higher order, reduced to the
 * parallel form of dk_gauss_iir (sections of one real pole or one pair of
 * complex poles, a causal and an anti-causal recursion each), computed once
 * per plan in double and shared by every backend.
 *
 * Sources (the formulas, re-derived here, not copied code):
 * - R. Deriche, "Recursively implementing the Gaussian and its derivatives",
 *   INRIA RR-1893, 1993 (and ICIP 1992): the causal half of the kernel is
 *   (a0 cos(w0 x/s) + a1 sin(w0 x/s)) e^(-b0 x/s)
 *   + (c0 cos(w1 x/s) + c1 sin(w1 x/s)) e^(-b1 x/s), with his fitted
 *   constants below; the anti-causal half is its mirror image.
 * - I. T. Young, L. J. van Vliet, M. van Ginkel, "Recursive Gabor filtering"
 *   (2002) and L. J. van Vliet, I. T. Young, P. W. Verbeek, "Recursive
 *   Gaussian derivative filters", ICPR 1998: a causal all-pole filter of
 *   order 3..5 run forwards then backwards, its poles d_k fitted for a
 *   reference scale and moved to sigma as d_k^(1/q), q chosen so that the
 *   cascade's variance, sum 2 d/(d-1)^2 over the poles, is sigma^2.
 * - P. Getreuer, "A Survey of Gaussian Convolution Algorithms", IPOL 3
 *   (2013): both methods side by side, the pole tables of van Vliet et al.
 *   and the variance condition for q; the boundary by a long enough
 *   extension, as done here.
 *
 * Both filters are written as a sum of poles p with residues r: the kernel's
 * causal half (n >= 0) is h[n] = sum r p^n, its anti-causal half
 * h[-n] = h[n] (n >= 1). A complex pair (r, p), (conj r, conj p) becomes one
 * second-order section with b0 = 2 Re r, b1 = -2 Re(r conj p), a1 = -2 Re p,
 * a2 = |p|^2, c1 = 2 Re(r p), c2 = -2 |p|^2 Re r; a real pole a first-order
 * one. Sections in parallel keep each pole exact in the data's precision,
 * where the expanded fourth- or fifth-order polynomial would move the poles
 * near 1 (large sigma) by the rounding of its coefficients. */
#include <complex.h>
#include <math.h>
#include <string.h>

#include "gauss_internal.h"

typedef struct pole {
    double complex r, p;
    int pair; /* a complex pair: this one and its conjugate */
} pole;

/* Deriche 1993, the Gaussian (order 0): a0, a1, b0, w0, then c0, c1, b1, w1. */
static const double deriche_gauss[8] = {1.68, 3.735, 1.783, 0.6318, -0.6803, -0.2598, 1.723, 1.997};

/* van Vliet, Young, Verbeek 1998, the poles d_k for orders 3, 4, 5 (those
 * with Im >= 0; the others are their conjugates), as tabulated by Getreuer. */
static const double complex vyv_poles3[] = {1.41650 + 1.00829 * I, 1.86543};
static const double complex vyv_poles4[] = {1.13228 + 1.28114 * I, 1.78534 + 0.46763 * I};
static const double complex vyv_poles5[] = {0.86430 + 1.45389 * I, 1.61433 + 0.83134 * I, 1.87504};

static int deriche_poles(double sigma, pole *out)
{
    const double *k = deriche_gauss;
    for (int s = 0; s < 2; s++) {
        double a = k[4 * s], b = k[4 * s + 1], decay = k[4 * s + 2], w = k[4 * s + 3];
        /* a cos t + b sin t = Re((a - i b) e^(i t)) = 2 Re(r e^(i t)), r = (a - i b)/2 */
        out[s].r = (a - b * I) / 2.0;
        out[s].p = cexp((-decay + w * I) / sigma);
        out[s].pair = 1;
    }
    return 2;
}

/* The cascade's variance for the poles d_k^(1/q), all of them counted. */
static double vyv_variance(const double complex *d, int nd, double q)
{
    double v = 0;
    for (int k = 0; k < nd; k++) {
        double complex dq = cpow(d[k], 1.0 / q);
        double term = creal(2.0 * dq / ((dq - 1.0) * (dq - 1.0)));
        v += cimag(d[k]) != 0 ? 2.0 * term : term;
    }
    return v;
}

static int vyv_poles(double sigma, int order, pole *out)
{
    const double complex *d = order == 3 ? vyv_poles3 : order == 4 ? vyv_poles4 : vyv_poles5;
    int nd = order == 4 ? 2 : order == 3 ? 2 : 3;
    /* the variance grows with q: bisect on log q */
    double lo = log(1e-3), hi = log(1e9), target = sigma * sigma;
    for (int it = 0; it < 200; it++) {
        double mid = 0.5 * (lo + hi);
        if (vyv_variance(d, nd, exp(mid)) < target)
            lo = mid;
        else
            hi = mid;
    }
    double q = exp(0.5 * (lo + hi));
    /* every pole of the causal filter, p = 1 / d^(1/q), inside the unit circle */
    double complex all[5];
    int K = 0;
    for (int k = 0; k < nd; k++) {
        all[K] = 1.0 / cpow(d[k], 1.0 / q);
        K++;
        if (cimag(d[k]) != 0) {
            all[K] = conj(all[K - 1]);
            K++;
        }
    }
    /* causal gain b = prod (1 - p): unit gain at zero frequency */
    double complex b = 1;
    for (int j = 0; j < K; j++)
        b *= 1.0 - all[j];
    /* H(z) = b^2 / (prod (1 - p z^-1) prod (1 - p z)); for n >= 0, h[n] is the
     * sum over the inner poles of the residue of H(z) z^(n-1):
     * r_i = b^2 p_i^(K-1) / (prod_{j != i} (p_i - p_j) prod_j (1 - p_i p_j)) */
    int n = 0;
    for (int i = 0; i < K; i++) {
        if (cimag(all[i]) < 0)
            continue; /* the conjugate of a pair already taken */
        double complex den = 1;
        for (int j = 0; j < K; j++) {
            if (j != i)
                den *= all[i] - all[j];
            den *= 1.0 - all[i] * all[j];
        }
        out[n].r = b * b * cpow(all[i], K - 1) / den;
        out[n].p = all[i];
        out[n].pair = cimag(all[i]) > 0;
        if (!out[n].pair)
            out[n].r = creal(out[n].r);
        n++;
    }
    return n;
}

/* The kernel's sum over all n: h[0] + 2 sum_{n>=1} h[n]. */
static double kernel_sum(const pole *pl, int n)
{
    double s = 0;
    for (int k = 0; k < n; k++) {
        double complex t = pl[k].r * (1.0 + pl[k].p) / (1.0 - pl[k].p);
        s += pl[k].pair ? 2.0 * creal(t) : creal(t);
    }
    return s;
}

/* A bound on what starting a recursion from zero m values early leaves out,
 * relative to max|x|: per section, the state it should have had is at most
 * sum|h_s| max|x| = w/(1-|p|) max|x|, and a wrong state decays as |p|^m,
 * amplified for a complex pair by up to 1/|Im p| (the two poles' modes
 * cancelling at the start); both directions count. */
static double start_error(const pole *pl, int n, double m)
{
    double e = 0;
    for (int k = 0; k < n; k++) {
        double mag = cabs(pl[k].p), w = (pl[k].pair ? 2.0 : 1.0) * cabs(pl[k].r);
        double amp = pl[k].pair ? 2.0 + 2.0 / fabs(cimag(pl[k].p)) : 2.0;
        e += 2.0 * w / (1.0 - mag) * amp * exp(m * log(mag));
    }
    return e;
}

dk_status dk_gauss_iir_make(dk_gauss_method method, int order_poles, double sigma, dk_dtype dtype,
                            dk_gauss_iir *iir, size_t *reach)
{
    pole pl[DK_GAUSS_MAX_SECTIONS];
    int n = method == DK_GAUSS_DERICHE ? deriche_poles(sigma, pl) : vyv_poles(sigma, order_poles, pl);
    double sum = kernel_sum(pl, n);
    if (!(isfinite(sum) && sum > 0))
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                       "gauss: the %s coefficients for sigma %g are not finite numbers",
                       dk_gauss_method_name(method), sigma);
    memset(iir, 0, sizeof *iir);
    iir->count = n;
    for (int k = 0; k < n; k++) {
        double complex r = pl[k].r / sum, p = pl[k].p;
        pl[k].r = r;
        if (pl[k].pair) {
            iir->b0[k] = 2.0 * creal(r);
            iir->b1[k] = -2.0 * creal(r * conj(p));
            iir->a1[k] = -2.0 * creal(p);
            iir->a2[k] = creal(p * conj(p));
            iir->c1[k] = 2.0 * creal(r * p);
            iir->c2[k] = -2.0 * creal(p * conj(p)) * creal(r);
        } else {
            iir->b0[k] = creal(r);
            iir->a1[k] = -creal(p);
            iir->c1[k] = creal(r * p);
        }
    }
    /* the least reach whose left-out part is under a quarter rounding unit */
    double limit = 0.25 * (dtype == DK_F64 ? 0x1p-53 : 0x1p-24);
    double hi = 1;
    while (start_error(pl, n, hi) > limit && hi < 0x1p50)
        hi *= 2;
    double lo = hi / 2;
    while (hi - lo > 1) {
        double mid = floor(0.5 * (lo + hi));
        if (start_error(pl, n, mid) > limit)
            lo = mid;
        else
            hi = mid;
    }
    *reach = (size_t)hi;
    return DK_OK;
}
