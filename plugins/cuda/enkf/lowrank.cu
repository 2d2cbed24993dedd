/* dakit cuda plugin, enkf: the lowrank solver. At plan time C ~= Q T Q^T
 * (dakit/kit/enkf/lowrank.h: a randomized range finder, C applied through
 * fft.cu's transforms, cuBLAS for the projections, cuSOLVER geqrf + orgqr
 * for each block's QR); the transforms' arrays are released after. Q is
 * kept row-major with its R columns padded with zeros to RP (a multiple of
 * 16, the tensor-core tiles' width). Per product, on the float64 tensor
 * cores (dmma, m16n8k4):
 *   k_lowrank_u     U[r, l, m] = sum over row m of H of Q[k_t, r] H_t e[k_t, l],
 *                   for a segment of a row per block: A = Q's gathered rows
 *                   (16 ranks x 4 nonzeros), B = the weighted anomalies
 *                   (4 nonzeros x 8 members), the warps' sums added in a
 *                   fixed order, then k_lowrank_u_sum adds a row's segments
 *                   in order (results repeat exactly);
 *   cuBLAS dgemm    G2 = T U (R x M L, column m L + l);
 *   k_lowrank_pht   PHT[i, m] = 1/(L-1) sum_(l,r) Z[i, (l,r)] G2[r, l, m] with
 *                   Z[i, (l,r)] = e[i, l] Q[i, r] formed in registers, a
 *                   block's G2 slices staged in shared memory: nothing of
 *                   size N x L x M is formed;
 *   cuBLAS dgemm    HPHT = 1/(L-1) U^T G2 (H PHT without reading PHT:
 *                   H_m PHT[:, b] = 1/(L-1) sum_(l,r) U[r,l,m] G2[r,l,b]),
 *                   k_lowrank_mirror makes it exactly symmetric.
 * About nnz L R + N L R M multiply-adds, no transform. Error bound: see
 * the cpu plugin's lowrank() and docs/enkf.md. */
#include <stdint.h>
#include <stdlib.h>

#include <dakit/kit/enkf/lowrank.h>

#include "enkf.cuh"

using namespace dk_cuda_enkf;

