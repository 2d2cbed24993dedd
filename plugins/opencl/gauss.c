/* dakit-opencl gauss: the K-iterated recursive filter, one kernel launch
 * (or a few, see `batch`) per filtered axis, in increasing axis order.
 *
 * Variants: "windows" is the scheme described below, made for CPU devices;
 * "tiled" gives GPUs their own kernels where they apply (exact mode's
 * chunks filtered in registers, deriche / vyv rows staged in local memory,
 * see gauss.cl) and the windows elsewhere; "auto" (the default) is "tiled"
 * on GPUs and "windows" on CPUs.
 *
 * Each axis is cut into (line, block) items; an item's block is filtered
 * over its window and only the block is kept (kernel rf_windows in
 * gauss.cl). A work-item takes `lanes` neighbouring items and filters them
 * side by side as one vector (CPU devices), or one item (GPUs).
 * Overlap mode uses dk_gauss_block's blocks and overlap as the reference does.
 * Exact mode chooses its own blocks ("chunks") and widens them by
 * setup->halo, the overlap past which the window's artificial ends change
 * nothing at the dtype's rounding; a line long enough for parallelism alone
 * is one chunk, filtered whole. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opencl_plugin.h"

/* How one axis is filtered. */
enum { PATH_WINDOWS, PATH_REG_STRIDED, PATH_REG_ROWS, PATH_EXT_ROWS, PATH_EXT_COLS, PATH_REG_BLOCKS };

typedef struct axis_pass {
    int path;              /* PATH_*; PATH_WINDOWS: rf_windows or extended_segments */
    dk_axis_view view;
    double alpha;
    cl_ulong blocks;       /* per line */
    cl_ulong m;            /* each window's widening per side */
    cl_ulong items;        /* lines * blocks windows */
    cl_ulong groups;       /* work-items: items / lanes, rounded up */
    int in_dst;            /* windows are whole lines, filtered in the output itself */
    cl_ulong batch;        /* work-items per launch, bounded by the scratch they need */
    cl_ulong slot_stride;  /* scratch layout, see rf_windows */
    cl_ulong value_stride;
    /* extended axes (kernel extended_segments): items are (line, segment) */
    int extended;
    cl_ulong segments, keep, reach;
    int sections;
    cl_mem coef;           /* sections x (b0, b1, a1, a2, c1, c2) in the dtype */
    /* tiled paths: chunks of L values a line (ipl of them), halo h;
     * work-groups of `local` work-items, `ngroups` of them; rf_reg_strided:
     * JT lines by local / JT chunks a group, nj x nk groups per outer index;
     * local_bytes: rf_reg_rows' local memory; extended_rows / _cols: S
     * values of window and So of each sum in local memory */
    cl_ulong L, h, ipl, nj, nk;
    int JT;
    size_t local, local_bytes;
    cl_ulong ngroups;
    int S, So;
    int reg_blocks;        /* PATH_REG_BLOCKS: its kernel, reg_blocks[reg_blocks] */
} axis_pass;

typedef struct gauss_plan {
    dk_opencl_device *dev;
    dk_dtype dtype;
    int K;
    int constant_boundary;
    size_t count;
    cl_kernel kernel;
    cl_kernel extended_kernel;
    cl_kernel reg_strided, reg_rows; /* tiled; NULL elsewhere */
    cl_kernel ext_rows[3], ext_cols[3]; /* tiled, by section count (1 to 3) */
    cl_kernel reg_blocks[4]; /* tiled overlap mode: rf_reg_blocks of REG_BLOCKS_W[i], made when needed */
    int boundary, rf;
    double cval;
    cl_mem temp;    /* count elements: the other half of the ping-pong */
    cl_mem scratch; /* window work areas; NULL when no pass needs them */
    cl_kernel halo_kernel; /* execute_halo (rf_halo); NULL for plans without halos */
    cl_mem halo_scratch;   /* its halos' values, 2 halo_max a line */
    size_t halo_max, halo_lines, halo_n, halo_inner;
    double halo_alpha;
    int npasses;
    axis_pass pass[DK_MAX_DIMS];
} gauss_plan;

/* Scratch is allowed the field's own size, and at least this much, so that
 * launches stay large when windows overlap a lot (overlap mode's small
 * blocks). */
#define SCRATCH_FLOOR_BYTES ((size_t)64 << 20)

static const char *const gauss_variants[] = {"auto", "tiled", "windows", NULL};

/* The register window of the tiled rf kernels: RW in gauss.cl. */
#define REG_WINDOW_F32 95
#define REG_WINDOW_F64 63
/* rf_reg_blocks' windows (gauss.cl), shortest first; float64 up to 63. */
static const int REG_BLOCKS_W[4] = {31, 47, 63, 95};
/* Work-groups of the tiled kernels: 128 work-items (JT lines x chunks on a
 * strided axis, chunks on a contiguous one); extended_rows / _cols: 32 rows,
 * two work-items a row (EXT_ROWS in gauss.cl). */
#define TILED_LOCAL 128
#define EXT_ROWS 32
/* The longest segment of extended_rows / _cols (cuda's k_ext_tile measured
 * 128 best on an H100). */
#define EXT_KEEP 128
/* Launches of the tiled kernels cover at most this many groups each. */
#define GROUPS_PER_LAUNCH ((cl_ulong)1 << 20)

/* Exact mode: how many chunks a line is cut into. Parallelism comes first
 * from the lines; chunks are added only when lines are too few to fill the
 * device, and never shorter than twice the halo, so that no window repeats
 * more than about twice its chunk's work. */
