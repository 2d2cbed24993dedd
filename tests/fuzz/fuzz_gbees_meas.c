/* libFuzzer target: GBEES measurement files (dk_gbees_meas_read). Any
 * input is read or refused with a sentence; a result has a dimension the
 * struct holds and finite numbers. */
#include <math.h>
#include <stdlib.h>

#include <dakit/dakit.h>

#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    if (fuzz_input_file(data, size, path))
        return 0;
    dk_gbees_meas m;
    if (dk_gbees_meas_read(path, &m) == DK_OK) {
        if (m.dim < 1 || m.dim > DK_GBEES_MAX_DIM || !isfinite(m.period))
            abort();
        for (int i = 0; i < m.dim; i++)
            if (!isfinite(m.mean[i]))
                abort();
    }
    unlink(path);
    return 0;
}
