#include "cli/plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/output.h"

/* ---- colours (no cairo needed) ---- */

static plot_rgb from_stops(const double (*stops)[4], int n, double t)
{
    if (!(t == t))
        t = 0.5;
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    for (int s = 1; s < n; s++)
        if (t <= stops[s][0] || s == n - 1) {
            double u = (t - stops[s - 1][0]) / (stops[s][0] - stops[s - 1][0]);
            u = u < 0 ? 0 : u > 1 ? 1 : u;
            plot_rgb c;
            c.r = (stops[s - 1][1] + u * (stops[s][1] - stops[s - 1][1])) / 255.0;
            c.g = (stops[s - 1][2] + u * (stops[s][2] - stops[s - 1][2])) / 255.0;
            c.b = (stops[s - 1][3] + u * (stops[s][3] - stops[s - 1][3])) / 255.0;
            return c;
        }
    return (plot_rgb){0, 0, 0};
}

plot_rgb plot_cmap_color(plot_cmap cm, double t)
{
    /* ColorBrewer RdBu and Blues; the reflectivity stops are at -10, 5, 20,
     * 35, 45 and 60 dBZ of a -10 .. 60 dBZ scale */
    static const double diverging[][4] = {{0, 33, 102, 172},   {0.25, 146, 197, 222}, {0.5, 247, 247, 247},
                                          {0.75, 244, 165, 130}, {1, 178, 24, 43}};
    static const double sequential[][4] = {{0, 255, 255, 255},  {0.25, 198, 219, 239}, {0.5, 107, 174, 214},
                                           {0.75, 33, 113, 181}, {1, 8, 48, 107}};
    static const double reflectivity[][4] = {{0, 220, 230, 240},      {15 / 70.0, 40, 70, 200},
                                             {30 / 70.0, 40, 180, 80},  {45 / 70.0, 250, 220, 30},
                                             {55 / 70.0, 240, 60, 30},  {1, 200, 30, 200}};
    /* lightness falls from the pale yellow to the dark purple, so the order reads without the hue */
    static const double intensity[][4] = {{0, 253, 226, 120},  {0.3, 247, 156, 52}, {0.6, 214, 50, 44},
                                          {0.8, 150, 20, 90},  {1, 62, 12, 84}};
    switch (cm) {
    case PLOT_CMAP_DIVERGING: return from_stops(diverging, 5, t);
    case PLOT_CMAP_SEQUENTIAL: return from_stops(sequential, 5, t);
    case PLOT_CMAP_INTENSITY: return from_stops(intensity, 5, t);
    default: return from_stops(reflectivity, 6, t);
    }
}

plot_rgb plot_category_color(int c)
{
    /* Okabe & Ito (2008), "Color Universal Design" */
    static const unsigned char okabe_ito[8][3] = {{230, 159, 0},  {86, 180, 233}, {0, 158, 115},
                                                  {240, 228, 66}, {0, 114, 178},  {213, 94, 0},
                                                  {204, 121, 167}, {0, 0, 0}};
    if (c >= 0 && c < 8)
        return (plot_rgb){okabe_ito[c][0] / 255.0, okabe_ito[c][1] / 255.0, okabe_ito[c][2] / 255.0};
    /* beyond eight: hues a golden angle apart, saturated, two lightnesses */
    double h = fmod((c - 8) * 137.508, 360.0) / 60.0, v = (c % 2) ? 0.95 : 0.6, s = 0.85;
    double f = h - floor(h), p = v * (1 - s), q = v * (1 - s * f), u = v * (1 - s * (1 - f));
    switch ((int)floor(h) % 6) {
    case 0: return (plot_rgb){v, u, p};
    case 1: return (plot_rgb){q, v, p};
    case 2: return (plot_rgb){p, v, u};
    case 3: return (plot_rgb){p, q, v};
    case 4: return (plot_rgb){u, p, v};
    default: return (plot_rgb){v, p, q};
    }
}

