/* dakit enkf: the localized ensemble covariance product and the stochastic
 * EnKF analysis step built on it.
 *
 *   PHT  = [C o (e e^T)] H^T / (L - 1)      (N x M)
 *   HPHT = H PHT                            (M x M)
 *
 * e: the N x L ensemble anomalies, C: the N x N localization matrix, either
 * symmetric Toeplitz from its first row c (C[i,k] = c[|i-k|]) or, for an
 * nx x ny field flattened in C order, block Toeplitz with Toeplitz blocks
 * from an nx x ny table c2 (C[(ix,iy),(kx,ky)] = c2[|ix-kx|][|iy-ky|]).
 * H: M x N, sparse, in CSR. No N x N matrix is ever formed.
 *
 * Analysis, for each member l:
 *   x_l <- x_l + PHT (HPHT + R)^{-1} (y + eps_l - H x_l)
 * with R = diag(r), e the anomalies of the (inflated) forecast ensemble and
 * eps_l ~ N(0, R) from dk_enkf_perturbations (Philox4x32-10 keyed by a seed),
 * drawn once on the host so that every backend uses the same numbers.
 *
 * Arrays are C order: E and X are N x L (member index fastest), PHT is
 * N x M, HPHT is M x M. */
#ifndef DAKIT_ENKF_H
#define DAKIT_ENKF_H

#include <stddef.h>
#include <stdint.h>

#include <dakit/dakit.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The most observations (rows of H) a plan takes. */
#define DK_ENKF_MAX_OBS 65536

/* H in compressed sparse rows, 0-based. Repeated (row, column) entries add,
 * as in scipy; rows may be empty. */
typedef struct dk_csr {
    size_t rows, cols;
    const int64_t *indptr;  /* rows + 1 */
    const int64_t *indices; /* indptr[rows] column indices */
    const double *values;
} dk_csr;

typedef struct dk_enkf_desc {
    dk_dtype dtype;        /* of E, X, PHT, HPHT; default float64 */
    size_t n;              /* state size N */
    size_t members;        /* L >= 2 */
    int loc_ndim;          /* 1: loc is c (n values); 2: loc is c2 (nx*ny values) */
    size_t nx, ny;         /* 2-D grid, nx * ny == n */
    const double *loc;     /* copied by the plan */
    dk_csr H;              /* copied by the plan; H.cols == n */
    const char *variant;   /* NULL: the cost model picks among the backend's
                              variants; else one of dk_enkf_variants():
                              "tiled" (every state point against every
                              nonzero of H), "banded" (only pairs within C's
                              support: compact c), "fft" (C applied by
                              circulant embedding: full c, large N),
                              "lowrank" (C ~= Q T Q^T of rank R found at
                              plan time, ||C - QTQ^T||_2 <= 1e-12 ||C||_2:
                              smooth full c; only when asked for by name;
                              refused when C is not low-rank) */
} dk_enkf_desc;

/* Defaults: float64, 1-D localization, variant NULL (the cost model). */
void dk_enkf_desc_init(dk_enkf_desc *desc);

dk_status dk_enkf_plan_create(dk_context *ctx, const dk_enkf_desc *desc, dk_plan **plan);
/* Variant names the context's backend offers (NULL-terminated), or NULL
 * when it has no enkf. */
const char *const *dk_enkf_variants(const dk_context *ctx);
/* The variant the plan runs (the cost model's pick where desc.variant was
 * NULL); "" for a NULL plan. */
const char *dk_enkf_plan_variant(const dk_plan *plan);

/* e: N x L anomalies; pht: N x M; hpht: M x M or NULL. Buffers of the
 * plan's context, in the plan's dtype. */
dk_status dk_enkf_cov(dk_plan *plan, const dk_buffer *e, dk_buffer *pht, dk_buffer *hpht);
dk_status dk_enkf_cov_host(dk_plan *plan, const void *e, void *pht, void *hpht);

