/* exactc_train.c: a loss_grad program's training loop, `./model train` (docs/semantics.md
 * section 17, "The training loop"): the same steps, bits and checkpoint bytes as
 * exactc/train.py's reference.
 *
 *   ./model train WEIGHTS DATA OUT --steps N --batch B --seq T --record JSON [--lr R]
 *       [--warmup W] [--every K] [--weight-decay L] [--clip C] [--resume CKPT]
 *
 * Each step reads its batch from DATA (llm.c's token file, its sequential loader), runs
 * the network (the loss and every gradient), then AdamW at the step's rate with its host
 * scalars in f64 as reference/training.py computes them. It prints `step S loss L
 * seconds X` per step (L with 17 digits: it reads back exactly) and `checkpoint PATH` for
 * each checkpoint written: every K steps and after the last, through a temporary name.
 * The checkpoint's record (__metadata__ "exactc.train") is the JSON text --record gives,
 * its "@step" and "@position" replaced by the numbers: the record holds the model's
 * config and settings as Python prints them (floats by repr) and the data's sha256, which
 * `exactc train` computes; the program fills in where the run stands. With --resume CKPT
 * the parameters, both moments, the losses, the step and the data position come from
 * CKPT (WEIGHTS is not read).
 */
#include "exactc_rt.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DATA_MAGIC 20240520 /* llm.c's token files: a header of 256 int32 */
#define DATA_VERSION 1
#define DATA_HEADER_INTS 256
#define PI 0x1.921fb54442d18p+1 /* the nearest f64 to pi, as the reference's */
#define BETA1 0.9
#define BETA2 0.999
#define EPS 1e-8
#define MOMENT_M "adamw.m."
#define MOMENT_V "adamw.v."
#define LOSSES "train.loss"
#define BLOCKS 3 /* a checkpoint's blocks of tensors: the weights, then both moments */

typedef struct {
    const char *weights, *data, *out, *record, *resume;
    long long steps, batch, seq, warmup, every;
    double lr, weight_decay, clip;
} options;

/* Where the run stands: the natural-layout parameters and moments (the program's blocks),
 * the loss of every step so far, the step done and the next batch's first token. */
typedef struct {
    unsigned char *params, *m, *v;
    double *losses;
    long long step, position;
} state;

/* ---- the options -------------------------------------------------------------------- */

static int parse_count(const char *option, const char *text, long long least, long long *out, char *err,
                       size_t errlen) {
    char *end;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (*text == '\0' || *end != '\0' || errno != 0 || value < least)
        return exactc_fail(err, errlen, "%s %s: an integer of at least %lld", option, text, least);
    *out = value;
    return 0;
}

static int parse_real(const char *option, const char *text, double *out, char *err, size_t errlen) {
    char *end;
    errno = 0;
    double value = strtod(text, &end);
    if (*text == '\0' || *end != '\0' || errno != 0 || !(value >= 0))
        return exactc_fail(err, errlen, "%s %s: a number, 0 or more", option, text);
    *out = value;
    return 0;
}

static int parse_options(int argc, char **argv, options *o, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    o->lr = 1e-3;
    int positional = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] == '\0') {
            const char **slot[] = {&o->weights, &o->data, &o->out};
            if (positional == 3) return exactc_fail(err, errlen, "one WEIGHTS, DATA and OUT only: %s", a);
            *slot[positional++] = a;
            continue;
        }
        if (i + 1 >= argc) return exactc_fail(err, errlen, "%s needs a value", a);
        const char *value = argv[++i];
        int rc = 0;
        if (strcmp(a, "--steps") == 0) rc = parse_count(a, value, 1, &o->steps, err, errlen);
        else if (strcmp(a, "--batch") == 0) rc = parse_count(a, value, 1, &o->batch, err, errlen);
        else if (strcmp(a, "--seq") == 0) rc = parse_count(a, value, 1, &o->seq, err, errlen);
        else if (strcmp(a, "--warmup") == 0) rc = parse_count(a, value, 0, &o->warmup, err, errlen);
        else if (strcmp(a, "--every") == 0) rc = parse_count(a, value, 0, &o->every, err, errlen);
        else if (strcmp(a, "--lr") == 0) rc = parse_real(a, value, &o->lr, err, errlen);
        else if (strcmp(a, "--weight-decay") == 0) rc = parse_real(a, value, &o->weight_decay, err, errlen);
        else if (strcmp(a, "--clip") == 0) rc = parse_real(a, value, &o->clip, err, errlen);
        else if (strcmp(a, "--record") == 0) o->record = value;
        else if (strcmp(a, "--resume") == 0) o->resume = value;
        else return exactc_fail(err, errlen, "unknown option %s", a);
        if (rc != 0) return rc;
    }
    if (positional < 3) return exactc_fail(err, errlen, "give WEIGHTS, DATA and OUT");
    if (o->steps == 0 || o->batch == 0 || o->seq == 0) return exactc_fail(err, errlen, "give --steps, --batch and --seq");
    if (o->record == NULL) return exactc_fail(err, errlen, "give --record (the run's JSON record)");
    if (!(o->lr > 0)) return exactc_fail(err, errlen, "--lr %g must be positive", o->lr);
    return 0;
}

