/* exactc fuzzing: the .npy reader (runtime/exactc_npy.c).
 *
 * For every input: exactc_npy_parse gives the same verdict whatever error buffer it is
 * handed (none, 7 bytes, 256), and a refusal leaves a message and a zeroed array. The
 * same bytes read as a stream with exactc_npy_read_stream (the stepwise, header-bounded
 * read that exactc_npy_read uses) get the same verdict and the same array. An accepted array survives the round trip:
 * format -> parse in memory, and exactc_npy_write -> exactc_npy_read through a file,
 * each giving back the dtype, the shape and the bytes.
 */
#include "harness.h"
#include "exactc_rt.h"

#include <string.h>

static void same_array(const exactc_array *a, const exactc_array *b, const char *route) {
    FUZZ_REQUIRE(a->dtype == b->dtype && a->ndim == b->ndim && a->nbytes == b->nbytes &&
                     memcmp(a->shape, b->shape, sizeof a->shape) == 0,
                 "%s: another dtype or shape", route);
    FUZZ_REQUIRE(a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0, "%s: other bytes", route);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    exactc_array a, b;
    char err[256], tiny[7];
    int rc = exactc_npy_parse(data, size, &a, err, sizeof err);
    FUZZ_REQUIRE(exactc_npy_parse(data, size, &b, NULL, 0) == rc, "a NULL error buffer changes the verdict");
    if (rc == 0) exactc_array_free(&b);
    FUZZ_REQUIRE(exactc_npy_parse(data, size, &b, tiny, sizeof tiny) == rc, "a short error buffer changes it");
    if (rc == 0) exactc_array_free(&b);
    if (rc != 0)
        FUZZ_REQUIRE(err[0] != '\0' && a.data == NULL && a.ndim == 0 && a.nbytes == 0 && strlen(tiny) < sizeof tiny,
                     "a refusal without its message or with an array left behind");

    FILE *f = fuzz_stream(data, size);
    int stream_rc = exactc_npy_read_stream(f, "input", &b, err, sizeof err);
    fclose(f);
    FUZZ_REQUIRE(stream_rc == rc, "exactc_npy_read_stream says %d where exactc_npy_parse says %d (%s)", stream_rc, rc,
                 err);
    if (rc != 0) return 0;
    same_array(&a, &b, "read from a stream");
    exactc_array_free(&b);

    unsigned char *image;
    size_t len;
    FUZZ_REQUIRE(exactc_npy_format(&a, &image, &len, err, sizeof err) == 0, "an accepted array does not format: %s", err);
    FUZZ_REQUIRE(exactc_npy_parse(image, len, &b, err, sizeof err) == 0, "its image does not parse: %s", err);
    same_array(&a, &b, "format -> parse");
    exactc_array_free(&b);
    free(image);

    char path[512];
    fuzz_scratch_path(path, sizeof path, "npy-fuzz-written.npy");
    FUZZ_REQUIRE(exactc_npy_write(path, &a, err, sizeof err) == 0, "an accepted array does not write: %s", err);
    FUZZ_REQUIRE(exactc_npy_read(path, &b, err, sizeof err) == 0, "the written file does not read: %s", err);
    same_array(&a, &b, "write -> read");
    exactc_array_free(&b);
    exactc_array_free(&a);
    return 0;
}
