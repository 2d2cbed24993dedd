/* dakit: GPU-accelerated kernels for data assimilation and uncertainty
 * estimation. Public API of the core library (libdakit).
 *
 * Every call returns a dk_status; on failure dk_last_error() gives a
 * sentence that says what was wrong. Nothing in the library prints or exits
 * on bad input. */
#ifndef DAKIT_DAKIT_H
#define DAKIT_DAKIT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DK_VERSION_MAJOR 0
#define DK_VERSION_MINOR 1
#define DK_VERSION_PATCH 0
#define DK_VERSION_STRING "0.1.0"

typedef enum dk_status {
    DK_OK = 0,
    DK_ERR_INVALID_ARGUMENT, /* a parameter or the data is not acceptable */
    DK_ERR_NO_BACKEND,       /* the requested backend is absent or was refused */
    DK_ERR_NOT_IMPLEMENTED,  /* the backend lacks this algorithm or variant */
    DK_ERR_BACKEND,          /* the backend or its device failed */
    DK_ERR_OUT_OF_MEMORY,
    DK_ERR_IO,               /* a file could not be opened, read or written */
    DK_ERR_FORMAT            /* a file is malformed or of an unsupported kind */
} dk_status;

typedef enum dk_dtype { DK_F32 = 0, DK_F64 = 1 } dk_dtype;

typedef struct dk_context dk_context; /* one backend, one device */
typedef struct dk_buffer dk_buffer;   /* memory on the context's device */
typedef struct dk_plan dk_plan;       /* validated parameters + precomputation */

const char *dk_status_string(dk_status status);
size_t dk_dtype_size(dk_dtype dtype);
const char *dk_dtype_name(dk_dtype dtype);

/* The sentence describing the calling thread's last failure on ctx ("no
 * error" when there was none). With ctx == NULL: the last failure of any
 * dakit call on the calling thread (which is how the reason a
 * dk_context_create failed is read). Never NULL.
 *
 * Threads: a context may be shared by threads; their calls into its
 * backend take turns, and each thread reads its own errors. A plan or a
 * buffer is used by one thread at a time. */
const char *dk_last_error(const dk_context *ctx);

/* Opens a backend. backend: NULL or "auto" picks by the DAKIT_BACKEND
 * environment variable, else backends whose device is a GPU or accelerator
 * first, then by plugin priority; a name ("cuda") or a comma
 * list ("cuda,opencl,cpu", an order of preference) picks explicitly.
 * DAKIT_DEVICE=N picks the device index (default 0). On failure *ctx is
 * NULL and dk_last_error(NULL) says why, naming the backends available. */
dk_status dk_context_create(const char *backend, dk_context **ctx);
void dk_context_destroy(dk_context *ctx);
const char *dk_context_backend(const dk_context *ctx);
const char *dk_context_device(const dk_context *ctx);

dk_status dk_buffer_create(dk_context *ctx, size_t bytes, dk_buffer **buf);
void dk_buffer_destroy(dk_buffer *buf);
size_t dk_buffer_size(const dk_buffer *buf);
dk_status dk_buffer_write(dk_buffer *buf, const void *src, size_t bytes);
dk_status dk_buffer_read(const dk_buffer *buf, void *dst, size_t bytes);
/* Device-to-device copy of the first `bytes` bytes. */
dk_status dk_buffer_copy(dk_buffer *dst, const dk_buffer *src, size_t bytes);

/* Host memory for data that moves often between the host and ctx's
 * device: page-locked where the backend can (cuda: cudaMallocHost, whose
 * copies run at the bus's speed where pageable memory is staged by the
 * driver at a fraction of it; opencl: a mapped buffer of
 * CL_MEM_ALLOC_HOST_PTR), ordinary memory aligned to 64 bytes elsewhere.
 * Any dakit call takes it as host memory. Page-locked memory is scarce:
 * allocate what moves, not everything. Free it with dk_host_free on the
 * same context, before the context is destroyed. */
dk_status dk_host_alloc(dk_context *ctx, size_t bytes, void **memory);
void dk_host_free(dk_context *ctx, void *memory);

/* ---- the caller's own memory ---- */

typedef enum dk_memory_kind {
    DK_MEMORY_HOST = 0,   /* a host pointer (cpu backend) */
    DK_MEMORY_CUDA = 1,   /* a CUDA device pointer on the context's GPU (cuda backend) */
    DK_MEMORY_OPENCL = 2  /* a cl_mem of the context's cl_context (opencl backend) */
} dk_memory_kind;