void plot_to_figure(const plot_panel *a, double x, double y, double *fx, double *fy)
{
    *fx = a->x + (x - a->left) / (a->right - a->left) * a->w;
    *fy = a->y + a->h - (y - a->bottom) / (a->top - a->bottom) * a->h;
}

uint32_t plot_pack(plot_rgb c)
{
    uint32_t r = (uint32_t)lround(fmin(fmax(c.r, 0), 1) * 255), g = (uint32_t)lround(fmin(fmax(c.g, 0), 1) * 255),
             b = (uint32_t)lround(fmin(fmax(c.b, 0), 1) * 255);
    return r << 16 | g << 8 | b;
}

#ifndef DK_TOOLS_CAIRO

static const char *not_built = "pictures were not built: dakit was configured without cairo "
                               "(install libcairo2-dev, as tools/setup does, and run meson setup again)";

int plot_built(void) { return 0; }
int plot_check_path(const char *path, char *err, size_t len)
{
    (void)path;
    snprintf(err, len, "%s", not_built);
    return -1;
}
plot *plot_open(const char *path, double width, double height, double scale, char *err, size_t len)
{
    (void)path, (void)width, (void)height, (void)scale;
    snprintf(err, len, "%s", not_built);
    return NULL;
}
int plot_close(plot *p, char *err, size_t len)
{
    (void)p;
    snprintf(err, len, "%s", not_built);
    return -1;
}
void plot_discard(plot *p) { (void)p; }
void plot_text(plot *p, double x, double y, double size, int align, int bold, const char *text)
{
    (void)p, (void)x, (void)y, (void)size, (void)align, (void)bold, (void)text;
}
void plot_title(plot *p, const char *title, const char *subtitle) { (void)p, (void)title, (void)subtitle; }
void plot_axes(plot *p, const plot_panel *a, const char *title, const char *xname, const char *yname)
{
    (void)p, (void)a, (void)title, (void)xname, (void)yname;
}
void plot_line(plot *p, const plot_panel *a, const double *x, const double *y, size_t n, plot_rgb c,
               double width, int dashed)
{
    (void)p, (void)a, (void)x, (void)y, (void)n, (void)c, (void)width, (void)dashed;
}
void plot_span(plot *p, const plot_panel *a, double x0, double x1, plot_rgb c)
{
    (void)p, (void)a, (void)x0, (void)x1, (void)c;
}
void plot_raster(plot *p, const plot_panel *a, const uint32_t *rgb, int w, int h, int exact)
{
    (void)p, (void)a, (void)rgb, (void)w, (void)h, (void)exact;
}
void plot_colorbar(plot *p, double x, double y, double w, double h, plot_cmap cm, double lo, double hi,
                   const char *label)
{
    (void)p, (void)x, (void)y, (void)w, (void)h, (void)cm, (void)lo, (void)hi, (void)label;
}
double plot_legend(plot *p, double x, double y, const plot_legend_item *items, int n)
{
    (void)p, (void)x, (void)y, (void)items, (void)n;
    return 0;
}
double plot_legend_width(plot *p, const plot_legend_item *items, int n)
{
    (void)p, (void)items, (void)n;
    return 0;
}
void plot_box(plot *p, double x, double y, double w, double h, plot_rgb c)
{
    (void)p, (void)x, (void)y, (void)w, (void)h, (void)c;
}
void plot_marker(plot *p, const plot_panel *a, double x, double y, double size)
{
    (void)p, (void)a, (void)x, (void)y, (void)size;
}
void plot_note(plot *p, const plot_panel *a, const char *text) { (void)p, (void)a, (void)text; }

#else

#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <cairo.h>
#include <fontconfig/fontconfig.h>
#include <strings.h>
#include <sys/stat.h>

/* The format a path asks for by its extension: 0 png, 1 svg, 2 pdf, -1
 * none. Something other than a regular file (/dev/stdout, a pipe) gets PNG. */
static int format_of(const char *path)
{
    static const char *ext[3] = {".png", ".svg", ".pdf"};
    size_t n = strlen(path);
    for (int k = 0; k < 3; k++)
        if (n > 4 && !strcasecmp(path + n - 4, ext[k]))
            return k;
    struct stat st;
    return stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode) ? 0 : -1;
}

