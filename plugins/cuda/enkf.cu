/* dakit cuda plugin: enkf, the localized covariance product and the analysis.
 *
 * Arithmetic is float64 throughout; float32 data are widened on the way in
 * and rounded on the way out (as the cpu plugin does), so both dtypes agree
 * with the reference to the rounding of their storage.
 *
 *   G[t*L + l] = H_t e[k_t, l]  (k_weigh) is what every scheme sums.
 *   1-D C and L <= 16, tiled and banded: k_mma, the same sum on the float64
 *           tensor cores (16 points x 8 nonzeros x 4 members per mma), c
 *           staged as a window in shared memory (the tile's reach, or
 *           segments of the state with partial sums for a wide C), the
 *           nonzeros staged by a pipeline of asynchronous copies. The
 *           vector kernels below take 2-D C and larger L.
 *   tiled   k_direct over every nonzero of row j: the seed's fused kernel,
 *           C read from its first row (or the 2-D table), H in CSR, each
 *           block a tile of state points x one observation, G staged in
 *           shared memory, the member sums in registers.
 *   banded  C applied as a short convolution of the sparse vectors
 *           e_l o h_j: for 1-D C with radius up to ~1,900, k_band (c staged
 *           in shared memory as a zero-padded signed window, 4 points per
 *           thread, G formed while staging, 32-bit indices); otherwise
 *           k_direct restricted to the nonzeros within C's support of the
 *           tile, warps skipping nonzeros out of their reach.
 *   fft     column j = 1/(L-1) sum_l e_l o C (e_l o h_j): the L*M sparse
 *           vectors are scattered, two to a complex signal (batched,
 *           chunks of whole observations sized to a memory budget), cuFFT
 *           Z2Z forward, times C's spectrum, inverse, and a gather that
 *           multiplies by e_l and sums over l. States of up to 16 blocks of
 *           <= 4096 points (1-D C) are embedded block by block, C as a
 *           16 x 16 block Toeplitz product of the blocks' spectra
 *           (k_block_toeplitz): transforms of one cuFFT pass each. Longer
 *           states and 2-D C (block Toeplitz) take one embedding of the
 *           whole signal.
 *   HPHT    k_hpht_partial over segments of each row of H (the upper triangle:
 *           HPHT is symmetric), then k_hpht_sum, which mirrors it.
 *   analysis: inflate, cov into work arrays, innovations, cuSOLVER potrf +
 *           potrs for (HPHT + R) Z = D, cuBLAS dgemm for X += PHT Z. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include <cublas_v2.h>
#include <cufft.h>
#include <cusolverDn.h>

#include <dakit/enkf.h>

#include "cuda_internal.h"

namespace {

const int DIRECT_THREADS = 128;
const int DIRECT_R = 2; /* state points per thread: G's shared loads serve both */
const int DIRECT_TILE = DIRECT_THREADS * DIRECT_R;
/* nonzeros staged at a time: G's slice stays within 32 KiB of shared memory */
const int THREADS = 256;
/* banded, 1-D C: each warp owns 32*BAND_R consecutive state points (lane +
 * 32 r), so a nonzero's c values sit in shared memory at consecutive
 * addresses across the warp (no bank conflicts) and one staged G row serves
 * BAND_R points; all index arithmetic is 32-bit. */
const int BAND_THREADS = 128;
const int BAND_R = 4;
const int BAND_TILE = BAND_THREADS * BAND_R;
const int BAND_CHUNK = 128;    /* nonzeros staged at a time */
const int BAND_MAX_LB = 12;    /* members per pass: acc[BAND_R][LB] stays in registers */
const int BAND_MAX_W = 2047;   /* c staged as 2W+1 values: at most 32 KiB of shared memory */
const size_t FFT_BUDGET = (size_t)1 << 30; /* bytes of batched transform data */
/* blocked embedding: at most BLOCKS_MAX blocks (k_block_toeplitz keeps a
 * signal's blocks and 2*BLOCKS_MAX - 1 spectra in registers), of at most
 * BLOCK_MAX points; longer signals take the whole-signal embedding */
const int BLOCKS_MAX = 16;
const long long BLOCK_MAX = 4096;

struct Plan {
    dk_cuda_device *dev;
    const dk_enkf_setup *s;
    long long N, L, M, nnz;
    int two_d;
    long long ny;
    long long rx, ry, window;
    double *loc;
    int *indptr, *indices, *row_of;
    double *values;
    double *G;
    /* float32 cov and the analysis: float64 work arrays */
    double *e64, *pht64, *hpht64, *x64;
    /* fft */
    long long P0, P1, P;  /* embedding: P0 (x P1) points */
    long long rows_per_chunk;
    cufftHandle whole, last; /* Z2Z plans: full chunks, the last chunk (blocked: the inverse) */
    int have_whole, have_last;
    double *spectrum; /* P values: real (C's embedding is symmetric), divided by P */
    cufftDoubleComplex *buf; /* two vectors per signal, as real and imaginary parts */
    /* blocked embedding (1-D C, nb blocks of b points, see k_block_toeplitz):
     * signals scattered into `blocks`, nb + 1 blocks each (the last zero);
     * their windows' spectra go to buf, (nb + 1) * 2b per signal */
    long long blk, nb;
    cufftDoubleComplex *blocks, *blk_spectrum; /* blk_spectrum: [d + nb - 1][f], divided by 2b */
    cufftHandle fwd_whole, fwd_last;
    int have_fwd_whole, have_fwd_last;
    /* HPHT in two stages: partial sums over S segments of each row of H */
    double *partial;
    long long S;
    int *hpht_seg; /* M x (S + 1): row a's nonzeros with columns in segment s, [seg[s], seg[s+1]) */
    /* banded: each tile's range of nonzeros in each row (NULL: bisect) */
    int *range_lo, *range_hi;
    int band_fast; /* 1-D banded with a short support: k_band */
    /* tiled and banded with 1-D C on the tensor cores: k_mma */
    int mma, mma_mt, mma_rx, mma_seg_len, mma_wcap, mma_nseg;
    double *mma_partial;
    /* analysis */
    cusolverDnHandle_t solver;
    cublasHandle_t blas;
    double *A, *D, *d_host_copy, *r_dev, *work;
    int *info;
    int lwork;
};

unsigned blocks_for(long long n, int threads)
{
    long long b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : (b > (1ll << 30) ? (1ll << 30) : b));
}

/* ---- kernels ---- */

template <typename T>
__global__ void k_widen(const T *in, double *out, long long n)
{
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < n; q += (long long)gridDim.x * blockDim.x)
        out[q] = (double)in[q];
}

template <typename T>
__global__ void k_narrow(const double *in, T *out, long long n)
{
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < n; q += (long long)gridDim.x * blockDim.x)
        out[q] = (T)in[q];
}

__global__ void k_weigh(const double *e, const int *indices, const double *values, double *G, long long nnz,
                        long long L)
{
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < nnz * L;
         q += (long long)gridDim.x * blockDim.x) {
        long long t = q / L, l = q % L;
        G[q] = values[t] * e[(long long)indices[t] * L + l];
    }
}

struct DirectArgs {
    const double *e, *G, *loc;
    const int *indptr, *indices;
    const int *range_lo, *range_hi; /* per (row, tile); NULL: bisect */
    double *pht;
    long long N, L, M, ny, rx, ry, window;
    int two_d, banded;
    double inv_lm1;
};

__device__ __forceinline__ int lower_bound(const int *indices, int b, int e, long long key)
{
    while (b < e) {
        int mid = b + (e - b) / 2;
        if (indices[mid] < key)
            b = mid + 1;
        else
            e = mid;
    }
    return b;
}

/* C[i,k] from the state points' grid coordinates; zero outside the support. */
__device__ __forceinline__ double c_value(const DirectArgs &a, long long ix, long long iy, int kx, int ky)
{
    long long dx = ix > kx ? ix - kx : kx - ix;
    if (!a.two_d)
        return dx <= a.rx ? __ldg(a.loc + dx) : 0.0;
    long long dy = iy > ky ? iy - ky : ky - iy;
    return (dx <= a.rx && dy <= a.ry) ? __ldg(a.loc + dx * a.ny + dy) : 0.0;
}

/* One block: DIRECT_TILE state points x observation rows j = blockIdx.y,
 * blockIdx.y + gridDim.y, ...; members in groups of LB held in registers. */
