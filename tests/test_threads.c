/* A context shared by threads: the core enters a device's plugin from one
 * thread at a time (the watchdog plugin fails if it is entered twice at
 * once), and dk_last_error(ctx) gives each thread its own last failure.
 * Also run under ThreadSanitizer by the sanitizer job (tools/sanitize).
 *
 * test_threads BACKEND: BACKEND is "watchdog" (the test plugin) or a real
 * backend such as cpu, on which the threads filter real fields. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/dakit.h>

#include "check.h"

#define THREADS 4
#define ROUNDS 200
#define ERROR_ROUNDS 20000

static dk_context *shared;

typedef struct worker {
    int id;
    int wrong_message, failed_execute;
    char first_error[512];
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    dk_gauss_desc d;
    dk_gauss_desc_init(&d);
    d.method = DK_GAUSS_RF;
    d.boundary = DK_BOUNDARY_ZERO;
    d.ndim = 1;
    d.shape[0] = 4096;
    d.axes = 1;
    d.sigma[0] = 3;
    dk_plan *plan = NULL;
    if (dk_gauss_plan_create(shared, &d, &plan) != DK_OK) {
        snprintf(w->first_error, sizeof w->first_error, "plan: %s", dk_last_error(shared));
        w->failed_execute++;
        return NULL;
    }
    float *x = malloc(4096 * sizeof *x);
    for (int i = 0; i < 4096; i++)
        x[i] = (float)(i % 17) + (float)w->id;
    char want[64];
    snprintf(want, sizeof want, "%d", -(w->id + 1) * 1000);
    for (int r = 0; r < ROUNDS; r++) {
        if (dk_gauss_execute_host(plan, x, x) != DK_OK) {
            if (!w->failed_execute++)
                snprintf(w->first_error, sizeof w->first_error, "%s", dk_last_error(shared));
        }
    }
    for (int r = 0; r < ERROR_ROUNDS; r++) {
        /* a failure only this thread makes, read back at once */
        dk_gauss_desc bad = d;
        bad.sigma[0] = -(w->id + 1) * 1000;
        dk_plan *none = NULL;
        if (dk_gauss_plan_create(shared, &bad, &none) == DK_OK || !strstr(dk_last_error(shared), want)) {
            if (!w->wrong_message++)
                snprintf(w->first_error, sizeof w->first_error, "expected %s in: %s", want, dk_last_error(shared));
        }
    }
    free(x);
    dk_plan_destroy(plan);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *backend = argc > 1 ? argv[1] : "watchdog";
    if (dk_context_create(backend, &shared) != DK_OK) {
        printf("cannot open %s: %s\n", backend, dk_last_error(NULL));
        return 1;
    }
    pthread_t t[THREADS];
    worker w[THREADS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < THREADS; i++) {
        w[i].id = i;
        pthread_create(&t[i], NULL, work, &w[i]);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < THREADS; i++) {
        CHECK(!w[i].failed_execute, "thread %d: %d of %d executes failed; first: %s", i, w[i].failed_execute, ROUNDS,
              w[i].first_error);
        CHECK(!w[i].wrong_message, "thread %d read another thread's error %d times of %d; first: %s", i,
              w[i].wrong_message, ERROR_ROUNDS, w[i].first_error);
    }
    dk_context_destroy(shared);
    printf("%d threads x %d rounds on one %s context: %s\n", THREADS, ROUNDS, backend, failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
