/* dakit conform: the shared conformance cases on each selected backend
 * against the serial reference, a table, a verdict per backend, and an
 * optional JUnit report. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/dist.h"
#include "cli/output.h"
#include "cli/progress.h"
#include "harness/conform.h"

#define MAX_BACKENDS 16
#define MAX_ROWS 4096

static const conform_suite *const suites[] = {&conform_gauss, &conform_enkf, &conform_kmeans, &conform_gbees,
                                                &conform_letkf};
#define NSUITES ((int)(sizeof suites / sizeof suites[0]))

typedef struct row {
    const conform_suite *suite;
    int case_index;
    int backend;
    char variant[32];
    conform_result r;
    double seconds;
} row;

static void usage(FILE *f)
{
    /* the algorithms from the suites themselves, so that the text stays true */
    char algos[128] = "";
    for (int s = 0; s < NSUITES; s++)
        snprintf(algos + strlen(algos), sizeof algos - strlen(algos), "%s%s", s ? "|" : "", suites[s]->algo);
    fprintf(f,
            "usage: dakit conform [--backend NAME[,NAME...]|all] [--algo %s[,...]]\n"
            "                     [--quick] [--junit FILE] [--ranks P] [--progress|--quiet]\n"
            "\n"
            "Runs the shared conformance cases on each selected backend (every variant it offers)\n"
            "against the serial reference and prints a table and one verdict per backend.\n"
            "\n"
            "  --backend NAME[,...]|all   backends to test (default: all usable; plugins found but\n"
            "                             refused are listed as not run, with the reason)\n"
            "  --algo ALGO[,...]          algorithms to test, a comma list (default: all)\n"
            "  --quick                    the smaller cases only\n"
            "  --junit FILE               also write a JUnit XML report\n"
            "  --ranks P                  run the gauss, enkf and kmeans cases distributed over P MPI\n"
            "                             ranks (libdakit-mpi), each rank on its part, against the same\n"
            "                             reference and tolerances; started without mpirun, it starts\n"
            "                             itself under $DAKIT_MPIRUN (default mpirun) -n P; under\n"
            "                             mpirun, P must be the number of ranks. Rank 0 prints.\n"
            "  --progress                 on stderr the case being run, even when it is no terminal\n"
            "                             (a batch job's log), with the elapsed time\n"
            "  --quiet                    no progress (default: progress only when stderr is a terminal)\n"
            "\n"
            "exit status: 0 every case passed on every selected backend; 1 a case failed;\n"
            "4 some selected backend is absent or lacks a selected algorithm; 77 nothing could\n"
            "run (no selected backend is present, or none implements the algorithms): a skip.\n"
            "With --backend all, a refused plugin (a driver missing, a probe that crashed)\n"
            "changes none of these.\n",
            algos);
}

static void xml_escape(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        /* control characters are not allowed in XML 1.0 */
        default: fputc((unsigned char)*s < 0x20 && *s != '\t' && *s != '\n' && *s != '\r' ? '?' : *s, f);
        }
    }
}

/* Whether the backend of ctx implements the suite's algorithm: it lists
 * variants for it. (Asking the registry would probe every plugin.) */
static int implements(dk_context *ctx, const conform_suite *su)
{
    return su->variants(ctx) != NULL;
}

/* Plugins found but refused, for --backend all: named with the reason. */
typedef struct refused_plugin {
    char name[64];
    char reason[600];
} refused_plugin;

#ifdef DK_TOOLS_MPI
void conform_ranks_agree(conform_result *r)
{
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    /* the worst rank: a failure first, then the largest error (NaN the worst) */
    struct {
        double key;
        int rank;
    } mine = {(r->passed ? 0.0 : 2.0) + (isnan(r->error) || r->error == INFINITY ? 1.0 : r->error / (1.0 + r->error)),
              rank},
      worst;
    MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
    MPI_Bcast(r, (int)sizeof *r, MPI_BYTE, worst.rank, MPI_COMM_WORLD);
}

/* conform --ranks under mpirun: the cases of the suites that distribute,
 * each rank on its part; rank 0 prints the table and writes the report. */
