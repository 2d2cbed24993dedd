/* dakit-opencl: the OpenCL backend, through whatever ICD loader and vendors
 * the machine has (PoCL on the CPU in CI).
 *
 * Devices are numbered in the order the loader lists them: every device of
 * platform 0, then every device of platform 1, and so on. */
#include <stdlib.h>
#include <string.h>

#include "opencl_plugin.h"
#include <dakit/kmeans.h>

#include "gauss_cl.h"

#define MAX_PLATFORMS 16

const char *dk_opencl_error_name(cl_int code)
{
    switch (code) {
    case CL_SUCCESS: return "CL_SUCCESS";
    case CL_DEVICE_NOT_FOUND: return "CL_DEVICE_NOT_FOUND";
    case CL_DEVICE_NOT_AVAILABLE: return "CL_DEVICE_NOT_AVAILABLE";
    case CL_COMPILER_NOT_AVAILABLE: return "CL_COMPILER_NOT_AVAILABLE";
    case CL_MEM_OBJECT_ALLOCATION_FAILURE: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case CL_OUT_OF_RESOURCES: return "CL_OUT_OF_RESOURCES";
    case CL_OUT_OF_HOST_MEMORY: return "CL_OUT_OF_HOST_MEMORY";
    case CL_BUILD_PROGRAM_FAILURE: return "CL_BUILD_PROGRAM_FAILURE";
    case CL_MISALIGNED_SUB_BUFFER_OFFSET: return "CL_MISALIGNED_SUB_BUFFER_OFFSET";
    case CL_COMPILE_PROGRAM_FAILURE: return "CL_COMPILE_PROGRAM_FAILURE";
    case CL_LINKER_NOT_AVAILABLE: return "CL_LINKER_NOT_AVAILABLE";
    case CL_LINK_PROGRAM_FAILURE: return "CL_LINK_PROGRAM_FAILURE";
    case CL_INVALID_VALUE: return "CL_INVALID_VALUE";
    case CL_INVALID_DEVICE_TYPE: return "CL_INVALID_DEVICE_TYPE";
    case CL_INVALID_PLATFORM: return "CL_INVALID_PLATFORM";
    case CL_INVALID_DEVICE: return "CL_INVALID_DEVICE";
    case CL_INVALID_CONTEXT: return "CL_INVALID_CONTEXT";
    case CL_INVALID_QUEUE_PROPERTIES: return "CL_INVALID_QUEUE_PROPERTIES";
    case CL_INVALID_COMMAND_QUEUE: return "CL_INVALID_COMMAND_QUEUE";
    case CL_INVALID_MEM_OBJECT: return "CL_INVALID_MEM_OBJECT";
    case CL_INVALID_BUILD_OPTIONS: return "CL_INVALID_BUILD_OPTIONS";
    case CL_INVALID_PROGRAM: return "CL_INVALID_PROGRAM";
    case CL_INVALID_PROGRAM_EXECUTABLE: return "CL_INVALID_PROGRAM_EXECUTABLE";
    case CL_INVALID_KERNEL_NAME: return "CL_INVALID_KERNEL_NAME";
    case CL_INVALID_KERNEL: return "CL_INVALID_KERNEL";
    case CL_INVALID_ARG_INDEX: return "CL_INVALID_ARG_INDEX";
    case CL_INVALID_ARG_VALUE: return "CL_INVALID_ARG_VALUE";
    case CL_INVALID_ARG_SIZE: return "CL_INVALID_ARG_SIZE";
    case CL_INVALID_KERNEL_ARGS: return "CL_INVALID_KERNEL_ARGS";
    case CL_INVALID_WORK_DIMENSION: return "CL_INVALID_WORK_DIMENSION";
    case CL_INVALID_WORK_GROUP_SIZE: return "CL_INVALID_WORK_GROUP_SIZE";
    case CL_INVALID_WORK_ITEM_SIZE: return "CL_INVALID_WORK_ITEM_SIZE";
    case CL_INVALID_GLOBAL_OFFSET: return "CL_INVALID_GLOBAL_OFFSET";
    case CL_INVALID_EVENT_WAIT_LIST: return "CL_INVALID_EVENT_WAIT_LIST";
    case CL_INVALID_OPERATION: return "CL_INVALID_OPERATION";
    case CL_INVALID_BUFFER_SIZE: return "CL_INVALID_BUFFER_SIZE";
    case CL_INVALID_GLOBAL_WORK_SIZE: return "CL_INVALID_GLOBAL_WORK_SIZE";
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "an unknown OpenCL error";
    }
}

