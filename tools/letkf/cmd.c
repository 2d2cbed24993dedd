/* dakit letkf: the local ensemble transform Kalman filter on arrays from
 * .npy or netCDF files, with its diagnostics; `dakit letkf l96` is the
 * Lorenz-96 twin experiment (letkf/l96.c). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/netcdf.h"
#include "cli/netcdf_dist.h"
#include "cli/npy.h"
#include "cli/output.h"
#include "letkf/l96.h"

#ifdef DK_TOOLS_MPI
#include "cli/dist.h"
#endif

static const char *CMD = "letkf";

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dakit letkf --xb Xb.npy --yo yo.npy (--r r.npy | --r-value V) --grid-coords G.npy\n"
            "                   --obs-coords O.npy --radius R (--yb Yb.npy | --H H.mtx) --out Xa.npy [options]\n"
            "       dakit letkf l96 [options]   (Lorenz-96 twin experiment; dakit letkf l96 --help)\n"
            "\n"
            "The local ensemble transform Kalman filter (Hunt, Kostelich & Szunyogh 2007): each grid\n"
            "point is analysed on its own from the observations within --radius of it, each weighted\n"
            "by the Gaspari-Cohn taper of its distance (1 at the point, 0 at the radius). Xb is the\n"
            "N x k background ensemble (state x member), Yb = H(Xb) the M x k ensemble in observation\n"
            "space from your own observation operator, yo the M observations and r their M error\n"
            "variances (R diagonal). The analysis ensemble Xa (N x k) goes to --out.\n"
            "Every input may be a netCDF variable instead of a .npy, FILE.nc:VAR[dim=i,...], and every\n"
            "output a .nc file; --xb and --yb also take ensembles stored as (member, y, x) or\n"
            "(y, x, member), or one file per member, 'mem_{:03d}.nc:T' (docs/formats.md).\n"
            "\n"
            "inputs:\n"
            "  --xb FILE             the background ensemble, N x k (k from 2 to 1024 members)\n"
            "  --yb FILE             the ensemble in observation space, M x k\n"
            "  --H FILE              a linear observation operator, M x N sparse in MatrixMarket\n"
            "                        coordinate form (as scipy.io.mmwrite writes it): without --yb,\n"
            "                        Yb = H Xb; with it, only for --oma\n"
            "  --yo FILE             the M observations\n"
            "  --r FILE              their M error variances, each > 0\n"
            "  --r-value V           one error variance for every observation, > 0 (instead of --r)\n"
            "  --grid-coords FILE    the N points' coordinates, N x d (d = 1 to 3; a vector for d = 1)\n"
            "  --obs-coords FILE     the M observations' coordinates, M x d, in the same columns\n"
            "\n"
            "localization:\n"
            "  --radius R            horizontal distance at which the taper reaches 0, > 0, in the\n"
            "                        coordinates' units (km with --metric sphere)\n"
            "  --metric cartesian|sphere   cartesian: Euclidean distance over the columns (default);\n"
            "                        sphere: columns lon, lat in degrees, great-circle km on a sphere\n"
            "                        of radius 6371 km (and a third column with --vertical-radius)\n"
            "  --vertical-radius R   the last column is a vertical coordinate with its own taper,\n"
            "                        reaching 0 at distance R, > 0 (default: no vertical coordinate)\n"
            "  --period P[,P...]     cartesian: each column's period, 0 for none (default: none);\n"
            "                        a ring of 40 points spaced 1 apart has --period 40\n"
            "  --max-obs K           use at most the K observations of largest weight at each point\n"
            "                        (ties to the lower observation index), 0 to 2147483647; 0: all\n"
            "                        within the radius (default 0)\n"
            "\n"
            "analysis:\n"
            "  --inflation F         multiplicative prior inflation of the background covariance,\n"
            "                        > 0 (default 1: none); anomalies grow by sqrt(F)\n"
            "  --rtpp A              relaxation to prior perturbations, from 0 to 1 (default 0)\n"
            "  --rtps A              relaxation to prior spread, from 0 to 1 (default 0); not with --rtpp\n"
            "  --weight-stride S[,S...]  weight interpolation: the transforms only at every S-th point of\n"
            "                        each axis of the lattice --grid-shape (and its last), bilinear\n"
            "                        (trilinear) to the rest (docs/letkf.md states its error); no --nobs\n"
            "  --grid-shape A[,B[,C]]  the lattice of the grid points, row-major (first axis slowest)\n"
            "  --dtype f64|f32       the ensembles' precision in the backend (default f64); every\n"
            "                        point's k x k problem is solved in float64 either way\n"
            "  --backend NAME        cuda, opencl, cpu, auto or a comma list (default: DAKIT_BACKEND/auto)\n"
            "  --variant NAME        one of the backend's letkf variants (dakit info lists them)\n"
            "  --reference           use the serial reference instead of a backend\n"
            "\n"
            "outputs (written whole or not at all; float64 but --nobs):\n"
            "  --out FILE            the analysis ensemble Xa, N x k, in the layout of --xb\n"
            "  --nobs FILE           the number of observations used at each point, N int32\n"
            "  --spread FILE         the analysis spread at each point (standard deviation over the\n"
            "                        members, k - 1 divisor), N\n"
            "  --omb FILE            O-B per observation: yo - the mean of Yb over the members, M\n"
            "  --oma FILE            O-A per observation: yo - the mean of H Xa over the members, M\n"
            "                        (needs --H)\n"
            "\n"
            "A summary line (sizes, backend, time, observations per point) goes to stderr.\n"
            "Under mpirun -n P each rank analyses its contiguous rows of the points with the observations\n"
            "of every rank within reach, reading and writing only its rows of .npy files (docs/distributed.md).\n");
}

typedef struct options {
    const char *xb, *yb, *H, *yo, *r, *grid, *obs;
    const char *out, *nobs, *spread, *omb, *oma;
    const char *backend, *variant;
    double r_value; /* > 0: --r-value */
    size_t wstride[3], shape[3]; /* --weight-stride, --grid-shape */
    int nstride, nshape;
    int reference;
    dk_letkf_desc desc; /* the options' part of it */
} options;

