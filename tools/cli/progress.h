/* Progress of long commands on stderr (gbees, enkf l96, conform, bench):
 * on a terminal one line rewritten in place; with --progress and stderr no
 * terminal, whole lines (one per stage and one at least every
 * PROGRESS_EVERY seconds) that a batch job's log keeps; --quiet: none. */
#ifndef DAKIT_TOOLS_CLI_PROGRESS_H
#define DAKIT_TOOLS_CLI_PROGRESS_H

#define PROGRESS_EVERY 5.0 /* seconds between lines that are not stages, in a log */

typedef struct progress {
    int mode;   /* -1 default, 0 --quiet, 1 --progress: the last given wins */
    int on;     /* print at all */
    int tty;    /* rewrite one line in place instead of writing lines */
    int open;   /* a rewritten line is on the terminal */
    const char *cmd;
    double start, last;
} progress;

/* Sets p to the default (progress only on a terminal). */
void progress_init(progress *p, const char *cmd);
/* 1 when arg is --progress or --quiet (and takes it), else 0. */
int progress_option(progress *p, const char *arg);
/* Decides from the options and isatty(2) and starts the clock. */
void progress_start(progress *p);
/* A stage, always printed when progress is on ("dakit CMD: [12.3 s] ..."). */
void progress_stage(progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A status line, printed at most every 0.25 s on a terminal and every
 * PROGRESS_EVERY seconds in a log; cheap to call often. */
void progress_tick(progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Clears the terminal line: before the command prints to stdout, and at the end. */
void progress_clear(progress *p);

#endif
