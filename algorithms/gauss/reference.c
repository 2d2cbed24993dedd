/* The serial reference for gauss: the definition every backend is tested
 * against. Written for clarity, in the data's own precision, so that a
 * backend that does the same arithmetic in another order differs from it by
 * rounding alone. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gauss_internal.h"

/* One K-iterated RF over n values spaced `stride` apart. The boundary rule
 * applies at both ends of whatever span is given: the line's true ends in
 * exact mode, and also a block window's artificial ends in overlap mode. */
#define DEFINE_RF_SPAN(NAME, T)                                                        \
    static void NAME(T *x, size_t n, ptrdiff_t stride, T alpha, int K,                 \
                     dk_boundary boundary)                                             \
    {                                                                                  \
        const T beta = (T)1 - alpha;                                                   \
        for (int k = 0; k < K; k++) {                                                  \
            T u = x[(n - 1) * stride];                                                 \
            T p = boundary == DK_BOUNDARY_CONSTANT ? x[0] : (T)0;                      \
            for (size_t i = 0; i < n; i++) {                                           \
                p = beta * x[i * stride] + alpha * p;                                  \
                x[i * stride] = p;                                                     \
            }                                                                          \
            T s;                                                                       \
            size_t last = n - 1;                                                       \
            if (boundary == DK_BOUNDARY_CONSTANT) {                                    \
                s = u + (x[last * stride] - u) / ((T)1 + alpha);                       \
            } else {                                                                   \
                s = beta * x[last * stride];                                           \
            }                                                                          \
            x[last * stride] = s;                                                      \
            for (size_t i = last; i-- > 0;) {                                          \
                s = beta * x[i * stride] + alpha * s;                                  \
                x[i * stride] = s;                                                     \
            }                                                                          \
        }                                                                              \
    }

DEFINE_RF_SPAN(rf_span_f32, float)
DEFINE_RF_SPAN(rf_span_f64, double)

/* Filters one line (n values, `stride` apart) in place. Exact mode: the
 * whole line is one span. Overlap mode: block b of dk_gauss_block's decomposition
 * is filtered over its window and only its own values are kept. */
#define DEFINE_RF_LINE(NAME, T, SPAN)                                                  \
    static int NAME(T *line, size_t n, ptrdiff_t stride, T alpha,                      \
                    const dk_gauss_desc *d, T *work)                                   \
    {                                                                                  \
        if (d->mode == DK_GAUSS_EXACT) {                                               \
            SPAN(line, n, stride, alpha, d->K, d->boundary);                           \
            return 0;                                                                  \
        }                                                                              \
        size_t blocks = dk_gauss_line_blocks(n, d->blocks);                            \
        T *result = work + n; /* results kept apart: windows read the input */         \
        for (size_t b = 0; b < blocks; b++) {                                          \
            dk_span blk = dk_gauss_block(n, blocks, b);                                \
            dk_span win = dk_gauss_window(blk, d->overlap, n);                         \
            for (size_t i = win.begin; i < win.end; i++)                               \
                work[i - win.begin] = line[i * stride];                                \
            SPAN(work, win.end - win.begin, 1, alpha, d->K, d->boundary);              \
            for (size_t i = blk.begin; i < blk.end; i++)                               \
                result[i] = work[i - win.begin];                                       \
        }                                                                              \
        for (size_t i = 0; i < n; i++)                                                 \
            line[i * stride] = result[i];                                              \
        return 0;                                                                      \
    }

DEFINE_RF_LINE(rf_line_f32, float, rf_span_f32)
DEFINE_RF_LINE(rf_line_f64, double, rf_span_f64)

/* Value j of a line continued by the boundary mode (any j). */
#define DEFINE_EXT(NAME, T)                                                            \
    static T NAME(const T *x, long long j, long long n, int boundary, T cval)          \
    {                                                                                  \
        long long k = dk_gauss_extend(j, n, boundary);                                 \
        return k >= 0 ? x[k] : boundary == DK_BOUNDARY_CVAL ? cval : (T)0;             \
    }

