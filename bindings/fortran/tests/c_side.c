/* The C side of test_fortran: the same data built by C code in C order and
 * the serial references run on it, so that the Fortran module's results
 * (and its Fortran-to-C order mapping) are checked against C's; and the
 * structure layouts as the C compiler sees them. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/dakit.h>

/* The test's data at a C multi-index (padded with leading zeros to three);
 * exact in float, no libm, so that C and Fortran build the same numbers.
 * test_fortran.f90's value() is the same function. */
static double value(size_t i0, size_t i1, size_t i2)
{
    return (double)((i0 * 31 + i1 * 17 + i2 * 7) % 23) / 8.0;
}

/* Offsets of every field, then the size, of each bind(c) structure the
 * module declares, in declaration order. */
size_t c_layout(int which, size_t *offsets)
{
    size_t n = 0;
#define AT(type, field) offsets[n++] = offsetof(type, field)
    switch (which) {
    case 0:
        AT(dk_gauss_desc, dtype); AT(dk_gauss_desc, ndim); AT(dk_gauss_desc, shape);
        AT(dk_gauss_desc, axes); AT(dk_gauss_desc, sigma); AT(dk_gauss_desc, K);
        AT(dk_gauss_desc, boundary); AT(dk_gauss_desc, mode); AT(dk_gauss_desc, overlap);
        AT(dk_gauss_desc, blocks); AT(dk_gauss_desc, variant); AT(dk_gauss_desc, method);
        AT(dk_gauss_desc, order_poles); AT(dk_gauss_desc, cval); AT(dk_gauss_desc, order);
        offsets[n++] = sizeof(dk_gauss_desc);
        break;
    case 1:
        AT(dk_enkf_desc, dtype); AT(dk_enkf_desc, n); AT(dk_enkf_desc, members);
        AT(dk_enkf_desc, loc_ndim); AT(dk_enkf_desc, nx); AT(dk_enkf_desc, ny); AT(dk_enkf_desc, loc);
        AT(dk_enkf_desc, H.rows); AT(dk_enkf_desc, H.cols); AT(dk_enkf_desc, H.indptr);
        AT(dk_enkf_desc, H.indices); AT(dk_enkf_desc, H.values); AT(dk_enkf_desc, variant);
        offsets[n++] = sizeof(dk_enkf_desc);
        break;
    case 2:
        AT(dk_kmeans_desc, n); AT(dk_kmeans_desc, d); AT(dk_kmeans_desc, k);
        AT(dk_kmeans_desc, max_iters); AT(dk_kmeans_desc, tol); AT(dk_kmeans_desc, layout);
        AT(dk_kmeans_desc, rows); AT(dk_kmeans_desc, cols); AT(dk_kmeans_desc, lambda);
        AT(dk_kmeans_desc, window); AT(dk_kmeans_desc, variant); AT(dk_kmeans_desc, init);
        AT(dk_kmeans_desc, seed); AT(dk_kmeans_desc, trials);
        offsets[n++] = sizeof(dk_kmeans_desc);
        break;
    case 3:
        AT(dk_kmeans_result, iterations); AT(dk_kmeans_result, objective);
        AT(dk_kmeans_result, last_move); AT(dk_kmeans_result, valid);
        AT(dk_kmeans_result, assign_seconds); AT(dk_kmeans_result, update_seconds);
        offsets[n++] = sizeof(dk_kmeans_result);
        break;
    case 4:
        AT(dk_native, memory); AT(dk_native, device); AT(dk_native, context); AT(dk_native, queue);
        offsets[n++] = sizeof(dk_native);
        break;
    case 5:
        AT(dk_gbees_meas, dim); AT(dk_gbees_meas, mean); AT(dk_gbees_meas, cov); AT(dk_gbees_meas, period);
        offsets[n++] = sizeof(dk_gbees_meas);
        break;
    case 6:
        AT(dk_gbees_desc, model); AT(dk_gbees_desc, threshold); AT(dk_gbees_desc, del_step);
        AT(dk_gbees_desc, cfl); AT(dk_gbees_desc, dx_factor); AT(dk_gbees_desc, snapshots);
        AT(dk_gbees_desc, update); AT(dk_gbees_desc, t_end); AT(dk_gbees_desc, variant);
        offsets[n++] = sizeof(dk_gbees_desc);
        break;
    case 7:
        AT(dk_gbees_snapshot, period); AT(dk_gbees_snapshot, index); AT(dk_gbees_snapshot, t);
        AT(dk_gbees_snapshot, dim); AT(dk_gbees_snapshot, cells); AT(dk_gbees_snapshot, data);
        offsets[n++] = sizeof(dk_gbees_snapshot);
        break;
    case 8:
        AT(dk_gbees_stats, t); AT(dk_gbees_stats, steps); AT(dk_gbees_stats, cell_steps);
        AT(dk_gbees_stats, cells); AT(dk_gbees_stats, period); AT(dk_gbees_stats, dt);
        offsets[n++] = sizeof(dk_gbees_stats);
        break;
    case 9:
        AT(dk_letkf_desc, dtype); AT(dk_letkf_desc, n); AT(dk_letkf_desc, members); AT(dk_letkf_desc, m);
        AT(dk_letkf_desc, ncoords); AT(dk_letkf_desc, metric); AT(dk_letkf_desc, radius);
        AT(dk_letkf_desc, vertical_radius); AT(dk_letkf_desc, period); AT(dk_letkf_desc, inflation);
        AT(dk_letkf_desc, rtpp); AT(dk_letkf_desc, rtps); AT(dk_letkf_desc, max_obs);
        AT(dk_letkf_desc, grid_coords); AT(dk_letkf_desc, obs_coords); AT(dk_letkf_desc, variant);
        offsets[n++] = sizeof(dk_letkf_desc);
        break;
    }
#undef AT
    return n;
}

