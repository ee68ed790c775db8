/* exactc runtime: the one header every exported program and printed kernel includes.
 *
 * C11, standard headers only (and <omp.h> in OpenMP builds). Results never come from the
 * platform's libm: the transcendental functions below are exactc's own (exactc_libm.c),
 * and their numpy twins (runtime/libm_twin.py) give the same bits. sqrt is the one
 * exception: IEEE 754 requires it correctly rounded, so every conforming sqrt gives the
 * same bits.
 */
#ifndef EXACTC_RT_H
#define EXACTC_RT_H

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------------------
 * What bit identity rests on: each float and double operation rounds to its own type
 * (FLT_EVAL_METHOD 0: SSE2 on x86-64, AArch64), and nothing is reassociated or fused:
 * build with -std=c11 -ffp-contract=off, never -ffast-math. Every exactc source includes
 * this header, so every one refuses a build that would break it.
 * ---------------------------------------------------------------------------------- */
#if FLT_EVAL_METHOD != 0
#error "exactc needs FLT_EVAL_METHOD == 0 (x86-64 SSE2, AArch64)"
#endif
#ifdef __FAST_MATH__
#error "exactc must not be built with -ffast-math"
#endif

/* Where gcc's vectorizer (seen in gcc 12.2, -march=native on an Intel Xeon with AVX-512
 * and AVX-VNNI; both its loop and its SLP vectorizer) compiles C to other values, the
 * nest's function is compiled without it on the targets where it does so
 * (exporter/kernels/lower.py GCC_UNVECTORIZED says which nests):
 * - with FMA or AVX-512, a rotation pair stored side by side, (a*c - b*s, a*s + b*c), is
 *   read as a complex multiplication and emitted as a multiply and a fused
 *   multiply-add-subtract (vfmaddsub), -ffp-contract=off notwithstanding: one rounding
 *   fewer, another last bit (rope's rotation with its pairs side by side);
 * - with AVX-VNNI, at -O2, the sums of int8 times (nibble - 8) products come out wrong,
 *   every one (the q4 integer linear; no undefined behaviour: the same C is right at
 *   -O0 and -O3, without VNNI, and with clang).
 * Elsewhere, and with other compilers, the attributes are empty. */
#if defined(__GNUC__) && !defined(__clang__) && (defined(__FMA__) || defined(__AVX512F__))
#define EXACTC_GCC_NO_VECTORS_WITH_FMA __attribute__((optimize("no-tree-vectorize")))
#else
#define EXACTC_GCC_NO_VECTORS_WITH_FMA
#endif
#if defined(__GNUC__) && !defined(__clang__) && (defined(__AVXVNNI__) || defined(__AVX512VNNI__))
#define EXACTC_GCC_NO_VECTORS_WITH_VNNI __attribute__((optimize("no-tree-vectorize")))
#else
#define EXACTC_GCC_NO_VECTORS_WITH_VNNI
#endif

/* A hint that `p` will be read soon (a cache line fetched ahead): what a kernel reading
 * int8 panels laid out at load asks for the panel a few blocks on. Reading 16 bytes a k
 * step, a one-row quantized linear left the hardware's prefetchers behind once the
 * weights outgrew the cache (about 2.4 GB/s); asked ahead, 2.9 times the tokens per
 * second at stories110M's shape. A hint reads nothing and changes no value; where the
 * compiler has no such builtin it is nothing. */
#if defined(__GNUC__) || defined(__clang__)
#define EXACTC_PREFETCH(p) __builtin_prefetch((p))
#else
#define EXACTC_PREFETCH(p) ((void)(p))
#endif

/* A nest whose plan gives a narrow layout (docs/plans.md) is printed twice, the narrow
 * one under #if EXACTC_NARROW_LANES: fewer rows in lanes, for x86 without AVX-512 (16
 * vector registers), where 8-row lanes' 16 accumulators and their operands do not fit
 * and clang spills accumulators to the stack in the inner loop (the linear ran 1.6 to
 * 1.9 times faster in 4-row lanes there with clang 14, docs/performance.md; gcc 12 ran
 * 8-row lanes as fast as 4- and 6-row ones, so it keeps them). Both layouts
 * give the same bits; -DEXACTC_NARROW_LANES=0 or 1 picks one anyway (the tests build
 * both). */
