/* dakit enkf: the localized covariance product, the EnKF analysis step, and
 * a Lorenz-96 twin experiment. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/dist.h"
#include "cli/netcdf.h"
#include "cli/plot.h"
#include "cli/progress.h"
#include "cli/npy.h"
#include "cli/output.h"
#include "enkf/l96.h"

static const char *CMD = "enkf";

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dakit enkf cov      --ens E.npy --loc c.npy --H H.mtx --out PHT.npy [options]\n"
            "       dakit enkf analysis --ens X.npy --obs y.npy --obs-var r.npy --H H.mtx --loc c.npy\n"
            "                           --seed S --out Xa.npy [--inflation 1.0] [options]\n"
            "       dakit enkf l96      [options]   (Lorenz-96 twin experiment)\n"
            "\n"
            "cov computes PHT = [C o (e e^T)] H^T / (L-1) (N x M, float64 .npy), with e the\n"
            "N x L anomalies in E.npy, C symmetric Toeplitz from its first row c (shape N) or\n"
            "block Toeplitz from an nx x ny table (shape nx x ny, N = nx*ny), H an M x N\n"
            "MatrixMarket coordinate file (as scipy.io.mmwrite writes it).\n"
            "Every .npy may be a netCDF variable instead, FILE.nc:VAR[dim=i,...], and every\n"
            "output a .nc file; --ens also takes an ensemble stored as (member, y, x) or\n"
            "(y, x, member), or one file per member, 'mem_{:03d}.nc:T' (docs/formats.md).\n"
            "analysis replaces the forecast ensemble X (N x L) by the stochastic EnKF analysis;\n"
            "the observation perturbations come from Philox keyed by --seed, the same on every\n"
            "backend.\n"
            "\n"
            "  --hpht FILE           cov: also write HPHT = H PHT (M x M)\n"
            "  --obs y.npy           analysis: the M observations, one per row of H\n"
            "  --obs-var r.npy       analysis: their M error variances, each > 0\n"
            "  --seed S              analysis: key of the observation perturbations, an integer\n"
            "                        from 0 to 2^64-1 (required)\n"
            "  --inflation F         analysis: factor on the forecast anomalies, > 0 (default 1.0)\n"
            "  --variant NAME        one of the backend's variants (`dakit info` lists them:\n"
            "                        tiled, banded, fft, lowrank, ...); default: the cost model\n"
            "                        picks (never lowrank: for a smooth c, ask for it)\n"
            "  --scheme auto|tiled|banded|fft|lowrank   the same as --variant (auto: the cost model)\n"
            "  --dtype f64|f32       compute precision (default f64)\n"
            "  --backend NAME        cuda, opencl, cpu, auto or a comma list (default: DAKIT_BACKEND/auto)\n"
            "  --reference           use the serial reference instead of a backend\n"
            "  --decomp A[xB]        under mpirun with more than one rank: the pieces of the state\n"
            "                        per axis (one number for a 1-D c, AxB over nx x ny for a 2-D c),\n"
            "                        their product the number of ranks (default: contiguous ranges of\n"
            "                        rows); each rank reads and writes only its rows\n"
            "\n"
            "l96 options (40 variables, F = 8, every variable observed each cycle with variance 1):\n"
            "  --members L           ensemble members, 2 to 4096 (default 20)\n"
            "  --spinup S            cycles run before the RMSE is averaged, 0 to 10000000 (default 500)\n"
            "  --cycles C            cycles averaged after the spin-up, 1 to 10000000 (default 2000)\n"
            "  --loc-radius R        Gaspari-Cohn half-width, grid points, >= 0; 0: no localization\n"
            "                        (default 5)\n"
            "  --inflation F         factor on the forecast anomalies, > 0 (default 1.03)\n"
            "  --seed S              seeds the start, the observations and the perturbations, 0 to\n"
            "                        2^64-1 (default 1)\n"
            "  --png FILE            the analysis RMSE and ensemble spread per cycle as a picture,\n"
            "                        PNG, or SVG or PDF by the name's extension; '': none\n"
            "                        (default enkf-l96.png)\n"
            "  --svg FILE / --pdf FILE   the same picture also as SVG / PDF (vector)\n"
            "  --every K             print the RMSE every K cycles, 1 to 10000000 (default 200)\n"
            "  --max-rmse X / --min-rmse X   exit 1 unless the time-mean analysis RMSE is <= / >= X (>= 0)\n"
            "  --progress            on stderr the cycle reached, even when it is no terminal (a batch\n"
            "                        job's log): a line at least every 5 seconds, with the elapsed time\n"
            "  --quiet               no progress (default: progress only when stderr is a terminal)\n"
            "  --backend NAME        as above\n");
}

static int parse_scheme(const char *v, const char **variant)
{
    static const char *names[] = {"tiled", "banded", "fft", "lowrank"};
    *variant = NULL;
    if (!strcmp(v, "auto"))
        return 0;
    for (int k = 0; k < 4; k++)
        if (!strcmp(v, names[k])) {
            *variant = names[k];
            return 0;
        }
    return -1;
}

static double value_of(const npy_array *a, size_t k)
{
    return a->dtype == DK_F32 ? (double)((const float *)a->data)[k] : ((const double *)a->data)[k];
}

/* The array as float64 (a new allocation), after checking every value is
 * finite; NULL with the sentence in msg. index (may be NULL) maps an element
 * to its index in the whole file, for the sentence. */
