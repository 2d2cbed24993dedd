/* dakit cuda plugin, kmeans: the phases of a distributed iteration
 * (dakit/kmeans.h), for the distributed layer, k <= DK_KMEANS_MAX_K (big.cu
 * launches k_part_sums, k_part_update and k_part_objective too).
 * Separate launches on the device's stream, so that the layer can queue an
 * NCCL all-reduce between them. k_part_assign: each block takes tiles of
 * THREADS consecutive points, labels them (plain: exact distances; a band
 * under contiguity: the window read from the wide previous labels in global
 * memory), leaves labels and features in shared memory, and thread
 * (c, s) adds slice s of the tile's points labelled c in double; after the
 * last tile the slices are added in a fixed order into the block's
 * partials (pair-major: [(c (d + 1) + f) blocks + b], f = d the count). No
 * atomics, so the sums do not depend on scheduling. k_part_screen: the
 * plain phase without previous labels, labelled as k_lloyd labels and
 * summed by warps (see there). k_part_sums: one warp
 * per pair adds the blocks' partials in a fixed order into the layer's
 * sums. k_part_update: one block forms the centroids from the ranks'
 * reduced sums. state (doubles): iterations, stop, move, failed. */
#include "kmeans.cuh"

using namespace dk_cuda_kmeans;

namespace {

/* The contiguity label of band pixel (row, col): prev holds rows
 * [-r, rows + r), so every window row is there (-1 outside the image). */
template <int DMAX>
__device__ int band_label(const PartArgs &a, const float *x, const float *Cs, long long row, long long col)
{
    const int r = a.window / 2;
    int m = 0;
    for (int y = -r; y <= r; y++)
        for (int c = -r; c <= r; c++)
            if ((y || c) && col + c >= 0 && col + c < a.cols)
                m += a.prev[(row + y + r) * a.cols + col + c] >= 0;
    const float inv_d = __fdiv_rn(1.0f, (float)a.d);
    int best = 0;
    float best_cost = 0.0f;
    for (int k = 0; k < a.k; k++) {
        const float dist = distance2<DMAX>(x, Cs + k * DMAX);
        int same = 0;
        for (int y = -r; m && y <= r; y++)
            for (int c = -r; c <= r; c++)
                if ((y || c) && col + c >= 0 && col + c < a.cols)
                    same += a.prev[(row + y + r) * a.cols + col + c] == k;
        const float cost = contig_cost(a.lambda, dist, inv_d, m, same);
        if (k == 0 || cost < best_cost) {
            best = k;
            best_cost = cost;
        }
    }
    return best;
}

/* Shared memory: Cs k * DMAX floats, xs THREADS * (DMAX + 1) floats, ls
 * THREADS ints, red THREADS doubles. */
template <int DMAX>
size_t part_smem(int k)
{
    return ((size_t)k * DMAX + (size_t)THREADS * (DMAX + 1) + THREADS) * sizeof(float) + THREADS * sizeof(double);
}

template <int DMAX>
__global__ void __launch_bounds__(THREADS) k_part_assign(PartArgs a)
{
    extern __shared__ __align__(16) unsigned char smem[];
    float *Cs = (float *)smem;
    float *xs = Cs + a.k * DMAX;
    int *ls = (int *)(xs + THREADS * (DMAX + 1));
    double *red = (double *)(((uintptr_t)(ls + THREADS) + 7) & ~(uintptr_t)7);
    const int tid = threadIdx.x;
    const bool done = a.state[1] != 0.0;
    for (int j = tid; j < a.k * DMAX; j += THREADS)
        Cs[j] = j % DMAX < a.d ? a.C[j / DMAX * a.d + j % DMAX] : 0.0f;
    __syncthreads();
    const int r = a.window / 2, slices = THREADS / a.k, c = tid % a.k, s = tid / a.k;
    const long long tiles = done ? 0 : (a.n + THREADS - 1) / THREADS;
    double acc[DMAX];
#pragma unroll
    for (int f = 0; f < DMAX; f++)
        acc[f] = 0.0;
    double cnt = 0.0; /* the sum of the weights */
    for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        __syncthreads(); /* the last tile's readers are done */
        const long long i = tile * THREADS + tid;
        float x[DMAX];
#pragma unroll
        for (int f = 0; f < DMAX; f++)
            x[f] = 0.0f;
        int label = -1;
        if (i < a.n && (!a.mask || a.mask[i])) {
            part_point<DMAX>(a, i, x);
            if (a.prev) {
                label = band_label<DMAX>(a, x, Cs, i / a.cols, i % a.cols);
            } else {
                float xx[1][DMAX];
#pragma unroll
                for (int f = 0; f < DMAX; f++)
                    xx[0][f] = x[f];
                exact_labels<DMAX, 1>(xx, Cs, a.k, &label);
            }
        }
        if (i < a.n) {
            a.labels[i] = label;
            if (a.next)
                a.next[i + (long long)r * a.cols] = label;
        }
        ls[tid] = label;
#pragma unroll
        for (int f = 0; f < DMAX; f++)
            xs[tid * (DMAX + 1) + f] = x[f];
        xs[tid * (DMAX + 1) + DMAX] = a.w && label >= 0 ? a.w[i] : 1.0f;
        __syncthreads();
        if (s < slices) {
            const int len = (THREADS + slices - 1) / slices, end = min(THREADS, (s + 1) * len);
            for (int j = s * len; j < end; j++)
                if (ls[j] == c) {
                    const double w = (double)xs[j * (DMAX + 1) + DMAX];
#pragma unroll
                    for (int f = 0; f < DMAX; f++)
                        acc[f] = __dadd_rn(acc[f], __dmul_rn(w, (double)xs[j * (DMAX + 1) + f]));
                    cnt += w;
                }
        }
    }
    /* the slices in slice order */
    for (int f = 0; f <= DMAX; f++) {
        __syncthreads();
        double v = cnt;
#pragma unroll
        for (int g = 0; g < DMAX; g++)
            if (g == f)
                v = acc[g];
        red[tid] = v;
        __syncthreads();
        if (!done && tid < a.k && (f < a.d || f == DMAX)) {
            const int col = f < DMAX ? f : a.d;
            double t = 0.0;
            for (int q = 0; q < slices; q++)
                t += red[q * a.k + tid];
            a.partial[((long long)tid * (a.d + 1) + col) * a.blocks + blockIdx.x] = t;
        }
    }
}

