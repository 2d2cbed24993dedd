/* What the distributed tests share: the rank and size, agreement over all
 * ranks, the check that a failure is the same on every rank, and the
 * start and end of a test program (skip with 77 when the backend or its
 * algorithm is absent on any rank, an alarm so that a rank left waiting
 * ends the run instead of hanging it). */
#ifndef DAKIT_TESTS_MPI_CHECK_H
#define DAKIT_TESTS_MPI_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dakit/mpi.h>

static int rank, size;
static int failures;

static int all_ranks(int ok)
{
    int all;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    return all;
}

static uint64_t mpi_check_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3u;
    return h;
}

/* Opens one of the build's test plugins (one host "device" each): a
 * DAKIT_DEVICE that picks this rank's GPU for the backend under test must
 * not apply to them, so it is set aside for the call. */
__attribute__((unused)) static dk_status open_test_plugin(const char *name, dk_context **ctx)
{
    const char *dev = getenv("DAKIT_DEVICE");
    char *kept = dev ? strdup(dev) : NULL;
    unsetenv("DAKIT_DEVICE");
    dk_status st = dk_context_create(name, ctx);
    if (kept) {
        setenv("DAKIT_DEVICE", kept, 1);
        free(kept);
    }
    return st;
}

/* A collective call that must fail on every rank with status want and the
 * same sentence, which contains `contains`. */
__attribute__((unused)) static void expect_failure(const char *name, dk_status st, dk_status want, const char *contains)
{
    const char *msg = dk_mpi_last_error();
    uint64_t v[4] = {(uint64_t)st, mpi_check_hash(msg), ~(uint64_t)st, ~mpi_check_hash(msg)}, r[4];
    MPI_Allreduce(v, r, 4, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    int same = r[0] == ~r[2] && r[1] == ~r[3];
    int ok = all_ranks(st == want && strstr(msg, contains) != NULL) && same;
    if (rank == 0)
        printf("%-4s %s: every rank: %s%s: %s\n", ok ? "ok" : "FAIL", name, dk_status_string(st),
               same ? " (the same on every rank)" : " (NOT the same on every rank)", msg);
    else if (!ok)
        fprintf(stderr, "rank %d: %s: %s: %s\n", rank, name, dk_status_string(st), msg);
    failures += !ok;
}

/* Starts MPI and opens backend argv[1] (default cpu) on every rank. has_algo
 * (NULL: any) says whether the context implements the algorithm under test.
 * Returns the context, or NULL when the test is to exit with *code (77: a
 * skip, with the reason printed). `test_mpi_X --skip REASON` skips at once. */
static dk_context *mpi_test_begin(int *argc, char ***argv, const char *const *(*has_algo)(const dk_context *),
                                  int *code)
{
    *code = 77;
    if (*argc > 2 && !strcmp((*argv)[1], "--skip")) {
        printf("skipped: %s\n", (*argv)[2]);
        return NULL;
    }
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    alarm(240);
    const char *backend = *argc > 1 ? (*argv)[1] : "cpu";
    dk_context *ctx = NULL;
    dk_status st = dk_context_create(backend, &ctx);
    int have = st == DK_OK && (!has_algo || has_algo(ctx) != NULL);
    if (!all_ranks(have)) {
        if (rank == 0)
            printf("skipped: backend %s %s here%s%s\n", backend,
                   st != DK_OK ? "is not available" : "lacks the algorithm (or not on every rank)",
                   st != DK_OK ? ": " : "", st != DK_OK ? dk_last_error(NULL) : "");
        dk_context_destroy(ctx);
        MPI_Finalize();
        return NULL;
    }
    if (rank == 0)
        printf("%d rank(s), backend %s (%s)\n", size, dk_context_backend(ctx), dk_context_device(ctx));
    return ctx;
}

/* The plan's transport (dk_mpi_plan_transport) is the same on every rank
 * and is what the backend, the rank count and DAKIT_MPI_COMM call for:
 * host staging where the backend offers no device-side communication, at
 * one rank, or under DAKIT_MPI_COMM=host; the device path under
 * DAKIT_MPI_COMM=device where the backend offers it (unless its library
 * cannot be loaded here); with several ranks, the device path or host
 * staging with the reason (two ranks on one GPU). */
__attribute__((unused)) static void check_transport(dk_context *ctx, const dk_mpi_plan *plan)
{
    const char *t = dk_mpi_plan_transport(plan), *mode = getenv("DAKIT_MPI_COMM");
    char comm[64] = "";
    dk_backend_info info;
    for (int i = 0; i < dk_backend_count(); i++)
        if (dk_backend_get(i, &info) == DK_OK && !strcmp(info.name, dk_context_backend(ctx)))
            snprintf(comm, sizeof comm, "%s", info.comm);
    int host = !strncmp(t, "host (MPI): ", 12), device = !strncmp(t, "device (", 8), ok;
    if (mode && !strcmp(mode, "host"))
        ok = host && strstr(t, "DAKIT_MPI_COMM=host");
    else if (!comm[0] && (size > 1 || (mode && !strcmp(mode, "device"))))
        ok = host && strstr(t, "offers no device-side communication");
    else if (size == 1 && !(mode && !strcmp(mode, "device")))
        ok = host && strstr(t, "one rank");
    else if (size == 1)
        ok = device || (host && strstr(t, "cannot be loaded"));
    else
        ok = device || host;
    uint64_t v[2] = {mpi_check_hash(t), ~mpi_check_hash(t)}, r[2];
    MPI_Allreduce(v, r, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    ok = all_ranks(ok) && r[0] == ~r[1];
    if (rank == 0)
        printf("%-4s transport (backend comm: %s, DAKIT_MPI_COMM=%s): %s\n", ok ? "ok" : "FAIL",
               comm[0] ? comm : "none", mode ? mode : "", t);
    failures += !ok;
}

/* Closes the context and MPI; the exit status: 1 when any rank failed. */
static int mpi_test_end(dk_context *ctx)
{
    dk_context_destroy(ctx);
    if (rank == 0)
        printf("%s: %d failure(s)\n", failures ? "FAILED" : "passed", failures);
    int any = !all_ranks(failures == 0);
    MPI_Finalize();
    return any;
}

#endif
