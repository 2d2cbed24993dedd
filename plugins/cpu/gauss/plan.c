/* dakit cpu plugin, gauss: the plan (which solver filters each axis), its
 * execution and the ops table. gauss.h says which solver does what. */
#include "gauss.h"

static const char *const variants[] = {"lines", NULL};

/* Exact mode: how many segments a line gets and how long they are. */
static void choose_exact_segments(cpu_gauss_plan *p, int axis, size_t esize)
{
    dk_axis_view v = dk_axis_view_of(&p->setup.desc, axis);
    size_t n = v.n, halo = p->setup.halo[axis], lines = v.outer * v.inner;
    size_t cache_window = LANE_BUFFER_BYTES / (p->lanes * esize);
    size_t wanted = (size_t)p->threads * p->lanes * BATCHES_PER_THREAD;

    size_t L = n;
    if (lines < wanted)
        L = n / div_up(wanted, lines) + 2 * halo;
    if (L > cache_window)
        L = cache_window;
    if (L < MIN_WINDOW)
        L = MIN_WINDOW;
    if (halo < n && L < 4 * halo) /* at most half of each window is overlap */
        L = 4 * halo;
    if (halo >= n / 2 || L >= n) {
        p->segments[axis] = 1;
        p->window[axis] = n;
        return;
    }
    p->segments[axis] = 1 + div_up(n - L, L - 2 * halo);
    p->window[axis] = L;
}

/* The longest window along `axis`. */
static size_t longest_window(const cpu_gauss_plan *p, int axis)
{
    const dk_gauss_desc *d = &p->setup.desc;
    size_t n = d->shape[axis];
    if (d->mode == DK_GAUSS_EXACT)
        return p->window[axis];
    size_t longest_block = div_up(n, p->segments[axis]);
    size_t w = longest_block + 2 * d->overlap;
    return w < n && w >= longest_block ? w : n;
}

static void *alloc_aligned(size_t bytes)
{
    void *ptr = NULL;
    size_t rounded = (bytes + CACHE_LINE - 1) & ~(size_t)(CACHE_LINE - 1);
    if (rounded < bytes || posix_memalign(&ptr, CACHE_LINE, rounded ? rounded : CACHE_LINE) != 0)
        return NULL;
    return ptr;
}

static void cpu_gauss_plan_destroy(void *plan)
{
    cpu_gauss_plan *p = plan;
    if (!p)
        return;
    free(p->buffers);
    free(p->scratch);
    free(p->halo_buffers);
    free(p);
}