static size_t exact_chunks(const dk_opencl_device *dev, int lanes, dk_axis_view v,
                           size_t halo)
{
    size_t lines = v.outer * v.inner;
    size_t wanted = (size_t)dev->compute_units * (dev->is_cpu ? 8 : 2048) * lanes;
    if (lines >= wanted || halo >= v.n)
        return 1;
    size_t chunks = (wanted + lines - 1) / lines;
    size_t shortest = 2 * halo > 64 ? 2 * halo : 64;
    size_t most = v.n / shortest;
    if (most < 1)
        most = 1;
    return chunks < most ? chunks : most;
}

static void gauss_plan_destroy(void *handle);

/* The most work-items a group of `kernel` may have on the device, at most
 * `wanted`. */
static size_t kernel_local(const dk_opencl_device *dev, cl_kernel kernel, size_t wanted)
{
    size_t most = 0;
    if (clGetKernelWorkGroupInfo(kernel, dev->id, CL_KERNEL_WORK_GROUP_SIZE, sizeof most, &most,
                                 NULL) == CL_SUCCESS &&
        most > 0 && most < wanted)
        return most;
    return wanted;
}

/* The local memory a group of `kernel` may take beside the kernel's own. */
static size_t local_memory(const dk_opencl_device *dev, cl_kernel kernel)
{
    cl_ulong total = 0, used = 0;
    if (clGetDeviceInfo(dev->id, CL_DEVICE_LOCAL_MEM_SIZE, sizeof total, &total, NULL) != CL_SUCCESS)
        return 0;
    clGetKernelWorkGroupInfo(kernel, dev->id, CL_KERNEL_LOCAL_MEM_SIZE, sizeof used, &used, NULL);
    return total > used ? (size_t)(total - used) : 0;
}

/* Exact rf on the tiled kernels, where the window fits the registers: chunks
 * of L = RW - 2 halo values, at least a quarter of the window (else the
 * windows' overlap costs more than rf_windows), on lines of at least RW.
 * Returns 0 where they do not apply; the pass then takes rf_windows. */
static int plan_tiled_rf(gauss_plan *plan, const dk_gauss_setup *setup, int a, axis_pass *p)
{
    dk_opencl_device *dev = plan->dev;
    dk_axis_view v = dk_axis_view_of(&setup->desc, a);
    size_t rw = plan->dtype == DK_F64 ? REG_WINDOW_F64 : REG_WINDOW_F32;
    size_t h = setup->halo[a], esize = plan->dtype == DK_F64 ? sizeof(double) : sizeof(float);
    if (v.n < rw || 2 * h >= rw || 4 * (rw - 2 * h) < rw)
        return 0;
    p->view = v;
    p->alpha = setup->alpha[a];
    p->h = h;
    p->L = rw - 2 * h;
    p->ipl = (v.n + p->L - 1) / p->L;
    if (v.inner > 1) {
        size_t local = kernel_local(dev, plan->reg_strided, TILED_LOCAL);
        int jt = 1;
        while (jt < 32 && (size_t)jt < v.inner && (size_t)(2 * jt) <= local)
            jt *= 2;
        p->path = PATH_REG_STRIDED;
        p->JT = jt;
        p->local = local / (size_t)jt * (size_t)jt;
        p->nj = (v.inner + (size_t)jt - 1) / (size_t)jt;
        size_t kt = p->local / (size_t)jt;
        p->nk = (p->ipl + kt - 1) / kt;
        p->ngroups = p->nj * p->nk * v.outer;
        return 1;
    }
    size_t local = kernel_local(dev, plan->reg_rows, TILED_LOCAL);
    size_t room = local_memory(dev, plan->reg_rows);
    while (local > 1 && (local * p->L + 2 * p->L + 4 * h) * esize > room)
        local /= 2;
    if ((local * p->L + 2 * p->L + 4 * h) * esize > room)
        return 0;
    p->path = PATH_REG_ROWS;
    p->local = local;
    p->local_bytes = (local * p->L + 2 * p->L + 4 * h) * esize;
    p->items = (cl_ulong)v.outer * p->ipl; /* chunks */
    p->ngroups = (p->items + local - 1) / local;
    return 1;
}

/* Overlap mode on rf_reg_blocks where the longest window (`longest`
 * values) fits one of its compiled lengths: work-groups of 128 work-items, fewer where the items
 * are too few to fill the device. Returns 0 where it does not apply; the
 * pass then takes rf_windows. Called after the caller set view, alpha,
 * blocks, m and items. */
static int plan_reg_blocks(gauss_plan *plan, cl_program program, axis_pass *p, size_t longest)
{
    dk_opencl_device *dev = plan->dev;
    int most = plan->dtype == DK_F64 ? 3 : 4;
    for (int i = 0; i < most; i++) {
        if ((size_t)REG_BLOCKS_W[i] < longest)
            continue;
        if (!plan->reg_blocks[i]) {
            char name[32];
            cl_int err;
            snprintf(name, sizeof name, "rf_reg_blocks%d", REG_BLOCKS_W[i]);
            plan->reg_blocks[i] = clCreateKernel(program, name, &err);
            if (err != CL_SUCCESS) {
                plan->reg_blocks[i] = NULL;
                return 0;
            }
        }
        size_t fill = (size_t)dev->compute_units * 256;
        size_t local = p->items >= fill ? TILED_LOCAL : p->items >= fill / 4 ? 64 : 32;
        p->local = kernel_local(dev, plan->reg_blocks[i], local);
        p->ngroups = (p->items + p->local - 1) / p->local;
        p->reg_blocks = i;
        p->path = PATH_REG_BLOCKS;
        return 1;
    }
    return 0;
}

