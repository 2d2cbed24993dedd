/* The lowrank scheme's plan-time factorisation C ~= Q T Q^T, one definition
 * for every plugin that offers the scheme (cpu, cuda): the backend supplies
 * the linear algebra on its own memory (dk_lowrank_ops), this header the
 * algorithm, its stopping rule and its sentences.
 *
 * Q (N x R, orthonormal columns) comes from a blocked adaptive randomized
 * range finder (Halko, Martinsson & Tropp, SIAM Review 53(2) 2011, alg. 4.2
 * in blocks of DK_LOWRANK_BLOCK Gaussian vectors, each block
 * orthonormalized twice against Q), T = Q^T C Q. C is applied exactly (the
 * backend's FFT of the circulant embedding). The rank grows until the
 * a-posteriori estimate of their eq. 4.3,
 *   ||(I - QQ^T) C||_2 <= 10 sqrt(2/pi) max_i ||(I - QQ^T) C w_i||_2,
 * w_i DK_LOWRANK_PROBES standard Gaussian vectors independent of Q, which
 * holds with probability 1 - 10^-PROBES, gives
 *   ||C - Q T Q^T||_2 <= ||(I - QQ^T) C|| + ||QQ^T C (I - QQ^T)|| <= 2 est
 *                     <= DK_LOWRANK_TOL ||T||_2 <= DK_LOWRANK_TOL ||C||_2
 * (C symmetric; ||T||_2 by power iteration, a lower bound of ||C||_2, so
 * the test is conservative). Every random number comes from a fixed seed,
 * so a plan is the same on every run and every backend. */
#ifndef DAKIT_KIT_ENKF_LOWRANK_H
#define DAKIT_KIT_ENKF_LOWRANK_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/plugin.h>

#define DK_LOWRANK_TOL 1e-12        /* ||C - Q T Q^T||_2 / ||C||_2 */
#define DK_LOWRANK_BLOCK 16         /* columns added per step */
#define DK_LOWRANK_MAX_RANK 256     /* beyond this C is not low-rank enough to pay */
#define DK_LOWRANK_PROBES 10        /* failure probability 10^-10 */
#define DK_LOWRANK_SEED 0x6c6f7772616e6bull

/* Arrays of "columns" are backend memory holding that many vectors of N
 * doubles, column c at base + c * N. Every entry returns DK_OK or a status
 * with the sentence in msg. */
typedef struct dk_lowrank_ops {
    void *self;
    size_t n;
    /* NULL when out of memory */
    double *(*alloc)(void *self, size_t columns);
    void (*release)(void *self, double *a);
    dk_status (*upload)(void *self, const double *host, double *dst, size_t columns, dk_msg *msg);
    dk_status (*copy)(void *self, const double *src, double *dst, size_t columns, dk_msg *msg);
    /* y_c = C w_c, exactly (to the rounding of the FFT) */
    dk_status (*apply_c)(void *self, const double *w, double *y, size_t columns, dk_msg *msg);
    /* S (host, a x b, row-major) = A^T B */
    dk_status (*gram)(void *self, const double *A, size_t a, const double *B, size_t b, double *S, dk_msg *msg);
    /* B -= A S (S: host, a x b, row-major) */
    dk_status (*subtract)(void *self, const double *A, size_t a, const double *S, double *B, size_t b,
                          dk_msg *msg);
    /* B's b columns become an orthonormal basis of their span (Householder QR's Q) */
    dk_status (*orthonormalize)(void *self, double *B, size_t b, dk_msg *msg);
} dk_lowrank_ops;

typedef struct dk_lowrank {
    double *Q;     /* backend memory, R columns; free with ops->release */
    double *T;     /* host (malloc), R x R row-major, symmetric */
    size_t rank;   /* R */
    double norm;   /* ||T||_2 (power iteration), <= ||C||_2 */
    double error;  /* 2 est: bounds ||C - Q T Q^T||_2 (probability 1 - 10^-10) */
} dk_lowrank;

/* Column `col` of the stream `stream` (0: probes, 1: range): N standard
 * normal numbers (splitmix64, Box-Muller), the same everywhere. */
static inline void dk_lowrank_normals(uint64_t stream, uint64_t col, size_t n, double *out)
{
    uint64_t x = DK_LOWRANK_SEED ^ (stream * 0xD1B54A32D192ED03ull) ^ ((col + 1) * 0x9E3779B97F4A7C15ull);
    for (size_t i = 0; i < n; i += 2) {
        double u[2];
        for (int k = 0; k < 2; k++) {
            uint64_t z = (x += 0x9E3779B97F4A7C15ull);
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            z ^= z >> 31;
            u[k] = ((double)(z >> 11) + 1.0) * 0x1p-53; /* (0, 1] */
        }
        double r = sqrt(-2.0 * log(u[0])), a = 6.283185307179586476925286766559 * u[1];
        out[i] = r * cos(a);
        if (i + 1 < n)
            out[i + 1] = r * sin(a);
    }
}

