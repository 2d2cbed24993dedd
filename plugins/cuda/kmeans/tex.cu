/* dakit cuda plugin, kmeans: the radar texture features (dakit/kmeans.h),
 * for plans of DK_KMEANS_TEXTURE_D features, feature-major, on an image:
 * planes, then features with their statistics in three deterministic stages
 * (block partials in a fixed grid, one block reducing them in block order),
 * then the standardization with the initial centroids' interval sums. */
#include "kmeans.cuh"

using namespace dk_cuda_kmeans;

namespace {

const int TEX_BLOCKS_PER_SM = 2;
const int TEX_STATS = 9; /* per block: sum[3], sq[3], count, min z, max z */

__global__ void k_tex_planes(const float *value, float *planes, long long n)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float v = value[i];
        bool has = isfinite(v);
        float z = has ? v : 0.0f;
        planes[i] = z;
        planes[n + i] = z * z;
        planes[2 * n + i] = has ? 1.0f : 0.0f;
    }
}

__global__ void __launch_bounds__(THREADS) k_tex_features(const float *value, const float *sm, float min_value,
                                                          float *points, uint8_t *mask, double *part, long long n)
{
    __shared__ double scratch[THREADS / 32];
    double sum[3] = {0, 0, 0}, sq[3] = {0, 0, 0}, cnt = 0;
    float lo = INFINITY, hi = -INFINITY;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float v = value[i];
        bool has = isfinite(v);
        float z = has ? v : 0.0f;
        float a = sm[i], b = sm[n + i], w = sm[2 * n + i];
        float mean = w > 1e-6f ? __fdiv_rn(a, w) : z;
        float var = w > 1e-6f ? __fsub_rn(__fdiv_rn(b, w), __fmul_rn(mean, mean)) : 0.0f;
        float f[3] = {z, mean, var > 0 ? __fsqrt_rn(var) : 0.0f};
        bool in = has && z >= min_value;
        mask[i] = in;
#pragma unroll
        for (int j = 0; j < 3; j++) {
            points[j * n + i] = f[j];
            if (in) {
                sum[j] += f[j];
                sq[j] += (double)f[j] * f[j];
            }
        }
        if (in) {
            cnt += 1;
            lo = fminf(lo, z);
            hi = fmaxf(hi, z);
        }
    }
    double vals[7] = {sum[0], sum[1], sum[2], sq[0], sq[1], sq[2], cnt};
    for (int j = 0; j < 7; j++) {
        double t = block_sum(vals[j], scratch);
        if (threadIdx.x == 0)
            part[(size_t)blockIdx.x * TEX_STATS + j] = t;
    }
    for (int o = 16; o > 0; o >>= 1) {
        lo = fminf(lo, __shfl_down_sync(0xffffffffu, lo, o));
        hi = fmaxf(hi, __shfl_down_sync(0xffffffffu, hi, o));
    }
    __shared__ float slo[THREADS / 32], shi[THREADS / 32];
    if ((threadIdx.x & 31) == 0) {
        slo[threadIdx.x / 32] = lo;
        shi[threadIdx.x / 32] = hi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < THREADS / 32; w++) {
            lo = fminf(lo, slo[w]);
            hi = fmaxf(hi, shi[w]);
        }
        part[(size_t)blockIdx.x * TEX_STATS + 7] = lo;
        part[(size_t)blockIdx.x * TEX_STATS + 8] = hi;
    }
}

/* One warp: the partials -> st = valid, mu[3], sd[3], lo, width
 * (standardized feature 0, the initial centroids' intervals). Lane j sums
 * blocks j, j + 32, ..., then the lanes' sums meet in a fixed tree: the
 * same order on every run. */
__global__ void k_tex_stats(const double *part, int blocks, int k, double *st)
{
    if (blockIdx.x)
        return;
    const int lane = threadIdx.x;
    double t[TEX_STATS] = {0, 0, 0, 0, 0, 0, 0, INFINITY, -INFINITY};
    for (int b = lane; b < blocks; b += 32) {
#pragma unroll
        for (int j = 0; j < 7; j++)
            t[j] += part[(size_t)b * TEX_STATS + j];
        t[7] = fmin(t[7], part[(size_t)b * TEX_STATS + 7]);
        t[8] = fmax(t[8], part[(size_t)b * TEX_STATS + 8]);
    }
    for (int off = 16; off > 0; off /= 2) {
#pragma unroll
        for (int j = 0; j < 7; j++)
            t[j] += __shfl_xor_sync(0xffffffffu, t[j], off);
        t[7] = fmin(t[7], __shfl_xor_sync(0xffffffffu, t[7], off));
        t[8] = fmax(t[8], __shfl_xor_sync(0xffffffffu, t[8], off));
    }
    if (lane)
        return;
    double valid = t[6];
    st[0] = valid;
    for (int j = 0; j < 3; j++) {
        double mu = valid > 0 ? t[j] / valid : 0.0;
        double var = valid > 0 ? t[3 + j] / valid - mu * mu : 0.0;
        st[1 + j] = mu;
        st[4 + j] = var > 1e-12 ? sqrt(var) : 1.0;
    }
    /* standardizing is monotonic, so the standardized range is the range's */
    float lo = valid > 0 ? (float)((t[7] - st[1]) / st[4]) : 0.0f;
    float hi = valid > 0 ? (float)((t[8] - st[1]) / st[4]) : 0.0f;
    st[7] = lo;
    st[8] = ((double)hi - (double)lo) / k;
}

