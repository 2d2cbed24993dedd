/* A GBEES snapshot file (pdf_<period>_<k>.npy, written by dakit gbees): its
 * reader, which trusts nothing in the file, and the 2-D marginals that
 * dakit gbees-plot draws of it. dakit gbees-mc reads snapshots here too. */
#ifndef DAKIT_TOOLS_GBEES_SNAPSHOT_H
#define DAKIT_TOOLS_GBEES_SNAPSHOT_H

#include <stddef.h>

#include <dakit/dakit.h>

#include "cli/image.h"
#include "cli/npy.h"

typedef struct gbees_snap {
    npy_array array;    /* owns the data */
    size_t cells;
    int dim;            /* d: 1 .. DK_GBEES_MAX_DIM */
    const double *rows; /* cells rows of d + 1 values: the centre, then the probability */
} gbees_snap;

/* Reads path: float64 of shape (cells, d + 1), at least one cell, d from 1
 * to DK_GBEES_MAX_DIM, every value finite. On failure returns
 * DK_ERR_IO/DK_ERR_FORMAT with a sentence naming the file in err. */
dk_status gbees_snap_read(const char *path, gbees_snap *s, char *err, size_t len);
void gbees_snap_free(gbees_snap *s);

/* The picture of every pair of axes' marginal (d >= 2): a grid of panels of
 * panel x panel pixels (20 .. 2000), darker = more probable. Cells lie on a
 * lattice whose step each axis's smallest gap gives; where a marginal spans
 * more cells than pixels, each pixel sums several. 0, or -1 with a sentence
 * in err (img is then empty). */
int gbees_snap_draw(const gbees_snap *s, int panel, image *img, char *err, size_t len);

#endif
