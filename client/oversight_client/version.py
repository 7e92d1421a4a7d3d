"""The client's version, in a module of its own: ``calls`` puts it in the User-Agent, and
importing it from the package would import the package's every module (flit reads it
here too)."""

__version__ = "0.2.0"
