/* dakit RADOLAN: DWD radar composites (RX, EX, WX one byte per pixel; RW,
 * RY, RH, SF, ... two bytes), gzip or plain, header tokens found by name.
 *
 * Every call returns a dk_status; on failure dk_last_error(NULL) gives the
 * sentence (naming the file). Nothing prints. */
#ifndef DAKIT_RADOLAN_H
#define DAKIT_RADOLAN_H

#include <stddef.h>
#include <stdint.h>

#include <dakit/dakit.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dk_radolan {
    char product[3];      /* "RX" */
    char time[24];        /* "2014-08-10 20:50 UTC" from the header; "" when unreadable */
    size_t rows, cols;    /* GP token: rows x columns */
    int bytes_per_pixel;  /* 1 (RX-style) or 2 */
    char unit[8];         /* "dBZ" for one-byte products, "mm" for two-byte ones */
    size_t header_bytes;
    float *value;         /* rows * cols, row 0 at the south edge; NAN where there is no data */
    uint8_t *has_data;    /* 1: a measured value; 0: no data or clutter */
    size_t data_pixels, clutter_pixels;
    float max_value;      /* over pixels with data */
} dk_radolan;

/* Reads path into *out (free it with dk_radolan_free); DK_ERR_IO when the
 * file cannot be opened or read, DK_ERR_FORMAT when it is no RADOLAN
 * composite, DK_ERR_OUT_OF_MEMORY. The header is read and checked first (grid
 * at most 10000 x 10000, BY against the grid); then exactly the data it
 * announces is read or inflated, the buffer growing only as bytes arrive,
 * and a file with more data than that is refused without inflating the rest.
 * On failure *out holds no memory. */
dk_status dk_radolan_read(const char *path, dk_radolan *out);
/* The same on bytes already in memory (decompressed). */
dk_status dk_radolan_parse(const unsigned char *bytes, size_t size, dk_radolan *out);
/* Frees what a successful read allocated; *r may be zeroed or freed before. */
void dk_radolan_free(dk_radolan *r);

/* The polar stereographic coordinates (km, DWD's RADOLAN projection) of the
 * south-west corner of pixel (0, 0) of the national 900 x 900 and the extended
 * 1100 x 900 grids; DK_ERR_INVALID_ARGUMENT for any other grid. */
dk_status dk_radolan_grid_origin(size_t rows, size_t cols, double *x0, double *y0);

#ifdef __cplusplus
}
#endif

#endif
