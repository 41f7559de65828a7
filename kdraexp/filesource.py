"""The offline source: the DRA kinds read from a file instead of an API server.

The file is what ``kubectl get resourceclaims,resourceslices,deviceclasses -A -o yaml`` writes
(a ``List``), or multi-document YAML, or JSON; an object found twice counts once.  Its status is
checked at every scrape and the file parsed again whenever it changed, so a scrape always
reflects the file as it is.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec
import yaml

from kdraexp.listing import KINDS, Kind, ListError, Reader, Reason, ShapeError

try:
    _Loader: type[Any] = yaml.CSafeLoader
except AttributeError:  # PyYAML built without libyaml
    _Loader = yaml.SafeLoader


class FileSource:
    """Lists the DRA kinds from one file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._items: dict[str, list[Any]] = {}

    async def fetch(self, kind: Kind, reader: Reader) -> int:
        """Hand every object of *kind* in the file to *reader*; return how many.

        :raises ListError: when the file cannot be read or holds something malformed.
        """
        items = self._objects()[kind.kind]
        encoded = []
        version = "file:{}:{}:{}".format(*(self._stamp or ()))
        for item in items:
            metadata = item.get("metadata")
            if isinstance(metadata, dict) and not metadata.get("resourceVersion"):
                # A dump without versions: the file's own version stands in, so an object keeps
                # its rows while the file is unchanged.
                item = {**item, "metadata": {**metadata, "resourceVersion": version}}
            encoded.append(msgspec.Raw(msgspec.json.encode(item)))
        try:
            reader.page(encoded)
        except ShapeError as error:
            raise self._error(kind, Reason.DECODE, str(error)) from None
        return len(encoded)

    def _objects(self) -> dict[str, list[Any]]:
        try:
            status = os.stat(self.path)
            stamp = (status.st_mtime_ns, status.st_size, status.st_ino)
            if stamp == self._stamp:
                return self._items
            with open(self.path, encoding="utf-8") as file:
                text = file.read()
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or str(error)
            raise self._error(
                None, Reason.FILE_UNREADABLE, f"cannot read {self.path}: {reason}"
            ) from None
        try:
            documents = list(yaml.load_all(text, Loader=_Loader))
        except yaml.YAMLError as error:
            message = " ".join(str(error).split())
            raise self._error(
                None, Reason.DECODE, f"{self.path} is not YAML or JSON: {message}"
            ) from None
        self._items = self._sort(documents)
        self._stamp = stamp
        return self._items

    def _sort(self, documents: list[Any]) -> dict[str, list[Any]]:
        wanted = {kind.kind: kind for kind in KINDS}
        items: dict[str, list[Any]] = {name: [] for name in wanted}
        seen: set[tuple[str, str, str]] = set()
        for document in documents:
            if document is None:
                continue
            if not isinstance(document, dict):
                raise self._error(None, Reason.DECODE, f"{self.path}: a document is not a mapping")
            members = document.get("items") if "items" in document else [document]
            for item in members or ():
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
                items[kind].append(item)
        return items

    def _error(self, kind: Kind | None, reason: str, message: str) -> ListError:
        resource = kind.plural if kind else f"file {self.path}"
        return ListError(resource, reason, None, message, public=True)


def _name_of(item: Any) -> str:
    return _metadata_field(item, "name")


def _namespace_of(item: Any) -> str:
    return _metadata_field(item, "namespace")


def _metadata_field(item: Any, field: str) -> str:
    metadata = item.get("metadata") if isinstance(item, dict) else None
    return str(metadata.get(field, "")) if isinstance(metadata, dict) else ""