namespace {

/* k_lowrank_u: U_WARPS warps share a segment of a row of H, 4 nonzeros per
 * mma; a warp holds up to U_RT x U_LT output tiles (16 ranks x 8 members). */
const int U_WARPS = 4, U_THREADS = 32 * U_WARPS, U_RT = 4, U_LT = 2;
/* k_lowrank_pht: PT_WARPS warps of PT_MT m-tiles (16 points) each, PT_NT
 * n-tiles (8 observations); G2 staged PT_RC ranks x PT_LC members at a time. */
const int PT_WARPS = 8, PT_THREADS = 32 * PT_WARPS, PT_MT = 2, PT_ROWS = PT_WARPS * PT_MT * 16, PT_NT = 4;
const int PT_RC = 8, PT_LC = 16;

/* part[s][l RP + r] = sum over segment s's nonzeros t of Q[k_t, r] H_t e[k_t, l].
 * Lane (g, q) takes nonzero t0 + q of the warp's step: A[g][q] =
 * Q[k_t, 16 rt + g] (and g + 8), B[q][g] = H_t e[k_t, 8 lt + g]. The warps
 * take steps in turn; their tiles are added in warp order. */
__global__ void __launch_bounds__(U_THREADS) k_lowrank_u(const double *Q, const double *e, const int *indices,
                                                         const double *values, const int *seg, double *part,
                                                         long long RP, long long L)
{
    __shared__ double red[U_WARPS][U_RT * U_LT * 4][32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, q = lane & 3;
    const long long s = blockIdx.x;
    const int b = seg[3 * s + 1], end = seg[3 * s + 2];
    const int RT = (int)(RP / 16), LT = (int)((L + 7) / 8);
    for (int rt0 = 0; rt0 < RT; rt0 += U_RT)
        for (int lt0 = 0; lt0 < LT; lt0 += U_LT) {
            double acc[U_RT][U_LT][4];
#pragma unroll
            for (int x = 0; x < U_RT; x++)
#pragma unroll
                for (int y = 0; y < U_LT; y++)
                    acc[x][y][0] = acc[x][y][1] = acc[x][y][2] = acc[x][y][3] = 0.0;
            int t = b + 4 * warp + q;
            int k = t < end ? indices[t] : 0;
            double v = t < end ? values[t] : 0.0;
            for (; t - q < end; t += 4 * U_WARPS) {
                /* the next step's nonzero, in flight while this one's rows load */
                const int tn = t + 4 * U_WARPS;
                const int kn = tn < end ? indices[tn] : 0;
                const double vn = tn < end ? values[tn] : 0.0;
                const double *qrow = Q + (long long)k * RP, *erow = e + (long long)k * L;
                double bv[U_LT];
#pragma unroll
                for (int y = 0; y < U_LT; y++) {
                    const long long l = 8ll * (lt0 + y) + g;
                    bv[y] = (t < end && l < L) ? v * erow[l] : 0.0;
                }
#pragma unroll
                for (int x = 0; x < U_RT; x++)
                    if (rt0 + x < RT) {
                        const double a[2] = {qrow[16 * (rt0 + x) + g], qrow[16 * (rt0 + x) + g + 8]};
#pragma unroll
                        for (int y = 0; y < U_LT; y++)
                            if (lt0 + y < LT)
                                dmma(acc[x][y], a, bv[y]);
                    }
                k = kn;
                v = vn;
            }
#pragma unroll
            for (int x = 0; x < U_RT; x++)
#pragma unroll
                for (int y = 0; y < U_LT; y++)
#pragma unroll
                    for (int c = 0; c < 4; c++)
                        red[warp][(x * U_LT + y) * 4 + c][lane] = acc[x][y][c];
            __syncthreads();
            for (int f = threadIdx.x; f < U_RT * U_LT * 4 * 32; f += U_THREADS) {
                const int ln = f % 32, c = (f / 32) % 4, y = (f / 128) % U_LT, x = f / (128 * U_LT);
                const long long r = 16ll * (rt0 + x) + (ln >> 2) + 8 * (c >> 1), l = 8ll * (lt0 + y) + 2 * (ln & 3) + (c & 1);
                if (rt0 + x >= RT || l >= L)
                    continue;
                double sum = 0;
                for (int w = 0; w < U_WARPS; w++)
                    sum += red[w][f / 32][ln];
                part[s * L * RP + l * RP + r] = sum;
            }
            __syncthreads();
        }
}

/* U[(m L + l) R + r] (R x M L, column-major) from the segments' partial
 * sums, in order. */
__global__ void k_lowrank_u_sum(const double *part, const int *row_seg, double *U, long long R, long long RP,
                                long long L, long long M)
{
    const long long RL = R * L;
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < M * RL;
         q += (long long)gridDim.x * blockDim.x) {
        const long long m = q / RL, l = (q / R) % L, r = q % R;
        double sum = 0;
        for (int s = row_seg[m]; s < row_seg[m + 1]; s++)
            sum += part[(s * L + l) * RP + r];
        U[q] = sum;
    }
}

/* PHT for PT_ROWS state points and PT_NT * 8 observations per block. Each
 * warp's PT_MT m-tiles keep, per slice of PT_RC ranks, their Q values in
 * registers (lane (g, q): rows g and g + 8, ranks r0 + 4 s + q) and form
 * A = e[i, l] Q[i, r] per member; B (G2's slice, PT_LC members x PT_RC
 * ranks x PT_NT n-tiles) sits in shared memory in fragment order, so a
 * lane's loads are consecutive (no bank conflicts), two n-tiles per
 * 16-byte load. vec2: PHT's rows may be written 16 bytes at a time (M even,
 * PHT 16-byte aligned). */
__global__ void __launch_bounds__(PT_THREADS, 2) k_lowrank_pht(const double *Q, const double *e, const double *G2,
                                                               double *pht, long long N, long long R, long long RP,
                                                               long long L, long long M, int vec2, double inv_lm1)
{
    __shared__ double2 Bs[PT_LC][PT_RC / 4][PT_NT / 2][32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, q = lane & 3;
    const long long i0 = blockIdx.x * (long long)PT_ROWS + warp * (PT_MT * 16), n0 = blockIdx.y * (PT_NT * 8ll);
    int row[PT_MT][2]; /* N < 2^31, as H's 32-bit column indices */
#pragma unroll
    for (int mt = 0; mt < PT_MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            row[mt][h] = (int)(i0 + 16 * mt + g + 8 * h);
    double acc[PT_MT][PT_NT][4];
#pragma unroll
    for (int mt = 0; mt < PT_MT; mt++)
#pragma unroll
        for (int j = 0; j < PT_NT; j++)
            acc[mt][j][0] = acc[mt][j][1] = acc[mt][j][2] = acc[mt][j][3] = 0.0;
    for (long long r0 = 0; r0 < RP; r0 += PT_RC) {
        double qf[PT_MT][PT_RC / 4][2];
#pragma unroll
        for (int mt = 0; mt < PT_MT; mt++)
#pragma unroll
            for (int st = 0; st < PT_RC / 4; st++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    qf[mt][st][h] = row[mt][h] < N ? Q[(long long)row[mt][h] * RP + r0 + 4 * st + q] : 0.0;
        for (long long l0 = 0; l0 < L; l0 += PT_LC) {
            const int lc = (int)(L - l0 < PT_LC ? L - l0 : PT_LC);
            __syncthreads();
            double *bs = &Bs[0][0][0][0].x;
            for (int f = threadIdx.x; f < lc * (PT_RC / 4) * PT_NT * 32; f += PT_THREADS) {
                const int ln = f % 32, j = (f / 32) % PT_NT, st = (f / (32 * PT_NT)) % (PT_RC / 4),
                          ll = f / (32 * PT_NT * (PT_RC / 4));
                const long long m = n0 + 8 * j + (ln >> 2), r = r0 + 4 * st + (ln & 3);
                bs[(((ll * (PT_RC / 4) + st) * (PT_NT / 2) + j / 2) * 32 + ln) * 2 + (j & 1)] =
                    (m < M && r < R) ? G2[(m * L + l0 + ll) * R + r] : 0.0;
            }
            __syncthreads();
#pragma unroll 1
            for (int ll = 0; ll < lc; ll++) {
                double ev[PT_MT][2];
#pragma unroll
                for (int mt = 0; mt < PT_MT; mt++)
#pragma unroll
                    for (int h = 0; h < 2; h++)
                        ev[mt][h] = row[mt][h] < N ? e[(long long)row[mt][h] * L + l0 + ll] : 0.0;
#pragma unroll
                for (int st = 0; st < PT_RC / 4; st++) {
                    double2 bv[PT_NT / 2];
#pragma unroll
                    for (int j = 0; j < PT_NT / 2; j++)
                        bv[j] = Bs[ll][st][j][lane];
#pragma unroll
                    for (int mt = 0; mt < PT_MT; mt++) {
                        const double a[2] = {ev[mt][0] * qf[mt][st][0], ev[mt][1] * qf[mt][st][1]};
#pragma unroll
                        for (int j = 0; j < PT_NT; j++)
                            dmma(acc[mt][j], a, (j & 1) ? bv[j / 2].y : bv[j / 2].x);
                    }
                }
            }
        }
    }
    /* lane (g, q) holds rows g and g + 8, columns 2q and 2q + 1 of each tile */
#pragma unroll
    for (int mt = 0; mt < PT_MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const long long i = row[mt][h];
            if (i >= N)
                continue;
#pragma unroll
            for (int j = 0; j < PT_NT; j++) {
                const long long m = n0 + 8 * j + 2 * q;
                const double v0 = acc[mt][j][2 * h] * inv_lm1, v1 = acc[mt][j][2 * h + 1] * inv_lm1;
                double *dst = pht + i * M + m;
                if (m + 1 < M && vec2)
                    *(double2 *)dst = make_double2(v0, v1);
                else if (m < M) {
                    dst[0] = v0;
                    if (m + 1 < M)
                        dst[1] = v1;
                }
            }
        }
}

/* HPHT (row-major) = the mean of S (column-major) and its transpose:
 * exactly symmetric, as H PHT is for the other solvers. */
__global__ void k_lowrank_mirror(const double *S, double *hpht, long long M)
{
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < M * M;
         q += (long long)gridDim.x * blockDim.x) {
        const long long a = q / M, b = q % M;
        hpht[q] = 0.5 * (S[a + b * M] + S[b + a * M]);
    }
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
    CUDA_TRY(cudaMemcpyAsync(dst, host, columns * (size_t)p->N * sizeof(double), cudaMemcpyDefault,
                             p->dev->stream),
             "copying the random vectors");
    CUDA_TRY(cudaStreamSynchronize(p->dev->stream), "copying the random vectors");
    return DK_OK;
}

dk_status low_copy(void *self, const double *src, double *dst, size_t columns, dk_msg *msg)
{
    Plan *p = ((Work *)self)->p;
    CUDA_TRY(cudaMemcpyAsync(dst, src, columns * (size_t)p->N * sizeof(double), cudaMemcpyDefault,
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
    CUDA_TRY(cudaMemcpyAsync(S, w->S, a * b * sizeof(double), cudaMemcpyDefault, p->dev->stream),
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
    CUDA_TRY(cudaMemcpyAsync(w->S, S, a * b * sizeof(double), cudaMemcpyDefault, p->dev->stream),
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
    CUDA_TRY(cudaMemcpyAsync(&info, w->info, sizeof info, cudaMemcpyDefault, p->dev->stream),
             "the QR of a low-rank block");
    CUDA_TRY(cudaStreamSynchronize(p->dev->stream), "the QR of a low-rank block");
    if (info != 0) {
        dk_msg_set(msg, "cuda enkf: cuSOLVER's QR of a low-rank block rejected argument %d", -info);
        return DK_ERR_BACKEND;
    }
    return DK_OK;
}

/* Each row of H cut into segments of seg_len nonzeros (at least one a
 * row): a power of two from 128 to 4096, about nnz / 2048, so that the U
 * kernel has a few thousand blocks at large nnz and still a few hundred
 * at small. */
dk_status make_segments(Plan *p, dk_msg *msg)
{
    const dk_enkf_setup *s = p->s;
    long long seg_len = 128;
    while (seg_len < 4096 && seg_len * 2048 < p->nnz)
        seg_len *= 2;
    long long count = 0;
    for (long long m = 0; m < p->M; m++) {
        long long n = (long long)(s->indptr[m + 1] - s->indptr[m]);
        count += n > 0 ? (n + seg_len - 1) / seg_len : 1;
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
            seg[3 * k + 2] = (int)(e - b < seg_len ? e : b + seg_len);
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
 * together, for k_lowrank_u's gathers and k_lowrank_pht's tiles), padded
 * with zero columns to RP. */
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
    p->RP = (p->R + 15) / 16 * 16;
    const double one = 1.0, zero = 0.0;
    if (cudaMalloc(&p->lr_Q, (size_t)(p->N * p->RP) * sizeof(double)) != cudaSuccess ||
        cudaMemsetAsync(p->lr_Q, 0, (size_t)(p->N * p->RP) * sizeof(double), st) != cudaSuccess ||
        cublasDgeam(p->lr_blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)p->R, n, &one, low.Q, n, &zero, p->lr_Q, (int)p->RP,
                    p->lr_Q, (int)p->RP) != CUBLAS_STATUS_SUCCESS) {
        (void)cudaGetLastError();
        cudaFree(low.Q);
        free(low.T);
        dk_msg_set(msg, "cuda enkf: out of device memory for the low-rank basis (%lld x %lld doubles)", p->N, p->RP);
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
        (rc = ensure(&p->lr_G2, RLM, "allocating T U", msg)) != DK_OK ||
        (rc = ensure(&p->lr_S, p->M * p->M, "allocating HPHT's work array", msg)) != DK_OK)
        return rc;
    return ensure(&p->lr_part, p->nseg * p->L * p->RP, "allocating U's partial sums", msg);
}

/* U, G2 = T U and PHT, launched on the plan's stream: no allocation, no
 * wait. */
dk_status lowrank_cov(Plan *p, const double *e, double *pht, dk_msg *msg)
{
    cudaStream_t st = p->dev->stream;
    const long long R = p->R, RP = p->RP, L = p->L, M = p->M;
    k_lowrank_u<<<(unsigned)p->nseg, U_THREADS, 0, st>>>(p->lr_Q, e, p->indices, p->values, p->lr_seg, p->lr_part,
                                                        RP, L);
    k_lowrank_u_sum<<<blocks_for(M * R * L, THREADS), THREADS, 0, st>>>(p->lr_part, p->lr_row_seg, p->lr_U, R, RP, L,
                                                                        M);
    CUDA_TRY(cudaGetLastError(), "the lowrank U kernels");
    prof_mark(p, "U (H o e projected on Q)");
    /* G2 (R x M L) = T U; T is symmetric, row- or column-major alike */
    const double one = 1.0, zero = 0.0;
    CUBLAS_TRY(cublasDgemm(p->lr_blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)R, (int)(M * L), (int)R, &one, p->lr_T, (int)R,
                           p->lr_U, (int)R, &zero, p->lr_G2, (int)R),
               "T U");
    prof_mark(p, "T U (cuBLAS)");
    dim3 grid(blocks_for(p->N, PT_ROWS), (unsigned)((M + PT_NT * 8 - 1) / (PT_NT * 8)));
    const int vec2 = !(M & 1) && !((uintptr_t)pht & 15);
    k_lowrank_pht<<<grid, PT_THREADS, 0, st>>>(p->lr_Q, e, p->lr_G2, pht, p->N, R, RP, L, M, vec2,
                                                1.0 / (double)(L - 1));
    CUDA_TRY(cudaGetLastError(), "the lowrank PHT kernel");
    return DK_OK;
}

/* HPHT = 1/(L-1) U^T G2, both (L R) x M column-major (column m: its L R
 * values (l, r) together), then mirrored: M^2 L R multiply-adds instead of
 * reading PHT's rows at H's nonzeros. */
dk_status lowrank_hpht(Plan *p, double *hpht, dk_msg *msg)
{
    const long long M = p->M, K = p->L * p->R;
    const double scale = 1.0 / (double)(p->L - 1), zero = 0.0;
    CUBLAS_TRY(cublasDgemm(p->lr_blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)M, (int)M, (int)K, &scale, p->lr_U, (int)K,
                           p->lr_G2, (int)K, &zero, p->lr_S, (int)M),
               "HPHT = U^T T U");
    k_lowrank_mirror<<<blocks_for(M * M, THREADS), THREADS, 0, p->dev->stream>>>(p->lr_S, hpht, M);
    CUDA_TRY(cudaGetLastError(), "the lowrank HPHT kernel");
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
    .reads_g = false,
    .hpht = lowrank_hpht,
};
