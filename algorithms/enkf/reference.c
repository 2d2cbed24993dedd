/* The serial reference: the definitions, evaluated directly in float64.
 *   PHT[i,j] = 1/(L-1) sum_{t in row j of H} C[i,k_t] (e_i . e_k_t) H_t
 * never forms an N x N matrix: it walks the nonzeros of H for each i. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "enkf_internal.h"

static double get(const void *p, dk_dtype t, size_t k)
{
    return t == DK_F32 ? (double)((const float *)p)[k] : ((const double *)p)[k];
}

static void put(void *p, dk_dtype t, size_t k, double v)
{
    if (t == DK_F32)
        ((float *)p)[k] = (float)v;
    else
        ((double *)p)[k] = v;
}

/* PHT and HPHT in float64 from float64 anomalies e. */
static void cov64(const dk_enkf_setup *s, const double *e, double *pht, double *hpht)
{
    size_t N = s->desc.n, L = s->desc.members, M = s->desc.H.rows;
    for (size_t i = 0; i < N; i++)
        for (size_t j = 0; j < M; j++) {
            double sum = 0;
            for (int64_t t = s->indptr[j]; t < s->indptr[j + 1]; t++) {
                size_t k = (size_t)s->indices[t];
                double dot = 0;
                for (size_t l = 0; l < L; l++)
                    dot += e[i * L + l] * e[k * L + l];
                sum += dk_enkf_c(s, i, k) * dot * s->values[t];
            }
            pht[i * M + j] = sum / (double)(L - 1);
        }
    if (hpht)
        for (size_t a = 0; a < M; a++)
            for (size_t j = 0; j < M; j++) {
                double sum = 0;
                for (int64_t t = s->indptr[a]; t < s->indptr[a + 1]; t++)
                    sum += s->values[t] * pht[(size_t)s->indices[t] * M + j];
                hpht[a * M + j] = sum;
            }
}

DK_API dk_status dk_enkf_cov_reference(const dk_enkf_desc *desc, const void *e, void *pht, void *hpht)
{
    dk_enkf_setup s;
    dk_status rc = dk_enkf_setup_make(desc, &s);
    if (rc != DK_OK)
        return rc;
    if (!e || !pht) {
        dk_enkf_setup_free(&s);
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "dk_enkf_cov_reference: e and pht must not be NULL");
    }
    size_t N = s.desc.n, L = s.desc.members, M = s.desc.H.rows;
    dk_dtype t = s.desc.dtype;
    double *e64 = malloc(N * L * sizeof *e64), *p64 = malloc(N * M * sizeof *p64),
           *h64 = malloc(M * M * sizeof *h64);
    if (!e64 || !p64 || !h64) {
        free(e64);
        free(p64);
        free(h64);
        dk_enkf_setup_free(&s);
        return dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "enkf reference: out of host memory");
    }
    for (size_t k = 0; k < N * L; k++)
        e64[k] = get(e, t, k);
    cov64(&s, e64, p64, h64);
    for (size_t k = 0; k < N * M; k++)
        put(pht, t, k, p64[k]);
    if (hpht)
        for (size_t k = 0; k < M * M; k++)
            put(hpht, t, k, h64[k]);
    free(e64);
        free(p64);
        free(h64);
    dk_enkf_setup_free(&s);
    return DK_OK;
}

/* Solves A Z = D (A: M x M symmetric positive definite, overwritten by its
 * Cholesky factor; D: M x L, overwritten by Z). Returns 0, or the failing
 * pivot's index + 1. */
static size_t cholesky_solve(double *A, size_t M, double *D, size_t L)
{
    for (size_t j = 0; j < M; j++) {
        double d = A[j * M + j];
        for (size_t k = 0; k < j; k++)
            d -= A[j * M + k] * A[j * M + k];
        if (!(d > 0))
            return j + 1;
        d = sqrt(d);
        A[j * M + j] = d;
        for (size_t i = j + 1; i < M; i++) {
            double v = A[i * M + j];
            for (size_t k = 0; k < j; k++)
                v -= A[i * M + k] * A[j * M + k];
            A[i * M + j] = v / d;
        }
    }
    for (size_t l = 0; l < L; l++) {
        for (size_t i = 0; i < M; i++) {
            double v = D[i * L + l];
            for (size_t k = 0; k < i; k++)
                v -= A[i * M + k] * D[k * L + l];
            D[i * L + l] = v / A[i * M + i];
        }
        for (size_t i = M; i-- > 0;) {
            double v = D[i * L + l];
            for (size_t k = i + 1; k < M; k++)
                v -= A[k * M + i] * D[k * L + l];
            D[i * L + l] = v / A[i * M + i];
        }
    }
    return 0;
}

DK_API dk_status dk_enkf_analysis_reference(const dk_enkf_desc *desc, void *x, const double *y, const double *r,
                                            uint64_t seed, double inflation)
{
    dk_enkf_setup s;
    dk_status rc = dk_enkf_setup_make(desc, &s);
    if (rc != DK_OK)
        return rc;
    size_t N = s.desc.n, L = s.desc.members, M = s.desc.H.rows;
    if (!x) {
        dk_enkf_setup_free(&s);
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "dk_enkf_analysis_reference: x must not be NULL");
    }
    if ((rc = dk_enkf_check_obs(M, y, r, inflation)) != DK_OK) {
        dk_enkf_setup_free(&s);
        return rc;
    }
    dk_dtype t = s.desc.dtype;
    double *X = malloc(N * L * sizeof *X), *e = malloc(N * L * sizeof *e), *pht = malloc(N * M * sizeof *pht),
           *A = malloc(M * M * sizeof *A), *D = dk_enkf_perturbed_obs(M, L, y, r, seed);
    if (!X || !e || !pht || !A || !D) {
        free(X);
    free(e);
    free(pht);
    free(A);
    free(D);
        dk_enkf_setup_free(&s);
        return dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "enkf reference: out of host memory");
    }
    for (size_t i = 0; i < N; i++) {
        double mean = 0;
        for (size_t l = 0; l < L; l++)
            mean += get(x, t, i * L + l);
        mean /= (double)L;
        for (size_t l = 0; l < L; l++) {
            e[i * L + l] = inflation * (get(x, t, i * L + l) - mean);
            X[i * L + l] = mean + e[i * L + l];
        }
    }
    cov64(&s, e, pht, A);
    for (size_t j = 0; j < M; j++) {
        A[j * M + j] += r[j];
        for (size_t l = 0; l < L; l++) {
            double hx = 0;
            for (int64_t q = s.indptr[j]; q < s.indptr[j + 1]; q++)
                hx += s.values[q] * X[(size_t)s.indices[q] * L + l];
            D[j * L + l] -= hx;
        }
    }
    size_t bad = cholesky_solve(A, M, D, L);
    if (bad) {
        free(X);
    free(e);
    free(pht);
    free(A);
    free(D);
        dk_enkf_setup_free(&s);
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                       "enkf reference: HPHT + R is not positive definite (pivot %zu)", bad - 1);
    }
    for (size_t i = 0; i < N; i++)
        for (size_t l = 0; l < L; l++) {
            double v = X[i * L + l];
            for (size_t j = 0; j < M; j++)
                v += pht[i * M + j] * D[j * L + l];
            put(x, t, i * L + l, v);
        }
    free(X);
    free(e);
    free(pht);
    free(A);
    free(D);
    dk_enkf_setup_free(&s);
    return DK_OK;
}
