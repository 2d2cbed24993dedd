/* dakit cuda plugin: kmeans, the whole Lloyd loop in one cooperative kernel.
 *
 * A persistent grid (as many blocks as fit on the device at once) runs every
 * iteration; grid-wide syncs separate the phases, and the convergence test is
 * made on the device, so the host launches once and reads the result once.
 *   A  each thread takes points in a grid-stride loop (whole warps step
 *      together), two at a time for d <= 8, holds their features in
 *      registers (two 16-byte loads for point-major d = 8, and so on), finds
 *      each one's least-cost centroid (centroids in shared memory, rows
 *      padded to DMAX so they are read 16 bytes at a time; contiguity reads
 *      the previous labels of the w x w window) and writes the label. Labels
 *      are the reference's bit for bit: every distance and cost that decides
 *      a label is rounded operation by operation as the reference rounds it
 *      (_rn intrinsics, no FMA contraction), and plain k-means first screens
 *      the centroids by a cheaper bound and recomputes exactly where two are
 *      close (screened_labels). The lanes of a warp with the same label then
 *      sum their points by shuffles (__match_any_sync groups them), and one
 *      lane per distinct label adds into its warp's partial sums in shared
 *      memory: no two lanes hit the same address, so no atomics (or the
 *      block's one copy with shared atomics, when per-warp copies would not
 *      fit). No global atomic at all. The block then writes its partial sums
 *      and counts to global memory.
 *   B  one warp per (cluster, feature) reduces the partials of every block,
 *      in double and in a fixed order, and writes the new centroid
 *      coordinate (the old one when the cluster is empty) and its move.
 *   C  every block reads all moves and stops when the largest is below tol.
 * After the loop: the objective (double) and, with contiguity, the final
 * labels copied out of the ping-pong buffers; plain k-means run to max_iters
 * gets its objective from the last iteration instead (see the kernel's end).
 * Data written by other blocks in the same launch are read with __ldcg (L2),
 * since L1 is not coherent across SMs.
 * Thread 0 of block 0 stamps %globaltimer at the phase boundaries, which gives
 * the assignment / update split without a second launch. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cooperative_groups.h>

#include <dakit/kmeans.h>

#include "cuda_internal.h"

namespace cg = cooperative_groups;

namespace {

const int THREADS = 256;

struct Args {
    const float *x;
    const uint8_t *mask;
    const float *init;
    int32_t *labels;
    int32_t *lab[2];        /* contiguity: ping-pong labels */
    float *cent[2];         /* centroids by iteration parity */
    float *out_centroids;
    float *psum;            /* gridDim * k * d block partial sums */
    unsigned *pcount;       /* gridDim * k */
    double *move2;          /* k * d: squared move per feature */
    double *corr, *corr_old; /* k * d: the objective's correction (see k_lloyd's end) */
    unsigned long long *ccount; /* k: the last iteration's cluster sizes */
    double *pobj;           /* gridDim */
    unsigned long long *pvalid; /* gridDim */
    double *result;         /* iterations, objective, move, valid, assign_ns, update_ns */
    long long n, sp, sf;
    int d, k, max_iters, window;
    int vec4;               /* point-major, d a multiple of 4, 16-byte aligned rows */
    long long rows, cols;
    float lambda;
    double tol;
};

__device__ __forceinline__ unsigned long long globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ double block_sum(double v, double *scratch)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    double total = 0;
    if (threadIdx.x == 0)
        for (int w = 0; w < (int)(blockDim.x / 32); w++)
            total += scratch[w];
    return total; /* valid in thread 0 */
}

__device__ double block_max(double v, double *scratch)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmax(v, __shfl_down_sync(0xffffffffu, v, o));
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    double m = v;
    if (threadIdx.x == 0)
        for (int w = 1; w < (int)(blockDim.x / 32); w++)
            m = fmax(m, scratch[w]);
    return m; /* valid in thread 0 */
}

/* Squared distance of x to the centroid row cc (DMAX floats, 16-byte
 * aligned), bit for bit the reference's: the same operations in the same
 * order, each rounded on its own (the _rn intrinsics keep nvcc from fusing a
 * multiply and an add into an FMA, which rounds once and would move labels
 * at near-ties). Both are zero past d, so the extra terms add exact zeros;
 * no per-feature test, and the row comes in 16-byte shared loads (one
 * wavefront each when every lane reads the same row). The first term is
 * the reference's 0 + t * t, which is t * t exactly. */
template <int DMAX>
__device__ __forceinline__ float distance2(const float *x, const float *cc)
{
    float dist = 0.0f;
#pragma unroll
    for (int q = 0; q < DMAX / 4; q++) {
        const float4 c4 = *(const float4 *)(cc + 4 * q);
        const float c[4] = {c4.x, c4.y, c4.z, c4.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float t = __fsub_rn(x[4 * q + j], c[j]);
            dist = q == 0 && j == 0 ? __fmul_rn(t, t) : __fadd_rn(dist, __fmul_rn(t, t));
        }
    }
    return dist;
}

/* The contiguity cost as the reference rounds it. */
__device__ __forceinline__ float contig_cost(float lambda, float dist, float inv_d, int m, int same)
{
    const float frac = m ? __fdiv_rn((float)(m - same), (float)m) : 0.0f;
    return __fadd_rn(__fmul_rn(lambda, __fmul_rn(dist, inv_d)), __fmul_rn(__fsub_rn(1.0f, lambda), frac));
}

/* Plain nearest centroids of P points by the exact distances, each centroid
 * row read once for all of them; ties to the lowest index. */
template <int DMAX, int P>
__device__ __forceinline__ void exact_labels(const float (*x)[DMAX], const float *Cs, int k, int *l)
{
    float b[P];
#pragma unroll
    for (int p = 0; p < P; p++) {
        l[p] = 0;
        b[p] = 0.0f;
    }
    for (int c = 0; c < k; c++) {
        float cc[DMAX];
#pragma unroll
        for (int q = 0; q < DMAX / 4; q++)
            *(float4 *)(cc + 4 * q) = *(const float4 *)(Cs + c * DMAX + 4 * q);
#pragma unroll
        for (int p = 0; p < P; p++) {
            float dist = 0.0f;
#pragma unroll
            for (int f = 0; f < DMAX; f++) {
                const float t = __fsub_rn(x[p][f], cc[f]);
                dist = f == 0 ? __fmul_rn(t, t) : __fadd_rn(dist, __fmul_rn(t, t));
            }
            if (c == 0 || dist < b[p]) {
                l[p] = c;
                b[p] = dist;
            }
        }
    }
}

/* Plain nearest centroids of P points, screened. The nearest centroid
 * maximizes B_c = x.c - |c|^2 / 2, which is 8 FMAs per centroid for d 8
 * (one chain from h_c = -|c|^2 / 2) instead of the exact distance's 23
 * separately rounded operations; each point keeps its largest and second
 * largest B. With s2 = |x|^2, the exact float distance is
 * D_c = s2 - 2 B_c + e_c, |e_c| <= 3 (d + 2) u R^2 to first order (u = 2^-24,
 * R = |x| + max|c|, R^2 <= 2 (s2 + rmax2)): the chain's rounding, the
 * rounding of |c|^2, and D's own. So when the best B beats the second by
 * more than eps = 12 (d + 2) u (s2 + rmax2) (twice that bound, for the
 * second-order terms and the rounding of the test itself) the best one is
 * the strict exact minimum: the reference's label. Otherwise (a near-tie,
 * or inf / NaN from huge values) the whole warp recomputes its labels with
 * the exact distances, which for the other lanes gives the same labels. A
 * tiny absolute term covers subnormal rounding. Every lane of the warp must
 * call it. */
template <int DMAX, int P>
__device__ __forceinline__ void screened_labels(const float (*x)[DMAX], const float *Cs, const float *Ch, int k,
                                                float rmax2, float eps_coef, int *l)
{
    float b1[P], b2[P];
    int i1[P];
#pragma unroll
    for (int p = 0; p < P; p++) {
        b1[p] = b2[p] = -INFINITY;
        i1[p] = 0;
    }
    for (int c = 0; c < k; c++) {
        float cc[DMAX];
#pragma unroll
        for (int q = 0; q < DMAX / 4; q++)
            *(float4 *)(cc + 4 * q) = *(const float4 *)(Cs + c * DMAX + 4 * q);
        const float h = Ch[c];
#pragma unroll
        for (int p = 0; p < P; p++) {
            float B = h;
#pragma unroll
            for (int f = 0; f < DMAX; f++)
                B = __fmaf_rn(x[p][f], cc[f], B);
            i1[p] = B > b1[p] ? c : i1[p];
            b2[p] = fminf(b1[p], fmaxf(b2[p], B));
            b1[p] = fmaxf(b1[p], B);
        }
    }
    bool near = false;
#pragma unroll
    for (int p = 0; p < P; p++) {
        float s2 = 0.0f;
#pragma unroll
        for (int f = 0; f < DMAX; f++)
            s2 = __fmaf_rn(x[p][f], x[p][f], s2);
        const float eps = __fmaf_rn(eps_coef, s2 + rmax2, 1e-37f);
        near |= !(b1[p] - b2[p] > eps);
        l[p] = i1[p];
    }
    if (__any_sync(0xffffffffu, near))
        exact_labels<DMAX, P>(x, Cs, k, l);
}

template <int DMAX>
__device__ __forceinline__ void load_point(const Args &a, long long i, float *x)
{
    if (DMAX % 4 == 0 && a.vec4) {
        const float4 *row = (const float4 *)(a.x + i * a.sp);
#pragma unroll
        for (int q = 0; q < DMAX / 4; q++) {
            float4 v = 4 * q < a.d ? __ldg(row + q) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            x[4 * q] = v.x;
            x[4 * q + 1] = v.y;
            x[4 * q + 2] = v.z;
            x[4 * q + 3] = v.w;
        }
        return;
    }
#pragma unroll
    for (int f = 0; f < DMAX; f++)
        x[f] = f < a.d ? __ldg(a.x + i * a.sp + f * a.sf) : 0.0f;
}

/* Sums v over the lanes of `peers` (the lanes holding the same key as this
 * one) by a tree of shuffles; the total ends in the lowest lane of peers.
 * Every lane of the warp must call it. */
template <int DMAX>
__device__ __forceinline__ void sum_peers(unsigned peers, float *v, int d)
{
    const int lane = threadIdx.x & 31;
    unsigned rank = __popc(peers & ((1u << lane) - 1u)); /* peers below me */
    unsigned above = peers & ~((2u << lane) - 1u);       /* peers above me */
    if (lane == 31)
        above = 0;
    while (__any_sync(0xffffffffu, above != 0)) {
        int next = __ffs(above) - 1; /* the next peer above, -1 for none */
#pragma unroll
        for (int f = 0; f < DMAX; f++)
            if (f < d) {
                float t = __shfl_sync(0xffffffffu, v[f], next < 0 ? lane : next);
                if (next >= 0)
                    v[f] += t;
            }
        /* lanes at odd rank have been added into the lane below them */
        unsigned done = __ballot_sync(0xffffffffu, rank & 1u);
        above &= ~done;
        rank >>= 1;
    }
}

