/* exactc runtime: the library of model.h, a handle on the program model.c describes.
 *
 * A handle holds all that a run changes (the weights' Weights, the arena and its checks,
 * the buffers at T_max that bf16's rounding and the generation loop use, the last
 * message); the runtime holds no global state, so two handles run at once. A run reads
 * each input where it lies and writes each output into the caller's buffer, but for
 * bf16, which goes through the handle's buffers (rounded in, widened out) as the
 * program's .npy files do. Every refusal is a status and a message that names the array
 * and the rule; nothing here exits or aborts.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exactc_generate.h"
#include "model.h"

#define MESSAGE_BYTES 4096

struct exactc_model {
    const exactc_program *program;
    void *block, *weights;     /* the parameters; the model's Weights pointing into them */
    void **in, **out;          /* buffers at T_max: bf16 values, generation's steps */
    unsigned char *arena;      /* this handle's scratch */
    exactc_arena_check check;  /* the arena's checks (checking builds) */
    double prompt_seconds, seconds; /* the last generation's */
    char message[MESSAGE_BYTES];
};

static const char NULL_HANDLE[] = "no model: the handle is NULL (exactc_model_open gives one)";

/* The status, with the message already in m->message (exactc_fail's). */
static exactc_model_status failed(exactc_model *m, exactc_model_status status, const char *fmt, const char *what) {
    exactc_fail(m->message, sizeof m->message, fmt, what);
    return status;
}

/* ---- open and close ---------------------------------------------------------------- */

void exactc_model_close(exactc_model *m) {
    if (m == NULL) return;
    const exactc_program *p = m->program;
    exactc_outputs_free(p, m->out);
    exactc_buffers_free(m->in, p->input_count);
    free(m->arena);
    free(m->weights);
    free(m->block);
    free(m);
}

/* A handle on the parsed file image `st`. */
static exactc_model_status open_parsed(const exactc_safetensors *st, exactc_model **model, char *err, size_t errlen) {
    const exactc_program *p = exactc_model_program();
    exactc_model *m = calloc(1, sizeof *m);
    if (m == NULL) return exactc_fail(err, errlen, "out of memory"), EXACTC_MODEL_ERROR_MEMORY;
    m->program = p;
    if (exactc_program_weights_parsed(p, st, &m->block, &m->weights, err, errlen) != 0) {
        free(m);
        return EXACTC_MODEL_ERROR_WEIGHTS;
    }
    m->in = exactc_buffers_alloc(p->inputs, p->input_count, p->max_length);
    m->out = m->in != NULL ? exactc_outputs_alloc(p, m->in) : NULL;
    m->arena = exactc_aligned_block(p->arena_bytes);
    if (m->in == NULL || m->out == NULL || m->arena == NULL) {
        exactc_model_close(m);
        return exactc_fail(err, errlen, "out of memory"), EXACTC_MODEL_ERROR_MEMORY;
    }
    *model = m;
    return EXACTC_MODEL_OK;
}

exactc_model_status exactc_model_open_memory(const void *bytes, size_t len, exactc_model **model, char *err,
                                             size_t errlen) {
    if (model == NULL) return exactc_fail(err, errlen, "give where to put the handle"), EXACTC_MODEL_ERROR_NULL;
    *model = NULL;
    if (bytes == NULL) return exactc_fail(err, errlen, "the weights buffer is NULL"), EXACTC_MODEL_ERROR_NULL;
    exactc_safetensors st;
    char why[MESSAGE_BYTES];
    if (exactc_st_parse(bytes, len, &st, why, sizeof why) != 0)
        return exactc_fail(err, errlen, "the weights buffer (%zu bytes): %s", len, why), EXACTC_MODEL_ERROR_WEIGHTS;
    exactc_model_status status = open_parsed(&st, model, why, sizeof why);
    exactc_st_close(&st);
    if (status != EXACTC_MODEL_OK) exactc_fail(err, errlen, "the weights buffer: %s", why);
    return status;
}