/* deriche / vyv through extended_rows (a contiguous axis) or extended_cols
 * (a strided one): segments of `keep` values (DAKIT_GAUSS_OPENCL_EXTENDED_KEEP
 * at most, else EXT_KEEP) short enough that the group's buffers fit local
 * memory. Strided axis: per row a window (keep + 2 reach + 3 values) and two
 * sums (2 keep). Contiguous axis: the 32 rows' windows are one span (32 keep
 * + 2 reach + 3, rounded out to 16 bytes) and the sums 2 x 32 keep; keep is
 * odd (no bank conflicts), and the segments are rounded to whole groups of
 * 32 (down where the longer keep fits, else up) so that no group is mostly
 * idle. Returns 0 where they do not fit. Called after plan_extended, which
 * set the rest. */
static int plan_ext_tiled(gauss_plan *plan, axis_pass *p)
{
    dk_opencl_device *dev = plan->dev;
    size_t esize = plan->dtype == DK_F64 ? sizeof(double) : sizeof(float), vec = 16 / esize;
    size_t n = p->view.n, R = p->reach, lines = p->view.outer * p->view.inner;
    int strided = p->view.inner > 1;
    if (p->sections < 1 || p->sections > 3)
        return 0;
    cl_kernel kernel = strided ? plan->ext_cols[p->sections - 1] : plan->ext_rows[p->sections - 1];
    size_t room = local_memory(dev, kernel);
    if (kernel_local(dev, kernel, 2 * EXT_ROWS) < 2 * EXT_ROWS || R > (size_t)1 << 20)
        return 0;
    size_t values = room / esize, fixed = 2 * R + 3 + (strided ? 0 : 2 * vec);
    if ((strided ? values / EXT_ROWS : values) <= fixed)
        return 0;
    size_t most = strided ? (values / EXT_ROWS - fixed) / 3 : (values - fixed) / (3 * EXT_ROWS);
    if (!strided && most > 0 && most % 2 == 0)
        most--; /* keep is odd there, and may be rounded up by one */
    if (most < 1)
        return 0;
    size_t keep = (size_t)dk_tuning_long("DAKIT_GAUSS_OPENCL_EXTENDED_KEEP", 0, 1, 1 << 20);
    size_t limit = keep ? keep : most;
    if (keep == 0)
        keep = EXT_KEEP;
    if (keep > most)
        keep = most;
    if (limit > most)
        limit = most;
    if (keep > n)
        keep = n;
    size_t segments = (n + keep - 1) / keep;
    if (!strided && segments > EXT_ROWS && segments % EXT_ROWS) {
        size_t down = segments / EXT_ROWS * EXT_ROWS;
        segments = ((n + down - 1) / down | 1) <= limit ? down : down + EXT_ROWS;
    }
    keep = (n + segments - 1) / segments;
    if (!strided)
        keep |= 1;
    segments = (n + keep - 1) / keep;
    size_t S, So;
    if (strided) {
        S = EXT_ROWS * (keep + 2 * R + 3);
        So = EXT_ROWS * keep;
    } else {
        S = (EXT_ROWS * keep + 2 * R + 3 + 2 * vec - 1) / vec * vec;
        So = (EXT_ROWS * keep + vec - 1) / vec * vec;
    }
    if ((S + 2 * So) * esize > room)
        return 0;
    p->path = strided ? PATH_EXT_COLS : PATH_EXT_ROWS;
    p->keep = keep;
    p->segments = segments;
    p->items = (cl_ulong)lines * segments;
    p->local = 2 * EXT_ROWS;
    p->S = (int)S;
    p->So = (int)So;
    p->ngroups = strided ? (lines + EXT_ROWS - 1) / EXT_ROWS * segments
                         : (cl_ulong)lines * ((segments + EXT_ROWS - 1) / EXT_ROWS);
    return 1;
}

/* An extended axis: segments of `keep` values, several per line only when
 * lines are too few to fill the device, each at least four reaches long;
 * rf windows live in scratch ([value][work-item], so that neighbouring
 * work-items touch neighbouring addresses), deriche / vyv need none. */
static dk_status plan_extended(gauss_plan *plan, const dk_gauss_setup *setup, int a, axis_pass *p,
                               int lanes, size_t budget, size_t esize, size_t *scratch_values,
                               dk_msg *msg)
{
    dk_opencl_device *dev = plan->dev;
    dk_axis_view v = dk_axis_view_of(&setup->desc, a);
    size_t reach = setup->reach[a], lines = v.outer * v.inner;
    size_t wanted = (size_t)dev->compute_units * (dev->is_cpu ? 8 : 2048) * (size_t)lanes;
    size_t shortest = 4 * reach > 64 ? 4 * reach : 64;
    size_t segments = lines >= wanted ? 1 : (wanted + lines - 1) / lines;
    if (segments > v.n / shortest)
        segments = v.n / shortest;
    if (segments < 1)
        segments = 1;
    p->extended = 1;
    p->view = v;
    p->alpha = setup->alpha[a];
    p->keep = (v.n + segments - 1) / segments;
    p->segments = (v.n + p->keep - 1) / p->keep; /* every segment holds values: none starts past the end */
    p->reach = reach;
    p->items = (cl_ulong)lines * p->segments;
    p->groups = p->items;
    p->batch = p->groups;
    if (plan->rf) {
        size_t window = p->keep + 2 * reach;
        size_t fit = budget / (window * esize);
        if (fit < 1)
            fit = 1;
        if (p->batch > fit)
            p->batch = fit;
        p->value_stride = p->batch;
        if (p->batch * window > *scratch_values)
            *scratch_values = p->batch * window;
    }
    const dk_gauss_iir *f = &setup->iir[a];
    p->sections = f->count;
    double c64[6 * DK_GAUSS_MAX_SECTIONS] = {0};
    float c32[6 * DK_GAUSS_MAX_SECTIONS] = {0};
    for (int k = 0; k < f->count; k++) {
        double row[6] = {f->b0[k], f->b1[k], f->a1[k], f->a2[k], f->c1[k], f->c2[k]};
        for (int c = 0; c < 6; c++) {
            c64[6 * k + c] = row[c];
            c32[6 * k + c] = (float)row[c];
        }
    }
    return dk_opencl_alloc(dev, 6 * DK_GAUSS_MAX_SECTIONS * esize, esize == 8 ? (void *)c64 : (void *)c32,
                           &p->coef, msg, "gauss: allocating the filter's coefficients");
}

