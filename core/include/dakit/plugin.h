/* dakit plugin ABI: what a backend exports and what the core calls.
 *
 * A backend is a shared object that exports exactly one symbol,
 * DK_PLUGIN_ENTRY, a function returning a const dk_plugin. This header holds
 * the descriptor, the device and buffer entries, and the helpers every
 * plugin shares (messages, tuning knobs). Each algorithm's ops table lives
 * in that algorithm's header (dakit/<algo>.h, the section "plugin ops"),
 * beside its public API; the pieces a device implementation reuses (the
 * GBEES models and scheme, the host-side solves) are the plugin kit,
 * dakit/kit/. docs/plugins.md walks through all of it.
 *
 * Growth: dk_plugin and the ops tables only grow by appending members. A
 * plugin states the size of the descriptor it was built with (`size`); the
 * core reads members past that size as absent (NULL), so a newer core loads
 * an older plugin. DK_PLUGIN_ABI_VERSION moves only when something existing
 * changes (a member's type, meaning or place, an entry's contract); the core
 * refuses a plugin of another ABI version.
 *
 * Threading: the core calls a device's entries from one thread at a time.
 * Messages: an entry that fails writes one sentence into msg (dk_msg_set)
 * and returns a status other than DK_OK; it never prints or exits.
 * Lifetime: the `setup` handed to any plan_create, and everything it points
 * to, stays valid and unchanged until that plan's plan_destroy returns; a
 * plugin may keep the pointer instead of copying. */
#ifndef DAKIT_PLUGIN_H
#define DAKIT_PLUGIN_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <dakit/dakit.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DK_PLUGIN_ABI_VERSION 3u
#define DK_PLUGIN_ENTRY dakit_plugin_entry
#define DK_PLUGIN_ENTRY_NAME "dakit_plugin_entry"
#define DK_PLUGIN_MAX_DEVICES DK_MAX_DEVICES

#if defined(__GNUC__)
#define DK_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define DK_PLUGIN_EXPORT
#endif

/* One sentence from a plugin entry to the core, which hands it to the user. */
typedef struct dk_msg {
    char text[512];
} dk_msg;

static inline void dk_msg_set(dk_msg *msg, const char *fmt, ...)
{
    va_list ap;
    if (!msg)
        return;
    va_start(ap, fmt);
    vsnprintf(msg->text, sizeof msg->text, fmt, ap);
    va_end(ap);
}

/* ---- tuning knobs ----
 * A knob forces one choice a plugin otherwise makes for itself (a tile size,
 * a chunk size), for A/B benchmarks; it never changes the result beyond the
 * conformance tolerances. Every knob is a DAKIT_* environment variable,
 * read through these two helpers and nowhere else, and listed in
 * docs/tuning.md (a test checks the list). A choice a user may want is a
 * variant, not a knob. */

