/* dakit cuda plugin: gbees, the whole propagation on the device.
 *
 * The grid lives in device memory as structure-of-arrays over cell
 * positions (key, face velocities, 2d face links, probability, CFL rate),
 * with per-cell scratch (fluxes, face waves, the back neighbour's terms;
 * pruning compacts into the same scratch and copies back), prune marks and
 * new positions: 52 d + 21 bytes per cell plus the index, an
 * open-addressing table of 64-bit slots (hash tag << 32 | position, linear
 * probing, occupancy at most one half). A new cell is inserted by claiming
 * its slot with compare-and-swap (tag | LOCKED; the probe is the CAS
 * itself), taking a position from an atomic counter, writing the key and
 * publishing the position, with no fence: key words past the cell count
 * hold KEY_NONE, so a thread that meets a slot with its own tag waits for
 * the position, then for the key's words to arrive, and compares keys (a
 * thread never waits while it holds a LOCKED slot). Each key is made once
 * and positions stay dense; zero mass, velocities and rate (computed once,
 * as in the reference) follow, since nobody reads them before the phase's
 * barrier. Growth marks each (cell, axis) whose candidates all exist, so
 * later steps skip it until pruning clears the marks.
 *
 * One step, as the reference's gb_advance, in four phases, each over work
 * items of one (cell, axis) pair or one face, so that a thread's chain of
 * dependent loads is one axis long:
 *   grow   cells at or above the threshold insert their missing downwind
 *          face and edge neighbours (gb_grow's decisions); new cells get
 *          their velocities and raise the running maximum rate (atomicMax
 *          on the bits of a non-negative double: exact, order-free);
 *   link   dt = cfl / max rate (clipped to the target; the collapse check);
 *          new cells find their 2d neighbours in the table and patch the
 *          links of old neighbours (each old slot has one writer); every
 *          cell writes the waves of its present forward faces and its back
 *          neighbour's terms, and a new cell writes those of the old cells
 *          whose link it patched (the same value as the owner would: an old
 *          cell that sees the link stale skips, never writes a zero);
 *   flux   gb_fluxes' second pass, unchanged;
 *   apply  p -= net flux, clipped at zero; block sums of p.
 * Normalization is lazy: p is stored unscaled with one scale = 1 / total,
 * and every read uses p * scale, which is the reference's normalized value
 * bit for bit (the reference stores exactly that product). Every del_step
 * steps pruning marks unfed cells below the threshold (gb_fed), counts the
 * kept cells per block, turns the counts into offsets, compacts in order
 * into the scratch (remapping links) and copies back, placing each kept
 * cell in the cleared table; the survivors' sum and maximum rate give the
 * new scale and CFL rate.
 *
 * Variants:
 *   auto  (default) coop while the grid is small, dp once cells times d
 *         reaches 2^19 (DAKIT_GBEES_CUDA_AUTO_ITEMS): the persistent kernel
 *         suits grids where launch latency dominates (Lorenz '63, thousands
 *         of cells), the phase kernels millions of cells, where each runs
 *         at its own occupancy.
 *   coop  one cooperative kernel (grid sized by the occupancy API and the
 *         cell count) runs every step up to the target: grid.sync()
 *         between phases, 4 per step plus 4 per pruning; sums go through
 *         per-block partials that every block adds in the same order, so
 *         every block derives the same dt, scale and time without another
 *         barrier.
 *   dp    dynamic parallelism: the host launches one scheduler; schedulers
 *         (one block) read the counts on the device and tail-launch the
 *         phase kernels sized to the current number of cells, then the
 *         next scheduler. No host round trip per step.
 *   host  the baseline: the host launches the same phase kernels per step
 *         and reads the state back after each step.
 * Capacity: during growth the counter may pass the capacity; the
 * inserting thread marks its slot FAILED and raises a flag, the step stops
 * after the growth barrier, and the host restores the count, grows every
 * array and the table (twice as large where free device memory allows, else
 * as much as fits, else a clear out-of-memory error), rebuilds the index
 * from the kept cells and relaunches: no cell is ever dropped. Before each
 * launch the host also doubles the room when the grid is half full and it
 * fits. Initialization (once per run, every variant) grows level by level
 * from the mean's cell in a cooperative kernel, with two barriers per level
 * (every block reads the counter before any inserts again); the measurement
 * update and snapshots are single kernels.
 *
 * Tuning knobs (dk_tuning_*): DAKIT_GBEES_CUDA_PROFILE=1 prints, at plan
 * destruction, the coop kernel's time per phase (%globaltimer at the
 * barriers) and the host wall time spent in each plugin operation to
 * stderr: a developer's tool. DAKIT_GBEES_CUDA_CPT=k sizes the coop grid at
 * k growth/flux items (cell, axis) per thread (default 0.5),
 * DAKIT_GBEES_CUDA_BLOCKS=b fixes it, DAKIT_GBEES_CUDA_OCC=3 takes the coop
 * kernel capped at 80 registers (3 blocks per SM, a few spills). */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cooperative_groups.h>

#include <dakit/gbees.h>

#include "cuda_internal.h"

/* The models as device code: the same files the host compiles. GB_MODEL
 * records each model's dimension rule for picking the instances below. */
#define GB_MODEL_FN __device__ static __forceinline__
#define GB_MODEL(name_, about_, dim_, min_dim_, meas_dim_, ncoef_, ...)                                                \
    struct gb_info_##name_ {                                                                                           \
        static constexpr int dim = dim_, min_dim = min_dim_;                                                           \
    };
#include <dakit/kit/gbees/models/all.h>

namespace cg = cooperative_groups;

