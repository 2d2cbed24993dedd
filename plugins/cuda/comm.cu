/* dakit cuda plugin: device-side communication through NCCL (dk_comm_ops in
 * dakit/plugin.h), for libdakit-mpi.
 *
 * libnccl.so.2 is opened with dlopen the first time a communicator is
 * asked for, not linked: it is a large library that only distributed runs
 * need, and the plugin must still load where it is not installed (the
 * communicator calls then fail with the reason, and the layer stages
 * through the host). Only nccl.h is needed at build time.
 *
 * Communicators are blocking by default: NCCL then queues a collective in
 * the calling thread, where a non-blocking one hands every call to a
 * thread of its own and costs about six times as much to queue
 * (docs/distributed.md). The layer agrees over MPI right before creation,
 * so every rank comes. Every wait on the device is polled, with
 * ncclCommGetAsyncError, until done, failed, or past the time limit
 * (DAKIT_CUDA_NCCL_TIMEOUT seconds), when the communicator is aborted;
 * DAKIT_CUDA_NCCL_BLOCKING=0 makes non-blocking communicators, whose
 * creation and queuing are polled the same way. */
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nccl.h>

#include "cuda_internal.h"

/* The NCCL entries used, resolved from the library at first use. */
typedef struct nccl_api {
    decltype(&ncclGetVersion) GetVersion;
    decltype(&ncclGetUniqueId) GetUniqueId;
    decltype(&ncclCommInitRank) CommInitRank;
    decltype(&ncclCommInitRankConfig) CommInitRankConfig;
    decltype(&ncclCommGetAsyncError) CommGetAsyncError;
    decltype(&ncclCommAbort) CommAbort;
    decltype(&ncclAllReduce) AllReduce;
    decltype(&ncclSend) Send;
    decltype(&ncclRecv) Recv;
    decltype(&ncclGroupStart) GroupStart;
    decltype(&ncclGroupEnd) GroupEnd;
    decltype(&ncclGetErrorString) GetErrorString;
    decltype(&ncclGetLastError) GetLastError;
    int version;      /* the library's, from ncclGetVersion */
    int nonblocking;  /* the library knows this header's ncclConfig_t */
} nccl_api;

static nccl_api nccl;
static int nccl_loaded;
static char nccl_why[300];
static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;

#define NCCL_LIBRARY "libnccl.so.2"

