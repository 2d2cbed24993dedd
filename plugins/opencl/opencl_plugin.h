/* What plugin.c and gauss.c of the opencl backend share. */
#ifndef DAKIT_OPENCL_PLUGIN_H
#define DAKIT_OPENCL_PLUGIN_H

#include <CL/cl.h>

#include <dakit/plugin.h>

#define DK_OPENCL_GBEES_PROGRAMS 16

/* One opened device: its context, an in-order queue, and the gauss program
 * built once per precision. */
typedef struct dk_opencl_device {
    char name[128];
    cl_device_id id;
    cl_context context;
    cl_command_queue queue;
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
} dk_opencl_device;

/* "CL_OUT_OF_RESOURCES" for -5, and so on; never NULL. */
const char *dk_opencl_error_name(cl_int code);

extern const dk_gauss_ops dk_opencl_gauss_ops;
extern const dk_kmeans_ops dk_opencl_kmeans_ops;
extern const dk_gbees_ops dk_opencl_gbees_ops;
#ifdef DK_OPENCL_ENKF /* enkf.c, built where LAPACKE is found */
extern const dk_enkf_ops dk_opencl_enkf_ops;
#endif

#endif