/* The error's name, or its number where it has no name here. */
static const char *error_label(cl_int err, char *buf, size_t size)
{
    const char *name = dk_opencl_error_name(err);
    if (strncmp(name, "CL_", 3) == 0)
        return name;
    snprintf(buf, size, "OpenCL error %d", (int)err);
    return buf;
}

dk_status dk_opencl_fail(dk_msg *msg, const dk_opencl_device *dev, cl_int err, const char *fmt, ...)
{
    char what[256], code[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    dk_msg_set(msg, "opencl %s failed on %s (%s)", what, dev->name,
               error_label(err, code, sizeof code));
    /* CL_INVALID_BUFFER_SIZE: a buffer larger than the device allows */
    return err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES ||
                   err == CL_OUT_OF_HOST_MEMORY || err == CL_INVALID_BUFFER_SIZE
               ? DK_ERR_OUT_OF_MEMORY
               : DK_ERR_BACKEND;
}

dk_status dk_opencl_alloc(const dk_opencl_device *dev, size_t bytes, const void *src, cl_mem *out,
                          dk_msg *msg, const char *fmt, ...)
{
    cl_int err;
    int fill = src && bytes;
    /* OpenCL refuses empty buffers; a one-byte one stands in. */
    *out = clCreateBuffer(dev->context, CL_MEM_READ_WRITE | (fill ? CL_MEM_COPY_HOST_PTR : 0),
                          bytes ? bytes : 1, fill ? (void *)src : NULL, &err);
    if (err == CL_SUCCESS)
        return DK_OK;
    *out = NULL;
    char what[256], code[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    dk_msg_set(msg, "opencl %s (%zu bytes) failed on %s (%s)", what, bytes, dev->name,
               error_label(err, code, sizeof code));
    return DK_ERR_OUT_OF_MEMORY;
}

dk_status dk_opencl_enter(const dk_opencl_device *dev, dk_msg *msg)
{
    if (!dev->caller)
        return DK_OK;
    cl_event ready;
    CL_TRY(clEnqueueMarkerWithWaitList(dev->caller, 0, NULL, &ready), "ordering after the caller's queue");
    cl_int err = clEnqueueBarrierWithWaitList(dev->queue, 1, &ready, NULL);
    if (err == CL_SUCCESS)
        err = clFlush(dev->caller); /* the marker must be submitted before anything waits for it */
    clReleaseEvent(ready);
    CL_TRY(err, "ordering after the caller's queue");
    return DK_OK;
}

dk_status dk_opencl_finish(const dk_opencl_device *dev, dk_opencl_ending ending, dk_msg *msg, const char *fmt, ...)
{
    cl_int err;
    if (ending == DK_OPENCL_BLOCK || !dev->async) {
        err = clFinish(dev->queue);
    } else {
        cl_event done;
        err = clEnqueueMarkerWithWaitList(dev->queue, 0, NULL, &done);
        if (err == CL_SUCCESS) {
            err = clEnqueueBarrierWithWaitList(dev->caller, 1, &done, NULL);
            /* both submitted, so that a wait on the caller's queue ends */
            if (err == CL_SUCCESS)
                err = clFlush(dev->queue);
            if (err == CL_SUCCESS)
                err = clFlush(dev->caller);
            clReleaseEvent(done);
        }
    }
    if (err == CL_SUCCESS)
        return DK_OK;
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return dk_opencl_fail(msg, dev, err, "%s", what);
}

dk_status dk_opencl_build(const dk_opencl_device *dev, cl_uint count, const char **sources,
                          const char *options, cl_program *out, dk_msg *msg, const char *fmt, ...)
{
    char what[256], label[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(label, sizeof label, *options ? "%s (%s)" : "%s", what, options);
    cl_int err;
    cl_program program = clCreateProgramWithSource(dev->context, count, sources, NULL, &err);
    CL_TRY(err, "%s: clCreateProgramWithSource", label);
    err = clBuildProgram(program, 1, &dev->id, options, NULL, NULL);
    if (err == CL_SUCCESS) {
        *out = program;
        return DK_OK;
    }
    dk_status st = dk_opencl_fail(msg, dev, err, "%s", label);
    /* the log from the line of its first error on (compilers may lead with
     * warnings or a count), on one line */
    size_t size = 0;
    char *log = NULL;
    if (clGetProgramBuildInfo(program, dev->id, CL_PROGRAM_BUILD_LOG, 0, NULL, &size) == CL_SUCCESS)
        log = malloc(size + 1);
    if (log && clGetProgramBuildInfo(program, dev->id, CL_PROGRAM_BUILD_LOG, size, log, NULL) ==
                   CL_SUCCESS) {
        log[size] = '\0';
        char *from = strstr(log, "error");
        if (!from)
            from = log;
        while (from > log && from[-1] != '\n')
            from--;
        size_t len = strlen(from);
        while (len > 0 && (from[len - 1] == '\n' || from[len - 1] == '\r' || from[len - 1] == ' '))
            from[--len] = '\0';
        for (char *c = from; *c; c++)
            if (*c == '\n' || *c == '\r')
                *c = ' ';
        if (msg && len > 0) {
            size_t used = strlen(msg->text);
            snprintf(msg->text + used, sizeof msg->text - used, ": %s", from);
        }
    }
    free(log);
    clReleaseProgram(program);
    return st;
}

/* The device with number `index` in the loader's order, or a status with
 * the reason in msg. *count (when not NULL) receives how many devices there
 * are in all, up to DK_PLUGIN_MAX_DEVICES. */
static dk_status find_device(int index, cl_platform_id *platform, cl_device_id *device,
                             int *count, dk_msg *msg)
{
    cl_platform_id platforms[MAX_PLATFORMS];
    cl_uint nplatforms = 0;
    cl_int err = clGetPlatformIDs(MAX_PLATFORMS, platforms, &nplatforms);
    if (err != CL_SUCCESS || nplatforms == 0) {
        dk_msg_set(msg, "opencl: the ICD loader lists no OpenCL platform (%s)",
                   err != CL_SUCCESS ? dk_opencl_error_name(err) : "none installed");
        return DK_ERR_NO_BACKEND;
    }
    if (nplatforms > MAX_PLATFORMS)
        nplatforms = MAX_PLATFORMS;

    int seen = 0;
    int found = 0;
    for (cl_uint p = 0; p < nplatforms; p++) {
        cl_device_id ids[DK_PLUGIN_MAX_DEVICES];
        cl_uint nids = 0;
        /* A platform without devices (or a broken one) hides no other. */
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, DK_PLUGIN_MAX_DEVICES, ids,
                           &nids) != CL_SUCCESS)
            continue;
        if (nids > DK_PLUGIN_MAX_DEVICES)
            nids = DK_PLUGIN_MAX_DEVICES;
        for (cl_uint i = 0; i < nids && seen < DK_PLUGIN_MAX_DEVICES; i++, seen++) {
            if (seen == index) {
                *platform = platforms[p];
                *device = ids[i];
                found = 1;
            }
        }
    }
    if (count)
        *count = seen;
    if (seen == 0) {
        dk_msg_set(msg, "opencl: %u OpenCL platform(s) found, but none has a device",
                   nplatforms);
        return DK_ERR_NO_BACKEND;
    }
    if (!found) {
        dk_msg_set(msg, "opencl: there is no device %d (%d device(s) found)", index, seen);
        return DK_ERR_INVALID_ARGUMENT;
    }
    return DK_OK;
}

/* "<platform>: <device>" */
static void device_label(cl_platform_id platform, cl_device_id device, char *out,
                         size_t size)
{
    char pname[128] = "", dname[128] = "";
    clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
    clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof dname - 1, dname, NULL);
    snprintf(out, size, "%s: %s", pname, dname);
}

