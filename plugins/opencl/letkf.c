/* dakit-opencl letkf: the analysis of dakit/letkf.h in float64 through
 * cl_khr_fp64 (float32 ensembles are widened on reading and rounded once
 * on writing, as the reference does).
 *
 * The plan uploads the grid's positions (made on the host by the kit's
 * dk_letkf_position, the reference's own function), the sorted
 * observations' positions, the buckets and obs_order, and counts once
 * (lk_count) the most observations any point sees, which sizes each
 * point's candidate list. An analysis runs lk_obs (the observation-space
 * perturbations, departures and 1 / r), then over batches of points
 * lk_search, lk_cap (with max_obs), lk_ab and lk_transform, a work-group
 * per point (letkf.cl), then reads a status word once.
 *
 * Variants: "auto" keeps lk_transform's k x k matrices in local memory
 * where they fit (k up to 48 in NVIDIA's 48 KB), else in global scratch;
 * "global" always in global scratch. Programs are built per (dtype, matrix
 * size in local memory or global) and kept by the device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/letkf.h>

#include "opencl_plugin.h"

#include "letkf_cl.h"
#include "letkf_local_cl.h"

static const char *const variants[] = {"auto", "global", NULL};

/* The kernels' largest work-group (LK_WGMAX in letkf.cl), lk_ab's staged
 * doubles (LK_STAGE) and lk_transform's local arrays besides the matrices. */
#define WG_MAX 256
#define STAGE_DOUBLES 2048
#define FIXED_LOCAL_BYTES (2 * WG_MAX * 8 + 64)
/* A batch's candidate lists and matrices stay below this in all. */
#define SCRATCH_BUDGET ((size_t)1 << 30)

typedef struct letkf_plan {
    dk_opencl_device *dev;
    const dk_letkf_setup *s;
    cl_program prog;
    int owns_prog;
    cl_kernel obs, search, cap, ab, transform, interp_a, interp_finish;
    cl_mem gpos, opos, cell_key, cell_start, order, gi, gd; /* the search structure */
    cl_mem yp, dep, rinv;                                   /* observation space, per analysis */
    cl_mem cidx, crho, counts, abuf, mats, status, dummy;   /* per point of a batch */
    int k, kl, wg, capacity;
    size_t batch;
} letkf_plan;

static void release(cl_mem m)
{
    if (m)
        clReleaseMemObject(m);
}

static void plan_destroy(void *handle)
{
    letkf_plan *p = handle;
    if (!p)
        return;
    cl_kernel ks[] = {p->obs, p->search, p->cap, p->ab, p->transform, p->interp_a, p->interp_finish};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        if (ks[i])
            clReleaseKernel(ks[i]);
    cl_mem ms[] = {p->gpos, p->opos, p->cell_key, p->cell_start, p->order, p->gi, p->gd, p->yp, p->dep,
                   p->rinv, p->cidx, p->crho, p->counts, p->abuf, p->mats, p->status, p->dummy};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        release(ms[i]);
    if (p->owns_prog && p->prog)
        clReleaseProgram(p->prog);
    free(p);
}

/* Local bytes of lk_transform with the matrices sized for kl members in
 * local memory (kl = 0: in global scratch), or of lk_ab where more. */
static size_t local_bytes(int kl)
{
    size_t doubles = kl > 0 ? 2 * (size_t)kl * kl + 6 * (size_t)kl + 5 * (size_t)(kl / 2 + 1) : 0;
    size_t bytes = doubles * 8 + FIXED_LOCAL_BYTES;
    return bytes > STAGE_DOUBLES * 8 ? bytes : STAGE_DOUBLES * 8;
}

/* Doubles of lk_transform's global scratch per point (kl = 0): Q, the
 * vectors and the rotations (A stays in the batch's A and b). */
static size_t region_doubles(int k, int kl)
{
    return kl > 0 ? 0 : (size_t)k * k + 6 * (size_t)k + 5 * (size_t)(k / 2 + 1);
}

/* The program for (dtype, kl): from the device's cache, or built (and
 * cached while there is room). */
