#include "cli/image.h"

#include "cli/output.h"

#include <errno.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int image_create(image *img, int width, int height, unsigned char gray)
{
    img->width = width;
    img->height = height;
    img->rgb = malloc((size_t)width * (size_t)height * 3);
    if (!img->rgb)
        return -1;
    memset(img->rgb, gray, (size_t)width * (size_t)height * 3);
    return 0;
}

void image_free(image *img)
{
    free(img->rgb);
    img->rgb = NULL;
}

void image_set(image *img, int x, int y, const unsigned char rgb[3])
{
    if (x < 0 || y < 0 || x >= img->width || y >= img->height)
        return;
    memcpy(img->rgb + ((size_t)y * (size_t)img->width + (size_t)x) * 3, rgb, 3);
}

void image_diverging(double v, unsigned char rgb[3])
{
    if (!(v == v))
        v = 0;
    v = v < -1 ? -1 : v > 1 ? 1 : v;
    unsigned char fade = (unsigned char)(255 * (1 - (v < 0 ? -v : v)));
    rgb[0] = v < 0 ? fade : 255;
    rgb[1] = fade;
    rgb[2] = v > 0 ? fade : 255;
}

void image_field(image *img, int x0, int y0, const float *field, int w, int h, double scale)
{
    unsigned char c[3];
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            image_diverging(field[(size_t)y * (size_t)w + (size_t)x] / scale, c);
            image_set(img, x0 + x, y0 + y, c);
        }
}

void image_line(image *img, int x0, int y0, int x1, int y1, const unsigned char rgb[3])
{
    int dx = abs(x1 - x0), dy = -abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    int e = dx + dy;
    for (;;) {
        image_set(img, x0, y0, rgb);
        image_set(img, x0, y0 + 1, rgb);
        if (x0 == x1 && y0 == y1)
            break;
        int e2 = 2 * e;
        if (e2 >= dy) { e += dy; x0 += sx; }
        if (e2 <= dx) { e += dx; y0 += sy; }
    }
}

int image_write_png(const image *img, const char *path, char *err, size_t err_len)
{
    output o;
    if (output_open(&o, path, err, err_len) != 0)
        return -1;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info || setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        if (o.error)
            snprintf(err, err_len, "writing %s failed: %s", path, strerror(o.error));
        else
            snprintf(err, err_len, "libpng failed writing %s", path);
        output_abort(&o);
        return -1;
    }
    png_init_io(png, o.f);
    png_set_IHDR(png, info, (png_uint_32)img->width, (png_uint_32)img->height, 8, PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < img->height; y++)
        png_write_row(png, img->rgb + (size_t)y * (size_t)img->width * 3);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return output_commit(&o, err, err_len);
}
