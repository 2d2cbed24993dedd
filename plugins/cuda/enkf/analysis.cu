/* dakit cuda plugin, enkf: the entries that run a plan. cov widens
 * float32 data, runs the plan's solver (and HPHT) and rounds the results;
 * analysis: inflate, cov into work arrays, innovations, cuSOLVER potrf +
 * potrs for (HPHT + R) Z = D, cuBLAS dgemm for X += PHT Z. */
#include <stdint.h>

#include "enkf.cuh"

using namespace dk_cuda_enkf;

namespace {

template <typename T>
__global__ void k_widen(const T *in, double *out, long long n)
{
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < n; q += (long long)gridDim.x * blockDim.x)
        out[q] = (double)in[q];
}

template <typename T>
__global__ void k_narrow(const double *in, T *out, long long n)
{
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < n; q += (long long)gridDim.x * blockDim.x)
        out[q] = (T)in[q];
}

__global__ void k_weigh(const double *e, const int *indices, const double *values, double *G, long long nnz,
                        long long L)
{
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < nnz * L;
         q += (long long)gridDim.x * blockDim.x) {
        long long t = q / L, l = q % L;
        G[q] = values[t] * e[(long long)indices[t] * L + l];
    }
}

/* Forecast anomalies, inflated, and the inflated ensemble. */
template <typename T>
__global__ void k_inflate(const T *x, double *X, double *e, long long N, long long L, double inflation)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < N; i += (long long)gridDim.x * blockDim.x) {
        double mean = 0;
        for (long long l = 0; l < L; l++)
            mean += (double)x[i * L + l];
        mean /= (double)L;
        for (long long l = 0; l < L; l++) {
            double a = inflation * ((double)x[i * L + l] - mean);
            e[i * L + l] = a;
            X[i * L + l] = mean + a;
        }
    }
}

/* D (column-major M x L, for potrs) = d - H X, and A += diag(r). */
__global__ void k_innovation(const double *X, const int *indptr, const int *indices, const double *values,
                             const double *d, const double *r, double *D, double *A, long long M, long long L)
{
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < M * L;
         q += (long long)gridDim.x * blockDim.x) {
        long long j = q / L, l = q % L;
        double hx = 0;
        for (int u = indptr[j]; u < indptr[j + 1]; u++)
            hx += values[u] * X[(long long)indices[u] * L + l];
        D[l * M + j] = d[j * L + l] - hx;
        if (l == 0)
            A[j * M + j] += r[j];
    }
}

/* PHT (and HPHT) in float64 on the device, not waiting for the result. */
dk_status cov64(Plan *p, const double *e, double *pht, double *hpht, dk_msg *msg)
{
    cudaStream_t st = p->dev->stream;
    if (p->nnz > 0 && p->solver->reads_g) {
        k_weigh<<<blocks_for(p->nnz * p->L, THREADS), THREADS, 0, st>>>(e, p->indices, p->values, p->G, p->nnz, p->L);
        CUDA_TRY(cudaGetLastError(), "the weighting kernel");
        prof_mark(p, "weigh (G = H o e)");
    }
    dk_status rc = p->solver->cov(p, e, pht, msg);
    prof_mark(p, "PHT");
    if (rc == DK_OK && hpht) {
        rc = p->solver->hpht ? p->solver->hpht(p, hpht, msg) : hpht_cov(p, pht, hpht, msg);
        prof_mark(p, "HPHT");
    }
    return rc;
}

/* ---- the distributed layer's phases ---- */

/* Whether window row i lies in the box, and its place there. A box of
 * whole rows (1-D, or slabs) is one range of window points: no division,
 * which in 64 bits costs every lane of k_part_hpht about a hundred
 * instructions a nonzero. */
