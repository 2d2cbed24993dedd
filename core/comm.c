/* Device-side communication for libdakit-mpi (core/comm.h): the context's
 * dk_comm_ops behind the device lock, with dk_buffer turned into the
 * plugin's handles and the plugin's sentence into the context's error. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "internal.h"

struct dk_comm {
    dk_context *ctx;
    void *handle; /* the plugin's communicator */
    int nranks, rank;
    int refs;               /* the callers' and, where kept, the context's */
    char key[DK_COMM_KEY_LEN]; /* "" where not kept */
    uint64_t tag;
    struct dk_comm *next;   /* the context's kept list */
};

static const dk_comm_ops *ops_of(const dk_context *ctx)
{
    return ctx ? ctx->backend->plugin->comm : NULL;
}

static dk_status no_comm(dk_context *ctx, const char *what)
{
    return dk_fail(ctx, DK_ERR_NOT_IMPLEMENTED, "%s: backend '%s' offers no device-side communication", what,
                   ctx ? ctx->backend->plugin->name : "?");
}

DK_API const char *dk_comm_name(const dk_context *ctx)
{
    const dk_comm_ops *c = ops_of(ctx);
    return c ? c->name : NULL;
}

DK_API size_t dk_comm_id_size(const dk_context *ctx)
{
    const dk_comm_ops *c = ops_of(ctx);
    return c ? c->id_size : 0;
}

DK_API dk_status dk_comm_device_key(dk_context *ctx, char key[DK_COMM_KEY_LEN])
{
    const dk_comm_ops *c = ops_of(ctx);
    if (!c)
        return no_comm(ctx, "dk_comm_device_key");
    dk_msg msg = {{0}};
    key[0] = '\0';
    dk_device_enter(ctx);
    dk_status st = c->device_key(ctx->device, key, &msg);
    dk_device_leave(ctx);
    key[DK_COMM_KEY_LEN - 1] = '\0';
    return st == DK_OK ? DK_OK : dk_fail_msg(ctx, st, &msg, "naming the device for communication");
}

DK_API dk_status dk_comm_make_id(dk_context *ctx, void *id)
{
    const dk_comm_ops *c = ops_of(ctx);
    if (!c)
        return no_comm(ctx, "dk_comm_make_id");
    dk_msg msg = {{0}};
    dk_device_enter(ctx);
    dk_status st = c->make_id(ctx->device, id, &msg);
    dk_device_leave(ctx);
    return st == DK_OK ? DK_OK : dk_fail_msg(ctx, st, &msg, "making a communicator id");
}

DK_API dk_status dk_comm_create(dk_context *ctx, const void *id, int nranks, int rank, dk_comm **out)
{
    const dk_comm_ops *c = ops_of(ctx);
    *out = NULL;
    if (!c)
        return no_comm(ctx, "dk_comm_create");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "dk_comm_create: rank %d of %d", rank, nranks);
    dk_comm *comm = calloc(1, sizeof *comm);
    if (!comm)
        return dk_fail(ctx, DK_ERR_OUT_OF_MEMORY, "dk_comm_create: out of host memory");
    dk_msg msg = {{0}};
    dk_device_enter(ctx);
    dk_status st = c->comm_create(ctx->device, id, nranks, rank, &comm->handle, &msg);
    dk_device_leave(ctx);
    if (st != DK_OK) {
        free(comm);
        return dk_fail_msg(ctx, st, &msg, "creating a device communicator");
    }
    comm->ctx = ctx;
    comm->nranks = nranks;
    comm->rank = rank;
    comm->refs = 1;
    *out = comm;
    return DK_OK;
}

/* With the device lock held: one reference fewer, the last releasing it. */
static void drop_locked(dk_comm *comm)
{
    if (--comm->refs > 0)
        return;
    ops_of(comm->ctx)->comm_destroy(comm->ctx->device, comm->handle);
    free(comm);
}

