/* nccl-probe: what a small NCCL all-reduce costs between kernels, with a
 * blocking and a non-blocking communicator (the choice the cuda plugin's
 * DAKIT_CUDA_NCCL_BLOCKING makes), one rank a GPU. For each it prints, for
 * all-reduces of 145 and of 3 float64 (kmeans_weak's sums; a status flag):
 *   - 200 all-reduces back to back: the time a call on the device and the
 *     host time to queue one;
 *   - 21 kernels of about 90 us (a kmeans iteration's phases) with and
 *     without an all-reduce after each: what the collectives add.
 * Build and run (not part of the Meson build: it needs MPI and NCCL only):
 *   nvcc -O2 -std=c++17 -o nccl-probe tools/multi/nccl-probe.cu \
 *       $(mpicc --showme:compile) $(mpicc --showme:link) -lnccl
 *   NCCL_NVLS_ENABLE=0 mpirun -n 2 ./nccl-probe */
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

__global__ void spin(long long cycles)
{
    const long long t = clock64();
    while (clock64() - t < cycles) {
    }
}

/* A non-blocking communicator's call is queued once this says so. */
static void until_queued(ncclComm_t c)
{
    ncclResult_t a;
    do {
        ncclCommGetAsyncError(c, &a);
        if (a == ncclInProgress)
            sched_yield();
    } while (a == ncclInProgress);
    if (a != ncclSuccess) {
        fprintf(stderr, "nccl-probe: %s\n", ncclGetErrorString(a));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

/* Queues one all-reduce; returns the host seconds it took. */
static double all_reduce(ncclComm_t c, double *buf, int count, cudaStream_t s)
{
    const double t = MPI_Wtime();
    ncclResult_t r = ncclAllReduce(buf, buf, count, ncclFloat64, ncclSum, c, s);
    if (r == ncclInProgress)
        until_queued(c);
    else if (r != ncclSuccess) {
        fprintf(stderr, "nccl-probe: ncclAllReduce: %s\n", ncclGetErrorString(r));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return MPI_Wtime() - t;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, version, clock_khz;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    cudaSetDevice(rank);
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, rank);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    double *buf;
    cudaMalloc(&buf, 4096 * sizeof(double));
    cudaMemset(buf, 0, 4096 * sizeof(double));
    ncclGetVersion(&version);
    if (rank == 0)
        printf("NCCL %d, %d ranks, one GPU each\n", version, size);
    const long long cycles = (long long)(90e-6 * clock_khz * 1e3);
    for (int blocking = 1; blocking >= 0; blocking--) {
        ncclUniqueId id;
        if (rank == 0)
            ncclGetUniqueId(&id);
        MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
        ncclComm_t c;
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = blocking;
        if (ncclCommInitRankConfig(&c, size, id, rank, &cfg) == ncclInProgress)
            until_queued(c);
        const char *kind = blocking ? "blocking    " : "non-blocking";
        for (int count : {145, 3}) {
            for (int i = 0; i < 20; i++) /* connections and warm-up */
                all_reduce(c, buf, count, s);
            spin<<<1, 1, 0, s>>>(cycles);
            cudaStreamSynchronize(s);
            MPI_Barrier(MPI_COMM_WORLD);
            const int calls = 200;
            double queue = 0, t0 = MPI_Wtime();
            for (int i = 0; i < calls; i++)
                queue += all_reduce(c, buf, count, s);
            cudaStreamSynchronize(s);
            const double back_to_back = (MPI_Wtime() - t0) / calls;
            float ms[2];
            for (int with = 0; with < 2; with++) {
                MPI_Barrier(MPI_COMM_WORLD);
                cudaEvent_t e0, e1;
                cudaEventCreate(&e0);
                cudaEventCreate(&e1);
                cudaEventRecord(e0, s);
                for (int i = 0; i < 21; i++) {
                    spin<<<1, 1, 0, s>>>(cycles);
                    if (with)
                        all_reduce(c, buf, count, s);
                }
                cudaEventRecord(e1, s);
                cudaEventSynchronize(e1);
                cudaEventElapsedTime(&ms[with], e0, e1);
                cudaEventDestroy(e0);
                cudaEventDestroy(e1);
            }
            if (rank == 0)
                printf("%s %3d float64: back to back %6.1f us a call (queued in %6.1f us); "
                       "21 kernels %.3f ms, with an all-reduce after each %.3f ms (+%.1f us each)\n",
                       kind, count, back_to_back * 1e6, queue / calls * 1e6, ms[0], ms[1],
                       (ms[1] - ms[0]) * 1e3 / 21);
        }
        cudaStreamSynchronize(s);
        ncclCommAbort(c);
    }
    cudaFree(buf);
    MPI_Finalize();
    return 0;
}
