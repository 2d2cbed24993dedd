/* dakit cuda plugin, gauss: the plan, the chooser of each pass's solver
 * (plan_pass, plan_extended), the entries that run a plan, the ops table.
 * gauss.cuh says which solver does what. */
#include "gauss.cuh"

using namespace dk_cuda_gauss;

namespace {

/* The solver of each rf path (PATH_*, in the enum's order). */
const Solver *const rf_solvers[] = {&solver_reg, &solver_reg, &solver_tile, &solver_tile, &solver_gen, &solver_gen};
static_assert(sizeof rf_solvers / sizeof *rf_solvers == PATH_GEN_GLOBAL + 1, "a solver per path");

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
    if (plan_ext_tile(p, ps, lines)) {
        ps->solver = &solver_ext_tile;
        return;
    }
    ps->solver = &solver_extended;
    solver_extended.size(p, ps);
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
    ps->maxwin = maxwin;
    ps->solver = rf_solvers[ps->path];
    if (ps->solver->size)
        ps->solver->size(p, ps);
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
            if (ps->solver->prepare && (st = ps->solver->prepare(p, *ps, msg)) != DK_OK)
                goto fail;
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
        if (ps->solver->prepare && (st = ps->solver->prepare(p, *ps, msg)) != DK_OK)
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
    if (!plan_fused(p))
        plan_fused_iir(p);
    if ((st = plan_halo(p, msg)) != DK_OK)
        goto fail;
    *plan = p;
    return DK_OK;
fail:
    plan_free(p);
    return st;
}

cudaError_t launch(const Launch<float> &l) { return l.ps.solver->launch_f32(l); }
cudaError_t launch(const Launch<double> &l) { return l.ps.solver->launch_f64(l); }

template <typename T>
dk_status execute_t(Plan *p, const T *in, T *out, dk_msg *msg)
{
    cudaStream_t stream = p->dev->stream;
    T *tmp = (T *)p->tmp; /* NULL when every pass can run in place */
    const int P = p->npass;
    const size_t bytes = p->setup.count * sizeof(T);
    const char *what = p->dp ? "the gauss kernels (dp)" : "the gauss kernels";
    if constexpr (sizeof(T) == sizeof(float)) {
        if (p->fused_W && (const void *)in != (const void *)out) {
            CUDA_TRY(p->fused_iir ? launch_fused_iir(p, in, out, stream) : launch_fused(p, in, out, stream), what);
            return dk_cuda_finish(p->dev, what, msg);
        }
    }
    if (P == 0) {
        if (in != out)
            CUDA_TRY(cudaMemcpyAsync(out, in, bytes, cudaMemcpyDefault, stream), what);
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
            Launch<T> l{ps, src, dst, (T *)p->scratch, c, stream, p->dp, p};
            CUDA_TRY(launch(l), what);
            src = dst;
        }
        if (src != out)
            CUDA_TRY(cudaMemcpyAsync(out, src, bytes, cudaMemcpyDefault, stream), what);
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
        CUDA_TRY(cudaMemcpyAsync(p->aligned, src, need, cudaMemcpyDefault, p->dev->stream),
                 "copying the field to aligned memory");
        src = dst = p->aligned;
    }
    st = p->setup.desc.dtype == DK_F32 ? execute_t<float>(p, (const float *)src, (float *)dst, msg)
                                       : execute_t<double>(p, (const double *)src, (double *)dst, msg);
    if (st != DK_OK || !misaligned)
        return st;
    CUDA_TRY(cudaMemcpyAsync(bo->ptr, p->aligned, need, cudaMemcpyDefault, p->dev->stream),
             "copying the field from aligned memory");
    return dk_cuda_finish(p->dev, "the gauss kernels", msg);
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
    .execute_halo = dk_cuda_gauss::cuda_gauss_execute_halo,
};
