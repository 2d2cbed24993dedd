#ifndef DAKIT_GAUSS_INTERNAL_H
#define DAKIT_GAUSS_INTERNAL_H

#include <dakit/plugin.h>

#include "../../core/internal.h"

/* Validates desc and fills the shared precomputation; on failure sets the
 * thread's error and returns its status. */
dk_status dk_gauss_setup_make(const dk_gauss_desc *desc, dk_gauss_setup *setup);

#endif
