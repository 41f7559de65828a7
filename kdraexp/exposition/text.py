"""The text of a scrape: the DRA families, the exporter's own metrics, content negotiation.

The DRA families are written by a direct encoder (about ten times faster than building
prometheus_client families for hundreds of thousands of samples;
:mod:`kdraexp.exposition.collector` offers the same rows as a prometheus_client Collector, and a
test proves both write the same samples). The original's seven families come out as the Go
original writes them, byte for byte: families sorted by name, samples sorted by labels, labels in
alphabetical order, values in Go's shortest format (``1``, ``2.5``, ``1.073741824e+09``).  The
exporter's own metrics are small and go through prometheus_client's encoders.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator
from decimal import Decimal

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from kdraexp.families.family import Family, Row
from kdraexp.store.collection import Collection

OPENMETRICS_EOF = b"# EOF\n"
LINES_PER_CHUNK = 1024


def format_value(value: float) -> str:
    """Format *value* as client_golang does: ``strconv.FormatFloat(value, 'g', -1, 64)``.

    That is the shortest decimal that reads back as the same float, in exponent form when the
    decimal exponent is below -4 or at least 6.
    """
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    sign, digit_tuple, exponent = Decimal(repr(value)).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    point = len(digits) + int(exponent)  # digits before the decimal point
    prefix = "-" if sign else ""
    if point - 1 < -4 or point - 1 >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{prefix}{mantissa}e{'-' if point < 1 else '+'}{abs(point - 1):02d}"
    if point <= 0:
        return f"{prefix}0.{'0' * -point}{digits}"
    if len(digits) <= point:
        return prefix + digits + "0" * (point - len(digits))
    return f"{prefix}{digits[:point]}.{digits[point:]}"


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def header(family: Family) -> bytes:
    """A family's ``# HELP`` and ``# TYPE`` lines."""
    name = family.name
    return f"# HELP {name} {_escape_help(family.help)}\n# TYPE {name} {family.type}\n".encode()


def encode_family(family: Family, rows: Iterable[Row]) -> Iterator[bytes]:
    """One family's exposition in chunks of at most LINES_PER_CHUNK samples.

    The text format 0.0.4 and OpenMetrics 1.0 write gauges the same way, so one encoder serves
    both (OpenMetrics adds ``# EOF`` after the last family, which :func:`tail` writes).  While
    the lines of one of the original's families are gathered to be sorted, an empty chunk comes
    every LINES_PER_CHUNK lines: a point where the caller may give the reactor a turn.
    """
    yield header(family)
    written: Iterable[str] = lines(family, rows)
    if family.original:
        gathered = []
        for line in written:
            gathered.append(line)
            if len(gathered) % LINES_PER_CHUNK == 0:
                yield b""
        written = sorted(gathered)  # samples sorted by labels, as the original writes them
    yield from chunks(written)


def lines(family: Family, rows: Iterable[Row]) -> Iterator[str]:
    """One sample line per row, in the rows' order."""
    formatted: dict[float, str] = {}

    def value(number: float) -> str:
        text = formatted.get(number)
        if text is None:
            text = formatted[number] = format_value(number) + "\n"
        return text

    prefix, known = family.line_prefix, formatted.get
    return (prefix(row) + (known(row[-1]) or value(row[-1])) for row in rows)


def chunks(written: Iterable[str]) -> Iterator[bytes]:
    """Lines joined LINES_PER_CHUNK at a time (the last chunk may be empty)."""
    lines = iter(written)
    while True:
        gathered = list(itertools.islice(lines, LINES_PER_CHUNK))
        yield "".join(gathered).encode()
        if len(gathered) < LINES_PER_CHUNK:
            return


def encode_collection(collection: Collection) -> Iterator[bytes]:
    """Every family of *collection*, in order, in chunks."""
    for family, rows in collection.families():
        yield from encode_family(family, rows)


def tail(accept: str | None) -> tuple[bytes, str]:
    """What follows the DRA families, and the content type.

    OpenMetrics when *accept* asks for it (then the body ends with ``# EOF``), else the text
    format 0.0.4 (then nothing follows).
    """
    _, content_type = choose_encoder(accept or "")
    return (OPENMETRICS_EOF if _openmetrics(content_type) else b""), content_type


def encode_registry(registry: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    """A prometheus_client registry in the format *accept* asks for, and the content type."""
    encoder, content_type = choose_encoder(accept or "")
    text = encoder(registry)
    if _openmetrics(content_type) and not text.endswith(OPENMETRICS_EOF):
        text += OPENMETRICS_EOF
    return text, content_type


def _openmetrics(content_type: str) -> bool:
    return content_type.startswith("application/openmetrics-text")


def gzip_accepted(accept_encoding: str | None) -> bool:
    """Whether an ``Accept-Encoding`` header allows gzip (and does not refuse it with q=0)."""
    for part in (accept_encoding or "").split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            quality = params.strip()
            if quality.startswith("q="):
                try:
                    return float(quality[2:]) > 0
                except ValueError:
                    return False
            return True
    return False
