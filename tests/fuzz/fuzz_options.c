/* libFuzzer target: the command line's option parsing. The input, split at
 * NUL bytes, is the argument list after "dakit": a subcommand and its
 * options, run through the real dispatch (dakit_main) with cli_options_only
 * set, so each command stops once its options are parsed and checked, before
 * it reads a file, opens a backend or writes anything. Every numeric option
 * goes through cli_int/cli_size/cli_u64/cli_double (tools/cli/cli.c); the
 * target also calls those parsers on every argument with odd ranges.
 * Anything may be refused (exit 2) but nothing may crash or leak. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

#define MAX_ARGS 64

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    cli_options_only = 1;
    /* the commands' usage and errors would flood the fuzzer's output; the
     * sanitizers write to file descriptor 2 directly, not through stderr */
    FILE *null = fopen("/dev/null", "w");
    if (null) {
        stdout = null;
        stderr = null;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *copy = malloc(size + 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = "dakit";
    for (char *p = copy; p < copy + size && argc < MAX_ARGS + 1; p += strlen(p) + 1)
        argv[argc++] = p;
    argv[argc] = NULL;

    int rc = dakit_main(argc, argv);
    if (rc != 0 && rc != 1 && rc != 2)
        abort();

    /* the numeric parsers on their own, with ranges the commands do not use */
    char msg[256];
    for (int i = 1; i < argc; i++) {
        long long v;
        uint64_t u;
        double x;
        if (cli_parse_integer("--n", argv[i], -5, 5, &v, msg, sizeof msg) == 0 && (v < -5 || v > 5))
            abort();
        if (cli_parse_integer("--n", argv[i], INT64_MIN, INT64_MAX, &v, msg, sizeof msg) != 0 && !msg[0])
            abort();
        if (cli_parse_u64("--seed", argv[i], &u, msg, sizeof msg) != 0 && !msg[0])
            abort();
        if (cli_parse_double("--x", argv[i], 0, 1, CLI_OPEN_LO, &x, msg, sizeof msg) == 0 && !(x > 0 && x <= 1))
            abort();
        if (cli_parse_double("--x", argv[i], -1e300, 1e300, CLI_OPEN_LO | CLI_OPEN_HI, &x, msg, sizeof msg) == 0 &&
            !(x > -1e300 && x < 1e300))
            abort();
        double list[3];
        long ints[3];
        int n = cli_parse_doubles(argv[i], list, 3);
        for (int k = 0; k < n; k++)
            if (list[k] != list[k] || list[k] - list[k] != 0)
                abort(); /* NaN or infinite */
        n = cli_parse_ints(argv[i], ints, 3);
        for (int k = 0; k < n; k++)
            if (ints[k] < 0)
                abort();
    }
    free(copy);
    return 0;
}
