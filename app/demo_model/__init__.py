"""The shipped demo: package data (artifact, gallery) and ``data``, its accessors."""
