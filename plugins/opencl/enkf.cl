/* dakit-opencl enkf kernels: the definitions of dakit/enkf.h in float64.
 *
 * float32 data are widened on the device (ek_widen) and results rounded
 * back (ek_narrow), as the cpu plugin does, so both precisions share one
 * set of float64 kernels. Every kernel takes one output element per
 * work-item and sums in a fixed order: no atomics, so the results do not
 * depend on scheduling. H is CSR with int64 indices (columns sorted within
 * each row by the core). */
#pragma OPENCL EXTENSION cl_khr_fp64 : enable

/* members summed together per pass over a row of H: the private
 * accumulators stay in registers while C is looked up once per nonzero */
#define LB 8

/* C[i, k] from its first row (ndim 1) or its nx x ny table (ndim 2) */
static double loc_at(__global const double *loc, int ndim, ulong ny, ulong i, ulong k)
{
    if (ndim == 1)
        return loc[i > k ? i - k : k - i];
    ulong ix = i / ny, iy = i % ny, kx = k / ny, ky = k % ny;
    return loc[(ix > kx ? ix - kx : kx - ix) * ny + (iy > ky ? iy - ky : ky - iy)];
}

__kernel void ek_widen(__global const float *in, __global double *out, ulong n)
{
    ulong g = get_global_id(0);
    if (g < n)
        out[g] = (double)in[g];
}

__kernel void ek_narrow(__global const double *in, __global float *out, ulong n)
{
    ulong g = get_global_id(0);
    if (g < n)
        out[g] = (float)in[g];
}

/* G[t*L + l] = H_t e[k_t, l] */
__kernel void ek_weigh(__global const double *e, __global const long *indices,
                       __global const double *values, __global double *G, ulong nnz, ulong L)
{
    ulong g = get_global_id(0);
    if (g >= nnz * L)
        return;
    ulong t = g / L, l = g % L;
    G[g] = values[t] * e[(ulong)indices[t] * L + l];
}

static long lower_bound(__global const long *indices, long b, long e, long key)
{
    while (b < e) {
        long mid = b + (e - b) / 2;
        if (indices[mid] < key)
            b = mid + 1;
        else
            e = mid;
    }
    return b;
}

/* pht[i, j] = 1/(L-1) sum_l e[i,l] sum_t C[i,k_t] G[t,l], one (i, j) per
 * work-item (dimension 0: j, so neighbours write neighbouring elements).
 * banded: only the nonzeros of row j within `window` of i, found by
 * bisection, and zero entries of C skipped. */
__kernel void ek_direct(__global const double *e, __global const double *G,
                        __global const long *indptr, __global const long *indices,
                        __global const double *loc, __global double *pht, ulong N, ulong L,
                        ulong M, int ndim, ulong ny, long window, int banded)
{
    ulong j = get_global_id(0), i = get_global_id(1);
    if (j >= M || i >= N)
        return;
    long b = indptr[j], end = indptr[j + 1];
    if (banded) {
        b = lower_bound(indices, b, end, (long)i - window);
        end = lower_bound(indices, b, end, (long)i + window + 1);
    }
    double v = 0.0;
    for (ulong l0 = 0; l0 < L; l0 += LB) {
        int nl = L - l0 < LB ? (int)(L - l0) : LB;
        double acc[LB];
        for (int u = 0; u < LB; u++)
            acc[u] = 0.0;
        for (long t = b; t < end; t++) {
            double c = loc_at(loc, ndim, ny, i, (ulong)indices[t]);
            if (banded && c == 0.0)
                continue;
            __global const double *g = G + (ulong)t * L + l0;
            for (int u = 0; u < nl; u++)
                acc[u] += c * g[u];
        }
        for (int u = 0; u < nl; u++)
            v += e[i * L + l0 + u] * acc[u];
    }
    pht[i * M + j] = v / (double)(L - 1);
}

/* hpht[a, j] = sum_t H[a, k_t] pht[k_t, j] */
__kernel void ek_hpht(__global const double *pht, __global const long *indptr,
                      __global const long *indices, __global const double *values,
                      __global double *hpht, ulong M)
{
    ulong j = get_global_id(0), a = get_global_id(1);
    if (j >= M || a >= M)
        return;
    double sum = 0.0;
    for (long t = indptr[a]; t < indptr[a + 1]; t++)
        sum += values[t] * pht[(ulong)indices[t] * M + j];
    hpht[a * M + j] = sum;
}

