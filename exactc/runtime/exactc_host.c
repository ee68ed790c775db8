/* exactc runtime: the part of every exported program's host that does not depend on the
 * model. model.c prints what does (the Weights struct, the tables of tensors, the network,
 * a `run` function) and hands it to exactc_main as an exactc_program.
 *
 * - The weights: each tensor of the program's table read from the .safetensors file into
 *   one block, checked for its name, dtype and shape; every problem is listed.
 * - The inputs: one .npy file per input, checked for dtype and shape; bf16 inputs are
 *   given as f32 and rounded to bf16 (nearest even), as the reference rounds them.
 * - The outputs: one .npy file per output, written under a temporary name and renamed
 *   into place when every pair has run (a failed run leaves none); bf16 outputs are
 *   written widened to f32, which is exact.
 * - The arena's checks, in checking builds (-DEXACTC_CHECKING, exactc_rt.h's ARENA and
 *   RELEASE): every allocation bounds-checked and NaN-filled, the peak reached recorded.
 * - main: the weights loaded once, then one run of the network per INPUT_DIR OUTPUT_DIR
 *   pair.
 *
 * Every reader takes a path or bytes already in memory and returns 0, or -1 with a
 * message in `err` that names the input or tensor and the rule: they see files from
 * anywhere, and nothing here exits but exactc_main.
 */
#include "exactc_rt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef EXACTC_PROBE /* instruction-count probes (exactc's verify/probes.py) */
#include <valgrind/callgrind.h>
#endif

/* ------------------------------------------------------------------------------------
 * Kinds: how a value of the program is held in memory and in its .npy file.
 * ---------------------------------------------------------------------------------- */

/* Per kind (exactc_kind's order): the bytes of an element in memory, the .npy dtype it
 * travels as (bf16 as f32; int8 and uint8 are parameters only, never in an .npy file),
 * the .safetensors dtype of parameters at that kind. */
static const struct {
    size_t size;
    exactc_dtype npy;
    const char *st;
} KINDS[] = {
    [EXACTC_KIND_I32] = {4, EXACTC_I32, "I32"},
    [EXACTC_KIND_F64] = {8, EXACTC_F64, "F64"},
    [EXACTC_KIND_F32] = {4, EXACTC_F32, "F32"},
    [EXACTC_KIND_BF16] = {2, EXACTC_F32, "BF16"},
    [EXACTC_KIND_I8] = {1, EXACTC_I32, "I8"},
    [EXACTC_KIND_U8] = {1, EXACTC_I32, "U8"},
};

size_t exactc_kind_size(exactc_kind kind) {
    return KINDS[kind].size;
}

static exactc_dtype npy_dtype(exactc_kind kind) {
    return KINDS[kind].npy;
}

exactc_dtype exactc_kind_dtype(exactc_kind kind) {
    return npy_dtype(kind);
}

static const char *npy_dtype_name(exactc_dtype dtype) {
    switch (dtype) {
    case EXACTC_F64: return "f64 (<f8)";
    case EXACTC_F32: return "f32 (<f4)";
    case EXACTC_I32: return "int32 (<i4)";
    case EXACTC_I64: return "int64 (<i8)";
    }
    return "an unknown dtype";
}

static const char *kind_name(exactc_kind kind) {
    return kind == EXACTC_KIND_BF16 ? "f32 (<f4), rounded to bf16" : npy_dtype_name(npy_dtype(kind));
}

/* A run-time length the program takes: 1 <= length <= T_max. */
static int length_in_range(int64_t length, int64_t max_length) {
    return 1 <= length && length <= max_length;
}

size_t exactc_spec_count(const exactc_tensor_spec *spec) {
    size_t count = 1;
    for (int d = 0; d < spec->ndim; d++) count *= (size_t)spec->shape[d];
    return count;
}

exactc_tensor_spec exactc_spec_at(const exactc_tensor_spec *spec, int64_t length) {
    exactc_tensor_spec out = *spec;
    for (int d = 0; d < spec->ndim; d++) {
        out.shape[d] = spec->shape[d] + spec->per_length[d] * length;
        out.per_length[d] = 0;
    }
    return out;
}

