/* dakit cuda plugin, kmeans: variant "mma"'s assignment, mma_assign, which
 * k_lloyd (lloyd.cu) calls for each iteration of plain k-means it applies
 * to (k <= 16, d <= 8, unmasked rows of 16-byte pieces) but the last: the
 * scores on the TF32 tensor cores, the sums on the float64 ones, and from
 * the second iteration Hamerly's bounds. Included by lloyd.cu alone, so that
 * the kernel keeps it inline. */
#ifndef DAKIT_CUDA_KMEANS_MMA_CUH
#define DAKIT_CUDA_KMEANS_MMA_CUH

#include "kmeans.cuh"

namespace {

using namespace dk_cuda_kmeans;

/* The tensor-core screen (variant "mma": plain k-means without a mask,
 * k <= 16, d <= 8, rows of 16-byte pieces). A warp scores 32 points a
 * batch, one a lane, copied into shared memory two batches ahead
 * (cp.async), and reads them as TF32 operands (ldmatrix); each lane takes
 * its point's |x|^2 from there as the other paths do. From the second
 * iteration only the points whose Hamerly bound fails are scored (see
 * mma_assign). B_c = x.c - |c|^2 / 2 for
 * every point and centroid is then one 32 x 8 by 8 x 16 product on the
 * tensor cores, each operand split as x = hi + lo (hi its top 11
 * significant bits, lo the rest, exactly) and taken as hi.lo + lo.hi +
 * hi.hi (three mma.m16n8k8 a tile; lo.lo is left out). Against the FMA
 * chain of screened_labels this moves each B by at most 60 u (|x|^2 +
 * rmax2), u = 2^-24: lo.lo and the truncation of lo to TF32, 3 u |x_f|
 * |c_f| a product, 24 u (|x|^2 + |c|^2) summed; the accumulation, at most
 * 9 additions an mma each off by 2 u of the magnitudes added, 36 u over the
 * three. So the best B must beat the second by screened_labels' eps plus
 * 256 u (|x|^2 + rmax2) (twice the 2 x 60 u of two B's), which keeps the
 * labels the reference's; near-ties take exact_labels. The scores go back
 * through shared memory, a point's 16 to its lane, and the points into the
 * sums on the float64 tensor cores (products exact, sums in float64). */
const int MMA_BUFS = 3;    /* point buffers: this batch's and the next two's */
const int MMA_CHUNK = 4;   /* steps whose bounds are tested together */
const int MMA_BUF = 32 * 8; /* floats a point buffer */
/* floats a warp stages: the point buffers, 32 x 16 scores, the bounds of
 * two chunks (a step's 32 last labels, then their 32 bounds), and the
 * chunk's list of points to score */
const int MMA_STAGE = MMA_BUFS * MMA_BUF + 32 * 16 + 2 * MMA_CHUNK * 64 + MMA_CHUNK * 32;

/* Where point p's feature f lies in the stage: rows of 8 floats, their
 * 16-byte halves swapped where (p >> 2) & 1, so that 8 rows' same half
 * fall in distinct banks (the stores and ldmatrix's reads). */
__device__ __forceinline__ int stage_point(int p, int f) { return 8 * p + (f ^ (((p >> 2) & 1) << 2)); }

/* Where point p's score of centroid c lies: rows of 16 floats after the
 * points, their 32-byte halves swapped where (p >> 1) & 1 (the pair stores
 * of four rows fall in distinct banks). */
__device__ __forceinline__ int stage_score(int p, int c) { return MMA_BUFS * MMA_BUF + 16 * p + (c ^ (((p >> 1) & 1) << 3)); }

/* Point i's row into buffer `pts` (lane p's row) by two 16-byte
 * asynchronous copies; zeros past n and past d. */
template <int DMAX>
__device__ __forceinline__ void mma_fetch(const Args &a, long long i, float *pts, int p)
{
    const bool valid = i < a.n;
    const float *row = a.x + (valid ? i : a.n - 1) * a.sp;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const unsigned to = (unsigned)__cvta_generic_to_shared(pts + stage_point(p, 4 * h));
        const int bytes = valid && (DMAX > 4 || h == 0) ? 16 : 0;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(row + 4 * h), "r"(bytes)
                     : "memory");
    }
}

/* Point i's last label and bound (cur, a.gap) into `slot` (lane p's), by
 * 4-byte asynchronous copies. */
__device__ __forceinline__ void mma_fetch_bound(const Args &a, const int32_t *cur, long long i, float *slot, int p)
{
    const bool valid = i < a.n;
    const long long at = valid ? i : a.n - 1;
    const unsigned to = (unsigned)__cvta_generic_to_shared(slot + p);
    const int bytes = valid ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(to), "l"(cur + at), "r"(bytes) : "memory");
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(to + 128), "l"(a.gap + at), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mma_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

