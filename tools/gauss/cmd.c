#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/npy.h"
#include "cli/output.h"

#ifdef DK_TOOLS_MPI
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <dakit/mpi.h>

static int run_distributed(const char *cmd, const char *in_path, const char *out_path, dk_gauss_desc *d,
                           const char *dtype_s, const char *axes_s, long *axes, int naxes, const double *sig,
                           int nsig, const char *sigma_s, const char *backend, const int *decomp, int ndecomp,
                           int use_reference);
#endif

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dakit gauss --in X.npy --out Y.npy --sigma S[,S...] [options]\n"
            "\n"
            "Gaussian convolution by a recursive filter (rf, deriche or vyv), along the\n"
            "chosen axes of a 1-D, 2-D or 3-D float32/float64 C-order .npy array.\n"
            "\n"
            "  --in X.npy            the input array\n"
            "  --out Y.npy           the result: X's shape, in the compute precision\n"
            "  --sigma S[,S,...]     standard deviation in grid units, one for all axes or one per\n"
            "                        filtered axis\n"
            "  --method rf|deriche|vyv   rf (default): the seed's K-iterated first-order filter,\n"
            "                        within a few %% of the Gaussian at K 4; deriche: Deriche's\n"
            "                        fourth-order filter, within 5e-4 of the peak of the sampled\n"
            "                        Gaussian for sigma 0.5 to 100; vyv: van Vliet-Young-Verbeek\n"
            "                        poles, within 3e-3 for sigma 2 to 100 (docs/gauss.md);\n"
            "                        deriche and vyv: sigma 0.5 to 1e4, exact mode\n"
            "  --order-poles 3|4|5   vyv: the number of poles (default 5, the most accurate)\n"
            "  --K N                 rf: filter iterations per axis, each a forward and a backward\n"
            "                        pass, 1 to 1000000; more come closer to the Gaussian (default 4)\n"
            "  --axes A[,A...]       axes to filter, numbered from 0 (default: all)\n"
            "  --boundary MODE       values beyond the ends of a line (default zero):\n"
            "                        reflect  d c b a | a b c d | d c b a (scipy's default 'reflect')\n"
            "                        mirror   d c b | a b c d | c b a     (scipy 'mirror')\n"
            "                        nearest  a a a | a b c d | d d d     (scipy 'nearest')\n"
            "                        wrap     a b c d | a b c d | a b c d (scipy 'wrap')\n"
            "                        cval     k k k | a b c d | k k k, k = --cval (scipy 'constant')\n"
            "                        zero     dakit's name since the seed: rf starts each pass from\n"
            "                                 zero; deriche/vyv: cval with k = 0\n"
            "                        constant dakit's name since the seed: rf starts each pass from\n"
            "                                 the steady state of the end value (nearest for K 1);\n"
            "                                 deriche/vyv: nearest. Not scipy's 'constant': that is cval\n"
            "  --cval K              the value outside the field for --boundary cval (default 0)\n"
            "  --mode exact|overlap  exact (default) matches the serial reference to rounding;\n"
            "                        overlap cuts each line into --blocks blocks, each filtered alone\n"
            "                        with --overlap values beyond it on each side (approximate near\n"
            "                        block edges)\n"
            "  --overlap M           overlap mode: values beyond a block on each side, 0 to 1e9\n"
            "                        (default 5)\n"
            "  --blocks B            overlap mode: blocks per line, 1 to 1e9 (default 3072)\n"
            "  --dtype f32|f64       compute precision (default: the input's)\n"
            "  --variant NAME        one of the backend's variants (`dakit info` lists them;\n"
            "                        default: the first)\n"
            "  --backend NAME        cuda, opencl, cpu, auto or a comma list (default: DAKIT_BACKEND/auto)\n"
            "  --reference           use the serial reference instead of a backend\n"
            "  --decomp AxB[xC]      under mpirun with more than one rank: the pieces per axis of\n"
            "                        the rank grid, their product the number of ranks (default:\n"
            "                        slabs along axis 0); each rank reads and writes only its box\n");
}

