/* dakit cpu plugin, gauss: the extended axes (deriche, vyv, rf with scipy's
 * modes), each segment from its continued window. */
#include "gauss.h"

/* Extended axes: segments of `keep` values, each computed alone from its
 * stretch of the continued input (dk_gauss_iir); several per line only
 * when the lines are too few to share among the threads, and then at least
 * four reaches long, so that at most a third of the work is repeated. */
void choose_extended_segments(cpu_gauss_plan *p, int axis)
{
    dk_axis_view v = dk_axis_view_of(&p->setup.desc, axis);
    size_t lines = v.outer * v.inner, reach = p->setup.reach[axis];
    size_t wanted = (size_t)p->threads * BATCHES_PER_THREAD;
    size_t shortest = 4 * reach > MIN_WINDOW ? 4 * reach : MIN_WINDOW;
    size_t segments = lines >= wanted ? 1 : div_up(wanted, lines);
    if (segments > v.n / shortest)
        segments = v.n / shortest;
    if (segments < 1)
        segments = 1;
    /* a batch's buffers (two rows of lanes per kept value) stay within a core's caches */
    size_t longest = EXTENDED_KEEP > shortest ? EXTENDED_KEEP : shortest;
    if (div_up(v.n, segments) > longest)
        segments = div_up(v.n, longest);
    p->keep[axis] = div_up(v.n, segments);
    p->segments[axis] = div_up(v.n, p->keep[axis]); /* every segment holds values: none starts past the end */
}

/* deriche and vyv in lockstep over IIR_ROW_BYTES of lanes (a cache line),
 * each lane a line's segment: the window buf (keep + 2 R + 3 rows, row i the
 * segment's value k0 - R - 1 + i) runs the sections' causal recursions into
 * acc (keep rows), then the anti-causal ones are added there, with the
 * reference's operations in its order (FMA contraction aside). A row is a
 * few vectors whose recursions are independent, so each section's
 * dependency chain waits behind the others' work; the section count is a
 * constant in each inlined copy, so its loop unrolls. */
