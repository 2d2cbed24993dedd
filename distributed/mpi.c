/* libdakit-mpi: the layer's errors, agreement between ranks, boxes and the
 * decomposition helper. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static _Thread_local char last_error[DKM_MSG_LEN + 64];
static _Thread_local int have_error;

DK_MPI_API const char *dk_mpi_last_error(void)
{
    return have_error ? last_error : "no error";
}

dk_status dkm_fail(dk_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    have_error = 1;
    return st;
}

void dkm_note(dkm_outcome *o, dk_status st, const char *fmt, ...)
{
    if (o->status != DK_OK || st == DK_OK)
        return; /* the first failure is the one reported */
    o->status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->msg, sizeof o->msg, fmt, ap);
    va_end(ap);
}

dk_status dkm_agree(MPI_Comm comm, const dkm_outcome *o, const char *what)
{
    int rank, size, mine, first;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    mine = o->status == DK_OK ? size : rank;
    DKM_COMM(comm, MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
    if (first == size)
        return DK_OK;
    struct {
        int status;
        char msg[DKM_MSG_LEN];
    } m;
    memset(&m, 0, sizeof m);
    if (rank == first) {
        m.status = (int)o->status;
        memcpy(m.msg, o->msg, sizeof m.msg);
    }
    DKM_COMM(comm, MPI_Bcast(&m, (int)sizeof m, MPI_BYTE, first, comm));
    m.msg[sizeof m.msg - 1] = '\0';
    return dkm_fail((dk_status)m.status, "%s: rank %d of %d: %s", what, first, size, m.msg);
}

dk_status dkm_check_comm(MPI_Comm comm, const char *what)
{
    int flag = 0;
    MPI_Initialized(&flag);
    if (!flag)
        return dkm_fail(DK_ERR_INVALID_ARGUMENT, "%s: MPI is not initialized (call MPI_Init first)", what);
    MPI_Finalized(&flag);
    if (flag)
        return dkm_fail(DK_ERR_INVALID_ARGUMENT, "%s: MPI is already finalized", what);
    if (comm == MPI_COMM_NULL)
        return dkm_fail(DK_ERR_INVALID_ARGUMENT, "%s: the communicator is MPI_COMM_NULL", what);
    MPI_Comm_test_inter(comm, &flag);
    if (flag)
        return dkm_fail(DK_ERR_INVALID_ARGUMENT,
                        "%s: the communicator is an intercommunicator; an intracommunicator is needed", what);
    return DK_OK;
}

/* ---- boxes ---- */

dkm_box dkm_box_of_part(int ndim, const dk_mpi_part *part)
{
    dkm_box b;
    for (int i = 0; i < 3; i++) {
        b.lo[i] = 0;
        b.hi[i] = 1;
    }
    for (int a = 0; a < ndim; a++) {
        b.lo[dkm_axis(ndim, a)] = part->offset[a];
        b.hi[dkm_axis(ndim, a)] = part->offset[a] + part->extent[a];
    }
    return b;
}

size_t dkm_box_count(const dkm_box *b)
{
    size_t n = 1;
    for (int i = 0; i < 3; i++)
        n *= b->hi[i] > b->lo[i] ? b->hi[i] - b->lo[i] : 0;
    return n;
}

int dkm_box_intersect(const dkm_box *a, const dkm_box *b, dkm_box *out)
{
    dkm_box r;
    int empty = 0;
    for (int i = 0; i < 3; i++) {
        r.lo[i] = a->lo[i] > b->lo[i] ? a->lo[i] : b->lo[i];
        r.hi[i] = a->hi[i] < b->hi[i] ? a->hi[i] : b->hi[i];
        if (r.hi[i] <= r.lo[i])
            empty = 1;
    }
    if (empty)
        for (int i = 0; i < 3; i++)
            r.lo[i] = r.hi[i] = 0;
    *out = r;
    return !empty;
}

void dkm_box_copy(void *dst, const dkm_box *db, const void *src, const dkm_box *sb, const dkm_box *b,
                  size_t esize)
{
    if (!dkm_box_count(b))
        return;
    size_t dn1 = db->hi[1] - db->lo[1], dn2 = db->hi[2] - db->lo[2];
    size_t sn1 = sb->hi[1] - sb->lo[1], sn2 = sb->hi[2] - sb->lo[2];
    size_t run = (b->hi[2] - b->lo[2]) * esize;
    for (size_t i0 = b->lo[0]; i0 < b->hi[0]; i0++)
        for (size_t i1 = b->lo[1]; i1 < b->hi[1]; i1++) {
            size_t d = ((i0 - db->lo[0]) * dn1 + (i1 - db->lo[1])) * dn2 + (b->lo[2] - db->lo[2]);
            size_t s = ((i0 - sb->lo[0]) * sn1 + (i1 - sb->lo[1])) * sn2 + (b->lo[2] - sb->lo[2]);
            memcpy((char *)dst + d * esize, (const char *)src + s * esize, run);
        }
}

void dkm_format_box(char *s, size_t len, int ndim, const dkm_box *b)
{
    size_t used = 0;
    s[0] = '\0';
    for (int a = 0; a < ndim && used < len; a++) {
        int i = dkm_axis(ndim, a);
        used += (size_t)snprintf(s + used, len - used, "%s[%zu, %zu)", a ? " x " : "", b->lo[i], b->hi[i]);
    }
}

/* Each rank checks its box against all others (no overlap), then the
 * volumes add up (no gap): disjoint boxes inside the field cover it exactly
 * when their volumes sum to the field's. */
dk_status dkm_check_tiling(MPI_Comm comm, int ndim, const size_t shape[], const dkm_box *own, dkm_box *boxes,
                           const char *what, const char *whole, const char *unit)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    _Static_assert(sizeof(dkm_box) == 6 * sizeof(uint64_t) && sizeof(size_t) == sizeof(uint64_t),
                   "boxes travel as 6 MPI_UINT64_T");
    MPI_Allgather(own, 6, MPI_UINT64_T, boxes, 6, MPI_UINT64_T, comm);
    dkm_outcome o = {DK_OK, ""};
    size_t own_count = dkm_box_count(own);
    for (int j = 0; j < size && own_count; j++) {
        dkm_box b;
        if (j != rank && dkm_box_intersect(own, &boxes[j], &b)) {
            char text[256];
            dkm_format_box(text, sizeof text, ndim, &b);
            dkm_note(&o, DK_ERR_INVALID_ARGUMENT,
                     "its part overlaps the part of rank %d: both hold the global indices %s; the parts must "
                     "tile the %s without overlap",
                     j, text, whole);
        }
    }
    dk_status st = dkm_agree(comm, &o, what);
    if (st != DK_OK)
        return st;
    size_t total = 1, held = 0;
    for (int a = 0; a < ndim; a++)
        total *= shape[a];
    for (int j = 0; j < size; j++)
        held += dkm_box_count(&boxes[j]); /* disjoint boxes inside the field: no overflow */
    if (held != total)
        return dkm_fail(DK_ERR_INVALID_ARGUMENT,
                        "%s: the parts leave a gap: together the %d ranks hold %zu of the %s's %zu %s; the parts "
                        "must tile the %s",
                        what, size, held, whole, total, unit, whole);
    return DK_OK;
}