/* "(6, 48)", "(6,)": a shape for a message, as Python writes it. */
static void shape_text(char *dst, size_t cap, const int64_t *shape, int ndim) {
    snprintf(dst, cap, "(");
    for (int d = 0; d < ndim; d++) {
        size_t used = strlen(dst);
        snprintf(dst + used, cap - used, "%s%lld", d ? ", " : "", (long long)shape[d]);
    }
    size_t used = strlen(dst);
    snprintf(dst + used, cap - used, ndim == 1 ? ",)" : ")");
}

/* "(T,)", "(2*T + 1, 48)": the shape a spec asks for, the run-time length T written as
 * T where it has not been read yet (a dimension that grows with it). */
static void spec_shape_text(char *dst, size_t cap, const exactc_tensor_spec *spec) {
    snprintf(dst, cap, "(");
    for (int d = 0; d < spec->ndim; d++) {
        size_t used = strlen(dst);
        long long base = (long long)spec->shape[d], per = (long long)spec->per_length[d];
        const char *comma = d ? ", " : "";
        if (per == 0) snprintf(dst + used, cap - used, "%s%lld", comma, base);
        else if (per == 1 && base == 0) snprintf(dst + used, cap - used, "%sT", comma);
        else if (base == 0) snprintf(dst + used, cap - used, "%s%lld*T", comma, per);
        else if (per == 1) snprintf(dst + used, cap - used, "%sT + %lld", comma, base);
        else snprintf(dst + used, cap - used, "%s%lld*T + %lld", comma, per, base);
    }
    size_t used = strlen(dst);
    snprintf(dst + used, cap - used, spec->ndim == 1 ? ",)" : ")");
}

/* Whether a spec's shape grows with the run-time length. */
static int spec_follows_length(const exactc_tensor_spec *spec) {
    for (int d = 0; d < spec->ndim; d++)
        if (spec->per_length[d] != 0) return 1;
    return 0;
}

/* Append one line to a message that lists problems; a full buffer keeps what fits. */
static void append_line(char *err, size_t errlen, const char *line) {
    if (err == NULL || errlen == 0) return;
    size_t used = strlen(err);
    snprintf(err + used, errlen - used, "%s%s", used ? "\n" : "", line);
}

/* ------------------------------------------------------------------------------------
 * The weights: every tensor of the table, its layers one after the other in the block.
 * ---------------------------------------------------------------------------------- */

int exactc_weights_read(const exactc_safetensors *st, const exactc_param_spec *params, size_t count,
                        void *block, char *err, size_t errlen) {
    if (err != NULL && errlen > 0) err[0] = '\0';
    int bad = 0;
    for (size_t i = 0; i < count; i++) {
        const exactc_param_spec *p = &params[i];
        const char *dtype = KINDS[p->kind].st;
        size_t size = exactc_kind_size(p->kind);
        size_t chunk = 1;
        for (int d = 0; d < p->ndim; d++) chunk *= (size_t)p->shape[d];
        int layers = p->layers > 0 ? p->layers : 1;
        for (int l = 0; l < layers; l++) {
            char name[512], why[512];
            snprintf(name, sizeof name, p->name, l);
            unsigned char *dst = (unsigned char *)block + p->offset + (size_t)l * chunk * size;
            if (exactc_st_read(st, name, dtype, p->ndim, p->shape, dst, why, sizeof why) != 0) {
                append_line(err, errlen, why);
                bad++;
            }
        }
    }
    if (bad == 0) return 0;
    char last[64];
    snprintf(last, sizeof last, "%d tensor(s) missing or wrong", bad);
    append_line(err, errlen, last);
    return -1;
}

void *exactc_aligned_block(size_t bytes) {
    return aligned_alloc(64, (bytes + 63) / 64 * 64 + 64); /* a multiple of 64, never empty */
}

