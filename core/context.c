#include <stdlib.h>
#include <string.h>

#include "internal.h"

DK_API void dk_context_destroy(dk_context *ctx)
{
    if (!ctx)
        return;
    dk_comm_release_kept(ctx);
    ctx->backend->plugin->device_close(ctx->device);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
}

DK_API const char *dk_context_backend(const dk_context *ctx)
{
    return ctx ? ctx->backend->plugin->name : "";
}

DK_API const char *dk_context_device(const dk_context *ctx)
{
    return ctx ? ctx->backend->devices[ctx->device_index].name : "";
}

DK_API dk_status dk_buffer_create(dk_context *ctx, size_t bytes, dk_buffer **buf)
{
    if (!ctx || !buf)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "dk_buffer_create: ctx and buf must not be NULL");
    *buf = NULL;
    if (bytes == 0)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "dk_buffer_create: a buffer of 0 bytes");
    dk_buffer *b = calloc(1, sizeof *b);
    if (!b)
        return dk_fail(ctx, DK_ERR_OUT_OF_MEMORY, "dk_buffer_create: out of host memory");
    dk_msg msg = {{0}};
    dk_device_enter(ctx);
    dk_status st = ctx->backend->plugin->buffer_alloc(ctx->device, bytes, &b->handle, &msg);
    dk_device_leave(ctx);
    if (st != DK_OK) {
        free(b);
        return dk_fail_msg(ctx, st, &msg, "allocating a device buffer");
    }
    b->ctx = ctx;
    b->bytes = bytes;
    *buf = b;
    return DK_OK;
}

static const char *memory_kind_name(dk_memory_kind kind)
{
    switch (kind) {
    case DK_MEMORY_HOST: return "host memory";
    case DK_MEMORY_CUDA: return "CUDA device memory";
    case DK_MEMORY_OPENCL: return "an OpenCL cl_mem";
    }
    return "memory of an unknown kind";
}

DK_API dk_status dk_buffer_wrap(dk_context *ctx, dk_memory_kind kind, void *memory, size_t bytes, dk_buffer **buf)
{
    if (!ctx || !buf)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "dk_buffer_wrap: ctx and buf must not be NULL");
    *buf = NULL;
    if (!memory || bytes == 0)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "dk_buffer_wrap: the memory must not be NULL or empty");
    if (kind != DK_MEMORY_HOST && kind != DK_MEMORY_CUDA && kind != DK_MEMORY_OPENCL)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "dk_buffer_wrap: memory kind %d is none of host, cuda, opencl",
                       (int)kind);
    const dk_plugin *p = ctx->backend->plugin;
    if (!p->buffer_wrap || !p->buffer_unwrap)
        return dk_fail(ctx, DK_ERR_NOT_IMPLEMENTED, "dk_buffer_wrap: backend '%s' cannot use %s the caller owns; "
                       "copy it in with dk_buffer_write instead", p->name, memory_kind_name(kind));
    dk_buffer *b = calloc(1, sizeof *b);
    if (!b)
        return dk_fail(ctx, DK_ERR_OUT_OF_MEMORY, "dk_buffer_wrap: out of host memory");
    dk_msg msg = {{0}};
    dk_device_enter(ctx);
    dk_status st = p->buffer_wrap(ctx->device, (int)kind, memory, bytes, &b->handle, &msg);
    dk_device_leave(ctx);
    if (st != DK_OK) {
        free(b);
        return dk_fail_msg(ctx, st, &msg, "wrapping the caller's memory");
    }
    b->ctx = ctx;
    b->bytes = bytes;
    b->wrapped = 1;
    *buf = b;
    return DK_OK;
}

