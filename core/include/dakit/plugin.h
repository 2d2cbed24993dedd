/* dakit plugin ABI. A backend is a shared object that exports exactly one
 * symbol, DK_PLUGIN_ENTRY, a function returning a const dk_plugin.
 *
 * Versioning: the core refuses a plugin whose abi_version differs from
 * DK_PLUGIN_ABI_VERSION. Any change to a struct in this file, or to what an
 * entry must do, bumps the version.
 *
 * Threading: the core calls a device's entries from one thread at a time.
 * Messages: an entry that fails writes one sentence into msg (dk_msg_set)
 * and returns a status other than DK_OK; it never prints or exits. */
#ifndef DAKIT_PLUGIN_H
#define DAKIT_PLUGIN_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include <dakit/dakit.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DK_PLUGIN_ABI_VERSION 1u
#define DK_PLUGIN_ENTRY dakit_plugin_entry
#define DK_PLUGIN_ENTRY_NAME "dakit_plugin_entry"
#define DK_PLUGIN_MAX_DEVICES DK_MAX_DEVICES

#if defined(__GNUC__)
#define DK_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define DK_PLUGIN_EXPORT
#endif

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


/* What a gauss plan receives: the caller's description, validated (shape,
 * sigma, K, axes, mode all checked), plus the precomputation every backend
 * shares so that all compute the same function. */
typedef struct dk_gauss_setup {
    dk_gauss_desc desc;          /* desc.variant is NULL or one of ops->variants */
    double alpha[DK_MAX_DIMS];   /* per filtered axis; 0 elsewhere */
    size_t halo[DK_MAX_DIMS];    /* exact mode: the least overlap per side that a
                                    window needs (dk_gauss_exact_halo) */
    size_t count;                /* elements in the field */
} dk_gauss_setup;

typedef struct dk_gauss_ops {
    /* NULL-terminated scheme names; the first is the default. */
    const char *const *variants;
    dk_status (*plan_create)(void *device, const dk_gauss_setup *setup, void **plan,
                             dk_msg *msg);
    /* in, out: handles from buffer_alloc holding setup->count elements;
     * in == out is allowed. Returns when the result is in out. */
    dk_status (*execute)(void *plan, const void *in, void *out, dk_msg *msg);
    void (*plan_destroy)(void *plan);
} dk_gauss_ops;

typedef struct dk_plugin {
    uint32_t abi_version; /* DK_PLUGIN_ABI_VERSION */
    const char *name;     /* short lower-case name used by DAKIT_BACKEND */
    const char *version;
    int priority;         /* auto selection tries the highest first */

    /* Fills up to max entries of devices and returns how many usable devices
     * there are (0: none, with the reason in msg), or -1 on failure. */
    int (*probe)(dk_device_info *devices, int max, dk_msg *msg);
    dk_status (*device_open)(int index, void **device, dk_msg *msg);
    void (*device_close)(void *device);

    dk_status (*buffer_alloc)(void *device, size_t bytes, void **buffer, dk_msg *msg);
    void (*buffer_free)(void *device, void *buffer);
    dk_status (*buffer_write)(void *device, void *buffer, const void *src, size_t bytes,
                              dk_msg *msg);
    dk_status (*buffer_read)(void *device, const void *buffer, void *dst, size_t bytes,
                             dk_msg *msg);
    dk_status (*buffer_copy)(void *device, void *dst, const void *src, size_t bytes,
                             dk_msg *msg);

    /* One ops table per algorithm; NULL: not implemented. Each table's
     * type is declared in the algorithm's own header (dakit/<algo>.h, the
     * part under "plugin ops"); a plugin that does not include it leaves
     * the slot NULL. */
    const dk_gauss_ops *gauss;
    const struct dk_enkf_ops *enkf;
    const struct dk_kmeans_ops *kmeans;
    const struct dk_gbees_ops *gbees;
} dk_plugin;


/* ---- gauss helpers every backend shares, so that all decompose alike ---- */

typedef struct dk_span {
    size_t begin, end; /* [begin, end) */
} dk_span;

/* The field seen along one axis: `outer` groups of `n` values `inner` apart;
 * line (o, j) starts at element o*n*inner + j. */
typedef struct dk_axis_view {
    size_t outer, n, inner;
} dk_axis_view;

static inline dk_axis_view dk_axis_view_of(const dk_gauss_desc *d, int axis)
{
    dk_axis_view v = {1, d->shape[axis], 1};
    for (int a = 0; a < axis; a++)
        v.outer *= d->shape[a];
    for (int a = axis + 1; a < d->ndim; a++)
        v.inner *= d->shape[a];
    return v;
}

/* Overlap mode: the number of blocks a line of n values is cut into. */
static inline size_t dk_gauss_line_blocks(size_t n, size_t blocks)
{
    if (blocks < 1)
        return 1;
    return blocks > n ? n : blocks;
}

/* Block b of `blocks` over n values, as the seed cuts it: d = n / blocks,
 * r = n % blocks, the first r blocks one value longer. */
static inline dk_span dk_gauss_block(size_t n, size_t blocks, size_t b)
{
    size_t d = n / blocks, r = n % blocks;
    dk_span s;
    s.begin = b * d + (b < r ? b : r);
    s.end = s.begin + d + (b < r ? 1 : 0);
    return s;
}

/* A block widened by m on each side, clipped to [0, n). */
static inline dk_span dk_gauss_window(dk_span block, size_t m, size_t n)
{
    dk_span w;
    w.begin = block.begin > m ? block.begin - m : 0;
    w.end = block.end + m < n ? block.end + m : n;
    return w;
}

typedef const dk_plugin *(*dk_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif
