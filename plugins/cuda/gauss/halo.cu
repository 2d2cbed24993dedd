/* dakit cuda plugin, gauss: execute_halo, one axis of a box whose lines
 * go on in halos beside it (libdakit-mpi's split axes). The kernels, as the
 * single-device solvers they follow: k_tile itself on a strided axis whose
 * inner is a multiple of 32 (tile.cu: its rows staged from the three
 * buffers), k_halo_reg (k_reg's full windows) on other strided axes,
 * k_halo_row (the same on the contiguous axis, staged as k_tile stages),
 * k_halo_gen (k_gen's shared-memory windows) and k_halo_line (a whole line
 * a thread); plan_halo picks one. */
#include "gauss.cuh"

using namespace dk_cuda_gauss;

namespace {

/* ---- execute_halo: the line lower halo | box | upper halo (m = lc + n +
 * uc values), each value read where it lies ---- */

struct HaloGeo {
    i64 n, inner, outer; /* the box's axis view */
    i64 lc, uc, m;       /* halo values per line below and above the box; the line's length */
    i64 L, h, nchunks;   /* k_halo_reg: chunks of L box values, halo h */
    i64 nj;              /* k_halo_reg with inner >= 32: groups of 32 lines (0: lines one by one) */
};

template <typename T>
__device__ __forceinline__ T halo_load(const T *__restrict__ lo, const T *__restrict__ box,
                                       const T *__restrict__ up, const HaloGeo &g, i64 o, i64 j, i64 i)
{
    return __ldg(halo_at(lo, box, up, g.lc, g.n, g.uc, g.inner, o, j, i));
}

/* The line (o, j) and chunk k of thread id (k_halo_reg, k_halo_gen). */
__device__ __forceinline__ bool halo_item(const HaloGeo &g, i64 id, i64 &j, i64 &k, i64 &o)
{
    if (g.nj) {
        const i64 q = id / 32, r = q / g.nchunks;
        k = q % g.nchunks;
        j = r % g.nj * 32 + id % 32;
        o = r / g.nj;
        return j < g.inner && o < g.outer;
    }
    const i64 r = id / g.inner;
    j = id % g.inner;
    k = r % g.nchunks;
    o = r / g.nchunks;
    return o < g.outer;
}

/* A thread a chunk of L box values, filtered over a window of W in
 * registers that reaches h beyond it (shifted inside the line at its true
 * ends, as k_reg's FULL windows); adjacent threads take adjacent lines.
 * With g.nj, a warp is 32 adjacent lines and a block 4 consecutive chunks
 * of them, so that the 2h values two neighbouring windows share are read
 * again from cache rather than from memory. */
template <typename T, int W>
__global__ void __launch_bounds__(128) k_halo_reg(const T *__restrict__ src, T *__restrict__ dst,
                                                 const T *__restrict__ lo, const T *__restrict__ up,
                                                 HaloGeo g, Coef<T> c)
{
    i64 j, k, o;
    if (!halo_item(g, (i64)blockIdx.x * blockDim.x + threadIdx.x, j, k, o))
        return;
    const i64 ks = g.lc + k * g.L, ke = ks + g.L < g.lc + g.n ? ks + g.L : g.lc + g.n;
    i64 ws = ks - g.h;
    if (ws > g.m - W)
        ws = g.m - W;
    if (ws < 0)
        ws = 0;
    T x[W];
#pragma unroll
    for (int i = 0; i < W; i++)
        x[i] = halo_load(lo, src, up, g, o, j, ws + i);
    rf_regs<T, W, true>(x, W, c);
#pragma unroll
    for (int i = 0; i < W; i++)
        if (ws + i >= ks && ws + i < ke)
            dst[(o * g.n + ws + i - g.lc) * g.inner + j] = x[i];
}

/* The window start of chunk k on the line of m values (k_halo_reg's). */
__device__ __forceinline__ i64 halo_window(const HaloGeo &g, int W, i64 k)
{
    i64 ws = g.lc + k * g.L - g.h;
    if (ws > g.m - W)
        ws = g.m - W;
    return ws < 0 ? 0 : ws;
}

/* k_halo_reg on the contiguous axis (inner == 1), where a thread a chunk
 * would read with a stride of L values: a block takes blockDim.x
 * consecutive chunks of one line, stages the span their windows cover in
 * shared memory with consecutive loads (each value from wherever it lies),
 * filters each window from there in registers, puts the kept values back
 * and writes the box's part as one consecutive run. L is odd, so that a
 * warp's windows start in distinct banks. */
template <typename T, int W>
__global__ void __launch_bounds__(128) k_halo_row(const T *__restrict__ src, T *__restrict__ dst,
                                                 const T *__restrict__ lo, const T *__restrict__ up,
                                                 HaloGeo g, Coef<T> c)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *sm = reinterpret_cast<T *>(smem_raw);
    const i64 per = (i64)blockDim.x, nb = (g.nchunks + per - 1) / per;
    const i64 o = (i64)blockIdx.x / nb, k0 = (i64)blockIdx.x % nb * per;
    const i64 k1 = k0 + per < g.nchunks ? k0 + per : g.nchunks;
    const i64 S0 = halo_window(g, W, k0), S1 = halo_window(g, W, k1 - 1) + W;
    for (i64 i = S0 + threadIdx.x; i < S1; i += per)
        sm[i - S0] = halo_load(lo, src, up, g, o, 0, i);
    __syncthreads();
    const i64 k = k0 + threadIdx.x;
    const bool active = k < k1;
    i64 off = 0, ks = 0, ke = 0;
    T x[W];
    if (active) {
        const i64 ws = halo_window(g, W, k);
        off = ws - S0;
        ks = g.lc + k * g.L - ws;
        ke = (g.lc + k * g.L + g.L < g.lc + g.n ? g.lc + k * g.L + g.L : g.lc + g.n) - ws;
#pragma unroll
        for (int i = 0; i < W; i++)
            x[i] = sm[off + i];
        rf_regs<T, W, true>(x, W, c);
    }
    __syncthreads();
    if (active) {
#pragma unroll
        for (int i = 0; i < W; i++)
            if (i >= ks && i < ke)
                sm[off + i] = x[i];
    }
    __syncthreads();
    const i64 K0 = g.lc + k0 * g.L, K1 = g.lc + k1 * g.L < g.lc + g.n ? g.lc + k1 * g.L : g.lc + g.n;
    for (i64 i = K0 + threadIdx.x; i < K1; i += per)
        dst[o * g.n + i - g.lc] = sm[i - S0];
}

