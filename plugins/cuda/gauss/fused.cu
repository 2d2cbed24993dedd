/* dakit cuda plugin, gauss: k_fused, float32 exact-mode rf over the last two
 * axes of a field in one pass instead of one pass per axis. A block owns a
 * tile of Ly x Lx values and reads its window, W x W values reaching at
 * least the axes' halos beyond the tile on every side (shifted inside the
 * field at its edges, as k_reg's windows are): each thread filters one
 * column of the window in registers and keeps the tile's rows in shared
 * memory, then each tile row is filtered there and the tile written. The
 * field is read once from DRAM (the neighbours' halos come from L2) and
 * written once, where the passes read and write it once per axis.
 *
 * The recursions run on values divided by beta at every sweep
 * (P = x + alpha P: one multiply-add a value where the reference's
 * beta x + alpha p takes two); the input is multiplied by both axes'
 * beta^(2K) as it is read, so every intermediate stays within the field's
 * magnitude and the tile is written as it comes out. The result equals the
 * serial reference to rounding, as the passes' does.
 *
 * Applies (plan_fused) to float32 exact rf along both of the last two axes
 * and no other, each at least the compiled W long with tiles of at least 16
 * values, out of place (in != out; in place runs the passes), not dp and
 * not for execute_halo. DAKIT_CUDA_GAUSS_FUSED=0 runs the passes instead
 * (A/B); DAKIT_CUDA_WINDOW picks its W where it is one of kFusedW. */
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
 * ndim-2, the tile's rows kept in sm (pitch P). */
template <int W, int P>
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
    rf_scaled<W>(x, g.cy);
    const int a = (int)(t.y0 - t.wy);
#pragma unroll
    for (int i = 0; i < W; i++)
        if (i >= a && i < a + t.ny)
            sm[(i - a) * P + col] = x[i];
}

/* Tile row r (r < t.ny): its window's W values filtered along the last axis
 * in place, the tile's columns moved to the row's start. */
template <int W, int P>
__host__ __device__ __forceinline__ void fused_row(const FusedGeo &g, const FTile &t, int r, float *sm)
{
    float x[W];
    float *row = sm + r * P;
#pragma unroll
    for (int i = 0; i < W; i++)
        x[i] = row[i];
    rf_scaled<W>(x, g.cx);
    const int a = (int)(t.x0 - t.wx);
#pragma unroll
    for (int i = 0; i < W; i++)
        if (i >= a && i < a + t.nx)
            row[i - a] = x[i];
}

template <int W> __host__ __device__ constexpr int fused_threads() { return (W + 31) / 32 * 32; }

template <int W>
__global__ void __launch_bounds__(fused_threads<W>()) k_fused(const float *__restrict__ src, float *__restrict__ dst,
                                                               FusedGeo g)
{
    constexpr int P = W | 1; /* odd: a warp's rows fall in distinct banks */
    extern __shared__ float sm[];
    const FTile t = fused_tile(g, W, blockIdx.y, blockIdx.x);
    const i64 plane = (i64)blockIdx.z * g.ny * g.nx;
    const int tid = (int)threadIdx.x;
    if (tid < W)
        fused_column<W, P>(src + plane, g, t, tid, sm);
    __syncthreads();
    if (tid < t.ny)
        fused_row<W, P>(g, t, tid, sm);
    __syncthreads();
    float *out = dst + plane + t.y0 * g.nx + t.x0;
    for (int r = 0; r < t.ny; r++)
        for (int j = tid; j < t.nx; j += fused_threads<W>())
            out[r * g.nx + j] = sm[r * P + j];
}

template <int W> size_t fused_smem(const FusedGeo &g) { return (size_t)g.Ly * (W | 1) * sizeof(float); }

template <int W> cudaError_t fused_launch(const FusedGeo &g, const float *src, float *dst, cudaStream_t st)
{
    dim3 grid((unsigned)ceil_div(g.nx, g.Lx), (unsigned)ceil_div(g.ny, g.Ly), (unsigned)g.outer);
    k_fused<W><<<grid, fused_threads<W>(), fused_smem<W>(g), st>>>(src, dst, g);
    return cudaGetLastError();
}

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
const int kFusedW[] = {127, 95, 63};

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
        d->mode != DK_GAUSS_EXACT || d->method != DK_GAUSS_RF || d->axes != ((1u << a) | (1u << b)) ||
        s->extended[a] || s->extended[b] || s->halo_max[a] || s->halo_max[b])
        return false;
    const i64 ny = (i64)d->shape[a], nx = (i64)d->shape[b], hy = (i64)s->halo[a], hx = (i64)s->halo[b];
    i64 outer = 1;
    for (int k = 0; k < a; k++)
        outer *= (i64)d->shape[k];
    const long forced = dk_tuning_long("DAKIT_CUDA_WINDOW", 0, 1, INT_MAX);
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
        size_t smem = (size_t)Ly * (W | 1) * sizeof(float);
        if (smem > p->dev->smem_optin)
            continue;
        cudaError_t e = cudaSuccess;
        switch (W) {
        case 127: e = allow_smem(k_fused<127>, smem); break;
        case 95: e = allow_smem(k_fused<95>, smem); break;
        default: e = allow_smem(k_fused<63>, smem); break;
        }
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return false;
        }
        p->fused_W = W;
        return true;
    }
    return false;
}

cudaError_t dk_cuda_gauss::launch_fused(const Plan *p, const float *src, float *dst, cudaStream_t st)
{
    switch (p->fused_W) {
    case 127: return fused_launch<127>(p->fused, src, dst, st);
    case 95: return fused_launch<95>(p->fused, src, dst, st);
    case 63: return fused_launch<63>(p->fused, src, dst, st);
    default: return cudaErrorInvalidValue;
    }
}
