/* libdakit-mpi: how a plan's data crosses ranks. Where every rank's
 * backend offers device-side communication (dk_comm_ops: the cuda plugin
 * through NCCL) on a device of its own, the plan gets a device
 * communicator when it is created: the one the context kept from an
 * earlier plan over the same ranks, or a new one made collectively (rank 0
 * makes the unique id, MPI_Bcast carries it, every rank joins), which the
 * context then keeps (dk_comm_keep in core/comm.h). Elsewhere, and
 * whenever anything on the way fails, the plan stages through host memory
 * and MPI, as it always could. The knob DAKIT_MPI_COMM (docs/tuning.md)
 * forces either path.
 *
 * The reductions (kmeans' partial sums, enkf's HPHT and HX) go through
 * dkm_sum. On the device path the host values are written to a device
 * buffer, summed there by the plugin and read back; one integer
 * MPI_Allreduce of the ranks' outcomes follows, so that a device failure
 * on any rank sends every rank back to MPI for that sum (from the values it
 * kept) and for the rest of the plan's life, never leaving a rank waiting
 * on a collective the others have left. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/plugin.h>

#include "../core/comm.h"
#include "internal.h"

/* Collectives on float64 arrays are cut into pieces of this many values
 * (MPI counts are int). */
#define CHUNK ((size_t)1 << 27)

/* The device scratch holds at most this many values (128 MiB); longer
 * reductions go through it in pieces. */
#define SCRATCH_MAX ((size_t)1 << 24)

struct dkm_comm {
    dk_comm *dev;       /* NULL: host staging */
    dk_buffer *scratch; /* the device copy of a reduction */
    double *keep;       /* the host values, for the fall-back */
    size_t max;         /* doubles a reduction may have */
    char transport[DKM_MSG_LEN];
};

DK_MPI_API const char *dk_mpi_plan_transport(const dk_mpi_plan *plan)
{
    if (!plan)
        return "no plan";
    return plan->xfer ? plan->xfer->transport : "host (MPI): this plan's exchanges are staged through the host";
}

/* What a rank says about itself before a communicator is tried. */
typedef struct rank_card {
    int32_t want;       /* 1: it can join a device communicator */
    int32_t pad;
    uint64_t id_size;
    char backend[32];
    char key[DK_COMM_KEY_LEN];
    char why[256];      /* want 0: why not */
} rank_card;

static void host_path(struct dkm_comm *x, const char *fmt, const char *a, const char *b)
{
    char reason[DKM_MSG_LEN - 32];
    snprintf(reason, sizeof reason, fmt, a, b);
    snprintf(x->transport, sizeof x->transport, "host (MPI): %s", reason);
    dk_comm_discard(x->dev); /* one that failed serves no later plan */
    dk_buffer_destroy(x->scratch);
    x->dev = NULL;
    x->scratch = NULL;
}

uint64_t dkm_hash(const void *bytes, size_t n)
{
    const unsigned char *c = bytes;
    uint64_t h = 0xcbf29ce484222325u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 0x100000001b3u;
    return h;
}

/* The context's name for the plan's ranks: their ranks in MPI_COMM_WORLD,
 * in the plan's order, hashed. */
static void ranks_key(const dk_mpi_plan *p, char key[DK_COMM_KEY_LEN])
{
    MPI_Group mine, world;
    int *r = malloc(2 * (size_t)p->size * sizeof *r), size = r ? p->size : -1;
    uint64_t h = 0;
    if (r) {
        MPI_Comm_group(p->comm, &mine);
        MPI_Comm_group(MPI_COMM_WORLD, &world);
        for (int i = 0; i < p->size; i++)
            r[i] = i;
        MPI_Group_translate_ranks(mine, p->size, r, world, r + p->size);
        h = dkm_hash(r + p->size, (size_t)p->size * sizeof *r);
        MPI_Group_free(&mine);
        MPI_Group_free(&world);
    }
    free(r);
    snprintf(key, DK_COMM_KEY_LEN, "mpi:%d:%016llx", size, (unsigned long long)h); /* -1: out of host memory */
}

/* Every rank's kept communicator for these ranks, where every rank has
 * the one made together (the same tag); NULL elsewhere, on every rank. */
static dk_comm *kept_comm(dk_mpi_plan *p, const char *key)
{
    uint64_t tag = 0;
    dk_comm *c = dk_comm_find(p->ctx, key, p->size, p->rank, &tag);
    uint64_t v[3] = {c == NULL, tag, ~tag}, all[3];
    MPI_Allreduce(v, all, 3, MPI_UINT64_T, MPI_MAX, p->comm);
    if (all[0] == 0 && all[1] == ~all[2])
        return c;
    dk_comm_destroy(c);
    return NULL;
}

