/* dakit bench: every algorithm's benchmark cases side by side on the
 * selected backends. Each backend's floor comes from its own device's copy
 * bandwidth, timed at the start, so a ratio to the floor means the same on
 * a CPU as on a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "cli/progress.h"
#include "harness/bench.h"

#define MAX_BACKENDS 16
#define MAX_RUNS 200

static const bench_suite *const suites[] = {&bench_gauss, &bench_enkf, &bench_kmeans, &bench_gbees, &bench_letkf};
#define NSUITES ((int)(sizeof suites / sizeof suites[0]))

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dakit bench [[--algo] ALGO[,ALGO...]] [--backend NAME[,NAME...]|all] [--case NAME[,...]]\n"
            "                   [--variant NAME[,...]] [--csv FILE] [--min-time SECONDS] [--max-runs N]\n"
            "                   [--progress|--quiet]\n"
            "       dakit bench --ranks P [--backend NAME] [--case NAME[,...]] [--min-time S] [--max-runs N]\n"
            "\n"
            "Times each benchmark case on each backend and variant: one warm-up, then repeated\n"
            "runs until --min-time seconds (default 1) have passed or --max-runs (default 50)\n"
            "runs are done (at least 3). Buffers stay on the device; each run ends when the\n"
            "result is in device memory. Reports the median, the throughput (the bytes that\n"
            "must move) and the ratio to the floor: those bytes over the device's copy\n"
            "bandwidth, timed first on each backend.\n"
            "\n"
            "  ALGO, --algo ALGO[,...]    algorithms to time: gauss, enkf, kmeans, gbees, letkf\n"
            "                             (default: all)\n"
            "  --backend NAME[,...]|all   backends to time on (default: all usable)\n"
            "  --case NAME[,...]          cases to time, from the list below (default: all)\n"
            "  --variant NAME[,...]       only these of each backend's variants (dakit info lists\n"
            "                             them; a name no backend offers is reported after the run;\n"
            "                             default: every variant)\n"
            "  --csv FILE                 also write one row per case, backend and variant\n"
            "  --min-time SECONDS         keep repeating a case this long, 0 to 86400 (default 1)\n"
            "  --max-runs N               timed runs per case at most, 3 to 200 (default 50)\n"
            "  --progress                 on stderr the case being timed, even when it is no terminal\n"
            "                             (a batch job's log), with the elapsed time\n"
            "  --quiet                    no progress (default: progress only when stderr is a terminal)\n"
            "  --ranks P                  the distributed cases below over P MPI ranks (libdakit-mpi):\n"
            "                             per case the median time from a barrier to the slowest rank,\n"
            "                             and per rank its execute time and the part spent in MPI\n"
            "                             calls; at one rank also the plain single-process call and\n"
            "                             the layer's overhead. Started without mpirun, it starts itself\n"
            "                             under $DAKIT_MPIRUN (default mpirun) -n P. One backend\n"
            "                             (default: auto).\n"
            "\n"
            "A case that cannot run here (its data file is not found, the backend refuses it) is\n"
            "reported as skipped with the reason, in the table and in the CSV's last column,\n"
            "`skipped` (empty for a case that ran; its numbers are then empty). The RADOLAN case\n"
            "reads its file from $DAKIT_RADOLAN, else from the folder $DAKIT_DATA when set, else\n"
            "from the installed data folder (DATADIR/dakit), else from tests/data of the source\n"
            "tree of the build that made this dakit.\n"
            "\n"
            "exit status: 0 at least one case ran and none failed; 1 a case failed, or nothing\n"
            "ran (every case skipped); 2 bad usage. Skipped cases alone change nothing.\n"
            "\n"
            "cases:\n");
    for (int s = 0; s < NSUITES; s++)
        for (int i = 0; i < suites[s]->count(); i++)
            fprintf(f, "  %-7s %-16s %s\n", suites[s]->algo, suites[s]->name(i), suites[s]->what(i));
    bench_ranks_usage(f);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Device copy bandwidth in bytes/s, counting bytes read plus written. */
static double copy_bandwidth(dk_context *ctx, size_t bytes)
{
    dk_buffer *a = NULL, *b = NULL;
    double bw = 0;
    if (dk_buffer_create(ctx, bytes, &a) == DK_OK && dk_buffer_create(ctx, bytes, &b) == DK_OK) {
        double t[20];
        int n = 0;
        double start = cli_now();
        dk_buffer_copy(b, a, bytes); /* warm-up, first touch */
        while (n < 20 && (n < 3 || cli_now() - start < 1.0)) {
            double t0 = cli_now();
            if (dk_buffer_copy(b, a, bytes) != DK_OK)
                break;
            t[n++] = cli_now() - t0;
        }
        if (n)
            bw = 2.0 * (double)bytes / median(t, n);
    }
    dk_buffer_destroy(a);
    dk_buffer_destroy(b);
    return bw;
}

