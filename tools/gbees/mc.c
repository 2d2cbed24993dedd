/* Monte Carlo check of a GBEES snapshot: samples of the initial Gaussian
 * carried by the same f, a kernel density estimate at the cell centres, and
 * the Bhattacharyya coefficient between the two. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/kit/gbees/hash.h>
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/npy.h"
#include "gbees/mc.h"
#include "gbees/snapshot.h"

/* Dormand-Prince 5(4) with its error estimate steering the step. */
static void rk45(const dk_gbees_model *m, int d, double *x, double t_end)
{
    static const double c2 = 1.0 / 5, c3 = 3.0 / 10, c4 = 4.0 / 5, c5 = 8.0 / 9;
    static const double a21 = 1.0 / 5, a31 = 3.0 / 40, a32 = 9.0 / 40, a41 = 44.0 / 45, a42 = -56.0 / 15,
                        a43 = 32.0 / 9, a51 = 19372.0 / 6561, a52 = -25360.0 / 2187, a53 = 64448.0 / 6561,
                        a54 = -212.0 / 729, a61 = 9017.0 / 3168, a62 = -355.0 / 33, a63 = 46732.0 / 5247,
                        a64 = 49.0 / 176, a65 = -5103.0 / 18656, b1 = 35.0 / 384, b3 = 500.0 / 1113,
                        b4 = 125.0 / 192, b5 = -2187.0 / 6784, b6 = 11.0 / 84;
    static const double e1 = 71.0 / 57600, e3 = -71.0 / 16695, e4 = 71.0 / 1920, e5 = -17253.0 / 339200,
                        e6 = 22.0 / 525, e7 = -1.0 / 40;
    (void)c2, (void)c3, (void)c4, (void)c5;
    double t = 0.0, h = 1e-3, tol = 1e-10;
    double k1[DK_GBEES_MAX_DIM], k2[DK_GBEES_MAX_DIM], k3[DK_GBEES_MAX_DIM], k4[DK_GBEES_MAX_DIM],
        k5[DK_GBEES_MAX_DIM], k6[DK_GBEES_MAX_DIM], k7[DK_GBEES_MAX_DIM], y[DK_GBEES_MAX_DIM],
        z[DK_GBEES_MAX_DIM];
    m->f(d, x, m->coef, k1);
    while (t < t_end) {
        if (t + h > t_end)
            h = t_end - t;
        for (int i = 0; i < d; i++) y[i] = x[i] + h * a21 * k1[i];
        m->f(d, y, m->coef, k2);
        for (int i = 0; i < d; i++) y[i] = x[i] + h * (a31 * k1[i] + a32 * k2[i]);
        m->f(d, y, m->coef, k3);
        for (int i = 0; i < d; i++) y[i] = x[i] + h * (a41 * k1[i] + a42 * k2[i] + a43 * k3[i]);
        m->f(d, y, m->coef, k4);
        for (int i = 0; i < d; i++) y[i] = x[i] + h * (a51 * k1[i] + a52 * k2[i] + a53 * k3[i] + a54 * k4[i]);
        m->f(d, y, m->coef, k5);
        for (int i = 0; i < d; i++)
            y[i] = x[i] + h * (a61 * k1[i] + a62 * k2[i] + a63 * k3[i] + a64 * k4[i] + a65 * k5[i]);
        m->f(d, y, m->coef, k6);
        for (int i = 0; i < d; i++)
            z[i] = x[i] + h * (b1 * k1[i] + b3 * k3[i] + b4 * k4[i] + b5 * k5[i] + b6 * k6[i]);
        m->f(d, z, m->coef, k7);
        double err = 0.0;
        for (int i = 0; i < d; i++) {
            double e = h * (e1 * k1[i] + e3 * k3[i] + e4 * k4[i] + e5 * k5[i] + e6 * k6[i] + e7 * k7[i]);
            double sc = tol * (1.0 + fmax(fabs(x[i]), fabs(z[i])));
            err = fmax(err, fabs(e) / sc);
        }
        if (err <= 1.0 || h < 1e-12) {
            t += h;
            memcpy(x, z, d * sizeof *x);
            memcpy(k1, k7, d * sizeof *k1);
        }
        double grow = err > 0 ? 0.9 * pow(err, -0.2) : 5.0;
        h *= fmin(5.0, fmax(0.2, grow));
    }
}

