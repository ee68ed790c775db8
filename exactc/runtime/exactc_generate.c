/* exactc runtime: generation in one process, the `generate` command of a decode entry.
 *
 *   ./model generate WEIGHTS.safetensors INPUT_DIR OUTPUT_DIR [-n N] [--temperature T]
 *                    [--top-k K] [--top-p P] [--stop ID]
 *
 *   INPUT_DIR/prompt_ids.npy      the prompt: int32 or int64, 1-d, at least one token
 *   INPUT_DIR/seed.npy            the key is key_from_seed(seed): int64, one element, the
 *                                 seed's 64 bits (a seed of 2^63 or more reads negative)
 *   or INPUT_DIR/key.npy          the key itself: int32, 8 elements, its words' bits
 *   OUTPUT_DIR/tokens.npy         int32 (n,): the new tokens, a drawn stop token included
 *   OUTPUT_DIR/probabilities.npy  f64 (n,): each token's probability (section 14's p)
 *   OUTPUT_DIR/uniforms.npy       f64 (n,): each step's u
 *
 * Each token is printed on stdout as it is drawn, its id on a line of its own; the three
 * outputs are written all or none when the loop ends.
 *
 * docs/semantics.md section 16 is the loop, the reference backend's
 * (exporter/reference/generation.py): token i is drawn by section 14's sampler
 * (exactc_sample.c) with u = uniform(draw(fold_in(key, i), stream 0, counter 0, word 0))
 * from the logits of the last position, and is the next step's input.
 *
 * One network serves every step: the prompt runs through the decode network one
 * position at a time, and so do the new tokens. Section 16's cache property (a decode
 * step at T is the last row of `forward` over T + 1 positions, bit for bit) makes the
 * logits of the prompt's last position the bits of `prefill`'s, and every later step's
 * those of the reference's decode: the same tokens, the same probabilities.
 *
 * The cache: past_k and past_v are each L x KV runs of `tokens` rows (the input layout
 * (L, KV, tokens, hd)), allocated once; the step at position T writes its rows at row T
 * of each run itself (the outputs k and v are written in place over them) and reads rows
 * 0 … T where they lie. Nothing here moves or copies a row of the cache.
 *
 * Where the time goes: the network (the weights' matrix-vector products, attention over
 * the cache); the sampler is one exp per logit.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exactc_generate.h"

#ifdef EXACTC_PROBE /* instruction-count probes (exactc's verify/probes.py): the loop only */
#include <valgrind/callgrind.h>
#endif

/* ------------------------------------------------------------------------------------
 * The request: the options on the command line, the prompt and the key from INPUT_DIR.
 * ---------------------------------------------------------------------------------- */
typedef struct {
    const char *weights, *in_dir, *out_dir;
    int64_t count; /* new tokens at most (-n) */
    int64_t stop;  /* -1: none */
    exactc_sampling sampling;
} request;

static int parse_int(const char *option, const char *text, int64_t lo, int64_t *out, char *err, size_t errlen) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < lo)
        return exactc_fail(err, errlen, "%s %s: give an integer >= %lld", option, text, (long long)lo);
    *out = (int64_t)v;
    return 0;
}

static int parse_real(const char *option, const char *text, double *out, char *err, size_t errlen) {
    char *end;
    errno = 0;
    double v = strtod(text, &end); /* correctly rounded: Python's repr of a float reads back exactly */
    /* ERANGE on underflow (a subnormal or zero result, 1e-320) is a number like any other,
     * as Python's float() reads it; on overflow the value is infinite, refused below. */
    if (errno == ERANGE && fabs(v) <= DBL_MIN) errno = 0;
    if (errno != 0 || end == text || *end != '\0' || !isfinite(v))
        return exactc_fail(err, errlen, "%s %s: give a finite decimal number", option, text);
    *out = v;
    return 0;
}