static int conform_distributed(const char *backend_s, const char *algo_s, int quick, const char *junit)
{
    const char *cmd = "conform";
    int own = 0, inited = 0, rank, size;
    MPI_Initialized(&inited);
    if (!inited) {
        MPI_Init(NULL, NULL);
        own = 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    FILE *out = stdout;
    if (rank != 0 && !(out = fopen("/dev/null", "w")))
        out = stdout;
    dist_choose_device(strcmp(backend_s, "all") ? backend_s : NULL);
    char names[MAX_BACKENDS][64], err[4200];
    int nb = cli_select_backends(backend_s, names, MAX_BACKENDS);
    dk_context *ctx[MAX_BACKENDS] = {0};
    int present = 0, failed = 0, passed = 0, lacking = 0;
    for (int b = 0; b < nb; b++) {
        /* a backend counts only where every rank has it */
        int mine = dk_context_create(names[b], &ctx[b]) == DK_OK, all;
        if (!mine)
            snprintf(err, sizeof err, "%s", dk_last_error(NULL));
        MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!all) {
            fprintf(out, "backend %s: absent on some rank (rank 0: %s)\n", names[b], mine ? "present" : err);
            dk_context_destroy(ctx[b]);
            ctx[b] = NULL;
            continue;
        }
        present++;
        fprintf(out, "backend %s: %s (rank 0), %d ranks\n", names[b], dk_context_device(ctx[b]), size);
    }
    static row rows[MAX_ROWS];
    int nrows = 0;
    fprintf(out, "\n%-8s %-24s %-16s %6s %12s %12s  %s\n", "algo", "case", "backend", "ranks", "error", "tolerance",
            "result");
    for (int s = 0; s < NSUITES; s++) {
        const conform_suite *su = suites[s];
        if (!cli_in_list(algo_s, su->algo))
            continue;
        if (!su->run_ranks) {
            fprintf(out, "%-8s %-24s not distributed (single-device in this version)\n", su->algo, "(all cases)");
            continue;
        }
        for (int i = 0; i < su->count(); i++) {
            if (quick && !su->quick(i))
                continue;
            int ok = su->prepare(i, err, sizeof err) == DK_OK, all;
            MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
            if (!all) {
                fprintf(out, "%-8s %-24s reference failed: %s\n", su->algo, su->name(i), ok ? "on another rank" : err);
                failed++;
                su->release(i);
                continue;
            }
            for (int b = 0; b < nb; b++) {
                if (!ctx[b])
                    continue;
                if (!su->variants(ctx[b])) {
                    if (i == 0)
                        lacking++;
                    continue;
                }
                for (const char *const *v = su->variants(ctx[b]); *v && nrows < MAX_ROWS; v++) {
                    row *rw = &rows[nrows];
                    memset(rw, 0, sizeof *rw);
                    rw->suite = su;
                    rw->case_index = i;
                    rw->backend = b;
                    snprintf(rw->variant, sizeof rw->variant, "%s", *v);
                    double t0 = cli_now();
                    int skipped = su->run_ranks(ctx[b], *v, i, &rw->r);
                    rw->seconds = cli_now() - t0;
                    char label[96];
                    snprintf(label, sizeof label, "%s/%s", names[b], *v);
                    if (skipped) {
                        fprintf(out, "%-8s %-24s %-16s %6d not run: %s\n", su->algo, su->name(i), label, size,
                                rw->r.detail);
                        continue;
                    }
                    nrows++;
                    fprintf(out, "%-8s %-24s %-16s %6d %12.3e %12.3e  %s%s%s\n", su->algo, su->name(i), label, size,
                            rw->r.error, rw->r.tolerance, rw->r.passed ? "pass" : "FAIL", rw->r.passed ? "" : ": ",
                            rw->r.passed ? "" : rw->r.detail);
                    fflush(out);
                    rw->r.passed ? passed++ : failed++;
                }
            }
            su->release(i);
        }
    }
    fprintf(out, "\nverdict over %d ranks: %s: %d passed, %d failed\n", size,
            failed ? "FAIL" : passed ? "PASS" : "NOTHING RUN", passed, failed);
    int junit_failed = 0;
    if (junit && rank == 0) {
        output o;
        if (output_open(&o, junit, err, sizeof err) != 0)
            junit_failed = cli_error(cmd, 1, "%s", err);
        else {
            fprintf(o.f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"dakit conform --ranks "
                         "%d\">\n  <testsuite name=\"dakit.ranks%d\" tests=\"%d\" failures=\"%d\">\n",
                    size, size, nrows, failed);
            for (int r = 0; r < nrows; r++) {
                row *rw = &rows[r];
                fprintf(o.f, "    <testcase classname=\"dakit.%s.%s.%s.ranks%d\" name=\"%s\" time=\"%.6f\">",
                        names[rw->backend], rw->suite->algo, rw->variant, size, rw->suite->name(rw->case_index),
                        rw->seconds);
                if (!rw->r.passed) {
                    fprintf(o.f, "\n      <failure message=\"error %.3e exceeds tolerance %.3e: ", rw->r.error,
                            rw->r.tolerance);
                    xml_escape(o.f, rw->r.detail);
                    fprintf(o.f, "\"/>\n    ");
                }
                fprintf(o.f, "</testcase>\n");
            }
            fprintf(o.f, "  </testsuite>\n</testsuites>\n");
            if (output_commit(&o, err, sizeof err) != 0)
                junit_failed = cli_error(cmd, 1, "%s", err);
        }
    }
    MPI_Allreduce(MPI_IN_PLACE, &junit_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    for (int b = 0; b < nb; b++)
        dk_context_destroy(ctx[b]);
    if (out != stdout)
        fclose(out);
    if (own)
        MPI_Finalize();
    if (failed || junit_failed)
        return 1;
    if (!nrows)
        return 77;
    return present < nb || lacking ? 4 : 0;
}
#endif

int cmd_conform(int argc, char **argv)
{
    const char *cmd = "conform", *backend_s = "all", *algo_s = NULL, *junit = NULL;
    int quick = 0, ranks = 0;
    progress prog;
    progress_init(&prog, cmd);
    static const struct option option_table[] = {CLI_FLAG("help"), CLI_VALUE("ranks"), CLI_FLAG("quick"),
        CLI_VALUE("backend"), CLI_VALUE("algo"), CLI_VALUE("junit"), CLI_FLAG("progress"), CLI_FLAG("quiet"),
        {0}};
    cli_args args = {.cmd = cmd, .argc = argc, .argv = argv, .options = option_table};
    int more;
    while ((more = cli_next(&args)) == 1) {
        const char *a = args.opt, *v = args.value;
        if (!strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (progress_option(&prog, a)) {
            continue;
        } else if (!strcmp(a, "--ranks")) {
            if (cli_int(cmd, a, v, 1, 1 << 20, &ranks))
                return 2;
        } else if (!strcmp(a, "--quick")) {
            quick = 1;
        } else if (!strcmp(a, "--backend")) {
            backend_s = v;
        } else if (!strcmp(a, "--algo")) {
            algo_s = v;
        } else if (!strcmp(a, "--junit")) {
            junit = v;
        }
    }
    if (more)
        return more;
    for (const char *p = algo_s; p && *p;) {
        size_t len = strcspn(p, ",");
        int known = 0;
        for (int s = 0; s < NSUITES; s++)
            known |= strlen(suites[s]->algo) == len && !strncmp(p, suites[s]->algo, len);
        if (!known) {
            char names[128] = "";
            for (int s = 0; s < NSUITES; s++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", s ? ", " : "",
                         suites[s]->algo);
            return cli_error(cmd, 2, "no conformance cases for algorithm '%.*s' (known: %s)", (int)len, p, names);
        }
        p += len;
        if (*p == ',')
            p++;
    }

    if (cli_backend_list(cmd, "--backend", backend_s, MAX_BACKENDS))
        return 2;
    if (cli_options_only)
        return 0;
    char err[4200];
    if (junit && output_check(junit, err, sizeof err) != 0)
        return cli_error(cmd, 1, "%s", err);
    if (ranks) {
#ifdef DK_TOOLS_MPI
        int launched = dist_launched_size();
        if (!launched)
            return dist_relaunch(cmd, ranks, argc, argv);
        if (launched != ranks)
            return cli_error(cmd, 2, "--ranks %d but mpirun started %d ranks", ranks, launched);
        return conform_distributed(backend_s, algo_s, quick, junit);
#else
        return cli_error(cmd, 77, "--ranks needs libdakit-mpi, which this build lacks (MPI was not found)");
#endif
    }

    char names[MAX_BACKENDS][64];
    int nb = cli_select_backends(backend_s, names, MAX_BACKENDS);
    static refused_plugin refused[MAX_BACKENDS];
    int nrefused = 0;
    if (!strcmp(backend_s, "all") || !*backend_s) {
        int count;
        const dk_backend_info *all = cli_backends(&count);
        for (int i = 0; i < count && nrefused < MAX_BACKENDS; i++) {
            if (all[i].usable)
                continue;
            refused_plugin *r = &refused[nrefused++];
            if (all[i].name[0])
                snprintf(r->name, sizeof r->name, "%s", all[i].name);
            else {
                const char *slash = strrchr(all[i].path, '/');
                snprintf(r->name, sizeof r->name, "%s", slash ? slash + 1 : all[i].path[0] ? all[i].path : "?");
            }
            snprintf(r->reason, sizeof r->reason, "found but refused: %s", all[i].reason);
        }
    }
    dk_context *ctx[MAX_BACKENDS] = {0};
    char absent[MAX_BACKENDS][600];
    int present = 0;
    for (int b = 0; b < nb; b++) {
        absent[b][0] = '\0';
        if (dk_context_create(names[b], &ctx[b]) != DK_OK) {
            snprintf(absent[b], sizeof absent[b], "%s", dk_last_error(NULL));
            printf("backend %s: absent (%s)\n", names[b], absent[b]);
        } else {
            present++;
            printf("backend %s: %s\n", names[b], dk_context_device(ctx[b]));
        }
    }
    for (int r = 0; r < nrefused; r++)
        printf("backend %s: not run (%s)\n", refused[r].name, refused[r].reason);
    if (nb == 0)
        printf("no usable backend found (dakit info says why)\n");

    static row rows[MAX_ROWS];
    int nrows = 0, failed_total = 0, lacking = 0, ref_failed = 0;
    progress_start(&prog);
    char missing[MAX_BACKENDS][128] = {{0}}; /* algorithms a present backend lacks */
    int optional[MAX_BACKENDS] = {0};         /* cases of optional features a backend lacks */
    printf("\n%-8s %-24s %-16s %-24s %12s %12s  %s\n", "algo", "case", "backend", "device", "error", "tolerance",
           "result");
    for (int s = 0; s < NSUITES; s++) {
        const conform_suite *su = suites[s];
        if (!cli_in_list(algo_s, su->algo))
            continue;
        printf("%s: error = %s\n", su->algo, su->measure);
        int has[MAX_BACKENDS] = {0};
        for (int b = 0; b < nb; b++) {
            if (!ctx[b])
                continue;
            has[b] = implements(ctx[b], su);
            if (!has[b]) {
                printf("%-8s %-24s %-16s does not implement %s: not tested\n", su->algo, "(all cases)", names[b],
                       su->algo);
                snprintf(missing[b] + strlen(missing[b]), sizeof missing[b] - strlen(missing[b]), "%s%s",
                         missing[b][0] ? ", " : "", su->algo);
                lacking++;
            }
        }
        for (int i = 0; i < su->count(); i++) {
            if (quick && !su->quick(i))
                continue;
            if (present && su->prepare(i, err, sizeof err) != DK_OK) {
                printf("%-8s %-24s reference failed: %s\n", su->algo, su->name(i), err);
                failed_total++;
                ref_failed++;
                su->release(i);
                continue;
            }
            for (int b = 0; b < nb; b++) {
                if (!ctx[b] || !has[b])
                    continue;
                const char *const *variants = su->variants(ctx[b]);
                static const char *const none[] = {NULL, NULL};
                for (const char *const *v = variants && *variants ? variants : none;
                     (v == none || *v) && nrows < MAX_ROWS; v++) {
                    row *rw = &rows[nrows++];
                    memset(rw, 0, sizeof *rw);
                    rw->suite = su;
                    rw->case_index = i;
                    rw->backend = b;
                    snprintf(rw->variant, sizeof rw->variant, "%s", *v ? *v : "");
                    progress_stage(&prog, "%s %s on %s%s%s", su->algo, su->name(i), names[b], *v ? "/" : "",
                                   *v ? *v : "");
                    double t0 = cli_now();
                    su->run(ctx[b], *v, i, &rw->r);
                    rw->seconds = cli_now() - t0;
                    char label[96];
                    snprintf(label, sizeof label, "%s%s%s", names[b], rw->variant[0] ? "/" : "", rw->variant);
                    progress_clear(&prog);
                    if (rw->r.not_implemented) {
                        printf("%-8s %-24s %-16s not implemented: %s\n", su->algo, su->name(i), label, rw->r.detail);
                        optional[b]++;
                        nrows--;
                        if (v == none)
                            break;
                        continue;
                    }
                    printf("%-8s %-24s %-16s %-24.24s %12.3e %12.3e  %s%s%s\n", su->algo, su->name(i), label,
                           dk_context_device(ctx[b]), rw->r.error, rw->r.tolerance, rw->r.passed ? "pass" : "FAIL",
                           rw->r.passed ? "" : ": ", rw->r.passed ? "" : rw->r.detail);
                    fflush(stdout);
                    failed_total += !rw->r.passed;
                    if (v == none)
                        break;
                }
            }
            su->release(i);
        }
    }

    progress_clear(&prog);
    printf("\n");
    for (int b = 0; b < nb; b++) {
        int pass = 0, fail = 0;
        for (int r = 0; r < nrows; r++)
            if (rows[r].backend == b)
                rows[r].r.passed ? pass++ : fail++;
        if (!ctx[b])
            printf("verdict %-8s ABSENT: %s\n", names[b], absent[b]);
        else
            /* a case whose reference failed ran on no backend: each verdict says so and fails */
            printf("verdict %-8s %s: %d passed, %d failed (%s)%s%s%s%s\n", names[b],
                   fail || ref_failed ? "FAIL" : pass ? "PASS" : "NOTHING RUN", pass, fail, dk_context_device(ctx[b]),
                   missing[b][0] ? "; not implemented: " : "", missing[b],
                   optional[b] ? "; cases of optional features it lacks were not run" : "",
                   ref_failed ? "; cases whose reference failed were not run (above)" : "");
    }
    for (int r = 0; r < nrefused; r++)
        printf("verdict %-8s NOT RUN: %s\n", refused[r].name, refused[r].reason);

    int junit_failed = 0;
    if (junit) {
        output o;
        if (output_open(&o, junit, err, sizeof err) != 0) {
            for (int b = 0; b < nb; b++)
                dk_context_destroy(ctx[b]);
            return cli_error(cmd, 1, "%s", err);
        }
        FILE *f = o.f;
        fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"dakit conform\">\n");
        for (int b = 0; b < nb; b++) {
            int tests = 0, fails = 0;
            for (int r = 0; r < nrows; r++)
                if (rows[r].backend == b) {
                    tests++;
                    fails += !rows[r].r.passed;
                }
            fprintf(f, "  <testsuite name=\"dakit.");
            xml_escape(f, names[b]);
            fprintf(f, "\" tests=\"%d\" failures=\"%d\" skipped=\"%d\">\n", ctx[b] ? tests : 1, fails,
                    ctx[b] ? 0 : 1);
            if (!ctx[b]) {
                fprintf(f, "    <testcase classname=\"dakit.");
                xml_escape(f, names[b]);
                fprintf(f, "\" name=\"backend present\">\n      <skipped message=\"");
                xml_escape(f, absent[b]);
                fprintf(f, "\"/>\n    </testcase>\n");
            }
            for (int r = 0; r < nrows; r++) {
                if (rows[r].backend != b)
                    continue;
                row *rw = &rows[r];
                fprintf(f, "    <testcase classname=\"dakit.%s.%s%s%s\" name=\"%s\" time=\"%.6f\">", names[b],
                        rw->suite->algo, rw->variant[0] ? "." : "", rw->variant,
                        rw->suite->name(rw->case_index), rw->seconds);
                if (!rw->r.passed) {
                    fprintf(f, "\n      <failure message=\"error %.3e exceeds tolerance %.3e: ", rw->r.error,
                            rw->r.tolerance);
                    xml_escape(f, rw->r.detail);
                    fprintf(f, "\"/>\n    ");
                }
                fprintf(f, "</testcase>\n");
            }
            fprintf(f, "  </testsuite>\n");
        }
        for (int r = 0; r < nrefused; r++) {
            fprintf(f, "  <testsuite name=\"dakit.");
            xml_escape(f, refused[r].name);
            fprintf(f, "\" tests=\"1\" failures=\"0\" skipped=\"1\">\n    <testcase classname=\"dakit.");
            xml_escape(f, refused[r].name);
            fprintf(f, "\" name=\"backend usable\">\n      <skipped message=\"");
            xml_escape(f, refused[r].reason);
            fprintf(f, "\"/>\n    </testcase>\n  </testsuite>\n");
        }
        fprintf(f, "</testsuites>\n");
        if (output_commit(&o, err, sizeof err) != 0)
            junit_failed = cli_error(cmd, 1, "%s", err);
    }
    for (int b = 0; b < nb; b++)
        dk_context_destroy(ctx[b]);
    if (failed_total || junit_failed)
        return 1;
    if (nrows == 0)
        return 77; /* nothing could run here: no such backend, or it lacks the algorithm */
    return present < nb || lacking ? 4 : 0;
}