static void gauss_plan_destroy(void *handle)
{
    gauss_plan *plan = handle;
    if (!plan)
        return;
    if (plan->kernel)
        clReleaseKernel(plan->kernel);
    if (plan->extended_kernel)
        clReleaseKernel(plan->extended_kernel);
    cl_kernel tiled[] = {plan->reg_strided, plan->reg_rows,  plan->ext_rows[0], plan->ext_rows[1],
                         plan->ext_rows[2],   plan->ext_cols[0], plan->ext_cols[1], plan->ext_cols[2]};
    for (int i = 0; i < 8; i++)
        if (tiled[i])
            clReleaseKernel(tiled[i]);
    for (int i = 0; i < 4; i++)
        if (plan->reg_blocks[i])
            clReleaseKernel(plan->reg_blocks[i]);
    for (int i = 0; i < plan->npasses; i++)
        if (plan->pass[i].coef)
            clReleaseMemObject(plan->pass[i].coef);
    if (plan->temp)
        clReleaseMemObject(plan->temp);
    if (plan->scratch)
        clReleaseMemObject(plan->scratch);
    if (plan->halo_kernel)
        clReleaseKernel(plan->halo_kernel);
    if (plan->halo_scratch)
        clReleaseMemObject(plan->halo_scratch);
    free(plan);
}

static dk_status gauss_plan_create(void *device, const dk_gauss_setup *setup, void **out,
                                   dk_msg *msg)
{
    dk_opencl_device *dev = device;
    const dk_gauss_desc *d = &setup->desc;
    cl_program program = d->dtype == DK_F64 ? dev->gauss_f64 : dev->gauss_f32;
    if (!program) {
        dk_msg_set(msg, "opencl gauss: %s lacks cl_khr_fp64, so float64 is not available on "
                        "it; use float32 or another backend", dev->name);
        return DK_ERR_NOT_IMPLEMENTED;
    }

    gauss_plan *plan = calloc(1, sizeof *plan);
    if (!plan) {
        dk_msg_set(msg, "opencl gauss: out of host memory creating a plan");
        return DK_ERR_OUT_OF_MEMORY;
    }
    plan->dev = dev;
    plan->dtype = d->dtype;
    plan->K = d->K;
    plan->constant_boundary = d->boundary == DK_BOUNDARY_CONSTANT;
    plan->boundary = (int)d->boundary;
    plan->rf = d->method == DK_GAUSS_RF;
    plan->cval = d->cval;
    plan->count = setup->count;
    size_t esize = d->dtype == DK_F64 ? sizeof(double) : sizeof(float);
    int lanes = d->dtype == DK_F64 ? dev->lanes_f64 : dev->lanes_f32;

    size_t budget = setup->count * esize;
    if (budget < SCRATCH_FLOOR_BYTES)
        budget = SCRATCH_FLOOR_BYTES;
    if (dev->max_alloc && budget > dev->max_alloc)
        budget = (size_t)dev->max_alloc;

    size_t scratch_values = 0;
    dk_status st = DK_OK;
    cl_int err;
    const char *variant = d->variant ? d->variant : "auto";
    int tiled = strcmp(variant, "tiled") == 0 || (strcmp(variant, "auto") == 0 && !dev->is_cpu);
    if (tiled) {
        plan->reg_strided = clCreateKernel(program, "rf_reg_strided", &err);
        CL_TRY_GOTO(err, fail, "gauss: creating kernel rf_reg_strided");
        plan->reg_rows = clCreateKernel(program, "rf_reg_rows", &err);
        CL_TRY_GOTO(err, fail, "gauss: creating kernel rf_reg_rows");
        for (int s = 0; s < 3; s++) {
            char name[32];
            snprintf(name, sizeof name, "extended_rows%d", s + 1);
            plan->ext_rows[s] = clCreateKernel(program, name, &err);
            CL_TRY_GOTO(err, fail, "gauss: creating kernel %s", name);
            snprintf(name, sizeof name, "extended_cols%d", s + 1);
            plan->ext_cols[s] = clCreateKernel(program, name, &err);
            CL_TRY_GOTO(err, fail, "gauss: creating kernel %s", name);
        }
    }
    for (int a = 0; a < d->ndim; a++) {
        if (!(d->axes & (1u << a)))
            continue;
        axis_pass *p = &plan->pass[plan->npasses++];
        dk_axis_view v = dk_axis_view_of(d, a);
        if (setup->extended[a]) {
            st = plan_extended(plan, setup, a, p, lanes, budget, esize, &scratch_values, msg);
            if (st != DK_OK)
                goto fail;
            if (tiled && !plan->rf)
                plan_ext_tiled(plan, p);
            continue;
        }
        if (tiled && d->mode == DK_GAUSS_EXACT && plan_tiled_rf(plan, setup, a, p))
            continue;
        size_t blocks, m;
        if (d->mode == DK_GAUSS_EXACT) {
            m = setup->halo[a];
            blocks = exact_chunks(dev, lanes, v, m);
        } else {
            m = d->overlap;
            blocks = dk_gauss_line_blocks(v.n, d->blocks);
        }
        if (m > v.n)
            m = v.n; /* a window never reaches past its line anyway */
        p->view = v;
        p->alpha = setup->alpha[a];
        p->blocks = blocks;
        p->m = m;
        p->items = (cl_ulong)v.outer * v.inner * blocks;
        size_t longest = (v.n + blocks - 1) / blocks + 2 * m;
        if (longest > v.n)
            longest = v.n;
        if (tiled && d->mode == DK_GAUSS_OVERLAP && plan_reg_blocks(plan, program, p, longest))
            continue;
        p->groups = (p->items + lanes - 1) / lanes;
        /* A GPU wants neighbouring work-items on neighbouring addresses:
         * strided whole lines already are, and are filtered in place in the
         * output; other windows go to scratch, interleaved across
         * work-items. A CPU thread runs a work-item alone: its lanes' values
         * sit side by side in its own stretch of scratch. */
        p->in_dst = lanes == 1 && blocks == 1 && v.inner > 1;
        p->batch = p->groups;
        if (!p->in_dst) {
            size_t fit = budget / (longest * lanes * esize);
            if (fit < 1)
                fit = 1;
            if (p->batch > fit)
                p->batch = fit;
            p->slot_stride = dev->is_cpu ? longest * lanes : (cl_ulong)lanes;
            p->value_stride = dev->is_cpu ? (cl_ulong)lanes : p->batch * lanes;
            if (p->batch * longest * lanes > scratch_values)
                scratch_values = p->batch * longest * lanes;
        }
    }

    plan->kernel = clCreateKernel(program, "rf_windows", &err);
    CL_TRY_GOTO(err, fail, "gauss: creating kernel rf_windows");
    plan->extended_kernel = clCreateKernel(program, "extended_segments", &err);
    CL_TRY_GOTO(err, fail, "gauss: creating kernel extended_segments");
    /* a plan made for execute_halo (libdakit-mpi's split axes) runs rf_halo
     * alone: no ping-pong buffer or window scratch beside the caller's box */
    int halo_only = 0;
    for (int a = 0; a < d->ndim; a++)
        halo_only |= setup->halo_max[a] != 0;
    if (!halo_only)
        st = dk_opencl_alloc(dev, setup->count * esize, NULL, &plan->temp, msg,
                             "gauss: allocating the plan's ping-pong buffer");
    if (st == DK_OK && scratch_values && !halo_only)
        st = dk_opencl_alloc(dev, scratch_values * esize, NULL, &plan->scratch, msg,
                             "gauss: allocating the plan's scratch");
    if (st != DK_OK)
        goto fail;
    for (int a = 0; a < d->ndim; a++)
        if (setup->halo_max[a]) {
            plan->halo_max = setup->halo_max[a];
            plan->halo_n = d->shape[a];
            plan->halo_lines = setup->count / d->shape[a];
            plan->halo_inner = dk_axis_view_of(d, a).inner;
            plan->halo_alpha = setup->alpha[a];
        }
    if (plan->halo_max) {
        plan->halo_kernel = clCreateKernel(program, "rf_halo", &err);
        CL_TRY_GOTO(err, fail, "gauss: creating kernel rf_halo");
        st = dk_opencl_alloc(dev, 2 * plan->halo_max * plan->halo_lines * esize, NULL, &plan->halo_scratch, msg,
                             "gauss: allocating the plan's halo scratch");
        if (st != DK_OK)
            goto fail;
    }
    *out = plan;
    return DK_OK;
fail:
    gauss_plan_destroy(plan);
    return st;
}

