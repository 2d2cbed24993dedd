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
#include <stdlib.h>
#include <string.h>

#include "gauss_internal.h"

typedef struct pole {
    double complex r, p;
    double complex lp; /* log p: the kernel as a function of a real x is sum r e^(lp x) */
    int pair;          /* a complex pair: this one and its conjugate */
} pole;

/* Deriche 1993, the Gaussian (order 0): a0, a1, b0, w0, then c0, c1, b1, w1.
 * For the derivatives only his poles are taken (b0, w0, b1, w1 of his first
 * and second derivative fits); their residues are fitted here per sigma. */
static const double deriche_gauss[8] = {1.68, 3.735, 1.783, 0.6318, -0.6803, -0.2598, 1.723, 1.997};
static const double deriche_poles_d1[4] = {1.527, 0.6719, 1.516, 2.072};
static const double deriche_poles_d2[4] = {1.24, 0.748, 1.314, 2.166};

/* van Vliet, Young, Verbeek 1998, the poles d_k for orders 3, 4, 5 (those
 * with Im >= 0; the others are their conjugates), as tabulated by Getreuer. */
static const double complex vyv_poles3[] = {1.41650 + 1.00829 * I, 1.86543};
static const double complex vyv_poles4[] = {1.13228 + 1.28114 * I, 1.78534 + 0.46763 * I};
static const double complex vyv_poles5[] = {0.86430 + 1.45389 * I, 1.61433 + 0.83134 * I, 1.87504};

