"""The only package that knows the TFLite flatbuffer schema.

``tflite`` holds the schema facts, ``reader`` parses bytes into ``edgerun.ir`` objects and
``writer`` serializes them back.
"""

__all__ = ["read_model", "read_model_file", "write_model"]


def __getattr__(name):  # lazy: edgerun.ir imports schema.tflite, and the reader imports edgerun.ir
    if name in ("read_model", "read_model_file"):
        from edgerun.schema import reader
        return getattr(reader, name)
    if name == "write_model":
        from edgerun.schema.writer import write_model
        return write_model
    raise AttributeError(name)
