/* libFuzzer target: .npy files (npy_read, tools/cli/npy.c), which every
 * command reads its arrays with. Any input is read or refused with a
 * sentence; a result's shape multiplies out to its count, its data is all
 * there, and it writes back (to /dev/null) with the same header rules. */
#include <stdlib.h>
#include <string.h>

#include "cli/npy.h"

#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], err[512];
    if (fuzz_input_file(data, size, path))
        return 0;
    npy_array a;
    dk_status st = npy_read(path, &a, err, sizeof err);
    if (st == DK_OK) {
        size_t count = 1;
        if (a.ndim < 0 || a.ndim > NPY_MAX_DIMS || (a.dtype != DK_F32 && a.dtype != DK_F64) || !a.data)
            abort();
        for (int i = 0; i < a.ndim; i++)
            count *= a.shape[i];
        if (count != a.count || a.count * dk_dtype_size(a.dtype) > size)
            abort();
        /* every byte of the data was read: touch the last one */
        volatile unsigned char last = a.count ? ((unsigned char *)a.data)[a.count * dk_dtype_size(a.dtype) - 1] : 0;
        (void)last;
        if (npy_write("/dev/null", &a, err, sizeof err) != DK_OK)
            abort();
        npy_free(&a);
    } else if (!err[0] || a.data) {
        abort(); /* a refusal says why and holds nothing */
    }
    unlink(path);
    return 0;
}
