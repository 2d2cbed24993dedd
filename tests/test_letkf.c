/* letkf: the serial reference against external truths (the Kalman update
 * where localization is absent, hand-checked weights and searches), the
 * rational inverse square root the cuda plugin's warp variant solves with
 * (against 1 / sqrt(x) and against Jacobi's eigenvectors), and the core's
 * refusals of bad input. Backends are compared with the
 * reference by the conformance cases; here only a plan's repeated
 * interpolated analyses (what the plan keeps between calls), on each
 * backend present. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/dakit.h>
#include <dakit/enkf.h>
#include <dakit/letkf.h>
#include <dakit/kit/letkf/analysis_host.h>
#include <dakit/kit/letkf/inv_sqrt_host.h>
#include <dakit/kit/letkf/local.h>

#include "check.h"

static double frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0;
}

static double gauss_rand(uint64_t *s)
{
    double u = frand(s) + 1e-300, v = frand(s);
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

/* Solves the n x n SPD system a x = b in place (Cholesky; a row-major). */
static void spd_solve(int n, double *a, double *b, int nrhs)
{
    for (int j = 0; j < n; j++) {
        for (int k = 0; k < j; k++)
            a[j * n + j] -= a[j * n + k] * a[j * n + k];
        a[j * n + j] = sqrt(a[j * n + j]);
        for (int i = j + 1; i < n; i++) {
            for (int k = 0; k < j; k++)
                a[i * n + j] -= a[i * n + k] * a[j * n + k];
            a[i * n + j] /= a[j * n + j];
        }
    }
    for (int c = 0; c < nrhs; c++) {
        for (int i = 0; i < n; i++) {
            for (int k = 0; k < i; k++)
                b[i * nrhs + c] -= a[i * n + k] * b[k * nrhs + c];
            b[i * nrhs + c] /= a[i * n + i];
        }
        for (int i = n - 1; i >= 0; i--) {
            for (int k = i + 1; k < n; k++)
                b[i * nrhs + c] -= a[k * n + i] * b[k * nrhs + c];
            b[i * nrhs + c] /= a[i * n + i];
        }
    }
}

/* All points and observations at one place: rho = 1 everywhere, so the
 * LETKF is the ETKF, whose mean and covariance are the Kalman update's with
 * P = X X^T / (k - 1) (and Pa = inflation-scaled where inflation != 1). */