static int parse_request(int argc, char **argv, request *r, char *err, size_t errlen) {
    if (argc < 4) return exactc_fail(err, errlen, "generate needs WEIGHTS.safetensors INPUT_DIR OUTPUT_DIR");
    r->weights = argv[1];
    r->in_dir = argv[2];
    r->out_dir = argv[3];
    r->count = 16;
    r->stop = -1;
    r->sampling.temperature = 1.0;
    r->sampling.top_k = 0;
    r->sampling.top_p = 1.0;
    for (int i = 4; i < argc; i += 2) {
        const char *option = argv[i];
        if (i + 1 >= argc) return exactc_fail(err, errlen, "%s: a value must follow it", option);
        const char *value = argv[i + 1];
        int rc;
        if (strcmp(option, "-n") == 0) rc = parse_int(option, value, 1, &r->count, err, errlen);
        else if (strcmp(option, "--stop") == 0) rc = parse_int(option, value, 0, &r->stop, err, errlen);
        else if (strcmp(option, "--top-k") == 0) rc = parse_int(option, value, 0, &r->sampling.top_k, err, errlen);
        else if (strcmp(option, "--temperature") == 0)
            rc = parse_real(option, value, &r->sampling.temperature, err, errlen);
        else if (strcmp(option, "--top-p") == 0) rc = parse_real(option, value, &r->sampling.top_p, err, errlen);
        else return exactc_fail(err, errlen, "%s: not an option of generate (-n, --temperature, --top-k, "
                                "--top-p, --stop)", option);
        if (rc != 0) return -1;
    }
    /* The sampler's own rules judge the options (one logit, a valid u): a request it
     * would refuse at the first step is refused before any work. */
    const double one = 0.0;
    unsigned char scratch[64];
    exactc_sample_result unused;
    char why[256];
    if (exactc_sample_scratch_bytes(1) > sizeof scratch) return exactc_fail(err, errlen, "out of memory");
    if (exactc_sample(&one, 1, &r->sampling, 0.5, scratch, &unused, why, sizeof why) != EXACTC_SAMPLE_OK)
        return exactc_fail(err, errlen, "%s", why);
    return 0;
}

/* DIR/<name>.npy, or 1 when there is no such file (*a untouched). */
static int read_optional(const char *dir, const char *name, exactc_array *a, char *err, size_t errlen) {
    char path[4096], why[512];
    if ((size_t)snprintf(path, sizeof path, "%s/%s.npy", dir, name) >= sizeof path)
        return exactc_fail(err, errlen, "the path %s/%s.npy is too long", dir, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL) return errno == ENOENT ? 1 : exactc_fail(err, errlen, "%s: %s", path, strerror(errno));
    fclose(f);
    if (exactc_npy_read(path, a, why, sizeof why) != 0) return exactc_fail(err, errlen, "%s", why);
    return 0;
}

/* The prompt's ids, each in [0, vocab), into a malloc'd array. */
static int read_prompt(const char *dir, int64_t vocab, int32_t **ids, int64_t *len, char *err, size_t errlen) {
    exactc_array a;
    int rc = read_optional(dir, "prompt_ids", &a, err, errlen);
    if (rc == 1) return exactc_fail(err, errlen, "%s/prompt_ids.npy: no such file (the prompt's token ids)", dir);
    if (rc != 0) return -1;
    size_t n = a.ndim == 1 ? (size_t)a.shape[0] : 0;
    if (a.ndim != 1 || n == 0 || (a.dtype != EXACTC_I32 && a.dtype != EXACTC_I64)) {
        exactc_array_free(&a);
        return exactc_fail(err, errlen, "%s/prompt_ids.npy: give a 1-d int32 or int64 array of at least one id",
                           dir);
    }
    *ids = malloc(n * sizeof **ids);
    if (*ids == NULL) rc = exactc_fail(err, errlen, "out of memory");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        int64_t id = a.dtype == EXACTC_I32 ? ((const int32_t *)a.data)[i] : ((const int64_t *)a.data)[i];
        if (id < 0 || id >= vocab)
            rc = exactc_fail(err, errlen, "%s/prompt_ids.npy: id %lld at index %zu is outside [0, %lld) (the "
                             "vocabulary)", dir, (long long)id, i, (long long)vocab);
        else
            (*ids)[i] = (int32_t)id;
    }
    exactc_array_free(&a);
    if (rc != 0) {
        free(*ids);
        *ids = NULL;
        return -1;
    }
    *len = (int64_t)n;
    return 0;
}

