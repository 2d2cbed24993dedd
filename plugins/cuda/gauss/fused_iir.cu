/* dakit cuda plugin, gauss: k_fused_iir, deriche and vyv (float32, any
 * boundary) over the last two axes of a field in one pass instead of one
 * k_ext_tile pass per axis. A block of 128 threads owns a tile of L x L
 * values and reads its window of W x W values, R + 1 before the tile and
 * R + 2 after it on each axis (W = L + 2 R + 3, k_ext_tile's window of a
 * segment), the values past the field's edges continued by the mode as
 * extend_index says. Each thread filters one column of the window in
 * registers, the causal recursion's sums stored to shared memory and the
 * anti-causal one's added to them; then each of the tile's rows is filtered
 * there the same way and the tile written. The field is read from DRAM
 * about once (the neighbours' windows come from L2) and written once.
 *
 * R is the axes' reach rounded up to a compiled one (more warm-up only
 * leaves out less), so every loop has fixed bounds and the window stays in
 * registers. Where cval (or zero) continues the field, a window column
 * past its edge is the constant, as the reference's second axis reads it.
 *
 * Applies (plan_fused_iir) to float32 deriche and vyv along both of the
 * last two axes and no other, two sections on each (deriche smoothing, vyv
 * with 3 or 4 poles), each axis's reach at most the largest compiled R
 * (deriche up to sigma 2, vyv up to 1), out of place, not dp and not for
 * execute_halo. DAKIT_CUDA_GAUSS_FUSED=0 runs the passes instead (A/B). */
#include "gauss.cuh"

using namespace dk_cuda_gauss;

namespace {

const int kIirW = 127;

/* The window's tile: W = kIirW values, R the compiled reach. */
template <int R> __host__ __device__ constexpr int iir_tile() { return kIirW - 2 * R - 3; }
__host__ __device__ constexpr int iir_pitch() { return kIirW | 1; } /* odd: a warp's rows in distinct banks */
constexpr size_t iir_smem() { return (size_t)kIirW * iir_pitch() * sizeof(float); }

/* One line of the window in registers: the causal recursion over positions
 * 1 .. R + L (the first R warm-up), its sums stored at out[i * st] for the
 * kept positions R + 1 .. R + L; then the anti-causal one from W - 3 down,
 * its sums added there (k_ext_tile's operations, in its order). */
template <int R, int SC>
__host__ __device__ __forceinline__ void iir_line(const float (&x)[kIirW], const Iir<float> &f, float *out, int st)
{
    constexpr int L = iir_tile<R>();
    float s1[SC], s2[SC];
#pragma unroll
    for (int k = 0; k < SC; k++)
        s1[k] = s2[k] = 0.0f;
#pragma unroll
    for (int i = 1; i <= R + L; i++) {
        const float v = sections_step<float, SC>(f.b0, f.b1, f, x[i], x[i - 1], s1, s2);
        if (i > R)
            out[i * st] = v;
    }
#pragma unroll
    for (int k = 0; k < SC; k++)
        s1[k] = s2[k] = 0.0f;
#pragma unroll
    for (int i = kIirW - 3; i > R; i--) {
        const float v = sections_step<float, SC>(f.c1, f.c2, f, x[i + 1], x[i + 2], s1, s2);
        if (i <= R + L)
            out[i * st] += v;
    }
}

/* A tile: its first row and column, its window's (negative or past the
 * field at its edges), and how many of its rows and columns lie in the
 * field. */
struct ITile {
    i64 y0, x0, wy, wx;
    int ny, nx;
};

template <int R> __host__ __device__ __forceinline__ ITile iir_tile_of(const FusedIir &g, i64 ty, i64 tx)
{
    constexpr int L = iir_tile<R>();
    ITile t;
    t.y0 = ty * L;
    t.x0 = tx * L;
    t.wy = t.y0 - R - 1;
    t.wx = t.x0 - R - 1;
    t.ny = (int)(g.ny - t.y0 < L ? g.ny - t.y0 : L);
    t.nx = (int)(g.nx - t.x0 < L ? g.nx - t.x0 : L);
    return t;
}

/* What the mode puts where the continuation has no field value (cval, zero). */
__host__ __device__ __forceinline__ float iir_outside(const FusedIir &g)
{
    return g.boundary == DK_BOUNDARY_CVAL ? g.cval : 0.0f;
}

/* Column `col` of the window (col < W): read through the continuation,
 * filtered along axis ndim-2, its kept rows stored in column col of sm. */
template <int R, int SC>
__host__ __device__ __forceinline__ void iir_column(const float *__restrict__ src, const FusedIir &g, const ITile &t,
                                                    int col, float *sm)
{
    constexpr int P = iir_pitch(), L = iir_tile<R>();
    const i64 xc = extend_index(t.wx + col, g.nx, g.boundary);
    if (xc < 0) {
        const float v = iir_outside(g);
        for (int i = R + 1; i <= R + L; i++)
            sm[i * P + col] = v;
        return;
    }
    float x[kIirW];
    const float *p = src + xc;
    if (t.wy >= 0 && t.wy + kIirW <= g.ny) {
        p += t.wy * g.nx;
#pragma unroll
        for (int i = 0; i < kIirW; i++) {
#ifdef __CUDA_ARCH__
            x[i] = __ldg(p + i * g.nx);
#else
            x[i] = p[i * g.nx];
#endif
        }
    } else {
        const float outside = iir_outside(g);
#pragma unroll
        for (int i = 0; i < kIirW; i++) {
            const i64 yc = extend_index(t.wy + i, g.ny, g.boundary);
            x[i] = yc >= 0 ? p[yc * g.nx] : outside;
        }
    }
    iir_line<R, SC>(x, g.fy, sm + col, P);
}

/* Tile row r (r < t.ny, the window's row R + 1 + r in sm): filtered along
 * the last axis, its kept values stored in place. */
template <int R, int SC> __host__ __device__ __forceinline__ void iir_row(const FusedIir &g, int r, float *sm)
{
    float x[kIirW];
    float *row = sm + (R + 1 + r) * iir_pitch();
#pragma unroll
    for (int i = 0; i < kIirW; i++)
        x[i] = row[i];
    iir_line<R, SC>(x, g.fx, row, 1);
}

/* The tile from sm to dst (the tile's first value), a warp a row. */
template <int R>
__host__ __device__ __forceinline__ void iir_write(const FusedIir &g, const ITile &t, const float *sm, float *dst,
                                                   int warp, int warps, int lane)
{
    const float *s = sm + (R + 1) * iir_pitch() + R + 1;
    for (int r = warp; r < t.ny; r += warps)
        for (int j = lane; j < t.nx; j += 32)
            dst[r * g.nx + j] = s[r * iir_pitch() + j];
}

template <int R, int SC>
__global__ void __launch_bounds__(128, 3) k_fused_iir(const float *__restrict__ src, float *__restrict__ dst, FusedIir g)
{
    extern __shared__ float sm[];
    const ITile t = iir_tile_of<R>(g, blockIdx.y, blockIdx.x);
    const i64 plane = (i64)blockIdx.z * g.ny * g.nx;
    const int tid = (int)threadIdx.x;
    if (tid < kIirW)
        iir_column<R, SC>(src + plane, g, t, tid, sm);
    __syncthreads();
    if (tid < t.ny)
        iir_row<R, SC>(g, tid, sm);
    __syncthreads();
    iir_write<R>(g, t, sm, dst + plane + t.y0 * g.nx + t.x0, tid / 32, 4, tid % 32);
}

/* The compiled reaches, deriche's at sigma 1.5 and 2 in float32 (19 serves
 * shorter ones too: a kernel for 13 spilled), and the kernel for one of
 * them. Two sections only: with three, or a reach of 31, the passes are
 * faster (docs/gauss.md). */
const int kIirR[] = {19, 25};

void *iir_kernel(int R, int sections)
{
    if (sections != 2)
        return NULL;
    return R == 19 ? (void *)k_fused_iir<19, 2> : R == 25 ? (void *)k_fused_iir<25, 2> : NULL;
}

} // namespace