#ifndef EXACTC_NARROW_LANES
#if defined(__clang__) && (defined(__x86_64__) || defined(__i386__)) && !defined(__AVX512F__)
#define EXACTC_NARROW_LANES 1
#else
#define EXACTC_NARROW_LANES 0
#endif
#endif

/* A fused nest (exactc export --contract fma) prints its narrow layout under
 * EXACTC_NARROW_FMA_LANES instead: rows in lanes of 6, for x86 without AVX-512 with gcc
 * and clang alike. Its 12 accumulators, two weight vectors and the broadcast value fit
 * 16 ymm registers; gcc 12 kept two of the 8-row lanes' 16 accumulators on the stack,
 * a store and a load on every fused step of their sums (docs/performance.md).
 * -DEXACTC_NARROW_FMA_LANES=0 or 1 picks one anyway. */
#ifndef EXACTC_NARROW_FMA_LANES
#if (defined(__x86_64__) || defined(__i386__)) && !defined(__AVX512F__)
#define EXACTC_NARROW_FMA_LANES 1
#else
#define EXACTC_NARROW_FMA_LANES 0
#endif
#endif

/* A nest whose plan also gives a wide layout is printed a third time, under #elif
 * EXACTC_WIDE_LANES: more rows in lanes (16 where the layout has 8), for gcc with
 * AVX-512, whose 32 vector registers hold 16 rows' accumulators of 16 floats each
 * (gcc 12 ran the GPT-2-like linears 9 to 14 % faster so on a Zen 4; clang 14 spilled
 * them and ran some twice as slow, so it keeps the 8 rows; docs/performance.md).
 * -DEXACTC_WIDE_LANES=0 or 1 picks anyway; EXACTC_NARROW_LANES comes first. */
#ifndef EXACTC_WIDE_LANES
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
#define EXACTC_WIDE_LANES 1
#else
#define EXACTC_WIDE_LANES 0
#endif
#endif

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
/* fma_A of the fused realization (docs/semantics.md section 18): exactc_fma and
 * exactc_fmaf, C's fma and fmaf where the target has the instruction, else exactc's own
 * correctly rounded software fma (exactc_fma.h). */
#include "exactc_fma.h"

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

/* The laned forms: y[i] = exactc_f(x[i]) (exactc_ff for floats) for i < n, the same bits
 * as the scalar functions, many elements at a time (vectorized by gcc and clang at -O2;
 * exactc_libm.c says how). The kernels of gelu, silu and softmax call them on lanes of
 * elements (exporter/printer/planned.py), rope's tables on its positions. x and y must
 * not overlap. */
void exactc_exp_array(const double *restrict x, double *restrict y, int64_t n);
void exactc_tanh_array(const double *restrict x, double *restrict y, int64_t n);
void exactc_erf_array(const double *restrict x, double *restrict y, int64_t n);
void exactc_expf_array(const float *restrict x, float *restrict y, int64_t n);
void exactc_tanhf_array(const float *restrict x, float *restrict y, int64_t n);
void exactc_erff_array(const float *restrict x, float *restrict y, int64_t n);
void exactc_sin_array(const double *restrict x, double *restrict y, int64_t n);
void exactc_cos_array(const double *restrict x, double *restrict y, int64_t n);
void exactc_sinf_array(const float *restrict x, float *restrict y, int64_t n);
void exactc_cosf_array(const float *restrict x, float *restrict y, int64_t n);

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
/* The dtype as numpy spells it in a .npy header ("<f4"): how messages name it. */
const char *exactc_dtype_name(exactc_dtype t);
/* Parse a whole .npy image held in memory; 0 on success, -1 with `err` filled. */
int exactc_npy_parse(const unsigned char *buf, size_t len, exactc_array *out, char *err,
                     size_t errlen);
/* Read a file in steps its header bounds (magic, header, data); trailing bytes refused.
 * The _stream form reads an open stream to its end (`path` names it in messages). */
int exactc_npy_read(const char *path, exactc_array *out, char *err, size_t errlen);
int exactc_npy_read_stream(FILE *f, const char *path, exactc_array *out, char *err,
                           size_t errlen);
/* Format a message into err (NULL or errlen 0 allowed) and return -1: how every runtime
 * reader reports a refusal. */
