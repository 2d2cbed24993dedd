/* The C side of test_fortran: the same data built by C code in C order and
 * the serial references run on it, so that the Fortran module's results
 * (and its Fortran-to-C order mapping) are checked against C's; and the
 * structure layouts as the C compiler sees them. */
#include <stddef.h>
#include <stdint.h>
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
        AT(dk_gauss_desc, order_poles); AT(dk_gauss_desc, cval);
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
        AT(dk_kmeans_desc, window); AT(dk_kmeans_desc, variant);
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
    }
#undef AT
    return n;
}

/* The gauss reference on the test field of C shape shape[0..ndim), sigma per
 * C axis (0: not filtered), into out (dtype). */
int c_gauss(int ndim, const size_t *shape, const double *sigma, int K, int dtype, void *out)
{
    dk_gauss_desc d;
    dk_gauss_desc_init(&d);
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