/* Adds the lane's point x (label l, -1 for none) into the partial sums:
 * lanes with the same label first sum by shuffles, then the lowest of them
 * adds. WSUM: sums and counts are this warp's own copy, and the adding lanes
 * hold distinct labels, so plain adds suffice (and the order is fixed);
 * otherwise the block's one copy takes shared atomics. Rows are ds = d | 1
 * floats apart: an odd stride puts the same feature of different labels in
 * different banks (with 8 the adding lanes of 16 labels met in 4 banks).
 * Every lane calls it. */
template <int DMAX, bool WSUM>
__device__ __forceinline__ void accumulate(int l, float *x, int d, int ds, float *sums, unsigned *counts)
{
    const int lane = threadIdx.x & 31;
    unsigned peers = __match_any_sync(0xffffffffu, l);
    sum_peers<DMAX>(peers, x, d);
    if (l >= 0 && lane == __ffs(peers) - 1) {
#pragma unroll
        for (int f = 0; f < DMAX; f++)
            if (f < d) {
                if (WSUM)
                    sums[l * ds + f] += x[f];
                else
                    atomicAdd(&sums[l * ds + f], x[f]);
            }
        if (WSUM)
            counts[l] += (unsigned)__popc(peers);
        else
            atomicAdd(&counts[l], (unsigned)__popc(peers));
    }
    if (WSUM)
        __syncwarp();
}

/* The contiguity cost with the previous labels of the window staged in
 * shared memory: halo holds the labels of a (TILE_H + 2r) x (32 + 2r) patch
 * (-1 outside the image or masked), and (hy, hx) is this pixel in it. The
 * arithmetic is the reference's, rounded as it rounds. */
template <int DMAX>
__device__ __forceinline__ int best_label_tile(const Args &a, const float *x, const float *Cs, const short *halo,
                                               int hw, int hy, int hx)
{
    const int r = a.window / 2;
    /* the neighbours' labels counted once, each count in `bits` bits of one
     * 64-bit word where k of them fit (window 5, k <= 12), instead of one
     * pass over the window per centroid */
    const int neighbours = (2 * r + 1) * (2 * r + 1) - 1, bits = 32 - __clz(neighbours);
    const bool packed = a.k * bits <= 64;
    unsigned long long counts = 0;
    int m = 0;
    for (int y = -r; y <= r; y++)
        for (int c = -r; c <= r; c++) {
            const int l = halo[(hy + y) * hw + hx + c];
            if ((y || c) && l >= 0) {
                m++;
                if (packed)
                    counts += 1ull << (bits * l);
            }
        }
    const float inv_d = __fdiv_rn(1.0f, (float)a.d);
    int best = 0;
    float best_cost = 0.0f;
    for (int c = 0; c < a.k; c++) {
        const float dist = distance2<DMAX>(x, Cs + c * DMAX);
        int same = 0;
        if (packed)
            same = (int)((counts >> (bits * c)) & ((1ull << bits) - 1ull));
        else if (m)
            for (int y = -r; y <= r; y++)
                for (int cx = -r; cx <= r; cx++)
                    same += (y || cx) && halo[(hy + y) * hw + hx + cx] == c;
        const float cost = contig_cost(a.lambda, dist, inv_d, m, same);
        if (c == 0 || cost < best_cost) {
            best = c;
            best_cost = cost;
        }
    }
    return best;
}

const int TILE_H = THREADS / 32; /* contiguity tiles: one warp per row of 32 pixels */

/* WSUM per-warp partial sums without atomics (see accumulate); SCREEN the
 * plain labels through screened_labels (else exact_labels for every point);
 * PF the plain path loads the next step's points before it labels this
 * step's. The plain path takes P points per thread per step (2 for d <= 8:
 * each centroid row read from shared memory serves both). */
