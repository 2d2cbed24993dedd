/* dakit gbees: propagate a density with GBEES and write its snapshots;
 * dakit gbees-plot: draw their 2-D marginals. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/plot.h"
#include "cli/progress.h"
#include "cli/npy.h"
#include "cli/output.h"
#include "gbees/snapshot.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dakit gbees --model NAME --meas DIR --out DIR [options]\n"
            "\n"
            "Propagates the Gaussian of DIR/measurement0.txt through the model with GBEES\n"
            "(sparse-grid finite volumes on the Fokker-Planck advection equation), applying\n"
            "the Bayesian update of each later measurement file at the end of its period.\n"
            "Writes DIR/pdf_<period>_<k>.npy (cells x (d+1): centre, probability) and\n"
            "DIR/summary.txt (the run, and each snapshot's time for gbees-plot).\n"
            "\n"
            "  --model NAME        lorenz63, lorenz96, pcr3bp, cr3bp (--list-models)\n"
            "  --meas DIR          folder of measurement0.txt, measurement1.txt, ...\n"
            "  --out DIR           output folder (made if absent)\n"
            "  --threshold P       prune/grow threshold on a cell's probability, (0, 1) (default 5e-6)\n"
            "  --snapshots N       snapshots per period, its start and end included, 2 to 100000\n"
            "                      (default 5)\n"
            "  --del-step N        prune every N steps, 1 to 1000000 (default 20)\n"
            "  --cfl C             time step as a fraction of the CFL limit, (0, 1] (default 1)\n"
            "  --dx-factor F       dx = F * half the initial standard deviation, > 0 (default 1)\n"
            "  --no-update         skip the measurement updates\n"
            "  --t-end T           stop at time T >= 0, in the model's time units (default, or 0: the\n"
            "                      end of the last period)\n"
            "  --backend NAME      cuda, opencl, cpu, auto or a comma list (default: DAKIT_BACKEND/auto)\n"
            "  --variant NAME      one of the backend's variants (cuda: auto, coop, dp, host;\n"
            "                      opencl: batched, per-step; default: the backend's first)\n"
            "  --reference         use the serial reference instead of a backend\n"
            "  --progress          progress on stderr even when it is no terminal (a batch job's\n"
            "                      log): a line per snapshot and at least every 5 seconds, with\n"
            "                      the elapsed time\n"
            "  --quiet             no progress (default: progress only when stderr is a terminal)\n");
}

static int make_dir(const char *path)
{
    if (mkdir(path, 0777) == 0 || errno == EEXIST) {
        struct stat st;
        return stat(path, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
    }
    return -1;
}

int cmd_gbees(int argc, char **argv)
{
    const char *cmd = "gbees";
    const char *model_s = NULL, *meas_dir = NULL, *out_dir = NULL, *backend = NULL;
    dk_gbees_desc d;
    dk_gbees_desc_init(&d);
    int use_reference = 0;
    progress prog;
    progress_init(&prog, cmd);
    static const struct option option_table[] = {CLI_FLAG("help"), CLI_FLAG("list-models"), CLI_FLAG("no-update"),
        CLI_FLAG("reference"), CLI_VALUE("model"), CLI_VALUE("meas"), CLI_VALUE("out"), CLI_VALUE("backend"),
        CLI_VALUE("variant"), CLI_VALUE("threshold"), CLI_VALUE("cfl"), CLI_VALUE("dx-factor"), CLI_VALUE("t-end"),
        CLI_VALUE("snapshots"), CLI_VALUE("del-step"), CLI_FLAG("progress"), CLI_FLAG("quiet"), {0}};
    cli_args args = {.cmd = cmd, .argc = argc, .argv = argv, .options = option_table};
    int more;
    while ((more = cli_next(&args)) == 1) {
        const char *a = args.opt;
        if (!strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--list-models")) {
            for (const dk_gbees_model *const *m = dk_gbees_models(); *m; m++)
                printf("%-10s %s\n", (*m)->name, (*m)->about);
            return 0;
        }
        if (!strcmp(a, "--no-update")) {
            d.update = 0;
            continue;
        }
        if (!strcmp(a, "--reference")) {
            use_reference = 1;
            continue;
        }
        if (progress_option(&prog, a))
            continue;
        const char *v = args.value;
        int bad = 0;
        if (!strcmp(a, "--model"))
            model_s = v;
        else if (!strcmp(a, "--meas"))
            meas_dir = v;
        else if (!strcmp(a, "--out"))
            out_dir = v;
        else if (!strcmp(a, "--backend"))
            backend = v;
        else if (!strcmp(a, "--variant"))
            d.variant = v;
        else if (!strcmp(a, "--threshold"))
            bad = cli_double(cmd, a, v, 0, 1, CLI_OPEN_LO | CLI_OPEN_HI, &d.threshold);
        else if (!strcmp(a, "--cfl"))
            bad = cli_double(cmd, a, v, 0, 1, CLI_OPEN_LO, &d.cfl);
        else if (!strcmp(a, "--dx-factor"))
            bad = cli_double(cmd, a, v, 0, INFINITY, CLI_OPEN_LO, &d.dx_factor);
        else if (!strcmp(a, "--t-end"))
            bad = cli_double(cmd, a, v, 0, INFINITY, 0, &d.t_end);
        else if (!strcmp(a, "--snapshots"))
            bad = cli_int(cmd, a, v, 2, 100000, &d.snapshots);
        else if (!strcmp(a, "--del-step"))
            bad = cli_int(cmd, a, v, 1, 1000000, &d.del_step);
        if (bad)
            return bad;
    }
    if (more)
        return more;
    if (!model_s || !meas_dir || !out_dir)
        return cli_error(cmd, 2, "--model, --meas and --out are required (dakit gbees --help)");
    if (!*out_dir || strlen(out_dir) > 4000)
        return cli_error(cmd, 2, "--out needs a folder name of 1 to 4000 characters");
    d.model = dk_gbees_model_find(model_s);
    if (!d.model)
        return cli_error(cmd, 2, "unknown model '%s' (dakit gbees --list-models)", model_s);
    if (cli_options_only)
        return 0;
    dk_gbees_meas *meas = NULL;
    int nmeas = 0;
    if (dk_gbees_meas_read_dir(meas_dir, &meas, &nmeas) != DK_OK)
        return cli_error(cmd, 1, "%s", dk_last_error(NULL));
    dk_context *ctx = NULL;
    if (!use_reference && dk_context_create(backend, &ctx) != DK_OK) {
        free(meas);
        return cli_error(cmd, 1, "%s", dk_last_error(NULL));
    }
    dk_plan *plan = NULL;
    if (dk_gbees_plan_create(ctx, &d, meas, nmeas, &plan) != DK_OK) {
        int rc = cli_error(cmd, 1, "%s", dk_last_error(ctx));
        dk_context_destroy(ctx);
        free(meas);
        return rc;
    }
    /* the folder is made only once the inputs, the backend and the plan are good */
    if (make_dir(out_dir) != 0) {
        int rc = cli_error(cmd, 1, "cannot make the output folder %s: %s", out_dir, strerror(errno));
        dk_plan_destroy(plan);
        dk_context_destroy(ctx);
        free(meas);
        return rc;
    }
    const char *engine = use_reference ? "the serial reference" : dk_context_backend(ctx);
    double t0 = cli_now();
    progress_start(&prog);
    int rc = 0, files = 0;
    struct { int period, index; double t; } *times = NULL; /* each snapshot's, for summary.txt */
    for (;;) {
        dk_gbees_event ev;
        if (dk_gbees_run(plan, 50, &ev) != DK_OK) {
            progress_clear(&prog);
            rc = cli_error(cmd, 1, "%s (the %d snapshots written so far are kept)", dk_last_error(ctx), files);
            break;
        }
        if (ev == DK_GBEES_DONE)
            break;
        dk_gbees_stats st;
        dk_gbees_stats_get(plan, &st);
        if (ev == DK_GBEES_SNAPSHOT) {
            dk_gbees_snapshot s;
            dk_gbees_snapshot_get(plan, &s);
            char path[4096], err[4200];
            snprintf(path, sizeof path, "%s/pdf_%d_%d.npy", out_dir, s.period, s.index);
            npy_array arr = {DK_F64, 2, {s.cells, (size_t)s.dim + 1}, s.cells * (size_t)(s.dim + 1), (void *)s.data};
            if (npy_write(path, &arr, err, sizeof err) != DK_OK) {
                rc = cli_error(cmd, 1, "%s", err);
                break;
            }
            void *grown = realloc(times, (size_t)(files + 1) * sizeof *times);
            if (!grown) {
                rc = cli_error(cmd, 1, "out of memory");
                break;
            }
            times = grown;
            times[files].period = s.period;
            times[files].index = s.index;
            times[files].t = s.t;
            files++;
            progress_stage(&prog, "snapshot %d of period %d at t = %.4f: %zu cells, %llu steps", s.index, s.period,
                           s.t, s.cells, (unsigned long long)st.steps);
        }
        progress_tick(&prog, "t = %.4f  cells %zu  steps %llu  (%.0f steps/s)", st.t, st.cells,
                      (unsigned long long)st.steps, st.steps / (cli_now() - t0 + 1e-9));
    }
    progress_clear(&prog);
    double wall = cli_now() - t0;
    dk_gbees_stats st;
    dk_gbees_stats_get(plan, &st);
    char path[4096], err[4200];
    snprintf(path, sizeof path, "%s/summary.txt", out_dir);
    output o;
    if (output_open(&o, path, err, sizeof err) != 0) {
        rc = cli_error(cmd, 1, "%s", err);
    } else {
        FILE *f = o.f;
        fprintf(f, "model %s\ndim %d\nengine %s\nvariant %s\nthreshold %g\ndel_step %d\ncfl %g\ndx_factor %g\nupdate %d\n"
                   "status %s\nt %.10g\nsnapshots_written %d\nsteps %llu\ncell_steps %llu\ncells_final %zu\n"
                   "wall_s %.6f\ncell_steps_per_s %.6g\n",
                d.model->name, meas[0].dim, engine, d.variant ? d.variant : "default", d.threshold, d.del_step, d.cfl, d.dx_factor, d.update,
                rc ? "failed" : "completed", st.t, files, (unsigned long long)st.steps,
                (unsigned long long)st.cell_steps, st.cells, wall, wall > 0 ? st.cell_steps / wall : 0.0);
        for (int k = 0; k < files; k++)
            fprintf(f, "snapshot pdf_%d_%d t %.10g\n", times[k].period, times[k].index, times[k].t);
        if (output_commit(&o, err, sizeof err) != 0)
            rc = cli_error(cmd, 1, "%s", err);
    }
    if (!rc)
        printf("gbees: %s on %s: t = %g, %llu steps, %llu cell-steps in %.3f s (%.3g cell-steps/s), %d snapshots in %s\n",
               d.model->name, engine, st.t, (unsigned long long)st.steps, (unsigned long long)st.cell_steps,
               wall, wall > 0 ? st.cell_steps / wall : 0.0, files, out_dir);
    free(times);
    dk_plan_destroy(plan);
    dk_context_destroy(ctx);
    free(meas);
    return rc;
}