static int opencl_probe(dk_device_info *devices, int max, dk_msg *msg)
{
    cl_platform_id platform;
    cl_device_id device;
    int count = 0;
    dk_status st = find_device(0, &platform, &device, &count, msg);
    if (st == DK_ERR_NO_BACKEND)
        return 0;
    if (st != DK_OK)
        return -1;
    if (count > max)
        count = max;
    for (int i = 0; i < count; i++) {
        if (find_device(i, &platform, &device, NULL, msg) != DK_OK)
            return -1;
        device_label(platform, device, devices[i].name, sizeof devices[i].name);
        cl_ulong bytes = 0;
        if (clGetDeviceInfo(device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof bytes, &bytes, NULL) !=
            CL_SUCCESS)
            bytes = 0;
        devices[i].memory_bytes = (size_t)bytes;
        cl_device_type type = 0;
        clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
        devices[i].kind = (type & CL_DEVICE_TYPE_GPU)           ? DK_DEVICE_GPU
                          : (type & CL_DEVICE_TYPE_ACCELERATOR) ? DK_DEVICE_ACCELERATOR
                          : (type & CL_DEVICE_TYPE_CPU)         ? DK_DEVICE_CPU
                                                                : DK_DEVICE_UNKNOWN;
    }
    return count;
}

