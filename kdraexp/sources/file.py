"""The offline source: the DRA kinds read from a file instead of an API server.

The file is what ``kubectl get resourceclaims,resourceslices,deviceclasses -A -o yaml`` writes
(``devicetaintrules`` and ``pods`` too, when ``--resources`` names them): a ``List``, or
multi-document YAML, or JSON.  An object found twice counts once, and an object is changed when
its content is, whatever its resourceVersion says.  Its status is checked at every scrape and
the file read and parsed again, once, when it changed (a file that failed fails again, unread,
until it changes): in a thread, so that a large file does not stop the exporter answering, and
within bounds (a regular file of at most
--max-response-bytes, YAML aliases expanding to at most :data:`EXPANSION` values).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import msgspec
import yaml
from twisted.internet.defer import Deferred, fail
from twisted.internet.interfaces import IReactorTime
from twisted.internet.threads import deferToThread
from twisted.python.failure import Failure

from kdraexp.dra import wire
from kdraexp.dra.listing import (
    DEFAULT_MAX_RESPONSE_BYTES,
    LIST_ORDER,
    Kind,
    ListError,
    Reader,
    Reason,
    ShapeError,
)
from kdraexp.store.reader import OBJECT_BYTES, OBJECT_SHARE, object_too_large, page_too_large
from kdraexp.util.aliases import expands_past
from kdraexp.util.files import read_regular
from kdraexp.util.singleflight import SingleFlight
from kdraexp.util.surrogates import Mended, marked, mend, unmended
from kdraexp.util.text import printable
from kdraexp.util.turns import feed

try:
    _Loader: type[Any] = yaml.CSafeLoader
except AttributeError:  # PyYAML built without libyaml
    _Loader = yaml.SafeLoader

YAML_SHARE = 32
"""A YAML file may be at most this share of ``--max-response-bytes`` (2 MiB by default): parsed,
YAML takes about 40 times its size (2 MB took 76 MiB, 8 MB 306 MiB); JSON, about 2.5 times."""
_JSON = re.compile(rb"\s*\{")
_LIST = msgspec.json.Decoder(wire.Page)
"""A JSON file as a list, its objects left as their JSON (one object alone has no items)."""
EXPANSION = 10_000_000
"""Values the parsed documents may hold once their aliases are followed (a "billion laughs"
file is a few hundred bytes that expand to billions)."""

Stamp = tuple[int, int, int]
Runner = Callable[..., Deferred[Any]]


@attrs.frozen
class _Parsed:
    """The file as last parsed: its stamp, and per kind its objects as JSON."""

    stamp: Stamp
    items: dict[str, list[msgspec.Raw | Mended]]


class FileSource:
    """Lists the DRA kinds from one file."""

    def __init__(
        self,
        path: str,
        clock: IReactorTime,
        limit: int = DEFAULT_MAX_RESPONSE_BYTES,
        run: Runner = deferToThread,
    ) -> None:
        self.path = path
        self._clock = clock
        self.limit = limit
        self._run = run
        """Runs the reading and parsing (in a thread; tests run it at once)."""
        self._parsed: _Parsed | None = None
        self._failed: tuple[Stamp, ListError] | None = None
        """The file as last found malformed: a 50 MB dump is not parsed again every scrape."""
        self._parsing: SingleFlight[_Parsed] = SingleFlight(self._parse, abandon=False)
        """A parse runs to its end even when the scrape that started it gave up (its deadline):
        the next scrape has the result."""

    async def fetch(self, kind: Kind, reader: Reader) -> int:
        """Hand every object of *kind* in the file to *reader*; return how many.

        :raises ListError: when the file cannot be read or holds something malformed.
        """
        parsed = self._parsed
        stamp = self._stamp()
        if parsed is None or parsed.stamp != stamp:
            if self._failed is not None and self._failed[0] == stamp:
                raise self._failed[1]
            parsed = await self._parsing()
        items = parsed.items[kind.kind]
        try:
            await feed(reader, items, self._clock)
        except ShapeError as error:
            raise self._error(kind, Reason.DECODE, str(error)) from None
        return len(items)

    def _stamp(self) -> Stamp:
        try:
            status = os.stat(self.path)
        except OSError as error:
            raise self._unreadable(error) from None
        return (status.st_mtime_ns, status.st_size, status.st_ino)

    def _parse(self) -> Deferred[_Parsed]:
        try:
            stamp = self._stamp()
        except ListError as error:
            return fail(error)
        parsing: Deferred[_Parsed] = self._run(self._load, stamp)

        def keep(parsed: _Parsed) -> _Parsed:
            self._parsed, self._failed = parsed, None
            return parsed

        def remember(failure: Failure) -> Failure:
            if isinstance(failure.value, ListError):
                self._failed = (stamp, failure.value)
            return failure

        return parsing.addCallbacks(keep, remember)

    def _load(self, stamp: Stamp) -> _Parsed:
        """Read, parse and sort the file (in a thread)."""
        try:
            content = read_regular(self.path, self.limit)
        except OSError as error:
            raise self._unreadable(error) from None
        if _JSON.match(content):
            listed = _json(content)  # ``-o json``: objects kept as JSON, decoded one at a time
            if listed is not None:
                return _Parsed(stamp, self._sort([{"items": _Decoded(self._bounded(listed))}]))
        if len(content) > self.limit // YAML_SHARE:
            raise self._error(
                None,
                Reason.TOO_LARGE,
                f"{self.path} is YAML of {len(content)} bytes, more than 1/{YAML_SHARE} of "
                f"--max-response-bytes={self.limit}: parsed, YAML takes about 40 times its size "
                "(write it with -o json, read within about 2.5 times its size)",
            )
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError as error:
            raise self._unreadable(error) from None
        del content
        try:
            documents = list(yaml.load_all(text, Loader=_Loader))
        except yaml.YAMLError as error:
            problem = getattr(error, "problem", None) or "malformed"
            mark = getattr(error, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            raise self._error(
                None, Reason.DECODE, f"{self.path} is not YAML or JSON: {problem}{where}"
            ) from None
        del text  # JSON has no aliases; YAML's may expand a small file into a huge one
        if expands_past(documents, EXPANSION):
            raise self._error(
                None,
                Reason.DECODE,
                f"{self.path}: its YAML aliases expand to more than {EXPANSION} values",
            )
        return _Parsed(stamp, self._sort(documents))

    def _bounded(self, items: list[msgspec.Raw | Mended]) -> list[msgspec.Raw | Mended]:
        """The JSON objects of the kinds listed, each within what a list may hold of one.

        Checked before any is decoded: decoded whole, a 46 MB slice took 545 MiB before the
        reader refused it.  Objects of other kinds are passed over unread.
        """
        wanted = {kind.kind: kind for kind in LIST_ORDER}
        kept = []
        counts: dict[str, int] = {}
        for item in items:
            raw, _ = unmended(item)
            try:
                known = wire.IDENTITY.decode(raw)
            except (msgspec.DecodeError, RecursionError):
                kept.append(item)  # _sort says what is wrong with it
                continue
            kind = wanted.get(known.kind or "")
            if kind is None:
                continue
            if len(raw) > self.limit // OBJECT_SHARE:
                name = (known.metadata.name if known.metadata else None) or "(no name)"
                raise object_too_large(kind, printable(name, 253), len(raw), self.limit)
            counts[kind.kind] = count = counts.get(kind.kind, 0) + 1
            if count > self.limit // OBJECT_BYTES:  # the file is one response of each kind
                raise page_too_large(kind, self.limit, "objects", OBJECT_BYTES)
            kept.append(item)
        return kept

    def _sort(self, documents: list[Any]) -> dict[str, list[msgspec.Raw | Mended]]:
        wanted = {kind.kind: kind for kind in LIST_ORDER}
        items: dict[str, list[msgspec.Raw | Mended]] = {name: [] for name in wanted}
        seen: set[tuple[str, str, str]] = set()
        for document in documents:
            if document is None:
                continue
            if not isinstance(document, dict):
                raise self._error(None, Reason.DECODE, f"{self.path}: a document is not a mapping")
            members = document.get("items") if "items" in document else [document]
            for item, lone in _counted(members):
                if not isinstance(item, dict):
                    raise self._error(
                        None, Reason.DECODE, f"{self.path}: a list item is not a mapping"
                    )
                kind = item.get("kind")
                if kind not in wanted:
                    continue
                versions = wanted[kind].api_versions()
                if item.get("apiVersion") not in versions:
                    raise self._error(
                        wanted[kind],
                        Reason.DECODE,
                        f"{kind} {_name_of(item)}: apiVersion {item.get('apiVersion')!r} "
                        f"is not {' or '.join(versions)}",
                    )
                identity = (kind, _namespace_of(item), _name_of(item))
                if identity in seen:
                    continue  # the same object twice: the first one counts
                seen.add(identity)
                raw = msgspec.Raw(_versioned(item))
                items[kind].append(Mended(raw, lone) if lone else raw)
        return items

    def _unreadable(self, error: Exception) -> ListError:
        reason = getattr(error, "strerror", None) or str(error)
        return self._error(None, Reason.FILE_UNREADABLE, f"cannot read {self.path}: {reason}")

    def _error(self, kind: Kind | None, reason: str, message: str) -> ListError:
        resource = kind.plural if kind else f"file {self.path}"
        return ListError(resource, reason, None, message, public=True)


def _json(content: bytes) -> list[msgspec.Raw | Mended] | None:
    """The objects of a JSON file, those with lone surrogates read as U+FFFD marked.

    None for what is not JSON (YAML in flow style, or broken JSON: the YAML parser says where).
    """
    try:
        listed = _LIST.decode(content)
    except (msgspec.DecodeError, RecursionError):
        content, found = mend(content)
        if not found:
            return None
        try:
            listed = _LIST.decode(content)
        except (msgspec.DecodeError, RecursionError):
            return None
        items = listed.items if listed.items is not None else [msgspec.Raw(content)]
        return marked(content, items, found)
    return list(listed.items) if listed.items is not None else [msgspec.Raw(content)]


class _Decoded:
    """Objects kept as their JSON, each decoded as it is reached: one held at a time."""

    def __init__(self, items: list[msgspec.Raw | Mended]) -> None:
        self._items = items

    def counted(self) -> Iterator[tuple[Any, int]]:
        """Each object decoded, and the lone surrogates read as U+FFFD in it."""
        for item in self._items:
            raw, lone = unmended(item)
            try:
                yield msgspec.json.decode(raw), lone
            except RecursionError:
                yield None, 0  # nested past what can be decoded: not a mapping


def _counted(members: Any) -> Iterator[tuple[Any, int]]:
    """A document's objects, each with the lone surrogates read as U+FFFD in it."""
    if isinstance(members, _Decoded):
        return members.counted()
    return ((member, 0) for member in members or ())


def _versioned(item: dict[str, Any]) -> bytes:
    """The object as JSON, its resourceVersion replaced by a digest of its content.

    A file is edited by hand, often keeping the resourceVersion of the dump it came from: the
    digest makes any edit a new version (so it is read again) and an untouched object the same
    one (so it keeps its rows without being read again).
    """
    metadata = item.get("metadata")
    if not isinstance(metadata, dict):
        return msgspec.json.encode(item)
    digest = hashlib.blake2b(msgspec.json.encode(item), digest_size=12).hexdigest()
    return msgspec.json.encode({**item, "metadata": {**metadata, "resourceVersion": digest}})


def _name_of(item: Any) -> str:
    return _metadata_field(item, "name")


def _namespace_of(item: Any) -> str:
    return _metadata_field(item, "namespace")


def _metadata_field(item: Any, field: str) -> str:
    metadata = item.get("metadata") if isinstance(item, dict) else None
    return str(metadata.get(field, "")) if isinstance(metadata, dict) else ""