template <int LB>
__global__ void __launch_bounds__(DIRECT_THREADS) k_direct(DirectArgs a)
{
    constexpr int CHUNK = LB <= 16 ? 256 : 128;
    __shared__ double gs[CHUNK * LB];
    __shared__ int kxs[CHUNK], kys[CHUNK], kflat[CHUNK];
    __shared__ int range[2];
    const int tid = threadIdx.x;
    const long long i0 = (long long)blockIdx.x * DIRECT_TILE;
    const long long ilast = min(i0 + DIRECT_TILE, a.N) - 1;
    long long ix[DIRECT_R], iy[DIRECT_R], wlo[DIRECT_R];
    for (int r = 0; r < DIRECT_R; r++) {
        long long i = i0 + r * DIRECT_THREADS + tid;
        ix[r] = a.two_d ? i / a.ny : i;
        iy[r] = a.two_d ? i % a.ny : 0;
        wlo[r] = i0 + r * DIRECT_THREADS + (tid & ~31);
    }
    for (long long j = blockIdx.y; j < a.M; j += gridDim.y) {
        int tb = a.indptr[j], te = a.indptr[j + 1];
        if (a.banded && a.range_lo) {
            long long at = j * gridDim.x + blockIdx.x;
            tb = a.range_lo[at];
            te = a.range_hi[at];
        } else if (a.banded) {
            __syncthreads();
            if (tid == 0)
                range[0] = lower_bound(a.indices, tb, te, i0 - a.window);
            if (tid == 32)
                range[1] = lower_bound(a.indices, tb, te, ilast + a.window + 1);
            __syncthreads();
            tb = range[0];
            te = range[1];
        }
        double out[DIRECT_R];
        for (int r = 0; r < DIRECT_R; r++)
            out[r] = 0.0;
        for (long long l0 = 0; l0 < a.L; l0 += LB) {
            double acc[DIRECT_R][LB];
#pragma unroll
            for (int r = 0; r < DIRECT_R; r++)
#pragma unroll
                for (int l = 0; l < LB; l++)
                    acc[r][l] = 0.0;
            for (int c0 = tb; c0 < te; c0 += CHUNK) {
                int cn = min(CHUNK, te - c0);
                __syncthreads();
                for (int q = tid; q < cn * LB; q += DIRECT_THREADS) {
                    int tt = q / LB, l = q % LB;
                    gs[q] = l0 + l < a.L ? a.G[(long long)(c0 + tt) * a.L + l0 + l] : 0.0;
                }
                for (int q = tid; q < cn; q += DIRECT_THREADS) {
                    int k = a.indices[c0 + q];
                    kflat[q] = k;
                    kxs[q] = a.two_d ? (int)(k / a.ny) : k;
                    kys[q] = a.two_d ? (int)(k % a.ny) : 0;
                }
                __syncthreads();
                for (int tt = 0; tt < cn; tt++) {
                    long long k = kflat[tt];
                    int kx = kxs[tt], ky = kys[tt];
                    double g[LB];
#pragma unroll
                    for (int l = 0; l < LB; l++)
                        g[l] = gs[tt * LB + l];
#pragma unroll
                    for (int r = 0; r < DIRECT_R; r++) {
                        /* the warp's 32 points all lie out of reach: skip together */
                        if (a.banded && (k + a.window < wlo[r] || k - a.window > wlo[r] + 31))
                            continue;
                        double c = c_value(a, ix[r], iy[r], kx, ky);
#pragma unroll
                        for (int l = 0; l < LB; l++)
                            acc[r][l] = fma(c, g[l], acc[r][l]);
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < DIRECT_R; r++) {
                long long i = i0 + r * DIRECT_THREADS + tid;
                if (i < a.N)
#pragma unroll
                    for (int l = 0; l < LB; l++)
                        if (l0 + l < a.L)
                            out[r] = fma(a.e[i * a.L + l0 + l], acc[r][l], out[r]);
            }
        }
        for (int r = 0; r < DIRECT_R; r++) {
            long long i = i0 + r * DIRECT_THREADS + tid;
            if (i < a.N)
                a.pht[i * a.M + j] = out[r] * a.inv_lm1;
        }
    }
}

struct BandArgs {
    const double *e, *values, *loc;
    const int *indptr, *indices;
    const int *range_lo, *range_hi; /* per (row, tile); NULL: bisect */
    double *pht;
    int N, L, M, rx, W;
    double inv_lm1;
};

__device__ __forceinline__ int lower_bound32(const int *keys, int b, int e, int key)
{
    while (b < e) {
        int mid = (b + e) >> 1;
        if (keys[mid] < key)
            b = mid + 1;
        else
            e = mid;
    }
    return b;
}

/* 1-D C with support rx: pht[i, j] = 1/(L-1) sum_l e[i,l] sum_t c[|i-k_t|]
 * values[t] e[k_t,l]. c is staged once per block as a signed, zero-padded
 * window cs[d + W] (d = i - k in [-W, W]), so the inner loop has no
 * branch and no bounds test: one shared load of c and LB FMAs per point.
 * The weighted anomalies G are formed while staging (no separate pass).
 * Each warp walks only the staged nonzeros within reach of its points. */
template <int LB>
__global__ void __launch_bounds__(BAND_THREADS) k_band(BandArgs a)
{
    extern __shared__ double cs[];
    __shared__ double2 gs2[BAND_CHUNK * LB / 2]; /* 16-byte loads in the inner loop */
    double *gs = (double *)gs2;
    __shared__ int ks[BAND_CHUNK];
    __shared__ int range[2];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int W = a.W;
    for (int q = tid; q <= 2 * W; q += BAND_THREADS) {
        int d = q > W ? q - W : W - q;
        cs[q] = d <= a.rx ? a.loc[d] : 0.0;
    }
    const int i0 = blockIdx.x * BAND_TILE;
    const int wbase = i0 + warp * 32 * BAND_R;
    const int klo = wbase - a.rx, khi = wbase + 32 * BAND_R - 1 + a.rx;
    const int cbase = wbase + lane + W;
    for (int j = blockIdx.y; j < a.M; j += gridDim.y) {
        int tb, te;
        if (a.range_lo) {
            int at = j * gridDim.x + blockIdx.x;
            tb = a.range_lo[at];
            te = a.range_hi[at];
        } else {
            __syncthreads();
            if (tid == 0)
                range[0] = lower_bound32(a.indices, a.indptr[j], a.indptr[j + 1], i0 - a.rx);
            if (tid == 32)
                range[1] = lower_bound32(a.indices, a.indptr[j], a.indptr[j + 1], i0 + BAND_TILE + a.rx);
            __syncthreads();
            tb = range[0];
            te = range[1];
        }
        double out[BAND_R];
#pragma unroll
        for (int r = 0; r < BAND_R; r++)
            out[r] = 0.0;
        for (int l0 = 0; l0 < a.L; l0 += LB) {
            double acc[BAND_R][LB];
#pragma unroll
            for (int r = 0; r < BAND_R; r++)
#pragma unroll
                for (int l = 0; l < LB; l++)
                    acc[r][l] = 0.0;
            for (int c0 = tb; c0 < te; c0 += BAND_CHUNK) {
                int cn = min(BAND_CHUNK, te - c0);
                __syncthreads();
                for (int q = tid; q < cn * LB; q += BAND_THREADS) {
                    int tt = q / LB, l = q - tt * LB;
                    int k = a.indices[c0 + tt];
                    gs[q] = l0 + l < a.L ? a.values[c0 + tt] * a.e[(size_t)k * a.L + l0 + l] : 0.0;
                    if (l == 0)
                        ks[tt] = k;
                }
                __syncthreads();
                int lo = lower_bound32(ks, 0, cn, klo), hi = lower_bound32(ks, lo, cn, khi + 1);
                for (int tt = lo; tt < hi; tt++) {
                    const double *c = cs + (cbase - ks[tt]);
                    double g[LB];
#pragma unroll
                    for (int h = 0; h < LB / 2; h++) {
                        double2 v = gs2[tt * (LB / 2) + h];
                        g[2 * h] = v.x;
                        g[2 * h + 1] = v.y;
                    }
#pragma unroll
                    for (int r = 0; r < BAND_R; r++) {
                        double cr = c[32 * r];
#pragma unroll
                        for (int l = 0; l < LB; l++)
                            acc[r][l] = fma(cr, g[l], acc[r][l]);
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < BAND_R; r++) {
                int i = wbase + 32 * r + lane;
                if (i < a.N)
#pragma unroll
                    for (int l = 0; l < LB; l++)
                        if (l0 + l < a.L)
                            out[r] = fma(a.e[(size_t)i * a.L + l0 + l], acc[r][l], out[r]);
            }
        }
#pragma unroll
        for (int r = 0; r < BAND_R; r++) {
            int i = wbase + 32 * r + lane;
            if (i < a.N)
                a.pht[(size_t)i * a.M + j] = out[r] * a.inv_lm1;
        }
    }
}

/* ---- 1-D C on the float64 tensor cores (DMMA, mma.sync m16n8k4) ----
 *
 * For 16 state points i and a chunk of 8 nonzeros t of one row j, one
 * m16n8k4 product per 4 members gives D[i][t] = sum_l e[i][l] G[t][l]
 * (G = H_t e[k_t], formed from the staged anomaly rows, the members padded
 * to 4 KS); the epilogue adds c[|i - k_t|] D[i][t] into the thread's sums,
 * and at the end of the row the 4 lanes that share a point add theirs. So
 * each (point, nonzero) pair costs 4 KS tensor FMAs and one vector FMA
 * instead of L vector FMAs, and one shared load of c.
 *
 * The nonzeros sit on the mma's 8-wide side: a row's nonzeros within a
 * warp's reach (~21.6 at density 0.05, radius 200) are padded to chunks of
 * 8, not 16 (27.3 slots per point and row instead of 31.9, by simulation
 * of that case). With the anomaly rows copied 16 bytes at a time and c
 * read without bank conflicts: H100, N = 10^6, radius 200, M = 32, k_mma
 * 1.09 -> 0.88 ms (ncu), shared wavefronts 205 -> 150 M.
 *
 * A block takes mma_tile(MT) consecutive points (MT m-tiles of 16 per
 * warp: 2 for a short C, where a wider warp reaches more nonzeros it does
 * not need; 4 for segments of a wide C, where two blocks share an SM and
 * each warp needs four independent mma chains to hide their latency) and
 * every row; its nonzeros
 * are those within C's reach (rx) of the tile and, for a wide C, within
 * one segment of the state (blockIdx.y), so that c's window (signed,
 * zero-padded: cw[x] = c[|d|], d = x + i0 - khi, x = (i - i0) + (khi - k))
 * fits in shared memory. With several segments each writes its own partial
 * PHT, summed in a fixed order by k_mma_sum. Each row's nonzeros are staged
 * in chunks of 8 (the last one padded with zero weights), so a chunk never
 * spans rows. */
const int MMA_WARPS = 4;
const int MMA_THREADS = MMA_WARPS * 32;
__host__ __device__ constexpr int mma_tile(int mt) { return MMA_WARPS * mt * 16; } /* points per block */
const int MMA_CHUNK = 8;                       /* nonzeros per chunk (the mma's n) */
const int MMA_CAPC = MMA_THREADS / MMA_CHUNK;  /* chunks per batch: one nonzero slot per thread */
const int MMA_CAP = MMA_CAPC * MMA_CHUNK;
const int MMA_ROWS = 32;                       /* observation rows per group */
const int MMA_WMAX = 2048;                     /* entries of c's window (64 KiB, all four copies) */
const int MMA_MAX_KS = 4;                      /* L <= 16 */

struct MmaArgs {
    const double *e, *values, *loc;
    const int *indptr, *indices;
    const int *range_lo, *range_hi; /* per (segment, tile, row); NULL: bisect */
    double *out; /* pht, or partial[seg][i][j] with several segments */
    int N, L, M, rx, seg_len, wcap; /* seg_len 0: one segment, the tile's reach */
    int vec16; /* the anomaly rows can be copied 16 bytes at a time */
    double inv_lm1;
};

/* Staged anomaly rows: one per nonzero slot, 4 KS members rounded to 4 mod
 * 8 doubles, so the four rows of a half-warp's B-fragment load (4 members
 * each) land in four different 32-byte bank groups. Slot t holds member l
 * at l ^ mma_gswap(t): with rows 4 mod 8 doubles long, slots t and t + 4
 * would start on the same 16-byte bank group, so the 8 slots of a quarter
 * warp's 16-byte copies hit only 4 groups (2-way conflicts); swapping the
 * 16-byte pairs of the slots 4..7 mod 8 puts them on the other 4. A
 * half-warp's B load covers slots of one kind only, so it stays
 * conflict-free. */
__host__ __device__ constexpr int mma_gstride(int ks) { return (ks & 1) ? 4 * ks : 4 * ks + 4; }
__host__ __device__ constexpr int mma_gswap(int t) { return (t & 4) >> 1; }
/* c's window is held four times, copy s shifted by s banks (its length is
 * 1 mod 16 doubles); each lane picks the copy that puts its value on a bank
 * congruent to its column q mod 4 (below), so a half-warp's 16 loads of c
 * never share a bank, whatever the nonzeros' columns. */
__host__ __device__ constexpr int mma_wpad(int wcap) { return ((wcap + 14) & ~15) + 1; }

/* Row r of an m-tile (r = g and g + 8 of the fragment) holds point
 * 4 (r & 3) + (r >> 2) + 2 (r >> 3) of its 16: the four lanes g = 0..3 of a
 * column q then read c at x, x + 4, x + 8, x + 12, one bank class mod 4. */
__host__ __device__ constexpr int mma_point(int r) { return 4 * (r & 3) + ((r >> 2) & 1) + 2 * (r >> 3); }

/* Each warp collects the rows it finishes MMA_OUT at a time (MMA_OUT x 32
 * points, in shared memory past everything else), so that its stores of PHT
 * fill whole 32-byte sectors instead of writing 8 bytes into each of 32
 * (measured on the H100, N = 10^6, M = 32: k_mma 1.14 -> 1.08 ms, its DRAM
 * traffic 553 -> 338 MB). 4.5 KiB a block (MT = 2) still lets 4 blocks
 * share an SM. */
const int MMA_OUT = 4;
/* The staging rows are 16 MT + 4 doubles apart and point p sits at
 * p ^ (its m-tile mod 4), so that neither a half-warp's writes (points
 * congruent mod 4 in different m-tiles) nor the reads of rows r and r + 2
 * of 8 points meet on a bank (rows 16 MT apart with p in place had 2-way
 * conflicts on both, 4 M of k_mma's 15.7 M excess shared wavefronts at the
 * 1e6 compact case; together with mma_gswap, 0.997 -> 0.986 ms there). */
__host__ __device__ constexpr int mma_stg_row(int mt) { return 16 * mt + 4; }
__host__ __device__ constexpr int mma_stg_at(int p) { return p ^ ((p >> 4) & 3); }
__host__ __device__ constexpr size_t mma_out_at(int ks, int wcap)
{
    return ((4 * (size_t)mma_wpad(wcap) * 8 + 2 * (size_t)MMA_CAP * mma_gstride(ks) * 8 + 3 * (size_t)MMA_CAP * 8 +
             3 * (size_t)MMA_CAP * 4 + 3 * (size_t)MMA_CAPC * 16 + (size_t)(3 * MMA_ROWS + 1) * 4) +
            15) &
           ~(size_t)15;
}

size_t mma_shared(int ks, int mt, int wcap)
{
    return mma_out_at(ks, wcap) + (size_t)MMA_WARPS * MMA_OUT * mma_stg_row(mt) * 8;
}

/* D (16 x 8) += A (16 x 4) B (4 x 8) across the warp, in mma.m16n8k4's
 * fragment layout: lane (g, q) = (lane / 4, lane % 4) holds A[g][q],
 * A[g+8][q], B[q][g] and D[g][2q], D[g][2q+1], D[g+8][2q], D[g+8][2q+1].
 * On the A100 (-Dnvcc_arch=80) two m8n8k4 products give the same layout. */
__device__ __forceinline__ void dmma(double (&d)[4], const double (&a)[2], double b)
{
#if __CUDA_ARCH__ >= 900
    asm("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
        : "d"(a[0]), "d"(a[1]), "d"(b));
#else /* sm_80 (the plugin needs cp.async, so nothing older) */
    asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
        : "+d"(d[0]), "+d"(d[1])
        : "d"(a[0]), "d"(b));
    asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
        : "+d"(d[2]), "+d"(d[3])
        : "d"(a[1]), "d"(b));
#endif
}

__device__ __forceinline__ void cp_async16(void *dst, const void *src)
{
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}

__device__ __forceinline__ void cp_async8(void *dst, const void *src)
{
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(d), "l"(src) : "memory");
}

__device__ __forceinline__ void cp_async4(void *dst, const void *src)
{
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src) : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

/* The 4 lanes of a row group (lanes 4g .. 4g+3) hold partial sums of the
 * same 2 MT points (two rows of each m-tile); a butterfly over them leaves
 * lane q with the whole sums of MT / 2 of them (3 shuffles for MT = 2),
 * which go into the warp's staging rows stg; every MMA_OUT rows (and at
 * the group's last row, jlast) they are written out. Rows come in order,
 * each once. Clears the sums. */
template <int MT>
__device__ __forceinline__ void mma_flush(double (&o)[MT][2], const MmaArgs &a, int seg, int ibase, int j, int jfirst,
                                          int jlast, double *stg, int lane)
{
    constexpr int NV = 2 * MT, WP = 16 * MT, SR = mma_stg_row(MT); /* values per lane, points per warp */
    const int g = lane >> 2, q = lane & 3;
    const bool h1 = q & 2, h0 = q & 1;
    double v2[NV / 2], v1[NV / 4];
#pragma unroll
    for (int u = 0; u < NV / 2; u++) { /* value v is o[v >> 1][v & 1] */
        const int lo = u, hi = NV / 2 + u;
        double other = __shfl_xor_sync(0xffffffffu, h1 ? o[lo >> 1][lo & 1] : o[hi >> 1][hi & 1], 2);
        v2[u] = (h1 ? o[hi >> 1][hi & 1] : o[lo >> 1][lo & 1]) + other;
    }
#pragma unroll
    for (int u = 0; u < NV / 4; u++) {
        double other = __shfl_xor_sync(0xffffffffu, h0 ? v2[u] : v2[NV / 4 + u], 1);
        v1[u] = (h0 ? v2[NV / 4 + u] : v2[u]) + other;
    }
    /* lane q now holds values (q >> 1) NV/2 + (q & 1) NV/4 + u */
    const int r = (j - jfirst) % MMA_OUT;
#pragma unroll
    for (int u = 0; u < NV / 4; u++) {
        const int v = (q >> 1) * (NV / 2) + (q & 1) * (NV / 4) + u;
        stg[r * SR + mma_stg_at(16 * (v >> 1) + mma_point(g + 8 * (v & 1)))] = v1[u] * a.inv_lm1;
    }
#pragma unroll
    for (int n = 0; n < MT; n++)
        o[n][0] = o[n][1] = 0.0;
    if (r != MMA_OUT - 1 && j != jlast)
        return;
    /* rows j - r .. j of the warp's points: lane pairs (2p, 2p+1) write
     * point p's rows, two each */
    __syncwarp();
    const int jb = j - r, half = lane & 1;
#pragma unroll
    for (int h = 0; h < WP / 16; h++) {
        const int p = 16 * h + (lane >> 1), i = ibase + p;
        const int r0 = 2 * half;
        if (i < a.N && r0 <= r) {
            double *dst = a.out + ((size_t)seg * a.N + i) * a.M + jb + r0;
            double v0 = stg[r0 * SR + mma_stg_at(p)];
            if (r0 + 1 <= r && !(a.M & 1)) {
                *(double2 *)dst = make_double2(v0, stg[(r0 + 1) * SR + mma_stg_at(p)]);
            } else {
                dst[0] = v0;
                if (r0 + 1 <= r)
                    dst[1] = stg[(r0 + 1) * SR + mma_stg_at(p)];
            }
        }
    }
    __syncwarp();
}

/* The staging is a three-step pipeline of asynchronous copies, one nonzero
 * slot per thread: columns and weights of batch b+2 and the anomaly rows
 * of batch b+1 (whose columns arrived one step earlier) are in flight
 * while batch b is multiplied, so no global latency sits between barriers.
 * Padding slots copy no anomaly row: their weight is 0 and the staging
 * area holds only finite values (zeroed first). */
/* 4 blocks an SM for MT 2: capping registers for 5 (96, no spills) or 6
 * (80, a few spills) was slower on an H100, 1e6_compact_r200 1.095 and
 * 1.166 ms against 0.992 */
template <int KS, int MT>
__global__ void __launch_bounds__(MMA_THREADS, MT == 2 ? 4 : 2) k_mma(MmaArgs a)
{
    constexpr int GS = mma_gstride(KS), MMA_TILE = mma_tile(MT), WP = 16 * MT;
    extern __shared__ double smem[];
    const int wpad = mma_wpad(a.wcap);
    double *cw = smem, *er = smem + 4 * wpad;
    double *wt = er + 2 * MMA_CAP * GS;
    int *col = (int *)(wt + 3 * MMA_CAP);
    int4 *cinfo = (int4 *)(col + 3 * MMA_CAP); /* (row, first column, last column) */
    int *rlo = (int *)(cinfo + 3 * MMA_CAPC), *rhi = rlo + MMA_ROWS, *rfirst = rhi + MMA_ROWS;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
    double *stg = (double *)((char *)smem + mma_out_at(KS, a.wcap)) + warp * MMA_OUT * mma_stg_row(MT);
    const int tile = blockIdx.x, i0 = tile * MMA_TILE, seg = blockIdx.y;
    int klo = i0 - a.rx, khi = i0 + MMA_TILE - 1 + a.rx;
    if (a.seg_len) {
        klo = max(klo, seg * a.seg_len);
        khi = min(khi, seg * a.seg_len + a.seg_len - 1);
    }
    klo = max(klo, 0);
    khi = min(khi, a.N - 1);
    if (khi < klo) { /* no column of this segment within reach: zeros */
        for (int u = tid; u < MMA_TILE * a.M; u += MMA_THREADS) {
            int i = i0 + u / a.M;
            if (i < a.N)
                a.out[((size_t)seg * a.N + i) * a.M + u % a.M] = 0.0;
        }
        return;
    }
    const int win = MMA_TILE + khi - klo;
    for (int x = tid; x < win; x += MMA_THREADS) {
        int d = x + i0 - khi;
        d = d < 0 ? -d : d;
        double v = d <= a.rx ? a.loc[d] : 0.0;
#pragma unroll
        for (int s = 0; s < 4; s++)
            cw[s * wpad + x] = v;
    }
    for (int u = tid; u < 2 * MMA_CAP * GS; u += MMA_THREADS)
        er[u] = 0.0;
    const int ibase = i0 + warp * WP;
    const int wklo = ibase - a.rx, wkhi = ibase + WP - 1 + a.rx; /* columns within this warp's reach */
    double af[MT][KS][2];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int s = 0; s < KS; s++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int i = ibase + 16 * m + mma_point(g + 8 * h), l = 4 * s + q;
                af[m][s][h] = (i < a.N && l < a.L) ? a.e[(size_t)i * a.L + l] : 0.0;
            }
    double o[MT][2];
#pragma unroll
    for (int n = 0; n < MT; n++)
        o[n][0] = o[n][1] = 0.0;
    /* c's index of this lane's fragment row g, less the column */
    const int xl = khi + warp * WP + mma_point(g);
    const size_t range_at = ((size_t)seg * gridDim.x + tile) * a.M;
    for (int j0 = 0; j0 < a.M; j0 += MMA_ROWS) {
        const int nr = min(MMA_ROWS, a.M - j0);
        __syncthreads();
        if (a.range_lo) {
            if (tid < nr)
                rlo[tid] = a.range_lo[range_at + j0 + tid];
            else if (tid >= 64 && tid - 64 < nr)
                rhi[tid - 64] = a.range_hi[range_at + j0 + tid - 64];
        } else {
            if (tid < nr)
                rlo[tid] = lower_bound32(a.indices, a.indptr[j0 + tid], a.indptr[j0 + tid + 1], klo);
            else if (tid >= 64 && tid - 64 < nr)
                rhi[tid - 64] = lower_bound32(a.indices, a.indptr[j0 + tid - 64], a.indptr[j0 + tid - 63], khi + 1);
        }
        __syncthreads();
        if (warp == 0) { /* chunks per row (at least one: every row is written), scanned */
            int count = lane < nr ? max(1, (rhi[lane] - rlo[lane] + MMA_CHUNK - 1) / MMA_CHUNK) : 0, incl = count;
#pragma unroll
            for (int d = 1; d < 32; d <<= 1) {
                int v = __shfl_up_sync(0xffffffffu, incl, d);
                if (lane >= d)
                    incl += v;
            }
            if (lane < nr)
                rfirst[lane] = incl - count;
            if (lane == nr - 1)
                rfirst[nr] = incl;
        }
        __syncthreads();
        const int total = rfirst[nr], batches = (total + MMA_CAPC - 1) / MMA_CAPC;
        /* step 1 of batch bb: this thread's slot's column and weight */
        auto stage_columns = [&](int bb) {
            int st = bb % 3, c = bb * MMA_CAPC + tid / MMA_CHUNK;
            if (c >= total)
                return;
            int r = 0;
#pragma unroll
            for (int step = MMA_ROWS / 2; step; step >>= 1)
                if (r + step < nr && rfirst[r + step] <= c)
                    r += step;
            int t = rlo[r] + (c - rfirst[r]) * MMA_CHUNK + tid % MMA_CHUNK;
            int *kd = col + st * MMA_CAP + tid;
            double *wd = wt + st * MMA_CAP + tid;
            if (t < rhi[r]) {
                cp_async4(kd, a.indices + t);
                cp_async8(wd, a.values + t);
            } else {
                /* padding: the row's last column (chunks stay sorted), weight 0 */
                if (rhi[r] > rlo[r])
                    cp_async4(kd, a.indices + rhi[r] - 1);
                else
                    *kd = klo;
                *wd = 0.0;
            }
            if (tid % MMA_CHUNK == 0)
                cinfo[st * MMA_CAPC + tid / MMA_CHUNK].x = r;
        };
        /* step 2: the anomaly row of the slot's column */
        auto stage_rows = [&](int bb) {
            int st = bb % 3, c = tid / MMA_CHUNK;
            if (bb * MMA_CAPC + c >= total)
                return;
            int k = col[st * MMA_CAP + tid];
            if (tid % MMA_CHUNK == 0) {
                cinfo[st * MMA_CAPC + c].y = k;
                cinfo[st * MMA_CAPC + c].z = col[st * MMA_CAP + tid + MMA_CHUNK - 1];
            }
            if (wt[st * MMA_CAP + tid] == 0.0)
                return; /* padding (or a zero of H): nothing to weigh */
            const double *src = a.e + (size_t)k * a.L;
            double *dst = er + ((bb & 1) * MMA_CAP + tid) * GS;
            const int sw = mma_gswap(tid);
            if (a.vec16) {
                for (int l = 0; l < a.L; l += 2)
                    cp_async16(dst + (l ^ sw), src + l);
            } else {
                for (int l = 0; l < a.L; l++)
                    cp_async8(dst + (l ^ sw), src + l);
            }
        };
        stage_columns(0);
        cp_async_wait_all();
        __syncthreads();
        for (int bb = 0; bb < batches; bb++) {
            if (bb == 0) {
                stage_rows(0);
                if (batches > 1)
                    stage_columns(1);
            }
            cp_async_wait_all();
            __syncthreads();
            if (bb + 1 < batches)
                stage_rows(bb + 1);
            if (bb + 2 < batches)
                stage_columns(bb + 2);
            const int nc = min(MMA_CAPC, total - bb * MMA_CAPC);
            const double *ers = er + (bb & 1) * MMA_CAP * GS, *wts = wt + (bb % 3) * MMA_CAP;
            const int *cols = col + (bb % 3) * MMA_CAP;
            const int4 *cis = cinfo + (bb % 3) * MMA_CAPC;
            auto chunk = [&](int c) {
                const double w = wts[c * MMA_CHUNK + g];
                const int2 kk = *(const int2 *)(cols + c * MMA_CHUNK + 2 * q);
                const double *ep = ers + (c * MMA_CHUNK + g) * GS + (q ^ mma_gswap(g));
                double bf[KS];
#pragma unroll
                for (int s = 0; s < KS; s++)
                    bf[s] = w * ep[4 * s];
                /* c of (row g, column 2q), (row g + 8, 2q), (g, 2q+1), (g + 8, 2q+1);
                 * row g + 8 is 2 points on, so its copy is the other of the pair */
                const int xa = xl - kk.x, xb = xl - kk.y;
                const int sa = (q - xa) & 3, sb = (q - xb) & 3;
                const double *ca0 = cw + sa * wpad + xa, *ca8 = cw + (sa ^ 2) * wpad + xa + 2;
                const double *cb0 = cw + sb * wpad + xb, *cb8 = cw + (sb ^ 2) * wpad + xb + 2;
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    double d[4] = {0.0, 0.0, 0.0, 0.0};
#pragma unroll
                    for (int s = 0; s < KS; s++)
                        dmma(d, af[m][s], bf[s]);
                    o[m][0] = fma(ca0[16 * m], d[0], fma(cb0[16 * m], d[1], o[m][0]));
                    o[m][1] = fma(ca8[16 * m], d[2], fma(cb8[16 * m], d[3], o[m][1]));
                }
            };
            /* row by row: a row's chunks are in column order, so those
             * within the warp's reach are consecutive; two at a time, so
             * that one chunk's loads overlap the other's mma chain (H100:
             * 1e6_compact_r200 0.985 -> 0.977 ms, tiled seed_25k_full
             * 1.06 -> 0.95 ms; one at a time 0.995 and 0.96) */
            const int b0 = bb * MMA_CAPC;
            for (int r = cis[0].x;; r++) {
                int cb = max(rfirst[r], b0) - b0, ce = min(rfirst[r + 1], b0 + nc) - b0;
                while (cb < ce && cis[cb].z < wklo)
                    cb++;
                while (ce > cb && cis[ce - 1].y > wkhi)
                    ce--;
                int c = cb;
                for (; c + 1 < ce; c += 2) {
                    chunk(c);
                    chunk(c + 1);
                }
                if (c < ce)
                    chunk(c);
                if (rfirst[r + 1] <= b0 + nc) /* the row ends in this batch */
                    mma_flush(o, a, seg, ibase, j0 + r, j0, j0 + nr - 1, stg, lane);
                if (rfirst[r + 1] >= b0 + nc)
                    break;
            }
            __syncthreads();
        }
    }
}

