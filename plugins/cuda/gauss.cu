/* dakit cuda plugin: gauss, the K-iterated first-order recursive filter.
 *
 * Every scheme cuts each line into items and filters each item alone over a
 * window, keeping the item's own values:
 *   exact mode    items are chunks of L values; the window reaches at least
 *                 h = setup->halo[axis] beyond the chunk on each side (clipped
 *                 at the line's ends), so its artificial ends change nothing
 *                 at the dtype's rounding and the result equals the serial
 *                 reference to rounding;
 *   overlap mode  items are the blocks (dk_gauss_block) and windows
 *                 (dk_gauss_window), exactly as the reference cuts them.
 * The boundary rule applies at both ends of every window, as in the
 * reference.
 *
 * Kernels (each pass of one axis uses one):
 *   k_reg   a thread loads its window straight into registers (compile-time
 *           length W, loops unrolled). Lines of a strided axis go to adjacent
 *           threads, so every load and store is coalesced. FULL: every window
 *           is W long (exact chunks, shifted inside the line at its ends);
 *           else windows are up to W long (overlap blocks, whole short lines).
 *   k_tile  exact mode, full windows of W, staged through shared memory by
 *           persistent blocks that copy the next tile in (cp.async, 16-byte
 *           pieces) while they filter the current one. Contiguous axis: a
 *           tile is 128 consecutive chunks (odd length, so that the staged
 *           windows are read free of bank conflicts) and is written back
 *           through shared memory with 16-byte stores. Strided axis (inner a
 *           multiple of 32): a tile is 32 adjacent lines by 4 chunks, laid
 *           out [row][line].
 *   k_gen   any window length (large sigma, long overlap blocks): the window
 *           lives in shared memory laid out [i][thread], or, when that does
 *           not fit, in a global scratch buffer laid out [i][slot].
 *   k_extended / k_ext_tile  deriche, vyv and rf with scipy's modes: a
 *           segment of a line per thread, straight from global memory or
 *           (k_ext_tile, deriche and vyv) staged through shared memory.
 * Variant "dp" (dynamic parallelism): the host launches a parent
 * grid; each parent thread launches, on the device, the child grid that
 * filters its slice of the blocks of the same kernel (k_tile's children
 * filter one tile per block, so they stage nothing ahead).
 *
 * DAKIT_CUDA_WINDOW=W (31, 47, 63, 95, 127) forces the register window of
 * exact mode's chunked schemes, for tuning; an unusable W falls back to k_gen.
 *
 * Passes (one per filtered axis, increasing order) run in place on out where
 * their kernel allows it: k_tile through k_edges + k_tile_ip (the values a
 * run of tiles reads beyond what it writes are kept in a small scratch
 * first), k_reg, k_gen and the extended kernels where a thread's window is
 * its whole line. Only a plan with another pass owns a field-sized buffer to
 * ping-pong through, so that no such pass reads what it writes. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

typedef long long i64;

namespace {

enum { GEO_CHUNK = 0, GEO_CLIP = 1, GEO_BLOCKS = 2 };
enum { PATH_REG = 0, PATH_REG_FULL = 1, PATH_ROW = 2, PATH_TILE = 3, PATH_GEN_SMEM = 4, PATH_GEN_GLOBAL = 5 };

/* Where the items of one axis pass lie. */
struct Geo {
    i64 n, inner, outer; /* the axis view */
    int mode;            /* GEO_* */
    i64 L, h;            /* chunk modes: chunk length, halo */
    i64 blocks, m;       /* GEO_BLOCKS: blocks per line, overlap */
    i64 ipl;             /* items per line */
    int JT, KT;          /* a thread block: JT adjacent lines x KT items */
    i64 nj, nk;          /* ceil(inner / JT), ceil(ipl / KT) */
    i64 nblocks;         /* thread blocks of one pass (k_reg, k_gen) */
};

template <typename T> struct Coef {
    T alpha, beta, opa; /* opa = 1 + alpha, as the reference rounds it */
    int K;
    int constant;
};

/* The item's kept span [ks, ke) and window [ws, we) on its line. W > 0: the
 * fixed window length of GEO_CHUNK. */
__host__ __device__ __forceinline__ void item_span(const Geo &g, i64 k, int W, i64 &ks, i64 &ke,
                                                   i64 &ws, i64 &we)
{
    if (g.mode == GEO_BLOCKS) { /* dk_gauss_block + dk_gauss_window */
        i64 d = g.n / g.blocks, r = g.n % g.blocks;
        ks = k * d + (k < r ? k : r);
        ke = ks + d + (k < r ? 1 : 0);
        ws = ks > g.m ? ks - g.m : 0;
        we = ke + g.m < g.n ? ke + g.m : g.n;
    } else {
        ks = k * g.L;
        ke = ks + g.L < g.n ? ks + g.L : g.n;
        if (g.mode == GEO_CHUNK) {
            ws = ks - g.h;
            if (ws > g.n - W)
                ws = g.n - W;
            if (ws < 0)
                ws = 0;
            we = ws + W;
        } else {
            ws = ks > g.h ? ks - g.h : 0;
            we = ke + g.h < g.n ? ke + g.h : g.n;
        }
    }
}

/* Thread block b: the line (o, j) and item k of the calling thread. */
__device__ __forceinline__ bool item_of_thread(const Geo &g, i64 b, i64 &o, i64 &j, i64 &k)
{
    i64 jb = b % g.nj, r = b / g.nj;
    i64 kb = r % g.nk;
    o = r / g.nk;
    j = jb * g.JT + (int)threadIdx.x % g.JT;
    k = kb * g.KT + (int)threadIdx.x / g.JT;
    return j < g.inner && k < g.ipl && o < g.outer;
}

/* ---- the filter on a window held in registers ---- */

template <typename T, int W, bool FULL>
__device__ __forceinline__ void rf_regs(T (&x)[W], int len, const Coef<T> &c)
{
    const T alpha = c.alpha, beta = c.beta;
    for (int it = 0; it < c.K; it++) {
        if (FULL) {
            T u = x[W - 1];
            T p = c.constant ? x[0] : T(0);
#pragma unroll
            for (int i = 0; i < W; i++) {
                p = fma(alpha, p, beta * x[i]);
                x[i] = p;
            }
            T s = c.constant ? u + (p - u) / c.opa : beta * p;
            x[W - 1] = s;
#pragma unroll
            for (int i = W - 2; i >= 0; i--) {
                s = fma(alpha, s, beta * x[i]);
                x[i] = s;
            }
        } else {
            T u = T(0), pl = T(0);
            T p = c.constant ? x[0] : T(0);
#pragma unroll
            for (int i = 0; i < W; i++) {
                if (i < len) {
                    if (i == len - 1)
                        u = x[i];
                    p = fma(alpha, p, beta * x[i]);
                    x[i] = p;
                    if (i == len - 1)
                        pl = p;
                }
            }
            T s0 = c.constant ? u + (pl - u) / c.opa : beta * pl;
            T s = s0;
#pragma unroll
            for (int i = W - 1; i >= 0; i--) {
                if (i < len) {
                    s = i == len - 1 ? s0 : fma(alpha, s, beta * x[i]);
                    x[i] = s;
                }
            }
        }
    }
}

/* ---- the filter on a window in memory, element i at w[i * st] ---- */

template <typename T>
__device__ __forceinline__ void rf_mem(T *w, i64 st, int len, const Coef<T> &c)
{
    const T alpha = c.alpha, beta = c.beta;
    const int last = len - 1;
    for (int it = 0; it < c.K; it++) {
        T u = w[last * st];
        T p = c.constant ? w[0] : T(0);
        for (int i = 0; i < len; i++) {
            p = fma(alpha, p, beta * w[i * st]);
            w[i * st] = p;
        }
        T s = c.constant ? u + (p - u) / c.opa : beta * p;
        w[last * st] = s;
        for (int i = last - 1; i >= 0; i--) {
            s = fma(alpha, s, beta * w[i * st]);
            w[i * st] = s;
        }
    }
}

/* ---- kernels; block0 is the first block's index (dp children cover a
 * slice of the blocks) ---- */

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

