/* dakit cuda plugin, enkf: the lowrank solver. At plan time C ~= Q T Q^T
 * (dakit/kit/enkf/lowrank.h: a randomized range finder, C applied through
 * fft.cu's transforms, cuBLAS for the projections, cuSOLVER geqrf + orgqr
 * for each block's QR); the transforms' arrays are released after. Per
 * product, with G the weighted anomalies (k_weigh):
 *   k_lowrank_u    U[r, l, m] = sum over row m of H of Q[k_t, r] G[t, l],
 *                  a block per segment of a row, then k_lowrank_u_sum adds
 *                  a row's segments in order (results repeat exactly);
 *   cuBLAS dgemm   G2 = (T U)^T, laid out [(r L + l) M + m];
 *   k_lowrank_pht  PHT[i, m] = 1/(L-1) sum_r Q[i, r] sum_l e[i, l] G2[r, l, m],
 *                  fused: nothing of size N x L x M is formed.
 * About nnz L R + N L R M multiply-adds, no transform. Error bound: see
 * the cpu plugin's lowrank() and docs/enkf.md. */
#include <stdint.h>
#include <stdlib.h>

#include <dakit/kit/enkf/lowrank.h>

#include "enkf.cuh"

using namespace dk_cuda_enkf;

namespace {

const int SEG = 1024;     /* nonzeros of a row per k_lowrank_u block */
const int U_THREADS = 256, U_PAIRS = 4;
const int PT_ROWS = 128, PT_M = 32, PT_R = 8, PT_L = 8;

/* part[s][l R + r] = sum over segment s's nonzeros of Q[k_t, r] G[t, l]. */
__global__ void __launch_bounds__(U_THREADS) k_lowrank_u(const double *Qr, const double *G, const int *indices,
                                                         const int *seg, double *part, long long R, long long L)
{
    const long long s = blockIdx.x, RL = R * L;
    const int b = seg[3 * s + 1], e = seg[3 * s + 2];
    for (long long base = 0; base < RL; base += U_THREADS * U_PAIRS) {
        double acc[U_PAIRS];
        long long r[U_PAIRS], l[U_PAIRS];
#pragma unroll
        for (int u = 0; u < U_PAIRS; u++) {
            long long pair = base + u * U_THREADS + threadIdx.x;
            acc[u] = 0;
            r[u] = pair < RL ? pair % R : 0;
            l[u] = pair < RL ? pair / R : 0;
        }
        for (int t = b; t < e; t++) {
            const double *q = Qr + (long long)indices[t] * R, *g = G + (long long)t * L;
#pragma unroll
            for (int u = 0; u < U_PAIRS; u++)
                acc[u] = fma(q[r[u]], g[l[u]], acc[u]);
        }
#pragma unroll
        for (int u = 0; u < U_PAIRS; u++) {
            long long pair = base + u * U_THREADS + threadIdx.x;
            if (pair < RL)
                part[s * RL + pair] = acc[u];
        }
    }
}

/* U (R x L M, column l M + m) from the segments' partial sums, in order. */
__global__ void k_lowrank_u_sum(const double *part, const int *row_seg, double *U, long long R, long long L,
                                long long M)
{
    const long long RL = R * L;
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < M * RL;
         q += (long long)gridDim.x * blockDim.x) {
        long long m = q / RL, pair = q % RL, r = pair % R, l = pair / R;
        double sum = 0;
        for (int s = row_seg[m]; s < row_seg[m + 1]; s++)
            sum += part[s * RL + pair];
        U[(l * M + m) * R + r] = sum;
    }
}

/* PHT for PT_ROWS state points (a thread each) and PT_M observations, Q,
 * e and G2 staged through shared memory in tiles of PT_R ranks and PT_L
 * members; each thread keeps its PT_M sums in registers. */
