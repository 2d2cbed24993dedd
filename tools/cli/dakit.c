/* dakit: the command line. Each subcommand lives with its part of tools/;
 * cli/commands.h says where, cli/commands.c dispatches. */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli/cli.h"

int main(int argc, char **argv)
{
    /* past a file size limit (ulimit -f) a write fails with EFBIG, which the
     * writers report, instead of the process dying half-way through a file */
    signal(SIGXFSZ, SIG_IGN);
    /* this program links OpenMP (gbees-mc), whose runtime read
     * OMP_WAIT_POLICY before main: to give it, and the cpu plugin, the
     * passive waiting libdakit chooses for shared nodes (docs/tuning.md),
     * the program starts itself once more with the variable set */
    if (!getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        execv("/proc/self/exe", argv);
        /* no /proc: go on with the runtime's default */
    }
    return dakit_main(argc, argv);
}
