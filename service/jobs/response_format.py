"""`response_format`: OpenAI's structured outputs, checked at the door.

Three kinds, as OpenAI (and vLLM's own server) take them:

- ``{"type": "text"}``: free text, the same as leaving it out.
- ``{"type": "json_object"}``: the output is one JSON object (any keys).
- ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"?, "description"?}}``:
  the output is JSON valid against ``schema``.

The worker turns the stored body's ``response_format`` into the engine's structured-output
decoding (worker.structured); an engine without it refuses the job rather than ignore the
format. The API refuses earlier, with a 400 naming ``response_format``, when the live workers
serving the model say they cannot do it (their heartbeats' capabilities, service.web.catalog).
"""

from __future__ import annotations

from typing import Any, Literal

from jsonschema import SchemaError, validators
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# OpenAI's rule for json_schema.name.
_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"


class JsonSchemaFormat(BaseModel):
    # `schema` is the wire name; the attribute is `schema_`, because BaseModel has a `schema`.
    model_config = ConfigDict(extra="ignore", serialize_by_alias=True, validate_by_name=True)

    name: str = Field(pattern=_NAME_PATTERN)
    description: str | None = None
    schema_: dict[str, Any] = Field(alias="schema")
    # Accepted for compatibility; decoding is always constrained to the schema (vLLM has no
    # "loose" mode), which is what strict asks for.
    strict: bool | None = None

    @field_validator("schema_")
    @classmethod
    def _valid_json_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        """The schema must itself be valid JSON Schema (under the draft its `$schema` names,
        2020-12 by default): a bad one would only fail later, inside the engine."""
        default = validators.Draft202012Validator
        # A `$schema` that is not a string is left to the default draft's check to refuse.
        validator = (validators.validator_for(schema, default=default)
                     if isinstance(schema.get("$schema"), str) else default)
        try:
            validator.check_schema(schema)
        except SchemaError as exc:
            where = "/".join(str(p) for p in exc.path)
            raise ValueError(f"not a valid JSON Schema: {exc.message}"
                             + (f" (at '{where}')" if where else "")) from None
        except RecursionError:
            raise ValueError("not a valid JSON Schema: nested too deeply") from None
        return schema


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_when_asked(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("response_format of type 'json_schema' needs a 'json_schema' "
                             "object with a 'name' and a 'schema'")
        return self

    @property
    def is_structured(self) -> bool:
        """True when decoding must be constrained (anything but plain text)."""
        return self.type != "text"