int exactc_fail(char *err, size_t errlen, const char *fmt, ...);
/* Read up to `want` more bytes of `f` onto the end of the malloc'd buffer (*buf, *len),
 * growing it as the bytes arrive, never past *len + want: the readers read a file in
 * steps whose lengths its header gives, so that neither a pipe nor /dev/zero makes them
 * grow without bound. 0 when all arrived or the file ended first (*len says how many);
 * -1 with `err` naming `path` on a read error or when memory runs out. */
int exactc_read_more(FILE *f, const char *path, unsigned char **buf, size_t *len, size_t want,
                     char *err, size_t errlen);
/* After the last byte a header declares: 0 if `f` ends there, 1 if a byte follows,
 * -1 with `err` on a read error. */
int exactc_read_past_end(FILE *f, const char *path, char *err, size_t errlen);
/* Serialize to a malloc'd buffer (*buf, *len); 0 on success. */
int exactc_npy_format(const exactc_array *a, unsigned char **buf, size_t *len, char *err,
                      size_t errlen);
int exactc_npy_write(const char *path, const exactc_array *a, char *err, size_t errlen);
void exactc_array_free(exactc_array *a);

/* ------------------------------------------------------------------------------------
 * .safetensors files (exactc_safetensors.c): an 8-byte little-endian header length, a
 * JSON header naming each tensor's dtype, shape and byte range, then the data, which the
 * tensors must tile exactly (no gap, no overlap, nothing after the last). The parser is
 * fuzzed: it reads nothing outside the bytes it is given; a malformed header, a tensor
 * missing or of the wrong dtype or shape is refused with a message in `err`. A file is
 * read no further than its header declares.
 * ---------------------------------------------------------------------------------- */
#define EXACTC_ST_MAX_DIMS 8
#define EXACTC_ST_MAX_HEADER 100000000 /* bytes: the safetensors library's limit */

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
/* The same from an open stream, read to its end (`path` names it in messages). */
int exactc_st_open_stream(FILE *f, const char *path, exactc_safetensors *st, char *err,
                          size_t errlen);
/* A binary search: the tensors are kept sorted by name. */
const exactc_st_tensor *exactc_st_find(const exactc_safetensors *st, const char *name);
/* Copy tensor `name` to dst after checking its dtype and shape; 0 on success. */
int exactc_st_read(const exactc_safetensors *st, const char *name, const char *dtype, int ndim,
                   const int64_t *shape, void *dst, char *err, size_t errlen);
void exactc_st_close(exactc_safetensors *st);

/* ------------------------------------------------------------------------------------
 * Thread splits. A plan's split driver (kernels/) runs its nest once per piece [lo, hi)
 * of one loop, on an OpenMP team capped at omp_get_max_threads(), or one piece after
 * another without OpenMP. The pieces write disjoint elements, so the bits do not depend
 * on the team. Built with -DEXACTC_CHECK_SPLITS (the kernel harness), a driver first
 * checks its pieces and returns what exactc_check_pieces says; otherwise it returns 0.
 * ---------------------------------------------------------------------------------- */
#ifdef _OPENMP
#include <omp.h>
#endif

/* 0 when the pieces cover [0, extent) exactly once; 1 for a piece out of range, 2 for
 * two pieces that overlap, 3 for a gap. An overlap changes no output (both writes give
 * the same bits), so only this check sees it. */
static inline int exactc_check_pieces(int64_t extent, const int64_t (*pieces)[2], int count) {
    int64_t covered = 0;
    for (int p = 0; p < count; p++) {
        int64_t lo = pieces[p][0], hi = pieces[p][1];
        if (lo < 0 || lo > hi || hi > extent) return 1;
        for (int q = 0; q < p; q++) {
            if (lo < hi && pieces[q][0] < pieces[q][1] && lo < pieces[q][1] && pieces[q][0] < hi) return 2;
        }
        covered += hi - lo;
    }
    return covered == extent ? 0 : 3;
}

/* ------------------------------------------------------------------------------------
 * The program's host (exactc_host.c): what every exported model.c shares. model.c
 * describes its program (tables of tensors, the arena's size, two functions) in an
 * exactc_program and its main calls exactc_main. The readers return 0, or -1 with a
 * message in `err` naming the input or tensor and the rule.
 * ---------------------------------------------------------------------------------- */

