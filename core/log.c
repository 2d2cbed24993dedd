#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static _Thread_local char thread_error[DK_MSG_LEN] = "no error";

static dk_log_level log_threshold(void)
{
    static int level = -1;
    if (level < 0) {
        const char *s = getenv("DAKIT_LOG");
        static const char *names[] = {"error", "warn", "info", "debug"};
        level = DK_LOG_WARN;
        for (int i = 0; s && i < 4; i++)
            if (strcmp(s, names[i]) == 0)
                level = i;
    }
    return (dk_log_level)level;
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
    fprintf(stderr, "dakit %s: ", tags[level]);
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
    if (ctx)
        memcpy(ctx->error, thread_error, sizeof ctx->error);
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
    return ctx ? ctx->error : thread_error;
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
