/* dakit cuda plugin, kmeans: what the kernel files share.
 *
 * One file per way of running the iterations, each with the kernels it
 * launches:
 *   lloyd.cu  k_lloyd, the whole Lloyd loop in one cooperative kernel: every
 *             plan with k <= DK_KMEANS_MAX_K, or contiguity; the variants
 *             (mma, prefetch, screen, exact, atomic) are its template flags;
 *             mma's assignment is mma.cuh's mma_assign, inlined there;
 *   big.cu    k_big_assign and k_big_sums, plain k-means with
 *             k > DK_KMEANS_MAX_K: four launches per iteration, the last two
 *             the phases' k_part_sums and k_part_update;
 *   part.cu   k_part_*, the phases of a distributed iteration (assign_partial,
 *             update, objective and their weighted forms);
 *   tex.cu    k_tex_*, the radar texture features and initial centroids;
 *   seed.cu   k_seed_distance, the seeding's distance pass.
 * plan.cu makes the plan (big.cu's for large k, else lloyd.cu's with the
 * texture and phase kernels' sizes), picks the variant's flags, and holds
 * the ops table. The helpers below are static so each file keeps its own
 * copy, as when they were one file. */
#ifndef DAKIT_CUDA_KMEANS_CUH
#define DAKIT_CUDA_KMEANS_CUH

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/kmeans.h>

#include "../cuda_internal.h"

namespace dk_cuda_kmeans {

const int THREADS = 256;

/* k_lloyd's arguments (lloyd.cu) */
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
    float *gap;             /* mma: n Hamerly bounds (see mma_assign) */
    double *tot[2];         /* mma: k * d cluster sums by iteration parity, moved on by the points that changed label */
    long long *tot_count[2]; /* mma: k cluster sizes, likewise */
    double *corr, *corr_old; /* k * d: the objective's correction (see k_lloyd's end) */
    unsigned long long *ccount; /* k: the last iteration's cluster sizes */
    int *tile_valid;        /* contiguity: valid pixels per tile (lloyd.cu), zeroed before the launch */
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

/* The phases' arguments (part.cu), also taken by the large-k kernels
 * (big.cu) and the seeding's (seed.cu). state (doubles): iterations, stop,
 * move, failed. */
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
    int vec4; /* point-major, d a multiple of 4, 16-byte aligned rows */
    float lambda;
};

typedef void (*kernel_fn)(Args);

typedef void (*part_fn)(PartArgs);

static __device__ double block_sum(double v, double *scratch)
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

static __device__ double block_max(double v, double *scratch)
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
static __device__ __forceinline__ float distance2(const float *x, const float *cc)
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

/* The contiguity cost as the reference rounds it: contig_term is its
 * neighbours' part, (1 - lambda) (m - same) / m, which k_lloyd tabulates. */
static __device__ __forceinline__ float contig_term(float lambda, int m, int same)
{
    return __fmul_rn(__fsub_rn(1.0f, lambda), m ? __fdiv_rn((float)(m - same), (float)m) : 0.0f);
}

static __device__ __forceinline__ float contig_cost_with(float lambda, float dist, float inv_d, float term)
{
    return __fadd_rn(__fmul_rn(lambda, __fmul_rn(dist, inv_d)), term);
}

static __device__ __forceinline__ float contig_cost(float lambda, float dist, float inv_d, int m, int same)
{
    return contig_cost_with(lambda, dist, inv_d, contig_term(lambda, m, same));
}

/* Plain nearest centroids of P points by the exact distances, each centroid
 * row read once for all of them; ties to the lowest index. */
template <int DMAX, int P>
static __device__ __forceinline__ void exact_labels(const float (*x)[DMAX], const float *Cs, int k, int *l)
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
static __device__ __forceinline__ void screened_labels(const float (*x)[DMAX], const float *Cs, const float *Ch, int k,
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

/* Sums v over the lanes of `peers` (the lanes holding the same key as this
 * one) by a tree of shuffles; the total ends in the lowest lane of peers.
 * Every lane of the warp must call it. */
template <int DMAX, typename T>
static __device__ __forceinline__ void sum_peers(unsigned peers, T *v, int d)
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
                T t = __shfl_sync(0xffffffffu, v[f], next < 0 ? lane : next);
                if (next >= 0)
                    v[f] += t;
            }
        /* lanes at odd rank have been added into the lane below them */
        unsigned done = __ballot_sync(0xffffffffu, rank & 1u);
        above &= ~done;
        rank >>= 1;
    }
}

