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
    for (int a = 0; a < d->ndim; a++)
        if (d->shape[a] > longest)
            longest = d->shape[a];
    void *work = malloc(2 * longest * esize);
    if (!work)
        return dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "gauss reference: cannot allocate %zu bytes",
                       2 * longest * esize);

    for (int a = 0; a < d->ndim; a++) {
        if (!(d->axes & (1u << a)))
            continue;
        dk_axis_view v = dk_axis_view_of(d, a);
        for (size_t o = 0; o < v.outer; o++) {
            for (size_t j = 0; j < v.inner; j++) {
                size_t first = o * v.n * v.inner + j;
                if (d->dtype == DK_F32)
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
