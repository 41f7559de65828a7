"""Which devices a DeviceClass selects: its CEL selectors, evaluated as Kubernetes evaluates them.

Only claims name a DeviceClass; devices do not.  To say how many devices of a class are free, each
class's ``spec.selectors[].cel.expression`` is evaluated against each device in the Kubernetes DRA
environment (:mod:`kdraexp.cel.runtime`), in a process of its own that bounds each evaluation
in time and memory (:mod:`kdraexp.cel.process`).

Evaluations are cached by what they read.  Each expression is scanned for the device fields it
reads (``device.attributes['gpu.nvidia.com'].type``...); a device's *projection* is the values of
those fields, and devices with the same projection give the same answer (CEL is pure), so a
cluster of 64,000 GPUs of three types costs a handful of evaluations.  An expression that uses
``device`` in a way the scan cannot follow reads the whole device.  Devices are matched a slice
at a time: one request to the process for what the cache does not know.

An expression that cannot be compiled or evaluated matches nothing; the collection counts it.  So
does one that had its budget once (it stays over budget while it exists).  Matching that would
ask for more than :data:`EVALUATIONS` evaluations in one collection, beyond :data:`PER_DEVICE`
for each device (classes x distinct devices beyond what any cluster needs), raises
:class:`TooManyEvaluations`, saying what each expression asked for: the class index then leaves
the costliest classes unmatched for the rest of the collection (:data:`UNMATCHED`), rather than
pay with the exporter's memory or fail the list.  A slice read in that collection keeps its
answers until it or the classes change, as every slice does.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import threading
import time
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, Protocol

import attrs
import msgspec

from kdraexp.cel.native import Native, native
from kdraexp.cel.process import EvaluationError, Evaluator, OverBudget
from kdraexp.cel.tokens import literal, tokens
from kdraexp.cel.values import ABSENT
from kdraexp.util.serial import serialised


def _engine_installed() -> bool:
    if importlib.util.find_spec("cel_expr_python") is not None:
        return True  # Google's (x86_64, aarch64)
    try:
        importlib.metadata.distribution("common-expression-language")  # Rust's (the others)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


AVAILABLE = _engine_installed()
"""Whether an engine is installed to evaluate selectors in (:mod:`kdraexp.cel.worker`)."""

ANSWERS = 65536
"""Answers kept, over all expressions; when full, the cache starts over."""
EVALUATIONS = 262144
"""Evaluations one collection may ask for, beyond :data:`PER_DEVICE` for each device read."""
PER_DEVICE = 8
"""Evaluations each device read adds to its collection's budget: eight classes that each read
every device whole (no cache helps) fit a cluster of any size."""
COSTLY = 0.01
"""Seconds one match may take before matching counts as costly."""

UNEVALUATED = "cannot evaluate selectors: "
"""How the error begins when the evaluation process cannot be had."""
UNMATCHED = "not matched: "
"""How the error begins for a class left out of a collection whose evaluations ran out."""

_ENCODER = msgspec.msgpack.Encoder()


def transient(error: str) -> bool:
    """Whether *error* may not hold next time (the process was missing)."""
    return error.startswith(UNEVALUATED)


class TooManyEvaluations(Exception):
    """Matching would ask for more evaluations than its collection has left."""

    def __init__(self, wanted: dict[str, int]) -> None:
        self.wanted = wanted
        """Per expression, the evaluations asked for at once."""
        super().__init__(
            f"matching devices needs more selector evaluations than one collection has "
            f"({EVALUATIONS} and {PER_DEVICE} per device; {sum(wanted.values())} at once)"
        )


class DeviceFields(Protocol):
    """What a device offers to selectors, in CEL values (see :mod:`kdraexp.cel.values`)."""

    driver: str
    allow_multiple_allocations: bool

    def attribute(self, domain: str, name: str) -> Any:
        """The attribute's CEL value, or ABSENT."""

    def capacity(self, domain: str, name: str) -> Any:
        """The capacity as a CEL quantity, or ABSENT."""

    def attribute_domain(self, domain: str) -> dict[str, Any]:
        """Every attribute of *domain*."""

    def capacity_domain(self, domain: str) -> dict[str, Any]:
        """Every capacity of *domain*."""

    def domains(self) -> Iterable[str]:
        """Every domain of the device's attributes and capacities."""

    def projection(self, path: Path) -> Hashable:
        """What identifies the value at *path*: equal for equal values (undecoded JSON will do)."""


