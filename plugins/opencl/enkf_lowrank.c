/* dakit-opencl enkf: the lowrank scheme. At plan time C ~= Q T Q^T
 * (dakit/kit/enkf/lowrank.h) with the basis in host memory: C applied by
 * the caller (enkf.c's clFFT transforms of the circulant embedding), the
 * projections and each block's QR by dakit/kit/enkf/lowrank_host.h, as the
 * cpu plugin does. Q then goes to the device row-major, its
 * R columns padded with zeros to RP (a multiple of 16), with T. Per
 * product (enkf_lowrank.cl): U = Q^T (H o e) a segment of a row of H per
 * work-group, G2 = T U, PHT from e, Q and G2 without forming anything of
 * size N x L x M, HPHT = U^T G2 / (L-1). About nnz L R + N L R M
 * multiply-adds, no transform. Error bound: the cpu plugin's lowrank() and
 * docs/enkf.md. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/kit/enkf/lowrank.h>
#include <dakit/kit/enkf/lowrank_host.h>

#include "enkf_lowrank.h"

/* enkf_lowrank.cl's work-group shapes */
#define U_GROUP 256
#define PHT_GROUP 128
#define PHT_POINTS (PHT_GROUP * 2)
#define PHT_OBS 16
#define HPHT_GROUP 64

struct dk_opencl_lowrank {
    dk_opencl_device *dev;
    const dk_enkf_setup *s;
    size_t R, RP, nseg;
    cl_kernel u, usum, g2, pht, hpht;
    cl_mem indices, values; /* enkf.c's H */
    cl_mem Q, T, seg, row_seg, part, U, G2;
};

/* ---- the linear algebra dk_lowrank_make runs on (host memory) ---- */

typedef struct host_work {
    size_t n;
    dk_opencl_apply_c apply_c;
    void *self;
} host_work;

static double *low_alloc(void *self, size_t columns)
{
    return malloc((columns ? columns : 1) * ((host_work *)self)->n * sizeof(double));
}

static void low_release(void *self, double *a)
{
    (void)self;
    free(a);
}

static dk_status low_copy(void *self, const double *src, double *dst, size_t columns, dk_msg *msg)
{
    (void)msg;
    memcpy(dst, src, columns * ((host_work *)self)->n * sizeof *dst);
    return DK_OK;
}

static dk_status low_apply(void *self, const double *w, double *y, size_t columns, dk_msg *msg)
{
    host_work *h = self;
    return h->apply_c(h->self, w, y, columns, msg);
}

static dk_status low_gram(void *self, const double *A, size_t a, const double *B, size_t b, double *S, dk_msg *msg)
{
    (void)msg;
    dk_lowrank_host_gram(((host_work *)self)->n, A, a, B, b, S);
    return DK_OK;
}

static dk_status low_subtract(void *self, const double *A, size_t a, const double *S, double *B, size_t b,
                              dk_msg *msg)
{
    (void)msg;
    dk_lowrank_host_subtract(((host_work *)self)->n, A, a, S, B, b);
    return DK_OK;
}

static dk_status low_orthonormalize(void *self, double *B, size_t b, dk_msg *msg)
{
    return dk_lowrank_host_orthonormalize(((host_work *)self)->n, B, b, msg);
}

/* ---- the plan ---- */

void dk_opencl_lowrank_destroy(dk_opencl_lowrank *lr)
{
    if (!lr)
        return;
    cl_kernel ks[] = {lr->u, lr->usum, lr->g2, lr->pht, lr->hpht};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        if (ks[i])
            clReleaseKernel(ks[i]);
    cl_mem ms[] = {lr->Q, lr->T, lr->seg, lr->row_seg, lr->part, lr->U, lr->G2};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        if (ms[i])
            clReleaseMemObject(ms[i]);
    free(lr);
}

/* Q (host, column-major N x R) on the device row-major N x RP, and T. */
static dk_status upload_factors(dk_opencl_lowrank *lr, const dk_lowrank *low, dk_msg *msg)
{
    size_t N = lr->s->desc.n, R = lr->R, RP = lr->RP;
    double *rows = calloc(N * RP, sizeof *rows);
    if (!rows) {
        dk_msg_set(msg, "opencl enkf: out of host memory for the low-rank basis (%zu x %zu doubles)", N, RP);
        return DK_ERR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < N; i++)
        for (size_t r = 0; r < R; r++)
            rows[i * RP + r] = low->Q[r * N + i];
    dk_status st = dk_opencl_alloc(lr->dev, N * RP * sizeof *rows, rows, &lr->Q, msg,
                                   "enkf: allocating the low-rank basis");
    free(rows);
    if (st == DK_OK)
        st = dk_opencl_alloc(lr->dev, R * R * sizeof(double), low->T, &lr->T, msg, "enkf: allocating T");
    return st;
}

