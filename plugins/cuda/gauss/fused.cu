/* dakit cuda plugin, gauss: k_fused, float32 exact-mode rf over the last two
 * axes of a field in one pass instead of one pass per axis. A block owns a
 * tile of Ly x Lx values and reads its window, W x W values reaching at
 * least the axes' halos beyond the tile on every side (shifted inside the
 * field at its edges, as k_reg's windows are): each thread filters one
 * column of the window in registers into shared memory, then each of the
 * tile's rows is filtered there and the tile written. The
 * field is read once from DRAM (the neighbours' halos come from L2) and
 * written once, where the passes read and write it once per axis.
 *
 * The recursions run on values divided by beta at every sweep
 * (P = x + alpha P: one multiply-add a value where the reference's
 * beta x + alpha p takes two); the input is multiplied by both axes'
 * beta^(2K) as it is read, so every intermediate stays within the field's
 * magnitude and the tile is written as it comes out. A window inside the
 * field runs its K forward recursions together and then its K backward
 * ones (rf_cascade: K independent chains a thread instead of one); a
 * window at the field's edge keeps the reference's order. The result
 * equals the serial reference to rounding, as the passes' does.
 *
 * Applies (plan_fused) to float32 exact rf along both of the last two axes
 * and no other, K at most 4, each axis at least the compiled W long with
 * tiles of at least 16 values, out of place (in != out; in place runs the
 * passes), not dp and not for execute_halo. DAKIT_CUDA_GAUSS_FUSED=0 runs
 * the passes instead (A/B); DAKIT_CUDA_WINDOW picks its W (127 or 95). */
#include "gauss.cuh"

using namespace dk_cuda_gauss;

namespace {

/* The sweeps of one window in registers, on values scaled by 1/beta per
 * sweep (the reference's span rule at both ends; see the file's opening). */
template <int W> __host__ __device__ __forceinline__ void rf_scaled(float (&x)[W], const Scaled &c)
{
    for (int it = 0; it < c.K; it++) {
        const float u = x[W - 1];
        float p = c.constant ? x[0] * c.rbeta : 0.0f;
#pragma unroll
        for (int i = 0; i < W; i++) {
            p = fmaf(c.alpha, p, x[i]);
            x[i] = p;
        }
        float s = c.constant ? (u + (c.beta * p - u) / c.opa) * c.rbeta * c.rbeta : p;
        x[W - 1] = s;
#pragma unroll
        for (int i = W - 2; i >= 0; i--) {
            s = fmaf(c.alpha, s, x[i]);
            x[i] = s;
        }
    }
}

/* The same K forward and K backward sweeps in the other order, F^K B^K:
 * the K recursions of a direction stepped together along the window, each
 * a value behind the one before, so that a step's K multiply-adds do not
 * wait on each other. Only where neither end of the window is the line's:
 * there the order changes nothing at rounding, as the artificial ends do
 * not (exact mode's halo); at a line's end the reference's (F B)^K order is
 * the result. Each recursion starts from the steady state of its first
 * input. */
template <int W, int K, bool BACK>
__host__ __device__ __forceinline__ void cascade_sweep(float (&x)[W], const Scaled &c)
{
    float p[K];
    float v = c.constant ? x[BACK ? W - 1 : 0] : 0.0f;
#pragma unroll
    for (int k = 0; k < K; k++)
        p[k] = v = v * c.rbeta;
#pragma unroll
    for (int i = 0; i < W + K - 1; i++) {
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int j = BACK ? W - 1 - (i - k) : i - k;
            if (j >= 0 && j < W)
                x[j] = p[k] = fmaf(c.alpha, p[k], x[j]);
        }
    }
}
template <int W, int K> __host__ __device__ __forceinline__ void rf_cascade(float (&x)[W], const Scaled &c)
{
    cascade_sweep<W, K, false>(x, c);
    cascade_sweep<W, K, true>(x, c);
}

/* A window's sweeps: the cascade inside the line, the reference's order
 * where the window reaches an end of it. */
template <int W, int K>
__host__ __device__ __forceinline__ void rf_window(float (&x)[W], const Scaled &c, bool line_end)
{
    if (line_end)
        rf_scaled<W>(x, c);
    else
        rf_cascade<W, K>(x, c);
}

/* A tile: its first row and column, its window's, and how many of its rows
 * and columns lie in the field. */
