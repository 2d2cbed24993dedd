/* dakit letkf l96: the Lorenz-96 twin experiment of the LETKF (letkf/l96.c). */
#ifndef DAKIT_TOOLS_LETKF_L96_H
#define DAKIT_TOOLS_LETKF_L96_H

#include <stdio.h>

/* argv[0] is "l96"; returns the exit status. */
int letkf_l96(int argc, char **argv);
/* Its usage text (dakit letkf --help prints it too, for the man page). */
void letkf_l96_usage(FILE *f);

#endif
