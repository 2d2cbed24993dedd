/* dakit cuda plugin, gbees: the phases of one step (grow, link, flux,
 * apply, prune) as device functions over strided work items, which the
 * cooperative kernel (coop.cu) and the phase kernels (steps.cu) run. */
#ifndef DAKIT_CUDA_GBEES_PHASES_CUH
#define DAKIT_CUDA_GBEES_PHASES_CUH

#include "gbees.cuh"

namespace dk_cuda_gbees {

/* ---- the phases ----
 * Work items, strided over the grid from i0: growth and fluxes take one
 * (cell, axis) pair each and linking one face each, so that a thread's
 * chain of dependent loads is one axis long, not d; apply and pruning take
 * whole cells. */

/* Candidate b of a growth item: the face neighbour of key k along axis i
 * (b == D), or the edge neighbour across i and b. */
template <int D>
__device__ __forceinline__ void candidate(const int32_t *k, int i, int si, unsigned up, int b, int32_t *kc)
{
#pragma unroll
    for (int q = 0; q < D; q++)
        kc[q] = k[q] + (q == i ? (si ? 1 : -1) : 0) + (q == b ? ((up >> b) & 1 ? 1 : -1) : 0);
}

/* Growth's decisions for item w = (cell c, axis i) (gb_grow's for that
 * axis): returns the candidates to insert (bit D: the face neighbour; bit
 * j: the edge neighbour across i and j), with the cell's key, the axis,
 * its side and the edge sides. done[c, i] is set once every candidate of
 * the item exists (or its face velocity is zero): velocities never change
 * and cells stay until pruning, which clears the marks, so a marked item
 * above the threshold is skipped after two independent loads. EAGER (the
 * coop kernel, latency-bound) also loads the velocities and both face
 * links before the threshold test, so that an item's chain is two loads
 * deep before it inserts. */
template <class M, int D, bool EAGER>
__device__ __forceinline__ unsigned grow_check(const Dev &g, const Step &s, long long w, int32_t *k, int *axis,
                                               int *side, unsigned *ups)
{
    const Cells C = g.c[0];
    const long long c = w / D;
    const int i = (int)(w - c * D);
    double v[D];
    int32_t back = -1, fwd = -1;
    if (EAGER) {
#pragma unroll
        for (int q = 0; q < D; q++)
            v[q] = C.v[c * D + q];
        back = C.nb[c * 2 * D + 2 * i];
        fwd = C.nb[c * 2 * D + 2 * i + 1];
    }
    if (C.p[c] * s.scale < g.thr || g.done[w])
        return 0;
    if (!EAGER) {
#pragma unroll
        for (int q = 0; q < D; q++)
            v[q] = C.v[c * D + q];
    }
    double vi = 0.0; /* v[i] by selection: indexing would put v on the stack */
#pragma unroll
    for (int q = 0; q < D; q++)
        vi = q == i ? v[q] : vi;
    if (vi == 0.0) {
        g.done[w] = 1;
        return 0;
    }
    const int si = vi > 0.0;
    const int32_t face = EAGER ? (si ? fwd : back) : C.nb[c * 2 * D + 2 * i + si];
    /* loaded with the face's links, before it is known to be needed */
#pragma unroll
    for (int q = 0; q < D; q++)
        k[q] = C.key[c * D + q];
    int32_t fnb[2 * D];
#pragma unroll
    for (int q = 0; q < 2 * D; q++)
        fnb[q] = face >= 0 ? C.nb[(size_t)face * 2 * D + q] : -1;
    unsigned want = face < 0 ? 1u << D : 0u, up = 0;
#pragma unroll
    for (int j = 0; j < D; j++) {
        if (j == i || v[j] == 0.0)
            continue;
        const int sj = v[j] > 0.0;
        up |= (unsigned)sj << j;
        if (face >= 0 && (sj ? fnb[2 * j + 1] : fnb[2 * j]) >= 0)
            continue;
        want |= 1u << j;
    }
    /* marked now: what is wanted exists after this step's barrier (on
     * overflow the host clears every mark) */
    g.done[w] = 1;
    *axis = i;
    *side = si;
    *ups = up;
    return want;
}

/* The r-th candidate of want (the face first, then the edges by axis). */
template <int D> __device__ __forceinline__ int nth_candidate(unsigned want, unsigned r)
{
    if ((want >> D) & 1) {
        if (r == 0)
            return D;
        r--;
        want &= ~(1u << D);
    }
    while (r--)
        want &= want - 1;
    return __ffs(want) - 1;
}

/* Growth. EAGER (the coop kernel): the insertions of a warp's items are
 * spread over its lanes, one candidate each, so that no thread walks
 * several insertions' chains of atomics while the others wait at the
 * barrier. Otherwise each thread inserts its item's candidates in turn,
 * each on its own, which holds fewer registers than inserting them
 * together (one counter bump and one fence for all). */
template <class M, int D, bool EAGER>
__device__ void grow_phase(const Dev &g, const Step &s, long long i0, long long stride)
{
    const Cells C = g.c[0];
    unsigned long long *table = g.table, *maxbits = &g.st->maxbits[s.cur];
    const long long items = (long long)s.n_old * D;
    if (!EAGER) {
        for (long long w = i0; w < items; w += stride) {
            int32_t k[D];
            int i = 0, si = 0;
            unsigned up = 0;
            unsigned want = grow_check<M, D, EAGER>(g, s, w, k, &i, &si, &up);
            while (want) {
                const int b = (want >> D) & 1 ? D : __ffs(want) - 1;
                want &= ~(1u << b);
                int32_t kc[D];
                candidate<D>(k, i, si, up, b, kc);
                insert_new<M, D>(g, C, table, maxbits, kc);
            }
        }
        return;
    }
    const int lane = threadIdx.x & 31;
    /* whole warps walk the items together (blockDim is a multiple of 32) */
    for (long long w = i0; __any_sync(0xffffffffu, w < items); w += stride) {
        int32_t k[D];
#pragma unroll
        for (int q = 0; q < D; q++)
            k[q] = 0;
        int i = 0, si = 0;
        unsigned up = 0, want = 0;
        if (w < items)
            want = grow_check<M, D, EAGER>(g, s, w, k, &i, &si, &up);
        const unsigned cnt = __popc(want);
        unsigned incl = cnt;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const unsigned y = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o)
                incl += y;
        }
        const unsigned total = __shfl_sync(0xffffffffu, incl, 31);
        for (unsigned t0 = 0; t0 < total; t0 += 32) {
            const unsigned t = t0 + lane;
            /* the lane whose candidates [incl - cnt, incl) hold task t */
            int owner = 0;
#pragma unroll
            for (int L = 0; L < 32; L++)
                owner += __shfl_sync(0xffffffffu, incl, L) <= t;
            const int src = owner < 32 ? owner : 31;
            int32_t ko[D];
#pragma unroll
            for (int q = 0; q < D; q++)
                ko[q] = __shfl_sync(0xffffffffu, k[q], src);
            const unsigned owant = __shfl_sync(0xffffffffu, want, src), oup = __shfl_sync(0xffffffffu, up, src);
            const unsigned ofirst = __shfl_sync(0xffffffffu, incl - cnt, src);
            const int oi = __shfl_sync(0xffffffffu, i, src), osi = __shfl_sync(0xffffffffu, si, src);
            if (t < total) {
                int32_t kc[D];
                candidate<D>(ko, oi, osi, oup, nth_candidate<D>(owant, t - ofirst), kc);
                insert_new<M, D>(g, C, table, maxbits, kc);
            }
        }
    }
}