static double *as_f64(const npy_array *a, const char *path, size_t (*index)(const void *, size_t), const void *arg,
                      char *msg, size_t len)
{
    double *d = malloc((a->count ? a->count : 1) * sizeof *d);
    if (!d) {
        snprintf(msg, len, "out of memory reading %s", path);
        return NULL;
    }
    for (size_t k = 0; k < a->count; k++) {
        d[k] = value_of(a, k);
        if (!isfinite(d[k])) {
            snprintf(msg, len, "%s: value %zu is not finite (%g)", path, index ? index(arg, k) : k, d[k]);
            free(d);
            return NULL;
        }
    }
    return d;
}

typedef struct inputs {
    const char *ens, *loc, *H, *out, *hpht, *obs, *obs_var, *backend;
    const char *variant;
    dk_dtype dtype;
    int reference;
    const char *decomp_s;
    int decomp[DK_MAX_DIMS], ndecomp;
    int have_seed;
    unsigned long long seed;
    double inflation;
} inputs;

static int parse(int argc, char **argv, inputs *in, int analysis)
{
    memset(in, 0, sizeof *in);
    in->dtype = DK_F64;
    in->inflation = 1.0;
    static const struct option option_table[] = {CLI_FLAG("help"), CLI_FLAG("reference"), CLI_VALUE("ens"),
        CLI_VALUE("loc"), CLI_VALUE("H"), CLI_VALUE("out"), CLI_VALUE("hpht"), CLI_VALUE("obs"),
        CLI_VALUE("obs-var"), CLI_VALUE("backend"), CLI_VALUE("variant"), CLI_VALUE("decomp"), CLI_VALUE("scheme"),
        CLI_VALUE("dtype"), CLI_VALUE("seed"), CLI_VALUE("inflation"), {0}};
    cli_args args = {.cmd = CMD, .argc = argc, .argv = argv, .options = option_table};
    int more;
    while ((more = cli_next(&args)) == 1) {
        const char *a = args.opt, *v = args.value;
        if (!strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--reference")) {
            in->reference = 1;
            continue;
        }
        if (!strcmp(a, "--ens"))
            in->ens = v;
        else if (!strcmp(a, "--loc"))
            in->loc = v;
        else if (!strcmp(a, "--H"))
            in->H = v;
        else if (!strcmp(a, "--out"))
            in->out = v;
        else if (!strcmp(a, "--hpht") && !analysis)
            in->hpht = v;
        else if (!strcmp(a, "--obs") && analysis)
            in->obs = v;
        else if (!strcmp(a, "--obs-var") && analysis)
            in->obs_var = v;
        else if (!strcmp(a, "--backend"))
            in->backend = v;
        else if (!strcmp(a, "--variant"))
            in->variant = v;
        else if (!strcmp(a, "--decomp")) {
            in->decomp_s = v;
            if (dist_parse_decomp(CMD, v, in->decomp, &in->ndecomp))
                return 2;
        } else if (!strcmp(a, "--scheme")) {
            if (parse_scheme(v, &in->variant))
                return cli_error(CMD, 2, "--scheme must be auto, tiled, banded, fft or lowrank, not '%s'", v);
        } else if (!strcmp(a, "--dtype")) {
            if (!strcmp(v, "f64"))
                in->dtype = DK_F64;
            else if (!strcmp(v, "f32"))
                in->dtype = DK_F32;
            else
                return cli_error(CMD, 2, "--dtype must be f32 or f64, not '%s'", v);
        } else if (!strcmp(a, "--seed") && analysis) {
            uint64_t seed;
            if (cli_u64(CMD, a, v, &seed))
                return 2;
            in->seed = seed;
            in->have_seed = 1;
        } else if (!strcmp(a, "--inflation") && analysis) {
            if (cli_double(CMD, a, v, 0, INFINITY, CLI_OPEN_LO, &in->inflation))
                return 2;
        }
    }
    if (more)
        return more;
    if (!in->ens || !in->loc || !in->H || !in->out)
        return cli_error(CMD, 2, "--ens, --loc, --H and --out are required (dakit enkf --help)");
    if (analysis && (!in->obs || !in->obs_var || !in->have_seed))
        return cli_error(CMD, 2, "analysis needs --obs, --obs-var and --seed (dakit enkf --help)");
    if (cli_options_only)
        return 0;
    return -1;
}

/* Whether the outputs can be made, before any work: 0, or 1 with the
 * sentence in msg. */
static int check_outputs(const inputs *in, char *msg, size_t len)
{
    return output_check(in->out, msg, len) != 0 || (in->hpht && output_check(in->hpht, msg, len) != 0);
}

typedef struct loaded {
    npy_array ens, loc;
    array_origin origin; /* the ensemble's, for netCDF outputs */
    size_t ens_offset;   /* where the ensemble's data start in its .npy file (header_only) */
    double *loc64;
    dk_csr H;
    dk_enkf_desc desc;
    void *data; /* the ensemble (or this rank's rows of it) in the compute dtype */
} loaded;

static void unload(loaded *ld)
{
    npy_free(&ld->ens);
    npy_free(&ld->loc);
    free(ld->loc64);
    dk_csr_free(&ld->H);
    free(ld->data);
}

#define FAILED(...) (snprintf(msg, len, __VA_ARGS__), 1)

/* Reads and checks the inputs but the ensemble's values (all of them
 * unless header_only: then only its header, for load_rows). -1, or 1 with
 * the sentence in msg. */