static dk_status program(letkf_plan *p, int kl, dk_msg *msg)
{
    dk_opencl_device *dev = p->dev;
    int f32 = p->s->desc.dtype == DK_F32;
    int key = kl * 2 + f32, free_at = -1;
    for (int i = 0; i < DK_OPENCL_LETKF_PROGRAMS; i++) {
        if (!dev->letkf[i].program) {
            if (free_at < 0)
                free_at = i;
        } else if (dev->letkf[i].key == key) {
            p->prog = dev->letkf[i].program;
            return DK_OK;
        }
    }
    static const char head[] = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
                               "#pragma OPENCL FP_CONTRACT OFF\n";
    const char *sources[] = {head, dk_opencl_letkf_local_source, dk_opencl_letkf_source};
    char options[64];
    snprintf(options, sizeof options, "-DREAL=%s -DLK_KL=%d", f32 ? "float" : "double", kl);
    dk_status st = dk_opencl_build(dev, 3, sources, options, &p->prog, msg, "letkf: building the kernels");
    if (st != DK_OK)
        return st;
    if (free_at >= 0) {
        dev->letkf[free_at].key = key;
        dev->letkf[free_at].program = p->prog;
    } else {
        p->owns_prog = 1;
    }
    return DK_OK;
}

/* The largest power of two <= x (x >= 1). */
static int floor_pow2(size_t x)
{
    int v = 1;
    while ((size_t)v * 2 <= x)
        v *= 2;
    return v;
}

/* The geometry's fields as lk_geometry reads them. */
static void pack_geometry(const dk_letkf_geometry *g, cl_int gi[9], cl_double gd[14])
{
    gi[0] = g->metric, gi[1] = g->ncoords, gi[2] = g->hdims, gi[3] = g->vertical, gi[4] = g->dims;
    gd[0] = g->radius, gd[1] = g->vradius;
    for (int a = 0; a < DK_LETKF_POS; a++) {
        gi[5 + a] = g->ncell[a];
        gd[2 + a] = g->period[a];
        gd[6 + a] = g->origin[a];
        gd[10 + a] = g->cell[a];
    }
}

#define ARG(kernel, i, value) clSetKernelArg(kernel, i, sizeof(value), &(value))

/* Uploads the search structure and finds the most observations a point sees. */
static dk_status upload(letkf_plan *p, dk_msg *msg)
{
    dk_opencl_device *dev = p->dev;
    const dk_letkf_setup *s = p->s;
    const dk_letkf_desc *d = &s->desc;
    const size_t n = d->n, m = d->m, nc = (size_t)d->ncoords;
    double *pos = malloc(n * DK_LETKF_POS * sizeof *pos);
    if (!pos) {
        dk_msg_set(msg, "opencl letkf: out of host memory for the grid's %zu positions", n);
        return DK_ERR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < n; i++)
        dk_letkf_position(&s->geo, d->grid_coords + i * nc, pos + i * DK_LETKF_POS);
    cl_int gi[9];
    cl_double gd[14];
    pack_geometry(&s->geo, gi, gd);
    cl_int zero = 0;
    dk_status st;
    if ((st = dk_opencl_alloc(dev, n * DK_LETKF_POS * sizeof(double), pos, &p->gpos, msg, "letkf grid positions")) ||
        (st = dk_opencl_alloc(dev, m * DK_LETKF_POS * sizeof(double), s->obs_pos, &p->opos, msg,
                              "letkf observation positions")) ||
        (st = dk_opencl_alloc(dev, s->cells * sizeof(cl_ulong), s->cell_key, &p->cell_key, msg, "letkf bucket keys")) ||
        (st = dk_opencl_alloc(dev, (s->cells + 1) * sizeof(cl_int), s->cell_start, &p->cell_start, msg,
                              "letkf bucket starts")) ||
        (st = dk_opencl_alloc(dev, m * sizeof(cl_int), s->obs_order, &p->order, msg, "letkf observation order")) ||
        (st = dk_opencl_alloc(dev, sizeof gi, gi, &p->gi, msg, "letkf geometry")) ||
        (st = dk_opencl_alloc(dev, sizeof gd, gd, &p->gd, msg, "letkf geometry")) ||
        (st = dk_opencl_alloc(dev, m * (size_t)p->k * sizeof(double), NULL, &p->yp, msg,
                              "letkf observation perturbations")) ||
        (st = dk_opencl_alloc(dev, m * sizeof(double), NULL, &p->dep, msg, "letkf departures")) ||
        (st = dk_opencl_alloc(dev, m * sizeof(double), NULL, &p->rinv, msg, "letkf inverse variances")) ||
        (st = dk_opencl_alloc(dev, sizeof zero, &zero, &p->status, msg, "letkf status")) ||
        (st = dk_opencl_alloc(dev, sizeof(double), NULL, &p->dummy, msg, "letkf placeholder"))) {
        free(pos);
        return st;
    }
    free(pos);

    cl_int err;
    cl_kernel count = clCreateKernel(p->prog, "lk_count", &err);
    CL_TRY(err, "letkf: creating kernel lk_count");
    cl_int cells = (cl_int)s->cells;
    cl_ulong nn = n;
    err = ARG(count, 0, p->gpos) | ARG(count, 1, p->opos) | ARG(count, 2, p->cell_key) | ARG(count, 3, p->cell_start) |
          ARG(count, 4, cells) | ARG(count, 5, p->gi) | ARG(count, 6, p->gd) | ARG(count, 7, nn) |
          ARG(count, 8, p->status);
    size_t local = 64, global = (n + local - 1) / local * local;
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(dev->queue, count, 1, NULL, &global, &local, 0, NULL, NULL);
    cl_int most = 0;
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(dev->queue, p->status, CL_TRUE, 0, sizeof most, &most, 0, NULL, NULL);
    clReleaseKernel(count);
    CL_TRY(err, "letkf: counting each point's observations (lk_count)");
    p->capacity = most > 0 ? most : 1;
    return DK_OK;
}

