/* RADOLAN binary composites. The header is ASCII up to the byte 0x03 (ETX):
 * product (2 letters), time, WMO number, month/year, then named tokens (BY
 * total bytes, VS, SW, PR precision, INT, GP rows x cols, MS length + site
 * list in <...>, and for other products VV, MF, QN, ...). Tokens are looked
 * up by name outside the site list, never by offset.
 * One-byte products (RX, EX, WX): dBZ = v / 2 - 32.5; 250 no data, 249
 * clutter. Two-byte products (RW, RY, ...): little-endian, value in the low
 * 12 bits times the PR precision; bit 0x2000 no data, 0x8000 clutter, 0x4000
 * negative. */
#include "kmeans/radolan.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#define HEADER_MAX 8192

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

dk_status radolan_parse(const unsigned char *bytes, size_t size, radolan *out, char *err, size_t len)
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
    /* blank the site list so that radar names are never taken for tokens */
    for (char *lt = strchr(header, '<'); lt; lt = strchr(lt, '<')) {
        char *gt = strchr(lt, '>');
        if (!gt)
            gt = header + hlen - 1;
        memset(lt, ' ', (size_t)(gt - lt + 1));
    }
    memcpy(out->product, header, 2);
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
    if (!gp || sscanf(gp, "%lu x %lu", &rows, &cols) != 2 || rows == 0 || cols == 0 || rows > 100000 ||
        cols > 100000) {
        snprintf(err, len, "RADOLAN %s: the header has no readable grid size (token GP, e.g. 'GP 900x 900')",
                 out->product);
        return DK_ERR_FORMAT;
    }
    double precision = 1.0;
    const char *pr = find_token(header, "PR");
    if (pr) {
        while (*pr == ' ')
            pr++;
        if (*pr == 'E')
            precision = pow(10.0, atof(pr + 1));
    }
    size_t data = size - hlen - 1, need = (size_t)rows * cols * (size_t)out->bytes_per_pixel;
    const char *by = find_token(header, "BY");
    if (by) {
        unsigned long total = strtoul(by, NULL, 10);
        if (total != hlen + 1 + need) {
            snprintf(err, len,
                     "RADOLAN %s: the grid %lu x %lu (%zu bytes of data) disagrees with the length in the header "
                     "(BY %lu bytes, header %zu)",
                     out->product, rows, cols, need, total, hlen + 1);
            return DK_ERR_FORMAT;
        }
    }
    if (data < need) {
        snprintf(err, len, "RADOLAN %s: the file is truncated: the grid %lu x %lu needs %zu bytes of data, %zu are there",
                 out->product, rows, cols, need, data);
        return DK_ERR_FORMAT;
    }
    if (data > need) {
        snprintf(err, len, "RADOLAN %s: the grid %lu x %lu needs %zu bytes of data, but %zu follow the header",
                 out->product, rows, cols, need, data);
        return DK_ERR_FORMAT;
    }
    out->rows = rows;
    out->cols = cols;
    out->header_bytes = hlen + 1;
    snprintf(out->unit, sizeof out->unit, "%s", out->bytes_per_pixel == 1 ? "dBZ" : "mm");
    size_t n = (size_t)rows * cols;
    out->value = malloc(n * sizeof *out->value);
    out->has_data = malloc(n);
    if (!out->value || !out->has_data) {
        radolan_free(out);
        snprintf(err, len, "out of memory for a %lu x %lu grid", rows, cols);
        return DK_ERR_IO;
    }
    const unsigned char *px = bytes + hlen + 1;
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

dk_status radolan_read(const char *path, radolan *out, char *err, size_t len)
{
    memset(out, 0, sizeof *out);
    /* gzread reads gzip and plain files alike */
    gzFile gz = gzopen(path, "rb");
    if (!gz) {
        snprintf(err, len, "cannot open %s: %s", path, strerror(errno));
        return DK_ERR_IO;
    }
    size_t cap = 1 << 20, size = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            gzclose(gz);
            snprintf(err, len, "out of memory reading %s", path);
            return DK_ERR_IO;
        }
        int got = gzread(gz, buf + size, (unsigned)(cap - size));
        if (got < 0) {
            int code;
            const char *why = gzerror(gz, &code);
            snprintf(err, len, "%s is corrupt: %s", path, why);
            free(buf);
            gzclose(gz);
            return DK_ERR_FORMAT;
        }
        if (got == 0)
            break;
        size += (size_t)got;
        if (size == cap) {
            if (cap > ((size_t)1 << 30)) {
                snprintf(err, len, "%s is larger than any RADOLAN composite (over 1 GiB)", path);
                free(buf);
                gzclose(gz);
                return DK_ERR_FORMAT;
            }
            unsigned char *bigger = realloc(buf, cap *= 2);
            if (!bigger)
                free(buf);
            buf = bigger;
        }
    }
    int code = Z_OK;
    const char *why = gzerror(gz, &code);
    if (code != Z_OK && code != Z_STREAM_END) {
        snprintf(err, len, "%s is corrupt or truncated: %s", path, why);
        free(buf);
        gzclose(gz);
        return DK_ERR_FORMAT;
    }
    gzclose(gz);
    dk_status st = radolan_parse(buf, size, out, err, len);
    if (st != DK_OK) {
        char inner[512];
        snprintf(inner, sizeof inner, "%s", err);
        snprintf(err, len, "%s: %s", path, inner);
    }
    free(buf);
    return st;
}

void radolan_free(radolan *r)
{
    free(r->value);
    free(r->has_data);
    r->value = NULL;
    r->has_data = NULL;
}
