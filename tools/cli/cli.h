/* Helpers shared by the dakit command's subcommands. */
#ifndef DAKIT_TOOLS_CLI_CLI_H
#define DAKIT_TOOLS_CLI_CLI_H

#include <stddef.h>
#include <stdint.h>

#include <dakit/dakit.h>

/* Prints "dakit <cmd>: <message>" to stderr and returns 2 (bad usage) or 1. */
int cli_error(const char *cmd, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Parses "a,b,c" into at most max doubles / non-negative ints; -1 on junk. */
int cli_parse_doubles(const char *s, double *out, int max);
int cli_parse_ints(const char *s, long *out, int max);
/* The value after a flag, or NULL (with the error printed) when missing. */
const char *cli_value(const char *cmd, int argc, char **argv, int *i);

double cli_now(void); /* seconds, monotonic */

/* Deterministic uniform numbers in [-1, 1) (splitmix64), so every backend
 * and every run sees the same data for a case. */
double cli_random(uint64_t *state);
void cli_fill_random(void *data, dk_dtype dtype, size_t count, uint64_t seed);

/* 1 when name is an item of the comma list (a NULL list holds everything). */
int cli_in_list(const char *list, const char *name);

/* Names of the usable backends, or only `want` (a comma list or "all"). */
int cli_select_backends(const char *want, char names[][64], int max);

#endif
