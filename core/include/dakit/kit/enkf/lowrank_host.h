/* The lowrank factorisation's linear algebra on host memory, for the
 * plugins that run dk_lowrank_make there (cpu, and opencl, which has no
 * solver library): the projections with compensated sums, the subtraction
 * and LAPACKE's QR. One definition, included by both; the cuda plugin runs
 * them on the device (cuBLAS, cuSOLVER). Arrays hold columns of n doubles,
 * column c at base + c * n, as dk_lowrank_ops says. OpenMP spreads the
 * loops where the plugin is built with it; the results do not depend on
 * the number of threads. */
#ifndef DAKIT_KIT_ENKF_LOWRANK_HOST_H
#define DAKIT_KIT_ENKF_LOWRANK_HOST_H

#include <math.h>
#include <stddef.h>

#include <lapacke.h>

#include <dakit/kit/enkf/lowrank.h>

/* below this many multiply-adds a loop stays on one thread */
#define DK_LOWRANK_HOST_PARALLEL 32768

/* S (a x b, row-major) = A^T B, each entry a compensated sum (Ogita, Rump
 * & Oishi's Dot2) over the n points in order: a plain sum of n products
 * errs by ~eps sqrt(n) of the norms, which at n = 10^6 is above the 1e-12
 * the rank test must see. */
static inline void dk_lowrank_host_gram(size_t n, const double *A, size_t a, const double *B, size_t b, double *S)
{
#pragma omp parallel for schedule(dynamic, 1) collapse(2) if (a * b * n > DK_LOWRANK_HOST_PARALLEL)
    for (size_t i = 0; i < a; i++)
        for (size_t j = 0; j < b; j++) {
            double sum = 0, err = 0;
            for (size_t k = 0; k < n; k++) {
                double x = A[i * n + k], y = B[j * n + k], p = x * y, pe = fma(x, y, -p);
                double t = sum + p, z = t - sum;
                err += (sum - (t - z)) + (p - z) + pe;
                sum = t;
            }
            S[i * b + j] = sum + err;
        }
}

/* B -= A S (S: a x b, row-major), in blocks of 256 points. */
static inline void dk_lowrank_host_subtract(size_t n, const double *A, size_t a, const double *S, double *B,
                                            size_t b)
{
#pragma omp parallel for schedule(static) if (a * b * n > DK_LOWRANK_HOST_PARALLEL)
    for (size_t k0 = 0; k0 < n; k0 += 256) {
        size_t k1 = k0 + 256 < n ? k0 + 256 : n;
        for (size_t j = 0; j < b; j++)
            for (size_t i = 0; i < a; i++) {
                double f = S[i * b + j];
                for (size_t k = k0; k < k1; k++)
                    B[j * n + k] -= f * A[i * n + k];
            }
    }
}

/* B's b columns (b <= DK_LOWRANK_BLOCK) become an orthonormal basis of
 * their span: LAPACKE's dgeqrf, then dorgqr. */
static inline dk_status dk_lowrank_host_orthonormalize(size_t n, double *B, size_t b, dk_msg *msg)
{
    double tau[DK_LOWRANK_BLOCK];
    lapack_int info;
    if ((info = LAPACKE_dgeqrf(LAPACK_COL_MAJOR, (lapack_int)n, (lapack_int)b, B, (lapack_int)n, tau)) != 0 ||
        (info = LAPACKE_dorgqr(LAPACK_COL_MAJOR, (lapack_int)n, (lapack_int)b, (lapack_int)b, B, (lapack_int)n,
                               tau)) != 0) {
        dk_msg_set(msg, "LAPACKE's QR of the low-rank basis failed (info %d)", (int)info);
        return info == LAPACK_WORK_MEMORY_ERROR ? DK_ERR_OUT_OF_MEMORY : DK_ERR_BACKEND;
    }
    return DK_OK;
}

#endif