static int cholesky(const double *a, int n, double *l)
{
    memset(l, 0, (size_t)n * n * sizeof *l);
    for (int j = 0; j < n; j++) {
        double s = a[j * n + j];
        for (int k = 0; k < j; k++)
            s -= l[j * n + k] * l[j * n + k];
        if (!(s > 0.0))
            return -1;
        l[j * n + j] = sqrt(s);
        for (int i = j + 1; i < n; i++) {
            double t = a[i * n + j];
            for (int k = 0; k < j; k++)
                t -= l[i * n + k] * l[j * n + k];
            l[i * n + j] = t / l[j * n + j];
        }
    }
    return 0;
}

/* y = L^-1 (x - mu) */
static void whiten(const double *l, int d, const double *mu, const double *x, double *y)
{
    for (int i = 0; i < d; i++) {
        double t = x[i] - mu[i];
        for (int k = 0; k < i; k++)
            t -= l[i * d + k] * y[k];
        y[i] = t / l[i * d + i];
    }
}

static double normal(uint64_t *s)
{
    double u = 0.5 * (cli_random(s) + 1.0), v = 0.5 * (cli_random(s) + 1.0);
    if (u < 1e-300)
        u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

/* The kernel bin of a whitened coordinate. A cell far from every sample
 * (a snapshot's centres are read from a file) has no samples near it
 * anyway: its bin is clamped, never an overflowing conversion. */
static int32_t bin_of(double y, double reach)
{
    double b = floor(y / reach);
    if (!(b > -(double)(1 << 30)))
        return -(1 << 30);
    if (b > (double)(1 << 30))
        return 1 << 30;
    return (int32_t)b;
}

typedef struct bin_sort {
    int32_t key[DK_GBEES_MAX_DIM];
    size_t sample;
} bin_sort;

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int dim_for_sort;
static int by_key(const void *a, const void *b)
{
    return memcmp(((const bin_sort *)a)->key, ((const bin_sort *)b)->key, dim_for_sort * sizeof(int32_t));
}

int gbees_cell_widths(const double *rows, size_t cells, int d, double *dx)
{
    double *c = malloc(cells * sizeof *c);
    if (!c)
        return -1;
    int ok = 0;
    for (int i = 0; i < d; i++) {
        for (size_t k = 0; k < cells; k++)
            c[k] = rows[k * (d + 1) + i];
        qsort(c, cells, sizeof *c, by_double);
        double gap = INFINITY, scale = fmax(fabs(c[0]), fabs(c[cells - 1]));
        for (size_t k = 1; k < cells; k++) {
            double g = c[k] - c[k - 1];
            if (g > 1e-9 * (1.0 + scale) && g < gap)
                gap = g;
        }
        dx[i] = gap;
        ok += isfinite(gap);
    }
    free(c);
    return ok == d ? 0 : -1;
}

/* The 3^d bins around home (-1 where a bin holds no sample). */
static void neighbour_bins(const gb_hash *ht, const int32_t *bin_keys, const int32_t *home, int d, int neighbours,
                           int32_t *list)
{
    int32_t k[DK_GBEES_MAX_DIM];
    for (int nb = 0; nb < neighbours; nb++) {
        int code = nb;
        for (int i = 0; i < d; i++) {
            k[i] = home[i] + code % 3 - 1;
            code /= 3;
        }
        list[nb] = gb_hash_find(ht, bin_keys, k);
    }
}

/* sum over samples of exp(-r^2 / 2) at the whitened point yc, r < reach,
 * from the listed bins (ys: whitened samples in bin order); bins whose box
 * lies beyond the reach are skipped whole. */
static double kernel_sum(const double *yc, const int32_t *list, int neighbours, const int32_t *bin_keys,
                         const size_t *bin_start, const double *ys, int d, double reach)
{
    double sum = 0.0;
    for (int nb = 0; nb < neighbours; nb++) {
        if (list[nb] < 0)
            continue;
        const int32_t *bk = bin_keys + (size_t)list[nb] * d;
        double gap2 = 0.0;
        for (int i = 0; i < d; i++) {
            double lo = bk[i] * reach - yc[i], hi = yc[i] - (bk[i] + 1) * reach;
            double g = lo > 0.0 ? lo : hi > 0.0 ? hi : 0.0;
            gap2 += g * g;
        }
        if (gap2 >= reach * reach)
            continue;
        for (size_t s = bin_start[list[nb]]; s < bin_start[list[nb] + 1]; s++) {
            const double *y = ys + s * d;
            double r2 = 0.0;
            for (int i = 0; i < d; i++)
                r2 += (yc[i] - y[i]) * (yc[i] - y[i]);
            if (r2 < reach * reach)
                sum += exp(-0.5 * r2);
        }
    }
    return sum;
}

/* For snapshots too large to estimate the density at every cell: draws
 * cells by their GBEES probability p and estimates q (the kernel estimate's
 * cell probability, as the exact path computes it) at those. With ratio
 * r = q / p, sum_S q = p(S) E[r | S], so the coefficient on S (the support,
 * or all cells) is E[sqrt(r)] / sqrt(E[r]) over the draws in S: the exact
 * path's normalization, estimated. Standard error from 20 batches. */
static dk_status sampled_bc(const double *rows, size_t cells, int d, double threshold, const double *l,
                            const double *mu, const double *ys_sorted,
                            const gb_hash *ht, const int32_t *bin_keys, const size_t *bin_start, int neighbours,
                            double reach, double norm, size_t draws, uint64_t seed, gbees_mc_result *res, char *err,
                            size_t len)
{
    dk_status st = DK_OK;
    double *cum = malloc(cells * sizeof *cum);
    size_t *picked = malloc(draws * sizeof *picked);
    double *ratio = malloc(draws * sizeof *ratio);
    if (!cum || !picked || !ratio) {
        snprintf(err, len, "Monte Carlo: out of memory for %zu cells", cells);
        st = DK_ERR_OUT_OF_MEMORY;
        goto done;
    }
    double ps = 0.0, pk = 0.0;
    for (size_t c = 0; c < cells; c++) {
        double p = fmax(rows[c * (d + 1) + d], 0.0);
        ps += p;
        cum[c] = ps;
        if (p >= threshold) {
            pk += p;
            res->support++;
        }
    }
    if (!(pk > 0.0)) {
        snprintf(err, len, "Monte Carlo: no GBEES cell at or above the threshold %g", threshold);
        st = DK_ERR_INVALID_ARGUMENT;
        goto done;
    }
    uint64_t state = gb_mix64(seed ^ 0x5bd1e995u);
    for (size_t m = 0; m < draws; m++) {
        double u = 0.5 * (cli_random(&state) + 1.0) * ps;
        size_t lo = 0, hi = cells - 1;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (cum[mid] < u)
                lo = mid + 1;
            else
                hi = mid;
        }
        picked[m] = lo;
    }
    int failed = 0;
#pragma omp parallel reduction(| : failed)
    {
        int32_t *list = malloc(neighbours * sizeof *list);
        failed |= list == NULL;
#pragma omp for schedule(dynamic, 64)
        for (size_t m = 0; m < draws; m++) {
            if (!list)
                continue;
            size_t c = picked[m];
            double yc[DK_GBEES_MAX_DIM];
            int32_t home[DK_GBEES_MAX_DIM];
            whiten(l, d, mu, rows + c * (d + 1), yc);
            for (int i = 0; i < d; i++)
                home[i] = bin_of(yc[i], reach);
            neighbour_bins(ht, bin_keys, home, d, neighbours, list);
            double q = kernel_sum(yc, list, neighbours, bin_keys, bin_start, ys_sorted, d, reach) * norm;
            double p = rows[c * (d + 1) + d];
            ratio[m] = p > 0.0 ? q / p : 0.0; /* drawn by p: p = 0 only at u = 0 exactly */
        }
        free(list);
    }
    if (failed) {
        snprintf(err, len, "Monte Carlo: out of memory for the kernel sums");
        st = DK_ERR_OUT_OF_MEMORY;
        goto done;
    }
    /* Self-normalized: sum_S q_c = pk E[q_c / p_c | S], so the
     * coefficient is E[sqrt(q/p)] / sqrt(E[q/p]) over the draws in S (and
     * likewise over all cells), the same normalization as the exact path;
     * the standard error from 20 batches of the draws. */
    enum { BATCHES = 20 };
    double root[BATCHES] = {0}, lin[BATCHES] = {0}, root_all = 0.0, lin_all = 0.0;
    size_t in_batch[BATCHES] = {0}, nkept = 0;
    for (size_t m = 0; m < draws; m++) {
        root_all += sqrt(ratio[m]);
        lin_all += ratio[m];
        if (rows[picked[m] * (d + 1) + d] >= threshold) {
            int b = (int)(m % BATCHES);
            root[b] += sqrt(ratio[m]);
            lin[b] += ratio[m];
            in_batch[b]++;
            nkept++;
        }
    }
    double root_s = 0.0, lin_s = 0.0;
    for (int b = 0; b < BATCHES; b++) {
        root_s += root[b];
        lin_s += lin[b];
    }
    if (!(lin_s > 0.0) || !(lin_all > 0.0)) {
        snprintf(err, len, "Monte Carlo: no sample lies near the snapshot's cells at or above the threshold %g",
                 threshold);
        st = DK_ERR_INVALID_ARGUMENT;
        goto done;
    }
    res->bc = root_s / sqrt(lin_s * (double)nkept);
    res->bc_all = root_all / sqrt(lin_all * (double)draws);
    double mean = 0.0, var = 0.0, per[BATCHES];
    for (int b = 0; b < BATCHES; b++) {
        per[b] = in_batch[b] && lin[b] > 0.0 ? root[b] / sqrt(lin[b] * (double)in_batch[b]) : res->bc;
        mean += per[b] / BATCHES;
    }
    for (int b = 0; b < BATCHES; b++)
        var += (per[b] - mean) * (per[b] - mean) / (BATCHES - 1);
    res->bc_se = sqrt(var / BATCHES);
    double qs = ps * lin_all / (double)draws, qk = pk * lin_s / (double)nkept;
    res->kde_mass = qs;
    res->kde_mass_support = qk;
    res->gbees_mass_support = pk / ps;
    res->draws = nkept;
done:
    free(cum);
    free(picked);
    free(ratio);
    return st;
}