namespace {

const int THREADS = 256;
const int MAX_PARTS = 4096; /* blocks of a phase kernel (grid-stride beyond) */
const unsigned long long EMPTY = ~0ull;
const unsigned long long TAG_MASK = 0xffffffff00000000ull;
const uint32_t LOCKED = 0xfffffffeu, FAILED = 0xfffffffdu;
/* Every key component of positions [n, cap) holds KEY_NONE between steps,
 * so that a thread comparing keys during growth can tell a key not yet
 * visible from a different one without the inserter fencing. A real key
 * never reaches it: the root is within 2^30 of the centre (init checks)
 * and keys move one cell per neighbour. */
const int32_t KEY_NONE = INT32_MIN;

enum { ST_OK = 0, ST_CAPACITY = 1, ST_COLLAPSE = 2, ST_MASS = 3, ST_PRUNED = 4, ST_LAUNCH = 5, ST_NOMASS = 6 };
enum { V_COOP = 0, V_DP = 1, V_HOST = 2, V_AUTO = 3 };
enum { PH_GROW, PH_LINK, PH_FLUX, PH_APPLY, PH_PRUNE, PH_N };

struct Cells {
    int32_t *key; /* D per cell */
    double *v;    /* D: velocity component i at the forward face along i */
    int32_t *nb;  /* 2D: back then forward neighbour per axis, -1 absent */
    double *p;    /* unscaled mass (times State::scale) */
    double *rate; /* sum_i |v_i| / dx_i */
};

/* Scalars first: the host copies the head (up to part_sum) back. */
struct State {
    int n, cur, status, nparts;
    unsigned int n_alloc; /* the position counter of growth (== n between steps) */
    int overflow;
    int n_old, last, kept, cnt_blocks, lo;
    double t, dt, scale, dt_step, t_target;
    double err_a, err_b;
    long long max_steps, done;
    unsigned long long steps, cell_steps;
    unsigned long long maxbits[2]; /* per table: the running maximum rate's bits */
    unsigned long long prof[PH_N];
    double part_sum[MAX_PARTS];
    double part_sum2[MAX_PARTS];
    int part_cnt[MAX_PARTS];
    int offs[MAX_PARTS];
};

/* Everything a kernel needs, passed by value. */
struct Dev {
    Cells c[2];
    double *flux, *wave, *back;
    uint8_t *keep;
    uint8_t *done; /* per (cell, axis): growth along the axis has nothing to insert until pruning */
    int32_t *remap;
    unsigned long long *table;
    unsigned long long hmask;
    int cap;
    State *st;
    double center[DK_GBEES_MAX_DIM], dx[DK_GBEES_MAX_DIM], coef[DK_GBEES_MAX_COEF];
    double thr, cfl;
    int del_step;
};

/* What one phase works on (the coop kernel keeps it in registers; phase
 * kernels load it from State). */
struct Step {
    int n_old, n, cur;
    double scale, dt;
};

struct InitArgs {
    double mean[DK_GBEES_MAX_DIM];
    double inv[DK_GBEES_MAX_DIM * DK_GBEES_MAX_DIM];
    double lognorm;
    int32_t root[DK_GBEES_MAX_DIM];
};

struct UpdArgs {
    double y[DK_GBEES_MAX_DIM];
    double rinv[DK_GBEES_MAX_DIM * DK_GBEES_MAX_DIM];
    int m;
};

/* ---- small device helpers ---- */

#define GB_FLUX_FN __device__ static __forceinline__
#include <dakit/kit/gbees/flux.h>

template <typename T> __device__ __forceinline__ T vload(const T &x) { return *(const volatile T *)&x; }

__device__ __forceinline__ unsigned long long globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A cyclic-polynomial hash of the multi-index (rotate, then fold in each
 * mixed component), mixed again so the low bits (the slot) and the high
 * bits (the tag) are both well spread. */
template <int D> __device__ __forceinline__ uint64_t hash_key(const int32_t *k)
{
    uint64_t h = 0x9e3779b97f4a7c15ull * (uint64_t)(D + 1);
#pragma unroll
    for (int i = 0; i < D; i++) {
        h = (h << 7) | (h >> 57);
        h ^= mix64((uint64_t)(uint32_t)k[i] + 0x632be59bd9b4e019ull * (uint64_t)(i + 1));
    }
    return mix64(h);
}

/* Position of key k, or -1; only while no insertion runs. */
template <int D>
__device__ __forceinline__ int32_t find(const unsigned long long *table, unsigned long long mask, const int32_t *keys,
                                        const int32_t *k)
{
    uint64_t h = hash_key<D>(k);
    unsigned long long tag = h & TAG_MASK;
    for (uint64_t s = h & mask;; s = (s + 1) & mask) {
        unsigned long long e = table[s];
        if (e == EMPTY)
            return -1;
        if ((e & TAG_MASK) == tag) {
            int32_t pos = (int32_t)(uint32_t)e;
            bool eq = true;
#pragma unroll
            for (int q = 0; q < D; q++)
                eq &= keys[(size_t)pos * D + q] == k[q];
            if (eq)
                return pos;
        }
    }
}

/* Places pos under its key, keys known distinct (rebuilds, compaction). */
template <int D>
__device__ __forceinline__ void place(unsigned long long *table, unsigned long long mask, const int32_t *k, int32_t pos)
{
    uint64_t h = hash_key<D>(k);
    unsigned long long entry = (h & TAG_MASK) | (uint32_t)pos;
    for (uint64_t s = h & mask;; s = (s + 1) & mask)
        if (atomicCAS(&table[s], EMPTY, entry) == EMPTY)
            return;
}

/* The centre of key k, written as the reference's gb_center (no fused
 * multiply-add, so the same bits). */
template <int D> __device__ __forceinline__ void centre(const Dev &g, const int32_t *k, double *x)
{
#pragma unroll
    for (int q = 0; q < D; q++)
        x[q] = __dadd_rn(g.center[q], __dmul_rn(g.dx[q], (double)k[q]));
}

/* gb_velocity: component i of f half a cell forward along i; returns the
 * CFL rate. */
template <class M, int D> __device__ __forceinline__ double velocity(const Dev &g, const int32_t *k, double *v)
{
    double rate = 0.0;
#pragma unroll
    for (int i = 0; i < D; i++) {
        double x[D], f[D];
        centre<D>(g, k, x);
        x[i] += 0.5 * g.dx[i];
        M::f(D, x, g.coef, f);
        v[i] = f[i];
        rate += fabs(f[i]) / g.dx[i];
    }
    return rate;
}

/* Inserts key k as a new cell (zero mass, velocities made) unless present.
 * Concurrent: see the header. Probing claims with compare-and-swap at
 * once (its answer is the slot's entry), and the key is published without
 * a fence: a thread that meets its tag waits for the position, then for
 * each key component to leave KEY_NONE. */
template <class M, int D>
__device__ __forceinline__ void insert_new(const Dev &g, const Cells &C, unsigned long long *table,
                                           unsigned long long *maxbits, const int32_t *k)
{
    State *st = g.st;
    uint64_t h = hash_key<D>(k);
    unsigned long long tag = h & TAG_MASK;
    for (uint64_t s = h & g.hmask;; s = (s + 1) & g.hmask) {
        unsigned long long e = atomicCAS(&table[s], EMPTY, tag | LOCKED);
        if (e == EMPTY) {
            unsigned pos = atomicAdd(&st->n_alloc, 1u);
            if (pos >= (unsigned)g.cap) {
                atomicExch(&table[s], tag | FAILED);
                atomicExch(&st->overflow, 1);
                return;
            }
#pragma unroll
            for (int q = 0; q < D; q++)
                C.key[(size_t)pos * D + q] = k[q];
            atomicExch(&table[s], tag | pos);
            /* the rest is read only after the phase's barrier */
            double v[D];
            double rate = velocity<M, D>(g, k, v);
#pragma unroll
            for (int q = 0; q < D; q++) {
                C.v[(size_t)pos * D + q] = v[q];
                g.done[(size_t)pos * D + q] = 0;
            }
            C.p[pos] = 0.0;
            C.rate[pos] = rate;
            atomicMax(maxbits, (unsigned long long)__double_as_longlong(rate));
            return;
        }
        if ((e & TAG_MASK) == tag) {
            uint32_t pos = (uint32_t)e;
            while (pos == LOCKED) {
                e = vload(table[s]);
                pos = (uint32_t)e;
            }
            if (pos == FAILED)
                return;
            bool eq = true;
#pragma unroll
            for (int q = 0; q < D; q++) {
                int32_t kq;
                do
                    kq = vload(C.key[(size_t)pos * D + q]);
                while (kq == KEY_NONE);
                eq &= kq == k[q];
            }
            if (eq)
                return;
        }
    }
}

/* ---- block reductions (blockDim.x == NT) ---- */

template <int NT> __device__ __forceinline__ double block_sum(double x)
{
    __shared__ double sh[NT / 32 + 1];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    __syncthreads();
    if (lane == 0)
        sh[warp] = x;
    __syncthreads();
    if (warp == 0) {
        double y = lane < NT / 32 ? sh[lane] : 0.0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            y += __shfl_xor_sync(0xffffffffu, y, o);
        if (lane == 0)
            sh[NT / 32] = y;
    }
    __syncthreads();
    return sh[NT / 32];
}

/* Exclusive prefix of x over the block; *total gets the block's sum. */
template <int NT> __device__ __forceinline__ int block_scan(int x, int *total)
{
    __shared__ int sh[NT / 32 + 1];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int incl = x;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o)
            incl += y;
    }
    __syncthreads();
    if (lane == 31)
        sh[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        int w = lane < NT / 32 ? sh[lane] : 0, wi = w;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int y = __shfl_up_sync(0xffffffffu, wi, o);
            if (lane >= o)
                wi += y;
        }
        if (lane < NT / 32)
            sh[lane] = wi - w;
        if (lane == NT / 32 - 1)
            sh[NT / 32] = wi;
    }
    __syncthreads();
    *total = sh[NT / 32];
    return sh[warp] + incl - x;
}

/* The sum of parts[0, count), the same bits in every block. */
__device__ __forceinline__ double sum_parts(const double *parts, int count)
{
    double x = 0.0;
    for (int b = threadIdx.x; b < count; b += THREADS)
        x += vload(parts[b]);
    return block_sum<THREADS>(x);
}

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