/* pht[i, j] = the segments' partial sums, added in segment order. */
__global__ void k_mma_sum(const double *partial, double *pht, long long NM, int nseg)
{
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < NM; q += (long long)gridDim.x * blockDim.x) {
        double v = 0.0;
        for (int s = 0; s < nseg; s++)
            v += partial[s * NM + q];
        pht[q] = v;
    }
}

/* Vector v = (j - j0)*L + l of the chunk gets e_l o h_j in the embedding:
 * the real part of signal v/2 when v is even, the imaginary part when odd.
 * C's spectrum is real, so both parts go through the transforms unmixed.
 * Repeated columns of a row are summed by the first of their run. */
__global__ void k_scatter(const double *G, const int *indices, const int *indptr, const int *row_of, double *buf,
                          long long t_begin, long long t_end, long long j0, long long L, long long ny, long long P1,
                          long long P, int two_d)
{
    long long count = (t_end - t_begin) * L;
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < count;
         q += (long long)gridDim.x * blockDim.x) {
        long long t = t_begin + q / L, l = q % L;
        int j = row_of[t];
        int k = indices[t];
        if (t > indptr[j] && indices[t - 1] == k)
            continue;
        double sum = 0;
        for (long long u = t; u < indptr[j + 1] && indices[u] == k; u++)
            sum += G[u * L + l];
        long long at = two_d ? ((long long)k / ny) * P1 + k % ny : k;
        long long v = (j - j0) * L + l;
        buf[(v / 2) * 2 * P + 2 * at + (v & 1)] = sum;
    }
}