/* Each row of H cut into segments of seg_len nonzeros (at least one a
 * row, so an empty row's U is written as zeros): a power of two from 128
 * to 4096, about nnz / 2048, so that ek_lr_u has a few thousand
 * work-groups at large nnz and still a few hundred at small. */
static dk_status make_segments(dk_opencl_lowrank *lr, dk_msg *msg)
{
    const dk_enkf_setup *s = lr->s;
    size_t M = s->desc.H.rows, seg_len = 128, count = 0;
    while (seg_len < 4096 && seg_len * 2048 < s->nnz)
        seg_len *= 2;
    for (size_t m = 0; m < M; m++) {
        size_t n = (size_t)(s->indptr[m + 1] - s->indptr[m]);
        count += n > 0 ? (n + seg_len - 1) / seg_len : 1;
    }
    cl_long *seg = malloc(2 * count * sizeof *seg), *row_seg = malloc((M + 1) * sizeof *row_seg);
    if (!seg || !row_seg) {
        free(seg);
        free(row_seg);
        dk_msg_set(msg, "opencl enkf: out of host memory for the lowrank segments");
        return DK_ERR_OUT_OF_MEMORY;
    }
    size_t k = 0;
    for (size_t m = 0; m < M; m++) {
        row_seg[m] = (cl_long)k;
        cl_long b = s->indptr[m], e = s->indptr[m + 1];
        do {
            seg[2 * k] = b;
            seg[2 * k + 1] = e - b < (cl_long)seg_len ? e : b + (cl_long)seg_len;
            b = seg[2 * k + 1];
            k++;
        } while (b < e);
    }
    row_seg[M] = (cl_long)k;
    lr->nseg = count;
    dk_status st = dk_opencl_alloc(lr->dev, 2 * count * sizeof *seg, seg, &lr->seg, msg,
                                   "enkf: allocating the lowrank segments");
    if (st == DK_OK)
        st = dk_opencl_alloc(lr->dev, (M + 1) * sizeof *row_seg, row_seg, &lr->row_seg, msg,
                             "enkf: allocating the lowrank segments");
    free(seg);
    free(row_seg);
    return st;
}