/* The gauss reference (rf with K iterations, zero boundary) on the test
 * field of C shape shape[0..ndim), sigma per C axis (0: not filtered), into
 * out (dtype). */
int c_gauss(int ndim, const size_t *shape, const double *sigma, int K, int dtype, void *out)
{
    dk_gauss_desc d;
    dk_gauss_desc_init(&d);
    d.method = DK_GAUSS_RF;
    d.boundary = DK_BOUNDARY_ZERO;
    d.dtype = (dk_dtype)dtype;
    d.ndim = ndim;
    d.K = K;
    size_t s[3] = {1, 1, 1};
    for (int a = 0; a < ndim; a++) {
        d.shape[a] = shape[a];
        s[3 - ndim + a] = shape[a];
        if (sigma[a] > 0) {
            d.axes |= 1u << a;
            d.sigma[a] = sigma[a];
        }
    }
    size_t i = 0;
    for (size_t i0 = 0; i0 < s[0]; i0++)
        for (size_t i1 = 0; i1 < s[1]; i1++)
            for (size_t i2 = 0; i2 < s[2]; i2++, i++) {
                if (dtype == DK_F64)
                    ((double *)out)[i] = value(i0, i1, i2);
                else
                    ((float *)out)[i] = (float)value(i0, i1, i2);
            }
    return dk_gauss_reference(&d, out, out);
}

/* The enkf test problem: E[i][l] = value(0, i, l) - 1.375, c[d] = 1 - d/6
 * for d < 6, H row j: 1 at column 3j mod n, 0.5 at column (3j + 2) mod n. */
enum { MAX_N = 512, MAX_L = 16, MAX_M = 128 };
static double loc[MAX_N], values[2 * MAX_M];
static int64_t indptr[MAX_M + 1], indices[2 * MAX_M];

static void enkf_problem(size_t n, size_t members, size_t m, int dtype, dk_enkf_desc *d)
{
    dk_enkf_desc_init(d);
    d->dtype = (dk_dtype)dtype;
    d->n = n;
    d->members = members;
    for (size_t k = 0; k < n; k++)
        loc[k] = k < 6 ? 1.0 - (double)k / 6.0 : 0.0;
    for (size_t j = 0; j < m; j++) {
        indptr[j] = (int64_t)(2 * j);
        indices[2 * j] = (int64_t)((3 * j) % n);
        values[2 * j] = 1.0;
        indices[2 * j + 1] = (int64_t)((3 * j + 2) % n);
        values[2 * j + 1] = 0.5;
    }
    indptr[m] = (int64_t)(2 * m);
    d->loc = loc;
    d->H = (dk_csr){m, n, indptr, indices, values};
}