template <int DMAX, bool CONTIG, bool WSUM, bool SCREEN, bool PF = false>
__global__ void __launch_bounds__(THREADS, DMAX <= 8 ? 3 : 1) k_lloyd(Args a)
{
    constexpr int P = DMAX <= 8 ? 2 : 1;
    cg::grid_group grid = cg::this_grid();
    extern __shared__ __align__(16) unsigned char smem[];
    const int kd = a.k * a.d;
    const int ds = a.d | 1;
    const int kdpad = a.k * DMAX;
    const int copies = WSUM ? THREADS / 32 : 1;
    float *Cs = (float *)smem;
    float *Ch = Cs + kdpad;
    float *sums = Ch + a.k;
    unsigned *counts = (unsigned *)(sums + copies * a.k * ds);
    short *halo = (short *)(counts + copies * a.k);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    float *my_sums = WSUM ? sums + warp * a.k * ds : sums;
    unsigned *my_counts = WSUM ? counts + warp * a.k : counts;
    __shared__ double scratch[THREADS / 32];
    __shared__ int stop, rmax_bits;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const bool timer = blockIdx.x == 0 && threadIdx.x == 0;
    unsigned long long assign_ns = 0, update_ns = 0;
    /* screened_labels' bound, see there */
    const float eps_coef = 12.0f * (float)(a.d + 2) * 0x1p-24f;
    if (threadIdx.x == 0)
        stop = 0; /* read first after phase A's __syncthreads */

    if (CONTIG) {
        /* labels of iteration 0: plain nearest centroid to the initial ones */
        for (int j = threadIdx.x; j < kdpad; j += blockDim.x)
            Cs[j] = j % DMAX < a.d ? a.init[j / DMAX * a.d + j % DMAX] : 0.0f;
        __syncthreads();
        for (long long i = first; i < a.n; i += stride) {
            if (a.mask && !a.mask[i]) {
                a.lab[0][i] = -1;
                continue;
            }
            float x[1][DMAX];
            load_point<DMAX>(a, i, x[0]);
            int l;
            exact_labels<DMAX, 1>(x, Cs, a.k, &l);
            a.lab[0][i] = l;
        }
        grid.sync();
    }

    int it = 0;
    double move = 0;
    while (it < a.max_iters) {
        unsigned long long t0 = timer ? globaltimer() : 0;
        const float *Cprev = it == 0 ? a.init : a.cent[(it - 1) & 1];
        float *Cnext = a.cent[it & 1];
        const int32_t *prev = CONTIG ? a.lab[it & 1] : nullptr;
        int32_t *cur = CONTIG ? a.lab[(it + 1) & 1] : a.labels;
        /* plain k-means, last iteration: each point's exact distance to its
         * centroid, for the objective without another pass (see below) */
        const bool fold = !CONTIG && it == a.max_iters - 1;
        /* A: assignment and block partial sums */
        for (int j = threadIdx.x; j < kdpad; j += blockDim.x)
            Cs[j] = j % DMAX < a.d ? __ldcg(Cprev + j / DMAX * a.d + j % DMAX) : 0.0f;
        for (int j = threadIdx.x; j < copies * a.k * ds; j += blockDim.x)
            sums[j] = 0.0f;
        for (int j = threadIdx.x; j < copies * a.k; j += blockDim.x)
            counts[j] = 0;
        if (threadIdx.x == 0)
            rmax_bits = 0;
        __syncthreads();
        float rmax2 = 0.0f;
        if (SCREEN && !CONTIG) {
            for (int c = threadIdx.x; c < a.k; c += blockDim.x) {
                float q = 0.0f;
#pragma unroll
                for (int f = 0; f < DMAX; f++)
                    q = __fmaf_rn(Cs[c * DMAX + f], Cs[c * DMAX + f], q);
                Ch[c] = -0.5f * q;
                atomicMax(&rmax_bits, __float_as_int(q)); /* q >= 0: its bits order as ints */
            }
            __syncthreads();
            rmax2 = __int_as_float(rmax_bits);
        }
        if (CONTIG) {
            /* tiles of TILE_H rows x 32 columns, their window's labels staged
             * in shared memory once instead of read k + 1 times per pixel */
            const int r = a.window / 2, hw = 32 + 2 * r, hh = TILE_H + 2 * r;
            const long long tiles_x = (a.cols + 31) / 32, tiles = tiles_x * ((a.rows + TILE_H - 1) / TILE_H);
            for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
                const long long row0 = t / tiles_x * TILE_H, col0 = t % tiles_x * 32;
                __syncthreads(); /* the last tile's readers are done with halo */
                for (int j = threadIdx.x; j < hh * hw; j += blockDim.x) {
                    long long y = row0 - r + j / hw, c = col0 - r + j % hw;
                    halo[j] = y >= 0 && y < a.rows && c >= 0 && c < a.cols ? (short)__ldcg(prev + y * a.cols + c)
                                                                           : (short)-1;
                }
                __syncthreads();
                const long long row = row0 + warp, col = col0 + lane;
                int l = -1;
                float x[DMAX];
#pragma unroll
                for (int f = 0; f < DMAX; f++)
                    x[f] = 0.0f;
                if (row < a.rows && col < a.cols) {
                    const long long i = row * a.cols + col;
                    if (!a.mask || a.mask[i]) {
                        load_point<DMAX>(a, i, x);
                        l = best_label_tile<DMAX>(a, x, Cs, halo, hw, warp + r, lane + r);
                    }
                    cur[i] = l;
                }
                accumulate<DMAX, WSUM>(l, x, a.d, ds, my_sums, my_counts);
            }
        } else {
            /* P points per thread, all loads issued before any is used;
             * whole warps step together (stride and first - lane are
             * multiples of 32), so every lane takes part in the shuffles */
            double obj = 0.0;
            /* PF: the next step's points are loaded before this step's
             * labels are computed, so their latency hides behind the work */
            float xn[PF ? P : 1][DMAX];
            if (PF)
#pragma unroll
                for (int p = 0; p < P; p++) {
                    const long long i = first - lane + p * stride + lane;
#pragma unroll
                    for (int f = 0; f < DMAX; f++)
                        xn[PF ? p : 0][f] = 0.0f;
                    if (i < a.n)
                        load_point<DMAX>(a, i, xn[PF ? p : 0]);
                }
            for (long long base = first - lane; base < a.n; base += P * stride) {
                float x[P][DMAX];
                long long idx[P];
                int l[P];
#pragma unroll
                for (int p = 0; p < P; p++) {
                    idx[p] = base + p * stride + lane;
                    if (PF) {
                        const long long i = idx[p] + P * stride;
#pragma unroll
                        for (int f = 0; f < DMAX; f++) {
                            x[p][f] = xn[PF ? p : 0][f];
                            xn[PF ? p : 0][f] = 0.0f;
                        }
                        if (i < a.n)
                            load_point<DMAX>(a, i, xn[PF ? p : 0]);
                    } else {
#pragma unroll
                        for (int f = 0; f < DMAX; f++)
                            x[p][f] = 0.0f;
                        if (idx[p] < a.n)
                            load_point<DMAX>(a, idx[p], x[p]);
                    }
                }
                if (SCREEN)
                    screened_labels<DMAX, P>(x, Cs, Ch, a.k, rmax2, eps_coef, l);
                else
                    exact_labels<DMAX, P>(x, Cs, a.k, l);
#pragma unroll
                for (int p = 0; p < P; p++) {
                    const bool valid = idx[p] < a.n && (!a.mask || a.mask[idx[p]]);
                    if (!valid) {
                        l[p] = -1;
#pragma unroll
                        for (int f = 0; f < DMAX; f++)
                            x[p][f] = 0.0f;
                    }
                    if (idx[p] < a.n)
                        cur[idx[p]] = l[p];
                    if (fold && valid)
                        obj += distance2<DMAX>(x[p], Cs + l[p] * DMAX);
                }
#pragma unroll
                for (int p = 0; p < P; p++)
                    accumulate<DMAX, WSUM>(l[p], x[p], a.d, ds, my_sums, my_counts);
            }
            if (fold) {
                obj = block_sum(obj, scratch);
                if (threadIdx.x == 0)
                    a.pobj[blockIdx.x] = obj;
            }
        }
        __syncthreads();
        /* the warps' copies in a fixed order */
        for (int j = threadIdx.x; j < kd; j += blockDim.x) {
            const int c = j / a.d, f = j % a.d;
            float t = 0.0f;
            for (int w = 0; w < copies; w++)
                t += sums[(w * a.k + c) * ds + f];
            a.psum[(size_t)blockIdx.x * kd + j] = t;
        }
        for (int j = threadIdx.x; j < a.k; j += blockDim.x) {
            unsigned t = 0;
            for (int w = 0; w < copies; w++)
                t += counts[w * a.k + j];
            a.pcount[(size_t)blockIdx.x * a.k + j] = t;
        }
        grid.sync();
        unsigned long long t1 = timer ? globaltimer() : 0;

        /* B: one warp per (cluster, feature), spread over the blocks first so
         * the partials' reads come from many SMs at once; each lane sums a
         * fixed set of blocks in double, then a fixed shuffle tree: the
         * result does not depend on timing. The count is summed again by
         * each of the cluster's warps (integers: exact). */
        for (int w = blockIdx.x + gridDim.x * warp; w < kd; w += gridDim.x * (THREADS / 32)) {
            const int c = w / a.d;
            double s = 0.0;
            unsigned long long cnt = 0;
            for (int b = lane; b < (int)gridDim.x; b += 32) {
                s += (double)__ldcg(a.psum + (size_t)b * kd + w);
                cnt += __ldcg(a.pcount + (size_t)b * a.k + c);
            }
            for (int o = 16; o > 0; o >>= 1) {
                s += __shfl_down_sync(0xffffffffu, s, o);
                cnt += __shfl_down_sync(0xffffffffu, cnt, o);
            }
            if (lane == 0) {
                const float old = __ldcg(Cprev + w);
                const float next = cnt ? (float)(s / (double)cnt) : old;
                const double diff = (double)next - (double)old;
                Cnext[w] = next;
                a.move2[w] = __dmul_rn(diff, diff);
                if (fold) {
                    /* sum over the cluster's points of |x - next|^2 - |x - old|^2
                     * = cnt (|m - next|^2 - |m - old|^2), m their mean; this
                     * feature's share */
                    const double m = cnt ? s / (double)cnt : 0.0, e = m - (double)next, g = m - (double)old;
                    a.corr[w] = (double)cnt * (e * e - g * g);
                    a.corr_old[w] = (double)cnt * g * g;
                    if (w % a.d == 0)
                        a.ccount[c] = cnt;
                }
            }
        }
        grid.sync();
        it++;
        /* C: the convergence test, the same in every block: each cluster's
         * move^2 summed over its features in order as the reference does,
         * the largest by a block reduction (max: any order). With tol <= 0
         * nothing stops early, so only the last move (for the result) is
         * needed. */
        if (a.tol > 0 || it == a.max_iters) {
            double mx = 0.0;
            for (int c = threadIdx.x; c < a.k; c += blockDim.x) {
                double m2 = 0.0;
                for (int f = 0; f < a.d; f++)
                    m2 = __dadd_rn(m2, __ldcg(a.move2 + c * a.d + f));
                mx = fmax(mx, m2);
            }
            mx = block_max(mx, scratch);
            if (threadIdx.x == 0) {
                move = sqrt(mx);
                stop = move < a.tol;
            }
            __syncthreads();
        }
        if (timer) {
            unsigned long long t2 = globaltimer();
            assign_ns += t1 - t0;
            update_ns += t2 - t1;
        }
        if (stop)
            break;
    }

    const float *Cfin = a.cent[(it - 1) & 1];
    /* Plain k-means that ran to max_iters: the objective is the sum over the
     * points of the exact distance to the centroid they were assigned to in
     * the last iteration (pobj), plus the correction to the final centroids
     * (corr), which is small when the centroids have settled. When it is not
     * (a large old-centroid term: cancellation), or with contiguity (the
     * labels are copied out anyway), or after an early stop, one more pass
     * computes it directly. The decision is the same in every block. */
    bool direct = true;
    if (!CONTIG && it == a.max_iters) {
        double t = 0, cn = 0, co = 0, nv = 0;
        for (int b = threadIdx.x; b < (int)gridDim.x; b += blockDim.x)
            t += __ldcg(a.pobj + b);
        for (int j = threadIdx.x; j < kd; j += blockDim.x) {
            cn += __ldcg(a.corr + j);
            co += __ldcg(a.corr_old + j);
        }
        for (int c = threadIdx.x; c < a.k; c += blockDim.x)
            nv += (double)__ldcg(a.ccount + c);
        t = block_sum(t, scratch);
        cn = block_sum(cn, scratch);
        co = block_sum(co, scratch);
        nv = block_sum(nv, scratch);
        if (threadIdx.x == 0) {
            const double total = t + cn;
            stop = co <= total; /* reused as the verdict */
            if (stop && blockIdx.x == 0) {
                a.result[0] = it;
                a.result[1] = total;
                a.result[2] = move;
                a.result[3] = nv;
                a.result[4] = (double)assign_ns;
                a.result[5] = (double)update_ns;
            }
        }
        __syncthreads();
        direct = !stop;
    }
    if (!direct) {
        if (blockIdx.x == 0)
            for (int j = threadIdx.x; j < kd; j += blockDim.x)
                a.out_centroids[j] = __ldcg(Cfin + j);
        return;
    }

    /* the objective under the final centroids, and the final labels */
    for (int j = threadIdx.x; j < kdpad; j += blockDim.x)
        Cs[j] = j % DMAX < a.d ? __ldcg(Cfin + j / DMAX * a.d + j % DMAX) : 0.0f;
    __syncthreads();
    const int32_t *fin = CONTIG ? a.lab[it & 1] : a.labels;
    double obj = 0;
    unsigned long long valid = 0;
    for (long long i = first; i < a.n; i += stride) {
        int32_t l = __ldcg(fin + i);
        if (CONTIG)
            a.labels[i] = l;
        if (l < 0)
            continue;
        valid++;
        float x[DMAX];
        load_point<DMAX>(a, i, x);
        obj += distance2<DMAX>(x, Cs + l * DMAX);
    }
    obj = block_sum(obj, scratch);
    double v = block_sum((double)valid, scratch);
    if (threadIdx.x == 0) {
        a.pobj[blockIdx.x] = obj;
        a.pvalid[blockIdx.x] = (unsigned long long)v;
    }
    if (blockIdx.x == 0)
        for (int j = threadIdx.x; j < kd; j += blockDim.x)
            a.out_centroids[j] = Cs[j / a.d * DMAX + j % a.d];
    grid.sync();
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        double total = 0;
        unsigned long long nv = 0;
        for (int b = 0; b < (int)gridDim.x; b++) {
            total += __ldcg(a.pobj + b);
            nv += __ldcg(a.pvalid + b);
        }
        a.result[0] = it;
        a.result[1] = total;
        a.result[2] = move;
        a.result[3] = (double)nv;
        a.result[4] = (double)assign_ns;
        a.result[5] = (double)update_ns;
    }
}

/* ---- texture features (dakit/kmeans.h): planes, then features with their
 * statistics in three deterministic stages (block partials in a fixed grid,
 * one block reducing them in block order), then the standardization with
 * the initial centroids' interval sums. ---- */

const int TEX_BLOCKS_PER_SM = 2;
const int TEX_STATS = 9; /* per block: sum[3], sq[3], count, min z, max z */

__global__ void k_tex_planes(const float *value, float *planes, long long n)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float v = value[i];
        bool has = isfinite(v);
        float z = has ? v : 0.0f;
        planes[i] = z;
        planes[n + i] = z * z;
        planes[2 * n + i] = has ? 1.0f : 0.0f;
    }
}

__global__ void __launch_bounds__(THREADS) k_tex_features(const float *value, const float *sm, float min_value,
                                                          float *points, uint8_t *mask, double *part, long long n)
{
    __shared__ double scratch[THREADS / 32];
    double sum[3] = {0, 0, 0}, sq[3] = {0, 0, 0}, cnt = 0;
    float lo = INFINITY, hi = -INFINITY;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float v = value[i];
        bool has = isfinite(v);
        float z = has ? v : 0.0f;
        float a = sm[i], b = sm[n + i], w = sm[2 * n + i];
        float mean = w > 1e-6f ? __fdiv_rn(a, w) : z;
        float var = w > 1e-6f ? __fsub_rn(__fdiv_rn(b, w), __fmul_rn(mean, mean)) : 0.0f;
        float f[3] = {z, mean, var > 0 ? __fsqrt_rn(var) : 0.0f};
        bool in = has && z >= min_value;
        mask[i] = in;
#pragma unroll
        for (int j = 0; j < 3; j++) {
            points[j * n + i] = f[j];
            if (in) {
                sum[j] += f[j];
                sq[j] += (double)f[j] * f[j];
            }
        }
        if (in) {
            cnt += 1;
            lo = fminf(lo, z);
            hi = fmaxf(hi, z);
        }
    }
    double vals[7] = {sum[0], sum[1], sum[2], sq[0], sq[1], sq[2], cnt};
    for (int j = 0; j < 7; j++) {
        double t = block_sum(vals[j], scratch);
        if (threadIdx.x == 0)
            part[(size_t)blockIdx.x * TEX_STATS + j] = t;
    }
    for (int o = 16; o > 0; o >>= 1) {
        lo = fminf(lo, __shfl_down_sync(0xffffffffu, lo, o));
        hi = fmaxf(hi, __shfl_down_sync(0xffffffffu, hi, o));
    }
    __shared__ float slo[THREADS / 32], shi[THREADS / 32];
    if ((threadIdx.x & 31) == 0) {
        slo[threadIdx.x / 32] = lo;
        shi[threadIdx.x / 32] = hi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < THREADS / 32; w++) {
            lo = fminf(lo, slo[w]);
            hi = fmaxf(hi, shi[w]);
        }
        part[(size_t)blockIdx.x * TEX_STATS + 7] = lo;
        part[(size_t)blockIdx.x * TEX_STATS + 8] = hi;
    }
}

