/* dakit cpu plugin, gauss: exact mode's own path (rf, dakit's boundary
 * rules), where choose_exact_path says it applies. */
#include "gauss.h"

/* Exact mode: where this path applies, and the windows, pieces and lanes
 * per group along `axis`. Along a strided axis with at least LANES adjacent
 * lines, a group is `width` adjacent lines (several rows of the lane buffer
 * side by side: long runs to read); otherwise LANES lines, transposed. */
int choose_exact_path(cpu_gauss_plan *p, int axis, size_t esize)
{
    dk_axis_view v = dk_axis_view_of(&p->setup.desc, axis);
    size_t n = v.n, h = p->setup.halo[axis], lanes = p->lanes;
    size_t L = EXACT_WINDOW_BYTES / ROW_BYTES;
    if (L < 4 * h)
        L = 4 * h;
    if (L >= n)
        L = n;
    if (2 * L * lanes * esize > LANE_BUFFER_LIMIT)
        return 0;
    size_t width = lanes;
    p->rows[axis] = v.inner >= lanes;
    if (p->rows[axis]) {
        size_t fit = EXACT_BLOCK_BYTES / (L * esize) / lanes * lanes;
        size_t most = div_up(v.inner, lanes) * lanes;
        width = fit < lanes ? lanes : fit > most ? most : fit;
    }
    size_t lines = v.outer * v.inner, wanted = (size_t)p->threads * BATCHES_PER_THREAD;
    size_t groups = p->rows[axis] ? v.outer * div_up(v.inner, width) : div_up(lines, lanes);
    size_t pieces = 1;
    if (groups < wanted)
        pieces = p->rows[axis] ? div_up(wanted, groups) : div_up(wanted * lanes, lines);
    if (pieces > n / (2 * L)) /* a piece is at least two windows long */
        pieces = n / (2 * L) ? n / (2 * L) : 1;
    p->exact[axis] = 1;
    p->window[axis] = L;
    p->segments[axis] = pieces;
    p->width[axis] = width;
    return 1;
}

/* Window s of the lanes l[0, count) into buf (LANES to a row): lanes past
 * their last window are left as they are. Contiguous lines go through the
 * AVX2 transpose, G at a time, where all G have a window s. */
#define DEFINE_EXACT_LANES_IO(GATHER_NAME, SCATTER_NAME, T, LANES, G, GATHER_G, SCATTER_G) \
    static void GATHER_NAME(const cpu_gauss_plan *p, int axis, const exact_lane *l,    \
                            size_t count, size_t s, const T *src, T *buf)              \
    {                                                                                  \
        size_t L = p->window[axis];                                                    \
        size_t inner = dk_axis_view_of(&p->setup.desc, axis).inner;                    \
        void (*const gather)(const T *const *, size_t, T *, size_t) = GATHER_G;        \
        size_t w = 0;                                                                  \
        if (gather && p->avx2 && inner == 1) {                                         \
            for (; w + G <= count; w += G) {                                           \
                const T *line[G];                                                      \
                int all = 1;                                                           \
                for (int k = 0; k < G; k++) {                                          \
                    size_t start;                                                      \
                    dk_span keep;                                                      \
                    all &= s < l[w + k].count;                                         \
                    if (!all)                                                          \
                        break;                                                         \
                    exact_window(&l[w + k], s, &start, &keep);                   \
                    line[k] = src + l[w + k].first + start;                            \
                }                                                                      \
                if (!all)                                                              \
                    break;                                                             \
                gather(line, L, buf + w, LANES);                                       \
            }                                                                          \
        }                                                                              \
        for (; w < count; w++) {                                                       \
            if (s >= l[w].count)                                                       \
                continue;                                                              \
            size_t start;                                                              \
            dk_span keep;                                                              \
            exact_window(&l[w], s, &start, &keep);                               \
            const T *in = src + l[w].first + start * inner;                            \
            for (size_t i = 0; i < L; i++)                                             \
                buf[i * LANES + w] = in[i * inner];                                    \
        }                                                                              \
    }                                                                                  \
    static void SCATTER_NAME(const cpu_gauss_plan *p, int axis, const exact_lane *l,   \
                             size_t count, size_t s, const T *buf, T *dst)             \
    {                                                                                  \
        size_t inner = dk_axis_view_of(&p->setup.desc, axis).inner;                    \
        void (*const scatter)(const T *, size_t, size_t, T *const *) = SCATTER_G;      \
        size_t w = 0;                                                                  \
        if (scatter && p->avx2 && inner == 1) {                                        \
            for (; w + G <= count; w += G) {                                           \
                T *line[G];                                                            \
                size_t from = 0, to = 0;                                               \
                int same = 1;                                                          \
                for (int k = 0; k < G && same; k++) {                                  \
                    size_t start;                                                      \
                    dk_span keep;                                                      \
                    same = s < l[w + k].count;                                         \
                    if (!same)                                                         \
                        break;                                                         \
                    exact_window(&l[w + k], s, &start, &keep);                   \
                    if (k == 0)                                                        \
                        from = keep.begin - start, to = keep.end - start;              \
                    same = keep.begin - start == from && keep.end - start == to;       \
                    line[k] = dst + l[w + k].first + keep.begin;                       \
                }                                                                      \
                if (!same)                                                             \
                    break;                                                             \
                scatter(buf + from * LANES + w, LANES, to - from, line);               \
            }                                                                          \
        }                                                                              \
        for (; w < count; w++) {                                                       \
            if (s >= l[w].count)                                                       \
                continue;                                                              \
            size_t start;                                                              \
            dk_span keep;                                                              \
            exact_window(&l[w], s, &start, &keep);                               \
            T *out = dst + l[w].first;                                                 \
            for (size_t i = keep.begin; i < keep.end; i++)                             \
                out[i * inner] = buf[(i - start) * LANES + w];                         \
        }                                                                              \
    }

