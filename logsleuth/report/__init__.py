"""The report: its model (the JSON contract), how it is built, and its renderers."""
