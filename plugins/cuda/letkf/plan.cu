/* dakit cuda plugin, letkf: the plan (positions, observations and buckets
 * on the device, each point's candidates counted), an analysis's
 * observation space (k_obs_space), the variants and the choice of one, the
 * entries that run a plan and the ops table. letkf.cuh says which variant
 * does what. */
#include "letkf.cuh"

using namespace dk_cuda_letkf;

namespace {

template <typename T> __device__ __forceinline__ double load(const T *p, long long i) { return (double)p[i]; }

/* Observation space in sorted order, one thread per observation. */
template <typename T>
__global__ void k_obs_space(const T *yb, const double *obs, const int32_t *order, long long m, int k, double *yp,
                            double *dep, double *rinv)
{
    long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (j >= m)
        return;
    long long o = order[j];
    double mean = 0.0;
    for (int l = 0; l < k; l++)
        mean += load(yb, o * k + l);
    mean /= (double)k;
    for (int l = 0; l < k; l++)
        yp[j * k + l] = load(yb, o * k + l) - mean;
    dep[j] = obs[o] - mean;
    rinv[j] = 1.0 / obs[m + o];
}

void plan_destroy(void *handle)
{
    Plan *p = (Plan *)handle;
    if (!p)
        return;
    if (cudaSetDevice(p->dev->ordinal) == cudaSuccess) {
        void *ptrs[] = {p->d_grid_pos, p->d_obs_pos, p->d_yp,   p->d_dep,   p->d_rinv, p->d_order,  p->d_cstart,
                        p->d_count,    p->d_ckey,    p->d_overflow, p->d_lidx, p->d_sidx, p->d_nobs_tmp, p->d_lrho,
                        p->d_srho,     p->d_v,       p->d_batA, p->d_batb,  p->d_batlam, p->d_work, p->d_info,
                        p->d_wlidx,    p->d_wsidx,   p->d_wfailed, p->d_redo, p->d_wlrho, p->d_wsrho, p->d_refl,
                        p->d_td,       p->d_te,      p->d_tu,   p->d_tb,    p->d_wxm,  p->d_lv, p->d_tiles,
                        p->d_li,       p->d_wnlog,   p->d_abuf};
        for (void *q : ptrs)
            if (q)
                cudaFree(q);
        if (p->params)
            cusolverDnDestroySyevjInfo(p->params);
        if (p->solver)
            cusolverDnDestroy(p->solver);
    }
    (void)cudaGetLastError();
    free(p);
}

/* Copies host data to a fresh device array, ordered on the device's
 * (non-blocking) stream before the plan's kernels. */
template <typename U>
dk_status upload(U **dst, const U *src, size_t count, cudaStream_t stream, const char *what, dk_msg *msg)
{
    CUDA_TRY(cudaMalloc((void **)dst, (count ? count : 1) * sizeof(U)), what);
    if (count)
        CUDA_TRY(cudaMemcpyAsync(*dst, src, count * sizeof(U), cudaMemcpyDefault, stream), what);
    return DK_OK;
}

dk_status plan_fill(Plan *p, const dk_letkf_setup *s, dk_msg *msg)
{
    const dk_letkf_desc *d = &s->desc;
    const size_t n = d->n, m = d->m;
    Args &a = p->a;
    memset(&a, 0, sizeof a);
    a.geo = s->geo;
    a.k = (int)d->members;
    a.kp = a.k + (a.k & 1);
    a.cap = d->max_obs > 0 && d->max_obs < (size_t)INT32_MAX ? (int)d->max_obs : d->max_obs > 0 ? INT32_MAX : 0;
    a.g = (double)(d->members - 1) / d->inflation;
    a.rtpp = d->rtpp;
    a.rtps = d->rtps;
    a.cells = (long long)s->cells;
    double *gp = (double *)malloc(n * DK_LETKF_POS * sizeof(double));
    if (!gp) {
        dk_msg_set(msg, "cuda letkf: out of host memory for the grid's positions");
        return DK_ERR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < n; i++)
        dk_letkf_position(&s->geo, d->grid_coords + i * (size_t)d->ncoords, gp + i * DK_LETKF_POS);
    cudaStream_t sm = p->dev->stream;
    dk_status st = upload(&p->d_grid_pos, (const double *)gp, n * DK_LETKF_POS, sm, "copying the letkf grid", msg);
    /* the copies may read gp until the stream gets there */
    cudaError_t e = cudaStreamSynchronize(sm);
    free(gp);
    if (st != DK_OK)
        return st;
    CUDA_TRY(e, "copying the letkf grid");
    if ((st = upload(&p->d_obs_pos, s->obs_pos, m * DK_LETKF_POS, sm, "copying the letkf observations", msg)) ||
        (st = upload(&p->d_order, s->obs_order, m, sm, "copying the letkf observations", msg)) ||
        (st = upload(&p->d_ckey, s->cell_key, s->cells, sm, "copying the letkf buckets", msg)) ||
        (st = upload(&p->d_cstart, s->cell_start, s->cells + 1, sm, "copying the letkf buckets", msg)))
        return st;
    CUDA_TRY(cudaMalloc((void **)&p->d_yp, m * d->members * sizeof(double)), "the letkf observation ensemble");
    CUDA_TRY(cudaMalloc((void **)&p->d_dep, m * sizeof(double)), "the letkf departures");
    CUDA_TRY(cudaMalloc((void **)&p->d_rinv, m * sizeof(double)), "the letkf departures");
    CUDA_TRY(cudaMalloc((void **)&p->d_count, n * sizeof(int32_t)), "the letkf counts");
    /* d_overflow: [0] a list outgrown, [1] the longest list (plan), [2] syevj's worst info, [3] the warp variant's leftovers */
    CUDA_TRY(cudaMalloc((void **)&p->d_overflow, 4 * sizeof(int)), "the letkf counts");
    CUDA_TRY(cudaMemsetAsync(p->d_overflow, 0, 4 * sizeof(int), sm), "the letkf counts");
    a.grid_pos = p->d_grid_pos, a.obs_pos = p->d_obs_pos, a.order = p->d_order;
    a.ckey = p->d_ckey, a.cstart = p->d_cstart;
    a.yp = p->d_yp, a.dep = p->d_dep, a.rinv = p->d_rinv;
    a.overflow = p->d_overflow;
    /* each point's candidates, the longest list (d_overflow[1] holds the maximum) */
    if ((st = count_candidates(p, msg)) != DK_OK)
        return st;
    unsigned maxc = 0;
    CUDA_TRY(cudaMemcpyAsync(&maxc, p->d_overflow + 1, sizeof maxc, cudaMemcpyDefault, sm),
             "counting the letkf candidates");
    CUDA_TRY(cudaStreamSynchronize(sm), "counting the letkf candidates");
    p->count_max = maxc;
    if ((st = size_kernels(p, msg)) != DK_OK)
        return st;
    if (p->syevj && (st = plan_syevj(p, msg)) != DK_OK)
        return st;
    if (p->warp && (st = plan_warp(p, msg)) != DK_OK)
        return st;
    return DK_OK;
}

const char *const variants[] = {"warp", "jacobi", "syevj", NULL};

dk_status plan_create(void *device, const dk_letkf_setup *setup, void **out, dk_msg *msg)
{
    dk_cuda_device *dev = (dk_cuda_device *)device;
    *out = NULL;
    if (setup->desc.members > (size_t)MAX_K) {
        dk_msg_set(msg, "cuda letkf: %zu members; this backend's local solver takes at most %d", setup->desc.members,
                   MAX_K);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    dk_status st = dk_cuda_enter(dev, msg);
    if (st != DK_OK)
        return st;
    Plan *p = (Plan *)calloc(1, sizeof *p);
    if (!p) {
        dk_msg_set(msg, "cuda letkf: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    p->dev = dev;
    p->desc = setup->desc;
    p->syevj = setup->desc.variant && strcmp(setup->desc.variant, "syevj") == 0;
    p->warp = !setup->desc.variant || strcmp(setup->desc.variant, "warp") == 0; /* the default */
    if ((st = plan_fill(p, setup, msg)) != DK_OK) {
        plan_destroy(p);
        return st;
    }
    *out = p;
    return DK_OK;
}

template <typename T> dk_status run_analysis(Plan *p, dk_msg *msg)
{
    Args a = p->a;
    dk_status st = points_prepare<T>(p, msg);
    if (st != DK_OK)
        return st;
    if (p->warp)
        return run_warp<T>(p, a, msg);
    if (p->syevj)
        return run_syevj<T>(p, a, msg);
    a.i0 = 0, a.i1 = (long long)p->desc.n;
    return launch_points<T>(p, a, 0, p->blocks, msg);
}

/* The observation space in sorted order on the device: perturbations,
 * departures and 1 / r (k_obs_space). */
static dk_status obs_space(Plan *p, const void *yb, const void *obs, dk_msg *msg)
{
    const long long m = (long long)p->desc.m;
    const int k = p->a.k, ob = (int)((m + 255) / 256);
    const double *o = (const double *)((const dk_cuda_buffer *)obs)->ptr;
    const void *ybp = ((const dk_cuda_buffer *)yb)->ptr;
    cudaStream_t sm = p->dev->stream;
    if (p->desc.dtype == DK_F32)
        k_obs_space<float><<<ob, 256, 0, sm>>>((const float *)ybp, o, p->d_order, m, k, p->d_yp, p->d_dep, p->d_rinv);
    else
        k_obs_space<double><<<ob, 256, 0, sm>>>((const double *)ybp, o, p->d_order, m, k, p->d_yp, p->d_dep, p->d_rinv);
    CUDA_TRY(cudaGetLastError(), "launching the letkf observation kernel");
    return DK_OK;
}

dk_status analysis(void *handle, const void *xb, const void *yb, const void *obs, void *xa, void *nobs, void *spread,
                   dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    const int k = p->a.k;
    const bool f32 = p->desc.dtype == DK_F32;
    cudaStream_t sm = p->dev->stream;
    if ((st = obs_space(p, yb, obs, msg)) != DK_OK)
        return st;
    if (p->syevj)
        CUDA_TRY(cudaMemsetAsync(p->d_overflow + 2, 0, sizeof(int), sm), "resetting the letkf syevj check");
    p->a.xb = ((const dk_cuda_buffer *)xb)->ptr;
    p->a.xa = ((dk_cuda_buffer *)xa)->ptr;
    p->a.nobs = nobs ? (int32_t *)((dk_cuda_buffer *)nobs)->ptr : NULL;
    p->a.spread = spread ? (double *)((dk_cuda_buffer *)spread)->ptr : NULL;
    st = f32 ? run_analysis<float>(p, msg) : run_analysis<double>(p, msg);
    if (st != DK_OK)
        return st;
    if ((st = dk_cuda_finish(p->dev, "the letkf analysis", msg)) != DK_OK)
        return st;
    if (!(p->dev->caller && p->dev->async)) {
        /* a candidate list longer than the plan counted would be a bug: say so rather than give a wrong answer */
        int flags[3] = {0, 0, 0};
        CUDA_TRY(cudaMemcpyAsync(flags, p->d_overflow, sizeof flags, cudaMemcpyDefault, p->dev->stream),
                 "checking the letkf lists");
        CUDA_TRY(cudaStreamSynchronize(p->dev->stream), "checking the letkf lists");
        if (flags[0]) {
            dk_msg_set(msg, "cuda letkf: a point found more candidates than the plan counted (%lld); internal error",
                       p->count_max);
            return DK_ERR_BACKEND;
        }
        if (p->syevj && flags[2]) {
            /* syevj's info: i > 0 where a matrix did not converge; its results for that point are not eigenpairs */
            dk_msg_set(msg, "cuda letkf: cuSOLVER's syevjBatched did not converge for a point's %d x %d matrix "
                            "(info %d); the variants warp and jacobi solve it", k, k, flags[2]);
            return DK_ERR_BACKEND;
        }
    }
    return DK_OK;
}

/* Weight interpolation's transforms: the warp kernels (k_warp_transforms
 * writing T) where the plan has them (warp, syevj), else the jacobi kernel
 * (MODE 0) over every point, its finish writing T. */
template <typename T> dk_status run_transforms(Plan *p, double *tout, dk_msg *msg)
{
    Args a = p->a;
    dk_status st = points_prepare<T>(p, msg);
    if (st != DK_OK)
        return st;
    a.xb = NULL, a.xa = NULL, a.nobs = NULL, a.spread = NULL, a.tout = tout;
    if (p->w_blocks > 0)
        return run_warp<T>(p, a, msg);
    a.list = NULL, a.list_count = NULL;
    a.i0 = 0, a.i1 = (long long)p->desc.n;
    return launch_points<T>(p, a, 0, p->blocks, msg);
}

dk_status transforms(void *handle, const void *yb, const void *obs, void *tout, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    /* cuSOLVER's batch gives no transforms: a syevj plan lays out the warp kernels for them on first use */
    if (p->syevj && p->w_blocks == 0 && (st = plan_warp(p, msg)) != DK_OK)
        return st;
    const bool f32 = p->desc.dtype == DK_F32;
    double *t = (double *)((dk_cuda_buffer *)tout)->ptr;
    if ((st = obs_space(p, yb, obs, msg)) != DK_OK)
        return st;
    st = f32 ? run_transforms<float>(p, t, msg) : run_transforms<double>(p, t, msg);
    if (st != DK_OK)
        return st;
    return dk_cuda_finish(p->dev, "the letkf transforms", msg);
}

/* A thread per (point, member m): a_m = sum_e c_e sum_l X_l T_e[l,m]. */
template <typename T>
__global__ void k_interp_a(long long n, int k, const T *xb, const double *tr, const int64_t *indptr,
                           const int64_t *indices, const double *values, double *abuf)
{
    long long g = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (g >= n * k)
        return;
    long long i = g / k;
    int m = (int)(g - i * k);
    const T *x = xb + i * k;
    double xm = 0.0;
    for (int l = 0; l < k; l++)
        xm += (double)x[l];
    xm /= k;
    double am = 0.0;
    for (int64_t e = indptr[i]; e < indptr[i + 1]; e++) {
        const double *te = tr + indices[e] * (long long)k * k;
        double v = 0.0;
        for (int l = 0; l < k; l++)
            v = fma((double)x[l] - xm, te[l * k + m], v);
        am = fma(values[e], v, am);
    }
    abuf[g] = am;
}

/* A thread per point: the mean of a, RTPS, xa (may be xb) and the spread. */
template <typename T>
__global__ void k_interp_finish(long long n, int k, double rtps, const T *xb, const double *abuf, T *xa,
                                double *spread)
{
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const T *x = xb + i * k;
    const double *av = abuf + i * k;
    double xm = 0.0, am = 0.0;
    for (int l = 0; l < k; l++) {
        xm += (double)x[l];
        am += av[l];
    }
    xm /= k;
    am /= k;
    double sb = 0.0, sa = 0.0;
    for (int l = 0; l < k; l++) {
        double xp = (double)x[l] - xm, ap = av[l] - am;
        sb += xp * xp;
        sa += ap * ap;
    }
    sb = sqrt(sb / (k - 1));
    sa = sqrt(sa / (k - 1));
    double factor = rtps > 0.0 && sa > 0.0 ? 1.0 + rtps * (sb - sa) / sa : 1.0;
    for (int m = 0; m < k; m++)
        xa[i * k + m] = (T)(xm + am + factor * (av[m] - am));
    if (spread)
        spread[i] = factor * sa;
}

template <typename T>
dk_status launch_apply(Plan *p, long long n, const void *xb, const double *tr, const int64_t *ip, const int64_t *ix,
                       const double *v, void *xa, double *spread, double *abuf, dk_msg *msg)
{
    const int k = p->a.k;
    cudaStream_t sm = p->dev->stream;
    const long long nk = n * k;
    k_interp_a<T><<<(unsigned)((nk + 255) / 256), 256, 0, sm>>>(n, k, (const T *)xb, tr, ip, ix, v, abuf);
    CUDA_TRY(cudaGetLastError(), "launching the letkf interpolation kernel");
    k_interp_finish<T><<<(unsigned)((n + 255) / 256), 256, 0, sm>>>(n, k, p->a.rtps, (const T *)xb, abuf, (T *)xa,
                                                                     spread);
    CUDA_TRY(cudaGetLastError(), "launching the letkf interpolation's finish");
    return DK_OK;
}

dk_status apply_transforms(void *handle, size_t n, const void *xb, const void *tr, const void *indptr,
                           const void *indices, const void *values, void *xa, void *spread, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK || n == 0)
        return st;
    /* the interpolated perturbations: kept in the plan for its next call, grown where n is larger */
    const size_t need = n * (size_t)p->a.k * sizeof(double);
    if (p->abuf_bytes < need) {
        cudaFree(p->d_abuf);
        p->d_abuf = NULL, p->abuf_bytes = 0;
        CUDA_TRY(cudaMalloc((void **)&p->d_abuf, need), "allocating the letkf interpolated perturbations");
        p->abuf_bytes = need;
    }
    double *abuf = p->d_abuf;
    const void *x = ((const dk_cuda_buffer *)xb)->ptr;
    void *y = ((dk_cuda_buffer *)xa)->ptr;
    const double *t = (const double *)((const dk_cuda_buffer *)tr)->ptr;
    const int64_t *ip = (const int64_t *)((const dk_cuda_buffer *)indptr)->ptr;
    const int64_t *ix = (const int64_t *)((const dk_cuda_buffer *)indices)->ptr;
    const double *v = (const double *)((const dk_cuda_buffer *)values)->ptr;
    double *sp = spread ? (double *)((dk_cuda_buffer *)spread)->ptr : NULL;
    st = p->desc.dtype == DK_F32 ? launch_apply<float>(p, (long long)n, x, t, ip, ix, v, y, sp, abuf, msg)
                                 : launch_apply<double>(p, (long long)n, x, t, ip, ix, v, y, sp, abuf, msg);
    if (st == DK_OK)
        st = dk_cuda_finish(p->dev, "the letkf interpolated analysis", msg);
    return st;
}

} // namespace

extern "C" const dk_letkf_ops dk_cuda_letkf_ops = {
    .variants = variants,
    .plan_create = plan_create,
    .analysis = analysis,
    .plan_destroy = plan_destroy,
    .transforms = transforms,
    .apply_transforms = apply_transforms,
};