/* An extended axis from src into dst (distinct buffers). */
static cl_int run_extended(gauss_plan *plan, const axis_pass *p, cl_mem src, cl_mem dst)
{
    dk_opencl_device *dev = plan->dev;
    cl_kernel k = plan->extended_kernel;
    cl_ulong n = p->view.n, inner = p->view.inner;
    cl_int sections = p->sections, boundary = plan->boundary, rf = plan->rf, K = plan->K;
    float cval32 = (float)plan->cval, alpha32 = (float)p->alpha;
    double cval64 = plan->cval, alpha64 = p->alpha;
    int f64 = plan->dtype == DK_F64;
    cl_mem scratch = plan->scratch ? plan->scratch : plan->temp;
    cl_int err = CL_SUCCESS;
    err |= clSetKernelArg(k, 0, sizeof src, &src);
    err |= clSetKernelArg(k, 1, sizeof dst, &dst);
    err |= clSetKernelArg(k, 2, sizeof scratch, &scratch);
    err |= clSetKernelArg(k, 3, sizeof p->coef, &p->coef);
    err |= clSetKernelArg(k, 4, sizeof sections, &sections);
    err |= clSetKernelArg(k, 5, sizeof n, &n);
    err |= clSetKernelArg(k, 6, sizeof inner, &inner);
    err |= clSetKernelArg(k, 7, sizeof p->items, &p->items);
    err |= clSetKernelArg(k, 9, sizeof p->segments, &p->segments);
    err |= clSetKernelArg(k, 10, sizeof p->keep, &p->keep);
    err |= clSetKernelArg(k, 11, sizeof p->reach, &p->reach);
    err |= clSetKernelArg(k, 12, sizeof boundary, &boundary);
    err |= f64 ? clSetKernelArg(k, 13, sizeof cval64, &cval64) : clSetKernelArg(k, 13, sizeof cval32, &cval32);
    err |= clSetKernelArg(k, 14, sizeof rf, &rf);
    err |= f64 ? clSetKernelArg(k, 15, sizeof alpha64, &alpha64)
               : clSetKernelArg(k, 15, sizeof alpha32, &alpha32);
    err |= clSetKernelArg(k, 16, sizeof K, &K);
    err |= clSetKernelArg(k, 17, sizeof p->value_stride, &p->value_stride);
    if (err != CL_SUCCESS)
        return CL_INVALID_KERNEL_ARGS;
    for (cl_ulong first = 0; first < p->groups; first += p->batch) {
        cl_ulong count = p->groups - first < p->batch ? p->groups - first : p->batch;
        cl_ulong stop = first + count;
        if ((err = clSetKernelArg(k, 8, sizeof stop, &stop)) != CL_SUCCESS)
            return err;
        size_t local = dev->is_cpu ? 1 : 64;
        size_t global = ((size_t)count + local - 1) / local * local;
        size_t offset = (size_t)first;
        err = clEnqueueNDRangeKernel(dev->queue, k, 1, &offset, &global, &local, 0, NULL, NULL);
        if (err != CL_SUCCESS)
            return err;
    }
    return CL_SUCCESS;
}