int cmd_gauss(int argc, char **argv)
{
    const char *cmd = "gauss";
    const char *in_path = NULL, *out_path = NULL, *sigma_s = NULL, *axes_s = NULL, *backend = NULL;
    const char *dtype_s = NULL;
    dk_gauss_desc d;
    dk_gauss_desc_init(&d);
    int use_reference = 0;
    const char *decomp_s = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--reference")) {
            use_reference = 1;
            continue;
        }
        if (!(v = cli_value(cmd, argc, argv, &i)))
            return 2;
        int bad = 0;
        if (!strcmp(a, "--in"))
            in_path = v;
        else if (!strcmp(a, "--out"))
            out_path = v;
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
        else if (!strcmp(a, "--decomp"))
            decomp_s = v;
        else if (!strcmp(a, "--K"))
            bad = cli_int(cmd, a, v, 1, 1000000, &d.K);
        else if (!strcmp(a, "--order-poles"))
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
        else
            return cli_error(cmd, 2, "unknown option '%s' (dakit gauss --help)", a);
        if (bad)
            return bad;
    }
    if (!in_path || !out_path || !sigma_s)
        return cli_error(cmd, 2, "--in, --out and --sigma are required (dakit gauss --help)");
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
    if (decomp_s) {
        const char *p = decomp_s;
        for (;;) {
            size_t n = strcspn(p, "x");
            char piece[32], msg[256];
            long long v;
            if (ndecomp == DK_MAX_DIMS || n == 0 || n >= sizeof piece)
                return cli_error(cmd, 2, "--decomp must be the pieces per axis joined by x (4, 2x2, 1x4), "
                                         "each an integer from 1 to 1000000, not '%s'", decomp_s);
            memcpy(piece, p, n);
            piece[n] = '\0';
            if (cli_parse_integer("--decomp", piece, 1, 1000000, &v, msg, sizeof msg) != 0)
                return cli_error(cmd, 2, "--decomp must be the pieces per axis joined by x (4, 2x2, 1x4), "
                                         "each an integer from 1 to 1000000, not '%s'", decomp_s);
            decomp[ndecomp++] = (int)v;
            if (!p[n])
                break;
            p += n + 1;
        }
    }
    if (cli_options_only)
        return 0;

#ifdef DK_TOOLS_MPI
    {
        /* started by mpirun with more than one rank: the distributed path;
         * otherwise (no launcher, one rank) exactly the single-process one */
        static const char *size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MV2_COMM_WORLD_SIZE"};
        long world = 1;
        for (size_t k = 0; k < sizeof size_vars / sizeof size_vars[0]; k++) {
            const char *e = getenv(size_vars[k]);
            if (e && atol(e) > world)
                world = atol(e);
        }
        int inited = 0;
        MPI_Initialized(&inited);
        if (world > 1 || inited) {
            int size = 1, own = 0;
            if (!inited) {
                MPI_Init(NULL, NULL);
                own = 1;
            }
            MPI_Comm_size(MPI_COMM_WORLD, &size);
            if (size > 1) {
                int rc = run_distributed(cmd, in_path, out_path, &d, dtype_s, axes_s, axes, naxes, sig, nsig,
                                         sigma_s, backend, decomp, ndecomp, use_reference);
                if (own)
                    MPI_Finalize();
                return rc;
            }
            if (own)
                MPI_Finalize();
        }
    }
#endif
    if (decomp_s) {
        long long pieces = 1;
        for (int k = 0; k < ndecomp; k++)
            pieces *= decomp[k];
        if (pieces != 1)
            return cli_error(cmd, 2, "--decomp %s asks for %lld ranks but this is a single process (start "
                                     "it with mpirun -n %lld)", decomp_s, pieces, pieces);
    }

    char err[4200];
    if (output_check(out_path, err, sizeof err) != 0)
        return cli_error(cmd, 1, "%s", err);
    npy_array x;
    if (npy_read(in_path, &x, err, sizeof err) != DK_OK)
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
    if (!axes_s) {
        naxes = x.ndim;
        for (int a = 0; a < naxes; a++)
            axes[a] = a;
    }
    if (nsig != 1 && nsig != naxes) {
        cli_error(cmd, 2, "--sigma takes one value or one per filtered axis (%d), not '%s'", naxes, sigma_s);
        rc = 2;
        goto done;
    }
    for (int k = 0; k < naxes; k++) {
        if (axes[k] >= x.ndim) {
            cli_error(cmd, 2, "axis %ld is out of range: %s has %d axes", axes[k], in_path, x.ndim);
            rc = 2;
            goto done;
        }
        d.axes |= 1u << axes[k];
        d.sigma[axes[k]] = sig[nsig == 1 ? 0 : k];
    }
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

    double t0 = cli_now();
    if (use_reference) {
        if (dk_gauss_reference(&d, x.data, x.data) != DK_OK) {
            cli_error(cmd, 1, "%s", dk_last_error(NULL));
            goto done;
        }
    } else {
        if (dk_context_create(backend, &ctx) != DK_OK) {
            cli_error(cmd, 1, "%s", dk_last_error(NULL));
            goto done;
        }
        if (dk_gauss_plan_create(ctx, &d, &plan) != DK_OK ||
            dk_gauss_execute_host(plan, x.data, x.data) != DK_OK) {
            cli_error(cmd, 1, "%s", dk_last_error(ctx));
            goto done;
        }
    }
    double t1 = cli_now();
    if (npy_write(out_path, &x, err, sizeof err) != DK_OK) {
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
/* Every rank learns whether any failed; if one did, every rank gets the
 * sentence of the lowest failing rank in msg and 1 is returned. */
static int agree(int failed, char *msg, size_t len)
{
    int rank, size, low;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int mine = failed ? rank : size;
    MPI_Allreduce(&mine, &low, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (low == size)
        return 0;
    MPI_Bcast(msg, (int)len, MPI_CHAR, low, MPI_COMM_WORLD);
    msg[len - 1] = '\0';
    return 1;
}

/* This rank's rank among the processes of its node. */
static int local_rank(void)
{
    const char *e = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!e)
        e = getenv("MPI_LOCALRANKID");
    if (e && *e)
        return atoi(e);
    MPI_Comm node;
    int r = 0;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_rank(node, &r);
        MPI_Comm_free(&node);
    }
    return r;
}