template <typename T> struct Vec;
template <> struct Vec<float> { typedef float4 type; };
template <> struct Vec<double> { typedef double2 type; };
__device__ __forceinline__ float4 vec_add(float4 a, float4 b)
{
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
__device__ __forceinline__ double2 vec_add(double2 a, double2 b) { return make_double2(a.x + b.x, a.y + b.y); }

/* Asynchronous global -> shared copies (cp.async): a block stages its next
 * tile while it filters the current one. */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
template <int BYTES> __device__ __forceinline__ void cp_async_small(void *smem, const void *gmem)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(gmem), "n"(BYTES)
                 : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_wait_prev() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }
__device__ __forceinline__ void cp_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

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
    i64 base;           /* strided: element (o, row 0, column jb*32) */
};

template <typename T, int W, bool STRIDED>
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
        item_span(g, k0, W, ks, ke, ws, we);
        s.A0 = ws;
        s.K0 = ks;
        item_span(g, k1, W, ks, ke, ws, we);
        s.G1 = we;
        s.K1 = ke;
        s.base = o * g.n * g.inner + jb * 32;
    }
    return s;
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
        constexpr int PER_ROW = 32 / VEC;
        const i64 nvec = (s.G1 - s.A0) * PER_ROW;
        for (i64 v = threadIdx.x; v < nvec; v += blockDim.x) {
            i64 r = v / PER_ROW;
            int c = (int)(v % PER_ROW) * VEC;
            cp_async16(sm + r * 32 + c, src + s.base + (s.A0 + r) * g.inner + c);
        }
    }
}

/* Filters tile t, staged in sm, and writes its kept values to dst. drain:
 * first wait for this thread's pending copies (the next tile's staging may
 * read what this tile is about to overwrite). */
template <typename T, int W, bool STRIDED>
__device__ __forceinline__ void tile_filter(T *__restrict__ dst, const Geo &g, const Coef<T> &c,
                                            i64 t, T *sm, bool drain)
{
    typedef typename Vec<T>::type V;
    constexpr int VEC = (int)(sizeof(V) / sizeof(T));
    const TileSpan s = tile_span<T, W, STRIDED>(g, t);
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
            item_span(g, k, W, ks, ke, ws, we);
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
    } else { /* rows [K0, K1) x 32 columns */
        constexpr int PER_ROW = 32 / VEC;
        const i64 nvec = (s.K1 - s.K0) * PER_ROW;
        for (i64 v = threadIdx.x; v < nvec; v += blockDim.x) {
            i64 r = s.K0 + v / PER_ROW;
            int cc = (int)(v % PER_ROW) * VEC;
            *reinterpret_cast<V *>(dst + s.base + r * g.inner + cc) =
                *reinterpret_cast<const V *>(sm + (r - s.A0) * 32 + cc);
        }
    }
}

/* Exact mode, full windows of W: persistent blocks loop over tiles
 * [t_begin, t_end) with stride gridDim.x, two shared-memory buffers of `buf`
 * elements each, the next tile staged while the current one is filtered. */