dk_status gbees_mc_bc(const dk_gbees_model *model, const dk_gbees_meas *meas0, double t, size_t n,
                      uint64_t seed, const double *rows, size_t cells, int d, double threshold, size_t draws,
                      gbees_mc_result *res, char *err, size_t len)
{
    if (d != meas0->dim || n < 10 || cells == 0 || !(threshold >= 0.0)) {
        snprintf(err, len,
                 "Monte Carlo: the snapshot has dimension %d, the measurement %d; %zu samples, %zu cells, threshold %g",
                 d, meas0->dim, n, cells, threshold);
        return DK_ERR_INVALID_ARGUMENT;
    }
    memset(res, 0, sizeof *res);
    double l0[DK_GBEES_MAX_DIM * DK_GBEES_MAX_DIM], dx[DK_GBEES_MAX_DIM];
    if (cholesky(meas0->cov, d, l0) != 0) {
        snprintf(err, len, "Monte Carlo: the initial covariance is not positive definite");
        return DK_ERR_INVALID_ARGUMENT;
    }
    if (cells < 2 || gbees_cell_widths(rows, cells, d, dx) != 0) {
        snprintf(err, len, "Monte Carlo: the snapshot's %zu cells do not show the cell width along every axis", cells);
        return DK_ERR_INVALID_ARGUMENT;
    }
    double *x = malloc(n * d * sizeof *x), *y = malloc(n * d * sizeof *y), *q = draws ? NULL : malloc(cells * sizeof *q);
    bin_sort *bs = malloc(n * sizeof *bs);
    int32_t *bin_keys = malloc(n * d * sizeof *bin_keys);
    size_t *bin_start = malloc((n + 1) * sizeof *bin_start);
    gb_hash ht = {0}, home_ht = {0};
    int32_t *cell_bin = NULL, *home_keys = NULL, *group_bins = NULL;
    size_t *group_start = NULL, *group_cells = NULL;
    dk_status st = DK_OK;
    if (!x || !y || (!q && !draws) || !bs || !bin_keys || !bin_start || gb_hash_init(&ht, d, n) != 0) {
        snprintf(err, len, "Monte Carlo: out of memory for %zu samples", n);
        st = DK_ERR_OUT_OF_MEMORY;
        goto done;
    }
    uint64_t state = seed;
    for (size_t s = 0; s < n; s++) {
        double z[DK_GBEES_MAX_DIM];
        for (int i = 0; i < d; i++)
            z[i] = normal(&state);
        for (int i = 0; i < d; i++) {
            double v = meas0->mean[i];
            for (int k = 0; k <= i; k++)
                v += l0[i * d + k] * z[k];
            x[s * d + i] = v;
        }
    }
#pragma omp parallel for schedule(dynamic, 64)
    for (size_t s = 0; s < n; s++)
        rk45(model, d, x + s * d, t);
    /* Kernel: Scott's factor on the sample covariance, H = h^2 cov. GBEES
     * holds cell probabilities, so the estimate is turned into the
     * probability of each cell: the kernel integrated over the cell, the box
     * taken as the Gaussian of the same covariance, diag(dx^2 / 12). Point
     * values at the centres would alias wherever the density is thinner
     * than a cell, and their sum could fall far short of the mass. */
    double mu[DK_GBEES_MAX_DIM] = {0}, cov[DK_GBEES_MAX_DIM * DK_GBEES_MAX_DIM] = {0}, l[DK_GBEES_MAX_DIM * DK_GBEES_MAX_DIM];
    for (size_t s = 0; s < n; s++)
        for (int i = 0; i < d; i++)
            mu[i] += x[s * d + i] / (double)n;
    for (size_t s = 0; s < n; s++)
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++)
                cov[i * d + j] += (x[s * d + i] - mu[i]) * (x[s * d + j] - mu[j]) / (double)(n - 1);
    double h = pow((double)n, -1.0 / (d + 4));
    for (int i = 0; i < d * d; i++)
        cov[i] *= h * h;
    for (int i = 0; i < d; i++)
        cov[i * d + i] += dx[i] * dx[i] / 12.0;
    if (cholesky(cov, d, l) != 0) {
        snprintf(err, len, "Monte Carlo: the propagated samples have a singular covariance");
        st = DK_ERR_INVALID_ARGUMENT;
        goto done;
    }
    /* in the kernel's whitened coordinates the kernel is exp(-r^2/2); it is
     * cut at r = reach, and samples are binned in cubes of that side */
    const double reach = 4.0;
    double norm = 1.0 / (double)n; /* cell volume / (n (2 pi)^(d/2) det L) */
    for (int i = 0; i < d; i++)
        norm *= dx[i] / (sqrt(2.0 * M_PI) * l[i * d + i]);
    for (size_t s = 0; s < n; s++) {
        whiten(l, d, mu, x + s * d, y + s * d);
        for (int i = 0; i < d; i++)
            bs[s].key[i] = bin_of(y[s * d + i], reach);
        bs[s].sample = s;
    }
    dim_for_sort = d;
    qsort(bs, n, sizeof *bs, by_key);
    size_t bins = 0;
    for (size_t s = 0; s < n; s++) {
        if (s == 0 || by_key(&bs[s - 1], &bs[s]) != 0) {
            memcpy(bin_keys + bins * d, bs[s].key, d * sizeof(int32_t));
            bin_start[bins] = s;
            gb_hash_insert(&ht, bin_keys, (int32_t)bins);
            bins++;
        }
    }
    bin_start[bins] = n;
    int neighbours = 1;
    for (int i = 0; i < d; i++)
        neighbours *= 3;
    /* the samples in bin order, so a bin's samples are contiguous */
    for (size_t s = 0; s < n; s++)
        memcpy(x + s * d, y + bs[s].sample * d, d * sizeof *x);
    if (draws > 0) {
        st = sampled_bc(rows, cells, d, threshold, l, mu, x, &ht, bin_keys, bin_start, neighbours, reach,
                        norm, draws, seed, res, err, len);
        goto done;
    }
    /* Cells are grouped by the bin they fall in, so the 3^d neighbour bins
     * are looked up once per group rather than once per cell (a Lorenz '96
     * snapshot has millions of cells, thousands per bin), and visited group
     * by group rather than in grid order, so a group's samples stay in
     * cache. */
    if (!(cell_bin = malloc(cells * sizeof *cell_bin)) || !(home_keys = malloc(cells * d * sizeof *home_keys)) ||
        gb_hash_init(&home_ht, d, 1024) != 0) {
        snprintf(err, len, "Monte Carlo: out of memory for %zu cells", cells);
        st = DK_ERR_OUT_OF_MEMORY;
        goto done;
    }
    size_t homes = 0;
    for (size_t c = 0; c < cells; c++) {
        double yc[DK_GBEES_MAX_DIM];
        whiten(l, d, mu, rows + c * (d + 1), yc);
        int32_t *k = home_keys + homes * d;
        for (int i = 0; i < d; i++)
            k[i] = bin_of(yc[i], reach);
        int32_t hb = gb_hash_find(&home_ht, home_keys, k);
        if (hb < 0) {
            if (gb_hash_insert(&home_ht, home_keys, (int32_t)homes) < 0) {
                snprintf(err, len, "Monte Carlo: out of memory grouping %zu cells", cells);
                st = DK_ERR_OUT_OF_MEMORY;
                goto done;
            }
            hb = (int32_t)homes++;
        }
        cell_bin[c] = hb;
    }
    if (!(group_start = calloc(homes + 1, sizeof *group_start)) || !(group_cells = malloc(cells * sizeof *group_cells))) {
        snprintf(err, len, "Monte Carlo: out of memory for %zu cells", cells);
        st = DK_ERR_OUT_OF_MEMORY;
        goto done;
    }
    for (size_t c = 0; c < cells; c++)
        group_start[cell_bin[c] + 1]++;
    for (size_t g = 0; g < homes; g++)
        group_start[g + 1] += group_start[g];
    for (size_t c = 0; c < cells; c++)
        group_cells[group_start[cell_bin[c]]++] = c;
    for (size_t g = homes; g > 0; g--)
        group_start[g] = group_start[g - 1];
    group_start[0] = 0;
    if (!(group_bins = malloc(homes * neighbours * sizeof *group_bins))) {
        snprintf(err, len, "Monte Carlo: out of memory for %zu cell groups", homes);
        st = DK_ERR_OUT_OF_MEMORY;
        goto done;
    }
