"""The Kubernetes DRA CEL environment on the ``cel`` package (common-expression-language, Rust).

Where Google's runtime has no wheel (ppc64le, s390x, riscv64), the evaluation process
(:mod:`kdraexp.cel.worker`) uses this engine instead: the same ``device`` variable, the
Kubernetes libraries and the string extension from :mod:`kdraexp.cel.library`, registered by
name (a member function gets its receiver first).  The package's ``__init__`` imports its
command line (typer, rich: 30 MiB); only its extension module is loaded here (3 MiB).
"""

from __future__ import annotations

import glob
import importlib.machinery
import importlib.util
import os
from typing import Any

from kdraexp.cel.library import FUNCTIONS, STRINGS, one_line


def _extension() -> Any:
    """The ``cel.cel`` extension module, without the package's ``__init__``.

    :raises ImportError: when the package is not installed.
    """
    spec = importlib.util.find_spec("cel")
    places = list(spec.submodule_search_locations or []) if spec is not None else []
    found = [path for place in places for path in glob.glob(os.path.join(place, "cel.*.so"))]
    if not found:
        raise ImportError("common-expression-language is not installed")
    loader = importlib.machinery.ExtensionFileLoader("cel.cel", found[0])
    module_spec = importlib.util.spec_from_file_location("cel.cel", found[0], loader=loader)
    if module_spec is None:
        raise ImportError("common-expression-language's extension cannot be loaded")
    module = importlib.util.module_from_spec(module_spec)
    loader.exec_module(module)
    return module


_cel = _extension()
_FUNCTIONS = {**STRINGS, **FUNCTIONS}
NAME = "common-expression-language"


def compile_selector(expression: str) -> Any:
    """The compiled program.

    :raises Exception: whatever the engine raises for an expression it refuses.
    """
    return _cel.compile(expression)


def evaluate(program: Any, device: dict[str, Any]) -> bool | str:
    """Whether *device* satisfies *program*, or why that cannot be said."""
    try:
        value = program.execute(_cel.Context(variables={"device": device}, functions=_FUNCTIONS))
    except MemoryError:
        raise
    except KeyError as error:  # worded as Google's runtime words it
        return one_line(f"Key not found in map: {error.args[0] if error.args else ''}")
    except Exception as error:  # anything the engine or a library function raises
        text = f"{type(error).__name__}: {error}"
        if "failed: MemoryError" in text:  # a library function's, which the engine wraps
            raise MemoryError from None
        return one_line(text)
    if isinstance(value, bool):
        return value
    return f"not a bool: {value!r}"
