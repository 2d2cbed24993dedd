/* dakit-serial: the smallest real dakit plugin. It runs gauss in plain
 * serial C on host memory, and gbees through the plugin kit's engine, to
 * show a vendor what a backend must provide. It is built outside the dakit
 * tree against the installed headers alone:
 *
 *     cc -shared -fPIC -O2 -fvisibility=hidden $(pkg-config --cflags dakit) serial.c -o dakit-serial.so
 *
 * and found at run time through DAKIT_PLUGIN_PATH:
 *
 *     DAKIT_PLUGIN_PATH=$PWD dakit conform --backend serial --algo gauss,gbees
 *
 * A device plugin has the same shape: its buffers are device memory and its
 * execute launches kernels; everything else stays as here. */
#include <stdlib.h>
#include <string.h>

#include <dakit/plugin.h>
/* The GBEES scheme on one host grid: a device plugin would take the models
 * (dakit/kit/gbees/models/all.h) and the flux limiter (flux.h) into its own
 * kernels instead. Compiled without OpenMP it runs on one thread. */
#include <dakit/kit/gbees/engine.h>

/* ---- device and buffers: host memory ---- */

static int serial_probe(dk_device_info *devices, int max, dk_msg *msg)
{
    (void)msg;
    if (max > 0) {
        strcpy(devices[0].name, "host CPU, one thread");
        devices[0].kind = DK_DEVICE_CPU;
    }
    return 1;
}

static dk_status serial_open(int index, void **device, dk_msg *msg)
{
    (void)index;
    (void)msg;
    *device = NULL; /* nothing to hold: every call works on host memory */
    return DK_OK;
}

static void serial_close(void *device) { (void)device; }

static dk_status serial_alloc(void *device, size_t bytes, void **buffer, dk_msg *msg)
{
    (void)device;
    *buffer = malloc(bytes);
    if (!*buffer) {
        dk_msg_set(msg, "serial: cannot allocate %zu bytes", bytes);
        return DK_ERR_OUT_OF_MEMORY;
    }
    return DK_OK;
}

static void serial_free(void *device, void *buffer)
{
    (void)device;
    free(buffer);
}

static dk_status serial_write(void *device, void *buffer, const void *src, size_t bytes, dk_msg *msg)
{
    (void)device;
    (void)msg;
    memcpy(buffer, src, bytes);
    return DK_OK;
}

static dk_status serial_read(void *device, const void *buffer, void *dst, size_t bytes, dk_msg *msg)
{
    (void)device;
    (void)msg;
    memcpy(dst, buffer, bytes);
    return DK_OK;
}

static dk_status serial_copy(void *device, void *dst, const void *src, size_t bytes, dk_msg *msg)
{
    (void)device;
    (void)msg;
    memmove(dst, src, bytes);
    return DK_OK;
}

/* ---- gauss: the K-iterated first-order recursive filter ---- */

typedef struct serial_gauss_plan {
    dk_gauss_setup setup; /* validated by the core, with alpha per axis */
    double *span;         /* one window, in double, reused for every line */
} serial_gauss_plan;

/* One K-iterated RF over n values, the boundary rule at both ends. Done in
 * double and rounded once: for float32 data that is closer to the exact
 * filter than float arithmetic, and well inside the conformance tolerance. */
static void rf_span(double *x, size_t n, double alpha, int K, dk_boundary boundary)
{
    double beta = 1.0 - alpha;
    for (int k = 0; k < K; k++) {
        double u = x[n - 1];
        double p = boundary == DK_BOUNDARY_CONSTANT ? x[0] : 0.0;
        for (size_t i = 0; i < n; i++)
            x[i] = p = beta * x[i] + alpha * p;
        double s = boundary == DK_BOUNDARY_CONSTANT ? u + (x[n - 1] - u) / (1.0 + alpha) : beta * x[n - 1];
        x[n - 1] = s;
        for (size_t i = n - 1; i-- > 0;)
            x[i] = s = beta * x[i] + alpha * s;
    }
}

static double get(const void *data, dk_dtype t, size_t k)
{
    return t == DK_F32 ? (double)((const float *)data)[k] : ((const double *)data)[k];
}

static void put(void *data, dk_dtype t, size_t k, double v)
{
    if (t == DK_F32)
        ((float *)data)[k] = (float)v;
    else
        ((double *)data)[k] = v;
}