/* X: N x L forecast ensemble, replaced by the analysis. y, r: M values
 * (float64, host). inflation >= 1 multiplies the forecast anomalies first. */
dk_status dk_enkf_analysis(dk_plan *plan, dk_buffer *x, const double *y, const double *r,
                           uint64_t seed, double inflation);
dk_status dk_enkf_analysis_host(dk_plan *plan, void *x, const double *y, const double *r,
                                uint64_t seed, double inflation);

/* The observation perturbations eps[j*L + l] ~ N(0, r[j]): Philox4x32-10
 * with key = seed and counter = (l, j, 0, 0), two 32-bit words per uniform
 * and Box-Muller. */
void dk_enkf_perturbations(uint64_t seed, size_t m, size_t members, const double *r, double *eps);

/* The serial references that define the results (host memory, any dtype of
 * desc; they compute in float64). Errors go to dk_last_error(NULL). */
dk_status dk_enkf_cov_reference(const dk_enkf_desc *desc, const void *e, void *pht, void *hpht);
dk_status dk_enkf_analysis_reference(const dk_enkf_desc *desc, void *x, const double *y,
                                     const double *r, uint64_t seed, double inflation);

/* H from a MatrixMarket coordinate file (real, integer or pattern; general
 * or symmetric), as scipy.io.mmwrite writes it. On success the four arrays
 * are malloc'ed into *H (free with dk_csr_free). */
dk_status dk_csr_read_mtx(const char *path, dk_csr *H);
void dk_csr_free(dk_csr *H);

/* ---- plugin ops: what a backend implements (docs/plugins.md) ----
 * The host-side M x M solve the analysis needs is in the plugin kit,
 * dakit/kit/enkf/solve_host.h. */

struct dk_msg; /* dakit/plugin.h */

/* The computation a variant performs; the core's cost model reasons in
 * these, a plugin may offer several variants of one. */
typedef enum dk_enkf_scheme {
    DK_ENKF_TILED = 1,  /* every (i, nonzero of H) pair */
    DK_ENKF_BANDED = 2, /* only pairs within C's support */
    DK_ENKF_FFT = 3,    /* C applied by circulant embedding and FFT */
    DK_ENKF_LOWRANK = 4 /* C ~= Q T Q^T (Q: N x R orthonormal, from a
                           randomized range finder; dakit/kit/enkf/lowrank.h) */
} dk_enkf_scheme;

/* What an enkf plan receives: the validated description, with its own
 * copies of c and H (H's columns sorted within each row), and what the
 * variants share. */
typedef struct dk_enkf_setup {
    dk_enkf_desc desc;      /* desc.loc and desc.H point at the copies below;
                               desc.variant is one of ops->variants (the
                               plugin's own string), never NULL */
    dk_enkf_scheme scheme;  /* the scheme desc.variant names */
    size_t nnz;
    size_t loc_count;       /* n (1-D) or nx*ny (2-D) */
    size_t rx, ry;          /* support: c[d] == 0 for d > rx (1-D);
                               c2[a][b] == 0 for a > rx or b > ry (2-D) */
    size_t window;          /* pairs with |i - k| > window have C[i,k] == 0 */
    double *loc;
    int64_t *indptr, *indices;
    double *values;
} dk_enkf_setup;

/* The flat-index lookup of C every backend uses. */
static inline double dk_enkf_c(const dk_enkf_setup *s, size_t i, size_t k)
{
    if (s->desc.loc_ndim == 1)
        return s->loc[i > k ? i - k : k - i];
    size_t ny = s->desc.ny, ix = i / ny, iy = i % ny, kx = k / ny, ky = k % ny;
    return s->loc[(ix > kx ? ix - kx : kx - ix) * ny + (iy > ky ? iy - ky : ky - iy)];
}

/* A box of a plan's grid of state points: the points (ix, iy) with
 * lo[0] <= ix < hi[0] and lo[1] <= iy < hi[1], state row ix * ny + iy. A
 * 1-D plan's grid is 1 x n (lo[0] = 0, hi[0] = 1). */