/* Every item of a comma list is known to `known`; else prints which is not. */
static int check_list(const char *cmd, const char *list, const char *kind, int (*known)(const char *, size_t))
{
    for (const char *p = list; p && *p;) {
        size_t len = strcspn(p, ",");
        if (!known(p, len)) {
            cli_error(cmd, 2, "unknown %s '%.*s' (dakit bench --help lists them)", kind, (int)len, p);
            return 0;
        }
        p += len;
        if (*p == ',')
            p++;
    }
    return 1;
}

static int known_algo(const char *p, size_t len)
{
    for (int s = 0; s < NSUITES; s++)
        if (strlen(suites[s]->algo) == len && !strncmp(p, suites[s]->algo, len))
            return 1;
    return 0;
}

static int known_case(const char *p, size_t len)
{
    for (int s = 0; s < NSUITES; s++)
        for (int i = 0; i < suites[s]->count(); i++)
            if (strlen(suites[s]->name(i)) == len && !strncmp(p, suites[s]->name(i), len))
                return 1;
    return 0;
}

/* Adds the names of v that `offered` (a comma list) lacks. */
static void add_offered(char *offered, size_t size, const char *const *v)
{
    for (size_t used = strlen(offered); v && *v; v++)
        if (!cli_in_list(offered, *v) && used + strlen(*v) + 2 < size)
            used += (size_t)snprintf(offered + used, size - used, "%s%s", used ? "," : "", *v);
}

/* Names on stderr each name of the comma list `want` that is not in
 * `offered` (a plugin built without an optional library offers fewer);
 * returns how many are. */
static int report_variants(const char *cmd, const char *want, const char *offered)
{
    int found = 0;
    for (const char *p = want; *p;) {
        size_t len = strcspn(p, ",");
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), p);
        if (cli_in_list(offered, name))
            found++;
        else
            fprintf(stderr, "dakit %s: no backend timed offers variant '%s' for the algorithms timed (they offer: %s)\n",
                    cmd, name, *offered ? offered : "none");
        p += len;
        if (*p == ',')
            p++;
    }
    return found;
}

/* A CSV field: quoted, its quotes doubled, its line breaks made blanks. */
static void csv_text(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++)
        if (*s == '"')
            fputs("\"\"", f);
        else
            fputc(*s == '\n' || *s == '\r' ? ' ' : *s, f);
    fputc('"', f);
}

/* A skipped case's CSV row: the same columns, the numbers empty, the reason last. */
static void csv_skipped(FILE *csv, const char *algo, const char *name, const char *backend, const char *variant,
                        const char *device, double bw, const char *why)
{
    fprintf(csv, "%s,%s,%s,%s,", algo, name, backend, variant);
    csv_text(csv, device);
    fprintf(csv, ",,,,,%.3f,,,", bw / 1e9);
    csv_text(csv, why);
    fputc('\n', csv);
}

