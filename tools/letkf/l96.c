/* dakit letkf l96: a Lorenz-96 twin experiment of the LETKF, the set-up of
 * DAPPER's Lorenz96.sakov2008 with LETKF(N=20, infl=1.04, loc_rad=4): 40
 * variables on a ring, each observed every cycle (0.05 time units) with
 * error variance 1, the analysis through a context's backend. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/npy.h"
#include "cli/output.h"
#include "cli/plot.h"
#include "cli/progress.h"
#include "enkf/l96.h"
#include "letkf/l96.h"

static const char *CMD = "letkf l96";

/* DAPPER's GC taper for loc_rad L reaches 0 at 2 * 1.82 * L (its
 * dist2coeff scales the distance by 1.82 L); 14.56 is its loc_rad = 4. */
#define DAPPER_GC_SCALE 1.82
#define DEFAULT_RADIUS (2 * DAPPER_GC_SCALE * 4)

void letkf_l96_usage(FILE *f)
{
    fprintf(f,
            "usage: dakit letkf l96 [options]\n"
            "\n"
            "A Lorenz-96 twin experiment of the LETKF: 40 variables on a ring, F = 8, RK4 with a step of\n"
            "0.05 time units, every variable observed after each step with error variance 1; the truth,\n"
            "the observations and the first ensemble (the truth plus unit noise) come from --seed. The\n"
            "analysis runs on --backend. It prints the analysis RMSE (the root mean square over the\n"
            "variables of the ensemble mean minus the truth) averaged over the cycles after the\n"
            "spin-up, and the ensemble spread, and draws both per cycle. The defaults are DAPPER's\n"
            "Lorenz96.sakov2008 with LETKF(N=20, infl=1.04, loc_rad=4) (docs/validation.md).\n"
            "\n"
            "  --members K           ensemble members, 2 to 1024 (default 20)\n"
            "  --spinup S            cycles run before the RMSE is averaged, 0 to 10000000 (default 500)\n"
            "  --cycles C            cycles averaged after the spin-up, 1 to 10000000 (default 2000)\n"
            "  --radius R            distance on the ring (grid points) at which the Gaspari-Cohn taper\n"
            "                        reaches 0, > 0 (default 14.56: DAPPER's loc_rad = 4, which its code\n"
            "                        scales by 2 x 1.82)\n"
            "  --inflation F         factor on the ensemble anomalies, as DAPPER's infl, >= 1; the LETKF\n"
            "                        inflates the background covariance by F^2 (default 1.04)\n"
            "  --max-obs K           at most K observations per point, 0 to 40; 0: all within the radius\n"
            "                        (default 0)\n"
            "  --dtype f64|f32       the ensembles' precision in the backend (default f64)\n"
            "  --seed S              seeds the truth, the observations and the first ensemble, 0 to\n"
            "                        2^64-1 (default 1)\n"
            "  --png FILE            the analysis RMSE and ensemble spread per cycle as a picture, PNG,\n"
            "                        or SVG or PDF by the name's extension; '': none (default letkf-l96.png)\n"
            "  --svg FILE / --pdf FILE   the same picture also as SVG / PDF (vector)\n"
            "  --truth FILE          write the truth at the start and after each cycle, (S + C + 1) x 40\n"
            "                        float64 .npy\n"
            "  --obs FILE            write the observations of each cycle, (S + C) x 40 float64 .npy\n"
            "  --every K             print the RMSE every K cycles, 1 to 10000000 (default 200)\n"
            "  --max-rmse X / --min-rmse X   exit 1 unless the time-mean analysis RMSE is <= / >= X (>= 0)\n"
            "  --progress            on stderr the cycle reached, even when it is no terminal (a batch\n"
            "                        job's log): a line at least every 5 seconds, with the elapsed time\n"
            "  --quiet               no progress (default: progress only when stderr is a terminal)\n"
            "  --backend NAME        cuda, opencl, cpu, auto or a comma list (default: DAKIT_BACKEND/auto)\n"
            "  --reference           run each analysis through the serial reference instead of a backend\n");
}

typedef struct l96_options {
    int members, spinup, cycles, every;
    size_t max_obs;
    double radius, inflation, max_rmse, min_rmse;
    uint64_t seed;
    dk_dtype dtype;
    const char *png, *svg, *pdf, *truth, *obs, *backend;
    int png_given, reference;
} l96_options;

