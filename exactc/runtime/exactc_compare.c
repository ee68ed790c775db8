/* exactc runtime: the conformance comparer, conformance/compare in an exported directory.
 *
 *     compare [--site f64|f32|bf16] EXPECTED.npy ACTUAL.npy
 *
 * compares two .npy files by docs/semantics.md's rule (the rule exactc's harness applies
 * in Python, verify/compare.py's bit_equal_mask): two outputs are equal when their dtypes
 * and shapes are, and every element's bit pattern is, except that any f64 or f32 NaN
 * equals any other (their payload and sign are not specified). A bf16 site's values
 * travel widened to f32 and are compared on every bit (bf16 NaN is canonical); int32 and
 * int64 on every bit. It prints nothing and exits 0 when they are equal; otherwise one
 * line on stdout and exit 1:
 *
 *     DIFFERS  logits.npy: 7 of 288 elements differ; first at index (1, 5):
 *              expected 0x3e1b2c4d (0.151535988), got 0x3e1b2c4e (0.151535995)
 *
 * (one line; wrapped here), or the reason the files cannot be compared (unreadable,
 * missing, another dtype or shape). Python is not needed: check.sh calls this program.
 */
#include "exactc_rt.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The raw bits of element i, zero-extended. */
static uint64_t element_bits(const exactc_array *a, size_t i) {
    const unsigned char *p = (const unsigned char *)a->data + i * exactc_dtype_size(a->dtype);
    if (exactc_dtype_size(a->dtype) == 8) {
        uint64_t u;
        memcpy(&u, p, sizeof u);
        return u;
    }
    uint32_t u;
    memcpy(&u, p, sizeof u);
    return u;
}