exactc_model_status exactc_model_open(const char *path, exactc_model **model, char *err, size_t errlen) {
    if (model == NULL) return exactc_fail(err, errlen, "give where to put the handle"), EXACTC_MODEL_ERROR_NULL;
    *model = NULL;
    if (path == NULL) return exactc_fail(err, errlen, "the weights path is NULL"), EXACTC_MODEL_ERROR_NULL;
    int fd = open(path, O_RDONLY);
    struct stat info;
    if (fd < 0 || fstat(fd, &info) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        return exactc_fail(err, errlen, "%s: %s", path, strerror(e)), EXACTC_MODEL_ERROR_WEIGHTS;
    }
    /* A regular file is mapped and parsed where it lies; anything else (a pipe, an empty
     * file, which mmap refuses) is read by the runtime's reader. */
    void *mapped = S_ISREG(info.st_mode) && info.st_size > 0
                       ? mmap(NULL, (size_t)info.st_size, PROT_READ, MAP_PRIVATE, fd, 0)
                       : MAP_FAILED;
    close(fd);
    exactc_safetensors st;
    char why[MESSAGE_BYTES];
    int parsed = mapped != MAP_FAILED ? exactc_st_parse(mapped, (size_t)info.st_size, &st, why, sizeof why)
                                      : exactc_st_open(path, &st, why, sizeof why);
    exactc_model_status status = EXACTC_MODEL_ERROR_WEIGHTS;
    if (parsed == 0) {
        status = open_parsed(&st, model, why, sizeof why);
        exactc_st_close(&st);
    }
    if (mapped != MAP_FAILED) munmap(mapped, (size_t)info.st_size);
    if (status != EXACTC_MODEL_OK) exactc_fail(err, errlen, "%s: %s", path, why);
    return status;
}

const char *exactc_model_message(const exactc_model *m) {
    return m == NULL ? NULL_HANDLE : m->message;
}

/* ---- what the entry is ------------------------------------------------------------- */

const char *exactc_model_name(const exactc_model *m) {
    return m == NULL ? "" : m->program->model;
}

const char *exactc_model_entry(const exactc_model *m) {
    return m == NULL ? "" : m->program->entry;
}

int64_t exactc_model_max_length(const exactc_model *m) {
    return m == NULL ? 0 : m->program->max_length;
}

size_t exactc_model_input_count(const exactc_model *m) {
    return m == NULL ? 0 : m->program->input_count;
}

size_t exactc_model_output_count(const exactc_model *m) {
    return m == NULL ? 0 : m->program->output_count;
}

static void describe(const exactc_tensor_spec *t, const char *written_over, exactc_model_spec *spec) {
    memset(spec, 0, sizeof *spec);
    spec->name = t->name;
    spec->dtype = (int)exactc_kind_dtype(t->kind);
    spec->ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) {
        spec->shape[d] = t->shape[d];
        spec->per_length[d] = t->per_length[d];
    }
    spec->written_over = written_over;
}

exactc_model_status exactc_model_input(const exactc_model *m, size_t index, exactc_model_spec *spec) {
    if (m == NULL || spec == NULL) return EXACTC_MODEL_ERROR_NULL;
    if (index >= m->program->input_count) return EXACTC_MODEL_ERROR_ARGUMENT;
    describe(&m->program->inputs[index], NULL, spec);
    return EXACTC_MODEL_OK;
}

exactc_model_status exactc_model_output(const exactc_model *m, size_t index, exactc_model_spec *spec) {
    if (m == NULL || spec == NULL) return EXACTC_MODEL_ERROR_NULL;
    if (index >= m->program->output_count) return EXACTC_MODEL_ERROR_ARGUMENT;
    const exactc_program *p = m->program;
    describe(&p->outputs[index], p->in_place != NULL ? p->in_place[index] : NULL, spec);
    return EXACTC_MODEL_OK;
}

/* ---- a run ------------------------------------------------------------------------- */

/* An array as the runtime's readers see one (the data not owned). */
static exactc_array as_array(const exactc_model_array *a) {
    exactc_array out;
    memset(&out, 0, sizeof out);
    out.dtype = (exactc_dtype)a->dtype;
    out.ndim = a->ndim;
    for (int d = 0; d < a->ndim && d < EXACTC_NPY_MAX_DIMS; d++) out.shape[d] = a->shape[d];
    out.data = a->data;
    out.nbytes = a->nbytes;
    return out;
}