/* How a value is held: int32, or a float at the site type. bf16 travels through .npy
 * files as f32: inputs are rounded to bf16 on reading, outputs widened on writing.
 * int8 and uint8 hold a quantized weight's values (q8) and bytes (q4): parameters only,
 * never an input or output. */
typedef enum {
    EXACTC_KIND_I32 = 0,
    EXACTC_KIND_F64 = 1,
    EXACTC_KIND_F32 = 2,
    EXACTC_KIND_BF16 = 3,
    EXACTC_KIND_I8 = 4,
    EXACTC_KIND_U8 = 5
} exactc_kind;

/* An input or output: DIR/<name>.npy holds it. Dimension d is shape[d] + per_length[d] * T
 * for a program that reads its run-time length T from its inputs' shapes (per_length all
 * zero: a static shape). */
typedef struct {
    const char *name;
    exactc_kind kind;
    int ndim;
    int64_t shape[EXACTC_NPY_MAX_DIMS];
    int64_t per_length[EXACTC_NPY_MAX_DIMS];
} exactc_tensor_spec;

/* A parameter: the tensor `name` of the .safetensors file (a printf format, %d the layer,
 * for a parameter stacked over `layers` > 0 layers), of this kind (its dtype in the file)
 * and shape, at `offset` bytes from the start of the parameter block; layer l follows
 * at offset + l * its size in bytes. */
typedef struct {
    const char *name;
    exactc_kind kind;
    int layers;
    int ndim;
    int64_t shape[EXACTC_ST_MAX_DIMS];
    size_t offset;
} exactc_param_spec;

typedef struct {
    const char *model;                /* the architecture, "gpt", "bert", "llama", ... */
    const char *entry;                /* its entry, "forward", "embed", "decode", ... */
    exactc_kind site;                 /* the site type */
    const exactc_param_spec *params;  /* every tensor of the weights file */
    size_t param_count;
    size_t param_bytes;               /* the parameter block's length */
    const exactc_tensor_spec *inputs; /* in the order `run` takes them */
    size_t input_count;
    const exactc_tensor_spec *outputs;
    size_t output_count;
    size_t arena_bytes;               /* the scratch one run needs (at max_length) */
    int64_t max_length;               /* T_max: inputs give 1 <= T <= T_max; 0: no run-time length */
    const char *length_from;          /* the (1,) int32 input whose value is T; NULL: the shapes give it */
    const char *const *in_place;      /* per output, the input it is written over in place (its
                                         buffer), or NULL; NULL: every output has its own */
    size_t weights_bytes;             /* sizeof the model's Weights: each handle holds its own */
    /* point `weights` (weights_bytes, the caller's) into the block; 0, or -1 (memory) */
    int (*map_weights)(void *block, void *weights);
    /* one run at the run-time `length` (0: none) on the weights map_weights pointed */
    void (*run)(const void *weights, int64_t length, void *const *inputs, void *const *outputs,
                unsigned char *arena);
} exactc_program;

/* model.c's description of its program (printer/host.py). */
const exactc_program *exactc_model_program(void);

size_t exactc_kind_size(exactc_kind kind);
/* The .npy dtype a value of `kind` travels as (bf16 as f32). */
exactc_dtype exactc_kind_dtype(exactc_kind kind);
size_t exactc_spec_count(const exactc_tensor_spec *spec);
/* `spec` at run-time length `length`: every dimension a number (per_length zero). */
exactc_tensor_spec exactc_spec_at(const exactc_tensor_spec *spec, int64_t length);
/* The run-time length an array gives for `spec` (0 when no dimension follows it); -1 with
 * a message naming the input and the rule when its shape fits no length in [1, max_length]
 * or disagrees with `known` (> 0: a length another input gave). */
int64_t exactc_input_length(const exactc_array *a, const exactc_tensor_spec *spec, int64_t max_length,
                            int64_t known, char *err, size_t errlen);

/* Every tensor of `params` from a parsed file into `block` (param_bytes long), each
 * at its kind's dtype; every problem is a line of `err`, the last one counting them. */
int exactc_weights_read(const exactc_safetensors *st, const exactc_param_spec *params, size_t count,
                        void *block, char *err, size_t errlen);
