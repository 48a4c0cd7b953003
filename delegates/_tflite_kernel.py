"""A DelegateKernel that runs a partition's sub-model in LiteRT (shared by xnnpack and edgetpu)."""

from __future__ import annotations

import numpy as np

from edgerun.delegate import DelegateKernel


class LiteRtKernel(DelegateKernel):
    """Runs ``model_content`` (a partition written as a standalone model) in a LiteRT Interpreter.

    xnnpack: LiteRT's default op resolver, which applies the XNNPACK delegate; False selects
    BUILTIN_WITHOUT_DEFAULT_DELEGATES. delegates: external delegates from ``load_delegate``.
    """

    def __init__(self, model_content: bytes, *, xnnpack: bool = True, delegates=None,
                 num_threads: int | None = None):
        from edgerun.litert import make_interpreter

        self.model_content = bytes(model_content)
        self.interp = make_interpreter(self.model_content, xnnpack=xnnpack, delegates=delegates,
                                       num_threads=num_threads)
        self.interp.allocate_tensors()
        self._in = [d["index"] for d in self.interp.get_input_details()]
        self._out = [d["index"] for d in self.interp.get_output_details()]
        # One invoke on zeros first: anything LiteRT or a delegate sets up lazily happens now,
        # after which the tensors' memory stays put (static shapes: nothing reallocates it).
        for d in self.interp.get_input_details():
            self.interp.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
        self.interp.invoke()
        # Views of LiteRT's input and output memory. Holding them makes LiteRT's invoke() refuse
        # (it cannot know the shapes never change), so invoke() calls the wrapped Invoke directly.
        self._in_views = [self.interp.tensor(i)() for i in self._in]
        self._out_views = [self.interp.tensor(i)() for i in self._out]
        self._invoke = self.interp._interpreter.Invoke

    def input_buffer(self, k: int) -> np.ndarray:
        return self._in_views[k]

    def output_buffer(self, k: int) -> np.ndarray:
        return self._out_views[k]

    def invoke(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        for view, x in zip(self._in_views, inputs):
            if x is not view:
                np.copyto(view, x, casting="no")
        self._invoke()
        return self._out_views

    def close(self) -> None:
        self.interp = None
