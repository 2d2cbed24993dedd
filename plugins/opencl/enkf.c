/* dakit-opencl enkf: the tiled and banded schemes as direct kernels
 * (enkf.cl), the fft scheme, HPHT and the analysis, in float64 through
 * cl_khr_fp64
 * (float32 data are widened on the device and the results rounded back,
 * as the cpu plugin does).
 *
 * The banded scheme with a 1-D C runs ek_band (a work-group per tile of
 * state points, c and the tile's nonzeros staged in local memory;
 * ek_band_wide reads c from global memory where its window does not fit);
 * with a 2-D C, ek_direct with only the nonzeros of each row within C's
 * reach. HPHT is summed over segments of H's columns (ek_hpht) and then
 * over the segments (ek_hpht_sum).
 *
 * The fft scheme (built where clFFT is found, DK_OPENCL_CLFFT) applies C
 * through its circulant embedding with clFFT's batched real transforms;
 * the lowrank scheme (enkf_lowrank.c) applies C the same way while its plan
 * factors it. Without clFFT the plugin offers tiled and banded only: the
 * core's cost model then picks between those, and asking for fft or lowrank
 * names what it has.
 *
 * The M x M solve of the analysis runs on the host with LAPACKE (dposv)
 * after HPHT and the innovations are read back: OpenCL has no solver
 * library, and M is small (tens, at most a few thousand), so the transfer
 * is M * (M + L) values against the N * M of the covariance product. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DK_OPENCL_CLFFT
#include <pthread.h>

#include <clFFT.h>
#endif

#include <dakit/kit/enkf/solve_host.h>
#include "opencl_plugin.h"

#include "enkf_cl.h"
#include "enkf_lowrank_cl.h"
#include "enkf_lowrank.h"

#ifdef DK_OPENCL_CLFFT
static const char *const variants[] = {"tiled", "banded", "fft", "lowrank", NULL};
/* The fft scheme's work arrays (one batch of columns x members) stay below
 * this many bytes. */
#define FFT_BATCH_BYTES ((size_t)128 << 20)
#else
static const char *const variants[] = {"tiled", "banded", NULL};
#endif

typedef struct enkf_plan {
    dk_opencl_device *dev;
    const dk_enkf_setup *s;
    cl_kernel widen, narrow, weigh, direct, hpht, inflate, innovation, update;
    cl_mem indptr, indices, values, loc; /* H and c on the device */
    cl_mem G;                            /* nnz x L weighted anomalies */
    cl_mem hpht64, D, W;                 /* M x M, M x L, M x L */
    /* HPHT: S segments of H's columns, their bounds per row (M x (S+1)) and
     * the partial sums (M x M x S) */
    cl_kernel hpht_sum;
    cl_mem seg, partial;
    cl_ulong S;
    /* ek_band (NULL where it does not apply): int32 columns of H, the
     * nonzeros within reach of each (row, tile), c's window half-width */
    cl_kernel band;
    cl_mem indices32, range;
    cl_int band_W, band_tiles, band_wide;
    /* made on first use: the float64 copies of float32 data, and the
     * analysis's own arrays */
    cl_mem e64, pht64, X64;
    /* the distributed layer's phases */
    cl_kernel rows, part;
    cl_mem x64; /* cov_rows' x in float64 (float32 plans) */
#ifdef DK_OPENCL_CLFFT
    cl_kernel scatter, multiply, scale, gather;
    clfftPlanHandle forward, backward;
    int have_forward, have_backward;
    size_t n0, n1, P, Pc; /* embedding: n0 x n1 reals (1-D: n1 = 1), Pc complex outputs */
    size_t columns;       /* columns of PHT per batch */
    cl_mem buf, freq, spectrum;
    dk_opencl_lowrank *lowrank; /* the lowrank scheme (enkf_lowrank.c) */
#endif
} enkf_plan;

static void release(cl_mem m)
{
    if (m)
        clReleaseMemObject(m);
}

static void plan_destroy(void *handle)
{
    enkf_plan *p = handle;
    if (!p)
        return;
    cl_kernel ks[] = {p->widen, p->narrow, p->weigh, p->direct, p->hpht, p->inflate, p->innovation, p->update};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        if (ks[i])
            clReleaseKernel(ks[i]);
    cl_mem ms[] = {p->indptr, p->indices, p->values, p->loc, p->G, p->hpht64, p->D, p->W, p->e64, p->pht64, p->X64};
    if (p->hpht_sum)
        clReleaseKernel(p->hpht_sum);
    if (p->rows)
        clReleaseKernel(p->rows);
    if (p->part)
        clReleaseKernel(p->part);
    release(p->x64);
    if (p->band)
        clReleaseKernel(p->band);
    release(p->seg);
    release(p->partial);
    release(p->indices32);
    release(p->range);
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        release(ms[i]);
#ifdef DK_OPENCL_CLFFT
    cl_kernel fk[] = {p->scatter, p->multiply, p->scale, p->gather};
    for (size_t i = 0; i < sizeof fk / sizeof fk[0]; i++)
        if (fk[i])
            clReleaseKernel(fk[i]);
    if (p->have_forward)
        clfftDestroyPlan(&p->forward);
    if (p->have_backward)
        clfftDestroyPlan(&p->backward);
    release(p->buf);
    release(p->freq);
    release(p->spectrum);
    dk_opencl_lowrank_destroy(p->lowrank);
#endif
    free(p);
}

