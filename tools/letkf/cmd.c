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
#include "cli/npy.h"
#include "cli/output.h"
#include "letkf/l96.h"

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
            "A summary line (sizes, backend, time, observations per point) goes to stderr.\n");
}

typedef struct options {
    const char *xb, *yb, *H, *yo, *r, *grid, *obs;
    const char *out, *nobs, *spread, *omb, *oma;
    const char *backend, *variant;
    double r_value; /* > 0: --r-value */
    int reference;
    dk_letkf_desc desc; /* the options' part of it */
} options;

static int parse(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    dk_letkf_desc_init(&o->desc);
    int have_radius = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--reference")) {
            o->reference = 1;
            continue;
        }
        if (!(v = cli_value(CMD, argc, argv, &i)))
            return 2;
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
        else if (!strcmp(a, "--dtype")) {
            if (!strcmp(v, "f64"))
                o->desc.dtype = DK_F64;
            else if (!strcmp(v, "f32"))
                o->desc.dtype = DK_F32;
            else
                return cli_error(CMD, 2, "--dtype must be f32 or f64, not '%.64s'", v);
        } else
            return cli_error(CMD, 2, "unknown option '%s' (dakit letkf --help)", a);
        if (bad)
            return bad;
    }
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
    void *xb_data, *yb_data; /* in the compute dtype */
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
 * NULL with the sentence in msg. */
static double *as_f64(const npy_array *a, const char *path, char *msg, size_t len)
{
    double *d = malloc((a->count ? a->count : 1) * sizeof *d);
    if (!d) {
        snprintf(msg, len, "out of memory reading %s", path);
        return NULL;
    }
    for (size_t i = 0; i < a->count; i++) {
        d[i] = a->dtype == DK_F32 ? (double)((const float *)a->data)[i] : ((const double *)a->data)[i];
        if (!isfinite(d[i])) {
            snprintf(msg, len, "%s: value %zu is %g; every value must be finite", path, i, d[i]);
            free(d);
            return NULL;
        }
    }
    return d;
}

