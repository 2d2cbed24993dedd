/* RADOLAN binary composites. The header is ASCII up to the byte 0x03 (ETX):
 * product (2 letters), time, WMO number, month/year, then named tokens (BY
 * total bytes, VS, SW, PR precision, INT, GP rows x cols, MS length + site
 * list in <...>, and for other products VV, MF, QN, ...). Tokens are looked
 * up by name outside the site list, never by offset.
 * One-byte products (RX, EX, WX): dBZ = v / 2 - 32.5; 250 no data, 249
 * clutter. Two-byte products (RW, RY, ...): little-endian, value in the low
 * 12 bits times the PR precision; bit 0x2000 no data, 0x8000 clutter, 0x4000
 * negative. */
#include <dakit/radolan.h>

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "../../core/internal.h"

#define HEADER_MAX 8192
/* No DWD composite has a side near this; a header that claims more is not
 * believed (and would ask for gigabytes). */
#define RADOLAN_MAX_SIDE 10000

static const char *const one_byte[] = {"RX", "EX", "WX", NULL};
static const char *const two_byte[] = {"RW", "RY", "RH", "RB", "RL", "RQ", "RE", "SF", "SH", "SQ",
                                       "YW", "W1", "W2", "W3", "W4", NULL};

static int in_list(const char *const *list, const char *p)
{
    for (; *list; list++)
        if (!strncmp(*list, p, 2))
            return 1;
    return 0;
}

/* Where token `name` starts (followed by its value), searching the header
 * with the site list blanked out; NULL when absent. A token is upper-case
 * letters preceded by a non-letter. */
static const char *find_token(const char *header, const char *name)
{
    size_t len = strlen(name);
    for (const char *at = strstr(header + 2, name); at; at = strstr(at + 1, name)) {
        if (isupper((unsigned char)at[-1]) || isupper((unsigned char)at[len]))
            continue;
        return at + len;
    }
    return NULL;
}

/* The header: product, bytes per pixel, grid (GP), precision (PR) and the
 * total length (BY) checked against the grid. Sets out->product, rows, cols,
 * bytes_per_pixel, header_bytes; *need: the bytes of data the grid takes.
 * Needs only the bytes up to the ETX, so a reader can check it before it
 * reads (or inflates) any data. */
