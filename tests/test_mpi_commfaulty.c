/* A host-memory plugin ("commfaulty") that offers device-side communication
 * whose communicator cannot be made on the last rank, and whose devices
 * all carry the same key when DAKIT_TEST_COMM_KEY=same: the distributed
 * test (test_mpi_comm) shows that libdakit-mpi then stages through the
 * host, on every rank alike, without a hang. It never moves data: its
 * all-reduce and exchange fail, and a plan never reaches them. Its kmeans
 * (scalar host code, below) lets a distributed contiguity plan be made
 * and run through host staging. */
#include <math.h>
#include <string.h>
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

/* Its kmeans: the definition of dakit/kmeans.h in plain scalar C on host
 * memory, as the three phases the distributed layer runs, and execute
 * made of them (one device, so the local sums are the whole sums). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

static dk_status k_plan_create(void *device, const dk_kmeans_setup *setup, void **plan, dk_msg *msg)
{
    (void)device, (void)msg;
    *plan = (void *)setup; /* valid until plan_destroy */
    return DK_OK;
}

static void k_plan_destroy(void *plan) { (void)plan; }

static float k_dist(const dk_kmeans_setup *s, const float *X, size_t i, const float *C, int c)
{
    float dist = 0.0f;
    for (int f = 0; f < s->desc.d; f++) {
        float t = X[i * s->stride_point + (size_t)f * s->stride_feature] - C[(size_t)c * s->desc.d + f];
        dist += t * t;
    }
    return dist;
}

static dk_status k_assign_partial(void *plan, const void *points, const void *mask_, const void *centroids,
                                  const void *prev_, void *next_, void *labels_, void *sums_, const void *state,
                                  dk_msg *msg)
{
    (void)msg;
    const dk_kmeans_setup *s = plan;
    const dk_kmeans_desc *d = &s->desc;
    if (((const double *)state)[1] != 0)
        return DK_OK;
    const float *X = points, *C = centroids;
    const uint8_t *mask = mask_;
    const int32_t *prev = prev_;
    int32_t *labels = labels_, *next = next_;
    double *sums = sums_;
    const size_t kd = (size_t)d->k * d->d;
    const long r = d->window / 2;
    for (size_t j = 0; j < kd + (size_t)d->k; j++)
        sums[j] = 0;
    for (size_t i = 0; i < d->n; i++) {
        int best = -1;
        if (!mask || mask[i]) {
            int m = 0, same[DK_KMEANS_MAX_K] = {0};
            if (prev) {
                const long row = (long)(i / d->cols), col = (long)(i % d->cols);
                for (long y = row - r; y <= row + r; y++)
                    for (long c = col - r; c <= col + r; c++) {
                        int32_t l = c < 0 || c >= (long)d->cols || (y == row && c == col)
                                        ? -1
                                        : prev[(size_t)(y + r) * d->cols + (size_t)c];
                        if (l >= 0)
                            m++, same[l]++;
                    }
            }
            float best_cost = 0.0f;
            for (int c = 0; c < d->k; c++) {
                float cost = k_dist(s, X, i, C, c);
                if (prev)
                    cost = (float)d->lambda * (cost * (1.0f / (float)d->d)) +
                           (1.0f - (float)d->lambda) * (m ? (float)(m - same[c]) / (float)m : 0.0f);
                if (c == 0 || cost < best_cost)
                    best = c, best_cost = cost;
            }
        }
        labels[i] = best;
        if (next)
            next[i + (size_t)r * d->cols] = best;
        if (best < 0)
            continue;
        for (int f = 0; f < d->d; f++)
            sums[(size_t)best * d->d + f] += X[i * s->stride_point + (size_t)f * s->stride_feature];
        sums[kd + (size_t)best] += 1;
    }
    return DK_OK;
}

