"""Request fields that several bodies share, stated once so that their meaning and docs cannot drift; and
what the bodies' schema examples share. The examples run as they are against the demo server (Swagger's "Try
it out" sends them; tests/e2e/test_openapi_examples.py does too)."""

from __future__ import annotations

from pydantic import Field, JsonValue

ModelName = Field(None, description="Model name (see GET /models); the default model when omitted.")
Pretokenized = Field(False, description="Split on whitespace only, as the original code did.")
Eos = Field(None, description="Append <eos> (default: the model's).")

# an image feature row of the demo model (dim_image 120), for the examples of the bodies that take images
DEMO_IMAGE: list[JsonValue] = [0.5] * 120
