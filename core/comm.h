/* Device-side communication, between libdakit and libdakit-mpi only: the
 * layer reaches a context's dk_comm_ops (dakit/plugin.h), and the box copy
 * its halo exchange packs and unpacks with, through these.
 * Not installed and not public API; both libraries are built together.
 * Each call takes the context's device lock and, on failure, sets the
 * context's last error (dk_last_error) like every libdakit call. */
#ifndef DAKIT_CORE_COMM_H
#define DAKIT_CORE_COMM_H

#include <stdint.h>

#include <dakit/plugin.h>

typedef struct dk_comm dk_comm;

/* A transfer of dk_comm_exchange: buffer is a dk_buffer of the
 * communicator's context. */
typedef struct dk_comm_move {
    int peer;
    int recv; /* 0: send; 1: receive */
    dk_buffer *buffer;
    size_t offset, bytes;
} dk_comm_move;

/* The context's device-side communication ("nccl"), or NULL when its
 * plugin offers none. */
const char *dk_comm_name(const dk_context *ctx);
size_t dk_comm_id_size(const dk_context *ctx);
dk_status dk_comm_device_key(dk_context *ctx, char key[DK_COMM_KEY_LEN]);
dk_status dk_comm_make_id(dk_context *ctx, void *id);
/* Collective over nranks processes. */
dk_status dk_comm_create(dk_context *ctx, const void *id, int nranks, int rank, dk_comm **comm);
/* Drops the caller's reference; the last one releases the communicator. */
void dk_comm_destroy(dk_comm *comm);

/* Making a communicator costs NCCL hundreds of milliseconds, so the
 * context keeps one for later plans over the same ranks: dk_comm_keep gives
 * the context a reference under key (the layer's name for the ranks; one
 * kept before under it is let go) with tag (the layer's name for the
 * making, the same on every rank), dk_comm_find returns a new reference to
 * the one kept under key with nranks and rank, and its tag (NULL: none),
 * and dk_comm_discard lets go of comm's kept place (after a failure) and
 * drops the caller's reference. A collective or wait that fails in the
 * plugin lets go of the kept place too. dk_context_destroy drops the
 * context's. */
void dk_comm_keep(dk_comm *comm, const char *key, uint64_t tag);
dk_comm *dk_comm_find(dk_context *ctx, const char *key, int nranks, int rank, uint64_t *tag);
void dk_comm_discard(dk_comm *comm);
/* Collective: sums count values of dtype at element offset of buf, in place. */
dk_status dk_comm_all_reduce_sum(dk_comm *comm, dk_buffer *buf, size_t offset, size_t count, dk_dtype dtype);
/* Collective between the peers named: the n transfers as one group. */
dk_status dk_comm_exchange(dk_comm *comm, const dk_comm_move *moves, int n);

/* The same two, queued on the context's device queue after the work queued
 * there and returning once queued (dk_comm_queue_ops in dakit/plugin.h);
 * DK_ERR_NOT_IMPLEMENTED where the plugin cannot queue them
 * (dk_comm_can_queue). dk_comm_wait returns when they have finished, with
 * the first failure among them. */
int dk_comm_can_queue(const dk_comm *comm);
dk_status dk_comm_all_reduce_sum_queued(dk_comm *comm, dk_buffer *buf, size_t offset, size_t count, dk_dtype dtype);
dk_status dk_comm_exchange_queued(dk_comm *comm, const dk_comm_move *moves, int n);
dk_status dk_comm_wait(dk_comm *comm);

/* For the length of one distributed call: the context's calls whose
 * results lie in device buffers return once queued (DK_QUEUE_ASYNC on the
 * caller's queue, or on the context's own where the caller set none), so
 * that the layer's phases and collectives follow each other on the device
 * without the host waiting between them; the layer waits once at the end
 * (dk_comm_wait). Returns 0 where the backend cannot take a queue (nothing
 * changed). dk_context_defer_end puts the caller's setting back. */
int dk_context_defer_begin(dk_context *ctx);
void dk_context_defer_end(dk_context *ctx);

/* Copies a box between two buffers of one context on the device
 * (dk_box_copy in dakit/plugin.h); dst and src distinct.
 * DK_ERR_NOT_IMPLEMENTED where the plugin has no buffer_copy_box. */
dk_status dk_buffer_copy_box(dk_buffer *dst, const dk_buffer *src, const dk_box_copy *box);

#endif
