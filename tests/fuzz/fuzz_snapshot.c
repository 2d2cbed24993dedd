/* libFuzzer target: GBEES snapshot files as dakit gbees-plot reads and
 * draws them (gbees_snap_read and gbees_snap_draw, tools/gbees/
 * snapshot.c; gbees-mc reads them the same way). Any input is read or
 * refused with a sentence; a snapshot of two or more dimensions is drawn
 * into a picture of the promised size, whatever its coordinates. */
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
        /* a panel size from the input, 20 to 83 pixels */
        int panel = 20 + (int)(size % 64);
        image img;
        int rc = gbees_snap_draw(&s, panel, &img, err, sizeof err);
        if (s.dim >= 2) {
            int side = (s.dim - 1) * (panel + 4) + 4;
            if (rc != 0 || img.width != side || img.height != side)
                abort();
            image_free(&img);
        } else if (rc == 0) {
            abort();
        }
        gbees_snap_free(&s);
    } else if (!err[0]) {
        abort();
    }
    unlink(path);
    return 0;
}