/* Each rank its own GPU by its node-local rank, unless DAKIT_DEVICE says
 * otherwise; the cpu backend is left alone. The index wraps around the
 * devices of the backend (or the most any GPU backend has), so several ranks
 * may share one. */
static void choose_device(const char *backend)
{
    const char *dev = getenv("DAKIT_DEVICE");
    int lr = local_rank(); /* collective where it splits: every rank calls it */
    if (dev && *dev)
        return;
    if (!backend || !*backend)
        backend = getenv("DAKIT_BACKEND");
    if (backend && !strcmp(backend, "cpu"))
        return;
    int most = 0, n = dk_backend_count();
    for (int i = 0; i < n; i++) {
        dk_backend_info info;
        if (dk_backend_get(i, &info) != DK_OK || !info.usable || !strcmp(info.name, "cpu"))
            continue;
        if (backend && *backend && strcmp(backend, "auto") && !cli_in_list(backend, info.name))
            continue;
        if (info.device_count > most)
            most = info.device_count;
    }
    if (most < 1)
        return;
    char v[16];
    snprintf(v, sizeof v, "%d", lr % most);
    setenv("DAKIT_DEVICE", v, 1);
}

#define FAILED(...) (snprintf(msg, sizeof msg, __VA_ARGS__), 1)

