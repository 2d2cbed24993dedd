/* A GBEES snapshot file (pdf_<period>_<k>.npy, written by dakit gbees): its
 * reader, which trusts nothing in the file, and the 2-D marginals that
 * dakit gbees-plot draws of it. dakit gbees-mc reads snapshots here too. */
#ifndef DAKIT_TOOLS_GBEES_SNAPSHOT_H
#define DAKIT_TOOLS_GBEES_SNAPSHOT_H

#include <stddef.h>

#include <dakit/dakit.h>

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

/* The 2-D marginal of axes i and j (i != j) on at most bins x bins bins:
 * cells lie on a lattice whose step each axis's smallest gap gives; where
 * an axis spans more lattice points than bins, each bin sums several. p
 * holds ny rows of nx bins (row 0 at the lowest j), each the probability
 * summed over the cells that fall in it (negative probabilities count as
 * 0); left..right and bottom..top are the data values at the edges (finite,
 * right > left, top > bottom), top_p the largest bin. */
typedef struct gbees_marginal {
    int nx, ny;
    double *p;
    double left, right, bottom, top;
    double top_p;
} gbees_marginal;
/* 0, or -1 with a sentence in err (m is then empty). bins 1 .. 4096. */
int gbees_snap_marginal(const gbees_snap *s, int i, int j, int bins, gbees_marginal *m, char *err, size_t len);
void gbees_marginal_free(gbees_marginal *m);

#endif