/* ---- the decomposition helper ---- */

DK_MPI_API dk_status dk_mpi_decompose(MPI_Comm comm, int ndim, const size_t shape[], const int ranks_per_axis[],
                                      dk_mpi_part *part)
{
    static const char *what = "dk_mpi_decompose";
    dk_status st = dkm_check_comm(comm, what);
    if (st != DK_OK)
        return st;
    if (!shape || !part)
        return dkm_fail(DK_ERR_INVALID_ARGUMENT, "%s: shape and part must not be NULL", what);
    if (ndim < 1 || ndim > DK_MAX_DIMS)
        return dkm_fail(DK_ERR_INVALID_ARGUMENT, "%s: ndim is %d; 1, 2 or 3 axes are supported", what, ndim);
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int grid[DK_MAX_DIMS] = {1, 1, 1};
    if (ranks_per_axis) {
        long long product = 1;
        for (int a = 0; a < ndim; a++) {
            if (ranks_per_axis[a] < 1)
                return dkm_fail(DK_ERR_INVALID_ARGUMENT, "%s: ranks_per_axis[%d] is %d; it must be >= 1", what,
                                a, ranks_per_axis[a]);
            grid[a] = ranks_per_axis[a];
            product *= grid[a];
            if (product > size)
                break;
        }
        if (product != size)
            return dkm_fail(DK_ERR_INVALID_ARGUMENT,
                            "%s: ranks_per_axis multiply to %s%lld, but the communicator has %d ranks", what,
                            product > size ? "more than " : "", product, size);
    } else {
        grid[0] = size;
    }
    for (int a = 0; a < ndim; a++)
        if (shape[a] == 0)
            return dkm_fail(DK_ERR_INVALID_ARGUMENT, "%s: shape[%d] is 0; every axis needs a size >= 1", what, a);
    memset(part, 0, sizeof *part);
    int rest = rank;
    for (int a = ndim - 1; a >= 0; a--) {
        size_t c = (size_t)(rest % grid[a]), p = (size_t)grid[a], n = shape[a];
        rest /= grid[a];
        size_t d = n / p, r = n % p;
        part->offset[a] = c * d + (c < r ? c : r);
        part->extent[a] = d + (c < r ? 1 : 0);
    }
    return DK_OK;
}

