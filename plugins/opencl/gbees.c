/* dakit-opencl gbees: the whole propagation on the OpenCL device, as a
 * sequence of kernels per step (gbees.cl says which and how new cells are
 * made with 32-bit atomics only). The grid never leaves the device, and
 * neither do the step's numbers: the cell count, t, dt (chosen on the
 * device exactly as the engine does), the largest CFL rate and the
 * normalization live in two small device arrays (gbees.cl, ctr and clk),
 * so the host enqueues a batch of steps back to back, sized by its
 * estimate of the steps left, and waits once per batch (advance()).
 * Launches are sized by an upper bound on the cells (the room the batch
 * was given) and return early past the device's count.
 *
 * Capacity: the cell arrays, the index (occupancy at most one half) and
 * the candidate list grow by doubling before a batch; a step whose growth
 * does not fit stops the batch before it changes the grid (a stall), and
 * the host makes room and runs it again, so no cell is ever dropped; a
 * grid that no longer fits the device's memory stops the run with a
 * message saying how large it got.
 *
 * The program is built per (model, dimension): the model file's text
 * (embedded by gbees_models.py from models/all.h) and the flux functions
 * (algorithms/gbees/flux.h, shared with the reference) come before gbees.cl,
 * with the dimension fixed at compile time, and kept in the device for
 * later plans. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/gbees.h>
#include <dakit/kit/gbees/flux.h>

#include "opencl_plugin.h"

#include "gbees_cl.h"
#include "gbees_flux_cl.h"
#include "gbees_models_cl.h"

/* Work-groups of the first reduction stage, at most. */
#define MAX_REDUCE_GROUPS 1024

/* Steps enqueued per batch, at most: the host waits once per batch. */
#define MAX_BATCH 128

/* Below this many cells a batch may double the grid before it stalls
 * (idle work-items of small launches cost little on a GPU); above, and on
 * a CPU device (where each idle work-group still runs its reductions'
 * barrier regions), an eighth, in batches of at most CPU_BATCH steps,
 * which bounds the launches a stall leaves idle. */
#define SMALL_GRID 65536
#define CPU_BATCH 4

/* Up to this many work-groups of cells, gb_grow takes the last step's
 * total from gb_apply's partial sums itself, each work-group alike,
 * instead of a gb_total launch. */
#define FUSED_TOTAL_GROUPS 256

/* ctr[5], as gbees.cl names them */
enum { GB_RUN = 0, GB_STALL = 2, GB_COLLAPSED = 3, GB_LEFT = 4, GB_PRUNED = 5 };

typedef struct gb_ocl {
    dk_opencl_device *dev;
    dk_gbees_setup s;
    int d;
    cl_program prog;
    int owns_prog; /* built for this plan alone (the device's cache was full) */
    int per_step; /* the variant per-step: batches of one step (the host waits every step) */
    cl_kernel init_level, grow, insert, link_new, reduce, reduce_final, scale, waves,
        fluxes, apply, total, settle, prune_mark, scan_top, scan_remap, prune_move, prune_total,
        hash_place, update;
    size_t group; /* work-group size, a power of two */
    size_t n, cap;
    cl_mem key, v, nb, p, rate;           /* the cells */
    cl_mem key2, v2, nb2, p2, rate2;      /* where pruning moves them; then swapped */
    cl_mem flux, wave, back, keep, remap; /* per step */
    cl_mem blocks;                        /* pruning's scan: one int per group of cells */
    cl_mem sum_part, max_part, rate_part; /* one double per group of cells */
    size_t hcap;                          /* index slots, a power of two */
    cl_mem slot;
    size_t ccap; /* candidates */
    cl_mem cand, cand_cell;
    cl_mem ctr;      /* int[16], gbees.cl says what */
    cl_mem clk;      /* double[16], gbees.cl says what */
    cl_int ctr_host[16];
    double clk_host[16];
    cl_mem scalars;  /* double: 0 largest rate of a reduction, 1 probability sum */
    cl_mem partial;  /* MAX_REDUCE_GROUPS doubles */
    cl_mem par;      /* centre, dx, coefficients, threshold */
    cl_mem gauss;    /* mean and inverse covariance (initialization, updates) */
    double max_rate;
    /* the last normalization's sum, read without waiting; checked at the
     * next point where the host waits anyway */
    double pending_sum;
    const char *pending_what;
    double pending_t;
    double t, dt;
    double t0; /* where the open step started */
    int open;  /* a step was cut at the last target: its start is in wave */
    uint64_t steps, cell_steps;
} gb_ocl;

static void release(cl_mem m)
{
    if (m)
        clReleaseMemObject(m);
}

static void plan_destroy(void *handle)
{
    gb_ocl *g = handle;
    if (!g)
        return;
    cl_kernel ks[] = {g->init_level, g->grow,       g->insert,     g->link_new,
                      g->reduce,     g->reduce_final, g->scale,    g->waves,
                      g->fluxes,     g->apply,      g->total,      g->settle,     g->prune_mark,
                      g->scan_top,   g->scan_remap, g->prune_move, g->prune_total, g->hash_place,
                      g->update};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        if (ks[i])
            clReleaseKernel(ks[i]);
    cl_mem ms[] = {g->key,  g->v,    g->nb,   g->p,     g->rate,      g->key2,     g->v2,
                   g->nb2,  g->p2,   g->rate2, g->flux, g->wave,      g->back,     g->keep,
                   g->remap, g->blocks, g->slot, g->cand, g->cand_cell, g->ctr, g->clk, g->scalars,
                   g->partial, g->par, g->gauss, g->sum_part, g->max_part, g->rate_part};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        release(ms[i]);
    if (g->owns_prog && g->prog)
        clReleaseProgram(g->prog);
    free(g);
}

static const char *model_source(const char *name)
{
    for (const dk_opencl_gbees_model_source *m = dk_opencl_gbees_models; m->name; m++)
        if (strcmp(m->name, name) == 0)
            return m->source;
    return NULL;
}

/* The program for the plan's model and dimension: from the device's cache,
 * or built (and cached while there is room). */