/* Halos too long for the compiled windows (float64 at sigma 2 and up): as
 * k_gen's shared-memory path, chunks of L values filtered over windows that
 * reach h beyond them (clipped at the line's true ends), window i of thread
 * t at w[i * blockDim.x + t]; threads as k_halo_reg's. */
template <typename T>
__global__ void __launch_bounds__(128) k_halo_gen(const T *__restrict__ src, T *__restrict__ dst,
                                                 const T *__restrict__ lo, const T *__restrict__ up,
                                                 HaloGeo g, Coef<T> c)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *w = reinterpret_cast<T *>(smem_raw) + threadIdx.x;
    const i64 st = blockDim.x;
    i64 j, k, o;
    if (!halo_item(g, (i64)blockIdx.x * blockDim.x + threadIdx.x, j, k, o))
        return;
    const i64 ks = g.lc + k * g.L, ke = ks + g.L < g.lc + g.n ? ks + g.L : g.lc + g.n;
    const i64 ws = ks > g.h ? ks - g.h : 0, we = ke + g.h < g.m ? ke + g.h : g.m;
    const int len = (int)(we - ws);
    for (int i = 0; i < len; i++)
        w[i * st] = halo_load(lo, src, up, g, o, j, ws + i);
    rf_mem(w, st, len, c);
    for (i64 i = ks; i < ke; i++)
        dst[(o * g.n + i - g.lc) * g.inner + j] = w[(i - ws) * st];
}

