"""The mcu delegate's hardware back end: edgerun firmware over a serial link.

``run_serial(port, model, inputs)`` flashes ``model`` when the device does not already run it
(the flasher skips the transfer when the hashes match), then runs ``inputs`` on the device and
returns its outputs, which are byte-identical to the host interpreter's for int8 models.
Imported lazily by the delegate; needs pyserial.
"""

from __future__ import annotations

import hashlib

import numpy as np


def run_serial(port: str, model: bytes, inputs: list[np.ndarray], baud: int = 115200) -> list[np.ndarray]:
    from edgerun.deploy.flash import flash, model_info, run_with_link
    from edgerun.deploy.serial_link import DeviceError, SerialLink

    with SerialLink(port, baud) as link:
        link.hello()
        info = None
        try:
            info = model_info(link)
        except DeviceError:  # no model yet, or one that does not load: flash ours
            info = None
        if info is None or info.sha256 != hashlib.sha256(model).hexdigest():
            flash(model, port, baud, link=link)
            info = model_info(link)
        return run_with_link(link, list(inputs), info)[0]