/* One warp: the partials -> st = valid, mu[3], sd[3], lo, width
 * (standardized feature 0, the initial centroids' intervals). Lane j sums
 * blocks j, j + 32, ..., then the lanes' sums meet in a fixed tree: the
 * same order on every run. */
__global__ void k_tex_stats(const double *part, int blocks, int k, double *st)
{
    if (blockIdx.x)
        return;
    const int lane = threadIdx.x;
    double t[TEX_STATS] = {0, 0, 0, 0, 0, 0, 0, INFINITY, -INFINITY};
    for (int b = lane; b < blocks; b += 32) {
#pragma unroll
        for (int j = 0; j < 7; j++)
            t[j] += part[(size_t)b * TEX_STATS + j];
        t[7] = fmin(t[7], part[(size_t)b * TEX_STATS + 7]);
        t[8] = fmax(t[8], part[(size_t)b * TEX_STATS + 8]);
    }
    for (int off = 16; off > 0; off /= 2) {
#pragma unroll
        for (int j = 0; j < 7; j++)
            t[j] += __shfl_xor_sync(0xffffffffu, t[j], off);
        t[7] = fmin(t[7], __shfl_xor_sync(0xffffffffu, t[7], off));
        t[8] = fmax(t[8], __shfl_xor_sync(0xffffffffu, t[8], off));
    }
    if (lane)
        return;
    double valid = t[6];
    st[0] = valid;
    for (int j = 0; j < 3; j++) {
        double mu = valid > 0 ? t[j] / valid : 0.0;
        double var = valid > 0 ? t[3 + j] / valid - mu * mu : 0.0;
        st[1 + j] = mu;
        st[4 + j] = var > 1e-12 ? sqrt(var) : 1.0;
    }
    /* standardizing is monotonic, so the standardized range is the range's */
    float lo = valid > 0 ? (float)((t[7] - st[1]) / st[4]) : 0.0f;
    float hi = valid > 0 ? (float)((t[8] - st[1]) / st[4]) : 0.0f;
    st[7] = lo;
    st[8] = ((double)hi - (double)lo) / k;
}

/* Standardizes in place and sums each interval's points (block partials:
 * ipart[b][c][0..3] = sum of 3 features, count). */
__global__ void __launch_bounds__(THREADS) k_tex_standardize(float *points, const uint8_t *mask, const double *st,
                                                             double *ipart, int k, long long n)
{
    extern __shared__ double isum[]; /* k * 4 */
    for (int j = threadIdx.x; j < 4 * k; j += blockDim.x)
        isum[j] = 0;
    __syncthreads();
    const double mu[3] = {st[1], st[2], st[3]}, sd[3] = {st[4], st[5], st[6]};
    const double lo = st[7], width = st[8];
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        bool in = mask[i];
        float f[3];
#pragma unroll
        for (int j = 0; j < 3; j++) {
            f[j] = in ? (float)(((double)points[j * n + i] - mu[j]) / sd[j]) : 0.0f;
            points[j * n + i] = f[j];
        }
        if (in) {
            double v = f[0];
            int c = width > 0 ? (int)((v - (double)(float)lo) / width) : 0;
            c = c < 0 ? 0 : c >= k ? k - 1 : c;
            /* the order of these adds varies; it moves bits far below the
             * float the centroid is rounded to */
            for (int j = 0; j < 3; j++)
                atomicAdd(&isum[c * 4 + j], (double)f[j]);
            atomicAdd(&isum[c * 4 + 3], 1.0);
        }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < 4 * k; j += blockDim.x)
        ipart[(size_t)blockIdx.x * 4 * k + j] = isum[j];
}

/* The initial centroids from the interval partials; the statistics for
 * the host go to out = valid, mu[3], sd[3]. Each warp sums series (c, f)
 * over the blocks as k_tex_stats does, in a fixed order; `series` holds
 * 4 k doubles of shared memory. */
__global__ void k_tex_init(const double *ipart, int blocks, int k, const double *st, float *init, double *out)
{
    extern __shared__ double series[]; /* [c * 4 + f]: f 0..2 the features' sums, 3 the count */
    __shared__ double all[4];
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    for (int j = warp; j < 4 * k; j += warps) {
        double t = 0;
        for (int b = lane; b < blocks; b += 32)
            t += ipart[(size_t)b * 4 * k + j];
        for (int off = 16; off > 0; off /= 2)
            t += __shfl_xor_sync(0xffffffffu, t, off);
        if (lane == 0)
            series[j] = t;
    }
    __syncthreads();
    if (threadIdx.x < 4) {
        double t = 0;
        for (int c = 0; c < k; c++)
            t += series[c * 4 + threadIdx.x];
        all[threadIdx.x] = t;
    }
    __syncthreads();
    const double lo = st[7], width = st[8];
    for (int j = threadIdx.x; j < 3 * k; j += blockDim.x) {
        int c = j / 3, f = j % 3;
        double s = series[c * 4 + f], cnt = series[c * 4 + 3];
        float v;
        if (cnt > 0)
            v = (float)(s / cnt);
        else if (f == 0)
            v = (float)((double)(float)lo + (c + 0.5) * width);
        else
            v = all[3] > 0 ? (float)(all[f] / all[3]) : 0.0f;
        init[c * 3 + f] = v;
    }
    if (threadIdx.x < 7)
        out[threadIdx.x] = st[threadIdx.x];
}

/* ---- the phases of a distributed iteration (dakit/kmeans.h) ----
 * Separate launches on the device's stream, so that the layer can queue an
 * NCCL all-reduce between them. k_part_assign: each block takes tiles of
 * THREADS consecutive points, labels them (plain: exact distances; a band
 * under contiguity: the window read from the wide previous labels in global
 * memory), leaves labels and features in shared memory, and thread
 * (c, s) adds slice s of the tile's points labelled c in double; after the
 * last tile the slices are added in a fixed order into the block's
 * partials (pair-major: [(c (d + 1) + f) blocks + b], f = d the count). No
 * atomics, so the sums do not depend on scheduling. k_part_sums: one warp
 * per pair adds the blocks' partials in a fixed order into the layer's
 * sums. k_part_update: one block forms the centroids from the ranks'
 * reduced sums. state (doubles): iterations, stop, move, failed. */
struct PartArgs {
    const float *x;
    const uint8_t *mask;
    const float *C;
    const int32_t *prev;
    int32_t *next, *labels;
    double *partial;
    const double *state;
    const float *w; /* sample weights, or nullptr: every weight 1 */
    long long n, sp, sf, rows, cols;
    int d, k, window, blocks;
    float lambda;
};

template <int DMAX>
__device__ __forceinline__ void part_point(const PartArgs &a, long long i, float *x)
{
#pragma unroll
    for (int f = 0; f < DMAX; f++)
        x[f] = f < a.d ? __ldg(a.x + i * a.sp + f * a.sf) : 0.0f;
}

/* The contiguity label of band pixel (row, col): prev holds rows
 * [-r, rows + r), so every window row is there (-1 outside the image). */
template <int DMAX>
__device__ int band_label(const PartArgs &a, const float *x, const float *Cs, long long row, long long col)
{
    const int r = a.window / 2;
    int m = 0;
    for (int y = -r; y <= r; y++)
        for (int c = -r; c <= r; c++)
            if ((y || c) && col + c >= 0 && col + c < a.cols)
                m += a.prev[(row + y + r) * a.cols + col + c] >= 0;
    const float inv_d = __fdiv_rn(1.0f, (float)a.d);
    int best = 0;
    float best_cost = 0.0f;
    for (int k = 0; k < a.k; k++) {
        const float dist = distance2<DMAX>(x, Cs + k * DMAX);
        int same = 0;
        for (int y = -r; m && y <= r; y++)
            for (int c = -r; c <= r; c++)
                if ((y || c) && col + c >= 0 && col + c < a.cols)
                    same += a.prev[(row + y + r) * a.cols + col + c] == k;
        const float cost = contig_cost(a.lambda, dist, inv_d, m, same);
        if (k == 0 || cost < best_cost) {
            best = k;
            best_cost = cost;
        }
    }
    return best;
}

/* Shared memory: Cs k * DMAX floats, xs THREADS * (DMAX + 1) floats, ls
 * THREADS ints, red THREADS doubles. */
template <int DMAX>
size_t part_smem(int k)
{
    return ((size_t)k * DMAX + (size_t)THREADS * (DMAX + 1) + THREADS) * sizeof(float) + THREADS * sizeof(double);
}