static int deriche_poles(double sigma, int order, pole *out)
{
    const double *k = deriche_gauss;
    for (int s = 0; s < 2; s++) {
        double a = k[4 * s], b = k[4 * s + 1], decay = k[4 * s + 2], w = k[4 * s + 3];
        if (order > 0) {
            const double *d = order == 1 ? deriche_poles_d1 : deriche_poles_d2;
            decay = d[2 * s], w = d[2 * s + 1];
        }
        /* a cos t + b sin t = Re((a - i b) e^(i t)) = 2 Re(r e^(i t)), r = (a - i b)/2 */
        out[s].r = (a - b * I) / 2.0;
        out[s].lp = (-decay + w * I) / sigma;
        out[s].p = cexp(out[s].lp);
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
    double complex all[5], logs[5];
    int K = 0;
    for (int k = 0; k < nd; k++) {
        logs[K] = -clog(d[k]) / q;
        all[K] = 1.0 / cpow(d[k], 1.0 / q);
        K++;
        if (cimag(d[k]) != 0) {
            logs[K] = conj(logs[K - 1]);
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
        out[n].lp = logs[i];
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

/* The least-squares solution z of A z ~= t (A: nb <= 2 DK_GAUSS_MAX_SECTIONS
 * columns of `rows` values, column-major), by modified Gram-Schmidt
 * (A = Q R, then R z = Q^T t); A is overwritten. 0 where a column is
 * dependent on the ones before. */
static int least_squares(double *A, size_t rows, int nb, const double *t, double *z)
{
    enum { MAXB = 2 * DK_GAUSS_MAX_SECTIONS };
    double R[MAXB][MAXB] = {{0}}, qt[MAXB];
    for (int j = 0; j < nb; j++) {
        double *aj = A + (size_t)j * rows;
        for (int i = 0; i < j; i++) {
            double *qi = A + (size_t)i * rows, dot = 0;
            for (size_t m = 0; m < rows; m++)
                dot += qi[m] * aj[m];
            R[i][j] = dot;
            for (size_t m = 0; m < rows; m++)
                aj[m] -= dot * qi[m];
        }
        double len = 0;
        for (size_t m = 0; m < rows; m++)
            len += aj[m] * aj[m];
        len = sqrt(len);
        if (!(len > 0 && isfinite(len)))
            return 0;
        R[j][j] = len;
        double dot = 0;
        for (size_t m = 0; m < rows; m++) {
            aj[m] /= len;
            dot += aj[m] * t[m];
        }
        qt[j] = dot;
    }
    for (int j = nb - 1; j >= 0; j--) {
        double v = qt[j];
        for (int i = j + 1; i < nb; i++)
            v -= R[j][i] * z[i];
        z[j] = v / R[j][j];
    }
    return 1;
}

/* Derivatives (order 1, 2): the method's poles (Deriche's own for his
 * derivative fits) with residues fitted by least squares to the derivative
 * of the sampled, normalized Gaussian at n = 1 .. ceil(12 sigma) + 8, as
 * dk_gauss_direct samples it; differentiating the fitted Gaussian instead
 * would carry its kink at 0 into the result (Deriche's is 3 % of the first
 * derivative's peak). The kernel is odd for order 1 and even for order 2;
 * its value at 0 is 0 for order 1 and, for order 2, what makes it sum to 0
 * (a constant has no curvature). Two heavily weighted rows of the fit ask
 * for that sum and for the moment a derivative must get right, a ramp's
 * slope for order 1 (sum n h[n] = -1), a parabola's curvature for order 2
 * (sum n^2 h[n] = 2), which a final scaling then makes exact. Without them
 * the fit's small errors, summed over 12 sigma values, would move h[0] by
 * a growing multiple of the peak. *center: the value the sections' own
 * h[0] must be moved by. */
static dk_status derivative_residues(pole *pl, int n, int order, double sigma, double *center)
{
    enum { MAXB = 2 * DK_GAUSS_MAX_SECTIONS };
    size_t N = (size_t)ceil(12.0 * sigma) + 8, rows = N + 2;
    int nb = 0;
    for (int k = 0; k < n; k++)
        nb += pl[k].pair ? 2 : 1;
    double *A = malloc(rows * (size_t)nb * sizeof *A), *t = malloc(rows * sizeof *t);
    if (!A || !t) {
        free(A);
        free(t);
        return DK_ERR_OUT_OF_MEMORY;
    }
    double s2 = sigma * sigma, norm = 1; /* the sampled Gaussian's sum, |n| <= N */
    for (size_t i = 1; i <= N; i++)
        norm += 2.0 * exp(-0.5 * (double)i * (double)i / s2);
    double h0 = order == 1 ? 0.0 : -1.0 / (s2 * norm), peak = 0;
    /* columns: per pair 2 Re(p^n) and -2 Im(p^n) (residue a + ib), per real pole p^n;
     * rows N and N + 1: sum over both halves of h[n] and of n^order h[n] */
    double sum_row[MAXB] = {0}, moment_row[MAXB] = {0};
    for (size_t i = 0; i < N; i++) {
        double x = (double)(i + 1), g = exp(-0.5 * x * x / s2) / norm;
        t[i] = order == 1 ? -x / s2 * g : (x * x / (s2 * s2) - 1.0 / s2) * g;
        peak = fmax(peak, fabs(t[i]));
        int c = 0;
        for (int k = 0; k < n; k++) {
            double complex pn = cexp(pl[k].lp * x);
            double col[2] = {pl[k].pair ? 2.0 * creal(pn) : creal(pn), -2.0 * cimag(pn)};
            for (int e = 0; e < (pl[k].pair ? 2 : 1); e++, c++) {
                A[(size_t)c * rows + i] = col[e];
                sum_row[c] += 2.0 * col[e];
                moment_row[c] += 2.0 * (order == 1 ? x : x * x) * col[e];
            }
        }
    }
    double want_sum = order == 1 ? 0.0 : -h0, want_moment = order == 1 ? -1.0 : 2.0;
    /* weights that make each condition's miss, relative to its value, 1e4
     * times heavier than the samples' misses relative to the peak */
    double ws = order == 1 ? 0.0 : 1e4 * sqrt((double)N) * peak / fabs(want_sum);
    double wm = 1e4 * sqrt((double)N) * peak / fabs(want_moment);
    for (int c = 0; c < nb; c++) {
        A[(size_t)c * rows + N] = order == 1 ? 0.0 : ws * sum_row[c]; /* odd: sums to 0 anyway */
        A[(size_t)c * rows + N + 1] = wm * moment_row[c];
    }
    t[N] = order == 1 ? 0.0 : ws * want_sum;
    t[N + 1] = wm * want_moment;
    double z[MAXB];
    int ok = least_squares(A, rows, nb, t, z);
    free(A);
    free(t);
    if (!ok)
        return DK_ERR_INVALID_ARGUMENT;
    double moment = 0, tail = 0, head = 0;
    for (int k = 0, c = 0; k < n; k++) {
        double complex p = pl[k].p;
        pl[k].r = pl[k].pair ? z[c] + I * z[c + 1] : z[c];
        c += pl[k].pair ? 2 : 1;
        double w = pl[k].pair ? 2.0 : 1.0;
        /* sum over n >= 1 of n p^n and of n^2 p^n */
        double complex m = order == 1 ? p / ((1.0 - p) * (1.0 - p)) : p * (1.0 + p) / cpow(1.0 - p, 3);
        moment += w * creal(pl[k].r * m);
        tail += w * creal(pl[k].r * p / (1.0 - p));
        head += w * creal(pl[k].r);
    }
    /* both halves count: sum over all n is 2 * moment */
    double scale = order == 1 ? -1.0 / (2.0 * moment) : 1.0 / moment;
    for (int k = 0; k < n; k++)
        pl[k].r *= scale;
    double want = order == 1 ? 0.0 : -2.0 * tail * scale;
    *center = want - head * scale;
    return isfinite(*center) ? DK_OK : DK_ERR_INVALID_ARGUMENT;
}

/* The least m whose left-out part (start_error) is under `limit`. */
static size_t reach_for(const pole *pl, int n, double limit)
{
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
    return (size_t)hi;
}

dk_status dk_gauss_iir_make(dk_gauss_method method, int order_poles, int order, double sigma,
                            dk_dtype dtype, dk_gauss_iir *iir, size_t *reach)
{
    pole pl[DK_GAUSS_MAX_SECTIONS];
    int n = method == DK_GAUSS_DERICHE ? deriche_poles(sigma, order, pl) : vyv_poles(sigma, order_poles, pl);
    double sum = kernel_sum(pl, n);
    if (!(isfinite(sum) && sum > 0))
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                       "gauss: the %s coefficients for sigma %g are not finite numbers",
                       dk_gauss_method_name(method), sigma);
    for (int k = 0; k < n; k++)
        pl[k].r /= sum;
    /* the least reach whose left-out part is under a quarter rounding unit,
     * of the Gaussian's and of the derivative's sections, whichever is longer */
    double limit = 0.25 * (dtype == DK_F64 ? 0x1p-53 : 0x1p-24);
    *reach = reach_for(pl, n, limit);
    double center = 0;
    if (order > 0) {
        dk_status st = derivative_residues(pl, n, order, sigma, &center);
        if (st == DK_ERR_OUT_OF_MEMORY)
            return dk_fail(NULL, st, "gauss: out of host memory fitting the %s derivative for sigma %g",
                           dk_gauss_method_name(method), sigma);
        if (st != DK_OK)
            return dk_fail(NULL, st, "gauss: the %s derivative coefficients for sigma %g are not finite numbers",
                           dk_gauss_method_name(method), sigma);
        size_t r = reach_for(pl, n, limit);
        *reach = r > *reach ? r : *reach;
    }
    double odd = order == 1 ? -1.0 : 1.0; /* h[-n] = odd * h[n] */
    memset(iir, 0, sizeof *iir);
    iir->count = n;
    int real_section = -1;
    for (int k = 0; k < n; k++) {
        double complex r = pl[k].r, p = pl[k].p;
        if (pl[k].pair) {
            iir->b0[k] = 2.0 * creal(r);
            iir->b1[k] = -2.0 * creal(r * conj(p));
            iir->a1[k] = -2.0 * creal(p);
            iir->a2[k] = creal(p * conj(p));
            iir->c1[k] = odd * 2.0 * creal(r * p);
            iir->c2[k] = odd * -2.0 * creal(p * conj(p)) * creal(r);
        } else {
            iir->b0[k] = creal(r);
            iir->a1[k] = -creal(p);
            iir->c1[k] = odd * creal(r * p);
            real_section = k;
        }
    }
    if (center != 0) {
        if (real_section >= 0) {
            /* b0 + b1 z^-1 over 1 - p z^-1: h[0] moves by center, h[n >= 1] stays */
            iir->b0[real_section] += center;
            iir->b1[real_section] = -creal(pl[real_section].p) * center;
        } else {
            /* a section with its pole at 0: center times the value itself */
            iir->b0[n] = center;
            iir->count = n + 1;
        }
    }
    return DK_OK;
}