static int has_extension(cl_device_id device, const char *name)
{
    size_t size = 0;
    if (clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, 0, NULL, &size) != CL_SUCCESS || size == 0)
        return 0;
    char *list = malloc(size + 1);
    if (!list)
        return 0;
    int found = 0;
    if (clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, size, list, NULL) == CL_SUCCESS) {
        list[size] = '\0';
        size_t len = strlen(name);
        for (const char *at = strstr(list, name); at; at = strstr(at + 1, name)) {
            int starts = at == list || at[-1] == ' ';
            int ends = at[len] == '\0' || at[len] == ' ';
            if (starts && ends) {
                found = 1;
                break;
            }
        }
    }
    free(list);
    return found;
}

/* Host memory the driver copies from fastest: a buffer of
 * CL_MEM_ALLOC_HOST_PTR (page-locked on GPU drivers), mapped for good. */
struct dk_opencl_host_block {
    void *ptr;
    cl_mem mem;
    struct dk_opencl_host_block *next;
};

static void host_block_release(dk_opencl_device *dev, struct dk_opencl_host_block *b)
{
    clEnqueueUnmapMemObject(dev->queue, b->mem, b->ptr, 0, NULL, NULL);
    clFinish(dev->queue);
    clReleaseMemObject(b->mem);
    free(b);
}