struct FTile {
    i64 y0, x0, wy, wx;
    int ny, nx;
};

__host__ __device__ __forceinline__ FTile fused_tile(const FusedGeo &g, int W, i64 ty, i64 tx)
{
    FTile t;
    t.y0 = ty * g.Ly;
    t.x0 = tx * g.Lx;
    i64 wy = t.y0 - g.hy, wx = t.x0 - g.hx;
    wy = wy > g.ny - W ? g.ny - W : wy;
    wx = wx > g.nx - W ? g.nx - W : wx;
    t.wy = wy < 0 ? 0 : wy;
    t.wx = wx < 0 ? 0 : wx;
    t.ny = (int)(g.ny - t.y0 < g.Ly ? g.ny - t.y0 : g.Ly);
    t.nx = (int)(g.nx - t.x0 < g.Lx ? g.nx - t.x0 : g.Lx);
    return t;
}

/* Column `col` of the window (col < W): read scaled, filtered along axis
 * ndim-2, kept in column col of sm's W rows (pitch P). */
template <int W, int P, int K>
__host__ __device__ __forceinline__ void fused_column(const float *__restrict__ src, const FusedGeo &g,
                                                      const FTile &t, int col, float *sm)
{
    float x[W];
    const float *p = src + t.wy * g.nx + t.wx + col;
#pragma unroll
    for (int i = 0; i < W; i++) {
#ifdef __CUDA_ARCH__
        x[i] = __ldg(p + i * g.nx) * g.scale;
#else
        x[i] = p[i * g.nx] * g.scale;
#endif
    }
    rf_window<W, K>(x, g.cy, t.wy == 0 || t.wy + W == g.ny);
#pragma unroll
    for (int i = 0; i < W; i++)
        sm[i * P + col] = x[i];
}

/* Tile row r (r < t.ny, the window's row y0 - wy + r in sm): filtered along
 * the last axis in place. */
template <int W, int P, int K>
__host__ __device__ __forceinline__ void fused_row(const FusedGeo &g, const FTile &t, int r, float *sm)
{
    float x[W];
    float *row = sm + (t.y0 - t.wy + r) * P;
#pragma unroll
    for (int i = 0; i < W; i++)
        x[i] = row[i];
    rf_window<W, K>(x, g.cx, t.wx == 0 || t.wx + W == g.nx);
#pragma unroll
    for (int i = 0; i < W; i++)
        row[i] = x[i];
}

/* The tile's rows and columns from sm to dst (the tile's first value), a
 * warp a row. */
template <int P>
__host__ __device__ __forceinline__ void fused_write(const FusedGeo &g, const FTile &t, const float *sm, float *dst,
                                                     int warp, int warps, int lane)
{
    const float *s = sm + (t.y0 - t.wy) * P + (t.x0 - t.wx);
    for (int r = warp; r < t.ny; r += warps)
        for (int j = lane; j < t.nx; j += 32)
            dst[r * g.nx + j] = s[r * P + j];
}

template <int W> __host__ __device__ constexpr int fused_threads() { return (W + 31) / 32 * 32; }

/* sm's pitch, odd: a warp's rows fall in distinct banks. */
template <int W> __host__ __device__ constexpr int fused_pitch() { return W | 1; }
template <int W> constexpr size_t fused_smem() { return (size_t)W * fused_pitch<W>() * sizeof(float); }

template <int W, int K>
__global__ void __launch_bounds__(fused_threads<W>()) k_fused(const float *__restrict__ src, float *__restrict__ dst,
                                                               FusedGeo g)
{
    constexpr int P = fused_pitch<W>();
    extern __shared__ float sm[];
    const FTile t = fused_tile(g, W, blockIdx.y, blockIdx.x);
    const i64 plane = (i64)blockIdx.z * g.ny * g.nx;
    const int tid = (int)threadIdx.x;
    if (tid < W)
        fused_column<W, P, K>(src + plane, g, t, tid, sm);
    __syncthreads();
    if (tid < t.ny)
        fused_row<W, P, K>(g, t, tid, sm);
    __syncthreads();
    fused_write<P>(g, t, sm, dst + plane + t.y0 * g.nx + t.x0, tid / 32, fused_threads<W>() / 32, tid % 32);
}