static int load(const inputs *in, loaded *ld, int header_only, char *msg, size_t len)
{
    char err[512];
    memset(ld, 0, sizeof *ld);
    if (header_only && array_is_netcdf_name(in->ens))
        return FAILED("%s: under mpirun the ensemble is read by rows from a .npy file; netCDF input runs in one "
                      "process", in->ens);
    if ((header_only ? npy_read_header(in->ens, &ld->ens, &ld->ens_offset, err, sizeof err)
                     : array_read_ensemble(in->ens, NULL, &ld->ens, &ld->origin, err, sizeof err)) != DK_OK)
        return FAILED("%s", err);
    if (ld->ens.ndim != 2)
        return FAILED("%s has %d dimensions; the ensemble must be N x L", in->ens, ld->ens.ndim);
    size_t N = ld->ens.shape[0], L = ld->ens.shape[1];
    if (L < 2)
        return FAILED("%s has L = %zu member%s; at least 2 are needed", in->ens, L, L == 1 ? "" : "s");
    if (array_read(in->loc, NULL, &ld->loc, NULL, err, sizeof err) != DK_OK)
        return FAILED("%s", err);
    dk_enkf_desc_init(&ld->desc);
    ld->desc.dtype = in->dtype;
    ld->desc.n = N;
    ld->desc.members = L;
    ld->desc.variant = in->variant;
    if (ld->loc.ndim == 1) {
        if (ld->loc.shape[0] != N)
            return FAILED("%s holds %zu values but the ensemble has N = %zu rows", in->loc, ld->loc.shape[0], N);
    } else if (ld->loc.ndim == 2) {
        if (ld->loc.shape[0] * ld->loc.shape[1] != N)
            return FAILED("%s is a %zu x %zu grid (%zu points) but the ensemble has N = %zu rows", in->loc,
                          ld->loc.shape[0], ld->loc.shape[1], ld->loc.shape[0] * ld->loc.shape[1], N);
        ld->desc.loc_ndim = 2;
        ld->desc.nx = ld->loc.shape[0];
        ld->desc.ny = ld->loc.shape[1];
    } else
        return FAILED("%s has %d dimensions; c is 1-D (shape N) or 2-D (shape nx x ny)", in->loc, ld->loc.ndim);
    if (!(ld->loc64 = as_f64(&ld->loc, in->loc, NULL, NULL, msg, len)))
        return 1;
    ld->desc.loc = ld->loc64;
    if (dk_csr_read_mtx(in->H, &ld->H) != DK_OK)
        return FAILED("%s", dk_last_error(NULL));
    if (ld->H.cols != N)
        return FAILED("%s is %zu x %zu but the state has N = %zu (H must be M x N)", in->H, ld->H.rows, ld->H.cols,
                      N);
    ld->desc.H = ld->H;
    if (header_only)
        return -1;
    double *e = as_f64(&ld->ens, in->ens, NULL, NULL, msg, len);
    if (!e)
        return 1;
    if (in->dtype == DK_F32) {
        float *f = malloc(N * L * sizeof *f);
        if (!f) {
            free(e);
            return FAILED("out of memory");
        }
        for (size_t k = 0; k < N * L; k++)
            f[k] = (float)e[k];
        free(e);
        ld->data = f;
    } else
        ld->data = e;
    return -1;
}

/* A result in float64: the analysis ensemble in its input's layout (ens),
 * PHT over the state and the observations, HPHT plain. */
static dk_status write_result(const char *path, const char *name, const double *d, size_t rows, size_t cols,
                              const array_origin *ens, char *err, size_t len)
{
    size_t shape[2] = {rows, cols};
    /* one file per member: all of them or none (the previous cycle's stay) */
    output_group_begin();
    dk_status st = !strcmp(name, "analysis")
                       ? array_write_ensemble(path, d, rows, cols, ens, err, len)
                   : !strcmp(name, "PHT")
                       ? array_write_state_by(path, name, d, rows, cols, ens, "observation", err, len)
                       : array_write(path, name, ARRAY_F64, 2, shape, d, NULL, 0, err, len);
    if (output_group_end(st == DK_OK, err, len) != 0)
        st = DK_ERR_IO;
    return st;
}

static int write_f64(const char *path, const char *name, const void *data, dk_dtype t, size_t rows, size_t cols,
                     const array_origin *ens)
{
    double *d = malloc((rows * cols > 0 ? rows * cols : 1) * sizeof *d);
    if (!d)
        return cli_error(CMD, 1, "out of memory");
    for (size_t k = 0; k < rows * cols; k++)
        d[k] = t == DK_F32 ? (double)((const float *)data)[k] : ((const double *)data)[k];
    char err[4200];
    dk_status st = write_result(path, name, d, rows, cols, ens, err, sizeof err);
    free(d);
    return st == DK_OK ? 0 : cli_error(CMD, 1, "%s", err);
}

static int open_plan(const inputs *in, loaded *ld, dk_context **ctx, dk_plan **plan)
{
    if (dk_context_create(in->backend, ctx) != DK_OK)
        return cli_error(CMD, 1, "%s", dk_last_error(NULL));
    if (dk_enkf_plan_create(*ctx, &ld->desc, plan) != DK_OK)
        return cli_error(CMD, 1, "%s", dk_last_error(*ctx));
    return -1;
}

#ifdef DK_TOOLS_MPI
static int run_distributed(const inputs *in, int analysis);
#endif