static void ensemble(size_t n, size_t members, double *e)
{
    for (size_t i = 0; i < n; i++)
        for (size_t l = 0; l < members; l++)
            e[i * members + l] = value(0, i, l) - 1.375;
}

/* PHT (n x m) and HPHT (m x m), float64. */
int c_enkf_cov(size_t n, size_t members, size_t m, double *pht, double *hpht)
{
    static double e[MAX_N * MAX_L];
    if (n > MAX_N || members > MAX_L || m > MAX_M)
        return DK_ERR_INVALID_ARGUMENT;
    dk_enkf_desc d;
    enkf_problem(n, members, m, DK_F64, &d);
    ensemble(n, members, e);
    return dk_enkf_cov_reference(&d, e, pht, hpht);
}

/* The analysis of the ensemble above as forecast, y[j] = value(0, 0, j),
 * r[j] = 0.5, float64, into x (n x members). */
int c_enkf_analysis(size_t n, size_t members, size_t m, uint64_t seed, double inflation, double *x)
{
    static double y[MAX_M], r[MAX_M];
    if (n > MAX_N || members > MAX_L || m > MAX_M)
        return DK_ERR_INVALID_ARGUMENT;
    dk_enkf_desc d;
    enkf_problem(n, members, m, DK_F64, &d);
    ensemble(n, members, x);
    for (size_t j = 0; j < m; j++) {
        y[j] = value(0, 0, j);
        r[j] = 0.5;
    }
    return dk_enkf_analysis_reference(&d, x, y, r, seed, inflation);
}

/* kmeans: n points of d features, point-major, feature f of point i =
 * value(0, i, f); the paper's initial centroids on feature 0 into init
 * (k x d), then the reference's labels and centroids. */
int c_kmeans(size_t n, int d, int k, int max_iters, float *init, int32_t *labels, float *centroids)
{
    static float points[4096];
    if (n * (size_t)d > sizeof points / sizeof *points)
        return DK_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < n; i++)
        for (int f = 0; f < d; f++)
            points[i * (size_t)d + (size_t)f] = (float)value(0, i, (size_t)f);
    dk_kmeans_desc desc;
    dk_kmeans_desc_init(&desc);
    desc.n = n;
    desc.d = d;
    desc.k = k;
    desc.max_iters = max_iters;
    dk_status rc = dk_kmeans_initial_centroids(&desc, points, NULL, 0, init);
    if (rc != DK_OK)
        return rc;
    return dk_kmeans_reference(&desc, points, NULL, init, labels, centroids, NULL);
}

/* gbees: lorenz63 from N((-11.5, -10, 9.5), I), a measurement of z = -8
 * (variance 1) at t = 0.15, to t = 0.3, threshold 5e-6, del_step 5, two
 * snapshots a period (the conformance case lorenz63-update), run by the
 * serial reference; its snapshots are kept for the Fortran side. */
enum { GB_MAX_SNAP = 8, GB_DIM = 3 };
static int gb_nsnap;
static size_t gb_cells[GB_MAX_SNAP];
static double gb_t[GB_MAX_SNAP], *gb_rows[GB_MAX_SNAP];

