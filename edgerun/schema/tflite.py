"""TFLite schema facts: enums, union members and table field slots.

Transcribed from TensorFlow Lite's ``schema.fbs`` (schema version 3, as shipped with LiteRT 2.x).
A table field's slot is its position in the table declaration; its vtable offset is ``4 + 2 * slot``.
Every other module reaches the schema through this file, ``reader.py`` and ``writer.py``.
"""

from __future__ import annotations

import numpy as np

FILE_IDENTIFIER = b"TFL3"
SCHEMA_VERSION = 3

# BuiltinOperator: name -> code. Codes above 127 live only in OperatorCode.builtin_code;
# deprecated_builtin_code holds min(code, 127) (127 = PLACEHOLDER_FOR_GREATER_OP_CODES).
BUILTIN_OPERATORS: dict[str, int] = {
    "ADD": 0, "AVERAGE_POOL_2D": 1, "CONCATENATION": 2, "CONV_2D": 3,
    "DEPTHWISE_CONV_2D": 4, "DEPTH_TO_SPACE": 5, "DEQUANTIZE": 6, "EMBEDDING_LOOKUP": 7,
    "FLOOR": 8, "FULLY_CONNECTED": 9, "HASHTABLE_LOOKUP": 10, "L2_NORMALIZATION": 11,
    "L2_POOL_2D": 12, "LOCAL_RESPONSE_NORMALIZATION": 13, "LOGISTIC": 14, "LSH_PROJECTION": 15,
    "LSTM": 16, "MAX_POOL_2D": 17, "MUL": 18, "RELU": 19,
    "RELU_N1_TO_1": 20, "RELU6": 21, "RESHAPE": 22, "RESIZE_BILINEAR": 23,
    "RNN": 24, "SOFTMAX": 25, "SPACE_TO_DEPTH": 26, "SVDF": 27,
    "TANH": 28, "CONCAT_EMBEDDINGS": 29, "SKIP_GRAM": 30, "CALL": 31,
    "CUSTOM": 32, "EMBEDDING_LOOKUP_SPARSE": 33, "PAD": 34, "UNIDIRECTIONAL_SEQUENCE_RNN": 35,
    "GATHER": 36, "BATCH_TO_SPACE_ND": 37, "SPACE_TO_BATCH_ND": 38, "TRANSPOSE": 39,
    "MEAN": 40, "SUB": 41, "DIV": 42, "SQUEEZE": 43,
    "UNIDIRECTIONAL_SEQUENCE_LSTM": 44, "STRIDED_SLICE": 45, "BIDIRECTIONAL_SEQUENCE_RNN": 46, "EXP": 47,
    "TOPK_V2": 48, "SPLIT": 49, "LOG_SOFTMAX": 50, "DELEGATE": 51,
    "BIDIRECTIONAL_SEQUENCE_LSTM": 52, "CAST": 53, "PRELU": 54, "MAXIMUM": 55,
    "ARG_MAX": 56, "MINIMUM": 57, "LESS": 58, "NEG": 59,
    "PADV2": 60, "GREATER": 61, "GREATER_EQUAL": 62, "LESS_EQUAL": 63,
    "SELECT": 64, "SLICE": 65, "SIN": 66, "TRANSPOSE_CONV": 67,
    "SPARSE_TO_DENSE": 68, "TILE": 69, "EXPAND_DIMS": 70, "EQUAL": 71,
    "NOT_EQUAL": 72, "LOG": 73, "SUM": 74, "SQRT": 75,
    "RSQRT": 76, "SHAPE": 77, "POW": 78, "ARG_MIN": 79,
    "FAKE_QUANT": 80, "REDUCE_PROD": 81, "REDUCE_MAX": 82, "PACK": 83,
    "LOGICAL_OR": 84, "ONE_HOT": 85, "LOGICAL_AND": 86, "LOGICAL_NOT": 87,
    "UNPACK": 88, "REDUCE_MIN": 89, "FLOOR_DIV": 90, "REDUCE_ANY": 91,
    "SQUARE": 92, "ZEROS_LIKE": 93, "FILL": 94, "FLOOR_MOD": 95,
    "RANGE": 96, "RESIZE_NEAREST_NEIGHBOR": 97, "LEAKY_RELU": 98, "SQUARED_DIFFERENCE": 99,
    "MIRROR_PAD": 100, "ABS": 101, "SPLIT_V": 102, "UNIQUE": 103,
    "CEIL": 104, "REVERSE_V2": 105, "ADD_N": 106, "GATHER_ND": 107,
    "COS": 108, "WHERE": 109, "RANK": 110, "ELU": 111,
    "REVERSE_SEQUENCE": 112, "MATRIX_DIAG": 113, "QUANTIZE": 114, "MATRIX_SET_DIAG": 115,
    "ROUND": 116, "HARD_SWISH": 117, "IF": 118, "WHILE": 119,
    "NON_MAX_SUPPRESSION_V4": 120, "NON_MAX_SUPPRESSION_V5": 121, "SCATTER_ND": 122, "SELECT_V2": 123,
    "DENSIFY": 124, "SEGMENT_SUM": 125, "BATCH_MATMUL": 126, "PLACEHOLDER_FOR_GREATER_OP_CODES": 127,
    "CUMSUM": 128, "CALL_ONCE": 129, "BROADCAST_TO": 130, "RFFT2D": 131,
    "CONV_3D": 132, "IMAG": 133, "REAL": 134, "COMPLEX_ABS": 135,
    "HASHTABLE": 136, "HASHTABLE_FIND": 137, "HASHTABLE_IMPORT": 138, "HASHTABLE_SIZE": 139,
    "REDUCE_ALL": 140, "CONV_3D_TRANSPOSE": 141, "VAR_HANDLE": 142, "READ_VARIABLE": 143,
    "ASSIGN_VARIABLE": 144, "BROADCAST_ARGS": 145, "RANDOM_STANDARD_NORMAL": 146, "BUCKETIZE": 147,
    "RANDOM_UNIFORM": 148, "MULTINOMIAL": 149, "GELU": 150, "DYNAMIC_UPDATE_SLICE": 151,
    "RELU_0_TO_1": 152, "UNSORTED_SEGMENT_PROD": 153, "UNSORTED_SEGMENT_MAX": 154, "UNSORTED_SEGMENT_SUM": 155,
    "ATAN2": 156, "UNSORTED_SEGMENT_MIN": 157, "SIGN": 158, "BITCAST": 159,
    "BITWISE_XOR": 160, "RIGHT_SHIFT": 161, "STABLEHLO_LOGISTIC": 162, "STABLEHLO_ADD": 163,
    "STABLEHLO_DIVIDE": 164, "STABLEHLO_MULTIPLY": 165, "STABLEHLO_MAXIMUM": 166, "STABLEHLO_RESHAPE": 167,
    "STABLEHLO_CLAMP": 168, "STABLEHLO_CONCATENATE": 169, "STABLEHLO_BROADCAST_IN_DIM": 170, "STABLEHLO_CONVOLUTION": 171,
    "STABLEHLO_SLICE": 172, "STABLEHLO_CUSTOM_CALL": 173, "STABLEHLO_REDUCE": 174, "STABLEHLO_ABS": 175,
    "STABLEHLO_AND": 176, "STABLEHLO_COSINE": 177, "STABLEHLO_EXPONENTIAL": 178, "STABLEHLO_FLOOR": 179,
    "STABLEHLO_LOG": 180, "STABLEHLO_MINIMUM": 181, "STABLEHLO_NEGATE": 182, "STABLEHLO_OR": 183,
    "STABLEHLO_POWER": 184, "STABLEHLO_REMAINDER": 185, "STABLEHLO_RSQRT": 186, "STABLEHLO_SELECT": 187,
    "STABLEHLO_SUBTRACT": 188, "STABLEHLO_TANH": 189, "STABLEHLO_SCATTER": 190, "STABLEHLO_COMPARE": 191,
    "STABLEHLO_CONVERT": 192, "STABLEHLO_DYNAMIC_SLICE": 193, "STABLEHLO_DYNAMIC_UPDATE_SLICE": 194, "STABLEHLO_PAD": 195,
    "STABLEHLO_IOTA": 196, "STABLEHLO_DOT_GENERAL": 197, "STABLEHLO_REDUCE_WINDOW": 198, "STABLEHLO_SORT": 199,
    "STABLEHLO_WHILE": 200, "STABLEHLO_GATHER": 201, "STABLEHLO_TRANSPOSE": 202, "DILATE": 203,
    "STABLEHLO_RNG_BIT_GENERATOR": 204, "REDUCE_WINDOW": 205, "STABLEHLO_COMPOSITE": 206, "STABLEHLO_SHIFT_LEFT": 207,
    "STABLEHLO_CBRT": 208, "STABLEHLO_CASE": 209,
}
BUILTIN_OPERATOR_NAMES: dict[int, str] = {v: k for k, v in BUILTIN_OPERATORS.items()}

