#ifndef DAKIT_KMEANS_INTERNAL_H
#define DAKIT_KMEANS_INTERNAL_H

#include <dakit/kmeans.h>
#include <dakit/plugin.h>

#include "../../core/internal.h"

/* Validates desc and fills the shared setup; on failure sets the thread's
 * error and returns its status. */
dk_status dk_kmeans_setup_make(const dk_kmeans_desc *desc, dk_kmeans_setup *setup);

#endif
