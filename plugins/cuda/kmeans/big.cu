/* dakit cuda plugin, kmeans: plain k-means with k > DK_KMEANS_MAX_K (without
 * contiguity). The centroids do not fit in shared memory whole, so one
 * iteration is four launches on the stream:
 * k_big_assign (each thread labels a point per pass while the block walks
 * the centroids in tiles of `rows` rows staged in shared memory, ascending
 * with strict <: ties to the lowest index), k_big_sums (block b takes a
 * contiguous chunk of the points; for each block of THREADS clusters,
 * thread t owns cluster c0 + t and adds the chunk's points of that label,
 * staged tile by tile in shared memory, in point order, into the phases'
 * partial layout), then k_part_sums and k_part_update as the phases run
 * them, the stop flag and the move in the phases' state. */
#include "kmeans.cuh"

using namespace dk_cuda_kmeans;

namespace {

template <int DMAX>
__global__ void __launch_bounds__(THREADS) k_big_assign(PartArgs a, int rows)
{
    extern __shared__ __align__(16) unsigned char smem[];
    float *Cs = (float *)smem;
    const int tid = threadIdx.x;
    if (a.state[1] != 0.0)
        return; /* the whole grid sees the same flag */
    for (long long base = (long long)blockIdx.x * THREADS; base < a.n; base += (long long)gridDim.x * THREADS) {
        const long long i = base + tid;
        const bool live = i < a.n && (!a.mask || a.mask[i]);
        float x[DMAX];
#pragma unroll
        for (int f = 0; f < DMAX; f++)
            x[f] = 0.0f;
        if (live)
            part_point<DMAX>(a, i, x);
        int best = 0;
        float best_dist = 0.0f;
        for (int c0 = 0; c0 < a.k; c0 += rows) {
            const int nr = min(rows, a.k - c0);
            __syncthreads();
            for (int j = tid; j < nr * DMAX; j += THREADS)
                Cs[j] = j % DMAX < a.d ? a.C[(long long)(c0 + j / DMAX) * a.d + j % DMAX] : 0.0f;
            __syncthreads();
            for (int c = 0; live && c < nr; c++) {
                const float dist = distance2<DMAX>(x, Cs + c * DMAX);
                if (c0 + c == 0 || dist < best_dist) {
                    best = c0 + c;
                    best_dist = dist;
                }
            }
        }
        if (i < a.n)
            a.labels[i] = live ? best : -1;
    }
}

template <int DMAX>
__global__ void __launch_bounds__(THREADS) k_big_sums(PartArgs a)
{
    extern __shared__ __align__(16) unsigned char smem[];
    float *xs = (float *)smem;
    int *ls = (int *)(xs + THREADS * (DMAX + 1));
    const int tid = threadIdx.x;
    if (a.state[1] != 0.0)
        return;
    const long long chunk = (a.n + gridDim.x - 1) / gridDim.x, first = (long long)blockIdx.x * chunk;
    const long long last = min(a.n, first + chunk);
    for (int c0 = 0; c0 < a.k; c0 += THREADS) {
        const int c = c0 + tid;
        double acc[DMAX];
#pragma unroll
        for (int f = 0; f < DMAX; f++)
            acc[f] = 0.0;
        double cnt = 0.0; /* the sum of the weights */
        for (long long at = first; at < last; at += THREADS) {
            __syncthreads();
            const long long i = at + tid;
            int label = -1;
            float x[DMAX];
#pragma unroll
            for (int f = 0; f < DMAX; f++)
                x[f] = 0.0f;
            if (i < last) {
                label = a.labels[i];
                if (label >= 0)
                    part_point<DMAX>(a, i, x);
            }
            ls[tid] = label;
#pragma unroll
            for (int f = 0; f < DMAX; f++)
                xs[tid * (DMAX + 1) + f] = x[f];
            xs[tid * (DMAX + 1) + DMAX] = a.w && label >= 0 ? a.w[i] : 1.0f;
            __syncthreads();
            const int count = (int)min((long long)THREADS, last - at);
            for (int j = 0; j < count; j++)
                if (ls[j] == c) {
                    const double w = (double)xs[j * (DMAX + 1) + DMAX];
#pragma unroll
                    for (int f = 0; f < DMAX; f++)
                        acc[f] = __dadd_rn(acc[f], __dmul_rn(w, (double)xs[j * (DMAX + 1) + f]));
                    cnt += w;
                }
        }
        if (c < a.k) {
            for (int f = 0; f < a.d; f++)
                a.partial[((long long)c * (a.d + 1) + f) * a.blocks + blockIdx.x] = acc[f];
            a.partial[((long long)c * (a.d + 1) + a.d) * a.blocks + blockIdx.x] = cnt;
        }
    }
}

template <int DMAX>
void big_pick_d(Plan *p)
{
    p->big_assign = k_big_assign<DMAX>;
    p->big_sums = k_big_sums<DMAX>;
    p->big_sums_smem = (size_t)THREADS * (DMAX + 2) * sizeof(float);
}

/* Iterations with the k_big_* launches; the host looks at the stop flag
 * every BIG_BATCH iterations when tol > 0. */
const int BIG_BATCH = 8;

} // namespace

