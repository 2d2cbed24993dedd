/* dakit cuda plugin, gauss: k_gen, windows of any length (large sigma,
 * long overlap blocks): the window lives in shared memory laid out
 * [i][thread] (PATH_GEN_SMEM), or, when that does not fit, in a global
 * scratch buffer laid out [i][slot] (PATH_GEN_GLOBAL).
 * Applies (plan_pass) where no compiled register window does: overlap
 * blocks longer than the predicated W, exact mode where no W keeps the
 * overhead at most 3 (chunks clipped at the line's ends). */
#include "gauss.cuh"

using namespace dk_cuda_gauss;

namespace {

/* Generic: windows of any length in shared memory ([i][thread]) or in a
 * global scratch buffer ([i][slot]). slot_blocks thread blocks share the
 * pass's g.nblocks blocks, each looping over them with that stride. */
template <typename T, bool SMEM>
__global__ void __launch_bounds__(128) k_gen(const T *__restrict__ src, T *__restrict__ dst,
                                            Geo g, Coef<T> c, T *scratch, i64 slot_blocks,
                                            i64 block0)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const i64 sb = block0 + blockIdx.x;
    T *w;
    i64 st;
    if (SMEM) {
        w = reinterpret_cast<T *>(smem_raw) + threadIdx.x;
        st = blockDim.x;
    } else {
        w = scratch + sb * blockDim.x + threadIdx.x;
        st = slot_blocks * blockDim.x;
    }
    for (i64 b = sb; b < g.nblocks; b += slot_blocks) {
        i64 o, j, k;
        if (!item_of_thread(g, b, o, j, k))
            continue;
        i64 ks, ke, ws, we;
        item_span(g, k, 0, ks, ke, ws, we);
        const i64 inner = g.inner;
        const i64 base = (o * g.n + ws) * inner + j;
        const int len = (int)(we - ws);
        for (int i = 0; i < len; i++)
            w[i * st] = __ldg(src + base + i * inner);
        rf_mem(w, st, len, c);
        for (i64 i = ks - ws; i < ke - ws; i++)
            dst[base + i * inner] = w[i * st];
    }
}

template <typename T, bool SMEM>
__global__ void p_gen(const T *src, T *dst, Geo g, Coef<T> c, T *scratch, i64 slot_blocks,
                      i64 per, unsigned threads, unsigned smem)
{
    i64 b0;
    unsigned cnt;
    if (dp_slice(slot_blocks, per, b0, cnt))
        k_gen<T, SMEM><<<cnt, threads, smem, cudaStreamFireAndForget>>>(src, dst, g, c, scratch,
                                                                        slot_blocks, b0);
}

/* Shared memory for the block's windows, or the global windows' scratch,
 * bounded to 64 Mi elements. */
void size(const Plan *p, Pass *ps)
{
    const Geo &g = ps->g;
    const unsigned threads = ps->threads;
    const i64 maxwin = ps->maxwin;
    if (ps->path == PATH_GEN_SMEM) {
        ps->smem = (size_t)threads * (size_t)maxwin * p->esize;
    } else {
        /* bound the scratch: at most 64 Mi elements of windows */
        i64 budget = (i64)64 << 20;
        i64 slot_blocks = budget / ((i64)threads * maxwin);
        if (slot_blocks < 1)
            slot_blocks = 1;
        if (slot_blocks > g.nblocks)
            slot_blocks = g.nblocks;
        ps->grid = slot_blocks;
        ps->scratch_bytes = (size_t)slot_blocks * threads * (size_t)maxwin * p->esize;
    }
}

dk_status prepare(const Plan *p, Pass &ps, dk_msg *msg)
{
    if (ps.path != PATH_GEN_SMEM)
        return DK_OK;
    CUDA_TRY(p->setup.desc.dtype == DK_F32 ? allow_smem(k_gen<float, true>, ps.smem)
                                           : allow_smem(k_gen<double, true>, ps.smem),
             "setting a kernel's shared-memory limit");
    return DK_OK;
}

template <typename T, bool SMEM> void gen(const Launch<T> &l)
{
    const Pass &ps = l.ps;
    unsigned smem = SMEM ? (unsigned)ps.smem : 0;
    if (l.dp)
        p_gen<T, SMEM><<<l.parent_grid(), 32, 0, l.st>>>(l.src, l.dst, ps.g, l.c, l.scratch, ps.grid,
                                                         ps.dp_per, ps.threads, smem);
    else
        k_gen<T, SMEM><<<(unsigned)ps.grid, ps.threads, smem, l.st>>>(l.src, l.dst, ps.g, l.c,
                                                                       l.scratch, ps.grid, 0);
}

template <typename T> cudaError_t launch(const Launch<T> &l)
{
    if (l.ps.path == PATH_GEN_SMEM)
        gen<T, true>(l);
    else
        gen<T, false>(l);
    return cudaGetLastError();
}

} // namespace

const Solver dk_cuda_gauss::solver_gen = {
    .name = "gen",
    .size = size,
    .prepare = prepare,
    .launch_f32 = launch<float>,
    .launch_f64 = launch<double>,
};