static int run_cov(int argc, char **argv)
{
    inputs in;
    int rc = parse(argc, argv, &in, 0);
    if (rc >= 0)
        return rc;
#ifdef DK_TOOLS_MPI
    int own;
    if (dist_begin(&own)) {
        rc = run_distributed(&in, 0);
        dist_end(own);
        return rc;
    }
#endif
    if (dist_single_process(CMD, in.decomp_s, in.decomp, in.ndecomp))
        return 2;
    loaded ld;
    dk_context *ctx = NULL;
    dk_plan *plan = NULL;
    void *pht = NULL, *hpht = NULL;
    char msg[4400];
    if (check_outputs(&in, msg, sizeof msg))
        return cli_error(CMD, 1, "%s", msg);
    if ((rc = load(&in, &ld, 0, msg, sizeof msg)) >= 0) {
        cli_error(CMD, rc, "%s", msg);
        goto done;
    }
    size_t N = ld.desc.n, M = ld.H.rows, w = dk_dtype_size(in.dtype);
    if (M && N > SIZE_MAX / M / w) {
        rc = cli_error(CMD, 1, "the %zu x %zu result is larger than memory can address", N, M);
        goto done;
    }
    pht = malloc(N * M * w);
    hpht = malloc(M * M * w);
    if (!pht || !hpht) {
        rc = cli_error(CMD, 1, "out of memory for the %zu x %zu result", N, M);
        goto done;
    }
    if (in.reference) {
        if (dk_enkf_cov_reference(&ld.desc, ld.data, pht, hpht) != DK_OK) {
            rc = cli_error(CMD, 1, "%s", dk_last_error(NULL));
            goto done;
        }
    } else {
        if ((rc = open_plan(&in, &ld, &ctx, &plan)) >= 0)
            goto done;
        double t0 = cli_now();
        if (dk_enkf_cov_host(plan, ld.data, pht, hpht) != DK_OK) {
            rc = cli_error(CMD, 1, "%s", dk_last_error(ctx));
            goto done;
        }
        fprintf(stderr, "dakit enkf cov: N=%zu L=%zu M=%zu nnz=%zu on %s (%s), variant %s: %.3f ms\n", N,
                ld.desc.members, M, (size_t)ld.H.indptr[M], dk_context_backend(ctx), dk_context_device(ctx),
                dk_enkf_plan_variant(plan), (cli_now() - t0) * 1e3);
    }
    if ((rc = write_f64(in.out, "PHT", pht, in.dtype, N, M, &ld.origin)) != 0 ||
        (in.hpht && (rc = write_f64(in.hpht, "HPHT", hpht, in.dtype, M, M, &ld.origin)) != 0))
        goto done;
    rc = 0;
done:
    free(pht);
    free(hpht);
    dk_plan_destroy(plan);
    dk_context_destroy(ctx);
    unload(&ld);
    return rc;
}

static double *read_vector(const char *path, size_t m, const char *what, char *msg, size_t len)
{
    npy_array a;
    if (array_read(path, NULL, &a, NULL, msg, len) != DK_OK)
        return NULL;
    if (a.count != m || a.ndim != 1) {
        snprintf(msg, len, "%s holds %zu values in %d dimensions; %s needs %zu (one per row of H)", path, a.count,
                 a.ndim, what, m);
        npy_free(&a);
        return NULL;
    }
    double *d = as_f64(&a, path, NULL, NULL, msg, len);
    npy_free(&a);
    return d;
}

/* The M observations and their variances (each > 0): -1, or 1 with the
 * sentence in msg. */
static int read_observations(const inputs *in, size_t M, double **y, double **r, char *msg, size_t len)
{
    if (!(*y = read_vector(in->obs, M, "the observation vector", msg, len)) ||
        !(*r = read_vector(in->obs_var, M, "the observation variances", msg, len)))
        return 1;
    for (size_t j = 0; j < M; j++)
        if (!((*r)[j] > 0))
            return FAILED("%s: observation variance %zu is %g; variances must be > 0", in->obs_var, j, (*r)[j]);
    return -1;
}

static int run_analysis(int argc, char **argv)
{
    inputs in;
    int rc = parse(argc, argv, &in, 1);
    if (rc >= 0)
        return rc;
#ifdef DK_TOOLS_MPI
    int own;
    if (dist_begin(&own)) {
        rc = run_distributed(&in, 1);
        dist_end(own);
        return rc;
    }
#endif
    if (dist_single_process(CMD, in.decomp_s, in.decomp, in.ndecomp))
        return 2;
    loaded ld;
    dk_context *ctx = NULL;
    dk_plan *plan = NULL;
    double *y = NULL, *r = NULL;
    char msg[4400];
    if (check_outputs(&in, msg, sizeof msg))
        return cli_error(CMD, 1, "%s", msg);
    if ((rc = load(&in, &ld, 0, msg, sizeof msg)) >= 0 ||
        (rc = read_observations(&in, ld.H.rows, &y, &r, msg, sizeof msg)) >= 0) {
        cli_error(CMD, rc, "%s", msg);
        goto done;
    }
    if (in.reference) {
        if (dk_enkf_analysis_reference(&ld.desc, ld.data, y, r, in.seed, in.inflation) != DK_OK) {
            rc = cli_error(CMD, 1, "%s", dk_last_error(NULL));
            goto done;
        }
    } else {
        if ((rc = open_plan(&in, &ld, &ctx, &plan)) >= 0)
            goto done;
        if (dk_enkf_analysis_host(plan, ld.data, y, r, in.seed, in.inflation) != DK_OK) {
            rc = cli_error(CMD, 1, "%s", dk_last_error(ctx));
            goto done;
        }
    }
    rc = write_f64(in.out, "analysis", ld.data, in.dtype, ld.desc.n, ld.desc.members, &ld.origin);
done:
    free(y);
    free(r);
    dk_plan_destroy(plan);
    dk_context_destroy(ctx);
    unload(&ld);
    return rc;
}

#ifdef DK_TOOLS_MPI
/* This rank's points seen in the files: the state as N (1-D c) or nx x ny
 * (2-D c), each point a row of `width` values. */
