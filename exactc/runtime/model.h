/* model.h: the exported model as a C library (`make lib`: libmodel.a, libmodel.so).
 *
 * The program in this directory (`./model`) reads its weights and inputs from files and
 * writes .npy files; the library is the same network for an application that keeps the
 * weights loaded and calls it with arrays in memory. Its outputs carry the program's
 * bits (conformance/check.sh compares examples/run, a C program of this API, with it).
 *
 *     exactc_model *m;
 *     char err[512];
 *     if (exactc_model_open("weights.safetensors", &m, err, sizeof err) != EXACTC_MODEL_OK) { ... err ... }
 *     exactc_model_array in[3] = {...}, out[1] = {...};   (README.md lists the entry's arrays)
 *     if (exactc_model_run(m, in, 3, out, 1) != EXACTC_MODEL_OK) { ... exactc_model_message(m) ... }
 *     exactc_model_close(m);
 *
 * - A handle (exactc_model) is opaque and holds everything a run changes: the weights'
 *   layout, its arena, its buffers and its last message. The library has no global
 *   state: two handles run at once, each on its own thread, each with its own arena, and
 *   give the bits of the program. One handle runs one call at a time.
 * - Every function returns an exactc_model_status; anything but EXACTC_MODEL_OK comes with
 *   a one-line message (exactc_model_message; the open functions write theirs to `err`).
 *   Hostile use gets a status and a message, never a crash: a NULL handle or array, a
 *   wrong dtype or shape, a run-time length outside [1, T_max], a weights file or buffer
 *   that is truncated or malformed.
 * - Arrays travel as the program's .npy files hold them: f64, f32 and int32, C order;
 *   a bf16 program takes f32 inputs (rounded to bf16, nearest even) and gives f32 outputs
 *   (bf16 values widened, exact). An input is read where it lies (no copy, but for bf16's
 *   rounding); an output is written where the caller's buffer lies.
 */
#ifndef EXACTC_MODEL_H
#define EXACTC_MODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define EXACTC_MODEL_API __attribute__((visibility("default")))
#else
#define EXACTC_MODEL_API
#endif

typedef struct exactc_model exactc_model;

typedef enum {
    EXACTC_MODEL_OK = 0,
    EXACTC_MODEL_ERROR_NULL = 1,     /* a NULL handle, array or pointer where one is needed */
    EXACTC_MODEL_ERROR_ARGUMENT = 2, /* a count, an index, an option or an alignment out of its rule */
    EXACTC_MODEL_ERROR_DTYPE = 3,    /* an array of another dtype than the entry's */
    EXACTC_MODEL_ERROR_SHAPE = 4,    /* an array of another shape, or a buffer too small */
    EXACTC_MODEL_ERROR_LENGTH = 5,   /* a run-time length outside [1, T_max] */
    EXACTC_MODEL_ERROR_WEIGHTS = 6,  /* the weights file or buffer refused */
    EXACTC_MODEL_ERROR_MEMORY = 7,
    EXACTC_MODEL_ERROR_ENTRY = 8     /* generation asked of a program that is not a decode entry */
} exactc_model_status;

/* The dtypes, numbered as the runtime's .npy reader numbers them. */
enum { EXACTC_MODEL_F64 = 0, EXACTC_MODEL_F32 = 1, EXACTC_MODEL_I32 = 2 };

#define EXACTC_MODEL_MAX_DIMS 8

/* An array. For an input: its dtype, shape and data (nbytes, the bytes at data, must be
 * the shape's). For an output: data and nbytes (the room there) are the caller's; the run
 * writes dtype, ndim, shape and nbytes (the bytes written). data must be aligned for its
 * dtype. */
typedef struct {
    int dtype;
    int ndim;
    int64_t shape[EXACTC_MODEL_MAX_DIMS];
    void *data;
    size_t nbytes;
} exactc_model_array;

/* An input or output of the entry: dimension d is shape[d] + per_length[d] * T, T the
 * run-time length (per_length all zero: a static shape). */
typedef struct {
    const char *name;
    int dtype;
    int ndim;
    int64_t shape[EXACTC_MODEL_MAX_DIMS];
    int64_t per_length[EXACTC_MODEL_MAX_DIMS];
    const char *written_over; /* an output: the input whose buffer it is written over, or NULL */
} exactc_model_spec;