template <typename T, int W, bool STRIDED>
__global__ void __launch_bounds__(128) k_tile(const T *__restrict__ src, T *__restrict__ dst,
                                             Geo g, Coef<T> c, i64 t_begin, i64 t_end, i64 buf)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *bufs[2] = {reinterpret_cast<T *>(smem_raw), reinterpret_cast<T *>(smem_raw) + buf};

    i64 t = t_begin + blockIdx.x;
    int cur = 0;
    if (t < t_end)
        tile_stage<T, W, STRIDED>(src, g, tile_span<T, W, STRIDED>(g, t), bufs[0]);
    cp_commit();
    for (; t < t_end; t += gridDim.x) {
        const i64 tn = t + gridDim.x;
        if (tn < t_end)
            tile_stage<T, W, STRIDED>(src, g, tile_span<T, W, STRIDED>(g, tn), bufs[cur ^ 1]);
        cp_commit();
        cp_wait_prev();
        __syncthreads();

        tile_filter<T, W, STRIDED>(dst, g, c, t, bufs[cur], false);
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

struct Runs {
    i64 M;      /* tiles a run */
    i64 nruns;  /* runs of the pass */
    i64 rps;    /* strided: runs a strip of 32 lines */
    i64 ntiles; /* contiguous: tiles of the pass */
    i64 EL, E;  /* elements of a run's left edge, of both (the run's stride in scratch) */
};

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
        constexpr int PER_ROW = 32 / VEC;
        const i64 nvec = (s.G1 - s.A0) * PER_ROW;
        for (i64 v = threadIdx.x; v < nvec; v += blockDim.x) {
            const i64 r = s.A0 + v / PER_ROW;
            const int c = (int)(v % PER_ROW) * VEC;
            const T *row = eleft && r < s.K0 ? eleft + (r - s.A0) * 32
                           : eright && r >= s.K1 ? eright + (r - s.K1) * 32
                                                 : src + s.base + r * g.inner;
            cp_async16(sm + (r - s.A0) * 32 + c, row + c);
        }
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

/* ---- dp parents: thread s launches the child grid for blocks
 * [s * per, min((s + 1) * per, nblocks)) ---- */

__device__ __forceinline__ bool dp_slice(i64 nblocks, i64 per, i64 &b0, unsigned &cnt)
{
    i64 s = blockIdx.x * (i64)blockDim.x + threadIdx.x;
    b0 = s * per;
    if (b0 >= nblocks)
        return false;
    cnt = (unsigned)(nblocks - b0 < per ? nblocks - b0 : per);
    return true;
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

/* ---- extended axes (deriche, vyv; rf with scipy's modes): one thread per
 * (line, segment), the line index fastest, as plugins/opencl/gauss.cl's
 * extended_segments and algorithms/gauss/reference.c ---- */

template <typename T> struct Iir {
    T b0[DK_GAUSS_MAX_SECTIONS], b1[DK_GAUSS_MAX_SECTIONS], a1[DK_GAUSS_MAX_SECTIONS];
    T a2[DK_GAUSS_MAX_SECTIONS], c1[DK_GAUSS_MAX_SECTIONS], c2[DK_GAUSS_MAX_SECTIONS];
    int count;
};

struct ExtGeo {
    i64 n, inner, items, segments, keep, reach;
    int boundary;
};

__device__ __forceinline__ i64 extend_index(i64 j, i64 n, int boundary)
{
    if (j >= 0 && j < n)
        return j;
    i64 m;
    switch (boundary) {
    case DK_BOUNDARY_REFLECT:
        m = j % (2 * n);
        m = m < 0 ? m + 2 * n : m;
        return m < n ? m : 2 * n - 1 - m;
    case DK_BOUNDARY_MIRROR:
        if (n == 1)
            return 0;
        m = j % (2 * n - 2);
        m = m < 0 ? m + 2 * n - 2 : m;
        return m < n ? m : 2 * n - 2 - m;
    case DK_BOUNDARY_WRAP:
        m = j % n;
        return m < 0 ? m + n : m;
    case DK_BOUNDARY_NEAREST:
    case DK_BOUNDARY_CONSTANT:
        return j < 0 ? 0 : n - 1;
    default:
        return -1;
    }
}

/* One step of every section of a recursion (causal: b0, b1 on the input
 * and the one before; anti-causal: c1, c2 on the two after), the sections'
 * states s1, s2 advanced; returns the sum of the sections' outputs. */
template <typename T>
__device__ __forceinline__ T section_step(const T *u, const T *w, const Iir<T> &f, T in0, T in1,
                                          T *s1, T *s2)
{
    T sum = T(0);
#pragma unroll
    for (int k = 0; k < DK_GAUSS_MAX_SECTIONS; k++) {
        if (k < f.count) {
            T v = u[k] * in0 + w[k] * in1 - f.a1[k] * s1[k] - f.a2[k] * s2[k];
            s2[k] = s1[k];
            s1[k] = v;
            sum += v;
        }
    }
    return sum;
}

template <typename T>
__device__ __forceinline__ T extended_value(const T *x, i64 j, const ExtGeo &g, T cval)
{
    i64 k = extend_index(j, g.n, g.boundary);
    return k >= 0 ? x[k * g.inner] : g.boundary == DK_BOUNDARY_CVAL ? cval : T(0);
}

/* Items [first, first + count). rf: the window goes to scratch, value i of
 * the thread's slot at i * count, and is filtered with the zero rule. */
template <typename T>
__global__ void k_extended(const T *__restrict__ src, T *__restrict__ dst, T *scratch, ExtGeo g,
                           Iir<T> f, Coef<T> c, int rf, T cval, i64 first, i64 count)
{
    i64 slot = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (slot >= count)
        return;
    i64 t = first + slot;
    i64 j = t % g.inner, rest = t / g.inner;
    i64 seg = rest % g.segments, o = rest / g.segments;
    const T *x = src + o * g.n * g.inner + j;
    T *y = dst + o * g.n * g.inner + j;
    const i64 N = g.n, R = g.reach;
    const i64 k0 = seg * g.keep, k1 = k0 + g.keep < N ? k0 + g.keep : N;

    if (rf) {
        T *w = scratch + slot;
        const i64 L = k1 - k0 + 2 * R, st = count;
        for (i64 i = 0; i < L; i++)
            w[i * st] = extended_value(x, k0 - R + i, g, cval);
        for (int it = 0; it < c.K; it++) {
            T p = T(0);
            for (i64 i = 0; i < L; i++) {
                p = fma(c.alpha, p, c.beta * w[i * st]);
                w[i * st] = p;
            }
            T s = c.beta * p;
            w[(L - 1) * st] = s;
            for (i64 i = L - 2; i >= 0; i--) {
                s = fma(c.alpha, s, c.beta * w[i * st]);
                w[i * st] = s;
            }
        }
        for (i64 i = k0; i < k1; i++)
            y[i * g.inner] = w[(i - k0 + R) * st];
        return;
    }

    T s1[DK_GAUSS_MAX_SECTIONS] = {}, s2[DK_GAUSS_MAX_SECTIONS] = {};
    T prev = extended_value(x, k0 - R - 1, g, cval);
    for (i64 i = k0 - R; i < k1; i++) {
        T cur = extended_value(x, i, g, cval);
        T sum = section_step(f.b0, f.b1, f, cur, prev, s1, s2);
        prev = cur;
        if (i >= k0)
            y[i * g.inner] = sum;
    }
#pragma unroll
    for (int k = 0; k < DK_GAUSS_MAX_SECTIONS; k++)
        s1[k] = s2[k] = T(0);
    T next = extended_value(x, k1 + R, g, cval), after = extended_value(x, k1 + R + 1, g, cval);
    for (i64 i = k1 - 1 + R; i >= k0; i--) {
        T sum = section_step(f.c1, f.c2, f, next, after, s1, s2);
        after = next;
        next = extended_value(x, i, g, cval);
        if (i < k1)
            y[i * g.inner] = y[i * g.inner] + sum;
    }
}

/* ---- extended axes, tiled (deriche, vyv): a block of 2 EXT_ROWS threads
 * filters EXT_ROWS rows, one (line, segment) each, from shared memory. The
 * block copies the rows' windows x[k0 - R - 1 .. k0 + keep + R + 2) in with
 * asynchronous copies (the values past the line's ends from extend_index),
 * runs k_extended's recursions with the same operations in the same order,
 * one warp the causal ones and the other the anti-causal ones, each into a
 * buffer of its own, and writes their sums back.
 * Contiguous axis: a row's window is one run of memory, copied and written
 * by the whole block along it, laid out [row][i] with an odd row length (no
 * bank conflicts); the rows are consecutive items, segments of a line
 * fastest. Strided axis: the rows are adjacent lines on one segment, laid
 * out [i][row], so every copy and store of a warp is one run of lines. ---- */

enum { EXT_ROWS = 32 };

/* The line's value at position p (extended past its ends) into *to. */
template <typename T>
__device__ __forceinline__ void ext_stage(T *to, const T *line, i64 p, const ExtGeo &g, T cval)
{
    if (p >= 0 && p < g.n) {
        cp_async_small<sizeof(T)>(to, line + p * g.inner);
        return;
    }
    i64 k = extend_index(p, g.n, g.boundary);
    *to = k >= 0 ? line[k * g.inner] : g.boundary == DK_BOUNDARY_CVAL ? cval : T(0);
}

/* section_step for exactly SC sections, known at compile time: the same
 * operations in the same order, without the per-section test. */
template <typename T, int SC>
__device__ __forceinline__ T sections_step(const T *u, const T *w, const Iir<T> &f, T in0, T in1, T *s1,
                                           T *s2)
{
    T sum;
#pragma unroll
    for (int k = 0; k < SC; k++) {
        T v = u[k] * in0 + w[k] * in1 - f.a1[k] * s1[k] - f.a2[k] * s2[k];
        s2[k] = s1[k];
        s1[k] = v;
        sum = k == 0 ? v : sum + v; /* 0 + v is v, up to the sign of a zero */
    }
    return sum;
}

/* The recursions of one row: x(i) = window value i (line position ws + i,
 * ws = k0 - R - 1), len kept values (position k0 + i). The causal one
 * writes its sums to o(i), the anti-causal one to a(i); o(i) + a(i) is the
 * result. Each first runs over the R values that only warm it up. */
template <typename T, int SC>
__device__ __forceinline__ void ext_causal(const T *x, int xs, T *o, int os, int len, int R, const Iir<T> &f)
{
    T s1[SC] = {}, s2[SC] = {};
    T prev = x[0];
    for (int i = 1; i <= R; i++) {
        T cur = x[i * xs];
        sections_step<T, SC>(f.b0, f.b1, f, cur, prev, s1, s2);
        prev = cur;
    }
    for (int i = R + 1; i <= R + len; i++) {
        T cur = x[i * xs];
        o[(i - R - 1) * os] = sections_step<T, SC>(f.b0, f.b1, f, cur, prev, s1, s2);
        prev = cur;
    }
}

template <typename T, int SC>
__device__ __forceinline__ void ext_anticausal(const T *x, int xs, T *a, int os, int len, int R,
                                               const Iir<T> &f)
{
    T s1[SC] = {}, s2[SC] = {};
    T next = x[(len + 2 * R + 1) * xs], after = x[(len + 2 * R + 2) * xs];
    for (int i = len + 2 * R; i > len + R; i--) {
        sections_step<T, SC>(f.c1, f.c2, f, next, after, s1, s2);
        after = next;
        next = x[i * xs];
    }
    for (int i = len + R; i > R; i--) {
        a[(i - R - 1) * os] = sections_step<T, SC>(f.c1, f.c2, f, next, after, s1, s2);
        after = next;
        next = x[i * xs];
    }
}

/* Block block0 + blockIdx.x, of 2 EXT_ROWS threads: thread r of the first
 * warp runs row r's causal recursion while thread r of the second runs its
 * anti-causal one, so each dependency chain is half a row long and an SM
 * holds twice the warps. S, So (contiguous axis): the elements of the
 * staged span and of each sum buffer. */
template <typename T, bool STRIDED, int SC>
__global__ void __launch_bounds__(2 * EXT_ROWS)
    k_ext_tile(const T *__restrict__ src, T *__restrict__ dst, ExtGeo g, Iir<T> f, T cval, int S,
               int So, i64 block0)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    typedef typename Vec<T>::type V;
    constexpr int VEC = (int)(sizeof(V) / sizeof(T));
    const int tid = (int)threadIdx.x, r = tid % EXT_ROWS, half = tid / EXT_ROWS, R = (int)g.reach;
    const int W = (int)g.keep + 2 * R + 3;
    const i64 b = block0 + blockIdx.x;
    T *win = reinterpret_cast<T *>(smem_raw);

    if (STRIDED) {
        /* rows: 32 adjacent lines on one segment, laid out [i][row] */
        T *causal = win + (i64)EXT_ROWS * W, *anti = causal + (i64)EXT_ROWS * g.keep;
        const i64 lines = g.items / g.segments, seg = b % g.segments, line = (b / g.segments) * EXT_ROWS + r;
        const bool valid = line < lines;
        const i64 k0 = seg * g.keep, k1 = k0 + g.keep < g.n ? k0 + g.keep : g.n;
        const i64 base = (line / g.inner) * g.n * g.inner + line % g.inner;
        const int len = valid ? (int)(k1 - k0) : 0;
        const i64 ws = k0 - R - 1;
        /* 32 whole lines side by side in memory (inner a multiple of 32),
         * the window inside the line: 16-byte copies, a row of the window
         * PER_ROW of them; else the two warps copy alternate window values */
        constexpr int PER_ROW = EXT_ROWS / VEC;
        const bool wide = g.inner % EXT_ROWS == 0 && ws >= 0 && ws + W <= g.n;
        const T *x = src + base;
        if (wide) {
            const T *x0 = src + (base - r);
            for (int v = tid; v < W * PER_ROW; v += 2 * EXT_ROWS) {
                const int i = v / PER_ROW, c = v % PER_ROW * VEC;
                cp_async16(win + i * EXT_ROWS + c, x0 + (ws + i) * g.inner + c);
            }
        } else if (valid) {
            for (int i = half; i < W; i += 2)
                ext_stage(win + i * EXT_ROWS + r, x, ws + i, g, cval);
        }
        cp_wait_all();
        __syncthreads();
        if (valid) {
            if (half == 0)
                ext_causal<T, SC>(win + r, EXT_ROWS, causal + r, EXT_ROWS, len, R, f);
            else
                ext_anticausal<T, SC>(win + r, EXT_ROWS, anti + r, EXT_ROWS, len, R, f);
        }
        __syncthreads();
        if (g.inner % EXT_ROWS == 0) {
            T *y0 = dst + (base - r) + k0 * g.inner;
            for (int v = tid; v < len * PER_ROW; v += 2 * EXT_ROWS) {
                const int i = v / PER_ROW, c = v % PER_ROW * VEC;
                V cs = *reinterpret_cast<const V *>(causal + i * EXT_ROWS + c);
                V as = *reinterpret_cast<const V *>(anti + i * EXT_ROWS + c);
                *reinterpret_cast<V *>(y0 + i * g.inner + c) = vec_add(cs, as);
            }
            return;
        }
        T *y = dst + base + k0 * g.inner;
        for (int i = half; i < len; i += 2)
            y[i * g.inner] = causal[i * EXT_ROWS + r] + anti[i * EXT_ROWS + r];
        return;
    }

    /* contiguous axis: rows are 32 consecutive segments of one line, whose
     * windows overlap into one span [k0 - R - 1, kend + R + 2), staged once;
     * row q's window starts q keep values into it, keep odd so that the 32
     * rows' reads fall in 32 banks. The kept values of the rows are one span
     * of the line too: [k0, kend). */
    T *causal = win + S, *anti = causal + So;
    const i64 groups = (g.segments + EXT_ROWS - 1) / EXT_ROWS, line = b / groups, seg0 = (b % groups) * EXT_ROWS;
    const i64 k0 = seg0 * g.keep, kend = (seg0 + EXT_ROWS) * g.keep < g.n ? (seg0 + EXT_ROWS) * g.keep : g.n;
    const i64 s0 = k0 - R - 1, s1 = kend + R + 2;
    const i64 a0 = s0 >= 0 ? s0 - s0 % VEC : s0 - ((s0 % VEC) + VEC) % VEC; /* rounded down to VEC */
    const T *x = src + line * g.n;
    const bool aligned = (line * g.n) % VEC == 0;
    for (i64 p = a0 + (i64)tid * VEC; p < s1; p += 2 * EXT_ROWS * VEC) {
        T *to = win + (p - a0);
        if (aligned && p >= 0 && p + VEC <= g.n) {
            cp_async16(to, x + p);
            continue;
        }
        for (int e = 0; e < VEC; e++)
            if (p + e >= s0 && p + e < s1)
                ext_stage(to + e, x, p + e, g, cval);
    }
    cp_wait_all();
    __syncthreads();
    const i64 kr = k0 + (i64)r * g.keep;
    const int len = kr < kend ? (int)((kend - kr) < g.keep ? kend - kr : g.keep) : 0;
    const T *row = win + (s0 - a0) + (i64)r * g.keep;
    if (len > 0) {
        if (half == 0)
            ext_causal<T, SC>(row, 1, causal + (i64)r * g.keep, 1, len, R, f);
        else
            ext_anticausal<T, SC>(row, 1, anti + (i64)r * g.keep, 1, len, R, f);
    }
    __syncthreads();
    T *y = dst + line * g.n + k0;
    const i64 total = kend - k0;
    if ((line * g.n + k0) % VEC == 0) {
        const i64 nvec = total / VEC;
        for (i64 v = tid; v < nvec; v += 2 * EXT_ROWS) {
            V cs = *reinterpret_cast<const V *>(causal + v * VEC);
            V as = *reinterpret_cast<const V *>(anti + v * VEC);
            *reinterpret_cast<V *>(y + v * VEC) = vec_add(cs, as);
        }
        for (i64 i = nvec * VEC + tid; i < total; i += 2 * EXT_ROWS)
            y[i] = causal[i] + anti[i];
    } else {
        for (i64 i = tid; i < total; i += 2 * EXT_ROWS)
            y[i] = causal[i] + anti[i];
    }
}

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
    if (i < g.lc)
        return __ldg(lo + (o * g.lc + i) * g.inner + j);
    if (i < g.lc + g.n)
        return __ldg(box + (o * g.n + i - g.lc) * g.inner + j);
    return __ldg(up + (o * g.uc + i - g.lc - g.n) * g.inner + j);
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

/* ---- host side ---- */

/* Compile-time window lengths, odd (so that k_tile's contiguous chunks are odd:
 * the staged windows are then read free of bank conflicts). */
static const int kW32[] = {31, 47, 63, 95, 127};
static const int kW64[] = {31, 47, 63};

struct Pass {
    int axis;
    int path; /* PATH_* */
    int W;
    Geo g;
    double alpha;
    unsigned threads;
    size_t smem;
    i64 grid;        /* blocks of the direct launch (slot blocks for k_gen) */
    i64 ntiles;      /* k_tile: tiles of the pass */
    i64 buf;         /* k_tile: elements of one of its two shared buffers */
    i64 dp_per;      /* dp: child blocks per parent thread */
    i64 dp_parents;  /* dp: parent threads */
    size_t scratch_bytes; /* PATH_GEN_GLOBAL: the windows' global scratch */
    bool extended;   /* k_extended instead of the rf schemes */
    ExtGeo eg;
    i64 batch;       /* extended: items per launch (rf: bounded by scratch) */
    bool ext_tile;   /* extended: k_ext_tile (ntiles blocks, smem bytes) */
    bool ext_strided;
    int ext_S, ext_So; /* k_ext_tile: row lengths of its buffers */
    bool ip;         /* may run in place (src == dst) */
    Runs runs;       /* k_tile in place: its runs and their edges */
    i64 ip_grid;     /* k_tile_ip: persistent blocks */
    size_t edge_bytes; /* k_tile in place: the runs' edges in scratch */
};

struct Plan {
    dk_cuda_device *dev;
    dk_gauss_setup setup;
    bool dp;
    int npass;
    Pass pass[DK_MAX_DIMS];
    void *tmp;     /* one field, only for passes that cannot run in place */
    void *scratch; /* k_gen's global windows, k_tile's edges in place */
    size_t work_bytes; /* device memory the plan holds (tmp and scratch) */
    void *aligned; /* one field, made for the first caller's memory that is not 16-byte aligned */
    size_t esize;
    /* execute_halo: its axis, k_halo_reg's window (0: none), k_halo_row's
     * or k_halo_gen's block and shared memory (gen: chunk length halo_L;
     * no block: k_halo_line) and k_halo_line's scratch for the halos */
    int halo_axis, halo_W;
    unsigned halo_threads;
    size_t halo_smem;
    i64 halo_L;
    void *halo_scratch;
};

i64 ceil_div(i64 a, i64 b) { return (a + b - 1) / b; }

/* A thread block of `threads` threads: JT adjacent lines (1 on the contiguous
 * axis) by KT items. */
void tile(Geo &g, unsigned threads)
{
    int jt = 1;
    if (g.inner > 1)
        while (jt < 32 && jt < g.inner)
            jt *= 2;
    g.JT = jt;
    g.KT = (int)threads / jt;
    g.nj = ceil_div(g.inner, g.JT);
    g.nk = ceil_div(g.ipl, g.KT);
    g.nblocks = g.nj * g.nk * g.outer;
}

/* A window length for the register schemes, from DAKIT_CUDA_WINDOW (tuning);
 * 0: the plan's choice. */
int forced_window(void)
{
    return (int)dk_tuning_long("DAKIT_CUDA_WINDOW", 0, 1, INT_MAX);
}

/* deriche and vyv through k_ext_tile, unless DAKIT_GAUSS_CUDA_EXTENDED=simple
 * (every axis) or =contiguous (the strided axes) asks for k_extended, or the
 * rows do not fit in shared memory. Segments of
 * `keep` values (DAKIT_GAUSS_CUDA_EXTENDED_KEEP, else as many as leave a
 * block's buffers within 48 KB, at least 64): the window is keep + 2 reach +
 * 3 values, so a longer segment reads less twice but fits fewer blocks. */
bool plan_ext_tile(Plan *p, Pass *ps, i64 lines)
{
    const dk_gauss_setup *s = &p->setup;
    const char *kernel = dk_tuning_string("DAKIT_GAUSS_CUDA_EXTENDED");
    ExtGeo &g = ps->eg;
    if ((kernel && strcmp(kernel, "simple") == 0) || s->desc.method == DK_GAUSS_RF)
        return false;
    if (kernel && strcmp(kernel, "contiguous") == 0 && g.inner > 1)
        return false; /* tiled on the contiguous axis only */
    const i64 R = g.reach, esize = (i64)p->esize;
    if (R > INT_MAX / 4 || g.n < 1)
        return false;
    /* segments of `keep` values: the block's buffers within 55 KB, so that
     * four blocks fit an SM's 228 KB; longer segments read less twice, and
     * beyond 128 measured no faster on an H100 (docs/gauss.md). Strided
     * axis: per row a window (keep + 2 R + 3) and two sums (2 keep);
     * contiguous axis: the 32 rows' windows are one span (32 keep + 2 R +
     * 3), and keep is odd */
    const i64 values = ((55 << 10) - 1024) / esize, vec = 16 / esize;
    const bool strided = g.inner > 1;
    i64 most = strided ? (values / EXT_ROWS - 2 * R - 3) / 3 : (values - 2 * R - 3 - 3 * vec) / (3 * EXT_ROWS);
    i64 keep = dk_tuning_long("DAKIT_GAUSS_CUDA_EXTENDED_KEEP", 0, 1, 1 << 20);
    if (keep == 0)
        keep = most > 128 ? 128 : most < 64 ? 64 : most;
    else
        most = keep;
    if (keep > g.n)
        keep = g.n;
    i64 segments = ceil_div(g.n, keep);
    if (!strided && segments > EXT_ROWS && segments % EXT_ROWS && ceil_div(g.n, segments / EXT_ROWS * EXT_ROWS) < most)
        segments = segments / EXT_ROWS * EXT_ROWS; /* whole blocks of 32 rows */
    keep = ceil_div(g.n, segments); /* even segments */
    if (!strided)
        keep |= 1; /* odd: the rows' reads fall in 32 banks (k_ext_tile) */
    segments = ceil_div(g.n, keep);
    const i64 W = keep + 2 * R + 3;
    i64 S, So, smem;
    if (strided) {
        S = W;
        So = keep;
        smem = (i64)EXT_ROWS * (W + 2 * keep) * esize; /* window, causal and anti-causal sums */
    } else {
        /* the span of 32 rows' windows (rounded down to 16 bytes at its
         * start), and the two sums of their kept values */
        S = ceil_div((i64)EXT_ROWS * keep + 2 * R + 3 + vec, vec) * vec;
        So = ceil_div((i64)EXT_ROWS * keep, vec) * vec;
        smem = (S + 2 * So) * esize;
    }
    /* past 96 KB a block runs alone on its SM: k_extended, unless asked */
    const i64 cap = dk_tuning_string("DAKIT_GAUSS_CUDA_EXTENDED_KEEP") ? (i64)p->dev->smem_optin : (i64)96 << 10;
    if (smem > cap || smem > (i64)p->dev->smem_optin || S > INT_MAX || So > INT_MAX)
        return false;
    g.keep = keep;
    g.segments = segments;
    g.items = lines * segments;
    ps->ext_tile = true;
    ps->ext_strided = g.inner > 1;
    ps->ext_S = (int)S;
    ps->ext_So = (int)So;
    ps->smem = (size_t)smem;
    ps->ntiles = ps->ext_strided ? ceil_div(lines, EXT_ROWS) * segments : lines * ceil_div(segments, EXT_ROWS);
    ps->batch = g.items;
    return true;
}

/* An extended axis: segments of `keep` values, several per line only when
 * the lines are too few to fill the GPU, each at least four reaches long. */
void plan_extended(Plan *p, int axis, Pass *ps)
{
    const dk_gauss_setup *s = &p->setup;
    dk_axis_view v = dk_axis_view_of(&s->desc, axis);
    memset(ps, 0, sizeof *ps);
    ps->axis = axis;
    ps->alpha = s->alpha[axis];
    ps->extended = true;
    i64 lines = (i64)(v.outer * v.inner), reach = (i64)s->reach[axis];
    i64 wanted = (i64)p->dev->sm_count * 2048;
    i64 shortest = 4 * reach > 64 ? 4 * reach : 64;
    i64 segments = lines >= wanted ? 1 : ceil_div(wanted, lines);
    if (segments > (i64)v.n / shortest)
        segments = (i64)v.n / shortest;
    if (segments < 1)
        segments = 1;
    ExtGeo &g = ps->eg;
    g.n = (i64)v.n;
    g.inner = (i64)v.inner;
    g.keep = ceil_div(g.n, segments);
    g.segments = ceil_div(g.n, g.keep); /* every segment holds values: none starts past the end */
    g.reach = reach;
    g.items = lines * g.segments;
    g.boundary = (int)s->desc.boundary;
    ps->batch = g.items;
    if (plan_ext_tile(p, ps, lines))
        return;
    if (s->desc.method == DK_GAUSS_RF) {
        i64 window = g.keep + 2 * reach;
        i64 budget = (i64)(s->count * p->esize) > ((i64)64 << 20) ? (i64)(s->count * p->esize) : ((i64)64 << 20);
        i64 fit = budget / (window * (i64)p->esize);
        if (fit < 1)
            fit = 1;
        if (ps->batch > fit)
            ps->batch = fit;
        ps->scratch_bytes = (size_t)(ps->batch * window) * p->esize;
    }
}

dk_status plan_pass(Plan *p, int axis, Pass *ps, dk_msg *msg)
{
    const dk_gauss_desc *d = &p->setup.desc;
    const bool f32 = d->dtype == DK_F32;
    const int *Ws = f32 ? kW32 : kW64;
    const int nW = f32 ? (int)(sizeof kW32 / sizeof *kW32) : (int)(sizeof kW64 / sizeof *kW64);
    /* windows of varying length (predicated loops) need more registers: the
     * longest such W that compiles without spilling */
    const int Wpred = f32 ? 95 : 47;
    dk_axis_view v = dk_axis_view_of(d, axis);
    memset(ps, 0, sizeof *ps);
    ps->axis = axis;
    ps->alpha = p->setup.alpha[axis];
    Geo &g = ps->g;
    g.n = (i64)v.n;
    g.inner = (i64)v.inner;
    g.outer = (i64)v.outer;
    const i64 n = g.n;
    i64 items_total;
    i64 maxwin; /* generic path: the longest window */
    int forced = forced_window();

    if (d->mode == DK_GAUSS_OVERLAP) {
        i64 blocks = (i64)dk_gauss_line_blocks(v.n, d->blocks);
        i64 m = (i64)d->overlap;
        g.mode = GEO_BLOCKS;
        g.blocks = blocks;
        g.m = m;
        g.ipl = blocks;
        i64 longest = n / blocks + (n % blocks ? 1 : 0) + 2 * m;
        maxwin = longest < n ? longest : n;
        ps->path = PATH_GEN_SMEM;
        for (int i = 0; i < nW && Ws[i] <= Wpred; i++)
            if (Ws[i] >= maxwin) {
                ps->path = PATH_REG;
                ps->W = Ws[i];
                break;
            }
    } else {
        i64 h = (i64)p->setup.halo[axis];
        g.h = h;
        /* chunked in registers: the smallest W whose overhead W/L is at most
         * 1.85, else the lowest overhead up to 3 (a longer W lowers the
         * overhead but costs registers) */
        int best = 0;
        for (int i = 0; i < nW; i++) {
            i64 L = Ws[i] - 2 * h;
            if (L < 1 || Ws[i] > n)
                continue;
            if (forced) {
                if (Ws[i] == forced)
                    best = Ws[i];
                continue;
            }
            double r = (double)Ws[i] / (double)L;
            if (r <= 1.85) {
                best = Ws[i];
                break;
            }
            if (r <= 3.0 && (!best || r < (double)best / (double)(best - 2 * h)))
                best = Ws[i];
        }
        if (n <= Wpred && (!best || n < best)) {
            /* the whole line is one window: the reference itself */
            g.mode = GEO_BLOCKS;
            g.blocks = 1;
            g.m = 0;
            g.ipl = 1;
            ps->path = PATH_REG;
            for (int i = 0; i < nW; i++)
                if (Ws[i] >= n) {
                    ps->W = Ws[i];
                    break;
                }
            maxwin = n;
        } else if (best) {
            g.mode = GEO_CHUNK;
            g.L = best - 2 * h;
            g.ipl = ceil_div(n, g.L);
            ps->W = best;
            ps->path = g.inner == 1 ? PATH_ROW : g.inner % 32 == 0 ? PATH_TILE : PATH_REG_FULL;
            maxwin = best;
        } else {
            g.mode = GEO_CLIP;
            g.L = 2 * h > 64 ? 2 * h : 64;
            g.ipl = ceil_div(n, g.L);
            i64 longest = g.L + 2 * h;
            maxwin = longest < n ? longest : n;
            ps->path = PATH_GEN_SMEM;
        }
    }

    items_total = g.inner * g.ipl * g.outer;
    const i64 fill = (i64)p->dev->sm_count * 256;
    unsigned threads = items_total >= fill ? 128 : (items_total >= fill / 4 ? 64 : 32);
    if (ps->path == PATH_ROW || ps->path == PATH_TILE)
        threads = 128;
    if (ps->path == PATH_GEN_SMEM) {
        /* shrink the block until its windows fit in shared memory */
        while (threads > 32 && threads * maxwin * p->esize > p->dev->smem_optin)
            threads /= 2;
        if (threads * maxwin * p->esize > p->dev->smem_optin)
            ps->path = PATH_GEN_GLOBAL;
    }
    ps->threads = threads;
    tile(g, threads);
    ps->grid = g.nblocks;

    if (ps->path == PATH_ROW) {
        const i64 VEC = 16 / (i64)p->esize;
        ps->ntiles = ceil_div(g.outer * g.ipl, threads);
        ps->buf = ceil_div((i64)threads * g.L + 2 * g.L + 4 * g.h + VEC, VEC) * VEC;
        ps->smem = 2 * (size_t)ps->buf * p->esize;
        ps->grid = ps->ntiles; /* prepare_pass lowers it to the resident blocks */
    } else if (ps->path == PATH_TILE) {
        ps->ntiles = g.nblocks;
        ps->buf = ((i64)(g.KT - 1) * g.L + ps->W) * 32;
        ps->smem = 2 * (size_t)ps->buf * p->esize;
        ps->grid = ps->ntiles;
    } else if (ps->path == PATH_GEN_SMEM) {
        ps->smem = (size_t)threads * (size_t)maxwin * p->esize;
    } else if (ps->path == PATH_GEN_GLOBAL) {
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
    if (ps->smem > p->dev->smem_optin && ps->path != PATH_GEN_GLOBAL) {
        dk_msg_set(msg, "cuda gauss: a block needs %zu bytes of shared memory, the device has %zu",
                   ps->smem, p->dev->smem_optin);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    /* dp: parents in blocks of 32 threads, each launching a slice of the blocks */
    const i64 units = ps->ntiles ? ps->ntiles : ps->grid;
    i64 slices = 2 * (i64)p->dev->sm_count;
    if (slices > units)
        slices = units;
    ps->dp_per = ceil_div(units, slices);
    ps->dp_parents = ceil_div(units, ps->dp_per);
    return DK_OK;
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

/* ---- launching one pass: the template instance for (T, path, W) ---- */

template <typename T> struct Launch {
    const Pass &ps;
    const T *src;
    T *dst;
    T *scratch;
    Coef<T> c;
    cudaStream_t st;
    bool dp;

    unsigned parent_grid() const { return (unsigned)ceil_div(ps.dp_parents, 32); }

    template <int W, bool FULL> void reg() const
    {
        if (dp)
            p_reg<T, W, FULL><<<parent_grid(), 32, 0, st>>>(src, dst, ps.g, c, ps.grid, ps.dp_per,
                                                             ps.threads);
        else
            k_reg<T, W, FULL><<<(unsigned)ps.grid, ps.threads, 0, st>>>(src, dst, ps.g, c, 0);
    }
    template <int W, bool STRIDED> void tile() const
    {
        if (src == dst) { /* in place: the runs' edges first, then the runs */
            const Runs &r = ps.runs;
            k_edges<T, W, STRIDED><<<(unsigned)ceil_div(r.nruns, 4), 128, 0, st>>>(
                src, scratch, ps.g, r, ps.threads, 0);
            if (dp)
                p_tile_ip<T, W, STRIDED><<<parent_grid(), 32, 0, st>>>( /* nruns == ntiles */
                    dst, scratch, ps.g, c, r, ps.dp_per, ps.threads, (unsigned)ps.smem, ps.buf);
            else
                k_tile_ip<T, W, STRIDED><<<(unsigned)ps.ip_grid, ps.threads, ps.smem, st>>>(
                    dst, scratch, ps.g, c, r, 0, r.nruns, ps.buf);
            return;
        }
        if (dp)
            p_tile<T, W, STRIDED><<<parent_grid(), 32, 0, st>>>(
                src, dst, ps.g, c, ps.ntiles, ps.dp_per, ps.threads, (unsigned)ps.smem, ps.buf);
        else
            k_tile<T, W, STRIDED><<<(unsigned)ps.grid, ps.threads, ps.smem, st>>>(
                src, dst, ps.g, c, 0, ps.ntiles, ps.buf);
    }
    template <bool SMEM> void gen() const
    {
        unsigned smem = SMEM ? (unsigned)ps.smem : 0;
        if (dp)
            p_gen<T, SMEM><<<parent_grid(), 32, 0, st>>>(src, dst, ps.g, c, scratch, ps.grid,
                                                          ps.dp_per, ps.threads, smem);
        else
            k_gen<T, SMEM><<<(unsigned)ps.grid, ps.threads, smem, st>>>(src, dst, ps.g, c,
                                                                        scratch, ps.grid, 0);
    }
};

/* Raises a kernel's dynamic shared-memory limit where it needs more than the
 * default 48 KB. */
template <typename F> cudaError_t allow_smem(F *kernel, size_t bytes)
{
    if (bytes <= 48 * 1024)
        return cudaSuccess;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

#define DK_W_CASES(X)                                                                          \
    X(31) X(47) X(63) X(95) X(127)

template <typename T> constexpr bool w_built(int W)
{
    return sizeof(T) == 4 ? true : W <= 63;
}

/* k_tile: raises the shared-memory limit and sizes the persistent grid to
 * the blocks that fit on the device at once. */
template <typename T, int W, bool STRIDED> dk_status prepare_tile(Pass &ps, int sm_count, bool dp, dk_msg *msg)
{
    auto kernel = k_tile<T, W, STRIDED>;
    auto kernel_ip = k_tile_ip<T, W, STRIDED>;
    const char *what = "setting a kernel's shared-memory limit";
    CUDA_TRY(allow_smem(kernel, ps.smem), what);
    CUDA_TRY(allow_smem(kernel_ip, ps.smem), what);
    int per_sm = 0, per_sm_ip = 0;
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, (int)ps.threads, ps.smem),
             what);
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_ip, kernel_ip, (int)ps.threads,
                                                           ps.smem),
             what);
    if (per_sm < 1 || per_sm_ip < 1)
        return dk_cuda_fail(msg, cudaErrorInvalidConfiguration, what);
    i64 resident = (i64)per_sm * sm_count;
    ps.grid = ps.ntiles < resident ? ps.ntiles : resident;
    plan_runs(ps, (i64)sizeof(T), (i64)per_sm_ip * sm_count, dp);
    ps.ip_grid = ps.runs.nruns < (i64)per_sm_ip * sm_count ? ps.runs.nruns : (i64)per_sm_ip * sm_count;
    return DK_OK;
}

/* Prepares the pass's kernel: its shared-memory limit and, for k_tile, its
 * persistent grid. */
template <typename T> dk_status prepare_pass(Pass &ps, int sm_count, bool dp, dk_msg *msg)
{
    switch (ps.path) {
    case PATH_ROW:
    case PATH_TILE:
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
    case PATH_GEN_SMEM:
        CUDA_TRY(allow_smem(k_gen<T, true>, ps.smem), "setting a kernel's shared-memory limit");
        return DK_OK;
    default:
        return DK_OK;
    }
}

/* k_ext_tile: raises its shared-memory limit. */
template <typename T> dk_status prepare_ext_tile(const Pass &ps, dk_msg *msg)
{
    /* always: its static shared memory counts against the limit too */
    const char *what = "setting a kernel's shared-memory limit";
    const cudaFuncAttribute a = cudaFuncAttributeMaxDynamicSharedMemorySize;
    const void *kernels[2][DK_GAUSS_MAX_SECTIONS] = {
        {(const void *)k_ext_tile<T, false, 1>, (const void *)k_ext_tile<T, false, 2>,
         (const void *)k_ext_tile<T, false, 3>},
        {(const void *)k_ext_tile<T, true, 1>, (const void *)k_ext_tile<T, true, 2>,
         (const void *)k_ext_tile<T, true, 3>}};
    for (int k = 0; k < DK_GAUSS_MAX_SECTIONS; k++)
        CUDA_TRY(cudaFuncSetAttribute(kernels[ps.ext_strided][k], a, (int)ps.smem), what);
    return DK_OK;
}

static_assert(DK_GAUSS_MAX_SECTIONS == 3, "launch_ext_tile instantiates 1 to 3 sections");
/* k_ext_tile for the sections' count, 1 to DK_GAUSS_MAX_SECTIONS. */
template <typename T, bool STRIDED>
void launch_ext_tile(int sections, unsigned blocks, size_t smem, cudaStream_t stream, const T *src, T *dst,
                     const ExtGeo &g, const Iir<T> &f, T cval, int S, int So, i64 b0)
{
    if (sections == 1)
        k_ext_tile<T, STRIDED, 1><<<blocks, 2 * EXT_ROWS, smem, stream>>>(src, dst, g, f, cval, S, So, b0);
    else if (sections == 2)
        k_ext_tile<T, STRIDED, 2><<<blocks, 2 * EXT_ROWS, smem, stream>>>(src, dst, g, f, cval, S, So, b0);
    else
        k_ext_tile<T, STRIDED, 3><<<blocks, 2 * EXT_ROWS, smem, stream>>>(src, dst, g, f, cval, S, So, b0);
}

template <typename T> cudaError_t launch_pass(const Launch<T> &l)
{
    const Pass &ps = l.ps;
    switch (ps.path) {
    case PATH_REG:
    case PATH_REG_FULL:
        switch (ps.W) {
#define X(W)                                                                                   \
    case W:                                                                                    \
        if (!w_built<T>(W))                                                                    \
            return cudaErrorInvalidValue;                                                      \
        if (ps.path == PATH_REG_FULL)                                                          \
            l.template reg<(w_built<T>(W) ? W : 31), true>();                                 \
        else                                                                                   \
            l.template reg<(w_built<T>(W) ? W : 31), false>();                                \
        break;
            DK_W_CASES(X)
#undef X
        default:
            return cudaErrorInvalidValue;
        }
        break;
    case PATH_ROW:
    case PATH_TILE:
        switch (ps.W) {
#define X(W)                                                                                   \
    case W:                                                                                    \
        if (!w_built<T>(W))                                                                    \
            return cudaErrorInvalidValue;                                                      \
        if (ps.path == PATH_TILE)                                                              \
            l.template tile<(w_built<T>(W) ? W : 31), true>();                                \
        else                                                                                   \
            l.template tile<(w_built<T>(W) ? W : 31), false>();                               \
        break;
            DK_W_CASES(X)
#undef X
        default:
            return cudaErrorInvalidValue;
        }
        break;
    case PATH_GEN_SMEM:
        l.template gen<true>();
        break;
    default:
        l.template gen<false>();
        break;
    }
    return cudaGetLastError();
}

const char *const cuda_variants[] = {"fast", "dp", NULL};

void plan_free(Plan *p)
{
    if (!p)
        return;
    if (cudaSetDevice(p->dev->ordinal) == cudaSuccess) {
        if (p->tmp)
            cudaFree(p->tmp);
        if (p->scratch)
            cudaFree(p->scratch);
        if (p->aligned)
            cudaFree(p->aligned);
        if (p->halo_scratch)
            cudaFree(p->halo_scratch);
    }
    (void)cudaGetLastError();
    free(p);
}

/* execute_halo: windows of W in registers where the exact halo is shorter
 * than the box (setup.halo is then not clipped) and a compiled W keeps the
 * overhead W / (W - 2h) at most 3 (the least), else whole lines. */
dk_status plan_halo(Plan *p, dk_msg *msg)
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
    if (p->halo_W && dk_axis_view_of(d, a).inner == 1) {
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

dk_status cuda_gauss_plan_create(void *device, const dk_gauss_setup *setup, void **plan,
                                 dk_msg *msg)
{
    dk_cuda_device *dev = (dk_cuda_device *)device;
    dk_status st = dk_cuda_enter(dev, msg);
    if (st != DK_OK)
        return st;
    Plan *p = (Plan *)calloc(1, sizeof *p);
    if (!p) {
        dk_msg_set(msg, "cuda gauss: cannot allocate the plan");
        return DK_ERR_OUT_OF_MEMORY;
    }
    p->dev = dev;
    p->setup = *setup;
    p->setup.desc.variant = NULL; /* the caller's string need not outlive the plan */
    p->dp = setup->desc.variant && strcmp(setup->desc.variant, "dp") == 0;
    p->esize = setup->desc.dtype == DK_F32 ? sizeof(float) : sizeof(double);
    const dk_gauss_desc *d = &setup->desc;
    size_t scratch_bytes = 0;
    bool need_tmp = false;
    for (int a = 0; a < d->ndim; a++) {
        if (!(d->axes & (1u << a)))
            continue;
        Pass *ps = &p->pass[p->npass];
        if (setup->extended[a]) {
            plan_extended(p, a, ps);
            if (ps->ext_tile) {
                st = d->dtype == DK_F32 ? prepare_ext_tile<float>(*ps, msg)
                                        : prepare_ext_tile<double>(*ps, msg);
                if (st != DK_OK)
                    goto fail;
            }
            if (ps->scratch_bytes > scratch_bytes)
                scratch_bytes = ps->scratch_bytes;
            /* a whole line a thread, read before it is written */
            ps->ip = ps->eg.segments == 1 && (ps->ext_tile || d->method == DK_GAUSS_RF);
            need_tmp = need_tmp || !ps->ip;
            p->npass++;
            continue;
        }
        st = plan_pass(p, a, ps, msg);
        if (st != DK_OK)
            goto fail;
        st = d->dtype == DK_F32 ? prepare_pass<float>(*ps, dev->sm_count, p->dp, msg)
                                : prepare_pass<double>(*ps, dev->sm_count, p->dp, msg);
        if (st != DK_OK)
            goto fail;
        /* k_tile through k_edges and k_tile_ip; k_reg and k_gen when a
         * thread's window is its whole line */
        ps->ip = ps->path == PATH_ROW || ps->path == PATH_TILE ||
                 (ps->g.mode == GEO_BLOCKS && ps->g.blocks == 1);
        need_tmp = need_tmp || !ps->ip;
        if (ps->scratch_bytes > scratch_bytes)
            scratch_bytes = ps->scratch_bytes; /* one scratch serves every pass */
        if (ps->edge_bytes > scratch_bytes)
            scratch_bytes = ps->edge_bytes;
        p->npass++;
    }
    /* a plan made for execute_halo (libdakit-mpi's split axes) runs only its
     * own kernels: no work buffer of the box's size and no window scratch
     * beside the caller's box, which may fill most of the device */
    for (int a = 0; a < d->ndim; a++)
        if (setup->halo_max[a])
            need_tmp = false, scratch_bytes = 0;
    if (need_tmp && setup->count > 0 && dk_cuda_failed(cudaMalloc(&p->tmp, setup->count * p->esize))) {
        p->tmp = NULL;
        dk_msg_set(msg, "cuda gauss: cannot allocate the plan's %zu-byte work buffer",
                   setup->count * p->esize);
        st = DK_ERR_OUT_OF_MEMORY;
        goto fail;
    }
    if (scratch_bytes > 0 && dk_cuda_failed(cudaMalloc(&p->scratch, scratch_bytes))) {
        p->scratch = NULL;
        dk_msg_set(msg, "cuda gauss: cannot allocate the plan's %zu-byte window scratch",
                   scratch_bytes);
        st = DK_ERR_OUT_OF_MEMORY;
        goto fail;
    }
    p->work_bytes = (p->tmp ? setup->count * p->esize : 0) + scratch_bytes;
    if ((st = plan_halo(p, msg)) != DK_OK)
        goto fail;
    *plan = p;
    return DK_OK;
fail:
    plan_free(p);
    return st;
}

/* An extended pass from src into dst (the same only where the pass may run in place), in batches. */
template <typename T>
cudaError_t launch_extended(const Plan *p, const Pass &ps, const T *src, T *dst, const Coef<T> &c,
                            cudaStream_t stream)
{
    const dk_gauss_iir &iir = p->setup.iir[ps.axis];
    Iir<T> f;
    memset(&f, 0, sizeof f);
    f.count = iir.count;
    for (int k = 0; k < iir.count; k++) {
        f.b0[k] = (T)iir.b0[k], f.b1[k] = (T)iir.b1[k];
        f.a1[k] = (T)iir.a1[k], f.a2[k] = (T)iir.a2[k];
        f.c1[k] = (T)iir.c1[k], f.c2[k] = (T)iir.c2[k];
    }
    int rf = p->setup.desc.method == DK_GAUSS_RF;
    T cval = (T)p->setup.desc.cval;
    if (ps.ext_tile) {
        const i64 most = (i64)1 << 30; /* blocks of one launch */
        for (i64 b0 = 0; b0 < ps.ntiles; b0 += most) {
            unsigned blocks = (unsigned)(ps.ntiles - b0 < most ? ps.ntiles - b0 : most);
            if (ps.ext_strided)
                launch_ext_tile<T, true>(f.count, blocks, ps.smem, stream, src, dst, ps.eg, f, cval, ps.ext_S,
                                         ps.ext_So, b0);
            else
                launch_ext_tile<T, false>(f.count, blocks, ps.smem, stream, src, dst, ps.eg, f, cval, ps.ext_S,
                                          ps.ext_So, b0);
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess)
                return e;
        }
        return cudaSuccess;
    }
    const unsigned threads = 128;
    for (i64 first = 0; first < ps.eg.items; first += ps.batch) {
        i64 count = ps.eg.items - first < ps.batch ? ps.eg.items - first : ps.batch;
        k_extended<T><<<(unsigned)ceil_div(count, threads), threads, 0, stream>>>(
            src, dst, (T *)p->scratch, ps.eg, f, c, rf, cval, first, count);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

template <typename T>
dk_status execute_t(Plan *p, const T *in, T *out, dk_msg *msg)
{
    cudaStream_t stream = p->dev->stream;
    T *tmp = (T *)p->tmp; /* NULL when every pass can run in place */
    const int P = p->npass;
    const size_t bytes = p->setup.count * sizeof(T);
    const char *what = p->dp ? "the gauss kernels (dp)" : "the gauss kernels";
    if (P == 0) {
        if (in != out)
            CUDA_TRY(cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, stream), what);
    } else {
        /* Each pass goes to out when an even number of the passes after it
         * cannot run in place, else to tmp: a pass that can run in place
         * stays where the field is or moves it; one that cannot moves it to
         * the other buffer. Only when no pass can run in place, in == out
         * and P is odd does the field end in tmp and a copy end the call. */
        int stuck_after = 0;
        for (int i = 0; i < P; i++)
            stuck_after += !p->pass[i].ip;
        const T *src = in;
        for (int i = 0; i < P; i++) {
            const Pass &ps = p->pass[i];
            stuck_after -= !ps.ip;
            T *dst = stuck_after % 2 == 0 ? out : tmp;
            if (!ps.ip && dst == src)
                dst = dst == out ? tmp : out;
            const dk_gauss_desc *d = &p->setup.desc;
            Coef<T> c;
            c.alpha = (T)ps.alpha;
            c.beta = (T)1 - c.alpha;
            c.opa = (T)1 + c.alpha;
            c.K = d->K;
            c.constant = d->boundary == DK_BOUNDARY_CONSTANT;
            if (ps.extended) {
                CUDA_TRY(launch_extended<T>(p, ps, src, dst, c, stream), what);
                src = dst;
                continue;
            }
            Launch<T> l{ps, src, dst, (T *)p->scratch, c, stream, p->dp};
            CUDA_TRY(launch_pass<T>(l), what);
            src = dst;
        }
        if (src != out)
            CUDA_TRY(cudaMemcpyAsync(out, src, bytes, cudaMemcpyDeviceToDevice, stream), what);
    }
    return dk_cuda_finish(p->dev, what, msg);
}

dk_status cuda_gauss_execute(void *plan, const void *in, void *out, dk_msg *msg)
{
    Plan *p = (Plan *)plan;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    const dk_cuda_buffer *bi = (const dk_cuda_buffer *)in;
    dk_cuda_buffer *bo = (dk_cuda_buffer *)out;
    size_t need = p->setup.count * p->esize;
    if (!bi || !bo || bi->bytes < need || bo->bytes < need) {
        dk_msg_set(msg, "cuda gauss: the buffers must hold %zu bytes", need);
        return DK_ERR_INVALID_ARGUMENT;
    }
    if (p->halo_axis >= 0) { /* its work buffers were never made */
        dk_msg_set(msg, "cuda gauss: this plan was made for execute_halo only");
        return DK_ERR_INVALID_ARGUMENT;
    }
    if (need == 0)
        return DK_OK;
    const void *src = bi->ptr;
    void *dst = bo->ptr;
    /* the kernels move 16 bytes at a time: memory the caller wrapped at
     * another alignment (an OpenACC data region packs its arrays at their
     * element size) is filtered in an aligned copy */
    bool misaligned = ((uintptr_t)src | (uintptr_t)dst) % 16 != 0;
    if (misaligned) {
        if (!p->aligned && dk_cuda_failed(cudaMalloc(&p->aligned, need))) {
            p->aligned = NULL;
            dk_msg_set(msg, "cuda gauss: out of device memory for an aligned copy of the field (%zu bytes): the "
                            "buffers are not 16-byte aligned", need);
            return DK_ERR_OUT_OF_MEMORY;
        }
        CUDA_TRY(cudaMemcpyAsync(p->aligned, src, need, cudaMemcpyDeviceToDevice, p->dev->stream),
                 "copying the field to aligned memory");
        src = dst = p->aligned;
    }
    st = p->setup.desc.dtype == DK_F32 ? execute_t<float>(p, (const float *)src, (float *)dst, msg)
                                       : execute_t<double>(p, (const double *)src, (double *)dst, msg);
    if (st != DK_OK || !misaligned)
        return st;
    CUDA_TRY(cudaMemcpyAsync(bo->ptr, p->aligned, need, cudaMemcpyDeviceToDevice, p->dev->stream),
             "copying the field from aligned memory");
    return dk_cuda_finish(p->dev, "the gauss kernels", msg);
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

dk_status cuda_gauss_execute_halo(void *plan, const dk_gauss_halo *hl, const void *in, void *out, dk_msg *msg)
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

void cuda_gauss_plan_destroy(void *plan)
{
    plan_free((Plan *)plan);
}

} /* namespace */

const dk_gauss_ops dk_cuda_gauss_ops = {
    .variants = cuda_variants,
    .plan_create = cuda_gauss_plan_create,
    .execute = cuda_gauss_execute,
    .plan_destroy = cuda_gauss_plan_destroy,
    .execute_halo = cuda_gauss_execute_halo,
};