/* gb_apply; returns this thread's sum of the new masses. */
template <int D> __device__ double apply_phase(const Dev &g, const Step &s, long long i0, long long stride)
{
    const Cells C = g.c[0];
    double sum = 0.0;
    for (long long c = i0; c < s.n; c += stride) {
        double q = C.p[c] * s.scale;
#pragma unroll
        for (int j = 0; j < D; j++) {
            int32_t bk = C.nb[c * 2 * D + 2 * j];
            q -= g.flux[c * D + j] - (bk >= 0 ? g.flux[(size_t)bk * D + j] : 0.0);
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
__device__ void prune_remap(const Dev &g, const Step &s, int offset)
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

/* ---- the cooperative kernel: every step of one advance ---- */

/* MINB: blocks per SM the registers are capped for (2: 128 registers, no
 * spills; 3: 80, a few spills on the rare insertion path) */
template <class M, int D, int MINB>
__global__ void __launch_bounds__(THREADS, MINB) k_coop(Dev g, double t_target, long long max_steps)
{
    cg::grid_group grid = cg::this_grid();
    State *st = g.st;
    const long long i0 = (long long)blockIdx.x * THREADS + threadIdx.x, stride = (long long)gridDim.x * THREADS;
    const bool timer = blockIdx.x == 0 && threadIdx.x == 0;
    Step s;
    s.n = st->n;
    s.n_old = s.n;
    s.cur = st->cur;
    s.scale = st->scale;
    s.dt = st->dt;
    double t = st->t, err_a = 0.0, err_b = 0.0;
    unsigned long long steps = st->steps, cell_steps = st->cell_steps;
    unsigned long long prof[PH_N] = {0, 0, 0, 0, 0}, t0 = timer ? globaltimer() : 0, t1;
    int status = ST_OK;
    long long done = 0;
    while (t < t_target && (max_steps <= 0 || done < max_steps)) {
        s.n_old = s.n;
        grow_phase<M, D, true>(g, s, i0, stride);
        grid.sync();
        if (timer) {
            t1 = globaltimer();
            prof[PH_GROW] += t1 - t0;
            t0 = t1;
        }
        if (vload(st->overflow)) {
            status = ST_CAPACITY;
            break;
        }
        s.n = (int)vload(st->n_alloc);
        double rate = __longlong_as_double((long long)vload(st->maxbits[s.cur]));
        double dt = rate > 0.0 ? g.cfl / rate : t_target - t;
        if (!(dt > 1e-12 * (1.0 + fabs(t_target)))) {
            status = ST_COLLAPSE;
            err_a = dt;
            err_b = t;
            break;
        }
        bool last = dt >= t_target - t;
        s.dt = last ? t_target - t : dt;
        link_phase<M, D>(g, s, i0, stride);
        grid.sync();
        if (timer) {
            t1 = globaltimer();
            prof[PH_LINK] += t1 - t0;
            t0 = t1;
        }
        flux_phase<M, D, true>(g, s, i0, stride);
        grid.sync();
        if (timer) {
            t1 = globaltimer();
            prof[PH_FLUX] += t1 - t0;
            t0 = t1;
        }
        double part = block_sum<THREADS>(apply_phase<D>(g, s, i0, stride));
        if (threadIdx.x == 0)
            st->part_sum[blockIdx.x] = part;
        grid.sync();
        double total = sum_parts(st->part_sum, gridDim.x);
        if (timer) {
            t1 = globaltimer();
            prof[PH_APPLY] += t1 - t0;
            t0 = t1;
        }
        cell_steps += (unsigned long long)s.n;
        steps++;
        done++;
        t = last ? t_target : t + s.dt;
        if (!(total > 0.0) || !isfinite(total)) {
            status = ST_MASS;
            err_b = t;
            break;
        }
        s.scale = 1.0 / total;
        if (steps % (unsigned long long)g.del_step == 0) {
            int count = prune_mark<D>(g, s, i0, stride);
            if (threadIdx.x == 0)
                st->part_cnt[blockIdx.x] = count;
            grid.sync();
            double before = 0.0, all = 0.0;
            for (int b = threadIdx.x; b < (int)gridDim.x; b += THREADS) {
                double cb = (double)vload(st->part_cnt[b]);
                all += cb;
                before += b < (int)blockIdx.x ? cb : 0.0;
            }
            before = block_sum<THREADS>(before);
            all = block_sum<THREADS>(all);
            prune_remap(g, s, (int)before);
            grid.sync();
            prune_move<D>(g, s, i0, stride);
            if (timer)
                st->n_alloc = (unsigned)all;
            grid.sync();
            part = block_sum<THREADS>(prune_back<D>(g, s, (int)all, i0, stride));
            if (threadIdx.x == 0)
                st->part_sum2[blockIdx.x] = part;
            grid.sync();
            double total2 = sum_parts(st->part_sum2, gridDim.x);
            s.cur ^= 1;
            s.n = (int)all;
            if (timer) {
                t1 = globaltimer();
                prof[PH_PRUNE] += t1 - t0;
                t0 = t1;
            }
            if (!(total2 > 0.0) || !isfinite(total2)) {
                status = ST_PRUNED;
                err_b = t;
                break;
            }
            s.scale = 1.0 / total2;
        }
    }
    if (timer) {
        /* on ST_CAPACITY, s.n is still the count before the growth */
        st->n = s.n;
        st->cur = s.cur;
        st->t = t;
        st->dt = s.dt;
        st->scale = s.scale;
        st->steps = steps;
        st->cell_steps = cell_steps;
        st->status = status;
        st->err_a = err_a;
        st->err_b = err_b;
        for (int q = 0; q < PH_N; q++)
            st->prof[q] += prof[q];
    }
}

/* ---- phase kernels (variants dp and host) ---- */

__device__ __forceinline__ Step load_step(const State *st)
{
    Step s;
    s.n_old = st->n_old;
    s.n = st->n;
    s.cur = st->cur;
    s.scale = st->scale;
    s.dt = st->dt_step;
    return s;
}

__host__ __device__ __forceinline__ int blocks_for(long long n)
{
    long long b = (n + THREADS - 1) / THREADS;
    return (int)(b < 1 ? 1 : b > MAX_PARTS ? MAX_PARTS : b);
}

#define GB_PHASE_PROLOGUE                                                                                              \
    State *st = g.st;                                                                                                  \
    if (vload(st->status) != ST_OK)                                                                                    \
        return;                                                                                                        \
    Step s = load_step(st);                                                                                            \
    const long long i0 = (long long)blockIdx.x * THREADS + threadIdx.x, stride = (long long)gridDim.x * THREADS;

template <class M, int D> __global__ void __launch_bounds__(THREADS) k_grow(Dev g)
{
    GB_PHASE_PROLOGUE
    grow_phase<M, D, false>(g, s, i0, stride);
}

template <class M, int D> __global__ void __launch_bounds__(THREADS) k_link(Dev g)
{
    GB_PHASE_PROLOGUE
    link_phase<M, D>(g, s, i0, stride);
}

template <class M, int D> __global__ void __launch_bounds__(THREADS) k_flux(Dev g)
{
    GB_PHASE_PROLOGUE
    flux_phase<M, D, false>(g, s, i0, stride);
}

template <int D> __global__ void __launch_bounds__(THREADS) k_apply(Dev g)
{
    GB_PHASE_PROLOGUE
    double part = block_sum<THREADS>(apply_phase<D>(g, s, i0, stride));
    if (threadIdx.x == 0)
        st->part_sum[blockIdx.x] = part;
    if (i0 == 0)
        st->nparts = gridDim.x;
}

template <int D> __global__ void __launch_bounds__(THREADS) k_prune_mark(Dev g)
{
    GB_PHASE_PROLOGUE
    int count = prune_mark<D>(g, s, i0, stride);
    if (threadIdx.x == 0)
        st->part_cnt[blockIdx.x] = count;
    if (i0 == 0)
        st->cnt_blocks = gridDim.x;
}

/* Offsets of the blocks' counts (one block of 1024). */
__global__ void __launch_bounds__(1024) k_prune_scan(Dev g)
{
    State *st = g.st;
    if (vload(st->status) != ST_OK)
        return;
    int nb = st->cnt_blocks, per = (nb + 1023) / 1024;
    int lo = threadIdx.x * per, hi = lo + per < nb ? lo + per : nb, mine = 0, total;
    for (int b = lo; b < hi; b++)
        mine += st->part_cnt[b];
    int off = block_scan<1024>(mine, &total);
    for (int b = lo; b < hi; b++) {
        st->offs[b] = off;
        off += st->part_cnt[b];
    }
    if (threadIdx.x == 0)
        st->kept = total;
}

__global__ void __launch_bounds__(THREADS) k_prune_remap(Dev g)
{
    GB_PHASE_PROLOGUE
    (void)i0;
    (void)stride;
    prune_remap(g, s, st->offs[blockIdx.x]);
}

template <int D> __global__ void __launch_bounds__(THREADS) k_prune_move(Dev g)
{
    GB_PHASE_PROLOGUE
    prune_move<D>(g, s, i0, stride);
}

template <int D> __global__ void __launch_bounds__(THREADS) k_prune_back(Dev g)
{
    GB_PHASE_PROLOGUE
    double part = block_sum<THREADS>(prune_back<D>(g, s, st->kept, i0, stride));
    if (threadIdx.x == 0)
        st->part_sum2[blockIdx.x] = part;
    if (i0 == 0)
        st->nparts = gridDim.x;
}

/* ---- schedulers (one block): the step's scalar logic; with DP they also
 * tail-launch what follows, sized to the counts they read ---- */

template <class M, int D, bool DP> __global__ void __launch_bounds__(THREADS) k_mid(Dev g);
template <class M, int D, bool DP> __global__ void __launch_bounds__(THREADS) k_end(Dev g);
template <class M, int D, bool DP> __global__ void __launch_bounds__(THREADS) k_pruned(Dev g);

__device__ __forceinline__ void check_launch(State *st)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        st->status = ST_LAUNCH;
        st->err_a = (double)e;
    }
}

/* Starts a step, or ends the chain (dp) when the target is reached. */
template <class M, int D, bool DP> __device__ void next_step(Dev g)
{
    State *st = g.st;
    if (st->status != ST_OK || !(st->t < st->t_target) || (st->max_steps > 0 && st->done >= st->max_steps))
        return;
    st->n_old = st->n;
    if (DP) {
        k_grow<M, D><<<blocks_for(st->n), THREADS, 0, cudaStreamTailLaunch>>>(g);
        k_mid<M, D, DP><<<1, 32, 0, cudaStreamTailLaunch>>>(g);
        check_launch(st);
    }
}

template <class M, int D, bool DP> __global__ void k_begin(Dev g)
{
    next_step<M, D, DP>(g);
}

template <class M, int D, bool DP> __global__ void __launch_bounds__(THREADS) k_mid(Dev g)
{
    State *st = g.st;
    if (threadIdx.x != 0 || st->status != ST_OK)
        return;
    if (st->overflow) {
        st->status = ST_CAPACITY; /* st->n is still the count before the growth */
        return;
    }
    int n = (int)st->n_alloc;
    double t = st->t, tt = st->t_target;
    double rate = __longlong_as_double((long long)st->maxbits[st->cur]);
    double dt = rate > 0.0 ? g.cfl / rate : tt - t;
    if (!(dt > 1e-12 * (1.0 + fabs(tt)))) {
        st->status = ST_COLLAPSE;
        st->err_a = dt;
        st->err_b = t;
        return;
    }
    int last = dt >= tt - t;
    st->last = last;
    st->dt_step = last ? tt - t : dt;
    st->n = n;
    if (DP) {
        int b = blocks_for(n);
        k_link<M, D><<<b, THREADS, 0, cudaStreamTailLaunch>>>(g);
        k_flux<M, D><<<b, THREADS, 0, cudaStreamTailLaunch>>>(g);
        k_apply<D><<<b, THREADS, 0, cudaStreamTailLaunch>>>(g);
        k_end<M, D, DP><<<1, THREADS, 0, cudaStreamTailLaunch>>>(g);
        check_launch(st);
    }
}

/* The grid's mass after a step (or a prune) sets the next scale, 1 / total;
 * none left (or not finite) ends the run with `failure` at the step's time. */
__device__ bool rescale(State *st, double total, int failure)
{
    if (!(total > 0.0) || !isfinite(total)) {
        st->status = failure;
        st->err_b = st->t;
        return false;
    }
    st->scale = 1.0 / total;
    return true;
}

template <class M, int D, bool DP> __global__ void __launch_bounds__(THREADS) k_end(Dev g)
{
    State *st = g.st;
    if (vload(st->status) != ST_OK)
        return;
    double total = sum_parts(st->part_sum, st->nparts);
    if (threadIdx.x != 0)
        return;
    st->t = st->last ? st->t_target : st->t + st->dt_step;
    st->dt = st->dt_step;
    st->steps++;
    st->cell_steps += (unsigned long long)st->n;
    st->done++;
    if (!rescale(st, total, ST_MASS) || !DP)
        return;
    if (st->steps % (unsigned long long)g.del_step == 0) {
        int b = blocks_for(st->n);
        k_prune_mark<D><<<b, THREADS, 0, cudaStreamTailLaunch>>>(g);
        k_prune_scan<<<1, 1024, 0, cudaStreamTailLaunch>>>(g);
        k_prune_remap<<<b, THREADS, 0, cudaStreamTailLaunch>>>(g);
        k_prune_move<D><<<b, THREADS, 0, cudaStreamTailLaunch>>>(g);
        k_prune_back<D><<<blocks_for(st->n), THREADS, 0, cudaStreamTailLaunch>>>(g);
        k_pruned<M, D, DP><<<1, THREADS, 0, cudaStreamTailLaunch>>>(g);
        check_launch(st);
    } else {
        next_step<M, D, DP>(g);
    }
}

template <class M, int D, bool DP> __global__ void __launch_bounds__(THREADS) k_pruned(Dev g)
{
    State *st = g.st;
    if (vload(st->status) != ST_OK)
        return;
    double total = sum_parts(st->part_sum2, st->nparts);
    if (threadIdx.x != 0)
        return;
    st->cur ^= 1;
    st->n = st->kept;
    st->n_alloc = (unsigned)st->kept;
    st->maxbits[st->cur ^ 1] = 0;
    if (rescale(st, total, ST_PRUNED) && DP)
        next_step<M, D, DP>(g);
}

/* ---- initialization, rebuild, update, snapshot ---- */

/* Level by level from the root, as gb_init: the masses of one level, and
 * the face neighbours of those at or above the threshold; then links and
 * the sum. Resumable at a level after the host grew the arrays. */
template <class M, int D> __global__ void __launch_bounds__(THREADS) k_init(Dev g, InitArgs a)
{
    cg::grid_group grid = cg::this_grid();
    State *st = g.st;
    const Cells C = g.c[0];
    unsigned long long *table = g.table, *maxbits = &st->maxbits[0];
    const long long i0 = (long long)blockIdx.x * THREADS + threadIdx.x, stride = (long long)gridDim.x * THREADS;
    if (i0 == 0 && st->n_alloc == 0)
        insert_new<M, D>(g, C, table, maxbits, a.root);
    grid.sync();
    int lo = st->lo, hi = (int)vload(st->n_alloc);
    /* every block reads the counter before any block inserts again */
    grid.sync();
    while (lo < hi) {
        for (long long c = lo + i0; c < hi; c += stride) {
            int32_t k[D];
            double x[D], r[D], q = 0.0;
#pragma unroll
            for (int i = 0; i < D; i++)
                k[i] = C.key[c * D + i];
            centre<D>(g, k, x);
#pragma unroll
            for (int i = 0; i < D; i++)
                r[i] = x[i] - a.mean[i];
#pragma unroll
            for (int i = 0; i < D; i++) {
                double row = 0.0;
#pragma unroll
                for (int j = 0; j < D; j++)
                    row += a.inv[i * D + j] * r[j];
                q += r[i] * row;
            }
            double p = exp(a.lognorm - 0.5 * q);
            C.p[c] = p;
            if (p < g.thr)
                continue;
#pragma unroll 1
            for (int i = 0; i < 2 * D; i++) {
                int32_t kn[D];
#pragma unroll
                for (int j = 0; j < D; j++)
                    kn[j] = k[j] + (j == (i >> 1) ? ((i & 1) ? 1 : -1) : 0);
                insert_new<M, D>(g, C, table, maxbits, kn);
            }
        }
        grid.sync();
        const int next = (int)vload(st->n_alloc), over = vload(st->overflow);
        grid.sync();
        if (over) {
            /* the host grows the arrays, keeps the cells made so far and
             * runs this level again */
            if (i0 == 0) {
                st->lo = lo;
                st->status = ST_CAPACITY;
            }
            return;
        }
        lo = hi;
        hi = next;
    }
    for (long long w = i0; w < (long long)hi * 2 * D; w += stride) {
        const long long c = w / (2 * D);
        const int q = (int)(w - c * 2 * D);
        int32_t k[D];
#pragma unroll
        for (int i = 0; i < D; i++)
            k[i] = C.key[c * D + i] + (i == (q >> 1) ? ((q & 1) ? 1 : -1) : 0);
        C.nb[w] = find<D>(table, g.hmask, C.key, k);
    }
    double sum = 0.0;
    for (long long c = i0; c < hi; c += stride)
        sum += C.p[c];
    sum = block_sum<THREADS>(sum);
    if (threadIdx.x == 0)
        st->part_sum[blockIdx.x] = sum;
    grid.sync();
    double total = sum_parts(st->part_sum, gridDim.x);
    if (i0 == 0) {
        st->n = hi;
        st->lo = hi;
        st->cur = 0;
        st->t = 0.0;
        st->dt = 0.0;
        st->steps = st->cell_steps = 0;
        if (!(total > 0.0) || !isfinite(total)) {
            st->status = ST_NOMASS;
        } else {
            st->scale = 1.0 / total;
            st->status = ST_OK;
        }
    }
}

/* The index of cells [0, n), and their maximum rate (slot cur). */
template <int D> __global__ void __launch_bounds__(THREADS) k_rebuild(Dev g, int cur, int n)
{
    const Cells C = g.c[0];
    double mx = 0.0;
    for (long long c = (long long)blockIdx.x * THREADS + threadIdx.x; c < n; c += (long long)gridDim.x * THREADS) {
        int32_t k[D];
#pragma unroll
        for (int q = 0; q < D; q++)
            k[q] = C.key[c * D + q];
        place<D>(g.table, g.hmask, k, (int32_t)c);
        mx = C.rate[c] > mx ? C.rate[c] : mx;
    }
    if (mx > 0.0)
        atomicMax(&g.st->maxbits[cur], (unsigned long long)__double_as_longlong(mx));
}

/* gb_update: the likelihood of y through h, into the masses; block sums. */
template <class M, int D> __global__ void __launch_bounds__(THREADS) k_update(Dev g, UpdArgs a)
{
    State *st = g.st;
    const Cells C = g.c[0];
    const int n = st->n;
    const double sc = st->scale;
    double sum = 0.0;
    for (long long c = (long long)blockIdx.x * THREADS + threadIdx.x; c < n; c += (long long)gridDim.x * THREADS) {
        int32_t k[D];
        double x[D], hx[DK_GBEES_MAX_DIM], r[DK_GBEES_MAX_DIM], q = 0.0;
#pragma unroll
        for (int i = 0; i < D; i++)
            k[i] = C.key[c * D + i];
        centre<D>(g, k, x);
        M::h(D, x, g.coef, hx);
        for (int i = 0; i < a.m; i++)
            r[i] = hx[i] - a.y[i];
        for (int i = 0; i < a.m; i++) {
            double row = 0.0;
            for (int j = 0; j < a.m; j++)
                row += a.rinv[i * a.m + j] * r[j];
            q += r[i] * row;
        }
        double p = C.p[c] * sc * exp(-0.5 * q);
        C.p[c] = p;
        sum += p;
    }
    sum = block_sum<THREADS>(sum);
    if (threadIdx.x == 0)
        st->part_sum[blockIdx.x] = sum;
}

/* KEY_NONE over key words [from, to). */
__global__ void __launch_bounds__(THREADS) k_clear_keys(int32_t *key, long long from, long long to)
{
    for (long long w = from + (long long)blockIdx.x * THREADS + threadIdx.x; w < to; w += (long long)gridDim.x * THREADS)
        key[w] = KEY_NONE;
}

template <int D> __global__ void __launch_bounds__(THREADS) k_snapshot(Dev g, double *out, int rows)
{
    const State *st = g.st;
    const Cells C = g.c[0];
    const double sc = st->scale;
    for (long long c = (long long)blockIdx.x * THREADS + threadIdx.x; c < rows; c += (long long)gridDim.x * THREADS) {
        int32_t k[D];
        double x[D];
#pragma unroll
        for (int i = 0; i < D; i++)
            k[i] = C.key[c * D + i];
        centre<D>(g, k, x);
#pragma unroll
        for (int i = 0; i < D; i++)
            out[c * (D + 1) + i] = x[i];
        out[c * (D + 1) + D] = C.p[c] * sc;
    }
}

/* ---- the instances: one set of kernels per (model, dimension) ---- */

struct Kernels {
    int dim;
    void (*coop)(Dev, double, long long);
    void (*coop3)(Dev, double, long long);
    void (*init)(Dev, InitArgs);
    void (*rebuild)(Dev, int, int);
    void (*update)(Dev, UpdArgs);
    void (*snapshot)(Dev, double *, int);
    void (*begin_dp)(Dev);
    void (*begin_host)(Dev);
    void (*grow)(Dev);
    void (*mid)(Dev);
    void (*link)(Dev);
    void (*flux)(Dev);
    void (*apply)(Dev);
    void (*end)(Dev);
    void (*mark)(Dev);
    void (*remap)(Dev);
    void (*move)(Dev);
    void (*back)(Dev);
    void (*pruned)(Dev);
};

template <class M, int D> const Kernels *kernels_for()
{
    static const Kernels k = {
        .dim = D,
        .coop = k_coop<M, D, 2>,
        .coop3 = k_coop<M, D, 3>,
        .init = k_init<M, D>,
        .rebuild = k_rebuild<D>,
        .update = k_update<M, D>,
        .snapshot = k_snapshot<D>,
        .begin_dp = k_begin<M, D, true>,
        .begin_host = k_begin<M, D, false>,
        .grow = k_grow<M, D>,
        .mid = k_mid<M, D, false>,
        .link = k_link<M, D>,
        .flux = k_flux<M, D>,
        .apply = k_apply<D>,
        .end = k_end<M, D, false>,
        .mark = k_prune_mark<D>,
        .remap = k_prune_remap,
        .move = k_prune_move<D>,
        .back = k_prune_back<D>,
        .pruned = k_pruned<M, D, false>,
    };
    return &k;
}

#define GB_FUNCTOR(name)                                                                                               \
    struct model_##name {                                                                                              \
        static __device__ __forceinline__ void f(int d, const double *x, const double *c, double *v)                   \
        {                                                                                                              \
            name##_f(d, x, c, v);                                                                                      \
        }                                                                                                              \
        static __device__ __forceinline__ void h(int d, const double *x, const double *c, double *y)                   \
        {                                                                                                              \
            name##_h(d, x, c, y);                                                                                      \
        }                                                                                                              \
    };
