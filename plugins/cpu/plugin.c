/* dakit cpu backend: the host's cores through OpenMP. One device, the whole
 * machine; buffers are plain host memory, so write, read and copy are memcpy. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <dakit/plugin.h>
#include <dakit/kmeans.h>

/* Defined in gauss/plan.c. */
extern const dk_gauss_ops dk_cpu_gauss_ops;
extern const dk_gbees_ops dk_cpu_gbees_ops; /* gbees.c */
extern const dk_kmeans_ops dk_cpu_kmeans_ops; /* kmeans.c */
extern const dk_letkf_ops dk_cpu_letkf_ops;   /* letkf.c */
void dk_cpu_copy(void *dst, const void *src, size_t bytes);
#ifdef DK_CPU_ENKF /* enkf.c, built where FFTW and LAPACKE are found */
extern const dk_enkf_ops dk_cpu_enkf_ops;
#endif

/* 64 bytes: one cache line and one AVX-512 vector, so no buffer starts
 * part-way through a line that a neighbour also writes. */
#define BUFFER_ALIGNMENT 64

/* Below this, one thread copies faster than a team can be woken. */
#define PARALLEL_COPY_BYTES ((size_t)1 << 22)

static int thread_count(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

void dk_cpu_copy(void *dst, const void *src, size_t bytes)
{
    if (dst == src || bytes == 0)
        return;
    int threads = thread_count();
    if (bytes < PARALLEL_COPY_BYTES || threads < 2) {
        memmove(dst, src, bytes);
        return;
    }
    /* Disjoint buffers only reach here through the core (one handle per
     * dk_buffer), so the pieces never overlap each other. */
    size_t piece = (bytes / (size_t)threads + BUFFER_ALIGNMENT - 1) & ~(size_t)(BUFFER_ALIGNMENT - 1);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < threads; t++) {
        size_t begin = (size_t)t * piece;
        if (begin < bytes) {
            size_t len = bytes - begin < piece ? bytes - begin : piece;
            memcpy((char *)dst + begin, (const char *)src + begin, len);
        }
    }
}

/* The "model name" line of /proc/cpuinfo, or a generic name where there is
 * none (non-x86 kernels spell it differently). */
static void cpu_model_name(char *name, size_t size)
{
    snprintf(name, size, "host CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0)
            continue;
        const char *colon = strchr(line, ':');
        if (!colon)
            continue;
        const char *value = colon + 1;
        while (*value == ' ' || *value == '\t')
            value++;
        size_t len = strcspn(value, "\n");
        if (len > 0)
            snprintf(name, size, "%.*s", (int)len, value);
        break;
    }
    fclose(f);
}

static int cpu_probe(dk_device_info *devices, int max, dk_msg *msg)
{
    (void)msg;
    if (max < 1 || !devices)
        return 1;
    char model[96];
    cpu_model_name(model, sizeof model);
    int threads = thread_count();
    snprintf(devices[0].name, sizeof devices[0].name, "%s (%d thread%s)", model, threads,
             threads == 1 ? "" : "s");
    long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
    devices[0].memory_bytes = pages > 0 && page_size > 0 ? (size_t)pages * (size_t)page_size : 0;
    devices[0].kind = DK_DEVICE_CPU;
    return 1;
}

/* The device carries nothing: every plan owns its own state. A non-NULL
 * handle still tells the core that the open succeeded. */
static int the_device;

static dk_status cpu_device_open(int index, void **device, dk_msg *msg)
{
    if (index != 0) {
        dk_msg_set(msg, "the cpu backend has one device (index 0), not index %d", index);
        return DK_ERR_INVALID_ARGUMENT;
    }
    *device = &the_device;
    return DK_OK;
}

static void cpu_device_close(void *device)
{
    (void)device;
}

static dk_status cpu_buffer_alloc(void *device, size_t bytes, void **buffer, dk_msg *msg)
{
    (void)device;
    /* Rounded up to whole cache lines; never zero, so even an empty buffer
     * has a distinct handle. */
    size_t rounded = (bytes + BUFFER_ALIGNMENT - 1) & ~(size_t)(BUFFER_ALIGNMENT - 1);
    if (rounded < bytes) {
        dk_msg_set(msg, "cannot allocate %zu bytes of host memory", bytes);
        return DK_ERR_OUT_OF_MEMORY;
    }
    if (rounded == 0)
        rounded = BUFFER_ALIGNMENT;
    void *p = NULL;
    if (posix_memalign(&p, BUFFER_ALIGNMENT, rounded) != 0) {
        dk_msg_set(msg, "cannot allocate %zu bytes of host memory", bytes);
        return DK_ERR_OUT_OF_MEMORY;
    }
    *buffer = p;
    return DK_OK;
}