/* Open a handle on the weights file at `path` (mapped while it is read), or on a
 * .safetensors image in memory of `len` bytes (read where it lies; the caller keeps it
 * only until the call returns). EXACTC_MODEL_OK with *model set, or a status with *model
 * NULL and the message in err (errlen bytes; NULL or 0 allowed). */
EXACTC_MODEL_API exactc_model_status exactc_model_open(const char *path, exactc_model **model, char *err,
                                                       size_t errlen);
EXACTC_MODEL_API exactc_model_status exactc_model_open_memory(const void *bytes, size_t len, exactc_model **model,
                                                              char *err, size_t errlen);
/* Release a handle and all it holds (NULL: nothing). */
EXACTC_MODEL_API void exactc_model_close(exactc_model *model);
/* The message of the handle's last failed call ("" after a success); for NULL, a message
 * saying so. Valid until the handle's next call. */
EXACTC_MODEL_API const char *exactc_model_message(const exactc_model *model);

/* What the entry is: "gpt", "decode", T_max (0: no run-time length), its arrays. */
EXACTC_MODEL_API const char *exactc_model_name(const exactc_model *model);
EXACTC_MODEL_API const char *exactc_model_entry(const exactc_model *model);
EXACTC_MODEL_API int64_t exactc_model_max_length(const exactc_model *model);
EXACTC_MODEL_API size_t exactc_model_input_count(const exactc_model *model);
EXACTC_MODEL_API size_t exactc_model_output_count(const exactc_model *model);
EXACTC_MODEL_API exactc_model_status exactc_model_input(const exactc_model *model, size_t index,
                                                        exactc_model_spec *spec);
EXACTC_MODEL_API exactc_model_status exactc_model_output(const exactc_model *model, size_t index,
                                                         exactc_model_spec *spec);

/* One run of the entry: the inputs in the order exactc_model_input lists them, the
 * run-time length T taken from their shapes (or from the value of the input that holds
 * it, a decode step's position), the outputs written at T. An output written over an
 * input (a decode step's caches) is that input's values with the run's rows written in:
 * give the same buffer for both to have it updated in place. */
EXACTC_MODEL_API exactc_model_status exactc_model_run(exactc_model *model, const exactc_model_array *inputs,
                                                      size_t input_count, exactc_model_array *outputs,
                                                      size_t output_count);

/* Called with each token as it is drawn (index from 0); a non-zero return stops the
 * generation after that token. */
typedef int (*exactc_model_on_token)(void *user, int64_t index, int32_t token, double probability);

/* A generation's options: exactc's sampler (docs/semantics.md section 14) and its key. */
typedef struct {
    int64_t count;       /* new tokens at most, >= 1 */
    int64_t stop;        /* a token that ends the generation once drawn (kept), or -1 */
    double temperature;  /* >= 0 and finite; 0 is greedy */
    int64_t top_k;       /* >= 0; 0 is no top-k */
    double top_p;        /* in [0, 1]; 1 is no top-p */
    uint64_t seed;       /* the key is key_from_seed(seed) ... */
    const uint32_t *key; /* ... unless this names the key's 8 words */
    exactc_model_on_token on_token; /* or NULL */
    void *user;
} exactc_model_generation;

/* A decode entry's whole generation (section 16, `./model generate`'s loop): the prompt's
 * ids through the network from position 0, then new tokens until `count`, the stop token
 * or on_token says stop. tokens (and probabilities, uniforms, unless NULL) hold `count`
 * elements each; *generated is the number drawn. */
EXACTC_MODEL_API exactc_model_status exactc_model_generate(exactc_model *model, const int32_t *prompt,
                                                           int64_t prompt_length,
                                                           const exactc_model_generation *options,
                                                           int32_t *tokens, double *probabilities, double *uniforms,
                                                           int64_t *generated);

/* The last generation's time: its prompt's steps, and the whole loop, in seconds. */
EXACTC_MODEL_API exactc_model_status exactc_model_timing(const exactc_model *model, double *prompt_seconds,
                                                         double *seconds);

#ifdef __cplusplus
}
#endif

#endif /* EXACTC_MODEL_H */
