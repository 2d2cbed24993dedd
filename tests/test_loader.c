/* The loader refuses each broken plugin with its reason, keeps the good
 * ones working, and names what is available when asked for what is not. */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dakit/dakit.h>

#include "../core/comm.h"
#include "check.h"


static const dk_backend_info *find(const dk_backend_info *all, int n, const char *file)
{
    for (int i = 0; i < n; i++) {
        const char *slash = strrchr(all[i].path, '/');
        if (slash && strcmp(slash + 1, file) == 0)
            return &all[i];
    }
    return NULL;
}

/* Run in a child whose DAKIT_PLUGIN_PATH is a folder of many files that
 * are no plugins, a FIFO and a dangling link among them: discovery must
 * neither block on the FIFO nor drop the plugins found after them. */
static int crowded_folder_child(void)
{
    int n = dk_backend_count(), junk = 0, fifo = 0, dangling = 0;
    for (int i = 0; i < n; i++) {
        dk_backend_info info;
        if (dk_backend_get(i, &info) != DK_OK || !strrchr(info.path, '/'))
            continue;
        const char *base = strrchr(info.path, '/') + 1;
        if (!strncmp(base, "junk", 4))
            junk += !info.usable && strstr(info.reason, "not a loadable shared object") != NULL;
        else if (!strcmp(base, "fifo.so"))
            fifo = !info.usable && strstr(info.reason, "skipped: a FIFO") != NULL;
        else if (!strcmp(base, "dangling.so"))
            dangling = !info.usable && strstr(info.reason, "skipped: No such file") != NULL;
    }
    CHECK(junk == 70, "all 70 files that are no plugin are listed with their reason (%d were)", junk);
    CHECK(fifo, "the FIFO is named as skipped");
    CHECK(dangling, "the dangling link is named as skipped");
    dk_context *ctx = NULL;
    CHECK(dk_context_create("cpu", &ctx) == DK_OK, "the cpu plugin, found after 72 other files, opens: %s",
          dk_last_error(NULL));
    dk_context_destroy(ctx);
    return failures ? 1 : 0;
}