const int STAGE = 32 * 10; /* floats a warp stages for add_mma: 32 points of 8 features, labels, weights */

/* The warp's 32 points (one a lane: x, zeros past d; label l, -1 for none;
 * weight w) added on the float64 tensor cores, k <= 16 and d <= 8: D (16
 * clusters x 8 features) += A B over 4 points at a time, A[c][p] the
 * weight where point p's label is c (0 elsewhere), B[p][f] its features,
 * staged through the warp's shared `stage` (rows read without bank
 * conflicts); lane (g, q) also adds the weights of clusters g and g + 8
 * over its points q, q + 4, ... into cnt. Products are exact in float64,
 * so this is the points' weighted sum in float64 in a fixed order, and
 * costs no shuffles. Every lane calls it. */
template <int DMAX, bool W>
__device__ __forceinline__ void add_mma(int l, const float *x, float w, float *stage, double (&D)[4], double (&cnt)[2])
{
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    float *xs = stage, *ws = stage + 32 * 9;
    int *ls = (int *)(stage + 32 * 8);
    float v[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int f = 0; f < (DMAX < 8 ? DMAX : 8); f++)
        v[f] = x[f];
    *(float4 *)(xs + lane * 8) = make_float4(v[0], v[1], v[2], v[3]);
    *(float4 *)(xs + lane * 8 + 4) = make_float4(v[4], v[5], v[6], v[7]);
    ls[lane] = l;
    if (W)
        ws[lane] = w;
    __syncwarp();
#pragma unroll
    for (int s = 0; s < 8; s++) {
        const int p = 4 * s + q, lp = ls[p];
        const double wp = W ? (double)ws[p] : 1.0;
        const double A[2] = {lp == g ? wp : 0.0, lp == g + 8 ? wp : 0.0};
        cnt[0] += A[0];
        cnt[1] += A[1];
        dmma(D, A, (double)xs[p * 8 + g]);
    }
    __syncwarp();
}

