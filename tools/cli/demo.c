/* dakit demo: what the library does, on the best backend present. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/image.h"
#include "cli/output.h"
#include "harness/accuracy.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dakit demo [--out demo.png] [--backend NAME] [--size N] [--sigma S]\n"
            "\n"
            "Smooths an N x N float32 field of point sources in noise (K 4, both axes) on the\n"
            "chosen backend, checks it against the serial reference, shows how the recursive\n"
            "filter approaches the exact Gaussian as K grows, and draws a picture: the input,\n"
            "the smoothed field, and impulse responses.\n"
            "\n"
            "  --out FILE      the picture, PNG (default demo.png)\n"
            "  --backend NAME  cuda, opencl, cpu, auto or a comma list (default: DAKIT_BACKEND/auto)\n"
            "  --size N        side of the field in points, 16 to 16384 (default 2048)\n"
            "  --sigma S       standard deviation in grid points, between 0 and 1000 (default 12)\n");
}

int cmd_demo(int argc, char **argv)
{
    const char *cmd = "demo", *out_path = "demo.png", *backend = NULL;
    int size = 2048;
    double sigma = 12;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!(v = cli_value(cmd, argc, argv, &i)))
            return 2;
        if (!strcmp(a, "--out"))
            out_path = v;
        else if (!strcmp(a, "--backend"))
            backend = v;
        else if (!strcmp(a, "--size")) {
            if (cli_int(cmd, a, v, 16, 16384, &size))
                return 2;
        } else if (!strcmp(a, "--sigma")) {
            if (cli_double(cmd, a, v, 0, 1000, CLI_OPEN_LO | CLI_OPEN_HI, &sigma))
                return 2;
        } else
            return cli_error(cmd, 2, "unknown option '%s' (dakit demo --help)", a);
    }
    if (cli_options_only)
        return 0;
    char err[4200];
    if (output_check(out_path, err, sizeof err) != 0)
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
    int shown[4] = {1, 2, 4, 16};
    for (int k = 0; k < 4; k++)
        resp[k] = malloc((2 * m + 1) * sizeof(double));
    for (size_t k = 0; k < sizeof Ks / sizeof Ks[0]; k++) {
        double *keep = NULL;
        for (int j = 0; j < 4; j++)
            if (shown[j] == Ks[k])
                keep = resp[j];
        printf("   %5d  %.2e\n", Ks[k], gauss_error_vs_exact(sigma, Ks[k], m, keep));
    }

    /* picture: input | smoothed | impulse responses */
    int panel = 512, gap = 16, step = size > panel ? (size + panel - 1) / panel : 1;
    int shown_px = size / step;
    image img;
    if (image_create(&img, 3 * panel + 4 * gap, panel + 2 * gap, 235) != 0) {
        cli_error(cmd, 1, "out of memory");
        goto done;
    }
    float *thumb = malloc((size_t)shown_px * (size_t)shown_px * sizeof(float));
    float *sources[2] = {field, smooth};
    double scales[2] = {0.5 * maxin, 0.7 * maxout};
    for (int p = 0; p < 2 && thumb; p++) {
        /* each pixel shows the largest magnitude in its cell, so no source is lost */
        for (int y = 0; y < shown_px; y++)
            for (int x = 0; x < shown_px; x++) {
                float keep = 0;
                for (int dy = 0; dy < step; dy++)
                    for (int dx = 0; dx < step; dx++) {
                        float v = sources[p][(size_t)(y * step + dy) * size + (size_t)(x * step + dx)];
                        keep = fabsf(v) > fabsf(keep) ? v : keep;
                    }
                thumb[(size_t)y * shown_px + x] = keep;
            }
        image_field(&img, gap + p * (panel + gap), gap, thumb, shown_px, shown_px, scales[p]);
    }
    free(thumb);
    int px0 = gap + 2 * (panel + gap), py0 = gap;
    unsigned char white[3] = {255, 255, 255}, black[3] = {0, 0, 0};
    for (int y = 0; y < panel; y++)
        for (int x = 0; x < panel; x++)
            image_set(&img, px0 + x, py0 + y, white);
    static const unsigned char colors[4][3] = {{230, 97, 1}, {94, 60, 153}, {27, 158, 119}, {31, 120, 180}};
    double peak = 1.0 / (sqrt(2 * M_PI) * sigma), top = peak;
    for (int j = 0; j < 4; j++)
        for (size_t i = 0; i < 2 * m + 1; i++)
            top = fmax(top, resp[j][i]);
    for (int j = -1; j < 4; j++) {
        int prevx = 0, prevy = 0;
        for (size_t i = 0; i < 2 * m + 1; i++) {
            double t = ((double)i - (double)m) / sigma;
            double v = j < 0 ? peak * exp(-0.5 * t * t) : resp[j][i];
            int x = px0 + (int)((double)i / (double)(2 * m) * (panel - 1));
            int y = py0 + panel - 20 - (int)(v / (1.05 * top) * (panel - 40));
            if (i)
                image_line(&img, prevx, prevy, x, y, j < 0 ? black : colors[j]);
            prevx = x;
            prevy = y;
        }
    }
    for (int k = 0; k < 4; k++)
        free(resp[k]);
    if (image_write_png(&img, out_path, err, sizeof err) != 0) {
        image_free(&img);
        cli_error(cmd, 1, "%s", err);
        goto done;
    }
    image_free(&img);
    printf("\n3. picture: %s\n   left: the input; middle: the smoothed field (blue negative, red positive);\n"
           "   right: impulse responses for K = 1 (orange), 2 (purple), 4 (green), 16 (blue)\n"
           "   against the exact Gaussian (black)\n",
           out_path);
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
