/* dakit-opencl enkf kernels: the definitions of dakit/enkf.h in float64.
 *
 * float32 data are widened on the device (ek_widen) and results rounded
 * back (ek_narrow), as the cpu plugin does, so both precisions share one
 * set of float64 kernels. Every kernel sums in a fixed order: no atomics,
 * so the results do not depend on scheduling. H is CSR with int64 indices
 * (columns sorted within each row by the core); ek_band reads an int32 copy. */
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

/* ---- banded, 1-D C (ek_band_NB, NB members a pass): C applied as a
 * short convolution of the sparse vectors e_l o h_j, after the cuda
 * plugin's k_band. A work-group takes BAND_TILE consecutive state points
 * and rows j0, j0+1, ... of H (`jb` rows a block); each run of BAND_SPAN
 * work-items (a warp on NVIDIA) owns BAND_SPAN * BAND_R consecutive points
 * (lane + BAND_SPAN r), so its c values sit at consecutive local addresses
 * and one staged G row serves BAND_R points. c is staged once as a signed,
 * zero-padded window cs[d + W] (d = i - k in [-W, W]): the inner loop has
 * no branch and no bounds test, one local load of c and NB fmas per
 * (point, nonzero). The weighted anomalies G = H_t e[k_t] are formed while
 * staging the row's nonzeros within reach of the tile (range: their bounds
 * per (row, tile), found on the host); each span walks only those within
 * its own reach. The block's results go through local memory so that the
 * stores of PHT cover runs of jb columns instead of one double every M.
 * Sums run in a fixed order: results repeat exactly. */
#define BAND_WG 128
#define BAND_SPAN 32
#define BAND_R 4
#define BAND_TILE (BAND_WG * BAND_R)
#define BAND_CHUNK 128 /* nonzeros staged at a time */
#define BAND_JB 4      /* rows per block at most */
#define BAND_STG (BAND_JB + 1) /* a point's staged results, padded against bank conflicts */
#define BAND_MAX_LB 12 /* members per pass: private arrays are this long, LB of them used */

static int lower_bound_local(__local const int *ks, int b, int e, int key)
{
    while (b < e) {
        int mid = b + (e - b) / 2;
        if (ks[mid] < key)
            b = mid + 1;
        else
            e = mid;
    }
    return b;
}

