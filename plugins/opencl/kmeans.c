/* dakit-opencl kmeans: the Lloyd loop of dakit/kmeans.h as a sequence of
 * kernels per iteration (kmeans.cl says which). The iterations are enqueued
 * in batches without waiting; the kernels of an iteration after convergence
 * see the device's stop flag and return at once, so the host reads the flag
 * only between batches, not after every iteration. */
#include <stdlib.h>
#include <string.h>

#include "opencl_plugin.h"

#include "kmeans_cl.h"

/* Iterations enqueued before the host looks at the stop flag. */
#define BATCH 8
/* At most this many assignment groups: their partial sums stay small
 * (groups * k * (d + 1) doubles) while the device stays full. */
#define MAX_GROUPS 1024


typedef struct kmeans_plan {
    dk_opencl_device *dev;
    dk_kmeans_setup s;
    cl_mem shape;          /* see shape_of in kmeans.cl */
    cl_kernel first, assign, reduce, update, objective;
    size_t group;          /* work-group size, a power of two */
    size_t groups;         /* assignment groups */
    cl_ulong chunk;        /* points per assignment group */
    cl_mem lab[2];         /* contiguity: previous and current labels */
    cl_mem C, partial, total, state, move, obj;
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
    cl_kernel ks[] = {p->first, p->assign, p->reduce, p->update, p->objective};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        if (ks[i])
            clReleaseKernel(ks[i]);
    release(p->lab[0]);
    release(p->lab[1]);
    release(p->C);
    release(p->partial);
    release(p->total);
    release(p->state);
    release(p->move);
    release(p->obj);
    release(p->shape);
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

    struct {
        cl_kernel *k;
        const char *name;
    } kernels[] = {{&p->first, "km_first_labels"}, {&p->assign, "km_assign"},
                   {&p->reduce, "km_reduce"},      {&p->update, "km_update"},
                   {&p->objective, "km_objective"}};
    size_t group = 256;
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
        cl_int err;
        *kernels[i].k = clCreateKernel(prog, kernels[i].name, &err);
        CL_TRY_GOTO(err, fail, "kmeans: creating kernel %s", kernels[i].name);
        size_t most = 0;
        if (clGetKernelWorkGroupInfo(*kernels[i].k, dev->id, CL_KERNEL_WORK_GROUP_SIZE,
                                     sizeof most, &most, NULL) == CL_SUCCESS &&
            most < group)
            group = most;
    }
    /* the tree sums want a power of two */
    size_t pow2 = 1;
    while (pow2 * 2 <= group)
        pow2 *= 2;
    p->group = pow2;

    /* a few points per work-item at least, and no more groups than
     * MAX_GROUPS */
    size_t chunk = p->group * 4;
    if ((d->n + chunk - 1) / chunk > MAX_GROUPS)
        chunk = (d->n + MAX_GROUPS - 1) / MAX_GROUPS;
    p->chunk = chunk;
    p->groups = (d->n + chunk - 1) / chunk;

    const size_t kd = (size_t)d->k * d->d, pairs = (size_t)d->k * (d->d + 1);
    struct {
        cl_mem *m;
        size_t bytes;
        const char *what;
    } buffers[] = {{&p->C, kd * sizeof(float), "centroids"},
                   {&p->partial, p->groups * pairs * sizeof(double), "partial sums"},
                   {&p->total, pairs * sizeof(double), "sums"},
                   {&p->state, 2 * sizeof(cl_int), "state"},
                   {&p->move, sizeof(double), "move"},
                   {&p->obj, 2 * p->groups * sizeof(double), "objective partials"},
                   /* the last two only with contiguity */
                   {&p->lab[0], d->n * sizeof(cl_int), "labels"},
                   {&p->lab[1], d->n * sizeof(cl_int), "labels"}};
    size_t nbuffers = sizeof buffers / sizeof buffers[0] - (setup->contiguity ? 0 : 2);
    for (size_t i = 0; i < nbuffers; i++)
        if ((st = dk_opencl_alloc(dev, buffers[i].bytes, NULL, buffers[i].m, msg,
                                  "kmeans: allocating the plan's %s", buffers[i].what)) != DK_OK)
            goto fail;
    cl_float lambda = (cl_float)d->lambda;
    cl_uint lambda_bits;
    memcpy(&lambda_bits, &lambda, sizeof lambda_bits);
    cl_ulong shape[10] = {d->n, setup->stride_point, setup->stride_feature, d->rows, d->cols,
                          (cl_ulong)d->d, (cl_ulong)d->k, (cl_ulong)d->window,
                          (cl_ulong)setup->contiguity, lambda_bits};
    if ((st = dk_opencl_alloc(dev, sizeof shape, NULL, &p->shape, msg,
                              "kmeans: allocating the plan's shape")) != DK_OK ||
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
    const cl_int pairs = d->k * (d->d + 1);
    const size_t G = p->group;
    const size_t wide = p->groups * G; /* global size of the point kernels */
    dk_status st = dk_opencl_enter(dev, msg);
    if (st != DK_OK)
        return st;
    cl_int err = clEnqueueCopyBuffer(q, (cl_mem)init, p->C, 0, 0, kd * sizeof(float), 0, NULL, NULL);
    cl_int zero[2] = {0, 0};
    if (err == CL_SUCCESS)
        err = clEnqueueWriteBuffer(q, p->state, CL_FALSE, 0, sizeof zero, zero, 0, NULL, NULL);
    CL_TRY(err, "kmeans: setting up the iterations");

    if (p->s.contiguity) {
        cl_kernel k = p->first;
        err = clSetKernelArg(k, 0, sizeof X, &X);
        err |= clSetKernelArg(k, 1, sizeof mask, &mask);
        err |= clSetKernelArg(k, 2, sizeof has_mask, &has_mask);
        err |= clSetKernelArg(k, 3, sizeof p->C, &p->C);
        err |= clSetKernelArg(k, 4, sizeof p->lab[0], &p->lab[0]);
        err |= clSetKernelArg(k, 5, sizeof p->shape, &p->shape);
        err |= clSetKernelArg(k, 6, kd * sizeof(float), NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(q, k, 1, NULL, &wide, &G, 0, NULL, NULL);
        CL_TRY(err, "kmeans: the first labels");
    }

    cl_kernel a = p->assign, r = p->reduce, u = p->update;
    cl_ulong groups = p->groups;
    err = clSetKernelArg(a, 0, sizeof X, &X);
    err |= clSetKernelArg(a, 1, sizeof mask, &mask);
    err |= clSetKernelArg(a, 2, sizeof has_mask, &has_mask);
    err |= clSetKernelArg(a, 3, sizeof p->C, &p->C);
    err |= clSetKernelArg(a, 6, sizeof p->partial, &p->partial);
    err |= clSetKernelArg(a, 7, sizeof p->state, &p->state);
    err |= clSetKernelArg(a, 8, sizeof p->shape, &p->shape);
    err |= clSetKernelArg(a, 9, sizeof p->chunk, &p->chunk);
    err |= clSetKernelArg(a, 10, kd * sizeof(float), NULL);
    err |= clSetKernelArg(r, 0, sizeof p->partial, &p->partial);
    err |= clSetKernelArg(r, 1, sizeof p->total, &p->total);
    err |= clSetKernelArg(r, 2, sizeof p->state, &p->state);
    err |= clSetKernelArg(r, 3, sizeof groups, &groups);
    err |= clSetKernelArg(r, 4, sizeof pairs, &pairs);
    err |= clSetKernelArg(r, 5, G * sizeof(double), NULL);
    err |= clSetKernelArg(u, 0, sizeof p->total, &p->total);
    err |= clSetKernelArg(u, 1, sizeof p->C, &p->C);
    err |= clSetKernelArg(u, 2, sizeof p->state, &p->state);
    err |= clSetKernelArg(u, 3, sizeof p->move, &p->move);
    err |= clSetKernelArg(u, 4, sizeof d->tol, &d->tol);
    err |= clSetKernelArg(u, 5, sizeof p->shape, &p->shape);
    err |= clSetKernelArg(u, 6, (size_t)d->k * sizeof(double), NULL);
    CL_TRY(err, "kmeans: setting the kernels' arguments");

    const size_t reduce_global = (size_t)pairs * G;
    cl_int state[2] = {0, 0};
    for (int t = 0; t < d->max_iters; t++) {
        cl_mem prev = p->s.contiguity ? p->lab[t & 1] : labels;
        cl_mem cur = p->s.contiguity ? p->lab[(t + 1) & 1] : labels;
        err = clSetKernelArg(a, 4, sizeof prev, &prev);
        err |= clSetKernelArg(a, 5, sizeof cur, &cur);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(q, a, 1, NULL, &wide, &G, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(q, r, 1, NULL, &reduce_global, &G, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(q, u, 1, NULL, &G, &G, 0, NULL, NULL);
        CL_TRY(err, "kmeans: enqueueing an iteration");
        if ((t + 1) % BATCH == 0 || t + 1 == d->max_iters) {
            err = clEnqueueReadBuffer(q, p->state, CL_TRUE, 0, sizeof state, state, 0, NULL, NULL);
            CL_TRY(err, "kmeans: running the iterations");
            if (state[1])
                break;
        }
    }
    const int it = state[0];

    if (p->s.contiguity) {
        err = clEnqueueCopyBuffer(q, p->lab[it & 1], labels, 0, 0, d->n * sizeof(cl_int), 0, NULL,
                                  NULL);
        CL_TRY(err, "kmeans: copying the final labels");
    }
    cl_kernel o = p->objective;
    err = clSetKernelArg(o, 0, sizeof X, &X);
    err |= clSetKernelArg(o, 1, sizeof labels, &labels);
    err |= clSetKernelArg(o, 2, sizeof p->C, &p->C);
    err |= clSetKernelArg(o, 3, sizeof p->obj, &p->obj);
    err |= clSetKernelArg(o, 4, sizeof p->shape, &p->shape);
    err |= clSetKernelArg(o, 5, kd * sizeof(float), NULL);
    err |= clSetKernelArg(o, 6, G * sizeof(double), NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(q, o, 1, NULL, &wide, &G, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueCopyBuffer(q, p->C, (cl_mem)centroids, 0, 0, kd * sizeof(float), 0, NULL,
                                  NULL);
    double *obj = malloc(2 * p->groups * sizeof *obj);
    if (!obj) {
        dk_msg_set(msg, "opencl kmeans: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    double move = 0;
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(q, p->obj, CL_TRUE, 0, 2 * p->groups * sizeof *obj, obj, 0,
                                  NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(q, p->move, CL_TRUE, 0, sizeof move, &move, 0, NULL, NULL);
    double total = 0, valid = 0;
    for (size_t g = 0; err == CL_SUCCESS && g < p->groups; g++) {
        total += obj[2 * g];
        valid += obj[2 * g + 1];
    }
    free(obj);
    CL_TRY(err, "kmeans: the objective");
    res->iterations = it;
    res->objective = total;
    res->last_move = move;
    res->valid = (size_t)valid;
    /* the kernels run back to back with no timestamps between them: the
     * split is not measured here */
    res->assign_seconds = 0;
    res->update_seconds = 0;
    return DK_OK;
}

static const char *const variants[] = {"batched", NULL};

const dk_kmeans_ops dk_opencl_kmeans_ops = {
    .variants = variants,
    .plan_create = plan_create,
    .execute = execute,
    .plan_destroy = plan_destroy,
};