static dk_status cpu_gauss_plan_create(void *device, const dk_gauss_setup *setup, void **plan,
                                       dk_msg *msg)
{
    (void)device;
    const dk_gauss_desc *d = &setup->desc;
    if (d->dtype != DK_F32 && d->dtype != DK_F64) {
        dk_msg_set(msg, "the cpu backend's gauss supports float32 and float64 only");
        return DK_ERR_NOT_IMPLEMENTED;
    }
    cpu_gauss_plan *p = calloc(1, sizeof *p);
    if (!p) {
        dk_msg_set(msg, "cannot allocate a gauss plan");
        return DK_ERR_OUT_OF_MEMORY;
    }
    p->setup = *setup;
    p->setup.desc.variant = NULL; /* the caller's string need not outlive the plan */
    p->threads = max_threads();
    p->lanes = d->dtype == DK_F32 ? LANES_F32 : LANES_F64;
#ifdef HAVE_AVX2_KERNEL
    __builtin_cpu_init();
    p->avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    size_t esize = element_size(d->dtype);

    size_t longest = 0, extended_need = 0, exact_need = 0;
    int overlapping = 0;
    for (int a = 0; a < d->ndim; a++) {
        if (!(d->axes & (1u << a)))
            continue;
        if (setup->extended[a]) {
            choose_extended_segments(p, a);
            if (p->segments[a] > 1)
                overlapping = 1;
            /* gathered input and causal sums, a line at a time (rf) or in lanes */
            size_t w = (2 * p->keep[a] + 2 * setup->reach[a] + 3) * IIR_RUNS *
                       (d->dtype == DK_F32 ? IIR_LANES_F32 : IIR_LANES_F64);
            if (w > extended_need)
                extended_need = w;
            continue;
        }
        if (d->mode == DK_GAUSS_EXACT && choose_exact_path(p, a, esize)) {
            if (p->segments[a] > 1)
                overlapping = 1;
            size_t w = 2 * p->window[a] * p->width[a]; /* two windows' buffers */
            if (w > exact_need)
                exact_need = w;
            continue;
        }
        if (d->mode == DK_GAUSS_OVERLAP)
            p->segments[a] = dk_gauss_line_blocks(d->shape[a], d->blocks);
        else
            choose_exact_segments(p, a, esize);
        if (p->segments[a] > 1)
            overlapping = 1;
        size_t w = longest_window(p, a);
        if (w > longest)
            longest = w;
    }

    p->lockstep = longest <= LANE_BUFFER_LIMIT / (p->lanes * esize);
    p->buffer_elems = p->lockstep ? longest * p->lanes : longest;
    if (p->buffer_elems < extended_need)
        p->buffer_elems = extended_need;
    if (p->buffer_elems < exact_need)
        p->buffer_elems = exact_need;
    if (choose_fused(p, esize) && p->buffer_elems < p->fuse_need)
        p->buffer_elems = p->fuse_need;
    /* Whole cache lines per thread, so threads never share one. */
    p->buffer_elems = div_up(p->buffer_elems * esize, CACHE_LINE) * CACHE_LINE / esize;
    size_t buffer_bytes = (size_t)p->threads * p->buffer_elems * esize;
    p->buffers = alloc_aligned(buffer_bytes);
    if (overlapping)
        p->scratch = alloc_aligned(setup->count * esize);
    if (!p->buffers || (overlapping && !p->scratch)) {
        dk_msg_set(msg, "cannot allocate %zu bytes of gauss work memory",
                   buffer_bytes + (overlapping ? setup->count * esize : 0));
        cpu_gauss_plan_destroy(p);
        return DK_ERR_OUT_OF_MEMORY;
    }
    /* Lanes a short batch leaves unused still get filtered; zeros keep them
     * free of denormals and NaN until real data has passed through. */
    memset(p->buffers, 0, buffer_bytes);
    for (int a = 0; a < d->ndim; a++)
        if (setup->halo_max[a]) {
            size_t m = (d->shape[a] + 2 * setup->halo_max[a]) * p->lanes;
            p->halo_elems = m > p->halo_elems ? m : p->halo_elems;
        }
    if (p->halo_elems) {
        p->halo_elems = div_up(p->halo_elems * esize, CACHE_LINE) * CACHE_LINE / esize;
        size_t bytes = (size_t)p->threads * p->halo_elems * esize;
        if (!(p->halo_buffers = alloc_aligned(bytes))) {
            dk_msg_set(msg, "cannot allocate %zu bytes of gauss work memory for halos", bytes);
            cpu_gauss_plan_destroy(p);
            return DK_ERR_OUT_OF_MEMORY;
        }
    }
    *plan = p;
    return DK_OK;
}

static dk_status cpu_gauss_execute(void *plan, const void *in, void *out, dk_msg *msg)
{
    cpu_gauss_plan *p = plan;
    if (!p || !in || !out) {
        dk_msg_set(msg, "gauss execute: plan, in and out must not be NULL");
        return DK_ERR_INVALID_ARGUMENT;
    }
    const dk_gauss_desc *d = &p->setup.desc;
    /* Axes in increasing order. An axis whose segments overlap must not
     * write over values that another window still reads, so it writes to
     * the scratch buffer when its input is already out. */
    if (p->fused && in != out) {
        if (d->dtype == DK_F32)
            fused_f32(p, in, out);
        else
            fused_f64(p, in, out);
        return DK_OK;
    }
    const void *current = in;
    for (int a = 0; a < d->ndim; a++) {
        if (!(d->axes & (1u << a)))
            continue;
        void *target = p->segments[a] > 1 && current == out ? p->scratch : out;
        if (p->setup.extended[a] && d->dtype == DK_F32)
            extended_axis_f32(p, a, current, target);
        else if (p->setup.extended[a])
            extended_axis_f64(p, a, current, target);
        else if (p->exact[a] && d->dtype == DK_F32)
            exact_axis_f32(p, a, current, target);
        else if (p->exact[a])
            exact_axis_f64(p, a, current, target);
        else if (d->dtype == DK_F32)
            filter_axis_f32(p, a, current, target);
        else
            filter_axis_f64(p, a, current, target);
        current = target;
    }
    if (current != out)
        dk_cpu_copy(out, current, p->setup.count * element_size(d->dtype));
    return DK_OK;
}

const dk_gauss_ops dk_cpu_gauss_ops = {
    .variants = variants,
    .plan_create = cpu_gauss_plan_create,
    .execute = cpu_gauss_execute,
    .plan_destroy = cpu_gauss_plan_destroy,
    .execute_halo = cpu_gauss_execute_halo,
};