/* Launches a tiled kernel whose argument `group0_arg` is the first group's
 * index, over p->ngroups groups of p->local work-items, in slices. */
static cl_int launch_groups(gauss_plan *plan, const axis_pass *p, cl_kernel k, cl_uint group0_arg)
{
    for (cl_ulong group0 = 0; group0 < p->ngroups; group0 += GROUPS_PER_LAUNCH) {
        cl_ulong count = p->ngroups - group0 < GROUPS_PER_LAUNCH ? p->ngroups - group0 : GROUPS_PER_LAUNCH;
        cl_int err = clSetKernelArg(k, group0_arg, sizeof group0, &group0);
        if (err != CL_SUCCESS)
            return err;
        size_t local = p->local, global = (size_t)count * p->local;
        err = clEnqueueNDRangeKernel(plan->dev->queue, k, 1, NULL, &global, &local, 0, NULL, NULL);
        if (err != CL_SUCCESS)
            return err;
    }
    return CL_SUCCESS;
}

/* rf_reg_strided, rf_reg_rows or rf_reg_blocks from src into dst (distinct
 * buffers). */
static cl_int run_reg(gauss_plan *plan, const axis_pass *p, cl_mem src, cl_mem dst)
{
    cl_ulong n = p->view.n, inner = p->view.inner;
    cl_int K = plan->K, constant = plan->constant_boundary, JT = p->JT;
    float alpha32 = (float)p->alpha;
    double alpha64 = p->alpha;
    int f64 = plan->dtype == DK_F64;
    cl_int err = CL_SUCCESS;
    if (p->path == PATH_REG_BLOCKS) {
        cl_kernel k = plan->reg_blocks[p->reg_blocks];
        cl_uint i = 0;
        err |= clSetKernelArg(k, i++, sizeof src, &src);
        err |= clSetKernelArg(k, i++, sizeof dst, &dst);
        err |= clSetKernelArg(k, i++, sizeof n, &n);
        err |= clSetKernelArg(k, i++, sizeof inner, &inner);
        err |= clSetKernelArg(k, i++, sizeof p->items, &p->items);
        err |= clSetKernelArg(k, i++, sizeof p->blocks, &p->blocks);
        err |= clSetKernelArg(k, i++, sizeof p->m, &p->m);
        err |= f64 ? clSetKernelArg(k, i++, sizeof alpha64, &alpha64) : clSetKernelArg(k, i++, sizeof alpha32, &alpha32);
        err |= clSetKernelArg(k, i++, sizeof K, &K);
        err |= clSetKernelArg(k, i++, sizeof constant, &constant);
        if (err != CL_SUCCESS)
            return CL_INVALID_KERNEL_ARGS;
        return launch_groups(plan, p, k, i);
    }
    if (p->path == PATH_REG_STRIDED) {
        cl_kernel k = plan->reg_strided;
        err |= clSetKernelArg(k, 0, sizeof src, &src);
        err |= clSetKernelArg(k, 1, sizeof dst, &dst);
        err |= clSetKernelArg(k, 2, sizeof n, &n);
        err |= clSetKernelArg(k, 3, sizeof inner, &inner);
        err |= clSetKernelArg(k, 4, sizeof p->L, &p->L);
        err |= clSetKernelArg(k, 5, sizeof p->h, &p->h);
        err |= clSetKernelArg(k, 6, sizeof p->ipl, &p->ipl);
        err |= clSetKernelArg(k, 7, sizeof JT, &JT);
        err |= clSetKernelArg(k, 8, sizeof p->nj, &p->nj);
        err |= clSetKernelArg(k, 9, sizeof p->nk, &p->nk);
        err |= f64 ? clSetKernelArg(k, 10, sizeof alpha64, &alpha64)
                   : clSetKernelArg(k, 10, sizeof alpha32, &alpha32);
        err |= clSetKernelArg(k, 11, sizeof K, &K);
        err |= clSetKernelArg(k, 12, sizeof constant, &constant);
        if (err != CL_SUCCESS)
            return CL_INVALID_KERNEL_ARGS;
        return launch_groups(plan, p, k, 13);
    }
    cl_kernel k = plan->reg_rows;
    err |= clSetKernelArg(k, 0, sizeof src, &src);
    err |= clSetKernelArg(k, 1, sizeof dst, &dst);
    err |= clSetKernelArg(k, 2, sizeof n, &n);
    err |= clSetKernelArg(k, 3, sizeof p->L, &p->L);
    err |= clSetKernelArg(k, 4, sizeof p->h, &p->h);
    err |= clSetKernelArg(k, 5, sizeof p->ipl, &p->ipl);
    err |= clSetKernelArg(k, 6, sizeof p->items, &p->items);
    err |= f64 ? clSetKernelArg(k, 7, sizeof alpha64, &alpha64)
               : clSetKernelArg(k, 7, sizeof alpha32, &alpha32);
    err |= clSetKernelArg(k, 8, sizeof K, &K);
    err |= clSetKernelArg(k, 9, sizeof constant, &constant);
    err |= clSetKernelArg(k, 11, p->local_bytes, NULL);
    if (err != CL_SUCCESS)
        return CL_INVALID_KERNEL_ARGS;
    return launch_groups(plan, p, k, 10);
}