/* The same from the file at `path`, into a block of `bytes` bytes, 64-byte aligned
 * (free it with free). */
int exactc_weights_load(const char *path, const exactc_param_spec *params, size_t count, size_t bytes,
                        void **block, char *err, size_t errlen);

/* An input from a parsed .npy array, an .npy image in memory, or DIR/<name>.npy, into
 * `dst` (exactc_spec_count(spec) values of its kind): its dtype and shape checked. */
int exactc_input_take(const exactc_array *a, const exactc_tensor_spec *spec, void *dst, char *err,
                      size_t errlen);
int exactc_input_parse(const unsigned char *buf, size_t len, const exactc_tensor_spec *spec, void *dst,
                       char *err, size_t errlen);
int exactc_input_read(const char *dir, const exactc_tensor_spec *spec, void *dst, char *err, size_t errlen);
/* An output to DIR/<name>.npy. */
int exactc_output_write(const char *dir, const exactc_tensor_spec *spec, const void *src, char *err,
                        size_t errlen);
/* The same in two steps, for a run that writes several outputs all or none: stage writes
 * DIR/<name>.npy.partial-<tag> and records in `staged` (EXACTC_STAGED bytes) that name
 * and the output's own; commit renames it into place. A failed stage leaves no file. */
#define EXACTC_STAGED 8192
int exactc_output_stage(const char *dir, const exactc_tensor_spec *spec, const void *src, int tag, char *staged,
                        char *err, size_t errlen);
int exactc_output_commit(const char *staged, char *err, size_t errlen);
size_t exactc_staged_size(const char *staged); /* the bytes of `staged` in use */
/* A linear weight laid out as its panels, in place (exporter/printer/prepack.py): in each
 * of `layers` matrices of rows x cols elements of `size` bytes, the first rows - rows %
 * lanes rows become panels of `lanes` rows, element (c lanes + j, k) at
 * c lanes cols + k lanes + j; the last rows % lanes rows stay. 0, or -1 when memory runs
 * out (the block is then as it was). */
int exactc_pack_panels(void *data, size_t layers, int64_t rows, int64_t cols, int64_t lanes, size_t size);
/* The same with the columns in runs of `run` (cols a multiple of it) kept together: element
 * (c lanes + j, b run + i) at c lanes cols + b lanes run + j run + i, so that each panel
 * holds, block by block, its rows' blocks one after another (qlinear_i's int8 values:
 * the x8 block kernels read a block's 8 rows as one run of memory, exactc_dot.h). -1
 * when memory runs out or run does not divide cols. */
int exactc_pack_block_panels(void *data, size_t layers, int64_t rows, int64_t cols, int64_t lanes, int64_t run,
                             size_t size);
/* `bytes` of memory, 64-byte aligned, a multiple of 64 bytes and never empty (free with
 * free); NULL when memory runs out. */
void *exactc_aligned_block(size_t bytes);
/* The program's weights from the file at `path`, mapped (map_weights) into *weights (a
 * malloc'd Weights): 0 with *block the block, or 1 with every problem on stderr and
 * nothing left to free. */
int exactc_program_weights(const exactc_program *program, const char *path, void **block, void **weights);
/* The same from a parsed file image, every problem in `err`: 0, or -1 (nothing to free). */
int exactc_program_weights_parsed(const exactc_program *program, const exactc_safetensors *st, void **block,
                                  void **weights, char *err, size_t errlen);
/* One buffer per tensor of `specs`, each at T_max; NULL when memory runs out. */
void **exactc_buffers_alloc(const exactc_tensor_spec *specs, size_t count, int64_t max_length);
void exactc_buffers_free(void **buffers, size_t count);
/* The input output `output` is written over in place (program->in_place), or -1. */
int exactc_in_place_input(const exactc_program *program, size_t output);
/* The outputs' buffers (at T_max), each output written in place (program->in_place)
 * given its input's buffer; NULL when memory runs out. Free with exactc_outputs_free. */
void **exactc_outputs_alloc(const exactc_program *program, void **inputs);
void exactc_outputs_free(const exactc_program *program, void **outputs);
/* Each line of a message that lists problems on stderr, prefixed by `where`. */
void exactc_report(const char *where, const char *err);