struct plot {
    cairo_surface_t *surface;
    cairo_t *cr;
    int format; /* 0 png, 1 svg, 2 pdf */
    double width, height;
    output out;
};

static const char *font = "DejaVu Sans";

int plot_built(void) { return 1; }

int plot_check_path(const char *path, char *err, size_t len)
{
    if (format_of(path) < 0) {
        snprintf(err, len, "%s: a picture's name ends in .png, .svg or .pdf", path);
        return -1;
    }
    return output_check(path, err, len);
}

static cairo_status_t write_out(void *closure, const unsigned char *data, unsigned int length)
{
    output *o = closure;
    return fwrite(data, 1, length, o->f) == length ? CAIRO_STATUS_SUCCESS : CAIRO_STATUS_WRITE_ERROR;
}

/* cairo's and fontconfig's font caches live until exit; releasing them
 * then keeps leak checkers' reports to dakit's own memory. */
static void release_fonts(void)
{
    cairo_debug_reset_static_data();
    FcFini();
}

plot *plot_open(const char *path, double width, double height, double scale, char *err, size_t len)
{
    static int registered;
    if (!registered)
        registered = atexit(release_fonts) == 0;
    if (plot_check_path(path, err, len) != 0)
        return NULL;
    if (!(scale >= 0.25 && scale <= 8 && width * scale >= 16 && width * scale <= 20000 && height * scale >= 16 &&
          height * scale <= 20000)) {
        snprintf(err, len, "a picture of %g x %g points at %g pixels per point; 16 to 20000 pixels on a side "
                 "are drawn", width, height, scale);
        return NULL;
    }
    plot *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, len, "out of memory for the picture");
        return NULL;
    }
    p->format = format_of(path);
    p->width = width;
    p->height = height;
    if (output_open(&p->out, path, err, len) != 0) {
        free(p);
        return NULL;
    }
    if (p->format == 0)
        p->surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)ceil(width * scale),
                                                (int)ceil(height * scale));
    else if (p->format == 1)
        p->surface = cairo_svg_surface_create_for_stream(write_out, &p->out, width, height);
    else
        p->surface = cairo_pdf_surface_create_for_stream(write_out, &p->out, width, height);
    p->cr = cairo_create(p->surface);
    if (cairo_status(p->cr) != CAIRO_STATUS_SUCCESS) {
        snprintf(err, len, "cairo cannot start %s: %s", path, cairo_status_to_string(cairo_status(p->cr)));
        cairo_destroy(p->cr);
        cairo_surface_destroy(p->surface);
        output_abort(&p->out);
        free(p);
        return NULL;
    }
    if (p->format == 0)
        cairo_scale(p->cr, scale, scale);
    cairo_set_source_rgb(p->cr, 1, 1, 1);
    cairo_paint(p->cr);
    return p;
}

int plot_close(plot *p, char *err, size_t len)
{
    cairo_status_t st = cairo_status(p->cr);
    cairo_destroy(p->cr);
    if (st == CAIRO_STATUS_SUCCESS) {
        if (p->format == 0)
            st = cairo_surface_write_to_png_stream(p->surface, write_out, &p->out);
        else {
            cairo_surface_finish(p->surface);
            st = cairo_surface_status(p->surface);
        }
    }
    cairo_surface_destroy(p->surface);
    int rc;
    if (st != CAIRO_STATUS_SUCCESS) {
        if (p->out.error)
            snprintf(err, len, "writing %s failed: %s", p->out.path, strerror(p->out.error));
        else
            snprintf(err, len, "cairo failed drawing %s: %s", p->out.path, cairo_status_to_string(st));
        output_abort(&p->out);
        rc = -1;
    } else {
        rc = output_commit(&p->out, err, len);
    }
    free(p);
    return rc;
}

