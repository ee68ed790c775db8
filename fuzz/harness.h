/* exactc fuzzing: what the harnesses share.
 *
 * Each harness is one LLVMFuzzerTestOneInput over a runtime reader. It is built two
 * ways: with clang's -fsanitize=fuzzer,address,undefined for `make fuzz` (libFuzzer's
 * main), and with replay.c's main under gcc or clang with AddressSanitizer and UBSan for
 * `make test`, which runs the seed corpus once. A broken promise is abort() with a line
 * on stderr, so that both builds report it as a crash.
 */
#ifndef EXACTC_FUZZ_HARNESS_H
#define EXACTC_FUZZ_HARNESS_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* fmemopen */
#endif

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_REQUIRE(cond, ...)                                                        \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "fuzz: %s:%d: %s: ", __FILE__, __LINE__, #cond);         \
            fprintf(stderr, __VA_ARGS__);                                              \
            fputc('\n', stderr);                                                       \
            abort();                                                                   \
        }                                                                              \
    } while (0)

/* The input as a stream, as the readers' _stream forms take it (fmemopen: POSIX, which
 * is why the harnesses define _POSIX_C_SOURCE; the runtime itself stays C11). An empty
 * input is a stream of /dev/null: fmemopen may refuse a size of 0. */
static inline FILE *fuzz_stream(const uint8_t *data, size_t size) {
    FILE *f = size > 0 ? fmemopen((void *)data, size, "rb") : fopen("/dev/null", "rb");
    FUZZ_REQUIRE(f != NULL, "cannot open the input as a stream");
    return f;
}

/* A scratch file for the .npy write -> read round trip: $EXACTC_FUZZ_DIR/<name> (the
 * runner gives each process a folder of its own, in memory where it can), else the
 * current folder. */
static inline void fuzz_scratch_path(char *dst, size_t cap, const char *name) {
    const char *dir = getenv("EXACTC_FUZZ_DIR");
    snprintf(dst, cap, "%s/%s", dir != NULL && dir[0] != '\0' ? dir : ".", name);
}

#endif
