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
#include "cli/image.h"
#include "cli/npy.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dakit gbees --model NAME --meas DIR --out DIR [options]\n"
            "\n"
            "Propagates the Gaussian of DIR/measurement0.txt through the model with GBEES\n"
            "(sparse-grid finite volumes on the Fokker-Planck advection equation), applying\n"
            "the Bayesian update of each later measurement file at the end of its period.\n"
            "Writes DIR/pdf_<period>_<k>.npy (cells x (d+1): centre, probability) and\n"
            "DIR/summary.txt.\n"
            "\n"
            "  --model NAME        lorenz63, lorenz96, pcr3bp, cr3bp (--list-models)\n"
            "  --meas DIR          folder of measurement0.txt, measurement1.txt, ...\n"
            "  --out DIR           output folder (made if absent)\n"
            "  --threshold P       prune/grow threshold on a cell's probability (default 5e-6)\n"
            "  --snapshots N       snapshots per period, its start and end included (default 5)\n"
            "  --del-step N        prune every N steps (default 20)\n"
            "  --cfl C             time step as a fraction of the CFL limit, (0, 1] (default 1)\n"
            "  --dx-factor F       dx = F * half the initial standard deviation (default 1)\n"
            "  --no-update         skip the measurement updates\n"
            "  --t-end T           stop at time T, in the model's time units (default: the end of\n"
            "                      the last period)\n"
            "  --backend NAME      cuda, opencl, cpu, auto or a comma list (default: DAKIT_BACKEND/auto)\n"
            "  --variant NAME      one of the backend's variants (cuda: auto, coop, dp, host;\n"
            "                      opencl: count-first, one-wait; default: the backend's first)\n"
            "  --reference         use the serial reference instead of a backend\n"
            "  --quiet             no progress even on a terminal\n");
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
    int use_reference = 0, quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
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
        if (!strcmp(a, "--quiet")) {
            quiet = 1;
            continue;
        }
        const char *v = cli_value(cmd, argc, argv, &i);
        if (!v)
            return 2;
        char *end = NULL;
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
            d.threshold = strtod(v, &end);
        else if (!strcmp(a, "--cfl"))
            d.cfl = strtod(v, &end);
        else if (!strcmp(a, "--dx-factor"))
            d.dx_factor = strtod(v, &end);
        else if (!strcmp(a, "--t-end"))
            d.t_end = strtod(v, &end);
        else if (!strcmp(a, "--snapshots"))
            d.snapshots = (int)strtol(v, &end, 10);
        else if (!strcmp(a, "--del-step"))
            d.del_step = (int)strtol(v, &end, 10);
        else
            return cli_error(cmd, 2, "unknown option '%s' (dakit gbees --help)", a);
        if (end && (end == v || *end))
            return cli_error(cmd, 2, "%s needs a number, not '%s'", a, v);
    }
    if (!model_s || !meas_dir || !out_dir)
        return cli_error(cmd, 2, "--model, --meas and --out are required (dakit gbees --help)");
    d.model = dk_gbees_model_find(model_s);
    if (!d.model)
        return cli_error(cmd, 2, "unknown model '%s' (dakit gbees --list-models)", model_s);
    dk_gbees_meas *meas = NULL;
    int nmeas = 0;
    if (dk_gbees_meas_read_dir(meas_dir, &meas, &nmeas) != DK_OK)
        return cli_error(cmd, 1, "%s", dk_last_error(NULL));
    if (make_dir(out_dir) != 0) {
        free(meas);
        return cli_error(cmd, 1, "cannot make the output folder %s", out_dir);
    }
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
    int progress = !quiet && isatty(2);
    const char *engine = use_reference ? "the serial reference" : dk_context_backend(ctx);
    double t0 = cli_now(), last_print = t0;
    uint64_t last_steps = 0;
    int rc = 0, files = 0;
    for (;;) {
        dk_gbees_event ev;
        if (dk_gbees_run(plan, 50, &ev) != DK_OK) {
            if (progress)
                fprintf(stderr, "\n");
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
            char path[4096], err[512];
            snprintf(path, sizeof path, "%s/pdf_%d_%d.npy", out_dir, s.period, s.index);
            npy_array arr = {DK_F64, 2, {s.cells, (size_t)s.dim + 1}, s.cells * (size_t)(s.dim + 1), (void *)s.data};
            if (npy_write(path, &arr, err, sizeof err) != DK_OK) {
                rc = cli_error(cmd, 1, "%s", err);
                break;
            }
            files++;
        }
        double now = cli_now();
        if (progress && now - last_print > 0.25) {
            fprintf(stderr, "\rgbees: t = %.4f  cells %zu  steps %llu  (%.0f steps/s)   ", st.t, st.cells,
                    (unsigned long long)st.steps, (st.steps - last_steps) / (now - last_print));
            last_print = now;
            last_steps = st.steps;
        }
    }
    if (progress)
        fprintf(stderr, "\r%70s\r", "");
    double wall = cli_now() - t0;
    dk_gbees_stats st;
    dk_gbees_stats_get(plan, &st);
    char path[4096];
    snprintf(path, sizeof path, "%s/summary.txt", out_dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        rc = cli_error(cmd, 1, "cannot write %s: %s", path, strerror(errno));
    } else {
        fprintf(f, "model %s\ndim %d\nengine %s\nvariant %s\nthreshold %g\ndel_step %d\ncfl %g\ndx_factor %g\nupdate %d\n"
                   "status %s\nt %.10g\nsnapshots_written %d\nsteps %llu\ncell_steps %llu\ncells_final %zu\n"
                   "wall_s %.6f\ncell_steps_per_s %.6g\n",
                d.model->name, meas[0].dim, engine, d.variant ? d.variant : "default", d.threshold, d.del_step, d.cfl, d.dx_factor, d.update,
                rc ? "failed" : "completed", st.t, files, (unsigned long long)st.steps,
                (unsigned long long)st.cell_steps, st.cells, wall, wall > 0 ? st.cell_steps / wall : 0.0);
        fclose(f);
    }
    if (!rc)
        printf("gbees: %s on %s: t = %g, %llu steps, %llu cell-steps in %.3f s (%.3g cell-steps/s), %d snapshots in %s\n",
               d.model->name, engine, st.t, (unsigned long long)st.steps, (unsigned long long)st.cell_steps,
               wall, wall > 0 ? st.cell_steps / wall : 0.0, files, out_dir);
    dk_plan_destroy(plan);
    dk_context_destroy(ctx);
    free(meas);
    return rc;
}