/* The knob's value, or NULL when it is unset or empty. */
static inline const char *dk_tuning_string(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* The knob as an integer in [lo, hi]; fallback when unset, not a number or
 * out of range (a knob never makes a plan fail). */
static inline long dk_tuning_long(const char *name, long fallback, long lo, long hi)
{
    const char *v = dk_tuning_string(name);
    if (!v)
        return fallback;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    return (errno || *end || x < lo || x > hi) ? fallback : x;
}

/* ---- device-side communication (optional) ----
 * A plugin whose devices exchange data directly (the cuda plugin through
 * NCCL) offers these to libdakit-mpi, which otherwise stages everything
 * through host memory and MPI. The layer makes the unique id on rank 0,
 * broadcasts it over MPI and has every rank call comm_create: the plugin's
 * library does its own bootstrap, the core carries no transport of its own.
 * docs/plugins.md, "Device-side communication", has the whole contract. */

#define DK_COMM_ID_MAX 256 /* largest unique id a plugin may ask for */
#define DK_COMM_KEY_LEN 64 /* a device key, NUL-terminated */

/* One side of a point-to-point transfer of a grouped exchange. */
typedef struct dk_comm_transfer {
    int peer;      /* rank in the communicator (may be the caller's own) */
    int recv;      /* 0: send to peer; 1: receive from peer */
    void *buffer;  /* a buffer handle of the communicator's device */
    size_t offset; /* bytes into the buffer */
    size_t bytes;
} dk_comm_transfer;

typedef struct dk_comm_ops {
    /* Required: the library's short name ("nccl"), shown by `dakit info`. */
    const char *name;
    /* Required: bytes of the unique id (<= DK_COMM_ID_MAX). */
    size_t id_size;
    /* Required: a string naming the physical device, the same in every
     * process that uses it (a GPU's UUID), so that the layer sees two ranks
     * on one device before asking the library. Fails (with the reason) when
     * this device cannot communicate now, e.g. the library is not installed;
     * the layer then stages through the host. */
    dk_status (*device_key)(void *device, char key[DK_COMM_KEY_LEN], dk_msg *msg);
    /* Required: fills id (id_size bytes); called on rank 0 only. */
    dk_status (*make_id)(void *device, void *id, dk_msg *msg);
    /* Required. Collective over nranks processes, each with its own device:
     * a communicator from rank 0's id. Must not wait forever for a rank that
     * never comes (a time limit); on failure nothing is left behind. */
    dk_status (*comm_create)(void *device, const void *id, int nranks, int rank, void **comm, dk_msg *msg);
    /* Required: releases comm (local; every rank calls it). */
    void (*comm_destroy)(void *device, void *comm);
    /* Required. Collective: sums count values of dtype at element `offset`
     * of buffer over all ranks, in place; finished when it returns. Every
     * rank gets the same bits. */
    dk_status (*all_reduce_sum)(void *device, void *comm, void *buffer, size_t offset, size_t count,
                                dk_dtype dtype, dk_msg *msg);
    /* Required. The n transfers as one group (no ordering between them, so
     * a halo exchange cannot deadlock); finished when it returns. A send
     * and a receive between two ranks must have the same bytes. */
    dk_status (*exchange)(void *device, void *comm, const dk_comm_transfer *t, int n, dk_msg *msg);
} dk_comm_ops;

/* The same collectives queued on the device's own queue (the stream the
 * plugin's kernels run on), for a distributed execute that puts a
 * collective between two plugin phases without the host waiting
 * (docs/plugins.md, "Queued collectives"). Each runs after the work queued
 * on the device before it and before the work queued after it, and returns
 * once queued; the buffer must not be freed or written by the host until
 * `wait` returned. A failure found later is reported by `wait` (and the
 * communicator is then aborted, so no peer waits for ever). */
typedef struct dk_comm_queue_ops {
    /* Required: all_reduce_sum, queued. */
    dk_status (*all_reduce_sum)(void *device, void *comm, void *buffer, size_t offset, size_t count,
                                dk_dtype dtype, dk_msg *msg);
    /* Required: exchange, queued. */
    dk_status (*exchange)(void *device, void *comm, const dk_comm_transfer *t, int n, dk_msg *msg);
    /* Required: returns when every collective queued on comm, and the
     * device work queued before it, has finished; under the same time limit
     * as the blocking calls (past it the communicator is aborted). */
    dk_status (*wait)(void *device, void *comm, dk_msg *msg);
} dk_comm_queue_ops;

/* A box of a 3-D array in C order copied between two buffers of a device
 * (buffer_copy_box): `count` elements along each axis ([2] the fastest),
 * from the array of src_shape that starts src_offset bytes into the source
 * at element src_lo, to the array of dst_shape at dst_offset, element
 * dst_lo. A 1-D or 2-D array has leading axes of extent 1. The box lies
 * inside both arrays, and both arrays inside their buffers. */
typedef struct dk_box_copy {
    size_t esize;
    size_t count[3];
    size_t src_offset, src_shape[3], src_lo[3];
    size_t dst_offset, dst_shape[3], dst_lo[3];
} dk_box_copy;

/* ---- the descriptor ---- */

struct dk_gauss_ops;  /* dakit/gauss.h */
struct dk_enkf_ops;   /* dakit/enkf.h */
struct dk_kmeans_ops; /* dakit/kmeans.h */
struct dk_gbees_ops;  /* dakit/gbees.h */
struct dk_letkf_ops;  /* dakit/letkf.h */

typedef struct dk_plugin {
    /* Required: DK_PLUGIN_ABI_VERSION of the headers built against. */
    uint32_t abi_version;
    /* Required: sizeof(dk_plugin) of the headers built against (write
     * DK_PLUGIN_SIZE). Members past it read as absent. */
    uint32_t size;
    /* Required: short lower-case name, no comma, used by DAKIT_BACKEND. */
    const char *name;
    /* Optional: the plugin's own version string. */
    const char *version;
    /* Auto selection prefers a backend whose device 0 is a GPU or an
     * accelerator, then the highest priority (cuda 30, cpu 10, opencl 5). */
    int priority;

    /* Required. Called once, lazily, when the core first needs the plugin's
     * devices (never for a backend the user did not ask for by name, except
     * under auto selection and `dakit info`). Fills up to max entries of
     * devices and returns how many usable devices there are: 0 with the
     * reason in msg when there are none (no driver, no GPU), -1 on failure.
     * Must not crash or print on a machine without the hardware. */
    int (*probe)(dk_device_info *devices, int max, dk_msg *msg);
    /* Required. Opens device `index` (< the probe's count); the handle is
     * passed to every other entry. Called once per dk_context. */
    dk_status (*device_open)(int index, void **device, dk_msg *msg);
    /* Required. Releases what the device holds; every plan and buffer of
     * it was destroyed before. */
    void (*device_close)(void *device);

    /* Required: device memory. alloc returns a handle that the algorithm
     * entries receive as their buffer arguments. write, read and copy have
     * finished when they return, so host memory may be reused at once;
     * `bytes` never exceeds the size allocated. */
    dk_status (*buffer_alloc)(void *device, size_t bytes, void **buffer, dk_msg *msg);
    void (*buffer_free)(void *device, void *buffer);
    dk_status (*buffer_write)(void *device, void *buffer, const void *src, size_t bytes,
                              dk_msg *msg);
    dk_status (*buffer_read)(void *device, const void *buffer, void *dst, size_t bytes,
                             dk_msg *msg);
    dk_status (*buffer_copy)(void *device, void *dst, const void *src, size_t bytes,
                             dk_msg *msg);

    /* Optional: one ops table per algorithm, NULL where not implemented
     * (the core then names the backends that do). Each table's type is in
     * the algorithm's header; a plugin that does not include it leaves the
     * slot NULL. A new algorithm appends a slot here. */
    const struct dk_gauss_ops *gauss;
    const struct dk_enkf_ops *enkf;
    const struct dk_kmeans_ops *kmeans;
    const struct dk_gbees_ops *gbees;

    /* Optional: wraps memory the caller owns (kind: a dk_memory_kind) as a
     * buffer handle without copying. NULL, or DK_ERR_NOT_IMPLEMENTED with a
     * sentence, for kinds the device cannot use. The handle then goes to
     * every entry a buffer_alloc handle goes to, and to buffer_unwrap. */
    dk_status (*buffer_wrap)(void *device, int kind, void *memory, size_t bytes, void **buffer, dk_msg *msg);
    /* Required with buffer_wrap: releases a wrapped handle, never the memory. */
    void (*buffer_unwrap)(void *device, void *buffer);
    /* Optional: fills the device's own handles (dk_native in dakit.h). */
    dk_status (*device_native)(void *device, dk_native *native, dk_msg *msg);
    /* Optional: orders the device's work with the caller's queue (a
     * cudaStream_t, cl_command_queue, ...; NULL: none), dk_context_set_queue.
     * From then on every entry waits, on the device, for the work queued on
     * `queue` before it; with DK_QUEUE_ASYNC in flags, gauss execute and
     * enkf cov may return before their work is done, provided work queued
     * on `queue` afterwards runs after it. Must not wait on the host. NULL:
     * the core refuses every queue but NULL. */
    dk_status (*device_set_queue)(void *device, void *queue, unsigned flags, dk_msg *msg);
    /* Required with device_set_queue: returns when every entry's work is done. */
    dk_status (*device_wait)(void *device, dk_msg *msg);
    /* Optional: device-side communication for libdakit-mpi (above); NULL:
     * the layer stages through host memory and MPI. */
    const dk_comm_ops *comm;
    /* Optional: what the gauss table implements beyond rf with the zero and
     * constant boundaries (DK_GAUSS_FEATURE_* of gauss.h); 0: only that,
     * and the core refuses the rest with a sentence naming the backend. */
    unsigned gauss_features;
    /* Optional: copies a box between two buffers of the device (one call:
     * cudaMemcpy3D, clEnqueueCopyBufferRect), finished when it returns
     * (queued only under DK_QUEUE_ASYNC: device_set_queue); the buffers
     * never overlap. libdakit-mpi needs it to exchange halos of
     * device buffers (dk_mpi_gauss_execute); NULL: it refuses them. */
    dk_status (*buffer_copy_box)(void *device, void *dst, const void *src, const dk_box_copy *box, dk_msg *msg);
    /* Optional: the local ensemble transform Kalman filter (dakit/letkf.h). */
    const struct dk_letkf_ops *letkf;
    /* Optional, with comm: its collectives queued on the device's queue
     * (above); NULL: the layer calls the blocking ones. */
    const dk_comm_queue_ops *comm_queue;
    /* Optional: DK_PLUGIN_OPS_GENERATION of the headers the ops tables were
     * built with (write DK_PLUGIN_OPS_GENERATION). The core reads the
     * members a table gained in a later generation than this as absent, so
     * an older plugin's shorter tables are never read past their end (0,
     * a plugin built before this member: every table ends where it did). */
    uint32_t ops_generation;
    /* Optional: host memory the device copies to and from fastest
     * (page-locked: cudaMallocHost, an OpenCL buffer of
     * CL_MEM_ALLOC_HOST_PTR mapped), for dk_host_alloc; NULL: the core
     * allocates ordinary memory. */
    dk_status (*host_alloc)(void *device, size_t bytes, void **memory, dk_msg *msg);
    /* Required with host_alloc: releases what it returned. */
    void (*host_free)(void *device, void *memory);
} dk_plugin;

#define DK_PLUGIN_SIZE ((uint32_t)sizeof(dk_plugin))

/* The ops tables' generation. 1: the entries libdakit-mpi runs between its
 * collectives were appended: dk_gauss_ops.execute_halo, dk_enkf_ops.cov_rows,
 * inflate and update, dk_kmeans_ops.assign_partial, update and objective.
 * 2: dk_kmeans_ops.seed_distance and seed_read (the seeded inits).
 * 3: dk_kmeans_ops.assign_weighted, objective_weighted and
 * seed_distance_weighted (sample weights). 4: dk_letkf_ops.transforms and
 * apply_transforms (weight interpolation). A table that grows again
 * appends its members and moves this number. */
#define DK_PLUGIN_OPS_GENERATION 4u

typedef const dk_plugin *(*dk_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif
