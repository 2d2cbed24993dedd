/* dakit letkf l96: the Lorenz-96 twin experiment of the LETKF (letkf/l96.c). */
#ifndef DAKIT_TOOLS_LETKF_L96_H
#define DAKIT_TOOLS_LETKF_L96_H

/* argv[0] is "l96"; returns the exit status. */
int letkf_l96(int argc, char **argv);

#endif
