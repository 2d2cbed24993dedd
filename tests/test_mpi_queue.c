/* A host-memory plugin ("mpiqueue") with device-side communication that
 * queues (dk_comm_ops and dk_comm_queue_ops over MPI: on a host "device" a
 * queued collective runs at once, and wait has nothing left to wait for),
 * and gauss rf with execute_halo: the distributed test gives it to every
 * rank so that the path a GPU takes with NCCL (sends straight from the
 * box, halos received in place, the outcome agreed while the queued work
 * runs) runs without a GPU. Its filter is the K-iterated rf pair of
 * docs/plugins.md, a line at a time; execute_halo fails (simulated) while
 * DAKIT_TEST_QUEUE_FAIL is set in the process, to show that failure come
 * back as one status on every rank.
 * While DAKIT_TEST_QUEUE_COMM_FAIL is set its exchanges fail and abort the
 * communicator (every later collective on it fails too, as on NCCL).
 * While DAKIT_TEST_QUEUE_ONE_COMM is set it refuses a second communicator
 * in the process: later plans over the same ranks must reuse the one the
 * context keeps. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "broken/common.h"

#define ID_BYTES 16

/* ---- communication over MPI ---- */

static dk_status q_key(void *device, char key[DK_COMM_KEY_LEN], dk_msg *msg)
{
    (void)device;
    (void)msg;
    snprintf(key, DK_COMM_KEY_LEN, "mpiqueue-%ld", (long)getpid()); /* a device a process */
    return DK_OK;
}

static dk_status q_make_id(void *device, void *id, dk_msg *msg)
{
    (void)device;
    (void)msg;
    memset(id, 0x5a, ID_BYTES);
    return DK_OK;
}

/* A communicator: MPI_COMM_WORLD duplicated for the plugin's own
 * messages, and whether a collective on it failed. */
typedef struct qcomm {
    MPI_Comm comm;
    int failed;
} qcomm;

/* The layer calls it on every rank of the plan's communicator: in the test
 * that is MPI_COMM_WORLD. */
static dk_status q_create(void *device, const void *id, int nranks, int rank, void **comm, dk_msg *msg)
{
    (void)device;
    (void)id;
    int size, me;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    static int made;
    if (made && getenv("DAKIT_TEST_QUEUE_ONE_COMM")) {
        dk_msg_set(msg, "mpiqueue: communicator %d of this process asked for (DAKIT_TEST_QUEUE_ONE_COMM: one is kept)",
                   made + 1);
        return DK_ERR_BACKEND;
    }
    qcomm *c = calloc(1, sizeof *c);
    if (!c || size != nranks || me != rank) {
        free(c);
        dk_msg_set(msg, "mpiqueue: communicators other than MPI_COMM_WORLD are not offered");
        return DK_ERR_NOT_IMPLEMENTED;
    }
    made++;
    MPI_Comm_dup(MPI_COMM_WORLD, &c->comm);
    *comm = c;
    return DK_OK;
}

static void q_destroy(void *device, void *comm)
{
    (void)device;
    if (comm) {
        MPI_Comm_free(&((qcomm *)comm)->comm);
        free(comm);
    }
}

/* A communicator that failed stays failed, as NCCL's aborted ones do. */
static int q_failed(qcomm *c, dk_msg *msg)
{
    if (c->failed)
        dk_msg_set(msg, "mpiqueue: this communicator was aborted by an earlier failure");
    return c->failed;
}

static dk_status q_all_reduce(void *device, void *comm, void *buffer, size_t offset, size_t count, dk_dtype dtype,
                              dk_msg *msg)
{
    (void)device;
    qcomm *c = comm;
    if (q_failed(c, msg))
        return DK_ERR_BACKEND;
    size_t es = dtype == DK_F64 ? 8 : 4;
    MPI_Allreduce(MPI_IN_PLACE, (char *)buffer + offset * es, (int)count, dtype == DK_F64 ? MPI_DOUBLE : MPI_FLOAT,
                  MPI_SUM, c->comm);
    return DK_OK;
}

