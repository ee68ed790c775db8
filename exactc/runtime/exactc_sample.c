/* exactc_sample.c: drawing one token from the logits of one position.
 *
 * docs/semantics.md section 14 is the definition, step by step: widen, infinities,
 * maximum, greedy, weights, rank order, top-k, top-p, draw. The numpy reference
 * (exporter/reference/sampling.py) implements the same text; tests/test_sampling.py
 * holds the two to the same token, the same probability bits and the same refusals.
 *
 * What the bits rest on: every value is a double and every sum runs in the order the
 * spec states, one rounded addition per step; exp is exactc_exp; the rank order is a
 * strict total order (weight descending, then index ascending), so any correct sort
 * gives the same permutation: a merge sort here, a stable argsort in numpy.
 *
 * Where the time goes: the weights are one exp per logit; the sort (n log n) runs only
 * when top-k or top-p is on.
 */
#include "exactc_sample.h"

#include <float.h>
#include <string.h>

#include "exactc_rt.h"

/* ------------------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------------------- */
static double negative_infinity(void) {
    const uint64_t bits = UINT64_C(0xFFF0000000000000);
    double x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

/* Step 6's order: does index i come before index j? */
static inline int ranks_before(const double *e, int64_t i, int64_t j) {
    return e[i] > e[j] || (e[i] == e[j] && i < j);
}

/* order[0..n) = every index in rank order; tmp is n more indices of room. Bottom-up
 * merge sort: runs of width 1, 2, 4, ... merged from `order` into `tmp` and back. */
static void rank_sort(const double *e, int64_t n, int64_t *order, int64_t *tmp) {
    for (int64_t i = 0; i < n; i++) order[i] = i;
    int64_t *from = order, *to = tmp;
    for (int64_t width = 1; width < n; width *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * width) {
            int64_t mid = lo + width < n ? lo + width : n;
            int64_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) to[k++] = ranks_before(e, from[j], from[i]) ? from[j++] : from[i++];
            while (i < mid) to[k++] = from[i++];
            while (j < hi) to[k++] = from[j++];
        }
        int64_t *swap = from;
        from = to;
        to = swap;
    }
    if (from != order) memcpy(order, from, (size_t)n * sizeof *order);
}

/* ------------------------------------------------------------------------------------
 * The sampler
 * ---------------------------------------------------------------------------------- */
size_t exactc_sample_scratch_bytes(int64_t n) {
    if (n < 1) return 0;
    return (size_t)n * (sizeof(double) + 2 * sizeof(int64_t));
}

/* The spec's refusals, in the order of its table. */
static int check_call(int64_t n, const exactc_sampling *opt, double u, char *err, size_t errlen) {
    if (n < 1) {
        exactc_fail(err, errlen, "sampling: %lld logits; V must be at least 1", (long long)n);
        return EXACTC_SAMPLE_BAD_SIZE;
    }
    if (!(opt->temperature >= 0.0 && opt->temperature <= DBL_MAX)) {
        exactc_fail(err, errlen, "sampling: temperature %g must be finite and >= 0 (0 is greedy)",
                    opt->temperature);
        return EXACTC_SAMPLE_BAD_TEMPERATURE;
    }
    if (opt->top_k < 0) {
        exactc_fail(err, errlen, "sampling: top_k %lld must be >= 0 (0 is no top-k)", (long long)opt->top_k);
        return EXACTC_SAMPLE_BAD_TOP_K;
    }
    if (!(opt->top_p >= 0.0 && opt->top_p <= 1.0)) {
        exactc_fail(err, errlen, "sampling: top_p %g must be in [0, 1] (1 is no top-p)", opt->top_p);
        return EXACTC_SAMPLE_BAD_TOP_P;
    }
    if (!(u >= 0.0 && u < 1.0)) {
        exactc_fail(err, errlen, "sampling: u %g must be in [0, 1)", u);
        return EXACTC_SAMPLE_BAD_U;
    }
    return EXACTC_SAMPLE_OK;
}