static int parse(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    dk_letkf_desc_init(&o->desc);
    int have_radius = 0;
    static const struct option option_table[] = {CLI_FLAG("help"), CLI_FLAG("reference"), CLI_VALUE("xb"),
        CLI_VALUE("yb"), CLI_VALUE("H"), CLI_VALUE("yo"), CLI_VALUE("r"), CLI_VALUE("r-value"),
        CLI_VALUE("grid-coords"), CLI_VALUE("obs-coords"), CLI_VALUE("out"), CLI_VALUE("nobs"), CLI_VALUE("spread"),
        CLI_VALUE("omb"), CLI_VALUE("oma"), CLI_VALUE("backend"), CLI_VALUE("variant"), CLI_VALUE("radius"),
        CLI_VALUE("vertical-radius"), CLI_VALUE("metric"), CLI_VALUE("period"), CLI_VALUE("max-obs"),
        CLI_VALUE("inflation"), CLI_VALUE("rtpp"), CLI_VALUE("rtps"), CLI_VALUE("dtype"),
        CLI_VALUE("weight-stride"), CLI_VALUE("grid-shape"), {0}};
    cli_args args = {.cmd = CMD, .argc = argc, .argv = argv, .options = option_table};
    int more;
    while ((more = cli_next(&args)) == 1) {
        const char *a = args.opt, *v = args.value;
        if (!strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--reference")) {
            o->reference = 1;
            continue;
        }
        int bad = 0;
        if (!strcmp(a, "--xb"))
            o->xb = v;
        else if (!strcmp(a, "--yb"))
            o->yb = v;
        else if (!strcmp(a, "--H"))
            o->H = v;
        else if (!strcmp(a, "--yo"))
            o->yo = v;
        else if (!strcmp(a, "--r"))
            o->r = v;
        else if (!strcmp(a, "--r-value"))
            bad = cli_double(CMD, a, v, 0, INFINITY, CLI_OPEN_LO, &o->r_value);
        else if (!strcmp(a, "--grid-coords"))
            o->grid = v;
        else if (!strcmp(a, "--obs-coords"))
            o->obs = v;
        else if (!strcmp(a, "--out"))
            o->out = v;
        else if (!strcmp(a, "--nobs"))
            o->nobs = v;
        else if (!strcmp(a, "--spread"))
            o->spread = v;
        else if (!strcmp(a, "--omb"))
            o->omb = v;
        else if (!strcmp(a, "--oma"))
            o->oma = v;
        else if (!strcmp(a, "--backend"))
            o->backend = v;
        else if (!strcmp(a, "--variant"))
            o->variant = o->desc.variant = v;
        else if (!strcmp(a, "--radius")) {
            bad = cli_double(CMD, a, v, 0, INFINITY, CLI_OPEN_LO, &o->desc.radius);
            have_radius = 1;
        } else if (!strcmp(a, "--vertical-radius"))
            bad = cli_double(CMD, a, v, 0, INFINITY, CLI_OPEN_LO, &o->desc.vertical_radius);
        else if (!strcmp(a, "--metric")) {
            if (!strcmp(v, "cartesian"))
                o->desc.metric = DK_LETKF_CARTESIAN;
            else if (!strcmp(v, "sphere"))
                o->desc.metric = DK_LETKF_SPHERE;
            else
                return cli_error(CMD, 2, "--metric must be cartesian or sphere, not '%.64s'", v);
        } else if (!strcmp(a, "--period")) {
            double p[DK_LETKF_MAX_COORDS + 1];
            int n = cli_parse_doubles(v, p, DK_LETKF_MAX_COORDS + 1);
            if (n < 1 || n > DK_LETKF_MAX_COORDS)
                return cli_error(CMD, 2, "--period must be 1 to %d finite numbers separated by commas, not '%.64s'",
                                 DK_LETKF_MAX_COORDS, v);
            for (int k = 0; k < n; k++) {
                if (!(p[k] >= 0))
                    return cli_error(CMD, 2, "--period: value %d is %g; a period is >= 0 (0: not periodic)", k + 1,
                                     p[k]);
                o->desc.period[k] = p[k];
            }
        } else if (!strcmp(a, "--max-obs"))
            bad = cli_size(CMD, a, v, 0, INT32_MAX, &o->desc.max_obs);
        else if (!strcmp(a, "--inflation"))
            bad = cli_double(CMD, a, v, 0, INFINITY, CLI_OPEN_LO, &o->desc.inflation);
        else if (!strcmp(a, "--rtpp"))
            bad = cli_double(CMD, a, v, 0, 1, 0, &o->desc.rtpp);
        else if (!strcmp(a, "--rtps"))
            bad = cli_double(CMD, a, v, 0, 1, 0, &o->desc.rtps);
        else if (!strcmp(a, "--weight-stride") || !strcmp(a, "--grid-shape")) {
            double p[4];
            int n = cli_parse_doubles(v, p, 4), stride = !strcmp(a, "--weight-stride");
            if (n < 1 || n > 3)
                return cli_error(CMD, 2, "%s must be 1 to 3 integers >= 1 separated by commas, not '%.64s'", a, v);
            for (int q = 0; q < n; q++) {
                if (!(p[q] >= 1 && p[q] <= 1e15 && p[q] == floor(p[q])))
                    return cli_error(CMD, 2, "%s: value %d is %g; each must be an integer >= 1", a, q + 1, p[q]);
                (stride ? o->wstride : o->shape)[q] = (size_t)p[q];
            }
            *(stride ? &o->nstride : &o->nshape) = n;
        } else if (!strcmp(a, "--dtype")) {
            if (!strcmp(v, "f64"))
                o->desc.dtype = DK_F64;
            else if (!strcmp(v, "f32"))
                o->desc.dtype = DK_F32;
            else
                return cli_error(CMD, 2, "--dtype must be f32 or f64, not '%.64s'", v);
        }
        if (bad)
            return bad;
    }
    if (more)
        return more;
    if (!o->xb || !o->yo || !o->grid || !o->obs || !o->out || !have_radius)
        return cli_error(CMD, 2, "--xb, --yo, --grid-coords, --obs-coords, --radius and --out are required "
                                 "(dakit letkf --help)");
    if (!o->yb && !o->H)
        return cli_error(CMD, 2, "the ensemble in observation space is missing: give --yb, or --H to form it as "
                                 "H Xb");
    if (!o->r == !(o->r_value > 0))
        return cli_error(CMD, 2, "give the observation error variances by exactly one of --r FILE and --r-value V");
    if (o->oma && !o->H)
        return cli_error(CMD, 2, "--oma needs --H: O-A is yo minus the mean of H Xa");
    if (o->desc.rtpp > 0 && o->desc.rtps > 0)
        return cli_error(CMD, 2, "--rtpp and --rtps are both set; choose one relaxation");
    if (o->nstride && !o->nshape)
        return cli_error(CMD, 2, "--weight-stride needs --grid-shape, the lattice of the grid points");
    if (o->nstride && o->nstride != 1 && o->nstride != o->nshape)
        return cli_error(CMD, 2, "--weight-stride has %d values for the %d axes of --grid-shape; give one or one "
                                 "per axis", o->nstride, o->nshape);
    if (o->nstride && o->nobs)
        return cli_error(CMD, 2, "--nobs is not available with --weight-stride");
    if (o->nstride == 1)
        for (int q = 1; q < o->nshape; q++)
            o->wstride[q] = o->wstride[0];
    if (o->reference && (o->backend || o->variant))
        return cli_error(CMD, 2, "--reference runs the serial reference; it takes no --backend or --variant");
    if (cli_options_only)
        return 0;
    return -1;
}