/* The values in the compute dtype, checked finite. */
static void *in_dtype(const npy_array *a, const char *path, dk_dtype dtype, char *msg, size_t len)
{
    double *d = as_f64(a, path, msg, len);
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

/* A vector of `want` values (any shape with one axis of that length). */
static int read_vector(const char *path, const char *what, size_t want, npy_array *a, array_origin *origin,
                       double **out, char *msg, size_t len)
{
    if (array_read(path, NULL, a, origin, msg, len) != DK_OK)
        return 1;
    if (a->ndim != 1)
        return FAILED("%s has %d dimension%s; %s is a vector", path, a->ndim, a->ndim == 1 ? "" : "s", what);
    if (want && a->count != want)
        return FAILED("%s holds %zu values; %s needs %zu, one per observation (the rows of --yo)", path, a->count,
                      what, want);
    if (a->count == 0)
        return FAILED("%s is empty; an analysis needs at least one observation", path);
    return (*out = as_f64(a, path, msg, len)) ? -1 : 1;
}

/* Coordinates: rows x d, or a vector for d = 1. */
static int read_coords(const char *path, const char *opt, size_t rows, const char *rows_what, npy_array *a,
                       int *ncoords, double **out, char *msg, size_t len)
{
    if (array_read(path, NULL, a, NULL, msg, len) != DK_OK)
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
    return (*out = as_f64(a, path, msg, len)) ? -1 : 1;
}

static int load(const options *o, inputs *in, int *ncoords, char *msg, size_t len)
{
    memset(in, 0, sizeof *in);
    const dk_dtype dtype = o->desc.dtype;
    if (array_read_ensemble(o->xb, NULL, &in->xb, &in->xb_origin, msg, len) != DK_OK)
        return 1;
    if (in->xb.ndim != 2)
        return FAILED("%s has %d dimension%s; the background ensemble is N x k (state x member)", o->xb,
                      in->xb.ndim, in->xb.ndim == 1 ? "" : "s");
    in->n = in->xb.shape[0];
    in->k = in->xb.shape[1];
    if (in->n < 1)
        return FAILED("%s has no rows; the state needs at least one point", o->xb);
    if (in->k < 2 || in->k > DK_LETKF_MAX_MEMBERS)
        return FAILED("%s has k = %zu members; the LETKF takes 2 to %d", o->xb, in->k, DK_LETKF_MAX_MEMBERS);
    if (!(in->xb_data = in_dtype(&in->xb, o->xb, dtype, msg, len)))
        return 1;
    int rc;
    if ((rc = read_vector(o->yo, "--yo", 0, &in->yo, &in->yo_origin, &in->yo64, msg, len)) >= 0)
        return rc;
    in->m = in->yo.count;
    if (o->r && (rc = read_vector(o->r, "--r", in->m, &in->r, NULL, &in->r64, msg, len)) >= 0)
        return rc;
    if (!o->r) {
        if (!(in->r64 = malloc(in->m * sizeof *in->r64)))
            return FAILED("out of memory");
        for (size_t j = 0; j < in->m; j++)
            in->r64[j] = o->r_value;
    }
    for (size_t j = 0; j < in->m; j++)
        if (!(in->r64[j] > 0))
            return FAILED("%s: the error variance of observation %zu is %g; variances must be > 0", o->r, j,
                          in->r64[j]);
    if (o->H) {
        if (dk_csr_read_mtx(o->H, &in->H) != DK_OK)
            return FAILED("%s", dk_last_error(NULL));
        if (in->H.rows != in->m || in->H.cols != in->n)
            return FAILED("%s is %zu x %zu; H must be M x N = %zu x %zu (the observations of --yo by the points of "
                          "--xb)",
                          o->H, in->H.rows, in->H.cols, in->m, in->n);
    }
    if (o->yb) {
        if (array_read_ensemble(o->yb, NULL, &in->yb, NULL, msg, len) != DK_OK)
            return 1;
        if (in->yb.ndim != 2 || in->yb.shape[0] != in->m || in->yb.shape[1] != in->k)
            return FAILED("%s is %s%zu x %zu; Yb must be M x k = %zu x %zu (the observations of --yo by the members "
                          "of --xb)",
                          o->yb, in->yb.ndim == 2 ? "" : "not 2-D but ", in->yb.ndim >= 1 ? in->yb.shape[0] : 0,
                          in->yb.ndim >= 2 ? in->yb.shape[1] : 1, in->m, in->k);
        if (!(in->yb_data = in_dtype(&in->yb, o->yb, dtype, msg, len)))
            return 1;
    } else {
        if (!(in->yb_data = malloc(in->m * in->k * dk_dtype_size(dtype))))
            return FAILED("out of memory for H Xb (%zu x %zu)", in->m, in->k);
        if (dk_letkf_apply_csr(&in->H, dtype, in->k, in->xb_data, in->yb_data) != DK_OK)
            return FAILED("%s: %s", o->H, dk_last_error(NULL));
    }
    int dg, dobs;
    if ((rc = read_coords(o->grid, "--grid-coords", in->n, "N", &in->grid, &dg, &in->grid64, msg, len)) >= 0 ||
        (rc = read_coords(o->obs, "--obs-coords", in->m, "M", &in->obs, &dobs, &in->obs64, msg, len)) >= 0)
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
static int write_vector(const char *path, const char *name, array_kind kind, const void *data, size_t count,
                        const array_origin *like)
{
    char err[4200];
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
    if (array_write(path, name, kind, nd, shape, data, like, 0, err, sizeof err) != DK_OK)
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
    if ((rc = load(&o, &in, &ncoords, msg, sizeof msg)) >= 0) {
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
    if (o.reference) {
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
    fprintf(stderr,
            "dakit letkf: N=%zu k=%zu M=%zu on %s: %.3f ms (plan and analysis); observations per point %d to %d, "
            "mean %.1f\n",
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