/* ---- gbees-plot ---- */

static void plot_usage(FILE *f)
{
    fprintf(f, "usage: dakit gbees-plot RUN_DIR [--size POINTS] [--format png|svg|pdf]\n"
               "\n"
               "Draws the 2-D marginals of every pdf_<period>_<k>.npy in RUN_DIR as\n"
               "pdf_<period>_<k>.png there: one panel per pair of state variables (named as\n"
               "the model names them, from RUN_DIR/summary.txt), the probability per bin on a\n"
               "log scale relative to the panel's largest bin, the snapshot's time in the title.\n"
               "\n"
               "  --size POINTS   side of each panel, 20 to 2000 (default 200)\n"
               "  --format F      png (default), svg or pdf\n");
}

/* What summary.txt says of the run: the model and each snapshot's time. */
typedef struct run_info {
    char model[64];
    char (*names)[32]; /* "pdf_P_K" */
    double *t;
    int snapshots;
} run_info;

static void run_info_read(const char *dir, run_info *ri)
{
    memset(ri, 0, sizeof *ri);
    char path[4200], line[512];
    snprintf(path, sizeof path, "%s/summary.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        char name[32];
        double t;
        if (sscanf(line, "model %63s", ri->model) == 1)
            continue;
        if (sscanf(line, "snapshot %31s t %lf", name, &t) == 2) {
            void *n = realloc(ri->names, (size_t)(ri->snapshots + 1) * sizeof *ri->names);
            if (n)
                ri->names = n;
            void *tt = n ? realloc(ri->t, (size_t)(ri->snapshots + 1) * sizeof *ri->t) : NULL;
            if (!tt)
                break;
            ri->t = tt;
            snprintf(ri->names[ri->snapshots], sizeof ri->names[0], "%s", name);
            ri->t[ri->snapshots++] = t;
        }
    }
    fclose(f);
}