typedef struct inputs {
    npy_array xb, yb, yo, r, grid, obs;
    array_origin xb_origin, yo_origin;
    dk_csr H;
    size_t n, k, m;
    /* under mpirun this rank's rows: points [p0, p0 + np), observations
     * [o0, o0 + mo); in one process all of them */
    size_t p0, np, o0, mo;
    void *xb_data, *yb_data; /* in the compute dtype, this rank's rows */
    double *yo64, *r64, *grid64, *obs64;
} inputs;

static void unload(inputs *in)
{
    npy_free(&in->xb);
    npy_free(&in->yb);
    npy_free(&in->yo);
    npy_free(&in->r);
    npy_free(&in->grid);
    npy_free(&in->obs);
    dk_csr_free(&in->H);
    free(in->xb_data);
    free(in->yb_data);
    free(in->yo64);
    free(in->r64);
    free(in->grid64);
    free(in->obs64);
}

#define FAILED(...) (snprintf(msg, len, __VA_ARGS__), 1)

/* The library's sentence without its "letkf: " (the command's name says it). */
static const char *library_error(const dk_context *ctx)
{
    const char *e = dk_last_error(ctx);
    return strncmp(e, "letkf: ", 7) == 0 ? e + 7 : e;
}

/* The array's values as float64 (a new allocation), each checked finite;
 * NULL with the sentence in msg. first: the index in the whole file of the
 * array's first value (this rank's rows under mpirun). */
static double *as_f64_from(const npy_array *a, const char *path, size_t first, char *msg, size_t len)
{
    double *d = malloc((a->count ? a->count : 1) * sizeof *d);
    if (!d) {
        snprintf(msg, len, "out of memory reading %s", path);
        return NULL;
    }
    for (size_t i = 0; i < a->count; i++) {
        d[i] = a->dtype == DK_F32 ? (double)((const float *)a->data)[i] : ((const double *)a->data)[i];
        if (!isfinite(d[i])) {
            snprintf(msg, len, "%s: value %zu is %g; every value must be finite", path, first + i, d[i]);
            free(d);
            return NULL;
        }
    }
    return d;
}

/* The values in the compute dtype, checked finite. */
static void *in_dtype(const npy_array *a, const char *path, size_t first, dk_dtype dtype, char *msg, size_t len)
{
    double *d = as_f64_from(a, path, first, msg, len);
    if (!d || dtype == DK_F64)
        return d;
    float *f = malloc((a->count ? a->count : 1) * sizeof *f);
    if (!f) {
        free(d);
        snprintf(msg, len, "out of memory reading %s", path);
        return NULL;
    }
    for (size_t i = 0; i < a->count; i++)
        f[i] = (float)d[i];
    free(d);
    return f;
}

/* The rows [*first, *first + *count) of `total` that rank takes of `size`:
 * contiguous, the first total % size ranks one row longer. */
static void split_rows(size_t total, int rank, int size, size_t *first, size_t *count)
{
    size_t base = total / (size_t)size, extra = total % (size_t)size, r = (size_t)rank;
    *count = base + (r < extra);
    *first = r * base + (r < extra ? r : extra);
}

/* This rank's rows of an array of rows (*total of them): a .npy file or a
 * netCDF variable is read by rows (its header, then only those rows, through
 * array_source as the other commands read their parts); an ensemble in
 * netCDF (whose member dimension may be any) or one file per member is read
 * whole and cut. In one process (size 1) it is array_read /
 * array_read_ensemble as before. */
static dk_status read_rows(const char *spec, int ensemble, int rank, int size, npy_array *a, array_origin *origin,
                           size_t *total, size_t *first, char *err, size_t len)
{
    memset(a, 0, sizeof *a);
    size_t count;
    array_source src;
    /* a spec array_source refuses goes to array_read below, for its own sentence */
    if (size > 1 && !strchr(spec, '{') && array_source_open(&src, spec, NULL, origin, err, len) == DK_OK &&
        !(ensemble && src.netcdf) && src.hdr.ndim >= 1) {
        *a = src.hdr;
        *total = a->shape[0];
        split_rows(*total, rank, size, first, &count);
        size_t off[NPY_MAX_DIMS] = {*first}, ext[NPY_MAX_DIMS] = {count}, per = 1;
        for (int d = 1; d < a->ndim; d++)
            ext[d] = a->shape[d], per *= a->shape[d];
        a->shape[0] = count;
        a->count = count * per;
        if (!(a->data = malloc(a->count ? a->count * dk_dtype_size(a->dtype) : 1))) {
            snprintf(err, len, "out of memory for %zu rows of %s", count, spec);
            return DK_ERR_OUT_OF_MEMORY;
        }
        return array_source_read_box(&src, off, ext, a->data, err, len);
    }
    dk_status st = ensemble ? array_read_ensemble(spec, NULL, a, origin, err, len)
                            : array_read(spec, NULL, a, origin, err, len);
    if (st != DK_OK)
        return st;
    *total = a->ndim >= 1 ? a->shape[0] : 0;
    *first = 0;
    if (size == 1 || a->ndim < 1)
        return DK_OK;
    split_rows(*total, rank, size, first, &count);
    size_t per = *total ? a->count / *total : 0, es = dk_dtype_size(a->dtype);
    memmove(a->data, (char *)a->data + *first * per * es, count * per * es);
    a->shape[0] = count;
    a->count = count * per;
    return DK_OK;
}

