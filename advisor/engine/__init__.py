"""Rule engine: rules as data files, evaluated safely over declared metrics."""
