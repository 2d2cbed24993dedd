/* dakit demo: what the library does, on the best backend present. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/plot.h"
#include "cli/output.h"
#include "harness/accuracy.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dakit demo [--out demo.png] [--backend NAME] [--size N] [--sigma S]\n"
            "\n"
            "Smooths an N x N float32 field of point sources in noise (rf, K 4, zero boundary,\n"
            "both axes) on the chosen backend, checks it against the serial reference, shows\n"
            "how rf approaches the exact Gaussian as K grows beside deriche (dakit gauss's\n"
            "default) and vyv, and draws a picture: the input, the smoothed field, and impulse\n"
            "responses of rf and deriche.\n"
            "\n"
            "  --out FILE      the picture: PNG, or SVG or PDF by the name's extension (default\n"
            "                  demo.png; '' for none)\n"
            "  --backend NAME  cuda, opencl, cpu, auto or a comma list (default: DAKIT_BACKEND/auto)\n"
            "  --size N        side of the field in points, 16 to 16384 (default 2048)\n"
            "  --sigma S       standard deviation in grid points, between 0 and 1000 (default 12)\n");
}

/* The field shrunk to at most `side` pixels a side, each pixel the value of
 * largest magnitude in its cell (so that no source is lost), coloured on the
 * diverging map over -scale .. scale. */
static uint32_t *thumbnail(const float *field, int size, int side, double scale, int *shown)
{
    int step = size > side ? (size + side - 1) / side : 1, n = size / step;
    uint32_t *px = malloc((size_t)n * (size_t)n * sizeof *px);
    if (!px)
        return NULL;
    for (int y = 0; y < n; y++)
        for (int x = 0; x < n; x++) {
            float keep = 0;
            for (int dy = 0; dy < step; dy++)
                for (int dx = 0; dx < step; dx++) {
                    float v = field[(size_t)(y * step + dy) * size + (size_t)(x * step + dx)];
                    keep = fabsf(v) > fabsf(keep) ? v : keep;
                }
            /* row 0 of the field at the bottom, as the y axis counts up */
            px[(size_t)(n - 1 - y) * n + x] = plot_pack(plot_cmap_color(PLOT_CMAP_DIVERGING, 0.5 + 0.5 * keep / scale));
        }
    *shown = n;
    return px;
}

static int draw_picture(const char *path, const float *field, const float *smooth, int size, double sigma, int K,
                        double maxin, double maxout, double *const resp[4], const int shown_K[4], size_t m,
                        const char *backend, char *err, size_t len)
{
    const double W = 1620, H = 560, side = 380, top = 100;
    plot *p = plot_open(path, W, H, 1, err, len);
    if (!p)
        return -1;
    char title[256], sub[256];
    snprintf(title, sizeof title, "dakit demo: Gaussian smoothing by the recursive filter (sigma %g, K %d)",
             sigma, K);
    snprintf(sub, sizeof sub, "a %d x %d float32 field of 60 point sources in weak noise, smoothed on backend %s",
             size, size, backend);
    plot_title(p, title, sub);
    const float *src[2] = {field, smooth};
    double scale[2] = {0.5 * maxin, 0.7 * maxout};
    const char *names[2] = {"input: point sources in noise", "smoothed along both axes"};
    for (int k = 0; k < 2; k++) {
        int n;
        uint32_t *px = thumbnail(src[k], size, (int)side, scale[k], &n);
        if (!px) {
            plot_discard(p);
            snprintf(err, len, "out of memory for the picture");
            return -1;
        }
        plot_panel a = {90 + k * 560, top, side, side, 0, size, 0, size};
        plot_raster(p, &a, px, n, n, 0);
        free(px);
        plot_axes(p, &a, names[k], "x (grid points)", "y (grid points)");
        plot_colorbar(p, a.x + side + 12, a.y, 14, side, PLOT_CMAP_DIVERGING, -scale[k], scale[k],
                      "value (arbitrary units)");
    }
    /* impulse responses against the exact Gaussian, x in units of sigma */
    double peak = 1.0 / (sqrt(2 * M_PI) * sigma), ymax = peak;
    for (int j = 0; j < 4; j++)
        for (size_t i = 0; i < 2 * m + 1; i++)
            ymax = fmax(ymax, resp[j][i]);
    plot_panel a = {90 + 2 * 560, top, side, side, -(double)m / sigma, (double)m / sigma, 0, 1.08 * ymax / peak};
    double *x = malloc((2 * m + 1) * sizeof *x), *y = malloc((2 * m + 1) * sizeof *y);
    if (!x || !y) {
        free(x);
        free(y);
        plot_discard(p);
        snprintf(err, len, "out of memory for the picture");
        return -1;
    }
    static const plot_rgb colors[4] = {{230 / 255.0, 159 / 255.0, 0}, {86 / 255.0, 180 / 255.0, 233 / 255.0},
                                       {0, 158 / 255.0, 115 / 255.0}, {204 / 255.0, 121 / 255.0, 167 / 255.0}};
    plot_legend_item items[5];
    char labels[4][48];
    for (int j = 0; j < 4; j++) {
        for (size_t i = 0; i < 2 * m + 1; i++) {
            x[i] = ((double)i - (double)m) / sigma;
            y[i] = resp[j][i] / peak;
        }
        plot_line(p, &a, x, y, 2 * m + 1, colors[j], 2, 0);
        if (shown_K[j])
            snprintf(labels[j], sizeof labels[j], "rf, K = %d", shown_K[j]);
        else
            snprintf(labels[j], sizeof labels[j], "deriche");
        items[j] = (plot_legend_item){labels[j], colors[j], PLOT_MARK_LINE};
    }
    for (size_t i = 0; i < 2 * m + 1; i++)
        y[i] = exp(-0.5 * x[i] * x[i]);
    plot_line(p, &a, x, y, 2 * m + 1, (plot_rgb){0, 0, 0}, 1.5, 1);
    items[4] = (plot_legend_item){"exact Gaussian", (plot_rgb){0, 0, 0}, PLOT_MARK_DASHED};
    free(x);
    free(y);
    plot_axes(p, &a, "impulse responses", "distance from the impulse (sigma)",
              "response / peak of the exact Gaussian");
    plot_legend(p, a.x + a.w - 8 - plot_legend_width(p, items, 5), a.y + 8, items, 5);
    return plot_close(p, err, len);
}