static void kalman_case(int n, int k, int m, double infl)
{
    uint64_t seed = 12345u + (uint64_t)(n * 131 + k * 7 + m);
    double *xb = malloc(sizeof(double) * n * k), *xa = malloc(sizeof(double) * n * k);
    double *H = calloc((size_t)m * n, sizeof(double)), *yb = malloc(sizeof(double) * m * k);
    double *yo = malloc(sizeof(double) * m), *r = malloc(sizeof(double) * m);
    double *gc = calloc((size_t)n, sizeof(double)), *oc = calloc((size_t)m, sizeof(double));
    for (int i = 0; i < n * k; i++)
        xb[i] = gauss_rand(&seed) + (i / k) * 0.1;
    for (int j = 0; j < m; j++) {
        H[j * n + (j * 7) % n] = 1.0;
        H[j * n + (j * 3 + 1) % n] += 0.5;
        yo[j] = gauss_rand(&seed);
        r[j] = 0.5 + frand(&seed);
    }
    for (int j = 0; j < m; j++)
        for (int l = 0; l < k; l++) {
            double s = 0;
            for (int i = 0; i < n; i++)
                s += H[j * n + i] * xb[i * k + l];
            yb[j * k + l] = s;
        }
    dk_letkf_desc d;
    dk_letkf_desc_init(&d);
    d.n = (size_t)n, d.members = (size_t)k, d.m = (size_t)m, d.ncoords = 1, d.radius = 1.0, d.inflation = infl;
    d.grid_coords = gc, d.obs_coords = oc;
    int32_t *nobs = malloc(sizeof(int32_t) * n);
    dk_status st = dk_letkf_reference(&d, xb, yb, yo, r, xa, nobs, NULL);
    CHECK(st == DK_OK, "reference: %s", dk_last_error(NULL));
    CHECK(nobs[0] == m, "point 0 uses %d observations, not %d", nobs[0], m);
    /* Kalman: P = infl X X^T/(k-1); K = P H^T (H P H^T + R)^-1; xa = xb + K (yo - H xb); Pa = (I - K H) P */
    double *xm = calloc(n, sizeof(double)), *X = malloc(sizeof(double) * n * k), *P = calloc((size_t)n * n, sizeof(double));
    for (int i = 0; i < n; i++) {
        for (int l = 0; l < k; l++)
            xm[i] += xb[i * k + l] / k;
        for (int l = 0; l < k; l++)
            X[i * k + l] = xb[i * k + l] - xm[i];
    }
    for (int i = 0; i < n; i++)
        for (int q = 0; q < n; q++)
            for (int l = 0; l < k; l++)
                P[i * n + q] += infl * X[i * k + l] * X[q * k + l] / (k - 1);
    double *S = calloc((size_t)m * m, sizeof(double)), *PHt = calloc((size_t)n * m, sizeof(double));
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++)
            for (int q = 0; q < n; q++)
                PHt[i * m + j] += P[i * n + q] * H[j * n + q];
    for (int a = 0; a < m; a++)
        for (int b = 0; b < m; b++) {
            for (int q = 0; q < n; q++)
                S[a * m + b] += H[a * n + q] * PHt[q * m + b];
            if (a == b)
                S[a * m + b] += r[a];
        }
    /* K^T = S^-1 (P H^T)^T : m x n */
    double *Kt = malloc(sizeof(double) * m * n);
    for (int j = 0; j < m; j++)
        for (int i = 0; i < n; i++)
            Kt[j * n + i] = PHt[i * m + j];
    spd_solve(m, S, Kt, n);
    double err_mean = 0, err_cov = 0, scale_mean = 0, scale_cov = 0;
    for (int i = 0; i < n; i++) {
        double innov_k = 0;
        for (int j = 0; j < m; j++) {
            double hx = 0;
            for (int q = 0; q < n; q++)
                hx += H[j * n + q] * xm[q];
            innov_k += Kt[j * n + i] * (yo[j] - hx);
        }
        double want = xm[i] + innov_k, got = 0;
        for (int l = 0; l < k; l++)
            got += xa[i * k + l] / k;
        err_mean = fmax(err_mean, fabs(got - want));
        scale_mean = fmax(scale_mean, fabs(want));
    }
    for (int i = 0; i < n; i++)
        for (int q = 0; q < n; q++) {
            double pa = P[i * n + q];
            for (int j = 0; j < m; j++)
                for (int s = 0; s < n; s++)
                    pa -= Kt[j * n + i] * H[j * n + s] * P[s * n + q];
            double mi = 0, mq = 0, c = 0;
            for (int l = 0; l < k; l++)
                mi += xa[i * k + l] / k, mq += xa[q * k + l] / k;
            for (int l = 0; l < k; l++)
                c += (xa[i * k + l] - mi) * (xa[q * k + l] - mq) / (k - 1);
            err_cov = fmax(err_cov, fabs(c - pa));
            scale_cov = fmax(scale_cov, fabs(pa));
        }
    CHECK(err_mean <= 1e-11 * scale_mean, "n %d k %d m %d infl %g: mean differs from Kalman's by %g (scale %g)", n, k,
          m, infl, err_mean, scale_mean);
    CHECK(err_cov <= 1e-11 * scale_cov, "n %d k %d m %d infl %g: covariance differs from Kalman's by %g (scale %g)",
          n, k, m, infl, err_cov, scale_cov);
    printf("kalman n %d k %d m %d inflation %g: mean error %.2e, covariance error %.2e\n", n, k, m, infl,
           err_mean / scale_mean, err_cov / scale_cov);
    free(xb), free(xa), free(H), free(yb), free(yo), free(r), free(gc), free(oc), free(nobs);
    free(xm), free(X), free(P), free(S), free(PHt), free(Kt);
}

