/* dakit cuda plugin: the descriptor, device discovery, and device memory.
 * The algorithms live beside this file (gauss/, kmeans/, gbees/, enkf/,
 * letkf/). Only DK_PLUGIN_ENTRY is exported (-fvisibility=hidden plus the
 * version script exports.map). */
#include <stdlib.h>
#include <string.h>

#include <dakit/letkf.h>

#include "cuda_internal.h"
#include <dakit/kmeans.h>

#ifndef DK_CUDA_MIN_CC
#define DK_CUDA_MIN_CC 90 /* the lowest compute capability the build has code for */
#endif

dk_status dk_cuda_fail(dk_msg *msg, cudaError_t err, const char *what)
{
    (void)cudaGetLastError();
    dk_msg_set(msg, "cuda: %s failed: %s (%s)", what, cudaGetErrorString(err),
               cudaGetErrorName(err));
    return err == cudaErrorMemoryAllocation ? DK_ERR_OUT_OF_MEMORY : DK_ERR_BACKEND;
}

dk_status dk_cuda_lib_fail(dk_msg *msg, const char *lib, const char *kind, int status, bool oom,
                           const char *what)
{
    dk_msg_set(msg, "cuda: %s %s failed (%s %d)", lib, what, kind, status);
    return oom ? DK_ERR_OUT_OF_MEMORY : DK_ERR_BACKEND;
}

dk_status dk_cuda_enter(const dk_cuda_device *dev, dk_msg *msg)
{
    CUDA_TRY(cudaSetDevice(dev->ordinal), "cudaSetDevice");
    if (dev->caller) {
        CUDA_TRY(cudaEventRecord(dev->caller_ready, dev->caller), "ordering after the caller's stream");
        CUDA_TRY(cudaStreamWaitEvent(dev->stream, dev->caller_ready, 0), "ordering after the caller's stream");
    }
    return DK_OK;
}

dk_status dk_cuda_finish(const dk_cuda_device *dev, const char *what, dk_msg *msg)
{
    if (dev->caller && dev->async) {
        CUDA_TRY(cudaEventRecord(dev->work_done, dev->stream), what);
        CUDA_TRY(cudaStreamWaitEvent(dev->caller, dev->work_done, 0), what);
        return DK_OK;
    }
    CUDA_TRY(cudaStreamSynchronize(dev->stream), what);
    return DK_OK;
}

/* The CUDA ordinals this build can run on, in order. Returns how many, or -1
 * with msg set; 0 with the reason in msg. */
static int usable_ordinals(int *ordinals, int max, dk_msg *msg)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (dk_cuda_failed(e)) { /* no driver or no device: a reason, not a failure */
        /* the runtime says "driver version is insufficient" also when there
         * is no driver at all: the driver API version tells the two apart */
        int driver = 0, runtime = 0;
        cudaDriverGetVersion(&driver);
        cudaRuntimeGetVersion(&runtime);
        if (driver == 0)
            dk_msg_set(msg, "no NVIDIA driver found (libcuda is not installed or cannot be loaded)");
        else if (e == cudaErrorInsufficientDriver)
            dk_msg_set(msg, "the NVIDIA driver supports CUDA %d.%d, older than the CUDA %d.%d this plugin was built "
                       "with; update the driver", driver / 1000, driver % 1000 / 10, runtime / 1000,
                       runtime % 1000 / 10);
        else
            dk_msg_set(msg, "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        return 0;
    }
    if (count == 0) {
        dk_msg_set(msg, "no CUDA device found");
        return 0;
    }
    int usable = 0, best_cc = 0;
    for (int i = 0; i < count && usable < max; i++) {
        int major = 0, minor = 0;
        if (!CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, i),
                     "cudaDeviceGetAttribute") ||
            !CUDA_OK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, i),
                     "cudaDeviceGetAttribute"))
            return -1;
        int cc = 10 * major + minor;
        if (cc > best_cc)
            best_cc = cc;
        if (cc >= DK_CUDA_MIN_CC)
            ordinals[usable++] = i;
    }
    if (usable == 0)
        dk_msg_set(msg,
                   "cuda: %d device(s) found, but none of compute capability %d.%d or newer "
                   "(the best is %d.%d); rebuild with -Dnvcc_arch naming it",
                   count, DK_CUDA_MIN_CC / 10, DK_CUDA_MIN_CC % 10, best_cc / 10, best_cc % 10);
    return usable;
}

