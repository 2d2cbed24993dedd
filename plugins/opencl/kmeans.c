/* dakit-opencl kmeans: the Lloyd loop of dakit/kmeans.h as two kernels per
 * iteration (kmeans.cl says which), and the texture features of the radar
 * pipeline. The iterations are enqueued without waiting; with tol > 0 the
 * host looks at the device's stop flag between batches of them (the
 * kernels of an iteration after convergence do nothing), with tol <= 0 not
 * at all. One blocking read at the end brings the result. Plain k-means
 * with k > DK_KMEANS_MAX_K runs the km_big_* kernels instead (centroids in
 * tiles through local memory), as do its phases and sample weights
 * (km_big_part_*), and the seeding's distance pass is km_seed_distance. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "opencl_plugin.h"

#include "kmeans_cl.h"

/* Iterations enqueued before the host looks at the stop flag (tol > 0). */
#define BATCH 8
/* Work-group size of the point kernels: at least k (one work-item per
 * cluster and slice of a tile in the partial sums). */
#define GROUP 256
/* Assignment groups per compute unit: enough to hide memory latency, few
 * enough that the partials stay small (groups * k * (d + 1) doubles). */
#define GROUPS_PER_CU 8
/* The lanes' sums (add_lanes in kmeans.cl) need this many slices of a tile
 * to beat add_tile: fewer make long serial chains. */
#define LANE_SLICES_MIN 8
#define TEX_GROUPS_PER_CU 4
#define TEX_STATS 9

typedef struct kmeans_plan {
    dk_opencl_device *dev;
    dk_kmeans_setup s;
    cl_mem shape;          /* see shape_of in kmeans.cl */
    cl_kernel first, assign, update, objective;
    cl_kernel tex_planes, tex_features, tex_stats, tex_standardize, tex_init; /* texture plans only */
    cl_kernel part_assign, part_objective, part_sums, part_update; /* the phases (kmeans.h) */
    cl_kernel big_assign, big_sums, big_objective; /* k > DK_KMEANS_MAX_K, plain */
    cl_kernel big_part_assign, big_part_sums, big_part_objective; /* k > DK_KMEANS_MAX_K: the phases */
    cl_kernel seed;        /* km_seed_distance */
    int big;               /* the km_big_* kernels run the iterations */
    int big_rows;          /* centroid rows per local-memory tile of km_big_assign */
    cl_mem seed_one;       /* a float 1, bound where a pass has no centre or near */
    int dm;                /* d rounded up to 4, 8, 16, 32 or 64 */
    size_t group;          /* work-group size, a power of two >= k */
    size_t groups;         /* assignment groups */
    size_t update_group;   /* km_update's work-group size */
    int tile, tile_w;      /* points per tile; with contiguity its width in pixels */
    int lane_slices;       /* slices of the lanes' sums, 0 for add_tile */
    size_t halo_bytes;
    size_t tex_groups;
    cl_mem lab[2];         /* contiguity: previous and current labels */
    cl_mem C, partial, state, move2, obj;
    cl_mem tex_part, tex_st, tex_partial, tex_out;
} kmeans_plan;

static void release(cl_mem m)
{
    if (m)
        clReleaseMemObject(m);
}

static void plan_destroy(void *handle)
{
    kmeans_plan *p = handle;
    if (!p)
        return;
    cl_kernel ks[] = {p->first,      p->assign,       p->update,    p->objective,       p->tex_planes,
                      p->tex_features, p->tex_stats, p->tex_standardize, p->tex_init,
                      p->part_assign,  p->part_objective, p->part_sums, p->part_update,
                      p->big_assign,   p->big_sums,   p->big_objective, p->seed,
                      p->big_part_assign, p->big_part_sums, p->big_part_objective};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        if (ks[i])
            clReleaseKernel(ks[i]);
    cl_mem ms[] = {p->lab[0],   p->lab[1],  p->C,           p->partial, p->state, p->move2,
                   p->obj,      p->shape,   p->tex_part,    p->tex_st,  p->tex_partial, p->tex_out,
                   p->seed_one};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        release(ms[i]);
    free(p);
}