/* ---- the token stream (llm.c's format; exactc/train.py read_tokens and next_batch) ------ */

static int read_stream(const char *path, uint16_t **tokens, long long *count, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return exactc_fail(err, errlen, "%s: cannot read it (%s)", path, strerror(errno));
    int32_t header[DATA_HEADER_INTS];
    size_t got = fread(header, 1, sizeof header, f);
    if (got < sizeof header) {
        fclose(f);
        return exactc_fail(err, errlen, "%s: %zu bytes, shorter than llm.c's header of %d int32", path, got,
                           DATA_HEADER_INTS);
    }
    if (header[0] != DATA_MAGIC || header[1] != DATA_VERSION || header[2] < 0) {
        fclose(f);
        return exactc_fail(err, errlen, "%s: magic %d version %d, not llm.c's token file (magic %d, version %d)",
                           path, header[0], header[1], DATA_MAGIC, DATA_VERSION);
    }
    *count = header[2];
    *tokens = malloc((size_t)*count * 2 + 1);
    if (*tokens == NULL) {
        fclose(f);
        return exactc_fail(err, errlen, "out of memory for %lld tokens", *count);
    }
    unsigned char *bytes = (unsigned char *)*tokens;
    size_t want = (size_t)*count * 2;
    got = fread(bytes, 1, want + 1, f);
    fclose(f);
    if (got != want) {
        free(*tokens);
        return exactc_fail(err, errlen, "%s: the header's %lld tokens make %zu bytes after it, not the file's", path,
                           *count, want);
    }
    for (long long k = 0; k < *count; k++) (*tokens)[k] = (uint16_t)(bytes[2 * k] | bytes[2 * k + 1] << 8);
    return 0;
}

/* The batch at `position` into tokens and targets (B·T int32 each); the next position. */
static long long next_batch(const uint16_t *stream, long long count, long long position, long long size,
                            int32_t *tokens, int32_t *targets) {
    for (long long k = 0; k < size; k++) {
        tokens[k] = stream[position + k];
        targets[k] = stream[position + k + 1];
    }
    long long following = position + size;
    return following + size + 1 > count ? 0 : following;
}

/* ---- AdamW and the learning rate (reference/training.py) ---------------------------- */

/* base^t as the spec takes it: a product of t factors in order. */
static double power(double base, long long t) {
    double p = 1.0;
    for (long long k = 0; k < t; k++) p = p * base;
    return p;
}

/* llm.c's schedule at step `step` (0-based): linear warmup, then a cosine to 0, in f64;
 * the cosine is exactc's own (exactc_libm.c), the function the reference's libm64 twins. */
static double learning_rate(long long step, long long steps, double peak, long long warmup) {
    if (step < warmup) return (peak * (double)(step + 1)) / (double)warmup;
    double ratio = (double)(step - warmup) / (double)(steps - warmup);
    double q = 0.5 * (1.0 + exactc_cos(PI * ratio));
    double low = peak * 0.0;
    return low + q * (peak - low);
}

