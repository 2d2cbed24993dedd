/* kmeans on the cpu backend: the definition of dakit/kmeans.h with OpenMP.
 * Each thread assigns a static slice of the points and sums them into its own
 * double partial sums (the CPU form of per-block partial sums: no shared
 * counter is written by two threads); the partials are then reduced by
 * cluster in parallel. Labels update synchronously (previous labels in their
 * own buffer), so the result does not depend on the thread count beyond the
 * order of the double sums.
 *
 * Plain k-means (no contiguity) on x86-64 with AVX2 computes each point's
 * distances to 8 centroids per vector: the centroids sit transposed in a small
 * buffer (feature f of centroids c..c+7 contiguous), and each lane sums
 * (x_f - c_f)^2 over f in the same order as the reference, with separate
 * multiply and add, so every distance is bit-identical to the reference's and
 * the labels equal it exactly (the expanded |x|^2 - 2 x.c + |c|^2 form would
 * round differently and flip near-ties; and FMA contraction is off in this
 * file, see below). Variant "screen" (the default) first screens plain
 * k-means' labels by x.c - |c|^2/2, 8 points a vector, and takes those exact
 * distances only near ties (screened_block), where d <= 12 and k <= 128;
 * "simd" takes them for every point; "scalar" forces the scalar loop. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KM_AVX2 1
#endif

#include <dakit/kmeans.h>
#include <dakit/plugin.h>

/* Each float operation of a distance or cost rounds on its own, as the
 * definition writes it: no contraction of a multiply and an add into an FMA
 * (GCC's gnu11 default contracts wherever the target has FMA, e.g. aarch64
 * or -march=native; clang's within an expression). The backends' labels
 * equal the reference's because they round the same way. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* Points a screened block labels at once (one AVX2 vector of them), and
 * the plans it pays for: beyond these a block's features no longer stay in
 * registers, or near ties grow common, and the exact vector path is as
 * fast (docs/kmeans.md). */
#define KM_BLOCK 8
#define KM_SCREEN_MAX_D 12
#define KM_SCREEN_MAX_K 128

typedef struct kmeans_plan {
    dk_kmeans_setup s;
    int threads;
    double *partial;  /* threads * k * (d + 1): sums, then the count */
    int32_t *prev;    /* contiguity: the previous labels */
    float *C;         /* k * d current centroids */
    int vector;       /* use the AVX2 assignment */
    int screen;       /* plain labels screened (AVX2 and FMA, variant "screen") */
    int kv;           /* k in vectors of 8 (AVX2) */
    float *CT;        /* d * 8 kv: centroids transposed, padded with +inf */
    float *H;         /* screen: -|c|^2 / 2 per centroid */
    float rmax2;      /* screen: the largest |c|^2 (NaN if any is) */
    float rmax;       /* screen: sqrt(rmax2), rounded up */
    /* screen: Hamerly's bounds. gap[i]: a lower bound on point i's distance
     * to its second-nearest centroid minus that to its nearest, less what
     * the centroids moved since it was computed; while it beats the
     * rounding margin the label stands and the distances are not taken */
    float *gap;
    float *shift;     /* how far each centroid moved in the last update, rounded up */
    float shift_max;
    int bounds;       /* gap holds the bounds of every screened block */
} kmeans_plan;

static double now(void)
{
#ifdef _OPENMP
    return omp_get_wtime();
#else
    return 0.0;
#endif
}

static void plan_destroy(void *handle)
{
    kmeans_plan *p = handle;
    if (!p)
        return;
    free(p->partial);
    free(p->prev);
    free(p->C);
    free(p->CT);
    free(p->H);
    free(p->gap);
    free(p->shift);
    free(p);
}