/* The name and unit of state variable k of the model, for an axis. */
static void variable_name(const char *model, int dim, int k, char *s, size_t len)
{
    static const char *cr3bp[6] = {"x", "y", "z", "vx", "vy", "vz"}, *pcr3bp[4] = {"x", "y", "vx", "vy"};
    static const char *l63[3] = {"x", "y", "z"};
    if (!strcmp(model, "cr3bp") && dim == 6)
        snprintf(s, len, "%s (%s)", cr3bp[k], k < 3 ? "LU" : "LU/TU");
    else if (!strcmp(model, "pcr3bp") && dim == 4)
        snprintf(s, len, "%s (%s)", pcr3bp[k], k < 2 ? "LU" : "LU/TU");
    else if (!strcmp(model, "lorenz63") && dim == 3)
        snprintf(s, len, "%s", l63[k]);
    else if (!strcmp(model, "lorenz96"))
        snprintf(s, len, "x%d", k + 1);
    else
        snprintf(s, len, "axis %d", k + 1);
}

static int draw_snapshot(const char *cmd, const char *npy_path, const char *stem, const char *out_path, int panel,
                         const run_info *ri)
{
    char err[4200];
    gbees_snap snap;
    if (gbees_snap_read(npy_path, &snap, err, sizeof err) != DK_OK)
        return cli_error(cmd, 1, "%s", err);
    int d = snap.dim;
    if (d < 2) {
        gbees_snap_free(&snap);
        return cli_error(cmd, 1, "%s: one-dimensional, no 2-D marginal to draw", npy_path);
    }
    double t = NAN;
    for (int k = 0; k < ri->snapshots; k++)
        if (!strcmp(ri->names[k], stem))
            t = ri->t[k];
    const char *model = ri->model[0] ? ri->model : "";
    int cr3bp = !strcmp(model, "cr3bp") || !strcmp(model, "pcr3bp");
    char tstr[64], tshort[48];
    snprintf(tshort, sizeof tshort, "t = %.4g%s", t, cr3bp ? " TU" : "");
    if (isfinite(t))
        snprintf(tstr, sizeof tstr, "t = %.4g %s", t, cr3bp ? "TU" : "(model time)");
    else
        snprintf(tstr, sizeof tstr, "time unknown (no summary.txt line)");

    /* corner layout: the panel of (x = var i, y = var j), i < j, in column i, row j - 1 */
    const double left = 78, bottom = 52, top = 30, right = 14, head = 62, bar = 110;
    int cols = d - 1;
    double cell_w = left + panel + right, cell_h = top + panel + bottom;
    double W = cols * cell_w + bar, H = head + cols * cell_h + 20;
    plot *p = plot_open(out_path, W, H, 1, err, sizeof err);
    if (!p) {
        gbees_snap_free(&snap);
        return cli_error(cmd, 1, "%s", err);
    }
    char title[256], sub[512];
    snprintf(title, sizeof title, "GBEES marginal densities, %s%s%s, %s", model[0] ? "model " : "", model,
             model[0] ? "" : "unknown model", tstr);
    snprintf(sub, sizeof sub, "%s: %zu cells, %d dimensions; %s", stem, snap.cells, d,
             cr3bp ? "LU = Earth-Moon distance, TU = 1/(mean motion)"
                   : !strncmp(model, "lorenz", 6) ? "the Lorenz variables and time are dimensionless" : "");
    plot_title(p, title, sub);
    uint32_t *px = malloc((size_t)panel * (size_t)panel * sizeof *px);
    int rc = px ? 0 : cli_error(cmd, 1, "out of memory for the picture");
    for (int i = 0; i < d && !rc; i++)
        for (int j = i + 1; j < d && !rc; j++) {
            gbees_marginal m;
            if (gbees_snap_marginal(&snap, i, j, panel, &m, err, sizeof err) != 0) {
                rc = cli_error(cmd, 1, "%s: %s", npy_path, err);
                break;
            }
            for (int y = 0; y < m.ny; y++)
                for (int x = 0; x < m.nx; x++) {
                    double v = m.top_p > 0 ? m.p[(size_t)y * m.nx + x] / m.top_p : 0;
                    double c = v > 0 ? (log10(v) + 4) / 4 : 0;
                    px[(size_t)(m.ny - 1 - y) * m.nx + x] = plot_pack(plot_cmap_color(PLOT_CMAP_SEQUENTIAL, c));
                }
            plot_panel a = {i * cell_w + left, head + (j - 1) * cell_h + top, panel, panel,
                            m.left, m.right, m.bottom, m.top};
            plot_raster(p, &a, px, m.nx, m.ny, 1);
            char xn[64], yn[64], pt[160];
            variable_name(model, d, i, xn, sizeof xn);
            variable_name(model, d, j, yn, sizeof yn);
            char xs[32], ys[32];
            sscanf(xn, "%31s", xs);
            sscanf(yn, "%31s", ys);
            snprintf(pt, sizeof pt, "(%s, %s) at %s", xs, ys, isfinite(t) ? tshort : "t unknown");
            plot_axes(p, &a, pt, xn, yn);
            gbees_marginal_free(&m);
        }
    free(px);
    gbees_snap_free(&snap);
    double bh = fmin(300, cols * cell_h - top - bottom);
    plot_colorbar(p, W - bar + 10, head + top, 18, bh, PLOT_CMAP_SEQUENTIAL, -4, 0,
                  "log10(probability per bin / panel's largest)");
    plot_text(p, W - bar + 4, head + top + bh + 24, 10, -1, 0, "white: no cells,");
    plot_text(p, W - bar + 4, head + top + bh + 37, 10, -1, 0, "or below 1e-4");
    if (rc) {
        plot_discard(p);
        return rc;
    }
    return plot_close(p, err, sizeof err) ? cli_error(cmd, 1, "%s", err) : 0;
}

