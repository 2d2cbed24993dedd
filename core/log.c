#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static _Thread_local char thread_error[DK_MSG_LEN] = "no error";

/* Each thread keeps its own last message for each of the few contexts it
 * failed on most recently, so threads sharing a context never read each
 * other's errors. */
#define CONTEXT_ERROR_SLOTS 8
static _Thread_local struct {
    uint64_t ctx_id; /* 0: unused */
    char text[DK_MSG_LEN];
} context_errors[CONTEXT_ERROR_SLOTS];
static _Thread_local unsigned context_error_next;

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static dk_log_level log_level = DK_LOG_WARN;

static void read_log_level(void)
{
    const char *s = getenv("DAKIT_LOG");
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; s && i < 4; i++)
        if (strcmp(s, names[i]) == 0)
            log_level = (dk_log_level)i;
}

static dk_log_level log_threshold(void)
{
    pthread_once(&log_once, read_log_level);
    return log_level;
}

/* Logging is opt-in diagnostics (DAKIT_LOG); failures are returned, never
 * only logged. */
void dk_log(dk_log_level level, const char *fmt, ...)
{
    static const char *tags[] = {"error", "warn", "info", "debug"};
    if (level > log_threshold())
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dakit: %s: ", tags[level]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

dk_status dk_fail(dk_context *ctx, dk_status status, const char *fmt, ...)
{
    /* formatted apart first: relaying dk_last_error(NULL) to a context is a
     * call whose argument is thread_error itself */
    char text[DK_MSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    memcpy(thread_error, text, sizeof thread_error);
    if (ctx) {
        unsigned slot = 0;
        while (slot < CONTEXT_ERROR_SLOTS && context_errors[slot].ctx_id != ctx->id)
            slot++;
        if (slot == CONTEXT_ERROR_SLOTS)
            slot = context_error_next++ % CONTEXT_ERROR_SLOTS;
        context_errors[slot].ctx_id = ctx->id;
        memcpy(context_errors[slot].text, text, sizeof text);
    }
    dk_log(DK_LOG_DEBUG, "%s: %s", dk_status_string(status), thread_error);
    return status;
}

dk_status dk_fail_msg(dk_context *ctx, dk_status status, const dk_msg *msg, const char *what)
{
    const char *text = msg && msg->text[0] ? msg->text : "no reason given by the backend";
    return dk_fail(ctx, status, "%s: %s", what, text);
}

DK_API const char *dk_last_error(const dk_context *ctx)
{
    if (!ctx)
        return thread_error;
    for (unsigned slot = 0; slot < CONTEXT_ERROR_SLOTS; slot++)
        if (context_errors[slot].ctx_id == ctx->id)
            return context_errors[slot].text;
    return "no error";
}

DK_API const char *dk_status_string(dk_status status)
{
    switch (status) {
    case DK_OK: return "ok";
    case DK_ERR_INVALID_ARGUMENT: return "invalid argument";
    case DK_ERR_NO_BACKEND: return "no such backend";
    case DK_ERR_NOT_IMPLEMENTED: return "not implemented";
    case DK_ERR_BACKEND: return "backend failure";
    case DK_ERR_OUT_OF_MEMORY: return "out of memory";
    case DK_ERR_IO: return "input/output error";
    case DK_ERR_FORMAT: return "malformed input";
    }
    return "unknown status";
}

DK_API size_t dk_dtype_size(dk_dtype dtype)
{
    return dtype == DK_F64 ? 8 : dtype == DK_F32 ? 4 : 0;
}

DK_API const char *dk_dtype_name(dk_dtype dtype)
{
    return dtype == DK_F64 ? "f64" : dtype == DK_F32 ? "f32" : "unknown";
}