static dk_status opencl_host_alloc(void *handle, size_t bytes, void **memory, dk_msg *msg)
{
    dk_opencl_device *dev = handle;
    struct dk_opencl_host_block *b = calloc(1, sizeof *b);
    if (!b) {
        dk_msg_set(msg, "opencl: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    cl_int err;
    b->mem = clCreateBuffer(dev->context, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, NULL, &err);
    if (err != CL_SUCCESS) {
        free(b);
        return dk_opencl_fail(msg, dev, err, "allocating %zu bytes of host memory", bytes);
    }
    b->ptr = clEnqueueMapBuffer(dev->queue, b->mem, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0, NULL, NULL,
                                &err);
    if (err != CL_SUCCESS) {
        clReleaseMemObject(b->mem);
        free(b);
        return dk_opencl_fail(msg, dev, err, "mapping %zu bytes of host memory", bytes);
    }
    b->next = dev->host_blocks;
    dev->host_blocks = b;
    *memory = b->ptr;
    return DK_OK;
}

static void opencl_host_free(void *handle, void *memory)
{
    dk_opencl_device *dev = handle;
    for (struct dk_opencl_host_block **at = &dev->host_blocks; *at; at = &(*at)->next)
        if ((*at)->ptr == memory) {
            struct dk_opencl_host_block *b = *at;
            *at = b->next;
            host_block_release(dev, b);
            return;
        }
}

static void opencl_device_close(void *handle)
{
    dk_opencl_device *dev = handle;
    if (!dev)
        return;
    while (dev->host_blocks) { /* memory the caller did not free */
        struct dk_opencl_host_block *b = dev->host_blocks;
        dev->host_blocks = b->next;
        host_block_release(dev, b);
    }
    if (dev->gauss_f32)
        clReleaseProgram(dev->gauss_f32);
    if (dev->gauss_f64)
        clReleaseProgram(dev->gauss_f64);
    if (dev->kmeans)
        clReleaseProgram(dev->kmeans);
    if (dev->enkf)
        clReleaseProgram(dev->enkf);
    for (int i = 0; i < DK_OPENCL_GBEES_PROGRAMS; i++)
        if (dev->gbees[i].program)
            clReleaseProgram(dev->gbees[i].program);
    for (int i = 0; i < DK_OPENCL_LETKF_PROGRAMS; i++)
        if (dev->letkf[i].program)
            clReleaseProgram(dev->letkf[i].program);
    if (dev->caller)
        clReleaseCommandQueue(dev->caller);
    if (dev->queue) {
        clFinish(dev->queue); /* work an asynchronous call left queued */
        clReleaseCommandQueue(dev->queue);
    }
    if (dev->context)
        clReleaseContext(dev->context);
    free(dev);
}

static dk_status opencl_device_open(int index, void **handle, dk_msg *msg)
{
    cl_platform_id platform;
    cl_device_id id;
    dk_status st = find_device(index, &platform, &id, NULL, msg);
    if (st != DK_OK)
        return st;

    dk_opencl_device *dev = calloc(1, sizeof *dev);
    if (!dev) {
        dk_msg_set(msg, "opencl: out of host memory opening device %d", index);
        return DK_ERR_OUT_OF_MEMORY;
    }
    dev->id = id;
    device_label(platform, id, dev->name, sizeof dev->name);

    cl_device_type type = 0;
    clGetDeviceInfo(id, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    dev->is_cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
    if (clGetDeviceInfo(id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof dev->compute_units,
                        &dev->compute_units, NULL) != CL_SUCCESS ||
        dev->compute_units == 0)
        dev->compute_units = 1;
    if (clGetDeviceInfo(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof dev->max_alloc,
                        &dev->max_alloc, NULL) != CL_SUCCESS)
        dev->max_alloc = 0;

    cl_int err;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)platform, 0};
    dev->context = clCreateContext(props, 1, &id, NULL, NULL, &err);
    CL_TRY_GOTO(err, fail, "clCreateContext");
    dev->queue = clCreateCommandQueue(dev->context, id, 0, &err);
    CL_TRY_GOTO(err, fail, "clCreateCommandQueue");

    /* A CPU runs a work-item on one thread: filtering several windows side
     * by side as one vector gives it SIMD and independent dependency
     * chains. A GPU gets its parallelism from the work-items themselves. */
    dev->lanes_f32 = dev->is_cpu ? 16 : 1;
    dev->lanes_f64 = dev->is_cpu ? 8 : 1;
    dev->fp64 = has_extension(id, "cl_khr_fp64");

    /* The reference divides once per pass; ask for a correctly rounded
     * float division where the device offers it (OpenCL otherwise allows
     * 2.5 ulp). */
    cl_device_fp_config fp32 = 0;
    clGetDeviceInfo(id, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp32, &fp32, NULL);
    char options[160];
    snprintf(options, sizeof options, "-DREAL=float -DLANES=%d%s", dev->lanes_f32,
             (fp32 & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT)
                 ? " -cl-fp32-correctly-rounded-divide-sqrt"
                 : "");
    const char *source = dk_opencl_gauss_source;
    st = dk_opencl_build(dev, 1, &source, options, &dev->gauss_f32, msg,
                         "gauss: building the kernels");
    if (st == DK_OK && dev->fp64) {
        snprintf(options, sizeof options, "-DREAL=double -DDK_FP64 -DLANES=%d", dev->lanes_f64);
        st = dk_opencl_build(dev, 1, &source, options, &dev->gauss_f64, msg,
                             "gauss: building the kernels");
    }
    if (st != DK_OK)
        goto fail;
    *handle = dev;
    return DK_OK;
fail:
    opencl_device_close(dev);
    return st;
}

static dk_status opencl_buffer_alloc(void *handle, size_t bytes, void **buffer, dk_msg *msg)
{
    dk_opencl_device *dev = handle;
    cl_int err;
    /* OpenCL refuses empty buffers; a one-byte one stands in. */
    cl_mem mem = clCreateBuffer(dev->context, CL_MEM_READ_WRITE, bytes ? bytes : 1, NULL, &err);
    CL_TRY(err, "buffer allocation of %zu bytes", bytes);
    *buffer = mem;
    return DK_OK;
}

/* A cl_mem of this context (OpenCL memory belongs to one context: the
 * caller makes it in the cl_context dk_context_native gives), retained for
 * as long as the wrapper lives. */
static dk_status opencl_buffer_wrap(void *handle, int kind, void *memory, size_t bytes, void **buffer, dk_msg *msg)
{
    dk_opencl_device *dev = handle;
    if (kind != DK_MEMORY_OPENCL) {
        dk_msg_set(msg, "opencl: only a cl_mem can be wrapped; copy host memory in with dk_buffer_write");
        return DK_ERR_NOT_IMPLEMENTED;
    }
    cl_mem mem = (cl_mem)memory;
    cl_context owner = NULL;
    size_t size = 0;
    CL_TRY(clGetMemObjectInfo(mem, CL_MEM_CONTEXT, sizeof owner, &owner, NULL), "reading the wrapped cl_mem's context");
    CL_TRY(clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof size, &size, NULL), "reading the wrapped cl_mem's size");
    if (owner != dev->context) {
        dk_msg_set(msg, "opencl: the cl_mem belongs to another cl_context; make it in the one dk_context_native gives");
        return DK_ERR_INVALID_ARGUMENT;
    }
    if (size < bytes) {
        dk_msg_set(msg, "opencl: the cl_mem holds %zu bytes, fewer than the %zu to wrap", size, bytes);
        return DK_ERR_INVALID_ARGUMENT;
    }
    CL_TRY(clRetainMemObject(mem), "retaining the wrapped cl_mem");
    *buffer = mem;
    return DK_OK;
}

