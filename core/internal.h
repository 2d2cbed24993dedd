/* Internal to libdakit: shared by the core and the algorithm folders. */
#ifndef DAKIT_INTERNAL_H
#define DAKIT_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include <dakit/dakit.h>
#include <dakit/plugin.h>

#if defined(DK_BUILDING_LIBDAKIT)
#define DK_API __attribute__((visibility("default")))
#else
#define DK_API
#endif

#define DK_MSG_LEN 512

/* Records the failure as the calling thread's last error (and, when ctx is
 * given, as the calling thread's last error on ctx) and returns status, so
 * callers write `return dk_fail(...)`. */
dk_status dk_fail(dk_context *ctx, dk_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same with a plugin's message. */
dk_status dk_fail_msg(dk_context *ctx, dk_status status, const dk_msg *msg, const char *what);

typedef enum { DK_LOG_ERROR = 0, DK_LOG_WARN, DK_LOG_INFO, DK_LOG_DEBUG } dk_log_level;
void dk_log(dk_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A plugin the registry loaded and accepted. */
typedef struct dk_backend {
    const dk_plugin *plugin;         /* the registry's copy of the descriptor: members
                                        past the plugin's own size read NULL */
    char path[1024];
    int device_count;
    dk_device_info devices[DK_PLUGIN_MAX_DEVICES];
} dk_backend;

struct dk_context {
    const dk_backend *backend;
    int device_index;
    void *device;
    uint64_t id;          /* unique per process: keys each thread's last error */
    pthread_mutex_t lock; /* held around every call into the plugin */
    struct dk_comm *kept; /* communicators kept for later plans (core/comm.c) */
    void *queue;          /* dk_context_set_queue's, and its flags */
    unsigned queue_flags;
};

/* Releases the communicators the context keeps (dk_context_destroy). */
void dk_comm_release_kept(dk_context *ctx);

/* Every call into a context's plugin goes between these, so the core calls
 * a device's entries from one thread at a time, as plugin.h promises, even
 * when threads share a context. ctx NULL (a serial reference) locks nothing. */
static inline void dk_device_enter(dk_context *ctx)
{
    if (ctx)
        pthread_mutex_lock(&ctx->lock);
}
static inline void dk_device_leave(dk_context *ctx)
{
    if (ctx)
        pthread_mutex_unlock(&ctx->lock);
}

struct dk_buffer {
    dk_context *ctx;
    void *handle;
    size_t bytes;
    int wrapped; /* the caller's memory: buffer_unwrap, not buffer_free */
};

typedef enum { DK_ALGO_GAUSS = 0, DK_ALGO_ENKF, DK_ALGO_KMEANS, DK_ALGO_GBEES, DK_ALGO_LETKF, DK_ALGO_COUNT } dk_algo;

struct dk_plan {
    dk_context *ctx;
    dk_algo algo;
    void *impl;                      /* the plugin's plan */
    void (*impl_destroy)(void *impl);
    void *state;                     /* the algorithm's own state (freed with free) */
    dk_buffer *staging;              /* made on the first *_execute_host call */
    dk_buffer *kept[4];              /* device scratch an algorithm keeps from one execute to the
                                        next (letkf's interpolation), grown on demand */
};

/* Ops table of an algorithm on ctx's backend, or NULL with the error set
 * (naming the backends that do implement it). */
const void *dk_context_ops(dk_context *ctx, dk_algo algo);
const char *dk_algo_name(dk_algo algo);

/* The one way a variant is chosen, for every algorithm: the entry of the
 * plugin's NULL-terminated list `variants` equal to `requested` (NULL: the
 * first, the default), so that a setup points at the plugin's own string
 * and never at the caller's. NULL when there is none, with the error set
 * (DK_ERR_NOT_IMPLEMENTED) naming the ones offered; ctx NULL: the serial
 * reference. */
const char *dk_pick_variant(dk_context *ctx, dk_algo algo, const char *const *variants, const char *requested);

#endif
