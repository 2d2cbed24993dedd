/* Probing plugins in child processes. A plugin's probe runs vendor driver
 * code in the process that asks; a broken driver can crash it or hang. The
 * commands that list every plugin (dakit info, conform and bench with
 * --backend all) probe each one in a child: the child calls dk_backend_get
 * and writes the dk_backend_info back through a pipe. A child killed by a
 * signal, or silent past the time limit, makes that plugin "refused" with
 * the reason, and the command goes on. The parent never probes a plugin
 * itself here, so later it opens only plugins whose probe came back. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dakit/plugin.h>

#include "cli/cli.h"

/* A CUDA driver's first initialization can take tens of seconds. */
#define PROBE_SECONDS 120

static dk_backend_info *probed;
static int probed_count = -1;

/* Reads exactly len bytes from fd within the deadline (monotonic seconds);
 * returns the bytes read (short on end of file or timeout), -2 on timeout. */
static long read_all(int fd, void *buf, size_t len, double deadline)
{
    size_t got = 0;
    while (got < len) {
        double left = deadline - cli_now();
        if (left <= 0)
            return -2;
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            return -2;
        if (r < 0)
            break;
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    return (long)got;
}

/* What the child answers: a status word, then the payload. */
typedef struct answer {
    int status; /* 0: payload follows */
} answer;

/* Runs fn(arg, out) in a child and copies its len bytes of answer into out.
 * 0 on success; otherwise the reason in why ("its probe crashed (signal 11)"). */
static int in_child(void (*fn)(void *arg, void *out), void *arg, void *out, size_t len, char *why, size_t why_len)
{
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(why, why_len, "cannot make a pipe to probe it: %s", strerror(errno));
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, why_len, "cannot start a process to probe it: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        /* a crash must end the child by its signal, whatever handlers the
         * process installed (a sanitizer's, a driver's) */
        static const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
        for (size_t k = 0; k < sizeof fatal / sizeof fatal[0]; k++)
            signal(fatal[k], SIG_DFL);
        void *buf = calloc(1, len);
        answer a = {buf ? 0 : 1};
        if (buf)
            fn(arg, buf);
        ssize_t w = write(fds[1], &a, sizeof a);
        for (size_t done = 0; buf && w > 0 && done < len; done += (size_t)w)
            if ((w = write(fds[1], (char *)buf + done, len - done)) <= 0)
                break;
        /* _exit: no atexit handlers or driver destructors in the child */
        _exit(w > 0 ? 0 : 3);
    }
    close(fds[1]);
    double deadline = cli_now() + PROBE_SECONDS;
    answer a = {1};
    long got = read_all(fds[0], &a, sizeof a, deadline);
    if (got == (long)sizeof a && a.status == 0)
        got = read_all(fds[0], out, len, deadline);
    else if (got >= 0)
        got = -1;
    close(fds[0]);
    if (got == -2)
        kill(pid, SIGKILL);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (got == -2) {
        snprintf(why, why_len, "its probe did not finish within %d s (stopped)", PROBE_SECONDS);
        return -1;
    }
    if (WIFSIGNALED(st)) {
        int sig = WTERMSIG(st);
        snprintf(why, why_len, "its probe crashed (signal %d, %s)", sig, strsignal(sig));
        return -1;
    }
    if (got != (long)len) {
        snprintf(why, why_len, "its probe ended without an answer (exit status %d)",
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return -1;
    }
    return 0;
}

static void child_probe(void *arg, void *out)
{
    if (dk_backend_get(*(int *)arg, out) != DK_OK)
        snprintf(((dk_backend_info *)out)->reason, sizeof ((dk_backend_info *)out)->reason, "%s",
                 dk_last_error(NULL));
}

/* The plugin files this process has loaded (discovery keeps the accepted
 * ones open), in load order: the registry's order. */
typedef struct loaded_list {
    char path[64][1024];
    int n;
} loaded_list;

static int collect_plugin(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    loaded_list *l = arg;
    if (!info->dlpi_name || !info->dlpi_name[0] || l->n == 64)
        return 0;
    void *h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
    if (!h)
        return 0;
    void *entry = dlsym(h, DK_PLUGIN_ENTRY_NAME);
    Dl_info where;
    /* the symbol must be the object's own, not one of its dependencies' */
    if (entry && dladdr(entry, &where) && where.dli_fname && !strcmp(where.dli_fname, info->dlpi_name))
        snprintf(l->path[l->n++], sizeof l->path[0], "%s", info->dlpi_name);
    dlclose(h);
    return 0;
}

/* A plugin whose probe crashed said nothing about itself: find its file
 * among those loaded that no other answer named, and read its name and
 * version from its descriptor (its entry ran at discovery already). */
static void name_crashed(dk_backend_info *list, int n, const int *crashed)
{
    loaded_list *l = calloc(1, sizeof *l);
    if (!l)
        return;
    dl_iterate_phdr(collect_plugin, l);
    int next = 0;
    for (int i = 0; i < n; i++) {
        if (!crashed[i])
            continue;
        for (; next < l->n; next++) {
            int named = 0;
            for (int j = 0; j < n && !named; j++)
                named = !crashed[j] && !strcmp(list[j].path, l->path[next]);
            if (!named)
                break;
        }
        if (next == l->n)
            break;
        const char *path = l->path[next++];
        snprintf(list[i].path, sizeof list[i].path, "%s", path);
        void *h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
        dk_plugin_entry_fn fn = NULL;
        if (h)
            *(void **)&fn = dlsym(h, DK_PLUGIN_ENTRY_NAME);
        const dk_plugin *p = fn ? fn() : NULL;
        if (p && p->name) {
            snprintf(list[i].name, sizeof list[i].name, "%s", p->name);
            snprintf(list[i].version, sizeof list[i].version, "%s", p->version ? p->version : "?");
            list[i].priority = p->priority;
        }
        if (h)
            dlclose(h);
    }
    free(l);
}

const dk_backend_info *cli_backends(int *count)
{
    if (probed_count < 0) {
        int n = dk_backend_count();
        probed = calloc(n > 0 ? (size_t)n : 1, sizeof *probed);
        int *crashed = calloc(n > 0 ? (size_t)n : 1, sizeof *crashed);
        if (!probed || !crashed) {
            free(probed);
            free(crashed);
            probed = NULL;
            *count = 0;
            return NULL;
        }
        for (int i = 0; i < n; i++) {
            char why[sizeof probed[i].reason];
            dk_backend_info *b = &probed[i];
            if (in_child(child_probe, &i, b, sizeof *b, why, sizeof why) != 0) {
                memset(b, 0, sizeof *b);
                snprintf(b->reason, sizeof b->reason, "%s", why);
                crashed[i] = 1;
            }
            /* every string ends inside its array, whatever came through the pipe */
            b->name[sizeof b->name - 1] = b->version[sizeof b->version - 1] = b->path[sizeof b->path - 1] = '\0';
            b->reason[sizeof b->reason - 1] = b->algorithms[sizeof b->algorithms - 1] = '\0';
            b->comm[sizeof b->comm - 1] = '\0';
            for (size_t a = 0; a < sizeof b->variants / sizeof b->variants[0]; a++)
                b->variants[a][sizeof b->variants[a] - 1] = '\0';
            for (int d = 0; d < DK_MAX_DEVICES; d++)
                b->devices[d].name[sizeof b->devices[d].name - 1] = '\0';
            if (b->device_count < 0 || b->device_count > DK_MAX_DEVICES)
                b->device_count = b->device_count < 0 ? 0 : DK_MAX_DEVICES;
        }
        name_crashed(probed, n, crashed);
        free(crashed);
        probed_count = n;
    }
    *count = probed_count;
    return probed;
}

const dk_backend_info *cli_backend_named(const char *name)
{
    int n;
    const dk_backend_info *b = cli_backends(&n);
    for (int i = 0; i < n; i++)
        if (!strcmp(b[i].name, name))
            return &b[i];
    return NULL;
}

/* ---- auto selection, for dakit info ---- */

typedef struct auto_pick {
    int ok;
    char backend[64], device[192], error[1024];
} auto_pick;

static void child_auto(void *arg, void *out)
{
    (void)arg;
    auto_pick *a = out;
    dk_context *ctx;
    if (dk_context_create(NULL, &ctx) == DK_OK) {
        a->ok = 1;
        snprintf(a->backend, sizeof a->backend, "%s", dk_context_backend(ctx));
        snprintf(a->device, sizeof a->device, "%s", dk_context_device(ctx));
        dk_context_destroy(ctx);
    } else {
        snprintf(a->error, sizeof a->error, "%s", dk_last_error(NULL));
    }
}

int cli_auto_pick(char *backend, size_t blen, char *device, size_t dlen, char *why, size_t wlen)
{
    auto_pick a;
    memset(&a, 0, sizeof a);
    char reason[512];
    if (in_child(child_auto, NULL, &a, sizeof a, reason, sizeof reason) != 0) {
        /* "its probe crashed (...)" names one plugin; auto selection probes them all */
        snprintf(why, wlen, "it probes every plugin and a %s; name a backend instead (DAKIT_BACKEND, --backend)",
                 strncmp(reason, "its ", 4) ? reason : reason + 4);
        return -1;
    }
    if (!a.ok) {
        snprintf(why, wlen, "%s", a.error);
        return -1;
    }
    snprintf(backend, blen, "%s", a.backend);
    snprintf(device, dlen, "%s", a.device);
    return 0;
}
