/* exactc runtime: the one header every exported program and printed kernel includes.
 *
 * C11, standard headers only. Results never come from the platform's libm: the
 * transcendental functions below are exactc's own (exactc_libm.c), and their numpy
 * twins (runtime/libm_twin.py) give the same bits. sqrt is the one exception: IEEE 754
 * requires it correctly rounded, so every conforming sqrt gives the same bits.
 */
#ifndef EXACTC_RT_H
#define EXACTC_RT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------------------------
 * bf16: stored as the upper 16 bits of an IEEE binary32.
 * Widening is exact. Narrowing rounds to nearest, ties to even, and every NaN becomes
 * the canonical quiet NaN 0x7FC0. A double reaches bf16 through float: two roundings.
 * ---------------------------------------------------------------------------------- */
typedef uint16_t exactc_bf16;

static inline float exactc_bf16_to_f32(exactc_bf16 h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline exactc_bf16 exactc_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (exactc_bf16)0x7fc0u; /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even; carries into inf */
    return (exactc_bf16)(u >> 16);
}

static inline exactc_bf16 exactc_f64_to_bf16(double d) {
    return exactc_f32_to_bf16((float)d);
}

/* ------------------------------------------------------------------------------------
 * Transcendental functions (exactc_libm.c). The f64 functions are the definitions;
 * an f32 or bf16 site computes (float)f((double)x), which the *f forms spell out.
 * ---------------------------------------------------------------------------------- */
double exactc_exp(double x);
double exactc_log(double x);
double exactc_tanh(double x);
double exactc_erf(double x);
double exactc_sin(double x);
double exactc_cos(double x);

static inline float exactc_expf(float x) { return (float)exactc_exp((double)x); }
static inline float exactc_logf(float x) { return (float)exactc_log((double)x); }
static inline float exactc_tanhf(float x) { return (float)exactc_tanh((double)x); }
static inline float exactc_erff(float x) { return (float)exactc_erf((double)x); }
static inline float exactc_sinf(float x) { return (float)exactc_sin((double)x); }
static inline float exactc_cosf(float x) { return (float)exactc_cos((double)x); }

/* ------------------------------------------------------------------------------------
 * .npy files (exactc_npy.c): little-endian f64, f32, int32 and int64, C order, format
 * versions 1.0, 2.0 and 3.0 read; version 1.0 written. Anything else is refused with a
 * message in `err` that names the field and the rule.
 * ---------------------------------------------------------------------------------- */
#define EXACTC_NPY_MAX_DIMS 8

typedef enum {
    EXACTC_F64 = 0,
    EXACTC_F32 = 1,
    EXACTC_I32 = 2,
    EXACTC_I64 = 3
} exactc_dtype;

typedef struct {
    exactc_dtype dtype;
    int ndim;
    int64_t shape[EXACTC_NPY_MAX_DIMS];
    void *data;    /* owned; release with exactc_array_free */
    size_t nbytes; /* element size times element count */
} exactc_array;

size_t exactc_dtype_size(exactc_dtype t);
/* Parse a whole .npy image held in memory; 0 on success, -1 with `err` filled. */
int exactc_npy_parse(const unsigned char *buf, size_t len, exactc_array *out, char *err,
                     size_t errlen);
int exactc_npy_read(const char *path, exactc_array *out, char *err, size_t errlen);
/* Format a message into err (NULL or errlen 0 allowed) and return -1: how every runtime
 * reader reports a refusal. */
int exactc_fail(char *err, size_t errlen, const char *fmt, ...);
/* Read a whole file (pipes too) into a malloc'd buffer (*data, *size); 0 on success, -1
 * with `err` naming the path and the reason. The .safetensors reader uses it too. */
int exactc_read_file(const char *path, unsigned char **data, size_t *size, char *err,
                     size_t errlen);
/* Serialize to a malloc'd buffer (*buf, *len); 0 on success. */
int exactc_npy_format(const exactc_array *a, unsigned char **buf, size_t *len, char *err,
                      size_t errlen);
int exactc_npy_write(const char *path, const exactc_array *a, char *err, size_t errlen);
void exactc_array_free(exactc_array *a);

/* Checking builds (-DEXACTC_CHECKING) trace the values a fold carries out of each layer:
 * with EXACTC_TRACE_DIR set, EXACTC_TRACE_CARRY writes them as .npy files there (see
 * exactc_npy.c), so that a harness can name the first layer whose output differs from
 * the reference's. Other builds compile it to nothing. kind: 0 f64, 1 f32, 2 bf16, 3 i32. */
void exactc_trace_carry(const char *fold, int layer, int carry, int kind, const void *data,
                        size_t count);
#define EXACTC_KIND_OF(p)                                                                 \
    _Generic((p), const double *: 0, double *: 0, const float *: 1, float *: 1,            \
             const exactc_bf16 *: 2, exactc_bf16 *: 2, const int32_t *: 3, int32_t *: 3)
#ifdef EXACTC_CHECKING
#define EXACTC_TRACE_CARRY(fold, layer, carry, p, count)                                  \
    exactc_trace_carry((fold), (layer), (carry), EXACTC_KIND_OF(p), (p), (count))
#else
#define EXACTC_TRACE_CARRY(fold, layer, carry, p, count) ((void)0)
#endif

/* ------------------------------------------------------------------------------------
 * .safetensors files (exactc_safetensors.c): an 8-byte little-endian header length, a
 * JSON header naming each tensor's dtype, shape and byte range, then the data. The
 * parser is fuzzed: it reads nothing outside the bytes it is given; a malformed header,
 * a tensor missing or of the wrong dtype or shape is refused with a message in `err`.
 * ---------------------------------------------------------------------------------- */
#define EXACTC_ST_MAX_DIMS 8

typedef struct {
    char *name;         /* owned */
    char dtype[12];     /* "F64", "F32", "BF16", ... */
    int ndim;
    int64_t shape[EXACTC_ST_MAX_DIMS];
    uint64_t begin, end; /* byte range, relative to the data's start */
} exactc_st_tensor;

typedef struct {
    const unsigned char *bytes; /* the whole file */
    size_t len;
    size_t data_start;
    exactc_st_tensor *tensors;
    size_t count;
    int owned; /* bytes are freed by exactc_st_close (exactc_st_open) */
} exactc_safetensors;

/* Parse a whole file image held in memory (kept by the caller while `st` is used). */
int exactc_st_parse(const unsigned char *buf, size_t len, exactc_safetensors *st, char *err,
                    size_t errlen);
int exactc_st_open(const char *path, exactc_safetensors *st, char *err, size_t errlen);
const exactc_st_tensor *exactc_st_find(const exactc_safetensors *st, const char *name);
/* Copy tensor `name` to dst after checking its dtype and shape; 0 on success. */
int exactc_st_read(const exactc_safetensors *st, const char *name, const char *dtype, int ndim,
                   const int64_t *shape, void *dst, char *err, size_t errlen);
void exactc_st_close(exactc_safetensors *st);

#endif /* EXACTC_RT_H */