__device__ __forceinline__ double wave_of(double dt, double pa, double pb, double dx)
{
    return dt * (pb - pa) / (2.0 * dx);
}

/* Links of new cells and this step's waves. Items [0, n_old d): old cell
 * c's faces along i, whose waves and back terms it writes where its links
 * exist (read fresh: a new cell may patch a missing link right now, and a
 * stale -1 only skips a write that the new cell makes with the same
 * value). Then 2d items per new cell: find the neighbour on one side, link
 * it, write that face's terms, and patch an old neighbour's link (each old
 * slot has one writer: the cell across that face). */
template <class M, int D> __device__ void link_phase(const Dev &g, const Step &s, long long i0, long long stride)
{
    const Cells C = g.c[0];
    const unsigned long long *table = g.table;
    const long long old_items = (long long)s.n_old * D;
    const long long items = old_items + (long long)(s.n - s.n_old) * 2 * D;
    const double sc = s.scale, dt = s.dt;
    for (long long w = i0; w < items; w += stride) {
        if (w < old_items) {
            const long long c = w / D;
            const int i = (int)(w - c * D);
            const int32_t a = vload(C.nb[c * 2 * D + 2 * i]), f = vload(C.nb[c * 2 * D + 2 * i + 1]);
            const double pc = C.p[c] * sc;
            if (f >= 0)
                g.wave[c * D + i] = wave_of(dt, pc, C.p[f] * sc, g.dx[i]);
            if (a >= 0) {
                g.back[c * 2 * D + 2 * i] = gb_pos(C.v[(size_t)a * D + i]);
                g.back[c * 2 * D + 2 * i + 1] = wave_of(dt, C.p[a] * sc, pc, g.dx[i]);
            }
            continue;
        }
        const long long r = w - old_items, c = s.n_old + r / (2 * D);
        const int q = (int)(r - (c - s.n_old) * 2 * D), i = q >> 1, fwd = q & 1;
        int32_t k[D];
#pragma unroll
        for (int j = 0; j < D; j++)
            k[j] = C.key[c * D + j] + (j == i ? (fwd ? 1 : -1) : 0);
        const double pc = C.p[c] * sc, vci = C.v[c * D + i]; /* loaded alongside the key */
        const int32_t o = find<D>(table, g.hmask, C.key, k);
        C.nb[c * 2 * D + q] = o;
        if (o < 0)
            continue;
        const double po = C.p[o] * sc;
        if (fwd) {
            const double wv = wave_of(dt, pc, po, g.dx[i]);
            g.wave[c * D + i] = wv;
            if (o < s.n_old) {
                C.nb[(size_t)o * 2 * D + 2 * i] = (int32_t)c;
                g.back[(size_t)o * 2 * D + 2 * i] = gb_pos(vci);
                g.back[(size_t)o * 2 * D + 2 * i + 1] = wv;
            }
        } else {
            const double wv = wave_of(dt, po, pc, g.dx[i]);
            g.back[c * 2 * D + 2 * i] = gb_pos(C.v[(size_t)o * D + i]);
            g.back[c * 2 * D + 2 * i + 1] = wv;
            if (o < s.n_old) {
                C.nb[(size_t)o * 2 * D + 2 * i + 1] = (int32_t)c;
                g.wave[(size_t)o * D + i] = wv;
            }
        }
    }
}

