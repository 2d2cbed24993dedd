/* libdakit-mpi internals: the layer's errors, agreeing on an outcome, boxes
 * of the global field, and the plan. */
#ifndef DAKIT_MPI_INTERNAL_H
#define DAKIT_MPI_INTERNAL_H

#include <stddef.h>

#include <dakit/mpi.h>

#define DK_MPI_API __attribute__((visibility("default")))
#define DKM_MSG_LEN 1024

/* The calling thread's sentence for dk_mpi_last_error(); returns st. */
dk_status dkm_fail(dk_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A rank's own outcome so far: the first failure it met, or DK_OK. A rank
 * that fails keeps making the collective calls (with harmless data) so that
 * no other rank waits for it; the outcome is agreed afterwards. */
typedef struct dkm_outcome {
    dk_status status;
    char msg[DKM_MSG_LEN];
} dkm_outcome;

void dkm_note(dkm_outcome *o, dk_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Collective: DK_OK when every rank's outcome is DK_OK; else, on every rank,
 * the status of the lowest failing rank, with its sentence prefixed by
 * "what: rank r of n: " as this thread's dk_mpi_last_error(). */
dk_status dkm_agree(MPI_Comm comm, const dkm_outcome *o, const char *what);

/* Checks that dk_mpi_ calls can communicate on comm at all (MPI initialized
 * and not finalized, an intracommunicator); these failures are local and
 * immediate, as there is no one to tell. */
dk_status dkm_check_comm(MPI_Comm comm, const char *what);

/* Communication time (dk_mpi_plan_stats): every MPI call that moves data
 * while a plan executes goes through DKM_COMM(comm, call), which adds its
 * wall time to the plan whose own communicator comm is (found through an
 * attribute that dkm_stats_attach sets; calls on any other communicator,
 * such as the caller's during plan creation, count nowhere). */
void dkm_stats_attach(dk_mpi_plan *p); /* once p->comm exists */
void dkm_comm_add(MPI_Comm comm, double seconds);
#define DKM_COMM(comm, ...)                                                                                          \
    do {                                                                                                             \
        double dkm_t0_ = MPI_Wtime();                                                                                \
        __VA_ARGS__;                                                                                                 \
        dkm_comm_add((comm), MPI_Wtime() - dkm_t0_);                                                                 \
    } while (0)

/* A box of the global field in 3-D: an ndim-axis field is padded with
 * leading axes of extent 1, so axis a of the description is box axis
 * a + 3 - ndim. [lo, hi) along each axis. */
typedef struct dkm_box {
    size_t lo[3], hi[3];
} dkm_box;

static inline int dkm_axis(int ndim, int a) { return a + 3 - ndim; }

dkm_box dkm_box_of_part(int ndim, const dk_mpi_part *part);
size_t dkm_box_count(const dkm_box *b); /* 0 for an empty box */
/* The intersection; returns 0 (and an empty box) when it is empty. */
int dkm_box_intersect(const dkm_box *a, const dkm_box *b, dkm_box *out);
/* Copies the values of box b from src, an array holding box sb in C order,
 * into dst, an array holding box db; b lies inside both. */
void dkm_box_copy(void *dst, const dkm_box *db, const void *src, const dkm_box *sb, const dkm_box *b,
                  size_t esize);
/* "[lo, hi) x [lo, hi)" of the ndim axes of b. */
void dkm_format_box(char *s, size_t len, int ndim, const dkm_box *b);

/* Collective: gathers every rank's box `own` into boxes[size] and checks
 * that the boxes tile the field of `shape` (no overlap, no gap; each box is
 * already known to lie inside the field). On failure every rank returns the
 * same status and sentence, prefixed by `what`; `whole` and `unit` name the
 * field and its elements in the sentences ("field", "values"). */
dk_status dkm_check_tiling(MPI_Comm comm, int ndim, const size_t shape[], const dkm_box *own, dkm_box *boxes,
                           const char *what, const char *whole, const char *unit);

/* A distributed gauss plan's step: either a local plan over this rank's
 * box (one or more consecutive unsplit axes), or the exchange along one
 * split axis followed by a local plan over the box widened along it. */
typedef struct dkm_peer {
    int rank;
    dkm_box box;   /* the values exchanged, in global coordinates */
    size_t offset; /* elements, in the packed send or receive buffer */
} dkm_peer;

typedef struct dkm_stage {
    int axis;      /* -1: local stage; else the exchanged axis (description's numbering) */
    unsigned axes; /* the local plan's axes */
    dk_plan *plan; /* NULL where this rank's box is empty */
    dkm_box ext;   /* exchange stage: this rank's box widened along axis */
    int nsend, nrecv;
    dkm_peer *send, *recv;
    /* halo stage (plan made by dk_gauss_plan_create_halo): the halos below
     * and above the box along axis, at 0 and lo_count elements into drecv */
    int halo;
    dkm_box lo_box, up_box;
    size_t lo_count, up_count;
} dkm_stage;

/* A distributed enkf plan's own state (distributed/enkf.c). */
typedef struct dkm_enkf dkm_enkf;

struct dk_mpi_plan {
    MPI_Comm comm; /* the plan's own duplicate */
    dkm_enkf *enkf; /* non-NULL: an enkf plan (the gauss fields below are unused) */
    int kmeans;     /* a kmeans plan: distributed/kmeans.c keeps its state in work */
    int rank, size;
    dk_context *ctx;
    dk_gauss_desc desc; /* the global description (variant not kept) */
    dk_gauss_nan nan;   /* dk_mpi_gauss_execute_host refuses NaN under DK_GAUSS_NAN_ERROR (0, the start) */
    size_t esize;
    MPI_Datatype mtype;
    dkm_box own;
    size_t own_count;
    int nstages;
    dkm_stage stages[DK_MAX_DIMS];
    void *work, *ext, *sendbuf, *recvbuf; /* host scratch */
    size_t ext_max, send_max, recv_max;   /* elements of ext, sendbuf, recvbuf */
    /* device scratch of dk_mpi_gauss_execute, made on its first call */
    int dev_ready;
    struct dk_buffer *dwork, *dext, *dsend, *drecv;
    int halo_path;               /* gauss: split axes filtered with halos in place (no widened copy) */
    int profile;                 /* dk_mpi_plan_set_profile: queued collectives timed alone */
    struct dk_buffer *din, *dout; /* the host call's part on the device */
    MPI_Request *requests;
    int nrequests;
    struct dkm_comm *xfer; /* how reductions cross ranks (distributed/comm.c); NULL: MPI */
    dk_mpi_stats stats;
    struct dkm_letkf *letkf; /* non-NULL: a letkf plan (distributed/letkf.c) */
};

/* Collective, at the end of a plan's creation (p->comm, ctx, rank and size
 * set): gives the plan a device communicator where every rank can have one
 * (else host staging, with the reason in dk_mpi_plan_transport). Never
 * fails: every problem on the way means host staging. max_doubles: the
 * longest reduction the plan will make. */
/* FNV-1a over n bytes: the checks that every rank holds the same. */
uint64_t dkm_hash(const void *bytes, size_t n);

void dkm_comm_setup(struct dk_mpi_plan *p, size_t max_doubles);
void dkm_comm_free(struct dk_mpi_plan *p); /* local */
/* The plan's device communicator, NULL where it stages through the host. */
struct dk_comm *dkm_device_comm(const struct dk_mpi_plan *p);
/* Where the plan's device communicator queues: the context's calls only
 * queue their work until dk_context_defer_end (core/comm.h). Returns
 * whether it did. */
int dkm_defer_begin(struct dk_mpi_plan *p);
/* Collective: sums n doubles over the ranks, in place, on the plan's device
 * communicator or through MPI; root < 0: the sum on every rank, else on
 * root (others' buf then unspecified). */
void dkm_sum(struct dk_mpi_plan *p, double *buf, size_t n, int root);

void dkm_gauss_plan_free(struct dk_mpi_plan *p); /* local: frees without touching comm */
void dkm_enkf_free(dkm_enkf *e);                 /* local; MPI datatypes freed unless MPI is finalized */
void dkm_kmeans_free(struct dk_mpi_plan *p);     /* local: a kmeans plan's state, device buffers included */
void dkm_letkf_free(struct dkm_letkf *l);        /* local */

#endif