#pragma omp parallel for schedule(dynamic, 16)
    for (size_t g = 0; g < homes; g++)
        neighbour_bins(&ht, bin_keys, home_keys + g * d, d, neighbours, group_bins + g * neighbours);
#pragma omp parallel for schedule(dynamic, 256)
    for (size_t gc = 0; gc < cells; gc++) {
        size_t c = group_cells[gc];
        double yc[DK_GBEES_MAX_DIM];
        whiten(l, d, mu, rows + c * (d + 1), yc);
        q[c] = kernel_sum(yc, group_bins + (size_t)cell_bin[c] * neighbours, neighbours, bin_keys, bin_start, x, d,
                          reach) * norm;
    }
    /* Both sides normalized over the compared cells: all of them, and the
     * support, the cells at or above the threshold (the published GBEES
     * writes only those; below it lies the fringe kept for growth) */
    double qs = 0.0, ps = 0.0, qk = 0.0, pk = 0.0;
    for (size_t c = 0; c < cells; c++) {
        double p = fmax(rows[c * (d + 1) + d], 0.0);
        qs += q[c];
        ps += p;
        if (p >= threshold) {
            qk += q[c];
            pk += p;
            res->support++;
        }
    }
    if (!(qk > 0.0) || !(pk > 0.0)) {
        snprintf(err, len, "Monte Carlo: no sample lies near the snapshot's cells at or above the threshold %g",
                 threshold);
        st = DK_ERR_INVALID_ARGUMENT;
        goto done;
    }
    double all = 0.0, kept = 0.0;
    for (size_t c = 0; c < cells; c++) {
        double p = fmax(rows[c * (d + 1) + d], 0.0);
        all += sqrt(p / ps * q[c] / qs);
        if (p >= threshold)
            kept += sqrt(p / pk * q[c] / qk);
    }
    res->bc = kept;
    res->bc_all = all;
    res->kde_mass = qs;
    res->kde_mass_support = qk;
    res->gbees_mass_support = pk / ps;
