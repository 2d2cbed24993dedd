/* dakit cuda plugin, gbees: variant coop, one cooperative kernel (k_coop)
 * that runs every step up to the target, grid.sync() between the phases.
 * Chosen by "coop", and by "auto" while cells times d is below
 * DAKIT_GBEES_CUDA_AUTO_ITEMS (plan.cu). */
#include "phases.cuh"

using namespace dk_cuda_gbees;

namespace {

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
    s.resume = false;
    double t = st->t, start = st->t0, err_a = 0.0, err_b = 0.0;
    int open = st->open; /* 0: the host finished a cut step before the launch */
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
        s.dt = dt;
        s.part = gb_step_part(t, dt, t_target);
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
        open = s.part < 1.0;
        start = t;
        t = gb_step_time(t, dt, t_target);
        if (!(total > 0.0) || !isfinite(total)) {
            status = ST_MASS;
            err_b = t;
            break;
        }
        s.scale = 1.0 / total;
        if (!open && steps % (unsigned long long)g.del_step == 0) {
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
        st->t0 = start;
        st->open = open;
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

template <class M, int D> struct Make {
    static const CoopKernels *table()
    {
        static const CoopKernels k = {
            .coop = k_coop<M, D, 2>,
            .coop3 = k_coop<M, D, 3>,
        };
        return &k;
    }
};

int coop_blocks(const Plan *p)
{
    if (p->fixed_blocks > 0)
        return p->fixed_blocks < p->coop_max ? p->fixed_blocks : p->coop_max;
    /* growth, links and fluxes take d items per cell */
    long long b = (long long)ceil((double)p->hs.n * p->d / (THREADS * p->cpt));
    return (int)(b < 1 ? 1 : b > p->coop_max ? p->coop_max : b);
}

} // namespace

const CoopKernels *dk_cuda_gbees::coop_kernels(const char *model, int d)
{
    return pick<CoopKernels, Make>(model, d);
}

cudaError_t dk_cuda_gbees::coop_launch(Plan *p, double t_target, long long left)
{
    void *args[] = {&p->g, &t_target, &left};
    p->launches++;
    return cudaLaunchCooperativeKernel((const void *)p->coop, dim3(coop_blocks(p)), dim3(THREADS), args, 0,
                                       p->dev->stream);
}
