#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/dist.h"
#include "cli/netcdf.h"
#include "cli/netcdf_dist.h"
#include "cli/npy.h"
#include "cli/output.h"

#ifdef DK_TOOLS_MPI
#include <dakit/mpi.h>

static int run_distributed(const char *cmd, const char *in_path, const char *var, const char *out_path, dk_gauss_desc *d,
                           const char *dtype_s, const char *axes_s, long *axes, int naxes, const double *sig,
                           int nsig, const char *sigma_s, const char *backend, const int *decomp, int ndecomp,
                           int use_reference);
#endif

/* --nan and --mask (docs/gauss.md, "Missing data") */
static dk_gauss_nan nan_policy = DK_GAUSS_NAN_ERROR;
static const char *const nan_names[] = {"error", "propagate", "ignore"};
/* --order: one value for every filtered axis, or one per filtered axis */
static long orders[DK_MAX_DIMS];
static int norders;

/* Sets d's axes, sigma and order from the filtered axes (all of a field of
 * ndim axes when --axes was not given); 0, or the exit status after saying
 * what is wrong. */
static int place_axes(const char *cmd, dk_gauss_desc *d, const char *axes_s, long *axes, int naxes,
                      const double *sig, int nsig, const char *sigma_s, const char *in_path, int ndim)
{
    if (!axes_s) {
        naxes = ndim;
        for (int a = 0; a < naxes; a++)
            axes[a] = a;
    }
    if (nsig != 1 && nsig != naxes)
        return cli_error(cmd, 2, "--sigma takes one value or one per filtered axis (%d), not '%s'", naxes, sigma_s);
    if (norders > 1 && norders != naxes)
        return cli_error(cmd, 2, "--order takes one value or one per filtered axis (%d), not %d", naxes, norders);
    for (int k = 0; k < naxes; k++) {
        if (axes[k] >= ndim)
            return cli_error(cmd, 2, "axis %ld is out of range: %s has %d axes", axes[k], in_path, ndim);
        d->axes |= 1u << axes[k];
        d->sigma[axes[k]] = sig[nsig == 1 ? 0 : k];
        d->order[axes[k]] = norders ? (int)orders[norders == 1 ? 0 : k] : 0;
    }
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dakit gauss --in X.npy|X.nc:VAR --out Y.npy|Y.nc --sigma S[,S...] [options]\n"
            "\n"
            "Gaussian convolution by a recursive filter (deriche, rf or vyv), along the\n"
            "chosen axes of a 1-D, 2-D or 3-D float32/float64 C-order .npy array. The defaults\n"
            "(deriche, --boundary reflect) follow scipy.ndimage.gaussian_filter; the GPU RF\n"
            "paper's filter is --method rf --boundary zero.\n"
            "\n"
            "  --in X.npy            the input array, or a netCDF variable X.nc:VAR, with a hyperslab\n"
            "                        X.nc:VAR[time=0,y=10:90] (docs/formats.md)\n"
            "  --var VAR             the netCDF variable when --in names only the file\n"
            "  --out Y.npy           the result: X's shape, in the compute precision; Y.nc writes\n"
            "                        netCDF with X's dimensions, coordinates and attributes\n"
            "  --sigma S[,S,...]     standard deviation in grid units, one for all axes or one per\n"
            "                        filtered axis\n"
            "  --method deriche|rf|vyv   deriche (default): Deriche's fourth-order filter,\n"
            "                        within 5e-4 of the peak of the sampled Gaussian for sigma\n"
            "                        0.5 to 100; rf: the K-iterated first-order filter, closer to\n"
            "                        the Gaussian as K grows, any sigma, exact or overlap mode;\n"
            "                        vyv: van Vliet-Young-Verbeek poles, within 3e-3 for sigma 2\n"
            "                        to 100 (docs/gauss.md); deriche and vyv: sigma 0.5 to 1e4,\n"
            "                        exact mode\n"
            "  --order-poles 3|4|5   vyv: the number of poles (default 5, the most accurate)\n"
            "  --order O[,O...]      deriche and vyv: 0 smooths (default), 1 and 2 give the first\n"
            "                        and second derivative of the smoothed field along the axis, as\n"
            "                        scipy's gaussian_filter(order=...); one for all filtered axes\n"
            "                        or one per filtered axis\n"
            "  --K N                 rf: filter iterations per axis, each a forward and a backward\n"
            "                        pass, 1 to 1000000; more come closer to the Gaussian (default 4)\n"
            "  --axes A[,A...]       axes to filter, numbered from 0 (default: all)\n"
            "  --boundary MODE       values beyond the ends of a line (default reflect):\n"
            "                        reflect  d c b a | a b c d | d c b a (scipy's default 'reflect')\n"
            "                        mirror   d c b | a b c d | c b a     (scipy 'mirror')\n"
            "                        nearest  a a a | a b c d | d d d     (scipy 'nearest')\n"
            "                        wrap     a b c d | a b c d | a b c d (scipy 'wrap')\n"
            "                        cval     k k k | a b c d | k k k, k = --cval (scipy 'constant')\n"
            "                        zero     dakit's own name: rf starts each pass from\n"
            "                                 zero (the GPU RF paper's rule); deriche/vyv: cval\n"
            "                                 with k = 0\n"
            "                        constant dakit's own name: rf starts each pass from\n"
            "                                 the steady state of the end value (nearest for K 1);\n"
            "                                 deriche/vyv: nearest. Not scipy's 'constant': that is cval\n"
            "  --cval K              the value outside the field for --boundary cval (default 0)\n"
            "  --mode exact|overlap  exact (default) matches the serial reference to rounding;\n"
            "                        overlap (rf with zero or constant) cuts each line into --blocks\n"
            "                        blocks, each filtered alone with --overlap values beyond it on\n"
            "                        each side (approximate near block edges)\n"
            "  --overlap M           overlap mode: values beyond a block on each side, 0 to 1e9\n"
            "                        (default 5)\n"
            "  --blocks B            overlap mode: blocks per line, 1 to 1e9 (default 3072)\n"
            "  --nan error|ignore|propagate   NaN in the input (default error: refused, naming how\n"
            "                        many and where the first is); ignore smooths around them\n"
            "                        (normalized convolution: NaN where under 1e-6 of the filter's\n"
            "                        weight falls on valid values); propagate lets them spread\n"
            "  --mask M.npy          missing values where M is 0 (X's shape, float32 or float64:\n"
            "                        np.save('M.npy', valid.astype('f4'))); implies --nan ignore\n"
            "  --dtype f32|f64       compute precision (default: the input's)\n"
            "  --variant NAME        one of the backend's variants (`dakit info` lists them;\n"
            "                        default: the first)\n"
            "  --backend NAME        cuda, opencl, cpu, auto or a comma list (default: DAKIT_BACKEND/auto)\n"
            "  --reference           use the serial reference instead of a backend\n"
            "  --decomp AxB[xC]      under mpirun with more than one rank: the pieces per axis of\n"
            "                        the rank grid, their product the number of ranks (default:\n"
            "                        slabs along axis 0); each rank reads only its box and writes\n"
            "                        it into a .npy; a .nc output is gathered and written by rank 0\n");
}