/* extended_rows or extended_cols from src into dst (distinct buffers). */
static cl_int run_ext_tiled(gauss_plan *plan, const axis_pass *p, cl_mem src, cl_mem dst)
{
    cl_ulong n = p->view.n, inner = p->view.inner, lines = p->view.outer * p->view.inner;
    cl_int boundary = plan->boundary;
    float cval32 = (float)plan->cval;
    double cval64 = plan->cval;
    int f64 = plan->dtype == DK_F64;
    size_t esize = f64 ? sizeof(double) : sizeof(float);
    cl_int err = CL_SUCCESS;
    cl_uint i = 0;
    cl_kernel k = p->path == PATH_EXT_COLS ? plan->ext_cols[p->sections - 1] : plan->ext_rows[p->sections - 1];
    err |= clSetKernelArg(k, i++, sizeof src, &src);
    err |= clSetKernelArg(k, i++, sizeof dst, &dst);
    err |= clSetKernelArg(k, i++, sizeof p->coef, &p->coef);
    err |= clSetKernelArg(k, i++, sizeof n, &n);
    if (p->path == PATH_EXT_COLS) {
        err |= clSetKernelArg(k, i++, sizeof inner, &inner);
        err |= clSetKernelArg(k, i++, sizeof lines, &lines);
    }
    err |= clSetKernelArg(k, i++, sizeof p->segments, &p->segments);
    err |= clSetKernelArg(k, i++, sizeof p->keep, &p->keep);
    err |= clSetKernelArg(k, i++, sizeof p->reach, &p->reach);
    err |= clSetKernelArg(k, i++, sizeof boundary, &boundary);
    err |= f64 ? clSetKernelArg(k, i++, sizeof cval64, &cval64) : clSetKernelArg(k, i++, sizeof cval32, &cval32);
    const cl_uint group0_arg = i++;
    err |= clSetKernelArg(k, i++, (size_t)p->S * esize, NULL);
    err |= clSetKernelArg(k, i++, (size_t)p->So * esize, NULL);
    err |= clSetKernelArg(k, i++, (size_t)p->So * esize, NULL);
    if (err != CL_SUCCESS)
        return CL_INVALID_KERNEL_ARGS;
    return launch_groups(plan, p, k, group0_arg);
}

/* Filters one axis from src into dst (distinct buffers). */
static cl_int run_pass(gauss_plan *plan, const axis_pass *p, cl_mem src, cl_mem dst)
{
    dk_opencl_device *dev = plan->dev;
    cl_kernel k = plan->kernel;
    cl_ulong n = p->view.n, inner = p->view.inner;
    cl_int in_dst = p->in_dst;
    cl_int K = plan->K, constant = plan->constant_boundary;
    float alpha32 = (float)p->alpha;
    double alpha64 = p->alpha;
    /* The scratch argument must name a buffer even when unused. */
    cl_mem scratch = plan->scratch ? plan->scratch : plan->temp;

    cl_int err = CL_SUCCESS;
    err |= clSetKernelArg(k, 0, sizeof src, &src);
    err |= clSetKernelArg(k, 1, sizeof dst, &dst);
    err |= clSetKernelArg(k, 2, sizeof scratch, &scratch);
    err |= clSetKernelArg(k, 3, sizeof n, &n);
    err |= clSetKernelArg(k, 4, sizeof inner, &inner);
    err |= clSetKernelArg(k, 5, sizeof p->items, &p->items);
    err |= clSetKernelArg(k, 7, sizeof p->blocks, &p->blocks);
    err |= clSetKernelArg(k, 8, sizeof p->m, &p->m);
    if (plan->dtype == DK_F64)
        err |= clSetKernelArg(k, 9, sizeof alpha64, &alpha64);
    else
        err |= clSetKernelArg(k, 9, sizeof alpha32, &alpha32);
    err |= clSetKernelArg(k, 10, sizeof K, &K);
    err |= clSetKernelArg(k, 11, sizeof constant, &constant);
    err |= clSetKernelArg(k, 12, sizeof in_dst, &in_dst);
    err |= clSetKernelArg(k, 13, sizeof p->slot_stride, &p->slot_stride);
    err |= clSetKernelArg(k, 14, sizeof p->value_stride, &p->value_stride);
    if (err != CL_SUCCESS)
        return CL_INVALID_KERNEL_ARGS; /* the or of several codes names none of them */

    size_t most_local = 64;
    size_t kernel_local = 0;
    if (clGetKernelWorkGroupInfo(k, dev->id, CL_KERNEL_WORK_GROUP_SIZE, sizeof kernel_local,
                                 &kernel_local, NULL) == CL_SUCCESS &&
        kernel_local > 0 && kernel_local < most_local)
        most_local = kernel_local;

    for (cl_ulong first = 0; first < p->groups; first += p->batch) {
        cl_ulong count = p->groups - first < p->batch ? p->groups - first : p->batch;
        cl_ulong stop = first + count;
        err = clSetKernelArg(k, 6, sizeof stop, &stop);
        if (err != CL_SUCCESS)
            return err;
        /* A CPU device runs one work-group per thread: keep a few groups per
         * compute unit. Work-items past `stop` return at once. */
        size_t local = most_local;
        if (dev->is_cpu) {
            local = (size_t)(count / (4 * dev->compute_units));
            if (local < 1)
                local = 1;
            if (local > most_local)
                local = most_local;
        }
        size_t global = ((size_t)count + local - 1) / local * local;
        size_t offset = (size_t)first;
        err = clEnqueueNDRangeKernel(dev->queue, k, 1, &offset, &global, &local, 0, NULL, NULL);
        if (err != CL_SUCCESS)
            return err;
    }
    return CL_SUCCESS;
}