/* With the device lock held: out of the kept list, if there. */
static int unkeep_locked(dk_comm *comm)
{
    for (dk_comm **at = &comm->ctx->kept; *at; at = &(*at)->next)
        if (*at == comm) {
            *at = comm->next;
            comm->next = NULL;
            comm->key[0] = '\0';
            return 1;
        }
    return 0;
}

/* With the device lock held, after a collective on comm failed in the
 * plugin (which may have aborted it): no later plan is offered comm; its
 * holders keep theirs. */
static void failed_locked(dk_comm *comm, dk_status st)
{
    if (st != DK_OK && unkeep_locked(comm))
        comm->refs--; /* the context's; a caller holds another */
}

DK_API void dk_comm_destroy(dk_comm *comm)
{
    if (!comm)
        return;
    dk_context *ctx = comm->ctx;
    dk_device_enter(ctx);
    drop_locked(comm);
    dk_device_leave(ctx);
}

DK_API void dk_comm_keep(dk_comm *comm, const char *key, uint64_t tag)
{
    if (!comm || !key)
        return;
    dk_context *ctx = comm->ctx;
    dk_device_enter(ctx);
    for (dk_comm *c = ctx->kept; c; c = c->next)
        if (c != comm && !strcmp(c->key, key)) { /* at most one is kept under a key */
            unkeep_locked(c);
            drop_locked(c);
            break;
        }
    if (!unkeep_locked(comm))
        comm->refs++;
    snprintf(comm->key, sizeof comm->key, "%s", key);
    comm->tag = tag;
    comm->next = ctx->kept;
    ctx->kept = comm;
    dk_device_leave(ctx);
}

DK_API dk_comm *dk_comm_find(dk_context *ctx, const char *key, int nranks, int rank, uint64_t *tag)
{
    *tag = 0;
    if (!ctx || !key)
        return NULL;
    dk_comm *found = NULL;
    dk_device_enter(ctx);
    for (dk_comm *c = ctx->kept; c && !found; c = c->next)
        if (!strcmp(c->key, key) && c->nranks == nranks && c->rank == rank)
            found = c;
    if (found) {
        found->refs++;
        *tag = found->tag;
    }
    dk_device_leave(ctx);
    return found;
}

DK_API void dk_comm_discard(dk_comm *comm)
{
    if (!comm)
        return;
    dk_context *ctx = comm->ctx;
    dk_device_enter(ctx);
    comm->refs -= unkeep_locked(comm); /* the context's; the caller's is left */
    drop_locked(comm);
    dk_device_leave(ctx);
}

void dk_comm_release_kept(dk_context *ctx)
{
    dk_device_enter(ctx);
    while (ctx->kept) {
        dk_comm *c = ctx->kept;
        unkeep_locked(c);
        drop_locked(c);
    }
    dk_device_leave(ctx);
}

static dk_status all_reduce(dk_comm *comm, dk_buffer *buf, size_t offset, size_t count, dk_dtype dtype, int queued)
{
    const char *what = queued ? "dk_comm_all_reduce_sum_queued" : "dk_comm_all_reduce_sum";
    dk_context *ctx = comm ? comm->ctx : NULL;
    if (!comm || !buf || buf->ctx != ctx || (dtype != DK_F32 && dtype != DK_F64))
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT,
                       "%s: a communicator, a buffer of its context and float32 or float64 are needed", what);
    size_t es = dk_dtype_size(dtype);
    if (offset > buf->bytes / es || count > buf->bytes / es - offset)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "%s: values [%zu, %zu) do not fit a buffer of %zu bytes", what,
                       offset, offset + count, buf->bytes);
    const dk_comm_queue_ops *q = ctx->backend->plugin->comm_queue;
    if (queued && !q)
        return dk_fail(ctx, DK_ERR_NOT_IMPLEMENTED, "%s: backend '%s' cannot queue its collectives", what,
                       ctx->backend->plugin->name);
    dk_msg msg = {{0}};
    dk_device_enter(ctx);
    dk_status st = queued ? q->all_reduce_sum(ctx->device, comm->handle, buf->handle, offset, count, dtype, &msg)
                          : ops_of(ctx)->all_reduce_sum(ctx->device, comm->handle, buf->handle, offset, count,
                                                        dtype, &msg);
    failed_locked(comm, st);
    dk_device_leave(ctx);
    return st == DK_OK ? DK_OK : dk_fail_msg(ctx, st, &msg, "a device all-reduce");
}