int exactc_sample(const double *logits, int64_t n, const exactc_sampling *opt, double u,
                  void *scratch, exactc_sample_result *out, char *err, size_t errlen) {
    int status = check_call(n, opt, u, err, errlen);
    if (status != EXACTC_SAMPLE_OK) return status;
    double *e = (double *)scratch;    /* (n) the logits, then the weights */
    int64_t *order = (int64_t *)(e + n); /* (n) the rank order */
    int64_t *tmp = order + n;            /* (n) the sort's other half */

    /* Step 1 (the logits arrive widened) and the two refusals that read the values. */
    int any_pos_inf = 0, all_neg_inf = 1;
    for (int64_t i = 0; i < n; i++) {
        double v = logits[i];
        if (v != v) {
            exactc_fail(err, errlen, "sampling: logit %lld is NaN; nothing is drawn from NaN logits",
                        (long long)i);
            return EXACTC_SAMPLE_NAN_LOGIT;
        }
        if (v > DBL_MAX) any_pos_inf = 1;
        if (v >= -DBL_MAX) all_neg_inf = 0;
    }
    if (all_neg_inf) {
        exactc_fail(err, errlen, "sampling: every logit is -inf; there is no token to draw");
        return EXACTC_SAMPLE_ALL_NEG_INF;
    }

    /* Step 2: with a +inf logit, only the +inf tokens can be drawn, equally. */
    const double ninf = negative_infinity();
    for (int64_t i = 0; i < n; i++) {
        double v = logits[i];
        e[i] = !any_pos_inf ? v : (v > DBL_MAX ? 0.0 : ninf);
    }

    /* Step 3: the maximum and its first index. */
    double m = ninf;
    int64_t a = 0;
    for (int64_t i = 0; i < n; i++) {
        if (e[i] > m) {
            m = e[i];
            a = i;
        }
    }

    /* Step 4: greedy. */
    const double t = opt->temperature;
    if (t == 0.0) {
        out->token = a;
        out->probability = 1.0;
        return EXACTC_SAMPLE_OK;
    }

    /* Step 5: the weights. */
    for (int64_t i = 0; i < n; i++) e[i] = exactc_exp((e[i] - m) / t);

    /* Steps 6-8: top-k and top-p choose a prefix of the rank order; the weights of the
     * tokens after it become +0. That is the spec's "over the kept tokens" in step 9:
     * adding +0 to a running sum >= +0 leaves it as it was, and a token whose running
     * sum did not grow is never the first to exceed u * total. */
    const int64_t k = opt->top_k;
    const double p = opt->top_p;
    const int top_k_on = k >= 1 && k < n;
    const int top_p_on = p < 1.0;
    if (top_k_on || top_p_on) {
        rank_sort(e, n, order, tmp);
        int64_t candidates = top_k_on ? k : n;
        int64_t kept = candidates;
        if (top_p_on) {
            double s = 0.0;
            for (int64_t j = 0; j < candidates; j++) s = s + e[order[j]];
            double threshold = p * s;
            double q = 0.0 + e[order[0]]; /* q_0 */
            kept = 1;
            while (kept < candidates && q < threshold) {
                q = q + e[order[kept]];
                kept++;
            }
        }
        for (int64_t j = kept; j < n; j++) e[order[j]] = 0.0;
    }

    /* Step 9: the draw, over the kept tokens in index order. */
    double total = 0.0;
    for (int64_t i = 0; i < n; i++) total = total + e[i];
    const double threshold = u * total;
    int64_t token = n - 1; /* never used: the last running sum, total, exceeds u * total */
    double c = 0.0;
    for (int64_t i = 0; i < n; i++) {
        c = c + e[i];
        if (c > threshold) {
            token = i;
            break;
        }
    }
    out->token = token;
    out->probability = e[token] / total;
    return EXACTC_SAMPLE_OK;
}