void plot_discard(plot *p)
{
    cairo_destroy(p->cr);
    cairo_surface_destroy(p->surface);
    output_abort(&p->out);
    free(p);
}

static void set_color(cairo_t *cr, plot_rgb c) { cairo_set_source_rgb(cr, c.r, c.g, c.b); }

void plot_text(plot *p, double x, double y, double size, int align, int bold, const char *text)
{
    cairo_t *cr = p->cr;
    cairo_select_font_face(cr, font, CAIRO_FONT_SLANT_NORMAL, bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
    cairo_text_extents_t e;
    cairo_text_extents(cr, text, &e);
    double x0 = align < 0 ? x : align == 0 ? x - e.x_advance / 2 : x - e.x_advance;
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_move_to(cr, x0, y);
    cairo_show_text(cr, text);
}

static double text_width(plot *p, double size, const char *text)
{
    cairo_select_font_face(p->cr, font, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(p->cr, size);
    cairo_text_extents_t e;
    cairo_text_extents(p->cr, text, &e);
    return e.x_advance;
}

void plot_title(plot *p, const char *title, const char *subtitle)
{
    plot_text(p, p->width / 2, 24, 17, 0, 1, title);
    if (subtitle && *subtitle)
        plot_text(p, p->width / 2, 44, 13, 0, 0, subtitle);
}

/* Ticks at 1, 2 or 5 times a power of ten, about `target` of them. */
static double tick_step(double span, int target)
{
    double raw = span / target, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

static void tick_label(double v, double step, char *s, size_t n)
{
    if (fabs(v) < step * 1e-9)
        v = 0;
    int decimals = step < 1 ? (int)ceil(-log10(step) - 1e-9) : 0;
    if (fabs(v) >= 1e6 || (v != 0 && fabs(v) < 1e-4) || decimals > 6)
        snprintf(s, n, "%.3g", v);
    else
        snprintf(s, n, "%.*f", decimals, v);
}

static double px_x(const plot_panel *a, double v) { return a->x + (v - a->left) / (a->right - a->left) * a->w; }
static double px_y(const plot_panel *a, double v)
{
    return a->y + a->h - (v - a->bottom) / (a->top - a->bottom) * a->h;
}

void plot_axes(plot *p, const plot_panel *a, const char *title, const char *xname, const char *yname)
{
    cairo_t *cr = p->cr;
    const double fs = 12, tick = 5;
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, a->x, a->y, a->w, a->h);
    cairo_stroke(cr);
    double widest = 0;
    for (int axis = 0; axis < 2; axis++) {
        double lo = axis ? a->bottom : a->left, hi = axis ? a->top : a->right;
        if (!(hi > lo) || !isfinite(hi - lo))
            continue;
        double len = axis ? a->h : a->w;
        double step = tick_step(hi - lo, len > 300 ? 6 : len > 150 ? 4 : 3);
        for (double v = ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) {
            char s[32];
            tick_label(v, step, s, sizeof s);
            cairo_set_source_rgb(cr, 0, 0, 0);
            if (axis == 0) {
                double x = px_x(a, v);
                cairo_move_to(cr, x, a->y + a->h);
                cairo_line_to(cr, x, a->y + a->h + tick);
                cairo_stroke(cr);
                plot_text(p, x, a->y + a->h + tick + fs + 1, fs, 0, 0, s);
            } else {
                double y = px_y(a, v);
                cairo_move_to(cr, a->x, y);
                cairo_line_to(cr, a->x - tick, y);
                cairo_stroke(cr);
                plot_text(p, a->x - tick - 3, y + fs * 0.35, fs, 1, 0, s);
                widest = fmax(widest, text_width(p, fs, s));
            }
        }
    }
    if (xname && *xname)
        plot_text(p, a->x + a->w / 2, a->y + a->h + tick + 2 * fs + 8, fs + 1, 0, 0, xname);
    if (yname && *yname) {
        cairo_save(cr);
        cairo_translate(cr, a->x - tick - widest - 10, a->y + a->h / 2);
        cairo_rotate(cr, -M_PI / 2);
        plot_text(p, 0, 0, fs + 1, 0, 0, yname);
        cairo_restore(cr);
    }
    if (title && *title)
        plot_text(p, a->x + a->w / 2, a->y - 8, fs + 2, 0, 1, title);
}

void plot_line(plot *p, const plot_panel *a, const double *x, const double *y, size_t n, plot_rgb c,
               double width, int dashed)
{
    cairo_t *cr = p->cr;
    cairo_save(cr);
    cairo_rectangle(cr, a->x, a->y, a->w, a->h);
    cairo_clip(cr);
    set_color(cr, c);
    cairo_set_line_width(cr, width);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    if (dashed) {
        double dash[2] = {6, 4};
        cairo_set_dash(cr, dash, 2, 0);
    }
    int pen = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i]) || !isfinite(y[i])) {
            pen = 0;
            continue;
        }
        double px = px_x(a, x[i]), py = px_y(a, y[i]);
        /* a value far off the panel is drawn at its edge's neighbourhood */
        py = fmin(fmax(py, a->y - a->h), a->y + 2 * a->h);
        if (pen)
            cairo_line_to(cr, px, py);
        else
            cairo_move_to(cr, px, py);
        pen = 1;
    }
    cairo_stroke(cr);
    cairo_restore(cr);
}