# --- Reading what an expression reads --------------------------------------------------------

Path = tuple[str, ...]
"""``("driver",)``, ``("attributes", domain)`` or ``("attributes", domain, name)`` (or capacity)."""


def device_paths(
    expression: str, found: list[tuple[str, str]] | None = None
) -> tuple[Path, ...] | None:
    """The device fields *expression* reads, or None when it reads the device some other way.

    Every use of the variable ``device`` must be one of ``device.driver``,
    ``device.allowMultipleAllocations``, ``device.attributes['<domain>']`` or
    ``device.capacity['<domain>']``, optionally followed by ``.<name>`` or ``['<name>']``.
    *found*: its tokens, where they were read already.
    """
    found = tokens(expression) if found is None else found
    paths: list[Path] = []
    for index, token in enumerate(found):
        if token != ("ident", "device") or (index and found[index - 1][1] == "."):
            continue
        rest = found[index + 1 : index + 9] + [("end", "")] * 8
        if rest[0][1] != "." or rest[1][0] != "ident":
            return None
        field = rest[1][1]
        if field in ("driver", "allowMultipleAllocations"):
            paths.append((field,))
            continue
        domain = literal(rest[3])
        if field not in ("attributes", "capacity") or rest[2][1] != "[" or domain is None:
            return None
        if rest[4][1] != "]":
            return None
        name = None
        if rest[5][1] == "." and rest[6][0] == "ident" and rest[7][1] != "(":
            name = rest[6][1]
        elif rest[5][1] == "[" and literal(rest[6]) is not None and rest[7][1] == "]":
            name = literal(rest[6])
        paths.append((field, domain) if name is None else (field, domain, name))
    return tuple(dict.fromkeys(paths))


def string_literals(expression: str, found: list[tuple[str, str]] | None = None) -> list[str]:
    """Every plain string literal (domains looked up in a device the scan cannot follow)."""
    found = tokens(expression) if found is None else found
    return [text for text in map(literal, found) if text is not None]


def read_selector(expression: str) -> Selector:
    """The expression and what it reads, its tokens read once (10 Ki characters take a while)."""
    found = tokens(expression)
    return Selector(
        expression,
        device_paths(expression, found),
        tuple(string_literals(expression, found)),
        native(expression, found),
    )


# --- Matching --------------------------------------------------------------------------------


@attrs.frozen
class Selector:
    """One expression and the device fields it reads (None: the whole device)."""

    expression: str
    paths: tuple[Path, ...] | None
    literals: tuple[str, ...]
    native: Native | None = None
    """The expression evaluated here, where it is simple enough (see :mod:`.native`)."""


@attrs.frozen
class CompiledClass:
    """A class's selectors, compiled; *error* says why it cannot be evaluated, if it cannot."""

    selectors: tuple[Selector, ...] = ()
    error: str | None = None

    @property
    def evaluated_here(self) -> bool:
        """Whether matching it asks the process nothing, as far as the selectors tell.

        True without selectors, where it cannot be evaluated, or where every selector is of
        the simple form (:mod:`.native`; one asks the process only for a device it cannot
        answer for).
        """
        return self.error is not None or all(one.native is not None for one in self.selectors)


Request = tuple[CompiledClass, DeviceFields]
"""A class's selectors and a device to match them against."""