/* Input `i`'s dtype and rank, before its shape gives the length. */
static exactc_model_status check_kind(exactc_model *m, size_t i, const exactc_model_array *a) {
    const exactc_tensor_spec *spec = &m->program->inputs[i];
    int want = (int)exactc_kind_dtype(spec->kind);
    if (a->data == NULL) return failed(m, EXACTC_MODEL_ERROR_NULL, "input %s: its data is NULL", spec->name);
    if (a->dtype != want) {
        exactc_fail(m->message, sizeof m->message, "input %s must be %s; it is %s", spec->name,
                    exactc_dtype_name((exactc_dtype)want),
                    a->dtype >= 0 && a->dtype <= EXACTC_I64 ? exactc_dtype_name((exactc_dtype)a->dtype)
                                                             : "an unknown dtype");
        return EXACTC_MODEL_ERROR_DTYPE;
    }
    if (a->ndim != spec->ndim) {
        exactc_fail(m->message, sizeof m->message, "input %s must have %d dimension(s); it has %d", spec->name,
                    spec->ndim, a->ndim);
        return EXACTC_MODEL_ERROR_SHAPE;
    }
    if ((uintptr_t)a->data % exactc_dtype_size((exactc_dtype)want) != 0)
        return failed(m, EXACTC_MODEL_ERROR_ARGUMENT, "input %s: its data is not aligned for its dtype",
                      spec->name);
    return EXACTC_MODEL_OK;
}

/* The run-time length the inputs give (0 for a program without one). */
static exactc_model_status run_length(exactc_model *m, const exactc_model_array *inputs, int64_t *length) {
    const exactc_program *p = m->program;
    *length = 0;
    if (p->max_length == 0) return EXACTC_MODEL_OK;
    char why[MESSAGE_BYTES];
    for (size_t i = 0; i < p->input_count; i++) {
        exactc_array a = as_array(&inputs[i]);
        int64_t found = exactc_input_length(&a, &p->inputs[i], p->max_length, *length, why, sizeof why);
        if (found < 0) return failed(m, EXACTC_MODEL_ERROR_LENGTH, "%s", why);
        if (found > 0) *length = found;
        if (p->length_from == NULL || strcmp(p->inputs[i].name, p->length_from) != 0) continue;
        int32_t value = 0;
        if (inputs[i].nbytes == sizeof value) memcpy(&value, inputs[i].data, sizeof value);
        if (inputs[i].nbytes != sizeof value || value < 1 || value > p->max_length) {
            exactc_fail(m->message, sizeof m->message, "input %s: give one int32 in [1, %lld] (the run-time length T)",
                        p->length_from, (long long)p->max_length);
            return EXACTC_MODEL_ERROR_LENGTH;
        }
        *length = value;
        return EXACTC_MODEL_OK;
    }
    return EXACTC_MODEL_OK;
}

/* Input `i` at the run's length: its shape and bytes checked; where the network reads it
 * (the caller's data, or the handle's buffer of bf16 values) in *at. */
static exactc_model_status take_input(exactc_model *m, size_t i, const exactc_model_array *a, int64_t length,
                                      void **at) {
    const exactc_tensor_spec spec = exactc_spec_at(&m->program->inputs[i], length);
    exactc_array view = as_array(a);
    char why[MESSAGE_BYTES];
    int fits = 1;
    for (int d = 0; d < spec.ndim; d++) fits = fits && a->shape[d] == spec.shape[d];
    size_t bytes = exactc_spec_count(&spec) * exactc_dtype_size(exactc_kind_dtype(spec.kind));
    if (!fits || a->nbytes != bytes) {
        /* the runtime's reader names the shape it needs */
        view.nbytes = bytes;
        if (!fits && exactc_input_take(&view, &spec, NULL, why, sizeof why) != 0)
            return failed(m, EXACTC_MODEL_ERROR_SHAPE, "%s", why);
        exactc_fail(m->message, sizeof m->message, "input %s: its shape holds %zu bytes; nbytes says %zu",
                    spec.name, bytes, a->nbytes);
        return EXACTC_MODEL_ERROR_SHAPE;
    }
    if (spec.kind != EXACTC_KIND_BF16) {
        *at = a->data;
        return EXACTC_MODEL_OK;
    }
    exactc_input_take(&view, &spec, m->in[i], why, sizeof why); /* rounded to bf16; checked above */
    *at = m->in[i];
    return EXACTC_MODEL_OK;
}

