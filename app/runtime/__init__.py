"""Inference shared by the CLI and the HTTP service. Imports the artifact reader, never the legacy readers."""