void plot_span(plot *p, const plot_panel *a, double x0, double x1, plot_rgb c)
{
    double l = fmax(px_x(a, x0), a->x), r = fmin(px_x(a, x1), a->x + a->w);
    if (!(r > l))
        return;
    set_color(p->cr, c);
    cairo_rectangle(p->cr, l, a->y, r - l, a->h);
    cairo_fill(p->cr);
}

void plot_raster(plot *p, const plot_panel *a, const uint32_t *rgb, int w, int h, int exact)
{
    cairo_surface_t *img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
    if (cairo_surface_status(img) != CAIRO_STATUS_SUCCESS) {
        cairo_surface_destroy(img);
        return;
    }
    cairo_surface_flush(img);
    unsigned char *data = cairo_image_surface_get_data(img);
    int stride = cairo_image_surface_get_stride(img);
    for (int y = 0; y < h; y++)
        memcpy(data + (size_t)y * stride, rgb + (size_t)y * w, (size_t)w * 4);
    cairo_surface_mark_dirty(img);
    cairo_t *cr = p->cr;
    cairo_save(cr);
    cairo_rectangle(cr, a->x, a->y, a->w, a->h);
    cairo_clip(cr);
    cairo_translate(cr, a->x, a->y);
    cairo_scale(cr, a->w / w, a->h / h);
    cairo_set_source_surface(cr, img, 0, 0);
    /* enlarged pixels stay sharp squares; shrunk ones are averaged unless exact */
    cairo_matrix_t to_device;
    cairo_get_matrix(cr, &to_device);
    int shrunk = to_device.xx < 1 || to_device.yy < 1;
    cairo_pattern_set_filter(cairo_get_source(cr), exact || !shrunk ? CAIRO_FILTER_NEAREST : CAIRO_FILTER_GOOD);
    cairo_paint(cr);
    cairo_restore(cr);
    cairo_surface_destroy(img);
}

void plot_box(plot *p, double x, double y, double w, double h, plot_rgb c)
{
    cairo_t *cr = p->cr;
    set_color(cr, c);
    cairo_rectangle(cr, x, y, w, h);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
    cairo_set_line_width(cr, 0.6);
    cairo_stroke(cr);
}

void plot_marker(plot *p, const plot_panel *a, double x, double y, double size)
{
    double fx, fy;
    plot_to_figure(a, x, y, &fx, &fy);
    cairo_t *cr = p->cr;
    cairo_save(cr);
    cairo_move_to(cr, fx, fy - size * 0.6);
    cairo_line_to(cr, fx + size * 0.55, fy + size * 0.4);
    cairo_line_to(cr, fx - size * 0.55, fy + size * 0.4);
    cairo_close_path(cr);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_line_width(cr, 1.2);
    cairo_stroke(cr);
    cairo_restore(cr);
}