typedef struct rows_view {
    int ndim;                 /* axes of the view, the row included */
    size_t shape[3], offset[3], extent[3];
    size_t points;            /* this rank's */
    size_t ny;                /* 1 for a 1-D c */
} rows_view;

static rows_view view_of(const loaded *ld, const dk_mpi_part *part, size_t width)
{
    rows_view v;
    memset(&v, 0, sizeof v);
    int nd = ld->desc.loc_ndim == 2 ? 2 : 1;
    v.ndim = nd + 1;
    v.ny = nd == 2 ? ld->desc.ny : 1;
    v.points = 1;
    for (int a = 0; a < nd; a++) {
        v.shape[a] = nd == 2 ? (a ? ld->desc.ny : ld->desc.nx) : ld->desc.n;
        v.offset[a] = part->offset[a];
        v.extent[a] = part->extent[a];
        v.points *= part->extent[a];
    }
    v.shape[nd] = width;
    v.extent[nd] = width;
    return v;
}

/* The index in the whole ensemble file of element k of this rank's rows. */
static size_t ens_index(const void *arg, size_t k)
{
    const rows_view *v = arg;
    size_t L = v->shape[v->ndim - 1], p = k / L;
    size_t ix = v->offset[0] + (v->ndim == 3 ? p / v->extent[1] : p), iy = v->ndim == 3 ? v->offset[1] + p % v->extent[1] : 0;
    return (ix * v->ny + iy) * L + k % L;
}

/* This rank's rows of the ensemble into ld->data, in the compute dtype. */
static int load_rows(const inputs *in, loaded *ld, const rows_view *v, char *msg, size_t len)
{
    char err[4200];
    npy_array view = ld->ens, box = {.dtype = ld->ens.dtype, .ndim = 1};
    view.ndim = v->ndim;
    for (int a = 0; a < v->ndim; a++)
        view.shape[a] = v->shape[a];
    box.count = v->points * ld->desc.members;
    box.shape[0] = box.count;
    if (!(box.data = malloc(box.count ? box.count * dk_dtype_size(box.dtype) : 1)))
        return FAILED("out of memory for %zu rows of %s", v->points, in->ens);
    if (npy_read_box(in->ens, &view, ld->ens_offset, v->offset, v->extent, box.data, err, sizeof err) != DK_OK) {
        npy_free(&box);
        return FAILED("%s", err);
    }
    double *e = as_f64(&box, in->ens, ens_index, v, msg, len);
    npy_free(&box);
    if (!e)
        return 1;
    if (in->dtype == DK_F32) {
        float *f = malloc((box.count ? box.count : 1) * sizeof *f);
        if (!f) {
            free(e);
            return FAILED("out of memory");
        }
        for (size_t k = 0; k < box.count; k++)
            f[k] = (float)e[k];
        free(e);
        ld->data = f;
    } else
        ld->data = e;
    return -1;
}

/* As float64 (a new allocation), for writing. */
static double *to_f64(const void *data, dk_dtype t, size_t count)
{
    double *d = malloc((count ? count : 1) * sizeof *d);
    for (size_t k = 0; d && k < count; k++)
        d[k] = t == DK_F32 ? (double)((const float *)data)[k] : ((const double *)data)[k];
    return d;
}

#undef FAILED
#define FAILED(...) (snprintf(msg, sizeof msg, __VA_ARGS__), 1)

/* An output that rank 0 writes alone (netCDF, one file per member), the
 * gathered result in float64 */
typedef struct enkf_output {
    const char *name;
    size_t rows, cols;
    const array_origin *ens;
} enkf_output;

static int write_whole(const char *path, const void *whole, void *arg, char *err, size_t len)
{
    const enkf_output *o = arg;
    return write_result(path, o->name, whole, o->rows, o->cols, o->ens, err, len) != DK_OK;
}

/* enkf cov or analysis with every rank on its own rows of the state: the
 * same files as one process, each rank reading and writing only its rows. */