__global__ void __launch_bounds__(PT_ROWS) k_lowrank_pht(const double *Qr, const double *X, const double *G2,
                                                         double *pht, long long N, long long R, long long L,
                                                         long long M, double inv_lm1)
{
    __shared__ double Qs[PT_R][PT_ROWS], Xs[PT_L][PT_ROWS];
    __shared__ double2 Gs[PT_R][PT_L][PT_M / 2];
    const long long i0 = blockIdx.x * (long long)PT_ROWS, m0 = blockIdx.y * (long long)PT_M;
    const int tid = threadIdx.x;
    double acc[PT_M];
#pragma unroll
    for (int mm = 0; mm < PT_M; mm++)
        acc[mm] = 0;
    for (long long r0 = 0; r0 < R; r0 += PT_R) {
        __syncthreads();
        for (int f = tid; f < PT_ROWS * PT_R; f += PT_ROWS) {
            int row = f / PT_R, rr = f % PT_R;
            Qs[rr][row] = (i0 + row < N && r0 + rr < R) ? Qr[(i0 + row) * R + r0 + rr] : 0.0;
        }
        for (long long l0 = 0; l0 < L; l0 += PT_L) {
            __syncthreads();
            for (int f = tid; f < PT_ROWS * PT_L; f += PT_ROWS) {
                int row = f / PT_L, ll = f % PT_L;
                Xs[ll][row] = (i0 + row < N && l0 + ll < L) ? X[(i0 + row) * L + l0 + ll] : 0.0;
            }
            double *gs = &Gs[0][0][0].x;
            for (int f = tid; f < PT_R * PT_L * PT_M; f += PT_ROWS) {
                int mm = f % PT_M, ll = (f / PT_M) % PT_L, rr = f / (PT_M * PT_L);
                long long r = r0 + rr, l = l0 + ll, m = m0 + mm;
                gs[f] = (r < R && l < L && m < M) ? G2[(r * L + l) * M + m] : 0.0;
            }
            __syncthreads();
#pragma unroll 2
            for (int rr = 0; rr < PT_R; rr++) {
                const double q = Qs[rr][tid];
#pragma unroll 2
                for (int ll = 0; ll < PT_L; ll++) {
                    const double a = q * Xs[ll][tid];
#pragma unroll
                    for (int h = 0; h < PT_M / 2; h++) {
                        const double2 g = Gs[rr][ll][h];
                        acc[2 * h] = fma(a, g.x, acc[2 * h]);
                        acc[2 * h + 1] = fma(a, g.y, acc[2 * h + 1]);
                    }
                }
            }
        }
    }
    const long long i = i0 + tid;
    if (i < N)
#pragma unroll
        for (int mm = 0; mm < PT_M; mm++)
            if (m0 + mm < M)
                pht[i * M + m0 + mm] = acc[mm] * inv_lm1;
}

/* ---- the linear algebra dk_lowrank_make runs on (device memory) ---- */

struct Work {
    Plan *p;
    double *S, *tau, *work;
    int lwork;
    int *info;
};

double *low_alloc(void *self, size_t columns)
{
    Plan *p = ((Work *)self)->p;
    double *a = nullptr;
    if (cudaMalloc(&a, (columns ? columns : 1) * (size_t)p->N * sizeof(double)) != cudaSuccess) {
        (void)cudaGetLastError();
        return nullptr;
    }
    return a;
}

void low_release(void *, double *a)
{
    if (a)
        cudaFree(a);
}

dk_status low_upload(void *self, const double *host, double *dst, size_t columns, dk_msg *msg)
{
    Plan *p = ((Work *)self)->p;
    CUDA_TRY(cudaMemcpyAsync(dst, host, columns * (size_t)p->N * sizeof(double), cudaMemcpyHostToDevice,
                             p->dev->stream),
             "copying the random vectors");
    CUDA_TRY(cudaStreamSynchronize(p->dev->stream), "copying the random vectors");
    return DK_OK;
}