__device__ __forceinline__ bool in_box(long long i, long long ny, const dk_enkf_box &b, long long *k)
{
    const long long lo0 = (long long)b.lo[0], hi0 = (long long)b.hi[0], lo1 = (long long)b.lo[1],
                    hi1 = (long long)b.hi[1];
    if (lo1 == 0 && hi1 == ny) {
        if (i < lo0 * ny || i >= hi0 * ny)
            return false;
        *k = i - lo0 * ny;
        return true;
    }
    long long ix, iy;
    if (i <= 0xffffffffll && ny <= 0xffffffffll) {
        const unsigned q = (unsigned)i / (unsigned)ny;
        ix = q, iy = i - (long long)q * ny;
    } else {
        ix = i / ny, iy = i % ny;
    }
    if (ix < lo0 || ix >= hi0 || iy < lo1 || iy >= hi1)
        return false;
    *k = (ix - lo0) * (hi1 - lo1) + iy - lo1;
    return true;
}

/* out[k, :] = pht[box point k, :] */
template <typename T>
__global__ void k_rows(const double *pht, T *out, long long M, long long count, dk_enkf_box b, long long ny)
{
    long long w = (long long)(b.hi[1] - b.lo[1]);
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < count * M;
         q += (long long)gridDim.x * blockDim.x) {
        long long k = q / M, j = q % M, i = ((long long)b.lo[0] + k / w) * ny + (long long)b.lo[1] + k % w;
        out[q] = (T)pht[i * M + j];
    }
}

/* partial[(a*S + s)*M + j]: row a of H over segment s, only the columns in
 * the box, times PHT (all j: the partial sum is not symmetric); PHT's row
 * of window point i is src[k M] with k its place in the box (own: the
 * rows phase's output), else src[i M]. As k_hpht_partial: warps take
 * nonzeros, each with four rows of PHT in flight, lanes 32 consecutive j,
 * the warps' sums added in a fixed order. A box that is one run of window
 * points [run_lo, run_hi) (-1: not one) settles whole segments (columns
 * [s width, (s + 1) width)) at once: only those across its ends test each
 * nonzero; a nonzero outside the box adds an exact zero. */