template <int DMAX>
size_t part_screen_smem(int k, int d, bool mma)
{
    const size_t floats = (size_t)k * DMAX + (size_t)k + 1; /* Cs, Ch, padding to 8 bytes */
    const size_t bytes = floats * sizeof(float) + (size_t)(THREADS / 32) * k * (d + 1) * sizeof(double);
    return mma ? (bytes + 15) / 16 * 16 + (size_t)(THREADS / 32) * STAGE * sizeof(float) : bytes;
}

template <int DMAX, bool W>
__device__ __forceinline__ void add_by_label(int l, const float *x, float w, int d, double *sums)
{
    /* W: the weighted features and the weights' sum go through the
     * shuffles; else the features alone, the count being the group's size.
     * A group's sum of at most 32 terms is formed in float (half the
     * shuffles of double) and added into the warp's double copy. */
    constexpr int V = W ? DMAX + 1 : DMAX;
    float v[V];
#pragma unroll
    for (int f = 0; f < V; f++)
        v[f] = l < 0 ? 0.0f : f < d ? (W ? __fmul_rn(w, x[f]) : x[f]) : f == d ? w : 0.0f;
    const unsigned peers = __match_any_sync(0xffffffffu, l);
    sum_peers<V>(peers, v, W ? d + 1 : d);
    if (l >= 0 && (threadIdx.x & 31) == __ffs(peers) - 1) {
#pragma unroll
        for (int f = 0; f < V; f++)
            if (f < d || (W && f == d))
                sums[l * (d + 1) + f] += (double)v[f];
        if (!W)
            sums[l * (d + 1) + d] += (double)__popc(peers);
    }
    __syncwarp();
}

/* k_part_screen: the plain phase (no previous labels) as k_lloyd labels:
 * P points a thread with whole warps stepping together, the next step's
 * loaded ahead, screened_labels, the points loaded 16 bytes at a time where
 * the layout allows. Each warp adds its lanes' weighted points by label
 * into its own float64 copy in shared memory (no atomics): MMA (k <= 16,
 * d <= 8), on the tensor cores (add_mma), the copy written once at the
 * end; else add_by_label (lanes with the same label summed by float
 * shuffles, the lowest adding into the copy). The block adds its warps'
 * copies in warp order into its partials, laid out as k_part_assign's.
 * Used where the warps' copies fit (part_screen_smem). W: with sample
 * weights. Four blocks an SM for d <= 8 (64 registers), three with MMA
 * (80: its fragments beside the prefetched points). */
