/* NumPy .npy files: little-endian float32/float64, C order, versions 1-3.
 * Anything else is refused with a sentence; nothing is trusted from the
 * header without checking it against the file's size. */
#ifndef DAKIT_TOOLS_CLI_NPY_H
#define DAKIT_TOOLS_CLI_NPY_H

#include <stddef.h>

#include <dakit/dakit.h>

#define NPY_MAX_DIMS 8

typedef struct npy_array {
    dk_dtype dtype;
    int ndim;
    size_t shape[NPY_MAX_DIMS];
    size_t count;
    void *data; /* malloc'ed */
} npy_array;

/* On failure returns DK_ERR_IO or DK_ERR_FORMAT and writes a sentence into err. */
dk_status npy_read(const char *path, npy_array *out, char *err, size_t err_len);
/* Written whole or not at all (cli/output.h). */
dk_status npy_write(const char *path, const npy_array *arr, char *err, size_t err_len);
/* Any little-endian dtype: descr as NumPy spells it ("<i4"), esize its bytes. */
dk_status npy_write_typed(const char *path, const char *descr, size_t esize, int ndim, const size_t *shape,
                          const void *data, char *err, size_t err_len);
void npy_free(npy_array *arr);

#endif
