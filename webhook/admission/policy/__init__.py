"""The policy: its model, the field tables and schema, the loader and its YAML reader, namespace globs.
Above the vocabulary (base/) only."""