static dk_status parse_header(const unsigned char *bytes, size_t size, dk_radolan *out, double *precision,
                              size_t *need, char *err, size_t len)
{
    memset(out, 0, sizeof *out);
    const unsigned char *etx = memchr(bytes, 0x03, size < HEADER_MAX ? size : HEADER_MAX);
    if (!etx) {
        snprintf(err, len, "no RADOLAN header: the end-of-header byte 0x03 is missing from the first %d bytes",
                 HEADER_MAX);
        return DK_ERR_FORMAT;
    }
    size_t hlen = (size_t)(etx - bytes);
    char header[HEADER_MAX + 1];
    memcpy(header, bytes, hlen);
    header[hlen] = '\0';
    if (hlen < 2 || !isupper((unsigned char)header[0]) || !isalnum((unsigned char)header[1])) {
        snprintf(err, len, "no RADOLAN header: it does not start with a product name");
        return DK_ERR_FORMAT;
    }
    /* blank the site list so that radar names are never taken for tokens
     * (the text ends at the first NUL, which a damaged header may hold) */
    size_t text = strlen(header);
    for (char *lt = strchr(header, '<'); lt; lt = strchr(lt, '<')) {
        char *gt = strchr(lt, '>');
        if (!gt)
            gt = header + text - 1;
        memset(lt, ' ', (size_t)(gt - lt + 1));
    }
    memcpy(out->product, header, 2);
    /* DDhhmm after the product, then the 5-digit WMO number and MMYY */
    unsigned D, h, mi, mo, y;
    if (text >= 17 && sscanf(header + 2, "%2u%2u%2u%*5c%2u%2u", &D, &h, &mi, &mo, &y) == 5) {
        /* a date that is no day of the calendar (31 February) is a damaged
         * header: refused, so no reader of it (labels' time) goes on */
        static const unsigned days[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        int leap = (2000 + y) % 4 == 0; /* 2000-2099: every fourth year */
        if (!(mo >= 1 && mo <= 12 && D >= 1 && D <= days[mo - 1] && (mo != 2 || D <= 28 + (unsigned)leap) &&
              h < 24 && mi < 60)) {
            snprintf(err, len, "RADOLAN %.2s: the header's time %02u.%02u.20%02u %02u:%02u (DDhhmm ... MMYY) is "
                     "not a date and time of the calendar", header, D, mo, y, h, mi);
            return DK_ERR_FORMAT;
        }
        snprintf(out->time, sizeof out->time, "20%02u-%02u-%02u %02u:%02u UTC", y, mo, D, h, mi);
    }
    if (in_list(one_byte, header))
        out->bytes_per_pixel = 1;
    else if (in_list(two_byte, header))
        out->bytes_per_pixel = 2;
    else {
        snprintf(err, len, "unknown RADOLAN product '%.2s' (known: RX, EX, WX one byte per pixel; RW, RY, RH, "
                           "RB, SF, ... two bytes)", header);
        return DK_ERR_FORMAT;
    }
    const char *gp = find_token(header, "GP");
    unsigned long rows = 0, cols = 0;
    if (!gp || sscanf(gp, "%lu x %lu", &rows, &cols) != 2 || rows == 0 || cols == 0) {
        snprintf(err, len, "RADOLAN %s: the header has no readable grid size (token GP, e.g. 'GP 900x 900')",
                 out->product);
        return DK_ERR_FORMAT;
    }
    if (rows > RADOLAN_MAX_SIDE || cols > RADOLAN_MAX_SIDE) {
        snprintf(err, len, "RADOLAN %s: the grid %lu x %lu is larger than any composite (at most %d x %d)",
                 out->product, rows, cols, RADOLAN_MAX_SIDE, RADOLAN_MAX_SIDE);
        return DK_ERR_FORMAT;
    }
    *precision = 1.0;
    const char *pr = find_token(header, "PR");
    if (pr) {
        while (*pr == ' ')
            pr++;
        if (*pr == 'E') {
            char *end;
            long e = strtol(pr + 1, &end, 10);
            if (end == pr + 1 || e < -10 || e > 10) {
                snprintf(err, len, "RADOLAN %s: the precision (token PR, e.g. 'PR E-01') is not a power of ten "
                                   "from E-10 to E+10: '%.8s'", out->product, pr);
                return DK_ERR_FORMAT;
            }
            *precision = pow(10.0, (double)e);
        }
    }
    *need = (size_t)rows * cols * (size_t)out->bytes_per_pixel;
    const char *by = find_token(header, "BY");
    if (by) {
        unsigned long total = strtoul(by, NULL, 10);
        if (total != hlen + 1 + *need) {
            snprintf(err, len,
                     "RADOLAN %s: the grid %lu x %lu (%zu bytes of data) disagrees with the length in the header "
                     "(BY %lu bytes, header %zu)",
                     out->product, rows, cols, *need, total, hlen + 1);
            return DK_ERR_FORMAT;
        }
    }
    out->rows = rows;
    out->cols = cols;
    out->header_bytes = hlen + 1;
    return DK_OK;
}

static dk_status parse(const unsigned char *bytes, size_t size, dk_radolan *out, char *err, size_t len)
{
    double precision;
    size_t need;
    dk_status st = parse_header(bytes, size, out, &precision, &need, err, len);
    if (st != DK_OK)
        return st;
    size_t data = size - out->header_bytes;
    if (data < need) {
        snprintf(err, len, "RADOLAN %s: the file is truncated: the grid %zu x %zu needs %zu bytes of data, %zu are there",
                 out->product, out->rows, out->cols, need, data);
        return DK_ERR_FORMAT;
    }
    if (data > need) {
        snprintf(err, len, "RADOLAN %s: the grid %zu x %zu needs %zu bytes of data, but %zu follow the header",
                 out->product, out->rows, out->cols, need, data);
        return DK_ERR_FORMAT;
    }
    snprintf(out->unit, sizeof out->unit, "%s", out->bytes_per_pixel == 1 ? "dBZ" : "mm");
    size_t n = out->rows * out->cols;
    out->value = malloc(n * sizeof *out->value);
    out->has_data = malloc(n);
    if (!out->value || !out->has_data) {
        dk_radolan_free(out);
        snprintf(err, len, "out of memory for a %zu x %zu grid", out->rows, out->cols);
        return DK_ERR_OUT_OF_MEMORY;
    }
    const unsigned char *px = bytes + out->header_bytes;
    out->max_value = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        float v = NAN;
        int clutter = 0;
        if (out->bytes_per_pixel == 1) {
            unsigned b = px[i];
            if (b == 249)
                clutter = 1;
            else if (b < 249)
                v = (float)(b / 2.0 - 32.5);
        } else {
            unsigned w = (unsigned)px[2 * i] | (unsigned)px[2 * i + 1] << 8;
            if (w & 0x8000)
                clutter = 1;
            else if (!(w & 0x2000))
                v = (float)((w & 0x0fff) * precision * ((w & 0x4000) ? -1 : 1));
        }
        out->value[i] = v;
        out->has_data[i] = !isnan(v);
        out->data_pixels += !isnan(v);
        out->clutter_pixels += clutter;
        if (!isnan(v) && v > out->max_value)
            out->max_value = v;
    }
    return DK_OK;
}

/* Reads up to want more bytes into *buf (capacity *cap, *size used), the
 * buffer growing with what arrives and never past limit: memory follows the
 * bytes the file really holds, whatever its header says. Returns the bytes
 * read, 0 at the end, -1 on a corrupt stream, -2 out of memory. */
static long read_more(gzFile gz, unsigned char **buf, size_t *cap, size_t *size, size_t limit)
{
    if (*size == *cap) {
        size_t bigger = *cap * 2 < limit ? *cap * 2 : limit;
        if (bigger <= *cap)
            return 0;
        unsigned char *b = realloc(*buf, bigger);
        if (!b)
            return -2;
        *buf = b;
        *cap = bigger;
    }
    size_t room = (limit < *cap ? limit : *cap) - *size;
    if (room > (1u << 30))
        room = 1u << 30;
    int got = gzread(gz, *buf + *size, (unsigned)room);
    if (got < 0)
        return -1;
    *size += (size_t)got;
    return got;
}