/* The key: key.npy as it is, or key_from_seed of seed.npy; exactly one of the two. */
static int read_key(const char *dir, exactc_key *key, char *err, size_t errlen) {
    exactc_array k, s;
    int has_key = read_optional(dir, "key", &k, err, errlen);
    if (has_key < 0) return -1;
    int has_seed = read_optional(dir, "seed", &s, err, errlen);
    if (has_seed < 0) {
        if (has_key == 0) exactc_array_free(&k);
        return -1;
    }
    int rc = 0;
    if (has_key == 0 && has_seed == 0) {
        rc = exactc_fail(err, errlen, "%s: holds key.npy and seed.npy; give one", dir);
    } else if (has_key == 0) {
        if (k.dtype != EXACTC_I32 || k.nbytes != 8 * sizeof(uint32_t))
            rc = exactc_fail(err, errlen, "%s/key.npy: give an int32 array of 8 elements (the key's words)", dir);
        else
            memcpy(key->w, k.data, sizeof key->w);
    } else if (has_seed == 0) {
        if (s.dtype != EXACTC_I64 || s.nbytes != sizeof(int64_t)) {
            rc = exactc_fail(err, errlen, "%s/seed.npy: give an int64 array of one element (the seed's bits)", dir);
        } else {
            uint64_t seed;
            memcpy(&seed, s.data, sizeof seed);
            exactc_key_from_seed(seed, key);
        }
    } else {
        rc = exactc_fail(err, errlen, "%s: holds neither seed.npy nor key.npy; give one", dir);
    }
    if (has_key == 0) exactc_array_free(&k);
    if (has_seed == 0) exactc_array_free(&s);
    return rc;
}

/* ------------------------------------------------------------------------------------
 * The decode network and its cache: the program's inputs are the token (1,), its
 * position (1,) (the run-time length T) and the caches past_k, past_v; its outputs the
 * logits (1, V) and the caches k, v, written in place over past_k and past_v.
 * ---------------------------------------------------------------------------------- */
int exactc_decode_vocab(const exactc_program *p, int64_t *vocab, char *err, size_t errlen) {
    static const char *const inputs[] = {"token", "position", "past_k", "past_v"},
                             *const outputs[] = {"logits", "k", "v"};
    int fits = p->input_count == 4 && p->output_count == 3 && p->max_length >= 1 && p->length_from != NULL &&
               strcmp(p->length_from, "position") == 0 && p->in_place != NULL;
    for (int i = 0; fits && i < 4; i++) fits = strcmp(p->inputs[i].name, inputs[i]) == 0;
    for (int i = 0; fits && i < 3; i++) fits = strcmp(p->outputs[i].name, outputs[i]) == 0;
    for (int c = 1; fits && c < 3; c++) fits = p->in_place[c] != NULL && strcmp(p->in_place[c], inputs[c + 1]) == 0;
    if (!fits)
        return exactc_fail(err, errlen, "this program is not a decode entry (token, position, past_k, past_v -> "
                           "logits, k, v in place)");
    const exactc_tensor_spec *logits = &p->outputs[0];
    if (p->inputs[0].kind != EXACTC_KIND_I32 || exactc_spec_count(&p->inputs[0]) != 1 || logits->ndim != 2 ||
        logits->shape[0] != 1)
        return exactc_fail(err, errlen, "this program's token or logits are not one position's");
    *vocab = logits->shape[1];
    return 0;
}

