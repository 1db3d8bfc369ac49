"""Versioned judge prompts and the validation of the judge's JSON verdicts.

Prompts live as text files in ``alignment_judge/prompts/NAME_vN.txt`` so that a researcher can read
and diff exactly what the judge saw; the version is part of the cache key, so editing a prompt under
a new version never reuses verdicts given to the old one. Placeholders are substituted in one pass
(``{claim}``, ``{reasoning}``, ``{answer}``) so that braces in the JSON example, or in a model's
reasoning, are never mistaken for placeholders.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vqa_r1.errors import UserError
from vqa_r1.paths import shipped
from vqa_r1.typed_config import read_bool

PROMPTS_ENV = "VQA_R1_JUDGE_PROMPTS"
TYPES: tuple[str, ...] = ("contradiction", "missing_detail", "irrelevant", "other")
SCHEMAS: tuple[str, ...] = ("taxonomy", "simple")
_PLACEHOLDER = re.compile(r"\{(claim|reasoning|answer)\}")
_SECTION = re.compile(r"^=== (system|user) ===\s*$", re.MULTILINE)
_FILE_NAME = re.compile(r"^(?P<name>[a-z0-9_-]+?)_v(?P<version>\d+)$")


def prompts_dir() -> Path:
    """``$VQA_R1_JUDGE_PROMPTS``, else the shipped prompts: the checkout's
    ``alignment_judge/prompts``, or their copy in an installed wheel."""
    env = os.environ.get(PROMPTS_ENV)
    if env:
        return Path(env)
    return shipped("alignment_judge/prompts", "judge_prompts")


class InvalidVerdict(ValueError):
    """The judge's reply is not a usable verdict; the message says why (it is retried)."""


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    version: int
    schema: str
    system: str
    user: str
    path: str

    @property
    def id(self) -> str:
        """``taxonomy_v1``: recorded in outputs and in the cache key."""
        return f"{self.name}_v{self.version}"

    @property
    def digest(self) -> str:
        """Content hash: a prompt edited without a version bump still misses the cache."""
        return hashlib.sha256(f"{self.system}\0{self.user}\0{self.schema}".encode()).hexdigest()[
            :16
        ]

    def render(self, claim: str, reasoning: str, answer: str) -> list[dict[str, str]]:
        values = {"claim": claim, "reasoning": reasoning, "answer": answer}

        def fill(text: str) -> str:
            return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)

        messages = []
        if self.system:
            messages.append({"role": "system", "content": fill(self.system)})
        messages.append({"role": "user", "content": fill(self.user)})
        return messages

    def validate(self, content: str | None) -> dict[str, Any]:
        return validate_verdict(content, self.schema)


def parse_template(text: str, path: str = "<string>") -> PromptTemplate:
    meta: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("=== "):
            break
        if line.startswith("#") and ":" in line:
            key, _, value = line.lstrip("# ").partition(":")
            meta.setdefault(key.strip().lower(), value.strip())
    parts = _SECTION.split(text)
    sections = {parts[i]: parts[i + 1].strip("\n") for i in range(1, len(parts) - 1, 2)}
    if "user" not in sections:
        raise UserError(f"{path}: no '=== user ===' section")
    stem = Path(path).stem
    match = _FILE_NAME.match(stem)
    name = meta.get("name") or (match.group("name") if match else stem)
    version_text = meta.get("version") or (match.group("version") if match else "")
    if not version_text.isdigit():
        raise UserError(f"{path}: missing '# version: N' header (or a NAME_vN.txt file name)")
    schema = meta.get("schema", "taxonomy")
    if schema not in SCHEMAS:
        raise UserError(f"{path}: schema {schema!r} unknown; use one of {', '.join(SCHEMAS)}")
    for placeholder in ("{claim}", "{reasoning}", "{answer}"):
        if placeholder not in sections["user"] + sections.get("system", ""):
            raise UserError(f"{path}: the prompt never uses {placeholder}")
    return PromptTemplate(
        name=name,
        version=int(version_text),
        schema=schema,
        system=sections.get("system", ""),
        user=sections["user"],
        path=path,
    )


def available() -> dict[str, Path]:
    """``NAME_vN`` -> file, for every template in the prompts directory."""
    folder = prompts_dir()
    return {p.stem: p for p in sorted(folder.glob("*_v*.txt"))} if folder.is_dir() else {}


def load_prompt(spec: str) -> PromptTemplate:
    """``taxonomy`` (newest version), ``taxonomy_v1``, or a path to a template file."""
    path = Path(spec)
    if spec.endswith(".txt") or os.sep in spec:
        if not path.is_file():
            raise UserError(f"--prompt {spec}: file not found")
        return parse_template(path.read_text(encoding="utf-8"), str(path))
    known = available()
    if spec in known:
        chosen = known[spec]
    else:
        versions = [
            (int(m.group("version")), p)
            for stem, p in known.items()
            if (m := _FILE_NAME.match(stem)) and m.group("name") == spec
        ]
        if not versions:
            names = sorted(
                {_FILE_NAME.match(s).group("name") for s in known if _FILE_NAME.match(s)}
            )
            raise UserError(
                f"--prompt {spec}: unknown prompt; available: {', '.join(names + sorted(known))} "
                f"(in {prompts_dir()}), or give a path to a template file"
            )
        chosen = max(versions)[1]
    return parse_template(chosen.read_text(encoding="utf-8"), str(chosen))


def _json_object(content: str) -> Any:
    """The JSON object in a reply; open models often wrap it in a code fence or a sentence."""
    text = content.strip()
    if text.startswith("```"):
        text = re.sub(r"^```[a-zA-Z]*\s*|\s*```$", "", text)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        start, end = text.find("{"), text.rfind("}")
        if start >= 0 and end > start:
            try:
                return json.loads(text[start : end + 1])
            except json.JSONDecodeError:
                pass
    raise InvalidVerdict("reply is not a JSON object")


def _as_bool(value: Any) -> bool:
    parsed = read_bool(value, strict=True) if isinstance(value, bool | str) else None
    if parsed is not None:
        return parsed
    raise InvalidVerdict(f"'aligns' must be true or false, got {value!r}")


def validate_verdict(content: str | None, schema: str = "taxonomy") -> dict[str, Any]:
    """``{"aligns", "type", "why"}`` from a reply, or InvalidVerdict.

    A verdict that aligns has no type (a stray type is dropped rather than paid for again); a
    misaligned taxonomy verdict must name one, or the type tables would silently lose items.
    """
    if content is None or not content.strip():
        raise InvalidVerdict("empty reply")
    data = _json_object(content)
    if not isinstance(data, dict):
        raise InvalidVerdict("reply is JSON but not an object")
    if "aligns" not in data:
        raise InvalidVerdict("reply has no 'aligns' field")
    aligns = _as_bool(data["aligns"])
    why = data.get("why")
    if not isinstance(why, str) or not why.strip():
        raise InvalidVerdict("'why' must be a non-empty string")
    kind = data.get("type")
    if isinstance(kind, str) and kind.strip().lower() in ("", "null", "none"):
        kind = None
    if aligns:
        kind = None
    elif schema == "taxonomy":
        if kind is None:
            raise InvalidVerdict("a misaligned verdict needs a 'type'")
        kind = str(kind).strip().lower().replace(" ", "_").replace("-", "_")
        if kind not in TYPES:
            raise InvalidVerdict(f"'type' {kind!r} is not one of {', '.join(TYPES)}")
    else:
        kind = None
    return {"aligns": aligns, "type": kind, "why": why.strip()}
