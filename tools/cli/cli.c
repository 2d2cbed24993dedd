#include "cli/cli.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int cli_options_only;

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
        errno = 0;
        double v = strtod(s, &end);
        if (end == s || n == max || !isfinite(v) || (errno == ERANGE && fabs(v) > 1.0))
            return -1;
        out[n++] = v;
        s = end;
        if (*s == ',' && s[1])
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
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || n == max || v < 0 || errno == ERANGE)
            return -1;
        out[n++] = v;
        s = end;
        if (*s == ',' && s[1])
            s++;
        else if (*s)
            return -1;
    }
    return n;
}

/* The value as the sentences quote it: at most 64 characters. */
#define QUOTED "'%.64s%s'"
#define QUOTE(v) (v), strlen(v) > 64 ? "..." : ""

int cli_parse_integer(const char *opt, const char *value, long long lo, long long hi, long long *out, char *msg,
                      size_t len)
{
    char *end;
    errno = 0;
    long long v = 0;
    int ok = *value && !isspace((unsigned char)*value);
    if (ok) {
        v = strtoll(value, &end, 10);
        ok = end != value && !*end && errno != ERANGE && v >= lo && v <= hi;
    }
    if (ok) {
        *out = v;
        return 0;
    }
    if (lo == hi)
        snprintf(msg, len, "%s must be %lld, not " QUOTED, opt, lo, QUOTE(value));
    else if (hi == LLONG_MAX)
        snprintf(msg, len, "%s must be an integer >= %lld, not " QUOTED, opt, lo, QUOTE(value));
    else
        snprintf(msg, len, "%s must be an integer from %lld to %lld, not " QUOTED, opt, lo, hi, QUOTE(value));
    return -1;
}

int cli_parse_u64(const char *opt, const char *value, uint64_t *out, char *msg, size_t len)
{
    char *end;
    errno = 0;
    unsigned long long v = 0;
    /* strtoull would take "-1" as 2^64-1: refuse any sign */
    int ok = *value && !isspace((unsigned char)*value) && *value != '-' && *value != '+';
    if (ok) {
        v = strtoull(value, &end, 0);
        ok = end != value && !*end && errno != ERANGE;
    }
    if (ok) {
        *out = (uint64_t)v;
        return 0;
    }
    snprintf(msg, len, "%s must be an integer from 0 to %llu, not " QUOTED, opt, (unsigned long long)UINT64_MAX,
             QUOTE(value));
    return -1;
}

/* "a number > 0 and <= 1", "a number >= 0", "a finite number" */
static void describe_range(char *out, size_t len, double lo, double hi, unsigned open)
{
    int has_lo = isfinite(lo), has_hi = isfinite(hi);
    const char *l = open & CLI_OPEN_LO ? ">" : ">=", *h = open & CLI_OPEN_HI ? "<" : "<=";
    if (has_lo && has_hi && !(open & (CLI_OPEN_LO | CLI_OPEN_HI)))
        snprintf(out, len, "a number from %g to %g", lo, hi);
    else if (has_lo && has_hi)
        snprintf(out, len, "a number %s %g and %s %g", l, lo, h, hi);
    else if (has_lo)
        snprintf(out, len, "a number %s %g", l, lo);
    else if (has_hi)
        snprintf(out, len, "a number %s %g", h, hi);
    else
        snprintf(out, len, "a finite number");
}

int cli_parse_double(const char *opt, const char *value, double lo, double hi, unsigned open, double *out,
                     char *msg, size_t len)
{
    char *end;
    errno = 0;
    double v = 0;
    int ok = *value && !isspace((unsigned char)*value);
    if (ok) {
        v = strtod(value, &end);
        /* ERANGE on underflow still gives the nearest number; on overflow an infinity */
        ok = end != value && !*end && isfinite(v);
    }
    if (ok && isfinite(lo))
        ok = open & CLI_OPEN_LO ? v > lo : v >= lo;
    if (ok && isfinite(hi))
        ok = open & CLI_OPEN_HI ? v < hi : v <= hi;
    if (ok) {
        *out = v;
        return 0;
    }
    char range[96];
    describe_range(range, sizeof range, lo, hi, open);
    snprintf(msg, len, "%s must be %s, not " QUOTED, opt, range, QUOTE(value));
    return -1;
}

int cli_int(const char *cmd, const char *opt, const char *value, long long lo, long long hi, int *out)
{
    char msg[256];
    long long v;
    if (lo < INT_MIN)
        lo = INT_MIN;
    if (hi > INT_MAX)
        hi = INT_MAX;
    if (cli_parse_integer(opt, value, lo, hi, &v, msg, sizeof msg) != 0)
        return cli_error(cmd, 2, "%s", msg);
    *out = (int)v;
    return 0;
}