# BuiltinOptions union: member index -> table name (index 0 is NONE).
BUILTIN_OPTIONS: tuple[str, ...] = (
    "NONE", "Conv2DOptions", "DepthwiseConv2DOptions", "ConcatEmbeddingsOptions",
    "LSHProjectionOptions", "Pool2DOptions", "SVDFOptions", "RNNOptions",
    "FullyConnectedOptions", "SoftmaxOptions", "ConcatenationOptions", "AddOptions",
    "L2NormOptions", "LocalResponseNormalizationOptions", "LSTMOptions", "ResizeBilinearOptions",
    "CallOptions", "ReshapeOptions", "SkipGramOptions", "SpaceToDepthOptions",
    "EmbeddingLookupSparseOptions", "MulOptions", "PadOptions", "GatherOptions",
    "BatchToSpaceNDOptions", "SpaceToBatchNDOptions", "TransposeOptions", "ReducerOptions",
    "SubOptions", "DivOptions", "SqueezeOptions", "SequenceRNNOptions",
    "StridedSliceOptions", "ExpOptions", "TopKV2Options", "SplitOptions",
    "LogSoftmaxOptions", "CastOptions", "DequantizeOptions", "MaximumMinimumOptions",
    "ArgMaxOptions", "LessOptions", "NegOptions", "PadV2Options",
    "GreaterOptions", "GreaterEqualOptions", "LessEqualOptions", "SelectOptions",
    "SliceOptions", "TransposeConvOptions", "SparseToDenseOptions", "TileOptions",
    "ExpandDimsOptions", "EqualOptions", "NotEqualOptions", "ShapeOptions",
    "PowOptions", "ArgMinOptions", "FakeQuantOptions", "PackOptions",
    "LogicalOrOptions", "OneHotOptions", "LogicalAndOptions", "LogicalNotOptions",
    "UnpackOptions", "FloorDivOptions", "SquareOptions", "ZerosLikeOptions",
    "FillOptions", "BidirectionalSequenceLSTMOptions", "BidirectionalSequenceRNNOptions", "UnidirectionalSequenceLSTMOptions",
    "FloorModOptions", "RangeOptions", "ResizeNearestNeighborOptions", "LeakyReluOptions",
    "SquaredDifferenceOptions", "MirrorPadOptions", "AbsOptions", "SplitVOptions",
    "UniqueOptions", "ReverseV2Options", "AddNOptions", "GatherNdOptions",
    "CosOptions", "WhereOptions", "RankOptions", "ReverseSequenceOptions",
    "MatrixDiagOptions", "QuantizeOptions", "MatrixSetDiagOptions", "HardSwishOptions",
    "IfOptions", "WhileOptions", "DepthToSpaceOptions", "NonMaxSuppressionV4Options",
    "NonMaxSuppressionV5Options", "ScatterNdOptions", "SelectV2Options", "DensifyOptions",
    "SegmentSumOptions", "BatchMatMulOptions", "CumsumOptions", "CallOnceOptions",
    "BroadcastToOptions", "Rfft2dOptions", "Conv3DOptions", "HashtableOptions",
    "HashtableFindOptions", "HashtableImportOptions", "HashtableSizeOptions", "VarHandleOptions",
    "ReadVariableOptions", "AssignVariableOptions", "RandomOptions", "BucketizeOptions",
    "GeluOptions", "DynamicUpdateSliceOptions", "UnsortedSegmentProdOptions", "UnsortedSegmentMaxOptions",
    "UnsortedSegmentMinOptions", "UnsortedSegmentSumOptions", "ATan2Options", "SignOptions",
    "BitcastOptions", "BitwiseXorOptions", "RightShiftOptions",
)
BUILTIN_OPTIONS_INDEX: dict[str, int] = {n: i for i, n in enumerate(BUILTIN_OPTIONS)}

