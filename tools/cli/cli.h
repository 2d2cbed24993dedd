/* Helpers shared by the dakit command's subcommands. */
#ifndef DAKIT_TOOLS_CLI_CLI_H
#define DAKIT_TOOLS_CLI_CLI_H

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>

#include <dakit/dakit.h>

/* Prints "dakit <cmd>: <message>" to stderr and returns 2 (bad usage) or 1. */
int cli_error(const char *cmd, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Parses "a,b,c" into at most max finite doubles / non-negative ints; -1 on
 * junk, a value out of range or too many values. */
int cli_parse_doubles(const char *s, double *out, int max);
int cli_parse_ints(const char *s, long *out, int max);
/* A command's options for cli_next: getopt_long's table, ending with a
 * zero row. A flag is CLI_FLAG("name"), an option with a value
 * CLI_VALUE("name"); -h stands for --help. */
#define CLI_FLAG(name) {name, no_argument, NULL, 0}
#define CLI_VALUE(name) {name, required_argument, NULL, 0}
typedef struct cli_args {
    const char *cmd; /* as in "dakit CMD: ..." and "dakit CMD --help" */
    int argc;
    char **argv; /* argv[0] the command; getopt_long moves operands to the end */
    const struct option *options;
    int operands; /* how many operands (arguments that are not options) it takes */
    int next;     /* 0 before the first call; at the end, the index of the first operand */
    char opt[72]; /* the option found, as "--name" whichever way it was written */
    const char *value; /* its value (--name value or --name=value), NULL for a flag */
} cli_args;
/* The next option of a.argv, by getopt_long: 1 with a->opt and a->value
 * set, 0 at the end of the options, or 2 (the usage exit status, which the
 * caller returns) after printing the one sentence every command gives for
 * an unknown option, an abbreviated one, a missing or unwanted value, or
 * an operand too many. */
int cli_next(cli_args *a);

/* Numeric options: every numeric option of every command goes through these.
 * The whole of value must be the number (no blanks, no trailing text), it
 * must not overflow, and it must lie in its range; otherwise they print
 *   dakit CMD: OPT must be an integer from LO to HI, not 'VALUE'
 * (or "a number > 0 and <= 1", ...) and return 2, the usage exit status, which
 * the caller returns. 0 on success, *out set. */
int cli_int(const char *cmd, const char *opt, const char *value, long long lo, long long hi, int *out);
int cli_size(const char *cmd, const char *opt, const char *value, size_t lo, size_t hi, size_t *out);
/* Any integer from 0 to 2^64-1, decimal or 0x hexadecimal (seeds). */
int cli_u64(const char *cmd, const char *opt, const char *value, uint64_t *out);
/* Bounds of cli_double: CLI_OPEN_LO excludes lo itself (> lo), CLI_OPEN_HI hi;
 * an infinite bound is no bound. NaN and infinities are always refused. */
#define CLI_OPEN_LO 1u
#define CLI_OPEN_HI 2u
int cli_double(const char *cmd, const char *opt, const char *value, double lo, double hi, unsigned open,
               double *out);
/* The same checks without printing: 0, or -1 with the sentence (without the
 * "dakit CMD: " prefix) in msg. */
int cli_parse_integer(const char *opt, const char *value, long long lo, long long hi, long long *out, char *msg,
                      size_t len);
int cli_parse_u64(const char *opt, const char *value, uint64_t *out, char *msg, size_t len);
int cli_parse_double(const char *opt, const char *value, double lo, double hi, unsigned open, double *out,
                     char *msg, size_t len);

/* When set, each command returns 0 as soon as its options are parsed and
 * checked, before it reads a file, opens a backend or writes anything. Only
 * the option parser's fuzz target (tests/fuzz/fuzz_options.c) sets it. */
extern int cli_options_only;

/* The dakit command: argv[0] "dakit", argv[1] the subcommand (cli/commands.c). */
int dakit_main(int argc, char **argv);

double cli_now(void); /* seconds, monotonic */

/* Deterministic uniform numbers in [-1, 1) (splitmix64), so every backend
 * and every run sees the same data for a case. */
double cli_random(uint64_t *state);
void cli_fill_random(void *data, dk_dtype dtype, size_t count, uint64_t seed);

/* 1 when name is an item of the comma list (a NULL list holds everything). */
int cli_in_list(const char *list, const char *name);

/* Checks a --backend list for conform and bench: "all" or at most max names
 * of 1 to 63 characters. 0, or 2 with the sentence printed. */
int cli_backend_list(const char *cmd, const char *opt, const char *want, int max);
/* Names of the usable backends, or only `want` (a comma list or "all"). */
int cli_select_backends(const char *want, char names[][64], int max);

/* Every plugin found, each probed in a child process (cli/probe.c), so that
 * a plugin whose probe crashes or hangs is reported as refused ("its probe
 * crashed (signal 11)") instead of taking the command down. Probed once per
 * process, on the first call, before any backend is opened here; *count is
 * set. The array belongs to cli. */
const dk_backend_info *cli_backends(int *count);
/* The probed information of the plugin called name, or NULL. */
const dk_backend_info *cli_backend_named(const char *name);
/* What auto selection (dk_context_create(NULL)) picks, tried in a child
 * process for the same reason: 0 with the backend and device names, or -1
 * with why it fails. */
int cli_auto_pick(char *backend, size_t blen, char *device, size_t dlen, char *why, size_t wlen);

#endif