DEFINE_EXT(ext_f32, float)
DEFINE_EXT(ext_f64, double)

/* deriche / vyv on one line: x holds the line's n input values (contiguous),
 * the result goes to y[i * stride]; see dk_gauss_iir for the recursions and
 * where they start. The sections run side by side; the causal sum goes
 * through y and the anti-causal one is added to it, in this order, which
 * the backends follow. */
#define DEFINE_IIR_LINE(NAME, T, EXT)                                                  \
    static void NAME(const T *x, T *y, size_t n, ptrdiff_t stride,                     \
                     const dk_gauss_iir *f, size_t reach, int boundary, T cval)        \
    {                                                                                  \
        const long long N = (long long)n, R = (long long)reach;                        \
        const int S = f->count;                                                        \
        T b0[DK_GAUSS_MAX_SECTIONS], b1[DK_GAUSS_MAX_SECTIONS];                        \
        T a1[DK_GAUSS_MAX_SECTIONS], a2[DK_GAUSS_MAX_SECTIONS];                        \
        T c1[DK_GAUSS_MAX_SECTIONS], c2[DK_GAUSS_MAX_SECTIONS];                        \
        T s1[DK_GAUSS_MAX_SECTIONS], s2[DK_GAUSS_MAX_SECTIONS];                        \
        for (int k = 0; k < S; k++) {                                                  \
            b0[k] = (T)f->b0[k], b1[k] = (T)f->b1[k];                                  \
            a1[k] = (T)f->a1[k], a2[k] = (T)f->a2[k];                                  \
            c1[k] = (T)f->c1[k], c2[k] = (T)f->c2[k];                                  \
            s1[k] = s2[k] = 0;                                                         \
        }                                                                              \
        T prev = EXT(x, -R - 1, N, boundary, cval);                                    \
        for (long long j = -R; j < N; j++) {                                           \
            T cur = EXT(x, j, N, boundary, cval), sum = 0;                             \
            for (int k = 0; k < S; k++) {                                              \
                T v = b0[k] * cur + b1[k] * prev - a1[k] * s1[k] - a2[k] * s2[k];      \
                s2[k] = s1[k];                                                         \
                s1[k] = v;                                                             \
                sum += v;                                                              \
            }                                                                          \
            prev = cur;                                                                \
            if (j >= 0)                                                                \
                y[j * stride] = sum;                                                   \
        }                                                                              \
        for (int k = 0; k < S; k++)                                                    \
            s1[k] = s2[k] = 0;                                                         \
        T next = EXT(x, N + R, N, boundary, cval), after = EXT(x, N + R + 1, N, boundary, cval); \
        for (long long j = N - 1 + R; j >= 0; j--) {                                   \
            T sum = 0;                                                                 \
            for (int k = 0; k < S; k++) {                                              \
                T v = c1[k] * next + c2[k] * after - a1[k] * s1[k] - a2[k] * s2[k];    \
                s2[k] = s1[k];                                                         \
                s1[k] = v;                                                             \
                sum += v;                                                              \
            }                                                                          \
            after = next;                                                              \
            next = EXT(x, j, N, boundary, cval);                                       \
            if (j < N)                                                                 \
                y[j * stride] = y[j * stride] + sum;                                   \
        }                                                                              \
    }

DEFINE_IIR_LINE(iir_line_f32, float, ext_f32)
DEFINE_IIR_LINE(iir_line_f64, double, ext_f64)

/* rf with one of scipy's modes on one line: the window [-reach, n + reach)
 * of the continued input, filtered with the zero rule, its middle kept.
 * work holds n + 2 reach values after the line's own n. */