static int run_distributed(const inputs *in, int analysis)
{
    int rank, size, failed = 0, rc = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *sub = analysis ? "analysis" : "cov";
    if (in->reference)
        return cli_error(CMD, 2, "--reference runs in one process; under mpirun (%d ranks) each rank works on "
                                 "its part on a backend", size);
    char msg[4400] = "";
    loaded ld;
    double *y = NULL, *r = NULL, *out64 = NULL;
    void *pht = NULL, *hpht = NULL;
    dk_context *ctx = NULL;
    dk_mpi_plan *plan = NULL;
    memset(&ld, 0, sizeof ld);
    failed = check_outputs(in, msg, sizeof msg) || load(in, &ld, 1, msg, sizeof msg) >= 0 ||
             (analysis && read_observations(in, ld.H.rows, &y, &r, msg, sizeof msg) >= 0);
    if (dist_agree(failed, msg, sizeof msg))
        goto done;
    /* each rank read its own copies: from here every rank has rank 0's
     * headers, c, H and observations, or all stop */
    if (dist_same_header(in->ens, ld.ens.dtype, ld.ens.ndim, ld.ens.shape, msg, sizeof msg) ||
        dist_same_header(in->loc, ld.loc.dtype, ld.loc.ndim, ld.loc.shape, msg, sizeof msg) ||
        dist_same_bytes(in->loc, ld.loc64, ld.loc.count * sizeof *ld.loc64, msg, sizeof msg) ||
        dist_same_bytes(in->H, ld.H.indptr, (ld.H.rows + 1) * sizeof *ld.H.indptr, msg, sizeof msg) ||
        dist_same_bytes(in->H, ld.H.indices, (size_t)ld.H.indptr[ld.H.rows] * sizeof *ld.H.indices, msg, sizeof msg) ||
        dist_same_bytes(in->H, ld.H.values, (size_t)ld.H.indptr[ld.H.rows] * sizeof *ld.H.values, msg, sizeof msg) ||
        (analysis && (dist_same_bytes(in->obs, y, ld.H.rows * sizeof *y, msg, sizeof msg) ||
                      dist_same_bytes(in->obs_var, r, ld.H.rows * sizeof *r, msg, sizeof msg))))
        goto done;
    size_t N = ld.desc.n, L = ld.desc.members, M = ld.H.rows, w = dk_dtype_size(in->dtype);
    int nd = ld.desc.loc_ndim == 2 ? 2 : 1;
    size_t grid[2] = {nd == 2 ? ld.desc.nx : N, ld.desc.ny};
    dk_mpi_part part;
    if (dist_decompose(CMD, in->loc, nd, grid, in->decomp, in->ndecomp, &part)) {
        unload(&ld);
        free(y);
        free(r);
        return 2;
    }
    rows_view ev = view_of(&ld, &part, L), ov = view_of(&ld, &part, analysis ? L : M);
    dist_choose_device(in->backend);
    if (dk_context_create(in->backend, &ctx) != DK_OK)
        failed = FAILED("rank %d of %d: %s", rank, size, dk_last_error(NULL));
    else if (load_rows(in, &ld, &ev, msg, sizeof msg) >= 0)
        failed = 1;
    else if (!analysis && (!(pht = malloc(ev.points && M ? ev.points * M * w : 1)) ||
                           (in->hpht && !(hpht = malloc(M ? M * M * w : 1)))))
        failed = FAILED("rank %d of %d: out of memory for its %zu x %zu part of the result", rank, size, ev.points,
                        M);
    if (dist_agree(failed, msg, sizeof msg))
        goto done;

    double t0 = cli_now();
    dk_status st = dk_mpi_enkf_plan_create(ctx, MPI_COMM_WORLD, &ld.desc, &part, &plan);
    if (st == DK_OK)
        st = analysis ? dk_mpi_enkf_analysis_host(plan, ld.data, y, r, in->seed, in->inflation)
                      : dk_mpi_enkf_cov_host(plan, ld.data, pht, hpht);
    /* collective: on failure every rank has the same sentence */
    if (st != DK_OK)
        failed = FAILED("%s", dk_mpi_last_error());
    if (dist_agree(failed, msg, sizeof msg))
        goto done;
    double t1 = cli_now();

    const void *result = analysis ? ld.data : pht;
    size_t cols = analysis ? L : M, shape[2] = {N, cols};
    if (!(out64 = to_f64(result, in->dtype, ev.points * cols)))
        failed = FAILED("rank %d of %d: out of memory", rank, size);
    enkf_output eo = {analysis ? "analysis" : "PHT", N, cols, &ld.origin};
    if (dist_agree(failed, msg, sizeof msg) ||
        dist_write(in->out, "<f8", 8, 2, shape, ov.ndim, ov.shape, ov.offset, ov.extent, out64, write_whole, &eo, msg,
                   sizeof msg))
        goto done;
    if (hpht) {
        free(out64);
        size_t hshape[2] = {M, M};
        if (!(out64 = to_f64(hpht, in->dtype, M * M)))
            failed = FAILED("rank %d of %d: out of memory", rank, size);
        if (dist_agree(failed, msg, sizeof msg) ||
            dist_write_root(in->hpht, "<f8", 8, 2, hshape, out64, write_whole,
                            &(enkf_output){"HPHT", M, M, NULL}, msg, sizeof msg))
            goto done;
    }
    if (rank == 0)
        fprintf(stderr, "dakit enkf %s: N=%zu L=%zu M=%zu on %d ranks (rank 0: %s, %s): %.3f ms\n", sub, N, L, M,
                size, dk_context_backend(ctx), dk_context_device(ctx), (t1 - t0) * 1e3);
    rc = 0;
done:
    if (rc)
        cli_error(CMD, 1, "%s", msg);
    dk_mpi_plan_destroy(plan);
    dk_context_destroy(ctx);
    unload(&ld);
    free(y);
    free(r);
    free(pht);
    free(hpht);
    free(out64);
    return rc;
}
#endif

/* ---- Lorenz-96 twin experiment ---- */

/* Gaspari & Cohn (1999), eq. 4.10, with half-width c (zero beyond 2c). */
static double gaspari_cohn(double d, double c)
{
    double r = d / c;
    if (r <= 1)
        return (((-0.25 * r + 0.5) * r + 0.625) * r - 5.0 / 3.0) * r * r + 1.0;
    if (r < 2)
        return ((((r / 12.0 - 0.5) * r + 0.625) * r + 5.0 / 3.0) * r - 5.0) * r + 4.0 - 2.0 / (3.0 * r);
    return 0.0;
}

typedef struct l96_run {
    int members, spinup, cycles;
    double radius, inflation;
    uint64_t seed;
    const char *backend, *device, *variant;
} l96_run;