/* A thread a whole line (halos too long for k_halo_reg's windows): the
 * box's values filtered in dst, the halos' in scratch ([i][line]). */
template <typename T>
__global__ void __launch_bounds__(128) k_halo_line(const T *__restrict__ src, T *__restrict__ dst,
                                                  const T *__restrict__ lo, const T *__restrict__ up,
                                                  T *__restrict__ scratch, HaloGeo g, Coef<T> c)
{
    const i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x, lines = g.outer * g.inner;
    if (t >= lines)
        return;
    const i64 o = t / g.inner, j = t % g.inner, last = g.m - 1;
    auto at = [&](i64 i) -> T & {
        return i < g.lc ? scratch[i * lines + t]
               : i < g.lc + g.n ? dst[(o * g.n + i - g.lc) * g.inner + j]
                                : scratch[(i - g.n) * lines + t];
    };
    for (i64 i = 0; i < g.m; i++)
        at(i) = halo_load(lo, src, up, g, o, j, i);
    const T alpha = c.alpha, beta = c.beta;
    for (int it = 0; it < c.K; it++) {
        T u = at(last);
        T p = c.constant ? at(0) : T(0);
        for (i64 i = 0; i <= last; i++) {
            p = fma(alpha, p, beta * at(i));
            at(i) = p;
        }
        T s = c.constant ? u + (p - u) / c.opa : beta * p;
        at(last) = s;
        for (i64 i = last - 1; i >= 0; i--) {
            s = fma(alpha, s, beta * at(i));
            at(i) = s;
        }
    }
}

template <typename T>
dk_status execute_halo_t(Plan *p, const dk_gauss_halo *hl, const T *src, T *dst, const T *lo, const T *up,
                         dk_msg *msg)
{
    const dk_gauss_desc *d = &p->setup.desc;
    dk_axis_view v = dk_axis_view_of(d, hl->axis);
    HaloGeo g;
    g.n = (i64)v.n;
    g.inner = (i64)v.inner;
    g.outer = (i64)v.outer;
    g.lc = (i64)hl->lower_count;
    g.uc = (i64)hl->upper_count;
    g.m = g.lc + g.n + g.uc;
    g.h = (i64)p->setup.halo[hl->axis];
    g.L = p->halo_W - 2 * g.h;
    g.nchunks = p->halo_W ? ceil_div(g.n, g.L) : 1;
    g.nj = g.inner >= 32 ? ceil_div(g.inner, 32) : 0;
    Coef<T> c;
    c.alpha = (T)p->setup.alpha[hl->axis];
    c.beta = (T)1 - c.alpha;
    c.opa = (T)1 + c.alpha;
    c.K = d->K;
    c.constant = d->boundary == DK_BOUNDARY_CONSTANT;
    cudaStream_t stream = p->dev->stream;
    const char *what = "the gauss halo kernel";
    const unsigned threads = 128;
    if (p->halo_tile.W && ((uintptr_t)src | (uintptr_t)dst | (uintptr_t)lo | (uintptr_t)up) % 16 == 0) {
        /* k_tile moves 16 bytes at a time; other memory takes k_halo_reg */
        CUDA_TRY(launch_tile_halo(p->halo_tile, g.lc, g.uc, lo, src, up, dst, c, stream), what);
        return dk_cuda_finish(p->dev, what, msg);
    }
    if (!p->halo_W && p->halo_threads) {
        g.L = p->halo_L;
        g.nchunks = ceil_div(g.n, g.L);
        const i64 blocks = ceil_div(g.outer * g.nchunks * (g.nj ? g.nj * 32 : g.inner), p->halo_threads);
        k_halo_gen<T><<<(unsigned)blocks, p->halo_threads, p->halo_smem, stream>>>(src, dst, lo, up, g, c);
    } else if (!p->halo_W) {
        const i64 blocks = ceil_div(g.outer * g.inner, threads);
        k_halo_line<T><<<(unsigned)blocks, threads, 0, stream>>>(src, dst, lo, up, (T *)p->halo_scratch, g, c);
    } else if (p->halo_threads) {
        const i64 blocks = g.outer * ceil_div(g.nchunks, p->halo_threads);
        switch (p->halo_W) {
#define X(W)                                                                                   \
    case W:                                                                                    \
        if (w_built<T>(W))                                                                     \
            k_halo_row<T, (w_built<T>(W) ? W : 31)><<<(unsigned)blocks, p->halo_threads, p->halo_smem, stream>>>( \
                src, dst, lo, up, g, c);                                                       \
        break;
            DK_W_CASES(X)
#undef X
        default:
            break;
        }
    } else {
        const i64 blocks = ceil_div(g.outer * g.nchunks * (g.nj ? g.nj * 32 : g.inner), threads);
        switch (p->halo_W) {
#define X(W)                                                                                   \
    case W:                                                                                    \
        if (w_built<T>(W))                                                                     \
            k_halo_reg<T, (w_built<T>(W) ? W : 31)><<<(unsigned)blocks, threads, 0, stream>>>(src, dst, lo, up, g, c); \
        break;
            DK_W_CASES(X)
#undef X
        default:
            break;
        }
    }
    CUDA_TRY(cudaGetLastError(), what);
    return dk_cuda_finish(p->dev, what, msg);
}

} // namespace

