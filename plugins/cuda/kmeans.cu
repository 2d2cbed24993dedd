/* dakit cuda plugin: kmeans, the whole Lloyd loop in one cooperative kernel.
 *
 * A persistent grid (as many blocks as fit on the device at once) runs every
 * iteration; grid-wide syncs separate the phases, and the convergence test is
 * made on the device, so the host launches once and reads the result once.
 *   A  each thread takes points in a grid-stride loop (whole warps step
 *      together), holds a point's features in registers (two 16-byte loads
 *      for point-major d = 8, and so on), finds its least-cost centroid
 *      (centroids in shared memory, rows padded to DMAX so they are read 16
 *      bytes at a time; contiguity reads the previous labels of the w x w
 *      window) and writes the label. The lanes of a warp with the same label
 *      then sum their points by shuffles (__match_any_sync groups them), and
 *      one lane per distinct label adds into the block's partial sums in
 *      shared memory: no two lanes of a warp hit the same address, so the
 *      float shared atomics (a compare-and-swap loop in hardware) rarely
 *      retry. No global atomic at all. The block then writes its partial
 *      sums and counts to global memory.
 *   B  block b reduces cluster c = b, b + gridDim, ...: the partials of every
 *      block, in double, by a tree reduction (warp shuffles), and writes the
 *      new centroid (the old one when the cluster is empty) and its move.
 *   C  every block reads all moves and stops when the largest is below tol.
 * After the loop: the objective (double) and, with contiguity, the final
 * labels copied out of the ping-pong buffers.
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
    double *move2;          /* k */
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

/* Squared distance of x to the centroid row cc (DMAX floats, 16-byte
 * aligned). Both are zero past d, so the extra terms add exact zeros and the
 * sum equals the definition's over f < d; no per-feature test, and the row
 * comes in 16-byte shared loads (one wavefront each: every lane reads the
 * same row). */
template <int DMAX>
__device__ __forceinline__ float distance2(const float *x, const float *cc)
{
    float dist = 0.0f;
#pragma unroll
    for (int q = 0; q < DMAX / 4; q++) {
        const float4 c4 = *(const float4 *)(cc + 4 * q);
        float diff = x[4 * q] - c4.x;
        dist += diff * diff;
        diff = x[4 * q + 1] - c4.y;
        dist += diff * diff;
        diff = x[4 * q + 2] - c4.z;
        dist += diff * diff;
        diff = x[4 * q + 3] - c4.w;
        dist += diff * diff;
    }
    return dist;
}

/* Plain nearest centroids of two points, each centroid row read once for
 * both. */
template <int DMAX>
__device__ __forceinline__ void best_label2(const Args &a, const float *x0, const float *x1, const float *Cs,
                                            int &l0, int &l1)
{
    float b0 = 0.0f, b1 = 0.0f;
    l0 = l1 = 0;
    for (int c = 0; c < a.k; c++) {
        const float *cc = Cs + c * DMAX;
        float d0 = 0.0f, d1 = 0.0f;
#pragma unroll
        for (int q = 0; q < DMAX / 4; q++) {
            const float4 c4 = *(const float4 *)(cc + 4 * q);
            float e0 = x0[4 * q] - c4.x, e1 = x1[4 * q] - c4.x;
            d0 += e0 * e0;
            d1 += e1 * e1;
            e0 = x0[4 * q + 1] - c4.y, e1 = x1[4 * q + 1] - c4.y;
            d0 += e0 * e0;
            d1 += e1 * e1;
            e0 = x0[4 * q + 2] - c4.z, e1 = x1[4 * q + 2] - c4.z;
            d0 += e0 * e0;
            d1 += e1 * e1;
            e0 = x0[4 * q + 3] - c4.w, e1 = x1[4 * q + 3] - c4.w;
            d0 += e0 * e0;
            d1 += e1 * e1;
        }
        if (c == 0 || d0 < b0) {
            l0 = c;
            b0 = d0;
        }
        if (c == 0 || d1 < b1) {
            l1 = c;
            b1 = d1;
        }
    }
}

