/* dakit cuda plugin, gauss: k_tile, exact mode, full windows of W, staged
 * through shared memory by persistent blocks that copy the next tile in
 * (cp.async, 16-byte pieces) while they filter the current one. Contiguous
 * axis (PATH_ROW): a tile is 128 consecutive chunks (odd length, so that the
 * staged windows are read free of bank conflicts) and is written back
 * through shared memory with 16-byte stores. Strided axis (PATH_TILE, inner
 * a multiple of 32): a tile is 32 adjacent lines by 4 chunks, laid out
 * [row][line]. In place, k_edges keeps what runs of tiles read beyond what
 * they write, then k_tile_ip filters the runs. dp: k_tile's children filter
 * one tile per block, so they stage nothing ahead.
 * Applies (plan_pass) to exact mode's chunks wherever a compiled W keeps the
 * overhead W / L low, on the contiguous axis and on strided axes whose inner
 * is a multiple of 32. execute_halo (halo.cu) runs the strided k_tile on the
 * line lower halo | box | upper halo, its rows staged from the three buffers
 * (HaloSrc): the same windows as k_halo_reg, so the same bits. */
#include <type_traits>

#include "gauss.cuh"

using namespace dk_cuda_gauss;

namespace {

/* Flat index of the window start of chunk q (exact mode, contiguous axis). */
__device__ __forceinline__ i64 row_window(const Geo &g, int W, i64 q, i64 *keep_begin,
                                          i64 *keep_end)
{
    i64 o = q / g.ipl, k = q % g.ipl;
    i64 ks, ke, ws, we;
    item_span(g, k, W, ks, ke, ws, we);
    if (keep_begin)
        *keep_begin = o * g.n + ks;
    if (keep_end)
        *keep_end = o * g.n + ke;
    return o * g.n + ws;
}

/* One tile of k_tile: what its block stages and writes back.
 *   contiguous axis: the tile is blockDim.x consecutive chunks (flat order,
 *     across lines); it stages the flat span [A0, G1) and writes [K0, K1).
 *   strided axis (inner % 32 == 0): the tile is 32 adjacent lines by KT
 *     chunks; it stages rows [R0, R1) x 32 columns, laid out [row][column],
 *     and writes back rows [K0, K1). */
struct TileSpan {
    i64 A0, G1, K0, K1; /* contiguous: flat; strided: rows of the line */
    i64 base;           /* strided: element (o, box row 0, column jb*32) */
    i64 o, col;         /* strided: the tile's outer index and first column jb*32 */
};

template <typename T, int W, bool STRIDED, bool HALO = false>
__device__ __forceinline__ TileSpan tile_span(const Geo &g, i64 t, i64 tq = blockDim.x)
{
    constexpr int VEC = (int)(16 / sizeof(T));
    TileSpan s;
    if (!STRIDED) {
        const i64 Q = g.outer * g.ipl;
        const i64 q0 = t * tq;
        const i64 q1 = (q0 + tq < Q ? q0 + tq : Q) - 1;
        const i64 G0 = row_window(g, W, q0, &s.K0, NULL);
        s.G1 = row_window(g, W, q1, NULL, &s.K1) + W;
        s.A0 = G0 & ~(i64)(VEC - 1);
        s.base = 0;
    } else {
        i64 jb = t % g.nj, r = t / g.nj;
        i64 kb = r % g.nk, o = r / g.nk;
        i64 k0 = kb * g.KT, k1 = (k0 + g.KT < g.ipl ? k0 + g.KT : g.ipl) - 1;
        i64 ks, ke, ws, we;
        item_span<HALO>(g, k0, W, ks, ke, ws, we);
        s.A0 = ws;
        s.K0 = ks;
        item_span<HALO>(g, k1, W, ks, ke, ws, we);
        s.G1 = we;
        s.K1 = ke;
        s.o = o;
        s.col = jb * 32;
        s.base = o * g.n * g.inner + s.col;
    }
    return s;
}

/* Stages rows [A0, G1) x 32 columns of a strided tile, laid out [row][column]:
 * row r's 32 columns from row_at(r) on (16-byte aligned). */
template <typename T, typename RowAt>
__device__ __forceinline__ void stage_rows(const TileSpan &s, T *sm, const RowAt &row_at)
{
    constexpr int VEC = (int)(16 / sizeof(T));
    constexpr int PER_ROW = 32 / VEC;
    const i64 nvec = (s.G1 - s.A0) * PER_ROW;
    for (i64 v = threadIdx.x; v < nvec; v += blockDim.x) {
        const i64 r = s.A0 + v / PER_ROW;
        const int c = (int)(v % PER_ROW) * VEC;
        cp_async16(sm + (r - s.A0) * 32 + c, row_at(r) + c);
    }
}

template <typename T, int W, bool STRIDED>
__device__ __forceinline__ void tile_stage(const T *__restrict__ src, const Geo &g,
                                           const TileSpan &s, T *sm)
{
    typedef typename Vec<T>::type V;
    constexpr int VEC = (int)(sizeof(V) / sizeof(T));
    if (!STRIDED) {
        const i64 nvec = (s.G1 - s.A0) / VEC;
        for (i64 v = threadIdx.x; v < nvec; v += blockDim.x)
            cp_async16(sm + v * VEC, src + s.A0 + v * VEC);
        for (i64 i = s.A0 + nvec * VEC + threadIdx.x; i < s.G1; i += blockDim.x)
            cp_async_small<sizeof(T)>(sm + (i - s.A0), src + i);
    } else {
        stage_rows(s, sm, [&](i64 r) { return src + s.base + r * g.inner; });
    }
}

/* execute_halo's source (strided axis): row r of the line lower halo | box |
 * upper halo from the buffer it lies in. */
template <typename T> struct HaloSrc {
    const T *lo, *box, *up;
};

template <typename T, int W, bool STRIDED>
__device__ __forceinline__ void tile_stage(const HaloSrc<T> &src, const Geo &g, const TileSpan &s, T *sm)
{
    static_assert(STRIDED, "execute_halo's k_tile stages rows of a strided axis");
    stage_rows(s, sm, [&](i64 r) {
        return halo_at(src.lo, src.box, src.up, g.lc, g.n, g.uc, g.inner, s.o, s.col, r);
    });
}

/* Filters tile t, staged in sm, and writes its kept values to dst. drain:
 * first wait for this thread's pending copies (the next tile's staging may
 * read what this tile is about to overwrite). HALO: item_span's. */
template <typename T, int W, bool STRIDED, bool HALO = false>
__device__ __forceinline__ void tile_filter(T *__restrict__ dst, const Geo &g, const Coef<T> &c,
                                            i64 t, T *sm, bool drain)
{
    typedef typename Vec<T>::type V;
    constexpr int VEC = (int)(sizeof(V) / sizeof(T));
    const TileSpan s = tile_span<T, W, STRIDED, HALO>(g, t);
    T x[W];
    i64 off = 0; /* the window's first element in sm */
    i64 step = 1;
    int a = 0, e = 0;
    bool active;
    if (!STRIDED) {
        const i64 q = t * (i64)blockDim.x + threadIdx.x;
        active = q < g.outer * g.ipl;
        if (active) {
            i64 kb, kend;
            off = row_window(g, W, q, &kb, &kend) - s.A0;
            a = (int)(kb - s.A0 - off);
            e = (int)(kend - s.A0 - off);
        }
    } else {
        const int jl = (int)threadIdx.x % 32;
        const i64 k = (t / g.nj % g.nk) * g.KT + (int)threadIdx.x / 32;
        active = k < g.ipl;
        if (active) {
            i64 ks, ke, ws, we;
            item_span<HALO>(g, k, W, ks, ke, ws, we);
            off = (ws - s.A0) * 32 + jl;
            step = 32;
            a = (int)(ks - ws);
            e = (int)(ke - ws);
        }
    }
    if (active) {
#pragma unroll
        for (int i = 0; i < W; i++)
            x[i] = sm[off + i * step];
        rf_regs<T, W, true>(x, W, c);
    }
    __syncthreads();
    if (active) {
#pragma unroll
        for (int i = 0; i < W; i++)
            if (i >= a && i < e)
                sm[off + i * step] = x[i];
    }
    if (drain)
        cp_wait_all();
    __syncthreads();

    if (!STRIDED) { /* [K0, K1): head, 16-byte body, tail */
        i64 h1 = (s.K0 + VEC - 1) & ~(i64)(VEC - 1);
        if (h1 > s.K1)
            h1 = s.K1;
        for (i64 i = s.K0 + threadIdx.x; i < h1; i += blockDim.x)
            dst[i] = sm[i - s.A0];
        const i64 nbody = (s.K1 - h1) / VEC;
        V *vd = reinterpret_cast<V *>(dst + h1);
        const V *vs = reinterpret_cast<const V *>(sm + (h1 - s.A0));
        for (i64 v = threadIdx.x; v < nbody; v += blockDim.x)
            vd[v] = vs[v];
        for (i64 i = h1 + nbody * VEC + threadIdx.x; i < s.K1; i += blockDim.x)
            dst[i] = sm[i - s.A0];
    } else { /* rows [K0, K1) x 32 columns (HALO: the box's rows from g.lc on) */
        constexpr int PER_ROW = 32 / VEC;
        const i64 lc = HALO ? g.lc : 0;
        const i64 nvec = (s.K1 - s.K0) * PER_ROW;
        for (i64 v = threadIdx.x; v < nvec; v += blockDim.x) {
            i64 r = s.K0 + v / PER_ROW;
            int cc = (int)(v % PER_ROW) * VEC;
            *reinterpret_cast<V *>(dst + s.base + (r - lc) * g.inner + cc) =
                *reinterpret_cast<const V *>(sm + (r - s.A0) * 32 + cc);
        }
    }
}

/* Exact mode, full windows of W: persistent blocks loop over tiles
 * [t_begin, t_end) with stride gridDim.x, two shared-memory buffers of `buf`
 * elements each, the next tile staged while the current one is filtered.
 * Src: the field (const T *) or execute_halo's three buffers (HaloSrc). */
template <typename T, int W, bool STRIDED, typename Src = const T *>
__global__ void __launch_bounds__(128) k_tile(Src src, T *__restrict__ dst, Geo g, Coef<T> c, i64 t_begin,
                                             i64 t_end, i64 buf)
{
    constexpr bool HALO = !std::is_same<Src, const T *>::value;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *bufs[2] = {reinterpret_cast<T *>(smem_raw), reinterpret_cast<T *>(smem_raw) + buf};

    i64 t = t_begin + blockIdx.x;
    int cur = 0;
    if (t < t_end)
        tile_stage<T, W, STRIDED>(src, g, tile_span<T, W, STRIDED, HALO>(g, t), bufs[0]);
    cp_commit();
    for (; t < t_end; t += gridDim.x) {
        const i64 tn = t + gridDim.x;
        if (tn < t_end)
            tile_stage<T, W, STRIDED>(src, g, tile_span<T, W, STRIDED, HALO>(g, tn), bufs[cur ^ 1]);
        cp_commit();
        cp_wait_prev();
        __syncthreads();

        tile_filter<T, W, STRIDED, HALO>(dst, g, c, t, bufs[cur], false);
        __syncthreads();
        cur ^= 1;
    }
}

/* ---- k_tile in place. A run is M tiles one after another along the axis
 * (strided axis: t, t + nj, ...; contiguous axis: M = 1), filtered in order by
 * one block. What a run's windows read outside its own kept values (its
 * edges: before its first tile, after its last) is kept by k_edges in a
 * small scratch before any block writes; inside a run, the next tile's
 * staging reads the current tile's values before the current tile
 * overwrites them (tile_filter's drain). ---- */

/* Tile m of run ru, or -1 past the run's end. */
__device__ __forceinline__ i64 run_tile(const Geo &g, const Runs &r, bool strided, i64 ru, i64 m)
{
    if (m >= r.M)
        return -1;
    if (!strided) {
        i64 t = ru * r.M + m;
        return t < r.ntiles ? t : -1;
    }
    i64 jb = ru % g.nj, rest = ru / g.nj;
    i64 kb = (rest % r.rps) * r.M + m, o = rest / r.rps;
    return kb < g.nk ? (o * g.nk + kb) * g.nj + jb : -1;
}

/* tile_stage for a tile of a run: the values before K0 come from eleft, those
 * from K1 on from eright, where not NULL (the run's edges in scratch). */
template <typename T, int W, bool STRIDED>
__device__ __forceinline__ void tile_stage_ip(const T *src, const Geo &g, const TileSpan &s, T *sm,
                                              const T *eleft, const T *eright)
{
    constexpr int VEC = (int)(16 / sizeof(T));
    if (!STRIDED) {
        const i64 nvec = (s.G1 - s.A0) / VEC;
        for (i64 v = threadIdx.x; v < nvec; v += blockDim.x) {
            const i64 p = s.A0 + v * VEC;
            if ((!eleft || p >= s.K0) && (!eright || p + VEC <= s.K1)) {
                cp_async16(sm + v * VEC, src + p);
                continue;
            }
            for (int e = 0; e < VEC; e++) {
                const i64 i = p + e;
                const T *from = eleft && i < s.K0 ? eleft + (i - s.A0)
                                : eright && i >= s.K1 ? eright + (i - s.K1) : src + i;
                cp_async_small<sizeof(T)>(sm + (i - s.A0), from);
            }
        }
        for (i64 i = s.A0 + nvec * VEC + threadIdx.x; i < s.G1; i += blockDim.x) {
            const T *from = eleft && i < s.K0 ? eleft + (i - s.A0)
                            : eright && i >= s.K1 ? eright + (i - s.K1) : src + i;
            cp_async_small<sizeof(T)>(sm + (i - s.A0), from);
        }
    } else {
        stage_rows(s, sm, [&](i64 r) {
            return eleft && r < s.K0 ? eleft + (r - s.A0) * 32
                   : eright && r >= s.K1 ? eright + (r - s.K1) * 32
                                         : src + s.base + r * g.inner;
        });
    }
}

/* Keeps the edges of runs [ru0, nruns): one warp a run. */
template <typename T, int W, bool STRIDED>
__global__ void __launch_bounds__(128) k_edges(const T *__restrict__ src, T *__restrict__ edges,
                                              Geo g, Runs r, i64 tq, i64 ru0)
{
    const i64 ru = ru0 + ((i64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = (int)threadIdx.x % 32;
    if (ru >= r.nruns)
        return;
    i64 last = 0;
    while (last + 1 < r.M && run_tile(g, r, STRIDED, ru, last + 1) >= 0)
        last++;
    const TileSpan a = tile_span<T, W, STRIDED>(g, run_tile(g, r, STRIDED, ru, 0), tq);
    const TileSpan b = tile_span<T, W, STRIDED>(g, run_tile(g, r, STRIDED, ru, last), tq);
    T *el = edges + ru * r.E, *er = el + r.EL;
    if (!STRIDED) {
        for (i64 i = a.A0 + lane; i < a.K0; i += 32)
            el[i - a.A0] = src[i];
        for (i64 i = b.K1 + lane; i < b.G1; i += 32)
            er[i - b.K1] = src[i];
    } else {
        for (i64 row = a.A0; row < a.K0; row++)
            el[(row - a.A0) * 32 + lane] = src[a.base + row * g.inner + lane];
        for (i64 row = b.K1; row < b.G1; row++)
            er[(row - b.K1) * 32 + lane] = src[b.base + row * g.inner + lane];
    }
}

/* k_tile on f in place: persistent blocks loop over runs [ru_begin, ru_end)
 * with stride gridDim.x, and over each run's tiles in order, staging the next
 * tile while filtering the current one. */
template <typename T, int W, bool STRIDED>
__global__ void __launch_bounds__(128) k_tile_ip(T *f, const T *__restrict__ edges, Geo g,
                                                Coef<T> c, Runs r, i64 ru_begin, i64 ru_end,
                                                i64 buf)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *bufs[2] = {reinterpret_cast<T *>(smem_raw), reinterpret_cast<T *>(smem_raw) + buf};

    i64 ru = ru_begin + blockIdx.x, m = 0;
    i64 t = ru < ru_end ? run_tile(g, r, STRIDED, ru, 0) : -1;
    i64 tn_run = ru, tn_m = 1;
    /* stages tile t (m of run ru) into sm: its edges from scratch at the run's ends */
    auto stage = [&](i64 tt, i64 rr, i64 mm, T *sm) {
        const T *el = mm == 0 ? edges + rr * r.E : NULL;
        const T *er = run_tile(g, r, STRIDED, rr, mm + 1) < 0 ? edges + rr * r.E + r.EL : NULL;
        tile_stage_ip<T, W, STRIDED>(f, g, tile_span<T, W, STRIDED>(g, tt), sm, el, er);
    };
    int cur = 0;
    if (t >= 0)
        stage(t, ru, 0, bufs[0]);
    cp_commit();
    while (t >= 0) {
        tn_run = ru;
        tn_m = m + 1;
        i64 tn = run_tile(g, r, STRIDED, tn_run, tn_m);
        if (tn < 0) {
            tn_run = ru + gridDim.x;
            tn_m = 0;
            tn = tn_run < ru_end ? run_tile(g, r, STRIDED, tn_run, 0) : -1;
        }
        if (tn >= 0)
            stage(tn, tn_run, tn_m, bufs[cur ^ 1]);
        cp_commit();
        cp_wait_prev();
        __syncthreads();

        tile_filter<T, W, STRIDED>(f, g, c, t, bufs[cur], tn >= 0 && tn_run == ru);
        __syncthreads();
        cur ^= 1;
        t = tn;
        ru = tn_run;
        m = tn_m;
    }
}

/* dp parents (dp_slice) */
template <typename T, int W, bool STRIDED>
__global__ void p_tile(const T *src, T *dst, Geo g, Coef<T> c, i64 ntiles, i64 per,
                       unsigned threads, unsigned smem, i64 buf)
{
    i64 b0;
    unsigned cnt;
    if (dp_slice(ntiles, per, b0, cnt))
        k_tile<T, W, STRIDED><<<cnt, threads, smem, cudaStreamFireAndForget>>>(src, dst, g, c, b0,
                                                                               b0 + cnt, buf);
}

template <typename T, int W, bool STRIDED>
__global__ void p_tile_ip(T *f, const T *edges, Geo g, Coef<T> c, Runs r, i64 per,
                          unsigned threads, unsigned smem, i64 buf)
{
    i64 b0;
    unsigned cnt;
    if (dp_slice(r.nruns, per, b0, cnt))
        k_tile_ip<T, W, STRIDED><<<cnt, threads, smem, cudaStreamFireAndForget>>>(
            f, edges, g, c, r, b0, b0 + cnt, buf);
}

/* k_tile in place: the runs of a k_tile pass and the scratch their edges
 * take. Contiguous axis: a run is one tile (its edges are a few windows
 * beside 128 chunks). Strided axis: a tile is only KT chunks tall, so runs of
 * M tiles cut the edges M-fold; M is the longest (up to 16) that still
 * leaves 8 runs a resident block, DAKIT_GAUSS_CUDA_RUN forces it, and dp
 * (one run a child block) takes 1. A run's windows must reach no further
 * than its neighbouring tiles: W <= KT * L. */
void plan_runs(Pass &ps, i64 esize, i64 resident, bool dp)
{
    const Geo &g = ps.g;
    Runs &r = ps.runs;
    const i64 W = ps.W, VEC = 16 / esize;
    i64 ks, ke, ws, we;
    memset(&r, 0, sizeof r);
    if (ps.path == PATH_ROW) {
        /* any chunk may begin or end a tile: the widest reach on each side
         * (interior chunks reach h; those near a line's ends differ) */
        i64 left = g.h, right = g.h, near = ceil_div(W, g.L) + 2;
        for (i64 k = 0; k < g.ipl; k++) {
            if (k == near && g.ipl - near > k)
                k = g.ipl - near;
            item_span(g, k, (int)W, ks, ke, ws, we);
            left = ks - ws > left ? ks - ws : left;
            right = we - ke > right ? we - ke : right;
        }
        r.M = 1;
        r.ntiles = ps.ntiles;
        r.nruns = ps.ntiles;
        r.EL = ceil_div(left + VEC - 1, VEC) * VEC;
        r.E = r.EL + ceil_div(right, VEC) * VEC;
    } else {
        const i64 strips = g.nj * g.outer;
        i64 M = dk_tuning_long("DAKIT_GAUSS_CUDA_RUN", 0, 1, 64);
        if (M == 0)
            for (M = 16; M > 1 && strips * ceil_div(g.nk, M) < 8 * resident; M /= 2)
                ;
        if (dp || W > g.KT * g.L)
            M = 1;
        r.M = M;
        r.rps = ceil_div(g.nk, M);
        r.nruns = strips * r.rps;
        i64 left = 0, right = 0;
        for (i64 rr = 0; rr < r.rps; rr++) {
            i64 kb0 = rr * M, kb1 = (kb0 + M < g.nk ? kb0 + M : g.nk) - 1;
            item_span(g, kb0 * g.KT, (int)W, ks, ke, ws, we);
            left = ks - ws > left ? ks - ws : left;
            i64 k1 = (kb1 * g.KT + g.KT < g.ipl ? kb1 * g.KT + g.KT : g.ipl) - 1;
            item_span(g, k1, (int)W, ks, ke, ws, we);
            right = we - ke > right ? we - ke : right;
        }
        r.EL = left * 32;
        r.E = r.EL + right * 32;
    }
    ps.edge_bytes = (size_t)(r.nruns * r.E * esize);
}

/* The tiles, their shared buffers and the direct grid (prepare lowers it to
 * the resident blocks). */
void size(const Plan *p, Pass *ps)
{
    const Geo &g = ps->g;
    const unsigned threads = ps->threads;
    if (ps->path == PATH_ROW) {
        const i64 VEC = 16 / (i64)p->esize;
        ps->ntiles = ceil_div(g.outer * g.ipl, threads);
        ps->buf = ceil_div((i64)threads * g.L + 2 * g.L + 4 * g.h + VEC, VEC) * VEC;
        ps->smem = 2 * (size_t)ps->buf * p->esize;
        ps->grid = ps->ntiles; /* prepare lowers it to the resident blocks */
    } else {
        ps->ntiles = g.nblocks;
        ps->buf = ((i64)(g.KT - 1) * g.L + ps->W) * 32;
        ps->smem = 2 * (size_t)ps->buf * p->esize;
        ps->grid = ps->ntiles;
    }
}

/* Raises kernel's shared-memory limit to the pass's and counts the blocks of
 * the pass that fit on one SM at once. */
template <typename F> cudaError_t blocks_per_sm(F *kernel, const Pass &ps, int *per_sm)
{
    *per_sm = 0;
    cudaError_t e = allow_smem(kernel, ps.smem);
    return e != cudaSuccess ? e : cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, kernel, (int)ps.threads, ps.smem);
}

/* k_tile: raises the shared-memory limit and sizes the persistent grid to
 * the blocks that fit on the device at once. */
template <typename T, int W, bool STRIDED> dk_status prepare_tile(Pass &ps, int sm_count, bool dp, dk_msg *msg)
{
    const char *what = "setting a kernel's shared-memory limit";
    int per_sm = 0, per_sm_ip = 0;
    CUDA_TRY(blocks_per_sm(k_tile<T, W, STRIDED>, ps, &per_sm), what);
    CUDA_TRY(blocks_per_sm(k_tile_ip<T, W, STRIDED>, ps, &per_sm_ip), what);
    if (per_sm < 1 || per_sm_ip < 1)
        return dk_cuda_fail(msg, cudaErrorInvalidConfiguration, what);
    i64 resident = (i64)per_sm * sm_count;
    ps.grid = ps.ntiles < resident ? ps.ntiles : resident;
    plan_runs(ps, (i64)sizeof(T), (i64)per_sm_ip * sm_count, dp);
    ps.ip_grid = ps.runs.nruns < (i64)per_sm_ip * sm_count ? ps.runs.nruns : (i64)per_sm_ip * sm_count;
    return DK_OK;
}

template <typename T> dk_status prepare_t(Pass &ps, int sm_count, bool dp, dk_msg *msg)
{
    switch (ps.W) {
#define X(W)                                                                                   \
    case W:                                                                                    \
        if (!w_built<T>(W))                                                                    \
            break;                                                                             \
        if (ps.path == PATH_TILE)                                                              \
            return prepare_tile<T, (w_built<T>(W) ? W : 31), true>(ps, sm_count, dp, msg);    \
        return prepare_tile<T, (w_built<T>(W) ? W : 31), false>(ps, sm_count, dp, msg);
        DK_W_CASES(X)
#undef X
    }
    return dk_cuda_fail(msg, cudaErrorInvalidValue, "setting a kernel's shared-memory limit");
}

dk_status prepare(const Plan *p, Pass &ps, dk_msg *msg)
{
    return p->setup.desc.dtype == DK_F32 ? prepare_t<float>(ps, p->dev->sm_count, p->dp, msg)
                                         : prepare_t<double>(ps, p->dev->sm_count, p->dp, msg);
}

template <typename T, int W, bool STRIDED> void tile(const Launch<T> &l)
{
    const Pass &ps = l.ps;
    const T *src = l.src;
    T *dst = l.dst, *scratch = l.scratch;
    const Coef<T> &c = l.c;
    cudaStream_t st = l.st;
    if (src == dst) { /* in place: the runs' edges first, then the runs */
        const Runs &r = ps.runs;
        k_edges<T, W, STRIDED><<<(unsigned)ceil_div(r.nruns, 4), 128, 0, st>>>(
            src, scratch, ps.g, r, ps.threads, 0);
        if (l.dp)
            p_tile_ip<T, W, STRIDED><<<l.parent_grid(), 32, 0, st>>>( /* nruns == ntiles */
                dst, scratch, ps.g, c, r, ps.dp_per, ps.threads, (unsigned)ps.smem, ps.buf);
        else
            k_tile_ip<T, W, STRIDED><<<(unsigned)ps.ip_grid, ps.threads, ps.smem, st>>>(
                dst, scratch, ps.g, c, r, 0, r.nruns, ps.buf);
        return;
    }
    if (l.dp)
        p_tile<T, W, STRIDED><<<l.parent_grid(), 32, 0, st>>>(
            src, dst, ps.g, c, ps.ntiles, ps.dp_per, ps.threads, (unsigned)ps.smem, ps.buf);
    else
        k_tile<T, W, STRIDED><<<(unsigned)ps.grid, ps.threads, ps.smem, st>>>(
            src, dst, ps.g, c, 0, ps.ntiles, ps.buf);
}

template <typename T> cudaError_t launch(const Launch<T> &l)
{
    const Pass &ps = l.ps;
    switch (ps.W) {
#define X(W)                                                                                   \
    case W:                                                                                    \
        if (!w_built<T>(W))                                                                    \
            return cudaErrorInvalidValue;                                                      \
        if (ps.path == PATH_TILE)                                                              \
            tile<T, (w_built<T>(W) ? W : 31), true>(l);                                        \
        else                                                                                   \
            tile<T, (w_built<T>(W) ? W : 31), false>(l);                                       \
        break;
        DK_W_CASES(X)
#undef X
    default:
        return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

} // namespace

const Solver dk_cuda_gauss::solver_tile = {
    .name = "tile",
    .size = size,
    .prepare = prepare,
    .launch_f32 = launch<float>,
    .launch_f64 = launch<double>,
};

/* ---- execute_halo on a strided axis (halo.cu): k_tile with HaloSrc ---- */

namespace {

/* f(std::integral_constant<int, W>()) for a window W compiled for T. */
template <typename T, typename F> cudaError_t with_window(int W, F f)
{
    switch (W) {
#define X(w)                                                                                   \
    case w:                                                                                    \
        if constexpr (w_built<T>(w))                                                           \
            return f(std::integral_constant<int, w>());                                        \
        break;
        DK_W_CASES(X)
#undef X
    }
    return cudaErrorInvalidValue;
}

template <typename T> bool prepare_halo_t(const Plan *p, Pass &ps)
{
    int per_sm = 0;
    const cudaError_t e = with_window<T>(ps.W, [&](auto w) {
        return blocks_per_sm(k_tile<T, decltype(w)::value, true, HaloSrc<T>>, ps, &per_sm);
    });
    if (dk_cuda_failed(e) || per_sm < 1)
        return false;
    const i64 resident = (i64)per_sm * p->dev->sm_count;
    ps.grid = ps.ntiles < resident ? ps.ntiles : resident;
    return true;
}

} // namespace

bool dk_cuda_gauss::prepare_tile_halo(const Plan *p, Pass &ps)
{
    size(p, &ps);
    if (ps.smem > p->dev->smem_optin)
        return false;
    return p->setup.desc.dtype == DK_F32 ? prepare_halo_t<float>(p, ps) : prepare_halo_t<double>(p, ps);
}

template <typename T>
cudaError_t dk_cuda_gauss::launch_tile_halo(const Pass &ps, i64 lc, i64 uc, const T *lo, const T *box, const T *up,
                                            T *dst, const Coef<T> &c, cudaStream_t st)
{
    Geo g = ps.g;
    g.lc = lc;
    g.uc = uc;
    const HaloSrc<T> src = {lo, box, up};
    return with_window<T>(ps.W, [&](auto w) {
        k_tile<T, decltype(w)::value, true, HaloSrc<T>>
            <<<(unsigned)ps.grid, ps.threads, ps.smem, st>>>(src, dst, g, c, 0, ps.ntiles, ps.buf);
        return cudaGetLastError();
    });
}

template cudaError_t dk_cuda_gauss::launch_tile_halo<float>(const Pass &, i64, i64, const float *, const float *,
                                                            const float *, float *, const Coef<float> &,
                                                            cudaStream_t);
template cudaError_t dk_cuda_gauss::launch_tile_halo<double>(const Pass &, i64, i64, const double *,
                                                             const double *, const double *, double *,
                                                             const Coef<double> &, cudaStream_t);