int cmd_gbees_plot(int argc, char **argv)
{
    const char *cmd = "gbees-plot", *dir = NULL, *format = "png";
    int panel = 200;
    static const struct option option_table[] = {CLI_FLAG("help"), CLI_VALUE("size"), CLI_VALUE("format"), {0}};
    cli_args args = {.cmd = cmd, .argc = argc, .argv = argv, .options = option_table, .operands = 1};
    int more;
    while ((more = cli_next(&args)) == 1) {
        const char *a = args.opt, *v = args.value;
        if (!strcmp(a, "--help")) {
            plot_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--size")) {
            int bad = cli_int(cmd, a, v, 20, 2000, &panel);
            if (bad)
                return bad;
        } else if (!strcmp(a, "--format")) {
            if (strcmp(v, "png") && strcmp(v, "svg") && strcmp(v, "pdf"))
                return cli_error(cmd, 2, "--format must be png, svg or pdf, not '%s'", v);
            format = v;
        }
    }
    if (more)
        return more;
    if (args.next < argc)
        dir = argv[args.next];
    if (!dir)
        return cli_error(cmd, 2, "a run folder is required (dakit gbees-plot --help)");
    if (cli_options_only)
        return 0;
    if (!plot_built()) {
        char err[512];
        plot_check_path("x.png", err, sizeof err);
        return cli_error(cmd, 1, "%s", err);
    }
    DIR *dp = opendir(dir);
    if (!dp)
        return cli_error(cmd, 1, "cannot open %s: %s", dir, strerror(errno));
    run_info ri;
    run_info_read(dir, &ri);
    int drawn = 0, rc = 0;
    struct dirent *e;
    while ((e = readdir(dp)) && !rc) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "pdf_", 4) != 0 || len < 8 || strcmp(e->d_name + len - 4, ".npy") != 0)
            continue;
        char in[4096], out[4096], stem[256];
        if (snprintf(in, sizeof in, "%s/%s", dir, e->d_name) >= (int)sizeof in ||
            snprintf(out, sizeof out, "%s/%.*s.%s", dir, (int)(len - 4), e->d_name, format) >= (int)sizeof out) {
            rc = cli_error(cmd, 1, "%s/%s: the path is too long", dir, e->d_name);
            break;
        }
        snprintf(stem, sizeof stem, "%.*s", (int)(len - 4), e->d_name);
        rc = draw_snapshot(cmd, in, stem, out, panel, &ri);
        drawn += !rc;
    }
    closedir(dp);
    free(ri.names);
    free(ri.t);
    if (!rc && drawn == 0)
        return cli_error(cmd, 1, "no pdf_*.npy snapshots in %s", dir);
    if (!rc)
        printf("gbees-plot: %d pictures in %s\n", drawn, dir);
    return rc;
}
