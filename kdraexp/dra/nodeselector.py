"""Node selectors (``v1.NodeSelector``): which nodes a pool, a device or an allocation serves.

A slice with ``nodeSelector`` (or, under ``perDeviceNodeSelection``, a device with one) serves
the nodes it matches; an allocation's ``nodeSelector`` says where the pod using it may run.
Read as kube-apiserver's node affinity reads them (``k8s.io/component-helpers``'
``nodeaffinity``): terms are alternatives, a term's requirements all hold, a term without
requirements matches no node; ``matchFields`` name ``metadata.name`` only.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping

import attrs
import msgspec

from kdraexp.dra.gated import Unreadable

OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
NAME_FIELD = "metadata.name"


class _Requirement(msgspec.Struct, gc=False):
    key: str | None = None
    operator: str | None = None
    values: list[str] | None = None


class _Term(msgspec.Struct, gc=False):
    match_expressions: list[_Requirement] | None = msgspec.field(
        default=None, name="matchExpressions"
    )
    match_fields: list[_Requirement] | None = msgspec.field(default=None, name="matchFields")


class _Selector(msgspec.Struct, gc=False):
    node_selector_terms: list[_Term] | None = msgspec.field(default=None, name="nodeSelectorTerms")


_DECODER = msgspec.json.Decoder(_Selector)
_DECIMAL = re.compile(r"[+-]?[0-9]+", re.ASCII)
_INT64 = 2**63


def int64(text: str) -> int | None:
    """*text* as Go's ``strconv.ParseInt(text, 10, 64)`` reads it; None where it reads nothing.

    A sign, then ASCII digits alone (no ``_``, no space, no other script's digits), within an
    int64: as node affinity and label selectors read ``Gt`` and ``Lt``.
    """
    if not _DECIMAL.fullmatch(text) or len(text.lstrip("+-").lstrip("0")) > 19:
        return None  # more digits than an int64 has (leading zeros are read)
    number = int(text)
    return number if -_INT64 <= number < _INT64 else None


@attrs.frozen
class Requirement:
    """One requirement: a label (or, with *field*, the node's name) against values."""

    key: str
    operator: str
    values: tuple[str, ...]
    field: bool = False

    def holds(self, name: str, labels: Mapping[str, str]) -> bool:
        """Whether the node *name* with *labels* meets it."""
        value = name if self.field else labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        if self.operator == "DoesNotExist":
            return value is None
        # Gt, Lt: the label and the one value as integers
        number = None if value is None else int64(value)
        bound = int64(self.values[0]) if len(self.values) == 1 else None
        if number is None or bound is None:
            return False
        return number > bound if self.operator == "Gt" else number < bound

    def selected(self, nodes: NodeLabels) -> set[str]:
        """The names of the *nodes* that meet it: what :meth:`holds` says of each, by set."""
        if self.field:
            if self.operator == "Exists":
                return set(nodes.names)
            if self.operator == "NotIn":
                return nodes.names - set(self.values)
            if self.operator == "In":
                return nodes.names & set(self.values)
            if self.operator == "DoesNotExist":
                return set()
            return {name for name in nodes.names if self.holds(name, {})}
        by_value = nodes.by_key.get(self.key, {})
        if self.operator in ("In", "NotIn"):
            found = set().union(*(by_value.get(value, ()) for value in set(self.values)))
            return found if self.operator == "In" else nodes.names - found
        labelled = set().union(*by_value.values())
        if self.operator == "Exists":
            return labelled
        if self.operator == "DoesNotExist":
            return nodes.names - labelled
        return set().union(
            *(named for value, named in by_value.items() if self.holds("", {self.key: value}))
        )

    @property
    def text(self) -> str:
        """``key in (a,b)``, ``key notin (a)``, ``key``, ``!key``, ``key > 5``, ``name=n``."""
        key = "name" if self.field else self.key
        if self.field and self.operator == "In" and len(self.values) == 1:
            return f"name={self.values[0]}"
        if self.operator in ("In", "NotIn"):
            return f"{key} {self.operator.lower()} ({','.join(self.values)})"
        if self.operator == "Exists":
            return key
        if self.operator == "DoesNotExist":
            return f"!{key}"
        return f"{key} {'>' if self.operator == 'Gt' else '<'} {','.join(self.values)}"


@attrs.frozen(cache_hash=True)
class NodeSelector:
    """A node selector, read: its terms, each a tuple of requirements.

    Its :attr:`text`, :attr:`node` and hash are worked out once: the same selector (every claim
    allocated on one node carries it) is read once and shared (:func:`read`), and the devices it
    places are counted by it (see :mod:`kdraexp.allocator.headroom`).
    """

    terms: tuple[tuple[Requirement, ...], ...]
    text: str = attrs.field(init=False, eq=False, repr=False)
    """Terms joined by `` || ``, each term's requirements by ``, ``."""
    node: str = attrs.field(init=False, eq=False, repr=False)
    """The one node it names (a single term: ``metadata.name`` in one name), else ""."""

    def __attrs_post_init__(self) -> None:
        text = " || ".join(", ".join(r.text for r in term) for term in self.terms)
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "node", _one_node(self.terms))

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        """Whether the node *name* with *labels* is one it selects."""
        return any(
            term and all(requirement.holds(name, labels) for requirement in term)
            for term in self.terms
        )

    def selected(self, nodes: NodeLabels) -> set[str]:
        """The names of the *nodes* it selects: what :meth:`matches` says of each, by set."""
        found: set[str] = set()
        for term in self.terms:
            if term:
                found |= set.intersection(*(requirement.selected(nodes) for requirement in term))
        return found


class NodeLabels:
    """Nodes by label key and value, so a selector is answered for all of them by set.

    Matching each node against each selector costs a call per node and selector: seconds for 64
    multi-host pools over 50,000 Nodes.  By set it costs what the selectors name.
    """

    def __init__(self, nodes: Iterable[tuple[str, Mapping[str, str]]]) -> None:
        self.names: set[str] = set()
        """Every node's name."""
        self.by_key: dict[str, dict[str, list[str]]] = {}
        """Per label key, per value, the nodes carrying it."""
        for name, labels in nodes:
            self.names.add(name)
            for key, value in labels.items():
                self.by_key.setdefault(key, {}).setdefault(value, []).append(name)


def _one_node(terms: tuple[tuple[Requirement, ...], ...]) -> str:
    if len(terms) == 1 and len(terms[0]) == 1:
        (only,) = terms[0]
        if only.field and only.operator == "In" and len(only.values) == 1:
            return only.values[0]
    return ""


def read(raw: msgspec.Raw) -> NodeSelector | None:
    """The node selector of *raw* (a field's undecoded JSON); None when absent or null.

    The last :data:`KEPT` read are kept by their JSON: claims allocated on one node, and a
    driver's slices, repeat the same selector.

    :raises Unreadable: for one that is not a node selector (an unknown operator, a field
        other than ``metadata.name``, a requirement without a key).
    """
    if not raw:
        return None
    return _read(bytes(raw))


KEPT = 1024
"""Selectors kept by their JSON (a few hundred bytes each)."""


@functools.lru_cache(maxsize=KEPT)
def _read(raw: bytes) -> NodeSelector | None:
    if raw == b"null":
        return None
    try:
        decoded = _DECODER.decode(raw)
    except (msgspec.DecodeError, RecursionError) as error:
        raise Unreadable(f"not a node selector: {error}") from None
    terms = []
    for term in decoded.node_selector_terms or ():
        requirements = []
        for field, found in ((False, term.match_expressions), (True, term.match_fields)):
            for one in found or ():
                if not one.key or one.operator not in OPERATORS:
                    raise Unreadable(
                        f"a requirement {one.key!r} {one.operator!r}: expected a key and one of "
                        f"{', '.join(sorted(OPERATORS))}"
                    )
                if field and one.key != NAME_FIELD:
                    raise Unreadable(f"a field requirement on {one.key!r}: only {NAME_FIELD}")
                requirements.append(
                    Requirement(one.key, one.operator, tuple(one.values or ()), field)
                )
        terms.append(tuple(requirements))
    return NodeSelector(tuple(terms))