/* The logits of one position widened to f64 (exactly, from any site type). */
static void widen(exactc_kind site, const void *logits, int64_t vocab, double *out) {
    for (int64_t j = 0; j < vocab; j++) {
        if (site == EXACTC_KIND_F64) out[j] = ((const double *)logits)[j];
        else if (site == EXACTC_KIND_F32) out[j] = (double)((const float *)logits)[j];
        else out[j] = (double)exactc_bf16_to_f32(((const exactc_bf16 *)logits)[j]);
    }
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    timespec_get(&t1, TIME_UTC);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

/* ------------------------------------------------------------------------------------
 * The loop.
 * ---------------------------------------------------------------------------------- */

/* One position: `token` at position T, its logits in out[0], its rows written into the
 * cache (at row T) by the network itself. */
static void step(exactc_decoder *d, int32_t token) {
    *(int32_t *)d->in[0] = token;
    *(int32_t *)d->in[1] = (int32_t)d->T;
#ifdef EXACTC_CHECKING
    exactc_arena_open(d->check, d->arena, d->program->arena_bytes);
#endif
    d->program->run(d->weights, d->T, d->in, d->out, d->arena);
    d->T++;
}

/* The request's refusals before any work: an id outside the vocabulary, a stop token
 * outside it, more positions than the program takes. */
static int check_request(const exactc_program *p, int64_t vocab, const int32_t *prompt, int64_t len,
                         int64_t count, int64_t stop, char *err, size_t errlen) {
    if (len < 1 || count < 1)
        return exactc_fail(err, errlen, "give a prompt of at least one token and at least one new token (got %lld "
                           "and %lld)", (long long)len, (long long)count);
    for (int64_t i = 0; i < len; i++)
        if (prompt[i] < 0 || prompt[i] >= vocab)
            return exactc_fail(err, errlen, "prompt id %lld at index %lld is outside [0, %lld) (the vocabulary)",
                               (long long)prompt[i], (long long)i, (long long)vocab);
    if (stop >= vocab)
        return exactc_fail(err, errlen, "--stop %lld is outside [0, %lld) (the vocabulary)", (long long)stop,
                           (long long)vocab);
    if (len + count > p->max_length + 1)
        return exactc_fail(err, errlen, "the prompt's %lld tokens and %lld new ones make %lld positions; the program "
                           "takes at most tokens=%lld", (long long)len, (long long)count,
                           (long long)(len + count), (long long)(p->max_length + 1));
    return 0;
}

int exactc_generate_tokens(exactc_decoder *d, const int32_t *prompt, int64_t len, const exactc_key *key,
                           const exactc_sampling *sampling, int64_t count, int64_t stop, exactc_generated *g,
                           char *err, size_t errlen) {
    const exactc_program *p = d->program;
    int64_t vocab = 0;
    g->count = 0;
    if (exactc_decode_vocab(p, &vocab, err, errlen) != 0 ||
        check_request(p, vocab, prompt, len, count, stop, err, errlen) != 0)
        return -1;
    double *wide = malloc((size_t)vocab * sizeof *wide);
    void *scratch = malloc(exactc_sample_scratch_bytes(vocab));
    int rc = wide == NULL || scratch == NULL ? exactc_fail(err, errlen, "out of memory") : 0;
    struct timespec t0;
    timespec_get(&t0, TIME_UTC);
#ifdef EXACTC_PROBE
    CALLGRIND_TOGGLE_COLLECT;
#endif
    d->T = 0;
    for (int64_t t = 0; rc == 0 && t < len; t++) step(d, prompt[t]);
    g->prompt_seconds = seconds_since(&t0);
    int64_t n = 0;
    while (rc == 0 && n < count) {
        exactc_key child;
        exactc_key_fold_in(key, (uint64_t)n, &child);
        double u = exactc_uniform(exactc_key_draw(&child, 0, 0, 0));
        exactc_sample_result drawn;
        widen(p->site, d->out[0], vocab, wide);
        char why[256];
        if (exactc_sample(wide, vocab, sampling, u, scratch, &drawn, why, sizeof why) != EXACTC_SAMPLE_OK) {
            rc = exactc_fail(err, errlen, "step %lld: %s", (long long)n, why);
            break;
        }
        g->tokens[n] = (int32_t)drawn.token;
        g->probabilities[n] = drawn.probability;
        g->uniforms[n] = u;
        n++;
        int stopped = g->on_token != NULL && g->on_token(g->user, n - 1, (int32_t)drawn.token, drawn.probability);
        if (stopped || drawn.token == stop || n == count) break;
        step(d, (int32_t)drawn.token);
    }
#ifdef EXACTC_PROBE
    CALLGRIND_TOGGLE_COLLECT;
#endif
    g->count = n;
    g->seconds = seconds_since(&t0);
    free(scratch);
    free(wide);
    return rc;
}

/* ------------------------------------------------------------------------------------
 * The command: the request's files in, the loop, the outputs written all or none.
 * ---------------------------------------------------------------------------------- */

static int write_outputs(const char *dir, const int32_t *tokens, const double *probabilities,
                         const double *uniforms, int64_t n, char *err, size_t errlen) {
    const exactc_tensor_spec specs[3] = {
        {"tokens", EXACTC_KIND_I32, 1, {n}, {0}},
        {"probabilities", EXACTC_KIND_F64, 1, {n}, {0}},
        {"uniforms", EXACTC_KIND_F64, 1, {n}, {0}},
    };
    const void *data[3] = {tokens, probabilities, uniforms};
    char staged[3][EXACTC_STAGED];
    int done = 0, rc = 0;
    for (; rc == 0 && done < 3; done++)
        if (exactc_output_stage(dir, &specs[done], data[done], 0, staged[done], err, errlen) != 0) rc = -1;
    if (rc != 0) done--; /* the failed stage left no file */
    for (int k = 0; k < done; k++) {
        if (rc == 0) rc = exactc_output_commit(staged[k], err, errlen);
        else remove(staged[k]);
    }
    return rc;
}

/* Each token on stdout as it is drawn, its id on a line of its own. */
static int print_token(void *user, int64_t index, int32_t token, double probability) {
    (void)user;
    (void)index;
    (void)probability;
    printf("%lld\n", (long long)token);
    fflush(stdout);
    return 0;
}

static int generate(const exactc_program *p, const request *r, char *err, size_t errlen) {
    int64_t vocab = 0, len = 0;
    int32_t *prompt = NULL;
    exactc_key key;
    if (exactc_decode_vocab(p, &vocab, err, errlen) != 0 || read_prompt(r->in_dir, vocab, &prompt, &len, err,
                                                                                  errlen) != 0)
        return -1;
    if (read_key(r->in_dir, &key, err, errlen) != 0 ||
        check_request(p, vocab, prompt, len, r->count, r->stop, err, errlen) != 0) {
        free(prompt);
        return -1;
    }
    void *block = NULL, *weights = NULL;
    if (exactc_program_weights(p, r->weights, &block, &weights) != 0) {
        free(prompt);
        return -2; /* reported on stderr */
    }
    exactc_arena_check check = {0};
    void **in = exactc_buffers_alloc(p->inputs, p->input_count, p->max_length);
    exactc_decoder d = {p, weights, in, in != NULL ? exactc_outputs_alloc(p, in) : NULL,
                        exactc_aligned_block(p->arena_bytes), &check, 0};
    exactc_generated g = {0};
    g.tokens = malloc((size_t)r->count * sizeof *g.tokens);
    g.probabilities = malloc((size_t)r->count * sizeof *g.probabilities);
    g.uniforms = malloc((size_t)r->count * sizeof *g.uniforms);
    g.on_token = print_token;
    int rc = 0;
    if (d.in == NULL || d.out == NULL || d.arena == NULL || !g.tokens || !g.probabilities || !g.uniforms)
        rc = exactc_fail(err, errlen, "out of memory");
    if (rc == 0) rc = exactc_generate_tokens(&d, prompt, len, &key, &r->sampling, r->count, r->stop, &g, err, errlen);
    int64_t n = g.count;
    if (rc == 0) rc = write_outputs(r->out_dir, g.tokens, g.probabilities, g.uniforms, n, err, errlen);
    if (rc == 0)
        fprintf(stderr, "exactc: generate: %lld prompt tokens in %.6f s, %lld new in %.6f s (%.2f tokens/s)\n",
                (long long)len, g.prompt_seconds, (long long)n, g.seconds - g.prompt_seconds,
                n > 1 ? (double)(n - 1) / (g.seconds - g.prompt_seconds) : 0.0);
#ifdef EXACTC_CHECKING
    fprintf(stderr, "exactc: arena peak reached %zu bytes of %zu computed\n", check.reached, p->arena_bytes);
#endif
    free(g.uniforms);
    free(g.probabilities);
    free(g.tokens);
    free(d.arena);
    exactc_outputs_free(p, d.out);
    exactc_buffers_free(d.in, p->input_count);
    free(weights);
    free(block);
    free(prompt);
    return rc;
}

int exactc_decode_main(int argc, char **argv, const exactc_program *program) {
    if (argc < 2 || strcmp(argv[1], "generate") != 0) return exactc_main(argc, argv, program);
    request r;
    char err[4096];
    if (parse_request(argc - 1, argv + 1, &r, err, sizeof err) != 0) {
        fprintf(stderr, "exactc: generate: %s\nusage: %s generate WEIGHTS.safetensors INPUT_DIR OUTPUT_DIR [-n N] "
                "[--temperature T] [--top-k K] [--top-p P] [--stop ID]\n", err, argv[0]);
        return 2;
    }
    int rc = generate(program, &r, err, sizeof err);
    if (rc == -1) fprintf(stderr, "exactc: generate: %s\n", err);
    return rc == 0 ? 0 : 1;
}