/* The analysis RMSE and the ensemble spread per cycle (enkf/l96.h). */
static int rmse_picture(const char *path, const double *rmse, const double *spread, int n, double mean,
                        const l96_run *r)
{
    char sub[512], loc[96];
    if (r->radius > 0)
        snprintf(loc, sizeof loc, "Gaspari-Cohn localization, half-width %.3g points", r->radius);
    else
        snprintf(loc, sizeof loc, "no localization");
    snprintf(sub, sizeof sub, "N = 40, F = 8, %d members, %s, inflation %.3g, seed %llu; %s (%s), variant %s",
             r->members, loc, r->inflation, (unsigned long long)r->seed, r->backend, r->device, r->variant);
    l96_picture_info info = {"Lorenz-96 EnKF twin experiment: analysis RMSE and ensemble spread", sub, r->spinup,
                             mean, 0, 0};
    return l96_picture(CMD, path, rmse, spread, n, &info);
}

static int run_l96(int argc, char **argv)
{
    int members = 20, cycles = 2000, spinup = 500, every = 200;
    double radius = 5, inflation = 1.03, max_rmse = -1, min_rmse = -1;
    uint64_t seed = 1;
    const char *png = "enkf-l96.png", *svg = NULL, *pdf = NULL, *backend = NULL;
    int png_given = 0;
    progress prog;
    progress_init(&prog, "enkf l96");
    static const struct option option_table[] = {CLI_FLAG("help"), CLI_VALUE("members"), CLI_VALUE("cycles"),
        CLI_VALUE("spinup"), CLI_VALUE("every"), CLI_VALUE("loc-radius"), CLI_VALUE("inflation"),
        CLI_VALUE("max-rmse"), CLI_VALUE("min-rmse"), CLI_VALUE("seed"), CLI_VALUE("png"), CLI_VALUE("svg"),
        CLI_VALUE("pdf"), CLI_VALUE("backend"), CLI_FLAG("progress"), CLI_FLAG("quiet"), {0}};
    cli_args args = {.cmd = CMD, .argc = argc, .argv = argv, .options = option_table};
    int more;
    while ((more = cli_next(&args)) == 1) {
        const char *a = args.opt, *v = args.value;
        if (!strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (progress_option(&prog, a))
            continue;
        int bad = 0;
        if (!strcmp(a, "--members"))
            bad = cli_int(CMD, a, v, 2, 4096, &members);
        else if (!strcmp(a, "--cycles"))
            bad = cli_int(CMD, a, v, 1, 10000000, &cycles);
        else if (!strcmp(a, "--spinup"))
            bad = cli_int(CMD, a, v, 0, 10000000, &spinup);
        else if (!strcmp(a, "--every"))
            bad = cli_int(CMD, a, v, 1, 10000000, &every);
        else if (!strcmp(a, "--loc-radius"))
            bad = cli_double(CMD, a, v, 0, INFINITY, 0, &radius);
        else if (!strcmp(a, "--inflation"))
            bad = cli_double(CMD, a, v, 0, INFINITY, CLI_OPEN_LO, &inflation);
        else if (!strcmp(a, "--max-rmse"))
            bad = cli_double(CMD, a, v, 0, INFINITY, 0, &max_rmse);
        else if (!strcmp(a, "--min-rmse"))
            bad = cli_double(CMD, a, v, 0, INFINITY, 0, &min_rmse);
        else if (!strcmp(a, "--seed"))
            bad = cli_u64(CMD, a, v, &seed);
        else if (!strcmp(a, "--png"))
            png = v, png_given = 1;
        else if (!strcmp(a, "--svg"))
            svg = v;
        else if (!strcmp(a, "--pdf"))
            pdf = v;
        else if (!strcmp(a, "--backend"))
            backend = v;
        if (bad)
            return bad;
    }
    if (more)
        return more;
    if (cli_options_only)
        return 0;
    if (!png_given && !plot_built()) {
        printf("no picture: dakit was built without cairo\n");
        png = NULL;
    }
    const char *pictures[3] = {png && *png ? png : NULL, svg, pdf};
    for (int k = 0; k < 3; k++) {
        char err[4200];
        if (pictures[k] && plot_check_path(pictures[k], err, sizeof err) != 0)
            return cli_error(CMD, 1, "%s", err);
    }
    size_t L = (size_t)members, N = L96_N;
    double c[L96_N], r[L96_N], y[L96_N], noise[L96_N], truth[L96_N];
    int64_t indptr[L96_N + 1], indices[L96_N];
    double values[L96_N];
    for (size_t i = 0; i < N; i++) {
        size_t d = i < N - i ? i : N - i; /* cyclic distance: C is circulant, so Toeplitz with this first row */
        c[i] = radius > 0 ? gaspari_cohn((double)d, radius) : 1.0;
        r[i] = 1.0;
        indptr[i] = (int64_t)i;
        indices[i] = (int64_t)i;
        values[i] = 1.0;
    }
    indptr[N] = (int64_t)N;
    dk_enkf_desc desc;
    dk_enkf_desc_init(&desc);
    desc.n = N;
    desc.members = L;
    desc.loc = c;
    desc.H = (dk_csr){N, N, indptr, indices, values};
    dk_context *ctx = NULL;
    dk_plan *plan = NULL;
    double *X = malloc(N * L * sizeof *X), *rmse = malloc((size_t)(spinup + cycles) * sizeof *rmse);
    double *spread = malloc((size_t)(spinup + cycles) * sizeof *spread);
    int rc = 1;
    if (!X || !rmse || !spread) {
        cli_error(CMD, 1, "out of memory");
        goto done;
    }
    if (dk_context_create(backend, &ctx) != DK_OK) {
        cli_error(CMD, 1, "%s", dk_last_error(NULL));
        goto done;
    }
    if (dk_enkf_plan_create(ctx, &desc, &plan) != DK_OK) {
        cli_error(CMD, 1, "%s", dk_last_error(ctx));
        goto done;
    }
    /* the truth starts at rest plus a nudge and runs onto the attractor;
     * members start from the truth plus unit noise (Philox, like the obs) */
    for (size_t i = 0; i < N; i++)
        truth[i] = L96_F + (i == 0 ? 0.01 : 0.0);
    for (int k = 0; k < 2000; k++)
        l96_step(truth, 1);
    double *scatter = malloc(N * L * sizeof *scatter), *ones = malloc(N * L * sizeof *ones);
    if (!scatter || !ones) {
        free(scatter);
        free(ones);
        cli_error(CMD, 1, "out of memory");
        goto done;
    }
    for (size_t k = 0; k < N * L; k++)
        ones[k] = 1.0;
    dk_enkf_perturbations(seed ^ 0x1234567ull, N, L, ones, scatter);
    for (size_t i = 0; i < N; i++)
        for (size_t l = 0; l < L; l++)
            X[i * L + l] = truth[i] + scatter[i * L + l];
    free(scatter);
    free(ones);
    printf("Lorenz-96 twin experiment: N=40 F=8 dt=0.05 RK4, all variables observed every step (variance 1),\n"
           "%zu members, %s, inflation %.3g, backend %s (%s), variant %s\n",
           L, radius > 0 ? "Gaspari-Cohn localization" : "no localization", inflation, dk_context_backend(ctx),
           dk_context_device(ctx), dk_enkf_plan_variant(plan));
    if (radius > 0)
        printf("localization half-width %.3g grid points (zero beyond %.3g)\n", radius, 2 * radius);
    double sum = 0, window = 0;
    long total = (long)spinup + cycles;
    progress_start(&prog);
    progress_stage(&prog, "%ld cycles (%d of spin-up), %zu members", total, spinup, L);
    for (long t = 0; t < total; t++) {
        l96_step(truth, 1);
        for (size_t l = 0; l < L; l++)
            l96_step(X + l, L);
        dk_enkf_perturbations(seed * 1000003ull + (uint64_t)t, N, 1, r, noise);
        for (size_t i = 0; i < N; i++)
            y[i] = truth[i] + noise[i];
        if (dk_enkf_analysis_host(plan, X, y, r, seed + 0x9e3779b97f4a7c15ull * (uint64_t)(t + 1), inflation) != DK_OK) {
            cli_error(CMD, 1, "cycle %ld: %s", t, dk_last_error(ctx));
            goto done;
        }
        double se = 0, var = 0;
        for (size_t i = 0; i < N; i++) {
            double mean = 0, ss = 0;
            for (size_t l = 0; l < L; l++)
                mean += X[i * L + l];
            mean /= (double)L;
            for (size_t l = 0; l < L; l++)
                ss += (X[i * L + l] - mean) * (X[i * L + l] - mean);
            se += (mean - truth[i]) * (mean - truth[i]);
            var += ss / (double)(L - 1);
        }
        rmse[t] = sqrt(se / (double)N);
        spread[t] = sqrt(var / (double)N);
        if (!isfinite(rmse[t])) {
            cli_error(CMD, 1, "cycle %ld: the ensemble diverged (non-finite RMSE)", t);
            goto done;
        }
        window += rmse[t];
        if (t >= spinup)
            sum += rmse[t];
        progress_tick(&prog, "cycle %ld of %ld%s, analysis RMSE %.4f", t + 1, total, t < spinup ? " (spin-up)" : "",
                      rmse[t]);
        if ((t + 1) % every == 0) {
            progress_clear(&prog);
            printf("cycle %6ld%s  analysis RMSE %.4f  (mean of the last %d: %.4f)\n", t + 1,
                   t < spinup ? " (spin-up)" : "", rmse[t], every, window / (double)every);
            fflush(stdout);
            window = 0;
        }
    }
    progress_stage(&prog, "%ld cycles done", total);
    progress_clear(&prog);
    double mean = sum / (double)cycles;
    printf("time-mean analysis RMSE over %d cycles after %d of spin-up: %.4f (observation error 1)\n", cycles,
           spinup, mean);
    rc = 0;
    l96_run info = {members, spinup, cycles, radius, inflation, seed, dk_context_backend(ctx), dk_context_device(ctx),
                    dk_enkf_plan_variant(plan)};
    for (int k = 0; k < 3; k++)
        if (pictures[k] && (rc = rmse_picture(pictures[k], rmse, spread, (int)total, mean, &info)) == 0)
            printf("wrote %s (analysis RMSE and ensemble spread per cycle)\n", pictures[k]);
        else if (pictures[k])
            goto done;
    if (max_rmse >= 0 && !(mean <= max_rmse)) {
        fprintf(stderr, "dakit enkf l96: the time-mean RMSE %.4f exceeds --max-rmse %.4f\n", mean, max_rmse);
        rc = 1;
    }
    if (min_rmse >= 0 && !(mean >= min_rmse)) {
        fprintf(stderr, "dakit enkf l96: the time-mean RMSE %.4f is below --min-rmse %.4f\n", mean, min_rmse);
        rc = 1;
    }
done:
    free(X);
    free(rmse);
    free(spread);
    dk_plan_destroy(plan);
    dk_context_destroy(ctx);
    return rc;
}

int cmd_enkf(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "cov"))
        return run_cov(argc - 1, argv + 1);
    if (!strcmp(argv[1], "analysis"))
        return run_analysis(argc - 1, argv + 1);
    if (!strcmp(argv[1], "l96"))
        return run_l96(argc - 1, argv + 1);
    return cli_error(CMD, 2, "unknown subcommand '%s'; cov, analysis or l96 (dakit enkf --help)", argv[1]);
}