int cmd_demo(int argc, char **argv)
{
    const char *cmd = "demo", *out_path = "demo.png", *backend = NULL;
    int out_given = 0;
    int size = 2048;
    double sigma = 12;
    static const struct option option_table[] = {CLI_FLAG("help"), CLI_VALUE("out"), CLI_VALUE("backend"),
        CLI_VALUE("size"), CLI_VALUE("sigma"), {0}};
    cli_args args = {.cmd = cmd, .argc = argc, .argv = argv, .options = option_table};
    int more;
    while ((more = cli_next(&args)) == 1) {
        const char *a = args.opt, *v = args.value;
        if (!strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--out"))
            out_path = v, out_given = 1;
        else if (!strcmp(a, "--backend"))
            backend = v;
        else if (!strcmp(a, "--size")) {
            if (cli_int(cmd, a, v, 16, 16384, &size))
                return 2;
        } else if (!strcmp(a, "--sigma")) {
            if (cli_double(cmd, a, v, 0, 1000, CLI_OPEN_LO | CLI_OPEN_HI, &sigma))
                return 2;
        }
    }
    if (more)
        return more;
    if (cli_options_only)
        return 0;
    char err[4200];
    if (!out_given && !plot_built()) {
        printf("no picture: dakit was built without cairo\n");
        out_path = "";
    }
    if (*out_path && plot_check_path(out_path, err, sizeof err) != 0)
        return cli_error(cmd, 1, "%s", err);

    dk_context *ctx;
    if (dk_context_create(backend, &ctx) != DK_OK)
        return cli_error(cmd, 1, "%s", dk_last_error(NULL));
    printf("dakit demo on backend %s (%s)\n\n", dk_context_backend(ctx), dk_context_device(ctx));

    size_t count = (size_t)size * (size_t)size, bytes = count * sizeof(float);
    float *field = malloc(bytes), *smooth = malloc(bytes), *ref = malloc(bytes);
    int rc = 1;
    dk_plan *plan = NULL;
    dk_buffer *bin = NULL, *bout = NULL;
    if (!field || !smooth || !ref) {
        cli_error(cmd, 1, "out of memory");
        goto done;
    }
    /* observation increments: a few strong point sources in weak noise */
    cli_fill_random(field, DK_F32, count, 7);
    for (size_t i = 0; i < count; i++)
        field[i] *= 0.05f;
    uint64_t st = 11;
    const int r = 3; /* each source a 7 x 7 patch, so the picture shows it */
    for (int s = 0; s < 60; s++) {
        size_t y = (size_t)((cli_random(&st) + 1) / 2 * (size - 2 * r)) + r;
        size_t x = (size_t)((cli_random(&st) + 1) / 2 * (size - 2 * r)) + r;
        float amp = (float)(cli_random(&st) * 2 * M_PI * sigma * sigma / ((2 * r + 1) * (2 * r + 1)));
        for (int dy = -r; dy <= r; dy++)
            for (int dx = -r; dx <= r; dx++)
                field[(y + dy) * size + x + dx] += amp;
    }

    dk_gauss_desc d;
    dk_gauss_desc_init(&d);
    d.method = DK_GAUSS_RF; /* the picture's smoothed field: rf, K 4, zero boundary */
    d.boundary = DK_BOUNDARY_ZERO;
    d.ndim = 2;
    d.shape[0] = d.shape[1] = (size_t)size;
    d.axes = 3;
    d.sigma[0] = d.sigma[1] = sigma;
    if (dk_gauss_plan_create(ctx, &d, &plan) != DK_OK || dk_buffer_create(ctx, bytes, &bin) != DK_OK ||
        dk_buffer_create(ctx, bytes, &bout) != DK_OK || dk_buffer_write(bin, field, bytes) != DK_OK ||
        dk_gauss_execute(plan, bin, bout) != DK_OK) {
        cli_error(cmd, 1, "%s", dk_last_error(ctx));
        goto done;
    }
    double best = INFINITY;
    for (int r = 0; r < 5; r++) {
        double t0 = cli_now();
        if (dk_gauss_execute(plan, bin, bout) != DK_OK) {
            cli_error(cmd, 1, "%s", dk_last_error(ctx));
            goto done;
        }
        double t = cli_now() - t0;
        best = t < best ? t : best;
    }
    if (dk_buffer_read(bout, smooth, bytes) != DK_OK) {
        cli_error(cmd, 1, "%s", dk_last_error(ctx));
        goto done;
    }
    printf("1. smoothed a %dx%d float32 field (60 point sources in noise), sigma %g, K %d, both axes:\n"
           "   %.3f ms per execute (best of 5, data on the device)\n",
           size, size, sigma, d.K, best * 1e3);

    dk_gauss_reference(&d, field, ref);
    double maxdiff = 0, maxin = 0, maxout = 0;
    for (size_t i = 0; i < count; i++) {
        maxdiff = fmax(maxdiff, fabs((double)smooth[i] - ref[i]));
        maxin = fmax(maxin, fabs(field[i]));
        maxout = fmax(maxout, fabs(smooth[i]));
    }
    double tol = (2.0 * d.K * 2 + 4) * 2 * 0x1p-24;
    printf("   against the serial reference: max error %.2e of max|x| (tolerance %.2e): %s\n\n", maxdiff / maxin,
           tol, maxdiff / maxin <= tol ? "match" : "MISMATCH");
    if (maxdiff / maxin > tol)
        goto done;

    printf("2. the K-iterated recursive filter against the exact Gaussian (sigma %g, impulse response):\n", sigma);
    printf("   %5s  %s\n", "K", "max |rf - gauss| / peak");
    size_t m = (size_t)(8 * sigma) + 8;
    static const int Ks[] = {1, 2, 4, 8, 16, 32, 64};
    double *resp[4] = {0};
    int has_deriche = sigma >= DK_GAUSS_IIR_MIN_SIGMA && sigma <= DK_GAUSS_IIR_MAX_SIGMA;
    int shown[4] = {1, 4, 16, has_deriche ? 0 : 2}; /* 0: deriche */
    for (int k = 0; k < 4; k++)
        resp[k] = malloc((2 * m + 1) * sizeof(double));
    for (size_t k = 0; k < sizeof Ks / sizeof Ks[0]; k++) {
        double *keep = NULL;
        for (int j = 0; j < 4; j++)
            if (shown[j] == Ks[k])
                keep = resp[j];
        printf("   %5d  %.2e\n", Ks[k], gauss_error_vs_exact(sigma, DK_GAUSS_RF, Ks[k], m, keep));
    }
    if (has_deriche) {
        /* the true-Gaussian recursions, one pass each way (docs/gauss.md) */
        printf("   the higher-order recursive Gaussians, one pass each way:\n");
        printf("   %-16s %.2e\n", "--method deriche", gauss_error_vs_exact(sigma, DK_GAUSS_DERICHE, 1, m, resp[3]));
        printf("   %-16s %.2e\n", "--method vyv", gauss_error_vs_exact(sigma, DK_GAUSS_VYV, 1, m, NULL));
    }

    if (*out_path) {
        if (draw_picture(out_path, field, smooth, size, sigma, d.K, maxin, maxout, resp, shown, m,
                         dk_context_backend(ctx), err, sizeof err) != 0) {
            for (int k = 0; k < 4; k++)
                free(resp[k]);
            cli_error(cmd, 1, "%s", err);
            goto done;
        }
        printf("\n3. picture: %s\n   left: the input; middle: the smoothed field (blue negative, red positive);\n"
               "   right: impulse responses of rf for K = 1, 4, 16 and of deriche (rf K = 2 below\n"
               "   sigma 0.5) against the exact Gaussian\n",
               out_path);
    }
    for (int k = 0; k < 4; k++)
        free(resp[k]);
    rc = 0;
done:
    dk_plan_destroy(plan);
    dk_buffer_destroy(bin);
    dk_buffer_destroy(bout);
    dk_context_destroy(ctx);
    free(field);
    free(smooth);
    free(ref);
    return rc;
}
