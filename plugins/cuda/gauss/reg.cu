/* dakit cuda plugin, gauss: k_reg, a thread loads its window straight into
 * registers (compile-time length W, loops unrolled). Lines of a strided axis
 * go to adjacent threads, so every load and store is coalesced. FULL: every
 * window is W long (exact chunks, shifted inside the line at its ends);
 * else windows are up to W long (overlap blocks, whole short lines).
 * Applies (plan_pass) to overlap mode where the longest window fits a W of
 * the predicated loops, to a line that is one window, and to exact mode's
 * chunks on a strided axis whose inner is not a multiple of 32. */
#include "gauss.cuh"

using namespace dk_cuda_gauss;

namespace {

/* block0 is the first block's index (dp children cover a slice of the
 * blocks) */
template <typename T, int W, bool FULL>
__global__ void __launch_bounds__(128) k_reg(const T *__restrict__ src, T *__restrict__ dst,
                                            Geo g, Coef<T> c, i64 block0)
{
    i64 o, j, k;
    if (!item_of_thread(g, block0 + blockIdx.x, o, j, k))
        return;
    i64 ks, ke, ws, we;
    item_span(g, k, W, ks, ke, ws, we);
    const i64 inner = g.inner;
    const i64 base = (o * g.n + ws) * inner + j;
    const int len = (int)(we - ws);
    T x[W];
#pragma unroll
    for (int i = 0; i < W; i++)
        x[i] = (FULL || i < len) ? __ldg(src + base + i * inner) : T(0);
    rf_regs<T, W, FULL>(x, len, c);
    const int a = (int)(ks - ws), e = (int)(ke - ws);
#pragma unroll
    for (int i = 0; i < W; i++)
        if (i >= a && i < e)
            dst[base + i * inner] = x[i];
}

template <typename T, int W, bool FULL>
__global__ void p_reg(const T *src, T *dst, Geo g, Coef<T> c, i64 nblocks, i64 per,
                      unsigned threads)
{
    i64 b0;
    unsigned cnt;
    if (dp_slice(nblocks, per, b0, cnt))
        k_reg<T, W, FULL><<<cnt, threads, 0, cudaStreamFireAndForget>>>(src, dst, g, c, b0);
}

template <typename T, int W, bool FULL> void reg(const Launch<T> &l)
{
    const Pass &ps = l.ps;
    if (l.dp)
        p_reg<T, W, FULL><<<l.parent_grid(), 32, 0, l.st>>>(l.src, l.dst, ps.g, l.c, ps.grid, ps.dp_per,
                                                            ps.threads);
    else
        k_reg<T, W, FULL><<<(unsigned)ps.grid, ps.threads, 0, l.st>>>(l.src, l.dst, ps.g, l.c, 0);
}

template <typename T> cudaError_t launch(const Launch<T> &l)
{
    const Pass &ps = l.ps;
    switch (ps.W) {
#define X(W)                                                                                   \
    case W:                                                                                    \
        if (!w_built<T>(W))                                                                    \
            return cudaErrorInvalidValue;                                                      \
        if (ps.path == PATH_REG_FULL)                                                          \
            reg<T, (w_built<T>(W) ? W : 31), true>(l);                                         \
        else                                                                                   \
            reg<T, (w_built<T>(W) ? W : 31), false>(l);                                        \
        break;
        DK_W_CASES(X)
#undef X
    default:
        return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

} // namespace

const Solver dk_cuda_gauss::solver_reg = {
    .name = "reg",
    .size = NULL,
    .prepare = NULL,
    .launch_f32 = launch<float>,
    .launch_f64 = launch<double>,
};