/* AdamW's host scalars, in the order of the adamw primitive's h (ADAMW_SCALARS). */
enum { H_CLIP, H_DECAY, H_W1, H_BETA2, H_W2, H_ROOT, H_EPS, H_STEP, H_COUNT };

static void host_scalars(const options *o, long long t, double rate, double norm, double *h) {
    double bc1 = 1.0 - power(BETA1, t), bc2 = 1.0 - power(BETA2, t);
    h[H_CLIP] = o->clip > 0 && norm > o->clip ? o->clip / norm : 1.0; /* g ⊗ 1 = g: no clipping */
    h[H_DECAY] = 1.0 - rate * o->weight_decay;
    h[H_W1] = 1.0 - BETA1;
    h[H_BETA2] = BETA2;
    h[H_W2] = 1.0 - BETA2;
    h[H_ROOT] = sqrt(bc2);
    h[H_EPS] = EPS;
    h[H_STEP] = rate / bc1;
}

/* The adamw primitive's element lines (docs/semantics.md section 17) at the site type,
 * each scalar R_A of its f64 value. */
#define ADAMW_ELEMENTS(T, SQRT)                                                                          \
    static void adamw_##T(T *p, const T *g, T *m, T *v, size_t n, int decays, const double *h) {        \
        const T clip = (T)h[H_CLIP], decay = (T)h[H_DECAY], w1 = (T)h[H_W1], beta2 = (T)h[H_BETA2];     \
        const T w2 = (T)h[H_W2], root = (T)h[H_ROOT], eps = (T)h[H_EPS], step = (T)h[H_STEP];           \
        for (size_t i = 0; i < n; i++) {                                                                \
            T gc = g[i] * clip;                                                                         \
            T pd = decays ? p[i] * decay : p[i];                                                        \
            T mt = m[i] + (w1 * (gc - m[i]));                                                           \
            T vt = (v[i] * beta2) + (w2 * (gc * gc));                                                   \
            m[i] = mt;                                                                                  \
            v[i] = vt;                                                                                  \
            p[i] = pd - (step * (mt / ((SQRT(vt) / root) + eps)));                                      \
        }                                                                                               \
    }
ADAMW_ELEMENTS(float, sqrtf)
ADAMW_ELEMENTS(double, sqrt)

static size_t param_elements(const exactc_param_spec *p) {
    size_t n = p->layers > 0 ? (size_t)p->layers : 1;
    for (int d = 0; d < p->ndim; d++) n *= (size_t)p->shape[d];
    return n;
}

static double element(const exactc_program *program, const void *a, size_t i) {
    return program->site == EXACTC_KIND_F32 ? (double)((const float *)a)[i] : ((const double *)a)[i];
}

/* √(Σ g ⊗ g) in f64: the parameters in the program's order, each in C order. */
static double global_norm(const exactc_program *program, void *const *grads) {
    double ss = 0.0;
    for (size_t k = 0; k < program->param_count; k++) {
        size_t n = param_elements(&program->params[k]);
        for (size_t i = 0; i < n; i++) {
            double g = element(program, grads[k], i);
            ss = ss + g * g;
        }
    }
    return sqrt(ss);
}

/* One AdamW update of every parameter: the 2-D weights decay (exporter/training.py decays). */
static void adamw_step(const exactc_program *program, state *s, void *const *grads, const double *h) {
    for (size_t k = 0; k < program->param_count; k++) {
        const exactc_param_spec *p = &program->params[k];
        size_t n = param_elements(p), at = p->offset;
        int decays = p->ndim == 2;
        if (program->site == EXACTC_KIND_F32)
            adamw_float((float *)(s->params + at), grads[k], (float *)(s->m + at), (float *)(s->v + at), n, decays, h);
        else
            adamw_double((double *)(s->params + at), grads[k], (double *)(s->m + at), (double *)(s->v + at), n,
                         decays, h);
    }
}

/* ---- checkpoints (exactc/train.py checkpoint_bytes: the same bytes) -------------------- */

typedef struct {
    char name[512];
    const char *dtype;
    int ndim;
    int64_t shape[EXACTC_ST_MAX_DIMS];
    const void *data;
    size_t bytes;
} entry;

typedef struct {
    char *text;
    size_t len, cap;
    int failed;
} buffer;

