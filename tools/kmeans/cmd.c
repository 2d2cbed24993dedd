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
#include "cli/dist.h"
#include "cli/netcdf.h"
#include "cli/netcdf_dist.h"
#include "cli/plot.h"
#include "cli/npy.h"
#include "cli/output.h"
#include "kmeans/labels_nc.h"
#include "kmeans/odim.h"
#include "kmeans/polar.h"
#include "kmeans/radar.h"
#include <dakit/radolan.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dakit kmeans --radolan FILE[.gz] --k K [--lambda L] [--window W] [--min-dbz Z]\n"
            "                    [--labels L.npy|L.nc] [--png clusters.png] [options]\n"
            "       dakit kmeans --odim VOLUME.h5 [--quantity DBZH] [--sweep N] --k K [radar options]\n"
            "                    [--labels L.npy|L.nc] [--png ppi.png] [options]\n"
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
            "-1 where masked (everywhere in a dry scan: fewer pixels at or above --min-dbz than\n"
            "K, which exits 0); the picture shows the reflectivity beside the cluster map, the\n"
            "clusters coloured by mean reflectivity, with latitude/longitude lines, coasts and\n"
            "borders where PROJ and GSHHG are installed, a colour bar and a legend (--png FILE:\n"
            "PNG, or SVG or PDF by the name's extension). --labels L.nc writes CF netCDF on\n"
            "DWD's polar-stereographic grid (x/y in m, lat/lon per pixel, product, time and unit\n"
            "as attributes).\n"
            "\n"
            "odim: one sweep of an ODIM_H5 polar volume (OPERA) clustered on its polar grid,\n"
            "rays x bins, the contiguity window and the texture wrapping in azimuth\n"
            "(docs/formats.md); labels int32 nrays x nbins (.nc: with azimuth, range and\n"
            "lat/lon), the picture a PPI, north up, with range rings and the radar's site.\n"
            "  --quantity Q       the ODIM quantity (default DBZH)\n"
            "  --sweep N          the sweep, /datasetN, from 1 (default 1)\n"
            "  --k K              clusters, 1 to 256 (radar default 6)\n"
            "  --lambda L         weight of the feature distance against contiguity, 0 to 1; 1: no\n"
            "                     contiguity (default 0.7)\n"
            "  --window W         side of the square contiguity window, odd, 1 to 31 pixels (default 5)\n"
            "  --min-dbz Z        pixels below Z dBZ are not clustered (default 5)\n"
            "  --texture-sigma S  Gaussian scale of the local mean and deviation, pixels, > 0 and\n"
            "                     <= 1e7 (default 2)\n"
            "\n"
            "points: X.npy is float32 (n, d), or a netCDF variable X.nc:VAR (or --var VAR), any\n"
            "float type; C0.npy float32 (k, d) (default: feature 0's range\n"
            "cut into k equal intervals, each centroid the mean of its interval's points).\n"
            "L.npy gets int32 (n,), C.npy float32 (k, d); .nc names write netCDF.\n"
            "\n"
            "  --iters N          iteration limit, 1 to 1000000 (default 20)\n"
            "  --tol T            stop when no centroid moves by T or more, in feature units, >= 0\n"
            "                     (default 0: run --iters iterations)\n"
            "  --backend NAME     cuda, opencl, cpu, auto or a comma list (default: DAKIT_BACKEND/auto)\n"
            "  --variant NAME     one of the backend's variants (`dakit info` lists them; default: the first)\n"
            "  --reference        the serial reference instead of a backend\n"
            "\n"
            "Under mpirun with more than one rank (--in and --radolan): with --in each rank reads\n"
            "only its contiguous range of points and writes it into a .npy (a .nc output is gathered\n"
            "and written by rank 0); with --radolan every rank reads the\n"
            "file and computes the features of its band of rows (standardized by statistics summed\n"
            "over the ranks), and rank 0 writes the labels and the picture. The iterations reduce\n"
            "the per-cluster sums over the ranks.\n");
}