/* The enkf program, built on the device's first enkf plan and kept. */
static dk_status program(dk_opencl_device *dev, cl_program *out, dk_msg *msg)
{
    if (dev->enkf) {
        *out = dev->enkf;
        return DK_OK;
    }
    if (!dev->fp64) {
        dk_msg_set(msg, "opencl enkf: %s lacks cl_khr_fp64, which the enkf kernels need (they "
                        "compute in float64 for both dtypes); use another backend", dev->name);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    const char *sources[] = {dk_opencl_enkf_source, dk_opencl_enkf_lowrank_source};
    dk_status st = dk_opencl_build(dev, 2, sources, "", &dev->enkf, msg, "enkf: building the kernels");
    *out = dev->enkf;
    return st;
}

static dk_status lazy(enkf_plan *p, cl_mem *m, size_t bytes, const char *what, dk_msg *msg)
{
    return *m ? DK_OK : dk_opencl_alloc(p->dev, bytes, NULL, m, msg, "enkf: allocating the %s", what);
}

static cl_int launch(enkf_plan *p, cl_kernel k, size_t d0, size_t d1);

#ifdef DK_OPENCL_CLFFT
/* clFFT's library state is process-wide: set up on the first fft plan and
 * torn down at exit (or unload) by a handler registered after clfftSetup,
 * so that it runs before clFFT's own, which otherwise prints a reminder. */
static pthread_once_t clfft_once = PTHREAD_ONCE_INIT;
static clfftStatus clfft_ready = CLFFT_SUCCESS;

static void clfft_fini(void)
{
    clfftTeardown();
}

static void clfft_init(void)
{
    clfftSetupData d;
    clfftInitSetupData(&d);
    clfft_ready = clfftSetup(&d);
    if (clfft_ready == CLFFT_SUCCESS)
        atexit(clfft_fini);
}

static dk_status clfft_failed(dk_msg *msg, const char *what, clfftStatus st)
{
    dk_msg_set(msg, "opencl enkf: clFFT %s failed (status %d, %s)", what, (int)st,
               dk_opencl_error_name((cl_int)st));
    return st == CLFFT_OUT_OF_RESOURCES || st == CLFFT_OUT_OF_HOST_MEMORY ||
                   st == CLFFT_MEM_OBJECT_ALLOCATION_FAILURE
               ? DK_ERR_OUT_OF_MEMORY
               : DK_ERR_BACKEND;
}

/* The embedding length per axis: any length >= 2n - 1 gives C exactly;
 * a power of two keeps clFFT on its radix-2 kernels and the lengths few,
 * since clFFT compiles a new set of kernels for each new length. */
static size_t pow2_at_least(size_t n)
{
    size_t m = 1;
    while (m < n)
        m *= 2;
    return m;
}

/* Offset a of an axis of n points embedded in `len`: its distance, or
 * (size_t)-1 where the embedding holds a zero. */
static size_t distance_of(size_t a, size_t n, size_t len)
{
    if (a < n)
        return a;
    return a > len - n ? len - a : (size_t)-1;
}

/* The first column of the circulant of n0 x n1 points that embeds C. */
static double embedded(const enkf_plan *p, size_t a, size_t b)
{
    const dk_enkf_setup *s = p->s;
    if (s->desc.loc_ndim == 1) {
        size_t da = distance_of(a, s->desc.n, p->n0);
        return da == (size_t)-1 ? 0.0 : s->loc[da];
    }
    size_t da = distance_of(a, s->desc.nx, p->n0), db = distance_of(b, s->desc.ny, p->n1);
    return da == (size_t)-1 || db == (size_t)-1 ? 0.0 : s->loc[da * s->desc.ny + db];
}

/* A batched out-of-place double transform between n0 x n1 reals and their
 * n0 x (n1/2 + 1) half spectrum (1-D: n0 reals, n0/2 + 1 outputs). */
static clfftStatus make_transform(enkf_plan *p, int forward, size_t batch, clfftPlanHandle *out, int *made)
{
    int two_d = p->s->desc.loc_ndim == 2;
    size_t lengths[2] = {two_d ? p->n1 : p->n0, p->n0};
    size_t real_strides[2] = {1, p->n1}, half_strides[2] = {1, p->n1 / 2 + 1};
    clfftDim dim = two_d ? CLFFT_2D : CLFFT_1D;
    clfftPlanHandle h;
    clfftStatus st = clfftCreateDefaultPlan(&h, p->dev->context, dim, lengths);
    if (st != CLFFT_SUCCESS)
        return st;
    *out = h;
    *made = 1;
    if ((st = clfftSetPlanPrecision(h, CLFFT_DOUBLE)) != CLFFT_SUCCESS ||
        (st = clfftSetLayout(h, forward ? CLFFT_REAL : CLFFT_HERMITIAN_INTERLEAVED,
                             forward ? CLFFT_HERMITIAN_INTERLEAVED : CLFFT_REAL)) != CLFFT_SUCCESS ||
        (st = clfftSetResultLocation(h, CLFFT_OUTOFPLACE)) != CLFFT_SUCCESS ||
        (st = clfftSetPlanInStride(h, dim, forward ? real_strides : half_strides)) != CLFFT_SUCCESS ||
        (st = clfftSetPlanOutStride(h, dim, forward ? half_strides : real_strides)) != CLFFT_SUCCESS ||
        (st = clfftSetPlanDistance(h, forward ? p->P : p->Pc, forward ? p->Pc : p->P)) != CLFFT_SUCCESS ||
        (st = clfftSetPlanBatchSize(h, batch)) != CLFFT_SUCCESS ||
        /* unscaled both ways: 1/P goes into the spectrum, in double */
        (st = clfftSetPlanScale(h, CLFFT_BACKWARD, 1.0f)) != CLFFT_SUCCESS)
        return st;
    return clfftBakePlan(h, 1, &p->dev->queue, NULL, NULL);
}

static dk_status make_fft(enkf_plan *p, cl_program prog, dk_msg *msg)
{
    dk_opencl_device *dev = p->dev;
    const dk_enkf_setup *s = p->s;
    size_t L = s->desc.members, M = s->desc.H.rows;
    struct {
        cl_kernel *k;
        const char *name;
    } kernels[] = {{&p->scatter, "ek_scatter"}, {&p->multiply, "ek_multiply"}, {&p->scale, "ek_scale"},
                   {&p->gather, "ek_gather"}};
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
        cl_int err;
        *kernels[i].k = clCreateKernel(prog, kernels[i].name, &err);
        CL_TRY(err, "enkf: creating kernel %s", kernels[i].name);
    }
    if (s->desc.loc_ndim == 1) {
        p->n0 = pow2_at_least(2 * s->desc.n);
        p->n1 = 1;
        p->P = p->n0;
        p->Pc = p->n0 / 2 + 1;
    } else {
        p->n0 = pow2_at_least(2 * s->desc.nx);
        p->n1 = pow2_at_least(2 * s->desc.ny);
        p->P = p->n0 * p->n1;
        p->Pc = p->n0 * (p->n1 / 2 + 1);
    }
    size_t per_column = L * (p->P + 2 * p->Pc) * sizeof(double);
    p->columns = FFT_BATCH_BYTES / per_column;
    if (p->columns < 1)
        p->columns = 1;
    if (p->columns > M)
        p->columns = M;
    size_t batch = p->columns * L;
    dk_status st;
    if ((st = dk_opencl_alloc(dev, batch * p->P * sizeof(double), NULL, &p->buf, msg,
                              "enkf: allocating the FFT real work array")) != DK_OK ||
        (st = dk_opencl_alloc(dev, batch * p->Pc * 2 * sizeof(double), NULL, &p->freq, msg,
                              "enkf: allocating the FFT spectra")) != DK_OK ||
        (st = dk_opencl_alloc(dev, p->Pc * 2 * sizeof(double), NULL, &p->spectrum, msg,
                              "enkf: allocating the spectrum of C")) != DK_OK)
        return st;

    pthread_once(&clfft_once, clfft_init);
    if (clfft_ready != CLFFT_SUCCESS)
        return clfft_failed(msg, "setup", clfft_ready);
    clfftStatus cs = make_transform(p, 1, batch, &p->forward, &p->have_forward);
    if (cs != CLFFT_SUCCESS)
        return clfft_failed(msg, "planning the forward transform", cs);
    cs = make_transform(p, 0, batch, &p->backward, &p->have_backward);
    if (cs != CLFFT_SUCCESS)
        return clfft_failed(msg, "planning the backward transform", cs);

    /* The spectrum: C's embedding in slot 0 of the work array, through the
     * batched plan (its other slots are transformed and ignored). Every
     * slot is zeroed first: clFFT's batched real transforms do not keep
     * batches apart, so uninitialized neighbours can turn slot 0's
     * spectrum into NaN. */
    double *col = malloc(p->P * sizeof *col);
    if (!col) {
        dk_msg_set(msg, "opencl enkf: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    for (size_t a = 0; a < p->n0; a++)
        for (size_t b = 0; b < p->n1; b++)
            col[a * p->n1 + b] = embedded(p, a, b);
    cl_command_queue q = p->dev->queue;
    const double zero = 0.0;
    if ((st = dk_opencl_enter(dev, msg)) != DK_OK) {
        free(col);
        return st;
    }
    cl_int err = clEnqueueFillBuffer(q, p->buf, &zero, sizeof zero, 0, batch * p->P * sizeof(double), 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueWriteBuffer(q, p->buf, CL_TRUE, 0, p->P * sizeof *col, col, 0, NULL, NULL);
    free(col);
    if (err == CL_SUCCESS)
        err = (cl_int)clfftEnqueueTransform(p->forward, CLFFT_FORWARD, 1, &q, 0, NULL, NULL, &p->buf, &p->freq, NULL);
    cl_ulong count = 2 * p->Pc;
    double factor = 1.0 / (double)p->P;
    err |= clSetKernelArg(p->scale, 0, sizeof p->freq, &p->freq);
    err |= clSetKernelArg(p->scale, 1, sizeof count, &count);
    err |= clSetKernelArg(p->scale, 2, sizeof factor, &factor);
    if (err == CL_SUCCESS)
        err = launch(p, p->scale, (size_t)count, 1);
    if (err == CL_SUCCESS)
        err = clEnqueueCopyBuffer(q, p->freq, p->spectrum, 0, 0, p->Pc * 2 * sizeof(double), 0, NULL, NULL);
    CL_TRY(err, "enkf: the spectrum of C");
    return dk_opencl_finish(dev, DK_OPENCL_BLOCK, msg, "enkf: the spectrum of C");
}

/* pht64 from the weighted anomalies in p->G, a batch of columns at a time:
 * scatter e_l o h_j into the embedding, transform, multiply by C's
 * spectrum, transform back, gather e_l o (.) over the members. */
static cl_int fft(enkf_plan *p, cl_mem e64, cl_mem pht64)
{
    const dk_enkf_setup *s = p->s;
    cl_command_queue q = p->dev->queue;
    cl_ulong N = s->desc.n, L = s->desc.members, M = s->desc.H.rows, P = p->P, Pc = p->Pc;
    cl_ulong ny = s->desc.ny, n1 = p->n1;
    cl_int two_d = s->desc.loc_ndim == 2, err = CL_SUCCESS;
    const double zero = 0.0;
    for (cl_ulong j0 = 0; j0 < M && err == CL_SUCCESS; j0 += p->columns) {
        cl_ulong jn = M - j0 < p->columns ? M - j0 : p->columns, count = jn * L * Pc;
        /* the whole batch, also slots past jn * L: see make_fft */
        err = clEnqueueFillBuffer(q, p->buf, &zero, sizeof zero, 0, p->columns * L * P * sizeof(double), 0, NULL,
                                  NULL);
        cl_kernel k = p->scatter;
        err |= clSetKernelArg(k, 0, sizeof p->G, &p->G);
        err |= clSetKernelArg(k, 1, sizeof p->indptr, &p->indptr);
        err |= clSetKernelArg(k, 2, sizeof p->indices, &p->indices);
        err |= clSetKernelArg(k, 3, sizeof p->buf, &p->buf);
        err |= clSetKernelArg(k, 4, sizeof L, &L);
        err |= clSetKernelArg(k, 5, sizeof j0, &j0);
        err |= clSetKernelArg(k, 6, sizeof jn, &jn);
        err |= clSetKernelArg(k, 7, sizeof P, &P);
        err |= clSetKernelArg(k, 8, sizeof ny, &ny);
        err |= clSetKernelArg(k, 9, sizeof n1, &n1);
        err |= clSetKernelArg(k, 10, sizeof two_d, &two_d);
        if (err == CL_SUCCESS)
            err = launch(p, k, (size_t)(jn * L), 1);
        if (err == CL_SUCCESS)
            err = (cl_int)clfftEnqueueTransform(p->forward, CLFFT_FORWARD, 1, &q, 0, NULL, NULL, &p->buf, &p->freq,
                                                NULL);
        k = p->multiply;
        err |= clSetKernelArg(k, 0, sizeof p->freq, &p->freq);
        err |= clSetKernelArg(k, 1, sizeof p->spectrum, &p->spectrum);
        err |= clSetKernelArg(k, 2, sizeof Pc, &Pc);
        err |= clSetKernelArg(k, 3, sizeof count, &count);
        if (err == CL_SUCCESS)
            err = launch(p, k, (size_t)count, 1);
        if (err == CL_SUCCESS)
            err = (cl_int)clfftEnqueueTransform(p->backward, CLFFT_BACKWARD, 1, &q, 0, NULL, NULL, &p->freq, &p->buf,
                                                NULL);
        k = p->gather;
        err |= clSetKernelArg(k, 0, sizeof e64, &e64);
        err |= clSetKernelArg(k, 1, sizeof p->buf, &p->buf);
        err |= clSetKernelArg(k, 2, sizeof pht64, &pht64);
        err |= clSetKernelArg(k, 3, sizeof N, &N);
        err |= clSetKernelArg(k, 4, sizeof L, &L);
        err |= clSetKernelArg(k, 5, sizeof M, &M);
        err |= clSetKernelArg(k, 6, sizeof j0, &j0);
        err |= clSetKernelArg(k, 7, sizeof jn, &jn);
        err |= clSetKernelArg(k, 8, sizeof P, &P);
        err |= clSetKernelArg(k, 9, sizeof ny, &ny);
        err |= clSetKernelArg(k, 10, sizeof n1, &n1);
        err |= clSetKernelArg(k, 11, sizeof two_d, &two_d);
        if (err == CL_SUCCESS)
            err = launch(p, k, (size_t)jn, (size_t)N);
    }
    return err;
}

/* y = C w for `columns` host vectors through the fft scheme's transforms,
 * its batch's slots at a time: the lowrank plan factors C with it. */
static dk_status circulant(void *self, const double *w, double *y, size_t columns, dk_msg *msg)
{
    enkf_plan *p = self;
    dk_opencl_device *dev = p->dev;
    const dk_enkf_setup *s = p->s;
    cl_command_queue q = dev->queue;
    int two_d = s->desc.loc_ndim == 2;
    size_t N = s->desc.n, slots = p->columns * s->desc.members;
    /* a vector is rows of `row` points, n1 apart in its slot (1-D: one row) */
    size_t row = two_d ? s->desc.ny : N, rows = two_d ? s->desc.nx : 1, pitch = two_d ? p->n1 : p->P;
    size_t origin[3] = {0, 0, 0};
    cl_ulong Pc = p->Pc;
    const double zero = 0.0;
    dk_status st = dk_opencl_enter(dev, msg);
    if (st != DK_OK)
        return st;
    for (size_t c0 = 0; c0 < columns; c0 += slots) {
        size_t cn = columns - c0 < slots ? columns - c0 : slots;
        size_t region[3] = {row * sizeof(double), rows, cn};
        cl_ulong count = cn * p->Pc;
        /* the whole batch: see make_fft */
        cl_int err = clEnqueueFillBuffer(q, p->buf, &zero, sizeof zero, 0, slots * p->P * sizeof(double), 0, NULL,
                                         NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueWriteBufferRect(q, p->buf, CL_FALSE, origin, origin, region, pitch * sizeof(double),
                                           p->P * sizeof(double), row * sizeof(double), N * sizeof(double),
                                           w + c0 * N, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = (cl_int)clfftEnqueueTransform(p->forward, CLFFT_FORWARD, 1, &q, 0, NULL, NULL, &p->buf, &p->freq,
                                                NULL);
        err |= clSetKernelArg(p->multiply, 0, sizeof p->freq, &p->freq);
        err |= clSetKernelArg(p->multiply, 1, sizeof p->spectrum, &p->spectrum);
        err |= clSetKernelArg(p->multiply, 2, sizeof Pc, &Pc);
        err |= clSetKernelArg(p->multiply, 3, sizeof count, &count);
        if (err == CL_SUCCESS)
            err = launch(p, p->multiply, (size_t)count, 1);
        if (err == CL_SUCCESS)
            err = (cl_int)clfftEnqueueTransform(p->backward, CLFFT_BACKWARD, 1, &q, 0, NULL, NULL, &p->freq, &p->buf,
                                                NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueReadBufferRect(q, p->buf, CL_TRUE, origin, origin, region, pitch * sizeof(double),
                                          p->P * sizeof(double), row * sizeof(double), N * sizeof(double),
                                          y + c0 * N, 0, NULL, NULL);
        CL_TRY(err, "enkf: applying C for the low-rank basis");
    }
    return DK_OK;
}
#endif

/* ek_band's shape (enkf.cl): work-items a group, points a group's tile,
 * members a pass at most, rows a block at most */
#define BAND_WG 128
#define BAND_TILE 512
#define BAND_SPAN_POINTS 128 /* BAND_SPAN * BAND_R: the points a run of lanes owns */
#define BAND_MAX_LB 12
#define BAND_JB 4
/* work-items summing one entry of HPHT in ek_hpht_sum, at most */
#define HPHT_WG 64

/* ek_band where it applies: 1-D C, the state, H's nonzeros and c's window
 * within int32 indices, and the per (row, tile) bounds few enough to keep;
 * ek_band_wide where c's window does not fit in local memory. Elsewhere
 * p->band stays NULL and the banded scheme runs ek_direct. */
static dk_status make_band(enkf_plan *p, cl_program prog, dk_msg *msg)
{
    const dk_enkf_setup *s = p->s;
    dk_opencl_device *dev = p->dev;
    size_t N = s->desc.n, M = s->desc.H.rows, L = s->desc.members;
    size_t W = s->rx + BAND_SPAN_POINTS - 1, tiles = (N + BAND_TILE - 1) / BAND_TILE;
    if (s->desc.loc_ndim != 1 || N + BAND_TILE + W >= INT32_MAX / 2 || s->nnz >= INT32_MAX ||
        M * tiles > ((size_t)1 << 26))
        return DK_OK;
    /* members in equal passes of at most BAND_MAX_LB, rounded up to even */
    size_t passes = (L + BAND_MAX_LB - 1) / BAND_MAX_LB, lb = (L + passes - 1) / passes;
    lb = (lb + 1) / 2 * 2;
    cl_ulong local = 0;
    CL_TRY(clGetDeviceInfo(dev->id, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, NULL),
           "enkf: asking for the local memory size");
    cl_kernel k = NULL;
    int wide = 0;
    for (; wide < 2; wide++) {
        char name[32];
        snprintf(name, sizeof name, wide ? "ek_band_wide_%zu" : "ek_band_%zu", lb);
        cl_int err;
        k = clCreateKernel(prog, name, &err);
        CL_TRY(err, "enkf: creating kernel %s", name);
        cl_ulong used = 0;
        size_t most = 0;
        size_t window = wide ? sizeof(double) : (2 * W + 1) * sizeof(double);
        err = clGetKernelWorkGroupInfo(k, dev->id, CL_KERNEL_LOCAL_MEM_SIZE, sizeof used, &used, NULL);
        err |= clGetKernelWorkGroupInfo(k, dev->id, CL_KERNEL_WORK_GROUP_SIZE, sizeof most, &most, NULL);
        if (err == CL_SUCCESS && most >= BAND_WG && used + window <= local)
            break;
        clReleaseKernel(k); /* does not fit this device */
        k = NULL;
    }
    if (!k)
        return DK_OK; /* ek_direct */
    p->band = k;
    p->band_wide = wide;
    p->band_W = (cl_int)W;
    p->band_tiles = (cl_int)tiles;

    /* the nonzeros of row j with columns in [first - rx, last + rx] of each tile */
    int32_t *range = malloc(2 * M * tiles * sizeof *range), *idx = malloc((s->nnz ? s->nnz : 1) * sizeof *idx);
    if (!range || !idx) {
        free(range);
        free(idx);
        dk_msg_set(msg, "opencl enkf: out of host memory for the band's bounds");
        return DK_ERR_OUT_OF_MEMORY;
    }
    for (size_t t = 0; t < s->nnz; t++)
        idx[t] = (int32_t)s->indices[t];
    int64_t rx = (int64_t)s->rx;
    for (size_t j = 0; j < M; j++) {
        int64_t a = s->indptr[j], b = s->indptr[j], end = s->indptr[j + 1];
        for (size_t tile = 0; tile < tiles; tile++) {
            int64_t first = (int64_t)(tile * BAND_TILE), last = (int64_t)(tile * BAND_TILE + BAND_TILE < N ? tile * BAND_TILE + BAND_TILE : N) - 1;
            while (a < end && s->indices[a] < first - rx)
                a++;
            if (b < a)
                b = a;
            while (b < end && s->indices[b] <= last + rx)
                b++;
            range[2 * (j * tiles + tile)] = (int32_t)a;
            range[2 * (j * tiles + tile) + 1] = (int32_t)b;
        }
    }
    dk_status st = dk_opencl_alloc(dev, 2 * M * tiles * sizeof *range, range, &p->range, msg,
                                   "enkf: allocating the band's bounds");
    if (st == DK_OK)
        st = dk_opencl_alloc(dev, (s->nnz ? s->nnz : 1) * sizeof *idx, idx, &p->indices32, msg,
                             "enkf: allocating the int32 columns of H");
    free(range);
    free(idx);
    return st;
}

/* HPHT's segments: about 256 nonzeros of the longest row each (at most 512
 * of them), the partial sums within 256 MiB; their bounds in each row. */
static dk_status make_hpht(enkf_plan *p, cl_program prog, dk_msg *msg)
{
    const dk_enkf_setup *s = p->s;
    dk_opencl_device *dev = p->dev;
    size_t N = s->desc.n, M = s->desc.H.rows, most = 0;
    cl_int err;
    p->hpht_sum = clCreateKernel(prog, "ek_hpht_sum", &err);
    CL_TRY(err, "enkf: creating kernel ek_hpht_sum");
    for (size_t j = 0; j < M; j++)
        most = (size_t)(s->indptr[j + 1] - s->indptr[j]) > most ? (size_t)(s->indptr[j + 1] - s->indptr[j]) : most;
    size_t S = most / 256;
    S = S > 512 ? 512 : S;
    S = M && S > ((size_t)1 << 25) / (M * M) ? ((size_t)1 << 25) / (M * M) : S;
    S = S > N ? N : S;
    S = S < 1 ? 1 : S;
    p->S = S;
    size_t width = (N + S - 1) / S;
    int64_t *seg = malloc((M ? M : 1) * (S + 1) * sizeof *seg);
    if (!seg) {
        dk_msg_set(msg, "opencl enkf: out of host memory for HPHT's segments");
        return DK_ERR_OUT_OF_MEMORY;
    }
    for (size_t a = 0; a < M; a++) {
        int64_t t = s->indptr[a];
        for (size_t q = 0; q <= S; q++) {
            while (t < s->indptr[a + 1] && (size_t)s->indices[t] < q * width)
                t++;
            seg[a * (S + 1) + q] = q == S ? s->indptr[a + 1] : t;
        }
    }
    dk_status st = dk_opencl_alloc(dev, (M ? M : 1) * (S + 1) * sizeof *seg, seg, &p->seg, msg,
                                   "enkf: allocating HPHT's segments");
    free(seg);
    if (st == DK_OK)
        st = dk_opencl_alloc(dev, (M ? M * M : 1) * S * sizeof(double), NULL, &p->partial, msg,
                             "enkf: allocating HPHT's partial sums");
    return st;
}

static dk_status plan_create(void *device, const dk_enkf_setup *s, void **out, dk_msg *msg)
{
    dk_opencl_device *dev = device;
#ifndef DK_OPENCL_CLFFT
    if (s->scheme != DK_ENKF_TILED && s->scheme != DK_ENKF_BANDED) {
        dk_msg_set(msg, "opencl enkf: variant '%s' is not offered (tiled, banded)", s->desc.variant);
        return DK_ERR_NOT_IMPLEMENTED;
    }
#endif
    cl_program prog;
    dk_status st = program(dev, &prog, msg);
    if (st != DK_OK)
        return st;
    enkf_plan *p = calloc(1, sizeof *p);
    if (!p) {
        dk_msg_set(msg, "opencl enkf: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    p->dev = dev;
    p->s = s;
    struct {
        cl_kernel *k;
        const char *name;
    } kernels[] = {{&p->widen, "ek_widen"},     {&p->narrow, "ek_narrow"},   {&p->weigh, "ek_weigh"},
                   {&p->direct, "ek_direct"},   {&p->hpht, "ek_hpht"},       {&p->inflate, "ek_inflate"},
                   {&p->innovation, "ek_innovation"}, {&p->update, "ek_update"},
                   {&p->rows, "ek_rows"},       {&p->part, "ek_part"}};
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
        cl_int err;
        *kernels[i].k = clCreateKernel(prog, kernels[i].name, &err);
        CL_TRY_GOTO(err, fail, "enkf: creating kernel %s", kernels[i].name);
    }
    size_t M = s->desc.H.rows, L = s->desc.members;
    struct {
        cl_mem *m;
        size_t bytes;
        const void *src;
        const char *what;
    } buffers[] = {{&p->indptr, (M + 1) * sizeof(int64_t), s->indptr, "row pointers of H"},
                   {&p->indices, s->nnz * sizeof(int64_t), s->indices, "column indices of H"},
                   {&p->values, s->nnz * sizeof(double), s->values, "values of H"},
                   {&p->loc, s->loc_count * sizeof(double), s->loc, "localization"},
                   {&p->G, s->nnz * L * sizeof(double), NULL, "weighted anomalies"},
                   {&p->hpht64, M * M * sizeof(double), NULL, "HPHT"},
                   {&p->D, M * L * sizeof(double), NULL, "innovations"},
                   {&p->W, M * L * sizeof(double), NULL, "solved innovations"}};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++)
        if ((st = dk_opencl_alloc(dev, buffers[i].bytes, buffers[i].src, buffers[i].m, msg,
                                  "enkf: allocating the %s", buffers[i].what)) != DK_OK)
            goto fail;
    if ((st = make_hpht(p, prog, msg)) != DK_OK ||
        (s->scheme == DK_ENKF_BANDED && (st = make_band(p, prog, msg)) != DK_OK))
        goto fail;
#ifdef DK_OPENCL_CLFFT
    if (s->scheme == DK_ENKF_FFT && (st = make_fft(p, prog, msg)) != DK_OK)
        goto fail;
    if (s->scheme == DK_ENKF_LOWRANK &&
        ((st = make_fft(p, prog, msg)) != DK_OK ||
         (st = dk_opencl_lowrank_create(dev, prog, s, p->indices, p->values, circulant, p, &p->lowrank, msg)) != DK_OK))
        goto fail;
#endif
    *out = p;
    return DK_OK;
fail:
    plan_destroy(p);
    return st;
}

/* Enqueues k over a 1-D or 2-D range; an empty range enqueues nothing
 * (OpenCL 1.2 refuses a global size of 0). */
static cl_int launch(enkf_plan *p, cl_kernel k, size_t d0, size_t d1)
{
    if (d0 == 0 || d1 == 0)
        return CL_SUCCESS;
    size_t global[2] = {d0, d1};
    return clEnqueueNDRangeKernel(p->dev->queue, k, d1 > 1 ? 2 : 1, NULL, global, NULL, 0, NULL, NULL);
}

static cl_int convert(enkf_plan *p, cl_kernel k, cl_mem in, cl_mem out, size_t count)
{
    cl_ulong n = count;
    cl_int err = clSetKernelArg(k, 0, sizeof in, &in);
    err |= clSetKernelArg(k, 1, sizeof out, &out);
    err |= clSetKernelArg(k, 2, sizeof n, &n);
    return err != CL_SUCCESS ? err : launch(p, k, count, 1);
}

/* pht64 from e64 by ek_band: one work-group per tile takes every row,
 * BAND_JB at a time, where tiles fill the device; else one block of rows. */
static cl_int band(enkf_plan *p, cl_mem e64, cl_mem pht64)
{
    const dk_enkf_setup *s = p->s;
    cl_int N = (cl_int)s->desc.n, L = (cl_int)s->desc.members, M = (cl_int)s->desc.H.rows, rx = (cl_int)s->rx;
    cl_int W = p->band_W, tiles = p->band_tiles, jb = BAND_JB, blocks = (M + jb - 1) / jb;
    double inv = 1.0 / (double)(L - 1);
    cl_kernel k = p->band;
    cl_int err = clSetKernelArg(k, 0, sizeof e64, &e64);
    err |= clSetKernelArg(k, 1, sizeof p->values, &p->values);
    err |= clSetKernelArg(k, 2, sizeof p->loc, &p->loc);
    err |= clSetKernelArg(k, 3, sizeof p->indices32, &p->indices32);
    err |= clSetKernelArg(k, 4, sizeof p->range, &p->range);
    err |= clSetKernelArg(k, 5, sizeof pht64, &pht64);
    err |= clSetKernelArg(k, 6, sizeof N, &N);
    err |= clSetKernelArg(k, 7, sizeof L, &L);
    err |= clSetKernelArg(k, 8, sizeof M, &M);
    err |= clSetKernelArg(k, 9, sizeof rx, &rx);
    err |= clSetKernelArg(k, 10, sizeof W, &W);
    err |= clSetKernelArg(k, 11, sizeof tiles, &tiles);
    err |= clSetKernelArg(k, 12, sizeof jb, &jb);
    err |= clSetKernelArg(k, 13, sizeof inv, &inv);
    /* ek_band_wide ignores cs: one double */
    err |= clSetKernelArg(k, 14, (size_t)(p->band_wide ? 1 : 2 * W + 1) * sizeof(double), NULL);
    if (err != CL_SUCCESS || N == 0 || M == 0)
        return err;
    size_t global[2] = {(size_t)tiles * BAND_WG, tiles >= 1024 ? 1 : (size_t)(blocks < 65535 ? blocks : 65535)};
    size_t local[2] = {BAND_WG, 1};
    return clEnqueueNDRangeKernel(p->dev->queue, k, 2, NULL, global, local, 0, NULL, NULL);
}

/* hpht64 from pht64: the partial sums over segments of H's columns, then
 * their sum. */
static cl_int hpht(enkf_plan *p, cl_mem pht64, cl_mem hpht64)
{
    cl_ulong M = p->s->desc.H.rows, S = p->S;
    if (M == 0)
        return CL_SUCCESS;
    cl_kernel k = p->hpht;
    cl_int err = clSetKernelArg(k, 0, sizeof pht64, &pht64);
    err |= clSetKernelArg(k, 1, sizeof p->seg, &p->seg);
    err |= clSetKernelArg(k, 2, sizeof p->indices, &p->indices);
    err |= clSetKernelArg(k, 3, sizeof p->values, &p->values);
    err |= clSetKernelArg(k, 4, sizeof p->partial, &p->partial);
    err |= clSetKernelArg(k, 5, sizeof M, &M);
    err |= clSetKernelArg(k, 6, sizeof S, &S);
    size_t global[3] = {(size_t)M, (size_t)M, (size_t)S};
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(p->dev->queue, k, 3, NULL, global, NULL, 0, NULL, NULL);
    k = p->hpht_sum;
    err |= clSetKernelArg(k, 0, sizeof p->partial, &p->partial);
    err |= clSetKernelArg(k, 1, sizeof hpht64, &hpht64);
    err |= clSetKernelArg(k, 2, sizeof S, &S);
    size_t sum_local = 1; /* a power of two, at least S where S is small */
    while (sum_local < S && sum_local < HPHT_WG)
        sum_local *= 2;
    size_t sum_global = (size_t)(M * M) * sum_local;
    err |= clSetKernelArg(k, 3, sum_local * sizeof(double), NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(p->dev->queue, k, 1, NULL, &sum_global, &sum_local, 0, NULL, NULL);
    return err;
}

/* pht64 (N x M) and, when hpht64 is not NULL, hpht64 (M x M) from the
 * float64 anomalies e64, all device buffers. */
static cl_int cov64(enkf_plan *p, cl_mem e64, cl_mem pht64, cl_mem hpht64)
{
    const dk_enkf_setup *s = p->s;
    cl_ulong N = s->desc.n, L = s->desc.members, M = s->desc.H.rows, nnz = s->nnz, ny = s->desc.ny;
    cl_int ndim = s->desc.loc_ndim, banded = s->scheme == DK_ENKF_BANDED;
    cl_long window = (cl_long)s->window;
#ifdef DK_OPENCL_CLFFT
    if (p->lowrank)
        return dk_opencl_lowrank_cov(p->lowrank, e64, pht64, hpht64);
#endif

    cl_kernel k = p->weigh;
    cl_int err = clSetKernelArg(k, 0, sizeof e64, &e64);
    err |= clSetKernelArg(k, 1, sizeof p->indices, &p->indices);
    err |= clSetKernelArg(k, 2, sizeof p->values, &p->values);
    err |= clSetKernelArg(k, 3, sizeof p->G, &p->G);
    err |= clSetKernelArg(k, 4, sizeof nnz, &nnz);
    err |= clSetKernelArg(k, 5, sizeof L, &L);
    if (err == CL_SUCCESS && !p->band) /* ek_band forms G itself */
        err = launch(p, k, (size_t)(nnz * L), 1);
#ifdef DK_OPENCL_CLFFT
    if (err == CL_SUCCESS && s->scheme == DK_ENKF_FFT)
        err = fft(p, e64, pht64);
    else
#endif
    if (p->band)
        err = err != CL_SUCCESS ? err : band(p, e64, pht64);
    else
    {
    k = p->direct;
    err |= clSetKernelArg(k, 0, sizeof e64, &e64);
    err |= clSetKernelArg(k, 1, sizeof p->G, &p->G);
    err |= clSetKernelArg(k, 2, sizeof p->indptr, &p->indptr);
    err |= clSetKernelArg(k, 3, sizeof p->indices, &p->indices);
    err |= clSetKernelArg(k, 4, sizeof p->loc, &p->loc);
    err |= clSetKernelArg(k, 5, sizeof pht64, &pht64);
    err |= clSetKernelArg(k, 6, sizeof N, &N);
    err |= clSetKernelArg(k, 7, sizeof L, &L);
    err |= clSetKernelArg(k, 8, sizeof M, &M);
    err |= clSetKernelArg(k, 9, sizeof ndim, &ndim);
    err |= clSetKernelArg(k, 10, sizeof ny, &ny);
    err |= clSetKernelArg(k, 11, sizeof window, &window);
    err |= clSetKernelArg(k, 12, sizeof banded, &banded);
    if (err == CL_SUCCESS)
        err = launch(p, k, (size_t)M, (size_t)N);
    }
    if (err != CL_SUCCESS || !hpht64)
        return err;

    return hpht(p, pht64, hpht64);
}

static dk_status cov(void *handle, const void *e_, void *pht_, void *hpht_, dk_msg *msg)
{
    enkf_plan *p = handle;
    dk_opencl_device *dev = p->dev;
    const dk_enkf_setup *s = p->s;
    size_t N = s->desc.n, L = s->desc.members, M = s->desc.H.rows;
    cl_mem e = (cl_mem)e_, pht = (cl_mem)pht_, hpht = (cl_mem)hpht_;
    dk_status st = dk_opencl_enter(dev, msg);
    if (st != DK_OK)
        return st;
    cl_int err;
    if (s->desc.dtype == DK_F64) {
        err = cov64(p, e, pht, hpht);
    } else {
        if ((st = lazy(p, &p->e64, N * L * sizeof(double), "float64 anomalies", msg)) != DK_OK ||
            (st = lazy(p, &p->pht64, N * M * sizeof(double), "float64 PHT", msg)) != DK_OK)
            return st;
        err = convert(p, p->widen, e, p->e64, N * L);
        if (err == CL_SUCCESS)
            err = cov64(p, p->e64, p->pht64, hpht ? p->hpht64 : NULL);
        if (err == CL_SUCCESS)
            err = convert(p, p->narrow, p->pht64, pht, N * M);
        if (err == CL_SUCCESS && hpht)
            err = convert(p, p->narrow, p->hpht64, hpht, M * M);
    }
    CL_TRY(err, "enkf: the covariance product");
    return dk_opencl_finish(dev, DK_OPENCL_MAY_QUEUE, msg, "enkf: the covariance product");
}

static dk_status analysis(void *handle, void *x_, const double *d, const double *r, double inflation,
                          dk_msg *msg)
{
    enkf_plan *p = handle;
    dk_opencl_device *dev = p->dev;
    const dk_enkf_setup *s = p->s;
    size_t N = s->desc.n, L = s->desc.members, M = s->desc.H.rows;
    cl_command_queue q = dev->queue;
    cl_mem x = (cl_mem)x_;
    dk_status st;
    if ((st = dk_opencl_enter(dev, msg)) != DK_OK ||
        (st = lazy(p, &p->e64, N * L * sizeof(double), "anomalies", msg)) != DK_OK ||
        (st = lazy(p, &p->pht64, N * M * sizeof(double), "PHT", msg)) != DK_OK ||
        (st = lazy(p, &p->X64, N * L * sizeof(double), "float64 ensemble", msg)) != DK_OK)
        return st;
    double *A = malloc(M * M * sizeof *A), *D = malloc(M * L * sizeof *D);
    if (!A || !D) {
        free(A);
        free(D);
        dk_msg_set(msg, "opencl enkf: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }

    cl_ulong n64 = N, l64 = L, m64 = M;
    cl_int err = s->desc.dtype == DK_F64
                     ? clEnqueueCopyBuffer(q, x, p->X64, 0, 0, N * L * sizeof(double), 0, NULL, NULL)
                     : convert(p, p->widen, x, p->X64, N * L);
    cl_kernel k = p->inflate;
    err |= clSetKernelArg(k, 0, sizeof p->X64, &p->X64);
    err |= clSetKernelArg(k, 1, sizeof p->e64, &p->e64);
    err |= clSetKernelArg(k, 2, sizeof n64, &n64);
    err |= clSetKernelArg(k, 3, sizeof l64, &l64);
    err |= clSetKernelArg(k, 4, sizeof inflation, &inflation);
    if (err == CL_SUCCESS)
        err = launch(p, k, N, 1);
    if (err == CL_SUCCESS)
        err = cov64(p, p->e64, p->pht64, p->hpht64);
    /* y + eps goes up in W, the innovations d - H X come back in D */
    if (err == CL_SUCCESS)
        err = clEnqueueWriteBuffer(q, p->W, CL_TRUE, 0, M * L * sizeof(double), d, 0, NULL, NULL);
    k = p->innovation;
    err |= clSetKernelArg(k, 0, sizeof p->X64, &p->X64);
    err |= clSetKernelArg(k, 1, sizeof p->indptr, &p->indptr);
    err |= clSetKernelArg(k, 2, sizeof p->indices, &p->indices);
    err |= clSetKernelArg(k, 3, sizeof p->values, &p->values);
    err |= clSetKernelArg(k, 4, sizeof p->W, &p->W);
    err |= clSetKernelArg(k, 5, sizeof p->D, &p->D);
    err |= clSetKernelArg(k, 6, sizeof m64, &m64);
    err |= clSetKernelArg(k, 7, sizeof l64, &l64);
    if (err == CL_SUCCESS)
        err = launch(p, k, L, M);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(q, p->hpht64, CL_TRUE, 0, M * M * sizeof *A, A, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(q, p->D, CL_TRUE, 0, M * L * sizeof *D, D, 0, NULL, NULL);
    CL_TRY_GOTO(err, done, "enkf: forming HPHT and the innovations");

    if ((st = dk_enkf_solve_host(M, L, A, r, D, msg)) != DK_OK)
        goto done;

    err = clEnqueueWriteBuffer(q, p->W, CL_TRUE, 0, M * L * sizeof *D, D, 0, NULL, NULL);
    k = p->update;
    err |= clSetKernelArg(k, 0, sizeof p->X64, &p->X64);
    err |= clSetKernelArg(k, 1, sizeof p->pht64, &p->pht64);
    err |= clSetKernelArg(k, 2, sizeof p->W, &p->W);
    err |= clSetKernelArg(k, 3, sizeof n64, &n64);
    err |= clSetKernelArg(k, 4, sizeof l64, &l64);
    err |= clSetKernelArg(k, 5, sizeof m64, &m64);
    if (err == CL_SUCCESS)
        err = launch(p, k, L, N);
    if (err == CL_SUCCESS)
        err = s->desc.dtype == DK_F64
                  ? clEnqueueCopyBuffer(q, p->X64, x, 0, 0, N * L * sizeof(double), 0, NULL, NULL)
                  : convert(p, p->narrow, p->X64, x, N * L);
    CL_TRY_GOTO(err, done, "enkf: the analysis update");
    st = dk_opencl_finish(dev, DK_OPENCL_BLOCK, msg, "enkf: the analysis update");
done:
    free(A);
    free(D);
    return st;
}

/* ---- the distributed layer's phases ---- */

static dk_status cov_rows(void *handle, const void *e_, const dk_enkf_box *own, void *pht_, void *part_, size_t at,
                          const void *x_, dk_msg *msg)
{
    enkf_plan *p = handle;
    dk_opencl_device *dev = p->dev;
    const dk_enkf_setup *s = p->s;
    size_t N = s->desc.n, L = s->desc.members, M = s->desc.H.rows;
    cl_mem e = (cl_mem)e_, pht = (cl_mem)pht_, part = (cl_mem)part_, x = (cl_mem)x_;
    int f32 = s->desc.dtype == DK_F32;
    dk_status st;
    if ((st = dk_opencl_enter(p->dev, msg)) != DK_OK ||
        (st = lazy(p, &p->pht64, N * M * sizeof(double), "float64 PHT", msg)) != DK_OK ||
        (f32 && (st = lazy(p, &p->e64, N * L * sizeof(double), "float64 anomalies", msg)) != DK_OK) ||
        (f32 && x && (st = lazy(p, &p->x64, N * L * sizeof(double), "float64 ensemble", msg)) != DK_OK))
        return st;
    size_t count = (own->hi[0] - own->lo[0]) * (own->hi[1] - own->lo[1]);
    cl_int err = f32 ? convert(p, p->widen, e, p->e64, N * L) : CL_SUCCESS;
    if (err == CL_SUCCESS)
        err = cov64(p, f32 ? p->e64 : e, p->pht64, NULL);
    cl_ulong m64 = M, l64 = L, c64 = count, lo0 = own->lo[0], hi0 = own->hi[0], lo1 = own->lo[1], hi1 = own->hi[1];
    cl_ulong w = hi1 - lo1, ny = s->desc.loc_ndim == 2 ? s->desc.ny : N, at64 = at;
    cl_kernel k = p->rows;
    err |= clSetKernelArg(k, 0, sizeof p->pht64, &p->pht64);
    err |= clSetKernelArg(k, 1, sizeof pht, &pht);
    err |= clSetKernelArg(k, 2, sizeof f32, &f32);
    err |= clSetKernelArg(k, 3, sizeof m64, &m64);
    err |= clSetKernelArg(k, 4, sizeof c64, &c64);
    err |= clSetKernelArg(k, 5, sizeof lo0, &lo0);
    err |= clSetKernelArg(k, 6, sizeof lo1, &lo1);
    err |= clSetKernelArg(k, 7, sizeof w, &w);
    err |= clSetKernelArg(k, 8, sizeof ny, &ny);
    if (err == CL_SUCCESS)
        err = launch(p, k, M, count);
    if (err == CL_SUCCESS && part) {
        cl_mem x64 = x && f32 ? p->x64 : x ? x : p->pht64; /* a valid handle where x is unused */
        int with_x = x != NULL;
        if (x && f32)
            err = convert(p, p->widen, x, p->x64, count * L);
        k = p->part;
        err |= clSetKernelArg(k, 0, sizeof p->pht64, &p->pht64);
        err |= clSetKernelArg(k, 1, sizeof x64, &x64);
        err |= clSetKernelArg(k, 2, sizeof p->indptr, &p->indptr);
        err |= clSetKernelArg(k, 3, sizeof p->indices, &p->indices);
        err |= clSetKernelArg(k, 4, sizeof p->values, &p->values);
        err |= clSetKernelArg(k, 5, sizeof part, &part);
        err |= clSetKernelArg(k, 6, sizeof f32, &f32);
        err |= clSetKernelArg(k, 7, sizeof at64, &at64);
        err |= clSetKernelArg(k, 8, sizeof m64, &m64);
        err |= clSetKernelArg(k, 9, sizeof l64, &l64);
        err |= clSetKernelArg(k, 10, sizeof with_x, &with_x);
        err |= clSetKernelArg(k, 11, sizeof lo0, &lo0);
        err |= clSetKernelArg(k, 12, sizeof hi0, &hi0);
        err |= clSetKernelArg(k, 13, sizeof lo1, &lo1);
        err |= clSetKernelArg(k, 14, sizeof hi1, &hi1);
        err |= clSetKernelArg(k, 15, sizeof ny, &ny);
        if (err == CL_SUCCESS)
            err = launch(p, k, M + (x ? L : 0), M);
    }
    CL_TRY(err, "enkf: the covariance rows");
    return dk_opencl_finish(p->dev, DK_OPENCL_MAY_QUEUE, msg, "enkf: the covariance rows");
}

static dk_status inflate(void *handle, const void *x_, dk_dtype xt, size_t count, double inflation, void *X_,
                         void *e_, dk_msg *msg)
{
    enkf_plan *p = handle;
    dk_opencl_device *dev = p->dev;
    cl_mem x = (cl_mem)x_, X = (cl_mem)X_, e = (cl_mem)e_;
    cl_ulong n64 = count, l64 = p->s->desc.members;
    dk_status st = dk_opencl_enter(p->dev, msg);
    if (st != DK_OK || count == 0)
        return st;
    cl_int err = xt == DK_F64
                     ? clEnqueueCopyBuffer(p->dev->queue, x, X, 0, 0, count * l64 * sizeof(double), 0, NULL, NULL)
                     : convert(p, p->widen, x, X, count * l64);
    cl_kernel k = p->inflate;
    err |= clSetKernelArg(k, 0, sizeof X, &X);
    err |= clSetKernelArg(k, 1, sizeof e, &e);
    err |= clSetKernelArg(k, 2, sizeof n64, &n64);
    err |= clSetKernelArg(k, 3, sizeof l64, &l64);
    err |= clSetKernelArg(k, 4, sizeof inflation, &inflation);
    if (err == CL_SUCCESS)
        err = launch(p, k, count, 1);
    CL_TRY(err, "enkf: the inflation");
    return dk_opencl_finish(p->dev, DK_OPENCL_MAY_QUEUE, msg, "enkf: the inflation");
}

/* The M x M solve on the host (OpenCL has no solver library): the sums
 * come back, Z goes up, the update runs on the device. */
static dk_status update(void *handle, const void *sums_, size_t at, const double *d, const double *r,
                        const void *pht_, const void *X_, size_t count, void *x_, dk_dtype xt, dk_msg *msg)
{
    enkf_plan *p = handle;
    dk_opencl_device *dev = p->dev;
    size_t L = p->s->desc.members, M = p->s->desc.H.rows, total = at + M * M + M * L;
    cl_mem sums = (cl_mem)sums_, pht = (cl_mem)pht_, X = (cl_mem)X_, x = (cl_mem)x_;
    cl_command_queue q = p->dev->queue;
    dk_status st;
    if ((st = dk_opencl_enter(p->dev, msg)) != DK_OK ||
        (st = lazy(p, &p->X64, (count ? count : 1) * L * sizeof(double), "float64 ensemble", msg)) != DK_OK)
        return st;
    double *h = malloc(total * sizeof *h), *D = malloc(M * L * sizeof *D);
    if (!h || !D) {
        free(h);
        free(D);
        dk_msg_set(msg, "opencl enkf: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    cl_int err = clEnqueueReadBuffer(q, sums, CL_TRUE, 0, total * sizeof *h, h, 0, NULL, NULL);
    CL_TRY_GOTO(err, done, "enkf: reading the summed HPHT and HX");
    if (h[0] != 0)
        goto done; /* a rank failed: the layer says so */
    for (size_t k = 0; k < M * L; k++)
        D[k] = d[k] - h[at + M * M + k];
    if ((st = dk_enkf_solve_host(M, L, h + at, r, D, msg)) != DK_OK || count == 0)
        goto done;
    cl_ulong n64 = count, l64 = L, m64 = M;
    err = clEnqueueWriteBuffer(q, p->W, CL_TRUE, 0, M * L * sizeof *D, D, 0, NULL, NULL);
    err |= clEnqueueCopyBuffer(q, X, p->X64, 0, 0, count * L * sizeof(double), 0, NULL, NULL);
    cl_kernel k = p->update;
    err |= clSetKernelArg(k, 0, sizeof p->X64, &p->X64);
    err |= clSetKernelArg(k, 1, sizeof pht, &pht);
    err |= clSetKernelArg(k, 2, sizeof p->W, &p->W);
    err |= clSetKernelArg(k, 3, sizeof n64, &n64);
    err |= clSetKernelArg(k, 4, sizeof l64, &l64);
    err |= clSetKernelArg(k, 5, sizeof m64, &m64);
    if (err == CL_SUCCESS)
        err = launch(p, k, L, count);
    if (err == CL_SUCCESS)
        err = xt == DK_F64 ? clEnqueueCopyBuffer(q, p->X64, x, 0, 0, count * L * sizeof(double), 0, NULL, NULL)
                           : convert(p, p->narrow, p->X64, x, count * L);
    CL_TRY_GOTO(err, done, "enkf: the analysis update");
    st = dk_opencl_finish(p->dev, DK_OPENCL_BLOCK, msg, "enkf: the analysis update");
done:
    free(h);
    free(D);
    return st;
}

const dk_enkf_ops dk_opencl_enkf_ops = {
    .variants = variants,
    .plan_create = plan_create,
    .cov = cov,
    .analysis = analysis,
    .plan_destroy = plan_destroy,
    .cov_rows = cov_rows,
    .inflate = inflate,
    .update = update,
};