static dk_status plan_create(void *device, const dk_kmeans_setup *setup, void **out, dk_msg *msg)
{
    (void)device;
    kmeans_plan *p = calloc(1, sizeof *p);
    if (!p) {
        dk_msg_set(msg, "cpu kmeans: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    p->s = *setup;
#ifdef _OPENMP
    p->threads = omp_get_max_threads();
#else
    p->threads = 1;
#endif
    const dk_kmeans_desc *d = &setup->desc;
    p->partial = malloc((size_t)p->threads * d->k * (d->d + 1) * sizeof *p->partial);
    p->C = malloc((size_t)d->k * d->d * sizeof *p->C);
    if (setup->contiguity)
        p->prev = malloc(d->n * sizeof *p->prev);
#ifdef KM_AVX2
    p->vector = __builtin_cpu_supports("avx2") && strcmp(setup->desc.variant, "scalar") != 0;
    p->screen = p->vector && __builtin_cpu_supports("fma") && !strcmp(setup->desc.variant, "screen") &&
                d->d <= KM_SCREEN_MAX_D && d->k <= KM_SCREEN_MAX_K;
#endif
    p->kv = (d->k + 7) / 8;
    if (p->vector)
        p->CT = aligned_alloc(32, (size_t)d->d * p->kv * 8 * sizeof *p->CT);
    if (p->screen) {
        p->H = malloc((size_t)d->k * sizeof *p->H);
        if (!setup->contiguity) { /* the bounds: plain k-means only */
            p->gap = malloc(d->n * sizeof *p->gap);
            p->shift = malloc((size_t)d->k * sizeof *p->shift);
        }
    }
    if (!p->partial || !p->C || (setup->contiguity && !p->prev) || (p->vector && !p->CT) ||
        (p->screen && (!p->H || (!setup->contiguity && (!p->gap || !p->shift))))) {
        plan_destroy(p);
        dk_msg_set(msg, "cpu kmeans: out of host memory for a plan of %zu points", d->n);
        return DK_ERR_OUT_OF_MEMORY;
    }
    *out = p;
    return DK_OK;
}

/* Label of point i: the least cost, ties to the lowest index. */
static inline int best_label(const kmeans_plan *p, const float *X, const int32_t *prev, size_t i,
                             const float *C)
{
    const dk_kmeans_desc *d = &p->s.desc;
    float x[DK_KMEANS_MAX_D];
    for (int f = 0; f < d->d; f++)
        x[f] = X[i * p->s.stride_point + (size_t)f * p->s.stride_feature];
    int same[DK_KMEANS_MAX_K];
    int m = 0;
    if (prev) {
        memset(same, 0, sizeof(int) * (size_t)d->k);
        const long r = d->window / 2, row = (long)(i / d->cols), col = (long)(i % d->cols);
        for (long y = row - r; y <= row + r; y++) {
            if (y < 0 || y >= (long)d->rows)
                continue;
            for (long c = col - r; c <= col + r; c++) {
                if (c < 0 || c >= (long)d->cols || (y == row && c == col))
                    continue;
                int32_t l = prev[(size_t)y * d->cols + (size_t)c];
                if (l >= 0) {
                    m++;
                    same[l]++;
                }
            }
        }
    }
    const float lambda = (float)d->lambda, inv_d = 1.0f / (float)d->d;
    int best = 0;
    float best_cost = 0.0f;
    for (int c = 0; c < d->k; c++) {
        const float *cc = C + (size_t)c * d->d;
        float dist = 0.0f;
        for (int f = 0; f < d->d; f++) {
            float diff = x[f] - cc[f];
            dist += diff * diff;
        }
        float cost = dist;
        if (prev)
            cost = lambda * (dist * inv_d) + (1.0f - lambda) * (m ? (float)(m - same[c]) / (float)m : 0.0f);
        if (c == 0 || cost < best_cost) {
            best = c;
            best_cost = cost;
        }
    }
    return best;
}

#ifdef KM_AVX2
/* Centroid vectors of 8 that one pass of the assignment holds (k > that:
 * the centroids are taken in chunks of this many vectors). */
#define KM_CHUNK_V (DK_KMEANS_MAX_K / 8)

/* Distances of the P points xs (P 1 or 2: two points share each centroid
 * load and give two independent chains) to the centroid vectors g .. g + G - 1
 * (P and G constant after inlining, so the accumulators stay in registers),
 * stored to dist[point] from vector g - g0 on. */
__attribute__((target("avx2"), always_inline)) static inline void
distances_group(const float *const *xs, int P, int d, const float *CT, int kv, int g0, int g, int G,
                float (*dist)[DK_KMEANS_MAX_K])
{
    __m256 acc[2][4];
    for (int q = 0; q < P; q++)
        for (int j = 0; j < G; j++)
            acc[q][j] = _mm256_setzero_ps();
    for (int f = 0; f < d; f++) {
        const float *row = CT + ((size_t)f * kv + g) * 8;
        for (int q = 0; q < P; q++) {
            const __m256 xf = _mm256_set1_ps(xs[q][f]);
            for (int j = 0; j < G; j++) {
                __m256 diff = _mm256_sub_ps(xf, _mm256_load_ps(row + 8 * j));
                acc[q][j] = _mm256_add_ps(acc[q][j], _mm256_mul_ps(diff, diff));
            }
        }
    }
    for (int q = 0; q < P; q++)
        for (int j = 0; j < G; j++)
            _mm256_store_ps(dist[q] + 8 * (g - g0 + j), acc[q][j]);
}

/* Distances to the centroid vectors g0 .. g0 + gv - 1 (gv <= KM_CHUNK_V). */
__attribute__((target("avx2"), always_inline)) static inline void
distances(const float *const *xs, int P, int d, const float *CT, int kv, int g0, int gv,
          float (*dist)[DK_KMEANS_MAX_K])
{
    int g = g0;
    const int end = g0 + gv;
    for (; g + 4 <= end; g += 4)
        distances_group(xs, P, d, CT, kv, g0, g, 4, dist);
    switch (end - g) {
    case 3: distances_group(xs, P, d, CT, kv, g0, g, 3, dist); break;
    case 2: distances_group(xs, P, d, CT, kv, g0, g, 2, dist); break;
    case 1: distances_group(xs, P, d, CT, kv, g0, g, 1, dist); break;
    }
}

/* The index of the least of the kv vectors of distances, ties to the lowest
 * index, as best_label's strict < scan picks it. Padding lanes are +inf, so
 * they never come before a real centroid. */
__attribute__((target("avx2"))) static inline int first_min(const float *dist, int kv)
{
    __m256 m = _mm256_load_ps(dist);
    for (int j = 1; j < kv; j++)
        m = _mm256_min_ps(m, _mm256_load_ps(dist + 8 * j));
    m = _mm256_min_ps(m, _mm256_permute2f128_ps(m, m, 1));
    m = _mm256_min_ps(m, _mm256_shuffle_ps(m, m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm256_min_ps(m, _mm256_shuffle_ps(m, m, _MM_SHUFFLE(2, 3, 0, 1)));
    /* the first lane equal to the minimum, 64 lanes per word without branches */
    for (int w = 0; w < kv; w += 8) {
        uint64_t bits = 0;
        for (int j = w; j < kv && j < w + 8; j++) {
            unsigned eq = (unsigned)_mm256_movemask_ps(
                _mm256_cmp_ps(_mm256_load_ps(dist + 8 * j), m, _CMP_EQ_OQ));
            bits |= (uint64_t)eq << (8 * (j - w));
        }
        if (bits)
            return 8 * w + __builtin_ctzll(bits);
    }
    return 0; /* not reached: the minimum is one of the lanes */
}

/* Labels of the P (1 or 2) points xs without contiguity: chunk by chunk,
 * a later chunk's minimum replacing the best only when strictly less. */
__attribute__((target("avx2"))) static void best_labels_avx2(const float *const *xs, int P, int d,
                                                             const float *CT, int kv, int *out)
{
    float dist[2][DK_KMEANS_MAX_K] __attribute__((aligned(32)));
    float best[2] = {INFINITY, INFINITY};
    for (int g0 = 0; g0 < kv; g0 += KM_CHUNK_V) {
        const int gv = kv - g0 < KM_CHUNK_V ? kv - g0 : KM_CHUNK_V;
        if (P == 2)
            distances(xs, 2, d, CT, kv, g0, gv, dist);
        else
            distances(xs, 1, d, CT, kv, g0, gv, dist);
        for (int q = 0; q < P; q++) {
            const int j = first_min(dist[q], gv);
            if (g0 == 0 || dist[q][j] < best[q]) {
                best[q] = dist[q][j];
                out[q] = 8 * g0 + j;
            }
        }
    }
}

/* ---- variant "screen": plain labels, 8 points a vector ----
 * The nearest centroid maximizes B_c = x.c - |c|^2 / 2: one FMA a feature
 * from H_c = -|c|^2 / 2, with a block's 8 points in the lanes, so that each
 * point's best and second-best B are kept by lane-wise max and min. Where
 * the best beats the second by more than eps = 12 (d + 2) 2^-24 (|x|^2 +
 * max |c|^2) it is the strict minimum of the exact distances, the
 * reference's label (the bound of plugins/cuda/kmeans/kmeans.cuh's
 * screened_labels); elsewhere (near-ties, inf or NaN) the point is labelled
 * by the exact distances. */

/* H and rmax2 for the centroids C (k x d). */
__attribute__((target("avx2,fma"))) static void screen_terms(kmeans_plan *p, const float *C)
{
    const int k = p->s.desc.k, d = p->s.desc.d;
    float rmax2 = 0.0f;
    for (int c = 0; c < k; c++) {
        float q = 0.0f;
        for (int f = 0; f < d; f++)
            q = fmaf(C[(size_t)c * d + f], C[(size_t)c * d + f], q);
        p->H[c] = -0.5f * q;
        rmax2 = q > rmax2 || q != q ? q : rmax2; /* a NaN stays */
    }
    p->rmax2 = rmax2;
    p->rmax = sqrtf(rmax2) * (1.0f + 0x1p-20f);
}

/* One centroid's B for the lanes, and the running best two and best label. */
#define KM_TOP2(B, c)                                                                                      \
    do {                                                                                                   \
        const __m256 gt_ = _mm256_cmp_ps(B, b1, _CMP_GT_OQ);                                               \
        i1 = _mm256_blendv_ps(i1, _mm256_castsi256_ps(_mm256_set1_epi32(c)), gt_);                        \
        b2 = _mm256_max_ps(b2, _mm256_min_ps(b1, B));                                                      \
        b1 = _mm256_max_ps(b1, B);                                                                         \
    } while (0)

/* The lanes' best centroids into *label; returns the lanes whose best is
 * not certain (bit q: lane q). D is a constant where inlined for d <= 8,
 * so xt stays in registers; two centroids a step give two chains of FMAs. */
__attribute__((target("avx2,fma"), always_inline)) static inline unsigned
screen_lanes(const __m256 *xt, const __m256 s2, const int D, const float *C, const float *H, int k, float rmax2,
             __m256i *label, __m256 *gap)
{
    __m256 b1 = _mm256_set1_ps(-INFINITY), b2 = b1;
    __m256 i1 = _mm256_setzero_ps(); /* the label's bits */
    int c = 0;
    for (; c + 1 < k; c += 2) {
        const float *c0 = C + (size_t)c * D, *c1 = c0 + D;
        __m256 B0 = _mm256_broadcast_ss(H + c), B1 = _mm256_broadcast_ss(H + c + 1);
#pragma GCC unroll 8
        for (int f = 0; f < D; f++) {
            B0 = _mm256_fmadd_ps(xt[f], _mm256_broadcast_ss(c0 + f), B0);
            B1 = _mm256_fmadd_ps(xt[f], _mm256_broadcast_ss(c1 + f), B1);
        }
        KM_TOP2(B0, c);
        KM_TOP2(B1, c + 1);
    }
    if (c < k) {
        const float *c0 = C + (size_t)c * D;
        __m256 B0 = _mm256_broadcast_ss(H + c);
#pragma GCC unroll 8
        for (int f = 0; f < D; f++)
            B0 = _mm256_fmadd_ps(xt[f], _mm256_broadcast_ss(c0 + f), B0);
        KM_TOP2(B0, c);
    }
    const __m256 eps = _mm256_fmadd_ps(_mm256_set1_ps(12.0f * (float)(D + 2) * 0x1p-24f),
                                       _mm256_add_ps(s2, _mm256_set1_ps(rmax2)), _mm256_set1_ps(1e-37f));
    *label = _mm256_castps_si256(i1);
    const unsigned near = ~(unsigned)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_sub_ps(b1, b2), eps, _CMP_GT_OQ)) & 0xffu;
    if (!gap)
        return near;
    /* each B and s2 is within eps / 2 of its exact value, so the squared
     * distances to the nearest and to any other centroid are at most U2
     * and at least L2 (3 eps covers the rounding of U2, L2 and the roots);
     * gap: the difference of the roots, rounded down */
    const __m256 eps3 = _mm256_mul_ps(eps, _mm256_set1_ps(3.0f)), two = _mm256_set1_ps(2.0f);
    const __m256 U2 = _mm256_add_ps(_mm256_fnmadd_ps(two, b1, s2), eps3);
    const __m256 L2 = _mm256_sub_ps(_mm256_fnmadd_ps(two, b2, s2), eps3);
    const __m256 zero = _mm256_setzero_ps();
    *gap = _mm256_sub_ps(_mm256_mul_ps(_mm256_sqrt_ps(_mm256_max_ps(L2, zero)), _mm256_set1_ps(1.0f - 0x1p-20f)),
                         _mm256_mul_ps(_mm256_sqrt_ps(_mm256_max_ps(U2, zero)), _mm256_set1_ps(1.0f + 0x1p-20f)));
    return near;
}
#undef KM_TOP2

/* Rows r[0..7] (8 floats each) to columns: r[j] becomes feature j of the 8 points. */
__attribute__((target("avx2"), always_inline)) static inline void transpose8(__m256 *r)
{
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* The 8 points from i, feature f in xt[f]. */
__attribute__((target("avx2"), always_inline)) static inline void load_block(const kmeans_plan *p, const float *X,
                                                                            size_t i, const int D, __m256 *xt)
{
    const size_t sp = p->s.stride_point, sf = p->s.stride_feature;
    if (sp == 1) {
#pragma GCC unroll 8
        for (int f = 0; f < D; f++)
            xt[f] = _mm256_loadu_ps(X + (size_t)f * sf + i);
    } else if (sf == 1) {
        for (int f0 = 0; f0 < D; f0 += 8) {
            const int w = D - f0 < 8 ? D - f0 : 8;
            const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(w), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            __m256 r[8];
            if (w == 8) { /* masked loads only where needed: they stream memory slower */
#pragma GCC unroll 8
                for (int q = 0; q < 8; q++)
                    r[q] = _mm256_loadu_ps(X + (i + q) * sp + f0);
            } else {
#pragma GCC unroll 8
                for (int q = 0; q < 8; q++)
                    r[q] = _mm256_maskload_ps(X + (i + q) * sp + f0, keep);
            }
            transpose8(r);
#pragma GCC unroll 8
            for (int j = 0; j < w; j++)
                xt[f0 + j] = r[j];
        }
    } else {
        for (int f = 0; f < D; f++) {
            float v[8] __attribute__((aligned(32)));
            for (int q = 0; q < 8; q++)
                v[q] = X[(i + q) * sp + (size_t)f * sf];
            xt[f] = _mm256_load_ps(v);
        }
    }
}

/* The lanes whose label `before` (the last iteration's) still stands by
 * the bounds in gap, moved on by the last centroid update: the nearest
 * centroid came at most shift[before] farther from the point, every other
 * at most shift_max nearer. The new gap must beat the reference's rounding
 * of the squared distances, below (d + 3) 2^-24 times their sum for each;
 * 4 (d + 3) 2^-24 (|x| + max |c|) covers it. */
__attribute__((target("avx2,fma"), always_inline)) static inline unsigned
kept_lanes(const kmeans_plan *p, const __m256 s2, const int D, const int32_t *before, float *gap)
{
    const __m256i lab = _mm256_loadu_si256((const __m256i *)before);
    const __m256i valid = _mm256_cmpgt_epi32(lab, _mm256_set1_epi32(-1));
    const __m256 moved = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), p->shift, _mm256_max_epi32(lab, _mm256_setzero_si256()),
                                                  _mm256_castsi256_ps(valid), 4);
    const __m256 g0 = _mm256_loadu_ps(gap), shift_max = _mm256_set1_ps(p->shift_max);
    /* the two subtractions' rounding, taken off as well */
    const __m256 slack = _mm256_mul_ps(_mm256_set1_ps(0x1p-21f),
                                       _mm256_add_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), g0), _mm256_add_ps(moved, shift_max)));
    const __m256 g = _mm256_sub_ps(_mm256_sub_ps(_mm256_sub_ps(g0, moved), shift_max), slack);
    const __m256 tol = _mm256_mul_ps(_mm256_set1_ps(4.0f * (float)(D + 3) * 0x1p-24f),
                                     _mm256_add_ps(_mm256_sqrt_ps(s2), _mm256_set1_ps(p->rmax)));
    const unsigned keep = (unsigned)_mm256_movemask_ps(_mm256_and_ps(_mm256_cmp_ps(g, tol, _CMP_GT_OQ), _mm256_castsi256_ps(valid)));
    _mm256_storeu_ps(gap, g);
    return keep;
}