static void put(buffer *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *more = realloc(b->text, cap);
        if (more == NULL) {
            b->failed = 1;
            return;
        }
        b->text = more;
        b->cap = cap;
    }
    memcpy(b->text + b->len, s, n);
    b->len += n;
    b->text[b->len] = '\0';
}

static void puts_(buffer *b, const char *s) {
    put(b, s, strlen(s));
}

static void putf(buffer *b, const char *fmt, long long value) {
    char text[32];
    snprintf(text, sizeof text, fmt, value);
    puts_(b, text);
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const entry *)a)->name, ((const entry *)b)->name);
}

/* Every tensor of the checkpoint: the weights, both moments (one tensor per layer), the losses. */
static entry *checkpoint_entries(const exactc_program *program, const state *s, size_t *count) {
    size_t n = 1;
    for (size_t k = 0; k < program->param_count; k++)
        n += BLOCKS * (size_t)(program->params[k].layers > 0 ? program->params[k].layers : 1);
    entry *e = calloc(n, sizeof *e);
    if (e == NULL) return NULL;
    const char *prefixes[] = {"", MOMENT_M, MOMENT_V};
    const unsigned char *blocks[] = {s->params, s->m, s->v};
    const char *dtype = program->site == EXACTC_KIND_F32 ? "F32" : "F64";
    size_t size = exactc_kind_size(program->site), at = 0;
    for (int b = 0; b < BLOCKS; b++) {
        for (size_t k = 0; k < program->param_count; k++) {
            const exactc_param_spec *p = &program->params[k];
            size_t chunk = param_elements(p) / (size_t)(p->layers > 0 ? p->layers : 1) * size;
            for (int l = 0; l < (p->layers > 0 ? p->layers : 1); l++, at++) {
                char name[480];
                snprintf(name, sizeof name, p->name, l);
                snprintf(e[at].name, sizeof e[at].name, "%s%s", prefixes[b], name);
                e[at].dtype = dtype;
                e[at].ndim = p->ndim;
                memcpy(e[at].shape, p->shape, sizeof p->shape);
                e[at].data = blocks[b] + p->offset + (size_t)l * chunk;
                e[at].bytes = chunk;
            }
        }
    }
    e[at] = (entry){.dtype = "F64", .ndim = 1, .shape = {s->step}, .data = s->losses,
                    .bytes = (size_t)s->step * sizeof(double)};
    snprintf(e[at].name, sizeof e[at].name, "%s", LOSSES);
    *count = n;
    qsort(e, n, sizeof *e, by_name);
    return e;
}

/* The record as a JSON string (json.dumps of the text): its "@step" and "@position"
 * replaced by the numbers; the text is ASCII (json.dumps wrote it), so only `"` and `\`
 * are escaped. */
static void record_string(buffer *b, const char *record, const state *s) {
    puts_(b, "\"");
    for (const char *c = record; *c;) {
        if (strncmp(c, "\"@step\"", 7) == 0) {
            putf(b, "%lld", s->step);
            c += 7;
        } else if (strncmp(c, "\"@position\"", 11) == 0) {
            putf(b, "%lld", s->position);
            c += 11;
        } else {
            if (*c == '"' || *c == '\\') puts_(b, "\\");
            put(b, c++, 1);
        }
    }
    puts_(b, "\"");
}

/* The header as json.dumps(header, separators=(",", ":"), sort_keys=True) writes it:
 * "__metadata__" sorts among the names (before lowercase ones). */
static void header_text(buffer *b, const entry *e, size_t n, const char *record, const state *s) {
    puts_(b, "{");
    int metadata_done = 0;
    uint64_t offset = 0;
    for (size_t k = 0; k <= n; k++) {
        if (!metadata_done && (k == n || strcmp("__metadata__", e[k].name) < 0)) {
            if (k > 0) puts_(b, ",");
            puts_(b, "\"__metadata__\":{\"exactc.train\":");
            record_string(b, record, s);
            puts_(b, ",\"format\":\"pt\"}");
            metadata_done = 1;
        }
        if (k == n) break;
        if (k > 0 || metadata_done) puts_(b, ",");
        puts_(b, "\"");
        puts_(b, e[k].name);
        putf(b, "\":{\"data_offsets\":[%lld,", (long long)offset);
        offset += e[k].bytes;
        putf(b, "%lld],\"dtype\":\"", (long long)offset);
        puts_(b, e[k].dtype);
        puts_(b, "\",\"shape\":[");
        for (int d = 0; d < e[k].ndim; d++) putf(b, d ? ",%lld" : "%lld", (long long)e[k].shape[d]);
        puts_(b, "]}");
    }
    puts_(b, "}");
    while (b->len % 8 != 0) puts_(b, " ");
}

