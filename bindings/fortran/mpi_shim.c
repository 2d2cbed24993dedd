/* The C side of the module dakit_mpi: the communicator a Fortran program
 * holds (mpi_f08's type(MPI_Comm), whose MPI_VAL is the Fortran handle)
 * becomes the MPI_Comm libdakit-mpi takes; and the module's own sentences
 * (its checks of the caller's arrays, agreed over the ranks), kept per
 * thread as libdakit-mpi keeps its own. */
#include <stdio.h>

#include <dakit/mpi.h>

dk_status dkf_mpi_decompose(MPI_Fint comm, int ndim, const size_t *shape, const int *ranks_per_axis,
                            dk_mpi_part *part)
{
    return dk_mpi_decompose(MPI_Comm_f2c(comm), ndim, shape, ranks_per_axis, part);
}

dk_status dkf_mpi_gauss_plan_create(dk_context *ctx, MPI_Fint comm, const dk_gauss_desc *global,
                                    const dk_mpi_part *part, dk_mpi_plan **plan)
{
    return dk_mpi_gauss_plan_create(ctx, MPI_Comm_f2c(comm), global, part, plan);
}

dk_status dkf_mpi_enkf_plan_create(dk_context *ctx, MPI_Fint comm, const dk_enkf_desc *global,
                                   const dk_mpi_part *part, dk_mpi_plan **plan)
{
    return dk_mpi_enkf_plan_create(ctx, MPI_Comm_f2c(comm), global, part, plan);
}

dk_status dkf_mpi_kmeans_plan_create(dk_context *ctx, MPI_Fint comm, const dk_kmeans_desc *global,
                                     const dk_mpi_part *part, dk_mpi_plan **plan)
{
    return dk_mpi_kmeans_plan_create(ctx, MPI_Comm_f2c(comm), global, part, plan);
}

static _Thread_local char message[768];

void dkf_mpi_error_set(const char *text)
{
    snprintf(message, sizeof message, "%s", text);
}

void dkf_mpi_error_clear(void)
{
    message[0] = '\0';
}

/* The module's own sentence when the calling thread's last dk_mpi_ call
 * failed in its checks, else NULL (libdakit-mpi's sentence applies). */
const char *dkf_mpi_error_get(void)
{
    return message[0] ? message : NULL;
}
