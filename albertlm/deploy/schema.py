"""The server's request schemas: per head kind, the JSON one input may be (what /openapi.json shows, with
minItems / maxItems), and ``conforms``, which holds a request body to its schema (one message per misfit)."""

from __future__ import annotations

from typing import Any

S = {"type": "string"}
TEXT = {"type": "string", "minLength": 1}


def _list(items: dict, max_items: int | None, min_items: int = 1) -> dict:
    return {"type": "array", "items": items, "minItems": min_items,
            **({"maxItems": max_items} if max_items is not None else {})}  # fmt: skip


def _obj(properties: dict, required: list[str]) -> dict:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def input_schemas(kind: str, columns: Any = None) -> list[dict]:
    """The JSON objects one input of a ``kind`` model may be, as /v1/predict takes them: the canonical field
    names, and the columns a model fine-tuned on the user's own file was trained with (all of them renamed)."""
    qa_id = {"anyOf": [S, {"type": "integer"}], "description": "echoed in the answer (as a string)"}
    objects = {
        "classification": _obj({"text": S, "text_b": S}, ["text"]),
        "regression": _obj({"text": S, "text_b": S}, ["text"]),
        "tagging": [_obj({"tokens": _list(TEXT, None)}, ["tokens"]), _obj({"text": TEXT}, ["text"])],
        "qa": _obj({"id": qa_id, "question": TEXT, "context": TEXT}, ["question", "context"]),
        "qa_v2": _obj({"id": qa_id, "question": TEXT, "context": TEXT}, ["question", "context"]),
        "choice": _obj({"context": S, "question": S, "options": _list(S, None, 2)}, ["options"]),
    }[kind]
    objects = objects if isinstance(objects, list) else [objects]
    from albertlm.tasks.kinds import get_kind

    renames = {key: getattr(columns, flag) for flag, key in get_kind(kind).input_keys.items()
               if columns is not None and getattr(columns, flag, None)}  # fmt: skip
    renames = {k: c for k, c in renames.items() if c != k and not c.isdigit() and "," not in c}
    own = []
    for o in objects:
        if renames and set(renames) & set(o["properties"]):
            rename = lambda k: renames.get(k, k)  # noqa: E731
            own.append(_obj({rename(k): v for k, v in o["properties"].items()}, [rename(k) for k in o["required"]]))
    return objects + own


def request_schemas(kind: str, max_items: int, columns: Any = None) -> dict[str, dict]:
    """Request and response bodies for /openapi.json, for this model's kind only; ``Service`` holds every
    request to them (``conforms``), so a body the schema allows is one the server takes."""
    objects = input_schemas(kind, columns)
    plain = [S] if kind in ("classification", "regression", "tagging") else []  # a plain line of text
    item = {"anyOf": objects + plain}
    row = {
        "type": "object",
        "description": "classification: label, score, probabilities; regression: value; tagging: tokens, tags, "
        "scores (one per word); qa: id, answer, start, end (character offsets), score (+ span, null_score "
        "for SQuAD 2.0); choice: label, option, score, probabilities; with an early-exit rule (classification, "
        "regression, choice) also layer, the computed layer the input left at",
    }
    pair = {"type": "array", "items": S, "minItems": 2, "maxItems": 2, "description": "[text, text_b]"}
    return {
        "predict": {"anyOf": [*objects, _obj({"inputs": _list(item, max_items)}, ["inputs"])]},
        "classify": _obj({"texts": _list({"anyOf": [S, pair]}, max_items)}, ["texts"]),
        "tag": _obj({"texts": _list(TEXT, max_items)}, ["texts"]),
        "answer": objects[0] if kind in ("qa", "qa_v2") else {},
        "results": {"type": "object", "properties": {"results": {"type": "array", "items": row}}},
        "row": row,
        "error": {"type": "object", "properties": {"error": {"type": "object", "properties": {"code": S, "message": S},
                                                             "required": ["code", "message"]}}},  # fmt: skip
    }


def conforms(value: Any, schema: dict, where: str = "body") -> str | None:
    """Why ``value`` breaks ``schema`` (the JSON Schema subset ``_schemas`` uses), or None."""
    if "anyOf" in schema:
        reasons = [conforms(value, s, where) for s in schema["anyOf"]]
        if any(r is None for r in reasons):
            return None
        typed = [r for r, s in zip(reasons, schema["anyOf"], strict=True) if _is(value, s.get("type"))]
        return typed[0] if len(typed) == 1 else f"{where} matches none of the forms in the schema ({reasons[0]})"
    kind = schema.get("type")
    if kind is not None and not _is(value, kind):
        return f"{where} must be {'an' if kind[0] in 'aeiou' else 'a'} {kind}, got {_json_type(value)}"
    if kind == "string" and len(value) < schema.get("minLength", 0):
        return f"{where} must not be empty"
    if kind == "array":
        if len(value) < schema.get("minItems", 0):
            return f"{where} must have at least {schema['minItems']} items, got {len(value)}"
        if len(value) > schema.get("maxItems", len(value)):
            return f"{where} has {len(value)} items; at most {schema['maxItems']}"
        for i, x in enumerate(value):
            if why := conforms(x, schema.get("items", {}), f"{where}[{i}]"):
                return why
    if kind == "object":
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                return f"{where} lacks {key!r}"
        if schema.get("additionalProperties") is False and (extra := sorted(set(value) - set(props))):
            return f"{where} has unknown field(s) {', '.join(map(repr, extra))}; allowed: {', '.join(props)}"
        for key, sub in props.items():
            if key in value and (why := conforms(value[key], sub, f"{where}.{key}")):
                return why
    return None


def _is(value: Any, kind: str | None) -> bool:
    return {None: True, "string": isinstance(value, str), "object": isinstance(value, dict),
            "array": isinstance(value, list), "integer": isinstance(value, int) and not isinstance(value, bool),
            }[kind]  # fmt: skip


def _json_type(value: Any) -> str:
    return {str: "a string", dict: "an object", list: "an array", bool: "true/false", type(None): "null",
            int: "an integer", float: "a number"}.get(type(value), type(value).__name__)  # fmt: skip
