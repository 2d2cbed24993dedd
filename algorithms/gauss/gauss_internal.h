#ifndef DAKIT_GAUSS_INTERNAL_H
#define DAKIT_GAUSS_INTERNAL_H

#include <dakit/plugin.h>

#include "../../core/internal.h"

/* Validates desc and fills the shared precomputation; on failure sets the
 * thread's error and returns its status. */
dk_status dk_gauss_setup_make(const dk_gauss_desc *desc, dk_gauss_setup *setup);

/* deriche and vyv: the sections for sigma and the reach their starts need
 * in dtype (recursive.c). */
dk_status dk_gauss_iir_make(dk_gauss_method method, int order_poles, double sigma, dk_dtype dtype,
                            dk_gauss_iir *iir, size_t *reach);

#endif
