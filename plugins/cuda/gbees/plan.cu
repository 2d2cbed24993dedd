/* dakit cuda plugin, gbees: the plan (its arrays, their growth and the
 * index rebuild), the entries, the choice of variant for each advance
 * (auto: coop for small grids, dp for large ones) and the ops table. */
#include "gbees.cuh"

using namespace dk_cuda_gbees;

namespace {

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
    CUDA_TRY(cudaMemcpyAsync(p->st, &p->hs, HEAD, cudaMemcpyDefault, p->dev->stream), what);
    return DK_OK;
}

dk_status copy_head_out(Plan *p, const char *what, dk_msg *msg)
{
    CUDA_TRY(cudaMemcpyAsync(&p->hs, p->st, HEAD, cudaMemcpyDefault, p->dev->stream), what);
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
        CUDA_TRY(cudaMemcpyAsync(ng.c[0].key, o.key, N * D * 4, cudaMemcpyDefault, sm), what);
        CUDA_TRY(cudaMemcpyAsync(ng.c[0].v, o.v, N * D * 8, cudaMemcpyDefault, sm), what);
        CUDA_TRY(cudaMemcpyAsync(ng.c[0].nb, o.nb, N * 2 * D * 4, cudaMemcpyDefault, sm), what);
        CUDA_TRY(cudaMemcpyAsync(ng.c[0].p, o.p, N * 8, cudaMemcpyDefault, sm), what);
        CUDA_TRY(cudaMemcpyAsync(ng.c[0].rate, o.rate, N * 8, cudaMemcpyDefault, sm), what);
    }
    CUDA_TRY(cudaMemsetAsync(ng.table, 0xff, (ng.hmask + 1) * 8, sm), what);
    /* every growth mark cleared: a step that overflowed marked items whose
     * cells were not made */
    CUDA_TRY(cudaMemsetAsync(ng.done, 0, C * D, sm), what);
    p->grid_k->clear_keys<<<blocks_for((long long)(C - n) * D), THREADS, 0, sm>>>(ng.c[0].key, (long long)n * D,
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
        p->grid_k->rebuild<<<blocks_for(n), THREADS, 0, p->dev->stream>>>(p->g, p->hs.cur, n);
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
    const char *what = "preparing the gbees plan";
    int per_sm = 0, per_sm_init = 0;
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, p->coop, THREADS, 0), what);
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_init, p->grid_k->init, THREADS, 0), what);
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
    const CoopKernels *coop_k = coop_kernels(setup->model->name, setup->dim);
    const StepKernels *step_k = step_kernels(setup->model->name, setup->dim);
    const GridKernels *grid_k = grid_kernels(setup->model->name, setup->dim);
    if (!coop_k || !step_k || !grid_k) {
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
    p->coop_k = coop_k;
    p->step_k = step_k;
    p->grid_k = grid_k;
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
    p->coop = dk_tuning_long("DAKIT_GBEES_CUDA_OCC", 2, 2, 3) == 3 ? coop_k->coop3 : coop_k->coop;
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
    p->grid_k->clear_keys<<<blocks_for((long long)p->g.cap * d), THREADS, 0, sm>>>(p->g.c[0].key, 0,
                                                                                 (long long)p->g.cap * d);
    CUDA_TRY(cudaGetLastError(), what);
    if ((st = copy_head_in(p, what, msg)) != DK_OK)
        return st;
    for (;;) {
        void *args[] = {&p->g, &ia};
        what = "running the gbees initialization kernel";
        CUDA_TRY(cudaLaunchCooperativeKernel((const void *)p->grid_k->init, dim3(p->init_max), dim3(THREADS), args, 0, sm),
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


dk_status advance_body(void *handle, double t_target, int max_steps, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    const unsigned long long steps0 = p->hs.steps;
    const char *what = "running the gbees time steps";
    if (p->hs.open && p->hs.t < t_target) {
        /* first, and before the arrays grow (which keeps neither a cut
         * step's start nor its fluxes): the step cut at the last target */
        const double part = gb_step_part(p->hs.t0, p->hs.dt, t_target);
        const bool whole = !(part < 1.0);
        p->hs.part = part;
        p->hs.open = !whole;
        p->hs.t = gb_step_time(p->hs.t0, p->hs.dt, t_target);
        if ((st = copy_head_in(p, what, msg)) != DK_OK)
            return st;
        resume_launch(p, whole && p->hs.steps % (unsigned long long)p->s.del_step == 0);
        CUDA_TRY(cudaGetLastError(), what);
        if ((st = copy_head_out(p, what, msg)) != DK_OK)
            return st;
        if (p->hs.status != ST_OK)
            return status_error(p, msg);
    }
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
            CUDA_TRY(coop_launch(p, t_target, left), what);
        } else {
            p->hs.t_target = t_target;
            p->hs.max_steps = left;
            p->hs.done = 0;
            if ((st = copy_head_in(p, what, msg)) != DK_OK)
                return st;
            steps_launch(p, mode == V_DP);
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
    if (p->hs.open) {
        /* the update ends a step cut here (engine.h, gb_close_step) */
        const char *what = "pruning before the gbees measurement update";
        p->hs.open = 0;
        if ((st = copy_head_in(p, what, msg)) != DK_OK)
            return st;
        if (p->hs.steps % (unsigned long long)p->s.del_step == 0)
            prune_launch(p, blocks_for(p->hs.n));
        CUDA_TRY(cudaGetLastError(), what);
        if ((st = copy_head_out(p, what, msg)) != DK_OK)
            return st;
        if (p->hs.status != ST_OK)
            return status_error(p, msg);
    }
    UpdArgs ua;
    memset(&ua, 0, sizeof ua);
    ua.m = m;
    memcpy(ua.y, y, (size_t)m * sizeof *y);
    memcpy(ua.rinv, r_inv, (size_t)m * m * sizeof *r_inv);
    cudaStream_t sm = p->dev->stream;
    int b = blocks_for(p->hs.n);
    p->grid_k->update<<<b, THREADS, 0, sm>>>(p->g, ua);
    double parts[MAX_PARTS];
    const char *what = "running the gbees measurement update";
    CUDA_TRY(cudaGetLastError(), what);
    CUDA_TRY(cudaMemcpyAsync(parts, p->st->part_sum, (size_t)b * sizeof(double), cudaMemcpyDefault, sm), what);
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
    CUDA_TRY(cudaMemcpyAsync(&p->st->scale, &p->hs.scale, sizeof(double), cudaMemcpyDefault, sm), what);
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
    p->grid_k->snapshot<<<blocks_for((long long)rows), THREADS, 0, sm>>>(p->g, p->snap, (int)rows);
    const char *what = "copying a gbees snapshot";
    CUDA_TRY(cudaGetLastError(), what);
    CUDA_TRY(cudaMemcpyAsync(out, p->snap, rows * (p->d + 1) * sizeof(double), cudaMemcpyDefault, sm), what);
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