static dk_status opencl_device_native(void *handle, dk_native *native, dk_msg *msg)
{
    (void)msg;
    dk_opencl_device *dev = handle;
    native->memory = DK_MEMORY_OPENCL;
    native->context = dev->context;
    native->queue = dev->queue;
    return DK_OK;
}

/* The caller's cl_command_queue must belong to this cl_context: events
 * order queues of one context only. */
static dk_status opencl_device_set_queue(void *handle, void *queue, unsigned flags, dk_msg *msg)
{
    dk_opencl_device *dev = handle;
    cl_command_queue q = queue;
    if (q) {
        cl_context owner = NULL;
        CL_TRY(clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof owner, &owner, NULL),
               "reading the caller's queue (is it a cl_command_queue?)");
        if (owner != dev->context) {
            dk_msg_set(msg, "opencl: the caller's cl_command_queue belongs to another cl_context; "
                            "make it in the one dk_context_native gives");
            return DK_ERR_INVALID_ARGUMENT;
        }
        CL_TRY(clRetainCommandQueue(q), "retaining the caller's queue");
    }
    if (dev->caller)
        clReleaseCommandQueue(dev->caller);
    dev->caller = q;
    dev->async = q && (flags & DK_QUEUE_ASYNC);
    return DK_OK;
}

static dk_status opencl_device_wait(void *handle, dk_msg *msg)
{
    dk_opencl_device *dev = handle;
    CL_TRY(clFinish(dev->queue), "waiting for the device's work");
    return DK_OK;
}

static void opencl_buffer_free(void *handle, void *buffer)
{
    (void)handle;
    if (buffer)
        clReleaseMemObject((cl_mem)buffer);
}

static dk_status opencl_buffer_write(void *handle, void *buffer, const void *src, size_t bytes,
                                     dk_msg *msg)
{
    dk_opencl_device *dev = handle;
    if (bytes == 0)
        return DK_OK;
    dk_status st = dk_opencl_enter(dev, msg);
    if (st != DK_OK)
        return st;
    CL_TRY(clEnqueueWriteBuffer(dev->queue, (cl_mem)buffer, CL_TRUE, 0, bytes, src, 0, NULL, NULL),
           "buffer write of %zu bytes to the device", bytes);
    return DK_OK;
}