static void nccl_load(void)
{
    void *h = dlopen(NCCL_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(nccl_why, sizeof nccl_why, "nccl: %s cannot be loaded (%s)", NCCL_LIBRARY, dlerror());
        return;
    }
#define NCCL_SYM(name)                                                                                 \
    do {                                                                                               \
        *(void **)&nccl.name = dlsym(h, "nccl" #name);                                                 \
        if (!nccl.name) {                                                                              \
            snprintf(nccl_why, sizeof nccl_why, "nccl: %s lacks nccl" #name " (too old?)", NCCL_LIBRARY); \
            dlclose(h);                                                                                \
            return;                                                                                    \
        }                                                                                              \
    } while (0)
    NCCL_SYM(GetVersion);
    NCCL_SYM(GetUniqueId);
    NCCL_SYM(CommInitRank);
    NCCL_SYM(CommInitRankConfig);
    NCCL_SYM(CommGetAsyncError);
    NCCL_SYM(CommAbort);
    NCCL_SYM(AllReduce);
    NCCL_SYM(Send);
    NCCL_SYM(Recv);
    NCCL_SYM(GroupStart);
    NCCL_SYM(GroupEnd);
    NCCL_SYM(GetErrorString);
    NCCL_SYM(GetLastError);
#undef NCCL_SYM
    if (nccl.GetVersion(&nccl.version) != ncclSuccess) {
        snprintf(nccl_why, sizeof nccl_why, "nccl: ncclGetVersion failed");
        dlclose(h);
        return;
    }
    /* an older library may refuse this header's config: it then gets
     * blocking communicators, without the time limit */
    nccl.nonblocking = nccl.version >= NCCL_VERSION_CODE;
    nccl_loaded = 1; /* the handle stays open for the life of the process */
}

static bool nccl_ready(dk_msg *msg)
{
    pthread_once(&nccl_once, nccl_load);
    if (!nccl_loaded)
        dk_msg_set(msg, "%s", nccl_why);
    return nccl_loaded;
}

static dk_status nccl_fail(dk_msg *msg, ncclResult_t r, const char *what, ncclComm_t comm)
{
    const char *last = comm ? nccl.GetLastError(comm) : nccl.GetLastError(NULL);
    dk_msg_set(msg, "nccl: %s failed: %s%s%s", what, nccl.GetErrorString(r), last && *last ? ": " : "",
               last ? last : "");
    return r == ncclInvalidArgument || r == ncclInvalidUsage ? DK_ERR_INVALID_ARGUMENT : DK_ERR_BACKEND;
}

typedef struct cuda_comm {
    ncclComm_t nc; /* NULL once aborted */
    int nranks, rank;
} cuda_comm;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double time_limit_s(void)
{
    return (double)dk_tuning_long("DAKIT_CUDA_NCCL_TIMEOUT", 300, 1, 86400);
}

/* Polls until the communicator's pending calls are enqueued (a non-blocking
 * communicator returns ncclInProgress) and, with a stream, until the stream
 * has finished them. Past the limit, or on an asynchronous error, the
 * communicator is aborted (which releases peers waiting on it) and a
 * status returned. */
static dk_status wait_done(cuda_comm *c, cudaStream_t stream, const char *what, dk_msg *msg)
{
    double limit = time_limit_s(), start = now_s();
    for (;;) {
        ncclResult_t a = ncclSuccess;
        ncclResult_t q = nccl.CommGetAsyncError(c->nc, &a);
        if (q != ncclSuccess)
            a = q;
        if (a != ncclSuccess && a != ncclInProgress) {
            dk_status st = nccl_fail(msg, a, what, c->nc);
            nccl.CommAbort(c->nc);
            c->nc = NULL;
            return st;
        }
        if (a == ncclSuccess) {
            if (!stream)
                return DK_OK;
            cudaError_t e = cudaStreamQuery(stream);
            if (e == cudaSuccess)
                return DK_OK;
            if (e != cudaErrorNotReady) {
                dk_status st = dk_cuda_fail(msg, e, what);
                nccl.CommAbort(c->nc);
                c->nc = NULL;
                return st;
            }
        }
        if (now_s() - start > limit) {
            dk_msg_set(msg, "nccl: %s did not finish within %.0f s (DAKIT_CUDA_NCCL_TIMEOUT); a rank never came, so "
                       "the communicator was aborted", what, limit);
            nccl.CommAbort(c->nc);
            c->nc = NULL;
            return DK_ERR_BACKEND;
        }
        sched_yield();
    }
}

/* A call's immediate result: ncclInProgress is a non-blocking communicator
 * at work, not a failure. */
static dk_status issued(cuda_comm *c, ncclResult_t r, const char *what, dk_msg *msg)
{
    if (r == ncclSuccess || r == ncclInProgress)
        return DK_OK;
    dk_status st = nccl_fail(msg, r, what, c->nc);
    nccl.CommAbort(c->nc);
    c->nc = NULL;
    return st;
}

static dk_status cuda_device_key(void *device, char key[DK_COMM_KEY_LEN], dk_msg *msg)
{
    dk_cuda_device *dev = (dk_cuda_device *)device;
    if (!nccl_ready(msg))
        return DK_ERR_NOT_IMPLEMENTED;
    cudaDeviceProp p;
    CUDA_TRY(cudaGetDeviceProperties(&p, dev->ordinal), "cudaGetDeviceProperties");
    int n = snprintf(key, DK_COMM_KEY_LEN, "GPU-");
    for (int i = 0; i < 16 && n < DK_COMM_KEY_LEN - 2; i++)
        n += snprintf(key + n, (size_t)(DK_COMM_KEY_LEN - n), "%02x", (unsigned char)p.uuid.bytes[i]);
    return DK_OK;
}

static dk_status cuda_make_id(void *device, void *id, dk_msg *msg)
{
    (void)device;
    if (!nccl_ready(msg))
        return DK_ERR_NOT_IMPLEMENTED;
    ncclUniqueId u;
    ncclResult_t r = nccl.GetUniqueId(&u);
    if (r != ncclSuccess)
        return nccl_fail(msg, r, "ncclGetUniqueId", NULL);
    memcpy(id, &u, sizeof u);
    return DK_OK;
}

static dk_status cuda_comm_create(void *device, const void *id, int nranks, int rank, void **comm, dk_msg *msg)
{
    dk_cuda_device *dev = (dk_cuda_device *)device;
    if (!nccl_ready(msg))
        return DK_ERR_NOT_IMPLEMENTED;
    dk_status st = dk_cuda_enter(dev, msg);
    if (st != DK_OK)
        return st;
    cuda_comm *c = (cuda_comm *)calloc(1, sizeof *c);
    if (!c) {
        dk_msg_set(msg, "cuda: cannot allocate a communicator record");
        return DK_ERR_OUT_OF_MEMORY;
    }
    c->nranks = nranks;
    c->rank = rank;
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclResult_t r;
    if (nccl.nonblocking && !dk_tuning_long("DAKIT_CUDA_NCCL_BLOCKING", 1, 0, 1)) {
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        r = nccl.CommInitRankConfig(&c->nc, nranks, u, rank, &cfg);
    } else {
        r = nccl.CommInitRank(&c->nc, nranks, u, rank);
    }
    if (r != ncclSuccess && r != ncclInProgress) {
        st = nccl_fail(msg, r, "ncclCommInitRank", c->nc);
        if (c->nc)
            nccl.CommAbort(c->nc);
        free(c);
        return st;
    }
    st = wait_done(c, NULL, "ncclCommInitRank", msg);
    if (st != DK_OK) {
        free(c);
        return st;
    }
    *comm = c;
    return DK_OK;
}

static void cuda_comm_destroy(void *device, void *comm)
{
    dk_cuda_device *dev = (dk_cuda_device *)device;
    cuda_comm *c = (cuda_comm *)comm;
    if (!c)
        return;
    /* ncclCommAbort, not ncclCommDestroy: a local release that never waits
     * for the peers (ncclCommDestroy finalizes, which waits for the whole
     * communicator to be quiescent, and a peer may have gone back to host
     * staging after a failure). Every call here has finished already. */
    if (c->nc && cudaSetDevice(dev->ordinal) == cudaSuccess) {
        cudaStreamSynchronize(dev->stream);
        nccl.CommAbort(c->nc);
    }
    (void)cudaGetLastError();
    free(c);
}

static dk_status usable(cuda_comm *c, dk_cuda_device *dev, dk_msg *msg)
{
    if (!c->nc) {
        dk_msg_set(msg, "nccl: the communicator was aborted after an earlier failure");
        return DK_ERR_BACKEND;
    }
    return dk_cuda_enter(dev, msg);
}

/* Queues the all-reduce on the device's stream; returns once NCCL took it. */
static dk_status issue_all_reduce(dk_cuda_device *dev, cuda_comm *c, dk_cuda_buffer *b, size_t offset, size_t count,
                                  dk_dtype dtype, dk_msg *msg)
{
    size_t es = dtype == DK_F64 ? sizeof(double) : sizeof(float);
    if ((offset + count) * es > b->bytes) {
        dk_msg_set(msg, "nccl: an all-reduce of values [%zu, %zu) exceeds the buffer's %zu bytes", offset,
                   offset + count, b->bytes);
        return DK_ERR_INVALID_ARGUMENT;
    }
    dk_status st = usable(c, dev, msg);
    if (st != DK_OK || count == 0)
        return st;
    void *p = (char *)b->ptr + offset * es;
    st = issued(c, nccl.AllReduce(p, p, count, dtype == DK_F64 ? ncclFloat64 : ncclFloat32, ncclSum, c->nc,
                                  dev->stream),
                "ncclAllReduce", msg);
    return st != DK_OK ? st : wait_done(c, NULL, "ncclAllReduce", msg);
}

static dk_status cuda_all_reduce_sum(void *device, void *comm, void *buffer, size_t offset, size_t count,
                                     dk_dtype dtype, dk_msg *msg)
{
    dk_cuda_device *dev = (dk_cuda_device *)device;
    cuda_comm *c = (cuda_comm *)comm;
    dk_status st = issue_all_reduce(dev, c, (dk_cuda_buffer *)buffer, offset, count, dtype, msg);
    return st != DK_OK || count == 0 ? st : wait_done(c, dev->stream, "ncclAllReduce", msg);
}

static dk_status cuda_all_reduce_sum_queued(void *device, void *comm, void *buffer, size_t offset, size_t count,
                                            dk_dtype dtype, dk_msg *msg)
{
    return issue_all_reduce((dk_cuda_device *)device, (cuda_comm *)comm, (dk_cuda_buffer *)buffer, offset, count,
                            dtype, msg);
}

/* Queues the grouped sends and receives; returns once NCCL took them. */
static dk_status issue_exchange(dk_cuda_device *dev, cuda_comm *c, const dk_comm_transfer *t, int n, dk_msg *msg)
{
    for (int i = 0; i < n; i++) {
        const dk_cuda_buffer *b = (const dk_cuda_buffer *)t[i].buffer;
        if (t[i].peer < 0 || t[i].peer >= c->nranks || t[i].offset + t[i].bytes > b->bytes) {
            dk_msg_set(msg, "nccl: transfer %d (peer %d of %d, bytes [%zu, %zu) of a buffer of %zu)", i, t[i].peer,
                       c->nranks, t[i].offset, t[i].offset + t[i].bytes, b->bytes);
            return DK_ERR_INVALID_ARGUMENT;
        }
    }
    dk_status st = usable(c, dev, msg);
    if (st != DK_OK || n == 0)
        return st;
    /* one group: NCCL matches the sends and receives without ordering them */
    ncclResult_t r = nccl.GroupStart();
    for (int i = 0; i < n && r == ncclSuccess; i++) {
        const dk_cuda_buffer *b = (const dk_cuda_buffer *)t[i].buffer;
        char *p = (char *)b->ptr + t[i].offset;
        r = t[i].recv ? nccl.Recv(p, t[i].bytes, ncclChar, t[i].peer, c->nc, dev->stream)
                      : nccl.Send(p, t[i].bytes, ncclChar, t[i].peer, c->nc, dev->stream);
    }
    ncclResult_t g = nccl.GroupEnd(); /* always closes the group it opened */
    st = issued(c, r != ncclSuccess ? r : g, "a grouped ncclSend/ncclRecv", msg);
    return st != DK_OK ? st : wait_done(c, NULL, "a grouped ncclSend/ncclRecv", msg);
}

static dk_status cuda_exchange(void *device, void *comm, const dk_comm_transfer *t, int n, dk_msg *msg)
{
    dk_cuda_device *dev = (dk_cuda_device *)device;
    cuda_comm *c = (cuda_comm *)comm;
    dk_status st = issue_exchange(dev, c, t, n, msg);
    return st != DK_OK || n == 0 ? st : wait_done(c, dev->stream, "a grouped ncclSend/ncclRecv", msg);
}

static dk_status cuda_exchange_queued(void *device, void *comm, const dk_comm_transfer *t, int n, dk_msg *msg)
{
    return issue_exchange((dk_cuda_device *)device, (cuda_comm *)comm, t, n, msg);
}

static dk_status cuda_comm_wait(void *device, void *comm, dk_msg *msg)
{
    dk_cuda_device *dev = (dk_cuda_device *)device;
    cuda_comm *c = (cuda_comm *)comm;
    dk_status st = usable(c, dev, msg);
    return st != DK_OK ? st : wait_done(c, dev->stream, "queued collectives", msg);
}

extern "C" const dk_comm_queue_ops dk_cuda_comm_queue_ops = {
    .all_reduce_sum = cuda_all_reduce_sum_queued,
    .exchange = cuda_exchange_queued,
    .wait = cuda_comm_wait,
};

extern "C" const dk_comm_ops dk_cuda_comm_ops = {
    .name = "nccl",
    .id_size = sizeof(ncclUniqueId),
    .device_key = cuda_device_key,
    .make_id = cuda_make_id,
    .comm_create = cuda_comm_create,
    .comm_destroy = cuda_comm_destroy,
    .all_reduce_sum = cuda_all_reduce_sum,
    .exchange = cuda_exchange,
};
