"""What the `bfcl-eval` package provides, read and run as BFCL does: its scenarios and function docs,
its system prompt, its simulated apps (loaded and called in process) and its multi-turn checker."""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import json
import secrets
from importlib import resources
from typing import Any


def _read_jsonl(path: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@functools.cache
def _data() -> Any:
    return resources.files("bfcl_eval") / "data"  # optional dependency: `pip install --no-deps bfcl-eval`


@functools.cache
def scenarios(category: str) -> tuple[dict[str, Any], ...]:
    """A category's 200 scenarios, by number: the question file and its ground truth, joined by id."""
    answer_file = _data() / "possible_answer" / f"BFCL_v4_multi_turn_{category}.json"
    answers = {a["id"]: a["ground_truth"] for a in _read_jsonl(answer_file)}
    out = []
    for q in _read_jsonl(_data() / f"BFCL_v4_multi_turn_{category}.json"):
        index = int(q["id"].rsplit("_", 1)[1])
        out.append({"id": q["id"], "category": category, "index": index, "question": q["question"],
                    "initial_config": q["initial_config"], "involved_classes": q["involved_classes"],
                    "missed_function": q.get("missed_function", {}), "ground_truth": answers[q["id"]]})
    return tuple(sorted(out, key=lambda t: t["index"]))


@functools.cache
def function_docs(class_name: str) -> tuple[dict[str, Any], ...]:
    """BFCL's JSON docs of one app's functions."""
    from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING

    return tuple(_read_jsonl(_data() / "multi_turn_func_doc" / MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]))


def signature_line(doc: dict[str, Any]) -> str:
    """One function doc as `name(param: type, optional: type = ...): description`."""
    props = doc.get("parameters", {}).get("properties", {})
    required = set(doc.get("parameters", {}).get("required", []))
    params = ", ".join(f"{k}: {v.get('type', 'any')}" + ("" if k in required else " = ...")
                       for k, v in props.items())
    description = doc.get("description", "").split("Tool description:")[-1].strip()
    return f"{doc['name']}({params}): {description}"


def system_prompt(docs: list[dict[str, Any]], style: str) -> str:
    """BFCL's default prompting system prompt (classic, plain text, Python calls, no tags)."""
    from bfcl_eval.constants.default_prompts import (
        _PLAINTEXT_SYSTEM_PROMPT_TEMPLATE,
        OUTPUT_FORMAT_MAPPING,
        PROMPT_STYLE_TEMPLATES,
    )

    t = PROMPT_STYLE_TEMPLATES["classic"]
    if style == "json":
        functions, fmt = json.dumps(docs, indent=4), "json"
    else:
        functions, fmt = "\n".join(signature_line(d) for d in docs), "signature"
    return _PLAINTEXT_SYSTEM_PROMPT_TEMPLATE.format(
        persona=t["persona"], task=t["task"],
        tool_call_format=t["tool_call_no_tag"].format(output_format=OUTPUT_FORMAT_MAPPING["python"],
                                                      param_types=""),
        multiturn_behavior=t["multiturn_behavior"],
        available_tools=t["available_tools"].format(format=fmt, functions=functions))


def result_text(result: Any) -> str:
    """A call's return value as BFCL's executor writes it (str as is, dict as JSON, else str())."""
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except Exception:
            return str(result)
    return str(result)


def load_apps(task: dict[str, Any]) -> dict[str, Any]:
    """Fresh app instances of a scenario, loaded as BFCL's executor loads them (class -> instance)."""
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING, STATELESS_CLASSES

    apps = {}
    for class_name in task["involved_classes"]:
        instance = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)()
        if class_name not in STATELESS_CLASSES:
            instance._load_scenario(copy.deepcopy(task["initial_config"].get(class_name, {})),
                                    long_context=task["category"] == "long_context")
        apps[class_name] = instance
    return apps


def methods(apps: dict[str, Any]) -> dict[str, Any]:
    """Public method name -> bound method (a later app wins a shared name, as BFCL's mapping does)."""
    out = {}
    for instance in apps.values():
        for name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
            if not name.startswith("_"):
                out[name] = method
    return out


def check(task: dict[str, Any], decoded: list[list[list[str]]]) -> dict[str, Any]:
    """BFCL's `multi_turn_checker` on the decoded calls (turn -> step -> call strings); its verdict dict."""
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import (
        multi_turn_checker,
    )

    model = f"suite_{secrets.token_hex(8)}"  # BFCL caches app instances in its module's globals by this name
    entry = {"id": task["id"], "initial_config": task["initial_config"],
             "involved_classes": task["involved_classes"]}
    try:
        category = task["id"].rsplit("_", 1)[0]
        return dict(multi_turn_checker(decoded, task["ground_truth"], entry, category, model))
    except Exception as e:  # the checker choking on odd calls: no credit, never a crash
        return {"valid": False, "error_type": f"checker_error:{type(e).__name__}"}
    finally:
        module_globals = vars(multi_turn_utils)
        for key in [k for k in module_globals if k.startswith(model)]:
            del module_globals[key]
