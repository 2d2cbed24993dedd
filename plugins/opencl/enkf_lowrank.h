/* The opencl enkf's lowrank scheme (enkf_lowrank.c), as enkf.c calls it:
 * the plan factors C ~= Q T Q^T with C applied by enkf.c's fft scheme, and
 * each product runs the kernels of enkf_lowrank.cl. */
#ifndef DAKIT_OPENCL_ENKF_LOWRANK_H
#define DAKIT_OPENCL_ENKF_LOWRANK_H

#include "opencl_plugin.h"

typedef struct dk_opencl_lowrank dk_opencl_lowrank;

/* y = C w for `columns` host vectors of N doubles each (column c at c * N). */
typedef dk_status (*dk_opencl_apply_c)(void *self, const double *w, double *y, size_t columns, dk_msg *msg);

/* The factorisation and the product's arrays; prog is the enkf program
 * (enkf_lowrank.cl is one of its sources), indptr/indices/values H on the
 * device as enkf.c keeps it (int64 CSR). */
dk_status dk_opencl_lowrank_create(dk_opencl_device *dev, cl_program prog, const dk_enkf_setup *s, cl_mem indices,
                                   cl_mem values, dk_opencl_apply_c apply_c, void *self, dk_opencl_lowrank **out,
                                   dk_msg *msg);

/* pht64 (N x M) and, when hpht64 is not NULL, hpht64 (M x M, exactly
 * symmetric) from the float64 anomalies e64: enqueued, not waited for. */
cl_int dk_opencl_lowrank_cov(dk_opencl_lowrank *lr, cl_mem e64, cl_mem pht64, cl_mem hpht64);

void dk_opencl_lowrank_destroy(dk_opencl_lowrank *lr);

#endif