done:
    free(x);
    free(y);
    free(q);
    free(bs);
    free(bin_keys);
    free(bin_start);
    gb_hash_free(&ht);
    gb_hash_free(&home_ht);
    free(cell_bin);
    free(home_keys);
    free(group_start);
    free(group_cells);
    free(group_bins);
    return st;
}

static void mc_usage(FILE *f)
{
    fprintf(f, "usage: dakit gbees-mc --model NAME --meas DIR --pdf RUN/pdf_0_K.npy --t T [options]\n"
               "\n"
               "Carries samples of the Gaussian in DIR/measurement0.txt through the model to time T\n"
               "(adaptive Runge-Kutta), estimates their density by Gaussian kernels (Scott's bandwidth),\n"
               "turns it into the probability of each snapshot cell, and prints the Bhattacharyya\n"
               "coefficient (1: identical) on the cells at or above the run's threshold (the support),\n"
               "with the value over all cells and where the estimate's mass lies. Only snapshots\n"
               "before the first measurement update compare (Monte Carlo has no update).\n"
               "\n"
               "  --model NAME    the run's model (dakit gbees --list-models)\n"
               "  --meas DIR      the run's measurement folder; measurement0.txt is the initial Gaussian\n"
               "  --pdf FILE      the snapshot to check: float64, cells x (d + 1)\n"
               "  --t T           the snapshot's time, in the model's time units, >= 0\n"
               "  --samples N     Monte Carlo samples, 10 to 100000000 (default 100000)\n"
               "  --seed S        seed of the samples, 0 to 2^64-1 (default 1)\n"
               "  --threshold P   the run's threshold, (0, 1) (default: from summary.txt beside the\n"
               "                  snapshot, else 5e-6)\n"
               "  --draws M       compare on M cells drawn by their GBEES probability instead of every\n"
               "                  cell, 0 to 100000000; 0: every cell (default: every cell up to 2\n"
               "                  million cells, else 400000 draws)\n");
}