/* X (N x L) in place: the ensemble mean plus its anomalies times
 * `inflation`; e receives the inflated anomalies. */
__kernel void ek_inflate(__global double *X, __global double *e, ulong N, ulong L, double inflation)
{
    ulong i = get_global_id(0);
    if (i >= N)
        return;
    double mean = 0.0;
    for (ulong l = 0; l < L; l++)
        mean += X[i * L + l];
    mean /= (double)L;
    for (ulong l = 0; l < L; l++) {
        double a = inflation * (X[i * L + l] - mean);
        e[i * L + l] = a;
        X[i * L + l] = mean + a;
    }
}

/* D[j, l] = d[j, l] - (H X)[j, l] */
__kernel void ek_innovation(__global const double *X, __global const long *indptr,
                            __global const long *indices, __global const double *values,
                            __global const double *d, __global double *D, ulong M, ulong L)
{
    ulong l = get_global_id(0), j = get_global_id(1);
    if (l >= L || j >= M)
        return;
    double hx = 0.0;
    for (long t = indptr[j]; t < indptr[j + 1]; t++)
        hx += values[t] * X[(ulong)indices[t] * L + l];
    D[j * L + l] = d[j * L + l] - hx;
}

/* X[i, l] += sum_j pht[i, j] W[j, l], W = (HPHT + R)^{-1} D */
__kernel void ek_update(__global double *X, __global const double *pht, __global const double *W,
                        ulong N, ulong L, ulong M)
{
    ulong l = get_global_id(0), i = get_global_id(1);
    if (l >= L || i >= N)
        return;
    double v = X[i * L + l];
    for (ulong j = 0; j < M; j++)
        v += pht[i * M + j] * W[j * L + l];
    X[i * L + l] = v;
}

/* ---- the fft scheme (clFFT does the transforms) ----
 * A batch holds `jn` columns j0 .. j0+jn-1 of PHT times L members: slot
 * b = jj * L + l is a zeroed real array of P points (the circulant
 * embedding, n1 points per row in 2-D) holding e_l o h_j. */
static ulong embedded_at(ulong k, ulong ny, ulong n1, int two_d)
{
    return two_d ? (k / ny) * n1 + k % ny : k;
}

/* one slot per work-item, its row of H in order: repeated columns add */
__kernel void ek_scatter(__global const double *G, __global const long *indptr,
                         __global const long *indices, __global double *buf, ulong L, ulong j0,
                         ulong jn, ulong P, ulong ny, ulong n1, int two_d)
{
    ulong b = get_global_id(0);
    if (b >= jn * L)
        return;
    ulong j = j0 + b / L, l = b % L;
    __global double *v = buf + b * P;
    for (long t = indptr[j]; t < indptr[j + 1]; t++)
        v[embedded_at((ulong)indices[t], ny, n1, two_d)] += G[(ulong)t * L + l];
}

/* freq *= the spectrum of C's embedding (already divided by P) */
__kernel void ek_multiply(__global double2 *freq, __global const double2 *spectrum, ulong Pc,
                          ulong count)
{
    ulong g = get_global_id(0);
    if (g >= count)
        return;
    double2 a = freq[g], s = spectrum[g % Pc];
    freq[g] = (double2)(a.x * s.x - a.y * s.y, a.x * s.y + a.y * s.x);
}

__kernel void ek_scale(__global double *v, ulong n, double factor)
{
    ulong g = get_global_id(0);
    if (g < n)
        v[g] *= factor;
}

/* pht[i, j0+jj] = 1/(L-1) sum_l e[i,l] (C (e_l o h_j))[i] */
__kernel void ek_gather(__global const double *e, __global const double *buf, __global double *pht,
                        ulong N, ulong L, ulong M, ulong j0, ulong jn, ulong P, ulong ny, ulong n1,
                        int two_d)
{
    ulong jj = get_global_id(0), i = get_global_id(1);
    if (jj >= jn || i >= N)
        return;
    ulong at = embedded_at(i, ny, n1, two_d);
    double v = 0.0;
    for (ulong l = 0; l < L; l++)
        v += e[i * L + l] * buf[(jj * L + l) * P + at];
    pht[i * M + j0 + jj] = v / (double)(L - 1);
}