/* The kmeans program, built on the device's first kmeans plan and kept. */
static dk_status program(dk_opencl_device *dev, cl_program *out, dk_msg *msg)
{
    if (dev->kmeans) {
        *out = dev->kmeans;
        return DK_OK;
    }
    cl_device_fp_config fp64 = 0;
    clGetDeviceInfo(dev->id, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof fp64, &fp64, NULL);
    if (!fp64) {
        dk_msg_set(msg, "opencl kmeans: %s lacks cl_khr_fp64, which the centroid sums need "
                        "(the definition sums in double); use another backend", dev->name);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    cl_device_fp_config fp32 = 0;
    clGetDeviceInfo(dev->id, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp32, &fp32, NULL);
    const char *options = (fp32 & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT)
                              ? "-cl-fp32-correctly-rounded-divide-sqrt"
                              : "";
    const char *source = dk_opencl_kmeans_source;
    dk_status st = dk_opencl_build(dev, 1, &source, options, &dev->kmeans, msg,
                                   "kmeans: building the kernels");
    *out = dev->kmeans;
    return st;
}

static size_t pow2_below(size_t v)
{
    size_t p = 1;
    while (p * 2 <= v)
        p *= 2;
    return p;
}

/* The centroids' local memory: k rows of DM floats, then the screening
 * terms (stage_centroids in kmeans.cl). */
static size_t centroid_bytes(const kmeans_plan *p)
{
    return ((size_t)p->s.desc.k * (size_t)(p->dm + 1) + 4) / 4 * 4 * sizeof(float); /* whole float4s */
}

/* The lanes' sums' local memory (at least one double, a valid size). */
static size_t lane_sums_bytes(const kmeans_plan *p)
{
    size_t n = (size_t)p->lane_slices * (size_t)(p->dm + 1) * (size_t)(p->s.desc.k + 1);
    return (n ? n : 1) * sizeof(double);
}

/* A point's row in a tile's local memory: DM features, then its weight in a
 * float4 (XS_ROW in kmeans.cl). */
static size_t tile_row_bytes(const kmeans_plan *p)
{
    return (size_t)(p->dm + 4) * sizeof(float);
}

/* Work-group size and tile of the assignment: GROUP work-items (fewer where
 * the kernels allow fewer, but never fewer than k), and the largest
 * power-of-two tile whose local memory fits the device. */
static dk_status size_groups(kmeans_plan *p, cl_kernel *ks, int nk, dk_msg *msg)
{
    dk_opencl_device *dev = p->dev;
    const dk_kmeans_desc *d = &p->s.desc;
    size_t group = GROUP;
    for (int i = 0; i < nk; i++) {
        size_t most = 0;
        if (clGetKernelWorkGroupInfo(ks[i], dev->id, CL_KERNEL_WORK_GROUP_SIZE, sizeof most, &most, NULL) ==
                CL_SUCCESS &&
            most < group)
            group = most;
    }
    group = pow2_below(group);
    cl_ulong local = 0;
    clGetDeviceInfo(dev->id, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, NULL);
    if (p->big) {
        /* km_big_assign: a tile of centroid rows and the reduction; km_big_sums:
         * a tile of points (features and labels) */
        p->group = group;
        size_t rows = group;
        while (rows > 1 && rows * p->dm * sizeof(float) + group * sizeof(double) + 256 > local)
            rows /= 2;
        size_t t = group;
        while (t > 1 && t * (tile_row_bytes(p) + sizeof(cl_int)) + 256 > local)
            t /= 2;
        if (rows * p->dm * sizeof(float) + group * sizeof(double) + 256 > local) {
            dk_msg_set(msg, "opencl kmeans: %s has %llu bytes of local memory, too few for one centroid row "
                            "(d = %d)", dev->name, (unsigned long long)local, d->d);
            return DK_ERR_NOT_IMPLEMENTED;
        }
        p->big_rows = (int)rows;
        p->tile = (int)t;
        p->tile_w = (int)t;
        p->halo_bytes = sizeof(cl_short);
        return DK_OK;
    }
    if (group < (size_t)d->k) {
        dk_msg_set(msg, "opencl kmeans: %s runs work-groups of at most %zu work-items; the partial sums need "
                        "one per cluster (k = %d); use another backend",
                   dev->name, group, d->k);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    p->group = group;
    const int r = d->window / 2;
    /* besides the tile: centroids, the reduction, the flag and some slack */
    const size_t fixed = centroid_bytes(p) + group * sizeof(double) + 256;
    for (size_t t = group; t >= 1; t /= 2) {
        size_t tw = t < 32 ? t : 32, th = t / tw;
        size_t halo = p->s.contiguity ? (th + 2 * r) * (tw + 2 * r) * sizeof(cl_short) : 0;
        size_t need = fixed + t * (tile_row_bytes(p) + sizeof(cl_int)) + halo;
        if (need <= local) {
            p->tile = (int)t;
            p->tile_w = (int)tw;
            p->halo_bytes = halo ? halo : sizeof(cl_short);
            /* the lanes' sums in what is left, or none (add_tile) where
             * fewer than LANE_SLICES_MIN slices fit */
            size_t slice = (size_t)(p->dm + 1) * (size_t)(d->k + 1) * sizeof(double);
            size_t ls = group / (size_t)(p->dm + 1), fit = (local - need) / slice;
            ls = ls < fit ? ls : fit;
            p->lane_slices = ls >= LANE_SLICES_MIN && dk_tuning_long("DAKIT_OPENCL_KMEANS_LANES", 1, 0, 1) ? (int)ls : 0;
            return DK_OK;
        }
    }
    dk_msg_set(msg, "opencl kmeans: %s has %llu bytes of local memory, too few for the centroids (k = %d, d = %d)",
               dev->name, (unsigned long long)local, d->k, d->d);
    return DK_ERR_NOT_IMPLEMENTED;
}

static dk_status plan_create(void *device, const dk_kmeans_setup *setup, void **out, dk_msg *msg)
{
    dk_opencl_device *dev = device;
    cl_program prog;
    dk_status st = program(dev, &prog, msg);
    if (st != DK_OK)
        return st;
    kmeans_plan *p = calloc(1, sizeof *p);
    if (!p) {
        dk_msg_set(msg, "opencl kmeans: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    p->dev = dev;
    p->s = *setup;
    const dk_kmeans_desc *d = &setup->desc;
    p->dm = d->d <= 4 ? 4 : d->d <= 8 ? 8 : d->d <= 16 ? 16 : d->d <= 32 ? 32 : 64;
    const int texture = d->layout == DK_KMEANS_FEATURE_MAJOR && d->d == DK_KMEANS_TEXTURE_D && d->rows;

    /* the kernels for this many features, then the fixed ones; the texture kernels last, made for texture plans only */
    static const char *const per_d[] = {"km_first_labels", "km_assign", "km_objective", "km_part_assign",
                                        "km_part_objective", "km_big_assign", "km_big_sums", "km_big_objective",
                                        "km_big_part_assign", "km_big_part_sums", "km_big_part_objective"};
    char names[11][40];
    for (int i = 0; i < 11; i++)
        snprintf(names[i], sizeof names[i], "%s_%d", per_d[i], p->dm);
    struct {
        cl_kernel *k;
        const char *name;
    } kernels[] = {{&p->first, names[0]},
                   {&p->assign, names[1]},
                   {&p->objective, names[2]},
                   {&p->update, "km_update"},
                   {&p->part_assign, names[3]},
                   {&p->part_objective, names[4]},
                   {&p->part_sums, "km_part_sums"},
                   {&p->part_update, "km_part_update"},
                   {&p->big_assign, names[5]},
                   {&p->big_sums, names[6]},
                   {&p->big_objective, names[7]},
                   {&p->big_part_assign, names[8]},
                   {&p->big_part_sums, names[9]},
                   {&p->big_part_objective, names[10]},
                   {&p->seed, "km_seed_distance"},
                   {&p->tex_planes, "km_tex_planes"},
                   {&p->tex_features, "km_tex_features"},
                   {&p->tex_stats, "km_tex_stats"},
                   {&p->tex_standardize, "km_tex_standardize"},
                   {&p->tex_init, "km_tex_init"}};
    const int nkernels = texture ? 20 : 15;
    cl_kernel sized[20];
    for (int i = 0; i < nkernels; i++) {
        cl_int err;
        *kernels[i].k = clCreateKernel(prog, kernels[i].name, &err);
        CL_TRY_GOTO(err, fail, "kmeans: creating kernel %s", kernels[i].name);
        sized[i] = *kernels[i].k;
    }
    p->big = !setup->contiguity && d->k > DK_KMEANS_MAX_K;
    st = size_groups(p, sized, nkernels, msg);
    if (st != DK_OK && !setup->contiguity && !p->big) {
        /* the centroids do not fit local memory whole: take them in tiles */
        p->big = 1;
        st = size_groups(p, sized, nkernels, msg);
    }
    if (st != DK_OK)
        goto fail;

    size_t tiles;
    if (setup->contiguity) {
        size_t th = (size_t)(p->tile / p->tile_w);
        tiles = ((d->cols + p->tile_w - 1) / p->tile_w) * ((d->rows + th - 1) / th);
    } else {
        tiles = (d->n + p->tile - 1) / p->tile;
    }
    size_t most = (size_t)(dev->compute_units ? dev->compute_units : 1) * GROUPS_PER_CU;
    p->groups = tiles < most ? tiles : most;
    if (p->groups < 1) /* a part without points still writes its (zero) partials */
        p->groups = 1;
    p->update_group = 1;
    while (p->update_group < p->groups && p->update_group < p->group)
        p->update_group *= 2;
    p->tex_groups = (size_t)(dev->compute_units ? dev->compute_units : 1) * TEX_GROUPS_PER_CU;

    const size_t kd = (size_t)d->k * d->d, pairs = (size_t)d->k * (d->d + 1);
    struct {
        cl_mem *m;
        size_t bytes;
        const char *what;
    } buffers[] = {{&p->C, kd * sizeof(float), "centroids"},
                   {&p->partial, p->groups * pairs * sizeof(double), "partial sums"},
                   {&p->state, 2 * sizeof(cl_int), "state"},
                   {&p->move2, kd * sizeof(double), "moves"},
                   {&p->obj, 2 * p->groups * sizeof(double), "objective partials"},
                   /* contiguity only */
                   {&p->lab[0], d->n * sizeof(cl_int), "labels"},
                   {&p->lab[1], d->n * sizeof(cl_int), "labels"},
                   /* texture plans only */
                   {&p->tex_part, p->tex_groups * TEX_STATS * sizeof(double), "texture statistics"},
                   {&p->tex_st, 16 * sizeof(double), "texture statistics"},
                   {&p->tex_partial, p->tex_groups * (size_t)d->k * 4 * sizeof(double), "texture interval sums"},
                   {&p->tex_out, 8 * sizeof(double), "texture statistics"}};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++) {
        if ((i == 5 || i == 6) && !setup->contiguity)
            continue;
        if (i >= 7 && !texture)
            continue;
        if ((st = dk_opencl_alloc(dev, buffers[i].bytes, NULL, buffers[i].m, msg,
                                  "kmeans: allocating the plan's %s", buffers[i].what)) != DK_OK)
            goto fail;
    }
    cl_float lambda = (cl_float)d->lambda;
    cl_uint lambda_bits;
    memcpy(&lambda_bits, &lambda, sizeof lambda_bits);
    cl_ulong shape[10] = {d->n, setup->stride_point, setup->stride_feature, d->rows, d->cols,
                          (cl_ulong)d->d, (cl_ulong)d->k, (cl_ulong)d->window,
                          (cl_ulong)setup->contiguity, lambda_bits};
    if ((st = dk_opencl_alloc(dev, sizeof shape, NULL, &p->shape, msg,
                              "kmeans: allocating the plan's shape")) != DK_OK ||
        (st = dk_opencl_alloc(dev, sizeof(cl_float), NULL, &p->seed_one, msg,
                              "kmeans: allocating the plan's seeding buffer")) != DK_OK ||
        (st = dk_opencl_enter(dev, msg)) != DK_OK)
        goto fail;
    CL_TRY_GOTO(clEnqueueWriteBuffer(dev->queue, p->shape, CL_TRUE, 0, sizeof shape, shape, 0, NULL,
                                     NULL),
                fail, "kmeans: writing the plan's shape");
    *out = p;
    return DK_OK;
fail:
    plan_destroy(p);
    return st;
}

/* Sets args[0..count) of k in order; NULL sizes mark local memory of that
 * many bytes. */
typedef struct {
    size_t size;
    const void *value;
} karg;

static cl_int set_args(cl_kernel k, const karg *args, int count)
{
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < count && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, (cl_uint)i, args[i].size, args[i].value);
    return err;
}

/* Reads the state, moves and objective partials after the last kernel
 * (err: how enqueueing went) into res. */
static dk_status finish_result(kmeans_plan *p, cl_int err, dk_kmeans_result *res, dk_msg *msg)
{
    dk_opencl_device *dev = p->dev;
    const dk_kmeans_desc *d = &p->s.desc;
    cl_command_queue q = dev->queue;
    const size_t kd = (size_t)d->k * d->d;
    cl_int state[2] = {0, 0};
    double *host = malloc((2 * p->groups + kd) * sizeof *host);
    if (!host) {
        clFinish(q);
        dk_msg_set(msg, "opencl kmeans: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    double *obj = host, *move2 = host + 2 * p->groups;
    /* in-order queue: the last, blocking read finds the others done */
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(q, p->state, CL_FALSE, 0, sizeof state, state, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(q, p->move2, CL_FALSE, 0, kd * sizeof *move2, move2, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(q, p->obj, CL_TRUE, 0, 2 * p->groups * sizeof *obj, obj, 0, NULL, NULL);
    else
        clFinish(q);
    double total = 0, valid = 0, mx = 0;
    for (size_t g = 0; err == CL_SUCCESS && g < p->groups; g++) {
        total += obj[2 * g];
        valid += obj[2 * g + 1];
    }
    for (int c = 0; err == CL_SUCCESS && c < d->k; c++) {
        double m2 = 0;
        for (int f = 0; f < d->d; f++)
            m2 += move2[(size_t)c * d->d + f];
        mx = m2 > mx ? m2 : mx;
    }
    free(host);
    CL_TRY(err, "kmeans: the objective");
    res->iterations = state[0];
    res->objective = total;
    res->last_move = sqrt(mx);
    res->valid = (size_t)valid;
    /* the kernels run back to back with no timestamps between them: the
     * split is not measured here */
    res->assign_seconds = 0;
    res->update_seconds = 0;
    return DK_OK;
}

/* The iterations with the km_big_* kernels (init already in p->C): per
 * iteration km_big_assign, km_big_sums, km_update; then the objective. */
static dk_status big_execute(kmeans_plan *p, cl_mem X, cl_mem mask, cl_int has_mask, cl_mem labels,
                             cl_mem centroids, cl_int vec4, dk_kmeans_result *res, dk_msg *msg)
{
    dk_opencl_device *dev = p->dev;
    const dk_kmeans_desc *d = &p->s.desc;
    cl_command_queue q = dev->queue;
    const size_t kd = (size_t)d->k * d->d, G = p->group, UG = p->update_group;
    const size_t wide = p->groups * G, update_global = kd * UG;
    const cl_ulong groups = p->groups;
    cl_int rows = p->big_rows, tile = p->tile, t0 = 0;
    karg aa[] = {{sizeof X, &X},
                 {sizeof mask, &mask},
                 {sizeof has_mask, &has_mask},
                 {sizeof p->C, &p->C},
                 {sizeof labels, &labels},
                 {sizeof p->state, &p->state},
                 {sizeof p->move2, &p->move2},
                 {sizeof p->shape, &p->shape},
                 {sizeof t0, &t0},
                 {sizeof d->tol, &d->tol},
                 {sizeof vec4, &vec4},
                 {sizeof rows, &rows},
                 {(size_t)rows * p->dm * sizeof(float), NULL},
                 {G * sizeof(double), NULL}};
    karg sa[] = {{sizeof X, &X},
                 {sizeof labels, &labels},
                 {sizeof p->partial, &p->partial},
                 {sizeof p->state, &p->state},
                 {sizeof p->shape, &p->shape},
                 {sizeof vec4, &vec4},
                 {sizeof tile, &tile},
                 {(size_t)tile * tile_row_bytes(p), NULL},
                 {(size_t)tile * sizeof(cl_int), NULL}};
    karg ua[] = {{sizeof p->partial, &p->partial}, {sizeof groups, &groups},       {sizeof p->C, &p->C},
                 {sizeof p->state, &p->state},     {sizeof p->move2, &p->move2},   {sizeof p->shape, &p->shape},
                 {UG * sizeof(double), NULL},      {UG * sizeof(double), NULL}};
    cl_int err = set_args(p->big_assign, aa, 14);
    if (err == CL_SUCCESS)
        err = set_args(p->big_sums, sa, 9);
    if (err == CL_SUCCESS)
        err = set_args(p->update, ua, 8);
    CL_TRY(err, "kmeans: setting the kernels' arguments");
    cl_int state[2] = {0, 0};
    for (cl_int t = 0; t < d->max_iters; t++) {
        err = clSetKernelArg(p->big_assign, 8, sizeof t, &t);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(q, p->big_assign, 1, NULL, &wide, &G, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(q, p->big_sums, 1, NULL, &wide, &G, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(q, p->update, 1, NULL, &update_global, &UG, 0, NULL, NULL);
        CL_TRY(err, "kmeans: enqueueing an iteration");
        if (d->tol > 0 && (t + 1) % BATCH == 0 && t + 1 < d->max_iters) {
            err = clEnqueueReadBuffer(q, p->state, CL_TRUE, 0, sizeof state, state, 0, NULL, NULL);
            CL_TRY(err, "kmeans: running the iterations");
            if (state[1])
                break;
        }
    }
    karg oa[] = {{sizeof X, &X},         {sizeof labels, &labels},   {sizeof p->C, &p->C},
                 {sizeof p->obj, &p->obj}, {sizeof p->shape, &p->shape}, {sizeof vec4, &vec4},
                 {G * sizeof(double), NULL}};
    err = set_args(p->big_objective, oa, 7);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(q, p->big_objective, 1, NULL, &wide, &G, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueCopyBuffer(q, p->C, centroids, 0, 0, kd * sizeof(float), 0, NULL, NULL);
    return finish_result(p, err, res, msg);
}

static dk_status execute(void *handle, const void *points, const void *mask_, const void *init,
                         void *labels_, void *centroids, dk_kmeans_result *res, dk_msg *msg)
{
    kmeans_plan *p = handle;
    dk_opencl_device *dev = p->dev;
    const dk_kmeans_desc *d = &p->s.desc;
    cl_command_queue q = dev->queue;
    cl_mem X = (cl_mem)points, labels = (cl_mem)labels_;
    cl_mem mask = mask_ ? (cl_mem)mask_ : X; /* never read when has_mask is 0 */
    cl_int has_mask = mask_ != NULL;
    const size_t kd = (size_t)d->k * d->d;
    const size_t G = p->group, UG = p->update_group;
    const size_t wide = p->groups * G, update_global = kd * UG;
    /* 16-byte loads: point-major rows of a multiple of 4 floats (buffers
     * start aligned far beyond 16 bytes) */
    cl_int vec4 = p->s.stride_feature == 1 && p->s.stride_point % 4 == 0 && d->d % 4 == 0;
    const cl_ulong groups = p->groups;
    const size_t cs_bytes = centroid_bytes(p);
    dk_status st = dk_opencl_enter(dev, msg);
    if (st != DK_OK)
        return st;
    cl_int zero = 0;
    cl_int err = clEnqueueCopyBuffer(q, (cl_mem)init, p->C, 0, 0, kd * sizeof(float), 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueFillBuffer(q, p->state, &zero, sizeof zero, 0, 2 * sizeof zero, 0, NULL, NULL);
    CL_TRY(err, "kmeans: setting up the iterations");

    if (p->big)
        return big_execute(p, X, mask, has_mask, labels, (cl_mem)centroids, vec4, res, msg);

    if (p->s.contiguity) {
        karg a[] = {{sizeof X, &X},       {sizeof mask, &mask},     {sizeof has_mask, &has_mask},
                    {sizeof p->C, &p->C}, {sizeof p->lab[0], &p->lab[0]}, {sizeof p->shape, &p->shape},
                    {sizeof vec4, &vec4}, {cs_bytes, NULL}};
        err = set_args(p->first, a, 8);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(q, p->first, 1, NULL, &wide, &G, 0, NULL, NULL);
        CL_TRY(err, "kmeans: the first labels");
    }

    cl_int tile = p->tile, tile_w = p->tile_w, t0 = 0, lanes = p->lane_slices;
    karg aa[] = {{sizeof X, &X},
                 {sizeof mask, &mask},
                 {sizeof has_mask, &has_mask},
                 {sizeof p->C, &p->C},
                 {sizeof labels, &labels}, /* prev and cur: set per iteration */
                 {sizeof labels, &labels},
                 {sizeof p->partial, &p->partial},
                 {sizeof p->state, &p->state},
                 {sizeof p->move2, &p->move2},
                 {sizeof p->shape, &p->shape},
                 {sizeof t0, &t0},
                 {sizeof d->tol, &d->tol},
                 {sizeof vec4, &vec4},
                 {sizeof tile, &tile},
                 {sizeof tile_w, &tile_w},
                 {cs_bytes, NULL},
                 {(size_t)tile * tile_row_bytes(p), NULL},
                 {(size_t)tile * sizeof(cl_int), NULL},
                 {p->halo_bytes, NULL},
                 {G * sizeof(double), NULL},
                 {sizeof lanes, &lanes},
                 {lane_sums_bytes(p), NULL}};
    karg ua[] = {{sizeof p->partial, &p->partial}, {sizeof groups, &groups},       {sizeof p->C, &p->C},
                 {sizeof p->state, &p->state},     {sizeof p->move2, &p->move2},   {sizeof p->shape, &p->shape},
                 {UG * sizeof(double), NULL},      {UG * sizeof(double), NULL}};
    err = set_args(p->assign, aa, 22);
    if (err == CL_SUCCESS)
        err = set_args(p->update, ua, 8);
    CL_TRY(err, "kmeans: setting the kernels' arguments");

    cl_int state[2] = {0, 0};
    for (cl_int t = 0; t < d->max_iters; t++) {
        cl_mem prev = p->s.contiguity ? p->lab[t & 1] : labels;
        cl_mem cur = p->s.contiguity ? p->lab[(t + 1) & 1] : labels;
        err = clSetKernelArg(p->assign, 4, sizeof prev, &prev);
        err |= clSetKernelArg(p->assign, 5, sizeof cur, &cur);
        err |= clSetKernelArg(p->assign, 10, sizeof t, &t);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(q, p->assign, 1, NULL, &wide, &G, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(q, p->update, 1, NULL, &update_global, &UG, 0, NULL, NULL);
        CL_TRY(err, "kmeans: enqueueing an iteration");
        if (d->tol > 0 && (t + 1) % BATCH == 0 && t + 1 < d->max_iters) {
            err = clEnqueueReadBuffer(q, p->state, CL_TRUE, 0, sizeof state, state, 0, NULL, NULL);
            CL_TRY(err, "kmeans: running the iterations");
            if (state[1])
                break;
        }
    }

    cl_mem lab0 = p->s.contiguity ? p->lab[0] : labels, lab1 = p->s.contiguity ? p->lab[1] : labels;
    karg oa[] = {{sizeof X, &X},           {sizeof lab0, &lab0},       {sizeof lab1, &lab1},
                 {sizeof labels, &labels}, {sizeof p->C, &p->C},       {sizeof p->obj, &p->obj},
                 {sizeof p->state, &p->state}, {sizeof p->shape, &p->shape}, {sizeof vec4, &vec4},
                 {cs_bytes, NULL},         {G * sizeof(double), NULL}};
    err = set_args(p->objective, oa, 11);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(q, p->objective, 1, NULL, &wide, &G, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueCopyBuffer(q, p->C, (cl_mem)centroids, 0, 0, kd * sizeof(float), 0, NULL, NULL);
    return finish_result(p, err, res, msg);
}

/* ---- the phases of a distributed iteration (dakit/kmeans.h): enqueued
 * on the device's in-order queue without waiting ---- */

static dk_status assign_weighted(void *handle, const void *points, const void *mask_, const void *weights_,
                                 const void *centroids, const void *prev_, void *next_, void *labels_, void *sums_,
                                 const void *state_, dk_msg *msg)
{
    kmeans_plan *p = handle;
    dk_opencl_device *dev = p->dev;
    const dk_kmeans_desc *d = &p->s.desc;
    dk_status st = dk_opencl_enter(dev, msg);
    if (st != DK_OK)
        return st;
    cl_mem wts = weights_ ? (cl_mem)weights_ : p->C;
    cl_int has_w = weights_ != NULL;
    cl_mem X = (cl_mem)points, labels = (cl_mem)labels_, C = (cl_mem)centroids, sums = (cl_mem)sums_,
           state = (cl_mem)state_;
    /* absent buffers are never read: any valid handle stands in */
    cl_mem mask = mask_ ? (cl_mem)mask_ : p->C, prev = prev_ ? (cl_mem)prev_ : p->C, next = next_ ? (cl_mem)next_ : p->C;
    if (!X)
        X = p->C, labels = p->partial; /* no points: nothing is read or written */
    cl_int has_mask = mask_ != NULL, has_prev = prev_ != NULL, has_next = next_ != NULL;
    cl_int vec4 = p->s.stride_feature == 1 && p->s.stride_point % 4 == 0 && d->d % 4 == 0;
    cl_int tile = p->tile, tile_w = p->tile_w, k = d->k, dd = d->d, always = 0, lanes = p->lane_slices;
    const cl_ulong groups = p->groups;
    const size_t G = p->group, UG = p->update_group, wide = p->groups * G;
    const size_t pairs_global = (size_t)d->k * (d->d + 1) * UG;
    karg aa[] = {{sizeof X, &X},
                 {sizeof mask, &mask},
                 {sizeof has_mask, &has_mask},
                 {sizeof C, &C},
                 {sizeof prev, &prev},
                 {sizeof next, &next},
                 {sizeof has_prev, &has_prev},
                 {sizeof has_next, &has_next},
                 {sizeof labels, &labels},
                 {sizeof p->partial, &p->partial},
                 {sizeof state, &state},
                 {sizeof p->shape, &p->shape},
                 {sizeof vec4, &vec4},
                 {sizeof tile, &tile},
                 {sizeof tile_w, &tile_w},
                 {centroid_bytes(p), NULL},
                 {(size_t)tile * tile_row_bytes(p), NULL},
                 {(size_t)tile * sizeof(cl_int), NULL},
                 {p->halo_bytes, NULL},
                 {G * sizeof(double), NULL},
                 {sizeof wts, &wts},
                 {sizeof has_w, &has_w},
                 {sizeof lanes, &lanes},
                 {lane_sums_bytes(p), NULL}};
    karg sa[] = {{sizeof p->partial, &p->partial}, {sizeof groups, &groups}, {sizeof k, &k},
                 {sizeof dd, &dd},                 {sizeof sums, &sums},     {sizeof state, &state},
                 {sizeof always, &always},         {UG * sizeof(double), NULL}};
    cl_int err;
    if (p->big) {
        /* labels, then each group's partials of its chunk: no contiguity here (plan_create) */
        cl_int rows = p->big_rows;
        karg ba[] = {{sizeof X, &X},         {sizeof mask, &mask},   {sizeof has_mask, &has_mask},
                     {sizeof C, &C},         {sizeof labels, &labels}, {sizeof state, &state},
                     {sizeof p->shape, &p->shape}, {sizeof vec4, &vec4}, {sizeof rows, &rows},
                     {(size_t)rows * p->dm * sizeof(float), NULL}};
        karg bs[] = {{sizeof X, &X},
                     {sizeof labels, &labels},
                     {sizeof p->partial, &p->partial},
                     {sizeof state, &state},
                     {sizeof p->shape, &p->shape},
                     {sizeof vec4, &vec4},
                     {sizeof tile, &tile},
                     {(size_t)tile * tile_row_bytes(p), NULL},
                     {(size_t)tile * sizeof(cl_int), NULL},
                     {sizeof wts, &wts},
                     {sizeof has_w, &has_w}};
        err = set_args(p->big_part_assign, ba, 10);
        if (err == CL_SUCCESS)
            err = set_args(p->big_part_sums, bs, 11);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(dev->queue, p->big_part_assign, 1, NULL, &wide, &G, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(dev->queue, p->big_part_sums, 1, NULL, &wide, &G, 0, NULL, NULL);
    } else {
        err = set_args(p->part_assign, aa, 24);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(dev->queue, p->part_assign, 1, NULL, &wide, &G, 0, NULL, NULL);
    }
    if (err == CL_SUCCESS)
        err = set_args(p->part_sums, sa, 8);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(dev->queue, p->part_sums, 1, NULL, &pairs_global, &UG, 0, NULL, NULL);
    CL_TRY(err, "kmeans: enqueueing the assignment and its sums");
    return DK_OK;
}

static dk_status assign_partial(void *handle, const void *points, const void *mask, const void *centroids,
                                const void *prev, void *next, void *labels, void *sums, const void *state,
                                dk_msg *msg)
{
    return assign_weighted(handle, points, mask, NULL, centroids, prev, next, labels, sums, state, msg);
}

static dk_status update(void *handle, const void *sums_, void *centroids, void *state_, dk_msg *msg)
{
    kmeans_plan *p = handle;
    dk_opencl_device *dev = p->dev;
    dk_status st = dk_opencl_enter(dev, msg);
    if (st != DK_OK)
        return st;
    cl_mem sums = (cl_mem)sums_, C = (cl_mem)centroids, state = (cl_mem)state_;
    const size_t G = p->group;
    double tol = p->s.desc.tol;
    karg ua[] = {{sizeof sums, &sums},       {sizeof C, &C},     {sizeof state, &state},
                 {sizeof p->shape, &p->shape}, {sizeof tol, &tol}, {G * sizeof(double), NULL}};
    cl_int err = set_args(p->part_update, ua, 6);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(dev->queue, p->part_update, 1, NULL, &G, &G, 0, NULL, NULL);
    CL_TRY(err, "kmeans: enqueueing the update");
    return DK_OK;
}

static dk_status objective_weighted(void *handle, const void *points, const void *labels_, const void *weights_,
                                    const void *centroids, void *out_, dk_msg *msg)
{
    kmeans_plan *p = handle;
    dk_opencl_device *dev = p->dev;
    const dk_kmeans_desc *d = &p->s.desc;
    dk_status st = dk_opencl_enter(dev, msg);
    if (st != DK_OK)
        return st;
    cl_mem wts = weights_ ? (cl_mem)weights_ : p->C;
    cl_int has_w = weights_ != NULL;
    cl_mem X = points ? (cl_mem)points : p->C, labels = labels_ ? (cl_mem)labels_ : p->C, C = (cl_mem)centroids,
           out = (cl_mem)out_;
    cl_int vec4 = p->s.stride_feature == 1 && p->s.stride_point % 4 == 0 && d->d % 4 == 0;
    cl_int one = 1;
    const cl_ulong groups = p->groups;
    const size_t G = p->group, UG = p->update_group, wide = p->groups * G, two = 2 * UG;
    /* the big kernel reads the centroid rows from global memory */
    karg oa[] = {{sizeof X, &X},         {sizeof labels, &labels}, {sizeof C, &C},
                 {sizeof p->obj, &p->obj}, {sizeof p->shape, &p->shape}, {sizeof vec4, &vec4},
                 {centroid_bytes(p), NULL}, {G * sizeof(double), NULL},
                 {sizeof wts, &wts},       {sizeof has_w, &has_w}};
    karg ba[] = {{sizeof X, &X},           {sizeof labels, &labels},     {sizeof C, &C},
                 {sizeof p->obj, &p->obj}, {sizeof p->shape, &p->shape}, {sizeof vec4, &vec4},
                 {G * sizeof(double), NULL}, {sizeof wts, &wts},         {sizeof has_w, &has_w}};
    cl_kernel obj_kernel = p->big ? p->big_part_objective : p->part_objective;
    /* the two columns summed as one cluster of one feature and its count */
    karg sa[] = {{sizeof p->obj, &p->obj}, {sizeof groups, &groups}, {sizeof one, &one}, {sizeof one, &one},
                 {sizeof out, &out},       {sizeof out, &out},       {sizeof one, &one}, {UG * sizeof(double), NULL}};
    cl_int err = p->big ? set_args(obj_kernel, ba, 9) : set_args(obj_kernel, oa, 10);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(dev->queue, obj_kernel, 1, NULL, &wide, &G, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = set_args(p->part_sums, sa, 8);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(dev->queue, p->part_sums, 1, NULL, &two, &UG, 0, NULL, NULL);
    CL_TRY(err, "kmeans: enqueueing the objective");
    return DK_OK;
}

static dk_status objective(void *handle, const void *points, const void *labels, const void *centroids, void *out,
                           dk_msg *msg)
{
    return objective_weighted(handle, points, labels, NULL, centroids, out, msg);
}

/* The device entered, for a plan that makes texture features. */
static dk_status texture_enter(const kmeans_plan *p, dk_msg *msg)
{
    if (!p->tex_planes) {
        dk_msg_set(msg, "opencl kmeans: this plan makes no texture features");
        return DK_ERR_INVALID_ARGUMENT;
    }
    return dk_opencl_enter(p->dev, msg);
}

static dk_status texture_planes(void *handle, const void *value_, void *planes_, dk_msg *msg)
{
    kmeans_plan *p = handle;
    dk_opencl_device *dev = p->dev;
    dk_status st = texture_enter(p, msg);
    if (st != DK_OK)
        return st;
    cl_mem value = (cl_mem)value_, planes = (cl_mem)planes_;
    cl_ulong n = p->s.desc.n;
    const size_t G = p->group, global = p->tex_groups * G;
    karg a[] = {{sizeof value, &value}, {sizeof planes, &planes}, {sizeof n, &n}};
    cl_int err = set_args(p->tex_planes, a, 3);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(dev->queue, p->tex_planes, 1, NULL, &global, &G, 0, NULL, NULL);
    CL_TRY(err, "kmeans: the texture planes");
    return dk_opencl_finish(dev, DK_OPENCL_MAY_QUEUE, msg, "kmeans: the texture planes");
}

static dk_status texture_features(void *handle, const void *value_, const void *smoothed_, double min_value,
                                  void *points_, void *mask_, void *init_, dk_kmeans_texture_stats *stats,
                                  dk_msg *msg)
{
    kmeans_plan *p = handle;
    dk_opencl_device *dev = p->dev;
    dk_status st = texture_enter(p, msg);
    if (st != DK_OK)
        return st;
    cl_command_queue q = dev->queue;
    cl_mem value = (cl_mem)value_, smoothed = (cl_mem)smoothed_, points = (cl_mem)points_, mask = (cl_mem)mask_,
           init = (cl_mem)init_;
    cl_ulong n = p->s.desc.n, groups = p->tex_groups;
    cl_int k = p->s.desc.k, tile = (cl_int)p->group;
    const size_t G = p->group, global = p->tex_groups * G;
    /* min_value compared in float, as z is: the float nearest at or above */
    cl_float minf = (cl_float)min_value;
    if ((double)minf < min_value)
        minf = nextafterf(minf, INFINITY);
    karg fa[] = {{sizeof value, &value}, {sizeof smoothed, &smoothed}, {sizeof minf, &minf},
                 {sizeof points, &points}, {sizeof mask, &mask},       {sizeof p->tex_part, &p->tex_part},
                 {sizeof n, &n},           {G * sizeof(double), NULL}, {G * sizeof(float), NULL},
                 {G * sizeof(float), NULL}};
    karg sa[] = {{sizeof p->tex_part, &p->tex_part}, {sizeof groups, &groups}, {sizeof k, &k},
                 {sizeof p->tex_st, &p->tex_st},       {G * sizeof(double), NULL}, {G * sizeof(float), NULL},
                 {G * sizeof(float), NULL}};
    karg za[] = {{sizeof points, &points}, {sizeof mask, &mask},  {sizeof p->tex_st, &p->tex_st},
                 {sizeof p->tex_partial, &p->tex_partial}, {sizeof k, &k}, {sizeof n, &n}, {sizeof tile, &tile},
                 {G * tile_row_bytes(p), NULL}, {G * sizeof(cl_int), NULL}, {G * sizeof(double), NULL}};
    karg ia[] = {{sizeof p->tex_partial, &p->tex_partial}, {sizeof groups, &groups}, {sizeof k, &k},
                 {sizeof p->tex_st, &p->tex_st}, {sizeof init, &init}, {sizeof p->tex_out, &p->tex_out},
                 {G * sizeof(double), NULL}, {4 * (size_t)k * sizeof(double), NULL}};
    cl_int err = set_args(p->tex_features, fa, 10);
    if (err == CL_SUCCESS)
        err = set_args(p->tex_stats, sa, 7);
    if (err == CL_SUCCESS)
        err = set_args(p->tex_standardize, za, 10);
    if (err == CL_SUCCESS)
        err = set_args(p->tex_init, ia, 8);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(q, p->tex_features, 1, NULL, &global, &G, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(q, p->tex_stats, 1, NULL, &G, &G, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(q, p->tex_standardize, 1, NULL, &global, &G, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(q, p->tex_init, 1, NULL, &G, &G, 0, NULL, NULL);
    double r[7];
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(q, p->tex_out, CL_TRUE, 0, sizeof r, r, 0, NULL, NULL);
    CL_TRY(err, "kmeans: the texture features");
    stats->valid = (size_t)r[0];
    for (int j = 0; j < DK_KMEANS_TEXTURE_D; j++) {
        stats->mean[j] = r[1 + j];
        stats->sd[j] = r[4 + j];
    }
    return DK_OK;
}

/* ---- the seeding's distance pass (dakit/kmeans.h) ---- */

static dk_status seed_distance_weighted(void *handle, const void *points, const void *mask_, const void *weights_,
                                        const void *centre_, const void *near_, void *out_, void *blocks_,
                                        dk_msg *msg)
{
    kmeans_plan *p = handle;
    dk_opencl_device *dev = p->dev;
    const dk_kmeans_desc *d = &p->s.desc;
    cl_mem X = (cl_mem)points, out = (cl_mem)out_, blocks = (cl_mem)blocks_;
    cl_mem mask = mask_ ? (cl_mem)mask_ : p->seed_one, centre = centre_ ? (cl_mem)centre_ : p->seed_one;
    cl_mem near = near_ ? (cl_mem)near_ : p->seed_one;
    cl_mem wts = weights_ ? (cl_mem)weights_ : p->seed_one;
    cl_int has_mask = mask_ != NULL, has_centre = centre_ != NULL, has_near = near_ != NULL, has_w = weights_ != NULL;
    const size_t G = p->group, nb = (d->n + DK_KMEANS_SEED_BLOCK - 1) / DK_KMEANS_SEED_BLOCK, global = nb * G;
    dk_status st = dk_opencl_enter(dev, msg);
    if (st != DK_OK)
        return st;
    karg a[] = {{sizeof X, &X},           {sizeof mask, &mask},       {sizeof has_mask, &has_mask},
                {sizeof centre, &centre}, {sizeof has_centre, &has_centre}, {sizeof near, &near},
                {sizeof has_near, &has_near}, {sizeof out, &out},     {sizeof blocks, &blocks},
                {sizeof p->shape, &p->shape}, {G * sizeof(double), NULL}, {sizeof wts, &wts},
                {sizeof has_w, &has_w}};
    cl_int err = set_args(p->seed, a, 13);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(dev->queue, p->seed, 1, NULL, &global, &G, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clFinish(dev->queue);
    CL_TRY(err, "kmeans: the seeding's distance pass");
    return DK_OK;
}

static dk_status seed_distance(void *handle, const void *points, const void *mask, const void *centre,
                               const void *near, void *out, void *blocks, dk_msg *msg)
{
    return seed_distance_weighted(handle, points, mask, NULL, centre, near, out, blocks, msg);
}

static dk_status seed_read(void *handle, const void *points, const void *dist, size_t first, size_t count,
                           float *values, size_t point, float *x, dk_msg *msg)
{
    kmeans_plan *p = handle;
    dk_opencl_device *dev = p->dev;
    cl_command_queue q = dev->queue;
    dk_status st = dk_opencl_enter(dev, msg);
    if (st != DK_OK)
        return st;
    cl_int err = CL_SUCCESS;
    if (count)
        err = clEnqueueReadBuffer(q, (cl_mem)dist, CL_FALSE, first * sizeof(float), count * sizeof(float), values,
                                  0, NULL, NULL);
    for (int f = 0; x && f < p->s.desc.d && err == CL_SUCCESS; f++)
        err = clEnqueueReadBuffer(q, (cl_mem)points, CL_FALSE,
                                  (point * p->s.stride_point + (size_t)f * p->s.stride_feature) * sizeof(float),
                                  sizeof(float), x + f, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clFinish(q);
    else
        clFinish(q);
    CL_TRY(err, "kmeans: reading the seeding's distances");
    return DK_OK;
}

static const char *const variants[] = {"tiled", NULL};

const dk_kmeans_ops dk_opencl_kmeans_ops = {
    .variants = variants,
    .plan_create = plan_create,
    .execute = execute,
    .plan_destroy = plan_destroy,
    .texture_planes = texture_planes,
    .texture_features = texture_features,
    .assign_partial = assign_partial,
    .update = update,
    .objective = objective,
    .seed_distance = seed_distance,
    .seed_read = seed_read,
    .assign_weighted = assign_weighted,
    .objective_weighted = objective_weighted,
    .seed_distance_weighted = seed_distance_weighted,
};