typedef struct dk_enkf_box {
    size_t lo[2], hi[2];
} dk_enkf_box;

typedef struct dk_enkf_ops {
    /* Required. NULL-terminated variant names, each "tiled", "banded",
     * "fft" or "lowrank", optionally followed by "-" and a suffix of the
     * plugin's ("banded-simt"): the part before the dash is the scheme,
     * which the core's cost model uses (it never picks lowrank itself). The
     * first is the default where the cost model has no preference. A plugin
     * refuses a lowrank plan whose C is not low-rank with
     * DK_ERR_NOT_IMPLEMENTED. */
    const char *const *variants;
    /* Required. Called once per plan. `setup` stays valid until plan_destroy
     * returns: the plugin may keep the pointer. */
    dk_status (*plan_create)(void *device, const dk_enkf_setup *setup, void **plan, struct dk_msg *msg);
    /* Required. e, pht, hpht (may be NULL): buffer handles in the plan's
     * dtype. Returns when the result is in pht (and hpht). */
    dk_status (*cov)(void *plan, const void *e, void *pht, void *hpht, struct dk_msg *msg);
    /* Required. x: buffer handle, N x L, updated in place. d: host, M x L,
     * y_j + eps_jl; r: host, M. */
    dk_status (*analysis)(void *plan, void *x, const double *d, const double *r, double inflation,
                          struct dk_msg *msg);
    /* Required. Frees the plan. */
    void (*plan_destroy)(void *plan);

    /* Optional, all three or none: the phases libdakit-mpi runs between
     * its collectives (docs/plugins.md, "enkf"; docs/distributed.md). The
     * plan is a rank's window: its own points and the halo rows within C's
     * support. Each entry queues its work on the device and may return
     * before it is done, except update, which returns when x is written.
     * `own` is a box of the plan's grid (dk_enkf_box); its points are
     * counted in C order of the box. A plugin without them serves no
     * distributed enkf (the layer says so at plan creation). */

    /* PHT's rows of the points of `own` only, into pht (own points x M,
     * the plan's dtype), from e (the plan's N x L anomalies). When part is
     * not NULL (the plan's dtype): part[at + a*M + b] = sum over i in own of
     * H[a,i] PHT[i,b] (not symmetric: HPHT's partial sum), and when x is
     * not NULL also part[at + M*M + a*L + l] = sum over i in own of
     * H[a,i] x[i,l] (x: own points x L, the plan's dtype). Nothing else of
     * part is written. */
    dk_status (*cov_rows)(void *plan, const void *e, const dk_enkf_box *own, void *pht, void *part, size_t at,
                          const void *x, struct dk_msg *msg);
    /* For count points of L members: x (dtype xt) gives, in float64,
     * e = inflation * (x - mean) and X = mean + e, in the order of
     * dk_enkf_analysis_reference. X and e are float64 handles. */
    dk_status (*inflate)(void *plan, const void *x, dk_dtype xt, size_t count, double inflation, void *X, void *e,
                         struct dk_msg *msg);
    /* The analysis's solve and update, on every rank alike. sums (float64
     * handle): [0] the number of ranks that failed, HPHT (M x M) from
     * element at, H X (M x L) after it, all summed over the ranks. d: host,
     * M x L, y + eps; r: host, M. Z = (HPHT + R)^-1 (d - HX); then, for the
     * count points, x (dtype xt) = X + pht Z, with pht count x M and X
     * count x L in float64. When sums[0] != 0, or the solve fails, x is left
     * unchanged (sums[0] != 0 returns DK_OK: the layer reports it). Returns
     * when x is written. */
    dk_status (*update)(void *plan, const void *sums, size_t at, const double *d, const double *r, const void *pht,
                        const void *X, size_t count, void *x, dk_dtype xt, struct dk_msg *msg);
} dk_enkf_ops;

#ifdef __cplusplus
}
#endif

#endif