int c_gbees_reference(void)
{
    dk_gbees_meas z[2];
    memset(z, 0, sizeof z);
    z[0].dim = GB_DIM;
    z[0].mean[0] = -11.5;
    z[0].mean[1] = -10.0;
    z[0].mean[2] = 9.5;
    for (int k = 0; k < GB_DIM; k++)
        z[0].cov[k * GB_DIM + k] = 1.0;
    z[0].period = 0.15;
    z[1].dim = 1;
    z[1].mean[0] = -8.0;
    z[1].cov[0] = 1.0;
    z[1].period = 0.15;
    dk_gbees_desc d;
    dk_gbees_desc_init(&d);
    d.model = dk_gbees_model_find("lorenz63");
    d.threshold = 5e-6;
    d.del_step = 5;
    d.snapshots = 2;
    d.t_end = 0.3;
    dk_plan *plan = NULL;
    dk_status st = dk_gbees_plan_create(NULL, &d, z, 2, &plan);
    dk_gbees_event ev = DK_GBEES_PROGRESS;
    while (st == DK_OK && (st = dk_gbees_run(plan, 0, &ev)) == DK_OK && ev != DK_GBEES_DONE) {
        if (ev != DK_GBEES_SNAPSHOT)
            continue;
        dk_gbees_snapshot s;
        if ((st = dk_gbees_snapshot_get(plan, &s)) != DK_OK)
            break;
        if (gb_nsnap == GB_MAX_SNAP) {
            st = DK_ERR_INVALID_ARGUMENT;
            break;
        }
        size_t bytes = s.cells * (GB_DIM + 1) * sizeof(double);
        if (!(gb_rows[gb_nsnap] = malloc(bytes ? bytes : 1))) {
            st = DK_ERR_OUT_OF_MEMORY;
            break;
        }
        memcpy(gb_rows[gb_nsnap], s.data, bytes);
        gb_cells[gb_nsnap] = s.cells;
        gb_t[gb_nsnap++] = s.t;
    }
    dk_plan_destroy(plan);
    return st;
}

/* Snapshot k (0-based) of the reference; -1 past the last. */
int c_gbees_snapshot(int k, size_t *cells, double *t, const double **rows)
{
    if (k < 0 || k >= gb_nsnap)
        return -1;
    *cells = gb_cells[k];
    *t = gb_t[k];
    *rows = gb_rows[k];
    return 0;
}

/* A backend's snapshot k against the reference's, cells matched by their
 * place on the lattice (cell width 0.5 = sqrt(1) / 2, origin the initial
 * mean, which is a cell centre): the Bhattacharyya coefficient and the L1
 * distance, a cell missing on one side counting its whole mass. */
static int64_t gb_key(const double *row, int j)
{
    static const double origin[GB_DIM] = {-11.5, -10.0, 9.5};
    return llround((row[j] - origin[j]) / 0.5);
}

static int gb_cmp(const void *a, const void *b)
{
    const double *x = a, *y = b;
    for (int j = 0; j < GB_DIM; j++) {
        int64_t p = gb_key(x, j), q = gb_key(y, j);
        if (p != q)
            return (p > q) - (p < q);
    }
    return 0;
}

int c_gbees_compare(int k, size_t cells, const double *rows, double *bc, double *l1)
{
    if (k < 0 || k >= gb_nsnap)
        return -1;
    size_t nref = gb_cells[k], row = GB_DIM + 1;
    double *ref = malloc((nref ? nref : 1) * row * sizeof *ref);
    if (!ref)
        return -1;
    memcpy(ref, gb_rows[k], nref * row * sizeof *ref);
    qsort(ref, nref, row * sizeof *ref, gb_cmp);
    double sum_bc = 0.0, sum_l1 = 0.0, matched = 0.0, total = 0.0;
    for (size_t c = 0; c < cells; c++) {
        const double *g = rows + c * row, *m = bsearch(g, ref, nref, row * sizeof *ref, gb_cmp);
        if (m) {
            sum_bc += sqrt(fmax(m[GB_DIM], 0.0) * fmax(g[GB_DIM], 0.0));
            sum_l1 += fabs(m[GB_DIM] - g[GB_DIM]);
            matched += m[GB_DIM];
        } else {
            sum_l1 += fabs(g[GB_DIM]);
        }
    }
    for (size_t c = 0; c < nref; c++)
        total += ref[c * row + GB_DIM];
    free(ref);
    *bc = sum_bc;
    *l1 = sum_l1 + fmax(total - matched, 0.0); /* the difference of two sums of the same masses can round below 0 */
    return 0;
}

/* The letkf test problem (test_fortran.f90's test_letkf builds the same):
 * n = 48 grid points on an 8 x 6 lattice, periodic in x (period 8); m = 30
 * observations at (3 value(j, 0, 0), 2 value(0, j, 1)); k = 6 members,
 * xb[i][l] = value(i, l, 3) - 1, yb[j][l] = value(j, l, 5) - 1.375,
 * yo[j] = value(j, 2, 7) - 1, r[j] = 0.5 + value(j, 1, 1) / 4; radius 2.5,
 * inflation 1.05, rtpp 0.4 (case 0) or rtps 0.6 and max_obs 5 (case 1). */