void dkm_comm_setup(dk_mpi_plan *p, size_t max_doubles)
{
    struct dkm_comm *x = calloc(1, sizeof *x);
    int ok = x != NULL;
    if (x) {
        x->max = max_doubles < SCRATCH_MAX ? max_doubles : SCRATCH_MAX;
        max_doubles = x->max;
        x->keep = malloc((max_doubles ? max_doubles : 1) * sizeof *x->keep);
        ok = x->keep != NULL;
    }
    int all_ok;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, p->comm);
    if (!all_ok) {
        /* no scratch for the fall-back either: reductions go straight to MPI */
        if (x)
            free(x->keep);
        free(x);
        return;
    }
    p->xfer = x;

    /* 1. every rank: does it want to, and can it? */
    const char *mode = dk_tuning_string("DAKIT_MPI_COMM");
    int force_host = mode && !strcmp(mode, "host"), force_device = mode && !strcmp(mode, "device");
    rank_card me;
    memset(&me, 0, sizeof me);
    snprintf(me.backend, sizeof me.backend, "%s", dk_context_backend(p->ctx));
    if (force_host)
        snprintf(me.why, sizeof me.why, "DAKIT_MPI_COMM=host");
    else if (p->size == 1 && !force_device)
        snprintf(me.why, sizeof me.why, "one rank, nothing crosses ranks (DAKIT_MPI_COMM=device uses the "
                 "device path anyway)");
    else if (!dk_comm_name(p->ctx))
        snprintf(me.why, sizeof me.why, "backend %s offers no device-side communication", me.backend);
    else if (dk_comm_device_key(p->ctx, me.key) != DK_OK)
        snprintf(me.why, sizeof me.why, "%s", dk_last_error(p->ctx));
    else
        me.want = 1, me.id_size = dk_comm_id_size(p->ctx);

    rank_card *cards = malloc((size_t)p->size * sizeof *cards);
    ok = cards != NULL;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, p->comm);
    if (!all_ok) {
        free(cards);
        host_path(x, "out of host memory%s%s", "", "");
        return;
    }
    MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, cards, (int)sizeof me, MPI_BYTE, p->comm);

    /* 2. the same decision on every rank, from the same cards */
    char rank_text[32], other[64];
    for (int r = 0; r < p->size; r++) {
        cards[r].why[sizeof cards[r].why - 1] = cards[r].backend[sizeof cards[r].backend - 1] = '\0';
        cards[r].key[DK_COMM_KEY_LEN - 1] = '\0';
        if (!cards[r].want) {
            snprintf(rank_text, sizeof rank_text, "%d", r);
            host_path(x, "rank %s: %s", rank_text, cards[r].why);
            free(cards);
            return;
        }
        if (strcmp(cards[r].backend, cards[0].backend) || cards[r].id_size != cards[0].id_size) {
            snprintf(other, sizeof other, "%d uses backend %s", r, cards[r].backend);
            host_path(x, "rank 0 uses backend %s and rank %s; device-side communication needs one backend",
                      cards[0].backend, other);
            free(cards);
            return;
        }
        for (int q = 0; q < r; q++)
            if (!strcmp(cards[q].key, cards[r].key)) {
                snprintf(other, sizeof other, "ranks %d and %d", q, r);
                host_path(x, "%s share one device (%s); device-side communication needs a device per rank",
                          other, cards[r].key);
                free(cards);
                return;
            }
    }
    free(cards);

    /* 3. the scratch; the communicator an earlier plan over these ranks
     * made, or rank 0's id carried by MPI and every rank joining */
    dkm_outcome o = {DK_OK, ""};
    if (max_doubles && dk_buffer_create(p->ctx, max_doubles * sizeof(double), &x->scratch) != DK_OK)
        dkm_note(&o, DK_ERR_OUT_OF_MEMORY, "%s", dk_last_error(p->ctx));
    if (dkm_agree(p->comm, &o, "the device scratch") != DK_OK) {
        host_path(x, "%s%s", dk_mpi_last_error(), "");
        return;
    }
    char key[DK_COMM_KEY_LEN];
    ranks_key(p, key);
    if ((x->dev = kept_comm(p, key))) {
        snprintf(x->transport, sizeof x->transport, "device (%s)", dk_comm_name(p->ctx));
        return;
    }
    struct {
        int32_t ok;
        char id[DK_COMM_ID_MAX];
        char why[256];
    } id;
    memset(&id, 0, sizeof id);
    if (p->rank == 0) {
        id.ok = dk_comm_make_id(p->ctx, id.id) == DK_OK;
        if (!id.ok)
            snprintf(id.why, sizeof id.why, "%s", dk_last_error(p->ctx));
    }
    MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, p->comm);
    if (!id.ok) {
        id.why[sizeof id.why - 1] = '\0';
        host_path(x, "making the communicator's id on rank 0 failed: %s%s", id.why, "");
        return;
    }
    dk_status st = dk_comm_create(p->ctx, id.id, p->size, p->rank, &x->dev);
    if (st != DK_OK)
        dkm_note(&o, st, "%s", dk_last_error(p->ctx));
    if (dkm_agree(p->comm, &o, "the device communicator") != DK_OK) {
        host_path(x, "%s%s", dk_mpi_last_error(), "");
        return;
    }
    dk_comm_keep(x->dev, key, dkm_hash(id.id, sizeof id.id));
    snprintf(x->transport, sizeof x->transport, "device (%s)", dk_comm_name(p->ctx));
}