template <int DMAX>
__global__ void __launch_bounds__(THREADS) k_part_assign(PartArgs a)
{
    extern __shared__ __align__(16) unsigned char smem[];
    float *Cs = (float *)smem;
    float *xs = Cs + a.k * DMAX;
    int *ls = (int *)(xs + THREADS * (DMAX + 1));
    double *red = (double *)(((uintptr_t)(ls + THREADS) + 7) & ~(uintptr_t)7);
    const int tid = threadIdx.x;
    const bool done = a.state[1] != 0.0;
    for (int j = tid; j < a.k * DMAX; j += THREADS)
        Cs[j] = j % DMAX < a.d ? a.C[j / DMAX * a.d + j % DMAX] : 0.0f;
    __syncthreads();
    const int r = a.window / 2, slices = THREADS / a.k, c = tid % a.k, s = tid / a.k;
    const long long tiles = done ? 0 : (a.n + THREADS - 1) / THREADS;
    double acc[DMAX];
#pragma unroll
    for (int f = 0; f < DMAX; f++)
        acc[f] = 0.0;
    double cnt = 0.0; /* the sum of the weights */
    for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        __syncthreads(); /* the last tile's readers are done */
        const long long i = tile * THREADS + tid;
        float x[DMAX];
#pragma unroll
        for (int f = 0; f < DMAX; f++)
            x[f] = 0.0f;
        int label = -1;
        if (i < a.n && (!a.mask || a.mask[i])) {
            part_point<DMAX>(a, i, x);
            if (a.prev) {
                label = band_label<DMAX>(a, x, Cs, i / a.cols, i % a.cols);
            } else {
                float xx[1][DMAX];
#pragma unroll
                for (int f = 0; f < DMAX; f++)
                    xx[0][f] = x[f];
                exact_labels<DMAX, 1>(xx, Cs, a.k, &label);
            }
        }
        if (i < a.n) {
            a.labels[i] = label;
            if (a.next)
                a.next[i + (long long)r * a.cols] = label;
        }
        ls[tid] = label;
#pragma unroll
        for (int f = 0; f < DMAX; f++)
            xs[tid * (DMAX + 1) + f] = x[f];
        xs[tid * (DMAX + 1) + DMAX] = a.w && label >= 0 ? a.w[i] : 1.0f;
        __syncthreads();
        if (s < slices) {
            const int len = (THREADS + slices - 1) / slices, end = min(THREADS, (s + 1) * len);
            for (int j = s * len; j < end; j++)
                if (ls[j] == c) {
                    const double w = (double)xs[j * (DMAX + 1) + DMAX];
#pragma unroll
                    for (int f = 0; f < DMAX; f++)
                        acc[f] = __dadd_rn(acc[f], __dmul_rn(w, (double)xs[j * (DMAX + 1) + f]));
                    cnt += w;
                }
        }
    }
    /* the slices in slice order */
    for (int f = 0; f <= DMAX; f++) {
        __syncthreads();
        double v = cnt;
#pragma unroll
        for (int g = 0; g < DMAX; g++)
            if (g == f)
                v = acc[g];
        red[tid] = v;
        __syncthreads();
        if (!done && tid < a.k && (f < a.d || f == DMAX)) {
            const int col = f < DMAX ? f : a.d;
            double t = 0.0;
            for (int q = 0; q < slices; q++)
                t += red[q * a.k + tid];
            a.partial[((long long)tid * (a.d + 1) + col) * a.blocks + blockIdx.x] = t;
        }
    }
}

/* One warp per pair w = c (d + 1) + f: out[c d + f], or out[k d + c] for
 * the count; always 0: nothing once state's stop is set. */
__global__ void k_part_sums(const double *partial, int blocks, int k, int d, double *out, const double *state,
                            int always)
{
    const int w = blockIdx.x, lane = threadIdx.x, c = w / (d + 1), f = w % (d + 1);
    if (!always && state[1] != 0.0)
        return;
    double sum = 0.0;
    for (int b = lane; b < blocks; b += 32)
        sum += partial[(long long)w * blocks + b];
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_down_sync(0xffffffffu, sum, o);
    if (lane == 0)
        out[f < d ? c * d + f : k * d + c] = sum;
}

/* One block: the centroids from the reduced sums (in place), the move and
 * the stop rule; the failure flag (sums[k d + k]) stops every rank. */
__global__ void k_part_update(const double *sums, float *C, double *state, int k, int d, double tol)
{
    __shared__ double scratch[THREADS / 32];
    const int kd = k * d;
    if (state[1] != 0.0)
        return;
    if (sums[kd + k] != 0.0) {
        if (threadIdx.x == 0)
            state[3] = 1.0, state[1] = 1.0;
        return;
    }
    double mx = 0.0;
    for (int c = threadIdx.x; c < k; c += blockDim.x) {
        const double count = sums[kd + c];
        if (count == 0.0)
            continue;
        double m2 = 0.0;
        for (int f = 0; f < d; f++) {
            const float next = __double2float_rn(sums[c * d + f] / count);
            const double diff = (double)next - (double)C[c * d + f];
            m2 += diff * diff;
            C[c * d + f] = next;
        }
        mx = fmax(mx, m2);
    }
    mx = block_max(mx, scratch);
    if (threadIdx.x == 0) {
        const double move = sqrt(mx);
        state[0] += 1.0;
        state[2] = move;
        if (move < tol)
            state[1] = 1.0;
    }
}

/* Per block: the objective and the count of labelled points into
 * partial[b] and partial[blocks + b]. */
template <int DMAX>
__global__ void __launch_bounds__(THREADS) k_part_objective(PartArgs a)
{
    __shared__ double scratch[THREADS / 32];
    double obj = 0.0, valid = 0.0;
    for (long long i = (long long)blockIdx.x * THREADS + threadIdx.x; i < a.n; i += (long long)gridDim.x * THREADS) {
        const int l = a.labels[i];
        if (l < 0)
            continue;
        float x[DMAX];
        part_point<DMAX>(a, i, x);
        float dist = 0.0f;
        for (int f = 0; f < a.d; f++) {
            const float t = __fsub_rn(x[f], a.C[l * a.d + f]);
            dist = f == 0 ? __fmul_rn(t, t) : __fadd_rn(dist, __fmul_rn(t, t));
        }
        obj += (a.w ? (double)a.w[i] : 1.0) * (double)dist;
        valid += 1.0;
    }
    obj = block_sum(obj, scratch);
    __syncthreads();
    valid = block_sum(valid, scratch);
    if (threadIdx.x == 0) {
        a.partial[blockIdx.x] = obj;
        a.partial[a.blocks + blockIdx.x] = valid;
    }
}

/* ---- plain k-means with k > DK_KMEANS_MAX_K: the centroids do not fit in
 * shared memory whole, so one iteration is four launches on the stream:
 * k_big_assign (each thread labels a point per pass while the block walks
 * the centroids in tiles of `rows` rows staged in shared memory, ascending
 * with strict <: ties to the lowest index), k_big_sums (block b takes a
 * contiguous chunk of the points; for each block of THREADS clusters,
 * thread t owns cluster c0 + t and adds the chunk's points of that label,
 * staged tile by tile in shared memory, in point order, into the phases'
 * partial layout), then k_part_sums and k_part_update as the phases run
 * them, the stop flag and the move in the phases' state. ---- */
template <int DMAX>
__global__ void __launch_bounds__(THREADS) k_big_assign(PartArgs a, int rows)
{
    extern __shared__ __align__(16) unsigned char smem[];
    float *Cs = (float *)smem;
    const int tid = threadIdx.x;
    if (a.state[1] != 0.0)
        return; /* the whole grid sees the same flag */
    for (long long base = (long long)blockIdx.x * THREADS; base < a.n; base += (long long)gridDim.x * THREADS) {
        const long long i = base + tid;
        const bool live = i < a.n && (!a.mask || a.mask[i]);
        float x[DMAX];
#pragma unroll
        for (int f = 0; f < DMAX; f++)
            x[f] = 0.0f;
        if (live)
            part_point<DMAX>(a, i, x);
        int best = 0;
        float best_dist = 0.0f;
        for (int c0 = 0; c0 < a.k; c0 += rows) {
            const int nr = min(rows, a.k - c0);
            __syncthreads();
            for (int j = tid; j < nr * DMAX; j += THREADS)
                Cs[j] = j % DMAX < a.d ? a.C[(long long)(c0 + j / DMAX) * a.d + j % DMAX] : 0.0f;
            __syncthreads();
            for (int c = 0; live && c < nr; c++) {
                const float dist = distance2<DMAX>(x, Cs + c * DMAX);
                if (c0 + c == 0 || dist < best_dist) {
                    best = c0 + c;
                    best_dist = dist;
                }
            }
        }
        if (i < a.n)
            a.labels[i] = live ? best : -1;
    }
}

template <int DMAX>
__global__ void __launch_bounds__(THREADS) k_big_sums(PartArgs a)
{
    extern __shared__ __align__(16) unsigned char smem[];
    float *xs = (float *)smem;
    int *ls = (int *)(xs + THREADS * (DMAX + 1));
    const int tid = threadIdx.x;
    if (a.state[1] != 0.0)
        return;
    const long long chunk = (a.n + gridDim.x - 1) / gridDim.x, first = (long long)blockIdx.x * chunk;
    const long long last = min(a.n, first + chunk);
    for (int c0 = 0; c0 < a.k; c0 += THREADS) {
        const int c = c0 + tid;
        double acc[DMAX];
#pragma unroll
        for (int f = 0; f < DMAX; f++)
            acc[f] = 0.0;
        double cnt = 0.0; /* the sum of the weights */
        for (long long at = first; at < last; at += THREADS) {
            __syncthreads();
            const long long i = at + tid;
            int label = -1;
            float x[DMAX];
#pragma unroll
            for (int f = 0; f < DMAX; f++)
                x[f] = 0.0f;
            if (i < last) {
                label = a.labels[i];
                if (label >= 0)
                    part_point<DMAX>(a, i, x);
            }
            ls[tid] = label;
#pragma unroll
            for (int f = 0; f < DMAX; f++)
                xs[tid * (DMAX + 1) + f] = x[f];
            xs[tid * (DMAX + 1) + DMAX] = a.w && label >= 0 ? a.w[i] : 1.0f;
            __syncthreads();
            const int count = (int)min((long long)THREADS, last - at);
            for (int j = 0; j < count; j++)
                if (ls[j] == c) {
                    const double w = (double)xs[j * (DMAX + 1) + DMAX];
#pragma unroll
                    for (int f = 0; f < DMAX; f++)
                        acc[f] = __dadd_rn(acc[f], __dmul_rn(w, (double)xs[j * (DMAX + 1) + f]));
                    cnt += w;
                }
        }
        if (c < a.k) {
            for (int f = 0; f < a.d; f++)
                a.partial[((long long)c * (a.d + 1) + f) * a.blocks + blockIdx.x] = acc[f];
            a.partial[((long long)c * (a.d + 1) + a.d) * a.blocks + blockIdx.x] = cnt;
        }
    }
}

/* The seeding's distance pass (dakit/kmeans.h seed_distance): one block
 * per DK_KMEANS_SEED_BLOCK points, the reference's float distance, the
 * block's sum in double. */
__global__ void __launch_bounds__(THREADS) k_seed_distance(PartArgs a, const float *centre, const float *near,
                                                           float *out, double *blocks)
{
    __shared__ double scratch[THREADS / 32];
    const long long first = (long long)blockIdx.x * DK_KMEANS_SEED_BLOCK;
    double sum = 0.0;
    for (long long i = first + threadIdx.x; i < first + DK_KMEANS_SEED_BLOCK && i < a.n; i += THREADS) {
        float v = 0.0f;
        if (!a.mask || a.mask[i]) {
            if (centre) {
                for (int f = 0; f < a.d; f++) {
                    const float t = __fsub_rn(a.x[i * a.sp + f * a.sf], centre[f]);
                    v = f == 0 ? __fmul_rn(t, t) : __fadd_rn(v, __fmul_rn(t, t));
                }
            } else {
                v = 1.0f;
            }
            if (a.w)
                v = __fmul_rn(a.w[i], v);
            if (near && near[i] < v)
                v = near[i];
        }
        out[i] = v;
        sum += (double)v;
    }
    sum = block_sum(sum, scratch);
    if (threadIdx.x == 0)
        blocks[blockIdx.x] = sum;
}