dk_status low_copy(void *self, const double *src, double *dst, size_t columns, dk_msg *msg)
{
    Plan *p = ((Work *)self)->p;
    CUDA_TRY(cudaMemcpyAsync(dst, src, columns * (size_t)p->N * sizeof(double), cudaMemcpyDeviceToDevice,
                             p->dev->stream),
             "copying the low-rank basis");
    return DK_OK;
}

dk_status low_apply(void *self, const double *w, double *y, size_t columns, dk_msg *msg)
{
    return fft_apply(((Work *)self)->p, w, y, (long long)columns, msg);
}

/* S (a x b, row-major) = A^T B: the column-major b x a matrix B^T A. */
dk_status low_gram(void *self, const double *A, size_t a, const double *B, size_t b, double *S, dk_msg *msg)
{
    Work *w = (Work *)self;
    Plan *p = w->p;
    const double one = 1.0, zero = 0.0;
    CUBLAS_TRY(cublasDgemm(p->lr_blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)b, (int)a, (int)p->N, &one, B, (int)p->N, A,
                           (int)p->N, &zero, w->S, (int)b),
               "projecting on the low-rank basis");
    CUDA_TRY(cudaMemcpyAsync(S, w->S, a * b * sizeof(double), cudaMemcpyDeviceToHost, p->dev->stream),
             "projecting on the low-rank basis");
    CUDA_TRY(cudaStreamSynchronize(p->dev->stream), "projecting on the low-rank basis");
    return DK_OK;
}

/* B -= A S, S row-major a x b: on the device the column-major b x a S^T,
 * transposed by cuBLAS. */
dk_status low_subtract(void *self, const double *A, size_t a, const double *S, double *B, size_t b, dk_msg *msg)
{
    Work *w = (Work *)self;
    Plan *p = w->p;
    const double minus = -1.0, one = 1.0;
    CUDA_TRY(cudaMemcpyAsync(w->S, S, a * b * sizeof(double), cudaMemcpyHostToDevice, p->dev->stream),
             "deflating by the low-rank basis");
    CUBLAS_TRY(cublasDgemm(p->lr_blas, CUBLAS_OP_N, CUBLAS_OP_T, (int)p->N, (int)b, (int)a, &minus, A, (int)p->N,
                           w->S, (int)b, &one, B, (int)p->N),
               "deflating by the low-rank basis");
    /* S is the caller's host array: the copy must be done before it changes */
    CUDA_TRY(cudaStreamSynchronize(p->dev->stream), "deflating by the low-rank basis");
    return DK_OK;
}

dk_status low_orthonormalize(void *self, double *B, size_t b, dk_msg *msg)
{
    Work *w = (Work *)self;
    Plan *p = w->p;
    int info = 0;
    CUSOLVER_TRY(cusolverDnDgeqrf(p->lr_solver, (int)p->N, (int)b, B, (int)p->N, w->tau, w->work, w->lwork, w->info),
                 "the QR of a low-rank block (geqrf)");
    CUSOLVER_TRY(cusolverDnDorgqr(p->lr_solver, (int)p->N, (int)b, (int)b, B, (int)p->N, w->tau, w->work, w->lwork,
                                  w->info),
                 "the QR of a low-rank block (orgqr)");
    CUDA_TRY(cudaMemcpyAsync(&info, w->info, sizeof info, cudaMemcpyDeviceToHost, p->dev->stream),
             "the QR of a low-rank block");
    CUDA_TRY(cudaStreamSynchronize(p->dev->stream), "the QR of a low-rank block");
    if (info != 0) {
        dk_msg_set(msg, "cuda enkf: cuSOLVER's QR of a low-rank block rejected argument %d", -info);
        return DK_ERR_BACKEND;
    }
    return DK_OK;
}