static void weights(void)
{
    CHECK(dk_letkf_gc(0) == 1.0, "GC(0) = %g", dk_letkf_gc(0));
    CHECK(fabs(dk_letkf_gc(1.0) - 5.0 / 24.0) < 1e-15, "GC(1) = %.17g, not 5/24", dk_letkf_gc(1.0));
    CHECK(dk_letkf_gc(2.0) == 0.0, "GC(2) = %g", dk_letkf_gc(2.0));
    CHECK(fabs(dk_letkf_gc(1.0 - 1e-12) - dk_letkf_gc(1.0 + 1e-12)) < 1e-10, "GC is not continuous at 1");
    /* near 2, GC(2 - e) = e^4 (0.3125 - 0.09375 e + O(e^2)): positive and accurate, not rounding noise */
    for (double e = 1e-2; e > 1e-9; e /= 10) {
        double want = e * e * e * e * (0.3125 - 0.09375 * e);
        CHECK(fabs(dk_letkf_gc(2.0 - e) - want) <= 1e-4 * want, "GC(2 - %g) = %.17g, want %.17g", e,
              dk_letkf_gc(2.0 - e), want);
    }
    dk_letkf_geometry g;
    memset(&g, 0, sizeof g);
    g.metric = 1, g.ncoords = 2, g.hdims = 3, g.dims = 3, g.radius = 2000;
    double a[2] = {0, 0}, b[2] = {0, 10}, pa[4], pb[4];
    dk_letkf_position(&g, a, pa);
    dk_letkf_position(&g, b, pb);
    /* 10 degrees of latitude: 1111.95 km on a sphere of 6371 km */
    double d = 6371.0 * 10 * 3.14159265358979323846 / 180;
    double want = dk_letkf_gc(2 * d / 2000);
    CHECK(fabs(dk_letkf_weight(&g, pa, pb) - want) < 1e-12, "sphere weight %.15g, want %.15g",
          dk_letkf_weight(&g, pa, pb), want);
    memset(&g, 0, sizeof g);
    g.metric = 0, g.ncoords = 1, g.hdims = 1, g.dims = 1, g.radius = 4, g.period[0] = 40;
    double p[4] = {0.5}, q[4] = {38.5};
    CHECK(fabs(dk_letkf_weight(&g, p, q) - dk_letkf_gc(1.0)) < 1e-15, "periodic weight across the seam");
}

/* A periodic ring: the reference's selection equals a brute-force count. */
static void ring_counts(void)
{
    const int n = 40, k = 6, m = 40;
    double gc[40], oc[40], xb[40 * 6], yb[40 * 6], yo[40], r[40], xa[40 * 6];
    uint64_t seed = 7;
    for (int i = 0; i < n; i++)
        gc[i] = i, oc[i] = i + 0.25;
    for (int i = 0; i < n * k; i++)
        xb[i] = gauss_rand(&seed), yb[i] = xb[i];
    for (int j = 0; j < m; j++)
        yo[j] = gauss_rand(&seed), r[j] = 1;
    for (int cap = 0; cap <= 3; cap += 3) {
        dk_letkf_desc d;
        dk_letkf_desc_init(&d);
        d.n = n, d.members = k, d.m = m, d.ncoords = 1, d.radius = 4.1, d.period[0] = 40, d.max_obs = (size_t)cap;
        d.grid_coords = gc, d.obs_coords = oc;
        int32_t nobs[40];
        dk_status st = dk_letkf_reference(&d, xb, yb, yo, r, xa, nobs, NULL);
        CHECK(st == DK_OK, "ring: %s", dk_last_error(NULL));
        for (int i = 0; i < n; i++) {
            int want = 0;
            for (int j = 0; j < m; j++) {
                double dd = fabs(gc[i] - oc[j]);
                dd = dd > 20 ? 40 - dd : dd;
                want += dd < 4.1;
            }
            if (cap && want > cap)
                want = cap;
            CHECK(nobs[i] == want, "ring cap %d: point %d uses %d observations, want %d", cap, i, nobs[i], want);
        }
    }
}