__global__ void __launch_bounds__(THREADS, 4) k_part_hpht(const double *src, int own, const int *seg,
                                                       const int *indices, const double *values, double *partial,
                                                       long long M, long long S, long long width, long long run_lo,
                                                       long long run_hi, dk_enkf_box b, long long ny)
{
    __shared__ double red[THREADS / 32][32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = THREADS / 32;
    const long long s = blockIdx.y, c0 = s * width, c1 = c0 + width;
    const bool whole = run_lo >= 0 && c0 >= run_lo && c1 <= run_hi,
               none = run_lo >= 0 && (c1 <= run_lo || c0 >= run_hi);
    for (long long a = blockIdx.x; a < M; a += gridDim.x) {
        long long sb = seg[a * (S + 1) + s], se = none ? sb : seg[a * (S + 1) + s + 1];
        for (long long j0 = 0; j0 < M; j0 += 32) {
            long long j = j0 + lane, k;
            double acc = 0;
            if (j < M) {
                long long t = sb + warp;
                for (; t + 3 * warps < se; t += 4 * warps) {
                    double rows[4], weights[4];
#pragma unroll
                    for (int u = 0; u < 4; u++) {
                        const long long i = indices[t + u * warps];
                        bool in = true;
                        if (whole)
                            k = i - run_lo;
                        else
                            in = in_box(i, ny, b, &k);
                        weights[u] = in ? values[t + u * warps] : 0.0;
                        rows[u] = in ? src[(own ? k : i) * M + j] : 0.0;
                    }
#pragma unroll
                    for (int u = 0; u < 4; u++)
                        acc = fma(weights[u], rows[u], acc);
                }
                for (; t < se; t += warps) {
                    const long long i = indices[t];
                    if (whole)
                        k = i - run_lo;
                    if (whole || in_box(i, ny, b, &k))
                        acc = fma(values[t], src[(own ? k : i) * M + j], acc);
                }
            }
            red[warp][lane] = acc;
            __syncthreads();
            if (warp == 0 && j < M) {
                double sum = 0;
                for (int w = 0; w < warps; w++)
                    sum += red[w][lane];
                partial[(a * S + s) * M + j] = sum;
            }
            __syncthreads();
        }
    }
}

/* One warp per entry: the lanes sum strided segments, then a shuffle tree
 * (as k_hpht_sum, for the whole matrix). */
template <typename T>
__global__ void k_part_sum(const double *partial, T *out, long long M, long long S)
{
    const int lane = threadIdx.x & 31;
    for (long long q = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / 32; q < M * M;
         q += (long long)gridDim.x * blockDim.x / 32) {
        long long a = q / M, j = q % M;
        double sum = 0;
        for (long long s = lane; s < S; s += 32)
            sum += partial[(a * S + s) * M + j];
        for (int o = 16; o > 0; o >>= 1)
            sum += __shfl_down_sync(0xffffffffu, sum, o);
        if (lane == 0)
            out[q] = (T)sum;
    }
}

/* out[a*L + l] = sum over row a's nonzeros in the box of H x[k, l]: a
 * block per row, its threads' sums added in a fixed order. */
template <typename T>
__global__ void k_part_hx(const T *x, const int *indptr, const int *indices, const double *values, T *out,
                          long long M, long long L, dk_enkf_box b, long long ny)
{
    __shared__ double red[THREADS];
    for (long long a = blockIdx.x; a < M; a += gridDim.x)
        for (long long l = 0; l < L; l++) {
            double acc = 0;
            long long k;
            for (long long t = indptr[a] + threadIdx.x; t < indptr[a + 1]; t += blockDim.x)
                if (in_box(indices[t], ny, b, &k))
                    acc = fma(values[t], (double)x[k * L + l], acc);
            red[threadIdx.x] = acc;
            __syncthreads();
            for (int h = THREADS / 2; h > 0; h >>= 1) {
                if ((int)threadIdx.x < h)
                    red[threadIdx.x] += red[threadIdx.x + h];
                __syncthreads();
            }
            if (threadIdx.x == 0)
                out[a * L + l] = (T)red[0];
            __syncthreads();
        }
}

/* D (column-major M x L) = d - HX (row-major), A += diag(r). */
__global__ void k_innovation_sums(const double *hx, const double *d, const double *r, double *D, double *A,
                                  long long M, long long L)
{
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < M * L;
         q += (long long)gridDim.x * blockDim.x) {
        long long j = q / L, l = q % L;
        D[l * M + j] = d[q] - hx[q];
        if (l == 0)
            A[j * M + j] += r[j];
    }
}

/* x = X where the solve succeeded and no rank failed; else x stays. */
template <typename T>
__global__ void k_store_if(const double *X, T *x, long long n, const int *info, const double *failures)
{
    if (*info != 0 || *failures != 0)
        return;
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < n; q += (long long)gridDim.x * blockDim.x)
        x[q] = (T)X[q];
}

} // namespace