class Matcher:
    """Evaluates selectors; lives as long as the exporter, so its caches do too."""

    def __init__(self, evaluator: Evaluator | None = None) -> None:
        self.evaluator = evaluator or Evaluator()
        """The evaluation process, its own unless one is given: started when an expression
        first needs it (one of the simple form of :mod:`.native` never does)."""
        self._compiled: dict[tuple[str, ...], CompiledClass] = {}
        self._answers: dict[tuple[str, Hashable], bool | str] = {}
        self._over: dict[str, str] = {}
        """Expressions that had their budget once, and how: they match nothing from then on."""
        self._unkept: dict[tuple[str, Hashable], bool | str] = {}
        self._left = EVALUATIONS
        self.spent: dict[str, int] = {}
        """Per expression, the evaluations this collection asked for."""
        self.collection = 0
        """Which collection this is: one more each :meth:`new_collection`."""
        self.costly = False
        """Whether one match took more than :data:`COSTLY` seconds in the last collection (a
        calm one matches nothing): lists are then read off the reactor (see ``KindReader``)."""
        self._slow = False
        self._lock = threading.RLock()
        """Lists are read in threads; a cancelled one may still be matching."""
        self._budget = threading.Lock()
        """Held for the collection's counts alone: the reactor, starting a collection, never
        waits for a match in a thread (see :attr:`_lock`)."""
        self._kept_classes: set[tuple[str, ...]] | None = None
        """The classes :meth:`forget` keeps, until the next compile drops the rest."""
        self.evaluations = 0
        """Evaluations asked for, over the matcher's life."""

    @property
    def left(self) -> int:
        """Evaluations this collection may still ask for."""
        return self._left

    @property
    def kept(self) -> int:
        """How many answers are cached."""
        return len(self._answers)

    def close(self) -> None:
        """End the evaluation process (the source stops)."""
        self.evaluator.close()

    def idle(self, after: float) -> bool:
        """End the evaluation process if idle for *after* seconds (started again on demand)."""
        return self.evaluator.idle(after)

    def new_collection(self) -> None:
        """A new collection (a new list; in watch mode, a new object): a new budget."""
        with self._budget:
            self._left = EVALUATIONS
            self.spent = {}
            self.collection += 1

    def devices_read(self, count: int) -> None:
        """*count* more devices are matched in this collection: :data:`PER_DEVICE` more each."""
        with self._budget:
            self._left += PER_DEVICE * count

    def collected(self) -> None:
        """A collection is complete: :attr:`costly` says whether its matching was."""
        with self._budget:
            self.costly, self._slow = self._slow, False

    def compiled(self, expressions: tuple[str, ...]) -> CompiledClass | None:
        """The class as compiled already, or None: never compiles, nor waits for the lock."""
        return self._compiled.get(expressions)

    @serialised
    def compile(self, expressions: tuple[str, ...]) -> CompiledClass:
        """Compile a class's selector expressions (cached by their text)."""
        return self.compile_all([expressions])[0]

    @serialised
    def compile_all(self, classes: Sequence[tuple[str, ...]]) -> list[CompiledClass]:
        """Compile each class's selector expressions: one request for all that are new.

        An expression :mod:`.native` evaluates needs no compiling: a class of those alone is
        made without the process, whether it can start or not.
        """
        self._drop_forgotten()
        new = [e for e in dict.fromkeys(classes) if e not in self._compiled]
        refusals: dict[str, str | OverBudget | None] = {}
        failed = None
        read = {
            text: read_selector(text)
            for text in dict.fromkeys(text for expressions in new for text in expressions)
        }
        texts = [text for text, one in read.items() if one.native is None]
        if texts and AVAILABLE:
            try:
                refusals = dict(zip(texts, self.evaluator.compile(texts), strict=True))
            except EvaluationError as error:
                failed = f"{UNEVALUATED}{error}"
        made = {
            expressions: self._compiled_class(expressions, refusals, failed, read)
            for expressions in new
        }
        for expressions, compiled in made.items():
            if compiled.error is None or not transient(compiled.error):
                self._compiled[expressions] = compiled
        return [self._compiled.get(expressions) or made[expressions] for expressions in classes]

    def _compiled_class(
        self,
        expressions: tuple[str, ...],
        refusals: dict[str, str | OverBudget | None],
        failed: str | None,
        read: dict[str, Selector],
    ) -> CompiledClass:
        if not AVAILABLE:
            return CompiledClass(error="CEL is not available on this platform")
        if not expressions:
            return CompiledClass()
        if failed is not None and any(read[text].native is None for text in expressions):
            return CompiledClass(error=failed)
        for index, expression in enumerate(expressions):
            refused = refusals.get(expression)
            if isinstance(refused, OverBudget):
                self._over[expression] = refused.reason
                return CompiledClass(error=f"selector {index}: {refused.reason}")
            if refused is not None:
                return CompiledClass(error=f"selector {index}: {refused}")
        return CompiledClass(tuple(read[expression] for expression in expressions))

    def forget(self, keep: Iterable[tuple[str, ...]]) -> None:
        """Drop what was cached for classes that no longer exist, at the next compile.

        Never waits for a match in a thread, which reads what it would drop.
        """
        self._kept_classes = set(keep)

    def _drop_forgotten(self) -> None:
        kept, self._kept_classes = self._kept_classes, None
        if kept is None:
            return
        for expressions in [key for key in self._compiled if key not in kept]:
            del self._compiled[expressions]
        texts = {text for expressions in kept for text in expressions}
        for text in [text for text in self._over if text not in texts]:
            del self._over[text]

    @serialised
    def match_all(self, requests: Sequence[Request], budgeted: bool = True) -> list[bool | str]:
        """Each request's answer, asking the process once per selector position at most.

        A device's selectors are evaluated in order and the first answer other than True is
        the class's (as Kubernetes does: a later selector is not evaluated after a False).
        Unless *budgeted* is false (the caller has a budget of its own), what is asked for
        counts against this collection's :data:`EVALUATIONS`.

        :raises TooManyEvaluations: when what is asked for does not fit what is left of them.
        """
        began, waited = time.monotonic(), self._waited()
        try:
            return self._match_all(requests, budgeted)
        finally:
            # The wait for a process to start is no measure of what matching costs.
            if time.monotonic() - began - (self._waited() - waited) > COSTLY:
                with self._budget:
                    self._slow = self.costly = True

    def _waited(self) -> float:
        return self.evaluator.waited

    def _match_all(self, requests: Sequence[Request], budgeted: bool) -> list[bool | str]:
        answers: list[bool | str | None] = [
            compiled.error if compiled.error is not None else None for compiled, _ in requests
        ]
        position = 0
        while True:
            round_ = [
                (index, compiled.selectors[position], device)
                for index, (compiled, device) in enumerate(requests)
                if answers[index] is None and position < len(compiled.selectors)
            ]
            for index, (compiled, _) in enumerate(requests):
                if answers[index] is None and position >= len(compiled.selectors):
                    answers[index] = True
            if not round_:
                return [answer if answer is not None else True for answer in answers]
            evaluated = self._evaluate(round_, budgeted)
            for (index, _, _), answer in zip(round_, evaluated, strict=True):
                if answer is not True:
                    answers[index] = answer
            position += 1

    def _evaluate(
        self, round_: list[tuple[int, Selector, DeviceFields]], budgeted: bool
    ) -> list[bool | str]:
        """One selector per request, from the cache or else the process."""
        found: list[bool | str | None] = []
        keys: list[tuple[str, Hashable]] = []
        wanted: dict[tuple[str, Hashable], tuple[int, int]] = {}
        expressions: dict[str, int] = {}
        devices: list[dict[str, Any]] = []
        numbered: dict[Hashable, int] = {}
        """Devices as read: 1,000 classes reading one attribute read 128 devices alike."""
        projections: dict[tuple[int, Any], tuple[dict[str, Any] | None, Hashable]] = {}
        for _, selector, device in round_:
            over = self._over.get(selector.expression)
            if over is not None:
                found.append(over)
                keys.append(("", None))
                continue
            seen = (id(device), selector.paths)
            known = projections.get(seen)
            if known is None:
                known = projections[seen] = _context(selector, device)
            context, projection = known
            key = (selector.expression, projection)
            answer = self._answers.get(key)
            found.append(answer)
            keys.append(key)
            if answer is None and selector.native is not None:
                answer = selector.native(device)
                if answer is not None:  # evaluated here, kept as the process's answers are
                    self._keep(key, answer)
                    found[-1] = answer
            if answer is None and key not in wanted:
                index = expressions.setdefault(selector.expression, len(expressions))
                read = (selector.paths, projection)
                number = numbered.get(read)
                if number is None:
                    number = numbered[read] = len(devices)
                    devices.append(context if context is not None else _build(selector, device))
                wanted[key] = (index, number)
        if wanted:
            if budgeted:
                asked: dict[str, int] = {}
                for expression, _ in wanted:
                    asked[expression] = asked.get(expression, 0) + 1
                with self._budget:
                    if len(wanted) > self._left:
                        raise TooManyEvaluations(asked)
                    self._left -= len(wanted)
                    for expression, count in asked.items():
                        self.spent[expression] = self.spent.get(expression, 0) + count
            self._ask(list(expressions), devices, wanted)
        answers = [
            answer if answer is not None else self._known(key)
            for answer, key in zip(found, keys, strict=True)
        ]
        self._unkept.clear()
        return answers

    def _known(self, key: tuple[str, Hashable]) -> bool | str:
        """The answer just asked for (kept or not), or why there is none."""
        for answers in (self._answers, self._unkept):
            answer = answers.get(key)
            if answer is not None:
                return answer
        return self._over[key[0]]

    def _keep(self, key: tuple[str, Hashable], answer: bool) -> None:
        if len(self._answers) >= ANSWERS:
            self._answers.clear()
        self._answers[key] = answer

    def _ask(
        self,
        expressions: list[str],
        devices: list[dict[str, Any]],
        wanted: dict[tuple[str, Hashable], tuple[int, int]],
    ) -> None:
        """Evaluate what the cache lacks."""
        keys = list(wanted)
        self.evaluations += len(keys)
        try:
            answers = self.evaluator.evaluate(expressions, devices, [wanted[key] for key in keys])
        except EvaluationError as error:
            answers = [f"{UNEVALUATED}{error}"] * len(keys)
        if len(self._answers) + len(keys) > ANSWERS:
            self._answers.clear()
        for key, answer in zip(keys, answers, strict=True):
            if isinstance(answer, OverBudget):
                self._over[key[0]] = answer.reason
            elif isinstance(answer, str) and transient(answer):
                self._unkept[key] = answer  # asked again next time
            elif len(self._answers) < ANSWERS:
                self._answers[key] = answer
            else:
                self._unkept[key] = answer  # answered for this request only


