#ifndef DAKIT_KMEANS_INTERNAL_H
#define DAKIT_KMEANS_INTERNAL_H

#include <dakit/kmeans.h>
#include <dakit/plugin.h>

#include "../../core/internal.h"

/* Validates desc and fills the shared setup; on failure sets the thread's
 * error and returns its status. */
dk_status dk_kmeans_setup_make(const dk_kmeans_desc *desc, dk_kmeans_setup *setup);

/* A plan of ctx's kmeans ops from a made setup (its variant picked): the
 * one place a kmeans plan is handed to its plugin. what names the plan in
 * the sentence of a failure. */
dk_status dk_kmeans_plan_from_setup(dk_context *ctx, const dk_kmeans_ops *ops, const dk_kmeans_setup *setup,
                                    const char *what, dk_plan **plan);

#endif