DEFINE_EXACT_LANES_IO(exact_gather_f32, exact_scatter_f32, float, LANES_F32, TRANSPOSE_F32,
                      gather_f32_avx2, scatter_f32_avx2)
DEFINE_EXACT_LANES_IO(exact_gather_f64, exact_scatter_f64, double, LANES_F64, TRANSPOSE_F64,
                      gather_f64_avx2, scatter_f64_avx2)

/* One axis in exact mode: groups of lanes shared among the threads, each
 * walking its pieces window by window through two buffers (the next window
 * is read before this one is written). */
#define DEFINE_EXACT_AXIS(NAME, T, LANES, GATHER, SCATTER, RF_AVX2, RF_BASE)            \
    void NAME(const cpu_gauss_plan *p, int axis, const T *src, T *dst)                 \
    {                                                                                  \
        const dk_gauss_desc *d = &p->setup.desc;                                       \
        dk_axis_view v = dk_axis_view_of(d, axis);                                     \
        const T alpha = (T)p->setup.alpha[axis];                                       \
        const size_t L = p->window[axis];                                              \
        const size_t pieces = p->segments[axis], width = p->width[axis];               \
        const int rows = p->rows[axis];                                                \
        void (*rf)(T *, size_t, size_t, T, int, dk_boundary) = p->avx2 ? RF_AVX2 : RF_BASE; \
        size_t blocks = div_up(v.inner, width), lanes_total = v.outer * v.inner * pieces; \
        size_t groups = rows ? v.outer * pieces * blocks : div_up(lanes_total, LANES); \
        _Pragma("omp parallel num_threads(p->threads)")                                \
        {                                                                              \
            T *buf[2];                                                                 \
            buf[0] = (T *)p->buffers + (size_t)thread_index() * p->buffer_elems;       \
            buf[1] = buf[0] + L * width;                                               \
            _Pragma("omp for schedule(dynamic, 1)")                                    \
            for (size_t g = 0; g < groups; g++) {                                      \
                if (rows) {                                                            \
                    /* adjacent lines: window s is L runs of `count` values */        \
                    size_t cb = g % blocks, rest = g / blocks;                         \
                    size_t piece = rest % pieces, o = rest / pieces;                   \
                    size_t count = v.inner - cb * width < width ? v.inner - cb * width : width; \
                    exact_lane l = exact_lane_of(p, axis, o * v.n * v.inner + cb * width, piece); \
                    size_t start, next;                                                \
                    dk_span keep, unused;                                              \
                    exact_window(&l, 0, &start, &keep);                          \
                    for (size_t i = 0; i < L; i++)                                     \
                        memcpy(buf[0] + i * width, src + l.first + (start + i) * v.inner, \
                               count * sizeof(T));                                     \
                    for (size_t s = 0; s < l.count; s++) {                             \
                        T *cur = buf[s & 1], *other = buf[(s & 1) ^ 1];                \
                        for (size_t c = 0; c < count; c += LANES)                      \
                            rf(cur + c, L, width, alpha, d->K, d->boundary);           \
                        if (s + 1 < l.count) {                                         \
                            exact_window(&l, s + 1, &next, &unused);             \
                            for (size_t i = 0; i < L; i++)                             \
                                memcpy(other + i * width,                              \
                                       src + l.first + (next + i) * v.inner,           \
                                       count * sizeof(T));                             \
                        }                                                              \
                        for (size_t i = keep.begin; i < keep.end; i++)                 \
                            memcpy(dst + l.first + i * v.inner, cur + (i - start) * width, \
                                   count * sizeof(T));                                 \
                        if (s + 1 < l.count)                                           \
                            exact_window(&l, s + 1, &start, &keep);              \
                    }                                                                  \
                    continue;                                                          \
                }                                                                      \
                /* LANES lines or pieces, transposed */                               \
                size_t t0 = g * LANES;                                                 \
                size_t count = lanes_total - t0 < LANES ? lanes_total - t0 : LANES;    \
                exact_lane l[LANES];                                                   \
                size_t windows = 0;                                                    \
                for (size_t w = 0; w < count; w++) {                                   \
                    size_t t = t0 + w, line = t / pieces;                              \
                    size_t o = line / v.inner, j = line % v.inner;                     \
                    l[w] = exact_lane_of(p, axis, o * v.n * v.inner + j, t % pieces);  \
                    if (l[w].count > windows)                                          \
                        windows = l[w].count;                                          \
                }                                                                      \
                GATHER(p, axis, l, count, 0, src, buf[0]);                             \
                for (size_t s = 0; s < windows; s++) {                                 \
                    T *cur = buf[s & 1], *other = buf[(s & 1) ^ 1];                    \
                    rf(cur, L, LANES, alpha, d->K, d->boundary);                       \
                    if (s + 1 < windows)                                               \
                        GATHER(p, axis, l, count, s + 1, src, other);                  \
                    SCATTER(p, axis, l, count, s, cur, dst);                           \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }

DEFINE_EXACT_AXIS(exact_axis_f32, float, LANES_F32, exact_gather_f32, exact_scatter_f32,
                  rf_lanes_f32_avx2, rf_lanes_f32_base)
DEFINE_EXACT_AXIS(exact_axis_f64, double, LANES_F64, exact_gather_f64, exact_scatter_f64,
                  rf_lanes_f64_avx2, rf_lanes_f64_base)