/* Labels of the 8 points from i (-1 where masked), d = D; C is the
 * centroids the plan's H, rmax2 and CT were made from. With p->bounds,
 * before holds the last iteration's labels, and the block is labelled
 * afresh only when a point of it may have changed. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
screened_block_d(const kmeans_plan *p, const float *X, const uint8_t *mask, const float *C, size_t i,
                 const int32_t *before, int32_t *out, const int D)
{
    __m256 xt[D <= 8 ? 8 : DK_KMEANS_MAX_D];
    load_block(p, X, i, D, xt);
    __m256 s2 = _mm256_setzero_ps(); /* |x|^2 */
#pragma GCC unroll 8
    for (int f = 0; f < D; f++)
        s2 = _mm256_fmadd_ps(xt[f], xt[f], s2);
    if (p->bounds) {
        unsigned keep = kept_lanes(p, s2, D, before, p->gap + i);
        if (mask)
            for (int q = 0; q < 8; q++)
                keep |= (unsigned)!mask[i + q] << q;
        if (keep == 0xffu) {
            for (int q = 0; q < 8; q++)
                out[q] = mask && !mask[i + q] ? -1 : before[q];
            return;
        }
    }
    __m256i lab;
    __m256 g;
    unsigned near = screen_lanes(xt, s2, D, C, p->H, p->s.desc.k, p->rmax2, &lab, before ? &g : NULL);
    _mm256_storeu_si256((__m256i *)out, lab);
    if (before) {
        /* near ties have no bound: they are labelled afresh next time */
        const __m256i bit = _mm256_and_si256(_mm256_set1_epi32((int)near), _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128));
        g = _mm256_blendv_ps(g, _mm256_set1_ps(-INFINITY), _mm256_castsi256_ps(_mm256_cmpgt_epi32(bit, _mm256_setzero_si256())));
        _mm256_storeu_ps(p->gap + i, g);
    }
    for (int q = 0; q < 8; q++) {
        if (mask && !mask[i + q]) {
            out[q] = -1;
            continue;
        }
        if (!(near >> q & 1u))
            continue;
        float x[DK_KMEANS_MAX_D];
        for (int f = 0; f < D; f++)
            x[f] = X[(i + q) * p->s.stride_point + (size_t)f * p->s.stride_feature];
        const float *xs[1] = {x};
        best_labels_avx2(xs, 1, D, p->CT, p->kv, &out[q]);
    }
}