static int parse(int argc, char **argv, l96_options *o, progress *prog)
{
    *o = (l96_options){.members = 20, .spinup = 500, .cycles = 2000, .every = 200, .radius = DEFAULT_RADIUS,
                       .inflation = 1.04, .max_rmse = -1, .min_rmse = -1, .seed = 1, .dtype = DK_F64,
                       .png = "letkf-l96.png"};
    static const struct option option_table[] = {CLI_FLAG("help"), CLI_FLAG("reference"), CLI_VALUE("members"),
        CLI_VALUE("cycles"), CLI_VALUE("spinup"), CLI_VALUE("every"), CLI_VALUE("radius"), CLI_VALUE("inflation"),
        CLI_VALUE("max-obs"), CLI_VALUE("max-rmse"), CLI_VALUE("min-rmse"), CLI_VALUE("seed"), CLI_VALUE("dtype"),
        CLI_VALUE("png"), CLI_VALUE("svg"), CLI_VALUE("pdf"), CLI_VALUE("truth"), CLI_VALUE("obs"),
        CLI_VALUE("backend"), CLI_FLAG("progress"), CLI_FLAG("quiet"), {0}};
    cli_args args = {.cmd = CMD, .argc = argc, .argv = argv, .options = option_table};
    int more;
    while ((more = cli_next(&args)) == 1) {
        const char *a = args.opt, *v = args.value;
        if (!strcmp(a, "--help")) {
            letkf_l96_usage(stdout);
            return 0;
        }
        if (progress_option(prog, a))
            continue;
        if (!strcmp(a, "--reference")) {
            o->reference = 1;
            continue;
        }
        int bad = 0;
        if (!strcmp(a, "--members"))
            bad = cli_int(CMD, a, v, 2, DK_LETKF_MAX_MEMBERS, &o->members);
        else if (!strcmp(a, "--cycles"))
            bad = cli_int(CMD, a, v, 1, 10000000, &o->cycles);
        else if (!strcmp(a, "--spinup"))
            bad = cli_int(CMD, a, v, 0, 10000000, &o->spinup);
        else if (!strcmp(a, "--every"))
            bad = cli_int(CMD, a, v, 1, 10000000, &o->every);
        else if (!strcmp(a, "--radius"))
            bad = cli_double(CMD, a, v, 0, INFINITY, CLI_OPEN_LO, &o->radius);
        else if (!strcmp(a, "--inflation"))
            bad = cli_double(CMD, a, v, 1, INFINITY, 0, &o->inflation);
        else if (!strcmp(a, "--max-obs"))
            bad = cli_size(CMD, a, v, 0, L96_N, &o->max_obs);
        else if (!strcmp(a, "--max-rmse"))
            bad = cli_double(CMD, a, v, 0, INFINITY, 0, &o->max_rmse);
        else if (!strcmp(a, "--min-rmse"))
            bad = cli_double(CMD, a, v, 0, INFINITY, 0, &o->min_rmse);
        else if (!strcmp(a, "--seed"))
            bad = cli_u64(CMD, a, v, &o->seed);
        else if (!strcmp(a, "--dtype")) {
            if (!strcmp(v, "f64"))
                o->dtype = DK_F64;
            else if (!strcmp(v, "f32"))
                o->dtype = DK_F32;
            else
                return cli_error(CMD, 2, "--dtype must be f32 or f64, not '%.64s'", v);
        } else if (!strcmp(a, "--png"))
            o->png = v, o->png_given = 1;
        else if (!strcmp(a, "--svg"))
            o->svg = v;
        else if (!strcmp(a, "--pdf"))
            o->pdf = v;
        else if (!strcmp(a, "--truth"))
            o->truth = v;
        else if (!strcmp(a, "--obs"))
            o->obs = v;
        else if (!strcmp(a, "--backend"))
            o->backend = v;
        if (bad)
            return bad;
    }
    if (more)
        return more;
    if (o->reference && o->backend)
        return cli_error(CMD, 2, "--reference runs the serial reference; it takes no --backend");
    if (cli_options_only)
        return 0;
    return -1;
}

/* The picture's subtitle names the set-up and where it ran. */
static int draw(const l96_options *o, const char *path, const double *rmse, const double *spread, double mean,
                const char *where)
{
    char sub[512];
    snprintf(sub, sizeof sub,
             "N = 40, F = 8, %d members, Gaspari-Cohn taper to 0 at %.4g points, inflation %.3g, seed %llu; %s",
             o->members, o->radius, o->inflation, (unsigned long long)o->seed, where);
    /* room above the curves after the spin-up for the legend */
    double peak = 0.3;
    for (int t = o->spinup; t < o->spinup + o->cycles; t++)
        peak = fmax(peak, fmax(rmse[t], spread[t]));
    double top = fmin(peak * 1.55, 8.0);
    l96_picture_info info = {"Lorenz-96 LETKF twin experiment: analysis RMSE and ensemble spread", sub, o->spinup,
                             mean, 0.215, top};
    return l96_picture("letkf l96", path, rmse, spread, o->spinup + o->cycles, &info);
}