#define DEFINE_RF_EXTENDED(NAME, T, EXT, SPAN)                                         \
    static void NAME(const T *x, T *y, size_t n, ptrdiff_t stride, T alpha, int K,     \
                     size_t reach, int boundary, T cval, T *work)                      \
    {                                                                                  \
        long long N = (long long)n, R = (long long)reach;                              \
        for (long long j = -R; j < N + R; j++)                                         \
            work[j + R] = EXT(x, j, N, boundary, cval);                                \
        SPAN(work, n + 2 * reach, 1, alpha, K, DK_BOUNDARY_ZERO);                      \
        for (size_t i = 0; i < n; i++)                                                 \
            y[i * stride] = work[i + reach];                                           \
    }

DEFINE_RF_EXTENDED(rf_extended_f32, float, ext_f32, rf_span_f32)
DEFINE_RF_EXTENDED(rf_extended_f64, double, ext_f64, rf_span_f64)

/* One extended line of `out` (first, n values stride apart), through work. */
static void extended_line(const dk_gauss_setup *setup, int a, void *out, size_t first, size_t n,
                          ptrdiff_t stride, void *work)
{
    const dk_gauss_desc *d = &setup->desc;
    if (d->dtype == DK_F32) {
        float *y = (float *)out + first, *x = work;
        for (size_t i = 0; i < n; i++)
            x[i] = y[i * stride];
        if (d->method == DK_GAUSS_RF)
            rf_extended_f32(x, y, n, stride, (float)setup->alpha[a], d->K, setup->reach[a],
                            d->boundary, (float)d->cval, x + n);
        else
            iir_line_f32(x, y, n, stride, &setup->iir[a], setup->reach[a], d->boundary,
                         (float)d->cval);
    } else {
        double *y = (double *)out + first, *x = work;
        for (size_t i = 0; i < n; i++)
            x[i] = y[i * stride];
        if (d->method == DK_GAUSS_RF)
            rf_extended_f64(x, y, n, stride, setup->alpha[a], d->K, setup->reach[a], d->boundary,
                            d->cval, x + n);
        else
            iir_line_f64(x, y, n, stride, &setup->iir[a], setup->reach[a], d->boundary, d->cval);
    }
}

DK_API dk_status dk_gauss_reference(const dk_gauss_desc *desc, const void *in, void *out)
{
    dk_gauss_setup setup;
    dk_status st = dk_gauss_setup_make(desc, &setup);
    if (st != DK_OK)
        return st;
    if (!in || !out)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "gauss reference: in and out must not be NULL");
    const dk_gauss_desc *d = &setup.desc;
    size_t esize = dk_dtype_size(d->dtype);
    if (in != out)
        memmove(out, in, setup.count * esize);

    size_t longest = 0;
    for (int a = 0; a < d->ndim; a++) {
        size_t need = 2 * d->shape[a] + 2 * setup.reach[a];
        if (need > longest)
            longest = need;
    }
    void *work = malloc(longest * esize);
    if (!work)
        return dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "gauss reference: cannot allocate %zu bytes",
                       longest * esize);

    for (int a = 0; a < d->ndim; a++) {
        if (!(d->axes & (1u << a)))
            continue;
        dk_axis_view v = dk_axis_view_of(d, a);
        for (size_t o = 0; o < v.outer; o++) {
            for (size_t j = 0; j < v.inner; j++) {
                size_t first = o * v.n * v.inner + j;
                if (setup.extended[a])
                    extended_line(&setup, a, out, first, v.n, (ptrdiff_t)v.inner, work);
                else if (d->dtype == DK_F32)
                    rf_line_f32((float *)out + first, v.n, (ptrdiff_t)v.inner,
                                (float)setup.alpha[a], d, work);
                else
                    rf_line_f64((double *)out + first, v.n, (ptrdiff_t)v.inner,
                                setup.alpha[a], d, work);
            }
        }
    }
    free(work);
    return DK_OK;
}

