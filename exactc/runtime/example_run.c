/* examples/run.c: the program's command line through the library (model.h), linked with
 * libmodel.a (`make example`):
 *
 *     examples/run weights.safetensors INPUT_DIR OUTPUT_DIR [INPUT_DIR OUTPUT_DIR ...]
 *
 * opens one handle, then per pair reads INPUT_DIR/<input>.npy into memory, runs the entry
 * on the arrays and writes OUTPUT_DIR/<output>.npy: the same files as ./model writes,
 * byte for byte (conformance/check.sh compares them). The .npy files are read and
 * written with the runtime's reader and writer (exactc_rt.h); everything else is the API.
 */
#include <stdio.h>
#include <stdlib.h>

#include "exactc_rt.h"
#include "model.h"

/* One run: every input read, every output written; 0, or 1 with a message on stderr. */
static int run_pair(exactc_model *m, const char *in_dir, const char *out_dir) {
    size_t ni = exactc_model_input_count(m), no = exactc_model_output_count(m);
    /* as many arrays as the entry has (a loss_grad entry gives one gradient per parameter) */
    exactc_array *files = calloc(ni + 1, sizeof *files);
    exactc_model_array *in = calloc(ni + 1, sizeof *in), *out = calloc(no + 1, sizeof *out);
    char path[4096], err[512];
    int rc = 0;
    size_t read = 0;
    if (files == NULL || in == NULL || out == NULL) {
        free(files), free(in), free(out);
        return fprintf(stderr, "run: out of memory\n"), 1;
    }
    for (; rc == 0 && read < ni; read++) {
        exactc_model_spec spec;
        exactc_model_input(m, read, &spec);
        snprintf(path, sizeof path, "%s/%s.npy", in_dir, spec.name);
        if (exactc_npy_read(path, &files[read], err, sizeof err) != 0) {
            fprintf(stderr, "run: %s\n", err);
            rc = 1;
            break;
        }
        exactc_array *f = &files[read];
        in[read] = (exactc_model_array){.dtype = (int)f->dtype, .ndim = f->ndim, .data = f->data, .nbytes = f->nbytes};
        for (int d = 0; d < f->ndim; d++) in[read].shape[d] = f->shape[d];
    }
    for (size_t i = 0; i < no; i++) { /* each output's room at T_max */
        exactc_model_spec spec;
        exactc_model_output(m, i, &spec);
        size_t count = 1;
        for (int d = 0; d < spec.ndim; d++)
            count *= (size_t)(spec.shape[d] + spec.per_length[d] * exactc_model_max_length(m));
        out[i] = (exactc_model_array){.nbytes = count * 8};
        out[i].data = malloc(out[i].nbytes ? out[i].nbytes : 1);
        if (out[i].data == NULL) rc = 1;
    }
    if (rc == 0 && exactc_model_run(m, in, ni, out, no) != EXACTC_MODEL_OK) {
        fprintf(stderr, "run: %s: %s\n", in_dir, exactc_model_message(m));
        rc = 1;
    }
    for (size_t i = 0; i < no; i++) {
        exactc_model_spec spec;
        exactc_model_output(m, i, &spec);
        exactc_array a = {.dtype = (exactc_dtype)out[i].dtype, .ndim = out[i].ndim, .data = out[i].data,
                          .nbytes = out[i].nbytes};
        for (int d = 0; d < a.ndim; d++) a.shape[d] = out[i].shape[d];
        snprintf(path, sizeof path, "%s/%s.npy", out_dir, spec.name);
        if (rc == 0 && exactc_npy_write(path, &a, err, sizeof err) != 0) {
            fprintf(stderr, "run: %s\n", err);
            rc = 1;
        }
        free(out[i].data);
    }
    for (size_t i = 0; i < read; i++) exactc_array_free(&files[i]);
    free(files), free(in), free(out);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 4 || argc % 2 != 0) {
        fprintf(stderr, "usage: %s WEIGHTS.safetensors INPUT_DIR OUTPUT_DIR [INPUT_DIR OUTPUT_DIR ...]\n", argv[0]);
        return 2;
    }
    exactc_model *m;
    char err[4096];
    if (exactc_model_open(argv[1], &m, err, sizeof err) != EXACTC_MODEL_OK) {
        fprintf(stderr, "run: %s\n", err);
        return 1;
    }
    int rc = 0;
    for (int pair = 2; rc == 0 && pair + 1 < argc; pair += 2) rc = run_pair(m, argv[pair], argv[pair + 1]);
    exactc_model_close(m);
    return rc;
}
