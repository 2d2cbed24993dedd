/* dakit cuda plugin, gbees: variants dp and host, a kernel per phase
 * (k_grow, k_link, k_flux, k_apply, k_prune_*) and one-block schedulers
 * (k_begin, k_mid, k_end, k_pruned) that hold the step's scalar logic;
 * and for every variant, the finishing of a step cut at the last target
 * (k_resume, k_resumed) and the pruning the host asks for.
 * dp: the host launches one scheduler and the schedulers tail-launch the
 * phases sized to the counts they read, then the next scheduler, up to the
 * target. host: the host launches the same kernels for one step and reads
 * the state back. dp is chosen by "dp", and by "auto" from
 * DAKIT_GBEES_CUDA_AUTO_ITEMS cells times d (plan.cu). */
#include "phases.cuh"

using namespace dk_cuda_gbees;

namespace {

/* ---- phase kernels ---- */

__device__ __forceinline__ Step load_step(const State *st)
{
    Step s;
    s.n_old = st->n_old;
    s.n = st->n;
    s.cur = st->cur;
    s.scale = st->scale;
    s.dt = st->dt_step;
    s.part = st->part;
    s.resume = false;
    return s;
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

/* The phases of a step cut at the last target, finished from its start:
 * apply (st->part of its fluxes), then its total (k_resumed). */
template <int D> __global__ void __launch_bounds__(THREADS) k_resume(Dev g)
{
    GB_PHASE_PROLOGUE
    s.resume = true;
    double part = block_sum<THREADS>(apply_phase<D>(g, s, i0, stride));
    if (threadIdx.x == 0)
        st->part_sum[blockIdx.x] = part;
    if (i0 == 0)
        st->nparts = gridDim.x;
}

/* Pruning follows only a step that was not cut (a cut one is pruned once
 * finished, or when an update ends it), which in the host variant the
 * host cannot know when it launches these. */
#define GB_PRUNE_PROLOGUE                                                                                              \
    GB_PHASE_PROLOGUE                                                                                                  \
    if (vload(st->open))                                                                                               \
        return;

template <int D> __global__ void __launch_bounds__(THREADS) k_prune_mark(Dev g)
{
    GB_PRUNE_PROLOGUE
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
    if (vload(st->status) != ST_OK || vload(st->open))
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
    GB_PRUNE_PROLOGUE
    (void)i0;
    (void)stride;
    prune_remap(g, s, st->offs[blockIdx.x]);
}

template <int D> __global__ void __launch_bounds__(THREADS) k_prune_move(Dev g)
{
    GB_PRUNE_PROLOGUE
    prune_move<D>(g, s, i0, stride);
}

template <int D> __global__ void __launch_bounds__(THREADS) k_prune_back(Dev g)
{
    GB_PRUNE_PROLOGUE
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
    st->part = gb_step_part(t, dt, tt);
    st->dt_step = dt;
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
    st->open = st->part < 1.0;
    st->t0 = st->t;
    st->t = gb_step_time(st->t, st->dt_step, st->t_target);
    st->dt = st->dt_step;
    st->steps++;
    st->cell_steps += (unsigned long long)st->n;
    st->done++;
    if (!rescale(st, total, ST_MASS) || !DP)
        return;
    if (!st->open && st->steps % (unsigned long long)g.del_step == 0) {
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
    if (vload(st->status) != ST_OK || vload(st->open))
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

/* The total of a finished cut step (k_resume) sets the scale. */
__global__ void __launch_bounds__(THREADS) k_resumed(Dev g)
{
    State *st = g.st;
    if (vload(st->status) != ST_OK)
        return;
    double total = sum_parts(st->part_sum, st->nparts);
    if (threadIdx.x == 0)
        rescale(st, total, ST_MASS);
}

template <class M, int D> struct Make {
    static const StepKernels *table()
    {
        static const StepKernels k = {
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
            .resume = k_resume<D>,
            .resumed = k_resumed,
        };
        return &k;
    }
};

} // namespace

const StepKernels *dk_cuda_gbees::step_kernels(const char *model, int d)
{
    return pick<StepKernels, Make>(model, d);
}

void dk_cuda_gbees::steps_launch(Plan *p, bool dp)
{
    cudaStream_t sm = p->dev->stream;
    if (dp) {
        p->step_k->begin_dp<<<1, 1, 0, sm>>>(p->g);
        p->launches++;
        return;
    }
    /* one step per round trip; phase grids from the last count
     * read back (with room: they stride over whatever grew) */
    int b = blocks_for(p->hs.n + p->hs.n / 4 + THREADS);
    const StepKernels *k = p->step_k;
    k->begin_host<<<1, 1, 0, sm>>>(p->g);
    k->grow<<<blocks_for(p->hs.n), THREADS, 0, sm>>>(p->g);
    k->mid<<<1, 32, 0, sm>>>(p->g);
    k->link<<<b, THREADS, 0, sm>>>(p->g);
    k->flux<<<b, THREADS, 0, sm>>>(p->g);
    k->apply<<<b, THREADS, 0, sm>>>(p->g);
    k->end<<<1, THREADS, 0, sm>>>(p->g);
    p->launches += 7;
    if ((p->hs.steps + 1) % (unsigned long long)p->s.del_step == 0)
        prune_launch(p, b);
}

void dk_cuda_gbees::prune_launch(Plan *p, int b)
{
    cudaStream_t sm = p->dev->stream;
    const StepKernels *k = p->step_k;
    k->mark<<<b, THREADS, 0, sm>>>(p->g);
    k_prune_scan<<<1, 1024, 0, sm>>>(p->g);
    k->remap<<<b, THREADS, 0, sm>>>(p->g);
    k->move<<<b, THREADS, 0, sm>>>(p->g);
    k->back<<<b, THREADS, 0, sm>>>(p->g);
    k->pruned<<<1, THREADS, 0, sm>>>(p->g);
    p->launches += 6;
}

void dk_cuda_gbees::resume_launch(Plan *p, bool prune)
{
    cudaStream_t sm = p->dev->stream;
    int b = blocks_for(p->hs.n);
    p->step_k->resume<<<b, THREADS, 0, sm>>>(p->g);
    p->step_k->resumed<<<1, THREADS, 0, sm>>>(p->g);
    p->launches += 2;
    if (prune)
        prune_launch(p, b);
}
