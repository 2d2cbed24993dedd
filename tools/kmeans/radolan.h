/* DWD RADOLAN composites (RX, EX, RW, ...): gzip or plain, header tokens
 * found by name. */
#ifndef DAKIT_TOOLS_KMEANS_RADOLAN_H
#define DAKIT_TOOLS_KMEANS_RADOLAN_H

#include <stddef.h>
#include <stdint.h>

#include <dakit/dakit.h>

typedef struct radolan {
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
} radolan;

/* Reads path; on failure returns DK_ERR_IO/DK_ERR_FORMAT with a sentence in err.
 * The header is read and checked first (grid at most 10000 x 10000, BY
 * against the grid); then exactly the data it announces is read or
 * inflated, the buffer growing only as bytes arrive, and a file with more
 * data than that is refused without inflating the rest. */
dk_status radolan_read(const char *path, radolan *out, char *err, size_t len);
/* The same on bytes already in memory (decompressed). */
dk_status radolan_parse(const unsigned char *bytes, size_t size, radolan *out, char *err, size_t len);
void radolan_free(radolan *r);

#endif