# TensorType: code -> (name, numpy dtype or None when numpy has no native equivalent).
TENSOR_TYPES: dict[int, tuple[str, object]] = {
    0: ("float32", np.float32), 1: ("float16", np.float16), 2: ("int32", np.int32),
    3: ("uint8", np.uint8), 4: ("int64", np.int64), 5: ("string", None), 6: ("bool", np.bool_),
    7: ("int16", np.int16), 8: ("complex64", np.complex64), 9: ("int8", np.int8),
    10: ("float64", np.float64), 11: ("complex128", np.complex128), 12: ("uint64", np.uint64),
    13: ("resource", None), 14: ("variant", None), 15: ("uint32", np.uint32),
    16: ("uint16", np.uint16), 17: ("int4", None), 18: ("bfloat16", None), 19: ("int2", None),
    20: ("uint4", None), 21: ("float8_e4m3fn", None), 22: ("float8_e5m2", None),
}
TENSOR_TYPE_CODES: dict[str, int] = {name: code for code, (name, _) in TENSOR_TYPES.items()}


def numpy_dtype(type_name: str):
    """numpy dtype for a TensorType name, or None (string, int4, ...)."""
    dt = TENSOR_TYPES[TENSOR_TYPE_CODES[type_name]][1]
    return np.dtype(dt) if dt is not None else None


