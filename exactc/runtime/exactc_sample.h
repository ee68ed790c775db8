/* exactc runtime: drawing one token from logits (exactc_sample.c).
 *
 * docs/semantics.md section 14 is the definition; the numpy reference
 * (exporter/reference/sampling.py) is the other implementation of that text, and the two
 * give the same token and the same f64 probability, or the same refusal.
 */
#ifndef EXACTC_SAMPLE_H
#define EXACTC_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    double temperature; /* >= 0 and finite; 0 is greedy */
    int64_t top_k;      /* >= 0; 0 (or >= the vocabulary) is no top-k */
    double top_p;       /* in [0, 1]; 1 is no top-p */
} exactc_sampling;

typedef struct {
    int64_t token;
    double probability; /* the chance the draw had of picking `token`; 1 when greedy */
} exactc_sample_result;

/* What a call returns: OK, or the first rule of the spec's table that it breaks. */
typedef enum {
    EXACTC_SAMPLE_OK = 0,
    EXACTC_SAMPLE_BAD_SIZE = 1,
    EXACTC_SAMPLE_BAD_TEMPERATURE = 2,
    EXACTC_SAMPLE_BAD_TOP_K = 3,
    EXACTC_SAMPLE_BAD_TOP_P = 4,
    EXACTC_SAMPLE_BAD_U = 5,
    EXACTC_SAMPLE_NAN_LOGIT = 6,
    EXACTC_SAMPLE_ALL_NEG_INF = 7
} exactc_sample_status;

/* The bytes of working memory exactc_sample needs for n logits. */
size_t exactc_sample_scratch_bytes(int64_t n);

/* Draw a token from logits[0..n) (f64; f32 and bf16 logits widen exactly) with the
 * uniform u in [0, 1). `scratch` holds exactc_sample_scratch_bytes(n) bytes, aligned
 * for a double. Returns EXACTC_SAMPLE_OK and fills *out, or a status with a message in
 * `err` (NULL or errlen 0 allowed) that names the rule. */
int exactc_sample(const double *logits, int64_t n, const exactc_sampling *options, double u,
                  void *scratch, exactc_sample_result *out, char *err, size_t errlen);

#endif /* EXACTC_SAMPLE_H */
