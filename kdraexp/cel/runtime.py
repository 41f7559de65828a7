"""The Kubernetes DRA CEL environment on Google's runtime: ``device`` and the libraries.

``device.driver``, ``device.attributes[domain].name``, ``device.capacity[domain].name`` as
quantities, ``device.allowMultipleAllocations``, the ``quantity()`` and ``semver()`` libraries
Kubernetes adds, and the string extension.  Imported by the evaluation process only
(:mod:`kdraexp.cel.worker`): the exporter itself never loads the runtime.

Kubernetes declares ``device`` as an object with typed fields; this runtime declares no object
type but protobuf messages, which cannot hold a map of maps.  So each field is a variable of its
own, named as CEL names a field: the checker resolves ``device.attributes`` to the variable of
that name, typed as Kubernetes types the field.  ``exists()`` over a domain's attributes then
compiles, and ``device.driver == 1`` does not, as in Kubernetes.  The runtime reads
``has(device.driver)`` as the field's value, not its presence; every device has its four
fields, so such a test is compiled as ``true``, Kubernetes' answer.
"""

from __future__ import annotations

from typing import Any

from cel_expr_python import cel as _cel
from cel_expr_python.ext import ext_strings

from kdraexp.cel.library import FUNCTIONS, one_line
from kdraexp.cel.tokens import located

FIELDS = ("driver", "allowMultipleAllocations", "attributes", "capacity")
"""The fields of ``device``, which every device has."""
_VARIABLES = {field: f"device.{field}" for field in FIELDS}
"""Each field's variable."""
_HAS_DEVICE = [("ident", "has"), ("other", "("), ("ident", "device"), ("other", ".")]


def _environment() -> Any:
    types = _cel.Type
    value = types.Map(types.STRING, types.DYN)  # a quantity or a semver (kdraexp.cel.values)
    s, b, i, d = types.STRING, types.BOOL, types.INT, types.DOUBLE
    fields = {  # as Kubernetes' DRA library declares them
        "driver": s,
        "allowMultipleAllocations": b,
        "attributes": types.Map(s, types.Map(s, types.DYN)),  # per domain, by name
        "capacity": types.Map(s, types.Map(s, value)),  # per domain, by name: quantities
    }
    # name: [(overload id, result, parameters, member)]; implementations in library.
    declared: dict[str, list[tuple[str, Any, list[Any], bool]]] = {
        "quantity": [("quantity_string", value, [s], False)],
        "isQuantity": [("isQuantity_string", b, [s], False)],
        "semver": [
            ("semver_string", value, [s], False),
            ("semver_string_bool", value, [s, b], False),
        ],
        "isSemver": [
            ("isSemver_string", b, [s], False),
            ("isSemver_string_bool", b, [s, b], False),
        ],
        "compareTo": [("map_compareTo", i, [value, value], True)],
        "isGreaterThan": [("map_isGreaterThan", b, [value, value], True)],
        "isLessThan": [("map_isLessThan", b, [value, value], True)],
        "major": [("map_major", i, [value], True)],
        "minor": [("map_minor", i, [value], True)],
        "patch": [("map_patch", i, [value], True)],
        "sign": [("map_sign", i, [value], True)],
        "isInteger": [("map_isInteger", b, [value], True)],
        "asInteger": [("map_asInteger", i, [value], True)],
        "asApproximateFloat": [("map_asApproximateFloat", d, [value], True)],
        "add": [
            ("map_add_map", value, [value, value], True),
            ("map_add_int", value, [value, i], True),
        ],
        "sub": [
            ("map_sub_map", value, [value, value], True),
            ("map_sub_int", value, [value, i], True),
        ],
    }
    functions = [
        _cel.FunctionDecl(
            name,
            [
                _cel.Overload(
                    key,
                    return_type=result,
                    parameters=parameters,
                    is_member=member,
                    impl=FUNCTIONS[name],
                )
                for key, result, parameters, member in overloads
            ],
        )
        for name, overloads in declared.items()
    ]
    return _cel.NewEnv(
        variables={_VARIABLES[field]: fields[field] for field in FIELDS},
        functions=functions,
        extensions=[ext_strings.ExtStrings()],
    )


NAME = "cel-expr-python"
_ENVIRONMENT: Any = None


def compile_selector(expression: str) -> Any:
    """The compiled program.

    :raises Exception: whatever the runtime raises for an expression it refuses.
    """
    global _ENVIRONMENT
    if _ENVIRONMENT is None:
        _ENVIRONMENT = _environment()
    return _ENVIRONMENT.compile(_fields_present(expression))


def _fields_present(expression: str) -> str:
    """*expression* with each ``has(device.<field>)`` as ``true``, padded to keep its columns."""
    found = located(expression)
    for at in reversed(range(len(found) - 5)):
        call = [token[:2] for token in found[at : at + 6]]
        member = at > 0 and found[at - 1][1] == "."  # x.has(...) is no macro
        if call[:4] == _HAS_DEVICE and call[4][1] in FIELDS and call[5][1] == ")" and not member:
            start, end = found[at][2], found[at + 5][2] + 1
            expression = expression[:start] + "true".ljust(end - start) + expression[end:]
    return expression


def evaluate(program: Any, device: dict[str, Any]) -> bool | str:
    """Whether *device* satisfies *program*, or why that cannot be said."""
    try:
        result = program.eval(data={_VARIABLES[field]: value for field, value in device.items()})
        value = result.value()
    except MemoryError:
        raise
    except Exception as error:  # anything the runtime or a library function raises
        return one_line(error)
    if isinstance(value, bool):
        return value
    return one_line(value) if result.type() == _cel.Type.ERROR else f"not a bool: {value!r}"
