/* libFuzzer target: MatrixMarket files (dk_csr_read_mtx). Any input is
 * read or refused with a sentence; a result is a valid CSR matrix. */
#include <stdlib.h>

#include <dakit/dakit.h>

#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    if (fuzz_input_file(data, size, path))
        return 0;
    dk_csr H;
    if (dk_csr_read_mtx(path, &H) == DK_OK) {
        if (H.indptr[0] != 0 || H.rows > DK_ENKF_MAX_OBS)
            abort();
        for (size_t r = 0; r < H.rows; r++)
            if (H.indptr[r + 1] < H.indptr[r])
                abort();
        for (int64_t t = 0; t < H.indptr[H.rows]; t++)
            if (H.indices[t] < 0 || (size_t)H.indices[t] >= H.cols)
                abort();
        dk_csr_free(&H);
    }
    unlink(path);
    return 0;
}
