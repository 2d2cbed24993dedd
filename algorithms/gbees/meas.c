/* Reader for measurement files in the published GBEES text format. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/internal.h"

typedef struct reader {
    FILE *f;
    const char *path;
    int line;
    char text[4096];
} reader;

/* The next line without its newline; 0 at the end of the file. */
static int next_line(reader *r)
{
    if (!fgets(r->text, sizeof r->text, r->f))
        return 0;
    r->line++;
    r->text[strcspn(r->text, "\r\n")] = '\0';
    return 1;
}

static int blank(const char *s)
{
    return s[strspn(s, " \t")] == '\0';
}

/* Numbers on the line (at most max); -1 when something is not a finite number. */
static int parse_numbers(const char *s, double *out, int max)
{
    int n = 0;
    for (;;) {
        s += strspn(s, " \t,");
        if (!*s)
            return n;
        char *end;
        errno = 0;
        double x = strtod(s, &end);
        if (end == s || errno == ERANGE || !isfinite(x) || (*end && !strchr(" \t,", *end)))
            return -1;
        if (n == max)
            return max + 1;
        out[n++] = x;
        s = end;
    }
}

#define FAIL(...) (fclose(r.f), dk_fail(NULL, DK_ERR_FORMAT, __VA_ARGS__))

DK_API dk_status dk_gbees_meas_read(const char *path, dk_gbees_meas *meas)
{
    if (!path || !meas)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "dk_gbees_meas_read: path and meas are required");
    reader r = {fopen(path, "r"), path, 0, {0}};
    if (!r.f)
        return dk_fail(NULL, DK_ERR_IO, "cannot open measurement file %s: %s", path, strerror(errno));
    memset(meas, 0, sizeof *meas);
    if (!next_line(&r) || blank(r.text))
        return FAIL("%s:1: expected a label line (e.g. 'x y z'), found %s", path,
                    r.line ? "a blank line" : "an empty file");
    if (!next_line(&r))
        return FAIL("%s: ends before the mean vector (line 2)", path);
    double buf[DK_GBEES_MAX_DIM];
    int d = parse_numbers(r.text, buf, DK_GBEES_MAX_DIM);
    if (d < 0)
        return FAIL("%s:%d: the mean vector holds something that is not a finite number: '%s'", path,
                    r.line, r.text);
    if (d == 0)
        return FAIL("%s:%d: expected the mean vector, found a blank line", path, r.line);
    if (d > DK_GBEES_MAX_DIM)
        return FAIL("%s:%d: more than %d values in the mean vector", path, r.line, DK_GBEES_MAX_DIM);
    meas->dim = d;
    memcpy(meas->mean, buf, d * sizeof *buf);
    if (!next_line(&r) || !blank(r.text))
        return FAIL("%s:%d: expected a blank line after the mean vector", path, r.line + 1);
    if (!next_line(&r) || blank(r.text))
        return FAIL("%s:%d: expected the covariance label line", path, r.line + 1);
    for (int i = 0; i < d; i++) {
        if (!next_line(&r))
            return FAIL("%s: ends in the covariance: %d rows expected, %d found", path, d, i);
        int n = parse_numbers(r.text, buf, DK_GBEES_MAX_DIM);
        if (n != d)
            return FAIL("%s:%d: covariance row %d must hold %d numbers (the mean's length)%s", path,
                        r.line, i + 1, d, n < 0 ? ", found something else" : "");
        memcpy(meas->cov + i * d, buf, d * sizeof *buf);
    }
    if (!next_line(&r) || !blank(r.text))
        return FAIL("%s:%d: expected a blank line after the %d covariance rows", path, r.line + 1, d);
    if (!next_line(&r) || blank(r.text))
        return FAIL("%s:%d: expected the period label line (e.g. 'T (TU)')", path, r.line + 1);
    if (!next_line(&r) || parse_numbers(r.text, buf, 1) != 1)
        return FAIL("%s:%d: expected the period, one number", path, r.line + 1);
    meas->period = buf[0];
    while (next_line(&r))
        if (!blank(r.text))
            return FAIL("%s:%d: unexpected text after the period: '%s'", path, r.line, r.text);
    fclose(r.f);
    if (!(meas->period > 0.0))
        return dk_fail(NULL, DK_ERR_FORMAT, "%s: the period must be > 0, not %g", path, meas->period);
    for (int i = 0; i < d; i++)
        for (int j = 0; j < i; j++)
            if (fabs(meas->cov[i * d + j] - meas->cov[j * d + i]) >
                1e-12 * (fabs(meas->cov[i * d + j]) + fabs(meas->cov[j * d + i])) + 1e-300)
                return dk_fail(NULL, DK_ERR_FORMAT, "%s: the covariance is not symmetric (row %d, column %d)",
                               path, i + 1, j + 1);
    return DK_OK;
}

DK_API dk_status dk_gbees_meas_read_dir(const char *dir, dk_gbees_meas **list, int *count)
{
    if (!dir || !list || !count)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "dk_gbees_meas_read_dir: dir, list and count are required");
    *list = NULL;
    *count = 0;
    dk_gbees_meas *m = NULL;
    int n = 0;
    for (;;) {
        char path[4096];
        snprintf(path, sizeof path, "%s/measurement%d.txt", dir, n);
        FILE *probe = fopen(path, "r");
        if (!probe) {
            if (n == 0) {
                free(m);
                return dk_fail(NULL, DK_ERR_IO, "cannot open %s: %s (a measurement folder holds measurement0.txt, measurement1.txt, ...)",
                               path, strerror(errno));
            }
            break;
        }
        fclose(probe);
        dk_gbees_meas *bigger = realloc(m, (n + 1) * sizeof *m);
        if (!bigger) {
            free(m);
            return dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "out of memory reading %s", path);
        }
        m = bigger;
        dk_status st = dk_gbees_meas_read(path, &m[n]);
        if (st != DK_OK) {
            free(m);
            return st;
        }
        n++;
    }
    *list = m;
    *count = n;
    return DK_OK;
}