DK_API dk_status dk_host_alloc(dk_context *ctx, size_t bytes, void **memory)
{
    if (!ctx || !memory)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "dk_host_alloc: ctx and memory must not be NULL");
    *memory = NULL;
    if (bytes == 0)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "dk_host_alloc: 0 bytes asked");
    const dk_plugin *p = ctx->backend->plugin;
    if (!p->host_alloc || !p->host_free) {
        void *m = aligned_alloc(64, (bytes + 63) / 64 * 64);
        if (!m)
            return dk_fail(ctx, DK_ERR_OUT_OF_MEMORY, "dk_host_alloc: %zu bytes of host memory are not available",
                           bytes);
        *memory = m;
        return DK_OK;
    }
    dk_msg msg = {{0}};
    dk_device_enter(ctx);
    dk_status st = p->host_alloc(ctx->device, bytes, memory, &msg);
    dk_device_leave(ctx);
    if (st != DK_OK)
        *memory = NULL;
    return st == DK_OK ? DK_OK : dk_fail_msg(ctx, st, &msg, "allocating page-locked host memory");
}

DK_API void dk_host_free(dk_context *ctx, void *memory)
{
    if (!ctx || !memory)
        return;
    const dk_plugin *p = ctx->backend->plugin;
    if (!p->host_alloc || !p->host_free) {
        free(memory);
        return;
    }
    dk_device_enter(ctx);
    p->host_free(ctx->device, memory);
    dk_device_leave(ctx);
}

DK_API dk_status dk_context_native(dk_context *ctx, dk_native *native)
{
    if (!ctx || !native)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "dk_context_native: ctx and native must not be NULL");
    memset(native, 0, sizeof *native);
    const dk_plugin *p = ctx->backend->plugin;
    if (!p->device_native)
        return dk_fail(ctx, DK_ERR_NOT_IMPLEMENTED, "dk_context_native: backend '%s' does not give its handles",
                       p->name);
    dk_msg msg = {{0}};
    dk_device_enter(ctx);
    dk_status st = p->device_native(ctx->device, native, &msg);
    dk_device_leave(ctx);
    return st == DK_OK ? DK_OK : dk_fail_msg(ctx, st, &msg, "reading the backend's handles");
}

DK_API dk_status dk_context_set_queue(dk_context *ctx, void *queue, unsigned flags)
{
    if (!ctx)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "dk_context_set_queue: ctx must not be NULL");
    if (flags & ~DK_QUEUE_ASYNC)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT,
                       "dk_context_set_queue: flags is %#x; the only flag is DK_QUEUE_ASYNC (1)", flags);
    const dk_plugin *p = ctx->backend->plugin;
    if (!p->device_set_queue || !p->device_wait) {
        if (!queue)
            return DK_OK;
        return dk_fail(ctx, DK_ERR_NOT_IMPLEMENTED,
                       "dk_context_set_queue: backend '%s' cannot order its work with a caller's queue; "
                       "its calls return when their work is done", p->name);
    }
    dk_msg msg = {{0}};
    dk_device_enter(ctx);
    dk_status st = p->device_set_queue(ctx->device, queue, queue ? flags : 0, &msg);
    if (st == DK_OK)
        ctx->queue = queue, ctx->queue_flags = queue ? flags : 0;
    dk_device_leave(ctx);
    return st == DK_OK ? DK_OK : dk_fail_msg(ctx, st, &msg, "taking the caller's queue");
}

DK_API dk_status dk_context_wait(dk_context *ctx)
{
    if (!ctx)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "dk_context_wait: ctx must not be NULL");
    const dk_plugin *p = ctx->backend->plugin;
    if (!p->device_wait)
        return DK_OK;
    dk_msg msg = {{0}};
    dk_device_enter(ctx);
    dk_status st = p->device_wait(ctx->device, &msg);
    dk_device_leave(ctx);
    return st == DK_OK ? DK_OK : dk_fail_msg(ctx, st, &msg, "waiting for the device");
}

