/* Output files, written whole or not at all. Every file a command writes
 * (.npy, .png, .csv, JUnit XML, a gbees run's snapshots and summary) goes to
 * a temporary name in the same folder (".NAME.tmp-PID-N") and is renamed to
 * its name only once every byte is written, flushed and synced; on any
 * failure the temporary file is removed, so a full disk, a size limit or an
 * interrupt never leaves a truncated file under the name a reader expects.
 * A path that names something other than a regular file (/dev/stdout, a
 * pipe) is written in place. */
#ifndef DAKIT_TOOLS_CLI_OUTPUT_H
#define DAKIT_TOOLS_CLI_OUTPUT_H

#include <stddef.h>
#include <stdio.h>

typedef struct output {
    FILE *f;          /* write here between output_open and output_commit */
    char path[4096];  /* the name it gets */
    char tmp[4096];   /* where it is written meanwhile; "" when written in place */
    int fd;           /* the file under f */
    int error;        /* errno of the first failed write, 0 if none */
    int slot;         /* in the list the signal handler cleans up */
} output;

/* 0, or -1 with "cannot create PATH: reason" in err. o must stay where it is
 * until output_commit or output_abort (o->f writes through it). */
int output_open(output *o, const char *path, char *err, size_t len);
/* Flushes, syncs, closes and renames; 0, or -1 with "writing PATH failed:
 * reason" in err and the temporary file removed. Always ends the output. */
int output_commit(output *o, char *err, size_t len);
/* Closes and removes the temporary file (a failure before the end). */
void output_abort(output *o);
/* Whether a file could be made at path: its folder exists and is a folder,
 * and path is no folder. 0, or -1 with the sentence output_open would give.
 * For checking outputs before the work, so that a typo costs no time. */
int output_check(const char *path, char *err, size_t len);

/* Files that appear together or not at all (an ensemble's member files):
 * between output_group_begin and output_group_end, output_commit writes,
 * syncs and closes each file but leaves it at its temporary name.
 * output_group_end(1, ...) then gives every one its name, and
 * output_group_end(0, ...) removes them all, so a failure at any member
 * leaves every earlier file as it was. A file written in place (a pipe) is
 * not held. 0, or -1 with "writing PATH failed: reason" in err (the files
 * not yet renamed removed). Groups do not nest. */
void output_group_begin(void);
int output_group_end(int keep, char *err, size_t len);

#endif