dk_status dk_cuda_enkf::cov(void *plan, const void *e, void *pht, void *hpht, dk_msg *msg)
{
    Plan *p = (Plan *)plan;
    dk_status rc = dk_cuda_enter(p->dev, msg);
    if (rc != DK_OK)
        return rc;
    cudaStream_t st = p->dev->stream;
    prof_begin(p);
    const void *ep = ((const dk_cuda_buffer *)e)->ptr;
    void *pp = ((dk_cuda_buffer *)pht)->ptr;
    void *hp = hpht ? ((dk_cuda_buffer *)hpht)->ptr : NULL;
    long long NL = p->N * p->L, NM = p->N * p->M, MM = p->M * p->M;
    if (p->s->desc.dtype == DK_F64) {
        rc = cov64(p, (const double *)ep, (double *)pp, (double *)hp, msg);
    } else {
        if ((rc = ensure(&p->e64, NL, "allocating float64 work arrays", msg)) != DK_OK ||
            (rc = ensure(&p->pht64, NM, "allocating float64 work arrays", msg)) != DK_OK ||
            (rc = ensure(&p->hpht64, MM, "allocating float64 work arrays", msg)) != DK_OK)
            return rc;
        k_widen<float><<<blocks_for(NL, THREADS), THREADS, 0, st>>>((const float *)ep, p->e64, NL);
        prof_mark(p, "widen float32 e");
        if ((rc = cov64(p, p->e64, p->pht64, hp ? p->hpht64 : NULL, msg)) == DK_OK) {
            k_narrow<float><<<blocks_for(NM, THREADS), THREADS, 0, st>>>(p->pht64, (float *)pp, NM);
            if (hp)
                k_narrow<float><<<blocks_for(MM, THREADS), THREADS, 0, st>>>(p->hpht64, (float *)hp, MM);
            prof_mark(p, "round to float32");
        }
    }
    if (rc != DK_OK)
        return rc;
    CUDA_TRY(cudaGetLastError(), "the float32 conversion kernels");
    return dk_cuda_finish(p->dev, "the covariance product", msg);
}