/* execute_halo: windows of W in registers where the exact halo is shorter
 * than the box (setup.halo is then not clipped) and a compiled W keeps the
 * overhead W / (W - 2h) at most 3 (the least), staged by k_tile where the
 * axis is strided with inner a multiple of 32; else k_halo_gen's windows in
 * shared memory, else whole lines. */
dk_status dk_cuda_gauss::plan_halo(Plan *p, dk_msg *msg)
{
    const dk_gauss_desc *d = &p->setup.desc;
    p->halo_axis = -1;
    for (int a = 0; a < d->ndim; a++)
        if (p->setup.halo_max[a])
            p->halo_axis = a;
    if (p->halo_axis < 0)
        return DK_OK;
    const int a = p->halo_axis;
    const i64 n = (i64)d->shape[a], h = (i64)p->setup.halo[a];
    const bool f32 = d->dtype == DK_F32;
    const int *Ws = f32 ? kW32 : kW64;
    const int nW = f32 ? (int)(sizeof kW32 / sizeof *kW32) : (int)(sizeof kW64 / sizeof *kW64);
    double best = 3.0;
    p->halo_W = 0;
    for (int i = 0; i < nW && h < n; i++)
        if (Ws[i] - 2 * h >= 1 && Ws[i] <= n && (double)Ws[i] / (double)(Ws[i] - 2 * h) <= best) {
            best = (double)Ws[i] / (double)(Ws[i] - 2 * h);
            p->halo_W = Ws[i];
        }
    p->halo_threads = 0;
    p->halo_smem = 0;
    const dk_axis_view v = dk_axis_view_of(d, a);
    const char *forced = dk_tuning_string("DAKIT_GAUSS_CUDA_HALO");
    if (p->halo_W && v.inner >= 32 && v.inner % 32 == 0 && !(forced && strcmp(forced, "reg") == 0)) {
        /* k_tile's strided tiles: 32 adjacent lines by 4 chunks, as the
         * single-device PATH_TILE; k_halo_reg where the device cannot take them */
        Pass &ps = p->halo_tile;
        memset(&ps, 0, sizeof ps);
        ps.axis = a;
        ps.path = PATH_TILE;
        ps.W = p->halo_W;
        ps.threads = 128;
        Geo &g = ps.g;
        g.n = n;
        g.inner = (i64)v.inner;
        g.outer = (i64)v.outer;
        g.mode = GEO_CHUNK;
        g.h = h;
        g.L = p->halo_W - 2 * h;
        g.ipl = ceil_div(n, g.L);
        g.JT = 32;
        g.KT = (int)ps.threads / 32;
        g.nj = g.inner / 32;
        g.nk = ceil_div(g.ipl, g.KT);
        g.nblocks = g.nj * g.nk * g.outer;
        if (!prepare_tile_halo(p, ps))
            ps.W = 0;
        return DK_OK;
    }
    if (p->halo_W && v.inner == 1) {
        /* k_halo_row: 128 chunks a block, fewer where their span would pass
         * the default 48 KB (32 chunks always fit: W <= 127) */
        const i64 L = p->halo_W - 2 * h;
        unsigned t = 128;
        while (t > 32 && (size_t)((i64)(t - 1) * L + p->halo_W) * p->esize > 48 * 1024)
            t -= 32;
        p->halo_threads = t;
        p->halo_smem = (size_t)((i64)(t - 1) * L + p->halo_W) * p->esize;
    }
    if (p->halo_W)
        return DK_OK;
    if (h < n) {
        /* k_halo_gen, as the single-device plan's shared-memory windows */
        const i64 L = 2 * h > 64 ? 2 * h : 64, win = L + 2 * h;
        unsigned t = 128;
        while (t > 32 && (size_t)t * (size_t)win * p->esize > p->dev->smem_optin)
            t /= 2;
        const size_t smem = (size_t)t * (size_t)win * p->esize;
        if (smem <= p->dev->smem_optin &&
            !dk_cuda_failed(f32 ? allow_smem(k_halo_gen<float>, smem) : allow_smem(k_halo_gen<double>, smem))) {
            p->halo_L = L;
            p->halo_threads = t;
            p->halo_smem = smem;
            return DK_OK;
        }
    }
    size_t bytes = 2 * p->setup.halo_max[a] * (p->setup.count / d->shape[a]) * p->esize;
    if (bytes && dk_cuda_failed(cudaMalloc(&p->halo_scratch, bytes))) {
        p->halo_scratch = NULL;
        dk_msg_set(msg, "cuda gauss: cannot allocate the plan's %zu-byte halo scratch", bytes);
        return DK_ERR_OUT_OF_MEMORY;
    }
    p->work_bytes += bytes;
    return DK_OK;
}