__attribute__((target("avx2,fma"))) static void screened_block(const kmeans_plan *p, const float *X,
                                                               const uint8_t *mask, const float *C, size_t i,
                                                               const int32_t *before, int32_t *out)
{
    switch (p->s.desc.d) {
    case 1: screened_block_d(p, X, mask, C, i, before, out, 1); break;
    case 2: screened_block_d(p, X, mask, C, i, before, out, 2); break;
    case 3: screened_block_d(p, X, mask, C, i, before, out, 3); break;
    case 4: screened_block_d(p, X, mask, C, i, before, out, 4); break;
    case 5: screened_block_d(p, X, mask, C, i, before, out, 5); break;
    case 6: screened_block_d(p, X, mask, C, i, before, out, 6); break;
    case 7: screened_block_d(p, X, mask, C, i, before, out, 7); break;
    case 8: screened_block_d(p, X, mask, C, i, before, out, 8); break;
    default: screened_block_d(p, X, mask, C, i, before, out, p->s.desc.d); break;
    }
}
#endif

/* The centroids transposed for the vector assignment. */
static void transpose_centroids(kmeans_plan *p, const float *C)
{
    const int k = p->s.desc.k, d = p->s.desc.d, w = p->kv * 8;
    for (int f = 0; f < d; f++)
        for (int c = 0; c < w; c++)
            p->CT[(size_t)f * w + c] = c < k ? C[(size_t)c * d + f] : INFINITY;
}