static void crowded_folder(const char *self)
{
    char dir[] = "/tmp/dakit_loader_XXXXXX", path[512];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    for (int k = 0; k < 70; k++) {
        snprintf(path, sizeof path, "%s/junk%02d.so", dir, k);
        FILE *f = fopen(path, "w");
        if (f) {
            fputs("not a shared object\n", f);
            fclose(f);
        }
    }
    snprintf(path, sizeof path, "%s/fifo.so", dir);
    CHECK(mkfifo(path, 0600) == 0, "mkfifo");
    snprintf(path, sizeof path, "%s/dangling.so", dir);
    CHECK(symlink("/nonexistent/dakit-none.so", path) == 0, "symlink");
    pid_t pid = fork();
    if (pid == 0) {
        setenv("DAKIT_PLUGIN_PATH", dir, 1);
        alarm(15); /* a discovery that blocks on the FIFO fails instead of hanging the suite */
        execl(self, self, "crowded", dir, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "discovery in a crowded folder: %s %d",
          WIFSIGNALED(status) ? "killed by signal" : "exit", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    for (int k = 0; k < 70; k++) {
        snprintf(path, sizeof path, "%s/junk%02d.so", dir, k);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/fifo.so", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/dangling.so", dir);
    unlink(path);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "crowded"))
        return crowded_folder_child();
    crowded_folder("/proc/self/exe");
    int n = dk_backend_count();
    dk_backend_info all[64];
    for (int i = 0; i < n && i < 64; i++)
        CHECK(dk_backend_get(i, &all[i]) == DK_OK, "dk_backend_get(%d)", i);
    CHECK(dk_backend_get(n, &all[0]) == DK_ERR_INVALID_ARGUMENT, "an index past the end is refused");

    static const struct {
        const char *file, *reason;
    } refused[] = {
        {"wrong_abi.so", "ABI version"},
        {"no_entry.so", "no entry symbol"},
        {"no_device.so", "no test widget is attached"},
        {"not_a_library.so", "not a loadable shared object"},
        {"short_desc.so", "descriptor size 24 bytes"},
    };
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++) {
        const dk_backend_info *b = find(all, n, refused[k].file);
        CHECK(b != NULL, "%s was not found by discovery", refused[k].file);
        if (b) {
            CHECK(!b->usable, "%s should be refused", refused[k].file);
            CHECK(strstr(b->reason, refused[k].reason) != NULL, "%s: reason '%s' lacks '%s'", refused[k].file,
                  b->reason, refused[k].reason);
            printf("refused as expected: %s: %s\n", refused[k].file, b->reason);
        }
    }
    const dk_backend_info *nogauss = find(all, n, "no_gauss.so");
    CHECK(nogauss && nogauss->usable && nogauss->algorithms[0] == '\0',
          "the plugin without algorithms loads and lists none");
    /* A plugin built against a shorter dk_plugin (before the gbees slot was
     * appended) loads; the slot it lacks reads as absent, never as the
     * poison word that follows its descriptor. */
    const dk_backend_info *older = find(all, n, "older_layout.so");
    CHECK(older && older->usable && older->algorithms[0] == '\0', "the older-layout plugin loads with no algorithm: %s",
          older ? older->reason : "not found");
    dk_context *octx = NULL;
    CHECK(dk_context_create("older", &octx) == DK_OK, "the older-layout plugin opens: %s", dk_last_error(NULL));
    if (octx) {
        dk_gbees_desc gd;
        dk_gbees_desc_init(&gd);
        gd.model = dk_gbees_model_find("lorenz63");
        dk_gbees_meas m0 = {.dim = 3, .mean = {1, 1, 1}, .cov = {1, 0, 0, 0, 1, 0, 0, 0, 1}, .period = 1};
        dk_plan *gp = NULL;
        CHECK(dk_gbees_plan_create(octx, &gd, &m0, 1, &gp) == DK_ERR_NOT_IMPLEMENTED && gp == NULL,
              "gbees on a plugin whose descriptor ends before the gbees slot: %s", dk_last_error(octx));
        CHECK(dk_gbees_variants(octx) == NULL, "no gbees variants past the plugin's size");
        dk_context_destroy(octx);
    }
    /* A plugin built before the comm slot was appended loads and offers no
     * device-side communication; the poison word past its size is never
     * read. The cpu plugin offers none either. */
    const dk_backend_info *before = find(all, n, "before_comm.so");
    CHECK(before && before->usable && before->comm[0] == '\0', "the pre-comm plugin loads with no comm: %s",
          before ? before->reason : "not found");
    dk_context *bctx = NULL;
    CHECK(dk_context_create("beforecomm", &bctx) == DK_OK, "the pre-comm plugin opens: %s", dk_last_error(NULL));
    if (bctx) {
        CHECK(dk_comm_name(bctx) == NULL && dk_comm_id_size(bctx) == 0, "no comm past the plugin's size");
        unsigned char id[DK_COMM_ID_MAX];
        dk_comm *comm = NULL;
        CHECK(dk_comm_make_id(bctx, id) == DK_ERR_NOT_IMPLEMENTED, "no id without comm");
        CHECK(dk_comm_create(bctx, id, 1, 0, &comm) == DK_ERR_NOT_IMPLEMENTED && !comm,
              "no communicator without comm: %s", dk_last_error(bctx));
        CHECK(strstr(dk_last_error(bctx), "offers no device-side communication"), "the reason is said: %s",
              dk_last_error(bctx));
        dk_context_destroy(bctx);
    }
    const dk_backend_info *cpu_info = find(all, n, "dakit-cpu.so");
    CHECK(cpu_info && cpu_info->comm[0] == '\0', "the cpu plugin offers no device-side communication");
    const dk_backend_info *cuda_info = find(all, n, "dakit-cuda.so");
    if (cuda_info)
        printf("the cuda plugin's device-side communication: %s\n", cuda_info->comm[0] ? cuda_info->comm : "none");

    /* without a driver the cuda plugin says so, not "driver version is insufficient" */
    const dk_backend_info *cuda = find(all, n, "dakit-cuda.so");
    void *libcuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (cuda && !libcuda)
        CHECK(!cuda->usable && strstr(cuda->reason, "no NVIDIA driver found"), "cuda without a driver: %s",
              cuda->reason);
    if (libcuda)
        dlclose(libcuda);
    const dk_backend_info *cpu = find(all, n, "dakit-cpu.so");
    CHECK(cpu && cpu->usable && strstr(cpu->algorithms, "gauss"), "the cpu plugin still works beside broken ones");

    /* a refused or unknown backend: the error names what is available */
    dk_context *ctx = NULL;
    CHECK(dk_context_create("wrongabi", &ctx) == DK_ERR_NO_BACKEND && ctx == NULL, "wrongabi must not open");
    CHECK(strstr(dk_last_error(NULL), "Available backends:") && strstr(dk_last_error(NULL), "cpu"),
          "message names available backends: %s", dk_last_error(NULL));
    printf("asking for a missing backend says: %s\n", dk_last_error(NULL));
    CHECK(dk_context_create("nodevice", &ctx) == DK_ERR_NO_BACKEND, "nodevice must not open");
    CHECK(strstr(dk_last_error(NULL), "no test widget"), "the probe's reason is passed on: %s", dk_last_error(NULL));
    CHECK(dk_context_create("quantum", &ctx) == DK_ERR_NO_BACKEND, "unknown name");
    CHECK(strstr(dk_last_error(NULL), "quantum: no plugin of that name"), "%s", dk_last_error(NULL));

    /* a preference list falls through to the first that works */
    CHECK(dk_context_create("quantum, nodevice ,cpu", &ctx) == DK_OK, "list falls back to cpu: %s",
          dk_last_error(NULL));
    if (ctx) {
        CHECK(strcmp(dk_context_backend(ctx), "cpu") == 0, "picked %s", dk_context_backend(ctx));
        dk_context_destroy(ctx);
        ctx = NULL;
    }
    setenv("DAKIT_BACKEND", "quantum,cpu", 1);
    CHECK(dk_context_create(NULL, &ctx) == DK_OK && strcmp(dk_context_backend(ctx), "cpu") == 0,
          "DAKIT_BACKEND is honoured under auto");
    dk_context_destroy(ctx);
    ctx = NULL;
    CHECK(dk_context_create("nogauss", &ctx) == DK_OK, "the explicit name overrides DAKIT_BACKEND");
    unsetenv("DAKIT_BACKEND");

    /* a plugin whose ops table lacks the algorithm */
    if (ctx) {
        CHECK(strcmp(dk_context_backend(ctx), "nogauss") == 0, "opened %s", dk_context_backend(ctx));
        dk_gauss_desc d;
        dk_gauss_desc_init(&d);
        d.method = DK_GAUSS_RF;
        d.boundary = DK_BOUNDARY_ZERO;
        d.ndim = 1;
        d.shape[0] = 16;
        d.axes = 1;
        d.sigma[0] = 2;
        dk_plan *plan = NULL;
        CHECK(dk_gauss_plan_create(ctx, &d, &plan) == DK_ERR_NOT_IMPLEMENTED && plan == NULL,
              "gauss on a plugin without it");
        CHECK(strstr(dk_last_error(ctx), "does not implement gauss") && strstr(dk_last_error(ctx), "cpu"),
              "message names who does: %s", dk_last_error(ctx));
        printf("a plugin without gauss says: %s\n", dk_last_error(ctx));
        CHECK(dk_gauss_variants(ctx) == NULL, "no variants without gauss");
        dk_context_destroy(ctx);
    }

    setenv("DAKIT_DEVICE", "7", 1);
    CHECK(dk_context_create("cpu", &ctx) == DK_ERR_NO_BACKEND, "device 7 of cpu does not exist");
    CHECK(strstr(dk_last_error(NULL), "DAKIT_DEVICE=7"), "%s", dk_last_error(NULL));
    setenv("DAKIT_DEVICE", "x", 1);
    CHECK(dk_context_create("cpu", &ctx) == DK_ERR_INVALID_ARGUMENT, "DAKIT_DEVICE=x is refused");
    unsetenv("DAKIT_DEVICE");

    return failures ? 1 : 0;
}