/* ---- gbees-plot ---- */

static void plot_usage(FILE *f)
{
    fprintf(f, "usage: dakit gbees-plot RUN_DIR [--size PIXELS]\n"
               "\n"
               "Draws the 2-D marginals of every pdf_<period>_<k>.npy in RUN_DIR (all pairs of\n"
               "axes, a grid of panels, darker = more probable) as pdf_<period>_<k>.png there.\n");
}

static int draw_snapshot(const char *cmd, const char *npy_path, const char *png_path, int panel)
{
    char err[512];
    npy_array a;
    if (npy_read(npy_path, &a, err, sizeof err) != DK_OK)
        return cli_error(cmd, 1, "%s", err);
    if (a.ndim != 2 || a.shape[1] < 2 || a.dtype != DK_F64) {
        npy_free(&a);
        return cli_error(cmd, 1, "%s: expected a float64 array of shape (cells, d + 1)", npy_path);
    }
    size_t n = a.shape[0];
    int d = (int)a.shape[1] - 1;
    const double *rows = a.data;
    if (d < 2) {
        npy_free(&a);
        return cli_error(cmd, 1, "%s: one-dimensional, no 2-D marginal to draw", npy_path);
    }
    double lo[DK_GBEES_MAX_DIM], hi[DK_GBEES_MAX_DIM], step[DK_GBEES_MAX_DIM];
    for (int i = 0; i < d; i++) {
        lo[i] = INFINITY;
        hi[i] = -INFINITY;
        step[i] = INFINITY;
    }
    for (size_t c = 0; c < n; c++)
        for (int i = 0; i < d; i++) {
            lo[i] = fmin(lo[i], rows[c * (d + 1) + i]);
            hi[i] = fmax(hi[i], rows[c * (d + 1) + i]);
        }
    /* cell size: the smallest non-zero gap to the lowest coordinate */
    for (size_t c = 0; c < n; c++)
        for (int i = 0; i < d; i++) {
            double gap = rows[c * (d + 1) + i] - lo[i];
            if (gap > 1e-12 * (1 + fabs(lo[i])) && gap < step[i])
                step[i] = gap;
        }
    int cols = d - 1, border = 4;
    image img;
    if (image_create(&img, cols * (panel + border) + border, cols * (panel + border) + border, 255) != 0) {
        npy_free(&a);
        return cli_error(cmd, 1, "out of memory for the picture");
    }
    double *bins = malloc((size_t)panel * panel * sizeof *bins);
    if (!bins) {
        npy_free(&a);
        image_free(&img);
        return cli_error(cmd, 1, "out of memory for the picture");
    }
    for (int i = 0; i < d; i++)
        for (int j = i + 1; j < d; j++) {
            int nx = isfinite(step[i]) ? (int)lround((hi[i] - lo[i]) / step[i]) + 1 : 1;
            int ny = isfinite(step[j]) ? (int)lround((hi[j] - lo[j]) / step[j]) + 1 : 1;
            int scale = panel / (nx > ny ? nx : ny);
            if (scale < 1)
                scale = 1;
            memset(bins, 0, (size_t)panel * panel * sizeof *bins);
            double top = 0.0;
            for (size_t c = 0; c < n; c++) {
                int bx = nx > 1 ? (int)lround((rows[c * (d + 1) + i] - lo[i]) / step[i]) : 0;
                int by = ny > 1 ? (int)lround((rows[c * (d + 1) + j] - lo[j]) / step[j]) : 0;
                if (bx * scale >= panel || by * scale >= panel)
                    continue;
                double *b = &bins[(size_t)by * panel + bx];
                *b += rows[c * (d + 1) + d];
                top = fmax(top, *b);
            }
            int x0 = border + (j - 1) * (panel + border), y0 = border + i * (panel + border);
            for (int y = 0; y < panel; y++)
                for (int x = 0; x < panel; x++) {
                    int bx = x / scale, by = (panel - 1 - y) / scale;
                    double v = bx < panel && by < panel && top > 0 ? bins[(size_t)by * panel + bx] / top : 0;
                    unsigned char shade = (unsigned char)lround(255.0 * (1.0 - sqrt(v)));
                    unsigned char rgb[3] = {shade, shade, (unsigned char)(v > 0 ? 255 : shade)};
                    image_set(&img, x0 + x, y0 + y, rgb);
                }
        }
    free(bins);
    npy_free(&a);
    int rc = image_write_png(&img, png_path, err, sizeof err);
    image_free(&img);
    return rc ? cli_error(cmd, 1, "%s", err) : 0;
}