/* What the vector assignment reads of the centroids C: their transpose,
 * and the screen's terms. */
static void prepare_centroids(kmeans_plan *p, const float *C)
{
    transpose_centroids(p, C);
#ifdef KM_AVX2
    if (p->screen)
        screen_terms(p, C);
#endif
}

/* The contiguity window's label counts, slid along a row: moving one
 * pixel to the right drops one column of w labels and adds one, instead of
 * reading all w * w again. The counts include the centre pixel, which
 * contig_label takes out. */
typedef struct window_counts {
    long row, col; /* the pixel the counts are for (row -1: none yet) */
    int total;     /* labels >= 0 in the window */
    int count[DK_KMEANS_MAX_K] __attribute__((aligned(32)));
} window_counts;

static void window_column(const dk_kmeans_desc *d, const int32_t *prev, long row, long col, int delta,
                          window_counts *w)
{
    if (col < 0 || col >= (long)d->cols)
        return;
    const long r = d->window / 2;
    for (long y = row - r; y <= row + r; y++) {
        if (y < 0 || y >= (long)d->rows)
            continue;
        int32_t l = prev[(size_t)y * d->cols + (size_t)col];
        if (l >= 0) {
            w->count[l] += delta;
            w->total += delta;
        }
    }
}

/* Moves the counts to pixel i: along the row by dropping and adding the
 * columns between (2 per pixel moved), or afresh (w columns) on a new row or
 * after a gap of masked pixels wider than half the window. */
static void window_move(const dk_kmeans_desc *d, const int32_t *prev, size_t i, window_counts *w)
{
    const long r = d->window / 2, row = (long)(i / d->cols), col = (long)(i % d->cols);
    const long gap = col - w->col;
    if (w->row == row && gap > 0 && 2 * gap <= d->window) {
        for (long c = w->col - r; c < col - r; c++)
            window_column(d, prev, row, c, -1, w);
        for (long c = w->col + r + 1; c <= col + r; c++)
            window_column(d, prev, row, c, +1, w);
    } else {
        memset(w->count, 0, sizeof w->count);
        w->total = 0;
        for (long c = col - r; c <= col + r; c++)
            window_column(d, prev, row, c, +1, w);
    }
    w->row = row;
    w->col = col;
}

#ifdef KM_AVX2
/* The least contiguity cost of a pixel from its distances (dist, kv vectors,
 * as distances() leaves them), the window counts and its own previous label
 * lc: the reference's cost, operation for operation (separate multiplies and
 * adds, an IEEE divide), 8 centroids per vector; padding lanes get +inf. */
__attribute__((target("avx2"))) static int contig_label_avx2(const float *dist, const window_counts *w,
                                                             int32_t lc, int k, int kv, float lambda,
                                                             float inv_d)
{
    float cost[DK_KMEANS_MAX_K] __attribute__((aligned(32)));
    const int m = w->total - (lc >= 0);
    const __m256 vl = _mm256_set1_ps(lambda), vid = _mm256_set1_ps(inv_d),
                 vol = _mm256_set1_ps(1.0f - lambda), vm = _mm256_set1_ps((float)m),
                 inf = _mm256_set1_ps(INFINITY);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), vlc = _mm256_set1_epi32(lc),
                  vk = _mm256_set1_epi32(k), vmi = _mm256_set1_epi32(m);
    for (int j = 0; j < kv; j++) {
        const __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(8 * j), lane);
        /* same = count - (c == lc); cmpeq gives -1 where equal */
        __m256i same = _mm256_load_si256((const __m256i *)(w->count + 8 * j));
        same = _mm256_add_epi32(same, _mm256_cmpeq_epi32(idx, vlc));
        const __m256 frac = m ? _mm256_div_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(vmi, same)), vm)
                              : _mm256_setzero_ps();
        __m256 c = _mm256_add_ps(_mm256_mul_ps(vl, _mm256_mul_ps(_mm256_load_ps(dist + 8 * j), vid)),
                                 _mm256_mul_ps(vol, frac));
        c = _mm256_blendv_ps(inf, c, _mm256_castsi256_ps(_mm256_cmpgt_epi32(vk, idx)));
        _mm256_store_ps(cost + 8 * j, c);
    }
    return first_min(cost, kv);
}
#endif

#ifdef KM_AVX2
/* Contiguity labels of the live (0, 1 or 2) unmasked pixels i + at[j]
 * (features xs[j]). */
__attribute__((target("avx2"))) static void contig_labels_avx2(const kmeans_plan *p, const float *const *xs,
                                                               int live, const size_t *at, const int32_t *prev,
                                                               size_t i, int32_t *out, window_counts *win)
{
    const dk_kmeans_desc *d = &p->s.desc;
    float dist[2][DK_KMEANS_MAX_K] __attribute__((aligned(32)));
    if (live == 2) /* contiguity: k <= DK_KMEANS_MAX_K, one chunk */
        distances(xs, 2, d->d, p->CT, p->kv, 0, p->kv, dist);
    else if (live == 1)
        distances(xs, 1, d->d, p->CT, p->kv, 0, p->kv, dist);
    const float lambda = (float)d->lambda, inv_d = 1.0f / (float)d->d;
    for (int j = 0; j < live; j++) {
        const size_t at_i = i + at[j];
        window_move(d, prev, at_i, win);
        out[at[j]] = contig_label_avx2(dist[j], win, prev[at_i], d->k, p->kv, lambda, inv_d);
    }
}
#endif

