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

/* Sizes read from a file (npy, netCDF, ODIM_H5), multiplied with overflow
 * checks: *count = dims[0] * ... * dims[n-1] and *bytes = *count * esize.
 * 0, or -1 when the product of the non-zero sizes times esize does not fit
 * in size_t (so a zero dimension does not hide an absurd one). */
int size_product(const size_t *dims, int n, size_t esize, size_t *count, size_t *bytes);
/* 1 when bytes fit in this machine's physical memory (its size in GiB in
 * *gib when gib is not NULL): a file may declare more values than it stores
 * (netCDF-4 fill values, compressed chunks), so this is the ceiling. */
int size_fits_memory(size_t bytes, double *gib);

/* Sub-boxes, for processes that each read or write their own part (dakit
 * gauss under mpirun). npy_read_header: the checks of npy_read without the
 * data (arr->data NULL), *data_offset where the data starts. A box is, along
 * each axis k, the indices [offset[k], offset[k] + extent[k]), in C order. */
dk_status npy_read_header(const char *path, npy_array *arr, size_t *data_offset, char *err, size_t err_len);
/* Reads the box of the array (hdr from npy_read_header) into dst, row by row
 * of the last axis (pread at each row's offset). */
dk_status npy_read_box(const char *path, const npy_array *hdr, size_t data_offset, const size_t *offset,
                       const size_t *extent, void *dst, char *err, size_t err_len);
/* Writes the box src into the open file fd that holds (or will hold) the
 * array hdr with its data at data_offset (pwrite per row); path is for the
 * sentence. */
dk_status npy_write_box(int fd, const char *path, const npy_array *hdr, size_t data_offset, const size_t *offset,
                        const size_t *extent, const void *src, char *err, size_t err_len);
/* The bytes of the header npy_write writes for this array: its length, or 0
 * when len is too small (a header fits in 512 bytes). */
size_t npy_format_header(const char *descr, int ndim, const size_t *shape, unsigned char *buf, size_t len);

#endif