/* Each row of H cut into segments of SEG nonzeros (at least one a row). */
dk_status make_segments(Plan *p, dk_msg *msg)
{
    const dk_enkf_setup *s = p->s;
    long long count = 0;
    for (long long m = 0; m < p->M; m++) {
        long long n = (long long)(s->indptr[m + 1] - s->indptr[m]);
        count += n > 0 ? (n + SEG - 1) / SEG : 1;
    }
    int *seg = (int *)malloc((size_t)count * 3 * sizeof(int)), *row_seg = (int *)malloc((size_t)(p->M + 1) * sizeof(int));
    if (!seg || !row_seg) {
        free(seg), free(row_seg);
        dk_msg_set(msg, "cuda enkf: out of host memory for the lowrank segments");
        return DK_ERR_OUT_OF_MEMORY;
    }
    long long k = 0;
    for (long long m = 0; m < p->M; m++) {
        row_seg[m] = (int)k;
        long long b = (long long)s->indptr[m], e = (long long)s->indptr[m + 1];
        do {
            seg[3 * k] = (int)m;
            seg[3 * k + 1] = (int)b;
            seg[3 * k + 2] = (int)(e - b < SEG ? e : b + SEG);
            b = seg[3 * k + 2];
            k++;
        } while (b < e);
    }
    row_seg[p->M] = (int)k;
    p->nseg = count;
    dk_status st = upload(&p->lr_seg, seg, (size_t)count * 3, "copying the lowrank segments", msg);
    if (st == DK_OK)
        st = upload(&p->lr_row_seg, row_seg, (size_t)(p->M + 1), "copying the lowrank segments", msg);
    free(seg), free(row_seg);
    return st;
}

/* Q, T and the work arrays; Q kept row-major (a state point's R values
 * together, for k_lowrank_u's gathers and k_lowrank_pht's tiles). */
dk_status make_factors(Plan *p, Work *w, dk_msg *msg)
{
    cudaStream_t st = p->dev->stream;
    CUBLAS_TRY(cublasCreate(&p->lr_blas), "cublasCreate");
    CUBLAS_TRY(cublasSetStream(p->lr_blas, st), "cublasSetStream");
    CUSOLVER_TRY(cusolverDnCreate(&p->lr_solver), "cusolverDnCreate");
    CUSOLVER_TRY(cusolverDnSetStream(p->lr_solver, st), "cusolverDnSetStream");
    const int B = DK_LOWRANK_BLOCK, n = (int)p->N;
    int lq = 0, lo = 0;
    CUDA_TRY(cudaMalloc(&w->S, (size_t)(DK_LOWRANK_MAX_RANK + DK_LOWRANK_PROBES) * B * sizeof(double)),
             "allocating the lowrank work arrays");
    CUDA_TRY(cudaMalloc(&w->tau, B * sizeof(double)), "allocating the lowrank work arrays");
    CUDA_TRY(cudaMalloc(&w->info, sizeof(int)), "allocating the lowrank work arrays");
    CUSOLVER_TRY(cusolverDnDgeqrf_bufferSize(p->lr_solver, n, B, nullptr, n, &lq), "geqrf_bufferSize");
    CUSOLVER_TRY(cusolverDnDorgqr_bufferSize(p->lr_solver, n, B, B, nullptr, n, w->tau, &lo), "orgqr_bufferSize");
    w->lwork = lq > lo ? lq : lo;
    CUDA_TRY(cudaMalloc(&w->work, (size_t)(w->lwork > 0 ? w->lwork : 1) * sizeof(double)),
             "allocating the QR workspace");

    dk_lowrank_ops ops = {};
    ops.self = w;
    ops.n = (size_t)p->N;
    ops.alloc = low_alloc;
    ops.release = low_release;
    ops.upload = low_upload;
    ops.copy = low_copy;
    ops.apply_c = low_apply;
    ops.gram = low_gram;
    ops.subtract = low_subtract;
    ops.orthonormalize = low_orthonormalize;
    dk_lowrank low;
    dk_status rc = dk_lowrank_make(&ops, &low, msg);
    if (rc != DK_OK)
        return rc;
    p->R = (long long)low.rank;
    const double one = 1.0, zero = 0.0;
    if (cudaMalloc(&p->lr_Q, (size_t)(p->N * p->R) * sizeof(double)) != cudaSuccess ||
        cudaMemsetAsync(p->lr_Q, 0, (size_t)(p->N * p->R) * sizeof(double), st) != cudaSuccess ||
        cublasDgeam(p->lr_blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)p->R, n, &one, low.Q, n, &zero, p->lr_Q, (int)p->R,
                    p->lr_Q, (int)p->R) != CUBLAS_STATUS_SUCCESS) {
        (void)cudaGetLastError();
        cudaFree(low.Q);
        free(low.T);
        dk_msg_set(msg, "cuda enkf: out of device memory for the low-rank basis (%lld x %lld doubles)", p->N, p->R);
        return DK_ERR_OUT_OF_MEMORY;
    }
    rc = upload(&p->lr_T, (const double *)low.T, (size_t)(p->R * p->R), "copying T", msg);
    CUDA_TRY(cudaStreamSynchronize(st), "transposing the low-rank basis");
    cudaFree(low.Q);
    free(low.T);
    return rc;
}

