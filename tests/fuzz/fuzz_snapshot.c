/* libFuzzer target: GBEES snapshot files as dakit gbees-plot reads them
 * and bins their marginals (gbees_snap_read and gbees_snap_marginal,
 * tools/gbees/snapshot.c; gbees-mc reads them the same way). Any input is
 * read or refused with a sentence; every 2-D marginal of a snapshot of two
 * or more dimensions comes out with the promised number of bins, finite
 * increasing edges and no negative bin, whatever its coordinates. */
#include <math.h>
#include <stdlib.h>

#include "gbees/snapshot.h"

#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], err[1024];
    if (fuzz_input_file(data, size, path))
        return 0;
    gbees_snap s;
    err[0] = '\0';
    if (gbees_snap_read(path, &s, err, sizeof err) == DK_OK) {
        if (s.dim < 1 || s.dim > DK_GBEES_MAX_DIM || s.cells < 1)
            abort();
        /* a bin count from the input, 1 to 64 */
        int bins = 1 + (int)(size % 64);
        for (int i = 0; i < s.dim; i++)
            for (int j = 0; j < s.dim; j++) {
                gbees_marginal m;
                int rc = gbees_snap_marginal(&s, i, j, bins, &m, err, sizeof err);
                if (i == j) {
                    if (rc == 0)
                        abort();
                    continue;
                }
                if (rc != 0 || m.nx < 1 || m.nx > bins || m.ny < 1 || m.ny > bins || !isfinite(m.left) ||
                    !isfinite(m.right) || !(m.right > m.left) || !isfinite(m.bottom) || !isfinite(m.top) ||
                    !(m.top > m.bottom))
                    abort();
                for (size_t k = 0; k < (size_t)m.nx * (size_t)m.ny; k++)
                    if (!(m.p[k] >= 0) || m.p[k] > m.top_p)
                        abort();
                gbees_marginal_free(&m);
            }
        gbees_snap_free(&s);
    } else if (!err[0]) {
        abort();
    }
    unlink(path);
    return 0;
}