static int write_all(FILE *f, const void *data, size_t n) {
    return n == 0 || fwrite(data, 1, n, f) == n ? 0 : -1;
}

/* OUT/checkpoint-<step>.safetensors, written to a temporary name and renamed into place. */
static int write_checkpoint(const exactc_program *program, const options *o, const state *s, char *path,
                            size_t pathlen, char *err, size_t errlen) {
    size_t n;
    entry *e = checkpoint_entries(program, s, &n);
    buffer b = {0};
    if (e != NULL) header_text(&b, e, n, o->record, s);
    if (e == NULL || b.failed) {
        free(e);
        free(b.text);
        return exactc_fail(err, errlen, "out of memory writing a checkpoint");
    }
    snprintf(path, pathlen, "%s/checkpoint-%06lld.safetensors", o->out, s->step);
    char temporary[4200];
    snprintf(temporary, sizeof temporary, "%s.partial", path);
    FILE *f = fopen(temporary, "wb");
    int rc = f == NULL ? -1 : 0;
    unsigned char length[8];
    for (int k = 0; k < 8; k++) length[k] = (unsigned char)((uint64_t)b.len >> (8 * k));
    if (rc == 0) rc = write_all(f, length, 8) | write_all(f, b.text, b.len);
    for (size_t k = 0; rc == 0 && k < n; k++) rc = write_all(f, e[k].data, e[k].bytes);
    if (f != NULL && fclose(f) != 0) rc = -1;
    if (rc == 0 && rename(temporary, path) != 0) rc = -1;
    if (rc != 0) {
        int why = errno;
        remove(temporary);
        exactc_fail(err, errlen, "%s: cannot write it (%s)", path, strerror(why));
    }
    free(e);
    free(b.text);
    return rc;
}

/* ---- the start: WEIGHTS, or --resume CKPT -------------------------------------------- */

/* The integer after `key` (an escaped JSON key of the record, `\"step\": `) in the header. */
static int record_number(const exactc_safetensors *st, const char *key, long long *out) {
    const char *header = (const char *)st->bytes + 8;
    size_t len = st->data_start - 8, klen = strlen(key);
    for (size_t k = 0; k + klen < len; k++) {
        if (memcmp(header + k, key, klen) == 0) {
            char *end;
            *out = strtoll(header + k + klen, &end, 10);
            return end == header + k + klen ? -1 : 0;
        }
    }
    return -1;
}

/* The program's parameter table with each name behind `prefix` (a moment's tensors). */
static exactc_param_spec *prefixed(const exactc_program *program, const char *prefix, char *names) {
    exactc_param_spec *specs = malloc(program->param_count * sizeof *specs);
    if (specs == NULL) return NULL;
    for (size_t k = 0; k < program->param_count; k++) {
        specs[k] = program->params[k];
        snprintf(names + 512 * k, 512, "%s%s", prefix, program->params[k].name);
        specs[k].name = names + 512 * k;
    }
    return specs;
}

static int read_moment(const exactc_program *program, const exactc_safetensors *st, const char *prefix,
                       unsigned char *block, char *err, size_t errlen) {
    char *names = malloc(program->param_count * 512 + 1);
    exactc_param_spec *specs = names != NULL ? prefixed(program, prefix, names) : NULL;
    int rc = specs == NULL ? exactc_fail(err, errlen, "out of memory")
                           : exactc_weights_read(st, specs, program->param_count, block, err, errlen);
    free(specs);
    free(names);
    return rc;
}

