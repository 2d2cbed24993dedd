#ifndef DAKIT_GAUSS_INTERNAL_H
#define DAKIT_GAUSS_INTERNAL_H

#include <dakit/plugin.h>

#include "../../core/internal.h"

/* Validates desc and fills the shared precomputation; on failure sets the
 * thread's error and returns its status. */
dk_status dk_gauss_setup_make(const dk_gauss_desc *desc, dk_gauss_setup *setup);

/* deriche and vyv: the sections for sigma and the derivative order, and the reach their starts need
 * in dtype (recursive.c). */
dk_status dk_gauss_iir_make(dk_gauss_method method, int order_poles, int order, double sigma,
                            dk_dtype dtype, dk_gauss_iir *iir, size_t *reach);

/* The first filtered axis with a derivative order, or -1. */
static inline int dk_gauss_derivative_axis(const dk_gauss_desc *d)
{
    for (int a = 0; a < d->ndim && a < DK_MAX_DIMS; a++)
        if ((d->axes & (1u << a)) && d->order[a] != 0)
            return a;
    return -1;
}

/* missing.c. The plan's own state: the setup the plugin sees (first, so
 * that its address is the setup's) and what the core keeps beside it. */
typedef struct dk_gauss_state {
    dk_gauss_setup setup;
    dk_gauss_nan nan;
} dk_gauss_state;

/* DK_ERR_INVALID_ARGUMENT with how many NaN `in` holds and where the first
 * is, or DK_OK when there is none; `what` begins the sentence. */
dk_status dk_gauss_refuse_nan(dk_context *ctx, const dk_gauss_setup *s, const void *in, const char *what);

/* Filters a whole field of s's shape and dtype in host memory, in place. */
typedef dk_status (*dk_gauss_filter_fn)(void *arg, void *field);
/* Normalized convolution of `in` into `out` (host memory, in == out
 * allowed) with `filter` (DK_GAUSS_NAN_IGNORE). */
dk_status dk_gauss_smooth_missing(dk_context *ctx, const dk_gauss_setup *s, const void *in, void *out,
                                  dk_gauss_filter_fn filter, void *arg);

#endif