static dk_status k_update(void *plan, const void *sums_, void *centroids, void *state_, dk_msg *msg)
{
    (void)msg;
    const dk_kmeans_desc *d = &((const dk_kmeans_setup *)plan)->desc;
    const double *sums = sums_;
    double *state = state_;
    float *C = centroids;
    const size_t kd = (size_t)d->k * d->d;
    if (state[1] != 0)
        return DK_OK;
    if (sums[kd + (size_t)d->k] != 0) {
        state[3] = state[1] = 1;
        return DK_OK;
    }
    double move = 0;
    for (int c = 0; c < d->k; c++) {
        double count = sums[kd + (size_t)c], m2 = 0;
        for (int f = 0; f < d->d && count > 0; f++) {
            float next = (float)(sums[(size_t)c * d->d + f] / count);
            double diff = (double)next - (double)C[(size_t)c * d->d + f];
            m2 += diff * diff;
            C[(size_t)c * d->d + f] = next;
        }
        move = sqrt(m2) > move ? sqrt(m2) : move;
    }
    state[0] += 1, state[2] = move;
    if (move < d->tol)
        state[1] = 1;
    return DK_OK;
}

static dk_status k_objective(void *plan, const void *points, const void *labels_, const void *centroids, void *out_,
                             dk_msg *msg)
{
    (void)msg;
    const dk_kmeans_setup *s = plan;
    const int32_t *labels = labels_;
    double *out = out_;
    out[0] = out[1] = 0;
    for (size_t i = 0; i < s->desc.n; i++)
        if (labels[i] >= 0)
            out[0] += k_dist(s, points, i, centroids, labels[i]), out[1] += 1;
    return DK_OK;
}

static dk_status k_execute(void *plan, const void *points, const void *mask, const void *init, void *labels,
                           void *centroids, dk_kmeans_result *result, dk_msg *msg)
{
    const dk_kmeans_setup *s = plan;
    const dk_kmeans_desc *d = &s->desc;
    const size_t kd = (size_t)d->k * d->d, wide = s->contiguity ? (d->rows + (size_t)d->window / 2 * 2) * d->cols : 0;
    double *sums = calloc(kd + (size_t)d->k + 1, sizeof *sums), state[4] = {0}, obj[2];
    int32_t *w[2] = {wide ? malloc(wide * sizeof(int32_t)) : NULL, wide ? malloc(wide * sizeof(int32_t)) : NULL};
    if (!sums || (wide && (!w[0] || !w[1]))) {
        free(sums), free(w[0]), free(w[1]);
        dk_msg_set(msg, "commfaulty: out of memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    for (size_t j = 0; j < wide; j++)
        w[0][j] = w[1][j] = -1;
    memcpy(centroids, init, kd * sizeof(float));
    if (wide)
        k_assign_partial(plan, points, mask, centroids, NULL, w[0], labels, sums, state, msg);
    for (int t = 0; t < d->max_iters && !state[1]; t++) {
        k_assign_partial(plan, points, mask, centroids, wide ? w[t & 1] : NULL, wide ? w[(t + 1) & 1] : NULL, labels,
                         sums, state, msg);
        k_update(plan, sums, centroids, state, msg);
    }
    k_objective(plan, points, labels, centroids, obj, msg);
    memset(result, 0, sizeof *result);
    result->iterations = (int)state[0];
    result->objective = obj[0];
    result->last_move = state[2];
    result->valid = (size_t)obj[1];
    free(sums), free(w[0]), free(w[1]);
    return DK_OK;
}

static const char *const k_variants[] = {"scalar", NULL};
static const dk_kmeans_ops c_kmeans = {
    .variants = k_variants,
    .plan_create = k_plan_create,
    .execute = k_execute,
    .plan_destroy = k_plan_destroy,
    .assign_partial = k_assign_partial,
    .update = k_update,
    .objective = k_objective,
};

DK_PLUGIN_EXPORT const dk_plugin *DK_PLUGIN_ENTRY(void)
{
    static dk_plugin desc = BROKEN_PLUGIN("commfaulty", DK_PLUGIN_ABI_VERSION, b_probe_one);
    desc.priority = 0;
    desc.kmeans = &c_kmeans;
    desc.ops_generation = DK_PLUGIN_OPS_GENERATION;
    desc.comm = &c_comm;
    return &desc;
}
