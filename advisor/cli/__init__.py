"""Command-line interface: thin Click commands over :mod:`advisor.api`."""
