/* One grid point's LETKF analysis on the host, the definition of
 * dakit/letkf.h written out: the serial reference (libdakit) and the cpu
 * plugin both run it, so the plugin equals the reference bit for bit
 * whatever its thread count. The eigensolver is cyclic Jacobi, which is
 * accurate to rounding for the symmetric positive semidefinite A. */
#ifndef DAKIT_LETKF_ANALYSIS_HOST_H
#define DAKIT_LETKF_ANALYSIS_HOST_H

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/letkf.h>

/* Jacobi sweeps before giving up; a symmetric k x k matrix converges
 * quadratically in well under 20. */
#define DK_LETKF_JACOBI_SWEEPS 30

/* Eigen-decomposition of the symmetric k x k matrix a (row-major, destroyed):
 * a = v diag(lam) v^T, v's columns the eigenvectors. Cyclic Jacobi with
 * Rutishauser's rotation formulas; stops when the off-diagonal part is
 * negligible against the diagonal. */
static inline void dk_letkf_jacobi(int k, double *a, double *v, double *lam)
{
    for (int i = 0; i < k; i++)
        for (int j = 0; j < k; j++)
            v[i * k + j] = i == j ? 1.0 : 0.0;
    for (int sweep = 0; sweep < DK_LETKF_JACOBI_SWEEPS; sweep++) {
        double off = 0.0, diag = 0.0;
        for (int i = 0; i < k; i++) {
            diag += a[i * k + i] * a[i * k + i];
            for (int j = i + 1; j < k; j++)
                off += a[i * k + j] * a[i * k + j];
        }
        if (off <= DBL_EPSILON * DBL_EPSILON * 1e-2 * diag || off < DBL_MIN)
            break;
        for (int p = 0; p < k - 1; p++)
            for (int q = p + 1; q < k; q++) {
                double apq = a[p * k + q];
                if (apq == 0.0)
                    continue;
                double theta = (a[q * k + q] - a[p * k + p]) / (2.0 * apq);
                double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
                double c = 1.0 / sqrt(t * t + 1.0), s = t * c, tau = s / (1.0 + c);
                a[p * k + p] -= t * apq;
                a[q * k + q] += t * apq;
                a[p * k + q] = a[q * k + p] = 0.0;
                for (int r = 0; r < k; r++) {
                    if (r != p && r != q) {
                        double arp = a[r * k + p], arq = a[r * k + q];
                        a[r * k + p] = a[p * k + r] = arp - s * (arq + tau * arp);
                        a[r * k + q] = a[q * k + r] = arq + s * (arp - tau * arq);
                    }
                    double vrp = v[r * k + p], vrq = v[r * k + q];
                    v[r * k + p] = vrp - s * (vrq + tau * vrp);
                    v[r * k + q] = vrq + s * (vrp - tau * vrq);
                }
            }
    }
    for (int i = 0; i < k; i++)
        lam[i] = a[i * k + i];
}

/* Scratch for one point: sized for k members and up to cap candidates. */
typedef struct dk_letkf_scratch {
    int k;
    size_t cap;
    int32_t *idx;  /* cap: candidate observations (sorted positions) */
    double *rho;   /* cap */
    double *A, *Q, *W; /* k * k each */
    double *lam, *b, *w, *x, *a; /* k each */
} dk_letkf_scratch;

static inline void dk_letkf_scratch_free(dk_letkf_scratch *s)
{
    free(s->idx), free(s->rho), free(s->A), free(s->Q), free(s->W);
    free(s->lam), free(s->b), free(s->w), free(s->x), free(s->a);
    memset(s, 0, sizeof *s);
}

/* 0 on success, -1 when out of memory (s then freed). */
static inline int dk_letkf_scratch_make(dk_letkf_scratch *s, int k, size_t cap)
{
    memset(s, 0, sizeof *s);
    s->k = k;
    s->cap = cap ? cap : 1;
    size_t kk = (size_t)k * (size_t)k;
    s->idx = (int32_t *)malloc(s->cap * sizeof *s->idx);
    s->rho = (double *)malloc(s->cap * sizeof *s->rho);
    s->A = (double *)malloc(kk * sizeof(double));
    s->Q = (double *)malloc(kk * sizeof(double));
    s->W = (double *)malloc(kk * sizeof(double));
    s->lam = (double *)malloc((size_t)k * sizeof(double));
    s->b = (double *)malloc((size_t)k * sizeof(double));
    s->w = (double *)malloc((size_t)k * sizeof(double));
    s->x = (double *)malloc((size_t)k * sizeof(double));
    s->a = (double *)malloc((size_t)k * sizeof(double));
    if (!s->idx || !s->rho || !s->A || !s->Q || !s->W || !s->lam || !s->b || !s->w || !s->x || !s->a) {
        dk_letkf_scratch_free(s);
        return -1;
    }
    return 0;
}

