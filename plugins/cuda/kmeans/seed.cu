/* dakit cuda plugin, kmeans: the seeding's distance pass (dakit/kmeans.h
 * seed_distance, seed_read), for k-means++ seeding on the device, any plan. */
#include "kmeans.cuh"

using namespace dk_cuda_kmeans;

namespace {

/* The seeding's distance pass (dakit/kmeans.h seed_distance): one block
 * per DK_KMEANS_SEED_BLOCK points, the reference's float distance, the
 * block's sum in double. */
__global__ void __launch_bounds__(THREADS) k_seed_distance(PartArgs a, const float *centre, const float *near,
                                                           float *out, double *blocks)
{
    __shared__ double scratch[THREADS / 32];
    const long long first = (long long)blockIdx.x * DK_KMEANS_SEED_BLOCK;
    double sum = 0.0;
    for (long long i = first + threadIdx.x; i < first + DK_KMEANS_SEED_BLOCK && i < a.n; i += THREADS) {
        float v = 0.0f;
        if (!a.mask || a.mask[i]) {
            if (centre) {
                for (int f = 0; f < a.d; f++) {
                    const float t = __fsub_rn(a.x[i * a.sp + f * a.sf], centre[f]);
                    v = f == 0 ? __fmul_rn(t, t) : __fadd_rn(v, __fmul_rn(t, t));
                }
            } else {
                v = 1.0f;
            }
            if (a.w)
                v = __fmul_rn(a.w[i], v);
            if (near && near[i] < v)
                v = near[i];
        }
        out[i] = v;
        sum += (double)v;
    }
    sum = block_sum(sum, scratch);
    if (threadIdx.x == 0)
        blocks[blockIdx.x] = sum;
}

} // namespace

namespace dk_cuda_kmeans {

dk_status seed_distance_weighted(void *handle, const void *points, const void *mask, const void *weights,
                                 const void *centre, const void *near, void *out, void *blocks, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    PartArgs a;
    memset(&a, 0, sizeof a);
    a.x = (const float *)((const dk_cuda_buffer *)points)->ptr;
    a.mask = mask ? (const uint8_t *)((const dk_cuda_buffer *)mask)->ptr : nullptr;
    a.w = weights ? (const float *)((const dk_cuda_buffer *)weights)->ptr : nullptr;
    a.n = (long long)p->s.desc.n;
    a.sp = (long long)p->s.stride_point;
    a.sf = (long long)p->s.stride_feature;
    a.d = p->s.desc.d;
    const long long nb = (a.n + DK_KMEANS_SEED_BLOCK - 1) / DK_KMEANS_SEED_BLOCK;
    k_seed_distance<<<(unsigned)nb, THREADS, 0, p->dev->stream>>>(
        a, centre ? (const float *)((const dk_cuda_buffer *)centre)->ptr : nullptr,
        near ? (const float *)((const dk_cuda_buffer *)near)->ptr : nullptr,
        (float *)((dk_cuda_buffer *)out)->ptr, (double *)((dk_cuda_buffer *)blocks)->ptr);
    CUDA_TRY(cudaGetLastError(), "queueing the seeding's distance pass");
    CUDA_TRY(cudaStreamSynchronize(p->dev->stream), "running the seeding's distance pass");
    return DK_OK;
}

dk_status seed_distance(void *handle, const void *points, const void *mask, const void *centre, const void *near,
                        void *out, void *blocks, dk_msg *msg)
{
    return seed_distance_weighted(handle, points, mask, nullptr, centre, near, out, blocks, msg);
}

dk_status seed_read(void *handle, const void *points, const void *dist, size_t first, size_t count, float *values,
                    size_t point, float *x, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    cudaStream_t sm = p->dev->stream;
    if (count)
        CUDA_TRY(cudaMemcpyAsync(values, (const float *)((const dk_cuda_buffer *)dist)->ptr + first,
                                 count * sizeof(float), cudaMemcpyDefault, sm),
                 "reading the seeding's distances");
    const float *X = (const float *)((const dk_cuda_buffer *)points)->ptr;
    for (int f = 0; x && f < p->s.desc.d; f++)
        CUDA_TRY(cudaMemcpyAsync(x + f, X + point * p->s.stride_point + (size_t)f * p->s.stride_feature,
                                 sizeof(float), cudaMemcpyDefault, sm),
                 "reading a seeding's point");
    CUDA_TRY(cudaStreamSynchronize(sm), "reading the seeding's distances");
    return DK_OK;
}

} // namespace dk_cuda_kmeans