__global__ void k_spectrum_multiply(cufftDoubleComplex *freq, const double *spectrum, long long P, long long count)
{
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < count;
         q += (long long)gridDim.x * blockDim.x) {
        double s = spectrum[q % P];
        freq[q].x *= s;
        freq[q].y *= s;
    }
}

/* The blocked embedding splits each signal into nb blocks x_q of b points
 * and writes C as nb x nb Toeplitz blocks T_{p-q}, each embedded in a
 * circulant of 2b points with spectrum Chat_{p-q}. Then y_p = sum_q
 * T_{p-q} x_q is, per frequency f, a small Toeplitz product of spectra:
 * Y_p[f] = sum_q Chat_{p-q}[f] X_q[f], with y_p the first half of Y_p's
 * inverse. One pass over the spectra does what a whole-signal embedding
 * needs a second transform pass each way and a multiply pass for; the
 * transforms of 2b points are each one cuFFT kernel.
 * The forward transforms read overlapping windows [x_q; x_{q+1}] (the
 * signal holds a zero block x_nb after its last), not zero-padded copies:
 * shifting by half the window multiplies the spectrum by (-1)^f, so the
 * window's spectrum is W_q = X_q + (-1)^f X_{q+1}, undone from the last
 * block backwards. In place: spec[(s*(nb+1) + q)*F + f], F = 2b. */
template <int NB>
__global__ void __launch_bounds__(128) k_block_toeplitz(cufftDoubleComplex *spec, const cufftDoubleComplex *chat,
                                                         long long F, int nb, long long signals, int per_thread)
{
    const long long f = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (f >= F)
        return;
    double2 c[2 * NB - 1];
#pragma unroll
    for (int d = 0; d < 2 * NB - 1; d++) {
        int dd = d - (NB - 1);
        c[d] = (dd > -nb && dd < nb) ? chat[(dd + nb - 1) * F + f] : make_double2(0.0, 0.0);
    }
    const double sign = (f & 1) ? -1.0 : 1.0;
    const long long s_end = min(signals, (blockIdx.y + 1ll) * per_thread);
    for (long long s = blockIdx.y * (long long)per_thread; s < s_end; s++) {
        cufftDoubleComplex *base = spec + s * (nb + 1) * F + f;
        double2 x[NB];
#pragma unroll
        for (int q = 0; q < NB; q++)
            x[q] = q < nb ? base[q * F] : make_double2(0.0, 0.0);
#pragma unroll
        for (int q = NB - 2; q >= 0; q--) {
            x[q].x -= sign * x[q + 1].x;
            x[q].y -= sign * x[q + 1].y;
        }
#pragma unroll
        for (int p = 0; p < NB; p++) {
            double re = 0.0, im = 0.0;
#pragma unroll
            for (int q = 0; q < NB; q++) {
                const double2 w = c[p - q + NB - 1];
                re = fma(w.x, x[q].x, fma(-w.y, x[q].y, re));
                im = fma(w.x, x[q].y, fma(w.y, x[q].x, im));
            }
            if (p < nb)
                base[p * F] = make_double2(re, im);
        }
    }
}

/* pht[i, j] = 1/(L-1) sum_l e[i,l] (C v_jl)[i] for the chunk's rows. With
 * the blocked embedding (blk > 0) point i = p*blk + r sits at r in the
 * inverse of block p, whose windows are 2*blk apart. */
__global__ void __launch_bounds__(256) k_gather(const double *e, const double *buf, double *pht, long long N,
                                                long long L, long long M, long long j0, long long nj, long long ny,
                                                long long P1, long long P, int two_d, long long blk, double inv_lm1)
{
    /* 32 points x 32 observations: read along the points (the signals'
     * order), written along the observations (PHT's rows) */
    __shared__ double tile[32][33];
    const long long i0 = blockIdx.x * 32ll, jj0 = blockIdx.y * 32ll, i = i0 + threadIdx.x;
    if (i < N) {
        long long at = two_d ? (i / ny) * P1 + i % ny : blk ? i + (i / blk) * blk : i;
        for (int r = threadIdx.y; r < 32 && jj0 + r < nj; r += 8) {
            double v = 0;
            for (long long l = 0; l < L; l++) {
                long long vec = (jj0 + r) * L + l;
                v = fma(e[i * L + l], buf[(vec / 2) * 2 * P + 2 * at + (vec & 1)], v);
            }
            tile[r][threadIdx.x] = v * inv_lm1;
        }
    }
    __syncthreads();
    for (int r = threadIdx.y; r < 32; r += 8) {
        long long ii = i0 + r, jj = jj0 + threadIdx.x;
        if (ii < N && jj < nj)
            pht[ii * M + j0 + jj] = tile[threadIdx.x][r];
    }
}

/* partial[(a*S + s)*M + j], j >= a: row a of H times PHT over the columns
 * of segment s, [s*width, (s+1)*width). A warp takes nonzeros, its lanes 32
 * consecutive j (one coalesced row of PHT); the 8 warps' sums are added in
 * a fixed order, so results repeat exactly. HPHT is symmetric, so only its
 * upper triangle is summed: row a reads the sectors of PHT's rows from
 * column a on (H100, 1e6_compact_r200, ncu: DRAM reads 224 -> 172 MB,
 * 91 -> 78 us; the whole product 0.980 -> 0.973 ms). */
__global__ void __launch_bounds__(THREADS, 8) k_hpht_partial(const double *pht, const int *seg, const int *indices,
                                                          const double *values, double *partial, long long M,
                                                          long long S)
{
    __shared__ double red[THREADS / 32][32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = THREADS / 32;
    const long long s = blockIdx.y;
    for (long long a = blockIdx.x; a < M; a += gridDim.x) {
        long long sb = seg[a * (S + 1) + s], se = seg[a * (S + 1) + s + 1];
        for (long long j0 = a & ~31ll; j0 < M; j0 += 32) {
            long long j = j0 + lane;
            /* a full SM of warps (32 registers), each with four rows of
             * PHT in flight: H100, 1e6_compact_r200, 95 us; the compiler's
             * own choice, 106 registers and a quarter of the warps, 151 us;
             * 64 registers, 106 us */
            double acc = 0;
            if (j < M && j >= a) {
                long long t = sb + warp;
                for (; t + 3 * warps < se; t += 4 * warps) {
                    double rows[4];
#pragma unroll
                    for (int u = 0; u < 4; u++)
                        rows[u] = pht[(long long)indices[t + u * warps] * M + j];
#pragma unroll
                    for (int u = 0; u < 4; u++)
                        acc = fma(values[t + u * warps], rows[u], acc);
                }
                for (; t < se; t += warps)
                    acc = fma(values[t], pht[(long long)indices[t] * M + j], acc);
            }
            red[warp][lane] = acc;
            __syncthreads();
            if (warp == 0 && j < M && j >= a) {
                double sum = 0;
                for (int w = 0; w < warps; w++)
                    sum += red[w][lane];
                partial[(a * S + s) * M + j] = sum;
            }
            __syncthreads();
        }
    }
}

/* One warp per entry of the upper triangle, written to both triangles:
 * the lanes sum strided segments, then a shuffle tree (with a thread per
 * entry, each waited on S dependent loads: 45 us on an H100 for M = 32 and
 * N = 10^6, a sixth of the HPHT time). */
__global__ void k_hpht_sum(const double *partial, double *hpht, long long M, long long S)
{
    const int lane = threadIdx.x & 31;
    for (long long q = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / 32; q < M * M;
         q += (long long)gridDim.x * blockDim.x / 32) {
        long long a = q / M, j = q % M;
        if (j < a)
            continue;
        double sum = 0;
        for (long long s = lane; s < S; s += 32)
            sum += partial[(a * S + s) * M + j];
        for (int o = 16; o > 0; o >>= 1)
            sum += __shfl_down_sync(0xffffffffu, sum, o);
        if (lane == 0)
            hpht[q] = hpht[j * M + a] = sum;
    }
}

/* Forecast anomalies, inflated, and the inflated ensemble. */
template <typename T>
__global__ void k_inflate(const T *x, double *X, double *e, long long N, long long L, double inflation)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < N; i += (long long)gridDim.x * blockDim.x) {
        double mean = 0;
        for (long long l = 0; l < L; l++)
            mean += (double)x[i * L + l];
        mean /= (double)L;
        for (long long l = 0; l < L; l++) {
            double a = inflation * ((double)x[i * L + l] - mean);
            e[i * L + l] = a;
            X[i * L + l] = mean + a;
        }
    }
}

/* D (column-major M x L, for potrs) = d - H X, and A += diag(r). */
__global__ void k_innovation(const double *X, const int *indptr, const int *indices, const double *values,
                             const double *d, const double *r, double *D, double *A, long long M, long long L)
{
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < M * L;
         q += (long long)gridDim.x * blockDim.x) {
        long long j = q / L, l = q % L;
        double hx = 0;
        for (int u = indptr[j]; u < indptr[j + 1]; u++)
            hx += values[u] * X[(long long)indices[u] * L + l];
        D[l * M + j] = d[j * L + l] - hx;
        if (l == 0)
            A[j * M + j] += r[j];
    }
}

/* ---- plan ---- */

const char *const schemes[] = {"tiled", "banded", "fft", NULL};