int cmd_gbees_plot(int argc, char **argv)
{
    const char *cmd = "gbees-plot", *dir = NULL;
    int panel = 200;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            plot_usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--size")) {
            const char *v = cli_value(cmd, argc, argv, &i);
            if (!v)
                return 2;
            panel = atoi(v);
            if (panel < 20 || panel > 2000)
                return cli_error(cmd, 2, "--size must be 20..2000 pixels");
        } else if (argv[i][0] == '-') {
            return cli_error(cmd, 2, "unknown option '%s'", argv[i]);
        } else {
            dir = argv[i];
        }
    }
    if (!dir)
        return cli_error(cmd, 2, "a run folder is required (dakit gbees-plot --help)");
    DIR *dp = opendir(dir);
    if (!dp)
        return cli_error(cmd, 1, "cannot open %s: %s", dir, strerror(errno));
    int drawn = 0, rc = 0;
    struct dirent *e;
    while ((e = readdir(dp)) && !rc) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "pdf_", 4) != 0 || len < 8 || strcmp(e->d_name + len - 4, ".npy") != 0)
            continue;
        char in[4096], out[4096];
        snprintf(in, sizeof in, "%s/%s", dir, e->d_name);
        snprintf(out, sizeof out, "%s/%.*s.png", dir, (int)(len - 4), e->d_name);
        rc = draw_snapshot(cmd, in, out, panel);
        drawn += !rc;
    }
    closedir(dp);
    if (!rc && drawn == 0)
        return cli_error(cmd, 1, "no pdf_*.npy snapshots in %s", dir);
    if (!rc)
        printf("gbees-plot: %d pictures in %s\n", drawn, dir);
    return rc;
}