#ifdef DK_TOOLS_MPI
static int run_distributed(const char *in_path, const char *var, const char *init_path, const char *labels_path,
                           const char *centroids_path, const char *backend, const char *variant, int k, int iters,
                           double tol, int use_reference);
static int run_radar_distributed(const char *path, const char *labels_path, const char *png_path,
                                 const char *backend, const radar_options *o, int use_reference);
#endif

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
    const char *odim_path = NULL, *quantity = "DBZH", *var = NULL;
    int sweep = 1;
    int k = -1, iters = 20, window = 5;
    double lambda = 0.7, tol = 0, min_dbz = 5, tsigma = 2;
    int use_reference = 0;
    static const struct option option_table[] = {CLI_FLAG("help"), CLI_FLAG("reference"), CLI_VALUE("radolan"),
        CLI_VALUE("in"), CLI_VALUE("odim"), CLI_VALUE("quantity"), CLI_VALUE("sweep"), CLI_VALUE("var"),
        CLI_VALUE("init"), CLI_VALUE("labels"), CLI_VALUE("centroids"), CLI_VALUE("png"), CLI_VALUE("backend"),
        CLI_VALUE("variant"), CLI_VALUE("k"), CLI_VALUE("iters"), CLI_VALUE("window"), CLI_VALUE("lambda"),
        CLI_VALUE("tol"), CLI_VALUE("min-dbz"), CLI_VALUE("texture-sigma"), {0}};
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
        if (!strcmp(a, "--radolan"))
            radolan_path = v;
        else if (!strcmp(a, "--in"))
            in_path = v;
        else if (!strcmp(a, "--odim"))
            odim_path = v;
        else if (!strcmp(a, "--quantity"))
            quantity = v;
        else if (!strcmp(a, "--sweep"))
            bad = cli_int(cmd, a, v, 1, 1000, &sweep);
        else if (!strcmp(a, "--var"))
            var = v;
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
        if (bad)
            return bad;
    }
    if (more)
        return more;
    if (!!radolan_path + !!in_path + !!odim_path != 1)
        return cli_error(cmd, 2, "give one of --radolan FILE, --odim FILE or --in X.npy (dakit kmeans --help)");
    if (odim_path && !odim_available())
        return cli_error(cmd, 2, "--odim: this dakit was built without HDF5, so without ODIM_H5 support (install "
                                 "libhdf5-dev, e.g. by tools/setup, and build again)");
    if ((radolan_path || odim_path) && k < 0)
        k = 6;
    if (k < 1)
        return cli_error(cmd, 2, "--k is required with --in: a number of clusters from 1 to %d", DK_KMEANS_MAX_K);
    if (in_path && png_path)
        return cli_error(cmd, 2, "--png draws the radar picture of --radolan or --odim; points from --in have no "
                                 "picture (write --labels and --centroids and plot them)");
    if (cli_options_only)
        return 0;
#ifdef DK_TOOLS_MPI
    {
        int own;
        if (dist_begin(&own)) {
            radar_options o = {k, lambda, window, min_dbz, tsigma, iters, tol, variant};
            int rc = odim_path ? cli_error(cmd, 2, "--odim runs in one process; under mpirun give --radolan or --in")
                     : radolan_path ? run_radar_distributed(radolan_path, labels_path, png_path, backend, &o,
                                                            use_reference)
                                    : run_distributed(in_path, var, init_path, labels_path, centroids_path, backend, variant,
                                                    k, iters, tol, use_reference);
            dist_end(own);
            return rc;
        }
    }
