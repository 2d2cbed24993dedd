#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/npy.h"
#include "cli/output.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dakit gauss --in X.npy --out Y.npy --sigma S[,S...] [options]\n"
            "\n"
            "Gaussian convolution by the K-iterated first-order recursive filter, along\n"
            "the chosen axes of a 1-D, 2-D or 3-D float32/float64 C-order .npy array.\n"
            "\n"
            "  --in X.npy            the input array\n"
            "  --out Y.npy           the result: X's shape, in the compute precision\n"
            "  --sigma S[,S,...]     standard deviation in grid units, one for all axes or one per\n"
            "                        filtered axis\n"
            "  --K N                 filter iterations per axis, each a forward and a backward pass,\n"
            "                        1 to 1000000; more come closer to the Gaussian (default 4)\n"
            "  --axes A[,A...]       axes to filter, numbered from 0 (default: all)\n"
            "  --boundary zero|constant   values beyond the ends of a line: zero, or the end value\n"
            "                        continued (default zero)\n"
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
            "  --reference           use the serial reference instead of a backend\n");
}

int cmd_gauss(int argc, char **argv)
{
    const char *cmd = "gauss";
    const char *in_path = NULL, *out_path = NULL, *sigma_s = NULL, *axes_s = NULL, *backend = NULL;
    const char *dtype_s = NULL;
    dk_gauss_desc d;
    dk_gauss_desc_init(&d);
    int use_reference = 0;
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
        else if (!strcmp(a, "--K"))
            bad = cli_int(cmd, a, v, 1, 1000000, &d.K);
        else if (!strcmp(a, "--boundary")) {
            if (!strcmp(v, "zero"))
                d.boundary = DK_BOUNDARY_ZERO;
            else if (!strcmp(v, "constant"))
                d.boundary = DK_BOUNDARY_CONSTANT;
            else
                return cli_error(cmd, 2, "--boundary must be zero or constant, not '%s'", v);
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
    if (cli_options_only)
        return 0;

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
