/* libFuzzer target: the model loader and validator (COMMIT's er_model_load) over arbitrary bytes,
 * then, for every model it accepts, one inference on inputs derived from the data. Built with
 * ASan/UBSan (make -C firmware fuzz): any read or write outside the model, the arena or a
 * table, any signed overflow or bad shift, is a crash. ER_MAX_WORK is lowered for this build so
 * accepted models run in milliseconds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

static er_model model;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > ER_SLOT_BYTES) return 0; /* COMMIT never sees more than a slot */
    /* an exact-size heap copy: ASan flags the first byte read past the end */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    char err[200];
    int rc = er_model_load(&model, copy, (uint32_t)size, err, sizeof err);
    if (rc == ER_OK) {
        if (!model.loaded || model.arena_bytes > ER_ARENA_BYTES) abort();
        for (uint32_t i = 0; i < model.n_inputs; i++) {
            er_tensor *t = &model.tensors[model.inputs[i]];
            uint8_t *p = er_model_tensor_data(&model, model.inputs[i]);
            for (uint32_t k = 0; k < t->bytes; k++) p[k] = (uint8_t)(k * 131u + i * 7u + (size ? data[k % size] : 0));
        }
        if (er_model_invoke(&model, err, sizeof err) != ER_OK && model.loaded) {
            /* only MEAN's scratch refusal may fail an accepted model; it still must not crash */
        }
    } else if (model.loaded || !err[0]) {
        abort(); /* a refused model must never be marked loaded, and must say why */
    }
    free(copy);
    return 0;
}
