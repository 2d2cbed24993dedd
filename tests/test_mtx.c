/* MatrixMarket files whose header disagrees with their body are refused
 * with a sentence, before anything is sized from the header: the process
 * runs under a 1 GiB address-space limit, so an allocation sized by a lying
 * header shows up as "out of memory" instead of the sentence. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <dakit/dakit.h>

#include "check.h"

static const char *dir;

static dk_status read_text(const char *name, const char *text, dk_csr *H)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return dk_csr_read_mtx(path, H);
}

int main(int argc, char **argv)
{
    dir = argc > 1 ? argv[1] : ".";
#ifndef __SANITIZE_ADDRESS__ /* ASan reserves terabytes of shadow; tools/sanitize caps its allocations instead */
    struct rlimit lim = {(rlim_t)1 << 30, (rlim_t)1 << 30};
    setrlimit(RLIMIT_AS, &lim);
#endif
    static const struct {
        const char *name, *text, *expect;
    } bad[] = {
        {"symmetric_not_square.mtx", "%%MatrixMarket matrix coordinate real symmetric\n3 40 2\n1 40 1.0\n2 39 1.0\n",
         "must be square"},
        {"rows_past_limit.mtx", "%%MatrixMarket matrix coordinate real general\n300000000 5 1\n1 1 1.0\n",
         "at most 65536 rows"},
        {"entries_past_file.mtx", "%%MatrixMarket matrix coordinate real general\n3 5 2147483000\n1 1 1.0\n",
         "too few for the 2147483000 entries"},
        {"entries_short.mtx", "%%MatrixMarket matrix coordinate real general\n3 5 3\n1 1 1.0\n2 2 2.0\n\n\n\n\n\n\n",
         "ends after 2 of its 3"},
        {"long_line.mtx", NULL, "longer than"},
        {"outside.mtx", "%%MatrixMarket matrix coordinate real general\n3 5 1\n4 1 1.0\n", "outside the 3 x 5"},
        {"nan.mtx", "%%MatrixMarket matrix coordinate real general\n3 5 1\n1 1 nan\n", "not finite"},
        {"extra.mtx", "%%MatrixMarket matrix coordinate real general\n3 5 1\n1 1 1\n2 2 2\n", "more entries"},
    };
    char longline[3000] = "%%MatrixMarket matrix coordinate real general\n3 5 1\n1 1 1";
    size_t n = strlen(longline);
    memset(longline + n, '0', sizeof longline - n - 2);
    longline[sizeof longline - 2] = '\n';
    longline[sizeof longline - 1] = 0;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        dk_csr H;
        dk_status st = read_text(bad[k].name, bad[k].text ? bad[k].text : longline, &H);
        CHECK(st == DK_ERR_FORMAT && strstr(dk_last_error(NULL), bad[k].expect), "%s: status %d, '%s' (want '%s')",
              bad[k].name, (int)st, dk_last_error(NULL), bad[k].expect);
        printf("%-26s %s\n", bad[k].name, dk_last_error(NULL));
    }
    dk_csr H;
    CHECK(read_text("good.mtx", "%%MatrixMarket matrix coordinate real symmetric\n% c\n3 3 2\n2 1 0.5\n3 3 2\n", &H) ==
              DK_OK && H.rows == 3 && H.indptr[3] == 3,
          "a square symmetric matrix reads: %s", dk_last_error(NULL));
    dk_csr_free(&H);
    return failures ? 1 : 0;
}