static int cuda_probe(dk_device_info *devices, int max, dk_msg *msg)
{
    int ordinals[DK_PLUGIN_MAX_DEVICES];
    if (max > DK_PLUGIN_MAX_DEVICES)
        max = DK_PLUGIN_MAX_DEVICES;
    int n = usable_ordinals(ordinals, max, msg);
    for (int i = 0; i < n && devices; i++) {
        cudaDeviceProp p;
        if (!CUDA_OK(cudaGetDeviceProperties(&p, ordinals[i]), "cudaGetDeviceProperties"))
            return -1;
        snprintf(devices[i].name, sizeof devices[i].name, "%s (sm_%d%d)", p.name, p.major,
                 p.minor);
        devices[i].memory_bytes = p.totalGlobalMem;
        devices[i].kind = DK_DEVICE_GPU;
    }
    return n;
}

static dk_status cuda_device_open(int index, void **device, dk_msg *msg)
{
    int ordinals[DK_PLUGIN_MAX_DEVICES];
    int n = usable_ordinals(ordinals, DK_PLUGIN_MAX_DEVICES, msg);
    if (n < 0)
        return DK_ERR_BACKEND;
    if (index < 0 || index >= n) {
        if (n > 0)
            dk_msg_set(msg, "cuda: device %d requested, but there are %d usable device(s)",
                       index, n);
        return DK_ERR_NO_BACKEND;
    }
    dk_cuda_device *dev = (dk_cuda_device *)calloc(1, sizeof *dev);
    if (!dev) {
        dk_msg_set(msg, "cuda: cannot allocate the device record");
        return DK_ERR_OUT_OF_MEMORY;
    }
    dev->ordinal = ordinals[index];
    int sms = 0, optin = 0, block = 0;
    dk_status st = dk_cuda_enter(dev, msg);
    if (st != DK_OK)
        goto fail;
    /* creates the context now, so that errors show here */
    CUDA_TRY_GOTO(cudaFree(0), "creating the CUDA context", fail);
    CUDA_TRY_GOTO(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev->ordinal),
                  "cudaDeviceGetAttribute", fail);
    CUDA_TRY_GOTO(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev->ordinal),
                  "cudaDeviceGetAttribute", fail);
    CUDA_TRY_GOTO(cudaDeviceGetAttribute(&block, cudaDevAttrMaxSharedMemoryPerBlock, dev->ordinal),
                  "cudaDeviceGetAttribute", fail);
    dev->sm_count = sms;
    dev->smem_optin = (size_t)optin;
    dev->smem_block = (size_t)block;
    CUDA_TRY_GOTO(cudaStreamCreateWithFlags(&dev->stream, cudaStreamNonBlocking), "cudaStreamCreate", fail);
    *device = dev;
    return DK_OK;
fail:
    free(dev);
    return st;
}

static void cuda_device_close(void *device)
{
    dk_cuda_device *dev = (dk_cuda_device *)device;
    if (!dev)
        return;
    if (cudaSetDevice(dev->ordinal) == cudaSuccess && dev->stream) {
        cudaStreamSynchronize(dev->stream);
        cudaStreamDestroy(dev->stream);
        if (dev->caller_ready) {
            cudaEventDestroy(dev->caller_ready);
            cudaEventDestroy(dev->work_done);
        }
    }
    (void)cudaGetLastError();
    free(dev);
}

static dk_status cuda_buffer_alloc(void *device, size_t bytes, void **buffer, dk_msg *msg)
{
    dk_cuda_device *dev = (dk_cuda_device *)device;
    dk_status st = dk_cuda_enter(dev, msg);
    if (st != DK_OK)
        return st;
    dk_cuda_buffer *b = (dk_cuda_buffer *)calloc(1, sizeof *b);
    if (!b) {
        dk_msg_set(msg, "cuda: cannot allocate a buffer record");
        return DK_ERR_OUT_OF_MEMORY;
    }
    if (bytes > 0) {
        cudaError_t e = cudaMalloc(&b->ptr, bytes);
        if (dk_cuda_failed(e)) {
            free(b);
            if (e == cudaErrorMemoryAllocation) {
                dk_msg_set(msg, "cuda: cannot allocate %zu bytes of device memory", bytes);
                return DK_ERR_OUT_OF_MEMORY;
            }
            return dk_cuda_fail(msg, e, "cudaMalloc");
        }
    }
    b->bytes = bytes;
    *buffer = b;
    return DK_OK;
}