dk_status make_lowrank(Plan *p, dk_msg *msg)
{
    dk_status rc = fft_make(p, msg);
    Work w = {};
    w.p = p;
    if (rc == DK_OK)
        rc = make_factors(p, &w, msg);
    void *ptrs[] = {w.S, w.tau, w.work, w.info};
    for (void *q : ptrs)
        if (q)
            cudaFree(q);
    fft_release(p);
    if (rc != DK_OK)
        return rc;
    long long RLM = p->R * p->L * p->M;
    if ((rc = make_segments(p, msg)) != DK_OK || (rc = ensure(&p->lr_U, RLM, "allocating U", msg)) != DK_OK ||
        (rc = ensure(&p->lr_G2, RLM, "allocating T U", msg)) != DK_OK)
        return rc;
    return ensure(&p->lr_part, p->nseg * p->R * p->L, "allocating U's partial sums", msg);
}

dk_status lowrank_cov(Plan *p, const double *e, double *pht, dk_msg *msg)
{
    cudaStream_t st = p->dev->stream;
    const long long R = p->R, L = p->L, M = p->M;
    k_lowrank_u<<<(unsigned)p->nseg, U_THREADS, 0, st>>>(p->lr_Q, p->G, p->indices, p->lr_seg, p->lr_part, R, L);
    k_lowrank_u_sum<<<blocks_for(M * R * L, THREADS), THREADS, 0, st>>>(p->lr_part, p->lr_row_seg, p->lr_U, R, L, M);
    CUDA_TRY(cudaGetLastError(), "the lowrank U kernels");
    /* G2 = (T U)^T = U^T T (T symmetric): L M x R, column-major */
    const double one = 1.0, zero = 0.0;
    CUBLAS_TRY(cublasDgemm(p->lr_blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)(L * M), (int)R, (int)R, &one, p->lr_U, (int)R,
                           p->lr_T, (int)R, &zero, p->lr_G2, (int)(L * M)),
               "T U");
    dim3 grid(blocks_for(p->N, PT_ROWS), (unsigned)((M + PT_M - 1) / PT_M));
    k_lowrank_pht<<<grid, PT_ROWS, 0, st>>>(p->lr_Q, e, p->lr_G2, pht, p->N, R, L, M, 1.0 / (double)(L - 1));
    CUDA_TRY(cudaGetLastError(), "the lowrank PHT kernel");
    return DK_OK;
}

bool applicable(const dk_enkf_setup *s, const dk_cuda_device *)
{
    return s->scheme == DK_ENKF_LOWRANK;
}

} // namespace

const Solver dk_cuda_enkf::solver_lowrank = {
    .name = "lowrank",
    .applicable = applicable,
    .make = make_lowrank,
    .cov = lowrank_cov,
    .reads_g = true,
};