static int stats_key = MPI_KEYVAL_INVALID;

void dkm_stats_attach(dk_mpi_plan *p)
{
    /* a duplicate of the plan's communicator does not inherit the attribute */
    if (stats_key == MPI_KEYVAL_INVALID &&
        MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &stats_key, NULL) != MPI_SUCCESS)
        return;
    MPI_Comm_set_attr(p->comm, stats_key, &p->stats);
}

void dkm_comm_add(MPI_Comm comm, double seconds)
{
    dk_mpi_stats *s = NULL;
    int found = 0;
    if (stats_key == MPI_KEYVAL_INVALID || MPI_Comm_get_attr(comm, stats_key, &s, &found) != MPI_SUCCESS || !found)
        return;
    s->comm_seconds += seconds;
    s->comm_calls++;
}

DK_MPI_API dk_status dk_mpi_plan_stats(const dk_mpi_plan *plan, dk_mpi_stats *stats)
{
    if (!plan || !stats)
        return dkm_fail(DK_ERR_INVALID_ARGUMENT, "dk_mpi_plan_stats: plan and stats must not be NULL");
    *stats = plan->stats;
    return DK_OK;
}

DK_MPI_API dk_status dk_mpi_plan_stats_reset(dk_mpi_plan *plan)
{
    if (!plan)
        return dkm_fail(DK_ERR_INVALID_ARGUMENT, "dk_mpi_plan_stats_reset: plan must not be NULL");
    memset(&plan->stats, 0, sizeof plan->stats);
    return DK_OK;
}

DK_MPI_API dk_status dk_mpi_plan_set_profile(dk_mpi_plan *plan, int on)
{
    if (!plan)
        return dkm_fail(DK_ERR_INVALID_ARGUMENT, "dk_mpi_plan_set_profile: plan must not be NULL");
    plan->profile = on != 0;
    return DK_OK;
}

DK_MPI_API void dk_mpi_plan_destroy(dk_mpi_plan *plan)
{
    if (!plan)
        return;
    MPI_Comm comm = plan->comm;
    dkm_comm_free(plan);
    dkm_enkf_free(plan->enkf);
    dkm_kmeans_free(plan);
    dkm_letkf_free(plan->letkf);
    dkm_gauss_plan_free(plan);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm != MPI_COMM_NULL && !finalized)
        MPI_Comm_free(&comm);
}