static dk_status gauss_execute(void *handle, const void *in_handle, void *out_handle,
                               dk_msg *msg)
{
    gauss_plan *plan = handle;
    dk_opencl_device *dev = plan->dev;
    cl_mem in = (cl_mem)in_handle, out = (cl_mem)out_handle;
    size_t bytes = plan->count * (plan->dtype == DK_F64 ? sizeof(double) : sizeof(float));
    if (plan->halo_max) { /* its ping-pong buffer was never made */
        dk_msg_set(msg, "opencl gauss: this plan was made for execute_halo only");
        return DK_ERR_INVALID_ARGUMENT;
    }
    dk_status st = dk_opencl_enter(dev, msg);
    if (st != DK_OK)
        return st;

    /* Pass i writes into out or temp, alternating so that the last pass
     * writes out and no pass writes the buffer it reads. Only when in is out
     * and the passes are odd in number would the first pass write its own
     * input; the input is then copied into temp first. */
    cl_mem src = in;
    if (plan->npasses == 0 || (in == out && plan->npasses % 2 == 1)) {
        cl_mem to = plan->npasses == 0 ? out : plan->temp;
        if (to != in)
            CL_TRY_GOTO(clEnqueueCopyBuffer(dev->queue, in, to, 0, 0, bytes, 0, NULL, NULL), fail,
                        "gauss: copying the %zu-byte input", bytes);
        src = to;
    }
    for (int i = 0; i < plan->npasses; i++) {
        cl_mem dst = (plan->npasses - 1 - i) % 2 == 0 ? out : plan->temp;
        const axis_pass *p = &plan->pass[i];
        cl_int err = p->path == PATH_EXT_ROWS || p->path == PATH_EXT_COLS
                         ? run_ext_tiled(plan, p, src, dst)
                     : p->path != PATH_WINDOWS  ? run_reg(plan, p, src, dst)
                     : p->extended              ? run_extended(plan, p, src, dst)
                                                : run_pass(plan, p, src, dst);
        CL_TRY_GOTO(err, fail,
                    "gauss: launching the gauss kernel (pass %d of %d)", i + 1, plan->npasses);
        src = dst;
    }
    return dk_opencl_finish(dev, DK_OPENCL_MAY_QUEUE, msg, "gauss: finishing the gauss kernels");
fail:
    clFinish(dev->queue); /* nothing may still touch in or out */
    return st;
}

static dk_status gauss_execute_halo(void *handle, const dk_gauss_halo *h, const void *in_handle,
                                    void *out_handle, dk_msg *msg)
{
    gauss_plan *plan = handle;
    if (!plan || !plan->halo_kernel || !h || in_handle == out_handle || h->lower_count > plan->halo_max ||
        h->upper_count > plan->halo_max || !plan->rf) {
        dk_msg_set(msg, "opencl gauss execute_halo: a plan made for halos, distinct in and out, and halos within "
                        "its halo_max are needed");
        return DK_ERR_INVALID_ARGUMENT;
    }
    dk_opencl_device *dev = plan->dev;
    dk_status st = dk_opencl_enter(dev, msg);
    if (st != DK_OK)
        return st;
    cl_mem in = (cl_mem)in_handle, out = (cl_mem)out_handle, scratch = plan->halo_scratch;
    /* an absent halo is never read; the kernel still needs a buffer there */
    cl_mem lower = h->lower_count ? (cl_mem)h->lower : in, upper = h->upper_count ? (cl_mem)h->upper : in;
    cl_ulong lo_off = h->lower_offset, up_off = h->upper_offset, n = plan->halo_n, lines = plan->halo_lines;
    cl_ulong lc = h->lower_count, uc = h->upper_count, inner = plan->halo_inner;
    cl_kernel k = plan->halo_kernel;
    cl_int err = CL_SUCCESS;
    int arg = 0;
    err |= clSetKernelArg(k, arg++, sizeof in, &in);
    err |= clSetKernelArg(k, arg++, sizeof out, &out);
    err |= clSetKernelArg(k, arg++, sizeof lower, &lower);
    err |= clSetKernelArg(k, arg++, sizeof lo_off, &lo_off);
    err |= clSetKernelArg(k, arg++, sizeof upper, &upper);
    err |= clSetKernelArg(k, arg++, sizeof up_off, &up_off);
    err |= clSetKernelArg(k, arg++, sizeof scratch, &scratch);
    err |= clSetKernelArg(k, arg++, sizeof n, &n);
    err |= clSetKernelArg(k, arg++, sizeof inner, &inner);
    err |= clSetKernelArg(k, arg++, sizeof lines, &lines);
    err |= clSetKernelArg(k, arg++, sizeof lc, &lc);
    err |= clSetKernelArg(k, arg++, sizeof uc, &uc);
    if (plan->dtype == DK_F64) {
        double alpha = plan->halo_alpha;
        err |= clSetKernelArg(k, arg++, sizeof alpha, &alpha);
    } else {
        float alpha = (float)plan->halo_alpha;
        err |= clSetKernelArg(k, arg++, sizeof alpha, &alpha);
    }
    cl_int K = plan->K, constant = plan->constant_boundary;
    err |= clSetKernelArg(k, arg++, sizeof K, &K);
    err |= clSetKernelArg(k, arg++, sizeof constant, &constant);
    CL_TRY_GOTO(err, fail, "gauss: setting rf_halo's arguments");
    size_t local = 64, global = (lines + local - 1) / local * local;
    CL_TRY_GOTO(clEnqueueNDRangeKernel(dev->queue, k, 1, NULL, &global, &local, 0, NULL, NULL), fail,
                "gauss: launching rf_halo");
    return dk_opencl_finish(dev, DK_OPENCL_MAY_QUEUE, msg, "gauss: finishing rf_halo");
fail:
    clFinish(dev->queue);
    return st;
}

const dk_gauss_ops dk_opencl_gauss_ops = {
    .variants = gauss_variants,
    .plan_create = gauss_plan_create,
    .execute = gauss_execute,
    .plan_destroy = gauss_plan_destroy,
    .execute_halo = gauss_execute_halo,
};