/* The observation space of the j-th sorted observation: its perturbations
 * Yb[o, :] - mean into yp (k values), the departure yo[o] - mean into *dep
 * and 1 / r[o] into *rinv, o = obs_order[j] its original index. yb is m x k
 * of the setup's dtype, yo and r are in the original order. */
static inline void dk_letkf_obs_row(const dk_letkf_setup *su, const void *yb, const double *yo, const double *r,
                                    size_t j, double *yp, double *dep, double *rinv)
{
    const size_t k = su->desc.members, o = (size_t)su->obs_order[j];
    double mean = 0.0;
    for (size_t l = 0; l < k; l++) {
        yp[l] = su->desc.dtype == DK_F32 ? (double)((const float *)yb)[o * k + l] : ((const double *)yb)[o * k + l];
        mean += yp[l];
    }
    mean /= (double)k;
    for (size_t l = 0; l < k; l++)
        yp[l] -= mean;
    *dep = yo[o] - mean;
    *rinv = 1.0 / r[o];
}

/* Index of key in the ascending keys[0 .. cells), or -1. */
static inline long dk_letkf_find_cell(const uint64_t *keys, size_t cells, uint64_t key)
{
    size_t lo = 0, hi = cells;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (keys[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < cells && keys[lo] == key ? (long)lo : -1;
}

/* The observations of the point at position pos: their sorted positions
 * in s->idx and weights in s->rho (every rho > 0; at most max_obs of the
 * largest rho, ties to the lower original index, when max_obs > 0).
 * Returns how many, or -1 when more than s->cap candidates were found
 * (the caller grows the scratch and asks again). */
static inline long dk_letkf_select(const dk_letkf_setup *su, const double *pos, dk_letkf_scratch *s)
{
    const dk_letkf_geometry *g = &su->geo;
    int b[DK_LETKF_POS] = {0, 0, 0, 0};
    for (int a = 0; a < g->dims; a++)
        b[a] = dk_letkf_cell(g, a, pos[a]);
    int visits = dk_letkf_visits(g);
    size_t count = 0;
    for (int t = 0; t < visits; t++) {
        uint64_t key;
        if (!dk_letkf_visit_key(g, b, t, &key))
            continue;
        long c = dk_letkf_find_cell(su->cell_key, su->cells, key);
        if (c < 0)
            continue;
        for (int32_t j = su->cell_start[c]; j < su->cell_start[c + 1]; j++) {
            double rho = dk_letkf_weight(g, pos, su->obs_pos + (size_t)j * DK_LETKF_POS);
            if (rho <= 0.0)
                continue;
            if (count == s->cap)
                return -1;
            s->idx[count] = j;
            s->rho[count] = rho;
            count++;
        }
    }
    size_t cap = su->desc.max_obs;
    if (cap > 0 && count > cap) {
        /* partial selection sort: the cap largest weights to the front */
        for (size_t i = 0; i < cap; i++) {
            size_t best = i;
            for (size_t j = i + 1; j < count; j++) {
                double rj = s->rho[j], rb = s->rho[best];
                if (rj > rb || (rj == rb && su->obs_order[s->idx[j]] < su->obs_order[s->idx[best]]))
                    best = j;
            }
            double tr = s->rho[i];
            int32_t ti = s->idx[i];
            s->rho[i] = s->rho[best], s->idx[i] = s->idx[best];
            s->rho[best] = tr, s->idx[best] = ti;
        }
        count = cap;
    }
    return (long)count;
}

/* dk_letkf_select with the scratch grown (doubled, at most to M) until the
 * candidates fit; -1 when host memory ran out (the scratch then freed or
 * partly made: dk_letkf_scratch_free releases it either way). */
static inline long dk_letkf_select_grown(const dk_letkf_setup *su, const double *pos, dk_letkf_scratch *s)
{
    const size_t m = su->desc.m;
    long nsel;
    while ((nsel = dk_letkf_select(su, pos, s)) < 0) {
        size_t grow = s->cap * 2 < m ? s->cap * 2 : m;
        dk_letkf_scratch_free(s);
        if (dk_letkf_scratch_make(s, (int)su->desc.members, grow))
            return -1;
    }
    return nsel;
}

/* The first half of one point's analysis, from its selection (s->idx,
 * s->rho, nsel): the perturbations of x (the point's k background values)
 * into s->x, and A (full, symmetric) and b into s->A, s->b. yp: the M x k
 * observation perturbations and dep: the M departures yo - mean(Yb), both
 * in sorted observation order; rinv: 1 / r in sorted order. Returns the
 * background mean. */
static inline double dk_letkf_point_system(dk_letkf_scratch *s, long nsel, const double *yp, const double *dep,
                                           const double *rinv, const double *x)
{
    const int k = s->k;
    const size_t kk = (size_t)k * (size_t)k;
    double xm = 0.0;
    for (int l = 0; l < k; l++)
        xm += x[l];
    xm /= k;
    for (int l = 0; l < k; l++)
        s->x[l] = x[l] - xm;
    memset(s->A, 0, kk * sizeof(double));
    memset(s->b, 0, (size_t)k * sizeof(double));
    for (long q = 0; q < nsel; q++) {
        size_t j = (size_t)s->idx[q];
        double wj = s->rho[q] * rinv[j];
        const double *y = yp + j * (size_t)k;
        for (int l = 0; l < k; l++) {
            double wy = wj * y[l];
            s->b[l] += wy * dep[j];
            for (int m = 0; m <= l; m++)
                s->A[(size_t)l * k + m] += wy * y[m];
        }
    }
    for (int l = 0; l < k; l++)
        for (int m = 0; m < l; m++)
            s->A[(size_t)m * k + l] = s->A[(size_t)l * k + m];
    return xm;
}

/* The weights from A's eigen-decomposition (s->Q, s->lam, destroyed) and
 * s->b: the mean weights into s->w, W (RTPP applied) into s->W. */
static inline void dk_letkf_point_weights(const dk_letkf_setup *su, dk_letkf_scratch *s)
{
    const int k = s->k;
    const double g = (double)(k - 1) / su->desc.inflation;
    /* w = Q diag(1 / (g + lam)) Q^T b; W = Q diag(sqrt((k - 1) / (g + lam))) Q^T */
    for (int e = 0; e < k; e++) {
        double qb = 0.0;
        for (int l = 0; l < k; l++)
            qb += s->Q[(size_t)l * k + e] * s->b[l];
        s->a[e] = qb / (g + s->lam[e]);
    }
    for (int l = 0; l < k; l++) {
        double sum = 0.0;
        for (int e = 0; e < k; e++)
            sum += s->Q[(size_t)l * k + e] * s->a[e];
        s->w[l] = sum;
    }
    for (int e = 0; e < k; e++)
        s->lam[e] = sqrt((double)(k - 1) / (g + s->lam[e]));
    const double rtpp = su->desc.rtpp;
    for (int l = 0; l < k; l++)
        for (int m = 0; m <= l; m++) {
            double sum = 0.0;
            for (int e = 0; e < k; e++)
                sum += s->Q[(size_t)l * k + e] * s->lam[e] * s->Q[(size_t)m * k + e];
            if (rtpp > 0.0)
                sum = (1.0 - rtpp) * sum + (l == m ? rtpp : 0.0);
            s->W[(size_t)l * k + m] = s->W[(size_t)m * k + l] = sum;
        }
}

/* The point's k analysis values into xa from xam (the mean's analysis)
 * and a (the analysis perturbations, RTPP applied), with s->x the
 * background's perturbations: RTPS, then xa = xam + factor a. Returns the
 * analysis spread. */
static inline double dk_letkf_point_tail(const dk_letkf_setup *su, const dk_letkf_scratch *s, double xam,
                                         const double *a, double *xa)
{
    const int k = s->k;
    const double rtps = su->desc.rtps;
    double sb = 0.0, sa = 0.0;
    for (int m = 0; m < k; m++) {
        sb += s->x[m] * s->x[m];
        sa += a[m] * a[m];
    }
    sb = sqrt(sb / (k - 1));
    sa = sqrt(sa / (k - 1));
    double factor = rtps > 0.0 && sa > 0.0 ? 1.0 + rtps * (sb - sa) / sa : 1.0;
    double mean = 0.0;
    for (int m = 0; m < k; m++) {
        xa[m] = xam + factor * a[m];
        mean += xa[m];
    }
    mean /= k;
    double spread = 0.0;
    for (int m = 0; m < k; m++)
        spread += (xa[m] - mean) * (xa[m] - mean);
    return sqrt(spread / (k - 1));
}

/* The second half, from A's eigenvectors s->Q (row-major, column e the e-th)
 * and eigenvalues s->lam, with s->x and s->b from dk_letkf_point_system and
 * xm the background mean: the point's k analysis values into xa (may be
 * the background's own array). Returns the analysis spread. */
static inline double dk_letkf_point_finish(const dk_letkf_setup *su, dk_letkf_scratch *s, double xm, double *xa)
{
    const int k = s->k;
    dk_letkf_point_weights(su, s);
    double xam = xm;
    for (int l = 0; l < k; l++)
        xam += s->x[l] * s->w[l];
    for (int m = 0; m < k; m++) {
        double am = 0.0;
        for (int l = 0; l < k; l++)
            am += s->x[l] * s->W[(size_t)l * k + m];
        s->a[m] = am;
    }
    return dk_letkf_point_tail(su, s, xam, s->a, xa);
}

/* The analysis of one point from its selection (s->idx, s->rho, nsel),
 * with A's eigen-decomposition by cyclic Jacobi: dk_letkf_point_system,
 * dk_letkf_jacobi, dk_letkf_point_finish. x: the point's k background
 * values (read), xa: its k analysis values (written; may be x). Returns the
 * analysis spread. */
static inline double dk_letkf_point(const dk_letkf_setup *su, dk_letkf_scratch *s, long nsel, const double *yp,
                                    const double *dep, const double *rinv, const double *x, double *xa)
{
    double xm = dk_letkf_point_system(s, nsel, yp, dep, rinv, x);
    dk_letkf_jacobi(s->k, s->A, s->Q, s->lam);
    return dk_letkf_point_finish(su, s, xm, xa);
}

/* The transform of a point whose weights dk_letkf_point_weights left in
 * s->w, s->W: T[l,m] = W[l,m] + w_l (k x k). */
static inline void dk_letkf_point_transform(const dk_letkf_scratch *s, double *T)
{
    const int k = s->k;
    for (int l = 0; l < k; l++)
        for (int m = 0; m < k; m++)
            T[(size_t)l * k + m] = s->W[(size_t)l * k + m] + s->w[l];
}

/* One grid point of weight interpolation (dakit/letkf.h): x its k
 * background values, T its interpolated transform (k x k), xa its k
 * analysis values (may be x); rtps the relaxation weight. Returns the
 * analysis spread. */
static inline double dk_letkf_apply_transform(int k, double rtps, const double *x, const double *T, double *xa)
{
    double xp[DK_LETKF_MAX_MEMBERS], a[DK_LETKF_MAX_MEMBERS];
    double xm = 0.0;
    for (int l = 0; l < k; l++)
        xm += x[l];
    xm /= k;
    for (int l = 0; l < k; l++)
        xp[l] = x[l] - xm;
    double am = 0.0;
    for (int m = 0; m < k; m++) {
        double v = 0.0;
        for (int l = 0; l < k; l++)
            v += xp[l] * T[(size_t)l * k + m];
        a[m] = v;
        am += v;
    }
    am /= k;
    double sb = 0.0, sa = 0.0;
    for (int m = 0; m < k; m++) {
        a[m] -= am;
        sb += xp[m] * xp[m];
        sa += a[m] * a[m];
    }
    sb = sqrt(sb / (k - 1));
    sa = sqrt(sa / (k - 1));
    double factor = rtps > 0.0 && sa > 0.0 ? 1.0 + rtps * (sb - sa) / sa : 1.0;
    for (int m = 0; m < k; m++)
        xa[m] = xm + am + factor * a[m];
    return factor * sa;
}

#endif