namespace dk_cuda_kmeans {

/* The k_big_* plan: kernels, the centroid tile that fits shared memory,
 * blocks, and one allocation for the partials, sums, state and centroids. */
dk_status big_plan(Plan *p, const dk_kmeans_setup *setup, dk_msg *msg)
{
    const dk_cuda_device *dev = p->dev;
    const dk_kmeans_desc &d = setup->desc;
    int dmax = d.d <= 4 ? 4 : d.d <= 8 ? 8 : d.d <= 16 ? 16 : d.d <= 32 ? 32 : 64;
    if (dmax == 4)
        big_pick_d<4>(p);
    else if (dmax == 8)
        big_pick_d<8>(p);
    else if (dmax == 16)
        big_pick_d<16>(p);
    else if (dmax == 32)
        big_pick_d<32>(p);
    else
        big_pick_d<64>(p);
    /* the phases' objective kernel; k_part_assign and its sizes go unused */
    part_fn unused_assign;
    size_t unused_smem;
    part_pick(d.d, d.k, &unused_assign, &p->part_objective, &unused_smem);
    p->big = 1;
    p->big_rows = 1024; /* 1024 rows: 16 to 128 KiB; halved until a block fits */
    int per_sm = 0;
    while (p->big_rows >= 32) {
        p->big_assign_smem = (size_t)p->big_rows * dmax * sizeof(float);
        if (p->big_assign_smem > 48 * 1024 &&
            cudaFuncSetAttribute((const void *)p->big_assign, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)p->big_assign_smem) != cudaSuccess) {
            cudaGetLastError();
            p->big_rows /= 2;
            continue;
        }
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, (const void *)p->big_assign, THREADS,
                                                          p->big_assign_smem) == cudaSuccess &&
            per_sm >= 1)
            break;
        cudaGetLastError();
        p->big_rows /= 2;
    }
    if (per_sm < 1) {
        dk_msg_set(msg, "cuda kmeans: no block of the large-k assignment fits on an SM (d %d)", d.d);
        return DK_ERR_BACKEND;
    }
    const size_t pairs = (size_t)d.k * (d.d + 1);
    long long tiles = ((long long)d.n + THREADS - 1) / THREADS;
    long long blocks = (long long)per_sm * dev->sm_count;
    /* the partials: at most about 256 MiB */
    long long most = (long long)(((size_t)256 << 20) / (pairs * sizeof(double)));
    blocks = blocks < tiles ? blocks : tiles;
    blocks = blocks < most ? blocks : most;
    p->part_blocks = (int)(blocks < 1 ? 1 : blocks);
    size_t sizes[] = {align256(pairs * p->part_blocks * sizeof(double)),
                      align256(((size_t)d.k * d.d + d.k + 1) * sizeof(double)), align256(4 * sizeof(double)),
                      align256(2 * sizeof(double)), align256((size_t)d.k * d.d * sizeof(float))};
    size_t total = 0;
    for (size_t sz : sizes)
        total += sz;
    void *scratch = NULL;
    CUDA_TRY(cudaMalloc(&scratch, total), "allocating the large-k kmeans plan's scratch");
    p->scratch = scratch;
    char *at = (char *)scratch;
    p->part_partial = (double *)at;
    p->big_sums_out = (double *)(at += sizes[0]);
    p->big_state = (double *)(at += sizes[1]);
    p->big_obj = (double *)(at += sizes[2]);
    p->big_C = (float *)(at += sizes[3]);
    return DK_OK;
}