int cli_size(const char *cmd, const char *opt, const char *value, size_t lo, size_t hi, size_t *out)
{
    char msg[256];
    long long v;
    long long l = lo > (size_t)LLONG_MAX ? LLONG_MAX : (long long)lo;
    long long h = hi > (size_t)LLONG_MAX ? LLONG_MAX : (long long)hi;
    if (cli_parse_integer(opt, value, l, h, &v, msg, sizeof msg) != 0)
        return cli_error(cmd, 2, "%s", msg);
    *out = (size_t)v;
    return 0;
}

int cli_u64(const char *cmd, const char *opt, const char *value, uint64_t *out)
{
    char msg[256];
    if (cli_parse_u64(opt, value, out, msg, sizeof msg) != 0)
        return cli_error(cmd, 2, "%s", msg);
    return 0;
}

int cli_double(const char *cmd, const char *opt, const char *value, double lo, double hi, unsigned open,
               double *out)
{
    char msg[256];
    if (cli_parse_double(opt, value, lo, hi, open, out, msg, sizeof msg) != 0)
        return cli_error(cmd, 2, "%s", msg);
    return 0;
}

/* The option written in arg, as its table row: "--name" or "--name=..." */
static const struct option *option_named(const struct option *options, const char *arg)
{
    if (strncmp(arg, "--", 2) != 0)
        return NULL;
    size_t len = strcspn(arg + 2, "=");
    for (const struct option *o = options; o->name; o++)
        if (strlen(o->name) == len && !strncmp(o->name, arg + 2, len))
            return o;
    return NULL;
}

static int bad_option(const cli_args *a, const char *what, const char *arg)
{
    return cli_error(a->cmd, 2, "%s '%.64s%s' (dakit %s --help)", what, arg,
                     strlen(arg) > 64 ? "..." : "", a->cmd);
}

int cli_next(cli_args *a)
{
    if (a->next == 0)
        optind = 0; /* glibc starts afresh: each command, and each run of the fuzz target */
    opterr = 0;
    int index = -1;
    int c = getopt_long(a->argc, a->argv, ":h", a->options, &index);
    a->next = optind;
    if (c == -1) {
        if (a->argc - optind > a->operands)
            return bad_option(a, "unexpected argument", a->argv[optind + a->operands]);
        return 0;
    }
    if (c == 'h') {
        snprintf(a->opt, sizeof a->opt, "--help");
        a->value = NULL;
        return 1;
    }
    if (c == '?' && optopt) {
        char shortopt[3] = {'-', (char)optopt, 0};
        return bad_option(a, "unknown option", shortopt);
    }
    /* getopt_long has passed the option, and its value when separate */
    const char *arg = a->argv[optind - 1];
    if (c == 0 && a->options[index].has_arg && optarg == arg)
        arg = a->argv[optind - 2];
    const struct option *o = option_named(a->options, arg);
    if (c == ':' && o)
        return cli_error(a->cmd, 2, "--%s needs a value (dakit %s --help)", o->name, a->cmd);
    if (c == '?' && o && !o->has_arg)
        return cli_error(a->cmd, 2, "--%s takes no value, not '%.64s' (dakit %s --help)", o->name, arg, a->cmd);
    /* an abbreviation is refused too: its meaning would change as options are added */
    if (c != 0 || !o)
        return bad_option(a, "unknown option", arg);
    snprintf(a->opt, sizeof a->opt, "--%s", o->name);
    a->value = o->has_arg ? optarg : NULL;
    return 1;
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

int cli_backend_list(const char *cmd, const char *opt, const char *want, int max)
{
    if (!*want || !strcmp(want, "all"))
        return 0;
    int n = 0;
    for (const char *p = want;; p++) {
        size_t len = strcspn(p, ",");
        if (len == 0 || len > 63)
            return cli_error(cmd, 2, "%s must be 'all' or a comma list of backend names (each 1 to 63 "
                                     "characters), not '%.64s%s'", opt, want, strlen(want) > 64 ? "..." : "");
        if (++n > max)
            return cli_error(cmd, 2, "%s names more than %d backends", opt, max);
        p += len;
        if (!*p)
            return 0;
    }
}

int cli_select_backends(const char *want, char names[][64], int max)
{
    int n = 0;
    if (!want || !*want || strcmp(want, "all") == 0) {
        int count;
        const dk_backend_info *info = cli_backends(&count);
        for (int i = 0; i < count && n < max; i++)
            if (info[i].usable)
                snprintf(names[n++], 64, "%s", info[i].name);
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