bool dk_cuda_gauss::plan_fused_iir(Plan *p)
{
    const dk_gauss_setup *s = &p->setup;
    const dk_gauss_desc *d = &s->desc;
    const int a = d->ndim - 2, b = d->ndim - 1;
    p->fused_iir = false;
    if (!dk_tuning_long("DAKIT_CUDA_GAUSS_FUSED", 1, 0, 1) || p->dp || d->dtype != DK_F32 || d->ndim < 2 ||
        d->method == DK_GAUSS_RF || d->axes != ((1u << a) | (1u << b)) || !s->extended[a] || !s->extended[b] ||
        s->halo_max[a] || s->halo_max[b])
        return false;
    /* an axis with fewer sections would run zero ones (iir_of leaves them 0): + 0 changes no sum */
    const int sections = s->iir[a].count > s->iir[b].count ? s->iir[a].count : s->iir[b].count;
    const size_t reach = s->reach[a] > s->reach[b] ? s->reach[a] : s->reach[b];
    int R = 0;
    for (int r : kIirR)
        if (!R && (size_t)r >= reach)
            R = r;
    i64 outer = 1;
    for (int k = 0; k < a; k++)
        outer *= (i64)d->shape[k];
    const i64 L = kIirW - 2 * R - 3, ny = (i64)d->shape[a], nx = (i64)d->shape[b];
    void *kernel = R ? iir_kernel(R, sections) : NULL;
    if (!kernel || outer > 65535 || ceil_div(ny, L) > 65535 || ceil_div(nx, L) > INT_MAX ||
        iir_smem() > p->dev->smem_optin || dk_cuda_failed(allow_smem(kernel, iir_smem())))
        return false;
    FusedIir &g = p->fiir;
    g.ny = ny, g.nx = nx, g.outer = outer;
    g.boundary = (int)d->boundary;
    g.cval = (float)d->cval;
    g.fy = iir_of<float>(p, a);
    g.fx = iir_of<float>(p, b);
    p->fused_kernel = kernel;
    p->fused_block = 128;
    p->fused_smem = iir_smem();
    g.L = L;
    p->fused_W = kIirW;
    p->fused_iir = true;
    return true;
}

cudaError_t dk_cuda_gauss::launch_fused_iir(const Plan *p, const float *src, float *dst, cudaStream_t st)
{
    const FusedIir &g = p->fiir;
    dim3 grid((unsigned)ceil_div(g.nx, g.L), (unsigned)ceil_div(g.ny, g.L), (unsigned)g.outer);
    void *args[] = {&src, &dst, (void *)&g};
    return cudaLaunchKernel(p->fused_kernel, grid, dim3(p->fused_block), args, p->fused_smem, st);
}