dk_status dk_cuda_enkf::analysis(void *plan, void *x, const double *d, const double *r, double inflation, dk_msg *msg)
{
    Plan *p = (Plan *)plan;
    dk_status rc = dk_cuda_enter(p->dev, msg);
    if (rc != DK_OK)
        return rc;
    cudaStream_t st = p->dev->stream;
    long long N = p->N, L = p->L, M = p->M, NL = N * L;
    if ((rc = ensure(&p->e64, NL, "allocating the analysis work arrays", msg)) != DK_OK ||
        (rc = ensure(&p->x64, NL, "allocating the analysis work arrays", msg)) != DK_OK ||
        (rc = ensure(&p->pht64, N * M, "allocating the analysis work arrays", msg)) != DK_OK ||
        (rc = ensure(&p->A, M * M, "allocating the analysis work arrays", msg)) != DK_OK ||
        (rc = ensure(&p->D, M * L, "allocating the analysis work arrays", msg)) != DK_OK ||
        (rc = ensure(&p->d_host_copy, M * L, "allocating the analysis work arrays", msg)) != DK_OK ||
        (rc = ensure(&p->r_dev, M, "allocating the analysis work arrays", msg)) != DK_OK)
        return rc;
    if (!p->info)
        CUDA_TRY(cudaMalloc(&p->info, 2 * sizeof(int)), "allocating the solver status");
    if (!p->cusolver) {
        CUSOLVER_TRY(cusolverDnCreate(&p->cusolver), "cusolverDnCreate");
        CUSOLVER_TRY(cusolverDnSetStream(p->cusolver, st), "cusolverDnSetStream");
        CUSOLVER_TRY(cusolverDnDpotrf_bufferSize(p->cusolver, CUBLAS_FILL_MODE_LOWER, (int)M, p->A, (int)M, &p->lwork),
                   "potrf_bufferSize");
        CUDA_TRY(cudaMalloc(&p->work, (size_t)(p->lwork > 0 ? p->lwork : 1) * sizeof(double)),
                 "allocating the solver workspace");
    }
    if (!p->blas) {
        CUBLAS_TRY(cublasCreate(&p->blas), "cublasCreate");
        CUBLAS_TRY(cublasSetStream(p->blas, st), "cublasSetStream");
    }
    prof_begin(p);
    CUDA_TRY(cudaMemcpyAsync(p->d_host_copy, d, (size_t)(M * L) * sizeof(double), cudaMemcpyDefault, st),
             "copying the observations");
    CUDA_TRY(cudaMemcpyAsync(p->r_dev, r, (size_t)M * sizeof(double), cudaMemcpyDefault, st),
             "copying the observation variances");
    void *xp = ((dk_cuda_buffer *)x)->ptr;
    int f32 = p->s->desc.dtype == DK_F32;
    if (f32)
        k_inflate<float><<<blocks_for(N, THREADS), THREADS, 0, st>>>((const float *)xp, p->x64, p->e64, N, L, inflation);
    else
        k_inflate<double><<<blocks_for(N, THREADS), THREADS, 0, st>>>((const double *)xp, p->x64, p->e64, N, L,
                                                                       inflation);
    CUDA_TRY(cudaGetLastError(), "the inflation kernel");
    prof_mark(p, "copies in, inflate");
    if ((rc = cov64(p, p->e64, p->pht64, p->A, msg)) != DK_OK)
        return rc;
    k_innovation<<<blocks_for(M * L, THREADS), THREADS, 0, st>>>(p->x64, p->indptr, p->indices, p->values,
                                                                 p->d_host_copy, p->r_dev, p->D, p->A, M, L);
    CUDA_TRY(cudaGetLastError(), "the innovation kernel");
    /* row-major symmetric A is its own column-major transpose */
    CUSOLVER_TRY(cusolverDnDpotrf(p->cusolver, CUBLAS_FILL_MODE_LOWER, (int)M, p->A, (int)M, p->work, p->lwork, p->info),
               "potrf");
    int info = 0;
    CUDA_TRY(cudaMemcpyAsync(&info, p->info, sizeof info, cudaMemcpyDefault, st), "reading the solver status");
    CUDA_TRY(cudaStreamSynchronize(st), "the Cholesky factorization");
    if (info != 0) {
        dk_msg_set(msg, info > 0 ? "HPHT + R is not positive definite (cusolverDnDpotrf, minor %d)"
                                 : "cusolverDnDpotrf rejected argument %d",
                   info > 0 ? info : -info);
        return info > 0 ? DK_ERR_INVALID_ARGUMENT : DK_ERR_BACKEND;
    }
    prof_mark(p, "innovation, potrf");
    CUSOLVER_TRY(cusolverDnDpotrs(p->cusolver, CUBLAS_FILL_MODE_LOWER, (int)M, (int)L, p->A, (int)M, p->D, (int)M, p->info),
               "potrs");
    /* X (column-major L x N) += Z^T (L x M) PHT^T (M x N) */
    const double one = 1.0;
    CUBLAS_TRY(cublasDgemm(p->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)L, (int)N, (int)M, &one, p->D, (int)M, p->pht64,
                         (int)M, &one, p->x64, (int)L),
             "dgemm (X += PHT Z)");
    if (f32)
        k_narrow<float><<<blocks_for(NL, THREADS), THREADS, 0, st>>>(p->x64, (float *)xp, NL);
    else
        CUDA_TRY(cudaMemcpyAsync(xp, p->x64, (size_t)NL * sizeof(double), cudaMemcpyDefault, st),
                 "writing the analysis");
    CUDA_TRY(cudaGetLastError(), "the conversion kernel");
    prof_mark(p, "potrs, X += PHT Z");
    CUDA_TRY(cudaMemcpyAsync(&info, p->info, sizeof info, cudaMemcpyDefault, st), "reading the solver status");
    CUDA_TRY(cudaStreamSynchronize(st), "the analysis");
    if (info != 0) {
        dk_msg_set(msg, "cusolverDnDpotrs rejected argument %d", -info);
        return DK_ERR_BACKEND;
    }
    return DK_OK;
}