GB_MODELS(GB_FUNCTOR)

/* The instance for dimension d among D..DK_GBEES_MAX_DIM, only where the
 * model allows the dimension. */
template <class M, class Info, int D> const Kernels *pick_dim(int d)
{
    if constexpr (D > DK_GBEES_MAX_DIM) {
        (void)d;
        return nullptr;
    } else {
        if (d == D) {
            if constexpr (Info::dim ? D == Info::dim : D >= Info::min_dim)
                return kernels_for<M, D>();
            else
                return nullptr;
        }
        return pick_dim<M, Info, D + 1>(d);
    }
}

#define GB_PICK(name)                                                                                                  \
    if (!strcmp(model, #name))                                                                                         \
        return pick_dim<model_##name, gb_info_##name, 1>(d);

const Kernels *pick_kernels(const char *model, int d)
{
    GB_MODELS(GB_PICK)
    return nullptr;
}

/* ---- host side ---- */

struct Plan {
    dk_cuda_device *dev;
    dk_gbees_setup s;
    const Kernels *k;
    int variant, d;
    Dev g;
    void *cells_mem; /* every capacity-sized array */
    State *st;       /* device */
    State hs;        /* host copy of the head */
    void (*coop)(Dev, double, long long); /* the instance in use */
    int coop_max;    /* resident blocks of the coop kernel */
    int init_max;
    double cpt;      /* coop grid: (cell, axis) items per thread */
    int fixed_blocks;
    long long auto_items; /* auto: dp from this many cells times d, coop below */
    double *snap;
    size_t snap_rows;
    bool profile;
    unsigned long long launches;
    double wall[5]; /* profile: host wall seconds in init, advance, update, snapshot, plan creation */
    unsigned long long calls[5];
};

enum { OP_INIT, OP_ADVANCE, OP_UPDATE, OP_SNAPSHOT, OP_CREATE };

double wall_now()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

const size_t HEAD = offsetof(State, part_sum);

size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

/* The state's head to the device (queued) and back (waited for); `what`
 * names the operation in an error's sentence. */
dk_status copy_head_in(Plan *p, const char *what, dk_msg *msg)
{
    CUDA_TRY(cudaMemcpyAsync(p->st, &p->hs, HEAD, cudaMemcpyHostToDevice, p->dev->stream), what);
    return DK_OK;
}

dk_status copy_head_out(Plan *p, const char *what, dk_msg *msg)
{
    CUDA_TRY(cudaMemcpyAsync(&p->hs, p->st, HEAD, cudaMemcpyDeviceToHost, p->dev->stream), what);
    CUDA_TRY(cudaStreamSynchronize(p->dev->stream), what);
    return DK_OK;
}

/* Bytes of every capacity-sized array for cap cells of dimension d: the
 * cells, the scratch (fluxes, waves, back terms; pruning's compaction
 * target as well), marks, new positions, the index (at most half full)
 * and the growth marks. */
size_t grid_bytes(long long cap, int d, unsigned long long *hcap_out)
{
    unsigned long long hcap = 64;
    while (hcap < 2ull * (unsigned long long)cap)
        hcap *= 2;
    if (hcap_out)
        *hcap_out = hcap;
    size_t C = (size_t)cap;
    return align256(C * d * 4) + align256(C * d * 8) + align256(C * 2 * d * 4) + 2 * align256(C * 8) +
           2 * align256(C * d * 8) + align256(C * 2 * d * 8) + align256(C) + align256(C * 4) + align256(hcap * 8) +
           align256(C * d);
}

/* Fills the new arrays ng: cells [0, n) copied from the plan's, the table
 * and the growth marks cleared, the keys past n set to KEY_NONE. */
dk_status fill_grown(Plan *p, const Dev &ng, int n, dk_msg *msg)
{
    const int D = p->d;
    const size_t C = (size_t)ng.cap;
    const char *what = "growing the gbees grid";
    cudaStream_t sm = p->dev->stream;
    if (n > 0) {
        const Cells &o = p->g.c[0];
        size_t N = (size_t)n;
        CUDA_TRY(cudaMemcpyAsync(ng.c[0].key, o.key, N * D * 4, cudaMemcpyDeviceToDevice, sm), what);
        CUDA_TRY(cudaMemcpyAsync(ng.c[0].v, o.v, N * D * 8, cudaMemcpyDeviceToDevice, sm), what);
        CUDA_TRY(cudaMemcpyAsync(ng.c[0].nb, o.nb, N * 2 * D * 4, cudaMemcpyDeviceToDevice, sm), what);
        CUDA_TRY(cudaMemcpyAsync(ng.c[0].p, o.p, N * 8, cudaMemcpyDeviceToDevice, sm), what);
        CUDA_TRY(cudaMemcpyAsync(ng.c[0].rate, o.rate, N * 8, cudaMemcpyDeviceToDevice, sm), what);
    }
    CUDA_TRY(cudaMemsetAsync(ng.table, 0xff, (ng.hmask + 1) * 8, sm), what);
    /* every growth mark cleared: a step that overflowed marked items whose
     * cells were not made */
    CUDA_TRY(cudaMemsetAsync(ng.done, 0, C * D, sm), what);
    k_clear_keys<<<blocks_for((long long)(C - n) * D), THREADS, 0, sm>>>(ng.c[0].key, (long long)n * D,
                                                                         (long long)C * D);
    CUDA_TRY(cudaGetLastError(), what);
    CUDA_TRY(cudaStreamSynchronize(sm), what);
    return DK_OK;
}

/* Makes the arrays hold at least want cells (prefer cells when that fits
 * in free device memory), keeping cells [0, n), and rebuilds the index.
 * Growth copies, so old and new arrays live together for a moment. */
dk_status reserve(Plan *p, long long want, long long prefer, int n, dk_msg *msg)
{
    const int D = p->d;
    if (want <= p->g.cap)
        return DK_OK;
    if (prefer < want)
        prefer = want;
    if (want > (long long)INT32_MAX) {
        dk_msg_set(msg, "cuda gbees: the grid would need more than 2^31 - 1 cells (%lld wanted)", want);
        return DK_ERR_OUT_OF_MEMORY;
    }
    if (prefer > (long long)INT32_MAX)
        prefer = INT32_MAX;
    size_t free_b = 0, total_b = 0;
    if (dk_cuda_failed(cudaMemGetInfo(&free_b, &total_b)))
        free_b = (size_t)-1;
    const size_t margin = (size_t)256 << 20;
    long long cap = prefer;
    while (cap > want && grid_bytes(cap, D, NULL) + margin > free_b)
        cap = want + (cap - want) / 2;
    unsigned long long hcap;
    size_t total = grid_bytes(cap, D, &hcap);
    void *mem = NULL;
    if (dk_cuda_failed(cudaMalloc(&mem, total))) {
        dk_msg_set(msg,
                   "cuda gbees: out of device memory growing the grid from %d to %lld cells (%.2f GB more; %.2f GB "
                   "free of %.2f GB)",
                   p->g.cap, cap, total / 1e9, free_b / 1e9, total_b / 1e9);
        return DK_ERR_OUT_OF_MEMORY;
    }
    size_t C = (size_t)cap;
    size_t sizes[] = {align256(C * D * 4), align256(C * D * 8), align256(C * 2 * D * 4), align256(C * 8),
                      align256(C * 8),     align256(C * D * 8), align256(C * D * 8),     align256(C * 2 * D * 8),
                      align256(C),         align256(C * 4),     align256(hcap * 8), align256(C * D)};
    char *at = (char *)mem;
    void *ptr[12];
    for (int j = 0; j < 12; j++) {
        ptr[j] = at;
        at += sizes[j];
    }
    Dev ng = p->g;
    ng.c[0].key = (int32_t *)ptr[0];
    ng.c[0].v = (double *)ptr[1];
    ng.c[0].nb = (int32_t *)ptr[2];
    ng.c[0].p = (double *)ptr[3];
    ng.c[0].rate = (double *)ptr[4];
    ng.flux = (double *)ptr[5];
    ng.wave = (double *)ptr[6];
    ng.back = (double *)ptr[7];
    ng.keep = (uint8_t *)ptr[8];
    ng.remap = (int32_t *)ptr[9];
    ng.table = (unsigned long long *)ptr[10];
    ng.done = (uint8_t *)ptr[11];
    /* pruning's compaction target, laid over the scratch (4d doubles per
     * cell hold the 5d + 4 words of a cell for d >= 2) */
    ng.c[1].nb = (int32_t *)ng.flux;
    ng.c[1].v = ng.wave;
    ng.c[1].key = (int32_t *)ng.back;
    ng.c[1].p = (double *)((char *)ng.back + align256(C * D * 4));
    ng.c[1].rate = (double *)((char *)ng.back + align256(C * D * 4) + align256(C * 8));
    ng.hmask = hcap - 1;
    ng.cap = (int)cap;
    dk_status st = fill_grown(p, ng, n, msg);
    if (st != DK_OK) {
        cudaFree(mem);
        return st;
    }
    if (p->cells_mem)
        cudaFree(p->cells_mem);
    p->cells_mem = mem;
    p->g = ng;
    p->hs.n = n;
    p->hs.n_alloc = (unsigned)n;
    p->hs.overflow = 0;
    p->hs.maxbits[0] = p->hs.maxbits[1] = 0;
    const char *what = "rebuilding the gbees index";
    if ((st = copy_head_in(p, what, msg)) != DK_OK)
        return st;
    if (n > 0) {
        p->k->rebuild<<<blocks_for(n), THREADS, 0, p->dev->stream>>>(p->g, p->hs.cur, n);
        CUDA_TRY(cudaGetLastError(), what);
    }
    return copy_head_out(p, what, msg);
}

/* After a growth that ran out of room: the same cells, more room (twice as
 * much where it fits). */
dk_status regrow(Plan *p, dk_msg *msg)
{
    p->hs.status = ST_OK;
    long long cap = p->g.cap;
    return reserve(p, cap + cap / 8 + 1024, 2 * cap, p->hs.n, msg);
}

void plan_destroy(void *handle)
{
    Plan *p = (Plan *)handle;
    if (!p)
        return;
    cudaSetDevice(p->dev->ordinal);
    if (p->profile && p->hs.steps) {
        const char *names[PH_N] = {"grow", "link+waves", "fluxes", "apply+sum", "prune"};
        double all = 0.0;
        for (int q = 0; q < PH_N; q++)
            all += (double)p->hs.prof[q];
        fprintf(stderr, "gbees cuda profile: %llu steps, %llu cell-steps, %llu launches; coop kernel phases:",
                (unsigned long long)p->hs.steps, (unsigned long long)p->hs.cell_steps, p->launches);
        for (int q = 0; q < PH_N; q++)
            fprintf(stderr, " %s %.3f ms (%.2f us/step)", names[q], p->hs.prof[q] * 1e-6,
                    p->hs.prof[q] * 1e-3 / (double)p->hs.steps);
        fprintf(stderr, "; total %.3f ms\n", all * 1e-6);
        const char *ops[5] = {"init", "advance", "update", "snapshot", "plan"};
        fprintf(stderr, "gbees cuda profile: host wall time per operation:");
        for (int q = 0; q < 5; q++)
            fprintf(stderr, " %s %.3f ms (%llu calls)", ops[q], p->wall[q] * 1e3, p->calls[q]);
        fprintf(stderr, "\n");
    }
    if (p->cells_mem)
        cudaFree(p->cells_mem);
    if (p->st)
        cudaFree(p->st);
    if (p->snap)
        cudaFree(p->snap);
    (void)cudaGetLastError();
    free(p);
}

const char *const cuda_gbees_variants[] = {"auto", "coop", "dp", "host", NULL};

/* The plan's grids, its device state and its first arrays; the caller
 * destroys p on failure. */
dk_status plan_fill(Plan *p, dk_msg *msg)
{
    const dk_cuda_device *dev = p->dev;
    const Kernels *k = p->k;
    const char *what = "preparing the gbees plan";
    int per_sm = 0, per_sm_init = 0;
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, p->coop, THREADS, 0), what);
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_init, k->init, THREADS, 0), what);
    void *state = NULL;
    CUDA_TRY(cudaMalloc(&state, sizeof(State)), what);
    p->st = (State *)state;
    if (per_sm < 1 || per_sm_init < 1) {
        dk_msg_set(msg, "cuda gbees: no block of the gbees kernels fits on an SM");
        return DK_ERR_BACKEND;
    }
    p->coop_max = per_sm * dev->sm_count;
    p->init_max = per_sm_init * dev->sm_count;
    if (p->coop_max > MAX_PARTS)
        p->coop_max = MAX_PARTS;
    if (p->init_max > MAX_PARTS)
        p->init_max = MAX_PARTS;
    p->g.st = p->st;
    memset(&p->hs, 0, sizeof p->hs);
    CUDA_TRY(cudaMemsetAsync(p->st, 0, sizeof(State), dev->stream), what);
    CUDA_TRY(cudaStreamSynchronize(dev->stream), what);
    return reserve(p, 65536, 65536, 0, msg);
}