#define DEFINE_IIR(NAME, T, V, ATTR)                                                   \
    /* one row: each section's recursion on the inputs in0, in1 (u and w its \
     * causal or anti-causal feed-forward), their sum into sum */             \
    ATTR static inline __attribute__((always_inline)) void NAME##_row(                \
        const V *in0, const V *in1, const T *u, const T *w, const T *a1, const T *a2,   \
        V (*s1)[IIR_ROW_BYTES / sizeof(V)], V (*s2)[IIR_ROW_BYTES / sizeof(V)], V *sum, \
        const int n)                                                                   \
    {                                                                                  \
        enum { NV = IIR_ROW_BYTES / sizeof(V) };                                       \
        const V zero = {0};                                                            \
        _Pragma("GCC unroll 8") for (int r = 0; r < NV; r++) sum[r] = zero;            \
        _Pragma("GCC unroll 3") for (int k = 0; k < n; k++)                            \
            _Pragma("GCC unroll 8") for (int r = 0; r < NV; r++) {                     \
                V val = u[k] * in0[r] + w[k] * in1[r] - a1[k] * s1[k][r] - a2[k] * s2[k][r]; \
                s2[k][r] = s1[k][r];                                                   \
                s1[k][r] = val;                                                        \
                sum[r] += val;                                                         \
            }                                                                          \
    }                                                                                  \
    ATTR static inline __attribute__((always_inline)) void NAME##_n(                  \
        const T *buf, T *acc, size_t keep, size_t R, const dk_gauss_iir *f, const int n) \
    {                                                                                  \
        enum { NV = IIR_ROW_BYTES / sizeof(V) };                                       \
        const V *rows = (const V *)buf;                                                \
        V *out = (V *)acc;                                                             \
        T b0[DK_GAUSS_MAX_SECTIONS], b1[DK_GAUSS_MAX_SECTIONS];                        \
        T a1[DK_GAUSS_MAX_SECTIONS], a2[DK_GAUSS_MAX_SECTIONS];                        \
        T c1[DK_GAUSS_MAX_SECTIONS], c2[DK_GAUSS_MAX_SECTIONS];                        \
        for (int k = 0; k < n; k++) {                                                  \
            b0[k] = (T)f->b0[k], b1[k] = (T)f->b1[k];                                  \
            a1[k] = (T)f->a1[k], a2[k] = (T)f->a2[k];                                  \
            c1[k] = (T)f->c1[k], c2[k] = (T)f->c2[k];                                  \
        }                                                                              \
        const V zero = {0};                                                            \
        V s1[DK_GAUSS_MAX_SECTIONS][NV], s2[DK_GAUSS_MAX_SECTIONS][NV], sum[NV];        \
        for (int k = 0; k < n; k++)                                                    \
            for (int r = 0; r < NV; r++)                                               \
                s1[k][r] = s2[k][r] = zero;                                            \
        for (size_t i = 1; i <= R + keep; i++) {                                       \
            NAME##_row(rows + i * NV, rows + (i - 1) * NV, b0, b1, a1, a2, s1, s2, sum, n); \
            if (i > R)                                                                 \
                _Pragma("GCC unroll 8") for (int r = 0; r < NV; r++)                   \
                    out[(i - R - 1) * NV + r] = sum[r];                                \
        }                                                                              \
        for (int k = 0; k < n; k++)                                                    \
            for (int r = 0; r < NV; r++)                                               \
                s1[k][r] = s2[k][r] = zero;                                            \
        for (size_t i = keep + 2 * R; i > R; i--) {                                    \
            NAME##_row(rows + (i + 1) * NV, rows + (i + 2) * NV, c1, c2, a1, a2, s1, s2, sum, n); \
            if (i <= R + keep)                                                         \
                _Pragma("GCC unroll 8") for (int r = 0; r < NV; r++)                   \
                    out[(i - R - 1) * NV + r] += sum[r];                               \
        }                                                                              \
    }                                                                                  \
    ATTR static void NAME(const T *buf, T *acc, size_t keep, size_t R, const dk_gauss_iir *f) \
    {                                                                                  \
        switch (f->count) {                                                            \
        case 1: NAME##_n(buf, acc, keep, R, f, 1); break;                              \
        case 2: NAME##_n(buf, acc, keep, R, f, 2); break;                              \
        default: NAME##_n(buf, acc, keep, R, f, 3); break;                             \
        }                                                                              \
    }

DEFINE_IIR(iir_lanes_f32_base, float, f32x4, )
DEFINE_IIR(iir_lanes_f64_base, double, f64x2, )
#ifdef HAVE_AVX2_KERNEL
DEFINE_IIR(iir_lanes_f32_avx2, float, f32x8, TARGET_AVX2)
DEFINE_IIR(iir_lanes_f64_avx2, double, f64x4, TARGET_AVX2)
#else
#define iir_lanes_f32_avx2 iir_lanes_f32_base
#define iir_lanes_f64_avx2 iir_lanes_f64_base
#endif

/* An extended axis (deriche, vyv, rf with scipy's modes), in batches of
 * IIR_RUNS x W lanes (lanes_of's numbering: adjacent lines of one segment
 * along a strided axis, else consecutive segments). Each lane's continued
 * window is gathered into a buffer of W lanes (a row per value), filtered
 * (deriche and vyv: IIR into acc; rf: the zero rule on the window
 * [k0 - R, k1 + R) in place, as algorithms/gauss/reference.c), and its kept
 * values scattered to dst. Adjacent lines of one segment are one run of
 * memory per row, read IIR_RUNS buffers wide so that each page of the field
 * is touched once a row for 256 bytes of lines (the strided axis is bound by
 * those touches); other lanes go W at a time, G lines of the contiguous axis
 * through the AVX2 transpose where their windows lie inside the line. Every
 * lane runs keep values; a line's last, shorter segment computes past the
 * line's end on its continuation and keeps only its own. */
/* A gathered buffer filtered, and where its kept values then lie. */
#define FILTER(buf)                                                                    \
    (rf ? rf((buf) + LW, (size_t)(keep + 2 * R), LW, alpha, d->K, DK_BOUNDARY_ZERO)    \
        : iir((buf), (buf) + M * LW, (size_t)keep, (size_t)R, f))