/* The threshold recorded in summary.txt in the snapshot's folder, or -1. */
static double run_threshold(const char *pdf)
{
    char path[4096];
    const char *slash = strrchr(pdf, '/');
    int dir = slash ? (int)(slash - pdf) : 0;
    snprintf(path, sizeof path, "%.*s%ssummary.txt", dir, pdf, slash ? "/" : "");
    FILE *f = fopen(path, "r");
    if (!f)
        return -1.0;
    char line[256];
    double thr = -1.0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "threshold %lf", &thr) == 1)
            break;
    fclose(f);
    return isfinite(thr) && thr > 0.0 && thr < 1.0 ? thr : -1.0;
}

int cmd_gbees_mc(int argc, char **argv)
{
    const char *cmd = "gbees-mc", *model_s = NULL, *meas_dir = NULL, *pdf = NULL;
    double t = -1.0, threshold = -1.0;
    size_t samples = 100000, draws = 0;
    int draws_given = 0;
    uint64_t seed = 1;
    static const struct option option_table[] = {CLI_FLAG("help"), CLI_VALUE("model"), CLI_VALUE("meas"),
        CLI_VALUE("pdf"), CLI_VALUE("t"), CLI_VALUE("samples"), CLI_VALUE("seed"), CLI_VALUE("draws"),
        CLI_VALUE("threshold"), {0}};
    cli_args args = {.cmd = cmd, .argc = argc, .argv = argv, .options = option_table};
    int more;
    while ((more = cli_next(&args)) == 1) {
        const char *a = args.opt;
        if (!strcmp(a, "--help")) {
            mc_usage(stdout);
            return 0;
        }
        const char *v = args.value;
        int bad = 0;
        if (!strcmp(a, "--model"))
            model_s = v;
        else if (!strcmp(a, "--meas"))
            meas_dir = v;
        else if (!strcmp(a, "--pdf"))
            pdf = v;
        else if (!strcmp(a, "--t"))
            bad = cli_double(cmd, a, v, 0, INFINITY, 0, &t);
        else if (!strcmp(a, "--samples"))
            bad = cli_size(cmd, a, v, 10, 100000000, &samples);
        else if (!strcmp(a, "--seed"))
            bad = cli_u64(cmd, a, v, &seed);
        else if (!strcmp(a, "--draws")) {
            bad = cli_size(cmd, a, v, 0, 100000000, &draws);
            draws_given = 1;
        } else if (!strcmp(a, "--threshold"))
            bad = cli_double(cmd, a, v, 0, 1, CLI_OPEN_LO | CLI_OPEN_HI, &threshold);
        if (bad)
            return bad;
    }
    if (more)
        return more;
    if (!model_s || !meas_dir || !pdf || t < 0)
        return cli_error(cmd, 2, "--model, --meas, --pdf and --t >= 0 are required (dakit gbees-mc --help)");
    const dk_gbees_model *model = dk_gbees_model_find(model_s);
    if (!model)
        return cli_error(cmd, 2, "unknown model '%s'", model_s);
    if (cli_options_only)
        return 0;
    if (threshold <= 0.0 && (threshold = run_threshold(pdf)) <= 0.0)
        threshold = 5e-6;
    dk_gbees_meas meas0;
    char path[4096], err[4200];
    if (snprintf(path, sizeof path, "%s/measurement0.txt", meas_dir) >= (int)sizeof path)
        return cli_error(cmd, 1, "%s: the path is too long", meas_dir);
    if (dk_gbees_meas_read(path, &meas0) != DK_OK)
        return cli_error(cmd, 1, "%s", dk_last_error(NULL));
    gbees_snap snap;
    if (gbees_snap_read(pdf, &snap, err, sizeof err) != DK_OK)
        return cli_error(cmd, 1, "%s", err);
    if (snap.dim != meas0.dim) {
        gbees_snap_free(&snap);
        return cli_error(cmd, 1, "%s: expected float64 of shape (cells, %d)", pdf, meas0.dim + 1);
    }
    size_t cells = snap.cells;
    gbees_mc_result r;
    double t0 = cli_now();
    if (!draws_given)
        draws = cells > GBEES_MC_EXACT_CELLS ? GBEES_MC_DRAWS : 0;
    dk_status st = gbees_mc_bc(model, &meas0, t, samples, seed, snap.rows, cells, meas0.dim, threshold, draws, &r,
                               err, sizeof err);
    gbees_snap_free(&snap);
    if (st != DK_OK)
        return cli_error(cmd, 1, "%s", err);
    printf("gbees-mc: %s t = %g, %zu samples: Bhattacharyya coefficient %.4f on the %zu of %zu cells at or above "
           "%g (%.1f s)\n",
           model->name, t, samples, r.bc, r.support, cells, threshold, cli_now() - t0);
    printf("  over all %zu cells: %.4f; probability on the compared cells: GBEES %.4f, kernel estimate %.4f "
           "(%.4f on all cells)\n",
           cells, r.bc_all, r.gbees_mass_support, r.kde_mass_support, r.kde_mass);
    if (r.draws)
        printf("  sampled: %zu support cells drawn by probability, standard error of the coefficient %.4f\n", r.draws,
               r.bc_se);
    return 0;
}

void gbees_case_measurements(int dim, const double *mean, double var, double period, double y, double r,
                             dk_gbees_meas z[2])
{
    memset(z, 0, 2 * sizeof *z);
    z[0].dim = dim;
    memcpy(z[0].mean, mean, (size_t)dim * sizeof(double));
    for (int k = 0; k < dim; k++)
        z[0].cov[k * dim + k] = var;
    z[0].period = period;
    z[1].dim = 1;
    z[1].mean[0] = y;
    z[1].cov[0] = r;
    z[1].period = period;
}