/* The analysis's solver handles and arrays, on first use. */
static dk_status solver_ready(Plan *p, dk_msg *msg)
{
    long long M = p->M, L = p->L;
    dk_status rc;
    if ((rc = ensure(&p->A, M * M, "allocating the analysis work arrays", msg)) != DK_OK ||
        (rc = ensure(&p->D, M * L, "allocating the analysis work arrays", msg)) != DK_OK ||
        (rc = ensure(&p->d_host_copy, M * L, "allocating the analysis work arrays", msg)) != DK_OK ||
        (rc = ensure(&p->r_dev, M, "allocating the analysis work arrays", msg)) != DK_OK)
        return rc;
    if (!p->info)
        CUDA_TRY(cudaMalloc(&p->info, 2 * sizeof(int)), "allocating the solver status");
    if (!p->cusolver) {
        CUSOLVER_TRY(cusolverDnCreate(&p->cusolver), "cusolverDnCreate");
        CUSOLVER_TRY(cusolverDnSetStream(p->cusolver, p->dev->stream), "cusolverDnSetStream");
        CUSOLVER_TRY(cusolverDnDpotrf_bufferSize(p->cusolver, CUBLAS_FILL_MODE_LOWER, (int)M, p->A, (int)M, &p->lwork),
                     "potrf_bufferSize");
        CUDA_TRY(cudaMalloc(&p->work, (size_t)(p->lwork > 0 ? p->lwork : 1) * sizeof(double)),
                 "allocating the solver workspace");
    }
    if (!p->blas) {
        CUBLAS_TRY(cublasCreate(&p->blas), "cublasCreate");
        CUBLAS_TRY(cublasSetStream(p->blas, p->dev->stream), "cublasSetStream");
    }
    return DK_OK;
}

dk_status dk_cuda_enkf::cov_rows(void *plan, const void *e, const dk_enkf_box *own, void *pht, void *part, size_t at,
                                 const void *x, dk_msg *msg)
{
    Plan *p = (Plan *)plan;
    dk_status rc = dk_cuda_enter(p->dev, msg);
    if (rc != DK_OK)
        return rc;
    cudaStream_t st = p->dev->stream;
    long long N = p->N, L = p->L, M = p->M, ny = p->two_d ? p->ny : p->N;
    long long count = (long long)((own->hi[0] - own->lo[0]) * (own->hi[1] - own->lo[1]));
    int f32 = p->s->desc.dtype == DK_F32;
    const void *ep = ((const dk_cuda_buffer *)e)->ptr;
    void *pp = ((dk_cuda_buffer *)pht)->ptr;
    /* a box of whole rows of the window (slabs) is one run of window
     * points: a solver with cov_range puts float64 PHT straight into pht;
     * else one copy out of pht64, without k_rows' divisions per value */
    const bool run = own->hi[0] - own->lo[0] == 1 || (own->lo[1] == 0 && (long long)own->hi[1] == ny);
    const long long run_lo = (long long)own->lo[0] * ny + (long long)own->lo[1];
    const bool direct = !f32 && run && count > 0 && p->solver->cov_range;
    if ((!direct && (rc = ensure(&p->pht64, N * M, "allocating float64 work arrays", msg)) != DK_OK) ||
        (f32 && (rc = ensure(&p->e64, N * L, "allocating float64 work arrays", msg)) != DK_OK))
        return rc;
    prof_begin(p);
    if (f32)
        k_widen<float><<<blocks_for(N * L, THREADS), THREADS, 0, st>>>((const float *)ep, p->e64, N * L);
    if (direct) {
        rc = p->solver->cov_range(p, (const double *)ep, (double *)pp, run_lo, run_lo + count, msg);
        prof_mark(p, "PHT");
    } else {
        rc = cov64(p, f32 ? p->e64 : (const double *)ep, p->pht64, NULL, msg);
    }
    if (rc != DK_OK)
        return rc;
    if (count > 0 && run && !direct) {
        const double *first = p->pht64 + run_lo * M;
        if (f32)
            k_narrow<float><<<blocks_for(count * M, THREADS), THREADS, 0, st>>>(first, (float *)pp, count * M);
        else
            CUDA_TRY(cudaMemcpyAsync(pp, first, (size_t)(count * M) * sizeof(double), cudaMemcpyDefault, st),
                     "copying the covariance rows");
    } else if (count > 0 && !run) {
        if (f32)
            k_rows<float><<<blocks_for(count * M, THREADS), THREADS, 0, st>>>(p->pht64, (float *)pp, M, count, *own, ny);
        else
            k_rows<double><<<blocks_for(count * M, THREADS), THREADS, 0, st>>>(p->pht64, (double *)pp, M, count, *own,
                                                                               ny);
    }
    if (part) {
        char *out = (char *)((dk_cuda_buffer *)part)->ptr + at * (f32 ? 4 : 8);
        dim3 grid((unsigned)(M < 65535 ? M : 65535), (unsigned)p->S);
        /* float64: the own rows just written; float32: pht64 */
        k_part_hpht<<<grid, THREADS, 0, st>>>(f32 ? p->pht64 : (const double *)pp, !f32, p->hpht_seg, p->indices,
                                              p->values, p->partial, M, p->S, p->seg_width,
                                              run ? run_lo : -1, run ? run_lo + count : -1, *own, ny);
        if (f32)
            k_part_sum<float><<<blocks_for(M * M * 32, THREADS), THREADS, 0, st>>>(p->partial, (float *)out, M, p->S);
        else
            k_part_sum<double><<<blocks_for(M * M * 32, THREADS), THREADS, 0, st>>>(p->partial, (double *)out, M, p->S);
        if (x) {
            const void *xp = ((const dk_cuda_buffer *)x)->ptr;
            unsigned rows = (unsigned)(M < 65535 ? M : 65535);
            if (f32)
                k_part_hx<float><<<rows, THREADS, 0, st>>>((const float *)xp, p->indptr, p->indices, p->values,
                                                           (float *)out + M * M, M, L, *own, ny);
            else
                k_part_hx<double><<<rows, THREADS, 0, st>>>((const double *)xp, p->indptr, p->indices, p->values,
                                                            (double *)out + M * M, M, L, *own, ny);
        }
    }
    CUDA_TRY(cudaGetLastError(), "the covariance rows' kernels");
    prof_mark(p, "rows and partial sums");
    return dk_cuda_finish(p->dev, "the covariance rows", msg);
}