#define RESULT(buf) (rf ? (buf) + (R + 1) * LW : (buf) + M * LW)
#define DEFINE_IIR_AXIS(NAME, T, W, G, GATHER_G, SCATTER_G, IIR_AVX2, IIR_BASE, RF_AVX2, RF_BASE) \
    void NAME(const cpu_gauss_plan *p, int axis, const T *src, T *dst)                 \
    {                                                                                  \
        enum { B = W * IIR_RUNS, LW = W };                                             \
        const dk_gauss_desc *d = &p->setup.desc;                                       \
        dk_axis_view v = dk_axis_view_of(d, axis);                                     \
        const long long N = (long long)v.n, R = (long long)p->setup.reach[axis];       \
        const long long keep = (long long)p->keep[axis], M = keep + 2 * R + 3;         \
        const size_t segments = p->segments[axis], inner = v.inner;                    \
        const size_t lanes_total = v.outer * segments * inner;                         \
        const size_t group = inner >= B ? inner : lanes_total;                         \
        const size_t per_group = div_up(group, B);                                     \
        const size_t batches = lanes_total / group * per_group;                        \
        const size_t stride = (size_t)(M + keep) * W; /* one buffer and its acc */     \
        const int bnd = d->boundary;                                                   \
        const T outside = bnd == DK_BOUNDARY_CVAL ? (T)d->cval : (T)0;                 \
        const dk_gauss_iir *f = &p->setup.iir[axis];                                   \
        void (*const iir)(const T *, T *, size_t, size_t, const dk_gauss_iir *) =      \
            p->avx2 ? IIR_AVX2 : IIR_BASE;                                             \
        void (*const rf)(T *, size_t, size_t, T, int, dk_boundary) =                   \
            d->method != DK_GAUSS_RF ? NULL : p->avx2 ? RF_AVX2 : RF_BASE;             \
        const T alpha = (T)p->setup.alpha[axis];                                       \
        void (*const gather)(const T *const *, size_t, T *, size_t) =                  \
            p->avx2 && inner == 1 ? GATHER_G : NULL;                                   \
        void (*const scatter)(const T *, size_t, size_t, T *const *) =                 \
            p->avx2 && inner == 1 ? SCATTER_G : NULL;                                  \
        _Pragma("omp parallel num_threads(p->threads)")                                \
        {                                                                              \
            T *work = (T *)p->buffers + (size_t)thread_index() * p->buffer_elems;      \
            _Pragma("omp for schedule(dynamic, 1)")                                    \
            for (size_t b = 0; b < batches; b++) {                                     \
                size_t in_group = (b % per_group) * B;                                 \
                size_t t0 = b / per_group * group + in_group;                          \
                size_t count = group - in_group < B ? group - in_group : B;            \
                size_t first[B];  /* the segment's first value */                      \
                long long g0[B], n[B]; /* the window's first position, values kept */  \
                for (size_t w = 0; w < count; w++) {                                   \
                    size_t t = t0 + w, j = t % inner, rest = t / inner;                \
                    long long k0 = (long long)(rest % segments) * keep;                \
                    first[w] = rest / segments * v.n * inner + j + (size_t)k0 * inner; \
                    g0[w] = k0 - R - 1;                                                \
                    n[w] = N - k0 < keep ? N - k0 : keep;                              \
                }                                                                      \
                size_t subs = div_up(count, W);                                        \
                for (size_t s = 0; s < subs; s++) /* lanes a short batch leaves */     \
                    for (size_t w = count - s * W < W ? count - s * W : W; w < W; w++) \
                        for (long long i = 0; i < M; i++)                              \
                            work[s * stride + i * W + w] = (T)0;                       \
                if (inner > 1 && t0 % inner + count <= inner) {                        \
                    /* adjacent lines of one segment: each row one run of memory */   \
                    const T *x = src + first[0] - (size_t)(g0[0] + R + 1) * inner;     \
                    for (long long i = 0; i < M; i++) {                                \
                        long long k = dk_gauss_extend(g0[0] + i, N, bnd);              \
                        for (size_t s = 0; s < subs; s++) {                            \
                            T *row = work + s * stride + i * W;                        \
                            size_t c = count - s * W < W ? count - s * W : W;          \
                            if (k >= 0 && c == W)                                      \
                                memcpy(row, x + k * (long long)inner + s * W, W * sizeof(T)); \
                            else if (k >= 0)                                           \
                                memcpy(row, x + k * (long long)inner + s * W, c * sizeof(T)); \
                            else                                                       \
                                for (size_t w = 0; w < c; w++)                         \
                                    row[w] = outside;                                  \
                        }                                                              \
                    }                                                                  \
                    for (size_t s = 0; s < subs; s++)                                  \
                        FILTER(work + s * stride);                                     \
                    for (long long i = 0; i < n[0]; i++)                               \
                        for (size_t s = 0; s < subs; s++) {                            \
                            T *out = dst + first[0] + i * (long long)inner + s * W;    \
                            const T *row = RESULT(work + s * stride) + i * W;          \
                            size_t c = count - s * W < W ? count - s * W : W;          \
                            if (c == W)                                                \
                                memcpy(out, row, W * sizeof(T));                       \
                            else                                                       \
                                memcpy(out, row, c * sizeof(T));                       \
                        }                                                              \
                    continue;                                                          \
                }                                                                      \
                for (size_t s = 0; s < subs; s++) {                                    \
                    T *buf = work + s * stride, *acc = RESULT(buf);                    \
                    size_t w0 = s * W, c = count - w0 < W ? count - w0 : W, w = 0;     \
                    long long lo = 0, hi = M; /* rows inside every lane's line */      \
                    for (size_t u = 0; u < c; u++) {                                   \
                        lo = -g0[w0 + u] > lo ? -g0[w0 + u] : lo;                      \
                        hi = N - g0[w0 + u] < hi ? N - g0[w0 + u] : hi;                \
                    }                                                                  \
                    if (gather && hi > lo)                                             \
                        for (; w + G <= c; w += G) {                                   \
                            const T *line[G];                                          \
                            for (int k = 0; k < G; k++)                                \
                                line[k] = src + ((long long)first[w0 + w + k] - R - 1 + lo); \
                            gather(line, (size_t)(hi - lo), buf + lo * W + w, W);      \
                        }                                                              \
                    for (size_t u = 0; u < c; u++) {                                   \
                        const T *x = src + first[w0 + u] - (size_t)(g0[w0 + u] + R + 1) * inner; \
                        for (long long i = 0; i < M; i++) {                            \
                            if (u < w && i == lo) { /* transposed above */             \
                                i = hi - 1;                                            \
                                continue;                                              \
                            }                                                          \
                            long long k = dk_gauss_extend(g0[w0 + u] + i, N, bnd);     \
                            buf[i * W + u] = k >= 0 ? x[k * (long long)inner] : outside; \
                        }                                                              \
                    }                                                                  \
                    FILTER(buf);                                                       \
                    w = 0;                                                             \
                    if (scatter)                                                       \
                        for (; w + G <= c; w += G) {                                   \
                            T *line[G];                                                \
                            int same = 1;                                              \
                            for (int k = 0; k < G; k++) {                              \
                                line[k] = dst + first[w0 + w + k];                     \
                                same &= n[w0 + w + k] == n[w0 + w];                    \
                            }                                                          \
                            if (!same)                                                 \
                                break;                                                 \
                            scatter(acc + w, W, (size_t)n[w0 + w], line);              \
                        }                                                              \
                    for (; w < c; w++)                                                 \
                        for (long long i = 0; i < n[w0 + w]; i++)                      \
                            dst[first[w0 + w] + (size_t)i * inner] = acc[i * W + w];   \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }

DEFINE_IIR_AXIS(extended_axis_f32, float, IIR_LANES_F32, TRANSPOSE_F32, gather_f32_avx2, scatter_f32_avx2,
                iir_lanes_f32_avx2, iir_lanes_f32_base, rf_rows_f32_avx2, rf_rows_f32_base)
DEFINE_IIR_AXIS(extended_axis_f64, double, IIR_LANES_F64, TRANSPOSE_F64, gather_f64_avx2, scatter_f64_avx2,
                iir_lanes_f64_avx2, iir_lanes_f64_base, rf_rows_f64_avx2, rf_rows_f64_base)
#undef FILTER
#undef RESULT