/* Standardizes in place and sums each interval's points (block partials:
 * ipart[b][c][0..3] = sum of 3 features, count). The lanes of a warp in the
 * same interval sum by shuffles first, so one shared atomic per interval a
 * warp meets (not one per point: double atomics on shared memory are
 * compare-and-swap loops, and every point of the image hits k addresses).
 * Whole warps step together, for the shuffles. */
__global__ void __launch_bounds__(THREADS) k_tex_standardize(float *points, const uint8_t *mask, const double *st,
                                                             double *ipart, int k, long long n)
{
    extern __shared__ double isum[]; /* k * 4 */
    for (int j = threadIdx.x; j < 4 * k; j += blockDim.x)
        isum[j] = 0;
    __syncthreads();
    const double mu[3] = {st[1], st[2], st[3]}, sd[3] = {st[4], st[5], st[6]};
    const double lo = st[7], width = st[8];
    const int lane = threadIdx.x & 31;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long base = (long long)blockIdx.x * blockDim.x + threadIdx.x - lane; base < n; base += stride) {
        const long long i = base + lane;
        const bool in = i < n && mask[i];
        double v[4] = {0, 0, 0, 0};
        if (i < n)
#pragma unroll
            for (int j = 0; j < 3; j++) {
                const float f = in ? (float)(((double)points[j * n + i] - mu[j]) / sd[j]) : 0.0f;
                points[j * n + i] = f;
                v[j] = f;
            }
        int c = -1;
        if (in) {
            c = width > 0 ? (int)((v[0] - (double)(float)lo) / width) : 0;
            c = c < 0 ? 0 : c >= k ? k - 1 : c;
            v[3] = 1.0;
        }
        const unsigned peers = __match_any_sync(0xffffffffu, c);
        sum_peers<4, double>(peers, v, 4);
        /* the order of these adds varies; it moves bits far below the
         * float the centroid is rounded to */
        if (c >= 0 && lane == __ffs(peers) - 1)
            for (int j = 0; j < 4; j++)
                atomicAdd(&isum[c * 4 + j], v[j]);
    }
    __syncthreads();
    for (int j = threadIdx.x; j < 4 * k; j += blockDim.x)
        ipart[(size_t)blockIdx.x * 4 * k + j] = isum[j];
}

/* The initial centroids from the interval partials. Each warp sums series
 * (c, f) over the blocks as k_tex_stats does, in a fixed order; `series`
 * holds 4 k doubles of shared memory. */
__global__ void k_tex_init(const double *ipart, int blocks, int k, const double *st, float *init)
{
    extern __shared__ double series[]; /* [c * 4 + f]: f 0..2 the features' sums, 3 the count */
    __shared__ double all[4];
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    for (int j = warp; j < 4 * k; j += warps) {
        double t = 0;
        for (int b = lane; b < blocks; b += 32)
            t += ipart[(size_t)b * 4 * k + j];
        for (int off = 16; off > 0; off /= 2)
            t += __shfl_xor_sync(0xffffffffu, t, off);
        if (lane == 0)
            series[j] = t;
    }
    __syncthreads();
    if (threadIdx.x < 4) {
        double t = 0;
        for (int c = 0; c < k; c++)
            t += series[c * 4 + threadIdx.x];
        all[threadIdx.x] = t;
    }
    __syncthreads();
    const double lo = st[7], width = st[8];
    for (int j = threadIdx.x; j < 3 * k; j += blockDim.x) {
        int c = j / 3, f = j % 3;
        double s = series[c * 4 + f], cnt = series[c * 4 + 3];
        float v;
        if (cnt > 0)
            v = (float)(s / cnt);
        else if (f == 0)
            v = (float)((double)(float)lo + (c + 0.5) * width);
        else
            v = all[3] > 0 ? (float)(all[f] / all[3]) : 0.0f;
        init[c * 3 + f] = v;
    }
}