struct MmaCentroids {
    unsigned hi[2][2], lo[2][2]; /* tile t (centroids 8t..8t+7): B[q][g], B[q+4][g] */
    float h[2][2];               /* tile t: -|c|^2 / 2 of centroids 8t + 2q and 8t + 2q + 1, -inf past k */
};

/* x = hi + lo: hi keeps the top 11 significant bits (what TF32 holds), lo
 * the bits cut off, exactly. */
__device__ __forceinline__ void tf32_split(unsigned x, unsigned &hi, unsigned &lo)
{
    hi = x & 0xffffe000u;
    lo = __float_as_uint(__fsub_rn(__uint_as_float(x), __uint_as_float(hi)));
}

/* Lane (g, q)'s operands of the centroids (Cs rows padded with zeros to
 * DMAX; Ch from screen_terms). */
template <int DMAX>
__device__ __forceinline__ MmaCentroids mma_centroids(const float *Cs, const float *Ch, int k, int g, int q)
{
    MmaCentroids m;
#pragma unroll
    for (int t = 0; t < 2; t++) {
        const int c = 8 * t + g;
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int f = q + 4 * j;
            tf32_split(__float_as_uint(c < k && f < DMAX ? Cs[c * DMAX + f] : 0.0f), m.hi[t][j], m.lo[t][j]);
            const int cj = 8 * t + 2 * q + j;
            m.h[t][j] = cj < k ? Ch[cj] : -INFINITY;
        }
    }
    return m;
}

/* The warp's 32 staged points' scores into the stage (every lane calls it). */
__device__ __forceinline__ void mma_scores(const float *pts, float *stage, const MmaCentroids &m)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
#pragma unroll 1
    for (int grp = 0; grp < 2; grp++) {
        /* ldmatrix: lanes 8j..8j+7 name the rows of matrix j, points
         * 16 grp + (j & 1) 8 + r, features 4 (j >> 1) to 4 (j >> 1) + 3 */
        const int p = 16 * grp + (lane & 7) + 8 * ((lane >> 3) & 1);
        const unsigned at = (unsigned)__cvta_generic_to_shared(pts + stage_point(p, 4 * (lane >> 4)));
        unsigned a[4], hi[4], lo[4];
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                     : "r"(at)
                     : "memory");
#pragma unroll
        for (int j = 0; j < 4; j++)
            tf32_split(a[j], hi[j], lo[j]);
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const float h[4] = {m.h[t][0], m.h[t][1], m.h[t][0], m.h[t][1]};
            float D[4];
            tf32mma(D, hi, m.lo[t], h);
            tf32mma(D, lo, m.hi[t], D);
            tf32mma(D, hi, m.hi[t], D);
            const int p0 = 16 * grp + g, c = 8 * t + 2 * q;
            *(float2 *)(stage + stage_score(p0, c)) = make_float2(D[0], D[1]);
            *(float2 *)(stage + stage_score(p0 + 8, c)) = make_float2(D[2], D[3]);
        }
    }
    __syncwarp();
}

/* The 32 staged points' moves into the warp's sums on the float64 tensor
 * cores, 4 at a time: D[c][f] += ([l_p = c] - [old_p = c]) x_p[f] (dmma:
 * lane (g, q) gives point 4s + q's rows g and g + 8 of A, its labels by
 * shuffles, and its feature g from the stage); old -1 adds the point
 * whole, old = l leaves it out exactly. Every lane calls it. */
template <bool MOVES>
__device__ __forceinline__ void mma_add(const float *pts, int l, int old, double (&D)[4])
{
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int s = 0; s < 8; s++) {
        const int p = 4 * s + q;
        const int lp = __shfl_sync(0xffffffffu, l, p), op = MOVES ? __shfl_sync(0xffffffffu, old, p) : -1;
        const double A[2] = {(lp == g ? 1.0 : 0.0) - (MOVES && op == g ? 1.0 : 0.0),
                             (lp == g + 8 ? 1.0 : 0.0) - (MOVES && op == g + 8 ? 1.0 : 0.0)};
        dmma(D, A, (double)pts[stage_point(p, g)]);
    }
}

/* sqrt(v) for v >= 0 within 2^-21 relative (MUFU's reciprocal root,
 * about 2 ulp): the bounds take their roots with a margin of 2^-20. */
__device__ __forceinline__ float root(float v) { return v > 0.0f ? v * rsqrtf(v) : 0.0f; }