def _context(selector: Selector, device: DeviceFields) -> tuple[dict[str, Any] | None, Hashable]:
    """(the device as the selector reads it if that was needed to key it, its cache key)."""
    if selector.paths is None:
        context = _whole(device, selector.literals)
        return context, hashlib.blake2b(_ENCODER.encode(context), digest_size=16).digest()
    return None, tuple([device.projection(path) for path in selector.paths])


def union_paths(compiled: Iterable[CompiledClass]) -> tuple[Path, ...] | None:
    """Every path the classes' selectors read, or None when one reads the whole device."""
    paths: dict[Path, None] = {}
    for one in compiled:
        for selector in one.selectors:
            if selector.paths is None:
                return None
            paths.update(dict.fromkeys(selector.paths))
    return tuple(paths)


def _read(device: DeviceFields, path: Path) -> Any:
    if path == ("driver",):
        return device.driver
    if path == ("allowMultipleAllocations",):
        return device.allow_multiple_allocations
    field, domain = path[0], path[1]
    if len(path) == 2:
        return (
            device.attribute_domain(domain)
            if field == "attributes"
            else device.capacity_domain(domain)
        )
    if field == "attributes":
        return device.attribute(domain, path[2])
    return device.capacity(domain, path[2])


def _whole(device: DeviceFields, literals: tuple[str, ...]) -> dict[str, Any]:
    # An unknown domain reads as an empty map in Kubernetes; string literals stand in for the
    # domains the expression may look up.
    domains = [*device.domains(), *literals]
    return {
        "driver": device.driver,
        "allowMultipleAllocations": device.allow_multiple_allocations,
        "attributes": {domain: device.attribute_domain(domain) for domain in domains},
        "capacity": {domain: device.capacity_domain(domain) for domain in domains},
    }


def _build(selector: Selector, device: DeviceFields) -> dict[str, Any]:
    if selector.paths is None:
        return _whole(device, selector.literals)
    context: dict[str, Any] = {
        "driver": device.driver,
        "allowMultipleAllocations": device.allow_multiple_allocations,
        "attributes": {},
        "capacity": {},
    }
    for path in selector.paths:
        if len(path) < 2:
            continue
        maps = context[path[0]]
        if len(path) == 2:
            maps[path[1]] = dict(_read(device, path))
            continue
        domain = maps.setdefault(path[1], {})
        value = _read(device, path)
        if value is not ABSENT:
            domain[path[2]] = value
    return context
