"""Request fields that several bodies share, stated once so that their meaning and docs cannot drift."""

from __future__ import annotations

from pydantic import Field

ModelName = Field(None, description="Model name (see GET /models); the default model when omitted.")
Pretokenized = Field(False, description="Split on whitespace only, as the original code did.")
Eos = Field(None, description="Append <eos> (default: the model's).")
