/* dakit bench: the benchmark cases side by side on the selected backends.
 * Each backend's floor comes from its own measured copy bandwidth, so a
 * ratio means the same thing on a laptop CPU and on an H100. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define MAX_BACKENDS 16
#define MAX_RUNS 200

typedef struct bench_case {
    const char *name;
    const char *what;
    int ndim;
    size_t shape[3];
    unsigned axes;
    double sigma;
    int K;
    dk_gauss_mode mode;
    size_t overlap, blocks;
} bench_case;

static const bench_case gauss_cases[] = {
    {"2d_8192_exact", "8192x8192 f32, sigma 2, K 4, both axes, exact", 2, {8192, 8192}, 3, 2, 4, DK_GAUSS_EXACT, 0, 0},
    {"1d_1e8_exact", "1e8 f32, sigma 2, K 4, exact", 1, {100000000}, 1, 2, 4, DK_GAUSS_EXACT, 0, 0},
    {"seed_table2", "1e5 f32, sigma 2, K 500, overlap m=5, 3072 blocks", 1, {100000}, 1, 2, 500, DK_GAUSS_OVERLAP, 5, 3072},
};
#define NCASES ((int)(sizeof gauss_cases / sizeof gauss_cases[0]))

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dakit bench [gauss] [--backend NAME[,NAME...]|all] [--case NAME[,...]] [--csv FILE]\n"
            "                   [--min-time SECONDS] [--max-runs N]\n"
            "\n"
            "Times each benchmark case on each backend and variant: one warm-up, then repeated\n"
            "runs until --min-time seconds (default 1) have passed or --max-runs (default 50)\n"
            "runs are done (at least 3). Buffers stay on the device; each run ends when the\n"
            "result is in device memory. Reports the median, the throughput (input read once +\n"
            "output written once) and the ratio to the floor: those bytes over the device's\n"
            "copy bandwidth measured here.\n"
            "\n"
            "cases:\n");
    for (int i = 0; i < NCASES; i++)
        fprintf(f, "  %-16s %s\n", gauss_cases[i].name, gauss_cases[i].what);
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

int cmd_bench(int argc, char **argv)
{
    const char *cmd = "bench", *backend_s = "all", *csv_path = NULL, *case_s = NULL;
    double min_time = 1.0;
    int max_runs = 50;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "gauss")) {
            continue;
        } else if (!strcmp(a, "--backend")) {
            if (!(backend_s = cli_value(cmd, argc, argv, &i)))
                return 2;
        } else if (!strcmp(a, "--case")) {
            if (!(case_s = cli_value(cmd, argc, argv, &i)))
                return 2;
        } else if (!strcmp(a, "--csv")) {
            if (!(csv_path = cli_value(cmd, argc, argv, &i)))
                return 2;
        } else if (!strcmp(a, "--min-time")) {
            const char *v = cli_value(cmd, argc, argv, &i);
            if (!v || (min_time = atof(v)) < 0)
                return cli_error(cmd, 2, "--min-time needs a number of seconds >= 0");
        } else if (!strcmp(a, "--max-runs")) {
            const char *v = cli_value(cmd, argc, argv, &i);
            if (!v || (max_runs = atoi(v)) < 3 || max_runs > MAX_RUNS)
                return cli_error(cmd, 2, "--max-runs must be between 3 and %d", MAX_RUNS);
        } else {
            return cli_error(cmd, 2, "unknown option or algorithm '%s' (dakit bench --help)", a);
        }
    }
    for (const char *p = case_s; p && *p;) {
        size_t len = strcspn(p, ",");
        int known = 0;
        for (int c = 0; c < NCASES; c++)
            known |= strlen(gauss_cases[c].name) == len && !strncmp(p, gauss_cases[c].name, len);
        if (!known)
            return cli_error(cmd, 2, "unknown case '%.*s' (dakit bench --help lists them)", (int)len, p);
        p += len;
        if (*p == ',')
            p++;
    }
    FILE *csv = NULL;
    if (csv_path) {
        if (!(csv = fopen(csv_path, "w")))
            return cli_error(cmd, 1, "cannot write %s", csv_path);
        fprintf(csv, "algo,case,backend,variant,device,median_ms,min_ms,runs,gb_per_s,copy_gb_per_s,floor_ms,ratio_to_floor\n");
    }
    char names[MAX_BACKENDS][64];
    int nb = cli_select_backends(backend_s, names, MAX_BACKENDS);
    int ran = 0;
    printf("%-6s %-15s %-12s %10s %10s %6s %9s %9s %7s\n", "algo", "case", "backend", "median ms", "min ms", "runs",
           "GB/s", "floor ms", "ratio");
    for (int b = 0; b < nb; b++) {
        dk_context *ctx;
        if (dk_context_create(names[b], &ctx) != DK_OK) {
            printf("backend %s: absent (%s)\n", names[b], dk_last_error(NULL));
            continue;
        }
        double bw = copy_bandwidth(ctx, (size_t)256 << 20);
        fprintf(stderr, "backend %s on %s: copy bandwidth %.1f GB/s (read + write)\n", names[b],
                dk_context_device(ctx), bw / 1e9);
        const char *const *variants = dk_gauss_variants(ctx);
        for (int c = 0; c < NCASES; c++) {
            const bench_case *bc = &gauss_cases[c];
            if (!cli_in_list(case_s, bc->name))
                continue;
            dk_gauss_desc d;
            dk_gauss_desc_init(&d);
            d.ndim = bc->ndim;
            size_t count = 1;
            for (int a = 0; a < bc->ndim; a++) {
                d.shape[a] = bc->shape[a];
                d.sigma[a] = bc->sigma;
                count *= bc->shape[a];
            }
            d.axes = bc->axes;
            d.K = bc->K;
            d.mode = bc->mode;
            d.overlap = bc->overlap;
            d.blocks = bc->blocks;
            size_t bytes = count * sizeof(float);
            dk_buffer *in = NULL, *out = NULL;
            float *host = malloc(bytes);
            if (!host || dk_buffer_create(ctx, bytes, &in) != DK_OK || dk_buffer_create(ctx, bytes, &out) != DK_OK) {
                printf("%-6s %-15s %-12s skipped: %s\n", "gauss", bc->name, names[b],
                       host ? dk_last_error(ctx) : "out of host memory");
                free(host);
                dk_buffer_destroy(in);
                dk_buffer_destroy(out);
                continue;
            }
            cli_fill_random(host, DK_F32, count, 42);
            dk_buffer_write(in, host, bytes);
            free(host);
            for (const char *const *v = variants; v && *v; v++) {
                d.variant = *v;
                dk_plan *plan;
                char label[96];
                snprintf(label, sizeof label, "%s/%s", names[b], *v);
                if (dk_gauss_plan_create(ctx, &d, &plan) != DK_OK) {
                    printf("%-6s %-15s %-12s skipped: %s\n", "gauss", bc->name, label, dk_last_error(ctx));
                    continue;
                }
                double t[MAX_RUNS];
                int n = 0, failed = 0;
                failed = dk_gauss_execute(plan, in, out) != DK_OK; /* warm-up */
                double start = cli_now();
                while (!failed && n < max_runs && (n < 3 || cli_now() - start < min_time)) {
                    double t0 = cli_now();
                    failed = dk_gauss_execute(plan, in, out) != DK_OK;
                    t[n++] = cli_now() - t0;
                }
                dk_plan_destroy(plan);
                if (failed) {
                    printf("%-6s %-15s %-12s failed: %s\n", "gauss", bc->name, label, dk_last_error(ctx));
                    continue;
                }
                double med = median(t, n), mn = t[0];
                double moved = 2.0 * (double)bytes;
                double floor_s = bw > 0 ? moved / bw : NAN;
                printf("%-6s %-15s %-12s %10.3f %10.3f %6d %9.1f %9.3f %7.2f\n", "gauss", bc->name, label, med * 1e3,
                       mn * 1e3, n, moved / med / 1e9, floor_s * 1e3, med / floor_s);
                fflush(stdout);
                if (csv)
                    fprintf(csv, "gauss,%s,%s,%s,\"%s\",%.6f,%.6f,%d,%.3f,%.3f,%.6f,%.4f\n", bc->name, names[b], *v,
                            dk_context_device(ctx), med * 1e3, mn * 1e3, n, moved / med / 1e9, bw / 1e9,
                            floor_s * 1e3, med / floor_s);
                ran++;
            }
            dk_buffer_destroy(in);
            dk_buffer_destroy(out);
        }
        dk_context_destroy(ctx);
    }
    if (csv)
        fclose(csv);
    return ran ? 0 : 1;
}
