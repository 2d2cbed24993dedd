#ifndef DAKIT_ENKF_INTERNAL_H
#define DAKIT_ENKF_INTERNAL_H

#include <dakit/plugin.h>

#include "../../core/internal.h"

/* Validates desc and fills *setup with copies of c and H (columns sorted
 * within rows) and the support; scheme is the one desc.variant names (0 when
 * it is NULL). On failure sets the thread's error and returns its status. */
dk_status dk_enkf_setup_make(const dk_enkf_desc *desc, dk_enkf_setup *setup);
void dk_enkf_setup_free(dk_enkf_setup *setup);

/* The scheme a variant name performs ("banded-simt": banded), or 0. */
dk_enkf_scheme dk_enkf_scheme_of(const char *variant);
/* The cost model: the first variant in `offered` (NULL-terminated) of the
 * cheapest scheme, or NULL when none of them names a scheme. */
const char *dk_enkf_pick_variant(const dk_enkf_setup *setup, const char *const *offered);

/* y, r, inflation checks shared by the API and the reference. */
dk_status dk_enkf_check_obs(size_t m, const double *y, const double *r, double inflation);
/* y_j + eps_jl, M x L, malloc'ed; NULL when out of memory. */
double *dk_enkf_perturbed_obs(size_t m, size_t L, const double *y, const double *r, uint64_t seed);

#endif