dk_status dk_cuda_enkf::inflate(void *plan, const void *x, dk_dtype xt, size_t count, double inflation, void *X,
                                void *e, dk_msg *msg)
{
    Plan *p = (Plan *)plan;
    dk_status rc = dk_cuda_enter(p->dev, msg);
    if (rc != DK_OK || count == 0)
        return rc;
    cudaStream_t st = p->dev->stream;
    long long n = (long long)count;
    const void *xp = ((const dk_cuda_buffer *)x)->ptr;
    double *Xp = (double *)((dk_cuda_buffer *)X)->ptr, *ep = (double *)((dk_cuda_buffer *)e)->ptr;
    if (xt == DK_F32)
        k_inflate<float><<<blocks_for(n, THREADS), THREADS, 0, st>>>((const float *)xp, Xp, ep, n, p->L, inflation);
    else
        k_inflate<double><<<blocks_for(n, THREADS), THREADS, 0, st>>>((const double *)xp, Xp, ep, n, p->L, inflation);
    CUDA_TRY(cudaGetLastError(), "the inflation kernel");
    return dk_cuda_finish(p->dev, "the inflation", msg);
}

/* Every rank solves the same M x M system from the same sums (cuSOLVER),
 * then updates its own points; x is written only where the solve
 * succeeded and no rank failed (decided on the device). */
