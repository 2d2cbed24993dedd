/* The enkf phases libdakit-mpi runs between its collectives (the
 * dk_enkf_ops entries cov_rows, inflate and update, dakit/enkf.h), behind
 * the device lock with buffers turned into the plugin's handles. Between
 * libdakit and libdakit-mpi only: not installed, not public API. Each
 * call sets the context's last error on failure, like every libdakit call. */
#ifndef DAKIT_ENKF_PARTS_H
#define DAKIT_ENKF_PARTS_H

#include <dakit/enkf.h>

/* Whether the plan's backend offers the three phases. */
int dk_enkf_has_parts(const dk_plan *plan);
/* The plan's grid: {1, n} (1-D) or {nx, ny}. */
void dk_enkf_grid(const dk_plan *plan, size_t grid[2]);

dk_status dk_enkf_cov_rows(dk_plan *plan, const dk_buffer *e, const dk_enkf_box *own, dk_buffer *pht,
                           dk_buffer *part, size_t at, const dk_buffer *x);
dk_status dk_enkf_inflate(dk_plan *plan, const dk_buffer *x, dk_dtype xt, size_t count, double inflation,
                          dk_buffer *X, dk_buffer *e);
dk_status dk_enkf_update(dk_plan *plan, const dk_buffer *sums, size_t at, const double *d, const double *r,
                         const dk_buffer *pht, const dk_buffer *X, size_t count, dk_buffer *x, dk_dtype xt);

#endif