/* ||T||_2 from below: power iteration on the symmetric R x R T. */
static inline double dk_lowrank_norm(const double *T, size_t R)
{
    double *x = (double *)malloc(2 * (R ? R : 1) * sizeof *x), *y = x + R, best = 0;
    if (!x)
        return 0;
    for (size_t i = 0; i < R; i++) {
        x[i] = 1.0 + 0.01 * (double)(i % 7);
        best = fmax(best, fabs(T[i * R + i]));
    }
    for (int it = 0; it < 300; it++) {
        double nx = 0, ny = 0;
        for (size_t i = 0; i < R; i++)
            nx += x[i] * x[i];
        for (size_t i = 0; i < R; i++) {
            double s = 0;
            for (size_t k = 0; k < R; k++)
                s += T[i * R + k] * x[k];
            y[i] = s;
            ny += s * s;
        }
        if (!(nx > 0) || !(ny > 0))
            break;
        double ratio = sqrt(ny / nx);
        int settled = ratio <= best * (1 + 1e-15);
        best = fmax(best, ratio);
        if (settled && it > 20)
            break;
        for (size_t i = 0; i < R; i++)
            x[i] = y[i] / sqrt(ny);
    }
    free(x);
    return best;
}

/* The tolerance: DK_LOWRANK_TOL, or DAKIT_ENKF_LOWRANK_TOL (tuning: a
 * number in [1e-15, 1e-3]). */
static inline double dk_lowrank_tolerance(void)
{
    const char *v = dk_tuning_string("DAKIT_ENKF_LOWRANK_TOL");
    char *end = NULL;
    double t = v ? strtod(v, &end) : 0;
    return v && end != v && *end == 0 && t >= 1e-15 && t <= 1e-3 ? t : DK_LOWRANK_TOL;
}

/* Q and T for C, as the top of this file says; DK_ERR_NOT_IMPLEMENTED with
 * the sentence when C is not low-rank within DK_LOWRANK_MAX_RANK, or when
 * the new directions are all below float64's noise (the range is
 * exhausted: another block could only break Q's orthogonality) before the
 * estimate reaches the tolerance. */
