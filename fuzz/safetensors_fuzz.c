/* exactc fuzzing: the .safetensors reader (runtime/exactc_safetensors.c).
 *
 * For every input: exactc_st_parse gives the same verdict whatever error buffer it is
 * handed, and a refusal leaves a message and an empty reader. The same bytes read as a
 * stream with exactc_st_open_stream (the stepwise, header-bounded read that
 * exactc_st_open uses) get the same verdict and the same tensors. An accepted file keeps its promises: its tensors tile the data
 * section exactly (their sizes add up to it, each inside it); every tensor is found by
 * its name, and exactc_st_read at its own dtype and shape gives its bytes.
 */
#include "harness.h"
#include "exactc_rt.h"

#include <string.h>

static void check_tensors(const exactc_safetensors *st, const uint8_t *data, size_t size) {
    FUZZ_REQUIRE(st->len == size && st->data_start >= 8 && st->data_start <= size, "a data section outside the file");
    uint64_t covered = 0;
    char err[256];
    for (size_t k = 0; k < st->count; k++) {
        const exactc_st_tensor *t = &st->tensors[k];
        FUZZ_REQUIRE(t->begin <= t->end && t->end <= size - st->data_start, "tensor %s outside the data", t->name);
        covered += t->end - t->begin;
        FUZZ_REQUIRE(exactc_st_find(st, t->name) == t, "tensor %s is not found by its name", t->name);
        size_t n = (size_t)(t->end - t->begin);
        unsigned char *dst = malloc(n ? n : 1);
        FUZZ_REQUIRE(dst != NULL, "out of memory");
        FUZZ_REQUIRE(exactc_st_read(st, t->name, t->dtype, t->ndim, t->shape, dst, err, sizeof err) == 0,
                     "tensor %s does not read at its own dtype and shape: %s", t->name, err);
        FUZZ_REQUIRE(n == 0 || memcmp(dst, data + st->data_start + t->begin, n) == 0, "tensor %s: other bytes", t->name);
        free(dst);
    }
    FUZZ_REQUIRE(covered == size - st->data_start, "the tensors cover %llu of %zu data bytes",
                 (unsigned long long)covered, size - st->data_start);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    exactc_safetensors st, other;
    char err[256], tiny[7];
    int rc = exactc_st_parse(data, size, &st, err, sizeof err);
    FUZZ_REQUIRE(exactc_st_parse(data, size, &other, NULL, 0) == rc, "a NULL error buffer changes the verdict");
    exactc_st_close(&other);
    FUZZ_REQUIRE(exactc_st_parse(data, size, &other, tiny, sizeof tiny) == rc, "a short error buffer changes it");
    exactc_st_close(&other);
    if (rc != 0)
        FUZZ_REQUIRE(err[0] != '\0' && st.count == 0 && st.tensors == NULL && strlen(tiny) < sizeof tiny,
                     "a refusal without its message or with tensors left behind");
    else
        check_tensors(&st, data, size);

    FILE *f = fuzz_stream(data, size);
    int stream_rc = exactc_st_open_stream(f, "input", &other, err, sizeof err);
    fclose(f);
    FUZZ_REQUIRE(stream_rc == rc, "exactc_st_open_stream says %d where exactc_st_parse says %d (%s)", stream_rc, rc,
                 err);
    if (rc == 0) {
        FUZZ_REQUIRE(other.count == st.count, "another count of tensors from the stream");
        for (size_t k = 0; k < st.count; k++)
            FUZZ_REQUIRE(strcmp(other.tensors[k].name, st.tensors[k].name) == 0 &&
                             other.tensors[k].begin == st.tensors[k].begin && other.tensors[k].end == st.tensors[k].end,
                         "tensor %s: another entry from the stream", st.tensors[k].name);
        check_tensors(&other, data, size);
    }
    exactc_st_close(&other);
    exactc_st_close(&st);
    return 0;
}