static void cuda_buffer_free(void *device, void *buffer)
{
    dk_cuda_device *dev = (dk_cuda_device *)device;
    dk_cuda_buffer *b = (dk_cuda_buffer *)buffer;
    if (!b)
        return;
    if (b->ptr && dev && cudaSetDevice(dev->ordinal) == cudaSuccess)
        cudaFree(b->ptr);
    (void)cudaGetLastError();
    free(b);
}

/* The caller's memory: device (or managed) memory of this context's GPU, or
 * page-locked host memory mapped into its address space, which kernels then
 * read and write across the bus. */
static dk_status cuda_buffer_wrap(void *device, int kind, void *memory, size_t bytes, void **buffer, dk_msg *msg)
{
    dk_cuda_device *dev = (dk_cuda_device *)device;
    if (kind != DK_MEMORY_CUDA && kind != DK_MEMORY_HOST) {
        dk_msg_set(msg, "cuda: only CUDA device memory or page-locked host memory can be wrapped");
        return DK_ERR_NOT_IMPLEMENTED;
    }
    /* wrapping queues no work: nothing to order with the caller's stream */
    CUDA_TRY(cudaSetDevice(dev->ordinal), "cudaSetDevice");
    cudaPointerAttributes a;
    CUDA_TRY(cudaPointerGetAttributes(&a, memory), "cudaPointerGetAttributes on the memory to wrap");
    void *ptr = memory;
    if (kind == DK_MEMORY_HOST) {
        if (a.type != cudaMemoryTypeHost || !a.devicePointer) {
            dk_msg_set(msg, "cuda: the pointer %p is %s, not page-locked host memory mapped for GPU %d; allocate it "
                       "with dk_host_alloc, or copy it in with dk_buffer_write",
                       memory, a.type == cudaMemoryTypeHost ? "page-locked memory not mapped for this GPU"
                                                            : a.type == cudaMemoryTypeUnregistered ? "pageable host memory"
                                                                                                   : "device memory",
                       dev->ordinal);
            return DK_ERR_INVALID_ARGUMENT;
        }
        ptr = a.devicePointer;
    } else if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) {
        dk_msg_set(msg, "cuda: the pointer %p is not CUDA device memory (it is %s)", memory,
                   a.type == cudaMemoryTypeHost ? "pinned host memory: wrap it as DK_MEMORY_HOST"
                                                : "unregistered host memory");
        return DK_ERR_INVALID_ARGUMENT;
    } else if (a.type == cudaMemoryTypeDevice && a.device != dev->ordinal) {
        dk_msg_set(msg, "cuda: the pointer %p is memory of GPU %d, but this context runs on GPU %d", memory,
                   a.device, dev->ordinal);
        return DK_ERR_INVALID_ARGUMENT;
    }
    dk_cuda_buffer *b = (dk_cuda_buffer *)calloc(1, sizeof *b);
    if (!b) {
        dk_msg_set(msg, "cuda: cannot allocate a buffer record");
        return DK_ERR_OUT_OF_MEMORY;
    }
    b->ptr = ptr;
    b->bytes = bytes;
    b->wrapped = 1;
    b->host = kind == DK_MEMORY_HOST;
    *buffer = b;
    return DK_OK;
}

static void cuda_buffer_unwrap(void *device, void *buffer)
{
    (void)device;
    free(buffer);
}

/* Page-locked host memory: the copy engines read and write it directly,
 * where pageable memory goes through the driver's own staging; mapped for
 * every GPU, so that any context can also wrap it (DK_MEMORY_HOST). */