static inline dk_status dk_lowrank_make(const dk_lowrank_ops *o, dk_lowrank *out, dk_msg *msg)
{
    const size_t N = o->n, P = DK_LOWRANK_PROBES, B = DK_LOWRANK_BLOCK;
    const size_t cap = N < DK_LOWRANK_MAX_RANK ? N : DK_LOWRANK_MAX_RANK;
    const double factor = 10.0 * sqrt(2.0 / 3.14159265358979323846), tol = dk_lowrank_tolerance();
    memset(out, 0, sizeof *out);
    double *Q = o->alloc(o->self, cap), *Y = o->alloc(o->self, B), *Z = o->alloc(o->self, B),
           *W = o->alloc(o->self, P);
    double *host = (double *)malloc(N * B * sizeof *host), *T = (double *)calloc(cap * cap, sizeof *T),
           *S = (double *)malloc((cap > P ? cap : P) * B * sizeof *S);
    dk_status st = DK_OK;
    size_t R = 0;
    double est = INFINITY, norm = 0;
    if (!Q || !Y || !Z || !W || !host || !T || !S) {
        dk_msg_set(msg, "out of memory for the low-rank basis (%zu x %zu doubles)", N, cap);
        st = DK_ERR_OUT_OF_MEMORY;
        goto done;
    }
    /* the probes: W <- C w_i, deflated by each new block of Q */
    for (size_t i = 0; i < P; i++)
        dk_lowrank_normals(0, i, N, host + i * N);
    if ((st = o->upload(o->self, host, Y, P, msg)) != DK_OK || (st = o->apply_c(o->self, Y, W, P, msg)) != DK_OK)
        goto done;
    for (;;) {
        size_t b = cap - R < B ? cap - R : B;
        for (size_t c = 0; c < b; c++)
            dk_lowrank_normals(1, R + c, N, host + c * N);
        if ((st = o->upload(o->self, host, Z, b, msg)) != DK_OK || (st = o->apply_c(o->self, Z, Y, b, msg)) != DK_OK)
            goto done;
        /* twice: the second pass, on unit vectors, restores orthogonality
         * that the first loses when C Omega is nearly inside span(Q) */
        double kept = 1; /* the most of a column's norm left after the first projection */
        for (int pass = 0; pass < 2; pass++) {
            if (R && pass == 0) {
                double before[DK_LOWRANK_BLOCK];
                if ((st = o->gram(o->self, Y, b, Y, b, S, msg)) != DK_OK)
                    goto done;
                for (size_t c = 0; c < b; c++)
                    before[c] = S[c * b + c];
                if ((st = o->gram(o->self, Q, R, Y, b, S, msg)) != DK_OK ||
                    (st = o->subtract(o->self, Q, R, S, Y, b, msg)) != DK_OK ||
                    (st = o->gram(o->self, Y, b, Y, b, S, msg)) != DK_OK)
                    goto done;
                kept = 0;
                for (size_t c = 0; c < b; c++)
                    kept = fmax(kept, before[c] > 0 ? sqrt(fmax(S[c * b + c], 0.0) / before[c]) : 0.0);
                if (kept < 64 * 0x1p-52) {
                    dk_msg_set(msg,
                               "C is not numerically low-rank to the tolerance: at rank %zu the new directions "
                               "are at float64's noise while ||C - Q T Q^T||_2 is estimated at %.2g ||C||_2, above "
                               "the %.0e it needs; variant \"fft\" applies any C exactly",
                               R, norm > 0 ? 2 * est / norm : INFINITY, tol);
                    st = DK_ERR_NOT_IMPLEMENTED;
                    goto done;
                }
            } else if (R && ((st = o->gram(o->self, Q, R, Y, b, S, msg)) != DK_OK ||
                             (st = o->subtract(o->self, Q, R, S, Y, b, msg)) != DK_OK))
                goto done;
            if ((st = o->orthonormalize(o->self, Y, b, msg)) != DK_OK)
                goto done;
        }
        /* twice is enough unless the block was almost inside span(Q):
         * verify, and stop where float64 cannot add a direction */
        if (R) {
            double worst = 0;
            if ((st = o->gram(o->self, Q, R, Y, b, S, msg)) != DK_OK)
                goto done;
            for (size_t k = 0; k < R * b; k++)
                worst = fmax(worst, fabs(S[k]));
            if (worst > 1e-10) {
                dk_msg_set(msg,
                           "C is not numerically low-rank to the tolerance: at rank %zu new directions are no "
                           "longer orthogonal to the basis (%.1e) in float64, while ||C - Q T Q^T||_2 is "
                           "estimated at %.2g ||C||_2, above the %.0e it needs; variant \"fft\" applies any C "
                           "exactly",
                           R, worst, norm > 0 ? 2 * est / norm : INFINITY, tol);
                st = DK_ERR_NOT_IMPLEMENTED;
                goto done;
            }
        }
        double *Qn = Q + R * N;
        if ((st = o->copy(o->self, Y, Qn, b, msg)) != DK_OK || (st = o->apply_c(o->self, Qn, Z, b, msg)) != DK_OK ||
            (st = o->gram(o->self, Q, R + b, Z, b, S, msg)) != DK_OK)
            goto done;
        for (size_t i = 0; i < R + b; i++)
            for (size_t j = 0; j < b; j++) {
                double v = i >= R ? 0.5 * (S[i * b + j] + S[(R + j) * b + (i - R)]) : S[i * b + j];
                T[i * cap + R + j] = T[(R + j) * cap + i] = v;
            }
        if ((st = o->gram(o->self, Qn, b, W, P, S, msg)) != DK_OK ||
            (st = o->subtract(o->self, Qn, b, S, W, P, msg)) != DK_OK || (st = o->gram(o->self, W, P, W, P, S, msg)) != DK_OK)
            goto done;
        R += b;
        est = 0;
        for (size_t i = 0; i < P; i++)
            est = fmax(est, factor * sqrt(fmax(S[i * P + i], 0.0)));
        /* T's leading R x R block, packed, for its norm */
        double *packed = (double *)malloc(R * R * sizeof *packed);
        if (!packed) {
            dk_msg_set(msg, "out of host memory");
            st = DK_ERR_OUT_OF_MEMORY;
            goto done;
        }
        for (size_t i = 0; i < R; i++)
            memcpy(packed + i * R, T + i * cap, R * sizeof *packed);
        norm = dk_lowrank_norm(packed, R);
        free(packed);
        if (2 * est <= tol * norm || R == N)
            break;
        if (R == cap) {
            dk_msg_set(msg,
                       "C is not numerically low-rank: at rank %zu (the most the lowrank variant takes) "
                       "||C - Q T Q^T||_2 is estimated at %.2g ||C||_2, above the %.0e it needs; "
                       "variant \"fft\" applies any C exactly",
                       R, norm > 0 ? 2 * est / norm : INFINITY, tol);
            st = DK_ERR_NOT_IMPLEMENTED;
            goto done;
        }
    }
    /* the plan keeps R columns: move Q to an array of that size */
    out->Q = o->alloc(o->self, R);
    out->T = (double *)malloc(R * R * sizeof *out->T);
    if (!out->Q || !out->T) {
        dk_msg_set(msg, "out of memory for the low-rank basis (%zu x %zu doubles)", N, R);
        st = DK_ERR_OUT_OF_MEMORY;
        goto done;
    }
    if ((st = o->copy(o->self, Q, out->Q, R, msg)) != DK_OK)
        goto done;
    for (size_t i = 0; i < R; i++)
        memcpy(out->T + i * R, T + i * cap, R * sizeof *out->T);
    out->rank = R;
    out->norm = norm;
    out->error = 2 * est;
done:
    if (st != DK_OK) {
        if (out->Q)
            o->release(o->self, out->Q);
        free(out->T);
        memset(out, 0, sizeof *out);
    }
    o->release(o->self, Q);
    o->release(o->self, Y);
    o->release(o->self, Z);
    o->release(o->self, W);
    free(host);
    free(T);
    free(S);
    return st;
}

#endif
