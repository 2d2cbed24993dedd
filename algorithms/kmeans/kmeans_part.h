/* A kmeans plan over one rank's part of a distributed problem, and the
 * phases of dk_kmeans_ops (dakit/kmeans.h) on dk_buffers, between
 * libdakit and libdakit-mpi only (as core/comm.h): not installed, not
 * public API. Each call takes the context's device lock and, on failure,
 * sets the context's last error. */
#ifndef DAKIT_KMEANS_PART_H
#define DAKIT_KMEANS_PART_H

#include <dakit/kmeans.h>

/* Whether the context's plugin offers the three phases. */
int dk_kmeans_has_phases(const dk_context *ctx);

/* desc: this part's points (n may be 0 and below k); with rows * cols == n,
 * n > 0 and lambda < 1 a band of rows under the contiguity cost. d, k,
 * window, tol and lambda as checked for the whole problem. */
dk_status dk_kmeans_part_plan_create(dk_context *ctx, const dk_kmeans_desc *desc, dk_plan **plan);

/* The phases (dakit/kmeans.h); mask, prev and next may be NULL. */
dk_status dk_kmeans_assign_partial(dk_plan *plan, const dk_buffer *points, const dk_buffer *mask,
                                   const dk_buffer *centroids, const dk_buffer *prev, dk_buffer *next,
                                   dk_buffer *labels, dk_buffer *sums, const dk_buffer *state);
dk_status dk_kmeans_update(dk_plan *plan, const dk_buffer *sums, dk_buffer *centroids, dk_buffer *state);
dk_status dk_kmeans_objective(dk_plan *plan, const dk_buffer *points, const dk_buffer *labels,
                              const dk_buffer *centroids, dk_buffer *out);

#endif