/* Labels of the m (1 or 2) points from i: -1 where masked, the contiguity
 * cost with prev, else the plain distance on the fastest path. With prev on
 * the vector path, win holds the calling thread's sliding window counts. */
static inline void assign_points(const kmeans_plan *p, const float *X, const uint8_t *mask,
                                 const int32_t *prev, const float *C, size_t i, int m, int32_t *out,
                                 window_counts *win)
{
    const dk_kmeans_desc *d = &p->s.desc;
    float x[2][DK_KMEANS_MAX_D];
    const float *xs[2]; /* the points' features: in place when contiguous */
    size_t at[2];
    int live = 0;
    for (int q = 0; q < m; q++) {
        out[q] = -1;
        if (mask && !mask[i + q])
            continue;
        if (!p->vector || (prev && !win)) {
            out[q] = best_label(p, X, prev, i + q, C);
            continue;
        }
        if (p->s.stride_feature == 1) {
            xs[live] = X + (i + q) * p->s.stride_point;
        } else {
            for (int f = 0; f < d->d; f++)
                x[live][f] = X[(i + q) * p->s.stride_point + (size_t)f * p->s.stride_feature];
            xs[live] = x[live];
        }
        at[live++] = (size_t)q;
    }
#ifdef KM_AVX2
    if (prev && win) {
        contig_labels_avx2(p, xs, live, at, prev, i, out, win);
        return;
    }
    if (live) {
        int l[2];
        best_labels_avx2(xs, live, d->d, p->CT, p->kv, l);
        for (int q = 0; q < live; q++)
            out[at[q]] = l[q];
    }
#endif
}

#ifdef KM_AVX2
/* row[f] += x[f] for f < d, four at a time: the same additions, in the same
 * order per element, as the scalar loop. */
__attribute__((target("avx2"))) static void add_point_avx2(double *row, const float *x, int d)
{
    int f = 0;
    for (; f + 4 <= d; f += 4)
        _mm256_storeu_pd(row + f, _mm256_add_pd(_mm256_loadu_pd(row + f), _mm256_cvtps_pd(_mm_loadu_ps(x + f))));
    for (; f < d; f++)
        row[f] += x[f];
}
#endif

/* Labels of the m points from i (m <= KM_BLOCK): a screened block of 8, or
 * pairs through assign_points. */
static inline void label_points(const kmeans_plan *p, const float *X, const uint8_t *mask, const int32_t *prev,
                                const float *C, size_t i, int m, const int32_t *before, int32_t *out,
                                window_counts *win)
{
#ifdef KM_AVX2
    if (p->screen && !prev && m == KM_BLOCK) {
        screened_block(p, X, mask, C, i, before, out);
        return;
    }
#endif
    for (int q = 0; q < m; q += 2)
        assign_points(p, X, mask, prev, C, i + q, m - q < 2 ? m - q : 2, out + q, win);
}

static dk_status execute(void *handle, const void *points, const void *mask_, const void *init,
                         void *labels_, void *centroids, dk_kmeans_result *res, dk_msg *msg)
{
    (void)msg;
    kmeans_plan *p = handle;
    const dk_kmeans_desc *d = &p->s.desc;
    const float *X = points;
    const uint8_t *mask = mask_;
    int32_t *labels = labels_;
    const int k = d->k, dd = d->d, stride = dd + 1, T = p->threads;
    const size_t n = d->n, kd = (size_t)k * dd;
    float *C = p->C;
    memcpy(C, init, kd * sizeof *C);
    int32_t *prev = p->prev;
    if (p->vector)
        prepare_centroids(p, C);
    if (prev) {
#pragma omp parallel for schedule(static) num_threads(T)
        for (size_t i = 0; i < n; i += 2)
            assign_points(p, X, mask, NULL, C, i, i + 1 < n ? 2 : 1, prev + i, NULL);
    }
    /* contiguity's sliding window counts go pixel pair by pair; plain
     * k-means in screened blocks keeps Hamerly's bounds */
    const int screened = p->screen && !prev;
    const size_t step = screened ? KM_BLOCK : 2;
    p->bounds = 0;
    double assign_s = 0, update_s = 0, move = 0;
    int it = 0;
    while (it < d->max_iters) {
        double t0 = now();
#pragma omp parallel num_threads(T)
        {
#ifdef _OPENMP
            int t = omp_get_thread_num();
#else
            int t = 0;
#endif
            double *part = p->partial + (size_t)t * k * stride;
            memset(part, 0, (size_t)k * stride * sizeof *part);
            window_counts win = {.row = -1};
            window_counts *w = prev && p->vector ? &win : NULL;
#pragma omp for schedule(static)
            for (size_t i = 0; i < n; i += step) {
                const int m = n - i < step ? (int)(n - i) : (int)step;
                int32_t l[KM_BLOCK];
                label_points(p, X, mask, prev, C, i, m, labels + i, l, w);
                for (int q = 0; q < m; q++) {
                    labels[i + q] = l[q];
                    if (l[q] < 0)
                        continue;
                    double *row = part + (size_t)l[q] * stride;
#ifdef KM_AVX2
                    if (p->vector && p->s.stride_feature == 1)
                        add_point_avx2(row, X + (i + q) * p->s.stride_point, dd);
                    else
#endif
                        for (int f = 0; f < dd; f++)
                            row[f] += X[(i + q) * p->s.stride_point + (size_t)f * p->s.stride_feature];
                    row[dd] += 1.0;
                }
            }
        }
        double t1 = now();
        it++;
        move = 0;
        if (screened)
            p->shift_max = 0.0f;
        for (int c = 0; c < k; c++) {
            double count = 0;
            for (int t = 0; t < T; t++)
                count += p->partial[((size_t)t * k + c) * stride + dd];
            if (screened)
                p->shift[c] = 0.0f;
            if (count == 0)
                continue;
            double m2 = 0;
            for (int f = 0; f < dd; f++) {
                double sum = 0;
                for (int t = 0; t < T; t++)
                    sum += p->partial[((size_t)t * k + c) * stride + f];
                float next = (float)(sum / count);
                double diff = (double)next - (double)C[(size_t)c * dd + f];
                m2 += diff * diff;
                C[(size_t)c * dd + f] = next;
            }
            if (sqrt(m2) > move)
                move = sqrt(m2);
            if (screened) {
                /* NaN stays NaN, and then no bound holds */
                p->shift[c] = (float)sqrt(m2) * (1.0f + 0x1p-20f);
                p->shift_max = p->shift[c] > p->shift_max || p->shift[c] != p->shift[c] ? p->shift[c] : p->shift_max;
            }
        }
        p->bounds = screened;
        if (prev)
            memcpy(prev, labels, n * sizeof *prev);
        if (p->vector)
            prepare_centroids(p, C);
        double t2 = now();
        assign_s += t1 - t0;
        update_s += t2 - t1;
        if (move < d->tol)
            break;
    }
    p->bounds = 0;
    double objective = 0;
    size_t valid = 0;
#pragma omp parallel for schedule(static) num_threads(T) reduction(+ : objective, valid)
    for (size_t i = 0; i < n; i++) {
        int32_t l = labels[i];
        if (l < 0)
            continue;
        valid++;
        float dist = 0.0f;
        for (int f = 0; f < dd; f++) {
            float diff = X[i * p->s.stride_point + (size_t)f * p->s.stride_feature] - C[(size_t)l * dd + f];
            dist += diff * diff;
        }
        objective += dist;
    }
    memcpy(centroids, C, kd * sizeof *C);
    res->iterations = it;
    res->objective = objective;
    res->last_move = move;
    res->valid = valid;
    res->assign_seconds = assign_s;
    res->update_seconds = update_s;
    return DK_OK;
}

