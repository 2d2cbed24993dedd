/* Links dakit::mpi (libdakit-mpi and MPI) and calls it: one process, no
 * mpirun needed. */
#include <stdio.h>

#include <dakit/mpi.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("mpi_hello: %d rank(s); dk_mpi_last_error: %s\n", size, dk_mpi_last_error());
    MPI_Finalize();
    return 0;
}
