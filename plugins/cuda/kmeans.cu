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
        const float *cc = Cs + c * DMAX;
        float dist = 0.0f;
#pragma unroll
        for (int f = 0; f < DMAX; f++)
            if (f < a.d) {
                float diff = x[f] - cc[f];
                dist += diff * diff;
            }
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

template <int DMAX, bool CONTIG>
__global__ void __launch_bounds__(THREADS, DMAX <= 8 ? 3 : 1) k_lloyd(Args a)
{
    cg::grid_group grid = cg::this_grid();
    extern __shared__ unsigned char smem[];
    const int kd = a.k * a.d;
    const int kdpad = a.k * DMAX;
    float *Cs = (float *)smem;
    float *sums = Cs + kdpad;
    unsigned *counts = (unsigned *)(sums + kd);
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
        for (int j = threadIdx.x; j < kd; j += blockDim.x)
            sums[j] = 0.0f;
        for (int j = threadIdx.x; j < a.k; j += blockDim.x)
            counts[j] = 0;
        __syncthreads();
        /* whole warps step together (stride and first - lane are multiples
         * of 32), so every lane takes part in the shuffles */
        const int lane = threadIdx.x & 31;
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
                    l = best_label<DMAX, CONTIG>(a, i, x, Cs, prev);
                }
                cur[i] = l;
            }
            unsigned peers = __match_any_sync(0xffffffffu, l);
            sum_peers<DMAX>(peers, x, a.d);
            if (l >= 0 && lane == __ffs(peers) - 1) {
#pragma unroll
                for (int f = 0; f < DMAX; f++)
                    if (f < a.d)
                        atomicAdd(&sums[l * a.d + f], x[f]);
                atomicAdd(&counts[l], (unsigned)__popc(peers));
            }
        }
        __syncthreads();
        for (int j = threadIdx.x; j < kd; j += blockDim.x)
            a.psum[(size_t)blockIdx.x * kd + j] = sums[j];
        for (int j = threadIdx.x; j < a.k; j += blockDim.x)
            a.pcount[(size_t)blockIdx.x * a.k + j] = counts[j];
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

typedef void (*kernel_fn)(Args);

kernel_fn pick(int d, bool contig)
{
    if (d <= 4)
        return contig ? k_lloyd<4, true> : k_lloyd<4, false>;
    if (d <= 8)
        return contig ? k_lloyd<8, true> : k_lloyd<8, false>;
    if (d <= 16)
        return contig ? k_lloyd<16, true> : k_lloyd<16, false>;
    return contig ? k_lloyd<32, true> : k_lloyd<32, false>;
}

struct Plan {
    dk_cuda_device *dev;
    dk_kmeans_setup s;
    kernel_fn kernel;
    int blocks;
    size_t smem;
    void *scratch; /* one allocation for everything below */
    Args a;
};

void plan_destroy(void *handle)
{
    Plan *p = (Plan *)handle;
    if (!p)
        return;
    if (p->scratch) {
        cudaSetDevice(p->dev->ordinal);
        cudaFree(p->scratch);
    }
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
    p->kernel = pick(d.d, setup->contiguity != 0);
    size_t kd = (size_t)d.k * d.d;
    int dmax = d.d <= 4 ? 4 : d.d <= 8 ? 8 : d.d <= 16 ? 16 : 32; /* as pick() */
    p->smem = ((size_t)d.k * dmax + kd) * sizeof(float) + (size_t)d.k * sizeof(unsigned);
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
    *out = p;
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

extern "C" const dk_kmeans_ops dk_cuda_kmeans_ops = {plan_create, execute, plan_destroy};
