"""Legacy checkpoint files in, lnserve model artifacts out. Imports ``models``, never the runtime or app."""

CONVERTER_VERSION = "1.0.0"
