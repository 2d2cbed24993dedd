/* Finding the tools' data files (cli/datafile.h). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/datafile.h"

#ifndef DK_DATA_DIR
#define DK_DATA_DIR "../share/dakit"
#endif

/* Whether path can be read; if so, it is made absolute and plain (no "..")
 * so that the path printed says where the file is. */
static int readable(char *path, size_t len)
{
    char full[PATH_MAX];
    if (access(path, R_OK) != 0)
        return 0;
    if (realpath(path, full) && strlen(full) < len)
        strcpy(path, full);
    return 1;
}

/* The folder of the running executable, or "" when /proc does not say. */
static void exe_dir(char *dir, size_t len)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    dir[0] = '\0';
    if (n <= 0)
        return;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    snprintf(dir, len, "%s", exe);
}

int cli_data_file(const char *name, char *path, size_t len, char *why, size_t wlen)
{
    const char *env = getenv("DAKIT_DATA");
    if (env && *env) {
        snprintf(path, len, "%s/%s", env, name);
        if (readable(path, len))
            return 0;
        snprintf(why, wlen, "data file %s not in $DAKIT_DATA (%s)", name, env);
        return -1;
    }
    char dir[PATH_MAX], installed[PATH_MAX + 64];
    exe_dir(dir, sizeof dir);
    /* DK_DATA_DIR is relative to the executable when the install can move */
    if (DK_DATA_DIR[0] == '/')
        snprintf(installed, sizeof installed, "%s", DK_DATA_DIR);
    else
        snprintf(installed, sizeof installed, "%s/%s", dir, DK_DATA_DIR);
    snprintf(path, len, "%s/%s", installed, name);
    if (readable(path, len))
        return 0;
    /* the build folder lies in the source tree, one to three levels up */
    char up[PATH_MAX + 16];
    snprintf(up, sizeof up, "%s", dir);
    for (int level = 0; dir[0] && level < 4; level++) {
        snprintf(path, len, "%s/tests/data/%s", up, name);
        if (readable(path, len))
            return 0;
        size_t n = strlen(up);
        if (n + 3 >= sizeof up)
            break;
        strcat(up, "/..");
    }
    snprintf(why, wlen,
             "data file %s not found: set DAKIT_DATA to its folder (looked in %s and in tests/data above %s)", name,
             installed, dir[0] ? dir : "the executable");
    return -1;
}