template <int DMAX, bool W, bool MMA>
__global__ void __launch_bounds__(THREADS, DMAX > 8 ? 1 : MMA ? 3 : 4) k_part_screen(PartArgs a)
{
    constexpr int P = DMAX <= 8 ? 2 : 1;
    extern __shared__ __align__(16) unsigned char smem[];
    float *Cs = (float *)smem;
    float *Ch = Cs + a.k * DMAX;
    double *sums = (double *)(((uintptr_t)(Ch + a.k) + 7) & ~(uintptr_t)7);
    __shared__ int rmax_bits;
    if (a.state[1] != 0.0)
        return;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, dc = a.d + 1, r = a.window / 2;
    double *mine = sums + warp * a.k * dc;
    float *stage = MMA ? (float *)(((uintptr_t)(sums + (THREADS / 32) * a.k * dc) + 15) & ~(uintptr_t)15) + warp * STAGE
                       : nullptr;
    double D[4] = {0.0, 0.0, 0.0, 0.0}, cnt[2] = {0.0, 0.0};
    for (int j = threadIdx.x; j < a.k * DMAX; j += THREADS)
        Cs[j] = j % DMAX < a.d ? a.C[j / DMAX * a.d + j % DMAX] : 0.0f;
    for (int j = threadIdx.x; j < (THREADS / 32) * a.k * dc; j += THREADS)
        sums[j] = 0.0;
    if (threadIdx.x == 0)
        rmax_bits = 0;
    __syncthreads();
    screen_terms<DMAX>(Cs, Ch, a.k, &rmax_bits);
    __syncthreads();
    const float rmax2 = __int_as_float(rmax_bits), eps_coef = 12.0f * (float)(a.d + 2) * 0x1p-24f;
    const long long stride = (long long)gridDim.x * THREADS, first = (long long)blockIdx.x * THREADS + warp * 32;
    /* the next step's points are loaded before this step's labels are
     * computed, so their latency hides behind the work (as k_lloyd's
     * prefetch variant) */
    float xn[P][DMAX];
#pragma unroll
    for (int p = 0; p < P; p++) {
#pragma unroll
        for (int f = 0; f < DMAX; f++)
            xn[p][f] = 0.0f;
        if (first + p * stride + lane < a.n)
            part_point<DMAX>(a, first + p * stride + lane, xn[p]);
    }
    for (long long base = first; base < a.n; base += P * stride) {
        float x[P][DMAX];
        long long idx[P];
        int l[P];
#pragma unroll
        for (int p = 0; p < P; p++) {
            idx[p] = base + p * stride + lane;
            const long long next = idx[p] + P * stride;
#pragma unroll
            for (int f = 0; f < DMAX; f++) {
                x[p][f] = xn[p][f];
                xn[p][f] = 0.0f;
            }
            if (next < a.n)
                part_point<DMAX>(a, next, xn[p]);
        }
        screened_labels<DMAX, P>(x, Cs, Ch, a.k, rmax2, eps_coef, l);
#pragma unroll
        for (int p = 0; p < P; p++) {
            float w = 1.0f;
            if (idx[p] >= a.n || (a.mask && !a.mask[idx[p]]))
                l[p] = -1;
            else if (W)
                w = a.w[idx[p]];
            if (idx[p] < a.n) {
                a.labels[idx[p]] = l[p];
                if (a.next)
                    a.next[idx[p] + (long long)r * a.cols] = l[p];
            }
            if (MMA)
                add_mma<DMAX, W>(l[p], x[p], w, stage, D, cnt);
            else
                add_by_label<DMAX, W>(l[p], x[p], w, a.d, mine);
        }
    }
    if (MMA) /* the warp's sums into its copy */
        mma_sums_out(D, cnt, a.k, a.d, [&](int c, int f, double v) { mine[c * dc + f] = v; });
    __syncthreads();
    for (int j = threadIdx.x; j < a.k * dc; j += THREADS) {
        double t = 0.0;
        for (int w = 0; w < THREADS / 32; w++)
            t += sums[w * a.k * dc + j];
        a.partial[(long long)j * a.blocks + blockIdx.x] = t;
    }
}

/* One warp per pair w = c (d + 1) + f: out[c d + f], or out[k d + c] for
 * the count; always 0: nothing once state's stop is set. */
__global__ void k_part_sums(const double *partial, int blocks, int k, int d, double *out, const double *state,
                            int always)
{
    const int w = blockIdx.x, lane = threadIdx.x, c = w / (d + 1), f = w % (d + 1);
    if (!always && state[1] != 0.0)
        return;
    double sum = 0.0;
    for (int b = lane; b < blocks; b += 32)
        sum += partial[(long long)w * blocks + b];
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_down_sync(0xffffffffu, sum, o);
    if (lane == 0)
        out[f < d ? c * d + f : k * d + c] = sum;
}

/* One block: the centroids from the reduced sums (in place), the move and
 * the stop rule; the failure flag (sums[k d + k]) stops every rank. */
