/* The subcommands of dakit (cli/dakit.c dispatches on the name). Each takes
 * its own argv, argv[0] being the subcommand's name, and returns the exit
 * status: 0 success, 1 failure, 2 bad usage (conform also 4 and 77). */
#ifndef DAKIT_TOOLS_CLI_COMMANDS_H
#define DAKIT_TOOLS_CLI_COMMANDS_H

int cmd_info(int argc, char **argv);       /* cli/info.c */
int cmd_demo(int argc, char **argv);       /* cli/demo.c */
int cmd_conform(int argc, char **argv);    /* harness/conform.c */
int cmd_bench(int argc, char **argv);      /* harness/bench.c */
int cmd_gauss(int argc, char **argv);      /* gauss/cmd.c */
int cmd_enkf(int argc, char **argv);       /* enkf/cmd.c */
int cmd_letkf(int argc, char **argv);      /* letkf/cmd.c */
int cmd_kmeans(int argc, char **argv);     /* kmeans/cmd.c */
int cmd_gbees(int argc, char **argv);      /* gbees/cmd.c */
int cmd_gbees_plot(int argc, char **argv); /* gbees/cmd.c */
int cmd_gbees_mc(int argc, char **argv);   /* gbees/mc.c */

#endif
