/* exactc runtime: section 16's generation loop on a decode program (exactc_generate.c),
 * shared by the program's `generate` command and the library's exactc_model_generate
 * (exactc_api.c): the same loop, the same tokens.
 */
#ifndef EXACTC_GENERATE_H
#define EXACTC_GENERATE_H

#include "exactc_keys.h"
#include "exactc_rt.h"
#include "exactc_sample.h"

/* A decode program at work: its weights, its buffers (the cache among them: past_k and
 * past_v, each written in place), its arena and its checks, the positions in the cache. */
typedef struct {
    const exactc_program *program;
    const void *weights;
    void **in, **out;
    unsigned char *arena;
    exactc_arena_check *check;
    int64_t T;
} exactc_decoder;

/* Called with each token as it is drawn (index from 0); non-zero stops the loop there. */
typedef int (*exactc_token_sink)(void *user, int64_t index, int32_t token, double probability);

/* Where the loop puts what it draws: the caller's arrays of `count` elements each, the
 * sink (or NULL); the loop fills in the tokens drawn and the time it took. */
typedef struct {
    int32_t *tokens;
    double *probabilities, *uniforms;
    exactc_token_sink on_token;
    void *user;
    int64_t count;                  /* the tokens drawn: count at most, fewer at a stop */
    double prompt_seconds, seconds; /* the prompt's steps, the whole loop */
} exactc_generated;

/* The vocabulary of a decode program, or -1 with `err` for any other. */
int exactc_decode_vocab(const exactc_program *p, int64_t *vocab, char *err, size_t errlen);

/* The loop: the prompt (ids in [0, vocab)) through the network one position at a time
 * from position 0, then up to `count` new tokens, each drawn by the sampler with
 * u = uniform(draw(fold_in(key, i), 0, 0, 0)), until `stop` (-1: none) is drawn or the
 * sink says stop. 0, or -1 with `err` (a refusal before any work, or a sampler's). */
int exactc_generate_tokens(exactc_decoder *d, const int32_t *prompt, int64_t len, const exactc_key *key,
                           const exactc_sampling *sampling, int64_t count, int64_t stop, exactc_generated *g,
                           char *err, size_t errlen);

#endif /* EXACTC_GENERATE_H */