static void cpu_buffer_free(void *device, void *buffer)
{
    (void)device;
    free(buffer);
}

/* The caller's host memory is used as it is: every kernel takes any
 * alignment a float or double array has. */
static dk_status cpu_buffer_wrap(void *device, int kind, void *memory, size_t bytes, void **buffer, dk_msg *msg)
{
    (void)device;
    (void)bytes;
    if (kind != DK_MEMORY_HOST) {
        dk_msg_set(msg, "cpu: only host memory can be wrapped (memory kind %d is a device's)", kind);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    *buffer = memory;
    return DK_OK;
}

static void cpu_buffer_unwrap(void *device, void *buffer)
{
    (void)device;
    (void)buffer;
}

static dk_status cpu_device_native(void *device, dk_native *native, dk_msg *msg)
{
    (void)device;
    (void)msg;
    native->memory = DK_MEMORY_HOST;
    return DK_OK;
}

static dk_status cpu_buffer_write(void *device, void *buffer, const void *src, size_t bytes,
                                  dk_msg *msg)
{
    (void)device;
    (void)msg;
    dk_cpu_copy(buffer, src, bytes);
    return DK_OK;
}

static dk_status cpu_buffer_read(void *device, const void *buffer, void *dst, size_t bytes,
                                 dk_msg *msg)
{
    (void)device;
    (void)msg;
    dk_cpu_copy(dst, buffer, bytes);
    return DK_OK;
}

static dk_status cpu_buffer_copy(void *device, void *dst, const void *src, size_t bytes,
                                 dk_msg *msg)
{
    (void)device;
    (void)msg;
    dk_cpu_copy(dst, src, bytes);
    return DK_OK;
}

/* Row by row: each row of the box is contiguous in both arrays. */
static dk_status cpu_buffer_copy_box(void *device, void *dst, const void *src, const dk_box_copy *b, dk_msg *msg)
{
    (void)device;
    (void)msg;
    size_t row = b->count[2] * b->esize;
    for (size_t i = 0; i < b->count[0]; i++)
        for (size_t j = 0; j < b->count[1]; j++) {
            size_t s = ((b->src_lo[0] + i) * b->src_shape[1] + b->src_lo[1] + j) * b->src_shape[2] + b->src_lo[2];
            size_t d = ((b->dst_lo[0] + i) * b->dst_shape[1] + b->dst_lo[1] + j) * b->dst_shape[2] + b->dst_lo[2];
            memcpy((char *)dst + b->dst_offset + d * b->esize, (const char *)src + b->src_offset + s * b->esize, row);
        }
    return DK_OK;
}

static const dk_plugin cpu_plugin = {
    .abi_version = DK_PLUGIN_ABI_VERSION,
    .size = DK_PLUGIN_SIZE,
    .name = "cpu",
    .version = DK_VERSION_STRING,
    .priority = 10,
    .probe = cpu_probe,
    .device_open = cpu_device_open,
    .device_close = cpu_device_close,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_free = cpu_buffer_free,
    .buffer_write = cpu_buffer_write,
    .buffer_read = cpu_buffer_read,
    .buffer_copy = cpu_buffer_copy,
    .buffer_wrap = cpu_buffer_wrap,
    .buffer_unwrap = cpu_buffer_unwrap,
    .device_native = cpu_device_native,
    .gauss = &dk_cpu_gauss_ops,
    .gauss_features = DK_GAUSS_FEATURE_RECURSIVE | DK_GAUSS_FEATURE_MODES,
    .buffer_copy_box = cpu_buffer_copy_box,
    .gbees = &dk_cpu_gbees_ops,
#ifdef DK_CPU_ENKF
    .enkf = &dk_cpu_enkf_ops,
#endif
    .kmeans = &dk_cpu_kmeans_ops,
    .letkf = &dk_cpu_letkf_ops,
    .ops_generation = DK_PLUGIN_OPS_GENERATION,
};

DK_PLUGIN_EXPORT const dk_plugin *DK_PLUGIN_ENTRY(void)
{
    return &cpu_plugin;
}
