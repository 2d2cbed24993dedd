#include "enkf/l96.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "cli/plot.h"

static void tendency(const double *x, double *dx)
{
    for (int i = 0; i < L96_N; i++) {
        int ip = (i + 1) % L96_N, im = (i + L96_N - 1) % L96_N, imm = (i + L96_N - 2) % L96_N;
        dx[i] = (x[ip] - x[imm]) * x[im] - x[i] + L96_F;
    }
}

void l96_step(double *x, size_t stride)
{
    double s[L96_N], k1[L96_N], k2[L96_N], k3[L96_N], k4[L96_N], t[L96_N];
    for (int i = 0; i < L96_N; i++)
        s[i] = x[i * stride];
    tendency(s, k1);
    for (int i = 0; i < L96_N; i++)
        t[i] = s[i] + 0.5 * L96_DT * k1[i];
    tendency(t, k2);
    for (int i = 0; i < L96_N; i++)
        t[i] = s[i] + 0.5 * L96_DT * k2[i];
    tendency(t, k3);
    for (int i = 0; i < L96_N; i++)
        t[i] = s[i] + L96_DT * k3[i];
    tendency(t, k4);
    for (int i = 0; i < L96_N; i++)
        x[i * stride] = s[i] + L96_DT / 6.0 * (k1[i] + 2 * k2[i] + 2 * k3[i] + k4[i]);
}

int l96_picture(const char *cmd, const char *path, const double *rmse, const double *spread, int n,
                const l96_picture_info *info)
{
    char err[4200];
    const double W = 1000, H = 520;
    plot *p = plot_open(path, W, H, 1, err, sizeof err);
    if (!p)
        return cli_error(cmd, 1, "%s", err);
    double top = info->top;
    if (!(top > 0)) {
        top = 1.2;
        for (int k = 0; k < n; k++)
            top = fmax(top, fmin(fmax(rmse[k], spread[k]) * 1.05, 8.0));
    }
    plot_title(p, info->title, info->subtitle);
    plot_panel a = {80, 70, W - 110, H - 145, 0, n, 0, top};
    static const plot_rgb shade = {0.92, 0.92, 0.92}, blue = {0, 114 / 255.0, 178 / 255.0},
                          orange = {230 / 255.0, 159 / 255.0, 0}, black = {0, 0, 0},
                          green = {0, 158 / 255.0, 115 / 255.0}, red = {213 / 255.0, 94 / 255.0, 0};
    plot_span(p, &a, 0, info->spinup, shade);
    double *x = malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
    if (!x) {
        plot_discard(p);
        return cli_error(cmd, 1, "out of memory for the picture");
    }
    for (int k = 0; k < n; k++)
        x[k] = k + 1;
    double ox[2] = {0, n}, oy[2] = {1, 1}, mx[2] = {info->spinup, n}, my[2] = {info->mean, info->mean};
    double ty[2] = {info->target, info->target};
    if (top > 1)
        plot_line(p, &a, ox, oy, 2, black, 1.2, 1);
    plot_line(p, &a, x, rmse, (size_t)n, blue, 1.0, 0);
    plot_line(p, &a, x, spread, (size_t)n, orange, 1.5, 0);
    plot_line(p, &a, mx, my, 2, green, 2.0, 0);
    if (info->target > 0)
        plot_line(p, &a, ox, ty, 2, red, 1.5, 1);
    free(x);
    plot_axes(p, &a, NULL, "assimilation cycle (0.05 model time units each)",
              "error of the ensemble mean (model units)");
    char mean_label[96], target_label[96];
    snprintf(mean_label, sizeof mean_label, "time-mean RMSE after spin-up: %.3f", info->mean);
    snprintf(target_label, sizeof target_label, "target: time-mean RMSE <= %.3f", info->target);
    plot_legend_item items[6] = {{"analysis RMSE (ensemble mean vs truth)", blue, PLOT_MARK_LINE},
                                 {"ensemble spread (sqrt of mean variance)", orange, PLOT_MARK_LINE},
                                 {mean_label, green, PLOT_MARK_LINE},
                                 {"spin-up (not averaged)", shade, PLOT_MARK_BOX}};
    int count = 4;
    if (top > 1)
        items[count++] = (plot_legend_item){"observation error standard deviation (1)", black, PLOT_MARK_DASHED};
    if (info->target > 0)
        items[count++] = (plot_legend_item){target_label, red, PLOT_MARK_DASHED};
    plot_legend(p, a.x + a.w - 8 - plot_legend_width(p, items, count), a.y + 8, items, count);
    return plot_close(p, err, sizeof err) ? cli_error(cmd, 1, "%s", err) : 0;
}