static int resume_from(const exactc_program *program, const char *path, long long steps, state *s, char *err,
                       size_t errlen) {
    exactc_safetensors st;
    if (exactc_st_open(path, &st, err, errlen) != 0) return -1;
    int rc = 0;
    if (record_number(&st, "\\\"step\\\": ", &s->step) != 0 || record_number(&st, "\\\"position\\\": ", &s->position) != 0)
        rc = exactc_fail(err, errlen, "%s: not a checkpoint of exactc train (no step and position in its record)", path);
    if (rc == 0 && (s->step < 0 || s->step > steps))
        rc = exactc_fail(err, errlen, "%s: step %lld, outside the run's %lld steps", path, s->step, steps);
    int64_t shape[1] = {s->step};
    if (rc == 0) rc = exactc_st_read(&st, LOSSES, "F64", 1, shape, s->losses, err, errlen);
    if (rc == 0) rc = exactc_weights_read(&st, program->params, program->param_count, s->params, err, errlen);
    if (rc == 0) rc = read_moment(program, &st, MOMENT_M, s->m, err, errlen);
    if (rc == 0) rc = read_moment(program, &st, MOMENT_V, s->v, err, errlen);
    exactc_st_close(&st);
    return rc;
}

static int start(const exactc_program *program, const options *o, state *s, char *err, size_t errlen) {
    size_t bytes = program->param_bytes;
    s->params = exactc_aligned_block(bytes);
    s->m = exactc_aligned_block(bytes);
    s->v = exactc_aligned_block(bytes);
    s->losses = calloc((size_t)o->steps + 1, sizeof(double));
    if (s->params == NULL || s->m == NULL || s->v == NULL || s->losses == NULL)
        return exactc_fail(err, errlen, "out of memory for %zu bytes of parameters", bytes);
    memset(s->m, 0, bytes); /* +0: the moments before step 1 */
    memset(s->v, 0, bytes);
    if (o->resume != NULL) return resume_from(program, o->resume, o->steps, s, err, errlen);
    exactc_safetensors st;
    if (exactc_st_open(o->weights, &st, err, errlen) != 0) return -1;
    int rc = exactc_weights_read(&st, program->params, program->param_count, s->params, err, errlen);
    exactc_st_close(&st);
    return rc;
}

/* ---- the loop ----------------------------------------------------------------------- */

typedef struct {
    const exactc_program *program;
    options o;
    state s;
    uint16_t *stream;
    long long count;
    unsigned char *weights, *arena; /* the block the network reads (laid out by map_weights) */
    void *mapped;                   /* this run's Weights: map_weights points it into `weights` */
#ifdef EXACTC_CHECKING
    exactc_arena_check check;
#endif
    void **in, **out;
} run;