/* Point i's d features into x (zeros past d): 16 bytes at a time where
 * vec4 says the rows allow it (point-major, d a multiple of 4, aligned). */
template <int DMAX>
static __device__ __forceinline__ void load_row(const float *X, long long sp, long long sf, int d, int vec4,
                                                long long i, float *x)
{
    if (DMAX % 4 == 0 && vec4) {
        const float4 *row = (const float4 *)(X + i * sp);
#pragma unroll
        for (int q = 0; q < DMAX / 4; q++) {
            const float4 v = 4 * q < d ? __ldg(row + q) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            x[4 * q] = v.x;
            x[4 * q + 1] = v.y;
            x[4 * q + 2] = v.z;
            x[4 * q + 3] = v.w;
        }
        return;
    }
#pragma unroll
    for (int f = 0; f < DMAX; f++)
        x[f] = f < d ? __ldg(X + i * sp + f * sf) : 0.0f;
}

template <int DMAX>
static __device__ __forceinline__ void part_point(const PartArgs &a, long long i, float *x)
{
    load_row<DMAX>(a.x, a.sp, a.sf, a.d, a.vec4, i, x);
}

/* Sums made on the float64 tensor cores (part.cu's add_mma, lloyd.cu's
 * mma_add) out of the warp: lane (g, q) holds clusters g + 8 h's
 * features 2q and 2q + 1 (D[2h], D[2h + 1]); its weight sum is added over
 * the four lanes of g first. put(c, f, v) for each c < k and f <= d (f == d
 * the weight sum), each by one lane. Every lane calls it. */
template <typename Put>
static __device__ __forceinline__ void mma_sums_out(const double (&D)[4], double (&cnt)[2], int k, int d, Put put)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        cnt[h] += __shfl_xor_sync(0xffffffffu, cnt[h], 1);
        cnt[h] += __shfl_xor_sync(0xffffffffu, cnt[h], 2);
        const int c = g + 8 * h;
        if (c < k) {
            if (2 * q < d)
                put(c, 2 * q, D[2 * h]);
            if (2 * q + 1 < d)
                put(c, 2 * q + 1, D[2 * h + 1]);
            if (q == 0)
                put(c, d, cnt[h]);
        }
    }
}

/* screened_labels' per-centroid terms: Ch[c] = -|c|^2 / 2 for the rows of
 * Cs, and the largest |c|^2 into *rmax_bits (as int bits: q >= 0 orders as
 * ints). The block's threads share the rows; the caller syncs after. */
template <int DMAX>
static __device__ __forceinline__ void screen_terms(const float *Cs, float *Ch, int k, int *rmax_bits)
{
    for (int c = threadIdx.x; c < k; c += blockDim.x) {
        float q = 0.0f;
#pragma unroll
        for (int f = 0; f < DMAX; f++)
            q = __fmaf_rn(Cs[c * DMAX + f], Cs[c * DMAX + f], q);
        Ch[c] = -0.5f * q;
        atomicMax(rmax_bits, __float_as_int(q));
    }
}

inline size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

