/* Data files the tools read (the RADOLAN composite of the benchmark), found
 * wherever the command is run from. */
#ifndef DAKIT_TOOLS_CLI_DATAFILE_H
#define DAKIT_TOOLS_CLI_DATAFILE_H

#include <stddef.h>

/* Finds the data file `name`: in $DAKIT_DATA when it is set (and only
 * there), else in the installed data folder (DATADIR/dakit), else in
 * tests/data of the source tree that holds the dakit executable's build
 * folder. 0 with the path, or -1 with a sentence that says where it looked. */
int cli_data_file(const char *name, char *path, size_t len, char *why, size_t wlen);

#endif