static void refusals(void)
{
    double gc[2] = {0, 1}, oc[2] = {0, 1}, xb[4] = {1, 2, 3, 4}, yb[4] = {1, 2, 3, 4}, yo[2] = {0, 0},
           r[2] = {1, 1}, xa[4];
    dk_letkf_desc d;
    dk_letkf_desc_init(&d);
    d.n = 2, d.members = 2, d.m = 2, d.ncoords = 1, d.radius = 3, d.grid_coords = gc, d.obs_coords = oc;
    CHECK(dk_letkf_reference(&d, xb, yb, yo, r, xa, NULL, NULL) == DK_OK, "a valid case: %s", dk_last_error(NULL));
    dk_letkf_desc e = d;
    e.radius = 0;
    CHECK(dk_letkf_reference(&e, xb, yb, yo, r, xa, NULL, NULL) == DK_ERR_INVALID_ARGUMENT &&
              strstr(dk_last_error(NULL), "radius"),
          "radius 0: %s", dk_last_error(NULL));
    e = d, e.members = 1;
    CHECK(dk_letkf_reference(&e, xb, yb, yo, r, xa, NULL, NULL) == DK_ERR_INVALID_ARGUMENT, "one member accepted");
    e = d, e.rtpp = 0.5, e.rtps = 0.5;
    CHECK(dk_letkf_reference(&e, xb, yb, yo, r, xa, NULL, NULL) == DK_ERR_INVALID_ARGUMENT &&
              strstr(dk_last_error(NULL), "choose one"),
          "rtpp and rtps: %s", dk_last_error(NULL));
    e = d, e.metric = DK_LETKF_SPHERE;
    CHECK(dk_letkf_reference(&e, xb, yb, yo, r, xa, NULL, NULL) == DK_ERR_INVALID_ARGUMENT, "sphere with 1 column");
    double bad_r[2] = {1, 0};
    CHECK(dk_letkf_reference(&d, xb, yb, yo, bad_r, xa, NULL, NULL) == DK_ERR_INVALID_ARGUMENT &&
              strstr(dk_last_error(NULL), "variance"),
          "r = 0: %s", dk_last_error(NULL));
    double nan_x[4] = {1, 2, NAN, 4};
    CHECK(dk_letkf_reference(&d, nan_x, yb, yo, r, xa, NULL, NULL) == DK_ERR_INVALID_ARGUMENT &&
              strstr(dk_last_error(NULL), "value 2 of xb"),
          "NaN in xb: %s", dk_last_error(NULL));
    CHECK(dk_letkf_reference(&d, xb, nan_x, yo, r, xa, NULL, NULL) == DK_ERR_INVALID_ARGUMENT &&
              strstr(dk_last_error(NULL), "value 2 of yb"),
          "NaN in yb: %s", dk_last_error(NULL));
    double nan_c[2] = {0, NAN};
    e = d, e.obs_coords = nan_c;
    CHECK(dk_letkf_reference(&e, xb, yb, yo, r, xa, NULL, NULL) == DK_ERR_INVALID_ARGUMENT &&
              strstr(dk_last_error(NULL), "finite"),
          "NaN coordinate: %s", dk_last_error(NULL));
}

/* Weight interpolation: the CSR checks refuse bad rows with a sentence; the
 * grid convenience reproduces linear fields; C = I gives the plain analysis. */
