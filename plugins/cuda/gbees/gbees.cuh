/* dakit cuda plugin, gbees: the whole propagation on the device; what the
 * variants' files share.
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
 *   link   dt = cfl / max rate (the collapse check; a step that passes
 *          the target is cut there, gb_step_part);
 *          new cells find their 2d neighbours in the table and patch the
 *          links of old neighbours (each old slot has one writer); every
 *          cell writes the waves of its present forward faces and its back
 *          neighbour's terms, and a new cell writes those of the old cells
 *          whose link it patched (the same value as the owner would: an old
 *          cell that sees the link stale skips, never writes a zero);
 *   flux   gb_fluxes' second pass, unchanged;
 *   apply  p -= net flux (its part, for a cut step), clipped at zero;
 *          block sums of p.
 * A cut step keeps its start in the wave scratch (free once the fluxes
 * are made) and the next advance finishes it from there with the same
 * fluxes, before anything else (resume_launch, every variant): it counts
 * as one step and is pruned once finished; a measurement update ends it
 * where it was cut (engine.h, gb_close_step).
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
 * Files: coop.cu the cooperative kernel (variant coop); steps.cu the
 * phase kernels and the schedulers (variants dp and host); grid.cu the
 * kernels every variant uses (initialization, index rebuild, measurement
 * update, snapshot); phases.cuh the phases of a step, which coop.cu and
 * steps.cu run; plan.cu the plan, the choice of variant per advance, the
 * growth of the arrays and the ops table. Each kernel file makes its
 * kernels for every (model, dimension) and gives them to the plan as a
 * table (pick).
 *
 * Tuning knobs (dk_tuning_*): DAKIT_GBEES_CUDA_PROFILE=1 prints, at plan
 * destruction, the coop kernel's time per phase (%globaltimer at the
 * barriers) and the host wall time spent in each plugin operation to
 * stderr: a developer's tool. DAKIT_GBEES_CUDA_CPT=k sizes the coop grid at
 * k growth/flux items (cell, axis) per thread (default 0.5),
 * DAKIT_GBEES_CUDA_BLOCKS=b fixes it, DAKIT_GBEES_CUDA_OCC=3 takes the coop
 * kernel capped at 80 registers (3 blocks per SM, a few spills). */
#ifndef DAKIT_CUDA_GBEES_CUH
#define DAKIT_CUDA_GBEES_CUH

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

#include "../cuda_internal.h"

/* The models as device code: the same files the host compiles. GB_MODEL
 * records each model's dimension rule for picking the instances below. */
#define GB_MODEL_FN __device__ static __forceinline__
#define GB_MODEL(name_, about_, dim_, min_dim_, meas_dim_, ncoef_, ...)                                                \
    struct gb_info_##name_ {                                                                                           \
        static constexpr int dim = dim_, min_dim = min_dim_;                                                           \
    };
#include <dakit/kit/gbees/models/all.h>

namespace cg = cooperative_groups;

namespace dk_cuda_gbees {

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
    int n_old, kept, cnt_blocks, lo;
    int open;         /* a step was cut at the last target: its start is in the wave scratch */
    double t, dt, scale, dt_step, t_target;
    double part, t0;  /* the part of the step's fluxes taken (gb_step_part); where the open step started */
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
    double part; /* of the step's fluxes to take (gb_step_part) */
    bool resume; /* finishing a cut step: from its start in the wave scratch */
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

#define GB_FLUX_FN __host__ __device__ static __forceinline__
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

template <int NT> static __device__ __forceinline__ double block_sum(double x)
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
template <int NT> static __device__ __forceinline__ int block_scan(int x, int *total)
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

__host__ __device__ __forceinline__ int blocks_for(long long n)
{
    long long b = (n + THREADS - 1) / THREADS;
    return (int)(b < 1 ? 1 : b > MAX_PARTS ? MAX_PARTS : b);
}

/* ---- the instances: one set of kernels per (model, dimension) ---- */

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
 * model allows the dimension: Make<M, D>::table(), a file's table of its
 * kernels (type T) for model M in D dimensions. */
template <class T, template <class, int> class Make, class M, class Info, int D> const T *pick_dim(int d)
{
    if constexpr (D > DK_GBEES_MAX_DIM) {
        (void)d;
        return nullptr;
    } else {
        if (d == D) {
            if constexpr (Info::dim ? D == Info::dim : D >= Info::min_dim)
                return Make<M, D>::table();
            else
                return nullptr;
        }
        return pick_dim<T, Make, M, Info, D + 1>(d);
    }
}

#define GB_PICK(name)                                                                                                  \
    if (!strcmp(model, #name))                                                                                         \
        return pick_dim<T, Make, model_##name, gb_info_##name, 1>(d);

/* The table of the model's kernels in d dimensions; NULL: none. */
template <class T, template <class, int> class Make> const T *pick(const char *model, int d)
{
    GB_MODELS(GB_PICK)
    return nullptr;
}

/* coop.cu: the cooperative kernel, its registers capped for 2 or 3 blocks
 * per SM. */
struct CoopKernels {
    void (*coop)(Dev, double, long long);
    void (*coop3)(Dev, double, long long);
};

/* steps.cu: the schedulers and phase kernels. */
struct StepKernels {
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
    void (*resume)(Dev);
    void (*resumed)(Dev);
};

/* grid.cu: the kernels every variant uses. */
struct GridKernels {
    void (*init)(Dev, InitArgs);
    void (*rebuild)(Dev, int, int);
    void (*update)(Dev, UpdArgs);
    void (*snapshot)(Dev, double *, int);
    void (*clear_keys)(int32_t *, long long, long long);
};

const CoopKernels *coop_kernels(const char *model, int d);
const StepKernels *step_kernels(const char *model, int d);
const GridKernels *grid_kernels(const char *model, int d);

/* ---- host side ---- */

struct Plan {
    dk_cuda_device *dev;
    dk_gbees_setup s;
    const CoopKernels *coop_k;
    const StepKernels *step_k;
    const GridKernels *grid_k;
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

/* coop.cu: one launch of the cooperative kernel, up to t_target or `left`
 * steps (0: no limit). */
cudaError_t coop_launch(Plan *p, double t_target, long long left);

/* steps.cu: one launch of the steps up to the state's target (dp: the
 * schedulers launch the phases on the device), or one step (host: the
 * host launches the phases). */
void steps_launch(Plan *p, bool dp);
/* steps.cu, for every variant, queued: resume_launch finishes the step
 * cut at the last target (the part hs.part of its fluxes, from its start)
 * and, with `prune`, prunes after it; prune_launch prunes (over b blocks
 * of cells; nothing while hs.open). */
void resume_launch(Plan *p, bool prune);
void prune_launch(Plan *p, int b);

} // namespace dk_cuda_gbees

#endif
