/* dakit cuda plugin, letkf: the variant "syevj" (asked for by name). For a
 * batch of points k_points (points.cu, mode 1) selects each point's
 * observations and writes its A and b, cuSOLVER's cusolverDnDsyevjBatched
 * solves the batch's eigenproblems, k_syevj_info keeps the worst
 * convergence flag, and k_points (mode 2) finishes each point from its
 * eigenpairs. Where cuSOLVER refuses the members the plan says so. */
#include "letkf.cuh"

using namespace dk_cuda_letkf;

namespace {

/* syevj: any nonzero info of the batch into *flag (the largest). */
__global__ void k_syevj_info(const int *info, int count, int *flag)
{
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < count; t += gridDim.x * blockDim.x)
        if (info[t] != 0)
            atomicMax(flag, info[t] > 0 ? info[t] : 1 << 30);
}

} // namespace

namespace dk_cuda_letkf {

dk_status plan_syevj(Plan *p, dk_msg *msg)
{
    const long long k = p->a.k, n = (long long)p->desc.n;
    /* the batch: A (k x k), b and lambda of up to ~256 MiB of A */
    long long batch = (256LL << 20) / (k * k * 8);
    batch = batch < 1 ? 1 : batch > n ? n : batch;
    p->batch = batch;
    CUDA_TRY(cudaMalloc((void **)&p->d_batA, (size_t)(batch * k * k) * sizeof(double)), "the letkf syevj batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_batb, (size_t)(batch * k) * sizeof(double)), "the letkf syevj batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_batlam, (size_t)(batch * k) * sizeof(double)), "the letkf syevj batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_info, (size_t)batch * sizeof(int)), "the letkf syevj batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_nobs_tmp, (size_t)n * sizeof(int32_t)), "the letkf syevj batch");
    CUSOLVER_TRY(cusolverDnCreate(&p->solver), "cusolverDnCreate");
    CUSOLVER_TRY(cusolverDnSetStream(p->solver, p->dev->stream), "cusolverDnSetStream");
    CUSOLVER_TRY(cusolverDnCreateSyevjInfo(&p->params), "cusolverDnCreateSyevjInfo");
    cusolverStatus_t r = cusolverDnDsyevjBatched_bufferSize(p->solver, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER,
                                                            (int)k, p->d_batA, (int)k, p->d_batlam, &p->lwork, p->params,
                                                            (int)batch);
    if (r == CUSOLVER_STATUS_INVALID_VALUE) {
        /* its documented limit on the matrices' size, where this cuSOLVER keeps it */
        dk_msg_set(msg, "cuda letkf: cuSOLVER's syevjBatched refuses %lld x %lld matrices (members); the variant "
                        "jacobi takes them", k, k);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    CUSOLVER_TRY(r, "cusolverDnDsyevjBatched_bufferSize");
    CUDA_TRY(cudaMalloc((void **)&p->d_work, (size_t)(p->lwork > 0 ? p->lwork : 1) * sizeof(double)),
             "the letkf syevj workspace");
    p->a.bat_A = p->d_batA, p->a.bat_b = p->d_batb, p->a.bat_lam = p->d_batlam;
    return DK_OK;
}

template <typename T> dk_status run_syevj(Plan *p, Args a, dk_msg *msg)
{
    cudaStream_t sm = p->dev->stream;
    const long long n = (long long)p->desc.n;
    dk_status st;
    /* the selections' counts go to nobs (or a scratch array) between the two kernels */
    if (!a.nobs)
        a.nobs = p->d_nobs_tmp;
    for (long long i0 = 0; i0 < n; i0 += p->batch) {
        a.i0 = i0;
        a.i1 = i0 + p->batch < n ? i0 + p->batch : n;
        const int count = (int)(a.i1 - a.i0);
        const int blocks = count < p->blocks ? count : p->blocks;
        if ((st = launch_points<T>(p, a, 1, blocks, msg)) != DK_OK)
            return st;
        CUSOLVER_TRY(cusolverDnDsyevjBatched(p->solver, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, a.k, p->d_batA,
                                             a.k, p->d_batlam, p->d_work, p->lwork, p->d_info, p->params, count),
                     "cusolverDnDsyevjBatched");
        k_syevj_info<<<(count + 255) / 256, 256, 0, sm>>>(p->d_info, count, p->d_overflow + 2);
        CUDA_TRY(cudaGetLastError(), "launching the letkf syevj check");
        if ((st = launch_points<T>(p, a, 2, blocks, msg)) != DK_OK)
            return st;
    }
    return DK_OK;
}

template dk_status run_syevj<float>(Plan *p, Args a, dk_msg *msg);
template dk_status run_syevj<double>(Plan *p, Args a, dk_msg *msg);

} // namespace dk_cuda_letkf
