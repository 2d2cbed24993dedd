/* libFuzzer target: DWD RADOLAN composites (dk_radolan_read, algorithms/
 * kmeans/radolan.c), gzip or plain: zlib tells them apart, so one input may be
 * either. Any input is read or refused with a sentence; a result's grid is
 * within the reader's limit and its pixels agree with their flags. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/radolan.h>

#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    if (fuzz_input_file(data, size, path))
        return 0;
    dk_radolan r;
    dk_status st = dk_radolan_read(path, &r);
    const char *err = dk_last_error(NULL);
    if (st == DK_OK) {
        size_t n = r.rows * r.cols, with = 0;
        if (!r.rows || !r.cols || r.rows > 10000 || r.cols > 10000 || (r.bytes_per_pixel != 1 && r.bytes_per_pixel != 2))
            abort();
        for (size_t i = 0; i < n; i++) {
            if (r.has_data[i] != !isnan(r.value[i]) || (r.has_data[i] && !isfinite(r.value[i])))
                abort();
            with += r.has_data[i];
        }
        if (with != r.data_pixels || r.data_pixels + r.clutter_pixels > n)
            abort();
        dk_radolan_free(&r);
    } else if (!err[0] || !strcmp(err, "no error") || r.value || r.has_data) {
        abort();
    }
    unlink(path);
    return 0;
}