static int save(const char *path, const double *rows, size_t count)
{
    char err[4200];
    size_t shape[2] = {count, L96_N};
    if (npy_write_typed(path, "<f8", 8, 2, shape, rows, err, sizeof err) != DK_OK)
        return cli_error(CMD, 1, "%s", err);
    printf("wrote %s (%zu x %d)\n", path, count, L96_N);
    return 0;
}

int letkf_l96(int argc, char **argv)
{
    l96_options o;
    progress prog;
    progress_init(&prog, CMD);
    int rc = parse(argc, argv, &o, &prog);
    if (rc >= 0)
        return rc;
    if (!o.png_given && !plot_built()) {
        printf("no picture: dakit was built without cairo\n");
        o.png = NULL;
    }
    const char *pictures[3] = {o.png && *o.png ? o.png : NULL, o.svg, o.pdf};
    char err[4200];
    for (int k = 0; k < 3; k++)
        if (pictures[k] && plot_check_path(pictures[k], err, sizeof err) != 0)
            return cli_error(CMD, 1, "%s", err);
    if ((o.truth && output_check(o.truth, err, sizeof err) != 0) ||
        (o.obs && output_check(o.obs, err, sizeof err) != 0))
        return cli_error(CMD, 1, "%s", err);

    const size_t K = (size_t)o.members, N = L96_N, total = (size_t)o.spinup + (size_t)o.cycles;
    double grid[L96_N], r[L96_N], y[L96_N], truth[L96_N];
    for (size_t i = 0; i < N; i++)
        grid[i] = (double)i, r[i] = 1.0;
    dk_letkf_desc desc;
    dk_letkf_desc_init(&desc);
    desc.dtype = o.dtype;
    desc.n = desc.m = N;
    desc.members = K;
    desc.ncoords = 1;
    desc.radius = o.radius;
    desc.period[0] = (double)N;
    desc.inflation = o.inflation * o.inflation;
    desc.max_obs = o.max_obs;
    desc.grid_coords = grid;
    desc.obs_coords = grid;

    dk_context *ctx = NULL;
    dk_plan *plan = NULL;
    double *X = malloc(N * K * sizeof *X), *noise = malloc(N * K * sizeof *noise);
    double *rmse = malloc(total * sizeof *rmse), *spread = malloc(total * sizeof *spread);
    void *xb = malloc(N * K * dk_dtype_size(o.dtype)), *yb = malloc(N * K * dk_dtype_size(o.dtype));
    double *truths = o.truth ? malloc((total + 1) * N * sizeof *truths) : NULL;
    double *observed = o.obs ? malloc(total * N * sizeof *observed) : NULL;
    rc = 1;
    if (!X || !noise || !rmse || !spread || !xb || !yb || (o.truth && !truths) || (o.obs && !observed)) {
        cli_error(CMD, 1, "out of memory for %zu cycles", total);
        goto done;
    }
    char where[512] = "the serial reference";
    if (!o.reference) {
        if (dk_context_create(o.backend, &ctx) != DK_OK) {
            cli_error(CMD, 1, "%s", dk_last_error(NULL));
            goto done;
        }
        if (dk_letkf_plan_create(ctx, &desc, &plan) != DK_OK) {
            cli_error(CMD, 1, "%s", dk_last_error(ctx));
            goto done;
        }
        snprintf(where, sizeof where, "%s (%s)", dk_context_backend(ctx), dk_context_device(ctx));
    }
    /* the truth starts at rest plus a nudge and runs onto the attractor;
     * members start from the truth plus unit noise (Philox, as the
     * observation errors) */
    for (size_t i = 0; i < N; i++)
        truth[i] = L96_F + (i == 0 ? 0.01 : 0.0);
    for (int s = 0; s < 2000; s++)
        l96_step(truth, 1);
    dk_enkf_perturbations(o.seed ^ 0x1234567ull, N, K, r, noise);
    for (size_t i = 0; i < N; i++)
        for (size_t l = 0; l < K; l++)
            X[i * K + l] = truth[i] + noise[i * K + l];
    printf("Lorenz-96 LETKF twin experiment: N=40 F=8 dt=0.05 RK4, every variable observed each cycle "
           "(variance 1),\n%zu members, Gaspari-Cohn taper to 0 at %.4g points, anomaly inflation %.4g (covariance "
           "%.4g)%s, on %s\n",
           K, o.radius, o.inflation, desc.inflation, o.dtype == DK_F32 ? ", float32" : "", where);
    if (truths)
        memcpy(truths, truth, sizeof truth);
    double sum = 0, sum_spread = 0, window = 0;
    progress_start(&prog);
    progress_stage(&prog, "%zu cycles (%d of spin-up), %zu members", total, o.spinup, K);
    for (size_t t = 0; t < total; t++) {
        l96_step(truth, 1);
        for (size_t l = 0; l < K; l++)
            l96_step(X + l, K);
        dk_enkf_perturbations(o.seed * 1000003ull + (uint64_t)t, N, 1, r, noise);
        for (size_t i = 0; i < N; i++)
            y[i] = truth[i] + noise[i];
        if (truths)
            memcpy(truths + (t + 1) * N, truth, sizeof truth);
        if (observed)
            memcpy(observed + t * N, y, sizeof y);
        /* H is the identity: Yb = Xb */
        for (size_t i = 0; i < N * K; i++) {
            if (o.dtype == DK_F32)
                ((float *)xb)[i] = ((float *)yb)[i] = (float)X[i];
            else
                ((double *)xb)[i] = ((double *)yb)[i] = X[i];
        }
        dk_status st = o.reference ? dk_letkf_reference(&desc, xb, yb, y, r, xb, NULL, NULL)
                                   : dk_letkf_execute_host(plan, xb, yb, y, r, xb, NULL, NULL);
        if (st != DK_OK) {
            cli_error(CMD, 1, "cycle %zu: %s", t, dk_last_error(ctx));
            goto done;
        }
        for (size_t i = 0; i < N * K; i++)
            X[i] = o.dtype == DK_F32 ? (double)((float *)xb)[i] : ((double *)xb)[i];
        double se = 0, var = 0;
        for (size_t i = 0; i < N; i++) {
            double mean = 0, ss = 0;
            for (size_t l = 0; l < K; l++)
                mean += X[i * K + l];
            mean /= (double)K;
            for (size_t l = 0; l < K; l++)
                ss += (X[i * K + l] - mean) * (X[i * K + l] - mean);
            se += (mean - truth[i]) * (mean - truth[i]);
            var += ss / (double)(K - 1);
        }
        rmse[t] = sqrt(se / (double)N);
        spread[t] = sqrt(var / (double)N);
        if (!isfinite(rmse[t])) {
            cli_error(CMD, 1, "cycle %zu: the ensemble diverged (the RMSE is not finite)", t);
            goto done;
        }
        window += rmse[t];
        if (t >= (size_t)o.spinup) {
            sum += rmse[t];
            sum_spread += spread[t];
        }
        progress_tick(&prog, "cycle %zu of %zu%s, analysis RMSE %.4f", t + 1, total,
                      t < (size_t)o.spinup ? " (spin-up)" : "", rmse[t]);
        if ((t + 1) % (size_t)o.every == 0) {
            progress_clear(&prog);
            printf("cycle %6zu%s  analysis RMSE %.4f  spread %.4f  (mean RMSE of the last %d: %.4f)\n", t + 1,
                   t < (size_t)o.spinup ? " (spin-up)" : "", rmse[t], spread[t], o.every, window / o.every);
            fflush(stdout);
            window = 0;
        }
    }
    progress_stage(&prog, "%zu cycles done", total);
    progress_clear(&prog);
    double mean = sum / o.cycles, mean_spread = sum_spread / o.cycles;
    printf("time-mean analysis RMSE over %d cycles after %d of spin-up: %.4f, spread %.4f (observation error 1)\n",
           o.cycles, o.spinup, mean, mean_spread);
    if ((o.truth && save(o.truth, truths, total + 1)) || (o.obs && save(o.obs, observed, total)))
        goto done;
    for (int k = 0; k < 3; k++) {
        if (!pictures[k])
            continue;
        if (draw(&o, pictures[k], rmse, spread, mean, where))
            goto done;
        printf("wrote %s (analysis RMSE and ensemble spread per cycle)\n", pictures[k]);
    }
    rc = 0;
    if (o.max_rmse >= 0 && !(mean <= o.max_rmse)) {
        fprintf(stderr, "dakit letkf l96: the time-mean RMSE %.4f exceeds --max-rmse %.4f\n", mean, o.max_rmse);
        rc = 1;
    }
    if (o.min_rmse >= 0 && !(mean >= o.min_rmse)) {
        fprintf(stderr, "dakit letkf l96: the time-mean RMSE %.4f is below --min-rmse %.4f\n", mean, o.min_rmse);
        rc = 1;
    }
done:
    free(X);
    free(noise);
    free(rmse);
    free(spread);
    free(xb);
    free(yb);
    free(truths);
    free(observed);
    dk_plan_destroy(plan);
    dk_context_destroy(ctx);
    return rc;
}