DK_API dk_status dk_comm_all_reduce_sum(dk_comm *comm, dk_buffer *buf, size_t offset, size_t count, dk_dtype dtype)
{
    return all_reduce(comm, buf, offset, count, dtype, 0);
}

DK_API dk_status dk_comm_all_reduce_sum_queued(dk_comm *comm, dk_buffer *buf, size_t offset, size_t count,
                                               dk_dtype dtype)
{
    return all_reduce(comm, buf, offset, count, dtype, 1);
}

static dk_status exchange(dk_comm *comm, const dk_comm_move *moves, int n, int queued)
{
    const char *what = queued ? "dk_comm_exchange_queued" : "dk_comm_exchange";
    dk_context *ctx = comm ? comm->ctx : NULL;
    if (!comm || n < 0 || (n && !moves))
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT, "%s: a communicator and n >= 0 moves are needed", what);
    const dk_comm_queue_ops *q = ctx->backend->plugin->comm_queue;
    if (queued && !q)
        return dk_fail(ctx, DK_ERR_NOT_IMPLEMENTED, "%s: backend '%s' cannot queue its collectives", what,
                       ctx->backend->plugin->name);
    dk_comm_transfer *t = calloc((size_t)n + 1, sizeof *t);
    if (!t)
        return dk_fail(ctx, DK_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    for (int i = 0; i < n; i++) {
        const dk_comm_move *m = &moves[i];
        if (m->peer < 0 || m->peer >= comm->nranks || !m->buffer || m->buffer->ctx != ctx ||
            m->offset > m->buffer->bytes || m->bytes > m->buffer->bytes - m->offset) {
            free(t);
            return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT,
                           "%s: transfer %d (peer %d of %d, bytes [%zu, %zu)) names no peer or does not fit a "
                           "buffer of this context",
                           what, i, m->peer, comm->nranks, m->offset, m->offset + m->bytes);
        }
        t[i] = (dk_comm_transfer){m->peer, m->recv != 0, m->buffer->handle, m->offset, m->bytes};
    }
    dk_msg msg = {{0}};
    dk_device_enter(ctx);
    dk_status st = queued ? q->exchange(ctx->device, comm->handle, t, n, &msg)
                          : ops_of(ctx)->exchange(ctx->device, comm->handle, t, n, &msg);
    failed_locked(comm, st);
    dk_device_leave(ctx);
    free(t);
    return st == DK_OK ? DK_OK : dk_fail_msg(ctx, st, &msg, "a device exchange");
}

DK_API dk_status dk_comm_exchange(dk_comm *comm, const dk_comm_move *moves, int n)
{
    return exchange(comm, moves, n, 0);
}

DK_API dk_status dk_comm_exchange_queued(dk_comm *comm, const dk_comm_move *moves, int n)
{
    return exchange(comm, moves, n, 1);
}

DK_API int dk_comm_can_queue(const dk_comm *comm)
{
    return comm && comm->ctx->backend->plugin->comm_queue != NULL;
}

DK_API dk_status dk_comm_wait(dk_comm *comm)
{
    dk_context *ctx = comm ? comm->ctx : NULL;
    if (!comm)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "dk_comm_wait: the communicator must not be NULL");
    const dk_comm_queue_ops *q = ctx->backend->plugin->comm_queue;
    if (!q)
        return DK_OK; /* nothing was queued: every blocking call had finished */
    dk_msg msg = {{0}};
    dk_device_enter(ctx);
    dk_status st = q->wait(ctx->device, comm->handle, &msg);
    failed_locked(comm, st);
    dk_device_leave(ctx);
    return st == DK_OK ? DK_OK : dk_fail_msg(ctx, st, &msg, "waiting for queued collectives");
}

