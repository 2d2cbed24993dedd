/* dakit: the command line. Each subcommand lives with its part of tools/;
 * cli/commands.h says where, cli/commands.c dispatches. */
#include <signal.h>

#include "cli/cli.h"

int main(int argc, char **argv)
{
    /* past a file size limit (ulimit -f) a write fails with EFBIG, which the
     * writers report, instead of the process dying half-way through a file */
    signal(SIGXFSZ, SIG_IGN);
    return dakit_main(argc, argv);
}