/* gb_fluxes' second pass for face (c, j), the terms added in the same
 * order. The forward cell's row is read only when its terms count. EAGER
 * (the coop kernel) loads the masses behind and ahead and the far link
 * before the limiter's branches, so that the chain is three loads deep. */
template <class M, int D, bool EAGER>
__device__ void flux_phase(const Dev &g, const Step &s, long long i0, long long stride)
{
    const Cells C = g.c[0];
    const double sc = s.scale, dt = s.dt;
    const long long items = (long long)s.n * D;
    for (long long w = i0; w < items; w += stride) {
        const long long c = w / D;
        const int j = (int)(w - c * D);
        const double u = C.v[c * D + j], wj = g.wave[c * D + j];
        const int32_t fwd = C.nb[c * 2 * D + 2 * j + 1], behind = C.nb[c * 2 * D + 2 * j];
        const double pc = C.p[c] * sc;
        const double pf = fwd >= 0 ? C.p[fwd] * sc : 0.0;
        double pb = 0.0, pff = 0.0;
        int32_t ff = -1;
        if (EAGER) {
            pb = behind >= 0 ? C.p[behind] : 0.0;
            ff = fwd >= 0 ? C.nb[(size_t)fwd * 2 * D + 2 * j + 1] : -1;
            pff = ff >= 0 ? C.p[ff] : 0.0;
        }
        double F = gb_pos(u) * pc + (fwd >= 0 ? gb_neg(u) * pf : 0.0);
        double corr = 0.0;
        if (fwd >= 0) {
            double jump = pf - pc;
            if (jump != 0.0) {
                double up;
                if (u > 0.0) {
                    up = behind >= 0 ? pc - (EAGER ? pb : C.p[behind]) * sc : pc;
                } else {
                    if (!EAGER) {
                        ff = C.nb[(size_t)fwd * 2 * D + 2 * j + 1];
                        pff = ff >= 0 ? C.p[ff] : 0.0;
                    }
                    up = ff >= 0 ? pff * sc - pf : -pf;
                }
                double au = fabs(u);
                corr += au * (g.dx[j] / dt - au) * wj * gb_mc(up / jump);
            }
        }
        const double vj_out = gb_pos(u), vj_in = gb_neg(u);
        const bool fin = fwd >= 0 && vj_in != 0.0;
        const int32_t *nb = C.nb + c * 2 * D, *fnb = C.nb + (size_t)(fin ? fwd : 0) * 2 * D;
        const double *bk = g.back + c * 2 * D, *fbk = g.back + (size_t)(fin ? fwd : 0) * 2 * D;
#pragma unroll
        for (int i = 0; i < D; i++) {
            if (i == j)
                continue;
            if (nb[2 * i] >= 0 && vj_out != 0.0)
                corr -= bk[2 * i] * vj_out * bk[2 * i + 1];
            if (nb[2 * i + 1] >= 0 && vj_out != 0.0)
                corr -= gb_neg(C.v[c * D + i]) * vj_out * g.wave[c * D + i];
            if (fin) {
                if (fnb[2 * i] >= 0)
                    corr -= fbk[2 * i] * vj_in * fbk[2 * i + 1];
                if (fnb[2 * i + 1] >= 0)
                    corr -= gb_neg(C.v[(size_t)fwd * D + i]) * vj_in * g.wave[(size_t)fwd * D + i];
            }
        }
        g.flux[c * D + j] = (F + corr) * dt / g.dx[j];
    }
}

