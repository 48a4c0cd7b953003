/* The int8 interpreter: reads a TFLite flatbuffer in place (weights stay in flash), checks every
 * op and shape at load time, plans one arena for the activations and runs the reference
 * kernels with TFLite's fixed-point rounding. */
#ifndef ER_MODEL_H
#define ER_MODEL_H
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "fb.h"

#define ER_MAX_OP_INPUTS 8
#define ER_MAX_OP_OUTPUTS 16 /* SPLIT / SPLIT_V / UNPACK */
#define ER_TYPE_RESOURCE 13  /* TensorType RESOURCE: a handle to a resource variable, no data */
#define ER_MAX_VARS 32       /* resource variables (streaming state) per model */

typedef struct {
    uint8_t type, ndim, is_const, used;
    int32_t dims[ER_MAX_DIMS];
    uint32_t count, bytes;
    const uint8_t *cdata;     /* constant data inside the model, or NULL */
    float scale;
    int32_t zp;
    fb_vec scales;            /* all scales (per channel when n > 1) */
    int32_t qdim;
    int32_t first, last;      /* op indices of first write / last read */
    uint32_t off;             /* arena offset */
    int16_t var;              /* RESOURCE tensors: the variable (index in er_model.vars), else -1 */
} er_tensor;

/* A resource variable: state kept across invokes (streaming models). Its storage is prepared
 * data at the top of the arena; CALL_ONCE copies the initial value in at the first invoke. */
typedef struct {
    const uint8_t *name;      /* shared_name, inside the model */
    uint32_t name_len, bytes;
    const uint8_t *init;      /* constant initial value (init subgraph), bytes long */
    uint8_t *data;
} er_var;

typedef struct {
    uint32_t op;              /* BuiltinOperator code */
    uint8_t n_in;
    int16_t in[ER_MAX_OP_INPUTS];
    int16_t out;              /* outs[0] */
    uint8_t n_out;
    int16_t outs[ER_MAX_OP_OUTPUTS];
    /* options */
    int32_t padding, stride_w, stride_h, dil_w, dil_h, filter_w, filter_h, depth_mult, act, axis;
    uint8_t keep_dims;
    float beta;
    /* prepared */
    int32_t mult, shift, mult1, shift1, mult2, shift2, left_shift;
    int32_t act_min, act_max, pad_w, pad_h;
    int32_t *pc_mult, *pc_shift; /* per-channel, from the pool */
    float *ftable;               /* SOFTMAX: exp table */
    double *feff;                /* FULLY_CONNECTED: per-unit requantization scale */
    int8_t *itable;              /* LOGISTIC: lookup table */
    int32_t mean_kind;
    int32_t alpha_i;          /* misc integer option (block size, mode, masks, output type) */
    int32_t mask[5];          /* STRIDED_SLICE: begin, end, ellipsis, new_axis, shrink masks */
    uint8_t flag1, flag2;     /* RESIZE_*: align_corners, half_pixel_centers */
    void *view;               /* data-movement ops: an er_view from the pool */
} er_node;

typedef struct {
    fb_buf fb;
    uint32_t n_tensors, n_ops, n_inputs, n_outputs;
    er_tensor *tensors;       /* n_tensors records at the top of er_arena */
    er_node *nodes;           /* n_ops records, below them */
    int16_t inputs[ER_MAX_IO], outputs[ER_MAX_IO];
    uint32_t arena_bytes;     /* RAM the model uses: activations + prepared data + tables */
    uint32_t meta_bytes;      /* tables and prepared data at the top of the arena */
    er_var vars[ER_MAX_VARS];
    uint32_t n_vars;
    int32_t init_subgraph;    /* CALL_ONCE's subgraph, -1 without */
    int init_done;
    int loaded;
} er_model;

/* Load and prepare; returns ER_OK or an ER_ERR_* code with a message in err. */
int er_model_load(er_model *m, const uint8_t *data, uint32_t size, char *err, size_t errlen);
int er_model_invoke(er_model *m, char *err, size_t errlen);
/* The same, timing ops first..first+count-1 with `clock` (microseconds) into elapsed[0..count-1]. */
int er_model_invoke_profile(er_model *m, char *err, size_t errlen, uint32_t (*clock)(void), uint32_t first,
                            uint32_t count, uint32_t *elapsed);
/* the variable named by a VarHandleOptions table (created on first use); -1 when full or unnamed */
int er_model_var(er_model *m, const fb_table *var_handle_options);
/* CALL_ONCE's init subgraph: VAR_HANDLE / ASSIGN_VARIABLE of constants only; records initial values */
int er_model_read_init(er_model *m, int32_t subgraph, char *err, size_t errlen);
uint8_t *er_model_tensor_data(er_model *m, int16_t t);
const char *er_op_name(uint32_t code);
/* The arena the model runs in (board RAM for activations). */
extern uint8_t er_arena[ER_ARENA_BYTES];

/* kernels.c */
void er_pool_reset(uint32_t top);
uint32_t er_pool_top(void);
int er_kernel_prepare(er_model *m, er_node *n, char *err, size_t errlen);
int er_kernel_eval(er_model *m, er_node *n);
uint64_t er_kernel_work(er_model *m, er_node *n);
void *er_kernel_alloc(uint32_t bytes); /* prepared data (pool at the top of the arena) */
int32_t er_mbqm(int32_t x, int32_t mult, int32_t shift);
void er_quantize_multiplier(double real, int32_t *mult, int32_t *shift);
#endif