static dk_status serial_gauss_plan_create(void *device, const dk_gauss_setup *setup, void **plan, dk_msg *msg)
{
    (void)device;
    size_t longest = 0;
    for (int a = 0; a < setup->desc.ndim; a++)
        longest = setup->desc.shape[a] > longest ? setup->desc.shape[a] : longest;
    serial_gauss_plan *p = calloc(1, sizeof *p);
    if (p)
        p->span = malloc(longest * sizeof(double));
    if (!p || !p->span) {
        free(p);
        dk_msg_set(msg, "serial: out of memory for a line of %zu values", longest);
        return DK_ERR_OUT_OF_MEMORY;
    }
    p->setup = *setup;
    *plan = p;
    return DK_OK;
}

/* Exact mode filters whole lines; overlap mode filters each block of
 * dk_gauss_block's decomposition over its window and keeps the block. Every window
 * must read the unfiltered line, so the line is copied out first and written
 * back block by block. */
static dk_status serial_gauss_execute(void *plan, const void *in, void *out, dk_msg *msg)
{
    serial_gauss_plan *p = plan;
    const dk_gauss_desc *d = &p->setup.desc;
    size_t esize = d->dtype == DK_F64 ? 8 : 4;
    if (in != out)
        memcpy(out, in, p->setup.count * esize);
    for (int a = 0; a < d->ndim; a++) {
        if (!(d->axes & (1u << a)))
            continue;
        dk_axis_view v = dk_axis_view_of(d, a);
        double *orig = malloc(v.n * sizeof(double));
        if (!orig) {
            dk_msg_set(msg, "serial: out of memory");
            return DK_ERR_OUT_OF_MEMORY;
        }
        for (size_t o = 0; o < v.outer; o++) {
            for (size_t j = 0; j < v.inner; j++) {
                size_t first = o * v.n * v.inner + j;
                for (size_t i = 0; i < v.n; i++)
                    orig[i] = get(out, d->dtype, first + i * v.inner);
                size_t blocks = d->mode == DK_GAUSS_EXACT ? 1 : dk_gauss_line_blocks(v.n, d->blocks);
                for (size_t b = 0; b < blocks; b++) {
                    dk_span blk = {0, v.n}, win = {0, v.n};
                    if (d->mode == DK_GAUSS_OVERLAP) {
                        blk = dk_gauss_block(v.n, blocks, b);
                        win = dk_gauss_window(blk, d->overlap, v.n);
                    }
                    memcpy(p->span, orig + win.begin, (win.end - win.begin) * sizeof(double));
                    rf_span(p->span, win.end - win.begin, p->setup.alpha[a], d->K, d->boundary);
                    for (size_t i = blk.begin; i < blk.end; i++)
                        put(out, d->dtype, first + i * v.inner, p->span[i - win.begin]);
                }
            }
        }
        free(orig);
    }
    return DK_OK;
}

static void serial_gauss_plan_destroy(void *plan)
{
    serial_gauss_plan *p = plan;
    if (p)
        free(p->span);
    free(p);
}

static const char *const serial_gauss_variants[] = {"lines", NULL};

static const dk_gauss_ops serial_gauss_ops = {
    .variants = serial_gauss_variants,
    .plan_create = serial_gauss_plan_create,
    .execute = serial_gauss_execute,
    .plan_destroy = serial_gauss_plan_destroy,
};

/* ---- gbees: the kit's engine, which fills the whole ops table ---- */

static const char *const serial_gbees_variants[] = {"kit-engine", NULL};
GB_DEFINE_OPS(serial_gbees_ops, serial_gbees_variants)

static const dk_plugin serial_plugin = {
    .abi_version = DK_PLUGIN_ABI_VERSION,
    .size = DK_PLUGIN_SIZE,
    .name = "serial",
    .version = "1.0",
    .priority = 1, /* never preferred by auto selection over a real backend */
    .probe = serial_probe,
    .device_open = serial_open,
    .device_close = serial_close,
    .buffer_alloc = serial_alloc,
    .buffer_free = serial_free,
    .buffer_write = serial_write,
    .buffer_read = serial_read,
    .buffer_copy = serial_copy,
    .gauss = &serial_gauss_ops,
    .gbees = &serial_gbees_ops,
};

DK_PLUGIN_EXPORT const dk_plugin *DK_PLUGIN_ENTRY(void) { return &serial_plugin; }
