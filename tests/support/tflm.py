"""tflite-micro's own Python interpreter as an oracle (the ``tflite-micro`` wheel)."""


def run_tflm(model, inputs):
    from tflite_micro.python.tflite_micro import runtime

    it = runtime.Interpreter.from_bytes(model)
    for i, x in enumerate(inputs):
        it.set_input(x, i)
    it.invoke()
    return [it.get_output(0)]