void dkm_comm_free(dk_mpi_plan *p)
{
    if (!p || !p->xfer)
        return;
    dk_comm_destroy(p->xfer->dev);
    dk_buffer_destroy(p->xfer->scratch);
    free(p->xfer->keep);
    free(p->xfer);
    p->xfer = NULL;
}

dk_comm *dkm_device_comm(const dk_mpi_plan *p)
{
    return p && p->xfer ? p->xfer->dev : NULL;
}

int dkm_defer_begin(dk_mpi_plan *p)
{
    dk_comm *dev = dkm_device_comm(p);
    return dev && dk_comm_can_queue(dev) && dk_context_defer_begin(p->ctx);
}

static void sum_host(dk_mpi_plan *p, double *buf, size_t n, int root)
{
    for (size_t off = 0; off < n; off += CHUNK) {
        int count = (int)(n - off < CHUNK ? n - off : CHUNK);
        if (root < 0)
            MPI_Allreduce(MPI_IN_PLACE, buf + off, count, MPI_DOUBLE, MPI_SUM, p->comm);
        else
            MPI_Reduce(p->rank == root ? MPI_IN_PLACE : (void *)(buf + off), buf + off, count, MPI_DOUBLE,
                       MPI_SUM, root, p->comm);
    }
}

/* One piece of at most x->max values on the device. */
static void sum_device(dk_mpi_plan *p, double *buf, size_t n, int root)
{
    struct dkm_comm *x = p->xfer;
    /* every rank makes the device calls, whatever failed before, so that
     * none is left waiting in the all-reduce */
    memcpy(x->keep, buf, n * sizeof *buf);
    dkm_outcome o = {DK_OK, ""};
    dk_status st = dk_buffer_write(x->scratch, buf, n * sizeof *buf);
    if (st != DK_OK)
        dkm_note(&o, st, "%s", dk_last_error(p->ctx));
    st = dk_comm_all_reduce_sum(x->dev, x->scratch, 0, n, DK_F64);
    if (st != DK_OK)
        dkm_note(&o, st, "%s", dk_last_error(p->ctx));
    if (o.status == DK_OK && (st = dk_buffer_read(x->scratch, buf, n * sizeof *buf)) != DK_OK)
        dkm_note(&o, st, "%s", dk_last_error(p->ctx));
    if (dkm_agree(p->comm, &o, "a device reduction") == DK_OK)
        return;
    /* from here on this plan stages through the host */
    char why[DKM_MSG_LEN];
    snprintf(why, sizeof why, "%s", dk_mpi_last_error());
    host_path(x, "%s (the plan went back to host staging)%s", why, "");
    memcpy(buf, x->keep, n * sizeof *buf);
    sum_host(p, buf, n, root);
}

void dkm_sum(dk_mpi_plan *p, double *buf, size_t n, int root)
{
    for (size_t off = 0; off < n; off += p->xfer && p->xfer->max ? p->xfer->max : n) {
        size_t count = p->xfer && p->xfer->max && n - off > p->xfer->max ? p->xfer->max : n - off;
        if (p->xfer && p->xfer->dev)
            sum_device(p, buf + off, count, root);
        else
            sum_host(p, buf + off, count, root);
    }
}