/* A point's Hamerly bound from its best two scores b1 > b2: a lower bound
 * on its distance to the second-nearest centroid minus that to the nearest,
 * less keep_coef |x| (the point's part of the rounding that kept_bound must
 * beat, so that the point need not be read to test it). Each score and s2
 * is within eps / 2 of its exact value (see mma_assign), so the squared
 * distances are at most U2 and at least L2 (3 eps covers their rounding
 * and the roots'); -inf where the label came from the exact distances (a
 * near tie); NaN stays NaN: no bound holds then. */
__device__ __forceinline__ float mma_gap(float b1, float b2, float s2, float eps, float keep_coef, bool near)
{
    const float eps3 = 3.0f * eps;
    const float U2 = __fadd_rn(__fmaf_rn(-2.0f, b1, s2), eps3), L2 = __fsub_rn(__fmaf_rn(-2.0f, b2, s2), eps3);
    const float g = __fsub_rn(__fmul_rn(root(L2), 1.0f - 0x1p-20f), __fmul_rn(root(U2), 1.0f + 0x1p-20f));
    return near ? -INFINITY : __fsub_rn(g, __fmul_rn(keep_coef * (1.0f + 0x1p-20f), root(s2)) * (1.0f + 0x1p-20f));
}

/* What the last centroid update did to the bounds: Bounds.shift[c], how
 * far centroid c moved, rounded up; max, the largest (NaN if any is) */
struct Bounds {
    const float *shift;
    float max;
    float tol; /* keep_coef max |c|, rounded up */
};

/* A point's bound (mma_gap) moved on by the last update: the nearest
 * centroid came at most shift[old] farther, every other at most max
 * nearer, the subtractions' rounding taken off as well. Its label stands
 * when the result beats bd.tol, as the cpu plugin's kept_lanes decides. */
__device__ __forceinline__ float kept_bound(float gap, int old, const Bounds &bd)
{
    const float moved = old >= 0 ? bd.shift[old] : NAN;
    const float slack = 0x1p-21f * (fabsf(gap) + moved + bd.max);
    return __fsub_rn(__fsub_rn(__fsub_rn(gap, moved), bd.max), slack);
}

/* One iteration's labels and sums of plain k-means on the tensor cores.
 * A warp takes its points (32 consecutive ones a step, in a grid-stride
 * loop) MMA_CHUNK steps at a time: it lists the chunk's points to score
 * and scores them 32 at a time, their rows copied into shared memory two
 * batches ahead (cp.async) and read as TF32 operands (ldmatrix). It leaves
 * its sums and counts in its own copy (my_sums, my_counts, zeroed); stage,
 * the warp's MMA_STAGE floats.
 *
 * With `moves` (every iteration after the first) cur holds the last
 * iteration's labels and a.gap their Hamerly bounds (mma_gap), which come
 * a chunk ahead: a point whose bound still holds (kept_bound) keeps its
 * label, is not listed and its row is not read, and the sums take only
 * the points that changed label, as [new] - [old] (the update adds them to
 * the last sums). */