/* ---- the phases of a distributed iteration (dakit/kmeans.h) ---- */

/* The contiguity label of pixel i of a band: prev holds the previous labels
 * of rows [-r, rows + r), so every window row is there (-1 outside the
 * image). The reference's arithmetic, as best_label. */
static int band_label(const kmeans_plan *p, const float *X, const int32_t *prev, size_t i, const float *C)
{
    const dk_kmeans_desc *d = &p->s.desc;
    const long r = d->window / 2, row = (long)(i / d->cols), col = (long)(i % d->cols);
    int same[DK_KMEANS_MAX_K];
    memset(same, 0, sizeof(int) * (size_t)d->k);
    int m = 0;
    for (long y = row - r; y <= row + r; y++)
        for (long c = col - r; c <= col + r; c++) {
            if (c < 0 || c >= (long)d->cols || (y == row && c == col))
                continue;
            int32_t l = prev[(size_t)(y + r) * d->cols + (size_t)c];
            if (l >= 0) {
                m++;
                same[l]++;
            }
        }
    const float lambda = (float)d->lambda, inv_d = 1.0f / (float)d->d;
    int best = 0;
    float best_cost = 0.0f;
    for (int c = 0; c < d->k; c++) {
        const float *cc = C + (size_t)c * d->d;
        float dist = 0.0f;
        for (int f = 0; f < d->d; f++) {
            float diff = X[i * p->s.stride_point + (size_t)f * p->s.stride_feature] - cc[f];
            dist += diff * diff;
        }
        float cost = lambda * (dist * inv_d) + (1.0f - lambda) * (m ? (float)(m - same[c]) / (float)m : 0.0f);
        if (c == 0 || cost < best_cost) {
            best = c;
            best_cost = cost;
        }
    }
    return best;
}

/* Each thread sums a static slice of the points into its own partials,
 * which are then added in thread order: a fixed order for the plan. */
static dk_status assign_weighted(void *handle, const void *points, const void *mask_, const void *weights_,
                                 const void *centroids, const void *prev_, void *next_, void *labels_, void *sums_,
                                 const void *state_, dk_msg *msg)
{
    (void)msg;
    kmeans_plan *p = handle;
    const float *W = weights_;
    const double *state = state_;
    if (state[1] != 0)
        return DK_OK;
    const dk_kmeans_desc *d = &p->s.desc;
    const float *X = points, *C = centroids;
    const uint8_t *mask = mask_;
    const int32_t *prev = prev_;
    int32_t *labels = labels_, *next = next_ ? (int32_t *)next_ + (size_t)(d->window / 2) * d->cols : NULL;
    double *sums = sums_;
    const int k = d->k, dd = d->d, stride = dd + 1, T = p->threads;
    const size_t n = d->n, kd = (size_t)k * dd;
    if (p->vector && !prev)
        prepare_centroids(p, C);
    const size_t step = p->screen && !prev ? KM_BLOCK : 2;
#pragma omp parallel num_threads(T)
    {
#ifdef _OPENMP
        int t = omp_get_thread_num();
#else
        int t = 0;
#endif
        double *part = p->partial + (size_t)t * k * stride;
        memset(part, 0, (size_t)k * stride * sizeof *part);
#pragma omp for schedule(static)
        for (size_t i = 0; i < n; i += step) {
            const int m = n - i < step ? (int)(n - i) : (int)step;
            int32_t l[KM_BLOCK];
            if (prev) {
                for (int q = 0; q < m; q++)
                    l[q] = mask && !mask[i + q] ? -1 : band_label(p, X, prev, i + q, C);
            } else {
                label_points(p, X, mask, NULL, C, i, m, NULL, l, NULL);
            }
            for (int q = 0; q < m; q++) {
                labels[i + q] = l[q];
                if (next)
                    next[i + q] = l[q];
                if (l[q] < 0)
                    continue;
                double *row = part + (size_t)l[q] * stride;
                const double w = W ? (double)W[i + q] : 1.0;
                for (int f = 0; f < dd; f++)
                    row[f] += w * (double)X[(i + q) * p->s.stride_point + (size_t)f * p->s.stride_feature];
                row[dd] += w;
            }
        }
    }
    for (int c = 0; c < k; c++)
        for (int f = 0; f <= dd; f++) {
            double v = 0;
            for (int t = 0; t < T; t++)
                v += p->partial[((size_t)t * k + c) * stride + f];
            sums[f < dd ? (size_t)c * dd + f : kd + (size_t)c] = v;
        }
    return DK_OK;
}

