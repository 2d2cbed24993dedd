/* gauss with missing values: NaN in the input refused with where the first
 * is, or smoothed around by normalized convolution (dk_gauss_nan in
 * dakit/gauss.h). Host memory only: both need to see the data. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gauss_internal.h"

/* Below this fraction of the filter's weight on valid values a point has no
 * estimate (NaN). */
#define MIN_VALID_WEIGHT 1e-6

static double value_at(const void *p, dk_dtype t, size_t i)
{
    return t == DK_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

static void set_at(void *p, dk_dtype t, size_t i, double v)
{
    if (t == DK_F32)
        ((float *)p)[i] = (float)v;
    else
        ((double *)p)[i] = v;
}

dk_status dk_gauss_refuse_nan(dk_context *ctx, const dk_gauss_setup *s, const void *in, const char *what)
{
    const dk_gauss_desc *d = &s->desc;
    size_t count = 0, first = 0;
    for (size_t i = 0; i < s->count; i++)
        if (isnan(value_at(in, d->dtype, i)) && count++ == 0)
            first = i;
    if (!count)
        return DK_OK;
    char where[96];
    int n = 0;
    size_t rest = first;
    size_t index[DK_MAX_DIMS];
    for (int a = d->ndim - 1; a >= 0; a--) {
        index[a] = rest % d->shape[a];
        rest /= d->shape[a];
    }
    for (int a = 0; a < d->ndim && n < (int)sizeof where; a++)
        n += snprintf(where + n, sizeof where - (size_t)n, "%s%zu", a ? ", " : "", index[a]);
    return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT,
                   "%s: the input holds %zu NaN value%s (the first at [%s]); smooth around them with nan policy "
                   "ignore (normalized convolution), or let them spread with propagate",
                   what, count, count == 1 ? "" : "s", where);
}

dk_status dk_gauss_smooth_missing(dk_context *ctx, const dk_gauss_setup *s, const void *in, void *out,
                                  dk_gauss_filter_fn filter, void *arg)
{
    int axis = dk_gauss_derivative_axis(&s->desc);
    if (axis >= 0)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT,
                       "gauss: nan policy ignore normalizes a smoothing; axis %d takes derivative order %d, "
                       "which it cannot normalize (fill the gaps first, or use nan policy propagate)",
                       axis, s->desc.order[axis]);
    dk_dtype t = s->desc.dtype;
    size_t n = s->count, es = dk_dtype_size(t);
    void *weight = malloc(n * es), *ones = malloc(n * es);
    if (!weight || !ones) {
        free(weight);
        free(ones);
        return dk_fail(ctx, DK_ERR_OUT_OF_MEMORY, "gauss: out of host memory for the weights of nan policy ignore");
    }
    for (size_t i = 0; i < n; i++) {
        double v = value_at(in, t, i);
        int valid = !isnan(v);
        set_at(weight, t, i, valid);
        set_at(ones, t, i, 1.0);
        set_at(out, t, i, valid ? v : 0.0); /* in may be out: read before written */
    }
    dk_status st = filter(arg, out);
    if (st == DK_OK)
        st = filter(arg, weight);
    if (st == DK_OK)
        st = filter(arg, ones);
    if (st == DK_OK)
        for (size_t i = 0; i < n; i++) {
            double w = value_at(weight, t, i), c = value_at(ones, t, i);
            int enough = c != 0.0 && fabs(w) >= MIN_VALID_WEIGHT * fabs(c);
            set_at(out, t, i, enough ? value_at(out, t, i) * (c / w) : NAN);
        }
    free(weight);
    free(ones);
    return st;
}

/* ---- the serial reference with a policy ---- */

static dk_status reference_filter(void *arg, void *field)
{
    return dk_gauss_reference(arg, field, field);
}

DK_API dk_status dk_gauss_reference_nan(const dk_gauss_desc *desc, dk_gauss_nan policy, const void *in, void *out)
{
    if (policy == DK_GAUSS_NAN_PROPAGATE)
        return dk_gauss_reference(desc, in, out);
    dk_gauss_setup setup;
    dk_status st = dk_gauss_setup_make(desc, &setup);
    if (st != DK_OK)
        return st;
    if (!in || !out)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "gauss reference: in and out must not be NULL");
    if (policy == DK_GAUSS_NAN_ERROR)
        return (st = dk_gauss_refuse_nan(NULL, &setup, in, "gauss reference")) != DK_OK
                   ? st
                   : dk_gauss_reference(desc, in, out);
    if (policy != DK_GAUSS_NAN_IGNORE)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "gauss: nan policy %d is not one of error (0), propagate (1), "
                       "ignore (2)", (int)policy);
    return dk_gauss_smooth_missing(NULL, &setup, in, out, reference_filter, (void *)desc);
}