/* The kernel for W and the plan's K (1 to kFusedK), as a pointer. */
template <int W> void *fused_kernel(int K)
{
    switch (K) {
    case 1: return (void *)k_fused<W, 1>;
    case 2: return (void *)k_fused<W, 2>;
    case 3: return (void *)k_fused<W, 3>;
    case 4: return (void *)k_fused<W, 4>;
    default: return NULL;
    }
}
const int kFusedK = 4;

void *fused_kernel(int W, int K) { return W == 127 ? fused_kernel<127>(K) : W == 95 ? fused_kernel<95>(K) : NULL; }
size_t fused_smem(int W) { return W == 127 ? fused_smem<127>() : fused_smem<95>(); }
unsigned fused_block(int W) { return W == 127 ? fused_threads<127>() : fused_threads<95>(); }

Scaled scaled_of(double alpha, const dk_gauss_desc *d)
{
    Scaled c;
    c.alpha = (float)alpha;
    c.beta = 1.0f - c.alpha;
    c.rbeta = 1.0f / c.beta;
    c.opa = 1.0f + c.alpha;
    c.K = d->K;
    c.constant = d->boundary == DK_BOUNDARY_CONSTANT;
    return c;
}

/* The compiled windows, longest first (the least overlap). */
const int kFusedW[] = {127, 95};

/* Both axes' beta^(2K), rounded once. */
float fused_scale(const FusedGeo &g, int K)
{
    return (float)(pow((double)g.cy.beta, 2.0 * K) * pow((double)g.cx.beta, 2.0 * K));
}

} // namespace

bool dk_cuda_gauss::plan_fused(Plan *p)
{
    const dk_gauss_setup *s = &p->setup;
    const dk_gauss_desc *d = &s->desc;
    const int a = d->ndim - 2, b = d->ndim - 1;
    p->fused_W = 0;
    if (!dk_tuning_long("DAKIT_CUDA_GAUSS_FUSED", 1, 0, 1) || p->dp || d->dtype != DK_F32 || d->ndim < 2 ||
        d->K > kFusedK || d->mode != DK_GAUSS_EXACT || d->method != DK_GAUSS_RF || d->axes != ((1u << a) | (1u << b)) ||
        s->extended[a] || s->extended[b] || s->halo_max[a] || s->halo_max[b])
        return false;
    const i64 ny = (i64)d->shape[a], nx = (i64)d->shape[b], hy = (i64)s->halo[a], hx = (i64)s->halo[b];
    i64 outer = 1;
    for (int k = 0; k < a; k++)
        outer *= (i64)d->shape[k];
    const int forced = forced_window();
    for (int W : kFusedW) {
        const i64 Ly = W - 2 * hy, Lx = W - 2 * hx;
        if ((forced && forced != W) || Ly < 16 || Lx < 16 || ny < W || nx < W || outer > 65535 ||
            ceil_div(ny, Ly) > 65535 || ceil_div(nx, Lx) > INT_MAX)
            continue;
        FusedGeo &g = p->fused;
        g.ny = ny, g.nx = nx, g.outer = outer;
        g.hy = hy, g.hx = hx, g.Ly = Ly, g.Lx = Lx;
        g.cy = scaled_of(s->alpha[a], d);
        g.cx = scaled_of(s->alpha[b], d);
        g.scale = fused_scale(g, d->K);
        if (!(g.scale > 1e-30f))
            return false;
        size_t smem = fused_smem(W);
        if (smem > p->dev->smem_optin)
            continue;
        void *kernel = fused_kernel(W, d->K);
        if (dk_cuda_failed(allow_smem(kernel, smem)))
            return false;
        p->fused_kernel = kernel;
        p->fused_block = fused_block(W);
        p->fused_smem = smem;
        p->fused_W = W;
        return true;
    }
    return false;
}

cudaError_t dk_cuda_gauss::launch_fused(const Plan *p, const float *src, float *dst, cudaStream_t st)
{
    const FusedGeo &g = p->fused;
    dim3 grid((unsigned)ceil_div(g.nx, g.Lx), (unsigned)ceil_div(g.ny, g.Ly), (unsigned)g.outer);
    void *args[] = {&src, &dst, (void *)&g};
    return cudaLaunchKernel(p->fused_kernel, grid, dim3(p->fused_block), args, p->fused_smem, st);
}