/* Wraps `bytes` bytes of memory the caller owns as a buffer of ctx, without
 * copying: kernels read and write the caller's memory. dk_buffer_destroy
 * releases the wrapper only, never the memory, which must outlive it. A
 * backend that cannot use memory of that kind refuses with a sentence
 * (DK_ERR_NOT_IMPLEMENTED). cuda also takes DK_MEMORY_HOST memory from
 * dk_host_alloc: its kernels then reach it across the bus, which suits a
 * result written once (k-means labels land there with no copy back), not
 * data read many times. */
dk_status dk_buffer_wrap(dk_context *ctx, dk_memory_kind kind, void *memory, size_t bytes, dk_buffer **buf);

/* The backend's own handles, so that a caller can allocate memory that
 * dk_buffer_wrap accepts, or order its work with dakit's: cuda: `device` is
 * the CUDA ordinal and `queue` the cudaStream_t dakit's kernels run on;
 * opencl: `context` the cl_context and `queue` the cl_command_queue; a
 * host backend leaves them NULL. Every dakit call has finished its work on
 * `queue` when it returns, unless dk_context_set_queue asked otherwise. */
typedef struct dk_native {
    dk_memory_kind memory; /* the kind of memory the backend's buffers are */
    int device;
    void *context;
    void *queue;
} dk_native;
dk_status dk_context_native(dk_context *ctx, dk_native *native);

/* ---- the caller's own queue ---- */

/* Orders the context's work with the caller's own CUDA stream (cudaStream_t,
 * also cudaStreamLegacy or cudaStreamPerThread) or OpenCL command queue
 * (cl_command_queue of the context's cl_context, from dk_context_native):
 * every later call waits on the device for the work queued there before it,
 * without the host waiting. With DK_QUEUE_ASYNC, the calls whose results all
 * lie in device buffers (dk_gauss_execute, dk_enkf_cov, dk_buffer_copy,
 * dk_buffer_write and dk_kmeans_texture_planes on cuda) return once their
 * work is queued, and work queued on `queue` after them runs after them
 * (the host memory of such a write must stay unchanged until then);
 * dk_kmeans_texture_features on cuda returns once its statistics are in;
 * dk_context_wait waits on the host. Every other call, and every _host
 * call, still returns when its work is done. queue NULL: back to the
 * default (nothing is ordered with the caller's queue; every call blocks).
 * A backend that cannot take a queue refuses with a sentence
 * (DK_ERR_NOT_IMPLEMENTED); a host backend has nothing to order and accepts
 * only NULL. */
#define DK_QUEUE_ASYNC 1u
dk_status dk_context_set_queue(dk_context *ctx, void *queue, unsigned flags);
/* Returns when every call made on ctx has finished its device work. */
dk_status dk_context_wait(dk_context *ctx);

/* Errors of a plan's calls are read with dk_last_error(ctx) of its context. */
void dk_plan_destroy(dk_plan *plan);

/* ---- backends: what was found, what was refused and why ---- */

#define DK_MAX_DEVICES 16

typedef enum dk_device_kind {
    DK_DEVICE_UNKNOWN = 0,
    DK_DEVICE_CPU,
    DK_DEVICE_GPU,
    DK_DEVICE_ACCELERATOR
} dk_device_kind;

typedef struct dk_device_info {
    char name[128];
    size_t memory_bytes; /* 0 when unknown */
    dk_device_kind kind; /* auto selection prefers GPUs and accelerators */
} dk_device_info;

typedef struct dk_backend_info {
    char name[64];       /* "" when refused before its descriptor could be read */
    char version[32];
    char path[1024];
    int priority;
    int usable;          /* 1: accepted and at least one device found */
    char reason[512];    /* why it was refused; "" when usable */
    int device_count;
    dk_device_info devices[DK_MAX_DEVICES];
    char algorithms[128]; /* comma list of implemented algorithms, e.g. "gauss" */
    /* Per algorithm, in the order gauss, enkf, kmeans, gbees, letkf: the comma
     * list of the variants it offers, the default first ("" where not implemented). */
    char variants[5][160];
    /* Device-side communication the plugin offers to libdakit-mpi ("nccl"),
     * "" where none: the distributed layer then stages through the host. */
    char comm[64];
} dk_backend_info;

/* Discovers plugins on first use (the build tree's plugin folders, the
 * install folder and every folder in DAKIT_PLUGIN_PATH) and probes them. */
int dk_backend_count(void);
dk_status dk_backend_get(int index, dk_backend_info *info);

#ifdef __cplusplus
}
#endif

#include <dakit/gauss.h>
#include <dakit/enkf.h>
#include <dakit/kmeans.h>
#include <dakit/gbees.h>
#include <dakit/letkf.h>
#include <dakit/radolan.h>

#endif
