/* Gauss with halos, between libdakit and libdakit-mpi only: the layer makes
 * a plan over its box that the plugin's execute_halo (dk_gauss_ops) may run
 * with the received halos in their own buffers. Not installed and not
 * public API; both libraries are built together. Failures set the
 * context's last error (dk_last_error) like every libdakit call. */
#ifndef DAKIT_CORE_HALO_H
#define DAKIT_CORE_HALO_H

#include <dakit/gauss.h>

/* 1 when the context's plugin filters desc along an axis with halos
 * (execute_halo in a table of generation 1, exact mode, rf, the zero or constant boundary). */
int dk_gauss_halo_offered(const dk_context *ctx, const dk_gauss_desc *desc);

/* dk_gauss_plan_create for a plan that dk_gauss_execute_halo runs with at
 * most halo_max[axis] values per side; desc.axes must be one axis. */
dk_status dk_gauss_plan_create_halo(dk_context *ctx, const dk_gauss_desc *desc, const size_t halo_max[DK_MAX_DIMS],
                                    dk_plan **plan);

/* One halo buffer: a dk_buffer of the plan's context, the halo starting
 * `offset` elements into it, `count` values per line (0: no halo, buffer
 * may be NULL). */
typedef struct dk_gauss_halo_side {
    const dk_buffer *buffer;
    size_t offset, count;
} dk_gauss_halo_side;

/* Filters the plan's one axis of `in` into `out` (distinct buffers of the
 * field's size), each line continued by the lower and upper halos
 * (dk_gauss_halo in dakit/gauss.h). */
dk_status dk_gauss_execute_halo(dk_plan *plan, const dk_buffer *in, dk_buffer *out, dk_gauss_halo_side lower,
                                dk_gauss_halo_side upper);

#endif