static void interp(void)
{
    int64_t ip[4] = {0, 1, 3, 4}, ix[4] = {0, 0, 1, 1};
    double v[4] = {1, 0.25, 0.75, 1};
    dk_csr C = {3, 2, ip, ix, v};
    CHECK(dk_letkf_interp_check(&C, 3, 2) == DK_OK, "a valid C refused: %s", dk_last_error(NULL));
    CHECK(dk_letkf_interp_check(&C, 3, 3) == DK_ERR_INVALID_ARGUMENT && strstr(dk_last_error(NULL), "3 x 2"),
          "wrong shape: %s", dk_last_error(NULL));
    v[2] = 0.7;
    CHECK(dk_letkf_interp_check(&C, 3, 2) == DK_ERR_INVALID_ARGUMENT && strstr(dk_last_error(NULL), "row 1") &&
              strstr(dk_last_error(NULL), "sum to 1"),
          "a row summing to 0.95: %s", dk_last_error(NULL));
    v[2] = 0.75, ix[3] = 2;
    CHECK(dk_letkf_interp_check(&C, 3, 2) == DK_ERR_INVALID_ARGUMENT && strstr(dk_last_error(NULL), "weight point 2"),
          "index out of range: %s", dk_last_error(NULL));
    ix[3] = 1, v[0] = NAN;
    CHECK(dk_letkf_interp_check(&C, 3, 2) == DK_ERR_INVALID_ARGUMENT && strstr(dk_last_error(NULL), "not finite"),
          "NaN value: %s", dk_last_error(NULL));
    v[0] = 1, ip[2] = 0;
    CHECK(dk_letkf_interp_check(&C, 3, 2) == DK_ERR_INVALID_ARGUMENT && strstr(dk_last_error(NULL), "decreases"),
          "decreasing indptr: %s", dk_last_error(NULL));

    /* 5 x 4 grid, stride 2: axis lattices {0, 2, 4} and {0, 2, 3} */
    size_t shape[2] = {5, 4}, stride[2] = {2, 2}, nw = 0, widx[20];
    int64_t gp[21], gi[80];
    double gv[80];
    CHECK(dk_letkf_interp_grid(2, shape, stride, &nw, widx, gp, gi, gv) == DK_OK, "grid: %s", dk_last_error(NULL));
    CHECK(nw == 9, "%zu weight points, want 9", nw);
    dk_csr G = {20, nw, gp, gi, gv};
    CHECK(dk_letkf_interp_check(&G, 20, nw) == DK_OK, "the grid's C refused: %s", dk_last_error(NULL));
    for (size_t i = 0; i < 20; i++) {
        double f = 0;
        for (int64_t e = gp[i]; e < gp[i + 1]; e++) {
            size_t w = widx[gi[e]];
            f += gv[e] * (2.0 * (double)(w / 4) + 3.0 * (double)(w % 4) + 1.0);
        }
        double want = 2.0 * (double)(i / 4) + 3.0 * (double)(i % 4) + 1.0;
        CHECK(fabs(f - want) < 1e-13, "point %zu interpolates a linear field to %.17g, want %g", i, f, want);
    }

    /* C = I: the plain analysis, RTPS included */
    enum { N = 30, K = 6, M = 25 };
    uint64_t st = 99;
    double grid[N], obs[M], xb[N * K], yb[M * K], yo[M], r[M], ref[N * K], got[N * K], sref[N], sgot[N];
    double one[N];
    int64_t iip[N + 1], iix[N];
    for (int i = 0; i < N; i++)
        grid[i] = i, one[i] = 1, iip[i] = i, iix[i] = i;
    iip[N] = N;
    for (int j = 0; j < M; j++)
        obs[j] = 30 * frand(&st), yo[j] = gauss_rand(&st), r[j] = 0.5 + frand(&st);
    for (int t = 0; t < N * K; t++)
        xb[t] = 3 + gauss_rand(&st);
    for (int t = 0; t < M * K; t++)
        yb[t] = gauss_rand(&st);
    dk_letkf_desc d;
    dk_letkf_desc_init(&d);
    d.n = N, d.members = K, d.m = M, d.ncoords = 1, d.radius = 6, d.rtps = 0.6, d.inflation = 1.05;
    d.grid_coords = grid, d.obs_coords = obs;
    dk_csr I = {N, N, iip, iix, one};
    CHECK(dk_letkf_reference(&d, xb, yb, yo, r, ref, NULL, sref) == DK_OK, "reference: %s", dk_last_error(NULL));
    CHECK(dk_letkf_reference_interp(&d, &I, xb, yb, yo, r, got, sgot) == DK_OK, "interp: %s", dk_last_error(NULL));
    double err = 0;
    for (int t = 0; t < N * K; t++)
        err = fmax(err, fabs(got[t] - ref[t]));
    for (int i = 0; i < N; i++)
        err = fmax(err, fabs(sgot[i] - sref[i]));
    CHECK(err < 1e-12, "C = I differs from the plain analysis by %g", err);
    /* C's 2 columns are not the 30 weight points */
    CHECK(dk_letkf_reference_interp(&d, &C, xb, yb, yo, r, got, sgot) == DK_ERR_INVALID_ARGUMENT,
          "a C of the wrong shape accepted");
}

/* The largest |got - want| over the largest |want| (at least 1). */
static double rel_diff(const double *got, const double *want, size_t count)
{
    double err = 0, scale = 1;
    for (size_t i = 0; i < count; i++)
        err = fmax(err, fabs(got[i] - want[i])), scale = fmax(scale, fabs(want[i]));
    return err / scale;
}

/* One plan, many interpolated analyses (as a cycling system runs them), on
 * each backend present: the device copies of C and the transforms that the
 * plan keeps between calls must take each call's C, however its size
 * changes (fewer entries, more, the same count with other values), and a
 * refused call must leave the plan working. Each result against
 * dk_letkf_reference_interp with the same C within 1e-10 of the largest
 * magnitude, the conformance cases' float64 tolerance. */