__global__ void k_part_update(const double *sums, float *C, double *state, int k, int d, double tol)
{
    __shared__ double scratch[THREADS / 32];
    const int kd = k * d;
    if (state[1] != 0.0)
        return;
    if (sums[kd + k] != 0.0) {
        if (threadIdx.x == 0)
            state[3] = 1.0, state[1] = 1.0;
        return;
    }
    double mx = 0.0;
    for (int c = threadIdx.x; c < k; c += blockDim.x) {
        const double count = sums[kd + c];
        if (count == 0.0)
            continue;
        double m2 = 0.0;
        for (int f = 0; f < d; f++) {
            const float next = __double2float_rn(sums[c * d + f] / count);
            const double diff = (double)next - (double)C[c * d + f];
            m2 += diff * diff;
            C[c * d + f] = next;
        }
        mx = fmax(mx, m2);
    }
    mx = block_max(mx, scratch);
    if (threadIdx.x == 0) {
        const double move = sqrt(mx);
        state[0] += 1.0;
        state[2] = move;
        if (move < tol)
            state[1] = 1.0;
    }
}

/* Per block: the objective and the count of labelled points into
 * partial[b] and partial[blocks + b]. */
template <int DMAX>
__global__ void __launch_bounds__(THREADS) k_part_objective(PartArgs a)
{
    __shared__ double scratch[THREADS / 32];
    double obj = 0.0, valid = 0.0;
    for (long long i = (long long)blockIdx.x * THREADS + threadIdx.x; i < a.n; i += (long long)gridDim.x * THREADS) {
        const int l = a.labels[i];
        if (l < 0)
            continue;
        float x[DMAX];
        part_point<DMAX>(a, i, x);
        float dist = 0.0f;
        for (int f = 0; f < a.d; f++) {
            const float t = __fsub_rn(x[f], a.C[l * a.d + f]);
            dist = f == 0 ? __fmul_rn(t, t) : __fadd_rn(dist, __fmul_rn(t, t));
        }
        obj += (a.w ? (double)a.w[i] : 1.0) * (double)dist;
        valid += 1.0;
    }
    obj = block_sum(obj, scratch);
    __syncthreads();
    valid = block_sum(valid, scratch);
    if (threadIdx.x == 0) {
        a.partial[blockIdx.x] = obj;
        a.partial[a.blocks + blockIdx.x] = valid;
    }
}

template <int DMAX>
void part_pick_d(part_fn *assign, part_fn *objective, size_t *smem, int k)
{
    *assign = k_part_assign<DMAX>;
    *objective = k_part_objective<DMAX>;
    *smem = part_smem<DMAX>(k);
}

/* the sums on the tensor cores (add_mma) where the clusters fit its 16 rows
 * and the features its 8 columns */
template <int DMAX>
void screen_pick_d(Plan *p)
{
    const bool mma = DMAX <= 8 && p->s.desc.k <= 16;
    p->part_screen = mma ? k_part_screen<DMAX, false, DMAX <= 8> : k_part_screen<DMAX, false, false>;
    p->part_screen_w = mma ? k_part_screen<DMAX, true, DMAX <= 8> : k_part_screen<DMAX, true, false>;
    p->part_screen_smem = part_screen_smem<DMAX>(p->s.desc.k, p->s.desc.d, mma);
}

void screen_pick(Plan *p)
{
    const int d = p->s.desc.d;
    if (d <= 4)
        screen_pick_d<4>(p);
    else if (d <= 8)
        screen_pick_d<8>(p);
    else if (d <= 16)
        screen_pick_d<16>(p);
    else if (d <= 32)
        screen_pick_d<32>(p);
    else
        screen_pick_d<64>(p);
}

} // namespace