dk_status dk_cuda_gauss::cuda_gauss_execute_halo(void *plan, const dk_gauss_halo *hl, const void *in, void *out, dk_msg *msg)
{
    Plan *p = (Plan *)plan;
    if (!p || !hl || hl->axis != p->halo_axis || in == out || hl->lower_count > p->setup.halo_max[hl->axis] ||
        hl->upper_count > p->setup.halo_max[hl->axis] || (hl->lower_count && !hl->lower) ||
        (hl->upper_count && !hl->upper) || p->setup.extended[hl->axis]) {
        dk_msg_set(msg, "cuda gauss execute_halo: a plan made for halos along the axis, distinct in and out, and "
                        "halos within its halo_max are needed");
        return DK_ERR_INVALID_ARGUMENT;
    }
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    const dk_cuda_buffer *bi = (const dk_cuda_buffer *)in, *bl = (const dk_cuda_buffer *)hl->lower,
                         *bu = (const dk_cuda_buffer *)hl->upper;
    dk_cuda_buffer *bo = (dk_cuda_buffer *)out;
    if (p->setup.count == 0)
        return DK_OK;
    const char *lo = bl ? (const char *)bl->ptr + hl->lower_offset * p->esize : NULL;
    const char *up = bu ? (const char *)bu->ptr + hl->upper_offset * p->esize : NULL;
    return p->setup.desc.dtype == DK_F32
               ? execute_halo_t<float>(p, hl, (const float *)bi->ptr, (float *)bo->ptr, (const float *)lo,
                                       (const float *)up, msg)
               : execute_halo_t<double>(p, hl, (const double *)bi->ptr, (double *)bo->ptr, (const double *)lo,
                                        (const double *)up, msg);
}