dk_status dk_cuda_enkf::update(void *plan, const void *sums, size_t at, const double *d, const double *r,
                               const void *pht, const void *X, size_t count, void *x, dk_dtype xt, dk_msg *msg)
{
    Plan *p = (Plan *)plan;
    dk_status rc = dk_cuda_enter(p->dev, msg);
    if (rc != DK_OK)
        return rc;
    cudaStream_t st = p->dev->stream;
    long long M = p->M, L = p->L, n = (long long)count * L;
    if ((rc = solver_ready(p, msg)) != DK_OK ||
        (rc = ensure(&p->x64, n > 0 ? n : 1, "allocating the analysis work arrays", msg)) != DK_OK)
        return rc;
    const double *sp = (const double *)((const dk_cuda_buffer *)sums)->ptr;
    CUDA_TRY(cudaMemcpyAsync(p->d_host_copy, d, (size_t)(M * L) * sizeof(double), cudaMemcpyDefault, st),
             "copying the observations");
    CUDA_TRY(cudaMemcpyAsync(p->r_dev, r, (size_t)M * sizeof(double), cudaMemcpyDefault, st),
             "copying the observation variances");
    CUDA_TRY(cudaMemcpyAsync(p->A, sp + at, (size_t)(M * M) * sizeof(double), cudaMemcpyDefault, st),
             "copying HPHT");
    k_innovation_sums<<<blocks_for(M * L, THREADS), THREADS, 0, st>>>(sp + at + M * M, p->d_host_copy, p->r_dev, p->D,
                                                                       p->A, M, L);
    CUDA_TRY(cudaGetLastError(), "the innovation kernel");
    CUSOLVER_TRY(cusolverDnDpotrf(p->cusolver, CUBLAS_FILL_MODE_LOWER, (int)M, p->A, (int)M, p->work, p->lwork, p->info),
                 "potrf");
    CUSOLVER_TRY(cusolverDnDpotrs(p->cusolver, CUBLAS_FILL_MODE_LOWER, (int)M, (int)L, p->A, (int)M, p->D, (int)M,
                                  p->info + 1),
                 "potrs");
    if (count > 0) {
        const double one = 1.0;
        CUDA_TRY(cudaMemcpyAsync(p->x64, ((const dk_cuda_buffer *)X)->ptr, (size_t)n * sizeof(double),
                                 cudaMemcpyDefault, st),
                 "copying the forecast");
        CUBLAS_TRY(cublasDgemm(p->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)L, (int)count, (int)M, &one, p->D, (int)M,
                               (const double *)((const dk_cuda_buffer *)pht)->ptr, (int)M, &one, p->x64, (int)L),
                   "dgemm (X += PHT Z)");
        void *xp = ((dk_cuda_buffer *)x)->ptr;
        if (xt == DK_F32)
            k_store_if<float><<<blocks_for(n, THREADS), THREADS, 0, st>>>(p->x64, (float *)xp, n, p->info, sp);
        else
            k_store_if<double><<<blocks_for(n, THREADS), THREADS, 0, st>>>(p->x64, (double *)xp, n, p->info, sp);
        CUDA_TRY(cudaGetLastError(), "the store kernel");
    }
    int info[2] = {0, 0};
    double failures = 0;
    CUDA_TRY(cudaMemcpyAsync(info, p->info, sizeof info, cudaMemcpyDefault, st), "reading the solver status");
    CUDA_TRY(cudaMemcpyAsync(&failures, sp, sizeof failures, cudaMemcpyDefault, st), "reading the failures");
    CUDA_TRY(cudaStreamSynchronize(st), "the analysis update");
    if (failures != 0)
        return DK_OK; /* a rank failed: the layer says so */
    if (info[0] != 0 || info[1] != 0) {
        dk_msg_set(msg, info[0] > 0 ? "HPHT + R is not positive definite (cusolverDnDpotrf, minor %d)"
                                    : "cusolver rejected argument %d",
                   info[0] > 0 ? info[0] : info[0] < 0 ? -info[0] : -info[1]);
        return info[0] > 0 ? DK_ERR_INVALID_ARGUMENT : DK_ERR_BACKEND;
    }
    return DK_OK;
}