namespace dk_cuda_kmeans {

void part_pick(int d, int k, part_fn *assign, part_fn *objective, size_t *smem)
{
    if (d <= 4)
        part_pick_d<4>(assign, objective, smem, k);
    else if (d <= 8)
        part_pick_d<8>(assign, objective, smem, k);
    else if (d <= 16)
        part_pick_d<16>(assign, objective, smem, k);
    else if (d <= 32)
        part_pick_d<32>(assign, objective, smem, k);
    else
        part_pick_d<64>(assign, objective, smem, k);
}

/* The phases' kernels, grid and block partials. */
dk_status part_plan(Plan *p, dk_msg *msg)
{
    const dk_cuda_device *dev = p->dev;
    const dk_kmeans_desc &d = p->s.desc;
    part_pick(d.d, d.k, &p->part_assign, &p->part_objective, &p->part_smem);
    if (p->part_smem > 48 * 1024)
        CUDA_TRY(cudaFuncSetAttribute(p->part_assign, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)p->part_smem),
                 "sizing the kmeans assignment kernel");
    int part_per_sm = 0;
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&part_per_sm, p->part_assign, THREADS, p->part_smem),
             "sizing the kmeans assignment kernel");
    long long part_tiles = ((long long)d.n + THREADS - 1) / THREADS;
    long long part_resident = (long long)(part_per_sm > 0 ? part_per_sm : 1) * dev->sm_count;
    p->part_blocks = (int)(part_tiles < part_resident ? part_tiles : part_resident);
    if (p->part_blocks < 1)
        p->part_blocks = 1;
    /* k_part_screen where its warps' copies leave room for 2 blocks an SM
     * (both kinds: the grid is sized for the one of fewer) */
    screen_pick(p);
    int screen_per_sm = 0, weighted_per_sm = 0;
    if (p->part_screen_smem > 48 * 1024 ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&screen_per_sm, p->part_screen, THREADS,
                                                      p->part_screen_smem) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&weighted_per_sm, p->part_screen_w, THREADS,
                                                      p->part_screen_smem) != cudaSuccess ||
        (screen_per_sm = screen_per_sm < weighted_per_sm ? screen_per_sm : weighted_per_sm) < 2) {
        cudaGetLastError();
        p->part_screen = p->part_screen_w = nullptr;
    } else {
        const long long resident = (long long)screen_per_sm * dev->sm_count;
        p->part_screen_blocks = (int)(part_tiles < resident ? part_tiles : resident);
        if (p->part_screen_blocks < 1)
            p->part_screen_blocks = 1;
    }
    const int most = p->part_blocks > p->part_screen_blocks ? p->part_blocks : p->part_screen_blocks;
    size_t pairs = (size_t)d.k * (d.d + 1) > 2 ? (size_t)d.k * (d.d + 1) : 2;
    void *pp = NULL;
    CUDA_TRY(cudaMalloc(&pp, pairs * most * sizeof(double)), "allocating the kmeans partial sums");
    p->part_partial = (double *)pp;
    return DK_OK;
}

PartArgs part_args(const Plan *p, const void *points, const void *mask, const void *centroids)
{
    const dk_kmeans_desc &d = p->s.desc;
    PartArgs a;
    memset(&a, 0, sizeof a);
    a.x = points ? (const float *)((const dk_cuda_buffer *)points)->ptr : nullptr;
    a.mask = mask ? (const uint8_t *)((const dk_cuda_buffer *)mask)->ptr : nullptr;
    a.C = centroids ? (const float *)((const dk_cuda_buffer *)centroids)->ptr : nullptr;
    a.partial = p->part_partial;
    a.n = (long long)d.n;
    a.sp = (long long)p->s.stride_point;
    a.sf = (long long)p->s.stride_feature;
    a.rows = (long long)d.rows;
    a.cols = (long long)d.cols;
    a.d = d.d;
    a.k = d.k;
    a.window = d.window;
    a.blocks = p->part_blocks;
    a.vec4 = a.x && p->s.stride_feature == 1 && p->s.stride_point % 4 == 0 && d.d % 4 == 0 &&
             (uintptr_t)a.x % 16 == 0;
    a.lambda = (float)d.lambda;
    return a;
}

/* k_part_sums over the partials of `blocks` blocks into sums (k d + k
 * doubles); nothing once state's stop is set */
void part_sums_launch(const Plan *p, int blocks, double *sums, const double *state)
{
    const dk_kmeans_desc &d = p->s.desc;
    k_part_sums<<<d.k * (d.d + 1), 32, 0, p->dev->stream>>>(p->part_partial, blocks, d.k, d.d, sums, state, 0);
}

void part_update_launch(const Plan *p, const double *sums, float *C, double *state)
{
    const dk_kmeans_desc &d = p->s.desc;
    k_part_update<<<1, THREADS, 0, p->dev->stream>>>(sums, C, state, d.k, d.d, d.tol);
}

