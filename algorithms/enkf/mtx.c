/* MatrixMarket coordinate files into CSR, checked line by line: every
 * refusal names the file, the line and what was wrong. Nothing is
 * allocated from the size line before it is checked against what the file
 * can hold: an entry takes at least four bytes ("1 1\n"), and H has at most
 * DK_ENKF_MAX_OBS rows. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "enkf_internal.h"

DK_API void dk_csr_free(dk_csr *H)
{
    if (!H)
        return;
    free((void *)H->indptr);
    free((void *)H->indices);
    free((void *)H->values);
    memset(H, 0, sizeof *H);
}

typedef struct triple {
    int64_t row, col;
    double value;
} triple;

static int by_row(const void *a, const void *b)
{
    const triple *x = a, *y = b;
    if (x->row != y->row)
        return (x->row > y->row) - (x->row < y->row);
    return (x->col > y->col) - (x->col < y->col);
}

#define BAD(...) (fclose(f), free(t), dk_fail(NULL, DK_ERR_FORMAT, __VA_ARGS__))

/* The next line into buf; 0 at the end of the file, -1 when the line does
 * not fit (no MatrixMarket line needs that many characters). */
static int next_line(char *buf, int size, FILE *f)
{
    if (!fgets(buf, size, f))
        return 0;
    size_t n = strlen(buf);
    if (n == (size_t)size - 1 && buf[n - 1] != '\n' && !feof(f))
        return -1;
    return 1;
}