/* A vector of `want` values (0: any number), this rank's rows of it
 * (*total the whole vector's, *first the index of its first). */
static int read_vector(const char *path, const char *what, size_t want, int rank, int size, npy_array *a,
                       array_origin *origin, size_t *total, size_t *first, double **out, char *msg, size_t len)
{
    if (read_rows(path, 0, rank, size, a, origin, total, first, msg, len) != DK_OK)
        return 1;
    if (a->ndim != 1)
        return FAILED("%s has %d dimension%s; %s is a vector", path, a->ndim, a->ndim == 1 ? "" : "s", what);
    if (want && *total != want)
        return FAILED("%s holds %zu values; %s needs %zu, one per observation (the rows of --yo)", path, *total,
                      what, want);
    if (*total == 0)
        return FAILED("%s is empty; an analysis needs at least one observation", path);
    return (*out = as_f64_from(a, path, *first, msg, len)) ? -1 : 1;
}

/* Coordinates: rows x d, or a vector for d = 1. read: the file to read,
 * or NULL where a already holds it (this rank's rows, first the index of
 * its first row, with shape[0] the whole file's rows). */
static int read_coords(const char *read, const char *path, const char *opt, size_t rows, const char *rows_what,
                       size_t first, npy_array *a, int *ncoords, double **out, char *msg, size_t len)
{
    if (read && array_read(read, NULL, a, NULL, msg, len) != DK_OK)
        return 1;
    size_t got = a->ndim >= 1 ? a->shape[0] : 0;
    int d = a->ndim == 1 ? 1 : a->ndim == 2 ? (int)(a->shape[1] <= 8 ? a->shape[1] : 9) : 0;
    if (d < 1 || d > DK_LETKF_MAX_COORDS)
        return FAILED("%s (%s) is %d-dimensional with shape %zu x %zu; coordinates are %s x d with d from 1 to %d "
                      "(a vector for d = 1)",
                      path, opt, a->ndim, got, a->ndim >= 2 ? a->shape[1] : 1, rows_what, DK_LETKF_MAX_COORDS);
    if (got != rows)
        return FAILED("%s (%s) has %zu rows; it needs %zu, one per %s", path, opt, got, rows,
                      rows_what[0] == 'N' ? "grid point (the rows of --xb)" : "observation (the rows of --yo)");
    *ncoords = d;
    return (*out = as_f64_from(a, path, first * (size_t)d, msg, len)) ? -1 : 1;
}

/* Reads and checks the inputs; under mpirun (size > 1) each rank keeps its
 * rows: Xb and the grid coordinates by points, Yb, yo, r and the
 * observation coordinates by observations. Yb from --H is left to the
 * caller there (it needs every rank's points). */
