/* dakit cuda plugin, enkf: what the solver files share.
 *
 * Arithmetic is float64 throughout; float32 data are widened on the way in
 * and rounded on the way out (as the cpu plugin does), so both dtypes agree
 * with the reference to the rounding of their storage.
 *
 * PHT is computed by one solver, each in its own file with the kernels it
 * launches:
 *   mma.cu     k_mma, tiled and banded with 1-D C and L <= 16 on the float64
 *              tensor cores (not for the variants "tiled-simt" and
 *              "banded-simt", which ask for the vector kernels);
 *   direct.cu  k_band (banded, 1-D C with a short support) and k_direct
 *              (tiled and banded, any C) on the vector units;
 *   fft.cu     C applied by circulant embedding and cuFFT;
 *   lowrank.cu C ~= Q T Q^T (dakit/kit/enkf/lowrank.h), found at plan time
 *              with fft.cu's transforms, cuBLAS and cuSOLVER; its products
 *              on the float64 tensor cores, HPHT from its own factors.
 * plan.cu lists them and picks, for the variant the core passed, the first
 * that applies; hpht.cu forms HPHT from PHT for the others; analysis.cu
 * holds the entries that run a plan (cov, analysis). */
#ifndef DAKIT_CUDA_ENKF_CUH
#define DAKIT_CUDA_ENKF_CUH

#include <cublas_v2.h>
#include <cufft.h>
#include <cusolverDn.h>

#include <dakit/enkf.h>

#include "../cuda_internal.h"

