/* The tests' one assertion macro: count, say where, go on. */
#ifndef DAKIT_TESTS_CHECK_H
#define DAKIT_TESTS_CHECK_H
#include <stdio.h>
static int failures;
#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            failures++;                                                    \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                    \
            printf(__VA_ARGS__);                                           \
            printf("\n");                                                  \
        }                                                                  \
    } while (0)
#endif