template <int DMAX, bool CONTIG>
__device__ __forceinline__ int best_label(const Args &a, long long i, const float *x, const float *Cs,
                                          const int32_t *prev)
{
    int m = 0;
    long long row = 0, col = 0;
    const int r = a.window / 2;
    if (CONTIG) {
        row = i / a.cols;
        col = i % a.cols;
        for (long long y = row - r; y <= row + r; y++) {
            if (y < 0 || y >= a.rows)
                continue;
            for (long long c = col - r; c <= col + r; c++)
                if (c >= 0 && c < a.cols && !(y == row && c == col) && __ldcg(prev + y * a.cols + c) >= 0)
                    m++;
        }
    }
    const float inv_d = 1.0f / (float)a.d;
    int best = 0;
    float best_cost = 0.0f;
    for (int c = 0; c < a.k; c++) {
        const float dist = distance2<DMAX>(x, Cs + c * DMAX);
        float cost = dist;
        if (CONTIG) {
            int same = 0;
            if (m)
                for (long long y = row - r; y <= row + r; y++) {
                    if (y < 0 || y >= a.rows)
                        continue;
                    for (long long cx = col - r; cx <= col + r; cx++)
                        if (cx >= 0 && cx < a.cols && !(y == row && cx == col) &&
                            __ldcg(prev + y * a.cols + cx) == c)
                            same++;
                }
            cost = a.lambda * (dist * inv_d) + (1.0f - a.lambda) * (m ? (float)(m - same) / (float)m : 0.0f);
        }
        if (c == 0 || cost < best_cost) {
            best = c;
            best_cost = cost;
        }
    }
    return best;
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
 * otherwise the block's one copy takes shared atomics. Every lane calls it. */
template <int DMAX, bool WSUM>
__device__ __forceinline__ void accumulate(int l, float *x, int d, float *sums, unsigned *counts)
{
    const int lane = threadIdx.x & 31;
    unsigned peers = __match_any_sync(0xffffffffu, l);
    sum_peers<DMAX>(peers, x, d);
    if (l >= 0 && lane == __ffs(peers) - 1) {
#pragma unroll
        for (int f = 0; f < DMAX; f++)
            if (f < d) {
                if (WSUM)
                    sums[l * d + f] += x[f];
                else
                    atomicAdd(&sums[l * d + f], x[f]);
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
 * arithmetic is best_label's. */
template <int DMAX>
__device__ __forceinline__ int best_label_tile(const Args &a, const float *x, const float *Cs, const short *halo,
                                               int hw, int hy, int hx)
{
    const int r = a.window / 2;
    int m = 0;
    for (int y = -r; y <= r; y++)
        for (int c = -r; c <= r; c++)
            m += (y || c) && halo[(hy + y) * hw + hx + c] >= 0;
    const float inv_d = 1.0f / (float)a.d;
    int best = 0;
    float best_cost = 0.0f;
    for (int c = 0; c < a.k; c++) {
        const float dist = distance2<DMAX>(x, Cs + c * DMAX);
        int same = 0;
        if (m)
            for (int y = -r; y <= r; y++)
                for (int cx = -r; cx <= r; cx++)
                    same += (y || cx) && halo[(hy + y) * hw + hx + cx] == c;
        float cost = a.lambda * (dist * inv_d) + (1.0f - a.lambda) * (m ? (float)(m - same) / (float)m : 0.0f);
        if (c == 0 || cost < best_cost) {
            best = c;
            best_cost = cost;
        }
    }
    return best;
}

const int TILE_H = THREADS / 32; /* contiguity tiles: one warp per row of 32 pixels */

/* PPT points per thread in flight on the plain path (1 or 2); WSUM per-warp
 * partial sums without atomics (see accumulate). */
template <int DMAX, bool CONTIG, bool WSUM, int PPT>
__global__ void __launch_bounds__(THREADS, DMAX <= 8 ? 3 : 1) k_lloyd(Args a)
{
    cg::grid_group grid = cg::this_grid();
    extern __shared__ __align__(16) unsigned char smem[];
    const int kd = a.k * a.d;
    const int kdpad = a.k * DMAX;
    const int copies = WSUM ? THREADS / 32 : 1;
    float *Cs = (float *)smem;
    float *sums = Cs + kdpad;
    unsigned *counts = (unsigned *)(sums + copies * kd);
    short *halo = (short *)(counts + copies * a.k);
    const int warp = threadIdx.x / 32;
    float *my_sums = WSUM ? sums + warp * kd : sums;
    unsigned *my_counts = WSUM ? counts + warp * a.k : counts;
    __shared__ double scratch[THREADS / 32];
    __shared__ double csum[DK_KMEANS_MAX_D + 1];
    __shared__ int stop;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const bool timer = blockIdx.x == 0 && threadIdx.x == 0;
    unsigned long long assign_ns = 0, update_ns = 0;

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
            float x[DMAX];
            load_point<DMAX>(a, i, x);
            a.lab[0][i] = best_label<DMAX, false>(a, i, x, Cs, nullptr);
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
        /* A: assignment and block partial sums */
        for (int j = threadIdx.x; j < kdpad; j += blockDim.x)
            Cs[j] = j % DMAX < a.d ? __ldcg(Cprev + j / DMAX * a.d + j % DMAX) : 0.0f;
        for (int j = threadIdx.x; j < copies * kd; j += blockDim.x)
            sums[j] = 0.0f;
        for (int j = threadIdx.x; j < copies * a.k; j += blockDim.x)
            counts[j] = 0;
        __syncthreads();
        const int lane = threadIdx.x & 31;
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
                accumulate<DMAX, WSUM>(l, x, a.d, my_sums, my_counts);
            }
        } else if (PPT == 2) {
            /* two points per thread, both loads issued before either is used */
            for (long long base = first - lane; base < a.n; base += 2 * stride) {
                const long long i0 = base + lane, i1 = base + stride + lane;
                float x0[DMAX], x1[DMAX];
#pragma unroll
                for (int f = 0; f < DMAX; f++)
                    x0[f] = x1[f] = 0.0f;
                if (i0 < a.n)
                    load_point<DMAX>(a, i0, x0);
                if (i1 < a.n)
                    load_point<DMAX>(a, i1, x1);
                const bool v0 = i0 < a.n && (!a.mask || a.mask[i0]);
                const bool v1 = i1 < a.n && (!a.mask || a.mask[i1]);
                int l0, l1;
                best_label2<DMAX>(a, x0, x1, Cs, l0, l1);
                l0 = v0 ? l0 : -1;
                l1 = v1 ? l1 : -1;
                if (!v0)
#pragma unroll
                    for (int f = 0; f < DMAX; f++)
                        x0[f] = 0.0f;
                if (!v1)
#pragma unroll
                    for (int f = 0; f < DMAX; f++)
                        x1[f] = 0.0f;
                if (i0 < a.n)
                    cur[i0] = l0;
                if (i1 < a.n)
                    cur[i1] = l1;
                accumulate<DMAX, WSUM>(l0, x0, a.d, my_sums, my_counts);
                accumulate<DMAX, WSUM>(l1, x1, a.d, my_sums, my_counts);
            }
        } else {
            /* whole warps step together (stride and first - lane are
             * multiples of 32), so every lane takes part in the shuffles */
            for (long long base = first - lane; base < a.n; base += stride) {
                const long long i = base + lane;
                int l = -1;
                float x[DMAX];
#pragma unroll
                for (int f = 0; f < DMAX; f++)
                    x[f] = 0.0f;
                if (i < a.n) {
                    if (!a.mask || a.mask[i]) {
                        load_point<DMAX>(a, i, x);
                        l = best_label<DMAX, false>(a, i, x, Cs, nullptr);
                    }
                    cur[i] = l;
                }
                accumulate<DMAX, WSUM>(l, x, a.d, my_sums, my_counts);
            }
        }
        __syncthreads();
        /* the warps' copies in a fixed order */
        for (int j = threadIdx.x; j < kd; j += blockDim.x) {
            float t = 0.0f;
            for (int w = 0; w < copies; w++)
                t += sums[w * kd + j];
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

        /* B: reduce the partials cluster by cluster */
        for (int c = blockIdx.x; c < a.k; c += gridDim.x) {
            double cnt = 0;
            for (int b = threadIdx.x; b < (int)gridDim.x; b += blockDim.x)
                cnt += (double)__ldcg(a.pcount + (size_t)b * a.k + c);
            cnt = block_sum(cnt, scratch);
            if (threadIdx.x == 0)
                csum[a.d] = cnt;
            for (int f = 0; f < a.d; f++) {
                double s = 0;
                for (int b = threadIdx.x; b < (int)gridDim.x; b += blockDim.x)
                    s += (double)__ldcg(a.psum + (size_t)b * kd + c * a.d + f);
                s = block_sum(s, scratch);
                if (threadIdx.x == 0)
                    csum[f] = s;
            }
            if (threadIdx.x == 0) {
                double m2 = 0;
                for (int f = 0; f < a.d; f++) {
                    float old = __ldcg(Cprev + c * a.d + f);
                    float next = csum[a.d] > 0 ? (float)(csum[f] / csum[a.d]) : old;
                    double diff = (double)next - (double)old;
                    m2 += diff * diff;
                    Cnext[c * a.d + f] = next;
                }
                a.move2[c] = m2;
            }
            __syncthreads();
        }
        grid.sync();
        it++;
        /* C: the convergence test, the same in every block */
        if (threadIdx.x == 0) {
            double mx = 0;
            for (int c = 0; c < a.k; c++)
                mx = fmax(mx, __ldcg(a.move2 + c));
            move = sqrt(mx);
            stop = move < a.tol;
        }
        __syncthreads();
        if (timer) {
            unsigned long long t2 = globaltimer();
            assign_ns += t1 - t0;
            update_ns += t2 - t1;
        }
        if (stop)
            break;
    }

    /* the objective under the final centroids, and the final labels */
    const float *Cfin = a.cent[(it - 1) & 1];
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
        float dist = 0.0f;
#pragma unroll
        for (int f = 0; f < DMAX; f++)
            if (f < a.d) {
                float diff = x[f] - Cs[l * DMAX + f];
                dist += diff * diff;
            }
        obj += dist;
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

/* One thread: the partials in block order -> st = valid, mu[3], sd[3], lo,
 * width (standardized feature 0, the initial centroids' intervals). */
__global__ void k_tex_stats(const double *part, int blocks, int k, double *st)
{
    if (threadIdx.x || blockIdx.x)
        return;
    double t[TEX_STATS] = {0, 0, 0, 0, 0, 0, 0, INFINITY, -INFINITY};
    for (int b = 0; b < blocks; b++) {
        for (int j = 0; j < 7; j++)
            t[j] += part[(size_t)b * TEX_STATS + j];
        t[7] = fmin(t[7], part[(size_t)b * TEX_STATS + 7]);
        t[8] = fmax(t[8], part[(size_t)b * TEX_STATS + 8]);
    }
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

/* The initial centroids from the interval partials, in block order; the
 * statistics for the host go to out = valid, mu[3], sd[3]. */
__global__ void k_tex_init(const double *ipart, int blocks, int k, const double *st, float *init, double *out)
{
    __shared__ double all[4];
    if (threadIdx.x < 4) {
        double t = 0;
        for (int c = 0; c < k; c++)
            for (int b = 0; b < blocks; b++)
                t += ipart[(size_t)b * 4 * k + c * 4 + threadIdx.x];
        all[threadIdx.x] = t;
    }
    __syncthreads();
    const double lo = st[7], width = st[8];
    for (int j = threadIdx.x; j < 3 * k; j += blockDim.x) {
        int c = j / 3, f = j % 3;
        double s = 0, cnt = 0;
        for (int b = 0; b < blocks; b++) {
            s += ipart[(size_t)b * 4 * k + c * 4 + f];
            cnt += ipart[(size_t)b * 4 * k + c * 4 + 3];
        }
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

typedef void (*kernel_fn)(Args);

template <int DMAX>
kernel_fn pick_d(bool contig, bool wsum, int ppt)
{
    if (contig)
        return wsum ? k_lloyd<DMAX, true, true, 1> : k_lloyd<DMAX, true, false, 1>;
    if (ppt == 2 && DMAX <= 8)
        return wsum ? k_lloyd<DMAX, false, true, 2> : k_lloyd<DMAX, false, false, 2>;
    return wsum ? k_lloyd<DMAX, false, true, 1> : k_lloyd<DMAX, false, false, 1>;
}

kernel_fn pick(int d, bool contig, bool wsum, int ppt)
{
    if (d <= 4)
        return pick_d<4>(contig, wsum, ppt);
    if (d <= 8)
        return pick_d<8>(contig, wsum, ppt);
    if (d <= 16)
        return pick_d<16>(contig, wsum, ppt);
    return pick_d<32>(contig, wsum, ppt);
}

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
};

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
    free(p);
}

size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

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
    const dk_kmeans_desc &d = setup->desc;
    size_t kd = (size_t)d.k * d.d;
    int dmax = d.d <= 4 ? 4 : d.d <= 8 ? 8 : d.d <= 16 ? 16 : 32; /* as pick() */
    /* Variants for A/B timing (DAKIT_KMEANS_CUDA_VARIANT): "atomic1" the
     * block's one copy of the sums with shared atomics, one point per
     * thread; "warp1" per-warp copies without atomics; "warp2" (default)
     * per-warp copies and two points per thread in flight. Per-warp copies
     * only while they stay small (k * d <= 512). */
    const char *variant = getenv("DAKIT_KMEANS_CUDA_VARIANT");
    bool wsum = kd <= 512 && !(variant && !strcmp(variant, "atomic1"));
    int ppt = variant && (!strcmp(variant, "atomic1") || !strcmp(variant, "warp1")) ? 1 : 2;
    p->kernel = pick(d.d, setup->contiguity != 0, wsum, ppt);
    size_t copies = wsum ? THREADS / 32 : 1;
    int r = d.window / 2;
    size_t halo = setup->contiguity ? (size_t)(TILE_H + 2 * r) * (32 + 2 * r) * sizeof(short) : 0;
    p->smem = ((size_t)d.k * dmax + copies * kd) * sizeof(float) + copies * d.k * sizeof(unsigned) + halo;
    cudaError_t e = cudaSuccess;
    if (p->smem > 48 * 1024)
        e = cudaFuncSetAttribute(p->kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)p->smem);
    int per_sm = 0;
    if (e == cudaSuccess)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, p->kernel, THREADS, p->smem);
    if (e != cudaSuccess || per_sm < 1) {
        plan_destroy(p);
        if (e != cudaSuccess)
            return dk_cuda_fail(msg, e, "sizing the kmeans kernel");
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
                      align256(d.k * sizeof(double)), align256(B * sizeof(double)),
                      align256(B * sizeof(unsigned long long)), align256(8 * sizeof(double))};
    size_t total = 0;
    for (size_t s : sizes)
        total += s;
    e = cudaMalloc(&p->scratch, total);
    if (e != cudaSuccess) {
        p->scratch = NULL;
        plan_destroy(p);
        return dk_cuda_fail(msg, e, "allocating the kmeans plan's scratch");
    }
    char *at = (char *)p->scratch;
    void *ptr[10];
    for (int j = 0; j < 10; j++) {
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
        e = cudaMalloc(&p->tex_scratch, tsizes[0] + tsizes[1] + tsizes[2] + tsizes[3]);
        if (e != cudaSuccess) {
            p->tex_scratch = NULL;
            plan_destroy(p);
            return dk_cuda_fail(msg, e, "allocating the kmeans texture scratch");
        }
        char *t = (char *)p->tex_scratch;
        p->tex_part = (double *)t;
        p->tex_st = (double *)(t += tsizes[0]);
        p->tex_ipart = (double *)(t += tsizes[1]);
        p->tex_out = (double *)(t += tsizes[2]);
        p->tex_blocks = tb;
    }
    *out = p;
    return DK_OK;
}

dk_status texture_planes(void *handle, const void *value, void *planes, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    if (!p->tex_blocks) {
        dk_msg_set(msg, "cuda kmeans: this plan makes no texture features");
        return DK_ERR_INVALID_ARGUMENT;
    }
    k_tex_planes<<<p->tex_blocks, THREADS, 0, p->dev->stream>>>(
        (const float *)((const dk_cuda_buffer *)value)->ptr, (float *)((dk_cuda_buffer *)planes)->ptr,
        (long long)p->s.desc.n);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? DK_OK : dk_cuda_fail(msg, e, "launching the texture planes kernel");
}

dk_status texture_features(void *handle, const void *value, const void *smoothed, double min_value, void *points,
                           void *mask, void *init, dk_kmeans_texture_stats *stats, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    if (!p->tex_blocks) {
        dk_msg_set(msg, "cuda kmeans: this plan makes no texture features");
        return DK_ERR_INVALID_ARGUMENT;
    }
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
    k_tex_init<<<1, THREADS, 0, sm>>>(p->tex_ipart, B, k, p->tex_st, (float *)((dk_cuda_buffer *)init)->ptr,
                                      p->tex_out);
    cudaError_t e = cudaGetLastError();
    double r[7];
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(r, p->tex_out, sizeof r, cudaMemcpyDeviceToHost, sm);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(sm);
    if (e != cudaSuccess)
        return dk_cuda_fail(msg, e, "computing the texture features");
    stats->valid = (size_t)r[0];
    for (int j = 0; j < 3; j++) {
        stats->mean[j] = r[1 + j];
        stats->sd[j] = r[4 + j];
    }
    return DK_OK;
}

dk_status execute(void *handle, const void *points, const void *mask, const void *init, void *labels,
                  void *centroids, dk_kmeans_result *res, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    Args a = p->a;
    a.x = (const float *)((const dk_cuda_buffer *)points)->ptr;
    a.vec4 = a.vec4 && (uintptr_t)a.x % 16 == 0;
    a.mask = mask ? (const uint8_t *)((const dk_cuda_buffer *)mask)->ptr : nullptr;
    a.init = (const float *)((const dk_cuda_buffer *)init)->ptr;
    a.labels = (int32_t *)((dk_cuda_buffer *)labels)->ptr;
    a.out_centroids = (float *)((dk_cuda_buffer *)centroids)->ptr;
    void *args[] = {&a};
    cudaError_t e = cudaLaunchCooperativeKernel((const void *)p->kernel, dim3(p->blocks), dim3(THREADS), args,
                                                p->smem, p->dev->stream);
    if (e != cudaSuccess)
        return dk_cuda_fail(msg, e, "launching the cooperative kmeans kernel");
    double r[6];
    e = cudaMemcpyAsync(r, a.result, sizeof r, cudaMemcpyDeviceToHost, p->dev->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(p->dev->stream);
    if (e != cudaSuccess)
        return dk_cuda_fail(msg, e, "running the kmeans kernel");
    res->iterations = (int)r[0];
    res->objective = r[1];
    res->last_move = r[2];
    res->valid = (size_t)r[3];
    res->assign_seconds = r[4] * 1e-9;
    res->update_seconds = r[5] * 1e-9;
    return DK_OK;
}

} // namespace

extern "C" const dk_kmeans_ops dk_cuda_kmeans_ops = {plan_create, execute, plan_destroy, texture_planes,
                                                     texture_features};