static inline void band(const int NB, const int wide, __global const double *e, __global const double *values,
                        __global const double *loc, __global const int *indices, __global const int *range,
                        __global double *pht, int N, int L, int M, int rx, int W, int tiles, int jb,
                        double inv_lm1, __local double *cs, __local double2 *gs2, __local int *ks,
                        __local double *stg)
{
    __local double *gs = (__local double *)gs2;
    const int lid = get_local_id(0), lane = lid % BAND_SPAN, span = lid / BAND_SPAN;
    const int tile = get_group_id(0);
    for (int q = lid; !wide && q <= 2 * W; q += BAND_WG) {
        int d = q > W ? q - W : W - q;
        cs[q] = d <= rx ? loc[d] : 0.0;
    }
    const int i0 = tile * BAND_TILE, pbase = span * BAND_SPAN * BAND_R, wbase = i0 + pbase;
    const int klo = wbase - rx, khi = wbase + BAND_SPAN * BAND_R - 1 + rx;
    const int cbase = wbase + lane + W;
    for (int j0 = get_group_id(1) * jb; j0 < M; j0 += get_num_groups(1) * jb) {
        const int jn = M - j0 < jb ? M - j0 : jb;
        for (int jj = 0; jj < jn; jj++) {
            const int j = j0 + jj;
            const int tb = range[2 * (j * tiles + tile)], te = range[2 * (j * tiles + tile) + 1];
            double out[BAND_R];
            for (int r = 0; r < BAND_R; r++)
                out[r] = 0.0;
            for (int l0 = 0; l0 < L; l0 += NB) {
                double acc[BAND_R][BAND_MAX_LB];
#pragma unroll
                for (int r = 0; r < BAND_R; r++)
#pragma unroll
                    for (int l = 0; l < NB; l++)
                        acc[r][l] = 0.0;
                for (int c0 = tb; c0 < te; c0 += BAND_CHUNK) {
                    const int cn = te - c0 < BAND_CHUNK ? te - c0 : BAND_CHUNK;
                    barrier(CLK_LOCAL_MEM_FENCE);
                    for (int q = lid; q < cn * NB; q += BAND_WG) {
                        int tt = q / NB, l = q - tt * NB;
                        int k = indices[c0 + tt];
                        gs[q] = l0 + l < L ? values[c0 + tt] * e[(size_t)k * L + l0 + l] : 0.0;
                        if (l == 0)
                            ks[tt] = k;
                    }
                    barrier(CLK_LOCAL_MEM_FENCE);
                    const int lo = lower_bound_local(ks, 0, cn, klo), hi = lower_bound_local(ks, lo, cn, khi + 1);
                    for (int tt = lo; tt < hi; tt++) {
                        const int k = ks[tt];
                        __local const double *c = cs + (cbase - k);
                        double g[BAND_MAX_LB];
#pragma unroll
                        for (int h = 0; h < NB / 2; h++) {
                            double2 v = gs2[tt * (NB / 2) + h];
                            g[2 * h] = v.x;
                            g[2 * h + 1] = v.y;
                        }
#pragma unroll
                        for (int r = 0; r < BAND_R; r++) {
                            double cr;
                            if (wide) {
                                int d = abs(wbase + lane + BAND_SPAN * r - k);
                                cr = d <= rx ? loc[d] : 0.0;
                            } else {
                                cr = c[BAND_SPAN * r];
                            }
#pragma unroll
                            for (int l = 0; l < NB; l++)
                                acc[r][l] = fma(cr, g[l], acc[r][l]);
                        }
                    }
                }
#pragma unroll
                for (int r = 0; r < BAND_R; r++) {
                    int i = wbase + BAND_SPAN * r + lane;
                    if (i < N)
#pragma unroll
                        for (int l = 0; l < NB; l++)
                            if (l0 + l < L)
                                out[r] = fma(e[(size_t)i * L + l0 + l], acc[r][l], out[r]);
                }
            }
            for (int r = 0; r < BAND_R; r++)
                stg[(pbase + BAND_SPAN * r + lane) * BAND_STG + jj] = out[r] * inv_lm1;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int q = lid; q < BAND_TILE * jn; q += BAND_WG) {
            int p = q / jn, jj = q - p * jn;
            if (i0 + p < N)
                pht[(size_t)(i0 + p) * M + j0 + jj] = stg[p * BAND_STG + jj];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* cs: 2W + 1 doubles (W = rx + BAND_SPAN * BAND_R - 1), from the host.
 * ek_band_wide_NB, for a window too wide for local memory, reads c from
 * global memory instead (consecutive lanes, consecutive addresses) and
 * ignores cs. */
#define EK_BAND(LB)                                                                                                 \
    __kernel __attribute__((reqd_work_group_size(BAND_WG, 1, 1))) void ek_band_##LB(                                \
        __global const double *e, __global const double *values, __global const double *loc,                      \
        __global const int *indices, __global const int *range, __global double *pht, int N, int L, int M,       \
        int rx, int W, int tiles, int jb, double inv_lm1, __local double *cs)                                     \
    {                                                                                                               \
        __local double2 gs2[BAND_CHUNK * LB / 2];                                                                   \
        __local int ks[BAND_CHUNK];                                                                                 \
        __local double stg[BAND_TILE * BAND_STG];                                                                   \
        band(LB, 0, e, values, loc, indices, range, pht, N, L, M, rx, W, tiles, jb, inv_lm1, cs, gs2, ks, stg);    \
    }                                                                                                               \
    __kernel __attribute__((reqd_work_group_size(BAND_WG, 1, 1))) void ek_band_wide_##LB(                           \
        __global const double *e, __global const double *values, __global const double *loc,                      \
        __global const int *indices, __global const int *range, __global double *pht, int N, int L, int M,       \
        int rx, int W, int tiles, int jb, double inv_lm1, __local double *cs)                                     \
    {                                                                                                               \
        __local double2 gs2[BAND_CHUNK * LB / 2];                                                                   \
        __local int ks[BAND_CHUNK];                                                                                 \
        __local double stg[BAND_TILE * BAND_STG];                                                                   \
        band(LB, 1, e, values, loc, indices, range, pht, N, L, M, rx, W, tiles, jb, inv_lm1, cs, gs2, ks, stg);    \
    }

EK_BAND(2)
EK_BAND(4)
EK_BAND(6)
EK_BAND(8)
EK_BAND(10)
EK_BAND(12)

/* HPHT = H PHT in two stages, summed in a fixed order. ek_hpht:
 * partial[(a*M + j)*S + s] = sum_t H[a, k_t] pht[k_t, j] over the nonzeros
 * of row a whose column lies in segment s (bounds seg[a*(S+1) + s]). The
 * segments are column ranges shared by every row, so the work-items in
 * flight (j, then a fastest) read the same rows of PHT, each from DRAM
 * about once; four rows' loads are in flight a work-item. */
__kernel void ek_hpht(__global const double *pht, __global const long *seg, __global const long *indices,
                      __global const double *values, __global double *partial, ulong M, ulong S)
{
    ulong j = get_global_id(0), a = get_global_id(1), s = get_global_id(2);
    if (j >= M)
        return;
    long t = seg[a * (S + 1) + s], end = seg[a * (S + 1) + s + 1];
    double sum = 0.0;
    for (; t + 3 < end; t += 4) {
        double rows[4];
        for (int u = 0; u < 4; u++)
            rows[u] = pht[(ulong)indices[t + u] * M + j];
        for (int u = 0; u < 4; u++)
            sum += values[t + u] * rows[u];
    }
    for (; t < end; t++)
        sum += values[t] * pht[(ulong)indices[t] * M + j];
    partial[(a * M + j) * S + s] = sum;
}

/* hpht[q] = the sum of its S partials: one work-group per entry, strided
 * sums then a tree in local memory (red: a double per work-item, a power
 * of two of them). */
__kernel void ek_hpht_sum(__global const double *partial, __global double *hpht, ulong S, __local double *red)
{
    ulong q = get_group_id(0);
    uint lid = get_local_id(0), n = get_local_size(0);
    double sum = 0.0;
    for (ulong s = lid; s < S; s += n)
        sum += partial[q * S + s];
    red[lid] = sum;
    for (uint h = n / 2; h > 0; h /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < h)
            red[lid] += red[lid + h];
    }
    if (lid == 0)
        hpht[q] = red[0];
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

/* ---- the distributed layer's phases (cov_rows) ---- */

/* Point k of a box of w columns starting at (lo0, lo1), as a row of a
 * grid with rows ny long. */
static ulong box_row(ulong k, ulong lo0, ulong lo1, ulong w, ulong ny)
{
    return (lo0 + k / w) * ny + lo1 + k % w;
}

static void store(__global void *out, int f32, ulong k, double v)
{
    if (f32)
        ((__global float *)out)[k] = (float)v;
    else
        ((__global double *)out)[k] = v;
}

/* out[k, :] = pht[box point k, :] in the plan's dtype */
__kernel void ek_rows(__global const double *pht, __global void *out, int f32, ulong M, ulong count, ulong lo0,
                      ulong lo1, ulong w, ulong ny)
{
    ulong j = get_global_id(0), k = get_global_id(1);
    if (j >= M || k >= count)
        return;
    store(out, f32, k * M + j, pht[box_row(k, lo0, lo1, w, ny) * M + j]);
}

/* The partial sums over the box's points: part[at + a*M + b] = sum of
 * H[a,i] pht[i,b], and with x (own points x L, float64) part[at + M*M +
 * a*L + l] = sum of H[a,i] x[i,l], nonzeros in row order. */
__kernel void ek_part(__global const double *pht, __global const double *x, __global const long *indptr,
                      __global const long *indices, __global const double *values, __global void *part, int f32,
                      ulong at, ulong M, ulong L, int with_x, ulong lo0, ulong hi0, ulong lo1, ulong hi1, ulong ny)
{
    ulong b = get_global_id(0), a = get_global_id(1);
    if (a >= M || b >= M + (with_x ? L : 0))
        return;
    double sum = 0.0;
    for (long t = indptr[a]; t < indptr[a + 1]; t++) {
        ulong i = (ulong)indices[t], ix = i / ny, iy = i % ny;
        if (ix < lo0 || ix >= hi0 || iy < lo1 || iy >= hi1)
            continue;
        if (b < M)
            sum += values[t] * pht[i * M + b];
        else
            sum += values[t] * x[((ix - lo0) * (hi1 - lo1) + iy - lo1) * L + (b - M)];
    }
    store(part, f32, b < M ? at + a * M + b : at + M * M + a * L + (b - M), sum);
}