/* gb_apply; returns this thread's sum of the new masses. A cut step
 * first keeps its start in the wave scratch; finishing it starts from
 * there. */
template <int D> __device__ double apply_phase(const Dev &g, const Step &s, long long i0, long long stride)
{
    const Cells C = g.c[0];
    const bool keep = !s.resume && s.part < 1.0;
    double sum = 0.0;
    for (long long c = i0; c < s.n; c += stride) {
        double q = s.resume ? g.wave[c] : C.p[c] * s.scale;
        if (keep)
            g.wave[c] = q;
#pragma unroll
        for (int j = 0; j < D; j++) {
            int32_t bk = C.nb[c * 2 * D + 2 * j];
            q -= s.part * (g.flux[c * D + j] - (bk >= 0 ? g.flux[(size_t)bk * D + j] : 0.0));
        }
        q = gb_pos(q);
        C.p[c] = q;
        sum += q;
    }
    return sum;
}

/* gb_fed */
template <int D> __device__ __forceinline__ bool fed(const Dev &g, const Cells &C, double sc, long long c)
{
    const int32_t *nb = C.nb + c * 2 * D;
    for (int i = 0; i < D; i++)
        for (int si = 0; si < 2; si++) {
            int32_t a = nb[2 * i + si];
            if (a < 0)
                continue;
            double vai = C.v[(size_t)a * D + i];
            if (!(si == 0 ? vai > 0.0 : vai < 0.0))
                continue;
            if (C.p[a] * sc >= g.thr)
                return true;
            for (int j = 0; j < D; j++) {
                if (j == i)
                    continue;
                for (int sj = 0; sj < 2; sj++) {
                    int32_t e = C.nb[(size_t)a * 2 * D + 2 * j + sj];
                    if (e < 0 || C.p[e] * sc < g.thr)
                        continue;
                    const double *ve = C.v + (size_t)e * D;
                    if ((si == 0 ? ve[i] > 0.0 : ve[i] < 0.0) && (sj == 0 ? ve[j] > 0.0 : ve[j] < 0.0))
                        return true;
                }
            }
        }
    return false;
}

/* Pruning's cells are cut into one contiguous chunk per block (whole
 * tiles of THREADS), so that positions keep their order. */
__device__ __forceinline__ void chunk(int n, int blocks, int b, int *lo, int *hi)
{
    long long per = ((long long)n + blocks - 1) / blocks;
    per = (per + THREADS - 1) / THREADS * THREADS;
    long long a = per * b, e = a + per;
    *lo = (int)(a < n ? a : n);
    *hi = (int)(e < n ? e : n);
}