class Padding:
    SAME = 0
    VALID = 1


class Activation:
    """ActivationFunctionType."""
    NONE = 0
    RELU = 1
    RELU_N1_TO_1 = 2
    RELU6 = 3
    TANH = 4
    SIGN_BIT = 5


class MirrorPadMode:
    REFLECT = 0
    SYMMETRIC = 1


class DimensionType:
    DENSE = 0
    SPARSE_CSR = 1


# SparseIndexVector union members.
SPARSE_INDEX_VECTORS = {1: np.int32, 2: np.uint16, 3: np.uint8}

# Options tables: table name -> fields in slot order, each (name, kind, default) or None for a
# deprecated slot. Kinds: b int8, B uint8, ? bool, i int32, I uint32, q int64, f float32,
# s string, "[i]" int32 vector, "[f]" float32 vector, "[B]" uint8 vector.
# Tables with no fields (TransposeOptions, ExpOptions, ...) are absent and read as {}.
OPTION_FIELDS: dict[str, tuple] = {
    "Conv2DOptions": (("padding", "b", 0), ("stride_w", "i", 0), ("stride_h", "i", 0), ("fused_activation_function", "b", 0), ("dilation_w_factor", "i", 1), ("dilation_h_factor", "i", 1), ("quantized_bias_type", "b", 0),),
    "Conv3DOptions": (("padding", "b", 0), ("stride_d", "i", 0), ("stride_w", "i", 0), ("stride_h", "i", 0), ("fused_activation_function", "b", 0), ("dilation_d_factor", "i", 1), ("dilation_w_factor", "i", 1), ("dilation_h_factor", "i", 1),),
    "Pool2DOptions": (("padding", "b", 0), ("stride_w", "i", 0), ("stride_h", "i", 0), ("filter_width", "i", 0), ("filter_height", "i", 0), ("fused_activation_function", "b", 0),),
    "DepthwiseConv2DOptions": (("padding", "b", 0), ("stride_w", "i", 0), ("stride_h", "i", 0), ("depth_multiplier", "i", 0), ("fused_activation_function", "b", 0), ("dilation_w_factor", "i", 1), ("dilation_h_factor", "i", 1),),
    "ConcatEmbeddingsOptions": (("num_channels", "i", 0), ("num_columns_per_channel", "[i]", ()), ("embedding_dim_per_channel", "[i]", ()),),
    "LSHProjectionOptions": (("type", "b", 0),),
    "SVDFOptions": (("rank", "i", 0), ("fused_activation_function", "b", 0), ("asymmetric_quantize_inputs", "?", False),),
    "RNNOptions": (("fused_activation_function", "b", 0), ("asymmetric_quantize_inputs", "?", False),),
    "SequenceRNNOptions": (("time_major", "?", False), ("fused_activation_function", "b", 0), ("asymmetric_quantize_inputs", "?", False),),
    "BidirectionalSequenceRNNOptions": (("time_major", "?", False), ("fused_activation_function", "b", 0), ("merge_outputs", "?", False), ("asymmetric_quantize_inputs", "?", False),),
    "FullyConnectedOptions": (("fused_activation_function", "b", 0), ("weights_format", "b", 0), ("keep_num_dims", "?", False), ("asymmetric_quantize_inputs", "?", False), ("quantized_bias_type", "b", 0), ("quant_spec", "[B]", ()),),
    "SoftmaxOptions": (("beta", "f", 0.0),),
    "ConcatenationOptions": (("axis", "i", 0), ("fused_activation_function", "b", 0),),
    "AddOptions": (("fused_activation_function", "b", 0), ("pot_scale_int16", "?", True),),
    "MulOptions": (("fused_activation_function", "b", 0),),
    "L2NormOptions": (("fused_activation_function", "b", 0),),
    "LocalResponseNormalizationOptions": (("radius", "i", 0), ("bias", "f", 0.0), ("alpha", "f", 0.0), ("beta", "f", 0.0),),
    "LSTMOptions": (("fused_activation_function", "b", 0), ("cell_clip", "f", 0.0), ("proj_clip", "f", 0.0), ("kernel_type", "b", 0), ("asymmetric_quantize_inputs", "?", False),),
    "UnidirectionalSequenceLSTMOptions": (("fused_activation_function", "b", 0), ("cell_clip", "f", 0.0), ("proj_clip", "f", 0.0), ("time_major", "?", False), ("asymmetric_quantize_inputs", "?", False), ("diagonal_recurrent_tensors", "?", False),),
    "BidirectionalSequenceLSTMOptions": (("fused_activation_function", "b", 0), ("cell_clip", "f", 0.0), ("proj_clip", "f", 0.0), ("merge_outputs", "?", False), ("time_major", "?", True), ("asymmetric_quantize_inputs", "?", False),),
    "ResizeBilinearOptions": (None, None, ("align_corners", "?", False), ("half_pixel_centers", "?", False),),
    "ResizeNearestNeighborOptions": (("align_corners", "?", False), ("half_pixel_centers", "?", False),),
    "CallOptions": (("subgraph", "I", 0),),
    "ReshapeOptions": (("new_shape", "[i]", ()),),
    "SkipGramOptions": (("ngram_size", "i", 0), ("max_skip_size", "i", 0), ("include_all_ngrams", "?", False),),
    "SpaceToDepthOptions": (("block_size", "i", 0),),
    "DepthToSpaceOptions": (("block_size", "i", 0),),
    "SubOptions": (("fused_activation_function", "b", 0), ("pot_scale_int16", "?", True),),
    "DivOptions": (("fused_activation_function", "b", 0),),
    "EmbeddingLookupSparseOptions": (("combiner", "b", 0),),
    "GatherOptions": (("axis", "i", 0), ("batch_dims", "i", 0),),
    "ReducerOptions": (("keep_dims", "?", False),),
    "SqueezeOptions": (("squeeze_dims", "[i]", ()),),
    "SplitOptions": (("num_splits", "i", 0),),
    "SplitVOptions": (("num_splits", "i", 0),),
    "StridedSliceOptions": (("begin_mask", "i", 0), ("end_mask", "i", 0), ("ellipsis_mask", "i", 0), ("new_axis_mask", "i", 0), ("shrink_axis_mask", "i", 0), ("offset", "?", False),),
    "CastOptions": (("in_data_type", "b", 0), ("out_data_type", "b", 0),),
    "ArgMaxOptions": (("output_type", "b", 0),),
    "ArgMinOptions": (("output_type", "b", 0),),
    "TransposeConvOptions": (("padding", "b", 0), ("stride_w", "i", 0), ("stride_h", "i", 0), ("fused_activation_function", "b", 0), ("quantized_bias_type", "b", 0),),
    "SparseToDenseOptions": (("validate_indices", "?", False),),
    "ShapeOptions": (("out_type", "b", 0),),
    "FakeQuantOptions": (("min", "f", 0.0), ("max", "f", 0.0), ("num_bits", "i", 0), ("narrow_range", "?", False),),
    "PackOptions": (("values_count", "i", 0), ("axis", "i", 0),),
    "OneHotOptions": (("axis", "i", 0),),
    "UnpackOptions": (("num", "i", 0), ("axis", "i", 0),),
    "LeakyReluOptions": (("alpha", "f", 0.0),),
    "MirrorPadOptions": (("mode", "b", 0),),
    "UniqueOptions": (("idx_out_type", "b", 2),),
    "ReverseSequenceOptions": (("seq_dim", "i", 0), ("batch_dim", "i", 0),),
    "IfOptions": (("then_subgraph_index", "i", 0), ("else_subgraph_index", "i", 0),),
    "CallOnceOptions": (("init_subgraph_index", "i", 0),),
    "WhileOptions": (("cond_subgraph_index", "i", 0), ("body_subgraph_index", "i", 0),),
    "BatchMatMulOptions": (("adj_x", "?", False), ("adj_y", "?", False), ("asymmetric_quantize_inputs", "?", False),),
    "CumsumOptions": (("exclusive", "?", False), ("reverse", "?", False),),
    "HashtableOptions": (("table_id", "i", 0), ("key_dtype", "b", 0), ("value_dtype", "b", 0),),
    "VarHandleOptions": (("container", "s", None), ("shared_name", "s", None),),
    "RandomOptions": (("seed", "q", 0), ("seed2", "q", 0),),
    "BucketizeOptions": (("boundaries", "[f]", ()),),
    "GeluOptions": (("approximate", "?", False),),
    "ReduceWindowOptions": (("reduce_function", "i", 0),),
    "StableHLOCompositeOptions": (("name", "s", None), ("decomposition_subgraph_index", "i", 0), ("composite_attributes", "[B]", ()), ("composite_attributes_format", "b", 0), ("version", "i", 0),),
}