/* The sampled Gaussian, normalized, along one line of `y` (double). */
static void direct_line(const double *x, double *y, size_t n, ptrdiff_t stride, const double *g,
                        long long radius, int boundary, double cval)
{
    for (long long i = 0; i < (long long)n; i++) {
        double acc = 0;
        for (long long m = -radius; m <= radius; m++) {
            long long k = dk_gauss_extend(i - m, (long long)n, boundary);
            double v = k >= 0 ? x[k] : boundary == DK_BOUNDARY_CVAL ? cval : 0.0;
            acc += g[m + radius] * v;
        }
        y[i * stride] = acc;
    }
}

DK_API dk_status dk_gauss_direct(const dk_gauss_desc *desc, const void *in, void *out)
{
    dk_gauss_desc d;
    if (!desc || !in || !out)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "gauss direct: desc, in and out must not be NULL");
    d = *desc;
    int order[DK_MAX_DIMS];
    for (int a = 0; a < DK_MAX_DIMS; a++) {
        order[a] = d.order[a];
        if ((d.axes & (1u << a)) && (order[a] < 0 || order[a] > 2))
            return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                           "gauss direct: order for axis %d is %d; it must be 0, 1 or 2", a, order[a]);
        d.order[a] = 0;
    }
    d.method = DK_GAUSS_RF; /* only shape, sigma, dtype, boundary and order matter here */
    d.mode = DK_GAUSS_EXACT;
    dk_gauss_setup setup;
    dk_status st = dk_gauss_setup_make(&d, &setup);
    if (st != DK_OK)
        return st;
    size_t count = setup.count;
    double *field = malloc(count * sizeof *field);
    size_t longest = 0;
    for (int a = 0; a < d.ndim; a++)
        longest = d.shape[a] > longest ? d.shape[a] : longest;
    double *line = malloc(longest * sizeof *line);
    if (!field || !line) {
        free(field);
        free(line);
        return dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "gauss direct: out of host memory");
    }
    for (size_t k = 0; k < count; k++)
        field[k] = d.dtype == DK_F32 ? (double)((const float *)in)[k] : ((const double *)in)[k];
    for (int a = 0; a < d.ndim && st == DK_OK; a++) {
        if (!(d.axes & (1u << a)))
            continue;
        long long radius = (long long)ceil(12.0 * d.sigma[a]);
        double *g = malloc((size_t)(2 * radius + 1) * sizeof *g), sum = 0;
        if (!g) {
            st = dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "gauss direct: out of host memory");
            break;
        }
        for (long long m = -radius; m <= radius; m++)
            sum += g[m + radius] = exp(-0.5 * (double)m * (double)m / (d.sigma[a] * d.sigma[a]));
        /* derivatives as scipy.ndimage: the normalized Gaussian times the
         * polynomial its derivative brings, -m/s^2 or m^2/s^4 - 1/s^2 */
        double s2 = d.sigma[a] * d.sigma[a];
        for (long long m = -radius; m <= radius; m++) {
            double x = (double)m, poly = order[a] == 1 ? -x / s2 : order[a] == 2 ? x * x / (s2 * s2) - 1.0 / s2 : 1.0;
            g[m + radius] = g[m + radius] / sum * poly;
        }
        dk_axis_view v = dk_axis_view_of(&d, a);
        for (size_t o = 0; o < v.outer; o++)
            for (size_t j = 0; j < v.inner; j++) {
                double *y = field + o * v.n * v.inner + j;
                for (size_t i = 0; i < v.n; i++)
                    line[i] = y[i * v.inner];
                direct_line(line, y, v.n, (ptrdiff_t)v.inner, g, radius, d.boundary, d.cval);
            }
        free(g);
    }
    if (st == DK_OK)
        for (size_t k = 0; k < count; k++) {
            if (d.dtype == DK_F32)
                ((float *)out)[k] = (float)field[k];
            else
                ((double *)out)[k] = field[k];
        }
    free(field);
    free(line);
    return st;
}