/* The objective of a's labels into out[0], their count into out[1] */
void part_objective_launch(const Plan *p, const PartArgs &a, double *out)
{
    cudaStream_t sm = p->dev->stream;
    p->part_objective<<<p->part_blocks, THREADS, 0, sm>>>(a);
    /* the two columns summed as one cluster of one feature and its count */
    k_part_sums<<<2, 32, 0, sm>>>(p->part_partial, p->part_blocks, 1, 1, out, out, 1);
}

dk_status assign_weighted(void *handle, const void *points, const void *mask, const void *weights,
                          const void *centroids, const void *prev, void *next, void *labels, void *sums,
                          const void *state, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    if (p->big) {
        if (!points || !labels) {
            dk_msg_set(msg, "cuda kmeans: the distributed phases take k <= %d", DK_KMEANS_MAX_K);
            return DK_ERR_NOT_IMPLEMENTED;
        }
        big_assign_weighted(p, points, mask, weights, centroids, labels, sums, state);
        CUDA_TRY(cudaGetLastError(), "queueing the large-k kmeans assignment");
        return DK_OK;
    }
    PartArgs a = part_args(p, points, mask, centroids);
    a.w = weights ? (const float *)((const dk_cuda_buffer *)weights)->ptr : nullptr;
    a.prev = prev ? (const int32_t *)((const dk_cuda_buffer *)prev)->ptr : nullptr;
    a.next = next ? (int32_t *)((dk_cuda_buffer *)next)->ptr : nullptr;
    a.labels = labels ? (int32_t *)((dk_cuda_buffer *)labels)->ptr : nullptr;
    a.state = (const double *)((const dk_cuda_buffer *)state)->ptr;
    if (!a.prev && p->part_screen) {
        a.blocks = p->part_screen_blocks;
        (a.w ? p->part_screen_w : p->part_screen)<<<a.blocks, THREADS, p->part_screen_smem, p->dev->stream>>>(a);
    } else {
        p->part_assign<<<a.blocks, THREADS, p->part_smem, p->dev->stream>>>(a);
    }
    part_sums_launch(p, a.blocks, (double *)((dk_cuda_buffer *)sums)->ptr, a.state);
    CUDA_TRY(cudaGetLastError(), "queueing the kmeans assignment");
    return DK_OK;
}

dk_status assign_partial(void *handle, const void *points, const void *mask, const void *centroids, const void *prev,
                         void *next, void *labels, void *sums, const void *state, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    if (p->big) {
        dk_msg_set(msg, "cuda kmeans: the distributed phases take k <= %d", DK_KMEANS_MAX_K);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    return assign_weighted(handle, points, mask, nullptr, centroids, prev, next, labels, sums, state, msg);
}

dk_status update(void *handle, const void *sums, void *centroids, void *state, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    part_update_launch(p, (const double *)((const dk_cuda_buffer *)sums)->ptr,
                       (float *)((dk_cuda_buffer *)centroids)->ptr, (double *)((dk_cuda_buffer *)state)->ptr);
    CUDA_TRY(cudaGetLastError(), "queueing the kmeans update");
    return DK_OK;
}

dk_status objective_weighted(void *handle, const void *points, const void *labels, const void *weights,
                             const void *centroids, void *out, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    PartArgs a = part_args(p, points, NULL, centroids);
    a.w = weights ? (const float *)((const dk_cuda_buffer *)weights)->ptr : nullptr;
    a.labels = labels ? (int32_t *)((dk_cuda_buffer *)labels)->ptr : nullptr;
    part_objective_launch(p, a, (double *)((dk_cuda_buffer *)out)->ptr);
    CUDA_TRY(cudaGetLastError(), "queueing the kmeans objective");
    return DK_OK;
}

dk_status objective(void *handle, const void *points, const void *labels, const void *centroids, void *out,
                    dk_msg *msg)
{
    return objective_weighted(handle, points, labels, nullptr, centroids, out, msg);
}

} // namespace dk_cuda_kmeans