/* The arena. Every buffer of the network lives in it at an offset the exporter fixed.
 * The structured host declares a function's buffers in a table above it and marks each
 * one's birth, before the launch that first writes it:
 *     #define MLP_SCRATCH(arena) float *fc = SCRATCH(float, (arena) + 0); ...
 *     MLP_SCRATCH(arena);  ...  BORN(fc, 256);  linear_fc_split(..., fc);
 * the straight-line host allocates and releases each where it lives and dies:
 *     float *qkv = ARENA(float, arena + 0, 288);  ...  RELEASE(qkv, 288);
 * Checking builds (-DEXACTC_CHECKING) check each birth or allocation against the arena's
 * end, fill it with NaN bytes (a read of a reused region before it is written shows),
 * NaN-fill each released buffer, and record the peak reached; other builds do nothing. */
/* The checks' state is the run's own (each handle's: two handles run at once, each on
 * its thread): exactc_arena_open binds `check` to the calling thread for the run, whose
 * host functions all run on it (the kernels' OpenMP teams take no allocation). */
typedef struct {
    unsigned char *base;
    size_t bytes, reached;
    unsigned long traced; /* layer traces written (EXACTC_TRACE_CARRY) */
} exactc_arena_check;
void exactc_arena_open(exactc_arena_check *check, unsigned char *base, size_t bytes);
void *exactc_arena_take(unsigned char *at, size_t bytes);
void exactc_arena_release(void *p, size_t bytes);
#define SCRATCH(type, at) ((type *)(void *)(at))
#ifdef EXACTC_CHECKING
#define ARENA(type, at, count) ((type *)exactc_arena_take((at), (size_t)(count) * sizeof(type)))
#define RELEASE(p, count) exactc_arena_release((p), (size_t)(count) * sizeof *(p))
#define BORN(p, count) ((void)exactc_arena_take((unsigned char *)(void *)(p), (size_t)(count) * sizeof *(p)))
#else
#define ARENA(type, at, count) ((type *)(void *)(at))
#define RELEASE(p, count) ((void)(p), (void)(count))
#define BORN(p, count) ((void)0)
#endif

/* Checking builds (-DEXACTC_CHECKING) trace the values a fold carries out of each layer:
 * with EXACTC_TRACE_DIR set, EXACTC_TRACE_CARRY writes them there as
 * <n>-<fold>-<layer>-<carry>.npy (exactc_host.c), so that a harness can name the first
 * layer whose output differs from the reference's. Other builds compile it to nothing. */
void exactc_trace_carry(const char *fold, int layer, int carry, exactc_kind kind, const void *data,
                        size_t count);
#define EXACTC_KIND_OF(p)                                                                 \
    _Generic((p), const double *: EXACTC_KIND_F64, double *: EXACTC_KIND_F64,              \
             const float *: EXACTC_KIND_F32, float *: EXACTC_KIND_F32,                     \
             const exactc_bf16 *: EXACTC_KIND_BF16, exactc_bf16 *: EXACTC_KIND_BF16,       \
             const int32_t *: EXACTC_KIND_I32, int32_t *: EXACTC_KIND_I32)
#ifdef EXACTC_CHECKING
#define EXACTC_TRACE_CARRY(fold, layer, carry, p, count)                                  \
    exactc_trace_carry((fold), (layer), (carry), EXACTC_KIND_OF(p), (p), (count))
#else
#define EXACTC_TRACE_CARRY(fold, layer, carry, p, count) ((void)0)
#endif

/* usage: PROGRAM WEIGHTS.safetensors INPUT_DIR OUTPUT_DIR [INPUT_DIR OUTPUT_DIR ...].
 * The weights load once; each pair is one run. Exit 0, 1 for a file refused (each
 * problem on stderr), 2 for a usage error. */
int exactc_main(int argc, char **argv, const exactc_program *program);
/* A decode entry's main (exactc_generate.c): `PROGRAM generate ...` runs the whole
 * generation loop in this process; anything else is exactc_main. */
int exactc_decode_main(int argc, char **argv, const exactc_program *program);
/* A loss_grad entry's main (exactc_train.c): `train ...` runs the training loop, anything
 * else goes to exactc_main. */
int exactc_train_main(int argc, char **argv, const exactc_program *program);

#endif /* EXACTC_RT_H */
