#define _GNU_SOURCE
#include "cli/npy.h"

#include "cli/output.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#define FAIL(st, ...) (snprintf(err, err_len, __VA_ARGS__), (st))

/* The value text of 'key' in the header dict, or NULL. */
static const char *dict_value(const char *header, const char *key)
{
    char quoted[32];
    snprintf(quoted, sizeof quoted, "'%s'", key);
    const char *p = strstr(header, quoted);
    if (!p)
        return NULL;
    p += strlen(quoted);
    while (*p == ' ')
        p++;
    if (*p != ':')
        return NULL;
    p++;
    while (*p == ' ')
        p++;
    return p;
}

static dk_status parse_header(const char *h, npy_array *a, char *err, size_t err_len)
{
    const char *descr = dict_value(h, "descr");
    if (!descr)
        return FAIL(DK_ERR_FORMAT, "the header has no 'descr'");
    if (strncmp(descr, "'<f4'", 5) == 0)
        a->dtype = DK_F32;
    else if (strncmp(descr, "'<f8'", 5) == 0)
        a->dtype = DK_F64;
    else {
        int n = (int)strcspn(descr, ",}");
        return FAIL(DK_ERR_FORMAT, "dtype %.*s is not supported: use little-endian float32 ('<f4') or float64 ('<f8')",
                    n, descr);
    }
    const char *fo = dict_value(h, "fortran_order");
    if (!fo)
        return FAIL(DK_ERR_FORMAT, "the header has no 'fortran_order'");
    if (strncmp(fo, "True", 4) == 0)
        return FAIL(DK_ERR_FORMAT, "the array is in Fortran order; write it in C order (numpy.ascontiguousarray)");
    if (strncmp(fo, "False", 5) != 0)
        return FAIL(DK_ERR_FORMAT, "'fortran_order' is neither True nor False");
    const char *sh = dict_value(h, "shape");
    if (!sh || *sh != '(')
        return FAIL(DK_ERR_FORMAT, "the header has no 'shape' tuple");
    sh++;
    a->ndim = 0;
    a->count = 1;
    for (;;) {
        while (*sh == ' ' || *sh == ',')
            sh++;
        if (*sh == ')')
            break;
        if (*sh < '0' || *sh > '9')
            return FAIL(DK_ERR_FORMAT, "the shape is not a tuple of non-negative integers");
        if (a->ndim == NPY_MAX_DIMS)
            return FAIL(DK_ERR_FORMAT, "more than %d dimensions", NPY_MAX_DIMS);
        errno = 0;
        char *end;
        unsigned long long v = strtoull(sh, &end, 10);
        if (errno || end == sh)
            return FAIL(DK_ERR_FORMAT, "a dimension in the shape is out of range");
        if ((unsigned long long)(size_t)v != v)
            return FAIL(DK_ERR_FORMAT, "the shape's size overflows");
        a->shape[a->ndim++] = (size_t)v;
        sh = end;
        while (*sh == ' ')
            sh++;
        if (*sh != ',' && *sh != ')')
            return FAIL(DK_ERR_FORMAT, "the shape is not a tuple of non-negative integers");
    }
    size_t bytes;
    if (size_product(a->shape, a->ndim, 8, &a->count, &bytes) != 0)
        return FAIL(DK_ERR_FORMAT, "the shape's size overflows");
    return DK_OK;
}

int size_product(const size_t *dims, int n, size_t esize, size_t *count, size_t *bytes)
{
    /* the non-zero dimensions are multiplied on their own: a zero makes the
     * count 0, but no dimension may be so large that using it overflows */
    size_t all = 1, nonzero = esize ? esize : 1;
    for (int k = 0; k < n; k++) {
        if (dims[k] && nonzero > SIZE_MAX / dims[k])
            return -1;
        if (dims[k])
            nonzero *= dims[k];
        all *= dims[k];
    }
    *count = all;
    *bytes = all * esize;
    return 0;
}

int size_fits_memory(size_t bytes, double *gib)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double have = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
    if (gib)
        *gib = have / (1024.0 * 1024.0 * 1024.0);
    return have == 0 || (double)bytes <= have;
}