/* Marks the cells to keep in this block's chunk; returns the block's count
 * (every thread). Also clears the other table and its maximum rate. */
template <int D> __device__ int prune_mark(const Dev &g, const Step &s, long long i0, long long stride)
{
    const Cells C = g.c[0];
    unsigned long long *other = g.table;
    for (unsigned long long q = i0; q <= g.hmask; q += stride)
        other[q] = EMPTY;
    if (i0 == 0)
        g.st->maxbits[s.cur ^ 1] = 0;
    int lo, hi, count = 0;
    chunk(s.n, gridDim.x, blockIdx.x, &lo, &hi);
    for (int c = lo + threadIdx.x; c < hi; c += THREADS) {
        bool keep = !(C.p[c] * s.scale < g.thr && !fed<D>(g, C, s.scale, c));
        g.keep[c] = keep;
        count += keep;
    }
    return (int)block_sum<THREADS>((double)count);
}

/* New positions of this block's chunk from its offset. */
static __device__ void prune_remap(const Dev &g, const Step &s, int offset)
{
    int lo, hi;
    chunk(s.n, gridDim.x, blockIdx.x, &lo, &hi);
    for (int base = lo; base < hi; base += THREADS) {
        int c = base + threadIdx.x, total;
        int flag = c < hi ? g.keep[c] : 0;
        int before = block_scan<THREADS>(flag, &total);
        if (c < hi)
            g.remap[c] = flag ? offset + before : -1;
        offset += total;
    }
}

/* Moves kept cells to their new positions in the scratch view c[1] (mass
 * normalized, links remapped): the scratch arrays are free between apply
 * and the next step's links, so pruning needs no second copy of the grid. */
template <int D> __device__ void prune_move(const Dev &g, const Step &s, long long i0, long long stride)
{
    const Cells C = g.c[0], N = g.c[1];
    for (long long c = i0; c < s.n; c += stride) {
        int32_t to = g.remap[c];
        if (to < 0)
            continue;
#pragma unroll
        for (int q = 0; q < D; q++) {
            N.key[(size_t)to * D + q] = C.key[c * D + q];
            N.v[(size_t)to * D + q] = C.v[c * D + q];
        }
#pragma unroll
        for (int q = 0; q < 2 * D; q++) {
            int32_t b = C.nb[c * 2 * D + q];
            N.nb[(size_t)to * 2 * D + q] = b >= 0 ? g.remap[b] : -1;
        }
        N.p[to] = C.p[c] * s.scale;
        N.rate[to] = C.rate[c];
    }
}

/* Copies the kept cells [0, kept) back, indexes them (the table was
 * cleared by prune_mark), clears their growth marks, restores KEY_NONE
 * over the freed positions [kept, n) and raises the new maximum rate
 * (slot cur ^ 1); returns this thread's sum of their masses. */
template <int D> __device__ double prune_back(const Dev &g, const Step &s, int kept, long long i0, long long stride)
{
    const Cells C = g.c[0], N = g.c[1];
    double sum = 0.0, mx = 0.0;
    for (long long c = i0; c < kept; c += stride) {
        int32_t k[D];
#pragma unroll
        for (int q = 0; q < D; q++) {
            k[q] = N.key[c * D + q];
            C.key[c * D + q] = k[q];
            C.v[c * D + q] = N.v[c * D + q];
        }
#pragma unroll
        for (int q = 0; q < 2 * D; q++)
            C.nb[c * 2 * D + q] = N.nb[c * 2 * D + q];
#pragma unroll
        for (int q = 0; q < D; q++)
            g.done[c * D + q] = 0;
        double p = N.p[c], r = N.rate[c];
        C.p[c] = p;
        C.rate[c] = r;
        sum += p;
        mx = r > mx ? r : mx;
        place<D>(g.table, g.hmask, k, (int32_t)c);
    }
    for (long long w = (long long)kept * D + i0; w < (long long)s.n * D; w += stride)
        C.key[w] = KEY_NONE;
    if (mx > 0.0)
        atomicMax(&g.st->maxbits[s.cur ^ 1], (unsigned long long)__double_as_longlong(mx));
    return sum;
}

} // namespace dk_cuda_gbees

#endif