static int load(const options *o, inputs *in, int rank, int size, int *ncoords, char *msg, size_t len)
{
    memset(in, 0, sizeof *in);
    const dk_dtype dtype = o->desc.dtype;
    if (read_rows(o->xb, 1, rank, size, &in->xb, &in->xb_origin, &in->n, &in->p0, msg, len) != DK_OK)
        return 1;
    if (in->xb.ndim != 2)
        return FAILED("%s has %d dimension%s; the background ensemble is N x k (state x member)", o->xb,
                      in->xb.ndim, in->xb.ndim == 1 ? "" : "s");
    in->np = in->xb.shape[0];
    in->k = in->xb.shape[1];
    if (in->n < 1)
        return FAILED("%s has no rows; the state needs at least one point", o->xb);
    if (in->k < 2 || in->k > DK_LETKF_MAX_MEMBERS)
        return FAILED("%s has k = %zu members; the LETKF takes 2 to %d", o->xb, in->k, DK_LETKF_MAX_MEMBERS);
    if (!(in->xb_data = in_dtype(&in->xb, o->xb, in->p0 * in->k, dtype, msg, len)))
        return 1;
    int rc;
    size_t rows, first;
    if ((rc = read_vector(o->yo, "--yo", 0, rank, size, &in->yo, &in->yo_origin, &in->m, &in->o0, &in->yo64, msg,
                          len)) >= 0)
        return rc;
    in->mo = in->yo.count;
    if (o->r && (rc = read_vector(o->r, "--r", in->m, rank, size, &in->r, NULL, &rows, &first, &in->r64, msg, len)) >=
                    0)
        return rc;
    if (!o->r) {
        if (!(in->r64 = malloc((in->mo ? in->mo : 1) * sizeof *in->r64)))
            return FAILED("out of memory");
        for (size_t j = 0; j < in->mo; j++)
            in->r64[j] = o->r_value;
    }
    for (size_t j = 0; j < in->mo; j++)
        if (!(in->r64[j] > 0))
            return FAILED("%s: the error variance of observation %zu is %g; variances must be > 0", o->r,
                          in->o0 + j, in->r64[j]);
    if (o->H) {
        if (dk_csr_read_mtx(o->H, &in->H) != DK_OK)
            return FAILED("%s", dk_last_error(NULL));
        if (in->H.rows != in->m || in->H.cols != in->n)
            return FAILED("%s is %zu x %zu; H must be M x N = %zu x %zu (the observations of --yo by the points of "
                          "--xb)",
                          o->H, in->H.rows, in->H.cols, in->m, in->n);
    }
    if (o->yb) {
        if (read_rows(o->yb, 1, rank, size, &in->yb, NULL, &rows, &first, msg, len) != DK_OK)
            return 1;
        if (in->yb.ndim != 2 || rows != in->m || in->yb.shape[1] != in->k)
            return FAILED("%s is %s%zu x %zu; Yb must be M x k = %zu x %zu (the observations of --yo by the members "
                          "of --xb)",
                          o->yb, in->yb.ndim == 2 ? "" : "not 2-D but ", in->yb.ndim >= 1 ? rows : 0,
                          in->yb.ndim >= 2 ? in->yb.shape[1] : 1, in->m, in->k);
        if (!(in->yb_data = in_dtype(&in->yb, o->yb, in->o0 * in->k, dtype, msg, len)))
            return 1;
    } else if (size == 1) {
        if (!(in->yb_data = malloc(in->m * in->k * dk_dtype_size(dtype))))
            return FAILED("out of memory for H Xb (%zu x %zu)", in->m, in->k);
        if (dk_letkf_apply_csr(&in->H, dtype, in->k, in->xb_data, in->yb_data) != DK_OK)
            return FAILED("%s: %s", o->H, dk_last_error(NULL));
    }
    int dg, dobs;
    size_t grid_rows, grid_first, obs_rows, obs_first;
    if (read_rows(o->grid, 0, rank, size, &in->grid, NULL, &grid_rows, &grid_first, msg, len) != DK_OK ||
        read_rows(o->obs, 0, rank, size, &in->obs, NULL, &obs_rows, &obs_first, msg, len) != DK_OK)
        return 1;
    /* read_coords checks the whole file's rows */
    if (in->grid.ndim >= 1)
        in->grid.shape[0] = grid_rows;
    if (in->obs.ndim >= 1)
        in->obs.shape[0] = obs_rows;
    if ((rc = read_coords(NULL, o->grid, "--grid-coords", in->n, "N", grid_first, &in->grid, &dg, &in->grid64, msg,
                          len)) >= 0 ||
        (rc = read_coords(NULL, o->obs, "--obs-coords", in->m, "M", obs_first, &in->obs, &dobs, &in->obs64, msg,
                          len)) >= 0)
        return rc;
    if (dg != dobs)
        return FAILED("%s has %d coordinate column%s but %s has %d; points and observations share their columns",
                      o->grid, dg, dg == 1 ? "" : "s", o->obs, dobs);
    *ncoords = dg;
    return -1;
}

/* The ensemble's array_origin without its member dimension: what a
 * per-point output (--nobs, --spread) takes as its netCDF layout. */
static void state_origin(const array_origin *ens, array_origin *out)
{
    *out = *ens;
    out->member = -1;
    out->pattern[0] = '\0';
    if (!ens->netcdf)
        return;
    int nd = 0;
    for (int d = 0; d < ens->ndim; d++) {
        if (d == ens->member)
            continue;
        memmove(out->dim[nd], ens->dim[d], sizeof out->dim[nd]);
        out->start[nd] = ens->start[d];
        out->count[nd] = ens->count[d];
        nd++;
    }
    if (ens->member < 0 && !ens->pattern[0] && ens->ndim == 2) /* (N, k) without a member dimension */
        nd = 1;
    out->ndim = nd;
}

/* A per-point (N) or per-observation (M) output: netCDF in the layout of
 * like where its sizes fit, else a vector. */
static dk_status write_vector_err(const char *path, const char *name, array_kind kind, const void *data, size_t count,
                                  const array_origin *like, char *err, size_t len)
{
    size_t shape[NPY_MAX_DIMS] = {count};
    int nd = 1;
    if (like->netcdf && array_is_netcdf_name(path) && like->ndim >= 1) {
        size_t c = 1;
        for (int d = 0; d < like->ndim; d++)
            c *= like->count[d];
        if (c == count) {
            nd = like->ndim;
            for (int d = 0; d < nd; d++)
                shape[d] = like->count[d];
        }
    }
    return array_write(path, name, kind, nd, shape, data, like, 0, err, len);
}

static int write_vector(const char *path, const char *name, array_kind kind, const void *data, size_t count,
                        const array_origin *like)
{
    char err[4200];
    if (write_vector_err(path, name, kind, data, count, like, err, sizeof err) != DK_OK)
        return cli_error(CMD, 1, "%s", err);
    return 0;
}

static int write_analysis(const char *path, const void *xa, dk_dtype dtype, size_t n, size_t k,
                          const array_origin *like)
{
    double *d = malloc((n * k > 0 ? n * k : 1) * sizeof *d);
    if (!d)
        return cli_error(CMD, 1, "out of memory");
    for (size_t i = 0; i < n * k; i++)
        d[i] = dtype == DK_F32 ? (double)((const float *)xa)[i] : ((const double *)xa)[i];
    char err[4200];
    dk_status st = array_write_ensemble(path, d, n, k, like, err, sizeof err);
    free(d);
    return st == DK_OK ? 0 : cli_error(CMD, 1, "%s", err);
}

static int check_outputs(const options *o)
{
    const char *paths[] = {o->out, o->nobs, o->spread, o->omb, o->oma};
    char err[4200];
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (paths[i] && output_check(paths[i], err, sizeof err) != 0)
            return cli_error(CMD, 1, "%s", err);
    return 0;
}

#ifdef DK_TOOLS_MPI
static int run_distributed(const options *o);
#endif

/* --weight-stride: the lattice's interpolation, d turned into the weight
 * points' description, and the analysis into xa (and spread). 0 on
 * success (d->n then the weight points' count), else the exit status with
 * the error printed. */