static void interp_plan_reuse(const char *backend)
{
    dk_context *ctx;
    if (dk_context_create(backend, &ctx) != DK_OK) {
        printf("interp_plan_reuse on %s: skipped (%s)\n", backend, dk_last_error(NULL));
        return;
    }
    /* a 12 x 10 lattice (row-major, x fastest), stride 2: weight points at
     * x 0, 2, .., 10, 11 and y 0, 2, .., 8, 9 */
    enum { NX = 12, NY = 10, N = NX * NY, K = 6, M = 50 };
    size_t shape[2] = {NY, NX}, stride[2] = {2, 2}, nw = 0, widx[N];
    static int64_t ip[N + 1], ix[4 * N], np[N + 1], nx[N];
    static double v[4 * N], nv[N], grid[2 * N], wgrid[2 * N], obs[2 * M], xb[N * K], yb[M * K], yo[M], r[M];
    static double got[N * K], want[N * K], sgot[N], swant[N];
    CHECK(dk_letkf_interp_grid(2, shape, stride, &nw, widx, ip, ix, v) == DK_OK, "grid: %s", dk_last_error(NULL));
    uint64_t st = 7;
    for (int i = 0; i < N; i++)
        grid[2 * i] = i % NX, grid[2 * i + 1] = i / NX;
    for (size_t w = 0; w < nw; w++)
        wgrid[2 * w] = grid[2 * widx[w]], wgrid[2 * w + 1] = grid[2 * widx[w] + 1];
    for (int j = 0; j < M; j++)
        obs[2 * j] = NX * frand(&st), obs[2 * j + 1] = NY * frand(&st), r[j] = 0.5 + frand(&st);
    for (int t = 0; t < N * K; t++)
        xb[t] = 2 + gauss_rand(&st);
    for (int t = 0; t < M * K; t++)
        yb[t] = gauss_rand(&st);
    /* the nearest weight point: one entry a row, other values than ix/v */
    for (int i = 0; i < N; i++) {
        size_t best = 0;
        double bd = INFINITY;
        for (size_t w = 0; w < nw; w++) {
            double dx = grid[2 * i] - wgrid[2 * w], dy = grid[2 * i + 1] - wgrid[2 * w + 1];
            if (dx * dx + dy * dy < bd)
                bd = dx * dx + dy * dy, best = w;
        }
        np[i] = i, nx[i] = (int64_t)best, nv[i] = 1;
    }
    np[N] = N;
    dk_letkf_desc d;
    dk_letkf_desc_init(&d);
    d.n = nw, d.members = K, d.m = M, d.ncoords = 2, d.radius = 4, d.rtps = 0.5, d.inflation = 1.05;
    d.grid_coords = wgrid, d.obs_coords = obs;
    dk_plan *plan;
    dk_status rc = dk_letkf_plan_create(ctx, &d, &plan);
    if (rc != DK_OK) {
        CHECK(rc == DK_ERR_NOT_IMPLEMENTED, "plan on %s: %s", backend, dk_last_error(ctx));
        printf("interp_plan_reuse on %s: skipped (%s)\n", backend, dk_last_error(ctx));
        dk_context_destroy(ctx);
        return;
    }
    /* the first 3 rows of the lattice, then all of it (the buffers grow),
     * the nearest weight point (fewer entries, other values), all again */
    dk_csr part = {3 * NX, nw, ip, ix, v}, full = {N, nw, ip, ix, v}, nearest = {N, nw, np, nx, nv};
    const dk_csr *calls[4] = {&part, &full, &nearest, &full};
    double worst = 0;
    int done = 0;
    for (int c = 0; c < 4; c++, done++) {
        const dk_csr *C = calls[c];
        for (int j = 0; j < M; j++)
            yo[j] = gauss_rand(&st);
        CHECK(dk_letkf_reference_interp(&d, C, xb, yb, yo, r, want, swant) == DK_OK, "reference: %s",
              dk_last_error(NULL));
        rc = dk_letkf_execute_interp_host(plan, C, xb, yb, yo, r, got, sgot);
        if (rc == DK_ERR_NOT_IMPLEMENTED) {
            printf("interp_plan_reuse on %s: skipped (%s)\n", backend, dk_last_error(ctx));
            break;
        }
        CHECK(rc == DK_OK, "call %d on %s: %s", c, backend, dk_last_error(ctx));
        double e = fmax(rel_diff(got, want, C->rows * K), rel_diff(sgot, swant, C->rows));
        CHECK(e <= 1e-10, "call %d on %s (%zu rows, %lld entries) differs from the reference by %g", c, backend,
              C->rows, (long long)C->indptr[C->rows], e);
        worst = fmax(worst, e);
        /* refused calls between the good ones: a row not summing to 1, NaN in yo */
        nv[5] = 0.5;
        CHECK(dk_letkf_execute_interp_host(plan, &nearest, xb, yb, yo, r, got, NULL) == DK_ERR_INVALID_ARGUMENT &&
                  strstr(dk_last_error(ctx), "row 5"),
              "a row summing to 0.5 on %s: %s", backend, dk_last_error(ctx));
        nv[5] = 1, yo[3] = NAN;
        CHECK(dk_letkf_execute_interp_host(plan, &full, xb, yb, yo, r, got, NULL) == DK_ERR_INVALID_ARGUMENT,
              "NaN in yo accepted on %s", backend);
    }
    printf("interp_plan_reuse on %s: %d interpolated analyses of one plan, largest relative difference %.2e\n",
           backend, done, worst);
    /* the plain analysis of the same plan after the interpolated ones */
    static double plain[N * K], pref[N * K];
    for (int j = 0; j < M; j++)
        yo[j] = gauss_rand(&st);
    CHECK(dk_letkf_execute_host(plan, xb, yb, yo, r, plain, NULL, NULL) == DK_OK, "plain on %s: %s", backend,
          dk_last_error(ctx));
    CHECK(dk_letkf_reference(&d, xb, yb, yo, r, pref, NULL, NULL) == DK_OK, "plain reference: %s",
          dk_last_error(NULL));
    CHECK(rel_diff(plain, pref, nw * K) <= 1e-10, "the plain analysis after interpolated ones differs on %s",
          backend);
    dk_plan_destroy(plan);
    dk_context_destroy(ctx);
}