static dk_status program(gb_ocl *g, dk_msg *msg)
{
    dk_opencl_device *dev = g->dev;
    const char *name = g->s.model->name;
    if (!dev->fp64) {
        dk_msg_set(msg, "opencl gbees: %s has no double precision (cl_khr_fp64), which gbees needs "
                        "(the scheme is float64 throughout); use another backend", dev->name);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    const char *model = model_source(name);
    if (!model) {
        dk_msg_set(msg, "opencl gbees: model %s has no OpenCL source (the plugin carries the files "
                        "listed in algorithms/gbees/models/all.h); use another backend", name);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    int free_at = -1;
    for (int i = 0; i < DK_OPENCL_GBEES_PROGRAMS; i++) {
        if (!dev->gbees[i].program) {
            if (free_at < 0)
                free_at = i;
            continue;
        }
        if (dev->gbees[i].dim == g->d && strcmp(dev->gbees[i].model, name) == 0) {
            g->prog = dev->gbees[i].program;
            return DK_OK;
        }
    }
    char head[256], tail[128], options[96];
    snprintf(head, sizeof head,
             "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
             "#pragma OPENCL FP_CONTRACT OFF\n" /* the reference is compiled without contraction */
             "#define GB_MODEL_FN\n"
             "#define GB_MODEL(...)\n");
    snprintf(tail, sizeof tail, "\n#define gb_f %s_f\n#define gb_h %s_h\n", name, name);
    snprintf(options, sizeof options, "-DGB_DIM=%d -DGB_NCOEF=%d", g->d, DK_GBEES_MAX_COEF);
    const char *sources[] = {head, model, tail, dk_opencl_gbees_flux_source, dk_opencl_gbees_source};
    cl_program prog;
    dk_status st = dk_opencl_build(dev, 5, sources, options, &prog, msg,
                                   "gbees: building the kernels for model %s", name);
    if (st != DK_OK)
        return st;
    g->prog = prog;
    if (free_at >= 0) {
        /* the table's name, which lives as long as the plugin */
        for (const dk_opencl_gbees_model_source *m = dk_opencl_gbees_models; m->name; m++)
            if (strcmp(m->name, name) == 0)
                dev->gbees[free_at].model = m->name;
        dev->gbees[free_at].dim = g->d;
        dev->gbees[free_at].program = prog;
    } else {
        g->owns_prog = 1;
    }
    return DK_OK;
}

/* Bytes per cell of each cell array, in the order of cell_arrays(). */
static size_t cell_bytes(const gb_ocl *g, int which)
{
    size_t d = (size_t)g->d;
    switch (which) {
    case 0: case 5: return d * sizeof(cl_int);        /* key, key2 */
    case 1: case 6: return d * sizeof(cl_double);     /* v, v2 */
    case 2: case 7: return 2 * d * sizeof(cl_int);    /* nb, nb2 */
    case 3: case 8: case 4: case 9: return sizeof(cl_double); /* p, p2, rate, rate2 */
    case 10: case 11: return d * sizeof(cl_double);   /* flux, wave */
    case 12: return 2 * d * sizeof(cl_double);        /* back */
    default: return sizeof(cl_int);                   /* keep, remap */
    }
}

#define NCELL_ARRAYS 15

static cl_mem *cell_array(gb_ocl *g, int which)
{
    cl_mem *a[NCELL_ARRAYS] = {&g->key,  &g->v,  &g->nb,  &g->p,    &g->rate,
                               &g->key2, &g->v2, &g->nb2, &g->p2,   &g->rate2,
                               &g->flux, &g->wave, &g->back, &g->keep, &g->remap};
    return a[which];
}

/* Room for `want` cells: the arrays double until they hold it; the first
 * five (the grid itself) keep their first n cells. */
static dk_status reserve_cells(gb_ocl *g, size_t want, dk_msg *msg)
{
    dk_opencl_device *dev = g->dev;
    if (want <= g->cap)
        return DK_OK;
    size_t cap = g->cap ? g->cap : 4096;
    while (cap < want)
        cap *= 2;
    size_t largest = cap * cell_bytes(g, 12);
    if (cap > (size_t)INT32_MAX / 2 || (g->dev->max_alloc && largest > g->dev->max_alloc)) {
        dk_msg_set(msg, "opencl gbees: the grid outgrew %s at %zu cells: %zu cells would need "
                        "buffers of %zu bytes, over the device's largest allocation of %zu bytes",
                   g->dev->name, g->n, cap, largest, (size_t)g->dev->max_alloc);
        return DK_ERR_OUT_OF_MEMORY;
    }
    /* a CPU device's allocations succeed past its memory and fail later
     * (or wake the OOM killer): ask for no more than the device has */
    size_t per_cell = 0;
    for (int a = 0; a < NCELL_ARRAYS; a++)
        per_cell += cell_bytes(g, a);
    cl_ulong device_bytes = 0;
    clGetDeviceInfo(g->dev->id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof device_bytes, &device_bytes, NULL);
    if (device_bytes && (double)cap * (per_cell + 2 * sizeof(cl_int)) > (double)device_bytes) {
        dk_msg_set(msg, "opencl gbees: the grid outgrew %s at %zu cells: %zu cells need about %.3g GB, "
                        "the device has %.3g GB",
                   g->dev->name, g->n, cap, cap * (per_cell + 2 * sizeof(cl_int)) / 1e9, device_bytes / 1e9);
        return DK_ERR_OUT_OF_MEMORY;
    }
    cl_mem fresh[NCELL_ARRAYS] = {0}, blocks = NULL, part[3] = {0};
    dk_status st = DK_OK;
    for (int a = 0; a < NCELL_ARRAYS && st == DK_OK; a++)
        st = dk_opencl_alloc(dev, cap * cell_bytes(g, a), NULL, &fresh[a], msg,
                             "gbees: growing the grid from %zu to %zu cells: allocating cell array %d",
                             g->n, want, a);
    if (st == DK_OK)
        st = dk_opencl_alloc(dev, (cap / g->group + 1) * sizeof(cl_int), NULL, &blocks, msg,
                             "gbees: growing the grid from %zu to %zu cells: allocating the scan blocks",
                             g->n, want);
    for (int a = 0; a < 3 && st == DK_OK; a++)
        st = dk_opencl_alloc(dev, (cap / g->group + 1) * sizeof(cl_double), NULL, &part[a], msg,
                             "gbees: growing the grid from %zu to %zu cells: allocating the reduction partials",
                             g->n, want);
    if (st != DK_OK)
        goto fail;
    for (int a = 0; a < 5 && g->n > 0; a++)
        CL_TRY_GOTO(clEnqueueCopyBuffer(dev->queue, *cell_array(g, a), fresh[a], 0, 0,
                                        g->n * cell_bytes(g, a), 0, NULL, NULL),
                    fail, "gbees: growing the grid from %zu to %zu cells: copying cell array %d", g->n,
                    want, a);
    CL_TRY_GOTO(clFinish(dev->queue), fail, "gbees: growing the grid from %zu to %zu cells", g->n, want);
    for (int a = 0; a < NCELL_ARRAYS; a++) {
        release(*cell_array(g, a));
        *cell_array(g, a) = fresh[a];
    }
    release(g->blocks);
    g->blocks = blocks;
    release(g->sum_part);
    release(g->max_part);
    release(g->rate_part);
    g->sum_part = part[0];
    g->max_part = part[1];
    g->rate_part = part[2];
    g->cap = cap;
    return DK_OK;
fail:
    for (int a = 0; a < NCELL_ARRAYS; a++)
        release(fresh[a]);
    release(blocks);
    for (int a = 0; a < 3; a++)
        release(part[a]);
    return st;
}

static cl_int launch(gb_ocl *g, cl_kernel k, size_t items)
{
    if (items == 0)
        return CL_SUCCESS;
    size_t global = (items + g->group - 1) / g->group * g->group;
    return clEnqueueNDRangeKernel(g->dev->queue, k, 1, NULL, &global, &g->group, 0, NULL, NULL);
}

#define ARG(k, i, x) clSetKernelArg(k, i, sizeof(x), &(x))

/* Places cells [from, n) in the index; n < 0: the device's count, at
 * most `items` cells. */
static cl_int place_cells(gb_ocl *g, size_t from, cl_int n, size_t items)
{
    cl_int f = (cl_int)from;
    cl_uint mask = (cl_uint)(g->hcap - 1);
    cl_kernel k = g->hash_place;
    cl_int err = ARG(k, 0, f) | ARG(k, 1, n) | ARG(k, 2, g->ctr) | ARG(k, 3, g->key) | ARG(k, 4, g->slot) |
                 ARG(k, 5, mask);
    return err != CL_SUCCESS ? err : launch(g, k, items);
}

static cl_int place(gb_ocl *g, size_t from)
{
    return place_cells(g, from, (cl_int)g->n, g->n - from);
}

static cl_int clear_slots(gb_ocl *g, cl_mem slot, size_t count)
{
    cl_int empty = -1;
    return clEnqueueFillBuffer(g->dev->queue, slot, &empty, sizeof empty, 0, count * sizeof(cl_int), 0,
                               NULL, NULL);
}

/* An index with room for `want` cells at occupancy one half; when it grows,
 * every cell is placed again. */
static dk_status reserve_index(gb_ocl *g, size_t want, dk_msg *msg)
{
    dk_opencl_device *dev = g->dev;
    if (2 * want <= g->hcap)
        return DK_OK;
    size_t cap = g->hcap ? g->hcap : 8192;
    while (cap < 2 * want)
        cap *= 2;
    if (cap > ((size_t)1 << 31)) {
        dk_msg_set(msg, "opencl gbees: the grid's index cannot hold %zu cells (32-bit slots)", want);
        return DK_ERR_OUT_OF_MEMORY;
    }
    cl_mem slot;
    dk_status st = dk_opencl_alloc(dev, cap * sizeof(cl_int), NULL, &slot, msg,
                                   "gbees: growing the index to %zu slots for %zu cells", cap, want);
    if (st != DK_OK)
        return st;
    release(g->slot);
    g->slot = slot;
    g->hcap = cap;
    cl_int err = clear_slots(g, slot, cap);
    if (err == CL_SUCCESS)
        err = place(g, 0);
    CL_TRY(err, "gbees: rebuilding the index");
    return DK_OK;
}

static dk_status reserve_candidates(gb_ocl *g, size_t want, dk_msg *msg)
{
    dk_opencl_device *dev = g->dev;
    if (want <= g->ccap)
        return DK_OK;
    size_t cap = g->ccap ? g->ccap : 4096;
    while (cap < want)
        cap *= 2;
    if (cap > (size_t)INT32_MAX / 2) {
        dk_msg_set(msg, "opencl gbees: %zu candidate cells in one step are more than 32-bit positions allow",
                   want);
        return DK_ERR_OUT_OF_MEMORY;
    }
    cl_mem cand = NULL, cand_cell = NULL;
    dk_status st = dk_opencl_alloc(dev, cap * g->d * sizeof(cl_int), NULL, &cand, msg,
                                   "gbees: allocating the list for %zu candidate cells", want);
    if (st == DK_OK)
        st = dk_opencl_alloc(dev, cap * sizeof(cl_int), NULL, &cand_cell, msg,
                             "gbees: allocating the cells of %zu candidate cells", want);
    if (st != DK_OK) {
        release(cand);
        release(cand_cell);
        return st;
    }
    release(g->cand);
    release(g->cand_cell);
    g->cand = cand;
    g->cand_cell = cand_cell;
    g->ccap = cap;
    return DK_OK;
}

/* The host's ctr (initialization): n cells, the rest zero but ctr[1]. */
static cl_int put_counters(gb_ocl *g, size_t n, size_t added)
{
    memset(g->ctr_host, 0, sizeof g->ctr_host);
    g->ctr_host[1] = (cl_int)added;
    g->ctr_host[3] = (cl_int)n;
    return clEnqueueWriteBuffer(g->dev->queue, g->ctr, CL_TRUE, 0, sizeof g->ctr_host, g->ctr_host, 0, NULL,
                                NULL);
}

/* scalars[at] = the sum (op 0) or maximum (op 1) of x[0, n). */
static cl_int reduce(gb_ocl *g, cl_mem x, size_t n, int op, int at)
{
    size_t groups = (n + g->group - 1) / g->group;
    if (groups > MAX_REDUCE_GROUPS)
        groups = MAX_REDUCE_GROUPS;
    if (groups == 0)
        groups = 1;
    cl_int cn = (cl_int)n, o = op, ng = (cl_int)groups, a = at;
    cl_kernel k = g->reduce;
    cl_int err = ARG(k, 0, cn) | ARG(k, 1, x) | ARG(k, 2, o) | ARG(k, 3, g->partial) |
                 clSetKernelArg(k, 4, g->group * sizeof(double), NULL);
    size_t global = groups * g->group;
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(g->dev->queue, k, 1, NULL, &global, &g->group, 0, NULL, NULL);
    k = g->reduce_final;
    if (err == CL_SUCCESS)
        err = ARG(k, 0, ng) | ARG(k, 1, g->partial) | ARG(k, 2, o) | ARG(k, 3, g->scalars) | ARG(k, 4, a) |
              clSetKernelArg(k, 5, g->group * sizeof(double), NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(g->dev->queue, k, 1, NULL, &g->group, &g->group, 0, NULL, NULL);
    return err;
}

/* Sums p, divides by the sum on the device, and reads the sum back without
 * waiting; `what` and t name the failure if it was not positive. */
static cl_int normalize_async(gb_ocl *g, const char *what)
{
    cl_int err = reduce(g, g->p, g->n, 0, 1);
    cl_int n = (cl_int)g->n, at = 1;
    cl_kernel k = g->scale;
    if (err == CL_SUCCESS)
        err = ARG(k, 0, n) | ARG(k, 1, g->p) | ARG(k, 2, g->scalars) | ARG(k, 3, at);
    if (err == CL_SUCCESS)
        err = launch(g, k, g->n);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(g->dev->queue, g->scalars, CL_FALSE, sizeof(double), sizeof(double),
                                  &g->pending_sum, 0, NULL, NULL);
    g->pending_what = what;
    g->pending_t = g->t;
    return err;
}

/* Call only after the queue reached a point where the host waited. */
static dk_status check_pending(gb_ocl *g, dk_msg *msg)
{
    const char *what = g->pending_what;
    g->pending_what = NULL;
    if (what && !(g->pending_sum > 0.0 && isfinite(g->pending_sum))) {
        dk_msg_set(msg, what, g->pending_t);
        return DK_ERR_INVALID_ARGUMENT;
    }
    return DK_OK;
}

static dk_status finish(gb_ocl *g, dk_msg *msg)
{
    dk_status st = dk_opencl_finish(g->dev, DK_OPENCL_BLOCK, msg, "gbees: running the step kernels");
    return st != DK_OK ? st : check_pending(g, msg);
}

/* Enqueues the insertion of the candidates the last candidate-making
 * launch listed (ctr[0] of them, at most room; the cells are ctr[3]) as
 * cells n, n + 1, ... (ctr[1] of them); link_new then puts them in their
 * slots. */
static cl_int insert_candidates(gb_ocl *g, size_t room, size_t n_bound)
{
    cl_int r = (cl_int)room, nb = (cl_int)n_bound;
    cl_uint mask = (cl_uint)(g->hcap - 1);
    cl_kernel k = g->insert;
    cl_int err = ARG(k, 0, r) | ARG(k, 1, nb) | ARG(k, 2, g->ctr) | ARG(k, 3, g->cand) | ARG(k, 4, g->key) |
                 ARG(k, 5, g->p) | ARG(k, 6, g->slot) | ARG(k, 7, mask) | ARG(k, 8, g->cand_cell);
    return err != CL_SUCCESS ? err : launch(g, k, room);
}

/* Links cells [ctr[3], ctr[3] + ctr[1]), `items` at most, and leaves their
 * largest rate per work-group in rate_part. */
static cl_int link_new(gb_ocl *g, size_t room, size_t n_bound, size_t items)
{
    cl_int r = (cl_int)room, nb = (cl_int)n_bound;
    cl_uint mask = (cl_uint)(g->hcap - 1);
    cl_kernel k = g->link_new;
    cl_int err = ARG(k, 0, r) | ARG(k, 1, nb) | ARG(k, 2, g->ctr) | ARG(k, 3, g->par) | ARG(k, 4, g->key) |
                 ARG(k, 5, g->slot) | ARG(k, 6, mask) | ARG(k, 7, g->cand) | ARG(k, 8, g->cand_cell) |
                 ARG(k, 9, g->nb) | ARG(k, 10, g->v) | ARG(k, 11, g->rate) | ARG(k, 12, g->rate_part) |
                 clSetKernelArg(k, 13, g->group * sizeof(double), NULL);
    return err != CL_SUCCESS ? err : launch(g, k, items);
}

/* Initialization: launches the candidate-making kernel k (its arguments
 * set but the candidate list, ctr and the list's room) over the n cells
 * and reads the count; a list that overflowed is enlarged and the launch
 * repeated, the grid being unchanged. */
static dk_status find_candidates(gb_ocl *g, cl_kernel k, int arg_cand, size_t items, size_t *ncand,
                                 dk_msg *msg)
{
    dk_opencl_device *dev = g->dev;
    for (;;) {
        cl_int cap = (cl_int)g->ccap;
        cl_int err = put_counters(g, g->n, 0);
        if (err == CL_SUCCESS)
            err = ARG(k, arg_cand, g->cand) | ARG(k, arg_cand + 1, g->ctr) | ARG(k, arg_cand + 2, cap);
        if (err == CL_SUCCESS)
            err = launch(g, k, items);
        cl_int count = 0;
        if (err == CL_SUCCESS)
            err = clEnqueueReadBuffer(g->dev->queue, g->ctr, CL_TRUE, 0, sizeof count, &count, 0, NULL, NULL);
        CL_TRY(err, "gbees: finding new cells");
        dk_status st = check_pending(g, msg);
        if (st != DK_OK)
            return st;
        if (count < 0) {
            dk_msg_set(msg, "opencl gbees: more candidate cells in one step than 32-bit counters allow");
            return DK_ERR_OUT_OF_MEMORY;
        }
        if ((size_t)count <= g->ccap) {
            *ncand = (size_t)count;
            return DK_OK;
        }
        if ((st = reserve_candidates(g, (size_t)count, msg)) != DK_OK)
            return st;
    }
}

static dk_status plan_create(void *device, const dk_gbees_setup *setup, void **out, dk_msg *msg)
{
    gb_ocl *g = calloc(1, sizeof *g);
    if (!g) {
        dk_msg_set(msg, "opencl gbees: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    dk_opencl_device *dev = device;
    g->dev = dev;
    g->s = *setup;
    g->d = setup->dim;
    g->per_step = setup->variant && strcmp(setup->variant, "per-step") == 0;
    dk_status st = program(g, msg);
    if (st != DK_OK)
        goto fail;
    struct {
        cl_kernel *k;
        const char *name;
    } kernels[] = {
        {&g->init_level, "gb_init_level"}, {&g->grow, "gb_grow"},
        {&g->insert, "gb_insert"},         {&g->link_new, "gb_link_new"},
        {&g->reduce, "gb_reduce"},         {&g->reduce_final, "gb_reduce_final"},
        {&g->scale, "gb_scale"},           {&g->waves, "gb_waves"},
        {&g->fluxes, "gb_fluxes"},         {&g->apply, "gb_apply"},
        {&g->total, "gb_total"},           {&g->settle, "gb_settle"},
        {&g->prune_mark, "gb_prune_mark"}, {&g->scan_top, "gb_scan_top"},
        {&g->scan_remap, "gb_scan_remap"}, {&g->prune_move, "gb_prune_move"},
        {&g->prune_total, "gb_prune_total"}, {&g->hash_place, "gb_hash_place"},
        {&g->update, "gb_update"},
    };
    size_t group = 256;
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
        cl_int err;
        *kernels[i].k = clCreateKernel(g->prog, kernels[i].name, &err);
        CL_TRY_GOTO(err, fail, "gbees: creating kernel %s", kernels[i].name);
        size_t most = 0;
        if (clGetKernelWorkGroupInfo(*kernels[i].k, g->dev->id, CL_KERNEL_WORK_GROUP_SIZE, sizeof most, &most,
                                     NULL) == CL_SUCCESS &&
            most < group)
            group = most;
    }
    /* the tree reductions and scans want a power of two */
    g->group = 1;
    while (g->group * 2 <= group)
        g->group *= 2;

    double par[2 * DK_GBEES_MAX_DIM + DK_GBEES_MAX_COEF + 1] = {0};
    for (int i = 0; i < g->d; i++) {
        par[i] = setup->center[i];
        par[g->d + i] = setup->dx[i];
    }
    for (int m = 0; m < DK_GBEES_MAX_COEF; m++)
        par[2 * g->d + m] = setup->model->coef[m];
    par[2 * g->d + DK_GBEES_MAX_COEF] = setup->threshold;
    size_t par_bytes = (2 * (size_t)g->d + DK_GBEES_MAX_COEF + 1) * sizeof(double);
    size_t gauss_bytes = (DK_GBEES_MAX_DIM + DK_GBEES_MAX_DIM * DK_GBEES_MAX_DIM) * sizeof(double);
    if ((st = dk_opencl_alloc(dev, par_bytes, NULL, &g->par, msg, "gbees: allocating the grid's parameters")) !=
            DK_OK ||
        (st = dk_opencl_alloc(dev, gauss_bytes, NULL, &g->gauss, msg, "gbees: allocating the Gaussian's parameters")) !=
            DK_OK ||
        (st = dk_opencl_alloc(dev, sizeof g->ctr_host, NULL, &g->ctr, msg, "gbees: allocating the counters")) !=
            DK_OK ||
        (st = dk_opencl_alloc(dev, sizeof g->clk_host, NULL, &g->clk, msg, "gbees: allocating the clock")) !=
            DK_OK ||
        (st = dk_opencl_alloc(dev, 4 * sizeof(double), NULL, &g->scalars, msg, "gbees: allocating the scalars")) !=
            DK_OK ||
        (st = dk_opencl_alloc(dev, MAX_REDUCE_GROUPS * sizeof(double), NULL, &g->partial, msg,
                              "gbees: allocating the reduction partials")) != DK_OK ||
        (st = dk_opencl_enter(dev, msg)) != DK_OK ||
        (st = reserve_cells(g, 4096, msg)) != DK_OK || (st = reserve_index(g, 4096, msg)) != DK_OK ||
        (st = reserve_candidates(g, 4096, msg)) != DK_OK)
        goto fail;
    CL_TRY_GOTO(clEnqueueWriteBuffer(dev->queue, g->par, CL_TRUE, 0, par_bytes, par, 0, NULL, NULL), fail,
                "gbees: writing the grid's parameters");
    *out = g;
    return DK_OK;
fail:
    plan_destroy(g);
    return st;
}

/* Breadth-first from the mean's cell, level by level on the device, as the
 * engine's gb_init: each level's masses, then its cells at or above the
 * threshold ask for their missing face neighbours. */
static dk_status init(void *handle, const double *mean, const double *inv, double lognorm, dk_msg *msg)
{
    gb_ocl *g = handle;
    dk_opencl_device *dev = g->dev;
    int d = g->d;
    double gauss[DK_GBEES_MAX_DIM + DK_GBEES_MAX_DIM * DK_GBEES_MAX_DIM];
    memcpy(gauss, mean, d * sizeof *gauss);
    memcpy(gauss + d, inv, (size_t)d * d * sizeof *gauss);
    cl_int k0[DK_GBEES_MAX_DIM];
    for (int i = 0; i < d; i++)
        k0[i] = (cl_int)lround((mean[i] - g->s.center[i]) / g->s.dx[i]);
    g->n = 0;
    g->t = 0.0;
    g->open = 0;
    g->pending_what = NULL;
    cl_command_queue q = g->dev->queue;
    dk_status st = dk_opencl_enter(dev, msg);
    if (st != DK_OK)
        return st;
    cl_int err = clEnqueueWriteBuffer(q, g->gauss, CL_TRUE, 0, (d + (size_t)d * d) * sizeof(double), gauss, 0,
                                      NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueWriteBuffer(q, g->key, CL_TRUE, 0, d * sizeof(cl_int), k0, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clear_slots(g, g->slot, g->hcap);
    g->n = 1;
    if (err == CL_SUCCESS)
        err = place(g, 0);
    CL_TRY(err, "gbees: starting the grid");

    cl_kernel k = g->init_level;
    cl_uint mask;
    for (size_t from = 0; from < g->n;) {
        size_t to = g->n;
        cl_int f = (cl_int)from, t = (cl_int)to;
        mask = (cl_uint)(g->hcap - 1);
        err = ARG(k, 0, f) | ARG(k, 1, t) | ARG(k, 2, lognorm) | ARG(k, 3, g->par) | ARG(k, 4, g->gauss) |
              ARG(k, 5, g->key) | ARG(k, 6, g->p) | ARG(k, 7, g->slot) | ARG(k, 8, mask);
        CL_TRY(err, "gbees: setting the initialization's arguments");
        size_t ncand = 0;
        st = find_candidates(g, k, 9, to - from, &ncand, msg);
        if (st != DK_OK)
            return st;
        if (ncand > 0) {
            /* the links come once, below, for every cell */
            if ((st = reserve_cells(g, g->n + ncand, msg)) != DK_OK ||
                (st = reserve_index(g, g->n + ncand, msg)) != DK_OK)
                return st;
            /* the level's cells into their slots before the next level looks */
            err = insert_candidates(g, ncand, g->cap);
            if (err == CL_SUCCESS)
                err = link_new(g, ncand, g->cap, ncand);
            cl_int counters[16];
            if (err == CL_SUCCESS)
                err = clEnqueueReadBuffer(q, g->ctr, CL_TRUE, 0, sizeof counters, counters, 0, NULL, NULL);
            CL_TRY(err, "gbees: growing the initial grid");
            g->n += (size_t)counters[1];
        }
        from = to;
    }
    /* every cell is new: link all and give them velocities */
    err = put_counters(g, 0, g->n);
    if (err == CL_SUCCESS)
        err = link_new(g, g->n, g->cap, g->n);
    if (err == CL_SUCCESS)
        err = reduce(g, g->rate, g->n, 1, 0);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(q, g->scalars, CL_TRUE, 0, sizeof g->max_rate, &g->max_rate, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = normalize_async(g, "the initial density has no mass on the grid (t = %g)");
    CL_TRY(err, "gbees: linking the initial grid");
    st = finish(g, msg);
    if (st != DK_OK)
        return st;
    g->t = 0.0;
    g->dt = 0.0;
    return DK_OK;
}

/* Enqueues gb_apply for step `step` of a batch over n_bound cells and, with
 * `total`, the total (gb_total). */
static cl_int enqueue_apply(gb_ocl *g, cl_int step, size_t n_bound, int total)
{
    cl_int left = GB_LEFT, cell_groups = (cl_int)((n_bound + g->group - 1) / g->group);
    size_t local = g->group * sizeof(double);
    cl_kernel k = g->apply;
    cl_int err = ARG(k, 0, step) | ARG(k, 1, g->ctr) | ARG(k, 2, g->clk) | ARG(k, 3, g->nb) | ARG(k, 4, g->flux) |
                 ARG(k, 5, g->p) | ARG(k, 6, g->wave) | ARG(k, 7, g->sum_part) | clSetKernelArg(k, 8, local, NULL);
    if (err == CL_SUCCESS)
        err = launch(g, k, n_bound);
    k = g->total;
    if (err == CL_SUCCESS && !total)
        return err;
    if (err == CL_SUCCESS)
        err = ARG(k, 0, step) | ARG(k, 1, cell_groups) | ARG(k, 2, left) | ARG(k, 3, g->ctr) | ARG(k, 4, g->clk) |
              ARG(k, 5, g->sum_part) | clSetKernelArg(k, 6, local, NULL);
    if (err == CL_SUCCESS)
        err = launch(g, k, g->group);
    return err;
}

/* Enqueues step `step` of a batch (1 for the first) whose cells stay
 * within n_bound and whose growth lists at most `room` candidates a step:
 * growth (gb_grow, which also applies the last normalization's scaling,
 * gb_insert, gb_link_new), transport (gb_waves, which first
 * takes n, the largest rate, dt and t as the engine's clock does,
 * gb_fluxes, gb_apply with the sum's first stage) and, with `total`, the
 * total (gb_total): six or seven launches, no wait. sum_groups > 0: gb_grow takes the last step's total
 * itself (that step left out gb_total). */
static cl_int enqueue_step(gb_ocl *g, cl_int step, size_t room, size_t n_bound, cl_int sum_groups, int total)
{
    cl_uint mask = (cl_uint)(g->hcap - 1);
    cl_int r = (cl_int)room, nbd = (cl_int)n_bound;
    cl_int link_groups = (cl_int)((room + g->group - 1) / g->group);
    size_t local = g->group * sizeof(double);
    cl_kernel k = g->grow;
    cl_int err = ARG(k, 0, step) | ARG(k, 1, g->par) | ARG(k, 2, g->key) | ARG(k, 3, g->v) | ARG(k, 4, g->nb) |
                 ARG(k, 5, g->p) | ARG(k, 6, g->slot) | ARG(k, 7, mask) | ARG(k, 8, g->cand) | ARG(k, 9, g->ctr) |
                 ARG(k, 10, r) | ARG(k, 11, g->clk) | ARG(k, 12, sum_groups) | ARG(k, 13, g->sum_part) |
                 clSetKernelArg(k, 14, local, NULL);
    if (err == CL_SUCCESS)
        err = launch(g, k, n_bound);
    if (err == CL_SUCCESS)
        err = insert_candidates(g, room, n_bound);
    if (err == CL_SUCCESS)
        err = link_new(g, room, n_bound, room);
    k = g->waves;
    if (err == CL_SUCCESS)
        err = ARG(k, 0, step) | ARG(k, 1, r) | ARG(k, 2, nbd) | ARG(k, 3, link_groups) | ARG(k, 4, g->ctr) |
              ARG(k, 5, g->clk) | ARG(k, 6, g->rate_part) | clSetKernelArg(k, 7, local, NULL) |
              ARG(k, 8, g->par) | ARG(k, 9, g->nb) | ARG(k, 10, g->v) | ARG(k, 11, g->p) | ARG(k, 12, g->wave) |
              ARG(k, 13, g->back);
    if (err == CL_SUCCESS)
        err = launch(g, k, n_bound);
    k = g->fluxes;
    if (err == CL_SUCCESS)
        err = ARG(k, 0, step) | ARG(k, 1, g->ctr) | ARG(k, 2, g->clk) | ARG(k, 3, g->par) | ARG(k, 4, g->nb) |
              ARG(k, 5, g->v) | ARG(k, 6, g->p) | ARG(k, 7, g->wave) | ARG(k, 8, g->back) | ARG(k, 9, g->flux);
    if (err == CL_SUCCESS)
        err = launch(g, k, n_bound);
    if (err == CL_SUCCESS)
        err = enqueue_apply(g, step, n_bound, total);
    return err;
}

/* Enqueues pruning after step `step`: removes the unfed cells below the
 * threshold, keeping the order of the rest (a scan of the keep flags),
 * moves the kept cells into the second set of arrays with their links
 * renumbered and their masses scaled, takes the largest rate and the
 * total again, and rebuilds the index. When the step did not run, every
 * cell is kept and moved as it is. */
static cl_int enqueue_prune(gb_ocl *g, cl_int step, size_t n_bound)
{
    cl_int nblocks = (cl_int)((n_bound + g->group - 1) / g->group);
    size_t ilocal = g->group * sizeof(cl_int), dlocal = g->group * sizeof(double);
    cl_kernel k = g->prune_mark;
    cl_int err = ARG(k, 0, step) | ARG(k, 1, g->ctr) | ARG(k, 2, g->clk) | ARG(k, 3, g->par) | ARG(k, 4, g->nb) |
                 ARG(k, 5, g->v) | ARG(k, 6, g->p) | ARG(k, 7, g->keep) | ARG(k, 8, g->blocks) |
                 clSetKernelArg(k, 9, ilocal, NULL);
    if (err == CL_SUCCESS)
        err = launch(g, k, n_bound);
    k = g->scan_top;
    if (err == CL_SUCCESS)
        err = ARG(k, 0, nblocks) | ARG(k, 1, g->blocks) | ARG(k, 2, g->ctr) | clSetKernelArg(k, 3, ilocal, NULL);
    if (err == CL_SUCCESS)
        err = launch(g, k, g->group);
    k = g->scan_remap;
    if (err == CL_SUCCESS)
        err = ARG(k, 0, g->ctr) | ARG(k, 1, g->keep) | ARG(k, 2, g->blocks) | ARG(k, 3, g->remap) |
              clSetKernelArg(k, 4, ilocal, NULL);
    if (err == CL_SUCCESS)
        err = launch(g, k, n_bound);
    k = g->prune_move;
    if (err == CL_SUCCESS)
        err = ARG(k, 0, step) | ARG(k, 1, g->ctr) | ARG(k, 2, g->clk) | ARG(k, 3, g->remap) | ARG(k, 4, g->key) |
              ARG(k, 5, g->v) | ARG(k, 6, g->nb) | ARG(k, 7, g->p) | ARG(k, 8, g->rate) | ARG(k, 9, g->key2) |
              ARG(k, 10, g->v2) | ARG(k, 11, g->nb2) | ARG(k, 12, g->p2) | ARG(k, 13, g->rate2) |
              ARG(k, 14, g->sum_part) | ARG(k, 15, g->max_part) | clSetKernelArg(k, 16, dlocal, NULL);
    if (err == CL_SUCCESS)
        err = launch(g, k, n_bound);
    if (err != CL_SUCCESS)
        return err;
    cl_mem t;
    t = g->key, g->key = g->key2, g->key2 = t;
    t = g->v, g->v = g->v2, g->v2 = t;
    t = g->nb, g->nb = g->nb2, g->nb2 = t;
    t = g->p, g->p = g->p2, g->p2 = t;
    t = g->rate, g->rate = g->rate2, g->rate2 = t;
    k = g->prune_total;
    err = ARG(k, 0, step) | ARG(k, 1, nblocks) | ARG(k, 2, g->ctr) | ARG(k, 3, g->clk) | ARG(k, 4, g->sum_part) |
          ARG(k, 5, g->max_part) | clSetKernelArg(k, 6, dlocal, NULL);
    if (err == CL_SUCCESS)
        err = launch(g, k, g->group);
    if (err == CL_SUCCESS)
        err = clear_slots(g, g->slot, g->hcap);
    if (err == CL_SUCCESS)
        err = place_cells(g, 0, -1, n_bound);
    return err;
}

/* The settle kernel over n_bound cells after err's enqueues (where they
 * succeeded), then the counters and clocks read back. */
static cl_int settle_and_read(gb_ocl *g, cl_int err, size_t n_bound, cl_int ctr[16], double clk[16])
{
    cl_command_queue q = g->dev->queue;
    cl_kernel k = g->settle;
    if (err == CL_SUCCESS)
        err = ARG(k, 0, g->ctr) | ARG(k, 1, g->clk) | ARG(k, 2, g->p);
    if (err == CL_SUCCESS)
        err = launch(g, k, n_bound);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(q, g->ctr, CL_FALSE, 0, 16 * sizeof *ctr, ctr, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(q, g->clk, CL_TRUE, 0, 16 * sizeof *clk, clk, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        clFinish(q); /* reads and writes of host arrays may still be under way */
    return err;
}

/* A batch of one step outside the step loop, waited for: with `resume`,
 * the step cut at the last target takes the part `part` of its fluxes
 * from its start (gb_apply from wave) and its total; with `prune`,
 * pruning follows (a whole step's, or a cut step's that a measurement
 * update ends). */
static dk_status finish_step(gb_ocl *g, int resume, double part, int prune, dk_msg *msg)
{
    dk_opencl_device *dev = g->dev;
    memset(g->ctr_host, 0, sizeof g->ctr_host);
    memset(g->clk_host, 0, sizeof g->clk_host);
    g->ctr_host[3] = (cl_int)g->n;
    g->ctr_host[4] = 1; /* step 1 ran */
    g->ctr_host[11] = resume;
    g->clk_host[0] = g->max_rate;
    g->clk_host[1] = g->t;
    g->clk_host[2] = g->dt;
    g->clk_host[10] = part;
    cl_command_queue q = dev->queue;
    cl_int err = clEnqueueWriteBuffer(q, g->ctr, CL_FALSE, 0, sizeof g->ctr_host, g->ctr_host, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueWriteBuffer(q, g->clk, CL_FALSE, 0, sizeof g->clk_host, g->clk_host, 0, NULL, NULL);
    if (err == CL_SUCCESS && resume)
        err = enqueue_apply(g, 1, g->n, 1);
    if (err == CL_SUCCESS && prune)
        err = enqueue_prune(g, 1, g->n);
    cl_int ctr[16];
    double clk[16];
    err = settle_and_read(g, err, g->n, ctr, clk);
    CL_TRY(err, "gbees: finishing a step cut at t = %g", g->t);
    if (ctr[5] != GB_RUN) {
        dk_msg_set(msg, ctr[5] == GB_LEFT ? "all probability left the grid at t = %g"
                                          : "all probability was pruned at t = %g", g->t);
        return DK_ERR_INVALID_ARGUMENT;
    }
    g->n = (size_t)ctr[3];
    g->max_rate = clk[0];
    return DK_OK;
}

/* Steps in batches: the host writes ctr and clk, enqueues a batch of
 * steps (pruning after every del_step-th) and the last scaling, and waits
 * once for ctr and clk. A batch holds the steps the CFL limit says are left
 * (128 at most; those past the target return at once), or one step in the
 * variant per-step. Its room: candidates a step, an eighth of the grid
 * and 1024 at least; cells, as many again as the grid (SMALL_GRID) or an
 * eighth, 4096 at least, twice the last batch's growth; a step that needs
 * more stalls the batch, and the next one gets room for it. A step cut
 * at the last target is finished first (finish_step), before growing the
 * arrays, which keeps its start and fluxes only in place. */
static dk_status advance(void *handle, double t_target, int max_steps, dk_msg *msg)
{
    gb_ocl *g = handle;
    dk_opencl_device *dev = g->dev;
    dk_status st = dk_opencl_enter(dev, msg);
    if (st != DK_OK)
        return st;
    if (g->open && g->t < t_target) {
        double part = gb_step_part(g->t0, g->dt, t_target);
        int whole = !(part < 1.0);
        st = finish_step(g, 1, part, whole && g->steps % (uint64_t)g->s.del_step == 0, msg);
        if (st != DK_OK)
            return st;
        g->open = !whole;
        g->t = gb_step_time(g->t0, g->dt, t_target);
    }
    size_t grew = 0, asked = 0; /* the last batch's growth; a stalled step's candidates */
    for (int done = 0; g->t < t_target && (max_steps <= 0 || done < max_steps);) {
        /* the steps left at the CFL step of the largest rate so far */
        int batch = MAX_BATCH;
        double left = (t_target - g->t) * g->max_rate / g->s.cfl;
        if (g->per_step || !(g->max_rate > 0.0))
            batch = 1; /* with no rate, one step reaches the target */
        else if (left < batch)
            batch = left < 1.0 ? 1 : (int)ceil(left);
        if (dev->is_cpu && batch > CPU_BATCH)
            batch = CPU_BATCH;
        if (max_steps > 0 && max_steps - done < batch)
            batch = max_steps - done;
        size_t room = g->n / 8 > 1024 ? g->n / 8 : 1024;
        if (room < 2 * asked)
            room = 2 * asked;
        size_t spare = g->n < SMALL_GRID && !dev->is_cpu ? (g->n > 4096 ? g->n : 4096) : g->n / 8;
        if (spare < 2 * grew)
            spare = 2 * grew;
        if (spare < room)
            spare = room;
        size_t n_bound = g->n + spare;
        if ((st = reserve_candidates(g, room, msg)) != DK_OK || (st = reserve_cells(g, n_bound, msg)) != DK_OK ||
            (st = reserve_index(g, n_bound, msg)) != DK_OK)
            return st;
        memset(g->ctr_host, 0, sizeof g->ctr_host);
        memset(g->clk_host, 0, sizeof g->clk_host);
        g->ctr_host[3] = (cl_int)g->n;
        g->clk_host[0] = g->max_rate;
        g->clk_host[1] = g->t;
        g->clk_host[2] = g->dt;
        g->clk_host[3] = t_target;
        g->clk_host[4] = g->s.cfl;
        cl_command_queue q = dev->queue;
        cl_int err = clEnqueueWriteBuffer(q, g->ctr, CL_FALSE, 0, sizeof g->ctr_host, g->ctr_host, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueWriteBuffer(q, g->clk, CL_FALSE, 0, sizeof g->clk_host, g->clk_host, 0, NULL, NULL);
        /* a step's total waits for the next gb_grow, where there is one and
         * the grid is small */
        cl_int cell_groups = (cl_int)((n_bound + g->group - 1) / g->group);
        int fuse = cell_groups <= FUSED_TOTAL_GROUPS, fused = 0;
        for (cl_int s = 1; s <= batch && err == CL_SUCCESS; s++) {
            int prune = (g->steps + (uint64_t)s) % (uint64_t)g->s.del_step == 0;
            int total = !fuse || prune || s == batch;
            err = enqueue_step(g, s, room, n_bound, fused ? cell_groups : 0, total);
            fused = !total;
            if (err == CL_SUCCESS && prune)
                err = enqueue_prune(g, s, n_bound);
        }
        cl_int ctr[16];
        double clk[16];
        err = settle_and_read(g, err, n_bound, ctr, clk);
        CL_TRY(err, "gbees: running a batch of %d steps", batch);
        if ((st = check_pending(g, msg)) != DK_OK)
            return st;
        size_t before = g->n;
        done += ctr[4];
        g->steps += (uint64_t)ctr[4];
        g->cell_steps += (uint64_t)clk[6];
        g->n = (size_t)ctr[3];
        g->t = clk[1];
        if (ctr[4] > 0) {
            g->dt = clk[2];
            g->open = clk[10] < 1.0;
            g->t0 = clk[11];
        }
        g->max_rate = clk[0];
        grew = g->n > before ? g->n - before : 0;
        switch (ctr[5]) {
        case GB_RUN:
            break;
        case GB_STALL:
            if (ctr[10] < 0) {
                dk_msg_set(msg, "opencl gbees: more candidate cells in one step than 32-bit counters allow");
                return DK_ERR_OUT_OF_MEMORY;
            }
            if (asked < (size_t)ctr[10])
                asked = (size_t)ctr[10];
            if (grew < (size_t)ctr[10])
                grew = (size_t)ctr[10];
            break;
        case GB_COLLAPSED:
            dk_msg_set(msg, "the time step collapsed to %g at t = %g (velocities too large for the grid)", clk[7],
                       g->t);
            return DK_ERR_INVALID_ARGUMENT;
        case GB_LEFT:
            dk_msg_set(msg, "all probability left the grid at t = %g", g->t);
            return DK_ERR_INVALID_ARGUMENT;
        default:
            dk_msg_set(msg, "all probability was pruned at t = %g", g->t);
            return DK_ERR_INVALID_ARGUMENT;
        }
    }
    return finish(g, msg);
}

static dk_status update(void *handle, const double *y, const double *r_inv, int m, dk_msg *msg)
{
    gb_ocl *g = handle;
    dk_opencl_device *dev = g->dev;
    dk_status st = dk_opencl_enter(dev, msg);
    if (st == DK_OK)
        st = finish(g, msg);
    if (st != DK_OK)
        return st;
    /* the update ends a step cut here (engine.h, gb_close_step) */
    if (g->open) {
        g->open = 0;
        if (g->steps % (uint64_t)g->s.del_step == 0 && (st = finish_step(g, 0, 1.0, 1, msg)) != DK_OK)
            return st;
    }
    double gauss[DK_GBEES_MAX_DIM + DK_GBEES_MAX_DIM * DK_GBEES_MAX_DIM];
    memcpy(gauss, y, m * sizeof *gauss);
    memcpy(gauss + m, r_inv, (size_t)m * m * sizeof *gauss);
    cl_int n = (cl_int)g->n, cm = m;
    cl_kernel k = g->update;
    cl_int err = clEnqueueWriteBuffer(g->dev->queue, g->gauss, CL_TRUE, 0, (m + (size_t)m * m) * sizeof(double),
                                      gauss, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = ARG(k, 0, n) | ARG(k, 1, cm) | ARG(k, 2, g->par) | ARG(k, 3, g->gauss) | ARG(k, 4, g->key) |
              ARG(k, 5, g->p);
    if (err == CL_SUCCESS)
        err = launch(g, k, g->n);
    if (err == CL_SUCCESS)
        err = normalize_async(g, "the measurement at t = %g has no support on the grid (likelihood zero everywhere)");
    CL_TRY(err, "gbees: the measurement update");
    return finish(g, msg);
}

static dk_status snapshot(void *handle, double *out, size_t max, size_t *cells, dk_msg *msg)
{
    gb_ocl *g = handle;
    dk_opencl_device *dev = g->dev;
    dk_status st = dk_opencl_enter(dev, msg);
    if (st == DK_OK)
        st = finish(g, msg);
    if (st != DK_OK)
        return st;
    *cells = g->n;
    size_t rows = max < g->n ? max : g->n;
    if (!out || rows == 0)
        return DK_OK;
    int d = g->d;
    cl_int *key = malloc(rows * d * sizeof *key);
    double *p = malloc(rows * sizeof *p);
    if (!key || !p) {
        free(key);
        free(p);
        dk_msg_set(msg, "opencl gbees: out of host memory for a snapshot of %zu cells", rows);
        return DK_ERR_OUT_OF_MEMORY;
    }
    cl_int err = clEnqueueReadBuffer(g->dev->queue, g->key, CL_FALSE, 0, rows * d * sizeof *key, key, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(g->dev->queue, g->p, CL_TRUE, 0, rows * sizeof *p, p, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        clFinish(g->dev->queue); /* the first read may still be under way */
    for (size_t c = 0; err == CL_SUCCESS && c < rows; c++) {
        for (int i = 0; i < d; i++)
            out[c * (d + 1) + i] = g->s.center[i] + g->s.dx[i] * key[c * d + i];
        out[c * (d + 1) + d] = p[c];
    }
    free(key);
    free(p);
    CL_TRY(err, "gbees: reading a snapshot of %zu cells", rows);
    return DK_OK;
}

static void stats(void *handle, dk_gbees_stats *st)
{
    gb_ocl *g = handle;
    st->t = g->t;
    st->steps = g->steps;
    st->cell_steps = g->cell_steps;
    st->cells = g->n;
    st->dt = g->dt;
}

static const char *const variants[] = {"batched", "per-step", NULL};

const dk_gbees_ops dk_opencl_gbees_ops = {
    .variants = variants,
    .plan_create = plan_create,
    .init = init,
    .advance = advance,
    .update = update,
    .snapshot = snapshot,
    .stats = stats,
    .plan_destroy = plan_destroy,
};