static dk_status assign_partial(void *handle, const void *points, const void *mask, const void *centroids,
                                const void *prev, void *next, void *labels, void *sums, const void *state,
                                dk_msg *msg)
{
    return assign_weighted(handle, points, mask, NULL, centroids, prev, next, labels, sums, state, msg);
}

static dk_status update(void *handle, const void *sums_, void *centroids, void *state_, dk_msg *msg)
{
    (void)msg;
    kmeans_plan *p = handle;
    double *state = state_;
    if (state[1] != 0)
        return DK_OK;
    const dk_kmeans_desc *d = &p->s.desc;
    const double *sums = sums_;
    float *C = centroids;
    const size_t kd = (size_t)d->k * d->d;
    if (sums[kd + (size_t)d->k] != 0) {
        state[3] = 1;
        state[1] = 1;
        return DK_OK;
    }
    double move = 0;
    for (int c = 0; c < d->k; c++) {
        double count = sums[kd + (size_t)c];
        if (count == 0)
            continue;
        double m2 = 0;
        for (int f = 0; f < d->d; f++) {
            float next = (float)(sums[(size_t)c * d->d + f] / count);
            double diff = (double)next - (double)C[(size_t)c * d->d + f];
            m2 += diff * diff;
            C[(size_t)c * d->d + f] = next;
        }
        if (sqrt(m2) > move)
            move = sqrt(m2);
    }
    state[0] += 1;
    state[2] = move;
    if (move < d->tol)
        state[1] = 1;
    return DK_OK;
}

static dk_status objective_weighted(void *handle, const void *points, const void *labels_, const void *weights_,
                                    const void *centroids, void *out_, dk_msg *msg)
{
    (void)msg;
    kmeans_plan *p = handle;
    const float *W = weights_;
    const dk_kmeans_desc *d = &p->s.desc;
    const float *X = points, *C = centroids;
    const int32_t *labels = labels_;
    const int dd = d->d;
    double obj = 0, valid = 0;
#pragma omp parallel for schedule(static) num_threads(p->threads) reduction(+ : obj, valid)
    for (size_t i = 0; i < d->n; i++) {
        int32_t l = labels[i];
        if (l < 0)
            continue;
        valid += 1;
        float dist = 0.0f;
        for (int f = 0; f < dd; f++) {
            float diff = X[i * p->s.stride_point + (size_t)f * p->s.stride_feature] - C[(size_t)l * dd + f];
            dist += diff * diff;
        }
        obj += (W ? (double)W[i] : 1.0) * (double)dist;
    }
    double *out = out_;
    out[0] = obj;
    out[1] = valid;
    return DK_OK;
}

static dk_status objective(void *handle, const void *points, const void *labels, const void *centroids, void *out,
                           dk_msg *msg)
{
    return objective_weighted(handle, points, labels, NULL, centroids, out, msg);
}

/* ---- the seeding's distance pass (dakit/kmeans.h) ---- */

static dk_status seed_distance_weighted(void *handle, const void *points, const void *mask_, const void *weights_,
                                        const void *centre_, const void *near_, void *out_, void *blocks_,
                                        dk_msg *msg)
{
    (void)msg;
    kmeans_plan *p = handle;
    const float *W = weights_;
    const dk_kmeans_desc *d = &p->s.desc;
    const float *X = points, *centre = centre_, *near = near_;
    const uint8_t *mask = mask_;
    float *out = out_;
    double *blocks = blocks_;
    const long long nb = (long long)((d->n + DK_KMEANS_SEED_BLOCK - 1) / DK_KMEANS_SEED_BLOCK);
#pragma omp parallel for schedule(static) num_threads(p->threads)
    for (long long b = 0; b < nb; b++) {
        const size_t first = (size_t)b * DK_KMEANS_SEED_BLOCK;
        const size_t end = first + DK_KMEANS_SEED_BLOCK < d->n ? first + DK_KMEANS_SEED_BLOCK : d->n;
        double sum = 0.0;
        for (size_t i = first; i < end; i++) {
            float v = 0.0f;
            if (!mask || mask[i]) {
                if (centre) {
                    for (int f = 0; f < d->d; f++) {
                        float diff = X[i * p->s.stride_point + (size_t)f * p->s.stride_feature] - centre[f];
                        v += diff * diff;
                    }
                } else {
                    v = 1.0f;
                }
                if (W)
                    v = W[i] * v;
                if (near && near[i] < v)
                    v = near[i];
            }
            out[i] = v;
            sum += v;
        }
        blocks[b] = sum;
    }
    return DK_OK;
}

static dk_status seed_distance(void *handle, const void *points, const void *mask, const void *centre,
                               const void *near, void *out, void *blocks, dk_msg *msg)
{
    return seed_distance_weighted(handle, points, mask, NULL, centre, near, out, blocks, msg);
}

static dk_status seed_read(void *handle, const void *points, const void *dist, size_t first, size_t count,
                           float *values, size_t point, float *x, dk_msg *msg)
{
    (void)msg;
    kmeans_plan *p = handle;
    if (count)
        memcpy(values, (const float *)dist + first, count * sizeof *values);
    if (x)
        for (int f = 0; f < p->s.desc.d; f++)
            x[f] = ((const float *)points)[point * p->s.stride_point + (size_t)f * p->s.stride_feature];
    return DK_OK;
}

/* "screen": plain labels screened (AVX2 and FMA, d <= 12, k <= 128), else
 * as "simd": the AVX2 assignment where the CPU has it (else scalar). */
static const char *const variants[] = {"screen", "simd", "scalar", NULL};

const dk_kmeans_ops dk_cpu_kmeans_ops = {
    .variants = variants,
    .plan_create = plan_create,
    .execute = execute,
    .plan_destroy = plan_destroy,
    .assign_partial = assign_partial,
    .update = update,
    .objective = objective,
    .seed_distance = seed_distance,
    .seed_read = seed_read,
    .assign_weighted = assign_weighted,
    .objective_weighted = objective_weighted,
    .seed_distance_weighted = seed_distance_weighted,
};