int exactc_weights_load(const char *path, const exactc_param_spec *params, size_t count, size_t bytes,
                        void **block, char *err, size_t errlen) {
    *block = NULL;
    exactc_safetensors st;
    if (exactc_st_open(path, &st, err, errlen) != 0) return -1;
    void *data = exactc_aligned_block(bytes);
    if (data == NULL) {
        exactc_st_close(&st);
        return exactc_fail(err, errlen, "out of memory for %zu bytes of parameters", bytes);
    }
    int rc = exactc_weights_read(&st, params, count, data, err, errlen);
    exactc_st_close(&st);
    if (rc != 0) {
        free(data);
        return -1;
    }
    *block = data;
    return 0;
}

/* ------------------------------------------------------------------------------------
 * The inputs and the outputs: one .npy file each, DIR/<name>.npy.
 * ---------------------------------------------------------------------------------- */

int exactc_input_take(const exactc_array *a, const exactc_tensor_spec *spec, void *dst, char *err,
                      size_t errlen) {
    int ok = a->dtype == npy_dtype(spec->kind) && a->ndim == spec->ndim;
    for (int d = 0; ok && d < spec->ndim; d++) ok = a->shape[d] == spec->shape[d];
    if (!ok) {
        char got[200], need[200];
        shape_text(got, sizeof got, a->shape, a->ndim);
        spec_shape_text(need, sizeof need, spec);
        return exactc_fail(err, errlen, "input %s must be %s of shape %s; the file holds %s of shape %s",
                           spec->name, kind_name(spec->kind), need, npy_dtype_name(a->dtype), got);
    }
    size_t count = exactc_spec_count(spec);
    if (spec->kind == EXACTC_KIND_BF16) {
        const float *src = a->data;
        exactc_bf16 *out = dst;
        for (size_t i = 0; i < count; i++) out[i] = exactc_f32_to_bf16(src[i]);
    } else {
        memcpy(dst, a->data, count * exactc_kind_size(spec->kind));
    }
    return 0;
}

int64_t exactc_input_length(const exactc_array *a, const exactc_tensor_spec *spec, int64_t max_length,
                            int64_t known, char *err, size_t errlen) {
    int64_t found = 0;
    /* exactc_input_take names the dtype or rank it needs */
    if (a->ndim != spec->ndim || a->dtype != npy_dtype(spec->kind)) return 0;
    for (int d = 0; d < spec->ndim; d++) {
        int64_t per = spec->per_length[d];
        if (per == 0) continue;
        int64_t rest = a->shape[d] - spec->shape[d];
        int64_t length = rest % per == 0 ? rest / per : -1;
        if (!length_in_range(length, max_length))
            return exactc_fail(err, errlen,
                               "input %s: dimension %d is %lld, which is no length T in [1, %lld] (the program "
                               "takes 1 to T_max = %lld positions)",
                               spec->name, d, (long long)a->shape[d], (long long)max_length, (long long)max_length);
        if ((known > 0 && length != known) || (found > 0 && length != found))
            return exactc_fail(err, errlen, "input %s: dimension %d gives the length %lld; another gives %lld",
                               spec->name, d, (long long)length, (long long)(found > 0 ? found : known));
        found = length;
    }
    return found;
}

int exactc_input_parse(const unsigned char *buf, size_t len, const exactc_tensor_spec *spec, void *dst,
                       char *err, size_t errlen) {
    exactc_array a;
    char why[512];
    if (exactc_npy_parse(buf, len, &a, why, sizeof why) != 0)
        return exactc_fail(err, errlen, "input %s: %s", spec->name, why);
    int rc = exactc_input_take(&a, spec, dst, err, errlen);
    exactc_array_free(&a);
    return rc;
}

