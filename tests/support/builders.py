"""Model-building helpers the ops and schema tests share (on top of :class:`edgerun.ir.ModelBuilder`)."""

from edgerun.ir import ModelBuilder, Subgraph


def add_subgraph(b: ModelBuilder, name: str, build) -> int:
    """Append a subgraph ``name`` that ``build(b)`` fills (``b`` points at it meanwhile); its index."""
    main = b.graph
    g = Subgraph([], [], [], [], name)
    b.model.subgraphs.append(g)
    b.graph = g
    build(b)
    b.graph = main
    return len(b.model.subgraphs) - 1
