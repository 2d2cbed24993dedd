#include "cli/cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int cli_error(const char *cmd, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dakit%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

int cli_parse_doubles(const char *s, double *out, int max)
{
    int n = 0;
    while (*s) {
        char *end;
        double v = strtod(s, &end);
        if (end == s || n == max)
            return -1;
        out[n++] = v;
        s = end;
        if (*s == ',')
            s++;
        else if (*s)
            return -1;
    }
    return n;
}

int cli_parse_ints(const char *s, long *out, int max)
{
    int n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || n == max || v < 0)
            return -1;
        out[n++] = v;
        s = end;
        if (*s == ',')
            s++;
        else if (*s)
            return -1;
    }
    return n;
}

const char *cli_value(const char *cmd, int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        cli_error(cmd, 2, "%s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double cli_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1p-52 - 1.0;
}

void cli_fill_random(void *data, dk_dtype dtype, size_t count, uint64_t seed)
{
    uint64_t st = seed;
    for (size_t i = 0; i < count; i++) {
        double v = cli_random(&st);
        if (dtype == DK_F32)
            ((float *)data)[i] = (float)v;
        else
            ((double *)data)[i] = v;
    }
}

int cli_select_backends(const char *want, char names[][64], int max)
{
    int n = 0;
    int count = dk_backend_count();
    if (!want || !*want || strcmp(want, "all") == 0) {
        for (int i = 0; i < count && n < max; i++) {
            dk_backend_info info;
            if (dk_backend_get(i, &info) == DK_OK && info.usable)
                snprintf(names[n++], 64, "%s", info.name);
        }
        return n;
    }
    const char *p = want;
    while (*p && n < max) {
        size_t len = strcspn(p, ",");
        snprintf(names[n++], 64, "%.*s", (int)len, p);
        p += len;
        if (*p == ',')
            p++;
    }
    return n;
}

int cli_in_list(const char *list, const char *name)
{
    if (!list)
        return 1;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && strncmp(p, name, n) == 0)
            return 1;
        p += len;
        if (*p == ',')
            p++;
    }
    return 0;
}