static dk_status plan_create(void *device, const dk_letkf_setup *setup, void **out, dk_msg *msg)
{
    dk_opencl_device *dev = device;
    if (!dev->fp64) {
        dk_msg_set(msg, "opencl letkf: %s lacks cl_khr_fp64, which the letkf kernels need (they compute in "
                        "float64 for both dtypes); use another backend", dev->name);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    letkf_plan *p = calloc(1, sizeof *p);
    if (!p) {
        dk_msg_set(msg, "opencl letkf: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    p->dev = dev;
    p->s = setup;
    p->k = (int)setup->desc.members;
    const int k = p->k;
    const int global_only = setup->desc.variant && strcmp(setup->desc.variant, "global") == 0;
    cl_ulong local_mem = 0;
    clGetDeviceInfo(dev->id, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_mem, &local_mem, NULL);
    /* matrices sized to k rounded up to 8, so that nearby k share a program */
    int kl = (k + 7) / 8 * 8;
    if (global_only || local_bytes(kl) + 1024 > local_mem)
        kl = 0;
    if (!global_only && kl == 0 && local_bytes(0) + 1024 > local_mem) {
        dk_msg_set(msg, "opencl letkf: %s has %llu bytes of local memory; the kernels need %zu", dev->name,
                   (unsigned long long)local_mem, local_bytes(0) + 1024);
        plan_destroy(p);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    p->kl = kl;
    dk_status st = program(p, kl, msg);
    cl_int err = CL_SUCCESS;
    if (st == DK_OK) {
        struct {
            cl_kernel *kernel;
            const char *name;
        } ks[] = {{&p->obs, "lk_obs"}, {&p->search, "lk_search"}, {&p->cap, "lk_cap"}, {&p->ab, "lk_ab"},
                  {&p->transform, "lk_transform"}, {&p->interp_a, "lk_interp_a"},
                  {&p->interp_finish, "lk_interp_finish"}};
        for (size_t i = 0; i < sizeof ks / sizeof ks[0] && err == CL_SUCCESS; i++) {
            *ks[i].kernel = clCreateKernel(p->prog, ks[i].name, &err);
            if (err != CL_SUCCESS)
                st = dk_opencl_fail(msg, dev, err, "letkf: creating kernel %s", ks[i].name);
        }
    }
    if (st == DK_OK)
        st = upload(p, msg);
    if (st != DK_OK) {
        plan_destroy(p);
        return st;
    }
    /* a work-group of 64 to 256 work-items as k grows (a Jacobi round
     * updates k^2 / 2 pairs of entries), a power of two the kernels allow */
    size_t wg_max = WG_MAX;
    cl_kernel ks[] = {p->search, p->cap, p->ab, p->transform};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        size_t kernel_wg = 0;
        if (clGetKernelWorkGroupInfo(ks[i], dev->id, CL_KERNEL_WORK_GROUP_SIZE, sizeof kernel_wg, &kernel_wg,
                                     NULL) == CL_SUCCESS &&
            kernel_wg > 0 && kernel_wg < wg_max)
            wg_max = kernel_wg;
    }
    long wg = dk_tuning_long("DAKIT_OPENCL_LETKF_WG", k <= 16 ? 64 : k <= 64 ? 128 : 256, 1, WG_MAX);
    p->wg = floor_pow2((size_t)wg < wg_max ? (size_t)wg : wg_max);
    /* points per batch: each holds a candidate list, A and b (and in global
     * memory lk_transform's matrices) until the batch is done */
    size_t per_point = (size_t)p->capacity * (sizeof(cl_int) + sizeof(double)) + sizeof(cl_int) +
                       ((size_t)k * k + (size_t)k + region_doubles(k, kl)) * sizeof(double);
    size_t budget = dev->max_alloc && dev->max_alloc < SCRATCH_BUDGET ? (size_t)dev->max_alloc : SCRATCH_BUDGET;
    size_t batch = (size_t)dk_tuning_long("DAKIT_OPENCL_LETKF_BATCH", (long)(budget / per_point), 1, 1L << 30);
    if (batch > setup->desc.n)
        batch = setup->desc.n;
    if (batch < 1)
        batch = 1;
    p->batch = batch;
    if ((st = dk_opencl_alloc(dev, batch * (size_t)p->capacity * sizeof(cl_int), NULL, &p->cidx, msg,
                              "letkf candidate lists")) ||
        (st = dk_opencl_alloc(dev, batch * (size_t)p->capacity * sizeof(double), NULL, &p->crho, msg,
                              "letkf candidate weights")) ||
        (st = dk_opencl_alloc(dev, batch * sizeof(cl_int), NULL, &p->counts, msg, "letkf observation counts")) ||
        (st = dk_opencl_alloc(dev, batch * ((size_t)k * k + (size_t)k) * sizeof(double), NULL, &p->abuf, msg,
                              "letkf A and b")) ||
        (st = dk_opencl_alloc(dev, batch * region_doubles(k, kl) * sizeof(double), NULL, &p->mats, msg,
                              "letkf matrices"))) {
        plan_destroy(p);
        return st;
    }
    *out = p;
    return DK_OK;
}

/* The analysis, or with tout the transforms of the plan's points (xb, xa,
 * nobs and spread then unused). */
static dk_status run(void *handle, const void *xb, const void *yb, const void *obs, void *xa, void *nobs,
                     void *spread, void *tout, dk_msg *msg)
{
    letkf_plan *p = handle;
    dk_opencl_device *dev = p->dev;
    const dk_letkf_setup *s = p->s;
    const dk_letkf_desc *d = &s->desc;
    dk_status st = dk_opencl_enter(dev, msg);
    if (st != DK_OK)
        return st;
    cl_mem mxb = (cl_mem)xb, myb = (cl_mem)yb, mobs = (cl_mem)obs, mxa = (cl_mem)xa;
    cl_mem mnobs = nobs ? (cl_mem)nobs : p->dummy, mspread = spread ? (cl_mem)spread : p->dummy;
    cl_mem mtout = tout ? (cl_mem)tout : p->dummy;
    if (tout)
        mxb = mxa = p->dummy;
    cl_int m = (cl_int)d->m, k = p->k, cells = (cl_int)s->cells;
    cl_int outputs = (nobs ? 1 : 0) | (spread ? 2 : 0) | (tout ? 4 : 0);
    cl_int cap = d->max_obs > 0 && d->max_obs < d->m ? (cl_int)d->max_obs : 0;
    cl_ulong n = d->n;
    cl_double inflation = d->inflation, rtpp = d->rtpp, rtps = d->rtps;
    cl_int zero = 0;

    cl_kernel ko = p->obs;
    cl_int err = ARG(ko, 0, myb) | ARG(ko, 1, mobs) | ARG(ko, 2, p->order) | ARG(ko, 3, m) | ARG(ko, 4, k) |
                 ARG(ko, 5, p->yp) | ARG(ko, 6, p->dep) | ARG(ko, 7, p->rinv);
    CL_TRY(err, "letkf: setting lk_obs's arguments");
    size_t local = 64, global = ((size_t)m + local - 1) / local * local;
    CL_TRY(clEnqueueNDRangeKernel(dev->queue, ko, 1, NULL, &global, &local, 0, NULL, NULL),
           "letkf: launching lk_obs over %d observations", (int)m);
    CL_TRY(clEnqueueWriteBuffer(dev->queue, p->status, CL_FALSE, 0, sizeof zero, &zero, 0, NULL, NULL),
           "letkf: clearing the status word");

    /* every argument but the batch's first point is set once */
    cl_kernel ks = p->search, kc = p->cap, kb = p->ab, kt = p->transform;
    cl_ulong first = 0;
    err = ARG(ks, 0, p->gpos) | ARG(ks, 1, p->opos) | ARG(ks, 2, p->cell_key) | ARG(ks, 3, p->cell_start) |
          ARG(ks, 4, cells) | ARG(ks, 5, p->gi) | ARG(ks, 6, p->gd) | ARG(ks, 8, p->cidx) | ARG(ks, 9, p->crho) |
          ARG(ks, 10, p->capacity) | ARG(ks, 11, p->counts) | ARG(ks, 12, p->status);
    err |= ARG(kc, 0, p->order) | ARG(kc, 1, cap) | ARG(kc, 3, p->cidx) | ARG(kc, 4, p->crho) |
           ARG(kc, 5, p->capacity) | ARG(kc, 6, p->counts);
    err |= ARG(kb, 0, k) | ARG(kb, 1, p->yp) | ARG(kb, 2, p->dep) | ARG(kb, 3, p->rinv) | ARG(kb, 5, p->cidx) |
           ARG(kb, 6, p->crho) | ARG(kb, 7, p->capacity) | ARG(kb, 8, p->counts) | ARG(kb, 9, p->abuf);
    err |= ARG(kt, 0, k) | ARG(kt, 1, inflation) | ARG(kt, 2, rtpp) | ARG(kt, 3, rtps) | ARG(kt, 5, p->counts) |
           ARG(kt, 6, p->abuf) | ARG(kt, 7, p->mats) | ARG(kt, 8, mxb) | ARG(kt, 9, mxa) | ARG(kt, 10, mnobs) |
           ARG(kt, 11, mspread) | ARG(kt, 12, outputs) | ARG(kt, 13, mtout);
    CL_TRY(err, "letkf: setting the kernels' arguments");
    local = (size_t)p->wg;
    for (first = 0; first < n; first += p->batch) {
        size_t points = n - first < p->batch ? (size_t)(n - first) : p->batch;
        global = points * local;
        err = ARG(ks, 7, first) | ARG(kc, 2, first) | ARG(kb, 4, first) | ARG(kt, 4, first);
        CL_TRY(err, "letkf: setting the batch's first point");
        CL_TRY(clEnqueueNDRangeKernel(dev->queue, ks, 1, NULL, &global, &local, 0, NULL, NULL),
               "letkf: launching lk_search over %zu points", points);
        if (cap > 0)
            CL_TRY(clEnqueueNDRangeKernel(dev->queue, kc, 1, NULL, &global, &local, 0, NULL, NULL),
                   "letkf: launching lk_cap over %zu points", points);
        CL_TRY(clEnqueueNDRangeKernel(dev->queue, kb, 1, NULL, &global, &local, 0, NULL, NULL),
               "letkf: launching lk_ab over %zu points", points);
        CL_TRY(clEnqueueNDRangeKernel(dev->queue, kt, 1, NULL, &global, &local, 0, NULL, NULL),
               "letkf: launching lk_transform over %zu points", points);
    }
    cl_int status = 0;
    CL_TRY(clEnqueueReadBuffer(dev->queue, p->status, CL_TRUE, 0, sizeof status, &status, 0, NULL, NULL),
           "letkf: the analysis (lk_analysis over %zu points, k = %d)", (size_t)n, (int)k);
    if (status != 0) {
        dk_msg_set(msg, "opencl letkf: a point found more than the %d observations the plan counted for it "
                        "(an internal error; please report it)", p->capacity);
        return DK_ERR_BACKEND;
    }
    return dk_opencl_finish(dev, DK_OPENCL_BLOCK, msg, "letkf: the analysis");
}

static dk_status analysis(void *handle, const void *xb, const void *yb, const void *obs, void *xa, void *nobs,
                          void *spread, dk_msg *msg)
{
    return run(handle, xb, yb, obs, xa, nobs, spread, NULL, msg);
}

static dk_status transforms(void *handle, const void *yb, const void *obs, void *T, dk_msg *msg)
{
    return run(handle, NULL, yb, obs, NULL, NULL, NULL, T, msg);
}

static dk_status apply_transforms(void *handle, size_t n, const void *xb, const void *T, const void *indptr,
                                  const void *indices, const void *values, void *xa, void *spread, dk_msg *msg)
{
    letkf_plan *p = handle;
    dk_opencl_device *dev = p->dev;
    dk_status st = dk_opencl_enter(dev, msg);
    if (st != DK_OK)
        return st;
    cl_mem abuf = NULL;
    if ((st = dk_opencl_alloc(dev, (n ? n : 1) * (size_t)p->k * sizeof(double), NULL, &abuf, msg,
                              "letkf interpolated perturbations")))
        return st;
    cl_mem mxb = (cl_mem)xb, mT = (cl_mem)T, mip = (cl_mem)indptr, mix = (cl_mem)indices, mv = (cl_mem)values;
    cl_mem mxa = (cl_mem)xa, msp = spread ? (cl_mem)spread : p->dummy;
    cl_ulong nn = n;
    cl_int k = p->k, want = spread ? 1 : 0;
    cl_double rtps = p->s->desc.rtps;
    cl_kernel ka = p->interp_a, kf = p->interp_finish;
    cl_int err = ARG(ka, 0, nn) | ARG(ka, 1, k) | ARG(ka, 2, mxb) | ARG(ka, 3, mT) | ARG(ka, 4, mip) |
                 ARG(ka, 5, mix) | ARG(ka, 6, mv) | ARG(ka, 7, abuf);
    err |= ARG(kf, 0, nn) | ARG(kf, 1, k) | ARG(kf, 2, rtps) | ARG(kf, 3, mxb) | ARG(kf, 4, abuf) | ARG(kf, 5, mxa) |
           ARG(kf, 6, msp) | ARG(kf, 7, want);
    size_t local = 64, ga = ((size_t)n * (size_t)k + local - 1) / local * local, gf = (n + local - 1) / local * local;
    if (err == CL_SUCCESS && n)
        err = clEnqueueNDRangeKernel(dev->queue, ka, 1, NULL, &ga, &local, 0, NULL, NULL);
    if (err == CL_SUCCESS && n)
        err = clEnqueueNDRangeKernel(dev->queue, kf, 1, NULL, &gf, &local, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        release(abuf);
        return dk_opencl_fail(msg, dev, err, "letkf: launching the interpolated analysis over %zu points", n);
    }
    st = dk_opencl_finish(dev, DK_OPENCL_BLOCK, msg, "letkf: the interpolated analysis");
    release(abuf);
    return st;
}

const dk_letkf_ops dk_opencl_letkf_ops = {
    .variants = variants,
    .plan_create = plan_create,
    .analysis = analysis,
    .plan_destroy = plan_destroy,
    .transforms = transforms,
    .apply_transforms = apply_transforms,
};