static int run_interp(const options *o, const inputs *in, dk_letkf_desc *d, void *xa, double *spread,
                      dk_context **ctx, dk_plan **plan, char *where, size_t len)
{
    size_t n = 1, nw = 0;
    for (int q = 0; q < o->nshape; q++)
        n *= o->shape[q];
    if (n != in->n)
        return cli_error(CMD, 2, "--grid-shape holds %zu points; the grid has %zu", n, in->n);
    const int nc = d->ncoords, corners = 1 << o->nshape;
    int64_t *ip = malloc((n + 1) * sizeof *ip), *ix = malloc(n * (size_t)corners * sizeof *ix);
    double *v = malloc(n * (size_t)corners * sizeof *v), *wc = malloc(n * (size_t)nc * sizeof *wc);
    size_t *widx = malloc(n * sizeof *widx);
    int rc = 1;
    if (!ip || !ix || !v || !wc || !widx) {
        cli_error(CMD, 1, "out of memory for the interpolation of %zu points", n);
        goto out;
    }
    if (dk_letkf_interp_grid(o->nshape, o->shape, o->wstride, &nw, widx, ip, ix, v) != DK_OK) {
        cli_error(CMD, 1, "%s", dk_last_error(NULL));
        goto out;
    }
    for (size_t w = 0; w < nw; w++)
        memcpy(wc + w * (size_t)nc, d->grid_coords + widx[w] * (size_t)nc, (size_t)nc * sizeof *wc);
    dk_csr C = {n, nw, ip, ix, v};
    d->n = nw;
    d->grid_coords = wc;
    if (o->reference) {
        if (dk_letkf_reference_interp(d, &C, in->xb_data, in->yb_data, in->yo64, in->r64, xa, spread) != DK_OK) {
            cli_error(CMD, 1, "%s", library_error(NULL));
            goto out;
        }
    } else {
        if (dk_context_create(o->backend, ctx) != DK_OK) {
            cli_error(CMD, 1, "%s", dk_last_error(NULL));
            goto out;
        }
        if (dk_letkf_plan_create(*ctx, d, plan) != DK_OK ||
            dk_letkf_execute_interp_host(*plan, &C, in->xb_data, in->yb_data, in->yo64, in->r64, xa, spread) !=
                DK_OK) {
            cli_error(CMD, 1, "%s", library_error(*ctx));
            goto out;
        }
        snprintf(where, len, "%s (%s)%s%s", dk_context_backend(*ctx), dk_context_device(*ctx),
                 o->variant ? ", variant " : "", o->variant ? o->variant : "");
    }
    rc = 0;
out:
    d->grid_coords = NULL; /* wc is freed here */
    free(ip), free(ix), free(v), free(wc), free(widx);
    return rc;
}

static int run_analysis(int argc, char **argv)
{
    options o;
    int rc = parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    if (check_outputs(&o))
        return 1;
    inputs in;
    char msg[4400];
    dk_context *ctx = NULL;
    dk_plan *plan = NULL;
    void *xa = NULL, *ya = NULL;
    int32_t *nobs = NULL;
    double *spread = NULL, *dep = NULL;
    int ncoords = 0;
#ifdef DK_TOOLS_MPI
    int own;
    if (dist_begin(&own)) {
        rc = run_distributed(&o);
        dist_end(own);
        return rc;
    }
#endif
    if ((rc = load(&o, &in, 0, 1, &ncoords, msg, sizeof msg)) >= 0) {
        cli_error(CMD, rc, "%s", msg);
        goto done;
    }
    rc = 1;
    dk_letkf_desc d = o.desc;
    d.n = in.n;
    d.members = in.k;
    d.m = in.m;
    d.ncoords = ncoords;
    d.grid_coords = in.grid64;
    d.obs_coords = in.obs64;
    const size_t es = dk_dtype_size(d.dtype);
    xa = malloc(in.n * in.k * es);
    nobs = malloc(in.n * sizeof *nobs);
    spread = malloc(in.n * sizeof *spread);
    dep = malloc(in.m * sizeof *dep);
    if (!xa || !nobs || !spread || !dep) {
        cli_error(CMD, 1, "out of memory for the analysis (%zu x %zu)", in.n, in.k);
        goto done;
    }
    double t0 = cli_now();
    const char *where = "the serial reference";
    char where_buf[512];
    if (o.nstride) {
        rc = run_interp(&o, &in, &d, xa, spread, &ctx, &plan, where_buf, sizeof where_buf);
        if (rc == 0)
            rc = 1;
        else
            goto done;
        where = o.reference ? where : where_buf;
        memset(nobs, 0, in.n * sizeof *nobs);
    } else if (o.reference) {
        if (dk_letkf_reference(&d, in.xb_data, in.yb_data, in.yo64, in.r64, xa, nobs, spread) != DK_OK) {
            cli_error(CMD, 1, "%s", library_error(NULL));
            goto done;
        }
    } else {
        if (dk_context_create(o.backend, &ctx) != DK_OK) {
            cli_error(CMD, 1, "%s", dk_last_error(NULL));
            goto done;
        }
        t0 = cli_now();
        if (dk_letkf_plan_create(ctx, &d, &plan) != DK_OK ||
            dk_letkf_execute_host(plan, in.xb_data, in.yb_data, in.yo64, in.r64, xa, nobs, spread) != DK_OK) {
            cli_error(CMD, 1, "%s", library_error(ctx));
            goto done;
        }
        snprintf(where_buf, sizeof where_buf, "%s (%s)%s%s", dk_context_backend(ctx), dk_context_device(ctx),
                 o.variant ? ", variant " : "", o.variant ? o.variant : "");
        where = where_buf;
    }
    double ms = (cli_now() - t0) * 1e3;
    long long used = 0;
    int32_t lo = INT32_MAX, hi = 0;
    for (size_t i = 0; i < in.n; i++) {
        used += nobs[i];
        lo = nobs[i] < lo ? nobs[i] : lo;
        hi = nobs[i] > hi ? nobs[i] : hi;
    }
    if (o.nstride)
        fprintf(stderr, "dakit letkf: N=%zu k=%zu M=%zu on %s: %.3f ms (plan and analysis), transforms at %zu "
                "weight points\n", in.n, in.k, in.m, where, ms, d.n);
    else
        fprintf(stderr,
                "dakit letkf: N=%zu k=%zu M=%zu on %s: %.3f ms (plan and analysis); observations per point %d to "
                "%d, mean %.1f\n",
                in.n, in.k, in.m, where, ms, lo, hi, (double)used / (double)in.n);
    array_origin per_point;
    state_origin(&in.xb_origin, &per_point);
    if (write_analysis(o.out, xa, d.dtype, in.n, in.k, &in.xb_origin) ||
        (o.nobs && write_vector(o.nobs, "nobs", ARRAY_I32, nobs, in.n, &per_point)) ||
        (o.spread && write_vector(o.spread, "spread", ARRAY_F64, spread, in.n, &per_point)))
        goto done;
    if (o.omb) {
        if (dk_letkf_departures(d.dtype, in.m, in.k, in.yb_data, in.yo64, dep) != DK_OK) {
            cli_error(CMD, 1, "%s", dk_last_error(NULL));
            goto done;
        }
        if (write_vector(o.omb, "omb", ARRAY_F64, dep, in.m, &in.yo_origin))
            goto done;
    }
    if (o.oma) {
        if (!(ya = malloc(in.m * in.k * es))) {
            cli_error(CMD, 1, "out of memory for H Xa (%zu x %zu)", in.m, in.k);
            goto done;
        }
        if (dk_letkf_apply_csr(&in.H, d.dtype, in.k, xa, ya) != DK_OK ||
            dk_letkf_departures(d.dtype, in.m, in.k, ya, in.yo64, dep) != DK_OK) {
            cli_error(CMD, 1, "%s", dk_last_error(NULL));
            goto done;
        }
        if (write_vector(o.oma, "oma", ARRAY_F64, dep, in.m, &in.yo_origin))
            goto done;
    }
    rc = 0;
done:
    free(xa);
    free(ya);
    free(nobs);
    free(spread);
    free(dep);
    dk_plan_destroy(plan);
    dk_context_destroy(ctx);
    unload(&in);
    return rc;
}

