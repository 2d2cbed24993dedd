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
        CUDA_TRY(cudaMalloc(&p->info, sizeof(int)), "allocating the solver status");
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
    CUDA_TRY(cudaMemcpyAsync(p->d_host_copy, d, (size_t)(M * L) * sizeof(double), cudaMemcpyHostToDevice, st),
             "copying the observations");
    CUDA_TRY(cudaMemcpyAsync(p->r_dev, r, (size_t)M * sizeof(double), cudaMemcpyHostToDevice, st),
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
    CUDA_TRY(cudaMemcpyAsync(&info, p->info, sizeof info, cudaMemcpyDeviceToHost, st), "reading the solver status");
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
        CUDA_TRY(cudaMemcpyAsync(xp, p->x64, (size_t)NL * sizeof(double), cudaMemcpyDeviceToDevice, st),
                 "writing the analysis");
    CUDA_TRY(cudaGetLastError(), "the conversion kernel");
    prof_mark(p, "potrs, X += PHT Z");
    CUDA_TRY(cudaMemcpyAsync(&info, p->info, sizeof info, cudaMemcpyDeviceToHost, st), "reading the solver status");
    CUDA_TRY(cudaStreamSynchronize(st), "the analysis");
    if (info != 0) {
        dk_msg_set(msg, "cusolverDnDpotrs rejected argument %d", -info);
        return DK_ERR_BACKEND;
    }
    return DK_OK;
}