typedef void (*part_fn)(PartArgs);

template <int DMAX>
void part_pick_d(part_fn *assign, part_fn *objective, size_t *smem, int k)
{
    *assign = k_part_assign<DMAX>;
    *objective = k_part_objective<DMAX>;
    *smem = part_smem<DMAX>(k);
}

void part_pick(int d, int k, part_fn *assign, part_fn *objective, size_t *smem)
{
    if (d <= 4)
        part_pick_d<4>(assign, objective, smem, k);
    else if (d <= 8)
        part_pick_d<8>(assign, objective, smem, k);
    else if (d <= 16)
        part_pick_d<16>(assign, objective, smem, k);
    else if (d <= 32)
        part_pick_d<32>(assign, objective, smem, k);
    else
        part_pick_d<64>(assign, objective, smem, k);
}

typedef void (*kernel_fn)(Args);

template <int DMAX>
kernel_fn pick_d(bool contig, bool wsum, bool screen, bool prefetch)
{
    if (contig)
        return wsum ? k_lloyd<DMAX, true, true, false> : k_lloyd<DMAX, true, false, false>;
    if (screen && wsum && prefetch)
        return k_lloyd<DMAX, false, true, true, true>;
    if (screen)
        return wsum ? k_lloyd<DMAX, false, true, true> : k_lloyd<DMAX, false, false, true>;
    return wsum ? k_lloyd<DMAX, false, true, false> : k_lloyd<DMAX, false, false, false>;
}

kernel_fn pick(int d, bool contig, bool wsum, bool screen, bool prefetch)
{
    if (d <= 4)
        return pick_d<4>(contig, wsum, screen, prefetch);
    if (d <= 8)
        return pick_d<8>(contig, wsum, screen, prefetch);
    if (d <= 16)
        return pick_d<16>(contig, wsum, screen, prefetch);
    if (d <= 32)
        return pick_d<32>(contig, wsum, screen, prefetch);
    return pick_d<64>(contig, wsum, screen, prefetch);
}

size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

struct Plan {
    dk_cuda_device *dev;
    dk_kmeans_setup s;
    kernel_fn kernel;
    int blocks;
    size_t smem;
    void *scratch; /* one allocation for everything below */
    Args a;
    int tex_blocks;     /* texture features: 0 when the plan cannot make them */
    double *tex_part, *tex_st, *tex_ipart, *tex_out;
    void *tex_scratch;
    /* the phases: kernels, grid, shared memory and the blocks' partials */
    part_fn part_assign, part_objective;
    size_t part_smem;
    int part_blocks;
    double *part_partial; /* part_blocks * max(k (d + 1), 2) */
    /* k > DK_KMEANS_MAX_K (plain): the k_big_* launches, in part_blocks
     * blocks over part_partial */
    int big, big_rows;
    void (*big_assign)(PartArgs, int);
    part_fn big_sums;
    size_t big_assign_smem, big_sums_smem;
    double *big_sums_out, *big_state, *big_obj; /* k d + k + 1, 4, 2 doubles */
    float *big_C;
};

template <int DMAX>
void big_pick_d(Plan *p)
{
    p->big_assign = k_big_assign<DMAX>;
    p->big_sums = k_big_sums<DMAX>;
    p->part_objective = k_part_objective<DMAX>;
    p->big_sums_smem = (size_t)THREADS * (DMAX + 2) * sizeof(float);
}

/* The k_big_* plan: kernels, the centroid tile that fits shared memory,
 * blocks, and one allocation for the partials, sums, state and centroids. */
dk_status plan_fill_big(Plan *p, const dk_kmeans_setup *setup, dk_msg *msg)
{
    const dk_cuda_device *dev = p->dev;
    const dk_kmeans_desc &d = setup->desc;
    int dmax = d.d <= 4 ? 4 : d.d <= 8 ? 8 : d.d <= 16 ? 16 : d.d <= 32 ? 32 : 64;
    if (dmax == 4)
        big_pick_d<4>(p);
    else if (dmax == 8)
        big_pick_d<8>(p);
    else if (dmax == 16)
        big_pick_d<16>(p);
    else if (dmax == 32)
        big_pick_d<32>(p);
    else
        big_pick_d<64>(p);
    p->big = 1;
    p->big_rows = 1024; /* 1024 rows: 16 to 128 KiB; halved until a block fits */
    int per_sm = 0;
    while (p->big_rows >= 32) {
        p->big_assign_smem = (size_t)p->big_rows * dmax * sizeof(float);
        if (p->big_assign_smem > 48 * 1024 &&
            cudaFuncSetAttribute((const void *)p->big_assign, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)p->big_assign_smem) != cudaSuccess) {
            cudaGetLastError();
            p->big_rows /= 2;
            continue;
        }
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, (const void *)p->big_assign, THREADS,
                                                          p->big_assign_smem) == cudaSuccess &&
            per_sm >= 1)
            break;
        cudaGetLastError();
        p->big_rows /= 2;
    }
    if (per_sm < 1) {
        dk_msg_set(msg, "cuda kmeans: no block of the large-k assignment fits on an SM (d %d)", d.d);
        return DK_ERR_BACKEND;
    }
    const size_t pairs = (size_t)d.k * (d.d + 1);
    long long tiles = ((long long)d.n + THREADS - 1) / THREADS;
    long long blocks = (long long)per_sm * dev->sm_count;
    /* the partials: at most about 256 MiB */
    long long most = (long long)(((size_t)256 << 20) / (pairs * sizeof(double)));
    blocks = blocks < tiles ? blocks : tiles;
    blocks = blocks < most ? blocks : most;
    p->part_blocks = (int)(blocks < 1 ? 1 : blocks);
    size_t sizes[] = {align256(pairs * p->part_blocks * sizeof(double)),
                      align256(((size_t)d.k * d.d + d.k + 1) * sizeof(double)), align256(4 * sizeof(double)),
                      align256(2 * sizeof(double)), align256((size_t)d.k * d.d * sizeof(float))};
    size_t total = 0;
    for (size_t sz : sizes)
        total += sz;
    void *scratch = NULL;
    CUDA_TRY(cudaMalloc(&scratch, total), "allocating the large-k kmeans plan's scratch");
    p->scratch = scratch;
    char *at = (char *)scratch;
    p->part_partial = (double *)at;
    p->big_sums_out = (double *)(at += sizes[0]);
    p->big_state = (double *)(at += sizes[1]);
    p->big_obj = (double *)(at += sizes[2]);
    p->big_C = (float *)(at += sizes[3]);
    return DK_OK;
}

void plan_destroy(void *handle)
{
    Plan *p = (Plan *)handle;
    if (!p)
        return;
    cudaSetDevice(p->dev->ordinal);
    if (p->scratch)
        cudaFree(p->scratch);
    if (p->tex_scratch)
        cudaFree(p->tex_scratch);
    if (p->part_partial && !p->big)
        cudaFree(p->part_partial);
    free(p);
}


/* The plan's kernel, grid and scratch; the caller destroys p on failure. */
dk_status plan_fill(Plan *p, const dk_kmeans_setup *setup, dk_msg *msg)
{
    const dk_cuda_device *dev = p->dev;
    const dk_kmeans_desc &d = setup->desc;
    size_t kd = (size_t)d.k * d.d;
    int dmax = d.d <= 4 ? 4 : d.d <= 8 ? 8 : d.d <= 16 ? 16 : d.d <= 32 ? 32 : 64; /* as pick() */
    /* Every variant gives the reference's labels (cuda_kmeans_variants). */
    const char *variant = setup->desc.variant;
    bool wsum = kd <= 512 && strcmp(variant, "atomic") != 0;
    bool screen = strcmp(variant, "exact") != 0;
    bool prefetch = !strcmp(variant, "prefetch");
    p->kernel = pick(d.d, setup->contiguity != 0, wsum, screen, prefetch);
    size_t copies = wsum ? THREADS / 32 : 1;
    size_t ds = (size_t)(d.d | 1);
    int r = d.window / 2;
    size_t halo = setup->contiguity ? (size_t)(TILE_H + 2 * r) * (32 + 2 * r) * sizeof(short) : 0;
    p->smem = ((size_t)d.k * dmax + d.k + copies * d.k * ds) * sizeof(float) + copies * d.k * sizeof(unsigned) + halo;
    int per_sm = 0;
    if (p->smem > 48 * 1024)
        CUDA_TRY(cudaFuncSetAttribute(p->kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)p->smem),
                 "sizing the kmeans kernel");
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, p->kernel, THREADS, p->smem),
             "sizing the kmeans kernel");
    if (per_sm < 1) {
        dk_msg_set(msg, "cuda kmeans: no block of the kmeans kernel fits on an SM (k %d, d %d)", d.k, d.d);
        return DK_ERR_BACKEND;
    }
    long long wanted = ((long long)d.n + THREADS - 1) / THREADS;
    long long resident = (long long)per_sm * dev->sm_count;
    p->blocks = (int)(wanted < resident ? wanted : resident);
    if (p->blocks < 1)
        p->blocks = 1;

    size_t B = (size_t)p->blocks;
    size_t lab = setup->contiguity ? align256(d.n * sizeof(int32_t)) : 0;
    size_t sizes[] = {lab, lab, align256(kd * sizeof(float)), align256(kd * sizeof(float)),
                      align256(B * kd * sizeof(float)), align256(B * d.k * sizeof(unsigned)),
                      align256(kd * sizeof(double)), align256(B * sizeof(double)),
                      align256(B * sizeof(unsigned long long)), align256(8 * sizeof(double)),
                      align256(kd * sizeof(double)), align256(kd * sizeof(double)),
                      align256(d.k * sizeof(unsigned long long))};
    const int nptr = (int)(sizeof sizes / sizeof sizes[0]);
    size_t total = 0;
    for (size_t s : sizes)
        total += s;
    void *scratch = NULL;
    CUDA_TRY(cudaMalloc(&scratch, total), "allocating the kmeans plan's scratch");
    p->scratch = scratch;
    char *at = (char *)p->scratch;
    void *ptr[nptr];
    for (int j = 0; j < nptr; j++) {
        ptr[j] = at;
        at += sizes[j];
    }
    Args &a = p->a;
    a.lab[0] = (int32_t *)ptr[0];
    a.lab[1] = (int32_t *)ptr[1];
    a.cent[0] = (float *)ptr[2];
    a.cent[1] = (float *)ptr[3];
    a.psum = (float *)ptr[4];
    a.pcount = (unsigned *)ptr[5];
    a.move2 = (double *)ptr[6];
    a.pobj = (double *)ptr[7];
    a.pvalid = (unsigned long long *)ptr[8];
    a.result = (double *)ptr[9];
    a.corr = (double *)ptr[10];
    a.corr_old = (double *)ptr[11];
    a.ccount = (unsigned long long *)ptr[12];
    a.n = (long long)d.n;
    a.sp = (long long)setup->stride_point;
    a.sf = (long long)setup->stride_feature;
    a.d = d.d;
    a.k = d.k;
    a.max_iters = d.max_iters;
    a.window = d.window;
    a.vec4 = setup->stride_feature == 1 && setup->stride_point % 4 == 0 && d.d % 4 == 0;
    a.rows = (long long)d.rows;
    a.cols = (long long)d.cols;
    a.lambda = (float)d.lambda;
    a.tol = d.tol;
    if (d.layout == DK_KMEANS_FEATURE_MAJOR && d.d == DK_KMEANS_TEXTURE_D && d.rows) {
        int tb = TEX_BLOCKS_PER_SM * dev->sm_count;
        size_t tsizes[] = {align256((size_t)tb * TEX_STATS * sizeof(double)), align256(16 * sizeof(double)),
                           align256((size_t)tb * 4 * d.k * sizeof(double)), align256(8 * sizeof(double))};
        void *tex = NULL;
        CUDA_TRY(cudaMalloc(&tex, tsizes[0] + tsizes[1] + tsizes[2] + tsizes[3]),
                 "allocating the kmeans texture scratch");
        p->tex_scratch = tex;
        char *t = (char *)p->tex_scratch;
        p->tex_part = (double *)t;
        p->tex_st = (double *)(t += tsizes[0]);
        p->tex_ipart = (double *)(t += tsizes[1]);
        p->tex_out = (double *)(t += tsizes[2]);
        p->tex_blocks = tb;
    }
    part_pick(d.d, d.k, &p->part_assign, &p->part_objective, &p->part_smem);
    if (p->part_smem > 48 * 1024)
        CUDA_TRY(cudaFuncSetAttribute(p->part_assign, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)p->part_smem),
                 "sizing the kmeans assignment kernel");
    int part_per_sm = 0;
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&part_per_sm, p->part_assign, THREADS, p->part_smem),
             "sizing the kmeans assignment kernel");
    long long part_tiles = ((long long)d.n + THREADS - 1) / THREADS;
    long long part_resident = (long long)(part_per_sm > 0 ? part_per_sm : 1) * dev->sm_count;
    p->part_blocks = (int)(part_tiles < part_resident ? part_tiles : part_resident);
    if (p->part_blocks < 1)
        p->part_blocks = 1;
    size_t pairs = (size_t)d.k * (d.d + 1) > 2 ? (size_t)d.k * (d.d + 1) : 2;
    void *pp = NULL;
    CUDA_TRY(cudaMalloc(&pp, pairs * p->part_blocks * sizeof(double)), "allocating the kmeans partial sums");
    p->part_partial = (double *)pp;
    return DK_OK;
}