namespace dk_cuda_enkf {

const int THREADS = 256; /* the element-wise kernels' blocks */

struct Solver;

/* DAKIT_ENKF_CUDA_PROFILE=1: events recorded between the phases of each
 * product (prof_mark), read once the next product starts or the plan goes
 * (never an extra wait), and printed per phase to stderr when the plan is
 * destroyed: a developer's tool. */
const int PROF_MARKS = 16, PROF_PHASES = 16;
struct Profile {
    int on, marks, pending;
    cudaEvent_t ev[PROF_MARKS];
    const char *label[PROF_MARKS]; /* ev[k]: the end of phase label[k] */
    const char *phase[PROF_PHASES];
    double total_ms[PROF_PHASES], min_ms[PROF_PHASES];
    long long count[PROF_PHASES], products;
};

struct Plan {
    dk_cuda_device *dev;
    const dk_enkf_setup *s;
    const Solver *solver; /* the one that computes PHT */
    long long N, L, M, nnz;
    int two_d;
    long long ny;
    long long rx, ry, window;
    double *loc;
    int *indptr, *indices, *row_of;
    double *values;
    double *G;
    /* float32 cov and the analysis: float64 work arrays */
    double *e64, *pht64, *hpht64, *x64;
    /* fft */
    long long P0, P1, P;  /* embedding: P0 (x P1) points */
    long long rows_per_chunk;
    cufftHandle whole, last; /* Z2Z plans: full chunks, the last chunk (blocked: the inverse) */
    int have_whole, have_last;
    double *spectrum; /* P values: real (C's embedding is symmetric), divided by P */
    cufftDoubleComplex *buf; /* two vectors per signal, as real and imaginary parts */
    /* blocked embedding (1-D C, nb blocks of b points, see k_block_toeplitz):
     * signals scattered into `blocks`, nb + 1 blocks each (the last zero);
     * their windows' spectra go to buf, (nb + 1) * 2b per signal */
    long long blk, nb;
    cufftDoubleComplex *blocks, *blk_spectrum; /* blk_spectrum: [d + nb - 1][f], divided by 2b */
    cufftHandle fwd_whole, fwd_last;
    int have_fwd_whole, have_fwd_last;
    /* HPHT in two stages: partial sums over S segments of each row of H */
    double *partial;
    long long S, seg_width; /* segment s: columns [s seg_width, (s + 1) seg_width) */
    int *hpht_seg; /* M x (S + 1): row a's nonzeros with columns in segment s, [seg[s], seg[s+1]) */
    /* banded and mma: each tile's range of nonzeros in each row (NULL: bisect) */
    int *range_lo, *range_hi;
    /* mma: the tile and c's window (see mma.cu) */
    int mma_mt, mma_rx, mma_seg_len, mma_wcap, mma_nseg;
    double *mma_partial;
    /* lowrank: Q row-major (N x RP, R columns and zeros up to RP, a multiple
     * of 16), T (R x R), U and G2 = T U (R x M L, column (m L + l)), HPHT
     * before its mirroring (M x M), the U kernel's segments of H's rows and
     * partial sums */
    long long R, RP, nseg;
    double *lr_Q, *lr_T, *lr_U, *lr_G2, *lr_S, *lr_part;
    int *lr_seg; /* nseg x 3: row, first, end nonzero */
    int *lr_row_seg; /* M + 1: row m's segments [lr_row_seg[m], lr_row_seg[m + 1]) */
    cublasHandle_t lr_blas;
    cusolverDnHandle_t lr_solver;
    /* analysis */
    cusolverDnHandle_t cusolver;
    cublasHandle_t blas;
    double *A, *D, *d_host_copy, *r_dev, *work;
    int *info;
    int lwork;
    Profile prof;
};

/* One way of computing PHT (FFTW's solver): whether it applies to a
 * problem, what its plan needs, and the product itself. */
struct Solver {
    const char *name;
    /* Whether it computes the setup's variant (setup->scheme and the
     * variant's suffix) for this problem on this device. */
    bool (*applicable)(const dk_enkf_setup *s, const dk_cuda_device *dev);
    /* Its part of the plan, after the shared arrays and HPHT's tables. */
    dk_status (*make)(Plan *p, dk_msg *msg);
    /* PHT (N x M, float64) from e on the plan's stream, not waiting. */
    dk_status (*cov)(Plan *p, const double *e, double *pht, dk_msg *msg);
    /* cov reads G, the weighted anomalies (k_weigh); the others weigh as
     * they stage. */
    bool reads_g;
    /* Optional: cov for PHT's rows [lo, hi) only, row i at pht + (i - lo) M
     * (the distributed layer's own points, straight into its output), for
     * a solver that weighs as it stages (reads_g false). */
    dk_status (*cov_range)(Plan *p, const double *e, double *pht, long long lo, long long hi, dk_msg *msg);
    /* HPHT from what cov left in the plan, on the plan's stream; NULL: H
     * times PHT (hpht_cov). */
    dk_status (*hpht)(Plan *p, double *hpht, dk_msg *msg);
};

extern const Solver solver_mma;    /* mma.cu */
extern const Solver solver_band;   /* direct.cu */
extern const Solver solver_direct; /* direct.cu */
extern const Solver solver_fft;    /* fft.cu */
extern const Solver solver_lowrank; /* lowrank.cu */

/* fft.cu, for the lowrank solver: C times `count` dense vectors of N points
 * (vector c at w + c N) with the transforms make_fft set up, and the
 * release of what make_fft allocated. */
dk_status fft_make(Plan *p, dk_msg *msg);
dk_status fft_apply(Plan *p, const double *w, double *y, long long count, dk_msg *msg);
void fft_release(Plan *p);

/* HPHT (hpht.cu): its segments and partial sums at plan time; the product
 * from PHT on the plan's stream. */
dk_status hpht_make(Plan *p, dk_msg *msg);
dk_status hpht_cov(Plan *p, const double *pht, double *hpht, dk_msg *msg);

/* The ops entries that run a plan (analysis.cu). */
dk_status cov(void *plan, const void *e, void *pht, void *hpht, dk_msg *msg);
dk_status analysis(void *plan, void *x, const double *d, const double *r, double inflation, dk_msg *msg);
/* The distributed layer's phases (dk_enkf_ops: cov_rows, inflate, update). */
dk_status cov_rows(void *plan, const void *e, const dk_enkf_box *own, void *pht, void *part, size_t at,
                   const void *x, dk_msg *msg);
dk_status inflate(void *plan, const void *x, dk_dtype xt, size_t count, double inflation, void *X, void *e,
                  dk_msg *msg);
dk_status update(void *plan, const void *sums, size_t at, const double *d, const double *r, const void *pht,
                 const void *X, size_t count, void *x, dk_dtype xt, dk_msg *msg);

/* ---- helpers (plan.cu) ---- */

/* The profile (DAKIT_ENKF_CUDA_PROFILE): prof_begin at the start of a
 * product, prof_mark(p, "phase") after each phase's launches, prof_report
 * when the plan goes. Nothing when the knob is off. */
void prof_begin(Plan *p);
void prof_mark(Plan *p, const char *phase);
void prof_report(Plan *p);

/* Blocks of `threads` for n items, at least 1 and at most 2^30 (the
 * kernels stride over the rest). */
unsigned blocks_for(long long n, int threads);

/* *ptr, when still NULL, becomes count doubles of device memory. */
dk_status ensure(double **ptr, long long count, const char *what, dk_msg *msg);

template <typename T>
dk_status copy_in(T *dst, const T *src, size_t count, const char *what, dk_msg *msg)
{
    CUDA_TRY(cudaMemcpy(dst, src, count * sizeof(T), cudaMemcpyDefault), what);
    return DK_OK;
}

/* *dst becomes a device copy of count values of src. */
template <typename T>
dk_status upload(T **dst, const T *src, size_t count, const char *what, dk_msg *msg)
{
    CUDA_TRY(cudaMalloc(dst, (count ? count : 1) * sizeof(T)), what);
    if (count)
        CUDA_TRY(cudaMemcpy(*dst, src, count * sizeof(T), cudaMemcpyDefault), what);
    return DK_OK;
}

/* The first of keys[b, e) not below key (keys ascending). */
static __device__ __forceinline__ int lower_bound32(const int *keys, int b, int e, int key)
{
    while (b < e) {
        int mid = (b + e) >> 1;
        if (keys[mid] < key)
            b = mid + 1;
        else
            e = mid;
    }
    return b;
}

} // namespace dk_cuda_enkf

#endif
