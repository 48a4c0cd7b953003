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

    def invoke(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        it = self.interp
        for idx, x in zip(self._in, inputs):
            it.set_tensor(idx, x)
        it.invoke()
        return [it.get_tensor(i) for i in self._out]

    def close(self) -> None:
        self.interp = None