/* Reads and checks the header of the open file f: a's dtype, ndim, shape and
 * count (no data), *data_offset where the data starts; the file's size must
 * be the header's promise. */
static dk_status read_header(FILE *f, const char *path, npy_array *a, size_t *data_offset, char *err,
                             size_t err_len)
{
    dk_status st = DK_OK;
    unsigned char pre[12];
    char *header = NULL;
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        st = FAIL(DK_ERR_FORMAT, "%s is not a .npy file (no \\x93NUMPY magic)", path);
        goto done;
    }
    size_t hlen, prefix;
    if (pre[6] == 1) {
        hlen = pre[8] | (size_t)pre[9] << 8;
        prefix = 10;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 10, 1, 2, f) != 2) {
            st = FAIL(DK_ERR_FORMAT, "%s: truncated header", path);
            goto done;
        }
        hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
        prefix = 12;
    } else {
        st = FAIL(DK_ERR_FORMAT, "%s: .npy format version %d.%d is not supported", path, pre[6], pre[7]);
        goto done;
    }
    if (hlen > (1u << 20)) {
        st = FAIL(DK_ERR_FORMAT, "%s: header length %zu is implausible", path, hlen);
        goto done;
    }
    struct stat sb;
    int regular = fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode);
    if (regular && (size_t)sb.st_size < prefix + hlen) {
        st = FAIL(DK_ERR_FORMAT, "%s: truncated header (%zu bytes announced, the file holds %zu)", path, hlen,
                  (size_t)sb.st_size - prefix);
        goto done;
    }
    header = malloc(hlen + 1);
    if (!header || fread(header, 1, hlen, f) != hlen) {
        st = FAIL(DK_ERR_FORMAT, "%s: truncated header", path);
        goto done;
    }
    header[hlen] = '\0';
    if ((st = parse_header(header, a, err, err_len)) != DK_OK) {
        char inner[256];
        snprintf(inner, sizeof inner, "%s", err);
        (void)FAIL(st, "%s: %s", path, inner);
        goto done;
    }
    size_t esize = dk_dtype_size(a->dtype), bytes = a->count * esize;
    *data_offset = prefix + hlen;
    if (!regular) /* a pipe: its length is known only once read (npy_read) */
        goto done;
    if (fseek(f, 0, SEEK_END) != 0) {
        st = FAIL(DK_ERR_IO, "%s: cannot seek", path);
        goto done;
    }
    long total = ftell(f);
    if (total < 0 || (size_t)total != prefix + hlen + bytes) {
        st = FAIL(DK_ERR_FORMAT, "%s: the header promises %zu bytes of data but the file holds %ld",
                  path, bytes, total - (long)(prefix + hlen));
        goto done;
    }
done:
    free(header);
    return st;
}

/* The data of a .npy that is not a regular file (a pipe, `<(cat x.npy)`):
 * its size cannot be checked first, so the buffer grows only as bytes
 * arrive, and exactly `bytes` must come. */
