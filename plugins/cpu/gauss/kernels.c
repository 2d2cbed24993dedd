/* dakit cpu plugin, gauss: the lockstep rf recursion and the AVX2
 * transposes that the solvers share (gauss.h). */
#include "gauss.h"

/* K iterations of the RF on n rows of ROW bytes, `stride` elements apart, in
 * the reference's order of operations (FMA contraction aside). A row is R
 * vectors V (or one scalar, for a single lane); `alpha * p + beta * x` keeps
 * one FMA, not a multiply and an FMA, on the recursion's critical path. */
#define DEFINE_RF(NAME, T, V, ROW, ATTR)                                               \
    ATTR void NAME(T *buf, size_t n, size_t stride, T alpha, int K,             \
                          dk_boundary boundary)                                        \
    {                                                                                  \
        enum { R = (ROW) / sizeof(V) };                                                \
        const T beta = (T)1 - alpha;                                                   \
        const size_t S = stride / (sizeof(V) / sizeof(T)); /* row stride in V */       \
        V *rows = (V *)buf, *last = rows + (n - 1) * S;                                \
        for (int k = 0; k < K; k++) {                                                  \
            V u[R], p[R];                                                              \
            _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                     \
                const V zero = {0};                                                    \
                u[r] = last[r];                                                        \
                p[r] = boundary == DK_BOUNDARY_CONSTANT ? rows[r] : zero;              \
            }                                                                          \
            for (size_t i = 0; i < n; i++) {                                           \
                V *row = rows + i * S;                                                 \
                _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                 \
                    p[r] = alpha * p[r] + beta * row[r];                               \
                    row[r] = p[r];                                                     \
                }                                                                      \
            }                                                                          \
            V *s = p; /* the backing pass starts from the advancing pass's end */      \
            _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                     \
                s[r] = boundary == DK_BOUNDARY_CONSTANT                                \
                           ? u[r] + (s[r] - u[r]) / ((T)1 + alpha)                     \
                           : beta * s[r];                                              \
                last[r] = s[r];                                                        \
            }                                                                          \
            for (size_t i = n - 1; i-- > 0;) {                                         \
                V *row = rows + i * S;                                                 \
                _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                 \
                    s[r] = alpha * s[r] + beta * row[r];                               \
                    row[r] = s[r];                                                     \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }

DEFINE_RF(rf_lanes_f32_base, float, f32x4, ROW_BYTES, )
DEFINE_RF(rf_lanes_f64_base, double, f64x2, ROW_BYTES, )
DEFINE_RF(rf_single_f32, float, float, sizeof(float), )
DEFINE_RF(rf_single_f64, double, double, sizeof(double), )

/* The same on the extended path's rows of IIR_ROW_BYTES (rf with scipy's modes). */
DEFINE_RF(rf_rows_f32_base, float, f32x4, IIR_ROW_BYTES, )
DEFINE_RF(rf_rows_f64_base, double, f64x2, IIR_ROW_BYTES, )

#ifdef HAVE_AVX2_KERNEL
DEFINE_RF(rf_lanes_f32_avx2, float, f32x8, ROW_BYTES, TARGET_AVX2)
DEFINE_RF(rf_lanes_f64_avx2, double, f64x4, ROW_BYTES, TARGET_AVX2)
DEFINE_RF(rf_rows_f32_avx2, float, f32x8, IIR_ROW_BYTES, TARGET_AVX2)
DEFINE_RF(rf_rows_f64_avx2, double, f64x4, IIR_ROW_BYTES, TARGET_AVX2)
#endif

#ifdef HAVE_AVX2_KERNEL
#include <immintrin.h>

/* Transposes an 8 x 8 block: r[k] becomes the k-th values of r[0..7]. */
TARGET_AVX2 static inline void transpose_f32x8(__m256 r[8])
{
    __m256 t[8], s[8];
    for (int k = 0; k < 8; k += 2) {
        t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
        t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
    }
    for (int k = 0; k < 8; k += 4) {
        s[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
        s[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);
        s[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
        s[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
    }
    for (int k = 0; k < 4; k++) {
        r[k] = _mm256_permute2f128_ps(s[k], s[k + 4], 0x20);
        r[k + 4] = _mm256_permute2f128_ps(s[k], s[k + 4], 0x31);
    }
}

/* Transposes a 4 x 4 block of doubles. */
TARGET_AVX2 static inline void transpose_f64x4(__m256d r[4])
{
    __m256d t0 = _mm256_unpacklo_pd(r[0], r[1]), t1 = _mm256_unpackhi_pd(r[0], r[1]);
    __m256d t2 = _mm256_unpacklo_pd(r[2], r[3]), t3 = _mm256_unpackhi_pd(r[2], r[3]);
    r[0] = _mm256_permute2f128_pd(t0, t2, 0x20);
    r[1] = _mm256_permute2f128_pd(t1, t3, 0x20);
    r[2] = _mm256_permute2f128_pd(t0, t2, 0x31);
    r[3] = _mm256_permute2f128_pd(t1, t3, 0x31);
}

/* G contiguous lines, values [0, m) of each, into G lanes of buf's rows
 * (`stride` apart), and back; blocks of G values, the rest one by one. */
#define DEFINE_TRANSPOSE(GATHER, SCATTER, T, VT, G, LOAD, STORE, TRANSPOSE)            \
    TARGET_AVX2 void GATHER(const T *const *line, size_t m, T *buf, size_t stride) \
    {                                                                                  \
        size_t i = 0;                                                                  \
        for (; i + G <= m; i += G) {                                                   \
            VT r[G];                                                                   \
            for (int k = 0; k < G; k++)                                                \
                r[k] = LOAD(line[k] + i);                                              \
            TRANSPOSE(r);                                                              \
            for (int k = 0; k < G; k++)                                                \
                STORE(buf + (i + k) * stride, r[k]);                                   \
        }                                                                              \
        for (; i < m; i++)                                                             \
            for (int k = 0; k < G; k++)                                                \
                buf[i * stride + k] = line[k][i];                                      \
    }                                                                                  \
    TARGET_AVX2 void SCATTER(const T *buf, size_t stride, size_t m, T *const *line) \
    {                                                                                  \
        size_t i = 0;                                                                  \
        for (; i + G <= m; i += G) {                                                   \
            VT r[G];                                                                   \
            for (int k = 0; k < G; k++)                                                \
                r[k] = LOAD(buf + (i + k) * stride);                                   \
            TRANSPOSE(r);                                                              \
            for (int k = 0; k < G; k++)                                                \
                STORE(line[k] + i, r[k]);                                              \
        }                                                                              \
        for (; i < m; i++)                                                             \
            for (int k = 0; k < G; k++)                                                \
                line[k][i] = buf[i * stride + k];                                      \
    }

DEFINE_TRANSPOSE(gather_f32_avx2, scatter_f32_avx2, float, __m256, 8, _mm256_loadu_ps,
                 _mm256_storeu_ps, transpose_f32x8)
DEFINE_TRANSPOSE(gather_f64_avx2, scatter_f64_avx2, double, __m256d, 4, _mm256_loadu_pd,
                 _mm256_storeu_pd, transpose_f64x4)
#endif