#endif

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

    if (odim_path) {
        radar_options o = {k, lambda, window, min_dbz, tsigma, iters, tol, variant};
        rc = polar_kmeans(ctx, odim_path, quantity, sweep, &o, labels_path, png_path);
        dk_context_destroy(ctx);
        return rc;
    }
    if (radolan_path) {
        dk_radolan r;
        if (dk_radolan_read(radolan_path, &r) != DK_OK) {
            snprintf(err, sizeof err, "%s", dk_last_error(NULL));
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
            if (out.dry[0]) /* a dry scan is an outcome: labels of -1 and a picture that says so */
                printf("%s: every label is -1\n", out.dry);
            else
                report(&out.kmeans, out.seconds, use_reference ? "the serial reference" : dk_context_device(ctx));
            printf("texture features %.3f ms, clustering %.3f ms\n", out.feature_seconds * 1e3,
                   out.cluster_seconds * 1e3);
            for (int c = 0; c < out.k && !out.dry[0]; c++)
                printf("  cluster %d: %zu pixels, mean %.1f dBZ, local mean %.1f, local std %.2f\n", c,
                       out.sizes[c], out.mean_value[c], out.mean_local[c], out.mean_std[c]);
            rc = 0;
            if (labels_path && radolan_labels_write(labels_path, radolan_path, &r, &out, &o, err, sizeof err))
                rc = cli_error(cmd, 1, "%s", err);
            const char *base = strrchr(radolan_path, '/');
            if (png_path && radar_picture(&r, &out, &o, NULL, base ? base + 1 : radolan_path, png_path, err, sizeof err))
                rc = cli_error(cmd, 1, "%s", err);
            else if (png_path)
                printf("wrote %s\n", png_path);
            radar_result_free(&out);
        }
        dk_radolan_free(&r);
        dk_context_destroy(ctx);
        return rc;
    }

    npy_array X = {0}, C0 = {0};
    array_origin origin;
    if (array_read(in_path, var, &X, &origin, err, sizeof err) != DK_OK) {
        dk_context_destroy(ctx);
        return cli_error(cmd, 1, "%s", err);
    }
    if (origin.netcdf && X.dtype == DK_F64) { /* netCDF's doubles and integers: the features are float32 */
        float *f = malloc((X.count ? X.count : 1) * sizeof *f);
        for (size_t i = 0; f && i < X.count; i++)
            f[i] = (float)((double *)X.data)[i];
        if (f) {
            free(X.data);
            X.data = f;
            X.dtype = DK_F32;
        }
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
    if (labels_path && array_write(labels_path, "labels", ARRAY_I32, 1, &d.n, labels, &origin, 0, err, sizeof err))
        rc = cli_error(cmd, 1, "%s", err);
    if (centroids_path) {
        npy_array C = {.dtype = DK_F32, .ndim = 2, .shape = {(size_t)d.k, (size_t)d.d},
                       .count = (size_t)d.k * d.d, .data = cent};
        if (array_write(centroids_path, "centroids", ARRAY_F32, 2, C.shape, C.data, NULL, 0, err, sizeof err) != DK_OK)
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

#ifdef DK_TOOLS_MPI
#define FAILED(...) (snprintf(msg, sizeof msg, __VA_ARGS__), 1)

/* The paper's initial centroids (dk_kmeans_initial_centroids on feature 0)
 * from every rank's points (mask NULL: all count): the range by a min and max
 * over the ranks, the interval sums (float64) and counts added over the
 * ranks. */
static void initial_centroids(const dk_kmeans_desc *d, const float *x, const uint8_t *mask, size_t npts,
                              float *init)
{
    size_t kd = (size_t)d->k * d->d;
    float lohi[2] = {INFINITY, INFINITY}, r[2]; /* lo and -hi */
    for (size_t i = 0; i < npts; i++) {
        if (mask && !mask[i])
            continue;
        float v = x[i * d->d];
        lohi[0] = v < lohi[0] ? v : lohi[0];
        lohi[1] = -v < lohi[1] ? -v : lohi[1];
    }
    MPI_Allreduce(lohi, r, 2, MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
    float lo = r[0], hi = -r[1];
    double width = ((double)hi - (double)lo) / d->k;
    double *sum = calloc(kd + (size_t)d->d + (size_t)d->k, sizeof *sum); /* sums, all points, counts */
    for (size_t i = 0; i < npts; i++) {
        if (mask && !mask[i])
            continue;
        double v = x[i * d->d];
        int c = width > 0 ? (int)((v - lo) / width) : 0;
        c = c < 0 ? 0 : c >= d->k ? d->k - 1 : c;
        sum[kd + (size_t)d->d + (size_t)c] += 1;
        for (int f = 0; f < d->d; f++) {
            sum[(size_t)c * d->d + f] += x[i * d->d + f];
            sum[kd + f] += x[i * d->d + f];
        }
    }
    MPI_Allreduce(MPI_IN_PLACE, sum, (int)(kd + (size_t)d->d + (size_t)d->k), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    const double *count = sum + kd + d->d;
    double total = 0;
    for (int c = 0; c < d->k; c++)
        total += count[c];
    for (int c = 0; c < d->k; c++)
        for (int f = 0; f < d->d; f++) {
            size_t j = (size_t)c * d->d + f;
            if (count[c] > 0)
                init[j] = (float)(sum[j] / count[c]);
            else if (f == 0)
                init[j] = (float)(lo + (c + 0.5) * width);
            else
                init[j] = (float)(sum[kd + f] / total);
        }
    free(sum);
}

/* A netCDF output under mpirun: rank 0 writes the gathered array as one
 * process would */
typedef struct kmeans_output {
    array_kind kind;
    int ndim;
    const size_t *shape;
    const char *name;
    const array_origin *like;
} kmeans_output;

static int write_whole(const char *path, const void *whole, void *arg, char *err, size_t len)
{
    const kmeans_output *k = arg;
    return array_write(path, k->name, k->kind, k->ndim, k->shape, whole, k->like, 0, err, len) != DK_OK;
}

/* kmeans --in with every rank on its own contiguous range of points. */
static int run_distributed(const char *in_path, const char *var, const char *init_path, const char *labels_path,
                           const char *centroids_path, const char *backend, const char *variant, int k, int iters,
                           double tol, int use_reference)
{
    const char *cmd = "kmeans";
    int rank, size, failed = 0, rc = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (use_reference)
        return cli_error(cmd, 2, "--reference runs in one process; under mpirun (%d ranks) each rank clusters its "
                                 "points on a backend", size);
    char msg[4400] = "", err[4200];
    npy_array X = {0}, C0 = {0};
    array_source src;
    array_origin origin;
    void *file_pts = NULL;
    float *pts = NULL, *init = NULL, *cent = NULL;
    int32_t *labels = NULL;
    dk_context *ctx = NULL;
    dk_mpi_plan *plan = NULL;
    const char *outs[2] = {labels_path, centroids_path};
    for (int o = 0; o < 2 && !failed; o++)
        if (outs[o] && output_check(outs[o], err, sizeof err) != 0)
            failed = FAILED("%s", err);
    if (!failed && array_source_open(&src, in_path, var, &origin, err, sizeof err) != DK_OK)
        failed = FAILED("%s", err);
    if (dist_agree(failed, msg, sizeof msg))
        goto done;
    X = src.hdr;
    /* the same header on every rank (or all stop): the checks below agree by themselves */
    if (dist_same_header(in_path, X.dtype, X.ndim, X.shape, msg, sizeof msg))
        goto done;
    if ((X.dtype != DK_F32 && !src.netcdf) || X.ndim < 1 || X.ndim > 2) {
        failed = FAILED("%s must be a float32 array of shape (n, d) or (n,)", in_path);
        goto done;
    }
    if (X.ndim == 2 && (X.shape[1] == 0 || X.shape[1] > DK_KMEANS_MAX_D)) {
        failed = FAILED("%s has d = %zu features per point; k-means takes 1 to %d", in_path, X.shape[1], DK_KMEANS_MAX_D);
        goto done;
    }
    if (X.shape[0] < (size_t)k) {
        failed = FAILED("%s holds %zu points, fewer than --k %d clusters", in_path, X.shape[0], k);
        goto done;
    }
    dk_kmeans_desc d;
    dk_kmeans_desc_init(&d);
    d.n = X.shape[0];
    d.d = X.ndim == 2 ? (int)X.shape[1] : 1;
    d.k = k;
    d.max_iters = iters;
    d.tol = tol;
    d.variant = variant;
    dk_mpi_part part;
    if (dist_decompose(cmd, in_path, 1, &d.n, NULL, 0, &part)) {
        rc = 2;
        msg[0] = '\0';
        goto done;
    }
    size_t npts = part.extent[0], kd = (size_t)d.k * d.d;
    size_t off[2] = {part.offset[0], 0}, ext[2] = {npts, (size_t)d.d};
    dist_choose_device(backend);
    if (dk_context_create(backend, &ctx) != DK_OK)
        failed = FAILED("rank %d of %d: %s", rank, size, dk_last_error(NULL));
    else if (!(pts = malloc(npts ? npts * d.d * sizeof *pts : 1)) || !(labels = malloc(npts ? npts * 4 : 1)) ||
             !(init = malloc(kd * sizeof *init)) || !(cent = malloc(kd * sizeof *cent)))
        failed = FAILED("rank %d of %d: out of memory for its %zu points", rank, size, npts);
    else if (X.dtype == DK_F64 && !(file_pts = malloc(npts ? npts * d.d * sizeof(double) : 1)))
        failed = FAILED("rank %d of %d: out of memory for its %zu points", rank, size, npts);
    else if (array_source_read_box(&src, off, ext, file_pts ? file_pts : pts, err, sizeof err) != DK_OK)
        failed = FAILED("rank %d of %d: %s", rank, size, err);
    for (size_t i = 0; !failed && file_pts && i < npts * d.d; i++) /* netCDF's doubles: the features are float32 */
        pts[i] = (float)((double *)file_pts)[i];
    for (size_t i = 0; !failed && i < npts * d.d; i++)
        if (!isfinite(pts[i]))
            failed = FAILED("kmeans: feature %d of point %zu is %g; every feature must be a finite number",
                            (int)(i % d.d), part.offset[0] + i / d.d, (double)pts[i]);
    if (!failed && init_path) {
        if (npy_read(init_path, &C0, err, sizeof err) != DK_OK)
            failed = FAILED("%s", err);
        else if (C0.dtype != DK_F32 || C0.count != kd ||
                 (C0.ndim == 2 && (C0.shape[0] != (size_t)d.k || C0.shape[1] != (size_t)d.d)))
            failed = FAILED("%s must be float32 of shape (%d, %d) for --k %d and %d features", init_path, d.k, d.d,
                            d.k, d.d);
        else
            memcpy(init, C0.data, kd * sizeof *init);
    }
    if (dist_agree(failed, msg, sizeof msg))
        goto done;
    if (init_path && dist_same_bytes(init_path, init, kd * sizeof *init, msg, sizeof msg))
        goto done;
    if (!init_path)
        initial_centroids(&d, pts, NULL, npts, init);

    dk_kmeans_result res;
    double t0 = cli_now();
    dk_status st = dk_mpi_kmeans_plan_create(ctx, MPI_COMM_WORLD, &d, &part, &plan);
    if (st == DK_OK)
        st = dk_mpi_kmeans_execute_host(plan, pts, NULL, init, labels, cent, &res);
    if (st != DK_OK) /* collective: on failure every rank has the same sentence */
        failed = FAILED("%s", dk_mpi_last_error());
    if (dist_agree(failed, msg, sizeof msg))
        goto done;
    double seconds = cli_now() - t0;
    size_t cshape[2] = {(size_t)d.k, (size_t)d.d};
    kmeans_output lo = {ARRAY_I32, 1, &d.n, "labels", &origin}, co = {ARRAY_F32, 2, cshape, "centroids", NULL};
    if (labels_path &&
        dist_write(labels_path, "<i4", 4, 1, &d.n, 1, &d.n, off, ext, labels, write_whole, &lo, msg, sizeof msg))
        goto done;
    if (centroids_path &&
        dist_write_root(centroids_path, "<f4", 4, 2, cshape, cent, write_whole, &co, msg, sizeof msg))
        goto done;
    if (rank == 0) {
        char where[300];
        snprintf(where, sizeof where, "%d ranks (rank 0: %s)", size, dk_context_device(ctx));
        report(&res, seconds, where);
    }
    rc = 0;
done:
    if (rc && msg[0])
        cli_error(cmd, 1, "%s", msg);
    dk_mpi_plan_destroy(plan);
    dk_context_destroy(ctx);
    npy_free(&C0);
    free(file_pts);
    free(pts);
    free(labels);
    free(init);
    free(cent);
    return rc;
}

/* kmeans --radolan with every rank on a band of image rows: each reads the
 * (small) file, computes the features of its band (radar_band_features),
 * standardizes them with the statistics of the whole grid (the band sums
 * added over the ranks in float64, then kmeans.h's formulas), and clusters
 * with the contiguity cost in the layer; rank 0 gathers the labels and
 * writes them and the picture as one process would. */
static int run_radar_distributed(const char *path, const char *labels_path, const char *png_path,
                                 const char *backend, const radar_options *o, int use_reference)
{
    const char *cmd = "kmeans";
    const size_t F = RADAR_FEATURES;
    int rank, size, failed = 0, rc = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (use_reference)
        return cli_error(cmd, 2, "--reference runs in one process; under mpirun (%d ranks) each rank clusters its "
                                 "band on a backend", size);
    char msg[4400] = "", err[4200];
    dk_radolan r;
    int have_r = 0;
    float *feat = NULL;
    uint8_t *mask = NULL;
    int *counts = NULL, *displs = NULL;
    dk_context *ctx = NULL;
    dk_mpi_plan *plan = NULL;
    radar_result out;
    memset(&out, 0, sizeof out);
    out.k = o->k;
    if (labels_path && output_check(labels_path, err, sizeof err) != 0)
        failed = FAILED("%s", err);
    else if (png_path && plot_check_path(png_path, err, sizeof err) != 0)
        failed = FAILED("%s", err);
    else if (dk_radolan_read(path, &r) != DK_OK)
        failed = FAILED("%s", dk_last_error(NULL));
    else
        have_r = 1;
    if (!failed && (r.rows * r.cols > (size_t)INT32_MAX))
        failed = FAILED("%s: a %zu x %zu grid is too large to gather on rank 0", path, r.rows, r.cols);
    if (dist_agree(failed, msg, sizeof msg))
        goto done;
    /* every rank filters its band from its own copy: the grids and values must be rank 0's */
    size_t grid[2] = {r.rows, r.cols};
    if (dist_same_header(path, DK_F32, 2, grid, msg, sizeof msg) ||
        dist_same_bytes(path, r.value, r.rows * r.cols * sizeof *r.value, msg, sizeof msg))
        goto done;
    const size_t rows = r.rows, cols = r.cols, n = rows * cols, kf = (size_t)o->k * F;
    dk_mpi_part rpart;
    if (dist_decompose(cmd, path, 1, &rows, NULL, 0, &rpart)) {
        rc = 2;
        msg[0] = '\0';
        goto done;
    }
    const size_t row0 = rpart.offset[0], nrows = rpart.extent[0], nb = nrows * cols;
    if (rank == 0)
        printf("%s: RADOLAN %s, %zu x %zu, %zu pixels with data, %zu clutter, max %.1f %s; %d ranks, bands of %zu "
               "rows\n", path, r.product, rows, cols, r.data_pixels, r.clutter_pixels, (double)r.max_value, r.unit,
               size, (rows + (size_t)size - 1) / (size_t)size);
    dist_choose_device(backend);
    double sums[1 + 2 * RADAR_FEATURES];
    double t0 = cli_now();
    if (dk_context_create(backend, &ctx) != DK_OK)
        failed = FAILED("rank %d of %d: %s", rank, size, dk_last_error(NULL));
    else if (!(feat = malloc(nb ? nb * F * sizeof *feat : 1)) || !(mask = malloc(nb ? nb : 1)) ||
             !(out.labels = malloc((rank == 0 ? n : nb ? nb : 1) * sizeof *out.labels)) ||
             !(out.centroids = malloc(kf * sizeof *out.centroids)) ||
             !(counts = malloc((size_t)size * sizeof *counts)) || !(displs = malloc((size_t)size * sizeof *displs)))
        failed = FAILED("rank %d of %d: out of memory for its %zu rows", rank, size, nrows);
    else if (radar_band_features(ctx, r.value, rows, cols, row0, nrows, o, feat, mask, sums, err, sizeof err) !=
             DK_OK)
        failed = FAILED("rank %d of %d: %s", rank, size, err);
    if (dist_agree(failed, msg, sizeof msg))
        goto done;

    /* kmeans.h's standardization with the statistics of the whole grid */
    MPI_Allreduce(MPI_IN_PLACE, sums, (int)(1 + 2 * F), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    dk_kmeans_texture_stats stats;
    stats.valid = (size_t)sums[0];
    for (size_t j = 0; j < F; j++) {
        stats.mean[j] = stats.valid ? sums[1 + j] / (double)stats.valid : 0.0;
        double var = stats.valid ? sums[1 + F + j] / (double)stats.valid - stats.mean[j] * stats.mean[j] : 0.0;
        stats.sd[j] = var > 1e-12 ? sqrt(var) : 1.0;
    }
    /* a dry scan (the same sums everywhere: every rank sees it): labels of -1, no clustering */
    const int dry = stats.valid < (size_t)o->k;
    if (dry) {
        for (size_t i = 0; i < nb; i++)
            out.labels[i] = -1;
        for (size_t j = 0; j < kf; j++)
            out.centroids[j] = NAN;
        snprintf(out.dry, sizeof out.dry, "a dry scan: %zu pixel(s) at or above %g, fewer than k = %d; nothing "
                 "clustered", stats.valid, o->min_value, o->k);
    }
    for (size_t i = 0; i < nb; i++)
        for (size_t j = 0; j < F; j++) {
            float *p = &feat[i * F + j];
            *p = mask[i] ? (float)((*p - stats.mean[j]) / stats.sd[j]) : 0.0f;
        }
    dk_kmeans_desc d;
    dk_kmeans_desc_init(&d);
    d.n = n;
    d.d = (int)F;
    d.k = o->k;
    d.max_iters = o->iters;
    d.tol = o->tol;
    d.variant = o->variant;
    d.rows = rows;
    d.cols = cols;
    d.lambda = o->lambda;
    d.window = o->window;
    float *init = out.centroids; /* init, then the centroids in place */
    if (!dry)
        initial_centroids(&d, feat, mask, nb, init);
    double t1 = cli_now();
    /* the layer's parts: image rows with the contiguity cost, else points */
    dk_mpi_part part = rpart;
    if (!(o->lambda < 1)) {
        part.offset[0] = row0 * cols;
        part.extent[0] = nb;
    }
    dk_status st = dry ? DK_OK : dk_mpi_kmeans_plan_create(ctx, MPI_COMM_WORLD, &d, &part, &plan);
    if (st == DK_OK && !dry)
        st = dk_mpi_kmeans_execute_host(plan, feat, mask, init, out.labels, out.centroids, &out.kmeans);
    if (st != DK_OK)
        failed = FAILED("%s", dk_mpi_last_error());
    if (dist_agree(failed, msg, sizeof msg))
        goto done;
    double t2 = cli_now();

    /* per-cluster sizes and means in physical units, added over the ranks */
    double *acc = calloc((size_t)o->k * (1 + F), sizeof *acc);
    out.sizes = calloc((size_t)o->k, sizeof *out.sizes);
    out.mean_value = calloc((size_t)o->k, sizeof(double));
    out.mean_local = calloc((size_t)o->k, sizeof(double));
    out.mean_std = calloc((size_t)o->k, sizeof(double));
    failed = !acc || !out.sizes || !out.mean_value || !out.mean_local || !out.mean_std;
    if (!failed) {
        for (size_t i = 0; i < nb; i++) {
            int l = out.labels[i];
            if (l < 0)
                continue;
            acc[(size_t)l * (1 + F)] += 1;
            for (size_t f = 0; f < F; f++)
                acc[(size_t)l * (1 + F) + 1 + f] += feat[i * F + f] * stats.sd[f] + stats.mean[f];
        }
    }
    if (dist_agree(failed ? FAILED("rank %d of %d: out of memory", rank, size) : 0, msg, sizeof msg)) {
        free(acc);
        goto done;
    }
    MPI_Allreduce(MPI_IN_PLACE, acc, (int)((size_t)o->k * (1 + F)), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double *mean[RADAR_FEATURES] = {out.mean_value, out.mean_local, out.mean_std};
    for (int c = 0; c < o->k; c++) {
        double cnt = acc[(size_t)c * (1 + F)];
        out.sizes[c] = (size_t)cnt;
        for (size_t f = 0; f < F; f++)
            mean[f][c] = cnt > 0 ? acc[(size_t)c * (1 + F) + 1 + f] / cnt : 0.0;
    }
    free(acc);

    /* rank 0 gathers the labels (in place: its band comes first) */
    int myband = (int)nb;
    MPI_Gather(&myband, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    for (int j = 0, at = 0; rank == 0 && j < size; j++) {
        displs[j] = at;
        at += counts[j];
    }
    MPI_Gatherv(rank == 0 ? MPI_IN_PLACE : out.labels, myband, MPI_INT32_T, out.labels, counts, displs, MPI_INT32_T,
                0, MPI_COMM_WORLD);
    if (rank == 0) {
        char where[300];
        snprintf(where, sizeof where, "%d ranks (rank 0: %s)", size, dk_context_device(ctx));
        if (dry)
            printf("%s: every label is -1\n", out.dry);
        else
            report(&out.kmeans, t2 - t0, where);
        printf("texture features %.3f ms, clustering %.3f ms (rank 0)\n", (t1 - t0) * 1e3, (t2 - t1) * 1e3);
        for (int c = 0; c < out.k && !dry; c++)
            printf("  cluster %d: %zu pixels, mean %.1f dBZ, local mean %.1f, local std %.2f\n", c, out.sizes[c],
                   out.mean_value[c], out.mean_local[c], out.mean_std[c]);
        const char *base = strrchr(path, '/');
        if (labels_path && radolan_labels_write(labels_path, path, &r, &out, o, err, sizeof err) != DK_OK)
            failed = FAILED("%s", err);
        else if (png_path && radar_picture(&r, &out, o, NULL, base ? base + 1 : path, png_path, err, sizeof err))
            failed = FAILED("%s", err);
        else if (png_path)
            printf("wrote %s\n", png_path);
    }
    if (dist_agree(failed, msg, sizeof msg))
        goto done;
    rc = 0;
done:
    if (rc && msg[0])
        cli_error(cmd, 1, "%s", msg);
    dk_mpi_plan_destroy(plan);
    dk_context_destroy(ctx);
    if (have_r)
        dk_radolan_free(&r);
    radar_result_free(&out);
    free(feat);
    free(mask);
    free(counts);
    free(displs);
    return rc;
}
#endif
