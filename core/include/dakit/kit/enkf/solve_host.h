/* The analysis's M x M solve on the host, for the plugins that solve there
 * (cpu, and opencl, which has no solver library): (HPHT + R) Z = D with
 * LAPACKE's dposv. One definition, included by both; the cuda plugin
 * solves on the device (cuSOLVER). */
#ifndef DAKIT_ENKF_SOLVE_HOST_H
#define DAKIT_ENKF_SOLVE_HOST_H

#include <stddef.h>

#include <lapacke.h>

#include <dakit/plugin.h>

/* A: HPHT (M x M, row-major; overwritten), r: the M observation variances,
 * D: M x L innovations, replaced by Z. A matrix that is not positive
 * definite is the caller's input (DK_ERR_INVALID_ARGUMENT). */
static inline dk_status dk_enkf_solve_host(size_t M, size_t L, double *A, const double *r, double *D,
                                           dk_msg *msg)
{
    for (size_t j = 0; j < M; j++)
        A[j * M + j] += r[j];
    lapack_int info =
        LAPACKE_dposv(LAPACK_ROW_MAJOR, 'L', (lapack_int)M, (lapack_int)L, A, (lapack_int)M, D, (lapack_int)L);
    if (info == 0)
        return DK_OK;
    dk_msg_set(msg, info > 0 ? "HPHT + R is not positive definite (LAPACKE_dposv, minor %d)"
                             : "LAPACKE_dposv rejected argument %d",
               (int)(info > 0 ? info : -info));
    return info > 0 ? DK_ERR_INVALID_ARGUMENT : DK_ERR_BACKEND;
}

#endif