int cmd_bench(int argc, char **argv)
{
    const char *cmd = "bench", *backend_s = "all", *csv_path = NULL, *case_s = NULL, *algo_s = NULL,
               *variant_s = NULL;
    double min_time = 1.0;
    int max_runs = 50, ranks = 0;
    progress prog;
    progress_init(&prog, cmd);
    static const struct option option_table[] = {CLI_FLAG("help"), CLI_VALUE("algo"), CLI_VALUE("backend"),
        CLI_VALUE("case"), CLI_VALUE("variant"), CLI_VALUE("csv"), CLI_VALUE("min-time"), CLI_VALUE("ranks"), CLI_VALUE("max-runs"),
        CLI_FLAG("progress"), CLI_FLAG("quiet"), {0}};
    /* the algorithms may also be given as an operand: dakit bench gauss */
    cli_args args = {.cmd = cmd, .argc = argc, .argv = argv, .options = option_table, .operands = 1};
    int more;
    while ((more = cli_next(&args)) == 1) {
        const char *a = args.opt, *v = args.value;
        if (!strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (progress_option(&prog, a)) {
            continue;
        } else if (!strcmp(a, "--algo")) {
            algo_s = v;
        } else if (!strcmp(a, "--backend")) {
            backend_s = v;
        } else if (!strcmp(a, "--case")) {
            case_s = v;
        } else if (!strcmp(a, "--variant")) {
            variant_s = v;
        } else if (!strcmp(a, "--csv")) {
            csv_path = v;
        } else if (!strcmp(a, "--min-time")) {
            if (cli_double(cmd, a, v, 0, 86400, 0, &min_time))
                return 2;
        } else if (!strcmp(a, "--ranks")) {
            if (cli_int(cmd, a, v, 1, 1 << 20, &ranks))
                return 2;
        } else if (!strcmp(a, "--max-runs")) {
            if (cli_int(cmd, a, v, 3, MAX_RUNS, &max_runs))
                return 2;
        }
    }
    if (more)
        return more;
    if (args.next < argc)
        algo_s = argv[args.next];
    if (ranks) {
        if (cli_options_only)
            return 0;
        return bench_ranks(ranks, argc, argv, backend_s, case_s, min_time, max_runs);
    }
    if (!check_list(cmd, algo_s, "algorithm", known_algo) || !check_list(cmd, case_s, "case", known_case))
        return 2;
    if (cli_backend_list(cmd, "--backend", backend_s, MAX_BACKENDS))
        return 2;
    if (cli_options_only)
        return 0;
    /* every plugin probed now, in child processes, while this process has no
     * threads; the gbees cases look up their device's kind in that list */
    int found;
    cli_backends(&found);
    char names[MAX_BACKENDS][64];
    int nb = cli_select_backends(backend_s, names, MAX_BACKENDS);
    FILE *csv = NULL;
    output out;
    char err[4200];
    if (csv_path) {
        if (output_open(&out, csv_path, err, sizeof err) != 0)
            return cli_error(cmd, 1, "%s", err);
        csv = out.f;
        fprintf(csv, "algo,case,backend,variant,device,median_ms,min_ms,runs,gb_per_s,copy_gb_per_s,floor_ms,"
                     "ratio_to_floor,skipped\n");
    }
    int ran = 0, failures = 0;
    char offered[1024] = ""; /* the variants of the selected algorithms on the backends timed */
    progress_start(&prog);
    printf("%-6s %-15s %-16s %10s %10s %6s %9s %9s %7s\n", "algo", "case", "backend", "median ms", "min ms",
           "runs", "GB/s", "floor ms", "ratio");
    for (int b = 0; b < nb; b++) {
        dk_context *ctx;
        if (dk_context_create(names[b], &ctx) != DK_OK) {
            printf("backend %s: absent (%s)\n", names[b], dk_last_error(NULL));
            continue;
        }
        double bw = copy_bandwidth(ctx, (size_t)256 << 20);
        fprintf(stderr, "backend %s on %s: copy bandwidth %.1f GB/s (read + write)\n", names[b],
                dk_context_device(ctx), bw / 1e9);
        for (int s = 0; s < NSUITES; s++) {
            const bench_suite *su = suites[s];
            if (!cli_in_list(algo_s, su->algo))
                continue;
            const char *const *variants = su->variants(ctx);
            add_offered(offered, sizeof offered, variants);
            for (int c = 0; c < su->count(); c++) {
                if (!cli_in_list(case_s, su->name(c)))
                    continue;
                for (const char *const *v = variants; v && *v; v++) {
                    if (!cli_in_list(variant_s, *v))
                        continue;
                    char label[96];
                    snprintf(label, sizeof label, "%s/%s", names[b], *v);
                    void *st = NULL;
                    progress_stage(&prog, "%s %s on %s", su->algo, su->name(c), label);
                    st = su->setup(ctx, c, *v, err, sizeof err);
                    progress_clear(&prog);
                    if (!st) {
                        printf("%-6s %-15s %-16s skipped: %s\n", su->algo, su->name(c), label, err);
                        fflush(stdout);
                        if (csv)
                            csv_skipped(csv, su->algo, su->name(c), names[b], *v, dk_context_device(ctx), bw, err);
                        continue;
                    }
                    double t[MAX_RUNS];
                    int n = 0, failed = su->run(st) != DK_OK; /* warm-up */
                    double start = cli_now();
                    while (!failed && n < max_runs && (n < 3 || cli_now() - start < min_time)) {
                        double t0 = cli_now();
                        failed = su->run(st) != DK_OK;
                        t[n++] = cli_now() - t0;
                        progress_tick(&prog, "%s %s on %s: %d runs", su->algo, su->name(c), label, n);
                    }
                    progress_clear(&prog); /* teardown may print */
                    su->teardown(st);
                    if (failed) {
                        printf("%-6s %-15s %-16s failed: %s\n", su->algo, su->name(c), label, dk_last_error(ctx));
                        failures++;
                        continue;
                    }
                    double med = median(t, n), mn = t[0], moved = su->bytes(c);
                    double floor_s = bw > 0 ? moved / bw : NAN;
                    printf("%-6s %-15s %-16s %10.3f %10.3f %6d %9.1f %9.3f %7.2f\n", su->algo, su->name(c), label,
                           med * 1e3, mn * 1e3, n, moved / med / 1e9, floor_s * 1e3, med / floor_s);
                    fflush(stdout);
                    if (csv)
                        fprintf(csv, "%s,%s,%s,%s,\"%s\",%.6f,%.6f,%d,%.3f,%.3f,%.6f,%.4f,\n", su->algo, su->name(c),
                                names[b], *v, dk_context_device(ctx), med * 1e3, mn * 1e3, n, moved / med / 1e9,
                                bw / 1e9, floor_s * 1e3, med / floor_s);
                    ran++;
                }
            }
        }
        dk_context_destroy(ctx);
    }
    progress_clear(&prog);
    if (variant_s && !report_variants(cmd, variant_s, offered)) {
        if (csv)
            output_abort(&out);
        return cli_error(cmd, 2, "--variant %s names no variant to time", variant_s);
    }
    if (csv && output_commit(&out, err, sizeof err) != 0)
        return cli_error(cmd, 1, "%s", err);
    if (!ran)
        fprintf(stderr, "dakit bench: no case ran\n");
    return ran && !failures ? 0 : 1;
}