DK_API void dk_buffer_destroy(dk_buffer *buf)
{
    if (!buf)
        return;
    dk_device_enter(buf->ctx);
    if (buf->wrapped)
        buf->ctx->backend->plugin->buffer_unwrap(buf->ctx->device, buf->handle);
    else
        buf->ctx->backend->plugin->buffer_free(buf->ctx->device, buf->handle);
    dk_device_leave(buf->ctx);
    free(buf);
}

DK_API size_t dk_buffer_size(const dk_buffer *buf)
{
    return buf ? buf->bytes : 0;
}

DK_API dk_status dk_buffer_write(dk_buffer *buf, const void *src, size_t bytes)
{
    if (!buf || !src)
        return dk_fail(buf ? buf->ctx : NULL, DK_ERR_INVALID_ARGUMENT,
                       "dk_buffer_write: buffer and source must not be NULL");
    if (bytes > buf->bytes)
        return dk_fail(buf->ctx, DK_ERR_INVALID_ARGUMENT,
                       "dk_buffer_write: %zu bytes do not fit a buffer of %zu", bytes, buf->bytes);
    dk_msg msg = {{0}};
    dk_device_enter(buf->ctx);
    dk_status st = buf->ctx->backend->plugin->buffer_write(buf->ctx->device, buf->handle, src,
                                                           bytes, &msg);
    dk_device_leave(buf->ctx);
    return st == DK_OK ? DK_OK : dk_fail_msg(buf->ctx, st, &msg, "writing a device buffer");
}

DK_API dk_status dk_buffer_read(const dk_buffer *buf, void *dst, size_t bytes)
{
    if (!buf || !dst)
        return dk_fail(buf ? buf->ctx : NULL, DK_ERR_INVALID_ARGUMENT,
                       "dk_buffer_read: buffer and destination must not be NULL");
    if (bytes > buf->bytes)
        return dk_fail(buf->ctx, DK_ERR_INVALID_ARGUMENT,
                       "dk_buffer_read: %zu bytes asked of a buffer of %zu", bytes, buf->bytes);
    dk_msg msg = {{0}};
    dk_device_enter(buf->ctx);
    dk_status st = buf->ctx->backend->plugin->buffer_read(buf->ctx->device, buf->handle, dst,
                                                          bytes, &msg);
    dk_device_leave(buf->ctx);
    return st == DK_OK ? DK_OK : dk_fail_msg(buf->ctx, st, &msg, "reading a device buffer");
}

DK_API dk_status dk_buffer_copy(dk_buffer *dst, const dk_buffer *src, size_t bytes)
{
    if (!dst || !src)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "dk_buffer_copy: buffers must not be NULL");
    if (dst->ctx != src->ctx)
        return dk_fail(dst->ctx, DK_ERR_INVALID_ARGUMENT,
                       "dk_buffer_copy: the buffers belong to different contexts");
    if (bytes > dst->bytes || bytes > src->bytes)
        return dk_fail(dst->ctx, DK_ERR_INVALID_ARGUMENT,
                       "dk_buffer_copy: %zu bytes exceed a buffer (%zu and %zu bytes)", bytes,
                       src->bytes, dst->bytes);
    dk_msg msg = {{0}};
    dk_device_enter(dst->ctx);
    dk_status st = dst->ctx->backend->plugin->buffer_copy(dst->ctx->device, dst->handle,
                                                          src->handle, bytes, &msg);
    dk_device_leave(dst->ctx);
    return st == DK_OK ? DK_OK : dk_fail_msg(dst->ctx, st, &msg, "copying a device buffer");
}

DK_API void dk_plan_destroy(dk_plan *plan)
{
    if (!plan)
        return;
    if (plan->impl && plan->impl_destroy) {
        dk_device_enter(plan->ctx);
        plan->impl_destroy(plan->impl);
        dk_device_leave(plan->ctx);
    }
    dk_buffer_destroy(plan->staging);
    for (size_t i = 0; i < sizeof plan->kept / sizeof *plan->kept; i++)
        dk_buffer_destroy(plan->kept[i]);
    free(plan->state);
    free(plan);
}