static int run_distributed(const char *cmd, const char *in_path, const char *out_path, dk_gauss_desc *d,
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
    output o;
    int out_fd = -1, have_output = 0;
    npy_array x;
    memset(&x, 0, sizeof x);
    size_t in_offset = 0;

    if (use_reference)
        return cli_error(cmd, 2, "--reference runs in one process; under mpirun (%d ranks) each rank filters "
                                 "its part on a backend", size);
    if (output_check(out_path, err, sizeof err) != 0)
        failed = FAILED("%s", err);
    else if (npy_read_header(in_path, &x, &in_offset, err, sizeof err) != DK_OK)
        failed = FAILED("%s", err);
    if (agree(failed, msg, sizeof msg))
        return cli_error(cmd, 1, "%s", msg);
    /* from here every rank has the same header: the checks below give the
     * same answer everywhere */
    if (x.ndim < 1 || x.ndim > DK_MAX_DIMS)
        return cli_error(cmd, 1, "%s has %d dimensions; 1, 2 or 3 are supported", in_path, x.ndim);
    d->ndim = x.ndim;
    for (int a = 0; a < x.ndim; a++)
        d->shape[a] = x.shape[a];
    d->dtype = x.dtype;
    if (dtype_s)
        d->dtype = strcmp(dtype_s, "f64") ? DK_F32 : DK_F64;
    if (!axes_s) {
        naxes = x.ndim;
        for (int a = 0; a < naxes; a++)
            axes[a] = a;
    }
    if (nsig != 1 && nsig != naxes)
        return cli_error(cmd, 2, "--sigma takes one value or one per filtered axis (%d), not '%s'", naxes, sigma_s);
    for (int k = 0; k < naxes; k++) {
        if (axes[k] >= x.ndim)
            return cli_error(cmd, 2, "axis %ld is out of range: %s has %d axes", axes[k], in_path, x.ndim);
        d->axes |= 1u << axes[k];
        d->sigma[axes[k]] = sig[nsig == 1 ? 0 : k];
    }
    if (ndecomp) {
        long long pieces = 1;
        for (int k = 0; k < ndecomp; k++)
            pieces *= decomp[k];
        if (ndecomp != x.ndim)
            return cli_error(cmd, 2, "--decomp gives pieces along %d axes but %s has %d", ndecomp, in_path,
                             x.ndim);
        if (pieces != size)
            return cli_error(cmd, 2, "--decomp makes %lld pieces but the job has %d ranks; their number must be "
                                     "the product", pieces, size);
    }
    dk_mpi_part part;
    if (dk_mpi_decompose(MPI_COMM_WORLD, x.ndim, x.shape, ndecomp ? decomp : NULL, &part) != DK_OK)
        return cli_error(cmd, 2, "%s", dk_mpi_last_error());

    choose_device(backend);
    size_t count = 1;
    for (int a = 0; a < x.ndim; a++)
        count *= part.extent[a];
    size_t fsize = dk_dtype_size(x.dtype), esize = dk_dtype_size(d->dtype);
    if (dk_context_create(backend, &ctx) != DK_OK)
        failed = FAILED("rank %d of %d: %s", rank, size, dk_last_error(NULL));
    else if (!(file_box = malloc(count ? count * fsize : 1)) || !(box = malloc(count ? count * esize : 1)))
        failed = FAILED("rank %d of %d: out of memory (its part holds %zu values)", rank, size, count);
    else if (npy_read_box(in_path, &x, in_offset, part.offset, part.extent, file_box, err, sizeof err) != DK_OK)
        failed = FAILED("rank %d of %d: %s", rank, size, err);
    if (agree(failed, msg, sizeof msg))
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
        dk_mpi_gauss_execute_host(plan, box, box) != DK_OK)
        failed = FAILED("%s", dk_mpi_last_error());
    if (agree(failed, msg, sizeof msg))
        goto done;
    double t1 = cli_now();

    /* the output: rank 0 makes the temporary file and writes the header,
     * every rank its rows, rank 0 renames it once all succeeded */
    npy_array y = x;
    y.dtype = d->dtype;
    unsigned char header[1024];
    size_t hbytes = npy_format_header(d->dtype == DK_F64 ? "<f8" : "<f4", y.ndim, y.shape, header, sizeof header);
    size_t total = hbytes + y.count * esize;
    char tmp[4096] = "";
    if (rank == 0) {
        if (output_open(&o, out_path, err, sizeof err) != 0)
            failed = FAILED("%s", err);
        else {
            have_output = 1;
            out_fd = o.fd;
            if (!o.tmp[0])
                failed = FAILED("cannot write %s under mpirun: the ranks write their parts at offsets, which "
                                "needs a regular file", out_path);
            else if (pwrite(o.fd, header, hbytes, 0) != (ssize_t)hbytes || ftruncate(o.fd, (off_t)total) != 0)
                failed = FAILED("writing %s failed: %s", out_path, strerror(errno ? errno : EIO));
            snprintf(tmp, sizeof tmp, "%s", o.tmp);
        }
    }
    if (agree(failed, msg, sizeof msg))
        goto done;
    MPI_Bcast(tmp, sizeof tmp, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank != 0 && (out_fd = open(tmp, O_WRONLY | O_CLOEXEC)) < 0)
        failed = FAILED("rank %d of %d: cannot open %s's temporary file %s: %s", rank, size, out_path, tmp,
                        strerror(errno));
    else if (npy_write_box(out_fd, out_path, &y, hbytes, part.offset, part.extent, box, err, sizeof err) != DK_OK)
        failed = FAILED("rank %d of %d: %s", rank, size, err);
    else if (rank != 0 && fsync(out_fd) != 0)
        failed = FAILED("rank %d of %d: writing %s failed: %s", rank, size, out_path, strerror(errno));
    if (rank != 0 && out_fd >= 0) {
        if (close(out_fd) != 0 && !failed)
            failed = FAILED("rank %d of %d: writing %s failed: %s", rank, size, out_path, strerror(errno));
        out_fd = -1;
    }
    if (agree(failed, msg, sizeof msg))
        goto done;
    if (rank == 0) {
        have_output = 0;
        if (output_commit(&o, err, sizeof err) != 0)
            failed = FAILED("%s", err);
    }
    if (agree(failed, msg, sizeof msg))
        goto done;
    if (rank == 0)
        fprintf(stderr, "dakit gauss: %s -> %s on %d ranks (rank 0: %s, %s), %.3f s including transfers\n",
                in_path, out_path, size, dk_context_backend(ctx), dk_context_device(ctx), t1 - t0);
    rc = 0;
done:
    if (rc)
        cli_error(cmd, 1, "%s", msg);
    if (have_output)
        output_abort(&o);
    dk_mpi_plan_destroy(plan);
    dk_context_destroy(ctx);
    free(file_box);
    free(box);
    return rc;
}
#endif