/* --mask: the values of x where the mask is 0 become NaN (missing). */
static int apply_mask(const char *cmd, const char *path, npy_array *x, const char *in_path)
{
    char err[4200];
    npy_array m;
    if (npy_read(path, &m, err, sizeof err) != DK_OK)
        return cli_error(cmd, 1, "%s", err);
    int same = m.ndim == x->ndim;
    for (int a = 0; same && a < x->ndim; a++)
        same = m.shape[a] == x->shape[a];
    if (!same) {
        npy_free(&m);
        return cli_error(cmd, 1, "the mask %s does not have the shape of %s", path, in_path);
    }
    for (size_t i = 0; i < x->count; i++)
        if ((m.dtype == DK_F64 ? ((double *)m.data)[i] : ((float *)m.data)[i]) == 0.0) {
            if (x->dtype == DK_F64)
                ((double *)x->data)[i] = NAN;
            else
                ((float *)x->data)[i] = NAN;
        }
    npy_free(&m);
    return 0;
}

int cmd_gauss(int argc, char **argv)
{
    const char *cmd = "gauss";
    const char *in_path = NULL, *out_path = NULL, *sigma_s = NULL, *axes_s = NULL, *backend = NULL;
    const char *dtype_s = NULL, *var = NULL, *mask_path = NULL;
    int nan_given = 0, k_given = 0;
    dk_gauss_desc d;
    dk_gauss_desc_init(&d);
    int use_reference = 0;
    const char *decomp_s = NULL;
    static const struct option option_table[] = {CLI_FLAG("help"), CLI_FLAG("reference"), CLI_VALUE("in"),
        CLI_VALUE("out"), CLI_VALUE("var"), CLI_VALUE("sigma"), CLI_VALUE("axes"), CLI_VALUE("backend"),
        CLI_VALUE("variant"), CLI_VALUE("dtype"), CLI_VALUE("mask"), CLI_VALUE("nan"), CLI_VALUE("decomp"),
        CLI_VALUE("K"), CLI_VALUE("order"), CLI_VALUE("order-poles"), CLI_VALUE("cval"), CLI_VALUE("method"),
        CLI_VALUE("boundary"), CLI_VALUE("mode"), CLI_VALUE("overlap"), CLI_VALUE("blocks"), {0}};
    cli_args args = {.cmd = cmd, .argc = argc, .argv = argv, .options = option_table};
    int more;
    while ((more = cli_next(&args)) == 1) {
        const char *a = args.opt, *v = args.value;
        if (!strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--reference")) {
            use_reference = 1;
            continue;
        }
        int bad = 0;
        if (!strcmp(a, "--in"))
            in_path = v;
        else if (!strcmp(a, "--out"))
            out_path = v;
        else if (!strcmp(a, "--var"))
            var = v;
        else if (!strcmp(a, "--sigma"))
            sigma_s = v;
        else if (!strcmp(a, "--axes"))
            axes_s = v;
        else if (!strcmp(a, "--backend"))
            backend = v;
        else if (!strcmp(a, "--variant"))
            d.variant = v;
        else if (!strcmp(a, "--dtype"))
            dtype_s = v;
        else if (!strcmp(a, "--mask"))
            mask_path = v;
        else if (!strcmp(a, "--nan")) {
            int k;
            for (k = 0; k < 3 && strcmp(v, nan_names[k]); k++)
                ;
            if (k == 3)
                return cli_error(cmd, 2, "--nan must be error, ignore or propagate, not '%s'", v);
            nan_policy = (dk_gauss_nan)k;
            nan_given = 1;
        }
        else if (!strcmp(a, "--decomp"))
            decomp_s = v;
        else if (!strcmp(a, "--K")) {
            bad = cli_int(cmd, a, v, 1, 1000000, &d.K);
            k_given = 1;
        }
        else if (!strcmp(a, "--order")) {
            norders = cli_parse_ints(v, orders, DK_MAX_DIMS);
            for (int k = 0; k < norders; k++)
                bad |= orders[k] < 0 || orders[k] > 2;
            if (norders < 1 || bad)
                return cli_error(cmd, 2, "--order must be 0, 1 or 2, or a comma list of them, one per "
                                         "filtered axis, not '%s'", v);
        } else if (!strcmp(a, "--order-poles"))
            bad = cli_int(cmd, a, v, 3, 5, &d.order_poles);
        else if (!strcmp(a, "--cval"))
            bad = cli_double(cmd, a, v, -1e308, 1e308, 0, &d.cval);
        else if (!strcmp(a, "--method")) {
            int m;
            for (m = 0; m <= DK_GAUSS_VYV && strcmp(v, dk_gauss_method_name((dk_gauss_method)m)); m++)
                ;
            if (m > DK_GAUSS_VYV)
                return cli_error(cmd, 2, "--method must be rf, deriche or vyv, not '%s'", v);
            d.method = (dk_gauss_method)m;
        } else if (!strcmp(a, "--boundary")) {
            int b;
            for (b = 0; b < DK_BOUNDARY_COUNT && strcmp(v, dk_gauss_boundary_name((dk_boundary)b)); b++)
                ;
            if (b == DK_BOUNDARY_COUNT)
                return cli_error(cmd, 2,
                                 "--boundary must be reflect, mirror, nearest, wrap, cval, zero or constant, "
                                 "not '%s'", v);
            d.boundary = (dk_boundary)b;
        } else if (!strcmp(a, "--mode")) {
            if (!strcmp(v, "exact"))
                d.mode = DK_GAUSS_EXACT;
            else if (!strcmp(v, "overlap"))
                d.mode = DK_GAUSS_OVERLAP;
            else
                return cli_error(cmd, 2, "--mode must be exact or overlap, not '%s'", v);
        } else if (!strcmp(a, "--overlap"))
            bad = cli_size(cmd, a, v, 0, 1000000000, &d.overlap);
        else if (!strcmp(a, "--blocks"))
            bad = cli_size(cmd, a, v, 1, 1000000000, &d.blocks);
        if (bad)
            return bad;
    }
    if (more)
        return more;
    /* an option of another method than the one chosen would be silently ignored */
    if (k_given && d.method != DK_GAUSS_RF)
        return cli_error(cmd, 2, "--K is the rf method's iteration count; with --method %s it would be ignored "
                                 "(add --method rf)", dk_gauss_method_name(d.method));
    if (!in_path || !out_path || !sigma_s)
        return cli_error(cmd, 2, "--in, --out and --sigma are required (dakit gauss --help)");
    if (mask_path && nan_given && nan_policy != DK_GAUSS_NAN_IGNORE)
        return cli_error(cmd, 2, "--mask marks missing values, which only --nan ignore smooths around (the "
                                 "default with --mask), not --nan %s", nan_names[nan_policy]);
    if (mask_path)
        nan_policy = DK_GAUSS_NAN_IGNORE;
    if (dtype_s && strcmp(dtype_s, "f32") && strcmp(dtype_s, "f64"))
        return cli_error(cmd, 2, "--dtype must be f32 or f64, not '%s'", dtype_s);
    double sig[DK_MAX_DIMS];
    int nsig = cli_parse_doubles(sigma_s, sig, DK_MAX_DIMS);
    if (nsig < 1)
        return cli_error(cmd, 2, "--sigma must be one number or a comma list of up to %d, each > 0 and <= %g, "
                                 "not '%s'", DK_MAX_DIMS, DK_GAUSS_MAX_SIGMA, sigma_s);
    for (int k = 0; k < nsig; k++)
        if (!(sig[k] > 0) || sig[k] > DK_GAUSS_MAX_SIGMA)
            return cli_error(cmd, 2, "--sigma must be one number or a comma list of up to %d, each > 0 and <= %g, "
                                     "not '%s'", DK_MAX_DIMS, DK_GAUSS_MAX_SIGMA, sigma_s);
    long axes[DK_MAX_DIMS];
    int naxes = 0;
    if (axes_s && (naxes = cli_parse_ints(axes_s, axes, DK_MAX_DIMS)) < 1)
        return cli_error(cmd, 2, "--axes must be a comma list of axis numbers, not '%s'", axes_s);
    int decomp[DK_MAX_DIMS], ndecomp = 0;
    if (decomp_s && dist_parse_decomp(cmd, decomp_s, decomp, &ndecomp))
        return 2;
    if (cli_options_only)
        return 0;

#ifdef DK_TOOLS_MPI
    {
        int own;
        if (dist_begin(&own)) {
            int rc = run_distributed(cmd, in_path, var, out_path, &d, dtype_s, axes_s, axes, naxes, sig, nsig, sigma_s,
                                     backend, decomp, ndecomp, use_reference);
            dist_end(own);
            return rc;
        }
    }
#endif
    if (dist_single_process(cmd, decomp_s, decomp, ndecomp))
        return 2;

    char err[4200];
    if (output_check(out_path, err, sizeof err) != 0)
        return cli_error(cmd, 1, "%s", err);
    npy_array x;
    array_origin origin;
    if (array_read(in_path, var, &x, &origin, err, sizeof err) != DK_OK)
        return cli_error(cmd, 1, "%s", err);
    int rc = 1;
    void *converted = NULL;
    dk_context *ctx = NULL;
    dk_plan *plan = NULL;
    if (x.ndim < 1 || x.ndim > DK_MAX_DIMS) {
        cli_error(cmd, 1, "%s has %d dimensions; 1, 2 or 3 are supported", in_path, x.ndim);
        goto done;
    }
    d.ndim = x.ndim;
    for (int a = 0; a < x.ndim; a++)
        d.shape[a] = x.shape[a];
    d.dtype = x.dtype;
    if (dtype_s)
        d.dtype = strcmp(dtype_s, "f64") ? DK_F32 : DK_F64;
    if ((rc = place_axes(cmd, &d, axes_s, axes, naxes, sig, nsig, sigma_s, in_path, x.ndim)) != 0)
        goto done;
    rc = 1;
    if (d.dtype != x.dtype) {
        size_t esize = dk_dtype_size(d.dtype);
        converted = malloc(x.count * esize);
        if (!converted) {
            cli_error(cmd, 1, "out of memory");
            goto done;
        }
        for (size_t i = 0; i < x.count; i++) {
            if (d.dtype == DK_F64)
                ((double *)converted)[i] = ((float *)x.data)[i];
            else
                ((float *)converted)[i] = (float)((double *)x.data)[i];
        }
        free(x.data);
        x.data = converted;
        converted = NULL;
        x.dtype = d.dtype;
    }

    if (mask_path && apply_mask(cmd, mask_path, &x, in_path) != 0)
        goto done;

    double t0 = cli_now();
    if (use_reference) {
        if (dk_gauss_reference_nan(&d, nan_policy, x.data, x.data) != DK_OK) {
            cli_error(cmd, 1, "%s", dk_last_error(NULL));
            goto done;
        }
    } else {
        if (dk_context_create(backend, &ctx) != DK_OK) {
            cli_error(cmd, 1, "%s", dk_last_error(NULL));
            goto done;
        }
        if (dk_gauss_plan_create(ctx, &d, &plan) != DK_OK || dk_gauss_plan_set_nan(plan, nan_policy) != DK_OK ||
            dk_gauss_execute_host(plan, x.data, x.data) != DK_OK) {
            cli_error(cmd, 1, "%s", dk_last_error(ctx));
            goto done;
        }
    }
    double t1 = cli_now();
    if (array_write(out_path, origin.netcdf ? origin.var : "data", x.dtype == DK_F64 ? ARRAY_F64 : ARRAY_F32, x.ndim,
                    x.shape, x.data, &origin, 1, err, sizeof err) != DK_OK) {
        cli_error(cmd, 1, "%s", err);
        goto done;
    }
    fprintf(stderr, "dakit gauss: %s -> %s on %s (%s), %.3f s including transfers\n", in_path, out_path,
            use_reference ? "the serial reference" : dk_context_backend(ctx),
            use_reference ? "host" : dk_context_device(ctx), t1 - t0);
    rc = 0;
done:
    dk_plan_destroy(plan);
    dk_context_destroy(ctx);
    npy_free(&x);
    free(converted);
    return rc;
}