dk_status big_execute(Plan *p, const void *points, const void *mask, const void *init, void *labels,
                      void *centroids, dk_kmeans_result *res, dk_msg *msg)
{
    const dk_kmeans_desc &d = p->s.desc;
    cudaStream_t sm = p->dev->stream;
    const size_t kd = (size_t)d.k * d.d;
    PartArgs a = part_args(p, points, mask, NULL);
    a.C = p->big_C;
    a.labels = (int32_t *)((dk_cuda_buffer *)labels)->ptr;
    a.state = p->big_state;
    CUDA_TRY(cudaMemcpyAsync(p->big_C, ((const dk_cuda_buffer *)init)->ptr, kd * sizeof(float),
                             cudaMemcpyDefault, sm),
             "copying the initial centroids");
    CUDA_TRY(cudaMemsetAsync(p->big_state, 0, 4 * sizeof(double), sm), "clearing the kmeans state");
    CUDA_TRY(cudaMemsetAsync(p->big_sums_out, 0, (kd + d.k + 1) * sizeof(double), sm), "clearing the kmeans sums");
    double state[4] = {0, 0, 0, 0};
    for (int t = 0; t < d.max_iters; t++) {
        p->big_assign<<<p->part_blocks, THREADS, p->big_assign_smem, sm>>>(a, p->big_rows);
        p->big_sums<<<p->part_blocks, THREADS, p->big_sums_smem, sm>>>(a);
        part_sums_launch(p, p->part_blocks, p->big_sums_out, p->big_state);
        part_update_launch(p, p->big_sums_out, p->big_C, p->big_state);
        CUDA_TRY(cudaGetLastError(), "queueing a large-k kmeans iteration");
        if (d.tol > 0 && (t + 1) % BIG_BATCH == 0 && t + 1 < d.max_iters) {
            CUDA_TRY(cudaMemcpyAsync(state, p->big_state, sizeof state, cudaMemcpyDefault, sm),
                     "running the kmeans iterations");
            CUDA_TRY(cudaStreamSynchronize(sm), "running the kmeans iterations");
            if (state[1] != 0.0)
                break;
        }
    }
    part_objective_launch(p, a, p->big_obj);
    CUDA_TRY(cudaGetLastError(), "queueing the kmeans objective");
    CUDA_TRY(cudaMemcpyAsync(((dk_cuda_buffer *)centroids)->ptr, p->big_C, kd * sizeof(float),
                             cudaMemcpyDefault, sm),
             "copying the centroids");
    double obj[2];
    CUDA_TRY(cudaMemcpyAsync(state, p->big_state, sizeof state, cudaMemcpyDefault, sm),
             "running the kmeans iterations");
    CUDA_TRY(cudaMemcpyAsync(obj, p->big_obj, sizeof obj, cudaMemcpyDefault, sm), "the kmeans objective");
    CUDA_TRY(cudaStreamSynchronize(sm), "running the kmeans iterations");
    res->iterations = (int)state[0];
    res->objective = obj[0];
    res->last_move = state[2];
    res->valid = (size_t)obj[1];
    res->assign_seconds = 0;
    res->update_seconds = 0;
    return DK_OK;
}

/* A whole plan with k > DK_KMEANS_MAX_K (sample weights): the k_big_*
 * launches, then the blocks' partials into sums; they do nothing once
 * state's stop is set. */
dk_status big_assign_weighted(Plan *p, const void *points, const void *mask, const void *weights,
                              const void *centroids, void *labels, void *sums, const void *state)
{
    cudaStream_t sm = p->dev->stream;
    PartArgs a = part_args(p, points, mask, centroids);
    a.w = weights ? (const float *)((const dk_cuda_buffer *)weights)->ptr : nullptr;
    a.labels = (int32_t *)((dk_cuda_buffer *)labels)->ptr;
    a.state = (const double *)((const dk_cuda_buffer *)state)->ptr;
    p->big_assign<<<p->part_blocks, THREADS, p->big_assign_smem, sm>>>(a, p->big_rows);
    p->big_sums<<<p->part_blocks, THREADS, p->big_sums_smem, sm>>>(a);
    part_sums_launch(p, p->part_blocks, (double *)((dk_cuda_buffer *)sums)->ptr, a.state);
    return DK_OK;
}

} // namespace dk_cuda_kmeans