#ifdef DK_TOOLS_MPI
/* ---- dakit letkf under mpirun (docs/distributed.md, "letkf") ----
 * Each rank reads its contiguous rows of the points (Xb, the grid
 * coordinates) and of the observations (Yb, yo, r, their coordinates),
 * hands them to dk_mpi_letkf_*, and writes its rows of every output. */

/* An output of rows (total of them, cols values each), through dist_write:
 * a .npy name written by the ranks together, anything else (netCDF, one
 * file per member) gathered on rank 0 and written by the one-process
 * writer below. */
typedef struct part_output {
    const char *path, *name;
    array_kind kind;
    int ensemble; /* the analysis (array_write_ensemble) rather than a vector */
    size_t total, cols;
    const array_origin *like;
} part_output;

static int write_whole(const char *path, const void *whole, void *arg, char *err, size_t len)
{
    const part_output *po = arg;
    dk_status st = po->ensemble ? array_write_ensemble(path, whole, po->total, po->cols, po->like, err, len)
                                : write_vector_err(path, po->name, po->kind, whole, po->total, po->like, err, len);
    return st != DK_OK;
}

static int write_part(part_output *po, size_t first, size_t rows, const void *box, char *msg, size_t len)
{
    const size_t esize = po->kind == ARRAY_I32 ? 4 : 8;
    const int nd = po->ensemble ? 2 : 1;
    size_t shape[2] = {po->total, po->cols}, off[2] = {first, 0}, ext[2] = {rows, po->cols};
    return dist_write(po->path, po->kind == ARRAY_I32 ? "<i4" : "<f8", esize, nd, shape, nd, shape, off, ext, box,
                      write_whole, po, msg, len);
}

/* Yb = H X from this rank's points (H's columns [p0, p0 + np)): each rank's
 * terms summed in float64 in H's order, the ranks' sums then added (so the
 * rounding differs from one process's in the last bits); this rank's
 * observations' rows in the compute dtype. NULL with the sentence. */