static dk_status opencl_buffer_read(void *handle, const void *buffer, void *dst, size_t bytes,
                                    dk_msg *msg)
{
    dk_opencl_device *dev = handle;
    if (bytes == 0)
        return DK_OK;
    dk_status st = dk_opencl_enter(dev, msg);
    if (st != DK_OK)
        return st;
    CL_TRY(clEnqueueReadBuffer(dev->queue, (cl_mem)buffer, CL_TRUE, 0, bytes, dst, 0, NULL, NULL),
           "buffer read of %zu bytes from the device", bytes);
    return DK_OK;
}

static dk_status opencl_buffer_copy(void *handle, void *dst, const void *src, size_t bytes,
                                    dk_msg *msg)
{
    dk_opencl_device *dev = handle;
    if (bytes == 0 || dst == src)
        return DK_OK;
    dk_status st = dk_opencl_enter(dev, msg);
    if (st != DK_OK)
        return st;
    CL_TRY(clEnqueueCopyBuffer(dev->queue, (cl_mem)src, (cl_mem)dst, 0, 0, bytes, 0, NULL, NULL),
           "buffer copy of %zu bytes on the device", bytes);
    return dk_opencl_finish(dev, DK_OPENCL_BLOCK, msg, "buffer copy of %zu bytes on the device", bytes);
}

/* clEnqueueCopyBufferRect takes no base offset: the array's offset goes into
 * the x origin, which the byte address formula adds like any other. */
static dk_status opencl_buffer_copy_box(void *handle, void *dst, const void *src, const dk_box_copy *b, dk_msg *msg)
{
    dk_opencl_device *dev = handle;
    size_t es = b->esize;
    size_t so[3] = {b->src_offset + b->src_lo[2] * es, b->src_lo[1], b->src_lo[0]};
    size_t dso[3] = {b->dst_offset + b->dst_lo[2] * es, b->dst_lo[1], b->dst_lo[0]};
    size_t region[3] = {b->count[2] * es, b->count[1], b->count[0]};
    size_t sp = b->src_shape[2] * es, dp = b->dst_shape[2] * es;
    dk_status st = dk_opencl_enter(dev, msg);
    if (st != DK_OK)
        return st;
    CL_TRY(clEnqueueCopyBufferRect(dev->queue, (cl_mem)src, (cl_mem)dst, so, dso, region, sp, sp * b->src_shape[1], dp,
                                   dp * b->dst_shape[1], 0, NULL, NULL),
           "a box copy of %zu x %zu x %zu elements on the device", b->count[0], b->count[1], b->count[2]);
    return dk_opencl_finish(dev, DK_OPENCL_BLOCK, msg, "a box copy on the device");
}

static const dk_plugin opencl_plugin = {
    .abi_version = DK_PLUGIN_ABI_VERSION,
    .size = DK_PLUGIN_SIZE,
    .name = "opencl",
    .version = DK_VERSION_STRING,
    .priority = 5, /* below cpu: an OpenCL GPU still wins by its device kind, PoCL on a CPU does not */
    .probe = opencl_probe,
    .device_open = opencl_device_open,
    .device_close = opencl_device_close,
    .buffer_alloc = opencl_buffer_alloc,
    .buffer_free = opencl_buffer_free,
    .buffer_write = opencl_buffer_write,
    .buffer_read = opencl_buffer_read,
    .buffer_copy = opencl_buffer_copy,
    .buffer_wrap = opencl_buffer_wrap,
    .buffer_unwrap = opencl_buffer_free, /* releases the retain of buffer_wrap */
    .device_native = opencl_device_native,
    .device_set_queue = opencl_device_set_queue,
    .device_wait = opencl_device_wait,
    .gauss = &dk_opencl_gauss_ops,
    .gauss_features = DK_GAUSS_FEATURE_RECURSIVE | DK_GAUSS_FEATURE_MODES,
    .buffer_copy_box = opencl_buffer_copy_box,
    .kmeans = &dk_opencl_kmeans_ops,
    .ops_generation = DK_PLUGIN_OPS_GENERATION,
    .gbees = &dk_opencl_gbees_ops,
    .letkf = &dk_opencl_letkf_ops,
#ifdef DK_OPENCL_ENKF
    .enkf = &dk_opencl_enkf_ops,
#endif
    .host_alloc = opencl_host_alloc,
    .host_free = opencl_host_free,
};

DK_PLUGIN_EXPORT const dk_plugin *DK_PLUGIN_ENTRY(void)
{
    return &opencl_plugin;
}