static int is_nan_bits(exactc_dtype t, uint64_t u) {
    if (t == EXACTC_F64) return (u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    if (t == EXACTC_F32) return (u & 0x7fffffffu) > 0x7f800000u;
    return 0;
}

/* Equal by the rule: every bit, or (f64/f32, unless all_bits) both NaN. */
static int same_element(exactc_dtype t, uint64_t e, uint64_t a, int all_bits) {
    if (e == a) return 1;
    return !all_bits && is_nan_bits(t, e) && is_nan_bits(t, a);
}

/* "0x3e1b2c4d (0.151535988)": the bits, then the value in decimal (a NaN as "nan": its
 * sign and payload are in the bits). */
static void format_value(char *dst, size_t cap, exactc_dtype t, uint64_t u) {
    if (is_nan_bits(t, u)) {
        snprintf(dst, cap, t == EXACTC_F64 ? "0x%016" PRIx64 " (nan)" : "0x%08" PRIx64 " (nan)", u);
        return;
    }
    switch (t) {
    case EXACTC_F64: {
        double d;
        memcpy(&d, &u, sizeof d);
        snprintf(dst, cap, "0x%016" PRIx64 " (%.17g)", u, d);
        break;
    }
    case EXACTC_F32: {
        uint32_t w = (uint32_t)u;
        float f;
        memcpy(&f, &w, sizeof f);
        snprintf(dst, cap, "0x%08" PRIx32 " (%.9g)", w, (double)f);
        break;
    }
    case EXACTC_I32:
        snprintf(dst, cap, "0x%08" PRIx32 " (%" PRId32 ")", (uint32_t)u, (int32_t)(uint32_t)u);
        break;
    default:
        snprintf(dst, cap, "0x%016" PRIx64 " (%" PRId64 ")", u, (int64_t)u);
        break;
    }
}

static const char *dtype_name(exactc_dtype t) {
    switch (t) {
    case EXACTC_F64: return "f64";
    case EXACTC_F32: return "f32";
    case EXACTC_I32: return "int32";
    default: return "int64";
    }
}

/* "f32 (2, 3)" into dst. */
static void format_array_type(char *dst, size_t cap, const exactc_array *a) {
    size_t k = (size_t)snprintf(dst, cap, "%s (", dtype_name(a->dtype));
    for (int d = 0; d < a->ndim && k < cap; d++)
        k += (size_t)snprintf(dst + k, cap - k, "%s%" PRId64, d ? ", " : "", a->shape[d]);
    if (k < cap) snprintf(dst + k, cap - k, "%s)", a->ndim == 1 ? "," : "");
}

/* The multi-index of flat index i in C order: "(1, 5)". */
static void format_index(char *dst, size_t cap, const exactc_array *a, size_t i) {
    size_t rest = i, index[EXACTC_NPY_MAX_DIMS];
    for (int d = a->ndim - 1; d >= 0; d--) {
        size_t extent = (size_t)a->shape[d];
        index[d] = extent ? rest % extent : 0;
        rest = extent ? rest / extent : 0;
    }
    size_t k = (size_t)snprintf(dst, cap, "(");
    for (int d = 0; d < a->ndim && k < cap; d++)
        k += (size_t)snprintf(dst + k, cap - k, "%s%zu", d ? ", " : "", index[d]);
    if (k < cap) snprintf(dst + k, cap - k, "%s)", a->ndim == 1 ? "," : "");
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int usage(const char *argv0) {
    fprintf(stderr, "usage: %s [--site f64|f32|bf16] EXPECTED.npy ACTUAL.npy\n", argv0);
    return 2;
}

int main(int argc, char **argv) {
    int all_bits = 0, first = 1;
    if (argc == 5 && strcmp(argv[1], "--site") == 0) {
        if (strcmp(argv[2], "bf16") == 0) {
            all_bits = 1;
        } else if (strcmp(argv[2], "f64") != 0 && strcmp(argv[2], "f32") != 0) {
            fprintf(stderr, "%s: unknown site type %s; exactc knows f64, f32, bf16\n", argv[0], argv[2]);
            return 2;
        }
        first = 3;
    } else if (argc != 3) {
        return usage(argv[0]);
    }
    const char *expected_path = argv[first], *actual_path = argv[first + 1];
    const char *name = base_name(expected_path);
    char err[512];
    exactc_array expected, actual;
    if (exactc_npy_read(expected_path, &expected, err, sizeof err) != 0) {
        printf("DIFFERS  %s: the expected file cannot be read: %s\n", name, err);
        return 2;
    }
    if (exactc_npy_read(actual_path, &actual, err, sizeof err) != 0) {
        printf("DIFFERS  %s: the program's output cannot be read: %s\n", name, err);
        exactc_array_free(&expected);
        return 1;
    }
    int same_type = expected.dtype == actual.dtype && expected.ndim == actual.ndim;
    for (int d = 0; same_type && d < expected.ndim; d++) same_type = expected.shape[d] == actual.shape[d];
    int status = 0;
    if (!same_type) {
        char want[200], got[200];
        format_array_type(want, sizeof want, &expected);
        format_array_type(got, sizeof got, &actual);
        printf("DIFFERS  %s: expected %s, got %s\n", name, want, got);
        status = 1;
    } else {
        size_t count = expected.nbytes / exactc_dtype_size(expected.dtype);
        size_t differ = 0, at = 0;
        for (size_t i = 0; i < count; i++) {
            if (!same_element(expected.dtype, element_bits(&expected, i), element_bits(&actual, i), all_bits)) {
                if (differ++ == 0) at = i;
            }
        }
        if (differ > 0) {
            char index[200], want[64], got[64];
            format_index(index, sizeof index, &expected, at);
            format_value(want, sizeof want, expected.dtype, element_bits(&expected, at));
            format_value(got, sizeof got, actual.dtype, element_bits(&actual, at));
            printf("DIFFERS  %s: %zu of %zu elements differ; first at index %s: expected %s, got %s\n",
                   name, differ, count, index, want, got);
            status = 1;
        }
    }
    exactc_array_free(&expected);
    exactc_array_free(&actual);
    return status;
}