DK_API dk_status dk_csr_read_mtx(const char *path, dk_csr *H)
{
    if (!path || !H)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "dk_csr_read_mtx: path and H must not be NULL");
    memset(H, 0, sizeof *H);
    FILE *f = fopen(path, "r");
    if (!f)
        return dk_fail(NULL, DK_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
    triple *t = NULL;
    char line[1024];
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode))
        return BAD("%s: not a regular file", path);
    int got_line = next_line(line, sizeof line, f);
    if (got_line < 0)
        return BAD("%s: line 1 is longer than %zu characters; it is not a MatrixMarket header", path,
                   sizeof line - 2);
    if (!got_line)
        return BAD("%s: empty file; a MatrixMarket file starts with '%%%%MatrixMarket'", path);
    char banner[64], object[64], format[64], field[64], symmetry[64];
    if (sscanf(line, "%63s %63s %63s %63s %63s", banner, object, format, field, symmetry) != 5 ||
        strcasecmp(banner, "%%MatrixMarket") != 0)
        return BAD("%s: line 1 is not a MatrixMarket header ('%%%%MatrixMarket matrix coordinate real general')", path);
    if (strcasecmp(object, "matrix") || strcasecmp(format, "coordinate"))
        return BAD("%s: '%s %s' is not supported; H must be a 'matrix coordinate' (sparse) file", path, object, format);
    int pattern = !strcasecmp(field, "pattern");
    if (!pattern && strcasecmp(field, "real") && strcasecmp(field, "integer") && strcasecmp(field, "double"))
        return BAD("%s: field '%s' is not supported (real, integer or pattern)", path, field);
    int symmetric = !strcasecmp(symmetry, "symmetric");
    if (!symmetric && strcasecmp(symmetry, "general"))
        return BAD("%s: symmetry '%s' is not supported (general or symmetric)", path, symmetry);
    long lineno = 1;
    long long rows = 0, cols = 0, entries = 0;
    for (;;) {
        got_line = next_line(line, sizeof line, f);
        lineno++;
        if (got_line < 0)
            return BAD("%s: line %ld is longer than %zu characters", path, lineno, sizeof line - 2);
        if (!got_line)
            return BAD("%s: the size line (rows columns entries) is missing", path);
        if (line[0] == '%')
            continue;
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (!*p)
            continue;
        char extra[8];
        if (sscanf(line, "%lld %lld %lld %7s", &rows, &cols, &entries, extra) != 3)
            return BAD("%s: line %ld should hold three integers 'rows columns entries'", path, lineno);
        break;
    }
    if (rows < 1 || cols < 1 || entries < 0 || entries > ((long long)1 << 31) - 1)
        return BAD("%s: line %ld: sizes %lld x %lld with %lld entries are out of range", path, lineno, rows, cols,
                   entries);
    if (rows > DK_ENKF_MAX_OBS)
        return BAD("%s: line %ld: %lld rows; H has at most %d rows (observations)", path, lineno, rows,
                   DK_ENKF_MAX_OBS);
    if (cols > ((long long)1 << 31) - 1)
        return BAD("%s: line %ld: %lld columns; the state has at most 2^31-1 points", path, lineno, cols);
    if (symmetric && rows != cols)
        return BAD("%s: line %ld: a symmetric matrix must be square, but this one is %lld x %lld", path, lineno,
                   rows, cols);
    long long left = (long long)st.st_size - (long long)ftell(f);
    if (entries > left / 4)
        return BAD("%s: the file ends after %lld more bytes, too few for the %lld entries line %ld announces (at "
                   "most %lld fit)", path, left, entries, lineno, left / 4);
    size_t cap = (size_t)entries * (symmetric ? 2 : 1);
    t = malloc((cap ? cap : 1) * sizeof *t);
    if (!t) {
        fclose(f);
        return dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld entries", path, entries);
    }
    size_t n = 0;
    long long read = 0;
    while (read < entries) {
        got_line = next_line(line, sizeof line, f);
        lineno++;
        if (got_line < 0)
            return BAD("%s: line %ld is longer than %zu characters", path, lineno, sizeof line - 2);
        if (!got_line)
            return BAD("%s: the file ends after %lld of its %lld entries", path, read, entries);
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (!*p || *p == '%')
            continue;
        long long i, j;
        double v = 1.0;
        char extra[8];
        int got = pattern ? sscanf(line, "%lld %lld %7s", &i, &j, extra) : sscanf(line, "%lld %lld %lf %7s", &i, &j, &v, extra);
        if (got != (pattern ? 2 : 3))
            return BAD("%s: line %ld should hold '%s'", path, lineno, pattern ? "row column" : "row column value");
        if (i < 1 || i > rows || j < 1 || j > cols)
            return BAD("%s: line %ld: entry (%lld, %lld) is outside the %lld x %lld matrix (indices are 1-based)",
                       path, lineno, i, j, rows, cols);
        if (!isfinite(v))
            return BAD("%s: line %ld: the value is not finite", path, lineno);
        t[n++] = (triple){i - 1, j - 1, v};
        if (symmetric && i != j)
            t[n++] = (triple){j - 1, i - 1, v};
        read++;
    }
    while ((got_line = next_line(line, sizeof line, f)) != 0) {
        lineno++;
        if (got_line < 0)
            return BAD("%s: line %ld is longer than %zu characters", path, lineno, sizeof line - 2);
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (*p && *p != '%')
            return BAD("%s: line %ld: more entries than the %lld the size line announced", path, lineno, entries);
    }
    fclose(f);
    qsort(t, n, sizeof *t, by_row);
    int64_t *indptr = calloc((size_t)rows + 1, sizeof *indptr);
    int64_t *indices = malloc((n ? n : 1) * sizeof *indices);
    double *values = malloc((n ? n : 1) * sizeof *values);
    if (!indptr || !indices || !values) {
        free(t), free(indptr), free(indices), free(values);
        return dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    for (size_t k = 0; k < n; k++) {
        indptr[t[k].row + 1]++;
        indices[k] = t[k].col;
        values[k] = t[k].value;
    }
    for (long long r = 0; r < rows; r++)
        indptr[r + 1] += indptr[r];
    free(t);
    H->rows = (size_t)rows;
    H->cols = (size_t)cols;
    H->indptr = indptr;
    H->indices = indices;
    H->values = values;
    return DK_OK;
}