void plan_free(Plan *p)
{
    if (!p)
        return;
    if (cudaSetDevice(p->dev->ordinal) == cudaSuccess) {
        void *ptrs[] = {p->loc,    p->indptr, p->indices,  p->row_of, p->values, p->G,    p->e64,
                        p->pht64,  p->hpht64, p->x64,      p->spectrum, p->buf, p->blocks, p->blk_spectrum, p->partial, p->A,
                        p->D,      p->d_host_copy, p->r_dev, p->work,  p->info, p->range_lo, p->range_hi, p->mma_partial, p->hpht_seg};
        for (void *q : ptrs)
            if (q)
                cudaFree(q);
        if (p->have_whole)
            cufftDestroy(p->whole);
        if (p->have_last)
            cufftDestroy(p->last);
        if (p->have_fwd_whole)
            cufftDestroy(p->fwd_whole);
        if (p->have_fwd_last)
            cufftDestroy(p->fwd_last);
        if (p->solver)
            cusolverDnDestroy(p->solver);
        if (p->blas)
            cublasDestroy(p->blas);
    }
    (void)cudaGetLastError();
    free(p);
}

/* The smallest 2^a 3^b 5^c 7^d >= n: cuFFT's fast sizes. */
long long fft_size(long long n)
{
    for (long long m = n;; m++) {
        long long r = m;
        for (long long f : {2, 3, 5, 7})
            while (r % f == 0)
                r /= f;
        if (r == 1)
            return m;
    }
}

/* A batched Z2Z plan on the plan's stream: transforms of n[0] (x n[1])
 * points, idist and odist apart (idist < n: overlapping input windows). */
dk_status make_plan(Plan *p, cufftHandle *h, int *have, int rank, const int *n, long long idist, long long odist,
                    long long batch, dk_msg *msg)
{
    int embed[2] = {n[0], rank == 2 ? n[1] : 1};
    CUFFT_TRY(cufftCreate(h), "cufftCreate");
    *have = 1;
    size_t work = 0;
    CUFFT_TRY(cufftMakePlanMany(*h, rank, (int *)n, embed, 1, (int)idist, embed, 1, (int)odist, CUFFT_Z2Z, (int)batch,
                              &work),
            "planning");
    CUFFT_TRY(cufftSetStream(*h, p->dev->stream), "cufftSetStream");
    return DK_OK;
}

/* The whole-signal embedding's transforms, contiguous. */
dk_status make_transform(Plan *p, cufftHandle *h, int *have, long long batch, dk_msg *msg)
{
    int n[2] = {(int)p->P0, (int)p->P1};
    return make_plan(p, h, have, p->two_d ? 2 : 1, n, p->P, p->P, batch, msg);
}

/* col (bytes of it) through the forward transform h, by way of dev. */
dk_status forward_on_device(Plan *p, cufftHandle h, cufftDoubleComplex *dev, cufftDoubleComplex *col, size_t bytes,
                            dk_msg *msg)
{
    const char *what = "transforming C's embedding";
    CUDA_TRY(cudaMemcpyAsync(dev, col, bytes, cudaMemcpyHostToDevice, p->dev->stream), what);
    CUFFT_TRY(cufftExecZ2Z(h, dev, dev, CUFFT_FORWARD), what);
    CUDA_TRY(cudaMemcpyAsync(col, dev, bytes, cudaMemcpyDeviceToHost, p->dev->stream), what);
    CUDA_TRY(cudaStreamSynchronize(p->dev->stream), what);
    return DK_OK;
}

/* The forward transforms of `batch` embeddings of n[0] (x n[1]) points held
 * in col, on the device array dev, back into col, divided by their size:
 * the spectra of C, made once a plan. */
dk_status spectra(Plan *p, int rank, const int *n, long long batch, cufftDoubleComplex *dev, cufftDoubleComplex *col,
                  dk_msg *msg)
{
    const long long size = (long long)n[0] * (rank == 2 ? n[1] : 1);
    const size_t bytes = (size_t)(size * batch) * sizeof *col;
    cufftHandle h;
    int have = 0;
    dk_status st = make_plan(p, &h, &have, rank, n, size, size, batch, msg);
    if (st == DK_OK)
        st = forward_on_device(p, h, dev, col, bytes, msg);
    if (have)
        cufftDestroy(h);
    for (long long q = 0; st == DK_OK && q < size * batch; q++)
        col[q] = make_cuDoubleComplex(cuCreal(col[q]) / (double)size, cuCimag(col[q]) / (double)size);
    return st;
}

/* The embedding's first column (per axis in 2-D): C[i,k] = col[(i-k) mod P]. */
double embedded(const dk_enkf_setup *s, long long P0, long long P1, long long a, long long b)
{
    long long n0 = s->desc.loc_ndim == 1 ? (long long)s->desc.n : (long long)s->desc.nx;
    long long n1 = s->desc.loc_ndim == 1 ? 1 : (long long)s->desc.ny;
    long long da = a < n0 ? a : (P0 - a < n0 ? P0 - a : -1);
    long long db = s->desc.loc_ndim == 1 ? 0 : (b < n1 ? b : (P1 - b < n1 ? P1 - b : -1));
    if (da < 0 || db < 0)
        return 0.0;
    return s->loc[da * n1 + db];
}

dk_status ensure(double **ptr, long long count, const char *what, dk_msg *msg)
{
    if (!*ptr)
        CUDA_TRY(cudaMalloc(ptr, (size_t)(count ? count : 1) * sizeof(double)), what);
    return DK_OK;
}

template <typename T>
dk_status copy_in(T *dst, const T *src, size_t count, const char *what, dk_msg *msg)
{
    CUDA_TRY(cudaMemcpy(dst, src, count * sizeof(T), cudaMemcpyHostToDevice), what);
    return DK_OK;
}

template <typename T>
dk_status upload(T **dst, const T *src, size_t count, const char *what, dk_msg *msg)
{
    CUDA_TRY(cudaMalloc(dst, (count ? count : 1) * sizeof(T)), what);
    if (count)
        CUDA_TRY(cudaMemcpy(*dst, src, count * sizeof(T), cudaMemcpyHostToDevice), what);
    return DK_OK;
}

/* Observations per chunk for an embedding of P points within the budget
 * (8 P bytes a vector, two vectors a signal), and the chunk's signals. */
void chunking(const Plan *p, long long P, size_t budget, long long *rows, long long *signals)
{
    long long r = (long long)(budget / (size_t)(8 * P)) / p->L;
    r = r < 1 ? 1 : r > p->M ? p->M : r;
    *rows = r;
    *signals = (r * p->L + 1) / 2;
}

/* Sizes 2^a r >= n with 2^a >= 256 and r a small odd 7-smooth factor:
 * sizes that cuFFT splits into few passes, most of them radix 2. Writes the
 * `want` smallest distinct ones, ascending, into out; returns how many. */
int pow2_sizes(long long n, long long *out, int want)
{
    const long long odd[] = {1, 3, 5, 7, 9, 15, 21, 25, 27, 45, 49};
    long long all[sizeof odd / sizeof odd[0]];
    int count = 0;
    for (long long r : odd) {
        long long m = 256 * r;
        while (m < n)
            m *= 2;
        all[count++] = m;
    }
    std::sort(all, all + count);
    int have = 0;
    for (int i = 0; i < count && have < want; i++)
        if (have == 0 || all[i] != out[have - 1])
            out[have++] = all[i];
    return have;
}

long long pow2_size(long long n)
{
    long long m;
    pow2_sizes(n, &m, 1);
    return m;
}

/* Times the transform pairs of time_transform on h; the caller destroys
 * the events it finds made. */
dk_status time_pairs(Plan *p, cufftHandle h, cufftDoubleComplex *scratch, cudaEvent_t *a, cudaEvent_t *b, float *ms,
                     dk_msg *msg)
{
    const char *what = "timing a transform size";
    CUDA_TRY(cudaEventCreate(a), what);
    CUDA_TRY(cudaEventCreate(b), what);
    for (int rep = 0; rep < 4; rep++) {
        if (rep == 1)
            CUDA_TRY(cudaEventRecord(*a, p->dev->stream), what);
        CUFFT_TRY(cufftExecZ2Z(h, scratch, scratch, CUFFT_FORWARD), what);
        CUFFT_TRY(cufftExecZ2Z(h, scratch, scratch, CUFFT_INVERSE), what);
    }
    CUDA_TRY(cudaEventRecord(*b, p->dev->stream), what);
    CUDA_TRY(cudaEventSynchronize(*b), what);
    CUDA_TRY(cudaEventElapsedTime(ms, *a, *b), what);
    return DK_OK;
}

/* Milliseconds of three forward and inverse transform pairs of a chunk with
 * an embedding of P points (after one pair as a warm-up), on a zeroed
 * scratch array. */
dk_status time_transform(Plan *p, long long P, size_t budget, cufftDoubleComplex *scratch, float *ms, dk_msg *msg)
{
    long long rows, signals;
    chunking(p, P, budget, &rows, &signals);
    p->P0 = P;
    p->P = P;
    cufftHandle h;
    int have = 0;
    dk_status st = make_transform(p, &h, &have, signals, msg);
    cudaEvent_t a = nullptr, b = nullptr;
    if (st == DK_OK)
        st = time_pairs(p, h, scratch, &a, &b, ms, msg);
    if (a)
        cudaEventDestroy(a);
    if (b)
        cudaEventDestroy(b);
    if (have)
        cufftDestroy(h);
    return st;
}

/* cuFFT's time depends on how the embedding's size factors as much as on
 * the size: on an H100, 25 * 2^11 beat the smallest 7-smooth size 50,000 at
 * N = 25,000 (0.683 against 0.767 ms for the whole product: two passes of
 * ~85 and ~135 us each way instead of three of ~86) and 2^21 beat 2,000,000
 * at N = 10^6 (27.7 against 33.3 ms), while at N = 10^4 they tied. So the
 * plan times one chunk's transforms at the smooth size and at the three
 * smallest 2^a r sizes within a quarter above it, as FFTW's planner would,
 * and keeps the fastest. */
void pick_fft_size(Plan *p, size_t budget)
{
    long long n = 2 * p->N - 1, smooth = fft_size(n), cand[4] = {smooth};
    int ncand = 1 + pow2_sizes(n, cand + 1, 3);
    p->P0 = smooth;
    long long rows, most = 0;
    int keep = 0;
    for (int c = 0; c < ncand; c++) {
        if (cand[c] > smooth + smooth / 4 || cand[c] > INT32_MAX || (c > 0 && cand[c] == smooth))
            continue;
        cand[keep++] = cand[c];
        long long sig;
        chunking(p, cand[c], budget, &rows, &sig);
        most = sig * cand[c] > most ? sig * cand[c] : most;
    }
    if (keep < 2)
        return;
    cufftDoubleComplex *scratch = nullptr;
    size_t bytes = (size_t)most * sizeof(cufftDoubleComplex);
    if (dk_cuda_failed(cudaMalloc(&scratch, bytes)))
        return; /* no room to compare: the smooth size */
    /* a size that cannot be timed (no room for cuFFT's work area, say) is
     * not taken; the smooth size, first, is the plan's if none can be */
    dk_msg scratch_msg;
    float best = 0;
    long long pick = smooth;
    int timed = 0;
    if (!dk_cuda_failed(cudaMemsetAsync(scratch, 0, bytes, p->dev->stream)))
        for (int c = 0; c < keep; c++) {
            float ms = 0;
            if (time_transform(p, cand[c], budget, scratch, &ms, &scratch_msg) == DK_OK && (!timed || ms < best)) {
                best = ms;
                pick = cand[c];
                timed = 1;
            }
        }
    (void)cudaGetLastError();
    cudaFree(scratch);
    p->P0 = pick;
    p->P = pick;
}

/* HPHT's segments are column ranges of width ceil(N / S), the same for
 * every row, so that the blocks in flight (rows fastest) share the rows of
 * PHT they read; their bounds in each row are found here once. */
dk_status make_hpht_segments(Plan *p, dk_msg *msg)
{
    const dk_enkf_setup *s = p->s;
    long long width = (p->N + p->S - 1) / p->S, count = p->M * (p->S + 1);
    int *seg = (int *)malloc((size_t)count * sizeof(int));
    if (!seg) {
        dk_msg_set(msg, "cuda enkf: out of host memory for HPHT's segments");
        return DK_ERR_OUT_OF_MEMORY;
    }
    for (long long a = 0; a < p->M; a++) {
        long long t = (long long)s->indptr[a];
        for (long long q = 0; q <= p->S; q++) {
            while (t < (long long)s->indptr[a + 1] && (long long)s->indices[t] < q * width)
                t++;
            seg[a * (p->S + 1) + q] = (int)(q == p->S ? (long long)s->indptr[a + 1] : t);
        }
    }
    dk_status st = upload(&p->hpht_seg, seg, (size_t)count, "copying HPHT's segments", msg);
    free(seg);
    return st;
}