/* kit/letkf/inv_sqrt_host.h: its stated error against 1 / sqrt(x) over
 * [1, kappa] (the error equioscillates, so the ends give it), and on a
 * symmetric tridiagonal T the way the warp variant uses it: sqrt((k - 1) /
 * (g + T)) x as sum of shifted solves, against Jacobi's eigenvectors. */
static void inv_sqrt_poles(void)
{
    const double kappas[] = {1e2, 1e4, 1e7}, bounds[] = {1e-15, 1e-15, 3e-14};
    for (int q = 0; q < 3; q++) {
        double shift[31], weight[31], scale;
        const double err = dk_letkf_inv_sqrt_poles(31, kappas[q], shift, weight, &scale);
        CHECK(err <= bounds[q], "kappa %g: the approximation's error %g exceeds %g", kappas[q], err, bounds[q]);
        long double worst = 0.0L;
        for (int i = 0; i <= 4000; i++) {
            const long double x = powl(kappas[q], i / 4000.0L);
            long double r = 1.0L;
            for (int l = 0; l < 31; l++)
                r += weight[l] / (x + shift[l]);
            const long double e = fabsl(scale * r * sqrtl(x) - 1.0L);
            if (e > worst)
                worst = e;
        }
        CHECK(worst <= err * 1.01 + 4e-16, "kappa %g: the error sampled, %Lg, exceeds the stated %g", kappas[q], worst,
              err);
        for (int l = 0; l < 31; l++)
            CHECK(shift[l] > 0.0 && weight[l] > 0.0, "kappa %g: shift %d is %g, weight %g", kappas[q], l, shift[l],
                  weight[l]);
    }
    /* T of k = 12 with eigenvalues up to ~1e4 g */
    enum { K = 12 };
    const double infl = 1.04, g = (K - 1) / infl;
    double d[K], e[K], x[K], a[K * K], v[K * K], lam[K];
    uint64_t seed = 7;
    for (int i = 0; i < K; i++) {
        d[i] = 5e4 * frand(&seed) * frand(&seed);
        e[i] = i + 1 < K ? 3e3 * (frand(&seed) - 0.5) : 0.0;
        x[i] = gauss_rand(&seed);
    }
    memset(a, 0, sizeof a);
    for (int i = 0; i < K; i++) {
        a[i * K + i] = d[i] + (fabs(e[i]) + (i > 0 ? fabs(e[i - 1]) : 0.0)); /* diagonally dominant: T >= 0 */
        if (i + 1 < K)
            a[i * K + i + 1] = a[(i + 1) * K + i] = e[i];
        d[i] = a[i * K + i];
    }
    double want[K] = {0}, got[K], norm = 0.0;
    double t[K * K];
    memcpy(t, a, sizeof t);
    dk_letkf_jacobi(K, t, v, lam);
    for (int m = 0; m < K; m++) {
        double c = 0.0;
        for (int i = 0; i < K; i++)
            c += v[i * K + m] * x[i];
        c *= sqrt((K - 1) / (g + lam[m]));
        for (int i = 0; i < K; i++)
            want[i] += v[i * K + m] * c;
    }
    double shift[DK_LETKF_POLES], weight[DK_LETKF_POLES], scale;
    dk_letkf_solves_setup(K, infl, shift, weight, &scale);
    for (int i = 0; i < K; i++)
        got[i] = scale * x[i];
    for (int l = 0; l < DK_LETKF_POLES; l++) {
        /* (T + shift) z = x by elimination, as each lane of the cuda plugin's warp_solves */
        const double sh = shift[l];
        double ip[K], y[K];
        ip[0] = 1.0 / (d[0] + sh);
        y[0] = x[0];
        for (int i = 1; i < K; i++) {
            const double m = e[i - 1] * ip[i - 1];
            ip[i] = 1.0 / (d[i] + sh - m * e[i - 1]);
            y[i] = x[i] - m * y[i - 1];
        }
        double z = y[K - 1] * ip[K - 1];
        got[K - 1] += weight[l] * z;
        for (int i = K - 2; i >= 0; i--) {
            z = (y[i] - e[i] * z) * ip[i];
            got[i] += weight[l] * z;
        }
    }
    double diff = 0.0;
    for (int i = 0; i < K; i++) {
        diff = fmax(diff, fabs(got[i] - want[i]));
        norm = fmax(norm, fabs(want[i]));
    }
    CHECK(diff <= 1e-12 * norm, "sqrt((k - 1) / (g + T)) x by shifted solves differs from Jacobi's by %g of %g", diff,
          norm);
}