#ifdef DK_TOOLS_MPI
#define FAILED(...) (snprintf(msg, sizeof msg, __VA_ARGS__), 1)

/* A netCDF output under mpirun: rank 0 writes the gathered field as one
 * process would, like the input */
typedef struct gauss_output {
    dk_dtype dtype;
    int ndim;
    const size_t *shape;
    const array_origin *like;
} gauss_output;

static int write_whole(const char *path, const void *whole, void *arg, char *err, size_t len)
{
    const gauss_output *g = arg;
    return array_write(path, g->like->netcdf ? g->like->var : "data", g->dtype == DK_F64 ? ARRAY_F64 : ARRAY_F32,
                       g->ndim, g->shape, whole, g->like, 1, err, len) != DK_OK;
}

static int run_distributed(const char *cmd, const char *in_path, const char *var, const char *out_path, dk_gauss_desc *d,
                           const char *dtype_s, const char *axes_s, long *axes, int naxes, const double *sig,
                           int nsig, const char *sigma_s, const char *backend, const int *decomp, int ndecomp,
                           int use_reference)
{
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char msg[4400] = "", err[4200];
    int failed = 0, rc = 1;
    void *file_box = NULL, *box = NULL;
    dk_context *ctx = NULL;
    dk_mpi_plan *plan = NULL;
    array_source src;
    array_origin origin;
    npy_array x;
    memset(&x, 0, sizeof x);

    if (use_reference)
        return cli_error(cmd, 2, "--reference runs in one process; under mpirun (%d ranks) each rank filters "
                                 "its part on a backend", size);
    if (nan_policy == DK_GAUSS_NAN_IGNORE)
        return cli_error(cmd, 2, "--nan ignore and --mask run in one process (normalized convolution is not "
                                 "distributed); under mpirun (%d ranks) --nan error or propagate", size);
    if (output_check(out_path, err, sizeof err) != 0)
        failed = FAILED("%s", err);
    else if (array_source_open(&src, in_path, var, &origin, err, sizeof err) != DK_OK)
        failed = FAILED("%s", err);
    if (dist_agree(failed, msg, sizeof msg))
        return cli_error(cmd, 1, "%s", msg);
    x = src.hdr;
    /* from here every rank has the same header (or all stop): the checks
     * below give the same answer everywhere */
    if (dist_same_header(in_path, x.dtype, x.ndim, x.shape, msg, sizeof msg))
        return cli_error(cmd, 1, "%s", msg);
    if (x.ndim < 1 || x.ndim > DK_MAX_DIMS)
        return cli_error(cmd, 1, "%s has %d dimensions; 1, 2 or 3 are supported", in_path, x.ndim);
    d->ndim = x.ndim;
    for (int a = 0; a < x.ndim; a++)
        d->shape[a] = x.shape[a];
    d->dtype = x.dtype;
    if (dtype_s)
        d->dtype = strcmp(dtype_s, "f64") ? DK_F32 : DK_F64;
    int bad_axes = place_axes(cmd, d, axes_s, axes, naxes, sig, nsig, sigma_s, in_path, x.ndim);
    if (bad_axes)
        return bad_axes;
    dk_mpi_part part;
    if (dist_decompose(cmd, in_path, x.ndim, x.shape, decomp, ndecomp, &part))
        return 2;

    dist_choose_device(backend);
    size_t count = 1;
    for (int a = 0; a < x.ndim; a++)
        count *= part.extent[a];
    size_t fsize = dk_dtype_size(x.dtype), esize = dk_dtype_size(d->dtype);
    if (dk_context_create(backend, &ctx) != DK_OK)
        failed = FAILED("rank %d of %d: %s", rank, size, dk_last_error(NULL));
    else if (!(file_box = malloc(count ? count * fsize : 1)) || !(box = malloc(count ? count * esize : 1)))
        failed = FAILED("rank %d of %d: out of memory (its part holds %zu values)", rank, size, count);
    else if (array_source_read_box(&src, part.offset, part.extent, file_box, err, sizeof err) != DK_OK)
        failed = FAILED("rank %d of %d: %s", rank, size, err);
    if (dist_agree(failed, msg, sizeof msg))
        goto done;
    for (size_t i = 0; i < count; i++) {
        double v = x.dtype == DK_F64 ? ((double *)file_box)[i] : ((float *)file_box)[i];
        if (d->dtype == DK_F64)
            ((double *)box)[i] = v;
        else
            ((float *)box)[i] = x.dtype == DK_F32 ? ((float *)file_box)[i] : (float)v;
    }
    free(file_box);
    file_box = NULL;

    double t0 = cli_now();
    /* collective: on failure every rank has the same sentence */
    if (dk_mpi_gauss_plan_create(ctx, MPI_COMM_WORLD, d, &part, &plan) != DK_OK ||
        dk_mpi_gauss_plan_set_nan(plan, nan_policy) != DK_OK || dk_mpi_gauss_execute_host(plan, box, box) != DK_OK)
        failed = FAILED("%s", dk_mpi_last_error());
    if (dist_agree(failed, msg, sizeof msg))
        goto done;
    double t1 = cli_now();

    gauss_output go = {d->dtype, x.ndim, x.shape, &origin};
    if (dist_write(out_path, d->dtype == DK_F64 ? "<f8" : "<f4", esize, x.ndim, x.shape, x.ndim, x.shape, part.offset,
                   part.extent, box, write_whole, &go, msg, sizeof msg))
        goto done;
    if (rank == 0)
        fprintf(stderr, "dakit gauss: %s -> %s on %d ranks (rank 0: %s, %s), %.3f s including transfers\n",
                in_path, out_path, size, dk_context_backend(ctx), dk_context_device(ctx), t1 - t0);
    rc = 0;
done:
    if (rc)
        cli_error(cmd, 1, "%s", msg);
    dk_mpi_plan_destroy(plan);
    dk_context_destroy(ctx);
    free(file_box);
    free(box);
    return rc;
}
#endif
