/* The pictures the commands draw (the demo, the radar cluster map, the
 * Lorenz-96 RMSE, the gbees marginals), through cairo: a figure written as
 * PNG, SVG or PDF by its file's extension, whole or not at all (output.h),
 * with a title, panels with ticks and axis names, rasters with a colour map
 * and a colour bar, lines with a legend, and a qualitative palette for
 * categories. Sizes are in points; a PNG has `scale` pixels per point. Built
 * without cairo, plot_check_path and plot_open fail with a sentence that
 * says so and every other call does nothing. */
#ifndef DAKIT_TOOLS_CLI_PLOT_H
#define DAKIT_TOOLS_CLI_PLOT_H

#include <stddef.h>
#include <stdint.h>

typedef struct plot plot;

typedef struct plot_rgb {
    double r, g, b; /* 0 .. 1 */
} plot_rgb;

typedef enum plot_cmap {
    PLOT_CMAP_DIVERGING,   /* blue, white at the middle, red */
    PLOT_CMAP_SEQUENTIAL,  /* white to dark blue (densities) */
    PLOT_CMAP_REFLECTIVITY, /* radar dBZ: light blue, green, yellow, red, magenta */
    PLOT_CMAP_INTENSITY     /* ordered categories, weak to strong: pale yellow, orange, red, dark purple
                             * (its lightness falls all the way, and none of it is grey) */
} plot_cmap;

/* A panel: where its data area lies on the figure (points from the top
 * left) and the data values at its edges. */
typedef struct plot_panel {
    double x, y, w, h;
    double left, right, bottom, top;
} plot_panel;

typedef enum plot_mark { PLOT_MARK_LINE, PLOT_MARK_DASHED, PLOT_MARK_BOX } plot_mark;
typedef struct plot_legend_item {
    const char *label;
    plot_rgb color;
    plot_mark mark;
} plot_legend_item;

/* 1 when dakit was built with cairo. */
int plot_built(void);
/* Whether path can be a picture: pictures were built and its extension is
 * .png, .svg or .pdf. 0, or -1 with a sentence in err. */
int plot_check_path(const char *path, char *err, size_t len);
/* A white figure of width x height points, a PNG of scale (0.25 .. 8)
 * pixels per point; NULL with a sentence in err. */
plot *plot_open(const char *path, double width, double height, double scale, char *err, size_t len);
/* Writes the file and frees the figure: 0, or -1 with a sentence in err
 * (nothing is left under path). */
int plot_close(plot *p, char *err, size_t len);
/* Frees the figure and writes nothing (a failure while drawing). */
void plot_discard(plot *p);

/* Text: align -1 left, 0 centred, 1 right of x; y is the baseline; bold 0/1. */
void plot_text(plot *p, double x, double y, double size, int align, int bold, const char *text);
/* The figure's title (bold) and an optional second line, centred at the top. */
void plot_title(plot *p, const char *title, const char *subtitle);
/* Frame, ticks with their values on the left and bottom edges, the axis
 * names below and left, and the panel's title (if any) above it. */
void plot_axes(plot *p, const plot_panel *a, const char *title, const char *xname, const char *yname);
/* A polyline in data units, clipped to the panel; NaN values break it. */
void plot_line(plot *p, const plot_panel *a, const double *x, const double *y, size_t n, plot_rgb c,
               double width, int dashed);
/* A shaded band of data x from x0 to x1 over the panel's height. */
void plot_span(plot *p, const plot_panel *a, double x0, double x1, plot_rgb c);
/* Pixels (0xRRGGBB, row 0 at the top) stretched over the panel's data
 * area. exact: every drawn pixel takes one raster pixel's colour
 * (categories); otherwise a shrunk raster is averaged (fields). */
void plot_raster(plot *p, const plot_panel *a, const uint32_t *rgb, int w, int h, int exact);
/* A vertical colour bar in the box x, y, w, h with ticks on its right and
 * label (the quantity and its unit) beside them. */
void plot_colorbar(plot *p, double x, double y, double w, double h, plot_cmap cm, double lo, double hi,
                   const char *label);
/* Where the data point (x, y) of panel a lies on the figure, in points. */
void plot_to_figure(const plot_panel *a, double x, double y, double *fx, double *fy);
/* A site marker at data (x, y): a white triangle with a black outline,
 * size points high. */
void plot_marker(plot *p, const plot_panel *a, double x, double y, double size);
/* One line of text in a white box at the middle of the panel (a message
 * on a map that has nothing else to show). */
void plot_note(plot *p, const plot_panel *a, const char *text);
/* A legend box whose top-left corner is x, y; returns its height. */
double plot_legend(plot *p, double x, double y, const plot_legend_item *items, int n);
/* The width of that box, for placing it (at a panel's right edge, say). */
double plot_legend_width(plot *p, const plot_legend_item *items, int n);
/* A filled rectangle with a thin dark outline (legend swatches). */
void plot_box(plot *p, double x, double y, double w, double h, plot_rgb c);

/* Colour of t in [0, 1] (clamped; NaN gives the middle) on a map. */
plot_rgb plot_cmap_color(plot_cmap cm, double t);
/* Category c's colour: Okabe and Ito's eight colour-blind-safe colours for
 * c < 8, then further hues spread around the colour wheel (distinct, but
 * not all safe for every colour vision). Never grey: grey means no data. */
plot_rgb plot_category_color(int c);
uint32_t plot_pack(plot_rgb c);

#endif