/* The cpu plugin's variant solves (where LAPACKE is built) against its
 * variant syevd on one case twice: with r of 1, within 1e-12 of each other
 * (two factorizations of one analysis); with r of 1e-12, where every
 * point's spectrum reaches beyond the rational approximation's interval,
 * equal bit for bit (each point falls back to dsyevd). */
static void cpu_solves_fallback(void)
{
    dk_context *ctx;
    if (dk_context_create("cpu", &ctx) != DK_OK) {
        printf("cpu_solves_fallback: skipped (%s)\n", dk_last_error(NULL));
        return;
    }
    int have = 0;
    for (const char *const *v = dk_letkf_variants(ctx); v && *v; v++)
        have += !strcmp(*v, "solves");
    if (!have) {
        printf("cpu_solves_fallback: skipped (the cpu plugin was built without LAPACKE)\n");
        dk_context_destroy(ctx);
        return;
    }
    enum { N = 60, K = 12, M = 80 };
    static double grid[N], obs[M], xb[N * K], yb[M * K], yo[M], r[M], xs[N * K], xe[N * K];
    uint64_t st = 11;
    for (int i = 0; i < N; i++)
        grid[i] = i;
    for (int j = 0; j < M; j++)
        obs[j] = N * frand(&st), yo[j] = gauss_rand(&st);
    for (int t = 0; t < N * K; t++)
        xb[t] = 1 + gauss_rand(&st);
    for (int t = 0; t < M * K; t++)
        yb[t] = gauss_rand(&st);
    const double rs[2] = {1.0, 1e-12};
    for (int q = 0; q < 2; q++) {
        for (int j = 0; j < M; j++)
            r[j] = rs[q];
        double *outs[2] = {xs, xe};
        const char *variants[2] = {"solves", "syevd"};
        for (int v = 0; v < 2; v++) {
            dk_letkf_desc d;
            dk_letkf_desc_init(&d);
            d.n = N, d.members = K, d.m = M, d.ncoords = 1, d.radius = 9, d.grid_coords = grid, d.obs_coords = obs;
            d.variant = variants[v];
            dk_plan *plan = NULL;
            CHECK(dk_letkf_plan_create(ctx, &d, &plan) == DK_OK, "plan %s: %s", variants[v], dk_last_error(ctx));
            if (!plan)
                continue;
            CHECK(dk_letkf_execute_host(plan, xb, yb, yo, r, outs[v], NULL, NULL) == DK_OK, "%s: %s", variants[v],
                  dk_last_error(ctx));
            dk_plan_destroy(plan);
        }
        double worst = 0.0, scale = 0.0;
        int equal = 1;
        for (int t = 0; t < N * K; t++) {
            worst = fmax(worst, fabs(xs[t] - xe[t]));
            scale = fmax(scale, fabs(xe[t]));
            equal &= xs[t] == xe[t];
        }
        if (q == 0)
            CHECK(worst <= 1e-12 * scale && !equal, "r 1: solves differs from syevd by %g of %g (equal: %d)", worst,
                  scale, equal);
        else
            CHECK(equal, "r 1e-12: solves differs from syevd by %g of %g, where every point falls back to dsyevd",
                  worst, scale);
    }
    dk_context_destroy(ctx);
}

int main(void)
{
    weights();
    inv_sqrt_poles();
    kalman_case(1, 4, 1, 1.0);
    kalman_case(5, 8, 3, 1.0);
    kalman_case(12, 20, 9, 1.1);
    kalman_case(30, 10, 40, 1.0);
    ring_counts();
    refusals();
    interp();
    cpu_solves_fallback();
    interp_plan_reuse("cpu");
    interp_plan_reuse("opencl");
    interp_plan_reuse("cuda");
    printf("%s\n", failures ? "FAILED" : "passed");
    return failures != 0;
}