# Which options table each builtin op carries (ops absent here carry none).
OP_OPTIONS: dict[str, str] = {
    "ADD": "AddOptions", "AVERAGE_POOL_2D": "Pool2DOptions", "CONCATENATION": "ConcatenationOptions",
    "CONV_2D": "Conv2DOptions", "DEPTHWISE_CONV_2D": "DepthwiseConv2DOptions",
    "DEPTH_TO_SPACE": "DepthToSpaceOptions", "FULLY_CONNECTED": "FullyConnectedOptions",
    "L2_NORMALIZATION": "L2NormOptions", "L2_POOL_2D": "Pool2DOptions",
    "LOCAL_RESPONSE_NORMALIZATION": "LocalResponseNormalizationOptions",
    "MAX_POOL_2D": "Pool2DOptions", "MUL": "MulOptions", "RESHAPE": "ReshapeOptions",
    "RESIZE_BILINEAR": "ResizeBilinearOptions", "SOFTMAX": "SoftmaxOptions",
    "SPACE_TO_DEPTH": "SpaceToDepthOptions", "PAD": "PadOptions", "GATHER": "GatherOptions",
    "BATCH_TO_SPACE_ND": "BatchToSpaceNDOptions", "SPACE_TO_BATCH_ND": "SpaceToBatchNDOptions",
    "TRANSPOSE": "TransposeOptions", "MEAN": "ReducerOptions", "SUB": "SubOptions", "DIV": "DivOptions",
    "SQUEEZE": "SqueezeOptions", "STRIDED_SLICE": "StridedSliceOptions", "EXP": "ExpOptions",
    "TOPK_V2": "TopKV2Options", "SPLIT": "SplitOptions", "LOG_SOFTMAX": "LogSoftmaxOptions",
    "CAST": "CastOptions", "DEQUANTIZE": "DequantizeOptions", "MAXIMUM": "MaximumMinimumOptions",
    "MINIMUM": "MaximumMinimumOptions", "ARG_MAX": "ArgMaxOptions", "ARG_MIN": "ArgMinOptions",
    "LESS": "LessOptions", "NEG": "NegOptions", "PADV2": "PadV2Options", "GREATER": "GreaterOptions",
    "GREATER_EQUAL": "GreaterEqualOptions", "LESS_EQUAL": "LessEqualOptions",
    "SELECT": "SelectOptions", "SLICE": "SliceOptions", "TRANSPOSE_CONV": "TransposeConvOptions",
    "TILE": "TileOptions", "EXPAND_DIMS": "ExpandDimsOptions", "EQUAL": "EqualOptions",
    "NOT_EQUAL": "NotEqualOptions", "SHAPE": "ShapeOptions", "POW": "PowOptions",
    "SUM": "ReducerOptions", "REDUCE_PROD": "ReducerOptions", "REDUCE_MAX": "ReducerOptions",
    "REDUCE_MIN": "ReducerOptions", "REDUCE_ANY": "ReducerOptions", "REDUCE_ALL": "ReducerOptions",
    "PACK": "PackOptions", "UNPACK": "UnpackOptions", "ONE_HOT": "OneHotOptions",
    "LOGICAL_OR": "LogicalOrOptions", "LOGICAL_AND": "LogicalAndOptions",
    "LOGICAL_NOT": "LogicalNotOptions", "FLOOR_DIV": "FloorDivOptions", "SQUARE": "SquareOptions",
    "ZEROS_LIKE": "ZerosLikeOptions", "FILL": "FillOptions", "FLOOR_MOD": "FloorModOptions",
    "RANGE": "RangeOptions", "RESIZE_NEAREST_NEIGHBOR": "ResizeNearestNeighborOptions",
    "LEAKY_RELU": "LeakyReluOptions", "SQUARED_DIFFERENCE": "SquaredDifferenceOptions",
    "MIRROR_PAD": "MirrorPadOptions", "ABS": "AbsOptions", "SPLIT_V": "SplitVOptions",
    "UNIQUE": "UniqueOptions", "REVERSE_V2": "ReverseV2Options", "ADD_N": "AddNOptions",
    "GATHER_ND": "GatherNdOptions", "COS": "CosOptions", "WHERE": "WhereOptions",
    "RANK": "RankOptions", "QUANTIZE": "QuantizeOptions", "HARD_SWISH": "HardSwishOptions",
    "SELECT_V2": "SelectV2Options", "DENSIFY": "DensifyOptions", "BATCH_MATMUL": "BatchMatMulOptions",
    "CUMSUM": "CumsumOptions", "BROADCAST_TO": "BroadcastToOptions", "GELU": "GeluOptions",
    "CONV_3D": "Conv3DOptions", "IF": "IfOptions", "WHILE": "WhileOptions",
    "CALL_ONCE": "CallOnceOptions", "SIGN": "SignOptions",
    # The rest of the schema's BuiltinOptions members. An op missing here had its options
    # dropped by the writer (VAR_HANDLE's shared_name in CALL_ONCE init subgraphs, LSTM clips).
    "LSH_PROJECTION": "LSHProjectionOptions", "SVDF": "SVDFOptions", "RNN": "RNNOptions",
    "CONCAT_EMBEDDINGS": "ConcatEmbeddingsOptions", "SKIP_GRAM": "SkipGramOptions",
    "CALL": "CallOptions", "EMBEDDING_LOOKUP_SPARSE": "EmbeddingLookupSparseOptions",
    "LSTM": "LSTMOptions", "UNIDIRECTIONAL_SEQUENCE_RNN": "SequenceRNNOptions",
    "UNIDIRECTIONAL_SEQUENCE_LSTM": "UnidirectionalSequenceLSTMOptions",
    "BIDIRECTIONAL_SEQUENCE_RNN": "BidirectionalSequenceRNNOptions",
    "BIDIRECTIONAL_SEQUENCE_LSTM": "BidirectionalSequenceLSTMOptions",
    "SPARSE_TO_DENSE": "SparseToDenseOptions", "FAKE_QUANT": "FakeQuantOptions",
    "REVERSE_SEQUENCE": "ReverseSequenceOptions", "MATRIX_DIAG": "MatrixDiagOptions",
    "MATRIX_SET_DIAG": "MatrixSetDiagOptions", "NON_MAX_SUPPRESSION_V4": "NonMaxSuppressionV4Options",
    "NON_MAX_SUPPRESSION_V5": "NonMaxSuppressionV5Options", "SCATTER_ND": "ScatterNdOptions",
    "SEGMENT_SUM": "SegmentSumOptions", "RFFT2D": "Rfft2dOptions", "HASHTABLE": "HashtableOptions",
    "HASHTABLE_FIND": "HashtableFindOptions", "HASHTABLE_IMPORT": "HashtableImportOptions",
    "HASHTABLE_SIZE": "HashtableSizeOptions", "VAR_HANDLE": "VarHandleOptions",
    "READ_VARIABLE": "ReadVariableOptions", "ASSIGN_VARIABLE": "AssignVariableOptions",
    "RANDOM_STANDARD_NORMAL": "RandomOptions", "RANDOM_UNIFORM": "RandomOptions",
    "MULTINOMIAL": "RandomOptions", "BUCKETIZE": "BucketizeOptions",
    "DYNAMIC_UPDATE_SLICE": "DynamicUpdateSliceOptions",
    "UNSORTED_SEGMENT_PROD": "UnsortedSegmentProdOptions",
    "UNSORTED_SEGMENT_MAX": "UnsortedSegmentMaxOptions",
    "UNSORTED_SEGMENT_MIN": "UnsortedSegmentMinOptions",
    "UNSORTED_SEGMENT_SUM": "UnsortedSegmentSumOptions", "ATAN2": "ATan2Options",
    "BITCAST": "BitcastOptions", "BITWISE_XOR": "BitwiseXorOptions", "RIGHT_SHIFT": "RightShiftOptions",
}


def builtin_code(deprecated_code: int, code: int) -> int:
    """The op code of an OperatorCode: the schema split it in two when int8 codes ran out."""
    return max(int(deprecated_code), int(code))