static dk_status read_file(const char *path, dk_radolan *out, char *err, size_t len)
{
    memset(out, 0, sizeof *out);
    /* gzread reads gzip and plain files alike */
    gzFile gz = gzopen(path, "rb");
    if (!gz) {
        snprintf(err, len, "cannot open %s: %s", path, errno ? strerror(errno) : "out of memory");
        return DK_ERR_IO;
    }
    dk_status st = DK_OK;
    char inner[512];
    size_t cap = 2 * HEADER_MAX, size = 0;
    unsigned char *buf = malloc(cap);
    long got = buf ? 1 : -2;
    /* 1. the header only: up to its end byte, at most HEADER_MAX bytes */
    while (got > 0 && size < HEADER_MAX && !memchr(buf, 0x03, size))
        got = read_more(gz, &buf, &cap, &size, cap);
    double precision;
    size_t need = 0;
    if (got >= 0 && (st = parse_header(buf, size, out, &precision, &need, inner, sizeof inner)) != DK_OK) {
        snprintf(err, len, "%s: %s", path, inner);
        goto done;
    }
    /* 2. the data the header announces, and not a byte more: the buffer
     * grows only as data arrives, and inflating stops at the announced size */
    size_t total = out->header_bytes + need;
    while (got > 0 && size < total)
        got = read_more(gz, &buf, &cap, &size, total);
    if (got >= 0 && size == total) {
        unsigned char extra;
        int more = gzread(gz, &extra, 1);
        got = more < 0 ? -1 : got;
        if (more > 0) {
            snprintf(err, len, "%s: RADOLAN %s: the grid %zu x %zu needs %zu bytes of data, but more follow the "
                               "header", path, out->product, out->rows, out->cols, need);
            st = DK_ERR_FORMAT;
            goto done;
        }
    }
    if (got == -2) {
        snprintf(err, len, "out of memory reading %s", path);
        st = DK_ERR_OUT_OF_MEMORY;
        goto done;
    }
    int code = Z_OK;
    const char *why = gzerror(gz, &code);
    if (got == -1 || (code != Z_OK && code != Z_STREAM_END)) {
        snprintf(err, len, "%s is corrupt or truncated: %s", path, why && *why ? why : "read error");
        st = DK_ERR_FORMAT;
        goto done;
    }
    /* 3. decode (a short file is refused here with what it lacks) */
    if ((st = parse(buf, size, out, inner, sizeof inner)) != DK_OK)
        snprintf(err, len, "%s: %s", path, inner);
done:
    if (st != DK_OK)
        dk_radolan_free(out);
    free(buf);
    gzclose(gz);
    return st;
}

DK_API void dk_radolan_free(dk_radolan *r)
{
    free(r->value);
    free(r->has_data);
    r->value = NULL;
    r->has_data = NULL;
}

/* The reader's sentences are built in a buffer (they nest: the file name
 * around the header's complaint) and become the thread's error here. */
DK_API dk_status dk_radolan_read(const char *path, dk_radolan *out)
{
    if (!path || !out)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "dk_radolan_read: path and out must not be NULL");
    char err[DK_MSG_LEN];
    dk_status st = read_file(path, out, err, sizeof err);
    return st == DK_OK ? DK_OK : dk_fail(NULL, st, "%s", err);
}

DK_API dk_status dk_radolan_parse(const unsigned char *bytes, size_t size, dk_radolan *out)
{
    if (!bytes || !out)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "dk_radolan_parse: bytes and out must not be NULL");
    char err[DK_MSG_LEN];
    dk_status st = parse(bytes, size, out, err, sizeof err);
    return st == DK_OK ? DK_OK : dk_fail(NULL, st, "%s", err);
}

DK_API dk_status dk_radolan_grid_origin(size_t rows, size_t cols, double *x0, double *y0)
{
    /* DWD, RADOLAN/RADVOR-OP Kompositformat: the national 900 x 900 grid
     * (corners 46.9526N 3.5889E and 54.7405N 15.7208E) and the extended
     * 1100 x 900 one (rows x cols) */
    static const struct {
        size_t rows, cols;
        double x0, y0;
    } grids[] = {{900, 900, -523.4622, -4658.645}, {1100, 900, -443.4622, -4758.645}};
    if (!x0 || !y0)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "dk_radolan_grid_origin: x0 and y0 must not be NULL");
    for (size_t g = 0; g < sizeof grids / sizeof grids[0]; g++)
        if (grids[g].rows == rows && grids[g].cols == cols) {
            *x0 = grids[g].x0;
            *y0 = grids[g].y0;
            return DK_OK;
        }
    return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT,
                   "the RADOLAN grid %zu x %zu is not one whose geolocation dakit knows (900 x 900, 1100 x 900)",
                   rows, cols);
}