static dk_status cuda_host_alloc(void *device, size_t bytes, void **memory, dk_msg *msg)
{
    dk_cuda_device *dev = (dk_cuda_device *)device;
    CUDA_TRY(cudaSetDevice(dev->ordinal), "cudaSetDevice");
    if (cudaHostAlloc(memory, bytes, cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess) {
        (void)cudaGetLastError();
        *memory = NULL;
        dk_msg_set(msg, "cuda: %zu bytes of page-locked host memory are not available", bytes);
        return DK_ERR_OUT_OF_MEMORY;
    }
    return DK_OK;
}

static void cuda_host_free(void *device, void *memory)
{
    (void)device;
    cudaFreeHost(memory);
    (void)cudaGetLastError();
}

static dk_status cuda_device_native(void *device, dk_native *native, dk_msg *msg)
{
    (void)msg;
    dk_cuda_device *dev = (dk_cuda_device *)device;
    native->memory = DK_MEMORY_CUDA;
    native->device = dev->ordinal;
    native->queue = (void *)dev->stream;
    return DK_OK;
}

static dk_status cuda_device_set_queue(void *device, void *queue, unsigned flags, dk_msg *msg)
{
    dk_cuda_device *dev = (dk_cuda_device *)device;
    CUDA_TRY(cudaSetDevice(dev->ordinal), "cudaSetDevice");
    cudaStream_t s = (cudaStream_t)queue;
    if (s && s != cudaStreamLegacy && s != cudaStreamPerThread) {
        unsigned f;
        int ordinal = dev->ordinal;
        CUDA_TRY(cudaStreamGetFlags(s, &f), "reading the caller's stream (is it a cudaStream_t?)");
        CUDA_TRY(cudaStreamGetDevice(s, &ordinal), "reading the caller's stream's device");
        if (ordinal != dev->ordinal) {
            dk_msg_set(msg, "cuda: the caller's stream belongs to GPU %d, but this context runs on GPU %d",
                       ordinal, dev->ordinal);
            return DK_ERR_INVALID_ARGUMENT;
        }
    }
    if (s && !dev->caller_ready) {
        CUDA_TRY(cudaEventCreateWithFlags(&dev->caller_ready, cudaEventDisableTiming), "cudaEventCreate");
        CUDA_TRY(cudaEventCreateWithFlags(&dev->work_done, cudaEventDisableTiming), "cudaEventCreate");
    }
    dev->caller = s;
    dev->async = s && (flags & DK_QUEUE_ASYNC);
    return DK_OK;
}

static dk_status cuda_device_wait(void *device, dk_msg *msg)
{
    dk_cuda_device *dev = (dk_cuda_device *)device;
    CUDA_TRY(cudaSetDevice(dev->ordinal), "cudaSetDevice");
    CUDA_TRY(cudaStreamSynchronize(dev->stream), "waiting for the device's work");
    return DK_OK;
}

static dk_status check_size(const dk_cuda_buffer *b, size_t bytes, const char *what, dk_msg *msg)
{
    if (bytes > b->bytes) {
        dk_msg_set(msg, "cuda: %s of %zu bytes exceeds the buffer's %zu bytes", what, bytes,
                   b->bytes);
        return DK_ERR_INVALID_ARGUMENT;
    }
    return DK_OK;
}

/* Issues one copy on the device's stream and waits for it. */
static dk_status copy_sync(dk_cuda_device *dev, void *dst, const void *src, size_t bytes, const char *what,
                           dk_msg *msg)
{
    dk_status st = dk_cuda_enter(dev, msg);
    if (st != DK_OK || bytes == 0)
        return st;
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, dev->stream), what);
    CUDA_TRY(cudaStreamSynchronize(dev->stream), what);
    return DK_OK;
}

/* Under DK_QUEUE_ASYNC a write returns once queued (dk_cuda_finish):
 * pageable memory has been staged by then, page-locked memory is read by
 * the copy engine later. */
static dk_status cuda_buffer_write(void *device, void *buffer, const void *src, size_t bytes,
                                   dk_msg *msg)
{
    dk_cuda_device *dev = (dk_cuda_device *)device;
    dk_cuda_buffer *b = (dk_cuda_buffer *)buffer;
    dk_status st = check_size(b, bytes, "a write", msg);
    if (st != DK_OK || (st = dk_cuda_enter(dev, msg)) != DK_OK || bytes == 0)
        return st;
    CUDA_TRY(cudaMemcpyAsync(b->ptr, src, bytes, cudaMemcpyDefault, dev->stream), "copying to the device");
    return dk_cuda_finish(dev, "copying to the device", msg);
}

static dk_status cuda_buffer_read(void *device, const void *buffer, void *dst, size_t bytes,
                                  dk_msg *msg)
{
    const dk_cuda_buffer *b = (const dk_cuda_buffer *)buffer;
    dk_status st = check_size(b, bytes, "a read", msg);
    return st != DK_OK ? st
                       : copy_sync((dk_cuda_device *)device, dst, b->ptr, bytes, "copying from the device", msg);
}

static dk_status cuda_buffer_copy(void *device, void *dst, const void *src, size_t bytes,
                                  dk_msg *msg)
{
    dk_cuda_buffer *d = (dk_cuda_buffer *)dst;
    const dk_cuda_buffer *s = (const dk_cuda_buffer *)src;
    dk_status st = check_size(d, bytes, "a copy", msg);
    if (st == DK_OK)
        st = check_size(s, bytes, "a copy", msg);
    if (st != DK_OK || d->ptr == s->ptr || bytes == 0)
        return st;
    dk_cuda_device *dev = (dk_cuda_device *)device;
    if ((st = dk_cuda_enter(dev, msg)) != DK_OK)
        return st;
    /* its result lies in a device buffer: queued only, under DK_QUEUE_ASYNC */
    CUDA_TRY(cudaMemcpyAsync(d->ptr, s->ptr, bytes, cudaMemcpyDefault, dev->stream), "a device-to-device copy");
    return dk_cuda_finish(dev, "a device-to-device copy", msg);
}

