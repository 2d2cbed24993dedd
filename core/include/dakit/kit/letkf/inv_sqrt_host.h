/* x^(-1/2) on [1, kappa] as a sum of shifted inverses, for the analyses
 * that apply A^(-1/2) to a vector by n shifted solves instead of an
 * eigen-decomposition (the cuda plugin's warp variant, one tridiagonal
 * solve a lane; the cpu plugin's solves, one dptsv each).
 *
 * Zolotarev's best rational approximation of type (n, n) in the relative
 * sense (Zolotarev 1877; Petrushev & Popov 1987, ch. 4; in partial
 * fractions as lattice QCD uses it for the overlap operator, van den Eshof
 * et al. 2002, Comput. Phys. Commun. 146):
 *
 *   x^(-1/2) ~ scale * (1 + sum_l weight[l] / (x + shift[l])),
 *
 * shift[l] = c_(2l+1) (the odd ones of c_j = sn^2 / cn^2 (j K / (2n + 1) |
 * 1 - 1 / kappa), j = 1 .. 2n), weight[l] > 0 the residues, scale setting
 * the error to equioscillate. The relative error's extremes lie at both
 * ends of [1, kappa], so its size is |scale * (1 + sum ...) at x = 1, less
 * 1|, which the function returns: 2e-14 for n = 31 and kappa = 1e7, 7e-13
 * for kappa = 1e8. Every shift is positive, so each shifted system of a
 * positive semidefinite matrix is positive definite, and the weights are
 * positive, so the sum cancels nothing. */
#ifndef DAKIT_LETKF_INV_SQRT_HOST_H
#define DAKIT_LETKF_INV_SQRT_HOST_H

#include <math.h>

/* The analyses' choice: 31 shifts (with the solve for the mean, 32: a
 * warp's lanes on cuda) over [1, 1e7] in units of g, 2.0e-14 relative. A
 * point whose spectrum reaches beyond takes an eigensolver. */
#define DK_LETKF_POLES 31
#define DK_LETKF_KAPPA 1e7

/* sn and cn of (u | m) by the arithmetic-geometric mean and descending
 * Landen steps (Abramowitz & Stegun 16.4), m1 = 1 - m given apart so that
 * m near 1 keeps its digits. */
static inline void dk_letkf_sncn(long double u, long double m, long double m1, long double *sn, long double *cn)
{
    long double a[40], c[40];
    long double b = sqrtl(m1);
    a[0] = 1.0L;
    c[0] = sqrtl(m);
    int n = 0;
    while (n < 38 && fabsl(c[n]) > 1e-19L * a[n]) {
        const long double an = 0.5L * (a[n] + b);
        c[n + 1] = 0.5L * (a[n] - b);
        b = sqrtl(a[n] * b);
        a[n + 1] = an;
        n++;
    }
    long double phi = ldexpl(a[n] * u, n);
    for (; n > 0; n--)
        phi = 0.5L * (phi + asinl(c[n] * sinl(phi) / a[n]));
    *sn = sinl(phi);
    *cn = cosl(phi);
}

/* Fills shift[0 .. n) and weight[0 .. n) and *scale for x^(-1/2) on [1,
 * kappa] (kappa > 1, 1 <= n <= 64); returns the largest relative error. */
static inline double dk_letkf_inv_sqrt_poles(int n, double kappa, double *shift, double *weight, double *scale)
{
    long double c[128];
    const long double m1 = 1.0L / (long double)kappa, m = 1.0L - m1;
    /* K(m) = pi / (2 agm(1, sqrt(1 - m))) */
    long double a = 1.0L, b = sqrtl(m1);
    for (int it = 0; it < 40 && fabsl(a - b) > 1e-19L * a; it++) {
        const long double an = 0.5L * (a + b);
        b = sqrtl(a * b);
        a = an;
    }
    const long double K = 3.14159265358979323846264338327950288L / (2.0L * a);
    for (int j = 1; j <= 2 * n; j++) {
        long double sn, cn;
        dk_letkf_sncn((long double)j * K / (2 * n + 1), m, m1, &sn, &cn);
        c[j - 1] = sn * sn / (cn * cn);
    }
    long double r1 = 1.0L, rk = 1.0L; /* the sum at x = 1 and x = kappa */
    for (int l = 0; l < n; l++) {
        const long double p = c[2 * l];
        long double w = 1.0L;
        for (int i = 0; i < n; i++) {
            w *= c[2 * i + 1] - p;
            if (i != l)
                w /= c[2 * i] - p;
        }
        shift[l] = (double)p;
        weight[l] = (double)w;
        r1 += w / (1.0L + p);
        rk += w / ((long double)kappa + p);
    }
    const long double s = 2.0L / (r1 + rk * sqrtl((long double)kappa));
    *scale = (double)s;
    return (double)fabsl(s * r1 - 1.0L);
}

/* The analysis's use of it for k members and prior inflation infl, g = (k
 * - 1) / infl: sqrt((k - 1) / (g + T)) ~ scale I + sum_l weight[l] (T +
 * shift[l])^-1 on T's spectrum in [0, (DK_LETKF_KAPPA - 1) g], for
 * DK_LETKF_POLES shifts (sqrt(k - 1) (g + t)^(-1/2) = sqrt((k - 1) / g)
 * x^(-1/2) at x = 1 + t / g, and 1 / (x + c) = g / (t + g (1 + c))).
 * Returns the approximation's relative error. */
static inline double dk_letkf_solves_setup(int k, double infl, double *shift, double *weight, double *scale)
{
    double c[DK_LETKF_POLES], w[DK_LETKF_POLES], s;
    const double err = dk_letkf_inv_sqrt_poles(DK_LETKF_POLES, DK_LETKF_KAPPA, c, w, &s);
    const double g = (double)(k - 1) / infl, outer = sqrt((double)(k - 1) / g) * s;
    for (int l = 0; l < DK_LETKF_POLES; l++) {
        shift[l] = g * (1.0 + c[l]);
        weight[l] = outer * g * w[l];
    }
    *scale = outer;
    return err;
}

#endif
