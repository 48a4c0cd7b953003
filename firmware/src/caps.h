/* The firmware's capability table: the one place that says what a board running this firmware
 * executes. The host never keeps its own copy: firmware/tools/gen_caps.py turns this file, the
 * limits in config.h / protocol.h / model.h and each port's board.h into
 * delegates/mcu/firmware_caps.json (tests/firmware/test_firmware_caps.py fails when the JSON is stale), and
 * `edgerun check|package|flash --target mcu:BOARD` read that JSON.
 *
 * X(code, NAME, types): the TFLite builtin operator code, its schema name, and the accepted
 * "input>output" tensor type pairs (the data input: input 1 for SPLIT, 2 for TRANSPOSE_CONV, input 0 otherwise) separated by '|' ("same>same": any type, output type equal
 * to the input's; "*": ops on resource variables, no pair). er_kernel_prepare refuses every op missing here and every type pair not
 * listed for it, before the op's own shape checks. */
#ifndef ER_CAPS_H
#define ER_CAPS_H

#define ER_OP_TABLE(X)                                   \
    X(0, ADD, "int8>int8|int16>int16")                   \
    X(1, AVERAGE_POOL_2D, "int8>int8|int16>int16")       \
    X(2, CONCATENATION, "int8>int8")                     \
    X(3, CONV_2D, "int8>int8|int16>int16")               \
    X(4, DEPTHWISE_CONV_2D, "int8>int8|int16>int16")     \
    X(6, DEQUANTIZE, "int8>float32|int16>float32|uint8>float32") \
    X(9, FULLY_CONNECTED, "int8>int8|int16>int16")       \
    X(14, LOGISTIC, "int8>int8")                         \
    X(17, MAX_POOL_2D, "int8>int8|int16>int16")          \
    X(18, MUL, "int8>int8|int16>int16")                  \
    X(19, RELU, "int8>int8")                             \
    X(21, RELU6, "int8>int8")                            \
    X(22, RESHAPE, "same>same")                          \
    X(25, SOFTMAX, "int8>int8|int8>int16|int16>int16")   \
    X(34, PAD, "int8>int8")                              \
    X(40, MEAN, "int8>int8")                             \
    X(43, SQUEEZE, "same>same")                          \
    X(60, PADV2, "int8>int8")                            \
    X(70, EXPAND_DIMS, "same>same")                      \
    X(114, QUANTIZE, "float32>int8|float32>int16|int8>int8|int8>uint8|uint8>int8|int8>int16|int16>int8") \
    X(5, DEPTH_TO_SPACE, "same>same")                    \
    X(26, SPACE_TO_DEPTH, "same>same")                   \
    X(28, TANH, "int8>int8")                             \
    X(36, GATHER, "same>same")                           \
    X(39, TRANSPOSE, "same>same")                        \
    X(41, SUB, "int8>int8|int16>int16")                  \
    X(45, STRIDED_SLICE, "same>same")                    \
    X(49, SPLIT, "same>same")                            \
    X(54, PRELU, "int8>int8")                            \
    X(55, MAXIMUM, "int8>int8")                          \
    X(56, ARG_MAX, "int8>int32|int8>int64")              \
    X(57, MINIMUM, "int8>int8")                          \
    X(65, SLICE, "same>same")                            \
    X(82, REDUCE_MAX, "int8>int8")                       \
    X(83, PACK, "same>same")                             \
    X(88, UNPACK, "same>same")                           \
    X(97, RESIZE_NEAREST_NEIGHBOR, "same>same")          \
    X(98, LEAKY_RELU, "int8>int8")                       \
    X(99, SQUARED_DIFFERENCE, "int8>int8")               \
    X(100, MIRROR_PAD, "same>same")                      \
    X(102, SPLIT_V, "same>same")                         \
    X(117, HARD_SWISH, "int8>int8")                      \
    X(20, RELU_N1_TO_1, "int8>int8")                     \
    X(47, EXP, "int8>int8")                              \
    X(79, ARG_MIN, "int8>int32|int8>int64")              \
    X(101, ABS, "int8>int8")                             \
    X(126, BATCH_MATMUL, "int8>int8")                    \
    X(67, TRANSPOSE_CONV, "int8>int8")                   \
    X(23, RESIZE_BILINEAR, "int8>int8")                  \
    X(129, CALL_ONCE, "*")                               \
    X(142, VAR_HANDLE, "*")                              \
    X(143, READ_VARIABLE, "*")                           \
    X(144, ASSIGN_VARIABLE, "*")                         \
    X(75, SQRT, "int8>int8")                             \
    X(76, RSQRT, "int8>int8")                            \
    X(42, DIV, "int8>int8")                              \
    X(74, SUM, "int8>int8")                              \
    X(50, LOG_SOFTMAX, "int8>int8")                      \
    X(53, CAST, "int8>uint8|int8>int16|int8>int32|int8>int64|int8>float32|uint8>int8|uint8>int32|uint8>float32|int16>int8|int16>int32|int16>float32|int32>int8|int32>int64|int32>float32|float32>int8|float32>uint8|float32>int16|float32>int32|float32>int64") \
    X(77, SHAPE, "int8>int32|int8>int64|uint8>int32|uint8>int64|int16>int32|int16>int64|int32>int32|int32>int64|float32>int32|float32>int64")

/* option limits that are not shapes */
#define ER_MEAN_MAX_OUTPUTS 4096 /* MEAN keeps one int32 sum per output in a static buffer */
#endif
