"""YAML read as a document of bounded size: PyYAML shares an alias's node, so a kilobyte of aliases nested nine deep (a
"billion laughs") loads at once and blows up only when what reads it next walks, prints or merges it; and an alias
inside its own anchor builds a structure that contains itself. Both are refused before the document is built, with
a mark, as YAML syntax errors are."""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, SequenceNode

EXPANDED_NODES_FREE = 10_000
"""A document whose aliases expand it to this many nodes at most is read whatever its aliases."""
EXPANSION_FACTOR = 10
"""Past EXPANDED_NODES_FREE, aliases may expand a document to this many times its own nodes (`<<: *defaults` merges
in a long config), not more: go-yaml refuses such documents too ("excessive aliasing"), so kubectl and HAMi do."""


def load_yaml(text: str, loader: type[yaml.SafeLoader] | type[yaml.CSafeLoader] = yaml.SafeLoader) -> Any:
    """The document in `text` (None when empty) as `yaml.safe_load` reads it (or `loader`); a `yaml.MarkedYAMLError`
    for one that refers to itself or whose aliases expand it past the bounds above."""
    reader = loader(text)
    try:
        node = reader.get_single_node()
        if node is None:
            return None
        _bounded(node)
        return reader.construct_document(node)
    finally:
        reader.dispose()


def _children(node: Node) -> list[Node]:
    """A node's nodes: a sequence's items, a mapping's keys and values."""
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _bounded(root: Node) -> None:
    """Counts the nodes the document has once its aliases are expanded, each shared node once (no recursion: a
    document nested as deep as the composer allows is walked too); raises on a node inside itself or past the bounds,
    marking the smallest node past them (where the aliases are, not the document's start)."""
    expanded: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, closing = stack.pop()
        key = id(node)
        if closing:
            open_nodes.discard(key)
            expanded[key] = 1 + sum(expanded[id(child)] for child in _children(node))
            continue
        if key in expanded:
            continue
        if key in open_nodes:
            raise ConstructorError(None, None, "an alias refers to a node that contains it", node.start_mark)
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node))
    total, own = expanded[id(root)], len(expanded)
    bound = max(EXPANDED_NODES_FREE, EXPANSION_FACTOR * own)
    if total <= bound:
        return
    node = root
    while (largest := max(_children(node), key=lambda child: expanded[id(child)], default=None)) is not None:
        if expanded[id(largest)] <= bound:
            break
        node = largest
    problem = f"its aliases expand {own} nodes to {total}, more than {EXPANSION_FACTOR} times as many"
    raise ConstructorError(None, None, problem, node.start_mark)
