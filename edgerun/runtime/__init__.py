"""The interpreter, its memory planner and graph partitioning."""


def __getattr__(name):
    if name == "Interpreter":
        from edgerun.runtime.interpreter import Interpreter
        return Interpreter
    raise AttributeError(name)