static void *apply_distributed(const dk_csr *H, dk_dtype dtype, size_t k, const void *x, const inputs *in,
                               char *msg, size_t len)
{
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t M = H->rows, es = dk_dtype_size(dtype);
    double *y = calloc(M * k + 1, sizeof *y);
    void *own = malloc(in->mo * k * es + 1);
    int failed = !y || !own ? FAILED("rank %d of %d: out of memory for H X (%zu x %zu)", rank, size, M, k) : 0;
    if (dist_agree(failed, msg, len)) {
        free(y), free(own);
        return NULL;
    }
    for (size_t j = 0; j < M; j++)
        for (int64_t t = H->indptr[j]; t < H->indptr[j + 1]; t++) {
            size_t c = (size_t)H->indices[t];
            if (c < in->p0 || c >= in->p0 + in->np)
                continue;
            for (size_t l = 0; l < k; l++) {
                size_t at = (c - in->p0) * k + l;
                double v = dtype == DK_F32 ? (double)((const float *)x)[at] : ((const double *)x)[at];
                y[j * k + l] += H->values[t] * v;
            }
        }
    for (size_t done = 0; done < M * k; done += (size_t)1 << 26) {
        size_t piece = M * k - done < ((size_t)1 << 26) ? M * k - done : (size_t)1 << 26;
        MPI_Allreduce(MPI_IN_PLACE, y + done, (int)piece, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    for (size_t i = 0; i < in->mo * k; i++) {
        double v = y[in->o0 * k + i];
        if (dtype == DK_F32)
            ((float *)own)[i] = (float)v;
        else
            ((double *)own)[i] = v;
    }
    free(y);
    return own;
}

static int run_distributed(const options *o)
{
    int rank, size, failed = 0, rc = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (o->nstride)
        return rank == 0 ? cli_error(CMD, 2, "--weight-stride is not available under mpirun yet; run it on one "
                                             "process") : 2;
    if (o->reference)
        return cli_error(CMD, 2, "--reference runs in one process; under mpirun (%d ranks) each rank analyses "
                                 "its points on a backend", size);
    char msg[4400] = "";
    const size_t len = sizeof msg;
    inputs in;
    memset(&in, 0, sizeof in);
    dk_context *ctx = NULL;
    dk_mpi_plan *plan = NULL;
    double *xa64 = NULL, *spread = NULL, *dep = NULL;
    void *xa = NULL, *ya = NULL;
    int32_t *nobs = NULL;
    int ncoords = 0;
    const char *outs[] = {o->out, o->nobs, o->spread, o->omb, o->oma};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0] && !failed; i++)
        if (outs[i] && output_check(outs[i], msg, len) != 0)
            failed = 1;
    if (!failed && load(o, &in, rank, size, &ncoords, msg, len) >= 0)
        failed = 1;
    if (dist_agree(failed, msg, len))
        goto done;
    const dk_dtype dtype = o->desc.dtype;
    const size_t k = in.k, es = dk_dtype_size(dtype);
    if (!in.yb_data && !(in.yb_data = apply_distributed(&in.H, dtype, k, in.xb_data, &in, msg, len)))
        goto done;
    dk_letkf_desc d = o->desc;
    d.n = in.np;
    d.members = k;
    d.m = in.mo;
    d.ncoords = ncoords;
    d.grid_coords = in.grid64;
    d.obs_coords = in.obs64;
    dist_choose_device(o->backend);
    xa = malloc(in.np * k * es + 1);
    xa64 = malloc(in.np * k * sizeof *xa64 + 1);
    nobs = malloc(in.np * sizeof *nobs + 1);
    spread = malloc(in.np * sizeof *spread + 1);
    dep = malloc(in.mo * sizeof *dep + 1);
    if (!xa || !xa64 || !nobs || !spread || !dep)
        failed = FAILED("rank %d of %d: out of memory for its %zu points", rank, size, in.np);
    else if (dk_context_create(o->backend, &ctx) != DK_OK)
        failed = FAILED("rank %d of %d: %s", rank, size, dk_last_error(NULL));
    if (dist_agree(failed, msg, len))
        goto done;
    double t0 = MPI_Wtime();
    dk_status st = dk_mpi_letkf_plan_create(ctx, MPI_COMM_WORLD, &d, &plan);
    if (st == DK_OK)
        st = dk_mpi_letkf_execute_host(plan, in.xb_data, in.yb_data, in.yo64, in.r64, xa, nobs, spread);
    /* collective: on failure every rank has the same sentence */
    if (st != DK_OK)
        failed = FAILED("%s", dk_mpi_last_error());
    if (dist_agree(failed, msg, len))
        goto done;
    double mine = MPI_Wtime() - t0, ms;
    MPI_Reduce(&mine, &ms, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    long long used = 0, used_all;
    int32_t lo = INT32_MAX, hi = 0, lo_all, hi_all;
    for (size_t i = 0; i < in.np; i++) {
        used += nobs[i];
        lo = nobs[i] < lo ? nobs[i] : lo;
        hi = nobs[i] > hi ? nobs[i] : hi;
    }
    MPI_Reduce(&used, &used_all, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&lo, &lo_all, 1, MPI_INT32_T, MPI_MIN, 0, MPI_COMM_WORLD);
    MPI_Reduce(&hi, &hi_all, 1, MPI_INT32_T, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        fprintf(stderr,
                "dakit letkf: N=%zu k=%zu M=%zu on %d ranks (rank 0: %s (%s)%s%s; observations crossing ranks: %s): "
                "%.3f ms (plan and analysis); observations per point %d to %d, mean %.1f\n",
                in.n, k, in.m, size, dk_context_backend(ctx), dk_context_device(ctx), o->variant ? ", variant " : "",
                o->variant ? o->variant : "", dk_mpi_plan_transport(plan), ms * 1e3, lo_all, hi_all,
                (double)used_all / (double)in.n);
    for (size_t i = 0; i < in.np * k; i++)
        xa64[i] = dtype == DK_F32 ? (double)((const float *)xa)[i] : ((const double *)xa)[i];
    array_origin per_point;
    state_origin(&in.xb_origin, &per_point);
    part_output out = {o->out, "analysis", ARRAY_F64, 1, in.n, k, &in.xb_origin};
    part_output pn = {o->nobs, "nobs", ARRAY_I32, 0, in.n, 1, &per_point};
    part_output ps = {o->spread, "spread", ARRAY_F64, 0, in.n, 1, &per_point};
    if (write_part(&out, in.p0, in.np, xa64, msg, len) || (o->nobs && write_part(&pn, in.p0, in.np, nobs, msg, len)) ||
        (o->spread && write_part(&ps, in.p0, in.np, spread, msg, len)))
        goto done;
    if (o->omb) {
        if (dk_letkf_departures(dtype, in.mo, k, in.yb_data, in.yo64, dep) != DK_OK)
            failed = FAILED("rank %d of %d: %s", rank, size, dk_last_error(NULL));
        part_output po = {o->omb, "omb", ARRAY_F64, 0, in.m, 1, &in.yo_origin};
        if (dist_agree(failed, msg, len) || write_part(&po, in.o0, in.mo, dep, msg, len))
            goto done;
    }
    if (o->oma) {
        if (!(ya = apply_distributed(&in.H, dtype, k, xa, &in, msg, len)))
            goto done;
        if (dk_letkf_departures(dtype, in.mo, k, ya, in.yo64, dep) != DK_OK)
            failed = FAILED("rank %d of %d: %s", rank, size, dk_last_error(NULL));
        part_output po = {o->oma, "oma", ARRAY_F64, 0, in.m, 1, &in.yo_origin};
        if (dist_agree(failed, msg, len) || write_part(&po, in.o0, in.mo, dep, msg, len))
            goto done;
    }
    rc = 0;
done:
    if (rc)
        cli_error(CMD, 1, "%s", msg);
    dk_mpi_plan_destroy(plan);
    dk_context_destroy(ctx);
    unload(&in);
    free(xa), free(xa64), free(ya), free(nobs), free(spread), free(dep);
    return rc;
}
#endif

int cmd_letkf(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *f = argc < 2 ? stderr : stdout;
        usage(f);
        fputc('\n', f);
        letkf_l96_usage(f);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "l96"))
        return letkf_l96(argc - 1, argv + 1);
    return run_analysis(argc, argv);
}