/* Elements of the 3-D array `shape` reached by the box's last element, or
 * SIZE_MAX when the box leaves the array or a product overflows. */
static size_t box_reach(const size_t shape[3], const size_t lo[3], const size_t count[3])
{
    size_t total = 1, last = 0;
    for (int a = 0; a < 3; a++) {
        if (lo[a] > shape[a] || count[a] > shape[a] - lo[a] || (shape[a] && total > SIZE_MAX / shape[a]))
            return SIZE_MAX;
        last = last * shape[a] + lo[a] + count[a] - 1;
        total *= shape[a];
    }
    return last + 1;
}

DK_API dk_status dk_buffer_copy_box(dk_buffer *dst, const dk_buffer *src, const dk_box_copy *box)
{
    dk_context *ctx = dst ? dst->ctx : NULL;
    if (!dst || !src || !box || src->ctx != ctx || dst == src || box->esize == 0)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT,
                       "dk_buffer_copy_box: two distinct buffers of one context, a box and an element size are "
                       "needed");
    if (!box->count[0] || !box->count[1] || !box->count[2])
        return DK_OK;
    size_t rs = box_reach(box->src_shape, box->src_lo, box->count),
           rd = box_reach(box->dst_shape, box->dst_lo, box->count);
    if (rs == SIZE_MAX || rd == SIZE_MAX || box->src_offset > src->bytes || box->dst_offset > dst->bytes ||
        rs > (src->bytes - box->src_offset) / box->esize || rd > (dst->bytes - box->dst_offset) / box->esize)
        return dk_fail(ctx, DK_ERR_INVALID_ARGUMENT,
                       "dk_buffer_copy_box: the box of %zu x %zu x %zu elements leaves an array or a buffer "
                       "(buffers of %zu and %zu bytes)",
                       box->count[0], box->count[1], box->count[2], src->bytes, dst->bytes);
    const dk_plugin *pl = ctx->backend->plugin;
    if (!pl->buffer_copy_box)
        return dk_fail(ctx, DK_ERR_NOT_IMPLEMENTED, "backend '%s' cannot copy a box between its buffers "
                       "(no buffer_copy_box)", pl->name);
    dk_msg msg = {{0}};
    dk_device_enter(ctx);
    dk_status st = pl->buffer_copy_box(ctx->device, dst->handle, src->handle, box, &msg);
    dk_device_leave(ctx);
    return st == DK_OK ? DK_OK : dk_fail_msg(ctx, st, &msg, "copying a box between device buffers");
}

DK_API int dk_context_defer_begin(dk_context *ctx)
{
    const dk_plugin *p = ctx ? ctx->backend->plugin : NULL;
    if (!p || !p->device_set_queue || !p->device_wait || !p->device_native)
        return 0;
    dk_msg msg = {{0}};
    dk_device_enter(ctx);
    void *queue = ctx->queue;
    dk_native native = {0};
    if (!queue && p->device_native(ctx->device, &native, &msg) == DK_OK)
        queue = native.queue;
    dk_status st = queue ? p->device_set_queue(ctx->device, queue, DK_QUEUE_ASYNC, &msg) : DK_ERR_NOT_IMPLEMENTED;
    dk_device_leave(ctx);
    return st == DK_OK;
}

DK_API void dk_context_defer_end(dk_context *ctx)
{
    const dk_plugin *p = ctx->backend->plugin;
    dk_msg msg = {{0}};
    dk_device_enter(ctx);
    /* setting back what was set before cannot fail on the way taken */
    (void)p->device_set_queue(ctx->device, ctx->queue, ctx->queue_flags, &msg);
    dk_device_leave(ctx);
}