/* The block size of the blocked embedding: the smallest power of two that
 * cuts the state into at most BLOCKS_MAX blocks, or 0 (the whole-signal
 * embedding) for 2-D C, long states or DAKIT_ENKF_CUDA_FFT_BLOCK=off.
 * Powers of two won on an H100 at N = 25,000: 2048 (13 blocks) 0.425 ms
 * for the whole product, against 0.483 at 1568 = 2^5 7^2 (16 blocks),
 * 0.510 at 1600 and 0.561 at 3136. */
long long pick_block(const Plan *p)
{
    if (p->two_d)
        return 0;
    const char *force = getenv("DAKIT_ENKF_CUDA_FFT_BLOCK"); /* tuning: off, or a block size */
    long long least = (p->N + BLOCKS_MAX - 1) / BLOCKS_MAX;
    if (force && (!strcmp(force, "off") || !strcmp(force, "0")))
        return 0;
    if (force && atoll(force) >= least && atoll(force) <= BLOCK_MAX)
        return atoll(force);
    long long b = 64;
    while (b < least)
        b *= 2;
    return b <= BLOCK_MAX ? b : 0;
}

/* The blocked embedding (k_block_toeplitz): buffers, the 2 nb - 1 blocks'
 * spectra and the window transforms. */
dk_status make_blocked(Plan *p, long long b, size_t budget, dk_msg *msg)
{
    const dk_enkf_setup *s = p->s;
    const long long nb = (p->N + b - 1) / b, F = 2 * b, nd = 2 * nb - 1;
    p->blk = b;
    p->nb = nb;
    p->P0 = p->P = (nb + 1) * F;
    p->P1 = 1;
    long long signals, last;
    chunking(p, p->P, budget, &p->rows_per_chunk, &signals);
    last = ((p->M % p->rows_per_chunk) * p->L + 1) / 2;
    CUDA_TRY(cudaMalloc(&p->buf, (size_t)(signals * p->P) * sizeof(cufftDoubleComplex)),
             "allocating the FFT work array");
    CUDA_TRY(cudaMalloc(&p->blocks, (size_t)(signals * (nb + 1) * b) * sizeof(cufftDoubleComplex)),
             "allocating the FFT input array");
    CUDA_TRY(cudaMalloc(&p->blk_spectrum, (size_t)(nd * F) * sizeof(cufftDoubleComplex)),
             "allocating C's block spectra");

    /* block T_d (d = p - q) of C: T_d[r, s] = c[|d b + r - s|], embedded in
     * a circulant of F points whose first column holds distances d b + m */
    cufftDoubleComplex *col = (cufftDoubleComplex *)malloc((size_t)(nd * F) * sizeof *col);
    if (!col) {
        dk_msg_set(msg, "cuda enkf: out of host memory for C's block spectra");
        return DK_ERR_OUT_OF_MEMORY;
    }
    for (long long d = -(nb - 1); d < nb; d++)
        for (long long m = 0; m < F; m++) {
            long long dist = m < b ? d * b + m : d * b + m - F;
            dist = dist < 0 ? -dist : dist;
            double v = (m != b && dist < p->N) ? s->loc[dist] : 0.0;
            col[(d + nb - 1) * F + m] = make_cuDoubleComplex(v, 0.0);
        }
    const int n = (int)F;
    dk_status st = spectra(p, 1, &n, nd, p->blk_spectrum, col, msg);
    if (st == DK_OK)
        st = copy_in(p->blk_spectrum, col, (size_t)(nd * F), "copying C's block spectra", msg);
    free(col);
    if (st != DK_OK)
        return st;
    /* forward: the windows [x_q; x_{q+1}] b apart, the last one of a chunk
     * ending at its last signal's zero block; inverse: in place */
    if ((st = make_plan(p, &p->fwd_whole, &p->have_fwd_whole, 1, &n, b, F, signals * (nb + 1) - 1, msg)) != DK_OK ||
        (st = make_plan(p, &p->whole, &p->have_whole, 1, &n, F, F, signals * (nb + 1), msg)) != DK_OK)
        return st;
    if (last > 0 &&
        ((st = make_plan(p, &p->fwd_last, &p->have_fwd_last, 1, &n, b, F, last * (nb + 1) - 1, msg)) != DK_OK ||
         (st = make_plan(p, &p->last, &p->have_last, 1, &n, F, F, last * (nb + 1), msg)) != DK_OK))
        return st;
    return DK_OK;
}

dk_status make_fft(Plan *p, dk_msg *msg)
{
    const dk_enkf_setup *s = p->s;
    size_t budget = FFT_BUDGET;
    const char *mb = getenv("DAKIT_ENKF_CUDA_FFT_BUDGET_MB"); /* tuning: chunk size (L2-sized chunks) */
    if (mb && atoll(mb) >= 1 && atoll(mb) <= 4096)
        budget = (size_t)atoll(mb) << 20;
    long long b = pick_block(p);
    if (b)
        return make_blocked(p, b, budget, msg);
    if (p->two_d) {
        p->P0 = fft_size(2 * (long long)s->desc.nx - 1);
        p->P1 = fft_size(2 * (long long)s->desc.ny - 1);
    } else {
        p->P1 = 1;
        /* tuning: a fixed embedding size instead of the timed choice (a
         * size; "pow2"/"p2", the 2^a r size; "smooth", the 7-smooth one) */
        const char *size = getenv("DAKIT_ENKF_CUDA_FFT_SIZE");
        if (size && (!strcmp(size, "pow2") || !strcmp(size, "p2")))
            p->P0 = pow2_size(2 * p->N - 1);
        else if (size && !strcmp(size, "smooth"))
            p->P0 = fft_size(2 * p->N - 1);
        else if (size && atoll(size) >= 2 * p->N - 1 && atoll(size) <= 4 * p->N)
            p->P0 = atoll(size);
        else
            pick_fft_size(p, budget);
    }
    p->P = p->P0 * p->P1;
    if (p->P > INT32_MAX) {
        dk_msg_set(msg, "cuda enkf: the circulant embedding (%lld points) is too large for one cuFFT transform", p->P);
        return DK_ERR_INVALID_ARGUMENT;
    }
    long long signals, last;
    chunking(p, p->P, budget, &p->rows_per_chunk, &signals);
    last = ((p->M % p->rows_per_chunk) * p->L + 1) / 2;
    CUDA_TRY(cudaMalloc(&p->buf, (size_t)(signals * p->P) * sizeof(cufftDoubleComplex)),
             "allocating the FFT work array");
    CUDA_TRY(cudaMalloc(&p->spectrum, (size_t)p->P * sizeof(double)), "allocating C's spectrum");

    /* C's spectrum: one transform of the embedding, real by symmetry. */
    cufftDoubleComplex *col = (cufftDoubleComplex *)malloc((size_t)p->P * sizeof *col);
    double *re = (double *)malloc((size_t)p->P * sizeof *re);
    if (!col || !re) {
        free(col), free(re);
        dk_msg_set(msg, "cuda enkf: out of host memory for C's embedding (%lld points)", p->P);
        return DK_ERR_OUT_OF_MEMORY;
    }
    for (long long a = 0; a < p->P0; a++)
        for (long long b = 0; b < p->P1; b++)
            col[a * p->P1 + b] = make_cuDoubleComplex(embedded(s, p->P0, p->P1, a, b), 0.0);
    const int n[2] = {(int)p->P0, (int)p->P1};
    dk_status st = spectra(p, p->two_d ? 2 : 1, n, 1, p->buf, col, msg);
    if (st == DK_OK) {
        for (long long q = 0; q < p->P; q++)
            re[q] = cuCreal(col[q]);
        st = copy_in(p->spectrum, re, (size_t)p->P, "copying C's spectrum", msg);
    }
    free(col), free(re);
    if (st != DK_OK)
        return st;
    if ((st = make_transform(p, &p->whole, &p->have_whole, signals, msg)) != DK_OK)
        return st;
    if (last > 0 && (st = make_transform(p, &p->last, &p->have_last, last, msg)) != DK_OK)
        return st;
    return DK_OK;
}

/* For each tile of DIRECT_TILE state points and each row j, the nonzeros
 * whose column is within the window of the tile: [lo, hi). */
