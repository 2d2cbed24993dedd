/* letkf inside libdakit: the setup (validated description, copied
 * coordinates, observation buckets) that plans and the reference share. */
#ifndef DAKIT_LETKF_INTERNAL_H
#define DAKIT_LETKF_INTERNAL_H

#include "../../core/internal.h"
#include <dakit/letkf.h>

/* Validates desc and builds its setup in one allocation (free() releases
 * it): the coordinates copied, the observations' positions sorted by
 * bucket. The buckets are cut over [span_lo, span_hi] (DK_LETKF_POS
 * values each) where given, else over the observations' own bounds.
 * Errors go to dk_last_error(NULL). variant is left as given. */
dk_status dk_letkf_setup_build(const dk_letkf_desc *desc, const double *span_lo, const double *span_hi,
                               dk_letkf_setup **setup);

/* Checks yo (finite) and r (finite, > 0), m values each; errors as above. */
dk_status dk_letkf_check_obs(size_t m, const double *yo, const double *r);

/* Checks count values of dtype for being finite; what names the array. */
dk_status dk_letkf_check_finite(dk_dtype dtype, const void *x, size_t count, const char *what);

#endif