/* The device entered, for a plan that makes texture features. */
dk_status texture_enter(const Plan *p, dk_msg *msg)
{
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st == DK_OK && !p->tex_blocks) {
        dk_msg_set(msg, "cuda kmeans: this plan makes no texture features");
        st = DK_ERR_INVALID_ARGUMENT;
    }
    return st;
}

} // namespace

namespace dk_cuda_kmeans {

/* The texture kernels' scratch, for a plan that makes texture features. */
dk_status tex_plan(Plan *p, dk_msg *msg)
{
    const dk_cuda_device *dev = p->dev;
    const dk_kmeans_desc &d = p->s.desc;
    int tb = TEX_BLOCKS_PER_SM * dev->sm_count;
    size_t tsizes[] = {align256((size_t)tb * TEX_STATS * sizeof(double)), align256(16 * sizeof(double)),
                       align256((size_t)tb * 4 * d.k * sizeof(double))};
    void *tex = NULL;
    CUDA_TRY(cudaMalloc(&tex, tsizes[0] + tsizes[1] + tsizes[2]), "allocating the kmeans texture scratch");
    p->tex_scratch = tex;
    char *t = (char *)p->tex_scratch;
    p->tex_part = (double *)t;
    p->tex_st = (double *)(t += tsizes[0]);
    p->tex_ipart = (double *)(t += tsizes[1]);
    CUDA_TRY(cudaEventCreateWithFlags(&p->tex_stats_read, cudaEventDisableTiming),
             "creating the texture statistics' event");
    p->tex_blocks = tb;
    return DK_OK;
}

dk_status texture_planes(void *handle, const void *value, void *planes, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = texture_enter(p, msg);
    if (st != DK_OK)
        return st;
    k_tex_planes<<<p->tex_blocks, THREADS, 0, p->dev->stream>>>(
        (const float *)((const dk_cuda_buffer *)value)->ptr, (float *)((dk_cuda_buffer *)planes)->ptr,
        (long long)p->s.desc.n);
    CUDA_TRY(cudaGetLastError(), "launching the texture planes kernel");
    return dk_cuda_finish(p->dev, "the texture planes", msg);
}

dk_status texture_features(void *handle, const void *value, const void *smoothed, double min_value, void *points,
                           void *mask, void *init, dk_kmeans_texture_stats *stats, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = texture_enter(p, msg);
    if (st != DK_OK)
        return st;
    const long long n = (long long)p->s.desc.n;
    const int k = p->s.desc.k, B = p->tex_blocks;
    cudaStream_t sm = p->dev->stream;
    float *pts = (float *)((dk_cuda_buffer *)points)->ptr;
    uint8_t *msk = (uint8_t *)((dk_cuda_buffer *)mask)->ptr;
    /* min_value compared in float, as z is; the float nearest at or above */
    float minf = (float)min_value;
    if ((double)minf < min_value)
        minf = nextafterf(minf, INFINITY);
    k_tex_features<<<B, THREADS, 0, sm>>>((const float *)((const dk_cuda_buffer *)value)->ptr,
                                          (const float *)((const dk_cuda_buffer *)smoothed)->ptr, minf, pts, msk,
                                          p->tex_part, n);
    k_tex_stats<<<1, 32, 0, sm>>>(p->tex_part, B, k, p->tex_st);
    /* valid, mu[3], sd[3] for the host, read as soon as they are made */
    double *r = p->host_out;
    CUDA_TRY(cudaMemcpyAsync(r, p->tex_st, 7 * sizeof *r, cudaMemcpyDefault, sm), "computing the texture features");
    CUDA_TRY(cudaEventRecord(p->tex_stats_read, sm), "computing the texture features");
    k_tex_standardize<<<B, THREADS, (size_t)4 * k * sizeof(double), sm>>>(pts, msk, p->tex_st, p->tex_ipart, k, n);
    k_tex_init<<<1, THREADS, (size_t)4 * k * sizeof(double), sm>>>(p->tex_ipart, B, k, p->tex_st,
                                                                   (float *)((dk_cuda_buffer *)init)->ptr);
    CUDA_TRY(cudaGetLastError(), "computing the texture features");
    /* under DK_QUEUE_ASYNC only the statistics are waited for */
    CUDA_TRY(cudaEventSynchronize(p->tex_stats_read), "computing the texture features");
    if ((st = dk_cuda_finish(p->dev, "computing the texture features", msg)) != DK_OK)
        return st;
    stats->valid = (size_t)r[0];
    for (int j = 0; j < 3; j++) {
        stats->mean[j] = r[1 + j];
        stats->sd[j] = r[4 + j];
    }
    return DK_OK;
}

} // namespace dk_cuda_kmeans