static int check_shapes(const run *r, char *err, size_t errlen) {
    const exactc_program *p = r->program;
    if (p->site != EXACTC_KIND_F32 && p->site != EXACTC_KIND_F64)
        return exactc_fail(err, errlen, "training runs at f32 or f64; this program's site is another");
    if (p->input_count != 2 || p->output_count != p->param_count + 1)
        return exactc_fail(err, errlen, "this program is not a loss_grad entry (tokens, targets in; loss, gradients out)");
    if (r->o.batch != p->inputs[0].shape[0])
        return exactc_fail(err, errlen, "--batch %lld: this program takes batches of %lld sequences", r->o.batch,
                           (long long)p->inputs[0].shape[0]);
    if (r->o.seq > p->max_length)
        return exactc_fail(err, errlen, "--seq %lld: this program takes sequences of at most %lld tokens", r->o.seq,
                           (long long)p->max_length);
    long long need = r->o.batch * r->o.seq + 1;
    if (r->count < need)
        return exactc_fail(err, errlen, "%s holds %lld tokens; a step reads B·T + 1 = %lld", r->o.data, r->count, need);
    long long vocab = p->params[0].shape[0]; /* the token embedding, the first parameter */
    for (long long k = 0; k < r->count; k++)
        if (r->stream[k] >= vocab)
            return exactc_fail(err, errlen, "%s holds the token %d, outside the model's vocabulary [0, %lld)", r->o.data,
                               r->stream[k], vocab);
    if (r->s.position < 0 || r->s.position + need > r->count)
        return exactc_fail(err, errlen, "the data position %lld is outside %s", r->s.position, r->o.data);
    return 0;
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    timespec_get(&t1, TIME_UTC);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

/* Step s.step + 1: its batch, the network, AdamW at the step's rate. */
static int one_step(run *r, char *err, size_t errlen) {
    const exactc_program *p = r->program;
    state *s = &r->s;
    memcpy(r->weights, s->params, p->param_bytes);
    if (p->map_weights(r->weights, r->mapped) != 0)
        return exactc_fail(err, errlen, "out of memory laying out the weights");
    s->position = next_batch(r->stream, r->count, s->position, r->o.batch * r->o.seq, r->in[0], r->in[1]);
#ifdef EXACTC_CHECKING
    exactc_arena_open(&r->check, r->arena, p->arena_bytes);
#endif
    p->run(r->mapped, r->o.seq, r->in, r->out, r->arena);
    s->losses[s->step] = element(p, r->out[0], 0);
    double rate = learning_rate(s->step, r->o.steps, r->o.lr, r->o.warmup);
    double h[H_COUNT];
    host_scalars(&r->o, s->step + 1, rate, global_norm(p, r->out + 1), h);
    adamw_step(p, s, r->out + 1, h);
    s->step++;
    return 0;
}

static int train(run *r, char *err, size_t errlen) {
    while (r->s.step < r->o.steps) {
        struct timespec t0;
        timespec_get(&t0, TIME_UTC);
        if (one_step(r, err, errlen) != 0) return -1;
        printf("step %lld loss %.17g seconds %.9f\n", r->s.step, r->s.losses[r->s.step - 1], seconds_since(&t0));
        if (r->s.step == r->o.steps || (r->o.every && r->s.step % r->o.every == 0)) {
            char path[4096];
            if (write_checkpoint(r->program, &r->o, &r->s, path, sizeof path, err, errlen) != 0) return -1;
            printf("checkpoint %s\n", path);
        }
        fflush(stdout);
    }
    return 0;
}

static void release(run *r) {
    free(r->s.params);
    free(r->s.m);
    free(r->s.v);
    free(r->s.losses);
    free(r->stream);
    free(r->weights);
    free(r->mapped);
    free(r->arena);
    exactc_outputs_free(r->program, r->out);
    exactc_buffers_free(r->in, r->program->input_count);
}

static int train_main(int argc, char **argv, const exactc_program *program, const char *program_name) {
    char err[4096];
    run r;
    memset(&r, 0, sizeof r);
    r.program = program;
    int rc = parse_options(argc, argv, &r.o, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr,
                "exactc: train: %s\nusage: %s train WEIGHTS DATA OUT --steps N --batch B --seq T --record JSON "
                "[--lr R] [--warmup W] [--every K] [--weight-decay L] [--clip C] [--resume CKPT]\n",
                err, program_name);
        return 2;
    }
    rc = read_stream(r.o.data, &r.stream, &r.count, err, sizeof err);
    if (rc == 0) rc = start(program, &r.o, &r.s, err, sizeof err);
    if (rc == 0) rc = check_shapes(&r, err, sizeof err);
    if (rc == 0) {
        r.weights = exactc_aligned_block(program->param_bytes);
        r.mapped = calloc(1, program->weights_bytes ? program->weights_bytes : 1);
        r.arena = exactc_aligned_block(program->arena_bytes);
        r.in = exactc_buffers_alloc(program->inputs, program->input_count, program->max_length);
        r.out = r.in != NULL ? exactc_outputs_alloc(program, r.in) : NULL;
        if (r.weights == NULL || r.mapped == NULL || r.arena == NULL || r.out == NULL)
            rc = exactc_fail(err, sizeof err, "out of memory");
    }
    if (rc == 0) rc = train(&r, err, sizeof err);
    if (rc != 0) fprintf(stderr, "exactc: train: %s\n", err);
    release(&r);
    return rc == 0 ? 0 : 1;
}

int exactc_train_main(int argc, char **argv, const exactc_program *program) {
    if (argc < 2 || strcmp(argv[1], "train") != 0) return exactc_main(argc, argv, program);
    return train_main(argc - 1, argv + 1, program, argv[0]);
}
