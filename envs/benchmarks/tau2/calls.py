"""The agent's tool calls: each tool shown in one line (`tool_docs="signatures"`) and an action read as a
tool call, a malformed one, or a message (`parse_tool_call`)."""

from __future__ import annotations

import json
from typing import Any

MAX_ACTION_CHARS = 20_000


def tool_line(schema: dict[str, Any]) -> str:
    """One tool as `name(param: type, ...): description`."""
    fn = schema.get("function", schema)
    props = fn.get("parameters", {}).get("properties", {})
    params = ", ".join(f"{k}: {v.get('type', 'any')}" for k, v in props.items())
    description = fn.get("description", "").strip().splitlines()[0] if fn.get("description") else ""
    return f"{fn['name']}({params}): {description}"


def parse_tool_call(action: str) -> tuple[dict[str, Any] | None, str | None]:
    """(call, None) for a tool call, (None, why) for a malformed one, (None, None) for a message.

    >>> parse_tool_call('<tool_call>{"name": "get_user_details", '
    ...                 '"arguments": {"user_id": "a_1"}}</tool_call>')
    ({'name': 'get_user_details', 'arguments': {'user_id': 'a_1'}}, None)
    >>> parse_tool_call("Could you give me your user id?"), parse_tool_call('{"name": 1}')[1]
    ((None, None), 'a tool call needs "name" (a string) and "arguments" (an object)')
    """
    text = action.strip()
    if "<tool_call>" in text:
        text = text.split("<tool_call>", 1)[1].split("</tool_call>", 1)[0].strip()
    elif not text.startswith("{"):
        return None, None
    if len(text) > MAX_ACTION_CHARS:
        return None, f"a tool call longer than {MAX_ACTION_CHARS} characters"
    try:
        call = json.loads(text)
    except (ValueError, RecursionError) as e:
        return None, f"the tool call is not JSON ({type(e).__name__})"
    if (not isinstance(call, dict) or not isinstance(call.get("name"), str)
            or not isinstance(call.get("arguments", {}), dict)):
        return None, 'a tool call needs "name" (a string) and "arguments" (an object)'
    return {"name": call["name"], "arguments": call.get("arguments", {})}, None