/* DIR/<name>.npy into path; -1 when it does not fit. */
static int npy_path(char *path, size_t cap, const char *dir, const char *name) {
    int n = snprintf(path, cap, "%s/%s.npy", dir, name);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int exactc_input_read(const char *dir, const exactc_tensor_spec *spec, void *dst, char *err, size_t errlen) {
    char path[4096], why[512];
    if (npy_path(path, sizeof path, dir, spec->name) != 0)
        return exactc_fail(err, errlen, "input %s: the path %s/%s.npy is too long", spec->name, dir, spec->name);
    exactc_array a;
    if (exactc_npy_read(path, &a, why, sizeof why) != 0)
        return exactc_fail(err, errlen, "input %s: %s", spec->name, why);
    int rc = exactc_input_take(&a, spec, dst, why, sizeof why);
    exactc_array_free(&a);
    if (rc != 0) return exactc_fail(err, errlen, "%s: %s", path, why);
    return 0;
}

/* The output `spec` written to its temporary name, DIR/<name>.npy.partial-<tag>, as
 * `staged`: that name, a NUL, then the output's own, DIR/<name>.npy (a buffer of
 * EXACTC_STAGED bytes). The file is complete, or removed: a write that fails midway (a
 * full disk, a file size limit) leaves no truncated file behind. */
int exactc_output_stage(const char *dir, const exactc_tensor_spec *spec, const void *src, int tag, char *staged,
                        char *err, size_t errlen) {
    char path[4096], partial[4096], why[512];
    if (npy_path(path, sizeof path, dir, spec->name) != 0 ||
        (size_t)snprintf(partial, sizeof partial, "%s.partial-%d", path, tag) >= sizeof partial)
        return exactc_fail(err, errlen, "output %s: the path %s/%s.npy is too long", spec->name, dir, spec->name);
    size_t count = exactc_spec_count(spec);
    exactc_array a;
    memset(&a, 0, sizeof a);
    a.dtype = npy_dtype(spec->kind);
    a.ndim = spec->ndim;
    for (int d = 0; d < spec->ndim; d++) a.shape[d] = spec->shape[d];
    a.nbytes = count * exactc_dtype_size(a.dtype);
    float *wide = NULL;
    if (spec->kind == EXACTC_KIND_BF16) {
        wide = malloc(count ? count * sizeof *wide : 1);
        if (wide == NULL) return exactc_fail(err, errlen, "output %s: out of memory", spec->name);
        const exactc_bf16 *h = src;
        for (size_t i = 0; i < count; i++) wide[i] = exactc_bf16_to_f32(h[i]);
        a.data = wide;
    } else {
        a.data = (void *)(uintptr_t)src;
    }
    int rc = exactc_npy_write(partial, &a, why, sizeof why);
    free(wide);
    if (rc != 0) {
        remove(partial);
        return exactc_fail(err, errlen, "output %s: %s", spec->name, why);
    }
    memcpy(staged, partial, strlen(partial) + 1);
    memcpy(staged + strlen(partial) + 1, path, strlen(path) + 1);
    return 0;
}

/* A staged output (output_stage) renamed to its own name. */
int exactc_output_commit(const char *staged, char *err, size_t errlen) {
    const char *partial = staged, *path = staged + strlen(staged) + 1;
    if (rename(partial, path) != 0) {
        int e = errno;
        remove(partial);
        return exactc_fail(err, errlen, "cannot rename %s to %s: %s", partial, path, strerror(e));
    }
    return 0;
}

size_t exactc_staged_size(const char *staged) {
    size_t n = strlen(staged) + 1;
    return n + strlen(staged + n) + 1;
}

int exactc_output_write(const char *dir, const exactc_tensor_spec *spec, const void *src, char *err,
                        size_t errlen) {
    char staged[EXACTC_STAGED];
    if (exactc_output_stage(dir, spec, src, 0, staged, err, errlen) != 0) return -1;
    return exactc_output_commit(staged, err, errlen);
}

int exactc_pack_block_panels(void *data, size_t layers, int64_t rows, int64_t cols, int64_t lanes, int64_t run,
                             size_t size) {
    if (run <= 0 || cols % run != 0) return -1;
    size_t panel = (size_t)lanes * (size_t)cols * size, bytes = (size_t)run * size;
    unsigned char *copy = malloc(panel ? panel : 1), *base = data;
    if (copy == NULL) return -1;
    for (size_t l = 0; l < layers; l++) {
        for (int64_t c = 0; c + lanes <= rows; c += lanes) {
            unsigned char *at = base + ((size_t)l * (size_t)rows + (size_t)c) * (size_t)cols * size;
            memcpy(copy, at, panel);
            for (int64_t b = 0; b < cols / run; b++) /* block b of every row, the rows in order */
                for (int64_t j = 0; j < lanes; j++)
                    memcpy(at + ((size_t)b * (size_t)lanes + (size_t)j) * bytes,
                           copy + ((size_t)j * (size_t)cols + (size_t)(b * run)) * size, bytes);
        }
    }
    free(copy);
    return 0;
}

/* The panels of single values: block panels of runs of one. */
int exactc_pack_panels(void *data, size_t layers, int64_t rows, int64_t cols, int64_t lanes, size_t size) {
    return exactc_pack_block_panels(data, layers, rows, cols, lanes, 1, size);
}

/* ------------------------------------------------------------------------------------
 * Layer traces (checking builds, EXACTC_TRACE_CARRY): with EXACTC_TRACE_DIR set, what a
 * fold carries out of each layer, written as an output named <n>-<fold>-<layer>-<carry>
 * (n counts the process's traces from 0), one dimension. The harness compares them with
 * the reference's, in order, to name the first layer whose output differs
 * (verify/conformance.py).
 * ---------------------------------------------------------------------------------- */

/* The arena's checks of the run on this thread (exactc_arena_open): the handle's own. */
static _Thread_local exactc_arena_check *arena_check;

void exactc_trace_carry(const char *fold, int layer, int carry, exactc_kind kind, const void *data,
                        size_t count) {
    const char *dir = getenv("EXACTC_TRACE_DIR");
    if (dir == NULL || *dir == '\0' || arena_check == NULL) return;
    char name[256], err[512];
    snprintf(name, sizeof name, "%06lu-%s-%d-%d", arena_check->traced++, fold, layer, carry);
    exactc_tensor_spec spec = {name, kind, 1, {(int64_t)count}, {0}};
    if (exactc_output_write(dir, &spec, data, err, sizeof err) != 0) fprintf(stderr, "exactc: trace: %s\n", err);
}

/* ------------------------------------------------------------------------------------
 * The arena's checks (checking builds): the arena is [base, base + bytes). Every
 * allocation must lie inside it and is filled with NaN bytes (0xFF, NaN in every float
 * type), as is every buffer at its release, so a buffer read before it is written or
 * after it is released shows in the outputs.
 * ---------------------------------------------------------------------------------- */

void exactc_arena_open(exactc_arena_check *check, unsigned char *base, size_t bytes) {
    check->base = base;
    check->bytes = bytes;
    arena_check = check;
    memset(base, 0xff, bytes);
}

void *exactc_arena_take(unsigned char *at, size_t bytes) {
    unsigned char *arena_base = arena_check->base;
    size_t arena_bytes = arena_check->bytes;
    if (at < arena_base || (size_t)(at - arena_base) > arena_bytes || bytes > arena_bytes - (size_t)(at - arena_base)) {
        fprintf(stderr, "exactc: arena overflow: %zu bytes at offset %td of %zu\n", bytes, at - arena_base,
                arena_bytes);
        abort();
    }
    size_t end = (size_t)(at - arena_base) + bytes;
    if (end > arena_check->reached) arena_check->reached = end;
    memset(at, 0xff, bytes);
    return at;
}

void exactc_arena_release(void *p, size_t bytes) {
    memset(p, 0xff, bytes);
}

/* ------------------------------------------------------------------------------------
 * main: the weights once, then per INPUT_DIR OUTPUT_DIR pair: read the inputs, run the
 * network (EXACTC_REPEAT=N times, timed), write the outputs.
 * ---------------------------------------------------------------------------------- */

/* Each line of a message that lists problems, prefixed by the file it is about. */
void exactc_report(const char *where, const char *err) {
    while (*err) {
        size_t n = strcspn(err, "\n");
        fprintf(stderr, "exactc: %s: %.*s\n", where, (int)n, err);
        err += n + (err[n] == '\n');
    }
}

/* The block read, then mapped into a Weights of its own: 0, or -1 with `err` (the block
 * freed). */
static int map_block(const exactc_program *program, void **block, void **weights, char *err, size_t errlen) {
    *weights = calloc(1, program->weights_bytes ? program->weights_bytes : 1);
    if (*weights == NULL || program->map_weights(*block, *weights) != 0) {
        free(*weights);
        free(*block);
        *weights = *block = NULL;
        return exactc_fail(err, errlen, "out of memory laying out the weights");
    }
    return 0;
}

int exactc_program_weights(const exactc_program *program, const char *path, void **block, void **weights) {
    char err[4096];
    *weights = NULL;
    if (exactc_weights_load(path, program->params, program->param_count, program->param_bytes, block, err,
                            sizeof err) != 0) {
        exactc_report(path, err);
        return 1;
    }
    if (map_block(program, block, weights, err, sizeof err) != 0) {
        fprintf(stderr, "exactc: %s\n", err);
        return 1;
    }
    return 0;
}

int exactc_program_weights_parsed(const exactc_program *program, const exactc_safetensors *st, void **block,
                                  void **weights, char *err, size_t errlen) {
    *weights = NULL;
    *block = exactc_aligned_block(program->param_bytes);
    if (*block == NULL)
        return exactc_fail(err, errlen, "out of memory for %zu bytes of parameters", program->param_bytes);
    if (exactc_weights_read(st, program->params, program->param_count, *block, err, errlen) != 0) {
        free(*block);
        *block = NULL;
        return -1;
    }
    return map_block(program, block, weights, err, errlen);
}

void exactc_buffers_free(void **buffers, size_t count) {
    if (buffers == NULL) return;
    for (size_t i = 0; i < count; i++) free(buffers[i]);
    free(buffers);
}

/* One buffer per tensor of `specs` (at T_max); NULL when memory runs out. */
void **exactc_buffers_alloc(const exactc_tensor_spec *specs, size_t count, int64_t max_length) {
    void **buffers = calloc(count ? count : 1, sizeof *buffers);
    if (buffers == NULL) return NULL;
    for (size_t i = 0; i < count; i++) {
        exactc_tensor_spec at = exactc_spec_at(&specs[i], max_length);
        size_t bytes = exactc_spec_count(&at) * exactc_kind_size(specs[i].kind);
        buffers[i] = malloc(bytes ? bytes : 1);
        if (buffers[i] == NULL) {
            exactc_buffers_free(buffers, i);
            return NULL;
        }
    }
    return buffers;
}

int exactc_in_place_input(const exactc_program *program, size_t output) {
    const char *name = program->in_place != NULL ? program->in_place[output] : NULL;
    for (size_t i = 0; name != NULL && i < program->input_count; i++)
        if (strcmp(program->inputs[i].name, name) == 0) return (int)i;
    return -1;
}

void **exactc_outputs_alloc(const exactc_program *program, void **inputs) {
    void **outputs = exactc_buffers_alloc(program->outputs, program->output_count, program->max_length);
    for (size_t i = 0; outputs != NULL && i < program->output_count; i++) {
        int input = exactc_in_place_input(program, i);
        if (input < 0) continue;
        free(outputs[i]);
        outputs[i] = inputs[input];
    }
    return outputs;
}

void exactc_outputs_free(const exactc_program *program, void **outputs) {
    for (size_t i = 0; outputs != NULL && i < program->output_count; i++)
        if (exactc_in_place_input(program, i) >= 0) outputs[i] = NULL; /* its input's, freed with the inputs */
    exactc_buffers_free(outputs, program->output_count);
}

/* The run-time length the input `length_from` holds: one int32 in [1, T_max], or -1. */
static int64_t length_value(const exactc_program *program, const exactc_array *arrays, char *err, size_t errlen) {
    for (size_t i = 0; i < program->input_count; i++) {
        if (strcmp(program->inputs[i].name, program->length_from) != 0) continue;
        const exactc_array *a = &arrays[i];
        int32_t value = 0;
        if (a->dtype == EXACTC_I32 && a->nbytes == sizeof value) memcpy(&value, a->data, sizeof value);
        if (!length_in_range(value, program->max_length))
            return exactc_fail(err, errlen, "input %s: give one int32 in [1, %lld] (the run-time length T)",
                               program->length_from, (long long)program->max_length);
        return value;
    }
    return exactc_fail(err, errlen, "the program names no input %s", program->length_from);
}

/* The inputs of one run from DIR: every file read, the run-time length taken from their
 * shapes, or from the value of the input `length_from` (0 for a program without one),
 * then each checked and copied at that length. */
static int read_inputs(const exactc_program *program, const char *dir, void **inputs, int64_t *length, char *err,
                       size_t errlen) {
    size_t count = program->input_count;
    exactc_array *arrays = calloc(count ? count : 1, sizeof *arrays);
    if (arrays == NULL) return exactc_fail(err, errlen, "out of memory");
    size_t read = 0;
    int rc = 0;
    *length = 0;
    char path[4096], why[512];
    for (; rc == 0 && read < count; read++) {
        const exactc_tensor_spec *spec = &program->inputs[read];
        if (npy_path(path, sizeof path, dir, spec->name) != 0) {
            rc = exactc_fail(err, errlen, "input %s: the path %s/%s.npy is too long", spec->name, dir, spec->name);
            break;
        }
        if (exactc_npy_read(path, &arrays[read], why, sizeof why) != 0) {
            rc = exactc_fail(err, errlen, "input %s: %s", spec->name, why);
            break;
        }
        if (program->max_length > 0) {
            int64_t found = exactc_input_length(&arrays[read], spec, program->max_length, *length, why, sizeof why);
            if (found < 0) {
                rc = exactc_fail(err, errlen, "%s: %s", path, why);
                read++;
                break;
            }
            if (found > 0) *length = found;
        }
    }
    if (rc == 0 && program->length_from != NULL) {
        *length = length_value(program, arrays, why, sizeof why);
        if (*length < 0) rc = exactc_fail(err, errlen, "%s/%s.npy: %s", dir, program->length_from, why);
    }
    for (size_t i = 0; rc == 0 && i < count; i++) {
        /* No input has given the length yet (each that follows it has another dtype or
         * rank): the refusal names the shape with T, and T's range. */
        const exactc_tensor_spec *spec = &program->inputs[i];
        int unread = *length == 0 && spec_follows_length(spec);
        exactc_tensor_spec at = unread ? *spec : exactc_spec_at(spec, *length);
        if (exactc_input_take(&arrays[i], &at, inputs[i], why, sizeof why) != 0) {
            npy_path(path, sizeof path, dir, at.name);
            if (unread)
                rc = exactc_fail(err, errlen, "%s: %s (T is the length, 1 to T_max = %lld)", path, why,
                                 (long long)program->max_length);
            else
                rc = exactc_fail(err, errlen, "%s: %s", path, why);
        }
    }
    for (size_t i = 0; i < read; i++) exactc_array_free(&arrays[i]);
    free(arrays);
    return rc;
}

/* Run the network `runs` times on the buffers; the time per run when EXACTC_REPEAT asks. */
static void run_timed(const exactc_program *program, const void *weights, int64_t length, void **inputs,
                      void **outputs, unsigned char *arena, exactc_arena_check *check, const char *argv0) {
    const char *repeat = getenv("EXACTC_REPEAT");
    long runs = repeat != NULL ? strtol(repeat, NULL, 10) : 1;
    if (runs < 1) runs = 1;
#ifdef EXACTC_CHECKING
    exactc_arena_open(check, arena, program->arena_bytes);
#else
    (void)check;
#endif
    struct timespec t0, t1;
    timespec_get(&t0, TIME_UTC);
#ifdef EXACTC_PROBE
    CALLGRIND_TOGGLE_COLLECT; /* callgrind counts the network only */
#endif
    for (long r = 0; r < runs; r++) program->run(weights, length, inputs, outputs, arena);
#ifdef EXACTC_PROBE
    CALLGRIND_TOGGLE_COLLECT;
#endif
    timespec_get(&t1, TIME_UTC);
    if (repeat != NULL) {
        double seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        fprintf(stderr, "exactc: %s: %.9f s per run (%ld runs)\n", argv0, seconds / (double)runs, runs);
    }
#ifdef EXACTC_CHECKING
    fprintf(stderr, "exactc: arena peak reached %zu bytes of %zu computed\n", check->reached, program->arena_bytes);
#endif
}

int exactc_main(int argc, char **argv, const exactc_program *program) {
    if (argc < 4 || argc % 2 != 0) {
        fprintf(stderr, "usage: %s WEIGHTS.safetensors INPUT_DIR OUTPUT_DIR [INPUT_DIR OUTPUT_DIR ...]\n", argv[0]);
        return 2;
    }
    char err[4096];
    void *block, *weights;
    exactc_arena_check check = {0};
    if (exactc_program_weights(program, argv[1], &block, &weights) != 0) return 1;
    void **inputs = exactc_buffers_alloc(program->inputs, program->input_count, program->max_length);
    void **outputs = inputs != NULL ? exactc_outputs_alloc(program, inputs) : NULL;
    unsigned char *arena = exactc_aligned_block(program->arena_bytes);
    int rc = 0;
    if (inputs == NULL || outputs == NULL || arena == NULL) {
        fprintf(stderr, "exactc: out of memory\n");
        rc = 1;
    }
    /* Every output of every pair is staged under a temporary name, and all are renamed
     * into place only when every pair has run: a run that fails leaves no output at all,
     * not the earlier pairs' (nor a truncated file). */
    size_t staged_count = 0, staged_cap = (size_t)(argc / 2) * (program->output_count ? program->output_count : 1);
    char **staged = calloc(staged_cap, sizeof *staged);
    if (staged == NULL && rc == 0) {
        fprintf(stderr, "exactc: out of memory\n");
        rc = 1;
    }
    /* Each INPUT_DIR OUTPUT_DIR pair is one run of the network; the weights load once. */
    for (int pair = 2; rc == 0 && pair + 1 < argc; pair += 2) {
        const char *in_dir = argv[pair], *out_dir = argv[pair + 1];
        int64_t length = 0;
        if (read_inputs(program, in_dir, inputs, &length, err, sizeof err) != 0) {
            fprintf(stderr, "exactc: %s\n", err);
            rc = 1;
        }
        if (rc == 0) run_timed(program, weights, length, inputs, outputs, arena, &check, argv[0]);
        for (size_t i = 0; rc == 0 && i < program->output_count; i++) {
            exactc_tensor_spec at = exactc_spec_at(&program->outputs[i], length);
            char one[EXACTC_STAGED];
            if (exactc_output_stage(out_dir, &at, outputs[i], pair / 2, one, err, sizeof err) != 0) {
                fprintf(stderr, "exactc: %s\n", err);
                rc = 1;
            } else if ((staged[staged_count] = malloc(exactc_staged_size(one))) == NULL) {
                remove(one);
                fprintf(stderr, "exactc: out of memory\n");
                rc = 1;
            } else {
                memcpy(staged[staged_count++], one, exactc_staged_size(one));
            }
        }
    }
    for (size_t k = 0; k < staged_count; k++) {
        if (rc == 0 && exactc_output_commit(staged[k], err, sizeof err) != 0) {
            fprintf(stderr, "exactc: %s\n", err);
            rc = 1;
        } else if (rc != 0) {
            remove(staged[k]);
        }
        free(staged[k]);
    }
    free(staged);
    exactc_outputs_free(program, outputs);
    exactc_buffers_free(inputs, program->input_count);
    free(arena);
    free(weights);
    free(block);
    return rc;
}
