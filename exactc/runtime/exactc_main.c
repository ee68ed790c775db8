/* exactc runtime: the exported program's main. model.c describes the program
 * (exactc_model_program); a decode entry's program also runs the whole generation loop
 * (`./model generate ...`, exactc_generate.c), a loss_grad entry's its training loop
 * (`./model train ...`, exactc_train.c), any other reads its inputs and writes its
 * outputs (exactc_host.c). The library (`make lib`) is every object but this one.
 */
#include <string.h>

#include "exactc_rt.h"

int main(int argc, char **argv) {
    const exactc_program *program = exactc_model_program();
    if (strcmp(program->entry, "decode") == 0) return exactc_decode_main(argc, argv, program);
    if (strcmp(program->entry, "loss_grad") == 0) return exactc_train_main(argc, argv, program);
    return exactc_main(argc, argv, program);
}