dk_status make_ranges(Plan *p, long long tile_points, dk_msg *msg)
{
    const dk_enkf_setup *s = p->s;
    long long tiles = (p->N + tile_points - 1) / tile_points, w = p->window;
    if (tiles * p->M > (1ll << 26))
        return DK_OK; /* too many to keep: the kernel bisects instead */
    int *lo = (int *)malloc((size_t)(tiles * p->M) * sizeof(int)), *hi = (int *)malloc((size_t)(tiles * p->M) * sizeof(int));
    if (!lo || !hi) {
        free(lo), free(hi);
        dk_msg_set(msg, "cuda enkf: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    for (long long j = 0; j < p->M; j++) {
        int64_t a = s->indptr[j], b = s->indptr[j];
        for (long long tile = 0; tile < tiles; tile++) {
            long long first = tile * tile_points, lastp = min(first + tile_points, p->N) - 1;
            while (a < s->indptr[j + 1] && s->indices[a] < first - w)
                a++;
            if (b < a)
                b = a;
            while (b < s->indptr[j + 1] && s->indices[b] <= lastp + w)
                b++;
            lo[j * tiles + tile] = (int)a;
            hi[j * tiles + tile] = (int)b;
        }
    }
    dk_status st = upload(&p->range_lo, lo, (size_t)(tiles * p->M), "copying the band ranges", msg);
    if (st == DK_OK)
        st = upload(&p->range_hi, hi, (size_t)(tiles * p->M), "copying the band ranges", msg);
    free(lo), free(hi);
    return st;
}

dk_status plan_fill(Plan *p, dk_msg *msg)
{
    const dk_enkf_setup *s = p->s;
    size_t nnz = s->nnz, rows = s->desc.H.rows;
    int *indptr = (int *)malloc((rows + 1) * sizeof(int)), *indices = (int *)malloc((nnz ? nnz : 1) * sizeof(int)),
        *row_of = (int *)malloc((nnz ? nnz : 1) * sizeof(int));
    if (!indptr || !indices || !row_of) {
        free(indptr), free(indices), free(row_of);
        dk_msg_set(msg, "cuda enkf: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    for (size_t j = 0; j <= rows; j++)
        indptr[j] = (int)s->indptr[j];
    for (size_t j = 0; j < rows; j++)
        for (int64_t t = s->indptr[j]; t < s->indptr[j + 1]; t++) {
            indices[t] = (int)s->indices[t];
            row_of[t] = (int)j;
        }
    dk_status st;
    if ((st = upload(&p->indptr, indptr, rows + 1, "copying H", msg)) == DK_OK &&
        (st = upload(&p->indices, indices, nnz, "copying H", msg)) == DK_OK &&
        (st = upload(&p->row_of, row_of, nnz, "copying H", msg)) == DK_OK &&
        (st = upload(&p->values, (const double *)s->values, nnz, "copying H", msg)) == DK_OK)
        st = upload(&p->loc, (const double *)s->loc, s->loc_count, "copying the localization", msg);
    free(indptr), free(indices), free(row_of);
    if (st == DK_OK)
        st = ensure(&p->G, (long long)(nnz ? nnz : 1) * p->L, "allocating the weighted anomalies", msg);
    return st;
}

/* Each (segment, tile, row)'s nonzeros within reach, as k_mma computes its
 * column range [klo, khi], so the kernel reads them instead of bisecting. */
dk_status mma_ranges(Plan *p, dk_msg *msg)
{
    const dk_enkf_setup *s = p->s;
    const long long MMA_TILE = mma_tile(p->mma_mt);
    long long tiles = (p->N + MMA_TILE - 1) / MMA_TILE, count = p->mma_nseg * tiles * p->M;
    if (count > (1ll << 26))
        return DK_OK; /* too many to keep: the kernel bisects */
    int *lo = (int *)malloc((size_t)count * sizeof(int)), *hi = (int *)malloc((size_t)count * sizeof(int));
    if (!lo || !hi) {
        free(lo), free(hi);
        dk_msg_set(msg, "cuda enkf: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    auto bound = [&](long long j, long long key) {
        int64_t b = s->indptr[j], e = s->indptr[j + 1];
        while (b < e) {
            int64_t mid = b + (e - b) / 2;
            if (s->indices[mid] < key)
                b = mid + 1;
            else
                e = mid;
        }
        return (int)b;
    };
    long long at = 0;
    for (long long seg = 0; seg < p->mma_nseg; seg++)
        for (long long tile = 0; tile < tiles; tile++) {
            long long i0 = tile * MMA_TILE, klo = i0 - p->mma_rx, khi = i0 + MMA_TILE - 1 + p->mma_rx;
            if (p->mma_seg_len) {
                klo = max(klo, seg * p->mma_seg_len);
                khi = min(khi, seg * p->mma_seg_len + p->mma_seg_len - 1);
            }
            klo = max(klo, 0ll);
            khi = min(khi, p->N - 1);
            for (long long j = 0; j < p->M; j++, at++) {
                lo[at] = bound(j, klo);
                hi[at] = khi < klo ? lo[at] : bound(j, khi + 1);
            }
        }
    dk_status st = upload(&p->range_lo, lo, (size_t)count, "copying the nonzero ranges", msg);
    if (st == DK_OK)
        st = upload(&p->range_hi, hi, (size_t)count, "copying the nonzero ranges", msg);
    free(lo), free(hi);
    return st;
}

/* k_mma takes tiled and banded with 1-D C and L <= 16 (DAKIT_ENKF_CUDA_SIMT=1
 * keeps the vector kernels, for comparison): c's window is the tile's reach
 * when it fits in shared memory, else segments of the state with partial
 * sums (at most 1 GiB of them; beyond, the vector kernels). */
dk_status plan_mma(Plan *p, dk_msg *msg)
{
    const dk_enkf_setup *s = p->s;
    const char *simt = getenv("DAKIT_ENKF_CUDA_SIMT");
    if (p->two_d || p->L > 4 * MMA_MAX_KS || 2 * p->N + 4 * mma_tile(4) >= INT32_MAX || (simt && *simt && *simt != '0') ||
        (s->scheme != DK_ENKF_TILED && s->scheme != DK_ENKF_BANDED))
        return DK_OK;
    long long rx = s->scheme == DK_ENKF_TILED ? p->N - 1 : min(p->rx, p->N - 1);
    long long wmax = MMA_WMAX;
    const char *w = getenv("DAKIT_ENKF_CUDA_MMA_WMAX"); /* tuning: c's window, 1024 to 4096 entries */
    if (w && atoll(w) >= 1024 && atoll(w) <= 4096)
        wmax = atoll(w);
    /* m-tiles per warp: 2 when the tile's reach fits the window, else 4 */
    int mt = 2 * mma_tile(2) + 2 * rx > wmax ? 4 : 2;
    const char *m = getenv("DAKIT_ENKF_CUDA_MMA_MT"); /* tuning: 2 or 4 */
    if (m && (atoi(m) == 2 || atoi(m) == 4))
        mt = atoi(m);
    const long long MMA_TILE = mma_tile(mt);
    long long seg_len = 0, wcap = 2 * MMA_TILE + 2 * rx, nseg = 1;
    if (wcap > wmax) {
        seg_len = wmax - MMA_TILE;
        wcap = wmax;
        nseg = (p->N + seg_len - 1) / seg_len;
        if ((double)nseg * (double)p->N * (double)p->M * 8.0 > (double)(1ll << 30))
            return DK_OK;
    }
    p->mma = 1;
    p->mma_mt = mt;
    p->mma_rx = (int)rx;
    p->mma_seg_len = (int)seg_len;
    p->mma_wcap = (int)wcap;
    p->mma_nseg = (int)nseg;
    if (nseg > 1) {
        dk_status st = ensure(&p->mma_partial, nseg * p->N * p->M, "allocating the partial sums", msg);
        if (st != DK_OK)
            return st;
    }
    return mma_ranges(p, msg);
}

dk_status plan_create(void *device, const dk_enkf_setup *s, void **plan, dk_msg *msg)
{
    dk_cuda_device *dev = (dk_cuda_device *)device;
    dk_status st = dk_cuda_enter(dev, msg);
    if (st != DK_OK)
        return st;
    Plan *p = (Plan *)calloc(1, sizeof *p);
    if (!p) {
        dk_msg_set(msg, "cuda enkf: cannot allocate the plan");
        return DK_ERR_OUT_OF_MEMORY;
    }
    p->dev = dev;
    p->s = s;
    p->N = (long long)s->desc.n;
    p->L = (long long)s->desc.members;
    p->M = (long long)s->desc.H.rows;
    p->nnz = (long long)s->nnz;
    p->two_d = s->desc.loc_ndim == 2;
    p->ny = p->two_d ? (long long)s->desc.ny : 1;
    p->rx = (long long)s->rx;
    p->ry = (long long)s->ry;
    p->window = (long long)s->window;
    /* HPHT's segments: enough blocks to fill the device, partial sums within 256 MiB; about
     * 256 nonzeros of a row each (H100, 1e6_compact_r200: 0.991 / 0.993 ms, 128: 0.998 / 1.006,
     * 512: 0.997 / 1.002, 64: 1.005 / 1.018) */
    long long most = 0;
    for (long long j = 0; j < p->M; j++)
        most = max(most, (long long)(s->indptr[j + 1] - s->indptr[j]));
    p->S = min(512ll, max(1ll, most / 256));
    p->S = max(1ll, min(p->S, (1ll << 25) / (p->M * p->M)));
    if ((st = plan_fill(p, msg)) == DK_OK)
        st = ensure(&p->partial, p->M * p->M * p->S, "allocating the HPHT partial sums", msg);
    if (st == DK_OK)
        st = make_hpht_segments(p, msg);
    if (st == DK_OK && s->scheme == DK_ENKF_FFT)
        st = make_fft(p, msg);
    p->band_fast = s->scheme == DK_ENKF_BANDED && !p->two_d && p->rx + 32 * BAND_R - 1 <= BAND_MAX_W &&
                   p->N + BAND_TILE + BAND_MAX_W < INT32_MAX;
    if (st == DK_OK)
        st = plan_mma(p, msg);
    if (st == DK_OK && s->scheme == DK_ENKF_BANDED && !p->mma)
        st = make_ranges(p, p->band_fast ? BAND_TILE : DIRECT_TILE, msg);
    if (st != DK_OK) {
        plan_free(p);
        return st;
    }
    *plan = p;
    return DK_OK;
}

void plan_destroy(void *plan) { plan_free((Plan *)plan); }

template <int KS, int MT>
cudaError_t launch_mma(const MmaArgs &a, unsigned nseg, size_t shared, cudaStream_t stream)
{
    cudaError_t e = cudaFuncSetAttribute(k_mma<KS, MT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared);
    if (dk_cuda_failed(e))
        return e;
    unsigned tiles = (unsigned)((a.N + mma_tile(MT) - 1) / mma_tile(MT));
    k_mma<KS, MT><<<dim3(tiles, nseg), MMA_THREADS, shared, stream>>>(a);
    return cudaGetLastError();
}

cudaError_t mma_cov(const Plan *p, const double *e, double *pht)
{
    MmaArgs a = {e, p->values, p->loc, p->indptr, p->indices, p->range_lo, p->range_hi,
                 p->mma_nseg > 1 ? p->mma_partial : pht, (int)p->N, (int)p->L, (int)p->M, p->mma_rx,
                 p->mma_seg_len, p->mma_wcap, !(p->L & 1) && !((uintptr_t)e & 15), 1.0 / (double)(p->L - 1)};
    unsigned nseg = (unsigned)p->mma_nseg;
    int ks = (int)((p->L + 3) / 4), wide = p->mma_mt == 4;
    size_t shared = mma_shared(ks, p->mma_mt, p->mma_wcap);
    cudaStream_t st = p->dev->stream;
    cudaError_t e2;
    switch (ks) {
    case 1: e2 = wide ? launch_mma<1, 4>(a, nseg, shared, st) : launch_mma<1, 2>(a, nseg, shared, st); break;
    case 2: e2 = wide ? launch_mma<2, 4>(a, nseg, shared, st) : launch_mma<2, 2>(a, nseg, shared, st); break;
    case 3: e2 = wide ? launch_mma<3, 4>(a, nseg, shared, st) : launch_mma<3, 2>(a, nseg, shared, st); break;
    default: e2 = wide ? launch_mma<4, 4>(a, nseg, shared, st) : launch_mma<4, 2>(a, nseg, shared, st); break;
    }
    if (dk_cuda_failed(e2) || nseg == 1)
        return e2;
    k_mma_sum<<<blocks_for(p->N * p->M, THREADS), THREADS, 0, st>>>(p->mma_partial, pht, p->N * p->M, (int)nseg);
    return cudaGetLastError();
}

template <int LB>
cudaError_t launch_direct(const DirectArgs &a, cudaStream_t stream)
{
    /* banded, with tiles enough to fill the device: one block takes every
     * row of its tile, so the rows of PHT it writes are whole while still in
     * L2 (measured on the H100 at N = 10^6: 13.7 -> 3.2 ms with HPHT's fix) */
    long long tiles = (a.N + DIRECT_TILE - 1) / DIRECT_TILE;
    dim3 grid((unsigned)tiles, (a.banded && tiles >= 1024) ? 1u : (unsigned)(a.M < 65535 ? a.M : 65535));
    k_direct<LB><<<grid, DIRECT_THREADS, 0, stream>>>(a);
    return cudaGetLastError();
}

template <int LB>
cudaError_t launch_band(const BandArgs &a, cudaStream_t stream)
{
    /* one block takes every row of its tile when tiles fill the device, so
     * the rows of PHT it writes are whole while still in L2 */
    unsigned tiles = (unsigned)((a.N + BAND_TILE - 1) / BAND_TILE);
    dim3 grid(tiles, tiles >= 1024 ? 1u : (unsigned)(a.M < 65535 ? a.M : 65535));
    size_t shared = (size_t)(2 * a.W + 1) * sizeof(double);
    k_band<LB><<<grid, BAND_THREADS, shared, stream>>>(a);
    return cudaGetLastError();
}

cudaError_t band(const Plan *p, const double *e, double *pht)
{
    int W = (int)p->rx + 32 * BAND_R - 1;
    BandArgs a = {e, p->values, p->loc, p->indptr, p->indices, p->range_lo, p->range_hi, pht, (int)p->N, (int)p->L,
                  (int)p->M, (int)p->rx, W, 1.0 / (double)(p->L - 1)};
    /* members in equal passes of at most BAND_MAX_LB, rounded up to even */
    int passes = (int)((p->L + BAND_MAX_LB - 1) / BAND_MAX_LB);
    int lb = (int)((p->L + passes - 1) / passes);
    cudaStream_t st = p->dev->stream;
    switch ((lb + 1) / 2) {
    case 1: return launch_band<2>(a, st);
    case 2: return launch_band<4>(a, st);
    case 3: return launch_band<6>(a, st);
    case 4: return launch_band<8>(a, st);
    case 5: return launch_band<10>(a, st);
    default: return launch_band<12>(a, st);
    }
}

cudaError_t direct(const Plan *p, const double *e, double *pht, int banded)
{
    DirectArgs a = {e, p->G, p->loc, p->indptr, p->indices, banded ? p->range_lo : NULL, banded ? p->range_hi : NULL,
                    pht, p->N, p->L, p->M, p->ny, p->rx, p->two_d ? p->ry : 0, p->window, p->two_d, banded,
                    1.0 / (double)(p->L - 1)};
    if (!banded)
        a.window = p->N; /* every nonzero of the row */
    cudaStream_t st = p->dev->stream;
    switch (p->L) {
    case 2: return launch_direct<2>(a, st);
    case 3: case 4: return launch_direct<4>(a, st);
    case 5: case 6: return launch_direct<6>(a, st);
    case 7: case 8: return launch_direct<8>(a, st);
    case 9: case 10: return launch_direct<10>(a, st);
    case 11: case 12: return launch_direct<12>(a, st);
    case 13: case 14: case 15: case 16: return launch_direct<16>(a, st);
    case 17: case 18: case 19: case 20: return launch_direct<20>(a, st);
    case 21: case 22: case 23: case 24: return launch_direct<24>(a, st);
    default: return launch_direct<32>(a, st);
    }
}

dk_status fft_cov(Plan *p, const double *e, double *pht, dk_msg *msg)
{
    cudaStream_t st = p->dev->stream;
    /* the signals' input: the whole embedding, or nb + 1 blocks (see k_block_toeplitz) */
    cufftDoubleComplex *in = p->blk ? p->blocks : p->buf;
    long long in_len = p->blk ? (p->nb + 1) * p->blk : p->P;
    for (long long j0 = 0; j0 < p->M; j0 += p->rows_per_chunk) {
        long long nj = p->M - j0 < p->rows_per_chunk ? p->M - j0 : p->rows_per_chunk;
        long long signals = (nj * p->L + 1) / 2;
        int whole = nj == p->rows_per_chunk;
        cufftHandle inverse = whole ? p->whole : p->last;
        cufftHandle forward = p->blk ? (whole ? p->fwd_whole : p->fwd_last) : inverse;
        long long t_begin = p->s->indptr[j0], t_end = p->s->indptr[j0 + nj];
        CUDA_TRY(cudaMemsetAsync(in, 0, (size_t)(signals * in_len) * sizeof(cufftDoubleComplex), st),
                 "clearing the FFT input");
        if (t_end > t_begin) {
            k_scatter<<<blocks_for((t_end - t_begin) * p->L, THREADS), THREADS, 0, st>>>(
                p->G, p->indices, p->indptr, p->row_of, (double *)in, t_begin, t_end, j0, p->L, p->ny, p->P1, in_len,
                p->two_d);
            CUDA_TRY(cudaGetLastError(), "the scatter kernel");
        }
        CUFFT_TRY(cufftExecZ2Z(forward, in, p->buf, CUFFT_FORWARD), "forward transform");
        if (p->blk) {
            const long long F = 2 * p->blk;
            /* H100, N = 25,000: 2 signals a thread 0.411 ms for the whole
             * product, 8 a thread 0.421; capping registers for 3 blocks
             * an SM spills, 0.445 */
            const int per_thread = 2;
            dim3 grid(blocks_for(F, 128), (unsigned)((signals + per_thread - 1) / per_thread));
            k_block_toeplitz<BLOCKS_MAX><<<grid, 128, 0, st>>>(p->buf, p->blk_spectrum, F, (int)p->nb, signals,
                                                               per_thread);
            CUDA_TRY(cudaGetLastError(), "the block Toeplitz kernel");
        } else {
            k_spectrum_multiply<<<blocks_for(signals * p->P, THREADS), THREADS, 0, st>>>(p->buf, p->spectrum, p->P,
                                                                                       signals * p->P);
            CUDA_TRY(cudaGetLastError(), "the spectrum kernel");
        }
        CUFFT_TRY(cufftExecZ2Z(inverse, p->buf, p->buf, CUFFT_INVERSE), "inverse transform");
        k_gather<<<dim3(blocks_for(p->N, 32), (unsigned)((nj + 31) / 32)), dim3(32, 8), 0, st>>>(
            e, (const double *)p->buf, pht, p->N, p->L, p->M, j0, nj, p->ny, p->P1, p->P, p->two_d, p->blk,
            1.0 / (double)(p->L - 1));
        CUDA_TRY(cudaGetLastError(), "the gather kernel");
    }
    return DK_OK;
}

/* PHT (and HPHT) in float64 on the device, not waiting for the result. */
dk_status cov64(Plan *p, const double *e, double *pht, double *hpht, dk_msg *msg)
{
    cudaStream_t st = p->dev->stream;
    /* k_band and k_mma weigh as they stage */
    int fused = (p->s->scheme == DK_ENKF_BANDED && p->band_fast) || p->mma;
    if (p->nnz > 0 && !fused) {
        k_weigh<<<blocks_for(p->nnz * p->L, THREADS), THREADS, 0, st>>>(e, p->indices, p->values, p->G, p->nnz, p->L);
        CUDA_TRY(cudaGetLastError(), "the weighting kernel");
    }
    if (p->s->scheme == DK_ENKF_FFT) {
        dk_status rc = fft_cov(p, e, pht, msg);
        if (rc != DK_OK)
            return rc;
    } else if (p->mma) {
        CUDA_TRY(mma_cov(p, e, pht), "the tensor-core covariance kernel");
    } else if (fused) {
        CUDA_TRY(band(p, e, pht), "the banded covariance kernel");
    } else {
        CUDA_TRY(direct(p, e, pht, p->s->scheme == DK_ENKF_BANDED), "the covariance kernel");
    }
    if (hpht) {
        /* rows of H the fastest: the blocks in flight share a segment's
         * columns, so each row of PHT comes from DRAM about once. H100,
         * 1e6_compact_r200 (before k_hpht_partial's launch bounds): 229 MB
         * read in 151 us, against 378 MB in 160 us with segments fastest
         * (418 us when each block bisected its bounds; 1024 to 4096
         * segments, or a block per segment looping over the rows: 206 to
         * 804 us). Splitting k_mma in 2 to 8 parts to sum HPHT's finished
         * segments on a second stream meanwhile was slower: 1.066 to 1.135
         * ms against 1.056 for the whole product. */
        dim3 grid((unsigned)(p->M < 65535 ? p->M : 65535), (unsigned)p->S);
        k_hpht_partial<<<grid, THREADS, 0, st>>>(pht, p->hpht_seg, p->indices, p->values, p->partial, p->M, p->S);
        k_hpht_sum<<<blocks_for(p->M * p->M * 32, THREADS), THREADS, 0, st>>>(p->partial, hpht, p->M, p->S);
        CUDA_TRY(cudaGetLastError(), "the HPHT kernels");
    }
    return DK_OK;
}

dk_status cov(void *plan, const void *e, void *pht, void *hpht, dk_msg *msg)
{
    Plan *p = (Plan *)plan;
    dk_status rc = dk_cuda_enter(p->dev, msg);
    if (rc != DK_OK)
        return rc;
    cudaStream_t st = p->dev->stream;
    const void *ep = ((const dk_cuda_buffer *)e)->ptr;
    void *pp = ((dk_cuda_buffer *)pht)->ptr;
    void *hp = hpht ? ((dk_cuda_buffer *)hpht)->ptr : NULL;
    long long NL = p->N * p->L, NM = p->N * p->M, MM = p->M * p->M;
    if (p->s->desc.dtype == DK_F64) {
        rc = cov64(p, (const double *)ep, (double *)pp, (double *)hp, msg);
    } else {
        if ((rc = ensure(&p->e64, NL, "allocating float64 work arrays", msg)) != DK_OK ||
            (rc = ensure(&p->pht64, NM, "allocating float64 work arrays", msg)) != DK_OK ||
            (rc = ensure(&p->hpht64, MM, "allocating float64 work arrays", msg)) != DK_OK)
            return rc;
        k_widen<float><<<blocks_for(NL, THREADS), THREADS, 0, st>>>((const float *)ep, p->e64, NL);
        if ((rc = cov64(p, p->e64, p->pht64, hp ? p->hpht64 : NULL, msg)) == DK_OK) {
            k_narrow<float><<<blocks_for(NM, THREADS), THREADS, 0, st>>>(p->pht64, (float *)pp, NM);
            if (hp)
                k_narrow<float><<<blocks_for(MM, THREADS), THREADS, 0, st>>>(p->hpht64, (float *)hp, MM);
        }
    }
    if (rc != DK_OK)
        return rc;
    CUDA_TRY(cudaGetLastError(), "the float32 conversion kernels");
    CUDA_TRY(cudaStreamSynchronize(st), "the covariance product");
    return DK_OK;
}

dk_status analysis(void *plan, void *x, const double *d, const double *r, double inflation, dk_msg *msg)
{
    Plan *p = (Plan *)plan;
    dk_status rc = dk_cuda_enter(p->dev, msg);
    if (rc != DK_OK)
        return rc;
    cudaStream_t st = p->dev->stream;
    long long N = p->N, L = p->L, M = p->M, NL = N * L;
    if ((rc = ensure(&p->e64, NL, "allocating the analysis work arrays", msg)) != DK_OK ||
        (rc = ensure(&p->x64, NL, "allocating the analysis work arrays", msg)) != DK_OK ||
        (rc = ensure(&p->pht64, N * M, "allocating the analysis work arrays", msg)) != DK_OK ||
        (rc = ensure(&p->A, M * M, "allocating the analysis work arrays", msg)) != DK_OK ||
        (rc = ensure(&p->D, M * L, "allocating the analysis work arrays", msg)) != DK_OK ||
        (rc = ensure(&p->d_host_copy, M * L, "allocating the analysis work arrays", msg)) != DK_OK ||
        (rc = ensure(&p->r_dev, M, "allocating the analysis work arrays", msg)) != DK_OK)
        return rc;
    if (!p->info)
        CUDA_TRY(cudaMalloc(&p->info, sizeof(int)), "allocating the solver status");
    if (!p->solver) {
        CUSOLVER_TRY(cusolverDnCreate(&p->solver), "cusolverDnCreate");
        CUSOLVER_TRY(cusolverDnSetStream(p->solver, st), "cusolverDnSetStream");
        CUSOLVER_TRY(cusolverDnDpotrf_bufferSize(p->solver, CUBLAS_FILL_MODE_LOWER, (int)M, p->A, (int)M, &p->lwork),
                   "potrf_bufferSize");
        CUDA_TRY(cudaMalloc(&p->work, (size_t)(p->lwork > 0 ? p->lwork : 1) * sizeof(double)),
                 "allocating the solver workspace");
    }
    if (!p->blas) {
        CUBLAS_TRY(cublasCreate(&p->blas), "cublasCreate");
        CUBLAS_TRY(cublasSetStream(p->blas, st), "cublasSetStream");
    }
    CUDA_TRY(cudaMemcpyAsync(p->d_host_copy, d, (size_t)(M * L) * sizeof(double), cudaMemcpyHostToDevice, st),
             "copying the observations");
    CUDA_TRY(cudaMemcpyAsync(p->r_dev, r, (size_t)M * sizeof(double), cudaMemcpyHostToDevice, st),
             "copying the observation variances");
    void *xp = ((dk_cuda_buffer *)x)->ptr;
    int f32 = p->s->desc.dtype == DK_F32;
    if (f32)
        k_inflate<float><<<blocks_for(N, THREADS), THREADS, 0, st>>>((const float *)xp, p->x64, p->e64, N, L, inflation);
    else
        k_inflate<double><<<blocks_for(N, THREADS), THREADS, 0, st>>>((const double *)xp, p->x64, p->e64, N, L,
                                                                       inflation);
    CUDA_TRY(cudaGetLastError(), "the inflation kernel");
    if ((rc = cov64(p, p->e64, p->pht64, p->A, msg)) != DK_OK)
        return rc;
    k_innovation<<<blocks_for(M * L, THREADS), THREADS, 0, st>>>(p->x64, p->indptr, p->indices, p->values,
                                                                 p->d_host_copy, p->r_dev, p->D, p->A, M, L);
    CUDA_TRY(cudaGetLastError(), "the innovation kernel");
    /* row-major symmetric A is its own column-major transpose */
    CUSOLVER_TRY(cusolverDnDpotrf(p->solver, CUBLAS_FILL_MODE_LOWER, (int)M, p->A, (int)M, p->work, p->lwork, p->info),
               "potrf");
    int info = 0;
    CUDA_TRY(cudaMemcpyAsync(&info, p->info, sizeof info, cudaMemcpyDeviceToHost, st), "reading the solver status");
    CUDA_TRY(cudaStreamSynchronize(st), "the Cholesky factorization");
    if (info != 0) {
        dk_msg_set(msg, info > 0 ? "HPHT + R is not positive definite (cusolverDnDpotrf, minor %d)"
                                 : "cusolverDnDpotrf rejected argument %d",
                   info > 0 ? info : -info);
        return info > 0 ? DK_ERR_INVALID_ARGUMENT : DK_ERR_BACKEND;
    }
    CUSOLVER_TRY(cusolverDnDpotrs(p->solver, CUBLAS_FILL_MODE_LOWER, (int)M, (int)L, p->A, (int)M, p->D, (int)M, p->info),
               "potrs");
    /* X (column-major L x N) += Z^T (L x M) PHT^T (M x N) */
    const double one = 1.0;
    CUBLAS_TRY(cublasDgemm(p->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)L, (int)N, (int)M, &one, p->D, (int)M, p->pht64,
                         (int)M, &one, p->x64, (int)L),
             "dgemm (X += PHT Z)");
    if (f32)
        k_narrow<float><<<blocks_for(NL, THREADS), THREADS, 0, st>>>(p->x64, (float *)xp, NL);
    else
        CUDA_TRY(cudaMemcpyAsync(xp, p->x64, (size_t)NL * sizeof(double), cudaMemcpyDeviceToDevice, st),
                 "writing the analysis");
    CUDA_TRY(cudaGetLastError(), "the conversion kernel");
    CUDA_TRY(cudaMemcpyAsync(&info, p->info, sizeof info, cudaMemcpyDeviceToHost, st), "reading the solver status");
    CUDA_TRY(cudaStreamSynchronize(st), "the analysis");
    if (info != 0) {
        dk_msg_set(msg, "cusolverDnDpotrs rejected argument %d", -info);
        return DK_ERR_BACKEND;
    }
    return DK_OK;
}

} // namespace

extern "C" const dk_enkf_ops dk_cuda_enkf_ops = {schemes, plan_create, cov, analysis, plan_destroy};