static dk_status read_stream(FILE *f, const char *path, npy_array *a, size_t bytes, char *err, size_t err_len)
{
    size_t have = 0, cap = 0;
    unsigned char *buf = NULL;
    while (have < bytes) {
        if (have == cap) {
            size_t grow = cap ? cap : 1 << 16;
            cap = bytes - cap < grow ? bytes : cap + grow;
            unsigned char *more = realloc(buf, cap);
            if (!more) {
                free(buf);
                return FAIL(DK_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes", path, cap);
            }
            buf = more;
        }
        size_t n = fread(buf + have, 1, cap - have, f);
        if (n == 0) {
            free(buf);
            return FAIL(DK_ERR_FORMAT, "%s: the header promises %zu bytes of data but the stream ended after %zu",
                        path, bytes, have);
        }
        have += n;
    }
    if (fgetc(f) != EOF) {
        free(buf);
        return FAIL(DK_ERR_FORMAT, "%s: more data follows the %zu bytes the header promises", path, bytes);
    }
    a->data = buf ? buf : malloc(1);
    if (!a->data)
        return FAIL(DK_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    return DK_OK;
}

dk_status npy_read(const char *path, npy_array *a, char *err, size_t err_len)
{
    memset(a, 0, sizeof *a);
    FILE *f = fopen(path, "rb");
    if (!f)
        return FAIL(DK_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    size_t data_offset = 0;
    dk_status st = read_header(f, path, a, &data_offset, err, err_len);
    if (st != DK_OK)
        goto done;
    size_t bytes = a->count * dk_dtype_size(a->dtype);
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = read_stream(f, path, a, bytes, err, err_len);
        goto done;
    }
    fseek(f, (long)data_offset, SEEK_SET);
    a->data = malloc(bytes ? bytes : 1);
    if (!a->data) {
        st = FAIL(DK_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes", path, bytes);
        goto done;
    }
    if (fread(a->data, 1, bytes, f) != bytes) {
        st = FAIL(DK_ERR_IO, "%s: read failed", path);
        goto done;
    }
done:
    fclose(f);
    if (st != DK_OK)
        npy_free(a);
    return st;
}

dk_status npy_read_header(const char *path, npy_array *a, size_t *data_offset, char *err, size_t err_len)
{
    memset(a, 0, sizeof *a);
    FILE *f = fopen(path, "rb");
    if (!f)
        return FAIL(DK_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    dk_status st = read_header(f, path, a, data_offset, err, err_len);
    fclose(f);
    return st;
}

/* Calls fn for each row of the box along the last axis: the row's byte
 * offset in the file's data and in the box. */
static dk_status each_row(const npy_array *a, size_t data_offset, const size_t *offset, const size_t *extent,
                          dk_status (*fn)(void *ctx, off_t file_pos, size_t box_pos, size_t bytes), void *ctx)
{
    int d = a->ndim;
    size_t esize = dk_dtype_size(a->dtype);
    for (int k = 0; k < d; k++)
        if (offset[k] > a->shape[k] || extent[k] > a->shape[k] - offset[k])
            return DK_ERR_INVALID_ARGUMENT;
    size_t rows = 1;
    for (int k = 0; k + 1 < d; k++)
        rows *= extent[k];
    size_t row_len = d ? extent[d - 1] : 1;
    if (!row_len || !rows)
        return DK_OK;
    for (size_t r = 0; r < rows; r++) {
        /* the row's global index: r's digits in the box, plus the box's offset */
        size_t rem = r, lin = 0, stride = 1;
        size_t idx[NPY_MAX_DIMS] = {0};
        for (int k = d - 2; k >= 0; k--) {
            idx[k] = offset[k] + rem % extent[k];
            rem /= extent[k];
        }
        for (int k = d - 1; k >= 0; k--) {
            lin += (k == d - 1 ? offset[k] : idx[k]) * stride;
            stride *= a->shape[k];
        }
        dk_status st = fn(ctx, (off_t)(data_offset + lin * esize), r * row_len * esize, row_len * esize);
        if (st != DK_OK)
            return st;
    }
    return DK_OK;
}

typedef struct row_io {
    int fd;
    unsigned char *box;
    int error;
} row_io;

static dk_status row_read(void *p, off_t pos, size_t box_pos, size_t bytes)
{
    row_io *io = p;
    size_t done = 0;
    while (done < bytes) {
        ssize_t n = pread(io->fd, io->box + box_pos + done, bytes - done, pos + (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            io->error = n < 0 ? errno : EIO;
            return DK_ERR_IO;
        }
        done += (size_t)n;
    }
    return DK_OK;
}

static dk_status row_write(void *p, off_t pos, size_t box_pos, size_t bytes)
{
    row_io *io = p;
    size_t done = 0;
    while (done < bytes) {
        ssize_t n = pwrite(io->fd, io->box + box_pos + done, bytes - done, pos + (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            io->error = n < 0 ? errno : ENOSPC;
            return DK_ERR_IO;
        }
        done += (size_t)n;
    }
    return DK_OK;
}

dk_status npy_read_box(const char *path, const npy_array *hdr, size_t data_offset, const size_t *offset,
                       const size_t *extent, void *dst, char *err, size_t err_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return FAIL(DK_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    row_io io = {fd, dst, 0};
    dk_status st = each_row(hdr, data_offset, offset, extent, row_read, &io);
    close(fd);
    if (st == DK_ERR_INVALID_ARGUMENT)
        return FAIL(st, "%s: the box to read lies outside the array", path);
    if (st != DK_OK)
        return FAIL(st, "%s: read failed: %s", path, strerror(io.error ? io.error : EIO));
    return DK_OK;
}

dk_status npy_write_box(int fd, const char *path, const npy_array *hdr, size_t data_offset, const size_t *offset,
                        const size_t *extent, const void *src, char *err, size_t err_len)
{
    row_io io = {fd, (unsigned char *)src, 0};
    dk_status st = each_row(hdr, data_offset, offset, extent, row_write, &io);
    if (st == DK_ERR_INVALID_ARGUMENT)
        return FAIL(st, "writing %s: the box lies outside the array", path);
    if (st != DK_OK)
        return FAIL(st, "writing %s failed: %s", path, strerror(io.error ? io.error : EIO));
    return DK_OK;
}

/* The header's bytes (magic, version 1.0, dict padded so the data starts on
 * a 64-byte boundary); its length, or 0 when buf is too small. */
size_t npy_format_header(const char *descr, int ndim, const size_t *shape, unsigned char *buf, size_t len)
{
    char dict[512];
    size_t used = (size_t)snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < ndim; i++)
        used += (size_t)snprintf(dict + used, sizeof dict - used, "%zu,%s", shape[i], i + 1 < ndim ? " " : "");
    used += (size_t)snprintf(dict + used, sizeof dict - used, "), }");
    size_t total = 10 + used + 1;
    size_t pad = (64 - total % 64) % 64;
    size_t hlen = used + pad + 1;
    if (10 + hlen > len)
        return 0;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                             (unsigned char)(hlen >> 8)};
    memcpy(buf, pre, 10);
    memcpy(buf + 10, dict, used);
    memset(buf + 10 + used, ' ', pad);
    buf[10 + hlen - 1] = '\n';
    return 10 + hlen;
}

dk_status npy_write_typed(const char *path, const char *descr, size_t esize, int ndim, const size_t *shape,
                          const void *data, char *err, size_t err_len)
{
    if (ndim < 0 || ndim > NPY_MAX_DIMS)
        return FAIL(DK_ERR_INVALID_ARGUMENT, "writing %s: %d dimensions", path, ndim);
    char dict[512];
    size_t used = (size_t)snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    size_t count = 1;
    for (int i = 0; i < ndim; i++) {
        used += (size_t)snprintf(dict + used, sizeof dict - used, "%zu,%s", shape[i], i + 1 < ndim ? " " : "");
        count *= shape[i];
    }
    used += (size_t)snprintf(dict + used, sizeof dict - used, "), }");
    /* pad with spaces so the data starts on a 64-byte boundary, newline last */
    size_t total = 10 + used + 1;
    size_t pad = (64 - total % 64) % 64;
    size_t hlen = used + pad + 1;
    output o;
    if (output_open(&o, path, err, err_len) != 0)
        return DK_ERR_IO;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                             (unsigned char)(hlen >> 8)};
    int ok = fwrite(pre, 1, 10, o.f) == 10 && fwrite(dict, 1, used, o.f) == used;
    for (size_t i = 0; ok && i < pad; i++)
        ok = fputc(' ', o.f) != EOF;
    ok = ok && fputc('\n', o.f) != EOF;
    size_t bytes = count * esize;
    ok = ok && fwrite(data, 1, bytes, o.f) == bytes;
    if (!ok) {
        snprintf(err, err_len, "writing %s failed: %s", path, strerror(o.error ? o.error : EIO));
        output_abort(&o);
        return DK_ERR_IO;
    }
    return output_commit(&o, err, err_len) == 0 ? DK_OK : DK_ERR_IO;
}

dk_status npy_write(const char *path, const npy_array *a, char *err, size_t err_len)
{
    return npy_write_typed(path, a->dtype == DK_F64 ? "<f8" : "<f4", dk_dtype_size(a->dtype), a->ndim, a->shape,
                           a->data, err, err_len);
}

void npy_free(npy_array *a)
{
    free(a->data);
    a->data = NULL;
}