/* One cudaMemcpy3DAsync: a C-order array is a pitched one whose pitch is
 * its row; the array's byte offset goes into the base pointer. */
static dk_status cuda_buffer_copy_box(void *device, void *dst, const void *src, const dk_box_copy *b, dk_msg *msg)
{
    dk_cuda_device *dev = (dk_cuda_device *)device;
    dk_status st = dk_cuda_enter(dev, msg);
    if (st != DK_OK)
        return st;
    size_t es = b->esize;
    cudaMemcpy3DParms p = {};
    p.srcPtr = make_cudaPitchedPtr((char *)((const dk_cuda_buffer *)src)->ptr + b->src_offset, b->src_shape[2] * es,
                                   b->src_shape[2] * es, b->src_shape[1]);
    p.dstPtr = make_cudaPitchedPtr((char *)((dk_cuda_buffer *)dst)->ptr + b->dst_offset, b->dst_shape[2] * es,
                                   b->dst_shape[2] * es, b->dst_shape[1]);
    p.srcPos = make_cudaPos(b->src_lo[2] * es, b->src_lo[1], b->src_lo[0]);
    p.dstPos = make_cudaPos(b->dst_lo[2] * es, b->dst_lo[1], b->dst_lo[0]);
    p.extent = make_cudaExtent(b->count[2] * es, b->count[1], b->count[0]);
    p.kind = cudaMemcpyDefault;
    CUDA_TRY(cudaMemcpy3DAsync(&p, dev->stream), "a box copy on the device");
    return dk_cuda_finish(dev, "a box copy on the device", msg);
}

extern "C" const dk_enkf_ops dk_cuda_enkf_ops;     /* enkf/plan.cu */
extern "C" const dk_kmeans_ops dk_cuda_kmeans_ops; /* kmeans/plan.cu */
extern "C" const dk_gbees_ops dk_cuda_gbees_ops;   /* gbees/plan.cu */
extern "C" const dk_letkf_ops dk_cuda_letkf_ops;   /* letkf/plan.cu */
#ifdef DK_CUDA_HAVE_NCCL
extern "C" const dk_comm_queue_ops dk_cuda_comm_queue_ops; /* comm.cu */
extern "C" const dk_comm_ops dk_cuda_comm_ops;     /* comm.cu */
#endif

static const dk_plugin cuda_plugin = {
    .abi_version = DK_PLUGIN_ABI_VERSION,
    .size = DK_PLUGIN_SIZE,
    .name = "cuda",
    .version = DK_VERSION_STRING,
    .priority = 30,
    .probe = cuda_probe,
    .device_open = cuda_device_open,
    .device_close = cuda_device_close,
    .buffer_alloc = cuda_buffer_alloc,
    .buffer_free = cuda_buffer_free,
    .buffer_write = cuda_buffer_write,
    .buffer_read = cuda_buffer_read,
    .buffer_copy = cuda_buffer_copy,
    .gauss = &dk_cuda_gauss_ops,
    .enkf = &dk_cuda_enkf_ops,
    .kmeans = &dk_cuda_kmeans_ops,
    .gbees = &dk_cuda_gbees_ops,
    .buffer_wrap = cuda_buffer_wrap,
    .buffer_unwrap = cuda_buffer_unwrap,
    .device_native = cuda_device_native,
    .device_set_queue = cuda_device_set_queue,
    .device_wait = cuda_device_wait,
#ifdef DK_CUDA_HAVE_NCCL
    .comm = &dk_cuda_comm_ops,
#endif
    .gauss_features = DK_GAUSS_FEATURE_RECURSIVE | DK_GAUSS_FEATURE_MODES,
    .buffer_copy_box = cuda_buffer_copy_box,
    .letkf = &dk_cuda_letkf_ops,
#ifdef DK_CUDA_HAVE_NCCL
    .comm_queue = &dk_cuda_comm_queue_ops,
#endif
    .ops_generation = DK_PLUGIN_OPS_GENERATION,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
};

extern "C" DK_PLUGIN_EXPORT const dk_plugin *DK_PLUGIN_ENTRY(void)
{
    return &cuda_plugin;
}
