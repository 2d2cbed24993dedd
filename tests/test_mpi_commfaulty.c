/* A host-memory plugin ("commfaulty") that offers device-side communication
 * whose communicator cannot be made on the last rank, and whose devices
 * all carry the same key when DAKIT_TEST_COMM_KEY=same: the distributed
 * test (test_mpi_comm) shows that libdakit-mpi then stages through the
 * host, on every rank alike, without a hang. It never moves data: its
 * all-reduce and exchange fail, and a plan never reaches them. Its kmeans
 * table exists so that a contiguity plan (labelled on the host by the
 * layer) can be made; the table's own plans are refused. */
#include <unistd.h>

#include "broken/common.h"

#include <dakit/kmeans.h>

#define ID_BYTES 32

static dk_status c_key(void *device, char key[DK_COMM_KEY_LEN], dk_msg *msg)
{
    (void)device;
    (void)msg;
    const char *mode = getenv("DAKIT_TEST_COMM_KEY");
    if (mode && !strcmp(mode, "same"))
        snprintf(key, DK_COMM_KEY_LEN, "commfaulty-one-device");
    else
        snprintf(key, DK_COMM_KEY_LEN, "commfaulty-%ld", (long)getpid());
    return DK_OK;
}

static dk_status c_make_id(void *device, void *id, dk_msg *msg)
{
    (void)device;
    (void)msg;
    for (int i = 0; i < ID_BYTES; i++)
        ((unsigned char *)id)[i] = (unsigned char)(0xa5 ^ i);
    return DK_OK;
}

static dk_status c_create(void *device, const void *id, int nranks, int rank, void **comm, dk_msg *msg)
{
    (void)device;
    for (int i = 0; i < ID_BYTES; i++)
        if (((const unsigned char *)id)[i] != (unsigned char)(0xa5 ^ i)) {
            dk_msg_set(msg, "commfaulty: rank %d did not get rank 0's id", rank);
            return DK_ERR_BACKEND;
        }
    if (rank == nranks - 1) {
        dk_msg_set(msg, "commfaulty: the communicator failed on the last rank (simulated)");
        return DK_ERR_BACKEND;
    }
    *comm = malloc(1);
    return DK_OK;
}

static void c_destroy(void *device, void *comm)
{
    (void)device;
    free(comm);
}

static dk_status c_all_reduce(void *device, void *comm, void *buffer, size_t offset, size_t count, dk_dtype dtype,
                              dk_msg *msg)
{
    (void)device, (void)comm, (void)buffer, (void)offset, (void)count, (void)dtype;
    dk_msg_set(msg, "commfaulty: moves no data");
    return DK_ERR_BACKEND;
}

static dk_status c_exchange(void *device, void *comm, const dk_comm_transfer *t, int n, dk_msg *msg)
{
    (void)device, (void)comm, (void)t, (void)n;
    dk_msg_set(msg, "commfaulty: moves no data");
    return DK_ERR_BACKEND;
}

static const dk_comm_ops c_comm = {
    .name = "commfaulty",
    .id_size = ID_BYTES,
    .device_key = c_key,
    .make_id = c_make_id,
    .comm_create = c_create,
    .comm_destroy = c_destroy,
    .all_reduce_sum = c_all_reduce,
    .exchange = c_exchange,
};

static dk_status k_plan_create(void *device, const dk_kmeans_setup *setup, void **plan, dk_msg *msg)
{
    (void)device, (void)setup, (void)plan;
    dk_msg_set(msg, "commfaulty: no kmeans plans");
    return DK_ERR_NOT_IMPLEMENTED;
}

static dk_status k_execute(void *plan, const void *points, const void *mask, const void *init, void *labels,
                           void *centroids, dk_kmeans_result *result, dk_msg *msg)
{
    (void)plan, (void)points, (void)mask, (void)init, (void)labels, (void)centroids, (void)result;
    dk_msg_set(msg, "commfaulty: no kmeans plans");
    return DK_ERR_NOT_IMPLEMENTED;
}

static void k_plan_destroy(void *plan) { (void)plan; }

static const char *const k_variants[] = {"none", NULL};
static const dk_kmeans_ops c_kmeans = {
    .variants = k_variants,
    .plan_create = k_plan_create,
    .execute = k_execute,
    .plan_destroy = k_plan_destroy,
};

DK_PLUGIN_EXPORT const dk_plugin *DK_PLUGIN_ENTRY(void)
{
    static dk_plugin desc = BROKEN_PLUGIN("commfaulty", DK_PLUGIN_ABI_VERSION, b_probe_one);
    desc.priority = 0;
    desc.kmeans = &c_kmeans;
    desc.comm = &c_comm;
    return &desc;
}
