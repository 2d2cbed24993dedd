/* dakit cpu plugin, gauss: lines (or overlap-mode blocks) in lanes along any
 * axis, the path of every pass no other solver takes. */
#include "gauss.h"

/* One line's part in a batch: where its values start and its segment. */
typedef struct lane {
    size_t first; /* element index of the line's value 0 */
    dk_span window, keep;
} lane;

/* Lanes [t0, t0 + count) of the axis; lane t is segment `seg` of line
 * (o, j), numbered t = (o * segments + seg) * inner + j so that neighbouring
 * lanes are adjacent lines along a strided axis. */
static void lanes_of(const cpu_gauss_plan *p, int axis, dk_axis_view v, size_t t0, size_t count,
                     lane *out)
{
    size_t segments = p->segments[axis];
    for (size_t w = 0; w < count; w++) {
        size_t t = t0 + w;
        size_t j = t % v.inner, rest = t / v.inner;
        size_t seg = rest % segments, o = rest / segments;
        out[w].first = o * v.n * v.inner + j;
        segment_of(p, axis, seg, &out[w].window, &out[w].keep);
    }
}

/* Lanes that are adjacent lines with one segment: their values at each i are
 * one contiguous run in memory. */
static int lanes_contiguous(const lane *l, size_t count)
{
    for (size_t w = 1; w < count; w++)
        if (l[w].first != l[0].first + w || l[w].window.begin != l[0].window.begin ||
            l[w].window.end != l[0].window.end || l[w].keep.begin != l[0].keep.begin ||
            l[w].keep.end != l[0].keep.end)
            return 0;
    return 1;
}

/* Lanes [0, count) of a batch, all with windows of one length L: gathered
 * into buf (`width` lanes to a row), filtered by rf, and their kept parts
 * scattered to dst. */
#define DEFINE_FILTER_LANES(NAME, T)                                                   \
    static void NAME(const lane *l, size_t count, size_t width, size_t inner,          \
                     const T *src, T *dst, T *buf, T alpha, const dk_gauss_desc *d,    \
                     void (*rf)(T *, size_t, size_t, T, int, dk_boundary))             \
    {                                                                                  \
        size_t L = l[0].window.end - l[0].window.begin;                                \
        int rows = inner > 1 && lanes_contiguous(l, count);                            \
        if (rows) {                                                                    \
            const T *in = src + l[0].first + l[0].window.begin * inner;                \
            for (size_t i = 0; i < L; i++)                                             \
                memcpy(buf + i * width, in + i * inner, count * sizeof(T));            \
        } else {                                                                       \
            for (size_t w = 0; w < count; w++) {                                       \
                const T *in = src + l[w].first + l[w].window.begin * inner;            \
                for (size_t i = 0; i < L; i++)                                         \
                    buf[i * width + w] = in[i * inner];                                \
            }                                                                          \
        }                                                                              \
        rf(buf, L, width, alpha, d->K, d->boundary);                                   \
        if (rows) {                                                                    \
            T *out = dst + l[0].first;                                                 \
            size_t shift = l[0].window.begin;                                          \
            for (size_t i = l[0].keep.begin; i < l[0].keep.end; i++)                   \
                memcpy(out + i * inner, buf + (i - shift) * width, count * sizeof(T)); \
        } else {                                                                       \
            for (size_t w = 0; w < count; w++) {                                       \
                T *out = dst + l[w].first;                                             \
                size_t shift = l[w].window.begin;                                      \
                for (size_t i = l[w].keep.begin; i < l[w].keep.end; i++)               \
                    out[i * inner] = buf[(i - shift) * width + w];                     \
            }                                                                          \
        }                                                                              \
    }

/* One axis: batches of W lanes, shared among the threads. A batch never
 * straddles two groups of adjacent lines when there are at least W of them,
 * so its gather stays contiguous. */
#define DEFINE_FILTER_AXIS(NAME, T, W, FILTER_LANES, RF_AVX2, RF_BASE, RF_SINGLE)       \
    void NAME(const cpu_gauss_plan *p, int axis, const T *src, T *dst)          \
    {                                                                                  \
        const dk_gauss_desc *d = &p->setup.desc;                                       \
        dk_axis_view v = dk_axis_view_of(d, axis);                                     \
        T alpha = (T)p->setup.alpha[axis];                                             \
        size_t lanes_total = v.outer * p->segments[axis] * v.inner;                    \
        size_t group = v.inner >= W ? v.inner : lanes_total;                           \
        size_t per_group = div_up(group, W);                                           \
        size_t batches = lanes_total / group * per_group;                              \
        _Pragma("omp parallel num_threads(p->threads)")                                \
        {                                                                              \
            T *buf = (T *)p->buffers + (size_t)thread_index() * p->buffer_elems;       \
            _Pragma("omp for schedule(dynamic, 1)")                                    \
            for (size_t b = 0; b < batches; b++) {                                     \
                size_t in_group = (b % per_group) * W;                                 \
                size_t t0 = b / per_group * group + in_group;                          \
                size_t count = group - in_group < W ? group - in_group : W;            \
                lane l[W];                                                             \
                lanes_of(p, axis, v, t0, count, l);                                    \
                /* runs of lanes whose windows have one length */                      \
                for (size_t w0 = 0, w1; w0 < count; w0 = w1) {                         \
                    size_t L = l[w0].window.end - l[w0].window.begin;                  \
                    for (w1 = w0 + 1; w1 < count; w1++)                                \
                        if (l[w1].window.end - l[w1].window.begin != L)                \
                            break;                                                     \
                    if (p->lockstep) {                                                 \
                        FILTER_LANES(l + w0, w1 - w0, W, v.inner, src, dst, buf, alpha, \
                                     d, p->avx2 ? RF_AVX2 : RF_BASE);                  \
                    } else {                                                           \
                        for (size_t w = w0; w < w1; w++)                               \
                            FILTER_LANES(l + w, 1, 1, v.inner, src, dst, buf, alpha,   \
                                         d, RF_SINGLE);                                \
                    }                                                                  \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }

DEFINE_FILTER_LANES(filter_lanes_f32, float)
DEFINE_FILTER_LANES(filter_lanes_f64, double)

DEFINE_FILTER_AXIS(filter_axis_f32, float, LANES_F32, filter_lanes_f32, rf_lanes_f32_avx2,
                   rf_lanes_f32_base, rf_single_f32)
DEFINE_FILTER_AXIS(filter_axis_f64, double, LANES_F64, filter_lanes_f64, rf_lanes_f64_avx2,
                   rf_lanes_f64_base, rf_single_f64)
