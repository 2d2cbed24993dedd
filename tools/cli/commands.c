/* The dakit command's usage and its table of subcommands (cli/dakit.c is
 * only main, so that tests and the option parser's fuzz target can run the
 * whole command line). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/netcdf.h"

static void usage(FILE *f)
{
    fprintf(f,
            "dakit %s: Gaussian filters, EnKF, LETKF, k-means and GBEES for data assimilation on GPUs and CPUs\n"
            "\n"
            "usage: dakit <command> [options]   (dakit <command> --help for its options)\n"
            "\n"
            "commands:\n"
            "  info        list the plugins found, their devices and algorithms, and why any was refused\n"
            "  gauss       Gaussian filtering of a .npy or netCDF field by recursive filters (rf, deriche, vyv)\n"
            "  kmeans      k-means of .npy points, or cluster a RADOLAN or ODIM radar scan into a map\n"
            "  enkf        localized ensemble covariance product, EnKF analysis, Lorenz-96 twin experiment\n"
            "  letkf       local ensemble transform Kalman filter analysis, Lorenz-96 twin experiment\n"
            "  gbees       propagate a probability density with GBEES (Fokker-Planck on a sparse grid)\n"
            "  gbees-plot  draw the 2-D marginals of a gbees run's densities\n"
            "  gbees-mc    check a gbees run against a Monte Carlo ensemble (Bhattacharyya coefficient)\n"
            "  conform     run the conformance cases on backends against the serial reference\n"
            "  bench       time the benchmark cases side by side on backends\n"
            "  demo        smooth a noisy field on the best backend, check it, and draw a picture\n"
            "\n"
            "environment:\n"
            "  DAKIT_BACKEND=cuda|opencl|cpu|auto or a comma list (order of preference; default auto)\n"
            "  DAKIT_DEVICE=N        device index within the backend (default 0)\n"
            "  DAKIT_PLUGIN_PATH     extra folders to search for plugins (colon separated)\n"
            "  DAKIT_LOG=error|warn|info|debug   diagnostics on stderr from this level up (default warn)\n",
            DK_VERSION_STRING);
}

int dakit_main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("dakit %s\n", DK_VERSION_STRING);
        return 0;
    }
    array_set_command_line(argc, argv); /* the history line of netCDF outputs */
    static const struct {
        const char *name;
        int (*run)(int, char **);
    } commands[] = {{"info", cmd_info},       {"gauss", cmd_gauss}, {"kmeans", cmd_kmeans}, {"conform", cmd_conform},
                    {"bench", cmd_bench},     {"demo", cmd_demo},
                    {"gbees", cmd_gbees}, {"gbees-plot", cmd_gbees_plot}, {"gbees-mc", cmd_gbees_mc}, {"enkf", cmd_enkf},
                    {"letkf", cmd_letkf}};
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    return cli_error(NULL, 2, "unknown command '%s' (dakit --help lists them)", argv[1]);
}
