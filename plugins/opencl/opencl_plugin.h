/* What the files of the opencl backend share: the opened device and one set
 * of error-check helpers. */
#ifndef DAKIT_OPENCL_PLUGIN_H
#define DAKIT_OPENCL_PLUGIN_H

#include <CL/cl.h>

#include <dakit/plugin.h>

#define DK_OPENCL_GBEES_PROGRAMS 16
#define DK_OPENCL_LETKF_PROGRAMS 8

/* One opened device: its context, an in-order queue, and the gauss program
 * built once per precision. */
typedef struct dk_opencl_device {
    char name[128];
    cl_device_id id;
    cl_context context;
    cl_command_queue queue;
    /* dk_context_set_queue: the caller's queue (NULL: none; retained while
     * set) and whether gauss execute and enkf cov may return before their
     * work is done */
    cl_command_queue caller;
    int async;
    int is_cpu;            /* CPU devices want each work-item's data contiguous */
    int fp64;              /* cl_khr_fp64: the float64 kernels (enkf, gbees, gauss's f64) build */
    cl_uint compute_units;
    cl_ulong max_alloc;    /* CL_DEVICE_MAX_MEM_ALLOC_SIZE */
    int lanes_f32, lanes_f64; /* windows per work-item (LANES in gauss.cl) */
    cl_program gauss_f32;
    cl_program gauss_f64;  /* NULL when the device lacks cl_khr_fp64 */
    cl_program kmeans;     /* built by kmeans.c on the first kmeans plan */
    cl_program enkf;       /* built by enkf.c on the first enkf plan */
    /* gbees: one program per (model, dimension), built by gbees.c on first
     * use; model points into the plugin's own table */
    struct {
        const char *model;
        int dim;
        cl_program program;
    } gbees[DK_OPENCL_GBEES_PROGRAMS];
    /* letkf: one program per (dtype, local matrix size), built by letkf.c
     * on first use; key = size * 2 + (float32) */
    struct {
        int key;
        cl_program program;
    } letkf[DK_OPENCL_LETKF_PROGRAMS];
    /* dk_host_alloc's mapped buffers, newest first */
    struct dk_opencl_host_block *host_blocks;
} dk_opencl_device;

/* "CL_OUT_OF_RESOURCES" for -5, and so on; never NULL. */
const char *dk_opencl_error_name(cl_int code);

#if defined(__GNUC__)
#define DK_OPENCL_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define DK_OPENCL_PRINTF(fmt, args)
#endif

/* Writes "opencl <what, from fmt> failed on <device> (<CL error name>)" to msg and
 * returns DK_ERR_OUT_OF_MEMORY for the codes that mean memory ran out, else DK_ERR_BACKEND. */
dk_status dk_opencl_fail(dk_msg *msg, const dk_opencl_device *dev, cl_int err, const char *fmt, ...)
    DK_OPENCL_PRINTF(4, 5);

/* A read-write buffer of `bytes` (at least one), filled from src unless NULL; on
 * failure *out is NULL, msg names what, bytes and the CL error: DK_ERR_OUT_OF_MEMORY. */
dk_status dk_opencl_alloc(const dk_opencl_device *dev, size_t bytes, const void *src, cl_mem *out,
                          dk_msg *msg, const char *fmt, ...) DK_OPENCL_PRINTF(6, 7);

/* The start of an entry that queues work: with a caller's queue, the
 * device's queue waits on the device for what the caller queued before
 * (a marker there, a barrier here). */
dk_status dk_opencl_enter(const dk_opencl_device *dev, dk_msg *msg);

/* How an entry may end: every entry waits on the host for its work, except
 * those whose results all lie in device buffers (gauss execute, enkf cov),
 * which return at once when the caller asked for DK_QUEUE_ASYNC. */
typedef enum { DK_OPENCL_BLOCK, DK_OPENCL_MAY_QUEUE } dk_opencl_ending;

/* The end of an entry: clFinish on the device's queue, or, for
 * DK_OPENCL_MAY_QUEUE with an asynchronous caller's queue, a marker here and
 * a barrier on the caller's queue, both flushed, and no wait. On failure msg
 * names what (from fmt) and the CL error. */
dk_status dk_opencl_finish(const dk_opencl_device *dev, dk_opencl_ending ending, dk_msg *msg, const char *fmt, ...)
    DK_OPENCL_PRINTF(4, 5);

/* Builds a program from `count` sources; on failure msg names what, the options
 * and the CL error, and quotes the compiler's log from its first error on. */
dk_status dk_opencl_build(const dk_opencl_device *dev, cl_uint count, const char **sources,
                          const char *options, cl_program *out, dk_msg *msg, const char *fmt, ...)
    DK_OPENCL_PRINTF(7, 8);

/* CL_TRY(call, fmt, ...): a cl_int call that fails returns dk_opencl_fail(msg, dev,
 * ...), `msg` and `dev` taken from the scope. CL_TRY_GOTO(call, label, fmt, ...)
 * puts that status in `st` and jumps to label instead, where cleanup is needed. */
#define CL_TRY(call, ...)                                                                          \
    do {                                                                                           \
        cl_int cl_try_err_ = (call);                                                               \
        if (cl_try_err_ != CL_SUCCESS)                                                             \
            return dk_opencl_fail(msg, dev, cl_try_err_, __VA_ARGS__);                             \
    } while (0)

#define CL_TRY_GOTO(call, label, ...)                                                              \
    do {                                                                                           \
        cl_int cl_try_err_ = (call);                                                               \
        if (cl_try_err_ != CL_SUCCESS) {                                                           \
            st = dk_opencl_fail(msg, dev, cl_try_err_, __VA_ARGS__);                               \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

extern const dk_gauss_ops dk_opencl_gauss_ops;
extern const dk_kmeans_ops dk_opencl_kmeans_ops;
extern const dk_gbees_ops dk_opencl_gbees_ops;
extern const struct dk_letkf_ops dk_opencl_letkf_ops; /* dakit/letkf.h */
#ifdef DK_OPENCL_ENKF /* enkf.c, built where LAPACKE is found */
extern const dk_enkf_ops dk_opencl_enkf_ops;
#endif

#endif