dk_status plan_create(void *device, const dk_kmeans_setup *setup, void **out, dk_msg *msg)
{
    dk_cuda_device *dev = (dk_cuda_device *)device;
    dk_status st = dk_cuda_enter(dev, msg);
    if (st != DK_OK)
        return st;
    Plan *p = (Plan *)calloc(1, sizeof *p);
    if (!p) {
        dk_msg_set(msg, "cuda kmeans: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    p->dev = dev;
    p->s = *setup;
    st = !setup->contiguity && setup->desc.k > DK_KMEANS_MAX_K ? plan_fill_big(p, setup, msg)
                                                                : plan_fill(p, setup, msg);
    if (st != DK_OK) {
        plan_destroy(p);
        return st;
    }
    *out = p;
    return DK_OK;
}

/* The device entered, for a plan that makes texture features. */
dk_status texture_enter(const Plan *p, dk_msg *msg)
{
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st == DK_OK && !p->tex_blocks) {
        dk_msg_set(msg, "cuda kmeans: this plan makes no texture features");
        st = DK_ERR_INVALID_ARGUMENT;
    }
    return st;
}

dk_status texture_planes(void *handle, const void *value, void *planes, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = texture_enter(p, msg);
    if (st != DK_OK)
        return st;
    k_tex_planes<<<p->tex_blocks, THREADS, 0, p->dev->stream>>>(
        (const float *)((const dk_cuda_buffer *)value)->ptr, (float *)((dk_cuda_buffer *)planes)->ptr,
        (long long)p->s.desc.n);
    CUDA_TRY(cudaGetLastError(), "launching the texture planes kernel");
    return DK_OK;
}

dk_status texture_features(void *handle, const void *value, const void *smoothed, double min_value, void *points,
                           void *mask, void *init, dk_kmeans_texture_stats *stats, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = texture_enter(p, msg);
    if (st != DK_OK)
        return st;
    const long long n = (long long)p->s.desc.n;
    const int k = p->s.desc.k, B = p->tex_blocks;
    cudaStream_t sm = p->dev->stream;
    float *pts = (float *)((dk_cuda_buffer *)points)->ptr;
    uint8_t *msk = (uint8_t *)((dk_cuda_buffer *)mask)->ptr;
    /* min_value compared in float, as z is; the float nearest at or above */
    float minf = (float)min_value;
    if ((double)minf < min_value)
        minf = nextafterf(minf, INFINITY);
    k_tex_features<<<B, THREADS, 0, sm>>>((const float *)((const dk_cuda_buffer *)value)->ptr,
                                          (const float *)((const dk_cuda_buffer *)smoothed)->ptr, minf, pts, msk,
                                          p->tex_part, n);
    k_tex_stats<<<1, 32, 0, sm>>>(p->tex_part, B, k, p->tex_st);
    k_tex_standardize<<<B, THREADS, (size_t)4 * k * sizeof(double), sm>>>(pts, msk, p->tex_st, p->tex_ipart, k, n);
    k_tex_init<<<1, THREADS, (size_t)4 * k * sizeof(double), sm>>>(p->tex_ipart, B, k, p->tex_st, (float *)((dk_cuda_buffer *)init)->ptr,
                                      p->tex_out);
    double r[7];
    CUDA_TRY(cudaGetLastError(), "computing the texture features");
    CUDA_TRY(cudaMemcpyAsync(r, p->tex_out, sizeof r, cudaMemcpyDeviceToHost, sm), "computing the texture features");
    CUDA_TRY(cudaStreamSynchronize(sm), "computing the texture features");
    stats->valid = (size_t)r[0];
    for (int j = 0; j < 3; j++) {
        stats->mean[j] = r[1 + j];
        stats->sd[j] = r[4 + j];
    }
    return DK_OK;
}

dk_status big_execute(Plan *p, const void *points, const void *mask, const void *init, void *labels,
                      void *centroids, dk_kmeans_result *res, dk_msg *msg);

dk_status execute(void *handle, const void *points, const void *mask, const void *init, void *labels,
                  void *centroids, dk_kmeans_result *res, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    if (p->big)
        return big_execute(p, points, mask, init, labels, centroids, res, msg);
    Args a = p->a;
    a.x = (const float *)((const dk_cuda_buffer *)points)->ptr;
    a.vec4 = a.vec4 && (uintptr_t)a.x % 16 == 0;
    a.mask = mask ? (const uint8_t *)((const dk_cuda_buffer *)mask)->ptr : nullptr;
    a.init = (const float *)((const dk_cuda_buffer *)init)->ptr;
    a.labels = (int32_t *)((dk_cuda_buffer *)labels)->ptr;
    a.out_centroids = (float *)((dk_cuda_buffer *)centroids)->ptr;
    void *args[] = {&a};
    CUDA_TRY(cudaLaunchCooperativeKernel((const void *)p->kernel, dim3(p->blocks), dim3(THREADS), args, p->smem,
                                         p->dev->stream),
             "launching the cooperative kmeans kernel");
    double r[6];
    CUDA_TRY(cudaMemcpyAsync(r, a.result, sizeof r, cudaMemcpyDeviceToHost, p->dev->stream),
             "running the kmeans kernel");
    CUDA_TRY(cudaStreamSynchronize(p->dev->stream), "running the kmeans kernel");
    res->iterations = (int)r[0];
    res->objective = r[1];
    res->last_move = r[2];
    res->valid = (size_t)r[3];
    res->assign_seconds = r[4] * 1e-9;
    res->update_seconds = r[5] * 1e-9;
    return DK_OK;
}

PartArgs part_args(const Plan *p, const void *points, const void *mask, const void *centroids)
{
    const dk_kmeans_desc &d = p->s.desc;
    PartArgs a;
    memset(&a, 0, sizeof a);
    a.x = points ? (const float *)((const dk_cuda_buffer *)points)->ptr : nullptr;
    a.mask = mask ? (const uint8_t *)((const dk_cuda_buffer *)mask)->ptr : nullptr;
    a.C = centroids ? (const float *)((const dk_cuda_buffer *)centroids)->ptr : nullptr;
    a.partial = p->part_partial;
    a.n = (long long)d.n;
    a.sp = (long long)p->s.stride_point;
    a.sf = (long long)p->s.stride_feature;
    a.rows = (long long)d.rows;
    a.cols = (long long)d.cols;
    a.d = d.d;
    a.k = d.k;
    a.window = d.window;
    a.blocks = p->part_blocks;
    a.lambda = (float)d.lambda;
    return a;
}

/* Iterations with the k_big_* launches; the host looks at the stop flag
 * every BIG_BATCH iterations when tol > 0. */
const int BIG_BATCH = 8;

dk_status big_execute(Plan *p, const void *points, const void *mask, const void *init, void *labels,
                      void *centroids, dk_kmeans_result *res, dk_msg *msg)
{
    const dk_kmeans_desc &d = p->s.desc;
    cudaStream_t sm = p->dev->stream;
    const size_t kd = (size_t)d.k * d.d;
    PartArgs a = part_args(p, points, mask, NULL);
    a.C = p->big_C;
    a.labels = (int32_t *)((dk_cuda_buffer *)labels)->ptr;
    a.state = p->big_state;
    CUDA_TRY(cudaMemcpyAsync(p->big_C, ((const dk_cuda_buffer *)init)->ptr, kd * sizeof(float),
                             cudaMemcpyDeviceToDevice, sm),
             "copying the initial centroids");
    CUDA_TRY(cudaMemsetAsync(p->big_state, 0, 4 * sizeof(double), sm), "clearing the kmeans state");
    CUDA_TRY(cudaMemsetAsync(p->big_sums_out, 0, (kd + d.k + 1) * sizeof(double), sm), "clearing the kmeans sums");
    double state[4] = {0, 0, 0, 0};
    for (int t = 0; t < d.max_iters; t++) {
        p->big_assign<<<p->part_blocks, THREADS, p->big_assign_smem, sm>>>(a, p->big_rows);
        p->big_sums<<<p->part_blocks, THREADS, p->big_sums_smem, sm>>>(a);
        k_part_sums<<<d.k * (d.d + 1), 32, 0, sm>>>(p->part_partial, p->part_blocks, d.k, d.d, p->big_sums_out,
                                                    p->big_state, 0);
        k_part_update<<<1, THREADS, 0, sm>>>(p->big_sums_out, p->big_C, p->big_state, d.k, d.d, d.tol);
        CUDA_TRY(cudaGetLastError(), "queueing a large-k kmeans iteration");
        if (d.tol > 0 && (t + 1) % BIG_BATCH == 0 && t + 1 < d.max_iters) {
            CUDA_TRY(cudaMemcpyAsync(state, p->big_state, sizeof state, cudaMemcpyDeviceToHost, sm),
                     "running the kmeans iterations");
            CUDA_TRY(cudaStreamSynchronize(sm), "running the kmeans iterations");
            if (state[1] != 0.0)
                break;
        }
    }
    p->part_objective<<<p->part_blocks, THREADS, 0, sm>>>(a);
    k_part_sums<<<2, 32, 0, sm>>>(p->part_partial, p->part_blocks, 1, 1, p->big_obj, p->big_obj, 1);
    CUDA_TRY(cudaGetLastError(), "queueing the kmeans objective");
    CUDA_TRY(cudaMemcpyAsync(((dk_cuda_buffer *)centroids)->ptr, p->big_C, kd * sizeof(float),
                             cudaMemcpyDeviceToDevice, sm),
             "copying the centroids");
    double obj[2];
    CUDA_TRY(cudaMemcpyAsync(state, p->big_state, sizeof state, cudaMemcpyDeviceToHost, sm),
             "running the kmeans iterations");
    CUDA_TRY(cudaMemcpyAsync(obj, p->big_obj, sizeof obj, cudaMemcpyDeviceToHost, sm), "the kmeans objective");
    CUDA_TRY(cudaStreamSynchronize(sm), "running the kmeans iterations");
    res->iterations = (int)state[0];
    res->objective = obj[0];
    res->last_move = state[2];
    res->valid = (size_t)obj[1];
    res->assign_seconds = 0;
    res->update_seconds = 0;
    return DK_OK;
}

dk_status seed_distance_weighted(void *handle, const void *points, const void *mask, const void *weights,
                                 const void *centre, const void *near, void *out, void *blocks, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    PartArgs a;
    memset(&a, 0, sizeof a);
    a.x = (const float *)((const dk_cuda_buffer *)points)->ptr;
    a.mask = mask ? (const uint8_t *)((const dk_cuda_buffer *)mask)->ptr : nullptr;
    a.w = weights ? (const float *)((const dk_cuda_buffer *)weights)->ptr : nullptr;
    a.n = (long long)p->s.desc.n;
    a.sp = (long long)p->s.stride_point;
    a.sf = (long long)p->s.stride_feature;
    a.d = p->s.desc.d;
    const long long nb = (a.n + DK_KMEANS_SEED_BLOCK - 1) / DK_KMEANS_SEED_BLOCK;
    k_seed_distance<<<(unsigned)nb, THREADS, 0, p->dev->stream>>>(
        a, centre ? (const float *)((const dk_cuda_buffer *)centre)->ptr : nullptr,
        near ? (const float *)((const dk_cuda_buffer *)near)->ptr : nullptr,
        (float *)((dk_cuda_buffer *)out)->ptr, (double *)((dk_cuda_buffer *)blocks)->ptr);
    CUDA_TRY(cudaGetLastError(), "queueing the seeding's distance pass");
    CUDA_TRY(cudaStreamSynchronize(p->dev->stream), "running the seeding's distance pass");
    return DK_OK;
}

dk_status seed_distance(void *handle, const void *points, const void *mask, const void *centre, const void *near,
                        void *out, void *blocks, dk_msg *msg)
{
    return seed_distance_weighted(handle, points, mask, nullptr, centre, near, out, blocks, msg);
}

dk_status seed_read(void *handle, const void *points, const void *dist, size_t first, size_t count, float *values,
                    size_t point, float *x, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    cudaStream_t sm = p->dev->stream;
    if (count)
        CUDA_TRY(cudaMemcpyAsync(values, (const float *)((const dk_cuda_buffer *)dist)->ptr + first,
                                 count * sizeof(float), cudaMemcpyDeviceToHost, sm),
                 "reading the seeding's distances");
    const float *X = (const float *)((const dk_cuda_buffer *)points)->ptr;
    for (int f = 0; x && f < p->s.desc.d; f++)
        CUDA_TRY(cudaMemcpyAsync(x + f, X + point * p->s.stride_point + (size_t)f * p->s.stride_feature,
                                 sizeof(float), cudaMemcpyDeviceToHost, sm),
                 "reading a seeding's point");
    CUDA_TRY(cudaStreamSynchronize(sm), "reading the seeding's distances");
    return DK_OK;
}

/* A whole plan with k > DK_KMEANS_MAX_K (sample weights): the k_big_*
 * launches, then the blocks' partials into sums; they do nothing once
 * state's stop is set. */
dk_status big_assign_weighted(Plan *p, const void *points, const void *mask, const void *weights,
                              const void *centroids, void *labels, void *sums, const void *state)
{
    const dk_kmeans_desc &d = p->s.desc;
    cudaStream_t sm = p->dev->stream;
    PartArgs a = part_args(p, points, mask, centroids);
    a.w = weights ? (const float *)((const dk_cuda_buffer *)weights)->ptr : nullptr;
    a.labels = (int32_t *)((dk_cuda_buffer *)labels)->ptr;
    a.state = (const double *)((const dk_cuda_buffer *)state)->ptr;
    p->big_assign<<<p->part_blocks, THREADS, p->big_assign_smem, sm>>>(a, p->big_rows);
    p->big_sums<<<p->part_blocks, THREADS, p->big_sums_smem, sm>>>(a);
    k_part_sums<<<d.k * (d.d + 1), 32, 0, sm>>>(p->part_partial, p->part_blocks, d.k, d.d,
                                                (double *)((dk_cuda_buffer *)sums)->ptr, a.state, 0);
    return DK_OK;
}

dk_status assign_weighted(void *handle, const void *points, const void *mask, const void *weights,
                          const void *centroids, const void *prev, void *next, void *labels, void *sums,
                          const void *state, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    if (p->big) {
        if (!points || !labels) {
            dk_msg_set(msg, "cuda kmeans: the distributed phases take k <= %d", DK_KMEANS_MAX_K);
            return DK_ERR_NOT_IMPLEMENTED;
        }
        big_assign_weighted(p, points, mask, weights, centroids, labels, sums, state);
        CUDA_TRY(cudaGetLastError(), "queueing the large-k kmeans assignment");
        return DK_OK;
    }
    PartArgs a = part_args(p, points, mask, centroids);
    a.w = weights ? (const float *)((const dk_cuda_buffer *)weights)->ptr : nullptr;
    a.prev = prev ? (const int32_t *)((const dk_cuda_buffer *)prev)->ptr : nullptr;
    a.next = next ? (int32_t *)((dk_cuda_buffer *)next)->ptr : nullptr;
    a.labels = labels ? (int32_t *)((dk_cuda_buffer *)labels)->ptr : nullptr;
    a.state = (const double *)((const dk_cuda_buffer *)state)->ptr;
    cudaStream_t sm = p->dev->stream;
    p->part_assign<<<p->part_blocks, THREADS, p->part_smem, sm>>>(a);
    k_part_sums<<<p->s.desc.k * (p->s.desc.d + 1), 32, 0, sm>>>(p->part_partial, p->part_blocks, p->s.desc.k,
                                                                p->s.desc.d, (double *)((dk_cuda_buffer *)sums)->ptr,
                                                                a.state, 0);
    CUDA_TRY(cudaGetLastError(), "queueing the kmeans assignment");
    return DK_OK;
}

dk_status assign_partial(void *handle, const void *points, const void *mask, const void *centroids, const void *prev,
                         void *next, void *labels, void *sums, const void *state, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    if (p->big) {
        dk_msg_set(msg, "cuda kmeans: the distributed phases take k <= %d", DK_KMEANS_MAX_K);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    return assign_weighted(handle, points, mask, nullptr, centroids, prev, next, labels, sums, state, msg);
}

dk_status update(void *handle, const void *sums, void *centroids, void *state, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    k_part_update<<<1, THREADS, 0, p->dev->stream>>>((const double *)((const dk_cuda_buffer *)sums)->ptr,
                                                    (float *)((dk_cuda_buffer *)centroids)->ptr,
                                                    (double *)((dk_cuda_buffer *)state)->ptr, p->s.desc.k,
                                                    p->s.desc.d, p->s.desc.tol);
    CUDA_TRY(cudaGetLastError(), "queueing the kmeans update");
    return DK_OK;
}

dk_status objective_weighted(void *handle, const void *points, const void *labels, const void *weights,
                             const void *centroids, void *out, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    PartArgs a = part_args(p, points, NULL, centroids);
    a.w = weights ? (const float *)((const dk_cuda_buffer *)weights)->ptr : nullptr;
    a.labels = labels ? (int32_t *)((dk_cuda_buffer *)labels)->ptr : nullptr;
    double *o = (double *)((dk_cuda_buffer *)out)->ptr;
    cudaStream_t sm = p->dev->stream;
    p->part_objective<<<p->part_blocks, THREADS, 0, sm>>>(a);
    /* the two columns summed as one cluster of one feature and its count */
    k_part_sums<<<2, 32, 0, sm>>>(p->part_partial, p->part_blocks, 1, 1, o, o, 1);
    CUDA_TRY(cudaGetLastError(), "queueing the kmeans objective");
    return DK_OK;
}

dk_status objective(void *handle, const void *points, const void *labels, const void *centroids, void *out,
                    dk_msg *msg)
{
    return objective_weighted(handle, points, labels, nullptr, centroids, out, msg);
}

} // namespace

/* "prefetch": screened labels (screened_labels), the next step's points
 * loaded ahead, per-warp copies of the sums; "screen": the same without the
 * loads ahead; "exact": the exact distance to every centroid; "atomic": the
 * block's one copy of the sums with shared atomics (also taken by the others
 * when per-warp copies would be large, k * d > 512). */
static const char *const cuda_kmeans_variants[] = {"prefetch", "screen", "exact", "atomic", NULL};

extern "C" const dk_kmeans_ops dk_cuda_kmeans_ops = {
    .variants = cuda_kmeans_variants,
    .plan_create = plan_create,
    .execute = execute,
    .plan_destroy = plan_destroy,
    .texture_planes = texture_planes,
    .texture_features = texture_features,
    .assign_partial = assign_partial,
    .update = update,
    .objective = objective,
    .seed_distance = seed_distance,
    .seed_read = seed_read,
    .assign_weighted = assign_weighted,
    .objective_weighted = objective_weighted,
    .seed_distance_weighted = seed_distance_weighted,
};
