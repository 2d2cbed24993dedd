#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"

int cmd_info(int argc, char **argv)
{
    static const struct option option_table[] = {CLI_FLAG("help"), {0}};
    cli_args args = {.cmd = "info", .argc = argc, .argv = argv, .options = option_table};
    int more = cli_next(&args);
    if (more == 1) {
        printf("usage: dakit info\n\nLists every plugin found, its version, devices, algorithms and\n"
               "their variants, and the reason any plugin was refused. Each plugin is probed\n"
               "in a child process, so one whose probe crashes or hangs is listed as refused.\n");
        return 0;
    }
    if (more)
        return more;
    if (cli_options_only)
        return 0;
    int n;
    const dk_backend_info *list = cli_backends(&n);
    printf("dakit %s: %d plugin(s) found\n", DK_VERSION_STRING, n);
    int usable = 0;
    for (int i = 0; i < n; i++) {
        const dk_backend_info *b = &list[i];
        if (b->usable) {
            usable++;
            printf("\n%s %s (priority %d)\n  file: %s\n  algorithms: %s\n", b->name, b->version,
                   b->priority, b->path, b->algorithms[0] ? b->algorithms : "none");
            static const char *algos[] = {"gauss", "enkf", "kmeans", "gbees", "letkf"};
            for (int a = 0; a < 5; a++)
                if (b->variants[a][0])
                    printf("    %-7s variants: %s (--variant; default: %s)\n", algos[a], b->variants[a],
                           a == 1 ? "the cost model's pick" : "the first");
            if (b->comm[0])
                printf("  device-side comm: %s (libdakit-mpi reduces on the devices when each rank has its own)\n",
                       b->comm);
            else
                printf("  device-side comm: none (libdakit-mpi stages through host memory and MPI)\n");
            int devices = b->device_count < DK_MAX_DEVICES ? b->device_count : DK_MAX_DEVICES;
            for (int d = 0; d < devices; d++) {
                static const char *kinds[] = {"", ", cpu", ", gpu", ", accelerator"};
                unsigned k = (unsigned)b->devices[d].kind;
                printf("  device %d: %.*s%s", d, (int)sizeof b->devices[d].name, b->devices[d].name,
                       k < 4 ? kinds[k] : "");
                if (b->devices[d].memory_bytes)
                    printf(" (%.1f GiB)", (double)b->devices[d].memory_bytes / (1 << 30));
                printf("\n");
            }
        } else {
            printf("\n%s refused\n  file: %s\n  reason: %s\n", b->name[0] ? b->name : "(unnamed)",
                   b->path[0] ? b->path : "(unknown)", b->reason);
        }
    }
    if (!n)
        printf("\nno plugin found: set DAKIT_PLUGIN_PATH to the folder holding dakit-*.so\n");
    char backend[64], device[192], why[1200];
    if (cli_auto_pick(backend, sizeof backend, device, sizeof device, why, sizeof why) == 0)
        printf("\nauto selection picks: %s (%s)\n", backend, device);
    else
        printf("\nauto selection fails: %s\n", why);
#ifdef DK_TOOLS_MPI
    printf("distributed (libdakit-mpi, under mpirun): gauss, enkf cov and analysis, kmeans; gbees runs on one "
           "device\n");
#else
    printf("distributed: not built (no MPI when dakit was configured); gbees runs on one device in any case\n");
#endif
    return usable ? 0 : 1;
}