struct Plan {
    dk_cuda_device *dev;
    dk_kmeans_setup s;
    kernel_fn kernel;
    int blocks;
    size_t smem;
    void *scratch; /* one allocation for everything below */
    Args a;
    int tex_blocks;     /* texture features: 0 when the plan cannot make them */
    double *tex_part, *tex_st, *tex_ipart;
    cudaEvent_t tex_stats_read; /* the statistics are in host_out */
    void *tex_scratch;
    /* the phases: kernels, grid, shared memory and the blocks' partials */
    part_fn part_assign, part_objective;
    size_t part_smem;
    int part_blocks;
    /* the plain phase where its warps' double sums fit (else NULL) */
    part_fn part_screen, part_screen_w; /* without and with sample weights */
    size_t part_screen_smem;
    int part_screen_blocks;
    double *part_partial; /* part_blocks * max(k (d + 1), 2) */
    /* k > DK_KMEANS_MAX_K (plain): the k_big_* launches, in part_blocks
     * blocks over part_partial */
    int big, big_rows;
    void (*big_assign)(PartArgs, int);
    part_fn big_sums;
    size_t big_assign_smem, big_sums_smem;
    double *big_sums_out, *big_state, *big_obj; /* k d + k + 1, 4, 2 doubles */
    float *big_C;
    /* labels into the caller's page-locked host memory (lloyd.cu): made
     * when first asked for */
    int32_t *label_stage, *minus_ones; /* n each, device */
    double *host_out; /* page-locked: the results the host reads (7 doubles) */
    cudaStream_t side;
    cudaEvent_t side_start, side_done;
};

/* lloyd.cu */
dk_status lloyd_plan(Plan *p, const dk_kmeans_setup *setup, bool wsum, bool screen, bool prefetch, bool mma,
                     dk_msg *msg);
dk_status lloyd_execute(Plan *p, const void *points, const void *mask, const void *init, void *labels,
                        void *centroids, dk_kmeans_result *res, dk_msg *msg);
/* big.cu */
dk_status big_plan(Plan *p, const dk_kmeans_setup *setup, dk_msg *msg);
dk_status big_execute(Plan *p, const void *points, const void *mask, const void *init, void *labels,
                      void *centroids, dk_kmeans_result *res, dk_msg *msg);
dk_status big_assign_weighted(Plan *p, const void *points, const void *mask, const void *weights,
                              const void *centroids, void *labels, void *sums, const void *state);
/* tex.cu */
dk_status tex_plan(Plan *p, dk_msg *msg);
dk_status texture_planes(void *handle, const void *value, void *planes, dk_msg *msg);
dk_status texture_features(void *handle, const void *value, const void *smoothed, double min_value, void *points,
                           void *mask, void *init, dk_kmeans_texture_stats *stats, dk_msg *msg);
/* part.cu */
dk_status part_plan(Plan *p, dk_msg *msg);
void part_pick(int d, int k, part_fn *assign, part_fn *objective, size_t *smem);
PartArgs part_args(const Plan *p, const void *points, const void *mask, const void *centroids);
void part_sums_launch(const Plan *p, int blocks, double *sums, const double *state);
void part_update_launch(const Plan *p, const double *sums, float *C, double *state);
void part_objective_launch(const Plan *p, const PartArgs &a, double *out);
dk_status assign_partial(void *handle, const void *points, const void *mask, const void *centroids, const void *prev,
                         void *next, void *labels, void *sums, const void *state, dk_msg *msg);
dk_status assign_weighted(void *handle, const void *points, const void *mask, const void *weights,
                          const void *centroids, const void *prev, void *next, void *labels, void *sums,
                          const void *state, dk_msg *msg);
dk_status update(void *handle, const void *sums, void *centroids, void *state, dk_msg *msg);
dk_status objective(void *handle, const void *points, const void *labels, const void *centroids, void *out,
                    dk_msg *msg);
dk_status objective_weighted(void *handle, const void *points, const void *labels, const void *weights,
                             const void *centroids, void *out, dk_msg *msg);
/* seed.cu */
dk_status seed_distance(void *handle, const void *points, const void *mask, const void *centre, const void *near,
                        void *out, void *blocks, dk_msg *msg);
dk_status seed_distance_weighted(void *handle, const void *points, const void *mask, const void *weights,
                                 const void *centre, const void *near, void *out, void *blocks, dk_msg *msg);
dk_status seed_read(void *handle, const void *points, const void *dist, size_t first, size_t count, float *values,
                    size_t point, float *x, dk_msg *msg);

} // namespace dk_cuda_kmeans

#endif