void plot_note(plot *p, const plot_panel *a, const char *text)
{
    const double fs = 13, w = text_width(p, fs, text) + 24, h = 30;
    double cx = a->x + a->w / 2, cy = a->y + a->h / 2;
    double bw = w < a->w ? w : a->w;
    plot_box(p, cx - bw / 2, cy - h / 2, bw, h, (plot_rgb){1, 1, 1});
    plot_text(p, cx, cy + fs * 0.35, fs, 0, 0, text);
}

void plot_colorbar(plot *p, double x, double y, double w, double h, plot_cmap cm, double lo, double hi,
                   const char *label)
{
    enum { steps = 256 };
    uint32_t px[steps];
    for (int i = 0; i < steps; i++)
        px[i] = plot_pack(plot_cmap_color(cm, 1.0 - (i + 0.5) / steps));
    plot_panel bar = {x, y, w, h, 0, 1, lo, hi};
    plot_raster(p, &bar, px, 1, steps, 0);
    cairo_t *cr = p->cr;
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_line_width(cr, 0.8);
    cairo_rectangle(cr, x, y, w, h);
    cairo_stroke(cr);
    const double fs = 11;
    double widest = 0;
    if (hi > lo && isfinite(hi - lo)) {
        double step = tick_step(hi - lo, h > 250 ? 6 : 4);
        for (double v = ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) {
            char s[32];
            tick_label(v, step, s, sizeof s);
            double ty = px_y(&bar, v);
            cairo_set_source_rgb(cr, 0, 0, 0);
            cairo_move_to(cr, x + w, ty);
            cairo_line_to(cr, x + w + 4, ty);
            cairo_stroke(cr);
            plot_text(p, x + w + 6, ty + fs * 0.35, fs, -1, 0, s);
            widest = fmax(widest, text_width(p, fs, s));
        }
    }
    if (label && *label) {
        cairo_save(cr);
        cairo_translate(cr, x + w + 6 + widest + 16, y + h / 2);
        cairo_rotate(cr, -M_PI / 2);
        plot_text(p, 0, 0, fs + 1, 0, 0, label);
        cairo_restore(cr);
    }
}

enum { legend_font = 12, legend_row = 18, legend_pad = 6, legend_mark = 26 };

double plot_legend_width(plot *p, const plot_legend_item *items, int n)
{
    double widest = 0;
    for (int i = 0; i < n; i++)
        widest = fmax(widest, text_width(p, legend_font, items[i].label));
    return legend_pad * 4 + legend_mark + widest;
}

double plot_legend(plot *p, double x, double y, const plot_legend_item *items, int n)
{
    const double fs = legend_font, row = legend_row, pad = legend_pad, mark = legend_mark;
    double W = plot_legend_width(p, items, n), H = pad * 2 + row * n;
    cairo_t *cr = p->cr;
    cairo_set_source_rgba(cr, 1, 1, 1, 0.9);
    cairo_rectangle(cr, x, y, W, H);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.5, 0.5, 0.5);
    cairo_set_line_width(cr, 0.8);
    cairo_stroke(cr);
    for (int i = 0; i < n; i++) {
        double cy = y + pad + row * i + row / 2;
        if (items[i].mark == PLOT_MARK_BOX) {
            plot_box(p, x + pad, cy - 6, mark, 12, items[i].color);
        } else {
            cairo_save(cr);
            set_color(cr, items[i].color);
            cairo_set_line_width(cr, 2);
            if (items[i].mark == PLOT_MARK_DASHED) {
                double dash[2] = {6, 4};
                cairo_set_dash(cr, dash, 2, 0);
            }
            cairo_move_to(cr, x + pad, cy);
            cairo_line_to(cr, x + pad + mark, cy);
            cairo_stroke(cr);
            cairo_restore(cr);
        }
        plot_text(p, x + 2 * pad + mark, cy + fs * 0.35, fs, -1, 0, items[i].label);
    }
    return H;
}

#endif