dk_status dk_opencl_lowrank_create(dk_opencl_device *dev, cl_program prog, const dk_enkf_setup *s, cl_mem indices,
                                   cl_mem values, dk_opencl_apply_c apply_c, void *self, dk_opencl_lowrank **out,
                                   dk_msg *msg)
{
    dk_opencl_lowrank *lr = calloc(1, sizeof *lr);
    if (!lr) {
        dk_msg_set(msg, "opencl enkf: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    lr->dev = dev;
    lr->s = s;
    lr->indices = indices;
    lr->values = values;
    dk_status st = DK_OK;
    struct {
        cl_kernel *k;
        const char *name;
    } kernels[] = {{&lr->u, "ek_lr_u"}, {&lr->usum, "ek_lr_usum"}, {&lr->g2, "ek_lr_g2"},
                   {&lr->pht, "ek_lr_pht"}, {&lr->hpht, "ek_lr_hpht"}};
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
        cl_int err;
        *kernels[i].k = clCreateKernel(prog, kernels[i].name, &err);
        CL_TRY_GOTO(err, fail, "enkf: creating kernel %s", kernels[i].name);
    }

    host_work w = {.n = s->desc.n, .apply_c = apply_c, .self = self};
    dk_lowrank_ops ops = {
        .self = &w,
        .n = s->desc.n,
        .alloc = low_alloc,
        .release = low_release,
        .upload = low_copy,
        .copy = low_copy,
        .apply_c = low_apply,
        .gram = low_gram,
        .subtract = low_subtract,
        .orthonormalize = low_orthonormalize,
    };
    dk_lowrank low;
    if ((st = dk_lowrank_make(&ops, &low, msg)) != DK_OK)
        goto fail;
    lr->R = low.rank;
    lr->RP = (lr->R + 15) / 16 * 16;
    st = upload_factors(lr, &low, msg);
    free(low.Q);
    free(low.T);
    if (st != DK_OK)
        goto fail;

    size_t L = s->desc.members, M = s->desc.H.rows;
    if ((st = make_segments(lr, msg)) != DK_OK ||
        (st = dk_opencl_alloc(dev, lr->nseg * L * lr->RP * sizeof(double), NULL, &lr->part, msg,
                              "enkf: allocating U's partial sums")) != DK_OK ||
        (st = dk_opencl_alloc(dev, M * L * lr->R * sizeof(double), NULL, &lr->U, msg, "enkf: allocating U")) != DK_OK ||
        (st = dk_opencl_alloc(dev, L * lr->RP * M * sizeof(double), NULL, &lr->G2, msg, "enkf: allocating T U")) !=
            DK_OK)
        goto fail;
    *out = lr;
    return DK_OK;
fail:
    dk_opencl_lowrank_destroy(lr);
    return st;
}

static cl_int launch(dk_opencl_lowrank *lr, cl_kernel k, size_t d0, size_t d1, size_t local0)
{
    if (d0 == 0 || d1 == 0)
        return CL_SUCCESS;
    size_t global[2] = {d0, d1}, local[2] = {local0, 1};
    return clEnqueueNDRangeKernel(lr->dev->queue, k, 2, NULL, global, local0 ? local : NULL, 0, NULL, NULL);
}

cl_int dk_opencl_lowrank_cov(dk_opencl_lowrank *lr, cl_mem e64, cl_mem pht64, cl_mem hpht64)
{
    const dk_enkf_setup *s = lr->s;
    cl_ulong N = s->desc.n, L = s->desc.members, M = s->desc.H.rows, R = lr->R, RP = lr->RP;
    double inv_lm1 = 1.0 / (double)(L - 1);

    cl_kernel k = lr->u;
    cl_int err = clSetKernelArg(k, 0, sizeof lr->Q, &lr->Q);
    err |= clSetKernelArg(k, 1, sizeof e64, &e64);
    err |= clSetKernelArg(k, 2, sizeof lr->indices, &lr->indices);
    err |= clSetKernelArg(k, 3, sizeof lr->values, &lr->values);
    err |= clSetKernelArg(k, 4, sizeof lr->seg, &lr->seg);
    err |= clSetKernelArg(k, 5, sizeof lr->part, &lr->part);
    err |= clSetKernelArg(k, 6, sizeof RP, &RP);
    err |= clSetKernelArg(k, 7, sizeof L, &L);
    if (err == CL_SUCCESS)
        err = launch(lr, k, lr->nseg * U_GROUP, 1, U_GROUP);

    k = lr->usum;
    err |= clSetKernelArg(k, 0, sizeof lr->part, &lr->part);
    err |= clSetKernelArg(k, 1, sizeof lr->row_seg, &lr->row_seg);
    err |= clSetKernelArg(k, 2, sizeof lr->U, &lr->U);
    err |= clSetKernelArg(k, 3, sizeof R, &R);
    err |= clSetKernelArg(k, 4, sizeof RP, &RP);
    err |= clSetKernelArg(k, 5, sizeof L, &L);
    err |= clSetKernelArg(k, 6, sizeof M, &M);
    if (err == CL_SUCCESS)
        err = launch(lr, k, (size_t)(M * L * R), 1, 0);

    k = lr->g2;
    err |= clSetKernelArg(k, 0, sizeof lr->T, &lr->T);
    err |= clSetKernelArg(k, 1, sizeof lr->U, &lr->U);
    err |= clSetKernelArg(k, 2, sizeof lr->G2, &lr->G2);
    err |= clSetKernelArg(k, 3, sizeof R, &R);
    err |= clSetKernelArg(k, 4, sizeof RP, &RP);
    err |= clSetKernelArg(k, 5, sizeof L, &L);
    err |= clSetKernelArg(k, 6, sizeof M, &M);
    if (err == CL_SUCCESS)
        err = launch(lr, k, (size_t)M, (size_t)(L * RP), 0);

    k = lr->pht;
    err |= clSetKernelArg(k, 0, sizeof lr->Q, &lr->Q);
    err |= clSetKernelArg(k, 1, sizeof e64, &e64);
    err |= clSetKernelArg(k, 2, sizeof lr->G2, &lr->G2);
    err |= clSetKernelArg(k, 3, sizeof pht64, &pht64);
    err |= clSetKernelArg(k, 4, sizeof N, &N);
    err |= clSetKernelArg(k, 5, sizeof R, &R);
    err |= clSetKernelArg(k, 6, sizeof RP, &RP);
    err |= clSetKernelArg(k, 7, sizeof L, &L);
    err |= clSetKernelArg(k, 8, sizeof M, &M);
    err |= clSetKernelArg(k, 9, sizeof inv_lm1, &inv_lm1);
    if (err == CL_SUCCESS)
        err = launch(lr, k, (size_t)((N + PHT_POINTS - 1) / PHT_POINTS) * PHT_GROUP,
                     (size_t)((M + PHT_OBS - 1) / PHT_OBS), PHT_GROUP);
    if (err != CL_SUCCESS || !hpht64)
        return err;

    k = lr->hpht;
    err |= clSetKernelArg(k, 0, sizeof lr->U, &lr->U);
    err |= clSetKernelArg(k, 1, sizeof lr->G2, &lr->G2);
    err |= clSetKernelArg(k, 2, sizeof hpht64, &hpht64);
    err |= clSetKernelArg(k, 3, sizeof R, &R);
    err |= clSetKernelArg(k, 4, sizeof RP, &RP);
    err |= clSetKernelArg(k, 5, sizeof L, &L);
    err |= clSetKernelArg(k, 6, sizeof M, &M);
    err |= clSetKernelArg(k, 7, sizeof inv_lm1, &inv_lm1);
    if (err == CL_SUCCESS)
        err = launch(lr, k, (size_t)M * HPHT_GROUP, (size_t)M, HPHT_GROUP);
    return err;
}