dk_status plan_create(void *device, const dk_gbees_setup *setup, void **out, dk_msg *msg)
{
    const double t_create = wall_now();
    dk_cuda_device *dev = (dk_cuda_device *)device;
    dk_status st = dk_cuda_enter(dev, msg);
    if (st != DK_OK)
        return st;
    const Kernels *k = pick_kernels(setup->model->name, setup->dim);
    if (!k) {
        dk_msg_set(msg, "cuda gbees: model %s in %d dimensions has no device code (models come from "
                   "algorithms/gbees/models/all.h)", setup->model->name, setup->dim);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    Plan *p = (Plan *)calloc(1, sizeof *p);
    if (!p) {
        dk_msg_set(msg, "cuda gbees: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    p->dev = dev;
    p->s = *setup;
    p->k = k;
    p->d = setup->dim;
    p->variant = V_AUTO;
    if (setup->variant && !strcmp(setup->variant, "coop"))
        p->variant = V_COOP;
    else if (setup->variant && !strcmp(setup->variant, "dp"))
        p->variant = V_DP;
    else if (setup->variant && !strcmp(setup->variant, "host"))
        p->variant = V_HOST;
    const char *profile = dk_tuning_string("DAKIT_GBEES_CUDA_PROFILE");
    p->profile = profile && strcmp(profile, "0");
    const char *cpt = dk_tuning_string("DAKIT_GBEES_CUDA_CPT"); /* a fraction: read as a string */
    p->cpt = cpt ? atof(cpt) : 0.5;
    if (!(p->cpt > 0.0))
        p->cpt = 0.5;
    p->fixed_blocks = (int)dk_tuning_long("DAKIT_GBEES_CUDA_BLOCKS", 0, 1, INT_MAX);
    p->auto_items = dk_tuning_long("DAKIT_GBEES_CUDA_AUTO_ITEMS", 1l << 19, 0, LONG_MAX);
    Dev &g = p->g;
    for (int i = 0; i < p->d; i++) {
        g.center[i] = setup->center[i];
        g.dx[i] = setup->dx[i];
    }
    for (int i = 0; i < setup->model->ncoef && i < DK_GBEES_MAX_COEF; i++)
        g.coef[i] = setup->model->coef[i];
    g.thr = setup->threshold;
    g.cfl = setup->cfl;
    g.del_step = setup->del_step;
    /* blocks per SM the coop kernel's registers are capped for: 2, or 3 */
    p->coop = dk_tuning_long("DAKIT_GBEES_CUDA_OCC", 2, 2, 3) == 3 ? k->coop3 : k->coop;
    st = plan_fill(p, msg);
    if (st != DK_OK) {
        plan_destroy(p);
        return st;
    }
    p->wall[OP_CREATE] = wall_now() - t_create;
    p->calls[OP_CREATE] = 1;
    *out = p;
    return DK_OK;
}

dk_status init_body(void *handle, const double *mean, const double *inv, double lognorm, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    const int d = p->d;
    InitArgs ia;
    memset(&ia, 0, sizeof ia);
    ia.lognorm = lognorm;
    for (int i = 0; i < d; i++) {
        ia.mean[i] = mean[i];
        double r = (mean[i] - p->s.center[i]) / p->s.dx[i];
        if (!(fabs(r) < 1073741824.0)) {
            dk_msg_set(msg, "cuda gbees: the mean is %g cells from the grid centre along axis %d (at most 2^30)",
                       r, i);
            return DK_ERR_INVALID_ARGUMENT;
        }
        ia.root[i] = (int32_t)lround(r);
    }
    memcpy(ia.inv, inv, (size_t)d * d * sizeof *inv);
    memset(&p->hs, 0, HEAD);
    p->hs.scale = 1.0;
    cudaStream_t sm = p->dev->stream;
    const char *what = "starting the gbees grid";
    CUDA_TRY(cudaMemsetAsync(p->g.table, 0xff, (p->g.hmask + 1) * 8, sm), what);
    CUDA_TRY(cudaMemsetAsync(p->g.done, 0, (size_t)p->g.cap * d, sm), what);
    k_clear_keys<<<blocks_for((long long)p->g.cap * d), THREADS, 0, sm>>>(p->g.c[0].key, 0,
                                                                         (long long)p->g.cap * d);
    CUDA_TRY(cudaGetLastError(), what);
    if ((st = copy_head_in(p, what, msg)) != DK_OK)
        return st;
    for (;;) {
        void *args[] = {&p->g, &ia};
        what = "running the gbees initialization kernel";
        CUDA_TRY(cudaLaunchCooperativeKernel((const void *)p->k->init, dim3(p->init_max), dim3(THREADS), args, 0, sm),
                 what);
        if ((st = copy_head_out(p, what, msg)) != DK_OK)
            return st;
        if (p->hs.status == ST_NOMASS) {
            dk_msg_set(msg, "the initial density has no mass on the grid");
            return DK_ERR_INVALID_ARGUMENT;
        }
        if (p->hs.status != ST_CAPACITY)
            return DK_OK;
        /* the level [lo, n_alloc) is made again: keep the cells up to its end */
        int lo = p->hs.lo;
        p->hs.n = (int)(p->hs.n_alloc < (unsigned)p->g.cap ? p->hs.n_alloc : (unsigned)p->g.cap);
        int keep = p->hs.n;
        p->hs.status = ST_OK;
        st = reserve(p, (long long)p->g.cap + p->g.cap / 4 + 1024, 4ll * p->g.cap, keep, msg);
        if (st != DK_OK)
            return st;
        p->hs.lo = lo;
        if ((st = copy_head_in(p, "resuming the gbees initialization", msg)) != DK_OK)
            return st;
    }
}

dk_status status_error(Plan *p, dk_msg *msg)
{
    switch (p->hs.status) {
    case ST_COLLAPSE:
        dk_msg_set(msg, "the time step collapsed to %g at t = %g (velocities too large for the grid)", p->hs.err_a,
                   p->hs.err_b);
        return DK_ERR_INVALID_ARGUMENT;
    case ST_MASS:
        dk_msg_set(msg, "all probability left the grid at t = %g", p->hs.err_b);
        return DK_ERR_INVALID_ARGUMENT;
    case ST_PRUNED:
        dk_msg_set(msg, "all probability was pruned at t = %g", p->hs.err_b);
        return DK_ERR_INVALID_ARGUMENT;
    case ST_LAUNCH:
        dk_msg_set(msg, "cuda gbees: a device-side launch failed at t = %g: %s (dynamic parallelism)", p->hs.t,
                   cudaGetErrorName((cudaError_t)(int)p->hs.err_a));
        return DK_ERR_BACKEND;
    default:
        dk_msg_set(msg, "cuda gbees: unexpected state %d", p->hs.status);
        return DK_ERR_BACKEND;
    }
}

int coop_blocks(const Plan *p)
{
    if (p->fixed_blocks > 0)
        return p->fixed_blocks < p->coop_max ? p->fixed_blocks : p->coop_max;
    /* growth, links and fluxes take d items per cell */
    long long b = (long long)ceil((double)p->hs.n * p->d / (THREADS * p->cpt));
    return (int)(b < 1 ? 1 : b > p->coop_max ? p->coop_max : b);
}

dk_status advance_body(void *handle, double t_target, int max_steps, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    cudaStream_t sm = p->dev->stream;
    const unsigned long long steps0 = p->hs.steps;
    const char *what = "running the gbees time steps";
    for (;;) {
        long long left = max_steps > 0 ? max_steps - (long long)(p->hs.steps - steps0) : 0;
        if (!(p->hs.t < t_target) || (max_steps > 0 && left <= 0))
            return DK_OK;
        /* room for the next growths, so that a step rarely has to stop */
        if (2ll * p->hs.n > p->g.cap && 2ll * p->g.cap <= INT32_MAX) {
            /* best effort: where twice the room does not fit, growth waits
             * until a step runs out of it */
            size_t free_b = 0, total_b = 0;
            if (!dk_cuda_failed(cudaMemGetInfo(&free_b, &total_b)) &&
                grid_bytes(2ll * p->g.cap, p->d, NULL) + ((size_t)256 << 20) < free_b &&
                (st = reserve(p, 2ll * p->g.cap, 2ll * p->g.cap, p->hs.n, msg)) != DK_OK)
                return st;
        }
        int mode = p->variant;
        if (mode == V_AUTO)
            mode = (long long)p->hs.n * p->d >= p->auto_items ? V_DP : V_COOP;
        if (mode == V_COOP) {
            void *args[] = {&p->g, &t_target, &left};
            p->launches++;
            CUDA_TRY(cudaLaunchCooperativeKernel((const void *)p->coop, dim3(coop_blocks(p)), dim3(THREADS), args,
                                                 0, sm),
                     what);
        } else {
            p->hs.t_target = t_target;
            p->hs.max_steps = left;
            p->hs.done = 0;
            if ((st = copy_head_in(p, what, msg)) != DK_OK)
                return st;
            if (mode == V_DP) {
                p->k->begin_dp<<<1, 1, 0, sm>>>(p->g);
                p->launches++;
            } else {
                /* one step per round trip; phase grids from the last count
                 * read back (with room: they stride over whatever grew) */
                int b = blocks_for(p->hs.n + p->hs.n / 4 + THREADS);
                const Kernels *k = p->k;
                k->begin_host<<<1, 1, 0, sm>>>(p->g);
                k->grow<<<blocks_for(p->hs.n), THREADS, 0, sm>>>(p->g);
                k->mid<<<1, 32, 0, sm>>>(p->g);
                k->link<<<b, THREADS, 0, sm>>>(p->g);
                k->flux<<<b, THREADS, 0, sm>>>(p->g);
                k->apply<<<b, THREADS, 0, sm>>>(p->g);
                k->end<<<1, THREADS, 0, sm>>>(p->g);
                p->launches += 7;
                if ((p->hs.steps + 1) % (unsigned long long)p->s.del_step == 0) {
                    k->mark<<<b, THREADS, 0, sm>>>(p->g);
                    k_prune_scan<<<1, 1024, 0, sm>>>(p->g);
                    k->remap<<<b, THREADS, 0, sm>>>(p->g);
                    k->move<<<b, THREADS, 0, sm>>>(p->g);
                    k->back<<<b, THREADS, 0, sm>>>(p->g);
                    k->pruned<<<1, THREADS, 0, sm>>>(p->g);
                    p->launches += 6;
                }
            }
            CUDA_TRY(cudaGetLastError(), what);
        }
        if ((st = copy_head_out(p, what, msg)) != DK_OK)
            return st;
        if (p->hs.status == ST_CAPACITY) {
            if ((st = regrow(p, msg)) != DK_OK)
                return st;
            continue;
        }
        if (p->hs.status != ST_OK)
            return status_error(p, msg);
    }
}

dk_status update_body(void *handle, const double *y, const double *r_inv, int m, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    UpdArgs ua;
    memset(&ua, 0, sizeof ua);
    ua.m = m;
    memcpy(ua.y, y, (size_t)m * sizeof *y);
    memcpy(ua.rinv, r_inv, (size_t)m * m * sizeof *r_inv);
    cudaStream_t sm = p->dev->stream;
    int b = blocks_for(p->hs.n);
    p->k->update<<<b, THREADS, 0, sm>>>(p->g, ua);
    double parts[MAX_PARTS];
    const char *what = "running the gbees measurement update";
    CUDA_TRY(cudaGetLastError(), what);
    CUDA_TRY(cudaMemcpyAsync(parts, p->st->part_sum, (size_t)b * sizeof(double), cudaMemcpyDeviceToHost, sm), what);
    CUDA_TRY(cudaStreamSynchronize(sm), what);
    double total = 0.0;
    for (int i = 0; i < b; i++)
        total += parts[i];
    if (!(total > 0.0) || !isfinite(total)) {
        dk_msg_set(msg, "the measurement at t = %g has no support on the grid (likelihood zero everywhere)",
                   p->hs.t);
        return DK_ERR_INVALID_ARGUMENT;
    }
    p->hs.scale = 1.0 / total;
    CUDA_TRY(cudaMemcpyAsync(&p->st->scale, &p->hs.scale, sizeof(double), cudaMemcpyHostToDevice, sm), what);
    CUDA_TRY(cudaStreamSynchronize(sm), what);
    return DK_OK;
}

dk_status snapshot_body(void *handle, double *out, size_t max, size_t *cells, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    *cells = (size_t)p->hs.n;
    size_t rows = max < (size_t)p->hs.n ? max : (size_t)p->hs.n;
    if (!out || rows == 0)
        return DK_OK;
    if (rows > p->snap_rows) {
        if (p->snap)
            cudaFree(p->snap);
        p->snap = NULL;
        p->snap_rows = 0;
        if (dk_cuda_failed(cudaMalloc(&p->snap, rows * (p->d + 1) * sizeof(double)))) {
            p->snap = NULL;
            dk_msg_set(msg, "cuda gbees: out of device memory for a snapshot of %zu cells", rows);
            return DK_ERR_OUT_OF_MEMORY;
        }
        p->snap_rows = rows;
    }
    cudaStream_t sm = p->dev->stream;
    p->k->snapshot<<<blocks_for((long long)rows), THREADS, 0, sm>>>(p->g, p->snap, (int)rows);
    const char *what = "copying a gbees snapshot";
    CUDA_TRY(cudaGetLastError(), what);
    CUDA_TRY(cudaMemcpyAsync(out, p->snap, rows * (p->d + 1) * sizeof(double), cudaMemcpyDeviceToHost, sm), what);
    CUDA_TRY(cudaStreamSynchronize(sm), what);
    return DK_OK;
}

/* The operations, timed on the host under DAKIT_GBEES_CUDA_PROFILE (the
 * split of a run's wall time between steps, snapshots and the rest). */
#define GB_TIMED(op, call)                                                                                             \
    Plan *p = (Plan *)handle;                                                                                          \
    if (!p->profile)                                                                                                   \
        return call;                                                                                                   \
    double t0 = wall_now();                                                                                            \
    dk_status r = call;                                                                                                \
    p->wall[op] += wall_now() - t0;                                                                                    \
    p->calls[op]++;                                                                                                    \
    return r;

dk_status init(void *handle, const double *mean, const double *inv, double lognorm, dk_msg *msg)
{
    GB_TIMED(OP_INIT, init_body(handle, mean, inv, lognorm, msg))
}

dk_status advance(void *handle, double t_target, int max_steps, dk_msg *msg)
{
    GB_TIMED(OP_ADVANCE, advance_body(handle, t_target, max_steps, msg))
}

dk_status update(void *handle, const double *y, const double *r_inv, int m, dk_msg *msg)
{
    GB_TIMED(OP_UPDATE, update_body(handle, y, r_inv, m, msg))
}

dk_status snapshot(void *handle, double *out, size_t max, size_t *cells, dk_msg *msg)
{
    GB_TIMED(OP_SNAPSHOT, snapshot_body(handle, out, max, cells, msg))
}

void stats(void *handle, dk_gbees_stats *s)
{
    Plan *p = (Plan *)handle;
    s->t = p->hs.t;
    s->steps = p->hs.steps;
    s->cell_steps = p->hs.cell_steps;
    s->cells = (size_t)p->hs.n;
    s->dt = p->hs.dt;
}

} // namespace

extern "C" const dk_gbees_ops dk_cuda_gbees_ops = {
    .variants = cuda_gbees_variants,
    .plan_create = plan_create,
    .init = init,
    .advance = advance,
    .update = update,
    .snapshot = snapshot,
    .stats = stats,
    .plan_destroy = plan_destroy,
};
