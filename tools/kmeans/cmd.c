/* dakit kmeans: k-means of a .npy of points, or the radar pipeline on a
 * RADOLAN composite (texture features on the device, contiguity-weighted
 * clustering, label image and a picture). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/kmeans.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/plot.h"
#include "cli/npy.h"
#include "cli/output.h"
#include "kmeans/radar.h"
#include "kmeans/radolan.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dakit kmeans --radolan FILE[.gz] --k K [--lambda L] [--window W] [--min-dbz Z]\n"
            "                    [--labels L.npy] [--png clusters.png] [options]\n"
            "       dakit kmeans --in X.npy --k K [--init C0.npy] [--iters N] [--tol T]\n"
            "                    [--labels L.npy] [--centroids C.npy] [options]\n"
            "\n"
            "Lloyd's k-means (ties to the lowest index, empty clusters keep their centroid).\n"
            "\n"
            "radar: reads a DWD RADOLAN composite (gzip or plain), masks no data, clutter and\n"
            "pixels below --min-dbz, computes texture features on the device (reflectivity, its\n"
            "local mean and standard deviation by the gauss plan, each standardized), starts\n"
            "from the reflectivity range cut into K equal intervals (each centroid the mean of\n"
            "its interval's pixels) and clusters with the contiguity-weighted cost. The labels\n"
            "are an int32 rows x cols array in the file's row order (row 0 at the south edge),\n"
            "-1 where masked; the picture shows the reflectivity beside the cluster map, north\n"
            "up, in km, with a colour bar and a legend (--png FILE: PNG, or SVG or PDF by the\n"
            "name's extension).\n"
            "  --k K              clusters, 1 to 256 (radar default 6)\n"
            "  --lambda L         weight of the feature distance against contiguity, 0 to 1; 1: no\n"
            "                     contiguity (default 0.7)\n"
            "  --window W         side of the square contiguity window, odd, 1 to 31 pixels (default 5)\n"
            "  --min-dbz Z        pixels below Z dBZ are not clustered (default 5)\n"
            "  --texture-sigma S  Gaussian scale of the local mean and deviation, pixels, > 0 and\n"
            "                     <= 1e7 (default 2)\n"
            "\n"
            "points: X.npy is float32 (n, d); C0.npy float32 (k, d) (default: feature 0's range\n"
            "cut into k equal intervals, each centroid the mean of its interval's points).\n"
            "L.npy gets int32 (n,), C.npy float32 (k, d).\n"
            "\n"
            "  --iters N          iteration limit, 1 to 1000000 (default 20)\n"
            "  --tol T            stop when no centroid moves by T or more, in feature units, >= 0\n"
            "                     (default 0: run --iters iterations)\n"
            "  --backend NAME     cuda, opencl, cpu, auto or a comma list (default: DAKIT_BACKEND/auto)\n"
            "  --variant NAME     one of the backend's variants (`dakit info` lists them; default: the first)\n"
            "  --reference        the serial reference instead of a backend\n");
}

static void report(const dk_kmeans_result *r, double seconds, const char *where)
{
    printf("kmeans: %d iteration(s), objective %.6g, last centroid move %.3g, %zu points clustered, %.3f ms on %s",
           r->iterations, r->objective, r->last_move, r->valid, seconds * 1e3, where);
    if (r->assign_seconds > 0 || r->update_seconds > 0)
        printf(" (assignment %.3f ms, update %.3f ms)", r->assign_seconds * 1e3, r->update_seconds * 1e3);
    printf("\n");
}

int cmd_kmeans(int argc, char **argv)
{
    const char *cmd = "kmeans";
    const char *radolan_path = NULL, *in_path = NULL, *init_path = NULL, *labels_path = NULL;
    const char *centroids_path = NULL, *png_path = NULL, *backend = NULL, *variant = NULL;
    int k = -1, iters = 20, window = 5;
    double lambda = 0.7, tol = 0, min_dbz = 5, tsigma = 2;
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
        if (!strcmp(a, "--radolan"))
            radolan_path = v;
        else if (!strcmp(a, "--in"))
            in_path = v;
        else if (!strcmp(a, "--init"))
            init_path = v;
        else if (!strcmp(a, "--labels"))
            labels_path = v;
        else if (!strcmp(a, "--centroids"))
            centroids_path = v;
        else if (!strcmp(a, "--png"))
            png_path = v;
        else if (!strcmp(a, "--backend"))
            backend = v;
        else if (!strcmp(a, "--variant"))
            variant = v;
        else if (!strcmp(a, "--k"))
            bad = cli_int(cmd, a, v, 1, DK_KMEANS_MAX_K, &k);
        else if (!strcmp(a, "--iters"))
            bad = cli_int(cmd, a, v, 1, 1000000, &iters);
        else if (!strcmp(a, "--window")) {
            bad = cli_int(cmd, a, v, 1, DK_KMEANS_MAX_WINDOW, &window);
            if (!bad && window % 2 == 0)
                return cli_error(cmd, 2, "--window must be an odd integer from 1 to %d, not '%s'",
                                 DK_KMEANS_MAX_WINDOW, v);
        } else if (!strcmp(a, "--lambda"))
            bad = cli_double(cmd, a, v, 0, 1, 0, &lambda);
        else if (!strcmp(a, "--tol"))
            bad = cli_double(cmd, a, v, 0, INFINITY, 0, &tol);
        else if (!strcmp(a, "--min-dbz"))
            bad = cli_double(cmd, a, v, -INFINITY, INFINITY, 0, &min_dbz);
        else if (!strcmp(a, "--texture-sigma"))
            bad = cli_double(cmd, a, v, 0, DK_GAUSS_MAX_SIGMA, CLI_OPEN_LO, &tsigma);
        else
            return cli_error(cmd, 2, "unknown option '%s' (dakit kmeans --help)", a);
        if (bad)
            return bad;
    }
    if (!radolan_path == !in_path)
        return cli_error(cmd, 2, "give either --radolan FILE or --in X.npy (dakit kmeans --help)");
    if (radolan_path && k < 0)
        k = 6;
    if (k < 1)
        return cli_error(cmd, 2, "--k is required with --in: a number of clusters from 1 to %d", DK_KMEANS_MAX_K);
    if (cli_options_only)
        return 0;

    char err[4200];
    /* outputs first: a typo in a path costs no computation */
    const char *outs[3] = {labels_path, centroids_path, png_path};
    for (int o = 0; o < 3; o++)
        if (outs[o] && (o == 2 ? plot_check_path(outs[o], err, sizeof err) : output_check(outs[o], err, sizeof err)))
            return cli_error(cmd, 1, "%s", err);
    dk_context *ctx = NULL;
    if (!use_reference && dk_context_create(backend, &ctx) != DK_OK)
        return cli_error(cmd, 1, "%s", dk_last_error(NULL));
    int rc = 1;

    if (radolan_path) {
        radolan r;
        if (radolan_read(radolan_path, &r, err, sizeof err) != DK_OK) {
            dk_context_destroy(ctx);
            return cli_error(cmd, 1, "%s", err);
        }
        printf("%s: RADOLAN %s, %zu x %zu, %zu pixels with data, %zu clutter, max %.1f %s\n", radolan_path,
               r.product, r.rows, r.cols, r.data_pixels, r.clutter_pixels, (double)r.max_value, r.unit);
        radar_options o = {k, lambda, window, min_dbz, tsigma, iters, tol, variant};
        radar_result out;
        if (radar_cluster(ctx, &r, &o, &out, err, sizeof err) != DK_OK) {
            cli_error(cmd, 1, "%s", err);
        } else {
            report(&out.kmeans, out.seconds, use_reference ? "the serial reference" : dk_context_device(ctx));
            printf("texture features %.3f ms, clustering %.3f ms\n", out.feature_seconds * 1e3,
                   out.cluster_seconds * 1e3);
            for (int c = 0; c < out.k; c++)
                printf("  cluster %d: %zu pixels, mean %.1f dBZ, local mean %.1f, local std %.2f\n", c,
                       out.sizes[c], out.mean_value[c], out.mean_local[c], out.mean_std[c]);
            size_t shape[2] = {r.rows, r.cols};
            rc = 0;
            if (labels_path && npy_write_typed(labels_path, "<i4", 4, 2, shape, out.labels, err, sizeof err))
                rc = cli_error(cmd, 1, "%s", err);
            const char *base = strrchr(radolan_path, '/');
            if (png_path && radar_picture(&r, &out, &o, NULL, base ? base + 1 : radolan_path, png_path, err, sizeof err))
                rc = cli_error(cmd, 1, "%s", err);
            else if (png_path)
                printf("wrote %s\n", png_path);
            radar_result_free(&out);
        }
        radolan_free(&r);
        dk_context_destroy(ctx);
        return rc;
    }

    npy_array X = {0}, C0 = {0};
    if (npy_read(in_path, &X, err, sizeof err) != DK_OK) {
        dk_context_destroy(ctx);
        return cli_error(cmd, 1, "%s", err);
    }
    dk_kmeans_desc d;
    dk_kmeans_desc_init(&d);
    int32_t *labels = NULL;
    float *cent = NULL, *init = NULL;
    dk_plan *plan = NULL;
    if (X.dtype != DK_F32 || X.ndim < 1 || X.ndim > 2) {
        cli_error(cmd, 1, "%s must be a float32 array of shape (n, d) or (n,)", in_path);
        goto out;
    }
    if (X.ndim == 2 && (X.shape[1] == 0 || X.shape[1] > DK_KMEANS_MAX_D)) {
        cli_error(cmd, 1, "%s has d = %zu features per point; k-means takes 1 to %d", in_path, X.shape[1],
                  DK_KMEANS_MAX_D);
        goto out;
    }
    if (X.shape[0] < (size_t)k) {
        cli_error(cmd, 1, "%s holds %zu points, fewer than --k %d clusters", in_path, X.shape[0], k);
        goto out;
    }
    d.n = X.shape[0];
    d.d = X.ndim == 2 ? (int)X.shape[1] : 1;
    d.k = k;
    d.max_iters = iters;
    d.tol = tol;
    d.variant = variant;
    labels = malloc(d.n * sizeof *labels);
    cent = malloc((size_t)d.k * d.d * sizeof *cent);
    init = malloc((size_t)d.k * d.d * sizeof *init);
    if (!labels || !cent || !init) {
        cli_error(cmd, 1, "out of memory");
        goto out;
    }
    if (init_path) {
        if (npy_read(init_path, &C0, err, sizeof err) != DK_OK) {
            cli_error(cmd, 1, "%s", err);
            goto out;
        }
        if (C0.dtype != DK_F32 || C0.count != (size_t)d.k * d.d ||
            (C0.ndim == 2 && (C0.shape[0] != (size_t)d.k || C0.shape[1] != (size_t)d.d))) {
            cli_error(cmd, 1, "%s must be float32 of shape (%d, %d) for --k %d and %d features", init_path, d.k,
                      d.d, d.k, d.d);
            goto out;
        }
        memcpy(init, C0.data, (size_t)d.k * d.d * sizeof *init);
    } else if (dk_kmeans_initial_centroids(&d, X.data, NULL, 0, init) != DK_OK) {
        cli_error(cmd, 1, "%s", dk_last_error(NULL));
        goto out;
    }
    dk_kmeans_result res;
    double t0 = cli_now();
    dk_status st;
    if (use_reference)
        st = dk_kmeans_reference(&d, X.data, NULL, init, labels, cent, &res);
    else if ((st = dk_kmeans_plan_create(ctx, &d, &plan)) == DK_OK)
        st = dk_kmeans_execute_host(plan, X.data, NULL, init, labels, cent, &res);
    if (st != DK_OK) {
        cli_error(cmd, 1, "%s", dk_last_error(use_reference ? NULL : ctx));
        goto out;
    }
    report(&res, cli_now() - t0, use_reference ? "the serial reference" : dk_context_device(ctx));
    rc = 0;
    if (labels_path && npy_write_typed(labels_path, "<i4", 4, 1, &d.n, labels, err, sizeof err))
        rc = cli_error(cmd, 1, "%s", err);
    if (centroids_path) {
        npy_array C = {.dtype = DK_F32, .ndim = 2, .shape = {(size_t)d.k, (size_t)d.d},
                       .count = (size_t)d.k * d.d, .data = cent};
        if (npy_write(centroids_path, &C, err, sizeof err) != DK_OK)
            rc = cli_error(cmd, 1, "%s", err);
    }
out:
    dk_plan_destroy(plan);
    dk_context_destroy(ctx);
    npy_free(&X);
    npy_free(&C0);
    free(labels);
    free(cent);
    free(init);
    return rc;
}