/* Output `i`'s buffer: the caller's, or the handle's for bf16 (widened after the run). */
static exactc_model_status place_output(exactc_model *m, size_t i, exactc_model_array *a, int64_t length,
                                        void **at) {
    const exactc_tensor_spec spec = exactc_spec_at(&m->program->outputs[i], length);
    size_t bytes = exactc_spec_count(&spec) * exactc_dtype_size(exactc_kind_dtype(spec.kind));
    if (a->data == NULL) return failed(m, EXACTC_MODEL_ERROR_NULL, "output %s: its data is NULL", spec.name);
    if (a->nbytes < bytes) {
        exactc_fail(m->message, sizeof m->message, "output %s needs %zu bytes at T = %lld; its buffer has %zu",
                    spec.name, bytes, (long long)length, a->nbytes);
        return EXACTC_MODEL_ERROR_SHAPE;
    }
    if ((uintptr_t)a->data % exactc_dtype_size(exactc_kind_dtype(spec.kind)) != 0)
        return failed(m, EXACTC_MODEL_ERROR_ARGUMENT, "output %s: its data is not aligned for its dtype", spec.name);
    *at = spec.kind == EXACTC_KIND_BF16 ? m->out[i] : a->data;
    return EXACTC_MODEL_OK;
}

/* The outputs' shapes and bytes written; bf16 values widened into the caller's buffers. */
static void give_outputs(exactc_model *m, exactc_model_array *outputs, void *const *outs, int64_t length) {
    const exactc_program *p = m->program;
    for (size_t i = 0; i < p->output_count; i++) {
        const exactc_tensor_spec spec = exactc_spec_at(&p->outputs[i], length);
        exactc_model_array *a = &outputs[i];
        size_t count = exactc_spec_count(&spec);
        a->dtype = (int)exactc_kind_dtype(spec.kind);
        a->ndim = spec.ndim;
        for (int d = 0; d < spec.ndim; d++) a->shape[d] = spec.shape[d];
        a->nbytes = count * exactc_dtype_size(exactc_kind_dtype(spec.kind));
        if (spec.kind != EXACTC_KIND_BF16) continue;
        const exactc_bf16 *h = outs[i];
        float *wide = a->data;
        for (size_t k = 0; k < count; k++) wide[k] = exactc_bf16_to_f32(h[k]);
    }
}

