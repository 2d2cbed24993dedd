/* A small RGB canvas written as PNG through libpng, for the pictures the
 * commands draw (the demo, the radar cluster map, the Lorenz-96 RMSE, the
 * gbees marginals). */
#ifndef DAKIT_TOOLS_CLI_IMAGE_H
#define DAKIT_TOOLS_CLI_IMAGE_H

#include <stddef.h>

typedef struct image {
    int width, height;
    unsigned char *rgb; /* width * height * 3 */
} image;

int image_create(image *img, int width, int height, unsigned char gray);
void image_free(image *img);
void image_set(image *img, int x, int y, const unsigned char rgb[3]);
/* Blue-white-red for v in [-1, 1] (clamped). */
void image_diverging(double v, unsigned char rgb[3]);
/* Draws the w x h field (row 0 at the top) scaled by 1/scale into the box at (x0, y0). */
void image_field(image *img, int x0, int y0, const float *field, int w, int h, double scale);
void image_line(image *img, int x0, int y0, int x1, int y1, const unsigned char rgb[3]);
/* 0 on success; otherwise writes a sentence into err. */
int image_write_png(const image *img, const char *path, char *err, size_t err_len);

#endif
