"""The unit of execution the interpreter runs, shared by the interpreter and the partitioner.

``allocate_tensors`` turns each node into a :class:`Step` (its kernel's ``eval``); the
partitioner then replaces the nodes a delegate claims by one step per partition. Every field is
declared here: nothing else hangs attributes on a step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgerun.delegate import Partition
    from edgerun.errors import UnsupportedOpError


@dataclass(eq=False)
class Step:
    """One unit of execution: a node's kernel, or a delegate kernel covering a partition.

    name: the op name (``CONV_2D``) or ``<delegate>:<partition index>``.
    inputs / outputs: tensor indices read and written (-1: an omitted optional input).
    fn: called with the input arrays, returns the output arrays (None until a delegate claims a
        node edgerun has no kernel for).
    nodes: the graph nodes it covers, in execution order.
    dtype: the dtype its kernel is keyed by (``"delegate"`` for a partition step).
    kernel: the Kernel instance (``ops.registry.Kernel``) or the DelegateKernel.
    error: for a node without an edgerun kernel, why; raised unless a delegate claims the node.
    partition: for a partition step, the partition it runs.
    """

    name: str
    inputs: list[int]
    outputs: list[int]
    fn: Callable | None
    nodes: list[int]
    dtype: str = ""
    kernel: object = None
    error: UnsupportedOpError | None = None
    partition: Partition | None = None

    @property
    def node(self) -> int:
        """The first (for a node step, the only) graph node this step covers."""
        return self.nodes[0]