static dk_status q_exchange(void *device, void *comm, const dk_comm_transfer *t, int n, dk_msg *msg)
{
    (void)device;
    qcomm *c = comm;
    if (q_failed(c, msg))
        return DK_ERR_BACKEND;
    if (getenv("DAKIT_TEST_QUEUE_COMM_FAIL")) {
        c->failed = 1;
        dk_msg_set(msg, "mpiqueue: the exchange failed (simulated); the communicator is aborted");
        return DK_ERR_BACKEND;
    }
    MPI_Request *r = malloc((size_t)(n + 1) * sizeof *r);
    if (!r) {
        dk_msg_set(msg, "mpiqueue: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    for (int k = 0; k < n; k++) {
        char *at = (char *)t[k].buffer + t[k].offset;
        if (t[k].recv)
            MPI_Irecv(at, (int)t[k].bytes, MPI_BYTE, t[k].peer, 0, c->comm, &r[k]);
        else
            MPI_Isend(at, (int)t[k].bytes, MPI_BYTE, t[k].peer, 0, c->comm, &r[k]);
    }
    MPI_Waitall(n, r, MPI_STATUSES_IGNORE);
    free(r);
    return DK_OK;
}

static dk_status q_wait(void *device, void *comm, dk_msg *msg)
{
    (void)device, (void)comm, (void)msg;
    return DK_OK;
}

static const dk_comm_ops q_comm = {
    .name = "mpiqueue",
    .id_size = ID_BYTES,
    .device_key = q_key,
    .make_id = q_make_id,
    .comm_create = q_create,
    .comm_destroy = q_destroy,
    .all_reduce_sum = q_all_reduce,
    .exchange = q_exchange,
};

static const dk_comm_queue_ops q_queue = {
    .all_reduce_sum = q_all_reduce,
    .exchange = q_exchange,
    .wait = q_wait,
};

/* Row by row: the exchange packs and unpacks with it. */
static dk_status q_copy_box(void *device, void *dst, const void *src, const dk_box_copy *b, dk_msg *msg)
{
    (void)device;
    (void)msg;
    size_t row = b->count[2] * b->esize;
    for (size_t i = 0; i < b->count[0]; i++)
        for (size_t j = 0; j < b->count[1]; j++) {
            size_t s = ((b->src_lo[0] + i) * b->src_shape[1] + b->src_lo[1] + j) * b->src_shape[2] + b->src_lo[2];
            size_t d = ((b->dst_lo[0] + i) * b->dst_shape[1] + b->dst_lo[1] + j) * b->dst_shape[2] + b->dst_lo[2];
            memcpy((char *)dst + b->dst_offset + d * b->esize, (const char *)src + b->src_offset + s * b->esize, row);
        }
    return DK_OK;
}

/* ---- gauss rf, in float64 a line at a time ---- */

static dk_status q_plan_create(void *device, const dk_gauss_setup *setup, void **plan, dk_msg *msg)
{
    (void)device;
    if (setup->desc.method != DK_GAUSS_RF || setup->desc.mode != DK_GAUSS_EXACT) {
        dk_msg_set(msg, "mpiqueue: exact rf only");
        return DK_ERR_NOT_IMPLEMENTED;
    }
    *plan = (void *)setup;
    return DK_OK;
}

static double get(const void *p, dk_dtype t, size_t k)
{
    return t == DK_F64 ? ((const double *)p)[k] : (double)((const float *)p)[k];
}

static void put(void *p, dk_dtype t, size_t k, double v)
{
    if (t == DK_F64)
        ((double *)p)[k] = v;
    else
        ((float *)p)[k] = (float)v;
}

/* K passes of the causal and anticausal pair over w[0, m), the boundary
 * rule at both ends. */
static void rf_line(double *w, size_t m, double alpha, int K, int constant)
{
    double beta = 1 - alpha;
    for (int it = 0; it < K; it++) {
        double u = w[m - 1], p = constant ? w[0] : 0;
        for (size_t i = 0; i < m; i++)
            w[i] = p = alpha * p + beta * w[i];
        double s = constant ? u + (p - u) / (1 + alpha) : beta * p;
        w[m - 1] = s;
        for (size_t i = m - 1; i-- > 0;)
            w[i] = s = alpha * s + beta * w[i];
    }
}

/* Filters in along axis into out, each line continued by lc values of lo
 * and uc of up (arrays of the box's shape with lc, uc values along axis). */
static dk_status filter_axis(const dk_gauss_setup *s, int axis, const void *in, void *out, const void *lo,
                             size_t lc, const void *up, size_t uc, dk_msg *msg)
{
    const dk_gauss_desc *d = &s->desc;
    dk_axis_view v = dk_axis_view_of(d, axis);
    size_t m = lc + v.n + uc;
    double *w = malloc((m ? m : 1) * sizeof *w);
    if (!w) {
        dk_msg_set(msg, "mpiqueue: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    for (size_t o = 0; o < v.outer; o++)
        for (size_t j = 0; j < v.inner; j++) {
            for (size_t i = 0; i < lc; i++)
                w[i] = get(lo, d->dtype, (o * lc + i) * v.inner + j);
            for (size_t i = 0; i < v.n; i++)
                w[lc + i] = get(in, d->dtype, (o * v.n + i) * v.inner + j);
            for (size_t i = 0; i < uc; i++)
                w[lc + v.n + i] = get(up, d->dtype, (o * uc + i) * v.inner + j);
            rf_line(w, m, s->alpha[axis], d->K, d->boundary == DK_BOUNDARY_CONSTANT);
            for (size_t i = 0; i < v.n; i++)
                put(out, d->dtype, (o * v.n + i) * v.inner + j, w[lc + i]);
        }
    free(w);
    return DK_OK;
}

static dk_status q_execute(void *plan, const void *in, void *out, dk_msg *msg)
{
    const dk_gauss_setup *s = plan;
    const void *from = in;
    for (int a = 0; a < s->desc.ndim; a++) {
        if (!(s->desc.axes & (1u << a)))
            continue;
        dk_status st = filter_axis(s, a, from, out, NULL, 0, NULL, 0, msg);
        if (st != DK_OK)
            return st;
        from = out;
    }
    if (from != out)
        memcpy(out, in, s->count * (s->desc.dtype == DK_F64 ? 8 : 4));
    return DK_OK;
}

static dk_status q_execute_halo(void *plan, const dk_gauss_halo *h, const void *in, void *out, dk_msg *msg)
{
    if (getenv("DAKIT_TEST_QUEUE_FAIL")) {
        dk_msg_set(msg, "mpiqueue: the device failed (simulated)");
        return DK_ERR_BACKEND;
    }
    const dk_gauss_setup *s = plan;
    size_t es = s->desc.dtype == DK_F64 ? 8 : 4;
    const char *lo = h->lower_count ? (const char *)h->lower + h->lower_offset * es : NULL;
    const char *up = h->upper_count ? (const char *)h->upper + h->upper_offset * es : NULL;
    return filter_axis(s, h->axis, in, out, lo, h->lower_count, up, h->upper_count, msg);
}

static void q_plan_destroy(void *plan) { (void)plan; }

static const char *const q_variants[] = {"lines", NULL};
static const dk_gauss_ops q_gauss = {
    .variants = q_variants,
    .plan_create = q_plan_create,
    .execute = q_execute,
    .plan_destroy = q_plan_destroy,
    .execute_halo = q_execute_halo,
};

DK_PLUGIN_EXPORT const dk_plugin *DK_PLUGIN_ENTRY(void)
{
    static dk_plugin desc = BROKEN_PLUGIN("mpiqueue", DK_PLUGIN_ABI_VERSION, b_probe_one);
    desc.priority = 0;
    desc.gauss = &q_gauss;
    desc.ops_generation = DK_PLUGIN_OPS_GENERATION;
    desc.buffer_copy_box = q_copy_box;
    desc.comm = &q_comm;
    desc.comm_queue = &q_queue;
    return &desc;
}
