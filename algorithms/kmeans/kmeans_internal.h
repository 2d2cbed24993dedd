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

/* The seeding's distance pass and reads (seed.c), on the host or the
 * device: slots 0 .. 2 are n-float arrays. distance: slot out = 0 where
 * masked, else D(x, centre) (centre NULL: 1), times w_i when weighted, or
 * min(slot near, that) when near >= 0; blocks gets the sums per
 * DK_KMEANS_SEED_BLOCK points. Each sets the thread's error on failure. */
typedef struct dk_kmeans_seed_io {
    void *ctx;
    size_t n;
    int weighted;
    dk_status (*distance)(void *ctx, const float *centre, int near, int out, double *blocks);
    dk_status (*values)(void *ctx, int slot, size_t first, size_t count, float *values);
    dk_status (*point)(void *ctx, size_t i, float *x);
} dk_kmeans_seed_io;

/* The seeded initial centroids of s->desc.init (dk_kmeans_seed's definition). */
dk_status dk_kmeans_seed_run(const dk_kmeans_setup *s, const dk_kmeans_seed_io *io, float *centroids);
/* The same over host points (the reference's pass). */
dk_status dk_kmeans_seed_host(const dk_kmeans_setup *s, const float *points, const uint8_t *mask,
                              const float *weights, float *centroids);

#endif
