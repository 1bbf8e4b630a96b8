"""Policy files: the YAML model, loading and validation, the schema, resolving references."""