template <int DMAX, bool MOVES>
__device__ __forceinline__ void mma_assign(const Args &a, int32_t *cur, const float *Cs, const float *Ch, float rmax2,
                                           float eps_coef, float *my_sums, unsigned *my_counts, int ds, float *stage,
                                           const Bounds &bd)
{
    const int lane = threadIdx.x & 31;
    const MmaCentroids m = mma_centroids<DMAX>(Cs, Ch, a.k, lane >> 2, lane & 3);
    double D[4] = {0.0, 0.0, 0.0, 0.0};
    const long long step = (long long)gridDim.x * THREADS;
    const long long first = (long long)blockIdx.x * THREADS + (threadIdx.x & ~31); /* the warp's first point */
    const long long steps = first < a.n ? (a.n - 1 - first) / step + 1 : 0;
    /* the first iteration scores every point: one chunk of all the steps, unlisted */
    const int chunks = MOVES ? (int)((steps + MMA_CHUNK - 1) / MMA_CHUNK) : steps > 0;
    const float keep_coef = 4.0f * (float)(a.d + 3) * 0x1p-24f;
    float *bounds = stage + MMA_BUFS * MMA_BUF + 32 * 16; /* two chunks' */
    int *list = (int *)(bounds + 2 * MMA_CHUNK * 64);     /* t * 32 + lane of the chunk's points to score */
    auto point = [&](int c, int e) { return first + ((long long)c * MMA_CHUNK + (e >> 5)) * step + (e & 31); };
    auto fetch_bounds = [&](int c) {
        if (MOVES && c < chunks)
            for (int t = 0; t < MMA_CHUNK; t++)
                mma_fetch_bound(a, cur, point(c, 32 * t + lane), bounds + 64 * (MMA_CHUNK * (c & 1) + t), lane);
        mma_commit();
    };
    fetch_bounds(0);
    for (int c = 0; c < chunks; c++) {
        fetch_bounds(c + 1);
        asm volatile("cp.async.wait_group 1;\n" ::: "memory");
        __syncwarp();
        const float *cb = bounds + 64 * MMA_CHUNK * (c & 1);
        int listed = MOVES ? 0 : (int)steps * 32;
#pragma unroll
        for (int t = 0; t < (MOVES ? MMA_CHUNK : 0); t++) {
            const long long i = point(c, 32 * t + lane);
            bool score = i < a.n;
            if (MOVES && score) {
                const float kept = kept_bound(cb[64 * t + 32 + lane], __float_as_int(cb[64 * t + lane]), bd);
                if (kept > bd.tol) {
                    score = false;
                    a.gap[i] = kept;
                }
            }
            const unsigned votes = __ballot_sync(0xffffffffu, score);
            if (score)
                list[listed + __popc(votes & ((1u << lane) - 1u))] = 32 * t + lane;
            listed += __popc(votes);
        }
        __syncwarp();
        const int batches = (listed + 31) / 32;
        /* batch j's rows into buffer j % MMA_BUFS, a group each (empty past the last) */
        auto fetch_rows = [&](int j) {
            if (j < batches) {
                const int e = 32 * j + lane;
                mma_fetch<DMAX>(a, !MOVES ? point(0, e) : e < listed ? point(c, list[e]) : a.n, stage + MMA_BUF * (j % MMA_BUFS),
                                lane);
            }
            mma_commit();
        };
#pragma unroll
        for (int j = 0; j < MMA_BUFS - 1; j++)
            fetch_rows(j);
        for (int j = 0; j < batches; j++) {
            fetch_rows(j + MMA_BUFS - 1);
            asm volatile("cp.async.wait_group %0;\n" ::"n"(MMA_BUFS - 1) : "memory");
            __syncwarp();
            const float *pts = stage + MMA_BUF * (j % MMA_BUFS);
            const int e = 32 * j + lane;
            const int entry = !MOVES ? e : e < listed ? list[e] : 0;
            const long long i = point(c, entry);
            const bool valid = MOVES ? e < listed : i < a.n;
            const int old = MOVES && valid ? __float_as_int(cb[64 * (entry >> 5) + (entry & 31)]) : -1;
            float s2 = 0.0f;
            {
                const float4 u = *(const float4 *)(pts + stage_point(lane, 0)), w = *(const float4 *)(pts + stage_point(lane, 4));
                const float x[8] = {u.x, u.y, u.z, u.w, w.x, w.y, w.z, w.w};
#pragma unroll
                for (int f = 0; f < DMAX; f++)
                    s2 = __fmaf_rn(x[f], x[f], s2);
            }
            mma_scores(pts, stage, m);
            float b1 = -INFINITY, b2 = -INFINITY;
            int l = 0;
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const float4 v = *(const float4 *)(stage + stage_score(lane, 4 * q));
                const float B[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    l = B[r] > b1 ? 4 * q + r : l;
                    b2 = fminf(b1, fmaxf(b2, B[r]));
                    b1 = fmaxf(b1, B[r]);
                }
            }
            const float eps = __fmaf_rn(eps_coef, s2 + rmax2, 1e-36f);
            const bool near = valid && !(b1 - b2 > eps);
            if (__any_sync(0xffffffffu, near) && near) {
                float xe[1][DMAX];
#pragma unroll
                for (int f = 0; f < DMAX; f++)
                    xe[0][f] = pts[stage_point(lane, f)];
                exact_labels<DMAX, 1>(xe, Cs, a.k, &l);
            }
            if (!valid)
                l = -1;
            const bool changed = valid && l != old;
            if (valid) {
                a.gap[i] = mma_gap(b1, b2, s2, eps, keep_coef, near);
                if (changed)
                    cur[i] = l;
            }
            if (changed) {
                atomicAdd(my_counts + l, 1u);
                if (MOVES && old >= 0)
                    atomicAdd(my_counts + old, ~0u); /* minus one: the counts are read as signed */
            }
            if (!MOVES || __any_sync(0xffffffffu, changed))
                mma_add<MOVES>(pts, changed ? l : -1, changed ? old : -1, D);
            __syncwarp(); /* the buffer and the scores are read before they are written again */
        }
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    double none[2] = {0.0, 0.0};
    mma_sums_out(D, none, a.k, a.d, [&](int c, int f, double v) {
        if (f < a.d)
            my_sums[c * ds + f] = (float)v;
    });
}

} // namespace

#endif