exactc_model_status exactc_model_run(exactc_model *m, const exactc_model_array *inputs, size_t input_count,
                                     exactc_model_array *outputs, size_t output_count) {
    if (m == NULL) return EXACTC_MODEL_ERROR_NULL;
    m->message[0] = '\0';
    const exactc_program *p = m->program;
    if ((inputs == NULL && p->input_count > 0) || outputs == NULL)
        return failed(m, EXACTC_MODEL_ERROR_NULL, "%s", "give the inputs and the outputs (arrays, not NULL)");
    if (input_count != p->input_count || output_count != p->output_count) {
        exactc_fail(m->message, sizeof m->message, "the entry takes %zu input(s) and gives %zu output(s); the call "
                    "has %zu and %zu", p->input_count, p->output_count, input_count, output_count);
        return EXACTC_MODEL_ERROR_ARGUMENT;
    }
    exactc_model_status status = EXACTC_MODEL_OK;
    for (size_t i = 0; status == EXACTC_MODEL_OK && i < p->input_count; i++) status = check_kind(m, i, &inputs[i]);
    int64_t length = 0;
    if (status == EXACTC_MODEL_OK) status = run_length(m, inputs, &length);
    void *ins[64], *outs[64];
    if (p->input_count > 64 || p->output_count > 64)
        return failed(m, EXACTC_MODEL_ERROR_ARGUMENT, "%s", "more than 64 inputs or outputs");
    for (size_t i = 0; status == EXACTC_MODEL_OK && i < p->input_count; i++)
        status = take_input(m, i, &inputs[i], length, &ins[i]);
    for (size_t i = 0; status == EXACTC_MODEL_OK && i < p->output_count; i++)
        status = place_output(m, i, &outputs[i], length, &outs[i]);
    if (status != EXACTC_MODEL_OK) return status;
    /* An output written over an input: the network writes the input's buffer, so that
     * buffer is the output's, holding the input's values first. */
    for (size_t i = 0; i < p->output_count; i++) {
        int k = exactc_in_place_input(p, i);
        if (k < 0) continue;
        exactc_tensor_spec at = exactc_spec_at(&p->inputs[k], length);
        size_t bytes = exactc_spec_count(&at) * exactc_kind_size(at.kind);
        if (outs[i] != ins[k]) memmove(outs[i], ins[k], bytes);
        ins[k] = outs[i];
    }
#ifdef EXACTC_CHECKING
    exactc_arena_open(&m->check, m->arena, p->arena_bytes);
#endif
    p->run(m->weights, length, ins, outs, m->arena);
    give_outputs(m, outputs, outs, length);
    return EXACTC_MODEL_OK;
}

/* ---- generation -------------------------------------------------------------------- */

exactc_model_status exactc_model_generate(exactc_model *m, const int32_t *prompt, int64_t prompt_length,
                                          const exactc_model_generation *options, int32_t *tokens,
                                          double *probabilities, double *uniforms, int64_t *generated) {
    if (m == NULL) return EXACTC_MODEL_ERROR_NULL;
    m->message[0] = '\0';
    if (prompt == NULL || options == NULL || tokens == NULL || generated == NULL)
        return failed(m, EXACTC_MODEL_ERROR_NULL, "%s", "give the prompt, the options, tokens and generated");
    *generated = 0;
    int64_t vocab;
    if (exactc_decode_vocab(m->program, &vocab, m->message, sizeof m->message) != 0) return EXACTC_MODEL_ERROR_ENTRY;
    if (options->count < 1)
        return failed(m, EXACTC_MODEL_ERROR_ARGUMENT, "%s", "count: give at least one new token");
    exactc_key key;
    if (options->key != NULL) memcpy(key.w, options->key, sizeof key.w);
    else exactc_key_from_seed(options->seed, &key);
    exactc_sampling sampling = {options->temperature, options->top_k, options->top_p};
    size_t count = (size_t)options->count;
    double *p_own = probabilities == NULL ? malloc(count * sizeof *p_own) : NULL;
    double *u_own = uniforms == NULL ? malloc(count * sizeof *u_own) : NULL;
    exactc_generated g = {tokens, probabilities != NULL ? probabilities : p_own, uniforms != NULL ? uniforms : u_own,
                          options->on_token, options->user, 0, 0.0, 0.0};
    exactc_decoder d = {m->program, m->weights, m->in, m->out, m->arena, &m->check, 0};
    exactc_model_status status = EXACTC_MODEL_OK;
    if (g.probabilities == NULL || g.uniforms == NULL)
        status = failed(m, EXACTC_MODEL_ERROR_MEMORY, "%s", "out of memory");
    else if (exactc_generate_tokens(&d, prompt, prompt_length, &key, &sampling, options->count, options->stop, &g,
                                    m->message, sizeof m->message) != 0)
        status = EXACTC_MODEL_ERROR_ARGUMENT;
    *generated = g.count;
    m->prompt_seconds = g.prompt_seconds;
    m->seconds = g.seconds;
    free(u_own);
    free(p_own);
    return status;
}

exactc_model_status exactc_model_timing(const exactc_model *m, double *prompt_seconds, double *seconds) {
    if (m == NULL || prompt_seconds == NULL || seconds == NULL) return EXACTC_MODEL_ERROR_NULL;
    *prompt_seconds = m->prompt_seconds;
    *seconds = m->seconds;
    return EXACTC_MODEL_OK;
}
