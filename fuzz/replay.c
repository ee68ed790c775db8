/* exactc fuzzing: a main for the harnesses without libFuzzer. Each argument is a file
 * of the corpus, passed once to LLVMFuzzerTestOneInput from a heap block of exactly its
 * size (so that AddressSanitizer sees a read one byte past the end). `make test` builds
 * each harness with this main under gcc and clang, ASan and UBSan, and replays the seed
 * corpus (tests/test_fuzz_harnesses.py). */
#include "harness.h"

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (f == NULL) {
            fprintf(stderr, "replay: cannot open %s\n", argv[i]);
            return 2;
        }
        size_t cap = 1 << 16, len = 0;
        uint8_t *buf = malloc(cap);
        if (buf == NULL) return 2;
        for (;;) {
            if (len == cap) {
                uint8_t *grown = realloc(buf, cap *= 2);
                if (grown == NULL) return 2;
                buf = grown;
            }
            size_t got = fread(buf + len, 1, cap - len, f);
            len += got;
            if (got == 0) break;
        }
        fclose(f);
        uint8_t *exact = malloc(len ? len : 1);
        if (exact == NULL) return 2;
        for (size_t k = 0; k < len; k++) exact[k] = buf[k];
        free(buf);
        LLVMFuzzerTestOneInput(exact, len);
        free(exact);
    }
    printf("replay: %d inputs\n", argc - 1);
    return 0;
}