enum { LK_N = 48, LK_M = 30, LK_K = 6 };
static double lk_grid[LK_N * 2], lk_obs[LK_M * 2], lk_xb[LK_N * LK_K], lk_yb[LK_M * LK_K], lk_yo[LK_M], lk_r[LK_M];
static float lk_xb32[LK_N * LK_K], lk_yb32[LK_M * LK_K];

static void letkf_problem(int which, int dtype, dk_letkf_desc *d)
{
    for (size_t i = 0; i < LK_N; i++) {
        lk_grid[2 * i] = (double)(i % 8);
        lk_grid[2 * i + 1] = (double)(i / 8);
        for (size_t l = 0; l < LK_K; l++)
            lk_xb[i * LK_K + l] = value(i, l, 3) - 1.0;
    }
    for (size_t j = 0; j < LK_M; j++) {
        lk_obs[2 * j] = 3 * value(j, 0, 0);
        lk_obs[2 * j + 1] = 2 * value(0, j, 1);
        for (size_t l = 0; l < LK_K; l++)
            lk_yb[j * LK_K + l] = value(j, l, 5) - 1.375;
        lk_yo[j] = value(j, 2, 7) - 1.0;
        lk_r[j] = 0.5 + value(j, 1, 1) / 4;
    }
    for (size_t i = 0; i < LK_N * LK_K; i++)
        lk_xb32[i] = (float)lk_xb[i];
    for (size_t i = 0; i < LK_M * LK_K; i++)
        lk_yb32[i] = (float)lk_yb[i];
    dk_letkf_desc_init(d);
    d->dtype = (dk_dtype)dtype;
    d->n = LK_N, d->m = LK_M, d->members = LK_K, d->ncoords = 2;
    d->radius = 2.5, d->period[0] = 8, d->inflation = 1.05;
    if (which == 0)
        d->rtpp = 0.4;
    else
        d->rtps = 0.6, d->max_obs = 5;
    d->grid_coords = lk_grid, d->obs_coords = lk_obs;
}

/* The serial reference of the letkf problem into xa (dtype), nobs and spread. */
int c_letkf(int which, int dtype, void *xa, int32_t *nobs, double *spread)
{
    dk_letkf_desc d;
    letkf_problem(which, dtype, &d);
    return dtype == DK_F32 ? dk_letkf_reference(&d, lk_xb32, lk_yb32, lk_yo, lk_r, xa, nobs, spread)
                           : dk_letkf_reference(&d, lk_xb, lk_yb, lk_yo, lk_r, xa, nobs, spread);
}

/* The same with weight interpolation: the weight points every 2nd lattice
 * point of each axis and its last (C shape 6 x 8, stride 2 x 2), C their
 * bilinear interpolation from dk_letkf_interp_grid; the serial reference
 * into xa (dtype) and spread. */
int c_letkf_interp(int which, int dtype, void *xa, double *spread)
{
    static size_t widx[LK_N];
    static int64_t indptr[LK_N + 1], indices[4 * LK_N];
    static double values[4 * LK_N], wgrid[LK_N * 2];
    size_t shape[2] = {6, 8}, stride[2] = {2, 2}, nw;
    dk_letkf_desc d;
    letkf_problem(which, dtype, &d);
    int s = dk_letkf_interp_grid(2, shape, stride, &nw, widx, indptr, indices, values);
    if (s != DK_OK)
        return s;
    for (size_t w = 0; w < nw; w++)
        wgrid[2 * w] = lk_grid[2 * widx[w]], wgrid[2 * w + 1] = lk_grid[2 * widx[w] + 1];
    d.n = nw, d.grid_coords = wgrid;
    dk_csr C = {LK_N, nw, indptr, indices, values};
    return dtype == DK_F32 ? dk_letkf_reference_interp(&d, &C, lk_xb32, lk_yb32, lk_yo, lk_r, xa, spread)
                           : dk_letkf_reference_interp(&d, &C, lk_xb, lk_yb, lk_yo, lk_r, xa, spread);
}
